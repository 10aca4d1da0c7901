/*
 * tcp_leaf.c — the side of the TCP rendezvous of every rank but 0 (tcp.c describes the star and the handshake):
 * connect to rank 0 (retrying until it listens, and again when it hangs up without a word), take its challenge,
 * say hello (with a proof when this rank holds a secret), wait for its answer (checking rank 0's proof); each
 * round send the blob and read rank 0's reply, waiting past its own bound for rank 0's verdict
 * (sy__tcp_verdict_deadline).
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

/* Reads rank 0's REPLY frame; a failure reply is logged with its reason and returned as its status. */
static sy_status_t tcp_leaf_reply(sy_boot_t *boot, uint64_t round, uint64_t deadline, frame_t *f, int *closed) {
  unsigned char buf[FRAME_BYTES];
  int err = 0;
  char eb[128];
  tcp_io_t io = sy__tcp_recv_all(boot->fds[0], buf, FRAME_BYTES, deadline, &err);
  *closed = io == TCP_IO_CLOSED;
  if (io == TCP_IO_TIMEOUT) {
    SY_WARN("rendezvous: round %llu: no answer from rank 0 at %s:%d within %llu ms (and a grace period)",
            (unsigned long long)round, boot->addr, boot->port, (unsigned long long)boot->timeout_ms);
    return SY_ERR_TIMEOUT;
  }
  if (io != TCP_IO_OK) return SY_ERR_BOOTSTRAP; /* the caller words it */
  sy__tcp_frame_decode(buf, f);
  if (f->magic != TCP_MAGIC || f->type != MSG_REPLY) {
    SY_WARN("rendezvous: round %llu: rank 0 at %s:%d sent something that is not a switchyard reply",
            (unsigned long long)round, boot->addr, boot->port);
    return SY_ERR_BOOTSTRAP;
  }
  if (f->a == 0) return SY_SUCCESS;
  char reason[REASON_MAX + 1] = "";
  size_t len = f->length > REASON_MAX ? REASON_MAX : (size_t)f->length;
  if (sy__tcp_recv_all(boot->fds[0], reason, len, deadline, &err) == TCP_IO_OK) reason[len] = '\0';
  else
    snprintf(reason, sizeof reason, "(reason lost: %s)",
             err ? sy__boot_err_text(err, eb, sizeof eb) : "connection closed");
  sy_status_t status = (sy_status_t)f->a;
  if (!strcmp(sy_status_name(status), "SY_UNKNOWN_STATUS")) status = SY_ERR_BOOTSTRAP;
  SY_WARN("rendezvous: round %llu: rank 0 reports: %s", (unsigned long long)round, reason);
  return status;
}

/* Rank 0's answer to the hello was ok: with a secret it must carry rank 0's proof, else nothing. */
static sy_status_t leaf_check_root(sy_boot_t *boot, const frame_t *f, const unsigned char *root_nonce,
                                   const unsigned char *leaf_nonce, uint64_t deadline) {
  const uint64_t want = boot->secret ? TCP_PROOF_BYTES : 0;
  if (f->length != want) {
    SY_WARN("rendezvous: rank 0 at %s:%d %s; this rank refuses it", boot->addr, boot->port,
            boot->secret ? "did not prove it holds SY_BOOT_SECRET (is it set there?)"
                         : "answered with a proof of a secret this rank does not hold");
    return SY_ERR_BOOTSTRAP;
  }
  if (!want) return SY_SUCCESS;
  unsigned char proof[TCP_PROOF_BYTES], expect[TCP_PROOF_BYTES];
  int err = 0;
  if (sy__tcp_recv_all(boot->fds[0], proof, sizeof proof, deadline, &err) != TCP_IO_OK) {
    SY_WARN("rendezvous: rank 0 at %s:%d did not finish its answer to this rank's hello", boot->addr, boot->port);
    return SY_ERR_BOOTSTRAP;
  }
  sy__tcp_proof(boot->secret, TCP_PROOF_ROOT, root_nonce, leaf_nonce, boot->rank, boot->world_size, expect);
  if (!sy__tcp_equal_ct(proof, expect, sizeof proof)) {
    SY_WARN(
        "rendezvous: rank 0 at %s:%d does not hold this rank's SY_BOOT_SECRET (its proof is wrong); this rank "
        "refuses it",
        boot->addr, boot->port);
    return SY_ERR_BOOTSTRAP;
  }
  return SY_SUCCESS;
}

/* Connected: takes rank 0's challenge, says hello and reads the answer. *closed: rank 0 hung up without a
 * reason (a listener on its way out, or one that dropped a slow hello): worth connecting again. */
static sy_status_t leaf_handshake(sy_boot_t *boot, uint64_t deadline, int *closed) {
  const int fd = boot->fds[0];
  unsigned char in[FRAME_BYTES + TCP_NONCE_BYTES], out[FRAME_BYTES + TCP_HELLO_AUTH], leaf_nonce[TCP_NONCE_BYTES] = {0};
  int err = 0;
  *closed = 0;
  tcp_io_t io = sy__tcp_recv_all(fd, in, sizeof in, deadline, &err);
  if (io == TCP_IO_TIMEOUT) {
    SY_WARN("rendezvous: rank 0 at %s:%d took the connection but sent no challenge within %llu ms", boot->addr,
            boot->port, (unsigned long long)boot->timeout_ms);
    return SY_ERR_TIMEOUT;
  }
  if (io != TCP_IO_OK) {
    *closed = 1;
    return SY_ERR_BOOTSTRAP;
  }
  frame_t f;
  sy__tcp_frame_decode(in, &f);
  if (f.magic != TCP_MAGIC || f.type != MSG_CHALLENGE || f.a != TCP_VERSION || f.length != TCP_NONCE_BYTES) {
    SY_WARN(
        "rendezvous: what listens at %s:%d is not this version's rank 0 (another switchyard version, or another "
        "service on the port)",
        boot->addr, boot->port);
    return SY_ERR_BOOTSTRAP;
  }
  const unsigned char *root_nonce = in + FRAME_BYTES;
  size_t body = 0;
  if (boot->secret) {
    if (sy__tcp_random(leaf_nonce, sizeof leaf_nonce) != 0) {
      SY_WARN("rendezvous: no random bytes for this rank's nonce (getrandom and /dev/urandom failed)");
      return SY_ERR_SYSTEM;
    }
    memcpy(out + FRAME_BYTES, leaf_nonce, sizeof leaf_nonce);
    sy__tcp_proof(boot->secret, TCP_PROOF_LEAF, root_nonce, leaf_nonce, boot->rank, boot->world_size,
                  out + FRAME_BYTES + TCP_NONCE_BYTES);
    body = TCP_HELLO_AUTH;
  }
  f = (frame_t){TCP_MAGIC, MSG_HELLO, boot->rank, boot->world_size, body};
  sy__tcp_frame_encode(&f, out);
  io = sy__tcp_send_all(fd, out, FRAME_BYTES + body, deadline, 0, &err);
  if (io == TCP_IO_TIMEOUT) {
    SY_WARN("rendezvous: rank 0 at %s:%d did not take this rank's hello within %llu ms", boot->addr, boot->port,
            (unsigned long long)boot->timeout_ms);
    return SY_ERR_TIMEOUT;
  }
  if (io != TCP_IO_OK) {
    *closed = 1;
    return SY_ERR_BOOTSTRAP;
  }
  const uint64_t verdict = sy__tcp_verdict_deadline(deadline, boot->timeout_ms);
  sy_status_t status = tcp_leaf_reply(boot, 0, verdict, &f, closed);
  if (status != SY_SUCCESS) return status;
  return leaf_check_root(boot, &f, root_nonce, leaf_nonce, verdict);
}

/* A rank other than 0: connects (retrying: rank 0 may not listen yet), then the handshake. */
sy_status_t sy__tcp_leaf_open(sy_boot_t *boot) {
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
      sy__tcp_socket_setup(fd);
      boot->fds[0] = fd;
    }
    if (boot->fds[0] >= 0) {
      int closed = 0;
      sy_status_t status = leaf_handshake(boot, deadline, &closed);
      if (status == SY_SUCCESS) {
        freeaddrinfo(addrs);
        return SY_SUCCESS;
      }
      close(boot->fds[0]);
      boot->fds[0] = -1;
      if (!closed) {
        freeaddrinfo(addrs);
        return status;
      }
      /* Hung up without a reason (a listener on its way out, or one that dropped a slow hello): try again. */
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

sy_status_t sy__tcp_leaf_round(sy_boot_t *boot, const void *mine, void *all, size_t bytes) {
  const uint64_t round = boot->round, deadline = sy__boot_deadline_after(boot->timeout_ms);
  const int fd = boot->fds[0];
  unsigned char head[FRAME_BYTES];
  frame_t f = {TCP_MAGIC, MSG_DATA, boot->rank, (int32_t)round, bytes};
  sy__tcp_frame_encode(&f, head);
  int err = 0, closed = 0;
  char eb[128];
  /* Rank 0 speaks first only to say the round failed; stop sending then and read why. */
  tcp_io_t io = sy__tcp_send_all(fd, head, FRAME_BYTES, deadline, 1, &err);
  if (io == TCP_IO_OK && bytes) io = sy__tcp_send_all(fd, mine, bytes, deadline, 1, &err);
  if (io == TCP_IO_TIMEOUT) {
    SY_WARN("rendezvous: round %llu: rank 0 at %s:%d did not take this rank's %zu bytes within %llu ms",
            (unsigned long long)round, boot->addr, boot->port, bytes, (unsigned long long)boot->timeout_ms);
    return SY_ERR_TIMEOUT;
  }
  /* TCP_IO_CLOSED while sending: rank 0 may still have left its reason in our receive queue; read it below. */
  const uint64_t answer_deadline = sy__tcp_verdict_deadline(deadline, boot->timeout_ms);
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
  io = sy__tcp_recv_all(fd, all, (size_t)f.length, answer_deadline, &err);
  if (io == TCP_IO_TIMEOUT) {
    SY_WARN("rendezvous: round %llu: rank 0's answer did not arrive within %llu ms", (unsigned long long)round,
            (unsigned long long)boot->timeout_ms);
    return SY_ERR_TIMEOUT;
  }
  if (io != TCP_IO_OK) {
    SY_WARN("rendezvous: round %llu: rank 0 at %s:%d closed the connection mid-answer (%s)", (unsigned long long)round,
            boot->addr, boot->port, err ? sy__boot_err_text(err, eb, sizeof eb) : "did it exit?");
    return SY_ERR_BOOTSTRAP;
  }
  return SY_SUCCESS;
}
