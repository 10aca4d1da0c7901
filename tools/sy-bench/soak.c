/*
 * soak.c — sy-bench's soak mode, `sy-bench --soak SECONDS` (the entry `soak`): round after round one operation
 * drawn from the round's seed (the all-to-all, the attention dispatch, the MoE dispatch + combine, the MoE
 * high-throughput step where the backend has it; each with random shapes: soak_a2a_attn.c, soak_moe.c,
 * soak_moe_ht.c), every result compared with src/ref's reference (the high-throughput step: with the
 * expectation sy-bench moe-ht computes from the header), until SECONDS have
 * passed. Memory is sampled every few seconds — the process's resident set (/proc/self/statm, after
 * malloc_trim), what malloc has handed out (mallinfo2) and, on the cuda backend, the device's used memory
 * (cudaMemGetInfo, the whole device's: ranks sharing a GPU see each other's) — and its growth measured from a
 * baseline taken once every operation has run and a warm-up has passed. The report: calls per operation and
 * variant, wrong elements (0 expected), errors, the growth of each. Exit status non-zero on any wrong element,
 * any failed call, or any of the three growing past --soak-growth (default 32M).
 * The rounds are collective: the ranks decide together after each round whether to go on (any rank's clock
 * past SECONDS, or any rank's failure, stops every rank).
 */
#include <malloc.h>
#include <stdio.h>
#include <unistd.h>

#include "boot/boot.h"
#include "soak.h"

#define SOAK_REPORT_MAX 8 /* mismatches printed per rank */

/* ---- memory ----------------------------------------------------------------------------------------------------- */

void *soak_alloc(bench_ctx_t *ctx, size_t n) {
  void *p = NULL;
  if (soak_gpu(ctx)) return cudaMalloc(&p, n ? n : 1) == cudaSuccess ? p : NULL;
  return malloc(n ? n : 1);
}

void soak_free(bench_ctx_t *ctx, void *p) {
  if (!p) return;
  if (soak_gpu(ctx)) cudaFree(p);
  else free(p);
}

int soak_to_dev(bench_ctx_t *ctx, void *d, const void *h, size_t n) {
  if (!n) return 0;
  if (!soak_gpu(ctx)) return memcpy(d, h, n), 0;
  return cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, ctx->stream) != cudaSuccess;
}

int soak_to_host(bench_ctx_t *ctx, void *h, const void *d, size_t n) {
  if (!soak_gpu(ctx)) return n ? (memcpy(h, d, n), 0) : 0;
  if (n && cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, ctx->stream) != cudaSuccess) return 1;
  return soak_sync(ctx);
}

int soak_fill(bench_ctx_t *ctx, void *d, int byte, size_t n) {
  if (!n) return 0;
  if (!soak_gpu(ctx)) return memset(d, byte, n), 0;
  return cudaMemsetAsync(d, byte, n, ctx->stream) != cudaSuccess;
}

int soak_sync(bench_ctx_t *ctx) { return soak_gpu(ctx) && cudaStreamSynchronize(ctx->stream) != cudaSuccess; }

long long soak_compare(soak_stats_t *st, const char *what, uint64_t seed, const void *got, const void *want,
                       size_t bytes, size_t elem) {
  if (!memcmp(got, want, bytes)) return 0;
  const uint8_t *g = got, *w = want;
  long long wrong = 0;
  for (size_t i = 0; i + elem <= bytes; i += elem) {
    if (!memcmp(g + i, w + i, elem)) continue;
    if (wrong++ == 0 && st->reported < SOAK_REPORT_MAX) {
      uint64_t gv = 0, wv = 0;
      memcpy(&gv, g + i, elem < 8 ? elem : 8);
      memcpy(&wv, w + i, elem < 8 ? elem : 8);
      fprintf(stderr, "sy-bench soak: rank %d: %s (round seed 0x%llx): element %zu is 0x%llx, want 0x%llx%s\n",
              st->rank, what, (unsigned long long)seed, i / elem, (unsigned long long)gv, (unsigned long long)wv,
              g[i] == SOAK_POISON && gv != wv ? " (poison: never written?)" : "");
      st->reported++;
    }
  }
  return wrong;
}

typedef struct mem_sample {
  double t, rss_mib, heap_mib, dev_mib;
} mem_sample_t;

static double rss_mib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long long size = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%lld %lld", &size, &resident) != 2) resident = 0;
    fclose(f);
  }
  return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1 << 20);
}

/* Bytes malloc has handed out and not had back (every arena; mmapped blocks included): a leak's own measure,
 * free of the fragmentation and trimming that move the resident set. */
static double heap_mib(void) {
  const struct mallinfo2 mi = mallinfo2();
  return (double)(mi.uordblks + mi.hblkhd) / (1 << 20);
}

static double device_used_mib(bench_ctx_t *ctx) {
  size_t free_bytes = 0, total = 0;
  if (!soak_gpu(ctx) || cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 0;
  return (double)(total - free_bytes) / (1 << 20);
}

/* ---- the heap, the totals ---------------------------------------------------------------------------------------- */

/* Every operation's symmetric memory at the world size the run will have (the host threads, or the launcher's
 * environment), and room for the backend's own. */
size_t bench_soak_heap(const bench_opts_t *opts) {
  int world = opts->world;
  sy_launch_info_t info;
  if (opts->backend != SY_BACKEND_HOST)
    world = sy__launch_info_from_env(&info) == SY_SUCCESS && info.world_size >= 1 ? info.world_size : 8;
  return soak_a2a_heap(world, opts->backend) + soak_attn_heap(world, opts->backend) +
         soak_moe_heap(world, opts->backend) + soak_moe_ht_heap(world, opts->backend) + ((size_t)64 << 20);
}

static long long sum_over_ranks(bench_ctx_t *ctx, long long v) {
  long long *all = calloc((size_t)ctx->world, sizeof *all), sum = v;
  if (all && sy_comm_allgather_host(ctx->comm, &v, all, sizeof v) == SY_SUCCESS) {
    sum = 0;
    for (int r = 0; r < ctx->world; r++) sum += all[r];
  }
  free(all);
  return sum;
}

/* ---- the loop ------------------------------------------------------------------------------------------------------ */

typedef struct watch {
  double interval, warm_until;
  int have_base;
  mem_sample_t base, last, peak;
} watch_t;

static void sample(bench_ctx_t *ctx, watch_t *w, double t, const soak_stats_t *st, long long rounds) {
  malloc_trim(0); /* free pages go back first, so that the resident set measures what is held, not the arenas' slack */
  mem_sample_t m = {t, rss_mib(), heap_mib(), device_used_mib(ctx)};
  w->last = m;
  if (!w->have_base && t >= w->warm_until && st->calls[SOAK_A2A] && st->calls[SOAK_ATTN] && st->calls[SOAK_MOE] &&
      (st->calls[SOAK_MOE_HT] || st->moe_ht_off)) {
    w->base = w->peak = m;
    w->have_base = 1;
  }
  if (w->have_base) {
    if (m.rss_mib > w->peak.rss_mib) w->peak.rss_mib = m.rss_mib;
    if (m.heap_mib > w->peak.heap_mib) w->peak.heap_mib = m.heap_mib;
    if (m.dev_mib > w->peak.dev_mib) w->peak.dev_mib = m.dev_mib;
  }
  bench_print(ctx,
              "# %7.1f s: %lld rounds (alltoall %lld, attention %lld, moe %lld, moe-ht %lld), wrong %lld; rss %.1f "
              "MiB, heap in use %.1f MiB, device %.1f MiB used%s\n",
              t, rounds, st->calls[SOAK_A2A], st->calls[SOAK_ATTN], st->calls[SOAK_MOE], st->calls[SOAK_MOE_HT],
              st->wrong[SOAK_A2A] + st->wrong[SOAK_ATTN] + st->wrong[SOAK_MOE] + st->wrong[SOAK_MOE_HT], m.rss_mib,
              m.heap_mib, m.dev_mib, w->have_base && w->base.t == t ? " (baseline)" : "");
}

static int one_round(bench_ctx_t *ctx, soak_a2a_t *a2a, soak_attn_t *attn, soak_moe_t *moe, soak_moe_ht_t *moe_ht,
                     uint64_t seed, int op, soak_stats_t *st) {
  switch (op) {
    case SOAK_A2A: return soak_a2a_round(ctx, a2a, seed, st);
    case SOAK_ATTN: return soak_attn_round(ctx, attn, seed, st);
    case SOAK_MOE_HT: return soak_moe_ht_round(ctx, moe_ht, seed, st);
    default: return soak_moe_round(ctx, moe, seed, st);
  }
}

static const char *op_name(int op) {
  static const char *const names[SOAK_OPS] = {"alltoall", "attention", "moe", "moe-ht"};
  return op >= 0 && op < SOAK_OPS ? names[op] : "?";
}

/* The report's lines and JSON row; returns non-zero when memory grew past the limit on any rank. */
static int report(bench_ctx_t *ctx, const soak_stats_t *st, const watch_t *w, double seconds, long long rounds,
                  long long errors) {
  const double limit = (double)ctx->opts->soak_growth / (1 << 20);
  const mem_sample_t base = w->have_base ? w->base : w->last, peak = w->have_base ? w->peak : w->last;
  const double rss_growth = bench_allreduce_max_d(ctx, w->last.rss_mib - base.rss_mib);
  const double heap_growth = bench_allreduce_max_d(ctx, w->last.heap_mib - base.heap_mib);
  const double dev_growth = bench_allreduce_max_d(ctx, w->last.dev_mib - base.dev_mib);
  long long wrong[SOAK_OPS];
  for (int op = 0; op < SOAK_OPS; op++) wrong[op] = sum_over_ranks(ctx, st->wrong[op]);
  const long long all_wrong = wrong[SOAK_A2A] + wrong[SOAK_ATTN] + wrong[SOAK_MOE] + wrong[SOAK_MOE_HT];
  bench_print(ctx,
              "# soak: %.1f s, %lld rounds: alltoall %lld calls; attention %lld (q forward %lld, q+kv forward %lld, "
              "q reverse %lld, kv backward %lld; %lld placed plans); moe %lld dispatch+combine rounds (fp8 %lld, "
              "fp8-ue8m0 %lld, bf16 %lld; per-expert %lld; as halves %lld; objects created again %lld)\n",
              seconds, rounds, st->calls[SOAK_A2A], st->calls[SOAK_ATTN], st->attn_dirs[SOAK_Q_FWD],
              st->attn_dirs[SOAK_QKV_FWD], st->attn_dirs[SOAK_Q_REV], st->attn_dirs[SOAK_KV_BWD], st->attn_placed,
              st->calls[SOAK_MOE], st->moe_wires[0], st->moe_wires[1], st->moe_wires[2], st->moe_per_expert,
              st->moe_halves, st->moe_recreated);
  if (st->moe_ht_off && ctx->opts->soak_no_moe_ht)
    bench_print(ctx, "# soak: moe-ht left out (--soak-without-moe-ht)\n");
  else if (st->moe_ht_off)
    bench_print(ctx, "# soak: moe-ht left out: sy_moe_ht_create answers %s on the %s backend\n",
                sy_status_name(SY_ERR_UNSUPPORTED), sy_backend_name(ctx->backend));
  else
    bench_print(ctx,
                "# soak: moe-ht %lld steps (fp8 %lld, fp8-ue8m0 %lld, bf16 %lld; exact counts %lld; unweighted "
                "combines %lld; objects created again %lld)\n",
                st->calls[SOAK_MOE_HT], st->moe_ht_wires[0], st->moe_ht_wires[1], st->moe_ht_wires[2], st->moe_ht_exact,
                st->moe_ht_unit, st->moe_ht_recreated);
  bench_print(ctx,
              "# soak: wrong elements %lld (alltoall %lld, attention %lld, moe %lld, moe-ht %lld), over all ranks; "
              "errors %lld\n",
              all_wrong, wrong[SOAK_A2A], wrong[SOAK_ATTN], wrong[SOAK_MOE], wrong[SOAK_MOE_HT], errors);
  bench_print(ctx,
              "# soak: memory from %.1f s (%s) to %.1f s: rss %.1f -> %.1f MiB (%+.1f, peak %+.1f), heap in use %.1f "
              "-> %.1f MiB (%+.1f), device used %.1f -> %.1f MiB (%+.1f, peak %+.1f)\n",
              base.t, w->have_base ? "after every operation ran and the warm-up" : "no baseline: too short a run",
              w->last.t, base.rss_mib, w->last.rss_mib, w->last.rss_mib - base.rss_mib, peak.rss_mib - base.rss_mib,
              base.heap_mib, w->last.heap_mib, w->last.heap_mib - base.heap_mib, base.dev_mib, w->last.dev_mib,
              w->last.dev_mib - base.dev_mib, peak.dev_mib - base.dev_mib);
  bench_print(ctx, "# soak: the most any rank grew: rss %+.1f, heap in use %+.1f, device %+.1f MiB; limit %.1f MiB\n",
              rss_growth, heap_growth, dev_growth, limit);
  const int grew = rss_growth > limit || heap_growth > limit || dev_growth > limit;
  if (grew) bench_print(ctx, "# soak: MEMORY GREW past the limit (--soak-growth)\n");
  bench_json(ctx,
             "{\"entry\": \"soak\", \"backend\": \"%s\", \"world\": %d, \"seconds\": %.1f, \"rounds\": %lld, "
             "\"calls\": {\"alltoall\": %lld, \"attn\": %lld, \"moe\": %lld, \"moe_ht\": %lld}, \"wrong\": %lld, "
             "\"errors\": %lld, "
             "\"rss_growth_MiB\": %.2f, \"heap_growth_MiB\": %.2f, \"device_growth_MiB\": %.2f, "
             "\"growth_limit_MiB\": %.1f, \"seed\": %llu}",
             sy_backend_name(ctx->backend), ctx->world, seconds, rounds, st->calls[SOAK_A2A], st->calls[SOAK_ATTN],
             st->calls[SOAK_MOE], st->calls[SOAK_MOE_HT], all_wrong, errors, rss_growth, heap_growth, dev_growth, limit,
             (unsigned long long)ctx->opts->seed);
  return grew;
}

int bench_soak(bench_ctx_t *ctx) {
  const bench_opts_t *o = ctx->opts;
  const double seconds = o->soak_s > 0 ? o->soak_s : 60;
  soak_stats_t st;
  memset(&st, 0, sizeof st);
  st.rank = ctx->rank;
  soak_a2a_t *a2a = NULL;
  soak_attn_t *attn = NULL;
  soak_moe_t *moe = NULL;
  soak_moe_ht_t *moe_ht = NULL;
  int rc = soak_a2a_open(ctx, &a2a);
  rc = rc || soak_attn_open(ctx, &attn);
  rc = rc || soak_moe_open(ctx, &moe);
  rc = (int)bench_allreduce_max(ctx, rc);
  if (!rc) rc = soak_moe_ht_open(ctx, &moe_ht); /* collective; every rank learns the same availability */
  st.moe_ht_off = !soak_moe_ht_available(moe_ht) || o->soak_no_moe_ht;
  watch_t w;
  memset(&w, 0, sizeof w);
  w.interval = seconds / 20 < 1 ? 1 : seconds / 20 > 10 ? 10 : seconds / 20;
  w.warm_until = seconds / 10 < 2 ? 2 : seconds / 10 > 30 ? 30 : seconds / 10;
  bench_print(ctx,
              "# soak: %.0f s, seed 0x%llx; each round one operation with random shapes, every output compared with "
              "src/ref's reference; memory sampled every %.1f s, growth measured from the first sample after %.0f s "
              "once every operation ran\n",
              seconds, (unsigned long long)o->seed, w.interval, w.warm_until);
  const double t0 = bench_now_s();
  double next_sample = 0;
  long long rounds = 0, errors = 0;
  const int samples = soak_gpu(ctx) || ctx->rank == 0; /* host threads share one process: rank 0 samples it */
  for (int stop = rc; !stop; rounds++) {
    const uint64_t seed = wl_mix(o->seed + (uint64_t)rounds);
    /* without the high-throughput mode the draw is among the others, as before it existed */
    const int op = (int)soak_pick(seed, 0, st.moe_ht_off ? SOAK_MOE_HT : SOAK_OPS);
    const int failed = one_round(ctx, a2a, attn, moe, moe_ht, seed, op, &st) != 0 || soak_sync(ctx);
    if (failed) {
      sy_status_t async = SY_SUCCESS;
      char detail[256] = "";
      sy_comm_async_error(ctx->comm, &async, detail, sizeof detail);
      fprintf(stderr, "sy-bench soak: rank %d: round %lld (%s, seed 0x%llx) failed: %s %s\n", ctx->rank, rounds,
              op_name(op), (unsigned long long)seed, sy_status_name(async), detail);
      errors++;
    }
    const double t = bench_now_s() - t0;
    if (samples && t >= next_sample) {
      sample(ctx, &w, t, &st, rounds + 1);
      next_sample = t + w.interval;
    }
    stop = (int)bench_allreduce_max(ctx, failed || t >= seconds);
  }
  if (samples) sample(ctx, &w, bench_now_s() - t0, &st, rounds);
  errors = sum_over_ranks(ctx, errors);
  const int grew = report(ctx, &st, &w, bench_now_s() - t0, rounds, errors);
  ctx->total_wrong += st.wrong[SOAK_A2A] + st.wrong[SOAK_ATTN] + st.wrong[SOAK_MOE] + st.wrong[SOAK_MOE_HT];
  soak_moe_ht_close(ctx, moe_ht);
  soak_moe_close(ctx, moe);
  soak_attn_close(ctx, attn);
  soak_a2a_close(ctx, a2a);
  return rc || errors || grew;
}
