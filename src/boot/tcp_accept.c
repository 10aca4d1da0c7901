/*
 * tcp_accept.c — rank 0's open of the TCP rendezvous (tcp.c describes the star and the handshake): it listens
 * on the addresses of this host that rank 0's address names, then runs one poll() loop over the listening
 * sockets and every connection that has not said hello yet, each connection with its own deadline, until every
 * other rank has said hello; then it answers each rank (with its proof when it holds a secret). A connection
 * that stays silent is dropped at its deadline; one that sends anything but a valid hello is refused at once;
 * neither holds up the others.
 */
#include "boot/tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_LISTEN      8  /* addresses of this host one name may resolve to */
#define EXTRA_PENDING   64 /* connections without a hello beyond world size; past it the oldest is dropped */
#define REFUSALS_LOGGED 16 /* refusals logged one by one in one open; the rest are counted */
#define HELLO_MS_MAX    2000

typedef struct hello_conn {
  int fd;            /* -1: gone (accepted as a rank, refused or dropped) */
  uint64_t deadline; /* dropped unless its hello is complete by then */
  size_t got;        /* bytes of `in` received */
  unsigned char in[FRAME_BYTES + TCP_HELLO_AUTH];
  unsigned char nonce[TCP_NONCE_BYTES]; /* rank 0's challenge on this connection */
  char from[HOST_TEXT];
} hello_conn_t;

typedef struct accept_state {
  sy_boot_t *boot;
  int listen_fds[MAX_LISTEN], listen_count;
  char where[MAX_LISTEN * (HOST_TEXT + 10)]; /* "127.0.0.1:29801", for messages */
  int loopback_only;                         /* every listening address is a loopback one */
  hello_conn_t *conns;
  int count, capacity;
  unsigned char (*proofs)[TCP_PROOF_BYTES]; /* rank 0's proof for each rank (with a secret) */
  uint64_t hello_ms;
  int connected, refused;
} accept_state_t;

static int is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
}

static void close_listeners(accept_state_t *st) {
  for (int i = 0; i < st->listen_count; i++) close(st->listen_fds[i]);
  st->listen_count = 0;
}

/* Binds one resolved address. Returns the listening socket, or -1 with *err set. */
static int listen_one(const struct addrinfo *ai, int *err) {
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) return fd;
  *err = errno;
  close(fd);
  return -1;
}

/* One pass over the addresses boot->addr resolves to: binds each of this host's. Returns 1 when the port is
 * in use on one of them (everything closed again: try later); lists the others in `foreign`. */
static int listen_pass(accept_state_t *st, struct addrinfo *addrs, char *foreign, size_t bytes, int *other_err) {
  char bound[MAX_LISTEN][HOST_TEXT];
  size_t used = 0;
  st->loopback_only = 1;
  for (struct addrinfo *ai = addrs; ai && st->listen_count < MAX_LISTEN; ai = ai->ai_next) {
    char host[HOST_TEXT];
    if (getnameinfo(ai->ai_addr, ai->ai_addrlen, host, sizeof host, NULL, 0, NI_NUMERICHOST) != 0) continue;
    int seen = 0;
    for (int i = 0; i < st->listen_count; i++) seen |= !strcmp(bound[i], host);
    if (seen) continue; /* a name listed twice */
    int err = 0, fd = listen_one(ai, &err);
    if (fd >= 0) {
      snprintf(bound[st->listen_count], HOST_TEXT, "%s", host);
      st->listen_fds[st->listen_count++] = fd;
      st->loopback_only &= is_loopback(ai->ai_addr);
      continue;
    }
    if (err == EADDRINUSE) {
      close_listeners(st);
      return 1;
    }
    if (err != EADDRNOTAVAIL) *other_err = err;
    else if (used + strlen(host) + 3 < bytes)
      used += (size_t)snprintf(foreign + used, bytes - used, "%s%s", used ? ", " : "", host);
  }
  size_t n = 0;
  for (int i = 0; i < st->listen_count && n < sizeof st->where; i++)
    n += (size_t)snprintf(st->where + n, sizeof st->where - n, "%s%s%s%s:%d", i ? ", " : "",
                          strchr(bound[i], ':') ? "[" : "", bound[i], strchr(bound[i], ':') ? "]" : "", st->boot->port);
  return 0;
}

/* Listens on every address of this host that boot->addr names, retrying while the port is in use (an earlier
 * job's rank 0 on its way out) until the deadline. */
static sy_status_t listen_on_own_address(accept_state_t *st, uint64_t deadline, char *reason, size_t bytes) {
  sy_boot_t *boot = st->boot;
  char port_text[16], eb[128], foreign[256] = "";
  snprintf(port_text, sizeof port_text, "%d", boot->port);
  struct addrinfo hints, *addrs = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  int other_err = 0, in_use = 0;
  for (;;) {
    int gai = getaddrinfo(boot->addr, port_text, &hints, &addrs);
    if (gai == 0) {
      foreign[0] = '\0';
      in_use = listen_pass(st, addrs, foreign, sizeof foreign, &other_err);
      freeaddrinfo(addrs);
      if (!in_use) break; /* bound, or nothing here to bind (waiting will not change that) */
    } else if (gai != EAI_AGAIN) {
      snprintf(reason, bytes, "rank 0 cannot resolve its own address %s: %s", boot->addr, gai_strerror(gai));
      return SY_ERR_BOOTSTRAP;
    }
    if (sy__boot_ms_left(deadline) == 0) break;
    sy__boot_sleep_us(50000);
  }
  if (st->listen_count > 0) {
    unsigned char any[sizeof(struct in6_addr)];
    int literal = inet_pton(AF_INET, boot->addr, any) == 1 || inet_pton(AF_INET6, boot->addr, any) == 1;
    if (st->loopback_only && !literal && strcmp(boot->addr, "localhost") != 0)
      SY_INFO(
          "rendezvous: %s is a loopback address on rank 0's host (%s): ranks on other hosts cannot reach it; "
          "set SY_BOOT_ADDR to an address they can",
          boot->addr, st->where);
    SY_INFO("rendezvous: rank 0 listens on %s", st->where);
    return SY_SUCCESS;
  }
  if (in_use)
    snprintf(reason, bytes, "rank 0 cannot listen on %s port %d: the port stayed in use for %llu ms", boot->addr,
             boot->port, (unsigned long long)boot->timeout_ms);
  else if (*foreign)
    snprintf(reason, bytes,
             "rank 0 cannot listen on %s (%s): not an address of this host; rank 0 must run on the host that "
             "SY_BOOT_ADDR / MASTER_ADDR names",
             boot->addr, foreign);
  else
    snprintf(reason, bytes, "rank 0 cannot listen on %s port %d: %s", boot->addr, boot->port,
             other_err ? sy__boot_err_text(other_err, eb, sizeof eb) : "it resolves to no usable address");
  return SY_ERR_BOOTSTRAP;
}

/* Counts a refusal and logs it at WARN, one line each up to REFUSALS_LOGGED in one open. */
static void log_refusal(accept_state_t *st, const char *what) {
  st->refused++;
  if (st->refused <= REFUSALS_LOGGED) SY_WARN("rendezvous: rank 0 %s", what);
  else if (st->refused == REFUSALS_LOGGED + 1)
    SY_WARN("rendezvous: rank 0 refuses more connections than it logs one by one; it counts them");
}

/* Closes connection i without a word (a real rank that was merely slow connects again). */
static void drop(accept_state_t *st, int i, const char *why) {
  hello_conn_t *c = &st->conns[i];
  char what[HOST_TEXT + 96];
  snprintf(what, sizeof what, "dropped a connection from %s: %s", c->from, why);
  log_refusal(st, what);
  close(c->fd);
  c->fd = -1;
}

/* Refuses connection i: logs why, tells the peer why (a real but misconfigured rank then fails at once), closes. */
__attribute__((format(printf, 3, 4))) static void refuse(accept_state_t *st, int i, const char *fmt, ...) {
  hello_conn_t *c = &st->conns[i];
  char reason[384], what[sizeof reason + 24];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  snprintf(what, sizeof what, "refused a hello: %s", reason);
  log_refusal(st, what);
  unsigned char msg[FRAME_BYTES + sizeof reason];
  size_t len = strlen(reason);
  frame_t f = {TCP_MAGIC, MSG_REPLY, (int32_t)SY_ERR_BOOTSTRAP, 0, len};
  sy__tcp_frame_encode(&f, msg);
  memcpy(msg + FRAME_BYTES, reason, len);
  if (send(c->fd, msg, FRAME_BYTES + len, MSG_NOSIGNAL | MSG_DONTWAIT) > 0) shutdown(c->fd, SHUT_WR);
  close(c->fd);
  c->fd = -1;
}

/* A complete hello on connection i: the secret first (so a peer without it learns nothing about the job), then
 * the world size, the rank's range and whether the rank is taken. */
static void hello_check(accept_state_t *st, int i, const frame_t *f) {
  sy_boot_t *boot = st->boot;
  hello_conn_t *c = &st->conns[i];
  const int world = boot->world_size, rank = f->a, proven = f->length == TCP_HELLO_AUTH;
  const unsigned char *leaf_nonce = c->in + FRAME_BYTES;
  unsigned char want[TCP_PROOF_BYTES] = {0};
  if (proven && boot->secret) sy__tcp_proof(boot->secret, TCP_PROOF_LEAF, c->nonce, leaf_nonce, rank, f->b, want);
  char first[HOST_TEXT] = "";
  if (rank >= 1 && rank < world && boot->fds[rank] >= 0) sy__tcp_peer_name(boot->fds[rank], first, sizeof first);
  if (boot->secret && !proven)
    refuse(st, i, "a process from %s says it is rank %d but holds no SY_BOOT_SECRET; rank 0 requires it", c->from,
           rank);
  else if (!boot->secret && proven)
    refuse(st, i, "a process from %s says it is rank %d and holds an SY_BOOT_SECRET; rank 0 holds none", c->from, rank);
  else if (proven && !sy__tcp_equal_ct(want, leaf_nonce + TCP_NONCE_BYTES, TCP_PROOF_BYTES))
    refuse(st, i, "a process from %s says it is rank %d but does not hold rank 0's SY_BOOT_SECRET", c->from, rank);
  else if (f->b != world)
    refuse(st, i, "rank %d (from %s) has world size %d, rank 0 has %d", rank, c->from, f->b, world);
  else if (rank < 1 || rank >= world)
    refuse(st, i, "a process from %s says it is rank %d, outside 1..%d", c->from, rank, world - 1);
  else if (*first)
    refuse(st, i, "rank %d connected twice (from %s and from %s); the second is refused", rank, first, c->from);
  else {
    if (proven) sy__tcp_proof(boot->secret, TCP_PROOF_ROOT, c->nonce, leaf_nonce, rank, world, st->proofs[rank]);
    boot->fds[rank] = c->fd;
    c->fd = -1;
    st->connected++;
  }
}

/* Reads what connection i has sent; acts once its hello is complete or is clearly not a hello. */
static void hello_read(accept_state_t *st, int i) {
  hello_conn_t *c = &st->conns[i];
  for (;;) {
    frame_t f = {0, 0, 0, 0, 0};
    if (c->got >= FRAME_BYTES) sy__tcp_frame_decode(c->in, &f);
    size_t want = c->got < FRAME_BYTES ? FRAME_BYTES : FRAME_BYTES + (size_t)f.length;
    if (c->got == want) {
      hello_check(st, i, &f);
      return;
    }
    ssize_t n = recv(c->fd, c->in + c->got, want - c->got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) { /* a port probe, or a rank that gave up: not a refusal */
      SY_INFO("rendezvous: a connection from %s closed before its hello", c->from);
      close(c->fd);
      c->fd = -1;
      return;
    }
    c->got += (size_t)n;
    if (c->got < FRAME_BYTES) continue;
    sy__tcp_frame_decode(c->in, &f);
    if (f.magic != TCP_MAGIC || f.type != MSG_HELLO || (f.length != 0 && f.length != TCP_HELLO_AUTH)) {
      refuse(st, i, "a process from %s is not a switchyard rank (it sent something other than a hello)", c->from);
      return;
    }
  }
}

/* Takes every connection waiting on listen_fd and sends each its challenge. */
static void accept_new(accept_state_t *st, int listen_fd) {
  for (;;) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (st->count == st->capacity) { /* full of silent connections: the oldest has had the longest to speak */
      int oldest = 0;
      for (int i = 1; i < st->count; i++)
        if (st->conns[i].deadline < st->conns[oldest].deadline) oldest = i;
      drop(st, oldest, "too many connections without a hello");
      st->conns[oldest] = st->conns[--st->count];
    }
    hello_conn_t *c = &st->conns[st->count];
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->deadline = sy__boot_deadline_after(st->hello_ms);
    sy__tcp_socket_setup(fd);
    sy__tcp_peer_name(fd, c->from, sizeof c->from);
    unsigned char msg[FRAME_BYTES + TCP_NONCE_BYTES];
    frame_t f = {TCP_MAGIC, MSG_CHALLENGE, TCP_VERSION, 0, TCP_NONCE_BYTES};
    sy__tcp_frame_encode(&f, msg);
    if (sy__tcp_random(c->nonce, TCP_NONCE_BYTES) != 0) {
      SY_WARN("rendezvous: rank 0 has no random bytes for a challenge; dropping a connection from %s", c->from);
      close(fd);
      continue;
    }
    memcpy(msg + FRAME_BYTES, c->nonce, TCP_NONCE_BYTES);
    if (send(fd, msg, sizeof msg, MSG_NOSIGNAL) != (ssize_t)sizeof msg) { /* an empty socket takes 40 bytes */
      close(fd);
      continue;
    }
    st->count++;
  }
}

/* Forgets the connections marked gone (fd -1), keeping the others' order. */
static void compact(accept_state_t *st) {
  int n = 0;
  for (int i = 0; i < st->count; i++)
    if (st->conns[i].fd >= 0) st->conns[n++] = st->conns[i];
  st->count = n;
}

/* Every rank has said hello: the answer to each (with rank 0's proof when it holds a secret). */
static sy_status_t answer_hellos(accept_state_t *st, uint64_t deadline, char *reason, size_t bytes) {
  sy_boot_t *boot = st->boot;
  const size_t proof = boot->secret ? TCP_PROOF_BYTES : 0;
  unsigned char msg[FRAME_BYTES + TCP_PROOF_BYTES];
  frame_t f = {TCP_MAGIC, MSG_REPLY, 0, 0, proof};
  sy__tcp_frame_encode(&f, msg);
  for (int r = 1; r < boot->world_size; r++) {
    memcpy(msg + FRAME_BYTES, st->proofs[r], proof);
    int err = 0;
    if (sy__tcp_send_all(boot->fds[r], msg, FRAME_BYTES + proof, deadline, 0, &err) != TCP_IO_OK) {
      snprintf(reason, bytes, "rank %d hung up before rank 0 answered its hello", r);
      return SY_ERR_BOOTSTRAP;
    }
  }
  return SY_SUCCESS;
}

/* The deadline passed: names the ranks that never said hello, and what else rank 0 saw. */
static void describe_timeout(const accept_state_t *st, char *reason, size_t bytes) {
  const sy_boot_t *boot = st->boot;
  unsigned char *missing = calloc((size_t)boot->world_size, 1);
  char ranks[256] = "some ranks";
  if (missing) {
    for (int r = 1; r < boot->world_size; r++) missing[r] = boot->fds[r] < 0;
    sy__boot_format_ranks(missing, boot->world_size, ranks, sizeof ranks);
    free(missing);
  }
  int n = snprintf(reason, bytes, "%s never connected within %llu ms (rank 0 listening on %s", ranks,
                   (unsigned long long)boot->timeout_ms, st->where);
  if (n > 0 && (size_t)n < bytes && st->loopback_only)
    n += snprintf(reason + n, bytes - (size_t)n, ", a loopback address: only ranks on its host can reach it");
  if (n > 0 && (size_t)n < bytes && st->refused)
    n += snprintf(reason + n, bytes - (size_t)n, "; it refused or dropped %d connection%s, see its log", st->refused,
                  st->refused == 1 ? "" : "s");
  if (n > 0 && (size_t)n < bytes) snprintf(reason + n, bytes - (size_t)n, ")");
}

/* Rank 0: listens, accepts until every other rank has said hello, then answers each. */
sy_status_t sy__tcp_root_open(sy_boot_t *boot) {
  const int world = boot->world_size;
  const uint64_t deadline = sy__boot_deadline_after(boot->timeout_ms);
  accept_state_t st;
  memset(&st, 0, sizeof st);
  st.boot = boot;
  st.hello_ms = boot->timeout_ms / 2 > HELLO_MS_MAX ? HELLO_MS_MAX : boot->timeout_ms / 2 ? boot->timeout_ms / 2 : 1;
  char reason[768] = "", eb[128];
  sy_status_t status = listen_on_own_address(&st, deadline, reason, sizeof reason);
  if (status != SY_SUCCESS) {
    SY_WARN("rendezvous: %s", reason);
    return status;
  }
  st.capacity = world > INT_MAX - EXTRA_PENDING ? INT_MAX : world + EXTRA_PENDING;
  st.conns = calloc((size_t)st.capacity, sizeof *st.conns);
  st.proofs = calloc((size_t)world, sizeof *st.proofs);
  struct pollfd *pfds = calloc((size_t)st.capacity + MAX_LISTEN, sizeof *pfds);
  if (!st.conns || !st.proofs || !pfds) {
    snprintf(reason, sizeof reason, "rank 0 ran out of memory");
    status = SY_ERR_NO_MEMORY;
  }
  while (status == SY_SUCCESS && st.connected < world - 1) {
    const uint64_t now = sy__boot_now_ms();
    if (now >= deadline) {
      describe_timeout(&st, reason, sizeof reason);
      status = SY_ERR_TIMEOUT;
      break;
    }
    uint64_t wake = deadline;
    for (int i = 0; i < st.count; i++) {
      if (st.conns[i].deadline <= now) drop(&st, i, "no hello in time");
      else if (st.conns[i].deadline < wake) wake = st.conns[i].deadline;
    }
    compact(&st);
    int n = 0;
    for (int i = 0; i < st.listen_count; i++) pfds[n++] = (struct pollfd){st.listen_fds[i], POLLIN, 0};
    for (int i = 0; i < st.count; i++) pfds[n++] = (struct pollfd){st.conns[i].fd, POLLIN, 0};
    int ready = poll(pfds, (nfds_t)n, sy__boot_ms_left(wake));
    if (ready < 0 && errno != EINTR) {
      snprintf(reason, sizeof reason, "rank 0: poll failed: %s", sy__boot_err_text(errno, eb, sizeof eb));
      status = SY_ERR_SYSTEM;
      break;
    }
    if (ready <= 0) continue;
    for (int j = st.listen_count; j < n; j++)
      if (pfds[j].revents) hello_read(&st, j - st.listen_count);
    compact(&st);
    for (int j = 0; j < st.listen_count; j++)
      if (pfds[j].revents) accept_new(&st, st.listen_fds[j]);
  }
  close_listeners(&st);
  for (int i = 0; st.conns && i < st.count; i++) close(st.conns[i].fd); /* not ranks: every rank is here */
  if (status == SY_SUCCESS) status = answer_hellos(&st, deadline, reason, sizeof reason);
  if (status == SY_SUCCESS && st.refused)
    SY_INFO("rendezvous: rank 0 refused or dropped %d connection%s before every rank said hello", st.refused,
            st.refused == 1 ? "" : "s");
  if (status != SY_SUCCESS) {
    SY_WARN("rendezvous: %s", reason);
    sy__tcp_root_fail(boot->fds + 1, world - 1, status, 0, reason);
  }
  if (st.proofs) explicit_bzero(st.proofs, (size_t)world * sizeof *st.proofs);
  free(st.proofs);
  free(st.conns);
  free(pfds);
  return status;
}
