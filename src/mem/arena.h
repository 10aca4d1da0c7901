/*
 * arena.h — the bookkeeping of a region carved by first fit on the host, with frees in stream order: the
 * high-throughput MoE's receive arena (core/moe_ht.c: sy_moe_ht_recv_alloc / _free with pool NULL). Pure C, no CUDA
 * call: the caller enqueues the host function that tells the arena a stream reached a free (sy__arena_reached), so
 * a CPU test drives every interleaving (tests/unit/test_arena.c).
 *
 * Blocks, sorted by offset, never overlapping, each 256-byte aligned:
 *   live        an allocation the caller holds;
 *   on stream   freed on stream F, which has not reached the free: its host function (its id) drops it. Until then
 *               only an allocation on F may take it (its work is ordered after the free), and only where F's order
 *               is the caller's to know (reuse_ok: a stream the caller made, not the legacy default stream or
 *               cudaStreamPerThread).
 * An allocation that takes on-stream blocks on F owes F's frees (dep: the newest of their ids; F runs its host
 * functions in id order, because the caller enqueues them in id order: it holds the enqueue lock from
 * sy__arena_free_on until sy__arena_enqueued or sy__arena_unfree, and free_on refuses a free while another's host
 * function is still to be enqueued — two threads freeing on F could otherwise put a newer id ahead of an older one,
 * and reaching the newer would clear a debt the older still holds). Freed at once, it waits for that free instead (it becomes on stream F under dep's id);
 * freed on another stream G, both must be reached (G's host function hands it to dep's); freed on F, F's order
 * covers it. So no allocation on another stream ever gets memory before every stream that used it reached its
 * free. Every call holds the arena's lock; sy__arena_wait releases it while it waits.
 */
#ifndef SY_MEM_ARENA_H
#define SY_MEM_ARENA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sy_arena_block {
  size_t at, bytes;
  uint64_t id;        /* live: its name; on stream: its free's host function */
  const void *stream; /* on stream: the freeing stream (NULL until the host function is enqueued: no one's) */
  int on_stream;
  uint64_t dep;           /* a free on dep_stream, not yet reached, whose memory this block covers; 0: none */
  const void *dep_stream; /* reusable for that stream only */
} sy_arena_block_t;

typedef struct sy_arena {
  size_t bytes;
  int n, cap;
  sy_arena_block_t *blocks;
  uint64_t ids;  /* ids given */
  int pending;   /* host functions enqueued and not yet reached */
  uint64_t open; /* the free whose host function is being enqueued (free_on to enqueued or unfree), or 0 */
  pthread_mutex_t mu;
  pthread_mutex_t enq; /* the enqueue lock (taken before mu, never by a host function) */
  pthread_cond_t cv;   /* a free was reached (CLOCK_MONOTONIC) */
} sy_arena_t;

void sy__arena_init(sy_arena_t *a, size_t bytes);
void sy__arena_fini(sy_arena_t *a);
void sy__arena_lock(sy_arena_t *a);
void sy__arena_unlock(sy_arena_t *a);
/* Held (outside the lock) from a free_on through its enqueued or unfree: the host functions' order on every stream
 * is then their ids'. */
void sy__arena_enqueue_lock(sy_arena_t *a);
void sy__arena_enqueue_unlock(sy_arena_t *a);

/* Locked. First fit of `bytes` for an allocation on `stream` (reuse_ok: it may take blocks freed on that stream):
 * 1 (*at, *id), 0 nothing fits now but would once the frees on streams are reached, -2 nothing fits even then, -1
 * no host memory for the list. */
int sy__arena_take(sy_arena_t *a, size_t bytes, const void *stream, int reuse_ok, size_t *at, uint64_t *id);
/* Locked. The live block at offset `at`: its index, or -1. */
int sy__arena_find(const sy_arena_t *a, size_t at);
/* Locked. Live block i given back at once (what it owes a stream still holds it). */
void sy__arena_free_now(sy_arena_t *a, int i);
/* Locked, with the enqueue lock held. Live block i given back on a stream: on stream under a new id (returned),
 * which the caller's host function passes to sy__arena_reached; nobody's stream until sy__arena_enqueued (the host
 * function is in the stream, which it names), or sy__arena_unfree(id, old) if it could not be enqueued. 0 (nothing
 * changed) while another free's host function is still to be enqueued: the caller did not hold the enqueue lock. */
uint64_t sy__arena_free_on(sy_arena_t *a, int i, uint64_t *old);
void sy__arena_enqueued(sy_arena_t *a, uint64_t id, const void *stream);
void sy__arena_unfree(sy_arena_t *a, uint64_t id, uint64_t old);
/* Locked. The free `id` was reached (its host function ran). */
void sy__arena_reached(sy_arena_t *a, uint64_t id);
/* Locked. Waits for a reached free until deadline_ns (CLOCK_MONOTONIC): 0 once the deadline has passed. */
int sy__arena_wait(sy_arena_t *a, uint64_t deadline_ns);
uint64_t sy__arena_now_ns(void);
/* Locked. Bytes live, bytes on streams, and the live blocks. */
void sy__arena_usage(const sy_arena_t *a, size_t *live, size_t *on_streams, int *live_blocks);

#ifdef __cplusplus
}
#endif

#endif /* SY_MEM_ARENA_H */
