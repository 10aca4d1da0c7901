/*
 * tcp.c — the rendezvous beyond one node (torchrun, srun, mpirun): a star around rank 0, which
 * listens on the port (any address). At open every other rank connects (retrying until rank 0 listens) and
 * says hello (rank, world); rank 0 checks them (no duplicates, one world size) and answers once all have.
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

sy_status_t sy__boot_open_tcp(const char *addr, int port, int rank, int world_size, uint64_t timeout_ms,
                              sy_boot_t **boot) {
  const char *fn = "sy__boot_open_tcp";
  SY_ARG_CHECK(boot != NULL, fn, "boot=NULL");
  SY_ARG_CHECK(world_size >= 1, fn, "world_size=%d must be >= 1", world_size);
  SY_ARG_CHECK(rank >= 0 && rank < world_size, fn, "rank=%d must be in [0, %d)", rank, world_size);
  SY_ARG_CHECK(rank == 0 || (addr != NULL && *addr), fn, "addr=%s: rank %d needs rank 0's address",
               addr ? "\"\"" : "NULL", rank);
  SY_ARG_CHECK(port >= 1 && port <= 65535, fn, "port=%d must be in [1, 65535]", port);
  SY_ARG_CHECK(timeout_ms > 0, fn, "timeout_ms=0 must be positive");
  sy_boot_t *b;
  SY_CHECK(sy__boot_alloc(SY_BOOT_TCP, rank, world_size, timeout_ms, &b));
  b->port = port;
  b->addr = strdup(addr ? addr : "");
  b->fds = malloc((size_t)world_size * sizeof *b->fds);
  if (!b->addr || !b->fds) {
    sy__boot_close(b);
    return SY_ERR_NO_MEMORY;
  }
  for (int i = 0; i < world_size; i++) b->fds[i] = -1;
  sy_status_t status = SY_SUCCESS;
  if (world_size > 1) status = rank == 0 ? sy__tcp_root_open(b) : sy__tcp_leaf_open(b);
  if (status != SY_SUCCESS) {
    sy__boot_close(b);
    return status;
  }
  SY_INFO("rendezvous: rank %d of %d connected over tcp (rank 0 at %s:%d)", rank, world_size, rank == 0 ? "*" : addr,
          port);
  *boot = b;
  return SY_SUCCESS;
}

sy_status_t sy__boot_tcp_round(sy_boot_t *boot, const void *send, void *recv, size_t bytes) {
  return boot->rank == 0 ? sy__tcp_root_round(boot, send, recv, bytes) : sy__tcp_leaf_round(boot, send, recv, bytes);
}
