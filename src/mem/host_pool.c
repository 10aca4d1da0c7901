/*
 * host_pool.c — sy_host_pool_*: a ring of pinned host slots for host-to-device staging (switchyard.h,
 * "Orchestration"). A slot is free, held by the host (acquired), or given back on a stream (its host function
 * not yet run). The host function the stream runs (cudaLaunchHostFunc) only takes the lock, marks the slot free
 * and wakes a waiter — no CUDA call, no allocation. The host waits for a slot only when none is free, on a
 * condition variable, bounded by the communicator's timeout.
 */
#include "mem/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SLOT_FREE = 0, SLOT_HELD = 1, SLOT_ON_STREAM = 2 };
#define SLOT_ALIGN 256
#define MAX_SLOTS  1024

typedef struct slot_cb {
  struct sy_host_pool *pool;
  int index;
} slot_cb_t;

struct sy_host_pool {
  sy_comm_t comm;
  sy_backend_t backend;
  char *base;
  size_t slot_bytes, stride;
  int slots, free_count, next;
  uint64_t timeout_ms;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a slot came free */
  unsigned char *state;
  slot_cb_t *cbs;
  uint64_t acquires, waits, wait_ns;
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void slot_free_locked(struct sy_host_pool *p, int i) {
  p->state[i] = SLOT_FREE;
  p->free_count++;
  pthread_cond_broadcast(&p->cv);
}

/* Run by the stream when it reaches the release: the GPU is done with the slot. */
static void slot_back(void *arg) {
  slot_cb_t *cb = (slot_cb_t *)arg;
  pthread_mutex_lock(&cb->pool->mu);
  slot_free_locked(cb->pool, cb->index);
  pthread_mutex_unlock(&cb->pool->mu);
}

static void free_memory(struct sy_host_pool *p) {
  if (p->base) {
    if (p->backend == SY_BACKEND_CUDA) sy__cuda_pinned_free(p->base);
    else free(p->base);
  }
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
  free(p->state);
  free(p->cbs);
  free(p);
}

sy_status_t sy_host_pool_create(sy_comm_t comm, const sy_host_pool_config_t *config, sy_host_pool_t *pool) {
  static const char *fn = "sy_host_pool_create";
  SY_ARG_CHECK(pool != NULL, fn, "pool is NULL");
  *pool = NULL; /* first: a rejection of any argument, the communicator's included, leaves no stale handle */
  SY_COMM_GUARD(comm, fn);
  SY_ARG_CHECK(config != NULL, fn, "config is NULL (set slot_bytes: it has no default)");
  sy_host_pool_config_t c = SY_HOST_POOL_CONFIG_INIT;
  SY_ARG_CHECK(config->size >= sizeof(size_t) && config->size <= sizeof c, fn,
               "config->size=%zu: set it with SY_HOST_POOL_CONFIG_INIT (sizeof is %zu)", config->size, sizeof c);
  memcpy(&c, config, config->size);
  SY_ARG_CHECK(c.slot_bytes > 0, fn, "config->slot_bytes is 0");
  SY_ARG_CHECK(c.slots >= 1 && c.slots <= MAX_SLOTS, fn, "config->slots=%d outside [1, %d]", c.slots, MAX_SLOTS);
  SY_ARG_CHECK(c.slot_bytes <= (SIZE_MAX / 2) / (size_t)c.slots, fn, "config->slot_bytes=%zu x slots=%d overflows",
               c.slot_bytes, c.slots);
  struct sy_host_pool *p = calloc(1, sizeof *p);
  if (!p) return SY_ERR_NO_MEMORY;
  p->comm = comm;
  p->backend = comm->backend;
  p->slot_bytes = c.slot_bytes;
  p->stride = (c.slot_bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
  p->slots = p->free_count = c.slots;
  /* the waits' bound; clamped so that a huge timeout (meaning "forever") does not wrap the deadline */
  p->timeout_ms = comm->timeout_ms < (UINT64_MAX / 4) / 1000000ull ? comm->timeout_ms : (UINT64_MAX / 4) / 1000000ull;
  pthread_mutex_init(&p->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv, &attr);
  pthread_condattr_destroy(&attr);
  p->state = calloc((size_t)c.slots, 1);
  p->cbs = calloc((size_t)c.slots, sizeof *p->cbs);
  sy_status_t st = p->state && p->cbs ? SY_SUCCESS : SY_ERR_NO_MEMORY;
  const size_t bytes = p->stride * (size_t)c.slots;
  if (st == SY_SUCCESS && p->backend == SY_BACKEND_CUDA) {
    st = sy__cuda_pinned_alloc(bytes, (void **)&p->base);
  } else if (st == SY_SUCCESS) {
    p->base = aligned_alloc(SLOT_ALIGN, bytes);
    if (!p->base) st = SY_ERR_NO_MEMORY;
  }
  if (st != SY_SUCCESS) {
    SY_WARN("sy_host_pool_create: %d slots of %zu bytes (%zu bytes%s): out of host memory", c.slots, c.slot_bytes,
            bytes, p->backend == SY_BACKEND_CUDA ? " pinned" : "");
    p->base = NULL; /* nothing was allocated */
    free_memory(p);
    return st;
  }
  for (int i = 0; i < c.slots; i++) p->cbs[i] = (slot_cb_t){p, i};
  *pool = p;
  return SY_SUCCESS;
}

sy_status_t sy_host_pool_destroy(sy_host_pool_t pool) {
  if (!pool) return SY_SUCCESS;
  sy__last_error_clear(); /* no guard: accepted after an error */
  const uint64_t deadline = now_ns() + pool->timeout_ms * 1000000ull;
  pthread_mutex_lock(&pool->mu);
  int pending = 0;
  for (;;) {
    pending = 0;
    for (int i = 0; i < pool->slots; i++) pending += pool->state[i] == SLOT_ON_STREAM;
    if (!pending || now_ns() >= deadline) break;
    struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
    pthread_cond_timedwait(&pool->cv, &pool->mu, &ts);
  }
  pthread_mutex_unlock(&pool->mu);
  if (pending) {
    SY_WARN(
        "sy_host_pool_destroy: %d slots given back on streams did not come back in %llu ms; leaking the pool "
        "rather than freeing memory the GPU may still read",
        pending, (unsigned long long)pool->timeout_ms);
    return SY_ERR_TIMEOUT;
  }
  int held = 0;
  for (int i = 0; i < pool->slots; i++) held += pool->state[i] == SLOT_HELD;
  if (held) /* the host's own: freed all the same, but the caller may still hold the pointers */
    SY_WARN("sy_host_pool_destroy: %d slots acquired and never released are freed with the pool", held);
  free_memory(pool);
  return SY_SUCCESS;
}

sy_status_t sy_host_pool_acquire(sy_host_pool_t pool, void **slot) {
  static const char *fn = "sy_host_pool_acquire";
  if (slot) *slot = NULL; /* first: a refusal or a timeout leaves no stale slot */
  SY_ARG_CHECK(pool != NULL, fn, "pool is NULL");
  SY_COMM_GUARD(pool->comm, fn);
  SY_ARG_CHECK(slot != NULL, fn, "slot is NULL");
  pthread_mutex_lock(&pool->mu);
  if (pool->free_count == 0) {
    const uint64_t t0 = now_ns(), deadline = t0 + pool->timeout_ms * 1000000ull;
    pool->waits++;
    while (pool->free_count == 0 && now_ns() < deadline) {
      struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
      if (pthread_cond_timedwait(&pool->cv, &pool->mu, &ts) == ETIMEDOUT) break;
    }
    pool->wait_ns += now_ns() - t0;
    if (pool->free_count == 0) {
      pthread_mutex_unlock(&pool->mu);
      SY_WARN(
          "sy_host_pool_acquire: no slot of %d came back in %llu ms (each held by the host, or given back on a "
          "stream that has not reached the release)",
          pool->slots, (unsigned long long)pool->timeout_ms);
      return SY_ERR_TIMEOUT;
    }
  }
  int i = pool->next;
  while (pool->state[i] != SLOT_FREE) i = (i + 1) % pool->slots;
  pool->next = (i + 1) % pool->slots;
  pool->state[i] = SLOT_HELD;
  pool->free_count--;
  pool->acquires++;
  pthread_mutex_unlock(&pool->mu);
  *slot = pool->base + (size_t)i * pool->stride;
  return SY_SUCCESS;
}

sy_status_t sy_host_pool_release(sy_host_pool_t pool, void *slot, cudaStream_t stream) {
  static const char *fn = "sy_host_pool_release";
  SY_ARG_CHECK(pool != NULL, fn, "pool is NULL");
  SY_ARG_CHECK(pool->backend != SY_BACKEND_CUDA || stream != cudaStreamLegacy, fn,
               "stream is cudaStreamLegacy (the legacy default stream); pass a stream you created, or NULL to give "
               "the slot back at once");
  const uintptr_t at = (uintptr_t)slot, base = (uintptr_t)pool->base;
  const size_t k = at >= base && (at - base) % pool->stride == 0 ? (at - base) / pool->stride : SIZE_MAX;
  const int i = k < (size_t)pool->slots ? (int)k : -1; /* compared before the cast: no wild pointer aliases a slot */
  pthread_mutex_lock(&pool->mu);
  const bool held = i >= 0 && i < pool->slots && pool->state[i] == SLOT_HELD;
  if (held && (stream == NULL || pool->backend != SY_BACKEND_CUDA)) slot_free_locked(pool, i);
  else if (held) pool->state[i] = SLOT_ON_STREAM; /* before the host function can run */
  pthread_mutex_unlock(&pool->mu);
  SY_ARG_CHECK(held, fn, "slot=%p is not a slot of this pool held by the host (never acquired, or released already)",
               slot);
  if (stream == NULL || pool->backend != SY_BACKEND_CUDA) return SY_SUCCESS;
  const sy_status_t st = sy__cuda_host_func(stream, slot_back, &pool->cbs[i], fn);
  if (st != SY_SUCCESS) { /* nothing enqueued: the host still holds it */
    pthread_mutex_lock(&pool->mu);
    pool->state[i] = SLOT_HELD;
    pthread_mutex_unlock(&pool->mu);
  }
  return st;
}

sy_status_t sy_host_pool_stats(sy_host_pool_t pool, sy_host_pool_stats_t *stats) {
  static const char *fn = "sy_host_pool_stats";
  SY_ARG_CHECK(pool != NULL, fn, "pool is NULL");
  SY_ARG_CHECK(stats != NULL, fn, "stats is NULL");
  SY_ARG_CHECK(stats->size >= sizeof(size_t) && stats->size <= sizeof *stats, fn,
               "stats->size=%zu: set it with SY_HOST_POOL_STATS_INIT (sizeof is %zu)", stats->size, sizeof *stats);
  sy_host_pool_stats_t s = SY_HOST_POOL_STATS_INIT;
  pthread_mutex_lock(&pool->mu);
  s.slots = pool->slots;
  s.free_slots = pool->free_count;
  s.acquires = pool->acquires;
  s.waits = pool->waits;
  s.wait_ns = pool->wait_ns;
  pthread_mutex_unlock(&pool->mu);
  const size_t size = stats->size;
  memcpy(stats, &s, size);
  stats->size = size;
  return SY_SUCCESS;
}

sy_comm_t sy__host_pool_comm(sy_host_pool_t pool) { return pool->comm; }
size_t sy__host_pool_slot_bytes(sy_host_pool_t pool) { return pool->slot_bytes; }
