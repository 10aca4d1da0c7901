/*
 * alltoall.c — sy-bench entry `alltoall`: sy_alltoall with equal splits (bytes per rank from -b to -e, each
 * peer getting bytes/world, 16-aligned), checked against the reference executor (src/ref), and NCCL's
 * grouped ncclSend/ncclRecv moving the same bytes from the same send buffer in the same process.
 * busbw = algbw * (world - 1) / world, as nccl-tests reports all-to-all.
 */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ref/alltoall_ref.h"

typedef struct a2a_bench {
  uint8_t *send, *recv, *nccl_recv; /* device; recv is symmetric */
  size_t per_peer;
} a2a_bench_t;

static int op_ours(bench_ctx_t *ctx, void *arg) {
  a2a_bench_t *b = arg;
  return sy_alltoall(ctx->comm, b->send, b->recv, b->per_peer, ctx->stream) != SY_SUCCESS;
}

static int op_nccl(bench_ctx_t *ctx, void *arg) {
  a2a_bench_t *b = arg;
  ncclComm_t nc = (ncclComm_t)ctx->nccl;
  ncclGroupStart();
  for (int p = 0; p < ctx->world; p++) {
    ncclSend(b->send + (size_t)p * b->per_peer, b->per_peer, ncclUint8, p, nc, ctx->stream);
    ncclRecv(b->nccl_recv + (size_t)p * b->per_peer, b->per_peer, ncclUint8, p, nc, ctx->stream);
  }
  return ncclGroupEnd() != ncclSuccess;
}

/* What `src` sends `dst` at size `bytes`: 8-byte words that differ everywhere, never all zero. */
static void fill_pattern(uint8_t *out, size_t n, uint64_t seed, int src, int dst) {
  uint64_t base = (seed * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)src << 40) ^ ((uint64_t)dst << 24) ^ 0x5555;
  size_t w = 0;
  for (; w + 8 <= n; w += 8) {
    uint64_t v = base + (w / 8 + 1) * 0xD1B54A32D192ED03ull;
    memcpy(out + w, &v, 8);
  }
  for (; w < n; w++) out[w] = (uint8_t)(base >> (w % 8)) | 1;
}

static int is_gpu(bench_ctx_t *ctx) { return ctx->backend == SY_BACKEND_CUDA; }

static int copy_in(bench_ctx_t *ctx, void *dst, const void *src, size_t n) {
  if (!is_gpu(ctx)) {
    memcpy(dst, src, n);
    return 0;
  }
  return cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice) != cudaSuccess;
}

static int copy_out(bench_ctx_t *ctx, void *dst, const void *src, size_t n) {
  if (!is_gpu(ctx)) {
    memcpy(dst, src, n);
    return 0;
  }
  return cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost) != cudaSuccess;
}

/* Runs op once on fresh data and counts the bytes that differ from the reference executor's result. */
static long long check_once(bench_ctx_t *ctx, a2a_bench_t *b, uint8_t *recv, bench_op_fn op, uint64_t seed,
                            uint8_t *host_a, uint8_t *host_b) {
  const int W = ctx->world, me = ctx->rank;
  const size_t per = b->per_peer, total = per * W;
  for (int p = 0; p < W; p++) fill_pattern(host_a + (size_t)p * per, per, seed, me, p);
  if (copy_in(ctx, b->send, host_a, total)) return -1;
  if (is_gpu(ctx)) {
    if (cudaMemset(recv, 0xEE, total) != cudaSuccess) return -1;
  } else {
    memset(recv, 0xEE, total);
  }
  if (sy_comm_barrier(ctx->comm, ctx->stream) != SY_SUCCESS) return -1; /* everyone's recv is poisoned */
  if (op(ctx, b)) return -1;
  if (is_gpu(ctx) && cudaStreamSynchronize(ctx->stream) != cudaSuccess) return -1;
  if (copy_out(ctx, host_b, recv, total)) return -1;
  /* The reference: every source's segment for this rank, regenerated, placed by sy__ref_alltoallv_recv. */
  const void **srcs = calloc((size_t)W, sizeof *srcs);
  size_t *sb = calloc((size_t)W * W, sizeof *sb), *so = calloc((size_t)W * W, sizeof *so),
         *ro = calloc((size_t)W, sizeof *ro);
  for (int s = 0; s < W; s++) {
    fill_pattern(host_a + (size_t)s * per, per, seed, s, me);
    srcs[s] = host_a + (size_t)s * per;
    sb[(size_t)s * W + me] = per;
    ro[s] = (size_t)s * per;
  }
  uint8_t *want = malloc(total ? total : 1);
  sy__ref_alltoallv_recv(W, me, srcs, sb, so, want, ro);
  long long wrong = 0;
  for (size_t i = 0; i < total; i++) wrong += host_b[i] != want[i];
  free(want);
  free(srcs);
  free(sb);
  free(so);
  free(ro);
  return wrong;
}

static void fill_bw(bench_ctx_t *ctx, bench_timing_t *t, size_t bytes) {
  t->algbw_gbs = t->time_us > 0 ? bytes / (t->time_us * 1e3) : 0;
  t->busbw_gbs = t->algbw_gbs * (ctx->world - 1) / ctx->world;
}

size_t bench_alltoall_heap(const bench_opts_t *opts) { return opts->max_bytes + ((size_t)64 << 20); }

int bench_alltoall(bench_ctx_t *ctx) {
  const bench_opts_t *o = ctx->opts;
  const int W = ctx->world;
  a2a_bench_t b;
  memset(&b, 0, sizeof b);
  size_t cap = o->max_bytes;
  int rc = 0;
  if (is_gpu(ctx)) {
    if (cudaMalloc((void **)&b.send, cap) != cudaSuccess) return 1;
    if (ctx->nccl && cudaMalloc((void **)&b.nccl_recv, cap) != cudaSuccess) return 1;
  } else {
    b.send = malloc(cap);
    if (!b.send) return 1;
  }
  if (sy_mem_alloc(ctx->comm, cap, (void **)&b.recv) != SY_SUCCESS) return 1;
  uint8_t *host_a = o->check ? malloc(cap) : NULL, *host_b = o->check ? malloc(cap) : NULL;
  if (o->check && (!host_a || !host_b)) return 1;

  bench_print(ctx, "#\n# %12s %10s | %10s %9s %10s %8s %8s %7s | %10s %9s %8s %8s %7s | %7s\n", "bytes/rank",
              "per_peer", "time_us", "kern_us", "host_us", "algbw", "busbw", "#wrong", "nccl_us", "kern_us", "algbw",
              "busbw", "#wrong", "speedup");
  bench_print(ctx, "# %12s %10s | %10s %9s %10s %8s %8s %7s | %10s %9s %8s %8s %7s | %7s\n", "", "", "(events)",
              "(kernel)", "", "GB/s", "GB/s", "", "(events)", "(kernel)", "GB/s", "GB/s", "", "vs nccl");
  double sum_busbw = 0, sum_ratio = 0;
  int rows = 0, ratio_rows = 0;
  for (size_t bytes = o->min_bytes; bytes <= o->max_bytes && !rc; bytes *= (size_t)o->step_factor) {
    b.per_peer = (bytes / W) & ~(size_t)15;
    const size_t moved = b.per_peer * W;
    bench_timing_t ours, base;
    memset(&ours, 0, sizeof ours);
    memset(&base, 0, sizeof base);
    ours.wrong = base.wrong = -1;
    const uint64_t seed = bytes * 31 + 7;
    if (o->check) {
      ours.wrong = bench_allreduce_max(ctx, check_once(ctx, &b, b.recv, op_ours, seed, host_a, host_b));
      if (ctx->nccl)
        base.wrong = bench_allreduce_max(ctx, check_once(ctx, &b, b.nccl_recv, op_nccl, seed + 1, host_a, host_b));
    }
    rc |= bench_time(ctx, op_ours, &b, &ours);
    if (ctx->nccl) rc |= bench_time(ctx, op_nccl, &b, &base);
    fill_bw(ctx, &ours, moved);
    fill_bw(ctx, &base, moved);
    ctx->total_wrong += (ours.wrong > 0 ? ours.wrong : 0) + (base.wrong > 0 ? base.wrong : 0);
    if (ours.wrong < 0 && o->check) ctx->total_wrong++; /* a check that could not run counts as wrong */
    double ratio = ctx->nccl && ours.time_us > 0 ? base.time_us / ours.time_us : 0;
    char nccl_cols[112] = "", f[4][16];
    if (ctx->nccl)
      snprintf(nccl_cols, sizeof nccl_cols, "%10.2f %s %8.2f %8.2f %7lld | %7.2f", base.time_us,
               bench_fmt_us(f[0], 16, 9, base.kernel_us), base.algbw_gbs, base.busbw_gbs, base.wrong, ratio);
    else snprintf(nccl_cols, sizeof nccl_cols, "%10s %9s %8s %8s %7s | %7s", "n/a", "", "", "", "", "");
    bench_print(ctx, "  %12zu %10zu | %10.2f %s %10.2f %8.2f %8.2f %7lld | %s\n", moved, b.per_peer, ours.time_us,
                bench_fmt_us(f[1], 16, 9, ours.kernel_us), ours.host_us, ours.algbw_gbs, ours.busbw_gbs, ours.wrong,
                nccl_cols);
    bench_json(
        ctx,
        "{\"entry\": \"alltoall\", \"backend\": \"%s\", \"world\": %d, \"bytes_per_rank\": %zu, \"per_peer\": %zu, "
        "\"ours\": {\"time_us\": %.3f, \"kernel_us\": %s, \"host_us\": %.3f, \"algbw_GBs\": %.3f, "
        "\"busbw_GBs\": %.3f, \"wrong\": %lld}, "
        "\"nccl\": %s%.3f, \"kernel_us\": %s, \"algbw_GBs\": %.3f, \"busbw_GBs\": %.3f, \"wrong\": %lld}, "
        "\"speedup\": %.3f}",
        sy_backend_name(ctx->backend), W, moved, b.per_peer, ours.time_us, bench_json_us(f[2], 16, ours.kernel_us),
        ours.host_us, ours.algbw_gbs, ours.busbw_gbs, ours.wrong,
        ctx->nccl ? "{\"time_us\": " : "{\"absent\": true, \"time_us\": ", base.time_us,
        bench_json_us(f[3], 16, base.kernel_us), base.algbw_gbs, base.busbw_gbs, base.wrong, ratio);
    sum_busbw += ours.busbw_gbs;
    rows++;
    if (ratio > 0) sum_ratio += ratio, ratio_rows++;
    if (bytes > SIZE_MAX / (size_t)o->step_factor) break;
  }
  if (rows)
    bench_print(ctx, "# average busbw %.2f GB/s over %d sizes%s", sum_busbw / rows, rows, ratio_rows ? "" : "\n");
  if (ratio_rows) bench_print(ctx, "; average speedup vs nccl %.2fx\n", sum_ratio / ratio_rows);
  if (is_gpu(ctx)) {
    cudaFree(b.send);
    if (b.nccl_recv) cudaFree(b.nccl_recv);
  } else {
    free(b.send);
  }
  sy_mem_free(ctx->comm, b.recv);
  free(host_a);
  free(host_b);
  return rc;
}
