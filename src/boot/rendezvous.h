/*
 * rendezvous.h — what the rendezvous transports share inside src/boot (not used elsewhere): the boot object
 * and the time helpers that keep every wait bounded. rendezvous.c holds the entry points, the trivial and the
 * directory transports; tcp.c, tcp_root.c and tcp_leaf.c the TCP star.
 */
#ifndef SY_BOOT_RENDEZVOUS_H
#define SY_BOOT_RENDEZVOUS_H

#include "boot/boot.h"

#include <string.h>

typedef enum sy_boot_kind { SY_BOOT_TRIVIAL, SY_BOOT_DIR, SY_BOOT_TCP, SY_BOOT_CALLER } sy_boot_kind_t;

struct sy_boot {
  sy_boot_kind_t kind;
  int rank, world_size;
  uint64_t timeout_ms; /* bound on open and on each round */
  uint64_t round;      /* the next round (dir: its file number, continuing after an earlier boot's files) */
  sy_status_t failed;  /* sticky: after a failed round the ranks are out of step */
  char *dir;
  char *addr;   /* tcp: rank 0's address as given (rank 0 listens there; the others connect there) */
  char *secret; /* tcp: the shared secret while the rendezvous opens, else NULL (wiped and freed after open) */
  int port;
  int *fds; /* tcp rank 0: world_size sockets (fds[0] unused); others: fds[0] is the socket to rank 0 */
  sy_allgather_fn allgather; /* caller: the caller's allgather and its argument */
  void *allgather_user;
};

sy_status_t sy__boot_alloc(sy_boot_kind_t kind, int rank, int world_size, uint64_t timeout_ms, sy_boot_t **out);
/* One round of the TCP star (world_size > 1); the caller checked the arguments. */
sy_status_t sy__boot_tcp_round(sy_boot_t *boot, const void *send, void *recv, size_t bytes);
/* Wipes and frees boot->secret (NULL: nothing to do). */
void sy__boot_forget_secret(sy_boot_t *boot);

/* Monotonic milliseconds; a deadline timeout_ms from now (saturating); what is left of it for poll(). */
uint64_t sy__boot_now_ms(void);
uint64_t sy__boot_deadline_after(uint64_t timeout_ms);
int sy__boot_ms_left(uint64_t deadline);
void sy__boot_sleep_us(long us);
/* "rank 2" or "ranks 2, 3, 5" for the ranks r with missing[r] set, shortened to fit. */
void sy__boot_format_ranks(const unsigned char *missing, int world, char *out, size_t bytes);

/* strerror for threads (ranks of the tests are threads). */
static inline const char *sy__boot_err_text(int err, char *buf, size_t bytes) { return strerror_r(err, buf, bytes); }

#endif /* SY_BOOT_RENDEZVOUS_H */
