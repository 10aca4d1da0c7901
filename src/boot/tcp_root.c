/*
 * tcp_root.c — rank 0's side of the TCP rendezvous (tcp.c describes the star): it listens, accepts until every
 * other rank has said hello, checks them (no duplicates, one world size) and answers each; each round it gathers
 * every rank's blob and answers with the concatenation, or with the reason the round failed (tcp_root_fail), so
 * every rank fails the same way and names the same missing ranks.
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

/* Rank 0 after a failure: tells every connected rank why (best effort: a short frame always fits in an idle
 * socket's buffer), then waits briefly for them to hang up, reading what they still send, so closing with
 * unread data does not reset a connection before the reason is read there. */
static void tcp_root_fail(int *fds, int count, sy_status_t status, uint64_t round, const char *reason) {
  size_t reason_len = strlen(reason);
  if (reason_len > REASON_MAX) reason_len = REASON_MAX;
  unsigned char msg[FRAME_BYTES + REASON_MAX];
  frame_t f = {TCP_MAGIC, MSG_REPLY, (int32_t)status, (int32_t)round, reason_len};
  sy__tcp_frame_encode(&f, msg);
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
sy_status_t sy__tcp_root_open(sy_boot_t *boot) {
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
      sy__tcp_frame_decode(c->frame, &f);
      char from[HOST_TEXT];
      sy__tcp_peer_name(c->fd, from, sizeof from);
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
        sy__tcp_peer_name(boot->fds[f.a], first, sizeof first);
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
      sy__tcp_socket_setup(fd);
      pending[pending_count++] = (pending_conn_t){fd, 0, {0}};
    }
  }
  close(listen_fd);
  for (int i = 0; i < pending_count; i++) close(pending[i].fd); /* not ranks: every rank is here */
  free(pending);
  free(pfds);
  unsigned char msg[FRAME_BYTES];
  frame_t f = {TCP_MAGIC, MSG_REPLY, 0, 0, 0};
  sy__tcp_frame_encode(&f, msg);
  for (int r = 1; r < world; r++) {
    if (sy__tcp_send_all(boot->fds[r], msg, FRAME_BYTES, deadline, 0, &err) != TCP_IO_OK) {
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

typedef struct root_peer {
  size_t hdr_got, body_got;
  unsigned char hdr[FRAME_BYTES];
  int done;
} root_peer_t;

sy_status_t sy__tcp_root_round(sy_boot_t *boot, const void *mine, void *all, size_t bytes) {
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
        sy__tcp_frame_decode(p->hdr, &f);
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
  sy__tcp_frame_encode(&f, head);
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
