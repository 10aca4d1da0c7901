/*
 * host_backend.c — the `host` backend: ranks are threads of one process, the "symmetric heap" is ordinary
 * memory every thread can see, and every operation is a plain C loop (the all-to-all copy is src/ref's
 * reference executor). It is the oracle the GPU tests compare against and what CI runs, so it keeps the
 * header's semantics exactly: collectives agree on their arguments or fail on every rank with nothing done,
 * and every wait is bounded; a wait that times out aborts the whole group so no peer hangs either.
 *
 * Shape: a process-wide registry of forming groups keyed by config->host_group. Once all world_size ranks
 * have arrived the group leaves the registry (the key is free again for a new group) and lives on until its
 * last member destroys its communicator; that last member frees every rank's memory, so a peer can never
 * touch a buffer freed under it. Collectives exchange through the group: each rank publishes a pointer to
 * its arguments in slots[rank], a barrier, every rank reads all slots, a second barrier.
 */
#include "core/internal.h"
#include "ref/host_internal.h"
#include "ref/moe_ref.h"
#include "ref/ref.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HOST_ALIGN 256
#define HOST_POISON 0xA5 /* fresh allocations: contents are undefined, and must not look like zeros */

typedef struct host_state host_state_t;

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

/* One symmetric allocation: every rank's copy, in the order the collective allocations happened. */
typedef struct host_block {
  void **ptrs; /* world entries; ptrs[rank] is this rank's */
  size_t bytes, reserved;
  uint64_t seq;
} host_block_t;

struct host_state {
  host_group_t *group;
  int rank, world;
  uint64_t boot_timeout_ms;
  size_t heap_bytes, heap_used;
  host_block_t *blocks;
  int block_count, block_capacity;
  uint64_t alloc_seq, wait_calls, a2a_calls;
  /* alltoallv scratch: world x world matrices and the senders' buffers */
  size_t *a2a_send_bytes, *a2a_send_offsets;
  const void **a2a_send;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static host_group_t *registry;

/* ---- clocks ------------------------------------------------------------------------------------------ */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct timespec deadline_after(uint64_t ms) {
  uint64_t t = now_ns();
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

static void state_free(host_state_t *hs) {
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
    state_free(hs);
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
      st = fail_timeout_locked(comm, g,
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

/* The exchange for the backend's other files (host_internal.h), bounded by the communicator's timeout. */
sy_status_t sy__host_exchange_begin(sy_comm_t comm, const char *op, const void *mine) {
  return exchange_begin(comm, op, mine, comm->timeout_ms);
}

const void *sy__host_exchange_slot(sy_comm_t comm, int rank) { return exchange_slot(comm, rank); }

sy_status_t sy__host_barrier(sy_comm_t comm, const char *op) { return group_barrier(comm, op, comm->timeout_ms); }

/* ---- symmetric blocks ------------------------------------------------------------------------------------- */

static host_block_t *block_containing(host_state_t *hs, const void *ptr, size_t *offset) {
  uintptr_t p = (uintptr_t)ptr;
  for (int i = 0; i < hs->block_count; i++) {
    uintptr_t base = (uintptr_t)hs->blocks[i].ptrs[hs->rank];
    if (p >= base && p - base < hs->blocks[i].bytes) {
      *offset = (size_t)(p - base);
      return &hs->blocks[i];
    }
  }
  return NULL;
}

/* ptr as peer sees it, or NULL when ptr is not inside one of this rank's symmetric allocations. */
static void *translate(host_state_t *hs, const void *ptr, int peer) {
  size_t offset;
  host_block_t *b = block_containing(hs, ptr, &offset);
  return b ? (char *)b->ptrs[peer] + offset : NULL;
}

/* ---- ops ---------------------------------------------------------------------------------------------- */

static sy_status_t host_destroy(sy_comm_t comm) {
  host_state_t *hs = comm->backend_state;
  if (!hs) return SY_SUCCESS;
  host_group_t *g = hs->group;
  comm->backend_state = NULL;
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
  return SY_SUCCESS;
}

typedef struct alloc_offer {
  size_t bytes;
  void *ptr;
  sy_status_t status;
} alloc_offer_t;

static sy_status_t host_mem_alloc(sy_comm_t comm, size_t bytes, void **ptr) {
  host_state_t *hs = comm->backend_state;
  const int world = hs->world;
  alloc_offer_t offer = {bytes, NULL, SY_SUCCESS};
  void **ptrs = NULL;
  /* Everything that can fail locally happens before the exchange, so the group decides once, together. */
  size_t reserved = bytes <= SIZE_MAX - (HOST_ALIGN - 1) ? (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN : 0;
  if (reserved == 0 || reserved > hs->heap_bytes - hs->heap_used) {
    SY_INFO("mem_alloc: %zu bytes do not fit the symmetric heap (%zu of %zu bytes in use)", bytes, hs->heap_used,
            hs->heap_bytes);
    offer.status = SY_ERR_NO_MEMORY;
  } else if (hs->block_count == hs->block_capacity) {
    int cap = hs->block_capacity ? 2 * hs->block_capacity : 8;
    host_block_t *grown = realloc(hs->blocks, (size_t)cap * sizeof *grown);
    if (grown) {
      hs->blocks = grown;
      hs->block_capacity = cap;
    } else {
      offer.status = SY_ERR_NO_MEMORY;
    }
  }
  if (offer.status == SY_SUCCESS) {
    ptrs = calloc((size_t)world, sizeof *ptrs);
    offer.ptr = aligned_alloc(HOST_ALIGN, reserved);
    if (!ptrs || !offer.ptr) offer.status = SY_ERR_NO_MEMORY;
    else memset(offer.ptr, HOST_POISON, reserved);
  }

  sy_status_t st = exchange_begin(comm, "mem_alloc", &offer, comm->timeout_ms);
  if (st == SY_SUCCESS) {
    sy_status_t verdict = SY_SUCCESS;
    int failed_rank = -1;
    for (int r = 0; r < world; r++) {
      const alloc_offer_t *o = exchange_slot(comm, r);
      if (o->bytes != bytes) {
        verdict = SY_ERR_MISMATCH;
      } else if (o->status != SY_SUCCESS && verdict == SY_SUCCESS) {
        verdict = o->status;
        failed_rank = r;
      }
      if (ptrs) ptrs[r] = o->ptr;
    }
    if (verdict == SY_ERR_MISMATCH) {
      char sizes[200];
      size_t n = 0;
      sizes[0] = '\0';
      for (int r = 0; r < world && n < sizeof sizes - 24; r++) {
        const alloc_offer_t *o = exchange_slot(comm, r);
        n += (size_t)snprintf(sizes + n, sizeof sizes - n, "%s%d:%zu", r ? " " : "", r, o->bytes);
      }
      SY_WARN("mem_alloc: ranks disagree on the size (rank:bytes %s%s); nothing allocated", sizes,
              n >= sizeof sizes - 24 && world > 1 ? " ..." : "");
    } else if (verdict != SY_SUCCESS) {
      SY_WARN("mem_alloc: rank %d could not allocate %zu bytes (%s: symmetric heap of %zu bytes, %zu in use); "
              "nothing allocated", failed_rank, bytes, sy_status_name(verdict), hs->heap_bytes, hs->heap_used);
    }
    st = group_barrier(comm, "mem_alloc", comm->timeout_ms);
    if (st == SY_SUCCESS) st = verdict;
  }
  if (st != SY_SUCCESS) {
    free(offer.ptr);
    free(ptrs);
    return st;
  }
  host_block_t *b = &hs->blocks[hs->block_count++];
  b->ptrs = ptrs;
  b->bytes = bytes;
  b->reserved = reserved;
  b->seq = hs->alloc_seq++;
  hs->heap_used += reserved;
  *ptr = offer.ptr;
  SY_TRACE("mem_alloc: %zu bytes at %p (allocation %llu)", bytes, offer.ptr, (unsigned long long)b->seq);
  return SY_SUCCESS;
}

static sy_status_t host_mem_free(sy_comm_t comm, void *ptr) {
  host_state_t *hs = comm->backend_state;
  int index = -1;
  for (int i = 0; i < hs->block_count; i++)
    if (hs->blocks[i].ptrs[hs->rank] == ptr) index = i;
  if (index < 0) {
    SY_WARN("mem_free: %p is not a symmetric allocation of this communicator", ptr);
    return SY_ERR_INVALID_ARG;
  }
  uint64_t seq = hs->blocks[index].seq;
  /* Every rank must free the same allocation; after the exchange no peer is still inside an earlier call
   * that could touch it. */
  SY_CHECK(exchange_begin(comm, "mem_free", &seq, comm->timeout_ms));
  sy_status_t verdict = SY_SUCCESS;
  for (int r = 0; r < hs->world; r++) {
    uint64_t theirs = *(const uint64_t *)exchange_slot(comm, r);
    if (theirs != seq) {
      if (verdict == SY_SUCCESS)
        SY_WARN("mem_free: rank %d frees allocation %llu while this rank frees allocation %llu; nothing freed", r,
                (unsigned long long)theirs, (unsigned long long)seq);
      verdict = SY_ERR_MISMATCH;
    }
  }
  SY_CHECK(group_barrier(comm, "mem_free", comm->timeout_ms));
  if (verdict != SY_SUCCESS) return verdict;
  host_block_t *b = &hs->blocks[index];
  hs->heap_used -= b->reserved;
  free(b->ptrs[hs->rank]);
  free(b->ptrs);
  /* Keep allocation order: a stable order (the order of the collective calls) eases debugging. */
  memmove(b, b + 1, (size_t)(hs->block_count - index - 1) * sizeof *b);
  hs->block_count--;
  return SY_SUCCESS;
}

static sy_status_t host_peer_ptr(sy_comm_t comm, const void *ptr, int peer, void **peer_ptr) {
  void *p = translate(comm->backend_state, ptr, peer);
  if (!p) {
    SY_WARN("peer_ptr: %p is in no symmetric allocation of the host backend", ptr);
    return SY_ERR_INTERNAL; /* comm.c checked it against the same allocations */
  }
  *peer_ptr = p;
  return SY_SUCCESS;
}

static sy_status_t host_barrier(sy_comm_t comm, cudaStream_t stream) {
  return group_barrier(comm, "barrier", comm->timeout_ms);
}

static sy_status_t host_put_signal(sy_comm_t comm, void *dst, const void *src, size_t bytes, uint64_t *signal,
                                   sy_signal_op_t op, uint64_t value, int peer, cudaStream_t stream) {
  host_state_t *hs = comm->backend_state;
  uint64_t *peer_signal = translate(hs, signal, peer);
  void *peer_dst = bytes ? translate(hs, dst, peer) : NULL;
  if (!peer_signal || (bytes && !peer_dst)) {
    SY_WARN("put_signal: dst=%p or signal=%p is in no symmetric allocation of the host backend", dst, (void *)signal);
    return SY_ERR_INTERNAL;
  }
  if (bytes) memmove(peer_dst, src, bytes);
  /* Release: the data above is visible to whoever acquires the signal. */
  if (op == SY_SIGNAL_SET) __atomic_store_n(peer_signal, value, __ATOMIC_RELEASE);
  else __atomic_fetch_add(peer_signal, value, __ATOMIC_RELEASE);
  return SY_SUCCESS;
}

static sy_status_t host_signal_wait(sy_comm_t comm, uint64_t *signal, uint64_t value, cudaStream_t stream) {
  host_state_t *hs = comm->backend_state;
  host_group_t *g = hs->group;
  uint64_t call = ++hs->wait_calls;
  uint64_t start = now_ns();
  uint64_t limit_ns = comm->timeout_ms > UINT64_MAX / 1000000ull ? UINT64_MAX : comm->timeout_ms * 1000000ull;
  for (unsigned polls = 0;; polls++) {
    uint64_t seen = __atomic_load_n(signal, __ATOMIC_ACQUIRE);
    if (seen >= value) return SY_SUCCESS;
    if (group_aborted(g)) {
      SY_INFO("signal_wait: group aborted while waiting for %llu (saw %llu)", (unsigned long long)value,
              (unsigned long long)seen);
      return SY_ERR_ABORTED;
    }
    if (polls < 64) continue; /* a short spin: the put is usually already on its way */
    if (polls < 1024) {
      sched_yield();
    } else {
      struct timespec nap = {0, 50 * 1000};
      nanosleep(&nap, NULL);
    }
    if (now_ns() - start >= limit_ns) {
      seen = __atomic_load_n(signal, __ATOMIC_ACQUIRE);
      if (seen >= value) return SY_SUCCESS;
      size_t offset = 0;
      host_block_t *b = block_containing(hs, signal, &offset);
      pthread_mutex_lock(&g->lock);
      sy_status_t st = fail_timeout_locked(
          comm, g, "signal_wait: rank %d waited %llu ms (call %llu) for signal %p (allocation %llu, offset %zu): "
                   "expected >= %llu, saw %llu",
          hs->rank, (unsigned long long)comm->timeout_ms, (unsigned long long)call, (void *)signal,
          b ? (unsigned long long)b->seq : 0ull, offset, (unsigned long long)value, (unsigned long long)seen);
      pthread_mutex_unlock(&g->lock);
      return st;
    }
  }
}

/* Logs up to a few disagreeing pairs; returns how many pairs disagree. */
static int a2a_check_pairs(sy_comm_t comm) {
  host_state_t *hs = comm->backend_state;
  const int world = hs->world;
  int bad = 0;
  char pairs[320];
  size_t n = 0;
  pairs[0] = '\0';
  for (int s = 0; s < world; s++) {
    const sy_a2a_args_t *sender = exchange_slot(comm, s);
    for (int p = 0; p < world; p++) {
      const sy_a2a_args_t *receiver = exchange_slot(comm, p);
      if (sender->send_bytes[p] == receiver->recv_bytes[s]) continue;
      if (bad < 4 && n < sizeof pairs) {
        int w = snprintf(pairs + n, sizeof pairs - n, "%srank %d sends %zu bytes to rank %d, which expects %zu",
                         bad ? "; " : "", s, sender->send_bytes[p], p, receiver->recv_bytes[s]);
        if (w > 0) n += (size_t)w;
      }
      bad++;
    }
  }
  if (bad)
    SY_WARN("alltoallv: call %llu: %d pair(s) of ranks disagree on the byte counts (%s%s); nothing copied",
            (unsigned long long)hs->a2a_calls, bad, pairs, bad > 4 ? "; ..." : "");
  return bad;
}

static sy_status_t host_alltoallv(sy_comm_t comm, const sy_a2a_args_t *args, cudaStream_t stream) {
  host_state_t *hs = comm->backend_state;
  const int world = hs->world;
  hs->a2a_calls++;
  SY_CHECK(exchange_begin(comm, "alltoallv", args, comm->timeout_ms));
  /* Every rank sees the same published arguments, so every rank reaches the same verdict. */
  sy_status_t verdict = a2a_check_pairs(comm) ? SY_ERR_MISMATCH : SY_SUCCESS;
  /* Sticky, as on the cuda backend, where the kernel reports it through the error slot. */
  if (verdict != SY_SUCCESS)
    sy__comm_set_error(comm, verdict, "alltoallv: call %llu: ranks disagree on the byte counts of a pair (see log)",
                       (unsigned long long)hs->a2a_calls);
  if (verdict == SY_SUCCESS) {
    for (int s = 0; s < world; s++) {
      const sy_a2a_args_t *sender = exchange_slot(comm, s);
      hs->a2a_send[s] = sender->send;
      memcpy(hs->a2a_send_bytes + (size_t)s * world, sender->send_bytes, (size_t)world * sizeof(size_t));
      memcpy(hs->a2a_send_offsets + (size_t)s * world, sender->send_offsets, (size_t)world * sizeof(size_t));
    }
    sy__ref_alltoallv_recv(world, hs->rank, hs->a2a_send, hs->a2a_send_bytes, hs->a2a_send_offsets, args->recv,
                           args->recv_offsets);
  }
  /* No sender returns (and reuses its send buffer or arguments) before every receiver has copied. */
  SY_CHECK(group_barrier(comm, "alltoallv", comm->timeout_ms));
  return verdict;
}

typedef struct gather_offer {
  const void *send;
  size_t bytes;
} gather_offer_t;

static sy_status_t host_allgather_host(sy_comm_t comm, const void *send, void *recv, size_t bytes) {
  host_state_t *hs = comm->backend_state;
  gather_offer_t offer = {send, bytes};
  /* The header bounds this call by the bootstrap timeout, as on the cuda backend. */
  SY_CHECK(exchange_begin(comm, "allgather_host", &offer, hs->boot_timeout_ms));
  sy_status_t verdict = SY_SUCCESS;
  for (int r = 0; r < hs->world; r++) {
    const gather_offer_t *o = exchange_slot(comm, r);
    if (o->bytes != bytes) {
      if (verdict == SY_SUCCESS)
        SY_WARN("allgather_host: rank %d contributes %zu bytes, this rank %zu; nothing copied", r, o->bytes, bytes);
      verdict = SY_ERR_MISMATCH;
    }
  }
  if (verdict == SY_SUCCESS) {
    for (int r = 0; r < hs->world; r++) {
      const gather_offer_t *o = exchange_slot(comm, r);
      memcpy((char *)recv + (size_t)r * bytes, o->send, bytes);
    }
  }
  SY_CHECK(group_barrier(comm, "allgather_host", hs->boot_timeout_ms));
  return verdict;
}

static sy_status_t host_poll_error(sy_comm_t comm, char *detail, size_t detail_bytes) {
  host_state_t *hs = comm->backend_state;
  host_group_t *g = hs->group;
  int status = group_aborted(g);
  if (!status) return SY_SUCCESS;
  pthread_mutex_lock(&g->lock);
  if (detail && detail_bytes) snprintf(detail, detail_bytes, "%s", g->abort_detail);
  pthread_mutex_unlock(&g->lock);
  return (sy_status_t)status;
}

static const sy_backend_ops_t host_ops = {
    .name = "host",
    .destroy = host_destroy,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .peer_ptr = host_peer_ptr,
    .barrier = host_barrier,
    .put_signal = host_put_signal,
    .signal_wait = host_signal_wait,
    .alltoallv = host_alltoallv,
    .allgather_host = host_allgather_host,
    .poll_error = host_poll_error,
    .attn_create = sy__host_attn_create,
    .attn_destroy = sy__host_attn_destroy,
    .attn_plan_upload = sy__host_attn_plan_upload,
    .attn_run = sy__host_attn_run,
    .moe_create = sy__host_moe_create,
    .moe_destroy = sy__host_moe_destroy,
    .moe_dispatch_send = sy__host_moe_dispatch_send,
    .moe_dispatch_recv = sy__host_moe_dispatch_recv,
    .moe_combine_send = sy__host_moe_combine_send,
    .moe_combine_recv = sy__host_moe_combine_recv,
};

/* ---- init: the rendezvous ------------------------------------------------------------------------------- */

static host_state_t *state_new(const sy_resolved_config_t *config) {
  const size_t world = (size_t)config->world_size;
  host_state_t *hs = calloc(1, sizeof *hs);
  if (!hs) return NULL;
  hs->rank = config->rank;
  hs->world = config->world_size;
  hs->boot_timeout_ms = config->boot_timeout_ms;
  hs->heap_bytes = config->heap_bytes;
  if (world <= SIZE_MAX / sizeof(size_t) / world) {
    hs->a2a_send_bytes = malloc(world * world * sizeof(size_t));
    hs->a2a_send_offsets = malloc(world * world * sizeof(size_t));
  }
  hs->a2a_send = malloc(world * sizeof *hs->a2a_send);
  if (!hs->a2a_send_bytes || !hs->a2a_send_offsets || !hs->a2a_send) {
    state_free(hs);
    return NULL;
  }
  return hs;
}

sy_status_t sy__host_comm_init(sy_comm_t comm, const sy_resolved_config_t *config) {
  const int key = config->host_group, world = config->world_size, rank = config->rank;
  host_state_t *hs = state_new(config);
  if (!hs) return SY_ERR_NO_MEMORY;

  pthread_mutex_lock(&registry_lock);
  host_group_t *g = registry;
  while (g && g->key != key) g = g->next;
  if (g && g->world != world) {
    int theirs = g->world;
    pthread_mutex_unlock(&registry_lock);
    SY_WARN("init: host group %d is forming with world_size %d, this rank says %d", key, theirs, world);
    state_free(hs);
    return SY_ERR_MISMATCH;
  }
  if (g && g->arrived[rank]) {
    pthread_mutex_unlock(&registry_lock);
    sy__arg_error("sy_comm_init", "config->rank=%d of host group %d is already taken by another thread", rank, key);
    state_free(hs);
    return SY_ERR_INVALID_ARG;
  }
  if (!g) {
    g = group_new(key, world);
    if (!g) {
      pthread_mutex_unlock(&registry_lock);
      state_free(hs);
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
    int last = --g->members == 0;
    pthread_mutex_unlock(&registry_lock);
    SY_WARN("init: host group %d: ranks never arrived within %llu ms (SY_BOOT_TIMEOUT_MS): %s", key,
            (unsigned long long)config->boot_timeout_ms, names);
    state_free(hs);
    if (last) group_free(g);
    return SY_ERR_TIMEOUT;
  }
  pthread_mutex_unlock(&registry_lock);
  comm->ops = &host_ops;
  comm->backend_state = hs;
  comm->device = -1;
  SY_INFO("init: host group %d formed, %d ranks", key, world);
  return SY_SUCCESS;
}
