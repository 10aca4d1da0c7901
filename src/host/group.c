/*
 * group.c — the host backend's group: ranks are threads of one process, and a process-wide registry holds the
 * groups still forming, keyed by config->host_group. Once all world_size ranks have arrived the group leaves the
 * registry (the key is free again for a new group) and lives on until its last member destroys its
 * communicator; that last member frees every rank's state and memory, so a peer never touches a buffer freed
 * under it.
 * Collectives meet in rounds (a generation-counter barrier). Entering a round, a rank publishes in slots[rank]
 * its collective's number and operation, which round of it this is, and (opening round) a pointer to its
 * arguments; the last rank to arrive checks that all slots agree, so ranks inside different collectives get
 * SY_ERR_MISMATCH everywhere and nobody reads a peer's arguments as something they are not. An exchange is an
 * opening round, a copy phase in which every rank reads its peers' arguments and buffers, and a closing round.
 * Every wait is bounded; a wait that times out aborts the whole group, so no peer hangs either. The copy phase
 * makes one exception to "leave at once": a rank whose round failed waits until no peer is still copying (named
 * "slow" in the timeout's message, apart from "missing" ranks that never arrived), because the caller may free
 * its buffers once the call returns. Copies go in pieces of SY_HOST_COPY_PIECE bytes and stop at the abort, so
 * that wait lasts at most one piece.
 */
#include "host/host.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct host_group {
  struct host_group *next; /* registry list; only groups still forming are in it */
  int key, world;
  /* Formation and membership: guarded by registry_lock. */
  unsigned char *arrived;
  int arrived_count, formed, failed, members;
  pthread_cond_t form_cond;
  host_state_t **states; /* per rank; the last member to leave frees them all */
  /* After formation: guarded by lock. */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int barrier_count;
  uint64_t barrier_gen;
  uint64_t *barrier_entered; /* per rank: rounds it has entered */
  struct host_slot *slots;   /* per rank: what it published for the round it is in */
  unsigned char *copying;    /* per rank: in an exchange's copy phase (may read peers' buffers) */
  int copying_count;
  sy_status_t round_status; /* the verdict of the last round completed, and its line */
  char round_detail[256];
  int abort_status; /* atomic; 0 until a wait timed out somewhere */
  char abort_detail[256];
} host_group_t;

/* The rounds of a collective: an exchange opens (its slot carries the arguments) and closes; a barrier is one
 * round; a collective may add inner rounds after its exchange. */
enum { ROUND_OPEN, ROUND_SYNC, ROUND_CLOSE, ROUND_INNER };

typedef struct host_slot {
  uint64_t collective; /* the rank's collective number */
  int op, round;       /* sy_host_op_t, ROUND_* */
  const void *offer;   /* the rank's arguments, set by its opening round, valid until the closing round completes */
} host_slot_t;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static host_group_t *registry;

/* ---- clocks ------------------------------------------------------------------------------------------ */

uint64_t sy__host_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct timespec deadline_after(uint64_t ms) {
  uint64_t t = sy__host_now_ns();
  uint64_t add = ms > UINT64_MAX / 2000000ull ? UINT64_MAX / 2 : ms * 1000000ull; /* absurd timeouts saturate */
  t = t > UINT64_MAX - add ? UINT64_MAX : t + add;
  struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
  return ts;
}

static int cond_init_monotonic(pthread_cond_t *cond) {
  pthread_condattr_t attr;
  if (pthread_condattr_init(&attr)) return -1;
  int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  if (!rc) rc = pthread_cond_init(cond, &attr);
  pthread_condattr_destroy(&attr);
  return rc ? -1 : 0;
}

/* "2, 5, 7" into out (truncated with "..." when long). */
static void format_ranks(char *out, size_t out_bytes, const int *ranks, int count) {
  size_t n = 0;
  out[0] = '\0';
  for (int i = 0; i < count; i++) {
    int w = snprintf(out + n, out_bytes - n, "%s%d", i ? ", " : "", ranks[i]);
    if (w < 0 || (size_t)w >= out_bytes - n) {
      if (out_bytes >= 4) snprintf(out + out_bytes - 4, 4, "...");
      return;
    }
    n += (size_t)w;
  }
}

/* ---- groups: creation, abort ---------------------------------------------------------------------------- */

void sy__host_state_free(host_state_t *hs) {
  if (!hs) return;
  free(hs->blocks);
  free(hs->a2a_send_bytes);
  free(hs->a2a_send_offsets);
  free((void *)hs->a2a_send);
  free(hs);
}

/* Frees the group and every member's state and memory; the group's sync objects were initialised. */
static void group_free(host_group_t *g) {
  for (int r = 0; r < g->world; r++) {
    host_state_t *hs = g->states[r];
    if (!hs) continue;
    for (int b = 0; b < hs->block_count; b++) {
      free(hs->blocks[b].ptrs[hs->rank]);
      free(hs->blocks[b].ptrs);
    }
    sy__host_state_free(hs);
  }
  pthread_cond_destroy(&g->form_cond);
  pthread_cond_destroy(&g->cond);
  pthread_mutex_destroy(&g->lock);
  free(g->arrived);
  free(g->states);
  free(g->barrier_entered);
  free(g->slots);
  free(g->copying);
  free(g);
}

static host_group_t *group_new(int key, int world) {
  host_group_t *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->key = key;
  g->world = world;
  g->arrived = calloc((size_t)world, 1);
  g->states = calloc((size_t)world, sizeof *g->states);
  g->barrier_entered = calloc((size_t)world, sizeof *g->barrier_entered);
  g->slots = calloc((size_t)world, sizeof *g->slots);
  g->copying = calloc((size_t)world, 1);
  int made = 0; /* sync objects initialised so far, in order: lock, cond, form_cond */
  if (g->arrived && g->states && g->barrier_entered && g->slots && g->copying) {
    made += pthread_mutex_init(&g->lock, NULL) == 0;
    if (made == 1) made += cond_init_monotonic(&g->cond) == 0;
    if (made == 2) made += cond_init_monotonic(&g->form_cond) == 0;
  }
  if (made == 3) return g;
  if (made >= 2) pthread_cond_destroy(&g->cond);
  if (made >= 1) pthread_mutex_destroy(&g->lock);
  free(g->arrived);
  free(g->states);
  free(g->barrier_entered);
  free(g->slots);
  free(g->copying);
  free(g);
  return NULL;
}

static void registry_remove_locked(host_group_t *g) {
  for (host_group_t **p = &registry; *p; p = &(*p)->next) {
    if (*p == g) {
      *p = g->next;
      g->next = NULL;
      return;
    }
  }
}

static int group_aborted(const host_group_t *g) { return __atomic_load_n(&g->abort_status, __ATOMIC_ACQUIRE); }

/* Raises the group's abort flag (first caller's status and detail win) and wakes every waiter. */
static void group_abort_locked(host_group_t *g, sy_status_t status, const char *detail) {
  if (!group_aborted(g)) {
    snprintf(g->abort_detail, sizeof g->abort_detail, "%s", detail);
    __atomic_store_n(&g->abort_status, (int)status, __ATOMIC_RELEASE);
  }
  pthread_cond_broadcast(&g->cond);
}

/* A wait of this rank timed out: record it on the communicator, log it, abort the group. */
static sy_status_t fail_timeout_locked(sy_comm_t comm, host_group_t *g, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static sy_status_t fail_timeout_locked(sy_comm_t comm, host_group_t *g, const char *fmt, ...) {
  char detail[sizeof comm->error_detail];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  group_abort_locked(g, SY_ERR_TIMEOUT, detail);
  sy__comm_set_error(comm, SY_ERR_TIMEOUT, "%s", detail);
  SY_WARN("%s", detail);
  return SY_ERR_TIMEOUT;
}

/* ---- rounds ------------------------------------------------------------------------------------------- */

const char *sy__host_op_name(int op) {
  static const char *const names[] = {
#define SY_HOST_OP_NAME(id, name) name,
      SY_HOST_OP_LIST(SY_HOST_OP_NAME)
#undef SY_HOST_OP_NAME
  };
  return op >= 0 && op < SY_HOST_OP_COUNT ? names[op] : "?";
}

static const char *round_name(int round) {
  static const char *const names[] = {"opening", "only", "closing", "inner"};
  return round >= 0 && round <= ROUND_INNER ? names[round] : "?";
}

static int same_round(const host_slot_t *a, const host_slot_t *b) {
  return a->collective == b->collective && a->op == b->op && a->round == b->round;
}

/* "rank 0 calls mem_alloc (collective 3); rank 1 calls alltoallv (collective 3)": the ranks grouped by what
 * they published for the round. */
static void describe_mismatch_locked(const host_group_t *g, char *out, size_t out_bytes) {
  int *ranks = malloc((size_t)g->world * sizeof *ranks);
  unsigned char *told = calloc((size_t)g->world, 1);
  size_t n = (size_t)snprintf(out, out_bytes, "collectives out of order in host group %d: ", g->key);
  for (int r = 0; ranks && told && r < g->world && n < out_bytes; r++) {
    if (told[r]) continue;
    int count = 0;
    for (int q = r; q < g->world; q++)
      if (!told[q] && same_round(&g->slots[q], &g->slots[r])) told[q] = 1, ranks[count++] = q;
    char names[64];
    format_ranks(names, sizeof names, ranks, count);
    const host_slot_t *slot = &g->slots[r];
    int w = snprintf(out + n, out_bytes - n, "%s%s %s %s %s (collective %llu%s%s)", r ? "; " : "",
                     count > 1 ? "ranks" : "rank", names, count > 1 ? "call" : "calls", sy__host_op_name(slot->op),
                     (unsigned long long)slot->collective,
                     slot->round == ROUND_CLOSE || slot->round == ROUND_INNER ? ", " : "",
                     slot->round == ROUND_CLOSE   ? "closing round"
                     : slot->round == ROUND_INNER ? "inner round"
                                                  : "");
    if (w < 0) break;
    n += (size_t)w;
  }
  if (n < out_bytes) snprintf(out + n, out_bytes - n, "; nothing done");
  free(ranks);
  free(told);
}

/* The last rank arrived: decide the round for everyone (the slots agree, or SY_ERR_MISMATCH), open the copy
 * phase of an exchange whose ranks agree, and release the waiters. */
static void complete_round_locked(host_group_t *g) {
  int same = 1;
  for (int r = 1; r < g->world; r++) same = same && same_round(&g->slots[r], &g->slots[0]);
  g->round_status = same ? SY_SUCCESS : SY_ERR_MISMATCH;
  g->round_detail[0] = '\0';
  if (!same) describe_mismatch_locked(g, g->round_detail, sizeof g->round_detail);
  if (same && g->slots[0].round == ROUND_OPEN) {
    memset(g->copying, 1, (size_t)g->world);
    g->copying_count = g->world;
  }
  g->barrier_count = 0;
  g->barrier_gen++;
  pthread_cond_broadcast(&g->cond);
}

/* A rank that enters a round reads no peer's buffer any more. */
static void leave_copy_phase_locked(host_group_t *g, int rank) {
  if (!g->copying[rank]) return;
  g->copying[rank] = 0;
  g->copying_count--;
  pthread_cond_broadcast(&g->cond);
}

/* The timeout of this rank's wait in round `gen`: names the ranks that never arrived and those that arrived but
 * are still copying, aborts the group. */
static sy_status_t fail_round_locked(sy_comm_t comm, host_group_t *g, uint64_t gen, uint64_t timeout_ms) {
  const host_state_t *hs = comm->backend_state;
  int *missing = malloc(2 * (size_t)g->world * sizeof *missing), n_missing = 0, n_slow = 0;
  int *slow = missing ? missing + g->world : NULL;
  for (int r = 0; missing && r < g->world; r++) {
    if (g->barrier_entered[r] > gen) continue;
    if (g->copying[r]) slow[n_slow++] = r;
    else missing[n_missing++] = r;
  }
  char missing_names[96] = "none", slow_names[96] = "";
  if (n_missing) format_ranks(missing_names, sizeof missing_names, missing, n_missing);
  if (n_slow) format_ranks(slow_names, sizeof slow_names, slow, n_slow);
  free(missing);
  const host_slot_t *mine = &g->slots[hs->rank];
  return fail_timeout_locked(
      comm, g,
      "%s: rank %d waited %llu ms for barrier %llu of host group %d (collective %llu, %s round): expected %d ranks, "
      "saw %d (missing: %s%s%s)",
      sy__host_op_name(mine->op), hs->rank, (unsigned long long)timeout_ms, (unsigned long long)(gen + 1), g->key,
      (unsigned long long)mine->collective, round_name(mine->round), g->world, g->barrier_count, missing_names,
      n_slow ? "; slow, arrived and still copying: " : "", slow_names);
}

/* Publishes this rank's slot and waits (bounded) for every rank; the round's verdict, and its line in detail. */
static sy_status_t round_wait_locked(sy_comm_t comm, host_group_t *g, int round, const void *offer, uint64_t timeout_ms,
                                     char *detail, size_t detail_bytes) {
  host_state_t *hs = comm->backend_state;
  host_slot_t *slot = &g->slots[hs->rank];
  slot->collective = hs->collective;
  slot->op = hs->op;
  slot->round = round;
  if (round == ROUND_OPEN) slot->offer = offer; /* kept through the closing round: slower peers still read it */
  const uint64_t gen = g->barrier_gen;
  g->barrier_entered[hs->rank] = gen + 1;
  if (++g->barrier_count == g->world) {
    complete_round_locked(g);
  } else {
    struct timespec deadline = deadline_after(timeout_ms);
    while (g->barrier_gen == gen) {
      if (group_aborted(g)) return SY_ERR_ABORTED;
      int rc = pthread_cond_timedwait(&g->cond, &g->lock, &deadline);
      if (rc == ETIMEDOUT && g->barrier_gen == gen && !group_aborted(g))
        return fail_round_locked(comm, g, gen, timeout_ms);
    }
  }
  /* The next round cannot complete before this rank enters it, so the verdict is still this round's. */
  snprintf(detail, detail_bytes, "%s", g->round_detail);
  return g->round_status;
}

/* After a failed round: waits until no peer is in its copy phase. Each peer checks the abort between pieces, so
 * this lasts one piece's copy at most; returning earlier would let the caller free a buffer a peer reads, so a
 * piece that outlasts the round's bound is reported (once) and waited for. */
static void wait_copiers_locked(sy_comm_t comm, host_group_t *g, uint64_t timeout_ms) {
  const host_state_t *hs = comm->backend_state;
  struct timespec deadline = deadline_after(timeout_ms);
  int told = 0;
  while (g->copying_count > 0) {
    if (pthread_cond_timedwait(&g->cond, &g->lock, &deadline) != ETIMEDOUT) continue;
    deadline = deadline_after(timeout_ms);
    if (told++) continue;
    int *ranks = malloc((size_t)g->world * sizeof *ranks), n = 0;
    for (int r = 0; ranks && r < g->world; r++)
      if (g->copying[r]) ranks[n++] = r;
    char names[96] = "?";
    if (ranks) format_ranks(names, sizeof names, ranks, n);
    free(ranks);
    SY_WARN(
        "%s: rank %d waits for %s %s to stop copying from peers' buffers (one piece, at most %zu bytes) before it "
        "returns",
        sy__host_op_name(g->slots[hs->rank].op), hs->rank, n > 1 ? "ranks" : "rank", names, SY_HOST_COPY_PIECE);
  }
}

/* The group aborted under this rank: its communicator's error is the group's (the first timeout and its line),
 * not a bare SY_ERR_ABORTED. */
static void adopt_abort_locked(sy_comm_t comm, const host_group_t *g) {
  sy__comm_set_error(comm, (sy_status_t)group_aborted(g), "%s", g->abort_detail);
}

/* One round of the current collective (hs->collective, hs->op), bounded by hs->round_timeout_ms. */
static sy_status_t group_round(sy_comm_t comm, int round, const void *offer) {
  host_state_t *hs = comm->backend_state;
  host_group_t *g = hs->group;
  const uint64_t timeout_ms = hs->round_timeout_ms;
  char detail[sizeof g->round_detail];
  pthread_mutex_lock(&g->lock);
  leave_copy_phase_locked(g, hs->rank);
  sy_status_t st = SY_ERR_ABORTED;
  if (!group_aborted(g)) st = round_wait_locked(comm, g, round, offer, timeout_ms, detail, sizeof detail);
  /* A failed round leaves no peer reading this rank's buffers (the abort is raised: each peer stops). */
  if (st != SY_SUCCESS && st != SY_ERR_MISMATCH) wait_copiers_locked(comm, g, timeout_ms);
  if (st == SY_ERR_ABORTED) adopt_abort_locked(comm, g);
  pthread_mutex_unlock(&g->lock);
  if (st == SY_ERR_MISMATCH) { /* what the call returns: its line replaces the call's own checks' (a local refusal
                                  * logged first, then the peers found in another collective) */
    sy__log_as(SY_LOG_WARN, SY_RECORD_REPLACE, __FILE__, __LINE__, "%s", detail);
    sy__comm_set_error(comm, st, "%s", detail);
  } else if (st == SY_ERR_ABORTED) {
    SY_INFO("%s: group aborted while waiting in the %s round of collective %llu", sy__host_op_name(hs->op),
            round_name(round), (unsigned long long)hs->collective);
  }
  return st;
}

static sy_status_t open_collective(sy_comm_t comm, sy_host_op_t op, int round, const void *mine, uint64_t timeout_ms) {
  host_state_t *hs = comm->backend_state;
  hs->collective++;
  hs->op = (int)op;
  hs->round_timeout_ms = timeout_ms;
  return group_round(comm, round, mine);
}

/* ---- what the backend's other files call (host.h) ---------------------------------------------------------- */

sy_status_t sy__host_exchange_begin(sy_comm_t comm, sy_host_op_t op, const void *mine) {
  return open_collective(comm, op, ROUND_OPEN, mine, comm->timeout_ms);
}

sy_status_t sy__host_exchange_within(sy_comm_t comm, sy_host_op_t op, const void *mine, uint64_t timeout_ms) {
  return open_collective(comm, op, ROUND_OPEN, mine, timeout_ms);
}

/* Written under the group lock before the opening round completed; read after it, in the copy phase. */
const void *sy__host_exchange_slot(sy_comm_t comm, int rank) {
  host_state_t *hs = comm->backend_state;
  return hs->group->slots[rank].offer;
}

int sy__host_copy(void *comm, void *dst, const void *src, size_t bytes) {
  const host_state_t *hs = ((sy_comm_t)comm)->backend_state;
  for (size_t done = 0; done < bytes;) {
    if (group_aborted(hs->group)) return SY_ERR_ABORTED;
    size_t piece = bytes - done < SY_HOST_COPY_PIECE ? bytes - done : SY_HOST_COPY_PIECE;
    memcpy((char *)dst + done, (const char *)src + done, piece);
    done += piece;
  }
  return 0;
}

sy_status_t sy__host_exchange_end(sy_comm_t comm) { return group_round(comm, ROUND_CLOSE, NULL); }

sy_status_t sy__host_sync(sy_comm_t comm, sy_host_op_t op) {
  return open_collective(comm, op, ROUND_SYNC, NULL, comm->timeout_ms);
}

sy_status_t sy__host_barrier(sy_comm_t comm) { return group_round(comm, ROUND_INNER, NULL); }

int sy__host_group_aborted(const host_state_t *hs) { return group_aborted(hs->group); }

sy_status_t sy__host_group_error(const host_state_t *hs, char *detail, size_t detail_bytes) {
  host_group_t *g = hs->group;
  int status = group_aborted(g);
  if (!status) return SY_SUCCESS;
  pthread_mutex_lock(&g->lock);
  if (detail && detail_bytes) snprintf(detail, detail_bytes, "%s", g->abort_detail);
  pthread_mutex_unlock(&g->lock);
  return (sy_status_t)status;
}

sy_status_t sy__host_fail_timeout(sy_comm_t comm, const char *fmt, ...) {
  host_state_t *hs = comm->backend_state;
  char detail[sizeof comm->error_detail];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&hs->group->lock);
  sy_status_t st = fail_timeout_locked(comm, hs->group, "%s", detail);
  pthread_mutex_unlock(&hs->group->lock);
  return st;
}

/* ---- formation (init) and leaving (destroy) ------------------------------------------------------------- */

sy_status_t sy__host_group_join(host_state_t *hs, const sy_resolved_config_t *config) {
  const int key = config->host_group, world = config->world_size, rank = config->rank;
  pthread_mutex_lock(&registry_lock);
  host_group_t *g = registry;
  while (g && g->key != key) g = g->next;
  if (g && g->world != world) {
    int theirs = g->world;
    pthread_mutex_unlock(&registry_lock);
    SY_WARN("init: host group %d is forming with world_size %d, this rank says %d", key, theirs, world);
    return SY_ERR_MISMATCH;
  }
  if (g && g->arrived[rank]) {
    pthread_mutex_unlock(&registry_lock);
    sy__arg_error("sy_comm_init", "config->rank=%d of host group %d is already taken by another thread", rank, key);
    return SY_ERR_INVALID_ARG;
  }
  if (!g) {
    g = group_new(key, world);
    if (!g) {
      pthread_mutex_unlock(&registry_lock);
      return SY_ERR_NO_MEMORY;
    }
    g->next = registry;
    registry = g;
  }
  hs->group = g;
  g->arrived[rank] = 1;
  g->arrived_count++;
  g->members++;
  g->states[rank] = hs;
  if (g->arrived_count == world) {
    g->formed = 1;
    registry_remove_locked(g); /* the key is free again: the next init with it forms a new group */
    pthread_cond_broadcast(&g->form_cond);
  }
  struct timespec deadline = deadline_after(config->boot_timeout_ms);
  while (!g->formed && !g->failed) {
    int rc = pthread_cond_timedwait(&g->form_cond, &registry_lock, &deadline);
    if (rc == ETIMEDOUT && !g->formed && !g->failed) {
      g->failed = 1; /* everyone who arrived leaves; a later init with the key starts afresh */
      registry_remove_locked(g);
      pthread_cond_broadcast(&g->form_cond);
    }
  }
  if (!g->formed) {
    int *missing = malloc((size_t)world * sizeof *missing);
    int n_missing = 0;
    for (int r = 0; missing && r < world; r++)
      if (!g->arrived[r]) missing[n_missing++] = r;
    char names[160];
    format_ranks(names, sizeof names, missing, n_missing);
    free(missing);
    g->states[rank] = NULL;
    hs->group = NULL;
    int last = --g->members == 0;
    pthread_mutex_unlock(&registry_lock);
    SY_WARN("init: host group %d: ranks never arrived within %llu ms (SY_BOOT_TIMEOUT_MS): %s", key,
            (unsigned long long)config->boot_timeout_ms, names);
    if (last) group_free(g);
    return SY_ERR_TIMEOUT;
  }
  pthread_mutex_unlock(&registry_lock);
  SY_INFO("init: host group %d formed, %d ranks", key, world);
  return SY_SUCCESS;
}

void sy__host_group_leave(host_state_t *hs) {
  host_group_t *g = hs->group;
  /* No wait here: this rank's memory stays in the group until the last member leaves, so a peer that is
   * still running (or was aborted mid-put) never writes into freed memory, and destroy cannot hang. */
  pthread_mutex_lock(&registry_lock);
  int last = --g->members == 0;
  if (last) registry_remove_locked(g);
  pthread_mutex_unlock(&registry_lock);
  if (last) {
    SY_TRACE("destroy: last member of host group %d, freeing it", g->key);
    group_free(g);
  }
}
