/*
 * pool.c — sy_pool_*: stream-ordered device memory (switchyard.h, "Orchestration"). The public calls check their
 * arguments and keep the pool's live allocations (pointer -> bytes, an open-addressing table), so a free of a
 * pointer the pool never gave out, or gave out and already took back, is refused before anything is enqueued.
 * The cuda backend allocates from a cudaMemPool (src/cuda/pool.cu); the host backend from the C heap, given back
 * at free.
 */
#include "mem/pool.h"

#include <stdlib.h>
#include <string.h>

#define POOL_ALIGN 256
#define TOMBSTONE  ((void *)1)

typedef struct live_entry {
  void *ptr; /* NULL: empty; TOMBSTONE: erased */
  size_t bytes;
} live_entry_t;

struct sy_pool {
  sy_comm_t comm; /* for the guard of alloc; free, stats and destroy never read it (it may be gone then) */
  int rank;       /* the log's */
  int refs;       /* the caller's, and one for each attention plan holding memory from the pool */
  sy_backend_t backend;
  void *handle; /* cuda: the cudaMemPool_t */
  live_entry_t *live;
  size_t cap, count, tombs; /* cap a power of two */
  size_t used, used_high;   /* the host backend's usage (the cuda backend asks its pool) */
  uint64_t allocs, frees;
};

static size_t slot_of(const void *ptr, size_t cap) {
  uint64_t h = (uint64_t)(uintptr_t)ptr * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 17) & (cap - 1);
}

static live_entry_t *live_find(sy_pool_t pool, const void *ptr) {
  if (!pool->cap || ptr == NULL || ptr == TOMBSTONE) return NULL; /* neither is ever an allocation */
  for (size_t i = slot_of(ptr, pool->cap), n = 0; n < pool->cap; i = (i + 1) & (pool->cap - 1), n++) {
    if (pool->live[i].ptr == NULL) return NULL;
    if (pool->live[i].ptr == ptr) return &pool->live[i];
  }
  return NULL;
}

static sy_status_t live_grow(sy_pool_t pool) {
  const size_t cap = pool->cap ? (pool->count * 4 > pool->cap ? pool->cap * 2 : pool->cap) : 64;
  live_entry_t *t = calloc(cap, sizeof *t);
  if (!t) return SY_ERR_NO_MEMORY;
  for (size_t i = 0; i < pool->cap; i++) {
    void *p = pool->live[i].ptr;
    if (p == NULL || p == TOMBSTONE) continue;
    size_t j = slot_of(p, cap);
    while (t[j].ptr) j = (j + 1) & (cap - 1);
    t[j] = pool->live[i];
  }
  free(pool->live);
  pool->live = t;
  pool->cap = cap;
  pool->tombs = 0;
  return SY_SUCCESS;
}

static sy_status_t live_add(sy_pool_t pool, void *ptr, size_t bytes) {
  if ((pool->count + pool->tombs + 1) * 2 > pool->cap) SY_CHECK(live_grow(pool));
  size_t i = slot_of(ptr, pool->cap);
  while (pool->live[i].ptr && pool->live[i].ptr != TOMBSTONE) i = (i + 1) & (pool->cap - 1);
  if (pool->live[i].ptr == TOMBSTONE) pool->tombs--;
  pool->live[i].ptr = ptr;
  pool->live[i].bytes = bytes;
  pool->count++;
  return SY_SUCCESS;
}

sy_status_t sy_pool_create(sy_comm_t comm, const sy_pool_config_t *config, sy_pool_t *pool) {
  static const char *fn = "sy_pool_create";
  SY_ARG_CHECK(pool != NULL, fn, "pool is NULL");
  *pool = NULL; /* first: a rejection of any argument, the communicator's included, leaves no stale handle */
  SY_COMM_GUARD(comm, fn);
  sy_pool_config_t c = SY_POOL_CONFIG_INIT;
  if (config) {
    SY_ARG_CHECK(config->size >= sizeof(size_t) && config->size <= sizeof c, fn,
                 "config->size=%zu: set it with SY_POOL_CONFIG_INIT (sizeof is %zu)", config->size, sizeof c);
    memcpy(&c, config, config->size);
  }
  sy_pool_t p = calloc(1, sizeof *p);
  if (!p) return SY_ERR_NO_MEMORY;
  p->comm = comm;
  p->rank = comm->rank;
  p->refs = 1;
  p->backend = comm->backend;
  if (p->backend == SY_BACKEND_CUDA) {
    sy_status_t st = sy__cuda_pool_create(comm->device, c.release_threshold, &p->handle);
    if (st != SY_SUCCESS) {
      free(p);
      return st;
    }
  }
  *pool = p;
  return SY_SUCCESS;
}

sy_status_t sy_pool_destroy(sy_pool_t pool) {
  if (!pool) return SY_SUCCESS;
  if (--pool->refs > 0) return SY_SUCCESS; /* plans still hold memory from it: the last of them destroys it */
  if (pool->count) SY_WARN("sy_pool_destroy: %zu allocations were not freed; freeing them now", pool->count);
  for (size_t i = 0; i < pool->cap; i++) {
    void *p = pool->live[i].ptr;
    if (p == NULL || p == TOMBSTONE) continue;
    if (pool->backend == SY_BACKEND_CUDA) (void)sy__cuda_pool_free(p, NULL);
    else free(p);
  }
  if (pool->backend == SY_BACKEND_CUDA) sy__cuda_pool_destroy(pool->handle);
  free(pool->live);
  free(pool);
  return SY_SUCCESS;
}

sy_status_t sy_pool_alloc(sy_pool_t pool, size_t bytes, void **ptr, cudaStream_t stream) {
  static const char *fn = "sy_pool_alloc";
  if (ptr) *ptr = NULL; /* first: a refusal of any argument, the communicator's included, leaves no stale pointer */
  SY_ARG_CHECK(pool != NULL, fn, "pool is NULL");
  SY_COMM_GUARD(pool->comm, fn);
  SY_ARG_CHECK(ptr != NULL, fn, "ptr is NULL");
  SY_ARG_CHECK(bytes > 0, fn, "bytes is 0");
  SY_ARG_CHECK(bytes <= SIZE_MAX - POOL_ALIGN, fn, "bytes=%zu is too large", bytes);
  SY_CHECK(sy__check_stream(pool->comm, stream, fn));
  if ((pool->count + pool->tombs + 1) * 2 > pool->cap) SY_CHECK(live_grow(pool)); /* before: nothing to undo */
  const size_t rounded = (bytes + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
  void *p = NULL;
  if (pool->backend == SY_BACKEND_CUDA) {
    SY_CHECK(sy__cuda_pool_alloc(pool->handle, bytes, &p, stream));
  } else {
    p = aligned_alloc(POOL_ALIGN, rounded);
    if (!p) {
      SY_WARN("sy_pool_alloc: %zu bytes: out of host memory", bytes);
      return SY_ERR_NO_MEMORY;
    }
    pool->used += rounded;
    if (pool->used > pool->used_high) pool->used_high = pool->used;
  }
  (void)live_add(pool, p, rounded); /* cannot fail: grown above */
  pool->allocs++;
  *ptr = p;
  return SY_SUCCESS;
}

/* Frees e's allocation on `stream` (NULL: at once, cudaFree) and erases it. */
static sy_status_t free_entry(sy_pool_t pool, live_entry_t *e, cudaStream_t stream) {
  if (pool->backend == SY_BACKEND_CUDA) {
    SY_CHECK(sy__cuda_pool_free(e->ptr, stream));
  } else {
    pool->used -= e->bytes;
    free(e->ptr);
  }
  e->ptr = TOMBSTONE;
  pool->count--;
  pool->tombs++;
  pool->frees++;
  return SY_SUCCESS;
}

sy_status_t sy_pool_free(sy_pool_t pool, void *ptr, cudaStream_t stream) {
  static const char *fn = "sy_pool_free";
  SY_ARG_CHECK(pool != NULL, fn, "pool is NULL");
  sy__api_enter(pool->rank); /* no guard: accepted after an error, and after its communicator is gone */
  live_entry_t *e = ptr ? live_find(pool, ptr) : NULL;
  SY_ARG_CHECK(e != NULL, fn, "ptr=%p is not a live allocation of this pool (never given out, or freed already)", ptr);
  SY_ARG_CHECK(pool->backend != SY_BACKEND_CUDA || (stream != NULL && stream != cudaStreamLegacy), fn,
               "stream is %s (the legacy default stream); pass a stream you created",
               stream ? "cudaStreamLegacy" : "NULL");
  return free_entry(pool, e, stream);
}

size_t sy__pool_live_bytes(sy_pool_t pool, const void *ptr) {
  const live_entry_t *e = pool ? live_find(pool, ptr) : NULL;
  return e ? e->bytes : 0;
}

sy_status_t sy_pool_trim(sy_pool_t pool, size_t keep_bytes) {
  static const char *fn = "sy_pool_trim";
  SY_ARG_CHECK(pool != NULL, fn, "pool is NULL");
  sy__api_enter(pool->rank);
  if (pool->backend == SY_BACKEND_CUDA) SY_CHECK(sy__cuda_pool_trim(pool->handle, keep_bytes));
  return SY_SUCCESS; /* the host backend keeps nothing beyond its live allocations */
}

sy_status_t sy_pool_stats(sy_pool_t pool, sy_pool_stats_t *stats) {
  static const char *fn = "sy_pool_stats";
  SY_ARG_CHECK(pool != NULL, fn, "pool is NULL");
  SY_ARG_CHECK(stats != NULL, fn, "stats is NULL");
  SY_ARG_CHECK(stats->size >= sizeof(size_t) && stats->size <= sizeof *stats, fn,
               "stats->size=%zu: set it with SY_POOL_STATS_INIT (sizeof is %zu)", stats->size, sizeof *stats);
  sy_pool_stats_t s = SY_POOL_STATS_INIT;
  if (pool->backend == SY_BACKEND_CUDA) {
    size_t usage[4];
    SY_CHECK(sy__cuda_pool_usage(pool->handle, usage));
    s.reserved = usage[0], s.used = usage[1], s.reserved_high = usage[2], s.used_high = usage[3];
  } else {
    s.reserved = s.used = pool->used;
    s.reserved_high = s.used_high = pool->used_high;
  }
  s.allocs = pool->allocs;
  s.frees = pool->frees;
  s.live = pool->count;
  const size_t size = stats->size;
  memcpy(stats, &s, size);
  stats->size = size;
  return SY_SUCCESS;
}

sy_comm_t sy__pool_comm(sy_pool_t pool) { return pool->comm; }

void sy__pool_retain(sy_pool_t pool) { pool->refs++; }

sy_status_t sy__pool_free_now(sy_pool_t pool, void *ptr) {
  live_entry_t *e = live_find(pool, ptr);
  if (!e) return SY_ERR_INVALID_ARG;
  return free_entry(pool, e, NULL);
}
