/*
 * soak.h — what the files of sy-bench's soak mode share (`sy-bench --soak SECONDS`, the entry `soak`): every
 * operation again and again with random shapes, each result compared with src/ref's reference, memory watched.
 *   soak.c           the loop (which operation each round), the memory samples, the report, the heap it needs
 *   soak_a2a_attn.c  the all-to-all (random per-pair sizes and offsets) and the attention dispatch (random plans,
 *                    directions, row sizes, element types)
 *   soak_moe.c       the MoE dispatch and combine (random token counts, routings, wires, modes, index types,
 *                    one call or halves; objects destroyed and created again now and then)
 *   soak_moe_ht.c    the MoE high-throughput step (layout, dispatch, combine, both backwards; random token counts,
 *                    routings, wires, alignments, index types, exact or worst-case counts), where the backend has it
 * Every choice of a round comes from its seed (soak_pick), the same on every rank, so every rank knows what
 * every other rank passes and regenerates it for the reference (tests/workload's generators).
 */
#ifndef SY_BENCH_SOAK_H
#define SY_BENCH_SOAK_H

#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "workload.h"

enum { SOAK_A2A, SOAK_ATTN, SOAK_MOE, SOAK_MOE_HT, SOAK_OPS };
enum { SOAK_Q_FWD, SOAK_QKV_FWD, SOAK_Q_REV, SOAK_KV_BWD, SOAK_ATTN_DIRS };
#define SOAK_POISON 0xEE

/* What the rounds did, for the report: calls per operation and variant, wrong elements (bytes of opaque rows,
 * elements of typed arrays) against the reference. */
typedef struct soak_stats {
  long long calls[SOAK_OPS], wrong[SOAK_OPS];
  long long attn_dirs[SOAK_ATTN_DIRS], attn_placed;
  long long moe_wires[3], moe_per_expert, moe_halves, moe_recreated;
  long long moe_ht_wires[3], moe_ht_exact, moe_ht_unit, moe_ht_recreated;
  int moe_ht_off; /* the backend has no high-throughput mode: its rounds are left out */
  int rank;
  int reported; /* mismatches printed so far (the first few are) */
} soak_stats_t;

/* A round's choice `what` among n, from the round's seed: the same on every rank. */
static inline uint64_t soak_pick(uint64_t seed, uint64_t what, uint64_t n) {
  return n ? wl_mix(seed ^ (what + 1) * 0xD1B54A32D192ED03ull) % n : 0;
}

/* Elements of got that differ from want (count of elem-byte elements); the first few are printed. */
long long soak_compare(soak_stats_t *st, const char *what, uint64_t seed, const void *got, const void *want,
                       size_t bytes, size_t elem);

/* ---- memory: device memory on the cuda backend, host memory on the host backend ---------------------------- */

static inline int soak_gpu(bench_ctx_t *ctx) { return ctx->backend == SY_BACKEND_CUDA; }
void *soak_alloc(bench_ctx_t *ctx, size_t n);
void soak_free(bench_ctx_t *ctx, void *p);
/* Stream-ordered copies and fills on ctx->stream; to_host synchronises. Non-zero on failure. */
int soak_to_dev(bench_ctx_t *ctx, void *d, const void *h, size_t n);
int soak_to_host(bench_ctx_t *ctx, void *h, const void *d, size_t n);
int soak_fill(bench_ctx_t *ctx, void *d, int byte, size_t n);
int soak_sync(bench_ctx_t *ctx);

/* ---- the operations: open (collective: symmetric memory, objects), one round, close ---------------------------
 * A round returns 0, or non-zero when a call failed (the communicator's error is then sticky). */
typedef struct soak_a2a soak_a2a_t;
typedef struct soak_attn soak_attn_t;
typedef struct soak_moe soak_moe_t;
typedef struct soak_moe_ht soak_moe_ht_t;

size_t soak_a2a_heap(int world, sy_backend_t backend);
int soak_a2a_open(bench_ctx_t *ctx, soak_a2a_t **out);
int soak_a2a_round(bench_ctx_t *ctx, soak_a2a_t *s, uint64_t seed, soak_stats_t *st);
void soak_a2a_close(bench_ctx_t *ctx, soak_a2a_t *s);

size_t soak_attn_heap(int world, sy_backend_t backend);
int soak_attn_open(bench_ctx_t *ctx, soak_attn_t **out);
int soak_attn_round(bench_ctx_t *ctx, soak_attn_t *s, uint64_t seed, soak_stats_t *st);
void soak_attn_close(bench_ctx_t *ctx, soak_attn_t *s);

size_t soak_moe_heap(int world, sy_backend_t backend);
int soak_moe_open(bench_ctx_t *ctx, soak_moe_t **out);
int soak_moe_round(bench_ctx_t *ctx, soak_moe_t *s, uint64_t seed, soak_stats_t *st);
void soak_moe_close(bench_ctx_t *ctx, soak_moe_t *s);

size_t soak_moe_ht_heap(int world, sy_backend_t backend);
int soak_moe_ht_open(bench_ctx_t *ctx, soak_moe_ht_t **out); /* 0 also where the backend lacks the mode */
int soak_moe_ht_available(const soak_moe_ht_t *s);
int soak_moe_ht_round(bench_ctx_t *ctx, soak_moe_ht_t *s, uint64_t seed, soak_stats_t *st);
void soak_moe_ht_close(bench_ctx_t *ctx, soak_moe_ht_t *s);

#endif
