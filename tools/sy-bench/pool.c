/*
 * pool.c — sy-bench entry `pool`: the host time of one allocation and its free, a pair of calls, on one
 * non-blocking stream with nothing else queued, at 4 KiB, 1 MiB and 64 MiB (fixed: -b/-e do not apply):
 *  - sy_pool_alloc + sy_pool_free (one sy_pool, default config: it keeps what it reserved);
 *  - cudaMallocAsync + cudaFreeAsync: the device's current pool, as the process finds it (the default pool,
 *    release threshold 0 unless someone changed it: it gives memory back at each synchronisation);
 *  - cudaMalloc + cudaFree (cudaFree waits for the device, so fewer pairs).
 * Each pair is timed alone on CLOCK_MONOTONIC; the stream is synchronised after each batch, outside the timed
 * pairs. -w batches warm up, -n batches are timed; a row gives the median (and 99th percentile) over every timed
 * pair, the slowest rank's: the calls are not collective, each rank times its own pool. Host backend: the sy_pool
 * column only (the C heap), the CUDA columns n/a. PyTorch's caching allocator, for the same table, is
 * tools/dev/torch-alloc-bench.py, run beside this in the same session.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

enum {
  POOL_BATCH = 100,  /* pairs per batch: sy_pool and cudaMallocAsync */
  MALLOC_BATCH = 10, /* pairs per batch: cudaMalloc + cudaFree */
  POOL_ALIGNMENT = 256,
};
static const size_t pool_sizes[] = {(size_t)4 << 10, (size_t)1 << 20, (size_t)64 << 20};
#define NUM_POOL_SIZES ((int)(sizeof pool_sizes / sizeof pool_sizes[0]))

/* The target: one sy_pool_alloc + sy_pool_free of 1 MiB in at most this much host time. */
#define TARGET_BYTES   ((size_t)1 << 20)
#define TARGET_PAIR_US 2.0

enum { VAR_POOL, VAR_ASYNC, VAR_MALLOC, NUM_VARS };
static const char *const var_json[NUM_VARS] = {"sy_pool", "cuda_malloc_async", "cuda_malloc"};

typedef struct pair_ctx {
  bench_ctx_t *ctx;
  sy_pool_t pool;
  size_t bytes;
} pair_ctx_t;

/* One allocation and its free; *ptr: what the allocation gave (checked after the clock stops). */
typedef int (*pair_fn)(pair_ctx_t *pc, void **ptr);

static int pair_pool(pair_ctx_t *pc, void **ptr) {
  if (sy_pool_alloc(pc->pool, pc->bytes, ptr, pc->ctx->stream) != SY_SUCCESS) return 1;
  return sy_pool_free(pc->pool, *ptr, pc->ctx->stream) != SY_SUCCESS;
}

static int pair_async(pair_ctx_t *pc, void **ptr) {
  if (cudaMallocAsync(ptr, pc->bytes, pc->ctx->stream) != cudaSuccess) return 1;
  return cudaFreeAsync(*ptr, pc->ctx->stream) != cudaSuccess;
}

static int pair_malloc(pair_ctx_t *pc, void **ptr) {
  if (cudaMalloc(ptr, pc->bytes) != cudaSuccess) return 1;
  return cudaFree(*ptr) != cudaSuccess;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct pair_timing {
  double median_us, p99_us, mean_us; /* 0: not measured */
  long long pairs, wrong;            /* wrong: sy_pool allocations not 256-byte aligned (its promise) */
} pair_timing_t;

/* -w batches untimed, then -n batches of `batch` pairs, each pair timed; the stream synchronised after each
 * batch, untimed. check_align: count allocations off POOL_ALIGNMENT as wrong. 0 on success. */
static int time_pairs(pair_ctx_t *pc, pair_fn pair, int batch, int check_align, pair_timing_t *out) {
  bench_ctx_t *ctx = pc->ctx;
  const int gpu = ctx->backend == SY_BACKEND_CUDA;
  const long long n = (long long)ctx->opts->iters * batch;
  double *t = calloc((size_t)n, sizeof *t);
  if (!t) return 1;
  int rc = 0;
  void *p = NULL;
  for (int w = 0; w < ctx->opts->warmup && !rc; w++) {
    for (int i = 0; i < batch && !rc; i++) rc = pair(pc, &p);
    if (gpu && !rc && cudaStreamSynchronize(ctx->stream) != cudaSuccess) rc = 1;
  }
  long long k = 0, misaligned = 0;
  double sum = 0;
  for (int b = 0; b < ctx->opts->iters && !rc; b++) {
    for (int i = 0; i < batch && !rc; i++) {
      const int64_t t0 = now_ns();
      rc = pair(pc, &p);
      const int64_t t1 = now_ns();
      misaligned += check_align && !rc && (uintptr_t)p % POOL_ALIGNMENT != 0;
      t[k] = (double)(t1 - t0) * 1e-3;
      sum += t[k++];
    }
    if (gpu && !rc && cudaStreamSynchronize(ctx->stream) != cudaSuccess) rc = 1;
  }
  if (!rc && k) {
    out->mean_us = sum / (double)k;
    out->median_us = bench_median(t, (int)k); /* sorts t */
    out->p99_us = t[k * 99 / 100];
  }
  out->pairs = k;
  out->wrong = misaligned;
  free(t);
  return rc;
}

static void print_header(bench_ctx_t *ctx) {
  const bench_opts_t *o = ctx->opts;
  bench_print(ctx,
              "# pool: per size, -n %d batches of %d pairs (cudaMalloc + cudaFree: %d) after -w %d untimed; each "
              "pair (alloc + free) timed alone, host clock; stream synchronised after each batch, untimed; medians "
              "and 99th percentiles over every timed pair, the slowest rank's\n",
              o->iters, POOL_BATCH, MALLOC_BATCH, o->warmup);
  if (ctx->backend == SY_BACKEND_CUDA) {
    int dev = 0;
    cudaMemPool_t current = NULL, dflt = NULL;
    uint64_t threshold = 0;
    sy_comm_device(ctx->comm, &dev);
    if (cudaDeviceGetMemPool(&current, dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(&dflt, dev) == cudaSuccess &&
        cudaMemPoolGetAttribute(current, cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess)
      bench_print(ctx, "# cudaMallocAsync: device %d's %s pool, release threshold %llu bytes\n", dev,
                  current == dflt ? "default" : "current (not the default)", (unsigned long long)threshold);
  } else {
    bench_print(ctx, "# host backend: sy_pool is the C heap here; the CUDA columns are n/a\n");
  }
  bench_print(ctx,
              "# columns: sy_pool = sy_pool_alloc + sy_pool_free, async = cudaMallocAsync + cudaFreeAsync, cudaMalloc "
              "= cudaMalloc + cudaFree (median host us per pair, then the 99th percentile); x = their median over "
              "sy_pool's\n");
  bench_print(ctx, "#\n# %10s | %10s %9s %7s | %10s %9s | %10s %9s | %8s %8s\n", "bytes", "sy_pool", "p99", "#wrong",
              "async", "p99", "cudaMalloc", "p99", "x async", "x malloc");
  bench_print(ctx, "# %10s | %10s %9s %7s | %10s %9s | %10s %9s |\n", "", "us/pair", "us", "", "us/pair", "us",
              "us/pair", "us");
}

static void print_row(bench_ctx_t *ctx, size_t bytes, const pair_timing_t *v, const sy_pool_stats_t *st) {
  char c[NUM_VARS][2][16], x[2][16], j[NUM_VARS][3][16], jx[2][16];
  for (int i = 0; i < NUM_VARS; i++) {
    bench_fmt_us(c[i][0], 16, 10, v[i].median_us);
    bench_fmt_us(c[i][1], 16, 9, v[i].p99_us);
    if (i != VAR_POOL && ctx->backend != SY_BACKEND_CUDA) {
      snprintf(c[i][0], 16, "%10s", "n/a");
      snprintf(c[i][1], 16, "%9s", "");
    }
    bench_json_us(j[i][0], 16, v[i].median_us);
    bench_json_us(j[i][1], 16, v[i].p99_us);
    bench_json_us(j[i][2], 16, v[i].mean_us);
  }
  const double pool_us = v[VAR_POOL].median_us;
  const double xa = pool_us > 0 && v[VAR_ASYNC].median_us > 0 ? v[VAR_ASYNC].median_us / pool_us : 0;
  const double xm = pool_us > 0 && v[VAR_MALLOC].median_us > 0 ? v[VAR_MALLOC].median_us / pool_us : 0;
  bench_print(ctx, "  %10zu | %s %s %7lld | %s %s | %s %s | %s %s\n", bytes, c[VAR_POOL][0], c[VAR_POOL][1],
              v[VAR_POOL].wrong, c[VAR_ASYNC][0], c[VAR_ASYNC][1], c[VAR_MALLOC][0], c[VAR_MALLOC][1],
              bench_fmt_us(x[0], 16, 8, xa), bench_fmt_us(x[1], 16, 8, xm));
  /* JSON: one object per variant; a variant this backend cannot run is {"absent": true}. */
  char vars[NUM_VARS][256];
  for (int i = 0; i < NUM_VARS; i++) {
    if (i != VAR_POOL && ctx->backend != SY_BACKEND_CUDA) snprintf(vars[i], sizeof vars[i], "{\"absent\": true}");
    else
      snprintf(vars[i], sizeof vars[i],
               "{\"host_us\": %s, \"p99_us\": %s, \"mean_us\": %s, \"pairs\": %lld, \"wrong\": %lld}", j[i][0], j[i][1],
               j[i][2], v[i].pairs, v[i].wrong);
  }
  bench_json(ctx,
             "{\"entry\": \"pool\", \"backend\": \"%s\", \"world\": %d, \"bytes\": %zu, \"%s\": %s, \"%s\": %s, "
             "\"%s\": %s, \"speedup_async\": %s, \"speedup_malloc\": %s, \"pool_stats\": {\"reserved\": %zu, "
             "\"used\": %zu, \"reserved_high\": %zu, \"used_high\": %zu, \"allocs\": %llu, \"frees\": %llu, "
             "\"live\": %llu}}",
             sy_backend_name(ctx->backend), ctx->world, bytes, var_json[VAR_POOL], vars[VAR_POOL], var_json[VAR_ASYNC],
             vars[VAR_ASYNC], var_json[VAR_MALLOC], vars[VAR_MALLOC], bench_json_us(jx[0], 16, xa),
             bench_json_us(jx[1], 16, xm), st->reserved, st->used, st->reserved_high, st->used_high,
             (unsigned long long)st->allocs, (unsigned long long)st->frees, (unsigned long long)st->live);
}

size_t bench_pool_heap(const bench_opts_t *opts) {
  (void)opts;
  return (size_t)1 << 20; /* nothing symmetric: the pools are per rank */
}

int bench_pool(bench_ctx_t *ctx) {
  const int gpu = ctx->backend == SY_BACKEND_CUDA;
  pair_ctx_t pc = {ctx, NULL, 0};
  int rc = sy_pool_create(ctx->comm, NULL, &pc.pool) != SY_SUCCESS;
  rc = bench_allreduce_max(ctx, rc) != 0;
  if (rc) {
    bench_print(ctx, "# pool: sy_pool_create failed\n");
    if (pc.pool) sy_pool_destroy(pc.pool);
    return 1;
  }
  print_header(ctx);
  static const pair_fn fns[NUM_VARS] = {pair_pool, pair_async, pair_malloc};
  static const int batch[NUM_VARS] = {POOL_BATCH, POOL_BATCH, MALLOC_BATCH};
  sy_pool_stats_t st = SY_POOL_STATS_INIT;
  double target_us[NUM_VARS] = {0};
  int have_target = 0;
  for (int s = 0; s < NUM_POOL_SIZES && !rc; s++) {
    pc.bytes = pool_sizes[s];
    pair_timing_t v[NUM_VARS];
    memset(v, 0, sizeof v);
    for (int i = 0; i < NUM_VARS && !rc; i++)
      if (i == VAR_POOL || gpu) rc = time_pairs(&pc, fns[i], batch[i], i == VAR_POOL, &v[i]);
    /* Every rank makes the same collective calls, whatever failed where. */
    rc = bench_allreduce_max(ctx, rc) != 0;
    for (int i = 0; i < NUM_VARS; i++) {
      v[i].median_us = bench_allreduce_max_d(ctx, v[i].median_us);
      v[i].p99_us = bench_allreduce_max_d(ctx, v[i].p99_us);
      v[i].mean_us = bench_allreduce_max_d(ctx, v[i].mean_us);
      v[i].wrong = bench_allreduce_max(ctx, v[i].wrong);
      ctx->total_wrong += v[i].wrong;
    }
    if (sy_pool_stats(pc.pool, &st) != SY_SUCCESS) rc = 1;
    if (st.live != 0) ctx->total_wrong++; /* every allocation was freed */
    if (rc) break;
    print_row(ctx, pc.bytes, v, &st);
    if (pc.bytes == TARGET_BYTES) {
      have_target = 1;
      for (int i = 0; i < NUM_VARS; i++) target_us[i] = v[i].median_us;
    }
  }
  if (!rc)
    bench_print(ctx,
                "# sy_pool stats (rank 0, after every size): reserved %zu, used %zu, reserved_high %zu, used_high %zu "
                "bytes; %llu allocs, %llu frees, %llu live\n",
                st.reserved, st.used, st.reserved_high, st.used_high, (unsigned long long)st.allocs,
                (unsigned long long)st.frees, (unsigned long long)st.live);
  if (have_target && gpu)
    bench_print(ctx,
                "# target (1 MiB): sy_pool alloc + free %.2f us host time (<= %.0f): %s; cudaMallocAsync + "
                "cudaFreeAsync %.2f us, cudaMalloc + cudaFree %.2f us; PyTorch's caching allocator: "
                "tools/dev/torch-alloc-bench.py in the same run\n",
                target_us[VAR_POOL], TARGET_PAIR_US, target_us[VAR_POOL] <= TARGET_PAIR_US ? "met" : "NOT met",
                target_us[VAR_ASYNC], target_us[VAR_MALLOC]);
  else if (have_target)
    bench_print(ctx,
                "# target (1 MiB, cuda backend): sy_pool alloc + free <= %.0f us host time: not judged on the %s "
                "backend (%.2f us here, the C heap)\n",
                TARGET_PAIR_US, sy_backend_name(ctx->backend), target_us[VAR_POOL]);
  if (sy_pool_destroy(pc.pool) != SY_SUCCESS) rc = 1;
  return rc;
}
