/*
 * moe.h — what the files of sy-bench's entry `moe-ll` share (moe.c: the sizes, the expectation, the entry;
 * moe_time.c: the timed operations): the shape of the problem, the buffers and NCCL pairs of the configuration
 * being timed, memory on either backend, and the timing functions. The entry `moe-ht` (moe_ht*.c) takes the
 * shape, the memory helpers and the NCCL pairs from here too.
 */
#ifndef SY_BENCH_MOE_H
#define SY_BENCH_MOE_H

#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { HIDDEN = 7168, TOP_K = 8, NUM_EXPERTS = 256 };

/* 256 experts, or the multiple of the world size nearest to it (ties go up), with room for TOP_K distinct
 * experts (moe-ll and moe-ht alike). */
static inline int moe_experts_for(int world) {
  if (NUM_EXPERTS % world == 0) return NUM_EXPERTS;
  const int lo = NUM_EXPERTS / world * world, hi = lo + world;
  int experts = lo >= TOP_K && NUM_EXPERTS - lo < hi - NUM_EXPERTS ? lo : hi;
  while (experts < TOP_K) experts += world;
  return experts;
}

typedef struct moe_bench {
  sy_moe_t moe;
  int tokens;
  void *x;            /* bf16 [tokens][hidden]: this rank's tokens */
  int32_t *ids;       /* [tokens][top_k] */
  float *weights;     /* [tokens][top_k] */
  sy_moe_recv_t recv; /* sized for the largest configuration */
  void *expert_out;   /* bf16 [L][S][hidden] */
  void *out;          /* bf16 [tokens][hidden] */
  /* The NCCL baseline: pair bytes of the direction being timed, packed in peer order on both sides. */
  uint8_t *nccl_send, *nccl_recv;
  size_t nccl_cap;
  size_t *send_bytes, *send_off, *recv_bytes, *recv_off; /* [W] each */
} moe_bench_t;

/* ---- memory: device buffers on the cuda backend, host memory on the host backend --------------------------- */

static inline int gpu(bench_ctx_t *ctx) { return ctx->backend == SY_BACKEND_CUDA; }

static inline void *dev_alloc(bench_ctx_t *ctx, size_t n) {
  void *p = NULL;
  if (gpu(ctx)) return cudaMalloc(&p, n ? n : 1) == cudaSuccess ? p : NULL;
  return malloc(n ? n : 1); /* big receive buffers: only the slots a call fills are ever touched */
}

static inline void dev_free(bench_ctx_t *ctx, void *p) {
  if (!p) return;
  if (gpu(ctx)) cudaFree(p);
  else free(p);
}

/* Stream-ordered on the cuda backend (ctx->stream does not wait for the legacy stream), then synchronised. */
static inline int to_dev(bench_ctx_t *ctx, void *d, const void *h, size_t n) {
  if (!gpu(ctx)) return memcpy(d, h, n), 0;
  return cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, ctx->stream) != cudaSuccess ||
         cudaStreamSynchronize(ctx->stream) != cudaSuccess;
}

static inline int from_dev(bench_ctx_t *ctx, void *h, const void *d, size_t n) {
  if (!gpu(ctx)) return memcpy(h, d, n), 0;
  return cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, ctx->stream) != cudaSuccess ||
         cudaStreamSynchronize(ctx->stream) != cudaSuccess;
}

static inline int fill_bytes(bench_ctx_t *ctx, void *d, int byte, size_t n) {
  if (!gpu(ctx)) return memset(d, byte, n), 0;
  return cudaMemsetAsync(d, byte, n, ctx->stream) != cudaSuccess;
}

/* ---- the timed operations (moe_time.c) ---------------------------------------------------------------------- */

/* One dispatch, one combine on ctx->stream (the one-call forms); non-zero on failure. */
int moe_op_dispatch(bench_ctx_t *ctx, moe_bench_t *b);
int moe_op_combine(bench_ctx_t *ctx, moe_bench_t *b);
/* The four halves as separate calls (one kernel each): where a pair's time goes. half_us[4]: medians of
 * dispatch_send, dispatch_recv, combine_send, combine_recv between CUDA events; half_kernel_us[4]: the same
 * halves' kernel time (CUPTI; 0 where unavailable). The slowest rank's. */
int moe_time_halves(bench_ctx_t *ctx, moe_bench_t *b, double half_us[4], double half_kernel_us[4]);
/* warmup + iters dispatch + combine pairs: each half's median kernel time (events between the halves) and
 * host-observed time, the slowest rank's. Every rank reaches the allreduces, whatever happened. */
int moe_time_pairs(bench_ctx_t *ctx, moe_bench_t *b, bench_timing_t *disp, bench_timing_t *comb);
/* NCCL's pairs for one direction: this rank sends count[me -> p] x bytes to p and receives count[p -> me] x
 * bytes from p, where count is pairs[s][d] (dispatch) or pairs[d][s] (combine, the reverse). Grows the buffers
 * (zeroed once; their contents do not matter to NCCL's time). */
int moe_nccl_pairs(bench_ctx_t *ctx, moe_bench_t *b, const long long *pairs, int reverse, size_t bytes);
/* The NCCL baseline of the pairs set up last (a bench_op_fn; arg: the moe_bench_t). */
int moe_op_nccl(bench_ctx_t *ctx, void *arg);

#endif
