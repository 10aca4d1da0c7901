/*
 * group.c — the host backend's group: ranks are threads of one process, and a process-wide registry holds the
 * groups still forming, keyed by config->host_group. Once all world_size ranks have arrived the group leaves the
 * registry (the key is free again for a new group) and lives on until its last member destroys its
 * communicator; that last member frees every rank's state and memory, so a peer never touches a buffer freed
 * under it. Collectives exchange through the group: each rank publishes a pointer to its arguments in
 * slots[rank], a barrier, every rank reads all slots, a second barrier. Every wait is bounded; a wait that
 * times out aborts the whole group, so no peer hangs either.
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
  uint64_t *barrier_entered; /* per rank: barriers it has entered */
  const void **slots;        /* per rank: what it published for the current collective */
  int abort_status;          /* atomic; 0 until a wait timed out somewhere */
  char abort_detail[256];
} host_group_t;

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

/* ---- groups: creation, abort, barrier ------------------------------------------------------------------- */

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
  free((void *)g->slots);
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
  int made = 0; /* sync objects initialised so far, in order: lock, cond, form_cond */
  if (g->arrived && g->states && g->barrier_entered && g->slots) {
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
  free((void *)g->slots);
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

/* Generation-counter barrier of the group, bounded by timeout_ms. op names the caller in the error. */
static sy_status_t group_barrier(sy_comm_t comm, const char *op, uint64_t timeout_ms) {
  host_state_t *hs = comm->backend_state;
  host_group_t *g = hs->group;
  pthread_mutex_lock(&g->lock);
  if (group_aborted(g)) {
    pthread_mutex_unlock(&g->lock);
    return SY_ERR_ABORTED;
  }
  uint64_t gen = g->barrier_gen;
  g->barrier_entered[hs->rank] = gen + 1;
  if (++g->barrier_count == g->world) {
    g->barrier_count = 0;
    g->barrier_gen = gen + 1;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
    return SY_SUCCESS;
  }
  struct timespec deadline = deadline_after(timeout_ms);
  sy_status_t st = SY_SUCCESS;
  while (g->barrier_gen == gen) {
    if (group_aborted(g)) {
      st = SY_ERR_ABORTED;
      break;
    }
    int rc = pthread_cond_timedwait(&g->cond, &g->lock, &deadline);
    if (rc == ETIMEDOUT && g->barrier_gen == gen && !group_aborted(g)) {
      int *missing = malloc((size_t)g->world * sizeof *missing);
      int n_missing = 0;
      for (int r = 0; missing && r < g->world; r++)
        if (g->barrier_entered[r] <= gen) missing[n_missing++] = r;
      char names[128];
      format_ranks(names, sizeof names, missing, n_missing);
      free(missing);
      st =
          fail_timeout_locked(comm, g,
                              "%s: rank %d waited %llu ms for barrier %llu of host group %d: expected %d ranks, saw %d "
                              "(missing: %s)",
                              op, hs->rank, (unsigned long long)timeout_ms, (unsigned long long)(gen + 1), g->key,
                              g->world, g->barrier_count, names);
      break;
    }
  }
  pthread_mutex_unlock(&g->lock);
  if (st == SY_ERR_ABORTED) SY_INFO("%s: group aborted while waiting at a barrier", op);
  return st;
}

/* First half of an exchange: publish `mine`, wait for every rank; then read peers' slots through
 * exchange_slots(). The caller must end the exchange with group_barrier before `mine` goes out of scope. */
static sy_status_t exchange_begin(sy_comm_t comm, const char *op, const void *mine, uint64_t timeout_ms) {
  host_state_t *hs = comm->backend_state;
  hs->group->slots[hs->rank] = mine; /* read by peers only after the barrier (the group lock orders it) */
  return group_barrier(comm, op, timeout_ms);
}

static const void *exchange_slot(sy_comm_t comm, int rank) {
  host_state_t *hs = comm->backend_state;
  return hs->group->slots[rank];
}

/* ---- what the backend's other files call (host.h) ---------------------------------------------------------- */
sy_status_t sy__host_exchange_begin(sy_comm_t comm, const char *op, const void *mine) {
  return exchange_begin(comm, op, mine, comm->timeout_ms);
}

const void *sy__host_exchange_slot(sy_comm_t comm, int rank) { return exchange_slot(comm, rank); }

sy_status_t sy__host_barrier(sy_comm_t comm, const char *op) { return group_barrier(comm, op, comm->timeout_ms); }

sy_status_t sy__host_group_barrier(sy_comm_t comm, const char *op, uint64_t timeout_ms) {
  return group_barrier(comm, op, timeout_ms);
}

sy_status_t sy__host_exchange_within(sy_comm_t comm, const char *op, const void *mine, uint64_t timeout_ms) {
  return exchange_begin(comm, op, mine, timeout_ms);
}

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
