/*
 * moe_time.c — sy-bench entry `moe-ll` (moe.c): the timed operations. A dispatch + combine pair timed four
 * ways: CUDA events around each half, the kernels' own time (CUPTI), the pair captured once in a CUDA graph and
 * replayed, and the host clock up to the stream's completion; the four halves as separate calls, by events and
 * by kernel time; and the NCCL baseline's grouped ncclSend/ncclRecv over the same (source, destination) bytes.
 * Medians after warm-up, the slowest rank's.
 */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"

int moe_op_dispatch(bench_ctx_t *ctx, moe_bench_t *b) {
  return sy_moe_dispatch(b->moe, b->x, b->tokens, b->ids, SY_INDEX_INT32, b->weights, &b->recv, ctx->stream) !=
         SY_SUCCESS;
}

int moe_op_combine(bench_ctx_t *ctx, moe_bench_t *b) {
  return sy_moe_combine(b->moe, b->expert_out, b->ids, SY_INDEX_INT32, b->weights, b->tokens, b->out, ctx->stream) !=
         SY_SUCCESS;
}

/* One round of the four halves, each its own call (one kernel each); with `ev` (5 events) recorded around them,
 * with `ids` each half bracketed for CUPTI as call ids[h]. */
static int halves_round(bench_ctx_t *ctx, moe_bench_t *b, cudaEvent_t *ev, const uint64_t *ids) {
  int rc = 0;
  for (int h = 0; h < 4 && !rc; h++) {
    if (ev) rc = cudaEventRecord(ev[h], ctx->stream) != cudaSuccess;
    if (ids) bench_ktime_push(ids[h]);
    if (!rc) {
      if (h == 0) rc = sy_moe_dispatch_send(b->moe, b->x, b->tokens, b->ids, SY_INDEX_INT32, b->weights, ctx->stream);
      else if (h == 1) rc = sy_moe_dispatch_recv(b->moe, &b->recv, ctx->stream);
      else if (h == 2) rc = sy_moe_combine_send(b->moe, b->expert_out, ctx->stream);
      else rc = sy_moe_combine_recv(b->moe, b->ids, SY_INDEX_INT32, b->weights, b->tokens, b->out, ctx->stream);
      rc = rc != SY_SUCCESS;
    }
    if (ids) bench_ktime_pop();
  }
  if (ev && !rc) rc = cudaEventRecord(ev[4], ctx->stream) != cudaSuccess;
  return rc;
}

/* The four halves as separate calls (one kernel each): where a pair's time goes. half_us[4]: medians of
 * dispatch_send, dispatch_recv, combine_send, combine_recv between CUDA events; half_kernel_us[4]: the same
 * halves' kernel time (CUPTI; 0 where unavailable). The slowest rank's. */
int moe_time_halves(bench_ctx_t *ctx, moe_bench_t *b, double half_us[4], double half_kernel_us[4]) {
  const int iters = ctx->opts->iters, warmup = ctx->opts->warmup;
  double *t = calloc(5 * (size_t)iters, sizeof *t), *col = t ? t + 4 * (size_t)iters : NULL;
  cudaEvent_t ev[5] = {NULL, NULL, NULL, NULL, NULL};
  int rc = !t;
  for (int i = 0; i < 5 && !rc; i++) rc = cudaEventCreate(&ev[i]) != cudaSuccess;
  for (int i = 0; i < warmup + iters && !rc; i++) {
    rc = halves_round(ctx, b, ev, NULL) || cudaStreamSynchronize(ctx->stream) != cudaSuccess;
    for (int h = 0; h < 4 && !rc && i >= warmup; h++) {
      float ms = 0;
      rc = cudaEventElapsedTime(&ms, ev[h], ev[h + 1]) != cudaSuccess;
      t[(size_t)h * iters + (i - warmup)] = ms * 1e3;
    }
  }
  for (int h = 0; h < 4; h++) {
    for (int i = 0; i < iters && !rc; i++) col[i] = t[(size_t)h * iters + i];
    half_us[h] = bench_allreduce_max_d(ctx, rc ? 0 : bench_median(col, iters));
  }
  /* Kernel time: the rounds again under CUPTI, half h of round i as call 4i + h, enqueued back to back. */
  double k[4] = {0, 0, 0, 0};
  if (!rc && bench_ktime_begin() == 0) {
    double *tk = calloc(4 * (size_t)iters, sizeof *tk);
    for (int i = 0; i < iters && !rc && tk; i++) {
      const uint64_t ids[4] = {4 * (uint64_t)i, 4 * (uint64_t)i + 1, 4 * (uint64_t)i + 2, 4 * (uint64_t)i + 3};
      rc = halves_round(ctx, b, NULL, ids);
    }
    if (cudaStreamSynchronize(ctx->stream) != cudaSuccess) rc = 1;
    if (bench_ktime_end(tk ? 4 * iters : 0, tk) == 0 && !rc && tk) {
      for (int h = 0; h < 4; h++) {
        for (int i = 0; i < iters; i++) col[i] = tk[4 * (size_t)i + (size_t)h];
        k[h] = bench_median(col, iters);
      }
    }
    free(tk);
  }
  for (int h = 0; h < 4; h++) half_kernel_us[h] = bench_allreduce_max_d(ctx, rc ? 0 : k[h]);
  for (int i = 0; i < 5; i++)
    if (ev[i]) cudaEventDestroy(ev[i]);
  free(t);
  return bench_allreduce_max(ctx, rc) != 0;
}

int moe_op_nccl(bench_ctx_t *ctx, void *arg) {
  moe_bench_t *b = arg;
  ncclComm_t nc = (ncclComm_t)ctx->nccl;
  ncclGroupStart();
  for (int p = 0; p < ctx->world; p++) {
    if (b->send_bytes[p]) ncclSend(b->nccl_send + b->send_off[p], b->send_bytes[p], ncclUint8, p, nc, ctx->stream);
    if (b->recv_bytes[p]) ncclRecv(b->nccl_recv + b->recv_off[p], b->recv_bytes[p], ncclUint8, p, nc, ctx->stream);
  }
  return ncclGroupEnd() != ncclSuccess;
}

/* NCCL's pairs for one direction: this rank sends count[me -> p] x bytes to p and receives count[p -> me] x
 * bytes from p, where count is pairs[s][d] (dispatch) or pairs[d][s] (combine, the reverse). Grows the buffers
 * (zeroed once; their contents do not matter to NCCL's time). */
int moe_nccl_pairs(bench_ctx_t *ctx, moe_bench_t *b, const long long *pairs, int reverse, size_t bytes) {
  const int W = ctx->world, me = ctx->rank;
  size_t sent = 0, got = 0;
  for (int p = 0; p < W; p++) {
    const long long to = reverse ? pairs[(size_t)p * W + me] : pairs[(size_t)me * W + p];
    const long long from = reverse ? pairs[(size_t)me * W + p] : pairs[(size_t)p * W + me];
    b->send_off[p] = sent, b->recv_off[p] = got;
    b->send_bytes[p] = (size_t)to * bytes, b->recv_bytes[p] = (size_t)from * bytes;
    sent += b->send_bytes[p], got += b->recv_bytes[p];
  }
  const size_t need = sent > got ? sent : got;
  if (need <= b->nccl_cap) return 0;
  dev_free(ctx, b->nccl_send), dev_free(ctx, b->nccl_recv);
  b->nccl_send = dev_alloc(ctx, need), b->nccl_recv = dev_alloc(ctx, need);
  b->nccl_cap = b->nccl_send && b->nccl_recv ? need : 0;
  if (!b->nccl_cap) return 1;
  return fill_bytes(ctx, b->nccl_send, 0, need) || fill_bytes(ctx, b->nccl_recv, 0, need);
}

static int op_pair(bench_ctx_t *ctx, void *arg) {
  return moe_op_dispatch(ctx, (moe_bench_t *)arg) || moe_op_combine(ctx, (moe_bench_t *)arg);
}

/* warmup + iters dispatch + combine pairs: each half's median kernel time (events between the halves) and
 * host-observed time, the slowest rank's. Every rank reaches the allreduces, whatever happened. */
int moe_time_pairs(bench_ctx_t *ctx, moe_bench_t *b, bench_timing_t *disp, bench_timing_t *comb) {
  const int iters = ctx->opts->iters, warmup = ctx->opts->warmup;
  double *td = calloc((size_t)iters, sizeof *td), *tc = calloc((size_t)iters, sizeof *tc);
  int rc = !td || !tc;
  if (!rc) rc = bench_warm(ctx, op_pair, b);
  if (gpu(ctx) && !rc) {
    cudaEvent_t *ev = calloc(3 * (size_t)iters, sizeof *ev);
    rc = !ev;
    for (int i = 0; i < 3 * iters && !rc; i++) rc = cudaEventCreate(&ev[i]) != cudaSuccess;
    for (int i = 0; i < iters && !rc; i++) {
      cudaEventRecord(ev[3 * i], ctx->stream);
      rc = moe_op_dispatch(ctx, b);
      cudaEventRecord(ev[3 * i + 1], ctx->stream);
      if (!rc) rc = moe_op_combine(ctx, b);
      cudaEventRecord(ev[3 * i + 2], ctx->stream);
    }
    if (cudaStreamSynchronize(ctx->stream) != cudaSuccess) rc = 1;
    for (int i = 0; i < iters && !rc; i++) {
      float ms_d = 0, ms_c = 0;
      rc = cudaEventElapsedTime(&ms_d, ev[3 * i], ev[3 * i + 1]) != cudaSuccess ||
           cudaEventElapsedTime(&ms_c, ev[3 * i + 1], ev[3 * i + 2]) != cudaSuccess;
      td[i] = ms_d * 1e3, tc[i] = ms_c * 1e3;
    }
    for (int i = 0; ev && i < 3 * iters; i++)
      if (ev[i]) cudaEventDestroy(ev[i]);
    free(ev);
    if (!rc) disp->time_us = bench_median(td, iters), comb->time_us = bench_median(tc, iters);
  }
  /* Kernel time: the pairs again under CUPTI (ids 2i, 2i + 1: dispatch, combine). */
  disp->kernel_us = comb->kernel_us = 0;
  if (gpu(ctx) && !rc && bench_ktime_begin() == 0) {
    double *tk = calloc(2 * (size_t)iters, sizeof *tk);
    for (int i = 0; i < iters && !rc && tk; i++) {
      bench_ktime_push(2 * (uint64_t)i);
      rc = moe_op_dispatch(ctx, b);
      bench_ktime_pop();
      bench_ktime_push(2 * (uint64_t)i + 1);
      if (!rc) rc = moe_op_combine(ctx, b);
      bench_ktime_pop();
    }
    if (cudaStreamSynchronize(ctx->stream) != cudaSuccess) rc = 1;
    if (bench_ktime_end(tk ? 2 * iters : 0, tk) == 0 && !rc && tk) {
      for (int i = 0; i < iters; i++) td[i] = tk[2 * i], tc[i] = tk[2 * i + 1];
      disp->kernel_us = bench_median(td, iters), comb->kernel_us = bench_median(tc, iters);
    }
    free(tk);
  }
  /* The same pair captured once in a CUDA graph with its three events, replayed: the halves' device time without
   * the gaps of host enqueueing (how a decoding loop runs it). */
  if (gpu(ctx) && !rc) {
    cudaEvent_t ev[3] = {NULL, NULL, NULL};
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    for (int i = 0; i < 3 && !rc; i++) rc = cudaEventCreate(&ev[i]) != cudaSuccess;
    if (!rc) rc = cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess;
    if (!rc) {
      /* External: real event-record nodes (a plain record inside a capture only orders streams). */
      int crc = cudaEventRecordWithFlags(ev[0], ctx->stream, cudaEventRecordExternal) != cudaSuccess ||
                moe_op_dispatch(ctx, b) ||
                cudaEventRecordWithFlags(ev[1], ctx->stream, cudaEventRecordExternal) != cudaSuccess ||
                moe_op_combine(ctx, b) ||
                cudaEventRecordWithFlags(ev[2], ctx->stream, cudaEventRecordExternal) != cudaSuccess;
      rc = cudaStreamEndCapture(ctx->stream, &graph) != cudaSuccess || crc;
    }
    if (!rc) rc = cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess;
    for (int i = 0; i < warmup + iters && !rc; i++) {
      rc = cudaGraphLaunch(exec, ctx->stream) != cudaSuccess || cudaStreamSynchronize(ctx->stream) != cudaSuccess;
      float ms_d = 0, ms_c = 0;
      if (!rc && i >= warmup) {
        rc = cudaEventElapsedTime(&ms_d, ev[0], ev[1]) != cudaSuccess ||
             cudaEventElapsedTime(&ms_c, ev[1], ev[2]) != cudaSuccess;
        td[i - warmup] = ms_d * 1e3, tc[i - warmup] = ms_c * 1e3;
      }
    }
    if (!rc) disp->graph_us = bench_median(td, iters), comb->graph_us = bench_median(tc, iters);
    else fprintf(stderr, "moe-ll: graph timing failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    for (int i = 0; i < 3; i++)
      if (ev[i]) cudaEventDestroy(ev[i]);
  }
  for (int i = 0; i < iters && !rc; i++) {
    const double t0 = bench_now_s();
    rc = moe_op_dispatch(ctx, b);
    if (gpu(ctx) && !rc) rc = cudaStreamSynchronize(ctx->stream) != cudaSuccess;
    const double t1 = bench_now_s();
    if (!rc) rc = moe_op_combine(ctx, b);
    if (gpu(ctx) && !rc) rc = cudaStreamSynchronize(ctx->stream) != cudaSuccess;
    td[i] = (t1 - t0) * 1e6, tc[i] = (bench_now_s() - t1) * 1e6;
  }
  if (!rc) disp->host_us = bench_median(td, iters), comb->host_us = bench_median(tc, iters);
  if (!gpu(ctx)) disp->time_us = disp->host_us, comb->time_us = comb->host_us;
  free(td), free(tc);
  disp->time_us = bench_allreduce_max_d(ctx, disp->time_us);
  disp->host_us = bench_allreduce_max_d(ctx, disp->host_us);
  comb->time_us = bench_allreduce_max_d(ctx, comb->time_us);
  comb->host_us = bench_allreduce_max_d(ctx, comb->host_us);
  disp->graph_us = bench_allreduce_max_d(ctx, disp->graph_us);
  comb->graph_us = bench_allreduce_max_d(ctx, comb->graph_us);
  disp->kernel_us = bench_kernel_max(ctx, disp->kernel_us);
  comb->kernel_us = bench_kernel_max(ctx, comb->kernel_us);
  rc = bench_allreduce_max(ctx, rc) != 0;
  disp->valid = comb->valid = !rc;
  return rc;
}
