/*
 * tcp_auth.c — the shared secret of the TCP rendezvous (SY_BOOT_SECRET; tcp.c describes the handshake): SHA-256
 * (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), the proofs each side sends, a constant-time comparison and the
 * nonces. The secret itself never goes on the wire and is never logged; only proofs bound to fresh nonces do.
 */
#include "boot/tcp.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

typedef struct sha256 {
  uint32_t h[8];
  uint64_t bytes;
  unsigned char block[64];
  size_t used;
} sha256_t;

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t rotr(uint32_t x, int n) { return x >> n | x << (32 - n); }

static void sha256_block(sha256_t *s, const unsigned char *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  s->h[0] += a;
  s->h[1] += b;
  s->h[2] += c;
  s->h[3] += d;
  s->h[4] += e;
  s->h[5] += f;
  s->h[6] += g;
  s->h[7] += h;
}

static void sha256_init(sha256_t *s) {
  static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, h0, sizeof h0);
  s->bytes = 0;
  s->used = 0;
}

static void sha256_update(sha256_t *s, const void *data, size_t len) {
  const unsigned char *p = data;
  s->bytes += len;
  while (len) {
    size_t take = 64 - s->used < len ? 64 - s->used : len;
    memcpy(s->block + s->used, p, take);
    s->used += take;
    p += take;
    len -= take;
    if (s->used == 64) {
      sha256_block(s, s->block);
      s->used = 0;
    }
  }
}

static void sha256_final(sha256_t *s, unsigned char out[32]) {
  const uint64_t bits = s->bytes * 8;
  unsigned char pad[72] = {0x80};
  size_t pad_len = (s->used < 56 ? 56 : 120) - s->used;
  for (int i = 0; i < 8; i++) pad[pad_len + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
  sha256_update(s, pad, pad_len + 8);
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 4; j++) out[4 * i + j] = (unsigned char)(s->h[i] >> (24 - 8 * j));
}

void sy__tcp_sha256(const void *data, size_t len, unsigned char out[32]) {
  sha256_t s;
  sha256_init(&s);
  sha256_update(&s, data, len);
  sha256_final(&s, out);
}

void sy__tcp_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t len, unsigned char out[32]) {
  unsigned char k[64] = {0}, pad[64], inner[32];
  if (key_len > 64) sy__tcp_sha256(key, key_len, k);
  else if (key_len) memcpy(k, key, key_len);
  sha256_t s;
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
  sha256_init(&s);
  sha256_update(&s, pad, 64);
  sha256_update(&s, msg, len);
  sha256_final(&s, inner);
  for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
  sha256_init(&s);
  sha256_update(&s, pad, 64);
  sha256_update(&s, inner, 32);
  sha256_final(&s, out);
  memset(k, 0, sizeof k); /* the key's copies do not outlive the call (best effort) */
  memset(pad, 0, sizeof pad);
  memset(&s, 0, sizeof s);
}

void sy__tcp_proof(const char *secret, tcp_proof_side_t side, const unsigned char *root_nonce,
                   const unsigned char *leaf_nonce, int rank, int world, unsigned char out[TCP_PROOF_BYTES]) {
  unsigned char msg[12 + 2 * TCP_NONCE_BYTES + 8];
  memcpy(msg, side == TCP_PROOF_LEAF ? "sy-boot leaf" : "sy-boot root", 12);
  memcpy(msg + 12, root_nonce, TCP_NONCE_BYTES);
  memcpy(msg + 12 + TCP_NONCE_BYTES, leaf_nonce, TCP_NONCE_BYTES);
  unsigned char *tail = msg + 12 + 2 * TCP_NONCE_BYTES;
  for (int i = 0; i < 4; i++) {
    tail[i] = (unsigned char)((uint32_t)rank >> (24 - 8 * i));
    tail[4 + i] = (unsigned char)((uint32_t)world >> (24 - 8 * i));
  }
  sy__tcp_hmac_sha256(secret, strlen(secret), msg, sizeof msg, out);
}

int sy__tcp_equal_ct(const unsigned char *a, const unsigned char *b, size_t len) {
  volatile unsigned char diff = 0;
  for (size_t i = 0; i < len; i++) diff |= (unsigned char)(a[i] ^ b[i]);
  return diff == 0;
}

int sy__tcp_random(unsigned char *out, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t n = getrandom(out + got, len - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  if (got == len) return 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  got = 0;
  while (got < len) {
    ssize_t n = read(fd, out + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fd);
  return got == len ? 0 : -1;
}
