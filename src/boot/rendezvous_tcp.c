/*
 * rendezvous_tcp.c — the rendezvous beyond one node (torchrun, srun, mpirun): a star around rank 0, which
 * listens on the port (any address). At open every other rank connects (retrying until rank 0 listens) and
 * says hello (rank, world); rank 0 checks them (no duplicates, one world size) and answers once all have.
 * Each round the others send their blob, and rank 0 answers with the concatenation or with the reason the
 * round failed, so every rank fails the same way and names the same missing ranks. Sockets are nonblocking
 * and every wait is a poll() bounded by the round's deadline.
 */
#include "boot/rendezvous.h"

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

/* A rank other than 0 waits this much past its own bound for rank 0's answer: rank 0 gives up at the same
 * moment and its answer then says which ranks were missing, which only rank 0 can know. */
static uint64_t verdict_deadline(uint64_t deadline, uint64_t timeout_ms) {
  uint64_t grace = timeout_ms / 2 < 100 ? 100 : timeout_ms / 2 > 2000 ? 2000 : timeout_ms / 2;
  return deadline > UINT64_MAX - grace ? UINT64_MAX : deadline + grace;
}

/* Every message starts with one 24-byte frame, big-endian: magic, type, a, b, length; `length` bytes follow.
 *   HELLO  (rank -> 0)  a = rank, b = world size
 *   DATA   (rank -> 0)  a = rank, b = round; the blob follows
 *   REPLY  (0 -> rank)  a = status, b = round; the concatenation follows (status 0) or the reason (text). */
#define TCP_MAGIC 0x53594254u /* "SYBT" */
#define FRAME_BYTES 24
#define REASON_MAX 1024
enum { MSG_HELLO = 1, MSG_DATA = 2, MSG_REPLY = 3 };

#define HOST_TEXT (INET6_ADDRSTRLEN + 8) /* a numeric address */

typedef struct frame {
  uint32_t magic, type;
  int32_t a, b;
  uint64_t length;
} frame_t;

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (24 - 8 * i));
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}
static void frame_encode(const frame_t *f, unsigned char *out) {
  put32(out, f->magic);
  put32(out + 4, f->type);
  put32(out + 8, (uint32_t)f->a);
  put32(out + 12, (uint32_t)f->b);
  put32(out + 16, (uint32_t)(f->length >> 32));
  put32(out + 20, (uint32_t)f->length);
}
static void frame_decode(const unsigned char *in, frame_t *f) {
  f->magic = get32(in);
  f->type = get32(in + 4);
  f->a = (int32_t)get32(in + 8);
  f->b = (int32_t)get32(in + 12);
  f->length = (uint64_t)get32(in + 16) << 32 | get32(in + 20);
}

typedef enum io_result { IO_OK, IO_TIMEOUT, IO_CLOSED, IO_INPUT } io_result_t;

/* Sends all of buf by the deadline. watch_input: stop early (IO_INPUT) if the peer has something to say. */
static io_result_t send_all(int fd, const void *buf, size_t len, uint64_t deadline, int watch_input, int *err) {
  const char *p = buf;
  while (len) {
    struct pollfd pfd = {fd, (short)(POLLOUT | (watch_input ? POLLIN : 0)), 0};
    int ready = poll(&pfd, 1, sy__boot_ms_left(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      *err = errno;
      return IO_CLOSED;
    }
    if (ready == 0) return IO_TIMEOUT;
    if (watch_input && (pfd.revents & POLLIN)) return IO_INPUT;
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (n <= 0) {
      *err = n < 0 ? errno : 0;
      return IO_CLOSED;
    }
    p += n;
    len -= (size_t)n;
  }
  return IO_OK;
}

static io_result_t recv_all(int fd, void *buf, size_t len, uint64_t deadline, int *err) {
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
      return IO_CLOSED;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *err = errno;
      return IO_CLOSED;
    }
    struct pollfd pfd = {fd, POLLIN, 0};
    int ready = poll(&pfd, 1, sy__boot_ms_left(deadline));
    if (ready < 0 && errno != EINTR) {
      *err = errno;
      return IO_CLOSED;
    }
    if (ready == 0) return IO_TIMEOUT;
  }
  return IO_OK;
}

static void socket_setup(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void peer_name(int fd, char *out, size_t bytes) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  char host[HOST_TEXT];
  if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0 &&
      getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, NULL, 0, NI_NUMERICHOST) == 0)
    snprintf(out, bytes, "%s", host);
  else
    snprintf(out, bytes, "?");
}

/* Rank 0 after a failure: tells every connected rank why (best effort: a short frame always fits in an idle
 * socket's buffer), then waits briefly for them to hang up, reading what they still send, so closing with
 * unread data does not reset a connection before the reason is read there. */
static void tcp_root_fail(int *fds, int count, sy_status_t status, uint64_t round, const char *reason) {
  size_t reason_len = strlen(reason);
  if (reason_len > REASON_MAX) reason_len = REASON_MAX;
  unsigned char msg[FRAME_BYTES + REASON_MAX];
  frame_t f = {TCP_MAGIC, MSG_REPLY, (int32_t)status, (int32_t)round, reason_len};
  frame_encode(&f, msg);
  memcpy(msg + FRAME_BYTES, reason, reason_len);
  int open_count = 0;
  for (int i = 0; i < count; i++) {
    if (fds[i] < 0) continue;
    if (send(fds[i], msg, FRAME_BYTES + reason_len, MSG_NOSIGNAL) < 0) {
      close(fds[i]);
      fds[i] = -1;
      continue;
    }
    shutdown(fds[i], SHUT_WR);
    open_count++;
  }
  uint64_t deadline = sy__boot_deadline_after(500);
  struct pollfd *pfds = calloc((size_t)count, sizeof *pfds);
  while (open_count > 0 && pfds && sy__boot_ms_left(deadline) > 0) {
    int n = 0;
    for (int i = 0; i < count; i++)
      if (fds[i] >= 0) pfds[n++] = (struct pollfd){fds[i], POLLIN, 0};
    int ready = poll(pfds, (nfds_t)n, sy__boot_ms_left(deadline));
    if (ready <= 0) break;
    for (int j = 0; j < n; j++) {
      if (!pfds[j].revents) continue;
      char sink[4096];
      ssize_t got = recv(pfds[j].fd, sink, sizeof sink, 0);
      if (got > 0 || (got < 0 && (errno == EAGAIN || errno == EINTR))) continue;
      for (int i = 0; i < count; i++)
        if (fds[i] == pfds[j].fd) {
          close(fds[i]);
          fds[i] = -1;
          open_count--;
        }
    }
  }
  free(pfds);
  for (int i = 0; i < count; i++) {
    if (fds[i] >= 0) close(fds[i]);
    fds[i] = -1;
  }
}

static int tcp_listen(int port, uint64_t deadline, int *err) {
  for (;;) {
    /* IPv6 any-address with v6only off takes IPv4 too; fall back to IPv4 where IPv6 is off. */
    for (int family = 0; family < 2; family++) {
      int fd = socket(family == 0 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        *err = errno;
        continue;
      }
      int one = 1, zero = 0;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      int bound;
      if (family == 0) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 a6;
        memset(&a6, 0, sizeof a6);
        a6.sin6_family = AF_INET6;
        a6.sin6_addr = in6addr_any;
        a6.sin6_port = htons((uint16_t)port);
        bound = bind(fd, (struct sockaddr *)&a6, sizeof a6);
      } else {
        struct sockaddr_in a4;
        memset(&a4, 0, sizeof a4);
        a4.sin_family = AF_INET;
        a4.sin_addr.s_addr = htonl(INADDR_ANY);
        a4.sin_port = htons((uint16_t)port);
        bound = bind(fd, (struct sockaddr *)&a4, sizeof a4);
      }
      if (bound == 0 && listen(fd, SOMAXCONN) == 0) return fd;
      *err = errno;
      close(fd);
      if (*err == EADDRINUSE) break; /* the port is taken for both families: wait for it below */
    }
    /* The port may still be held by the previous job's rank 0 on its way out: retry until the deadline. */
    if (*err != EADDRINUSE || sy__boot_ms_left(deadline) == 0) return -1;
    sy__boot_sleep_us(50000);
  }
}

typedef struct pending_conn {
  int fd;
  size_t got;
  unsigned char frame[FRAME_BYTES];
} pending_conn_t;

/* Rank 0: accepts until every other rank has said hello, then answers each. */
static sy_status_t tcp_root_open(sy_boot_t *boot) {
  const int world = boot->world_size;
  const uint64_t deadline = sy__boot_deadline_after(boot->timeout_ms);
  char reason[512] = "", eb[128];
  sy_status_t status = SY_SUCCESS;
  int err = 0;
  int listen_fd = tcp_listen(boot->port, deadline, &err);
  if (listen_fd < 0) {
    SY_WARN("rendezvous: rank 0 cannot listen on port %d: %s", boot->port, sy__boot_err_text(err, eb, sizeof eb));
    return SY_ERR_BOOTSTRAP;
  }
  pending_conn_t *pending = calloc((size_t)world, sizeof *pending);
  struct pollfd *pfds = calloc((size_t)world + 1, sizeof *pfds);
  int pending_count = 0, connected = 0;
  if (!pending || !pfds) {
    status = SY_ERR_NO_MEMORY;
    goto fail;
  }
  while (connected < world - 1) {
    if (sy__boot_ms_left(deadline) == 0) {
      unsigned char *missing = calloc((size_t)world, 1);
      if (missing) {
        for (int r = 1; r < world; r++) missing[r] = boot->fds[r] < 0;
        char ranks[256];
        sy__boot_format_ranks(missing, world, ranks, sizeof ranks);
        free(missing);
        snprintf(reason, sizeof reason, "%s never connected within %llu ms (rank 0 listening on port %d)", ranks,
                 (unsigned long long)boot->timeout_ms, boot->port);
      }
      status = SY_ERR_TIMEOUT;
      goto fail;
    }
    int n = 0;
    if (pending_count < world) pfds[n++] = (struct pollfd){listen_fd, POLLIN, 0};
    for (int i = 0; i < pending_count; i++) pfds[n++] = (struct pollfd){pending[i].fd, POLLIN, 0};
    int ready = poll(pfds, (nfds_t)n, sy__boot_ms_left(deadline));
    if (ready < 0 && errno != EINTR) {
      snprintf(reason, sizeof reason, "rank 0: poll failed: %s", sy__boot_err_text(errno, eb, sizeof eb));
      status = SY_ERR_SYSTEM;
      goto fail;
    }
    if (ready <= 0) continue;
    /* Hellos from connections already accepted (walk back so removal keeps the indices valid). */
    for (int i = pending_count - 1; i >= 0; i--) {
      pending_conn_t *c = &pending[i];
      ssize_t got = recv(c->fd, c->frame + c->got, FRAME_BYTES - c->got, 0);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (got <= 0) { /* went away before saying hello (a port probe, a rank that gave up): forget it */
        close(c->fd);
        *c = pending[--pending_count];
        continue;
      }
      c->got += (size_t)got;
      if (c->got < FRAME_BYTES) continue;
      frame_t f;
      frame_decode(c->frame, &f);
      char from[HOST_TEXT];
      peer_name(c->fd, from, sizeof from);
      if (f.magic != TCP_MAGIC || f.type != MSG_HELLO || f.length != 0) {
        SY_WARN("rendezvous: rank 0 dropped a connection from %s that is not a switchyard rank", from);
        close(c->fd);
        *c = pending[--pending_count];
        continue;
      }
      int fd = c->fd;
      *c = pending[--pending_count];
      if (f.b != world) {
        snprintf(reason, sizeof reason, "rank %d (from %s) has world size %d, rank 0 has %d", f.a, from, f.b, world);
      } else if (f.a < 1 || f.a >= world) {
        snprintf(reason, sizeof reason, "a process from %s says it is rank %d, outside 1..%d", from, f.a, world - 1);
      } else if (boot->fds[f.a] >= 0) {
        char first[HOST_TEXT];
        peer_name(boot->fds[f.a], first, sizeof first);
        snprintf(reason, sizeof reason, "rank %d connected twice (from %s and from %s)", f.a, first, from);
      } else {
        boot->fds[f.a] = fd;
        connected++;
        continue;
      }
      /* A misconfigured job: every rank fails, the offending one included. */
      status = SY_ERR_BOOTSTRAP;
      tcp_root_fail(&fd, 1, status, 0, reason);
      goto fail;
    }
    /* New connections. */
    while (pending_count < world) {
      int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      socket_setup(fd);
      pending[pending_count++] = (pending_conn_t){fd, 0, {0}};
    }
  }
  close(listen_fd);
  for (int i = 0; i < pending_count; i++) close(pending[i].fd); /* not ranks: every rank is here */
  free(pending);
  free(pfds);
  unsigned char msg[FRAME_BYTES];
  frame_t f = {TCP_MAGIC, MSG_REPLY, 0, 0, 0};
  frame_encode(&f, msg);
  for (int r = 1; r < world; r++) {
    if (send_all(boot->fds[r], msg, FRAME_BYTES, deadline, 0, &err) != IO_OK) {
      snprintf(reason, sizeof reason, "rank %d hung up before rank 0 answered its hello", r);
      SY_WARN("rendezvous: %s", reason);
      tcp_root_fail(boot->fds + 1, world - 1, SY_ERR_BOOTSTRAP, 0, reason);
      return SY_ERR_BOOTSTRAP;
    }
  }
  return SY_SUCCESS;

fail:
  if (*reason) SY_WARN("rendezvous: %s", reason);
  close(listen_fd);
  for (int i = 0; i < pending_count; i++) close(pending[i].fd);
  tcp_root_fail(boot->fds + 1, world - 1, status, 0, *reason ? reason : "rank 0 failed");
  free(pending);
  free(pfds);
  return status;
}

/* Reads rank 0's REPLY frame; a failure reply is logged with its reason and returned as its status. */
static sy_status_t tcp_leaf_reply(sy_boot_t *boot, uint64_t round, uint64_t deadline, frame_t *f, int *closed) {
  unsigned char buf[FRAME_BYTES];
  int err = 0;
  char eb[128];
  io_result_t io = recv_all(boot->fds[0], buf, FRAME_BYTES, deadline, &err);
  *closed = io == IO_CLOSED;
  if (io == IO_TIMEOUT) {
    SY_WARN("rendezvous: round %llu: no answer from rank 0 at %s:%d within %llu ms (and a grace period)",
            (unsigned long long)round, boot->addr, boot->port, (unsigned long long)boot->timeout_ms);
    return SY_ERR_TIMEOUT;
  }
  if (io != IO_OK) return SY_ERR_BOOTSTRAP; /* the caller words it */
  frame_decode(buf, f);
  if (f->magic != TCP_MAGIC || f->type != MSG_REPLY) {
    SY_WARN("rendezvous: round %llu: rank 0 at %s:%d sent something that is not a switchyard reply",
            (unsigned long long)round, boot->addr, boot->port);
    return SY_ERR_BOOTSTRAP;
  }
  if (f->a == 0) return SY_SUCCESS;
  char reason[REASON_MAX + 1] = "";
  size_t len = f->length > REASON_MAX ? REASON_MAX : (size_t)f->length;
  if (recv_all(boot->fds[0], reason, len, deadline, &err) == IO_OK) reason[len] = '\0';
  else snprintf(reason, sizeof reason, "(reason lost: %s)", err ? sy__boot_err_text(err, eb, sizeof eb) : "connection closed");
  sy_status_t status = (sy_status_t)f->a;
  if (!strcmp(sy_status_name(status), "SY_UNKNOWN_STATUS")) status = SY_ERR_BOOTSTRAP;
  SY_WARN("rendezvous: round %llu: rank 0 reports: %s", (unsigned long long)round, reason);
  return status;
}

/* A rank other than 0: connects (retrying: rank 0 may not listen yet), says hello, waits for the answer. */
static sy_status_t tcp_leaf_open(sy_boot_t *boot) {
  const uint64_t deadline = sy__boot_deadline_after(boot->timeout_ms);
  char port_text[16], eb[128];
  snprintf(port_text, sizeof port_text, "%d", boot->port);
  struct addrinfo hints, *addrs = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const char *last_problem = "no attempt finished";
  char problem[160];
  long backoff_us = 10000;
  for (;;) {
    if (!addrs) {
      int gai = getaddrinfo(boot->addr, port_text, &hints, &addrs);
      if (gai != 0) {
        addrs = NULL;
        if (gai != EAI_AGAIN) {
          SY_WARN("rendezvous: cannot resolve rank 0's address %s: %s", boot->addr, gai_strerror(gai));
          return SY_ERR_BOOTSTRAP;
        }
        last_problem = gai_strerror(gai);
      }
    }
    for (struct addrinfo *ai = addrs; ai && boot->fds[0] < 0 && sy__boot_ms_left(deadline) > 0; ai = ai->ai_next) {
      int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) { /* wait for it, but not past the deadline */
        struct pollfd pfd = {fd, POLLOUT, 0};
        int wait = sy__boot_ms_left(deadline);
        int so_error = ETIMEDOUT;
        socklen_t len = sizeof so_error;
        if (poll(&pfd, 1, wait > 2000 ? 2000 : wait) == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
        rc = so_error == 0 ? 0 : -1;
        errno = so_error;
      }
      if (rc != 0) {
        snprintf(problem, sizeof problem, "%s", sy__boot_err_text(errno, eb, sizeof eb));
        last_problem = problem;
        close(fd);
        continue;
      }
      socket_setup(fd);
      boot->fds[0] = fd;
    }
    if (boot->fds[0] >= 0) {
      unsigned char hello[FRAME_BYTES];
      frame_t f = {TCP_MAGIC, MSG_HELLO, boot->rank, boot->world_size, 0};
      frame_encode(&f, hello);
      int err = 0, closed = 0;
      io_result_t io = send_all(boot->fds[0], hello, FRAME_BYTES, deadline, 0, &err);
      sy_status_t status = SY_ERR_BOOTSTRAP;
      if (io == IO_OK) {
        status = tcp_leaf_reply(boot, 0, verdict_deadline(deadline, boot->timeout_ms), &f, &closed);
        if (status == SY_SUCCESS) {
          freeaddrinfo(addrs);
          return SY_SUCCESS;
        }
      }
      if (io == IO_TIMEOUT) {
        SY_WARN("rendezvous: rank 0 at %s:%d did not take this rank's hello within %llu ms", boot->addr, boot->port,
                (unsigned long long)boot->timeout_ms);
        status = SY_ERR_TIMEOUT;
      } else if (io != IO_OK) {
        closed = 1;
      }
      close(boot->fds[0]);
      boot->fds[0] = -1;
      if (!closed) {
        freeaddrinfo(addrs);
        return status;
      }
      /* Hung up without a reason: a listener on its way out; try again while there is time. */
      last_problem = "the connection was closed before rank 0 answered";
    }
    int left = sy__boot_ms_left(deadline);
    if (left == 0) break;
    sy__boot_sleep_us(backoff_us < (long)left * 1000 ? backoff_us : (long)left * 1000);
    backoff_us = backoff_us * 2 > 200000 ? 200000 : backoff_us * 2;
  }
  if (!addrs) { /* the name never resolved: a configuration problem more than a late peer */
    SY_WARN("rendezvous: cannot resolve rank 0's address %s within %llu ms: %s", boot->addr,
            (unsigned long long)boot->timeout_ms, last_problem);
    return SY_ERR_BOOTSTRAP;
  }
  freeaddrinfo(addrs);
  SY_WARN("rendezvous: rank 0 at %s:%d was not reachable within %llu ms (%s)", boot->addr, boot->port,
          (unsigned long long)boot->timeout_ms, last_problem);
  return SY_ERR_TIMEOUT;
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
  if (world_size > 1) status = rank == 0 ? tcp_root_open(b) : tcp_leaf_open(b);
  if (status != SY_SUCCESS) {
    sy__boot_close(b);
    return status;
  }
  SY_INFO("rendezvous: rank %d of %d connected over tcp (rank 0 at %s:%d)", rank, world_size,
          rank == 0 ? "*" : addr, port);
  *boot = b;
  return SY_SUCCESS;
}

typedef struct root_peer {
  size_t hdr_got, body_got;
  unsigned char hdr[FRAME_BYTES];
  int done;
} root_peer_t;

static sy_status_t tcp_root_round(sy_boot_t *boot, const void *mine, void *all, size_t bytes) {
  const int world = boot->world_size;
  const uint64_t round = boot->round, deadline = sy__boot_deadline_after(boot->timeout_ms);
  char reason[512] = "", eb[128];
  sy_status_t status = SY_SUCCESS;
  if (bytes) memmove(all, mine, bytes);
  root_peer_t *peers = calloc((size_t)world, sizeof *peers);
  struct pollfd *pfds = calloc((size_t)world, sizeof *pfds);
  int *who = calloc((size_t)world, sizeof *who);
  unsigned char *missing = calloc((size_t)world, 1);
  if (!peers || !pfds || !who || !missing) {
    status = SY_ERR_NO_MEMORY;
    snprintf(reason, sizeof reason, "rank 0 ran out of memory");
    goto fail;
  }
  int remaining = world - 1;
  while (remaining > 0) { /* gather: frame then blob from each rank, straight into recv */
    if (sy__boot_ms_left(deadline) == 0) {
      for (int r = 1; r < world; r++) missing[r] = !peers[r].done;
      char ranks[256];
      sy__boot_format_ranks(missing, world, ranks, sizeof ranks);
      snprintf(reason, sizeof reason, "round %llu: %s never sent within %llu ms (rank 0 on port %d)",
               (unsigned long long)round, ranks, (unsigned long long)boot->timeout_ms, boot->port);
      status = SY_ERR_TIMEOUT;
      goto fail;
    }
    int n = 0;
    for (int r = 1; r < world; r++)
      if (!peers[r].done) {
        who[n] = r;
        pfds[n++] = (struct pollfd){boot->fds[r], POLLIN, 0};
      }
    int ready = poll(pfds, (nfds_t)n, sy__boot_ms_left(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      snprintf(reason, sizeof reason, "round %llu: rank 0: poll failed: %s", (unsigned long long)round,
               sy__boot_err_text(errno, eb, sizeof eb));
      status = SY_ERR_SYSTEM;
      goto fail;
    }
    for (int j = 0; j < n; j++) {
      if (!pfds[j].revents) continue;
      int r = who[j];
      root_peer_t *p = &peers[r];
      ssize_t got;
      if (p->hdr_got < FRAME_BYTES) got = recv(pfds[j].fd, p->hdr + p->hdr_got, FRAME_BYTES - p->hdr_got, 0);
      else got = recv(pfds[j].fd, (char *)all + (size_t)r * bytes + p->body_got, bytes - p->body_got, 0);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (got <= 0) {
        snprintf(reason, sizeof reason, "round %llu: rank %d closed its connection (%s)", (unsigned long long)round, r,
                 got == 0 ? "did it exit?" : sy__boot_err_text(errno, eb, sizeof eb));
        status = SY_ERR_BOOTSTRAP;
        goto fail;
      }
      if (p->hdr_got < FRAME_BYTES) {
        p->hdr_got += (size_t)got;
        if (p->hdr_got < FRAME_BYTES) continue;
        frame_t f;
        frame_decode(p->hdr, &f);
        if (f.magic != TCP_MAGIC || f.type != MSG_DATA || f.a != r || f.b != (int32_t)round) {
          snprintf(reason, sizeof reason, "round %llu: rank %d sent a message out of step (type %u, round %d)",
                   (unsigned long long)round, r, (unsigned)f.type, (int)f.b);
          status = SY_ERR_BOOTSTRAP;
          goto fail;
        }
        if (f.length != bytes) {
          snprintf(reason, sizeof reason, "round %llu: rank %d passed %llu bytes, rank 0 passed %zu",
                   (unsigned long long)round, r, (unsigned long long)f.length, bytes);
          status = SY_ERR_MISMATCH;
          goto fail;
        }
      } else {
        p->body_got += (size_t)got;
      }
      if (p->hdr_got == FRAME_BYTES && p->body_got == bytes) {
        p->done = 1;
        remaining--;
      }
    }
  }
  /* Answer: the frame and the concatenation to every rank, all at once (one slow reader holds up nobody). */
  unsigned char head[FRAME_BYTES];
  const size_t total = (size_t)world * bytes;
  frame_t f = {TCP_MAGIC, MSG_REPLY, 0, (int32_t)round, total};
  frame_encode(&f, head);
  for (int r = 1; r < world; r++) peers[r] = (root_peer_t){0, 0, {0}, 0}; /* hdr_got/body_got: bytes sent */
  remaining = world - 1;
  while (remaining > 0) {
    if (sy__boot_ms_left(deadline) == 0) {
      for (int r = 0; r < world; r++) missing[r] = r > 0 && !peers[r].done;
      char ranks[256];
      sy__boot_format_ranks(missing, world, ranks, sizeof ranks);
      snprintf(reason, sizeof reason, "round %llu: %s did not take the result within %llu ms",
               (unsigned long long)round, ranks, (unsigned long long)boot->timeout_ms);
      status = SY_ERR_TIMEOUT;
      goto fail;
    }
    int n = 0;
    for (int r = 1; r < world; r++)
      if (!peers[r].done) {
        who[n] = r;
        pfds[n++] = (struct pollfd){boot->fds[r], POLLOUT, 0};
      }
    int ready = poll(pfds, (nfds_t)n, sy__boot_ms_left(deadline));
    if (ready <= 0) continue; /* EINTR, or the deadline: checked above */
    for (int j = 0; j < n; j++) {
      if (!pfds[j].revents) continue;
      int r = who[j];
      root_peer_t *p = &peers[r];
      ssize_t sent;
      if (p->hdr_got < FRAME_BYTES) sent = send(pfds[j].fd, head + p->hdr_got, FRAME_BYTES - p->hdr_got, MSG_NOSIGNAL);
      else sent = send(pfds[j].fd, (const char *)all + p->body_got, total - p->body_got, MSG_NOSIGNAL);
      if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (sent < 0) {
        snprintf(reason, sizeof reason, "round %llu: rank %d hung up before it got the result (%s)",
                 (unsigned long long)round, r, sy__boot_err_text(errno, eb, sizeof eb));
        status = SY_ERR_BOOTSTRAP;
        goto fail;
      }
      if (p->hdr_got < FRAME_BYTES) p->hdr_got += (size_t)sent;
      else p->body_got += (size_t)sent;
      if (p->hdr_got == FRAME_BYTES && p->body_got == total) {
        p->done = 1;
        remaining--;
      }
    }
  }
  goto done;
fail:
  SY_WARN("rendezvous: %s", reason);
  tcp_root_fail(boot->fds + 1, world - 1, status, round, reason);
done:
  free(peers);
  free(pfds);
  free(who);
  free(missing);
  return status;
}

static sy_status_t tcp_leaf_round(sy_boot_t *boot, const void *mine, void *all, size_t bytes) {
  const uint64_t round = boot->round, deadline = sy__boot_deadline_after(boot->timeout_ms);
  const int fd = boot->fds[0];
  unsigned char head[FRAME_BYTES];
  frame_t f = {TCP_MAGIC, MSG_DATA, boot->rank, (int32_t)round, bytes};
  frame_encode(&f, head);
  int err = 0, closed = 0;
  char eb[128];
  /* Rank 0 speaks first only to say the round failed; stop sending then and read why. */
  io_result_t io = send_all(fd, head, FRAME_BYTES, deadline, 1, &err);
  if (io == IO_OK && bytes) io = send_all(fd, mine, bytes, deadline, 1, &err);
  if (io == IO_TIMEOUT) {
    SY_WARN("rendezvous: round %llu: rank 0 at %s:%d did not take this rank's %zu bytes within %llu ms",
            (unsigned long long)round, boot->addr, boot->port, bytes, (unsigned long long)boot->timeout_ms);
    return SY_ERR_TIMEOUT;
  }
  /* IO_CLOSED while sending: rank 0 may still have left its reason in our receive queue; read it below. */
  const uint64_t answer_deadline = verdict_deadline(deadline, boot->timeout_ms);
  sy_status_t status = tcp_leaf_reply(boot, round, answer_deadline, &f, &closed);
  if (status != SY_SUCCESS) {
    if (closed)
      SY_WARN("rendezvous: round %llu: rank 0 at %s:%d closed the connection (%s)", (unsigned long long)round,
              boot->addr, boot->port, err ? sy__boot_err_text(err, eb, sizeof eb) : "did it exit?");
    return status;
  }
  if (f.length != (uint64_t)boot->world_size * bytes || f.b != (int32_t)round) {
    SY_WARN("rendezvous: round %llu: rank 0 answered %llu bytes for round %d, want %llu", (unsigned long long)round,
            (unsigned long long)f.length, (int)f.b, (unsigned long long)boot->world_size * bytes);
    return SY_ERR_BOOTSTRAP;
  }
  io = recv_all(fd, all, (size_t)f.length, answer_deadline, &err);
  if (io == IO_TIMEOUT) {
    SY_WARN("rendezvous: round %llu: rank 0's answer did not arrive within %llu ms", (unsigned long long)round,
            (unsigned long long)boot->timeout_ms);
    return SY_ERR_TIMEOUT;
  }
  if (io != IO_OK) {
    SY_WARN("rendezvous: round %llu: rank 0 at %s:%d closed the connection mid-answer (%s)", (unsigned long long)round,
            boot->addr, boot->port, err ? sy__boot_err_text(err, eb, sizeof eb) : "did it exit?");
    return SY_ERR_BOOTSTRAP;
  }
  return SY_SUCCESS;
}

sy_status_t sy__boot_tcp_round(sy_boot_t *boot, const void *send, void *recv, size_t bytes) {
  return boot->rank == 0 ? tcp_root_round(boot, send, recv, bytes) : tcp_leaf_round(boot, send, recv, bytes);
}
