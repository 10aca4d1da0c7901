/*
 * tcp.c — the rendezvous beyond one node (torchrun, srun, mpirun): a star around rank 0, which listens on the
 * port at the address SY_BOOT_ADDR / MASTER_ADDR names (only there: an address that is not this host's is an
 * error saying so). Rank 0 accepts whoever connects but answers only ranks that complete the handshake:
 *   rank 0 -> each connection   CHALLENGE: a fresh 16-byte nonce (its own per connection)
 *   rank   -> rank 0            HELLO: rank, world size; with a secret also the rank's nonce and its proof
 *   rank 0 -> each rank         REPLY once every rank has said hello: ok (with rank 0's proof, when it holds a
 *                               secret), or the reason the open failed
 * A connection that has not completed its hello within min(2 s, half the boot timeout) is dropped in silence (a
 * real rank that was merely slow sees the close and connects again); one that sends something else, claims a
 * rank outside 1..world-1 or one already connected, has another world size, or fails the secret is refused:
 * it gets the reason (a real but misconfigured rank then fails at once), rank 0 logs the refusal once at WARN
 * with the peer's address, and goes on waiting for the real ranks. Rank 0's accept loop polls every connection
 * with its own deadline, so no idle or bad peer holds up another; the open as a whole is bounded by the boot
 * timeout, and when it runs out rank 0 names the ranks that never said hello (and how many it refused).
 *
 * SY_BOOT_SECRET (optional, the same on every rank) authenticates ranks to rank 0 and rank 0 to the ranks.
 * The proofs are HMAC-SHA-256 under the secret of (a label per direction, both nonces, the rank, the world
 * size) (tcp_auth.c), compared in constant time. The secret never goes on the wire and is never logged, a proof
 * is worthless on another connection (the nonces are fresh), and a rank never hands its proof to a listener
 * that has not sent a nonce first. Rank 0 with a secret refuses a hello without a proof or with a wrong one;
 * rank 0 without one refuses a hello that carries a proof (the ranks disagree on whether there is a secret); a
 * rank with a secret refuses a rank 0 whose answer does not prove it. What the secret does not do: encrypt
 * (every blob, NVSHMEM's unique id included, travels in clear) or stop a party on the path from relaying
 * or rewriting traffic; it keeps strays and other jobs out, not an attacker on the network.
 *
 * Each round the others send their blob, and rank 0 answers with the concatenation or with the reason the
 * round failed, so every rank fails the same way and names the same missing ranks. Sockets are nonblocking
 * and every wait is a poll() bounded by the round's deadline.
 */
#include "boot/tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (24 - 8 * i));
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}
void sy__tcp_frame_encode(const frame_t *f, unsigned char *out) {
  put32(out, f->magic);
  put32(out + 4, f->type);
  put32(out + 8, (uint32_t)f->a);
  put32(out + 12, (uint32_t)f->b);
  put32(out + 16, (uint32_t)(f->length >> 32));
  put32(out + 20, (uint32_t)f->length);
}
void sy__tcp_frame_decode(const unsigned char *in, frame_t *f) {
  f->magic = get32(in);
  f->type = get32(in + 4);
  f->a = (int32_t)get32(in + 8);
  f->b = (int32_t)get32(in + 12);
  f->length = (uint64_t)get32(in + 16) << 32 | get32(in + 20);
}

tcp_io_t sy__tcp_send_all(int fd, const void *buf, size_t len, uint64_t deadline, int watch_input, int *err) {
  const char *p = buf;
  while (len) {
    struct pollfd pfd = {fd, (short)(POLLOUT | (watch_input ? POLLIN : 0)), 0};
    int ready = poll(&pfd, 1, sy__boot_ms_left(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      *err = errno;
      return TCP_IO_CLOSED;
    }
    if (ready == 0) return TCP_IO_TIMEOUT;
    if (watch_input && (pfd.revents & POLLIN)) return TCP_IO_INPUT;
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (n <= 0) {
      *err = n < 0 ? errno : 0;
      return TCP_IO_CLOSED;
    }
    p += n;
    len -= (size_t)n;
  }
  return TCP_IO_OK;
}

tcp_io_t sy__tcp_recv_all(int fd, void *buf, size_t len, uint64_t deadline, int *err) {
  char *p = buf;
  while (len) {
    ssize_t n = recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0) {
      *err = 0;
      return TCP_IO_CLOSED;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *err = errno;
      return TCP_IO_CLOSED;
    }
    struct pollfd pfd = {fd, POLLIN, 0};
    int ready = poll(&pfd, 1, sy__boot_ms_left(deadline));
    if (ready < 0 && errno != EINTR) {
      *err = errno;
      return TCP_IO_CLOSED;
    }
    if (ready == 0) return TCP_IO_TIMEOUT;
  }
  return TCP_IO_OK;
}

void sy__tcp_socket_setup(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void sy__tcp_peer_name(int fd, char *out, size_t bytes) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  char host[HOST_TEXT];
  if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0 &&
      getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, NULL, 0, NI_NUMERICHOST) == 0)
    snprintf(out, bytes, "%s", host);
  else snprintf(out, bytes, "?");
}

uint64_t sy__tcp_verdict_deadline(uint64_t deadline, uint64_t timeout_ms) {
  uint64_t grace = timeout_ms / 2 < 100 ? 100 : timeout_ms / 2 > 2000 ? 2000 : timeout_ms / 2;
  return deadline > UINT64_MAX - grace ? UINT64_MAX : deadline + grace;
}

void sy__boot_forget_secret(sy_boot_t *boot) {
  if (!boot->secret) return;
  explicit_bzero(boot->secret, strlen(boot->secret));
  free(boot->secret);
  boot->secret = NULL;
}

sy_status_t sy__boot_open_tcp(const char *addr, int port, int rank, int world_size, uint64_t timeout_ms,
                              const char *secret, sy_boot_t **boot) {
  const char *fn = "sy__boot_open_tcp";
  SY_ARG_CHECK(boot != NULL, fn, "boot=NULL");
  SY_ARG_CHECK(world_size >= 1, fn, "world_size=%d must be >= 1", world_size);
  SY_ARG_CHECK(rank >= 0 && rank < world_size, fn, "rank=%d must be in [0, %d)", rank, world_size);
  SY_ARG_CHECK(addr != NULL && *addr, fn, "addr=%s: rank %d needs rank 0's address (rank 0 listens there)",
               addr ? "\"\"" : "NULL", rank);
  SY_ARG_CHECK(port >= 1 && port <= 65535, fn, "port=%d must be in [1, 65535]", port);
  SY_ARG_CHECK(timeout_ms > 0, fn, "timeout_ms=0 must be positive");
  sy_boot_t *b;
  SY_CHECK(sy__boot_alloc(SY_BOOT_TCP, rank, world_size, timeout_ms, &b));
  b->port = port;
  b->addr = strdup(addr);
  b->secret = secret && *secret ? strdup(secret) : NULL;
  b->fds = malloc((size_t)world_size * sizeof *b->fds);
  if (!b->addr || !b->fds || (secret && *secret && !b->secret)) {
    sy__boot_close(b);
    return SY_ERR_NO_MEMORY;
  }
  for (int i = 0; i < world_size; i++) b->fds[i] = -1;
  sy_status_t status = SY_SUCCESS;
  if (world_size > 1) status = rank == 0 ? sy__tcp_root_open(b) : sy__tcp_leaf_open(b);
  sy__boot_forget_secret(b); /* needed only to open */
  if (status != SY_SUCCESS) {
    sy__boot_close(b);
    return status;
  }
  SY_INFO("rendezvous: rank %d of %d connected over tcp (rank 0 at %s:%d%s)", rank, world_size, addr, port,
          secret && *secret ? ", secret proven" : "");
  *boot = b;
  return SY_SUCCESS;
}

sy_status_t sy__boot_tcp_round(sy_boot_t *boot, const void *send, void *recv, size_t bytes) {
  return boot->rank == 0 ? sy__tcp_root_round(boot, send, recv, bytes) : sy__tcp_leaf_round(boot, send, recv, bytes);
}
