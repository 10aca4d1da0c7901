/*
 * attn.c — the attention inputs of workload.h: seeded plan descriptions (the tests' short sequences in two
 * draws, sy-bench's documents), and the rows and gradients a plan moves (three payload encodings, two gradient
 * generators), each kept bit for bit as its callers drew it.
 */
#include <stdlib.h>
#include <string.h>

#include "workload.h"

const char *wl_attn_kind_name(int kind) {
  static const char *names[WL_ATTN_KINDS] = {"random", "all to one rank", "a rank with no tokens",
                                             "every destination -1", "empty sequences"};
  return kind >= 0 && kind < WL_ATTN_KINDS ? names[kind] : "?";
}

void wl_attn_desc_free(wl_attn_desc_t *d) {
  for (int r = 0; r < d->W; r++) {
    if (d->lens) free(d->lens[r]);
    if (d->q_dst) free(d->q_dst[r]);
    if (d->kv_dst) free(d->kv_dst[r]);
  }
  free(d->num_seqs), free(d->num_tokens), free(d->lens), free(d->q_dst), free(d->kv_dst);
  memset(d, 0, sizeof *d);
}

/* The per-rank arrays of W ranks, zeroed. */
static int desc_alloc(wl_attn_desc_t *d, int W, int C) {
  memset(d, 0, sizeof *d);
  d->W = W;
  d->C = C;
  d->num_seqs = calloc((size_t)W, sizeof(int));
  d->num_tokens = calloc((size_t)W, sizeof(int64_t));
  d->lens = calloc((size_t)W, sizeof(int64_t *));
  d->q_dst = calloc((size_t)W, sizeof(int *));
  d->kv_dst = calloc((size_t)W, sizeof(int *));
  return d->num_seqs && d->num_tokens && d->lens && d->q_dst && d->kv_dst ? 0 : -1;
}

/* Room for `n` sequences of rank r. */
static int rank_alloc(wl_attn_desc_t *d, int r, int n) {
  d->lens[r] = calloc((size_t)n + 1, sizeof(int64_t));
  d->q_dst[r] = calloc((size_t)n + 1, sizeof(int));
  d->kv_dst[r] = calloc((size_t)n * (size_t)d->C + 1, sizeof(int));
  return d->lens[r] && d->q_dst[r] && d->kv_dst[r] ? 0 : -1;
}

static void desc_point(wl_attn_desc_t *d) {
  sy_attn_plan_desc_t desc = SY_ATTN_PLAN_DESC_INIT;
  desc.world_size = d->W;
  desc.max_replicas = d->C;
  desc.num_seqs = d->num_seqs;
  desc.num_tokens = d->num_tokens;
  desc.seq_lens = (const int64_t *const *)d->lens;
  desc.q_dst = (const int *const *)d->q_dst;
  desc.kv_dst = d->C > 0 ? (const int *const *)d->kv_dst : NULL;
  d->desc = desc;
}

/* Fisher-Yates over perm[0..W) with numbers from next(state). */
static void shuffle(int *perm, int W, uint64_t (*next)(uint64_t *), uint64_t *state) {
  for (int k = 0; k < W; k++) perm[k] = k;
  for (int k = W - 1; k > 0; k--) {
    const int j = (int)(next(state) % (uint64_t)(k + 1)), t = perm[k];
    perm[k] = perm[j];
    perm[j] = t;
  }
}

/* A sequence's length: 1..40, one in four 1..300. The length's number is drawn before the one choosing its
 * range: the order GCC gave the two calls when both sat in one expression, which fixed the tests' plans. Under
 * WL_ATTN_EMPTY_SEQS one more number makes one length in three 0 (no other kind draws it). */
static int64_t short_len(uint64_t (*next)(uint64_t *), uint64_t *state, wl_attn_kind_t kind) {
  const uint64_t len = next(state), pick = next(state);
  if (kind == WL_ATTN_EMPTY_SEQS && next(state) % 3 == 0) return 0;
  return 1 + (int64_t)(len % (pick % 4 == 0 ? 300 : 40));
}

/* The CPU tests' numbers: splitmix64 whose state is advanced before it is mixed (wl_rand of state + gamma). */
static uint64_t unit_next(uint64_t *state) {
  *state += WL_GAMMA;
  return wl_mix(*state);
}

static int short_unit_draw(wl_attn_desc_t *d, int W, int C, wl_attn_kind_t kind, int max_seqs, uint64_t seed) {
  uint64_t rng = wl_mix(seed);
  const int target = (int)(unit_next(&rng) % (uint64_t)W); /* WL_ATTN_ALL_TO_ONE's rank */
  const int empty = (int)(unit_next(&rng) % (uint64_t)W);  /* WL_ATTN_EMPTY_RANK's rank */
  int *perm = malloc((size_t)W * sizeof *perm);
  if (!perm) return -1;
  for (int r = 0; r < W; r++) {
    int n = (int)(unit_next(&rng) % (uint64_t)(max_seqs + 1));
    if (kind == WL_ATTN_EMPTY_RANK && r == empty) n = 0;
    if (kind != WL_ATTN_EMPTY_RANK && n == 0) n = 1 + (int)(unit_next(&rng) % 3);
    d->num_seqs[r] = n;
    if (rank_alloc(d, r, n)) return free(perm), -1;
    for (int i = 0; i < n; i++) {
      d->lens[r][i] = short_len(unit_next, &rng, kind);
      d->num_tokens[r] += d->lens[r][i];
      int q = (int)(unit_next(&rng) % (uint64_t)W);
      if (unit_next(&rng) % 6 == 0) q = -1;
      if (kind == WL_ATTN_ALL_TO_ONE) q = target;
      if (kind == WL_ATTN_ALL_MINUS_ONE) q = -1;
      d->q_dst[r][i] = q;
      shuffle(perm, W, unit_next, &rng);
      for (int c = 0; c < C; c++) {
        int dst = perm[c];
        if ((kind == WL_ATTN_RANDOM || kind == WL_ATTN_EMPTY_SEQS) && unit_next(&rng) % 5 == 0) dst = -1;
        if (kind == WL_ATTN_ALL_TO_ONE) dst = c == i % C ? target : -1; /* every KV row to the one rank too */
        if (kind == WL_ATTN_ALL_MINUS_ONE) dst = -1;
        d->kv_dst[r][(size_t)i * C + c] = dst;
      }
    }
  }
  free(perm);
  return 0;
}

static int short_gpu_draw(wl_attn_desc_t *d, int W, int C, wl_attn_kind_t kind, int max_seqs, uint64_t seed) {
  uint64_t rng = seed;
  int *perm = malloc((size_t)W * sizeof *perm);
  if (!perm) return -1;
  for (int r = 0; r < W; r++) {
    int n = (int)(wl_rand(&rng) % (uint64_t)(max_seqs + 1));
    if (kind == WL_ATTN_EMPTY_RANK && r == W - 1) n = 0;
    if (kind == WL_ATTN_RANDOM && wl_rand(&rng) % 5 == 0) n = 0;
    d->num_seqs[r] = n;
    if (rank_alloc(d, r, n)) return free(perm), -1;
    for (int s = 0; s < n; s++) {
      d->lens[r][s] = short_len(wl_rand, &rng, kind);
      d->num_tokens[r] += d->lens[r][s];
      int q = (int)(wl_rand(&rng) % (uint64_t)W);
      if (wl_rand(&rng) % 8 == 0) q = -1;
      shuffle(perm, W, wl_rand, &rng);
      for (int c = 0; c < C; c++) {
        int dst = perm[c];
        if (wl_rand(&rng) % 6 == 0) dst = -1;
        if (kind == WL_ATTN_ALL_TO_ONE) dst = c == 0 ? 0 : -1;
        if (kind == WL_ATTN_ALL_MINUS_ONE) dst = -1;
        d->kv_dst[r][(size_t)s * C + c] = dst;
      }
      if (kind == WL_ATTN_ALL_TO_ONE) q = 0;
      if (kind == WL_ATTN_ALL_MINUS_ONE) q = -1;
      d->q_dst[r][s] = q;
    }
  }
  free(perm);
  return 0;
}

int wl_attn_short_seqs(wl_attn_desc_t *d, int W, int C, wl_attn_kind_t kind, int max_seqs, wl_draw_t draw,
                       uint64_t seed) {
  int rc = desc_alloc(d, W, C);
  if (!rc)
    rc = draw == WL_DRAW_GPU ? short_gpu_draw(d, W, C, kind, max_seqs, seed)
                             : short_unit_draw(d, W, C, kind, max_seqs, seed);
  if (rc) return wl_attn_desc_free(d), -1;
  desc_point(d);
  return 0;
}

int wl_attn_documents(wl_attn_desc_t *d, int W, int replicas, int64_t tokens, int even, uint64_t seed) {
  if (replicas < 1 || replicas > 2) return memset(d, 0, sizeof *d), -1;
  const int C = W >= replicas ? replicas : W;
  if (desc_alloc(d, W, C)) return wl_attn_desc_free(d), -1;
  uint64_t rng = seed;
  for (int r = 0; r < W; r++) {
    const int cap = (int)(tokens / 256) + 1 + W;
    int n = 0;
    d->lens[r] = calloc((size_t)cap, sizeof(int64_t));
    d->q_dst[r] = calloc((size_t)cap, sizeof(int));
    d->kv_dst[r] = calloc((size_t)cap * C, sizeof(int));
    if (!d->lens[r] || !d->q_dst[r] || !d->kv_dst[r]) return wl_attn_desc_free(d), -1;
    if (even) { /* W sequences of tokens / W (the last takes the rest): sequence i to rank i, KV to i, i + 1 */
      for (int i = 0; i < W && i < cap; i++, n++) {
        d->lens[r][i] = i < W - 1 ? tokens / W : tokens - (int64_t)(W - 1) * (tokens / W);
        d->q_dst[r][i] = i;
        d->kv_dst[r][i * C] = i;
        if (C > 1) d->kv_dst[r][i * C + 1] = (i + 1) % W;
      }
    }
    for (int64_t left = even ? 0 : tokens; left > 0; n++) {
      int64_t len = 256 + (int64_t)(wl_rand(&rng) % (16384 - 256 + 1));
      if (len > left) len = left;
      left -= len;
      d->lens[r][n] = len;
      d->q_dst[r][n] = (int)(wl_rand(&rng) % (uint64_t)W);
      const int a = (int)(wl_rand(&rng) % (uint64_t)W);
      const int b = (a + 1 + (int)(wl_rand(&rng) % (uint64_t)(W > 1 ? W - 1 : 1))) % W; /* a distinct second */
      d->kv_dst[r][n * C] = a;
      if (C > 1) d->kv_dst[r][n * C + 1] = b;
    }
    d->num_seqs[r] = n;
    d->num_tokens[r] = tokens;
  }
  desc_point(d);
  return 0;
}

/* ---- payload rows ---------------------------------------------------------------------------------------------- */

void wl_payload_row(unsigned char *out, uint64_t seed, int which, int rank, int64_t row, uint64_t round,
                    size_t row_bytes) {
  const uint64_t key = wl_mix(seed ^ ((uint64_t)which << 56) ^ ((uint64_t)rank << 48) ^ (round << 32)) ^ (uint64_t)row;
  for (size_t b = 0; b < row_bytes; b += 8) {
    const uint64_t h = wl_mix(key ^ ((uint64_t)b << 40));
    for (size_t k = 0; k < 8 && b + k < row_bytes; k++) out[b + k] = (unsigned char)((h >> (8 * k)) % 255 + 1);
  }
}

void wl_payload_fill(unsigned char *out, uint64_t seed, int which, int rank, int64_t rows, uint64_t round,
                     size_t row_bytes) {
  for (int64_t r = 0; r < rows; r++)
    wl_payload_row(out + (size_t)r * row_bytes, seed, which, rank, r, round, row_bytes);
}

uint8_t wl_payload_byte(uint64_t seed, int src, int dst, uint64_t index) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ ((uint64_t)src << 48) ^ ((uint64_t)dst << 32) ^ index;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (uint8_t)(x | 1);
}

void wl_payload_fill_odd(uint8_t *out, int64_t rows, size_t row_bytes, uint64_t seed, int rank, int which) {
  for (int64_t i = 0; i < rows; i++)
    for (size_t b = 0; b < row_bytes; b++)
      out[(size_t)i * row_bytes + b] =
          wl_payload_byte(seed + (uint64_t)which, rank, (int)(i & 0xFFFF), (uint64_t)i * row_bytes + b);
}

uint64_t wl_payload_word(int src, int which, int64_t row, size_t w) {
  return ((uint64_t)src << 56) ^ ((uint64_t)which << 52) ^ ((uint64_t)row * 0x9E3779B97F4A7C15ull) ^
         (w * 0x100000001B3ull) ^ 1;
}

void wl_payload_fill_words(uint64_t *out, int src, int which, int64_t rows, size_t row_bytes) {
  const size_t words = row_bytes / 8;
  for (int64_t i = 0; i < rows; i++)
    for (size_t w = 0; w < words; w++) out[(size_t)i * words + w] = wl_payload_word(src, which, i, w);
}

/* ---- gradients ------------------------------------------------------------------------------------------------- */

static size_t dtype_bytes(sy_dtype_t dtype) { return dtype == SY_DTYPE_FP32 ? 4 : 2; }

uint32_t wl_grad_bits(uint64_t seed, sy_dtype_t dtype, int rank, int64_t row, size_t e, uint64_t round) {
  const uint64_t h = wl_mix(seed ^ 0x6b76ull << 48 ^ (uint64_t)rank << 44 ^ round << 36 ^ (uint64_t)row << 16 ^ e);
  const uint32_t negative = (uint32_t)(h >> 63);
  if (h % 61 == 0) return dtype == SY_DTYPE_FP32 ? 0x80000000u : 0x8000u;
  const int sub = h % 17 == 0;
  if (dtype == SY_DTYPE_BF16) {
    uint32_t m = (uint32_t)(h >> 20) & 0x7Fu, x = sub ? 0 : 100 + (uint32_t)((h >> 8) % 50);
    return negative << 15 | x << 7 | (sub ? m | 1 : m);
  }
  if (dtype == SY_DTYPE_FP16) {
    uint32_t m = (uint32_t)(h >> 20) & 0x3FFu, x = sub ? 0 : 1 + (uint32_t)((h >> 8) % 26);
    return negative << 15 | x << 10 | (sub ? m | 1 : m);
  }
  uint32_t m = (uint32_t)(h >> 20) & 0x7FFFFFu, x = sub ? 0 : 90 + (uint32_t)((h >> 8) % 60);
  return negative << 31 | x << 23 | (sub ? m | 1 : m);
}

void wl_grad_fill(unsigned char *out, uint64_t seed, sy_dtype_t dtype, int rank, int64_t rows, size_t row_bytes,
                  uint64_t round) {
  const size_t es = dtype_bytes(dtype);
  for (int64_t r = 0; r < rows; r++) {
    for (size_t e = 0; e < row_bytes / es; e++) {
      const uint32_t bits = wl_grad_bits(seed, dtype, rank, r, e, round);
      if (es == 4) {
        memcpy(out + (size_t)r * row_bytes + 4 * e, &bits, 4);
      } else {
        const uint16_t h = (uint16_t)bits;
        memcpy(out + (size_t)r * row_bytes + 2 * e, &h, 2);
      }
    }
  }
}

void wl_grad_fill_specials(uint8_t *out, int64_t rows, size_t row_bytes, sy_dtype_t dtype, uint64_t seed, int rank) {
  /* one element in 32: -0, +0, +-inf, NaNs (payloads, both signs), subnormals, the largest finite */
  static const uint32_t special32[9] = {0x80000000u, 0x00000000u, 0x7F800000u, 0xFF800000u, 0x7FA00001u,
                                        0xFFC00000u, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu};
  static const uint16_t special_bf16[9] = {0x8000u, 0x0000u, 0x7F80u, 0xFF80u, 0x7FC1u,
                                           0xFFC0u, 0x0001u, 0x807Fu, 0x7F7Fu};
  static const uint16_t special_fp16[9] = {0x8000u, 0x0000u, 0x7C00u, 0xFC00u, 0x7E01u,
                                           0xFE00u, 0x0001u, 0x83FFu, 0x7BFFu};
  uint64_t rng = seed * 131 + (uint64_t)rank;
  const size_t esize = dtype_bytes(dtype), n = (size_t)rows * row_bytes / esize;
  for (size_t i = 0; i < n; i++) {
    const uint64_t x = wl_rand(&rng);
    if ((x >> 40) % 32 == 0) {
      const int k = (int)((x >> 48) % 9);
      if (dtype == SY_DTYPE_FP32) memcpy(out + 4 * i, &special32[k], 4);
      else memcpy(out + 2 * i, dtype == SY_DTYPE_BF16 ? &special_bf16[k] : &special_fp16[k], 2);
      continue;
    }
    if (dtype == SY_DTYPE_FP32) {
      const uint32_t v = (uint32_t)(x & 0x807FFFFF) | ((uint32_t)(100 + x % 50) << 23); /* exponent 100..149 */
      memcpy(out + 4 * i, &v, 4);
    } else if (dtype == SY_DTYPE_BF16) {
      const uint16_t v = (uint16_t)((x & 0x807F) | ((100 + (x >> 16) % 50) << 7));
      memcpy(out + 2 * i, &v, 2);
    } else {
      const uint16_t v = (uint16_t)((x & 0x83FF) | ((3 + (x >> 16) % 25) << 10)); /* exponent 3..27 */
      memcpy(out + 2 * i, &v, 2);
    }
  }
}
