/*
 * tcp_root.c — rank 0's side of the TCP rendezvous's rounds (tcp.c describes the star; tcp_accept.c its open):
 * each round it gathers every rank's blob and answers with the concatenation, or with the reason the round failed
 * (sy__tcp_root_fail), so every rank fails the same way and names the same missing ranks.
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

/* Best effort: a short frame always fits in an idle socket's buffer. The wait for the ranks to hang up reads
 * what they still send, so closing with unread data does not reset a connection before the reason is read. */
void sy__tcp_root_fail(int *fds, int count, sy_status_t status, uint64_t round, const char *reason) {
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
  sy__tcp_root_fail(boot->fds + 1, world - 1, status, round, reason);
done:
  free(peers);
  free(pfds);
  free(who);
  free(missing);
  return status;
}
