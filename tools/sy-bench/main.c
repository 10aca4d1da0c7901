/*
 * main.c — sy-bench's driver: options, ranks (processes under a launcher on the cuda backend, threads on
 * the host backend), the NCCL baseline communicator, timing, output. Entries live one per file.
 *
 *   syrun -n 4 sy-bench alltoall            # GPUs, NCCL beside us
 *   sy-bench --backend host --world 4 alltoall
 *   sy-bench --backend host --world 3 --soak 30   # the soak mode (soak.c): every operation checked, memory watched
 */
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "core/internal.h"

static const bench_entry_t entries[] = {
    {"alltoall", "sy_alltoall, equal splits per rank, vs NCCL grouped send/recv", bench_alltoall, bench_alltoall_heap,
     0},
    {"attn", "attention Q+KV forward (Q 4096 B, KV 1024 B rows, C=2), vs NCCL all-to-all-v", bench_attn,
     bench_attn_heap, 0},
    {"moe-ll", "MoE low-latency dispatch and combine (hidden 7168, top-8 of 256 experts), vs NCCL send/recv", bench_moe,
     bench_moe_heap, 0},
    {"moe-ht", "MoE high-throughput calls of a step, forward and backward (hidden 7168, top-8 of 256), vs NCCL, a copy",
     bench_moe_ht, bench_moe_ht_heap, 0},
    {"pool",
     "stream-ordered pool: host time of sy_pool_alloc + sy_pool_free against cudaMalloc + cudaFree and "
     "cudaMallocAsync + cudaFreeAsync",
     bench_pool, bench_pool_heap, 1},
    {"layer",
     "one MoE layer's forward (layout, dispatch, two GEMMs, combine): sequential, two micro-batches on two "
     "streams, replayed from the graph cache",
     bench_layer, bench_layer_heap, 1},
    {"soak", "every operation again and again, random shapes, each result checked, memory watched (--soak SECONDS)",
     bench_soak, bench_soak_heap, 0},
};
static const int num_entries = (int)(sizeof entries / sizeof entries[0]);

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static char *json_rows;
static size_t json_len, json_cap;

void bench_print(bench_ctx_t *ctx, const char *fmt, ...) {
  if (ctx->rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&out_lock);
  vprintf(fmt, ap);
  fflush(stdout);
  pthread_mutex_unlock(&out_lock);
  va_end(ap);
}

void bench_json(bench_ctx_t *ctx, const char *fmt, ...) {
  if (ctx->rank != 0 || !ctx->opts->json_path) return;
  char row[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(row, sizeof row, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  pthread_mutex_lock(&out_lock);
  if (json_len + (size_t)n + 8 > json_cap) {
    json_cap = 2 * (json_cap + (size_t)n + 8);
    json_rows = realloc(json_rows, json_cap);
  }
  json_len += (size_t)sprintf(json_rows + json_len, "%s    %s", json_len ? ",\n" : "", row);
  pthread_mutex_unlock(&out_lock);
}

long long bench_allreduce_max(bench_ctx_t *ctx, long long value) {
  long long *all = calloc((size_t)ctx->world, sizeof *all), best = value;
  if (all && sy_comm_allgather_host(ctx->comm, &value, all, sizeof value) == SY_SUCCESS)
    for (int r = 0; r < ctx->world; r++) best = all[r] > best ? all[r] : best;
  free(all);
  return best;
}

double bench_allreduce_max_d(bench_ctx_t *ctx, double value) {
  double *all = calloc((size_t)ctx->world, sizeof *all), best = value;
  if (all && sy_comm_allgather_host(ctx->comm, &value, all, sizeof value) == SY_SUCCESS)
    for (int r = 0; r < ctx->world; r++) best = all[r] > best ? all[r] : best;
  free(all);
  return best;
}

double bench_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const char *bench_fmt_us(char *buf, size_t size, int width, double v) {
  if (v > 0) snprintf(buf, size, "%*.2f", width, v);
  else snprintf(buf, size, "%*s", width, "-");
  return buf;
}

const char *bench_json_us(char *buf, size_t size, double v) {
  if (v > 0) snprintf(buf, size, "%.3f", v);
  else snprintf(buf, size, "null");
  return buf;
}

/* The slowest rank's kernel time, or 0 (no figure) if any rank has none. */
double bench_kernel_max(bench_ctx_t *ctx, double v) {
  const double none = bench_allreduce_max_d(ctx, v > 0 ? 0.0 : 1.0);
  const double best = bench_allreduce_max_d(ctx, v);
  return none > 0 ? 0.0 : best;
}

int bench_warm(bench_ctx_t *ctx, bench_op_fn op, void *arg) {
  const int warmup = ctx->opts->warmup;
  const int gpu = ctx->backend == SY_BACKEND_CUDA;
  int rc = 0;
  const double t0 = bench_now_s();
  for (int i = 0; i < warmup && !rc; i++) rc = op(ctx, arg);
  if (gpu && !rc && cudaStreamSynchronize(ctx->stream) != cudaSuccess) rc = 1;
  /* Then rounds of calls until warm_s has passed, each round's count from the last round's rate (the first from the
   * --warmup calls, which may include a graph's capture: short, so a second round follows), the same count on every
   * rank (they are collective calls). */
  const double fill = ctx->warm_s > 0 ? ctx->warm_s : BENCH_WARM_S;
  double spent = bench_now_s() - t0, per_call = warmup ? spent / warmup : 0;
  for (;;) {
    long long more = !rc && per_call > 0 && spent < fill ? (long long)((fill - spent) / per_call) + 1 : 0;
    more = bench_allreduce_max(ctx, more > 100000 ? 100000 : more);
    rc = bench_allreduce_max(ctx, rc) != 0;
    if (rc || more == 0) break;
    const double r0 = bench_now_s();
    for (long long i = 0; i < more && !rc; i++) rc = op(ctx, arg);
    if (gpu && !rc && cudaStreamSynchronize(ctx->stream) != cudaSuccess) rc = 1;
    const double now = bench_now_s();
    per_call = (now - r0) / (double)more;
    spent = now - t0;
  }
  return rc;
}

int bench_time(bench_ctx_t *ctx, bench_op_fn op, void *arg, bench_timing_t *out) {
  const int iters = ctx->opts->iters;
  const int gpu = ctx->backend == SY_BACKEND_CUDA;
  double *t = calloc((size_t)iters, sizeof *t);
  if (!t) return 1;
  int rc = bench_warm(ctx, op, arg);
  out->time_us = 0;
  if (gpu && !rc) { /* device time: events around each call, back to back */
    cudaEvent_t *ev = calloc(2 * (size_t)iters, sizeof *ev);
    for (int i = 0; i < 2 * iters; i++) cudaEventCreate(&ev[i]);
    for (int i = 0; i < iters && !rc; i++) {
      cudaEventRecord(ev[2 * i], ctx->stream);
      rc = op(ctx, arg);
      cudaEventRecord(ev[2 * i + 1], ctx->stream);
    }
    if (cudaStreamSynchronize(ctx->stream) != cudaSuccess) rc = 1;
    for (int i = 0; i < iters && !rc; i++) {
      float ms = 0;
      cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
      t[i] = ms * 1e3;
    }
    for (int i = 0; i < 2 * iters; i++) cudaEventDestroy(ev[i]);
    free(ev);
    if (!rc) out->time_us = bench_median(t, iters);
  }
  out->kernel_us = 0;
  if (gpu && !rc && bench_ktime_begin() == 0) { /* kernel time: the same calls again, under CUPTI */
    for (int i = 0; i < iters && !rc; i++) {
      bench_ktime_push((uint64_t)i);
      rc = op(ctx, arg);
      bench_ktime_pop();
    }
    if (cudaStreamSynchronize(ctx->stream) != cudaSuccess) rc = 1;
    if (bench_ktime_end(iters, t) == 0 && !rc) out->kernel_us = bench_median(t, iters);
  }
  for (int i = 0; i < iters && !rc; i++) { /* host-observed: enqueue to completion */
    double t0 = bench_now_s();
    rc = op(ctx, arg);
    if (gpu && cudaStreamSynchronize(ctx->stream) != cudaSuccess) rc = 1;
    t[i] = (bench_now_s() - t0) * 1e6;
  }
  if (!rc) out->host_us = bench_median(t, iters);
  if (!gpu) out->time_us = out->host_us;
  free(t);
  /* The collective's time is its slowest rank's. */
  out->time_us = bench_allreduce_max_d(ctx, out->time_us);
  out->host_us = bench_allreduce_max_d(ctx, out->host_us);
  out->kernel_us = bench_kernel_max(ctx, out->kernel_us);
  out->valid = !rc;
  return rc;
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: sy-bench [options] ENTRY   (an option's value follows it, or '=': --tokens=1,32)\n"
      "  --backend auto|cuda|host  default auto: cuda when a GPU is visible\n"
      "  --world N                 host backend: ranks as threads (default 4)\n"
      "  -b, --minbytes SIZE       alltoall: smallest size per rank (default 64K)\n"
      "  -e, --maxbytes SIZE       alltoall: largest size per rank (default 512M on GPUs, 16M on the host)\n"
      "  -f, --stepfactor N        alltoall: size multiplier (default 2)\n"
      "  -n, --iters N             timed calls per size (default 20; the median is reported)\n"
      "  -w, --warmup N            untimed calls first (default 5), then more to fill 20 ms\n"
      "  -c, --check 0|1           check results against the CPU reference (default 1)\n"
      "      --no-nccl             skip the NCCL baseline\n"
      "      --soak-without-moe-ht the soak leaves the high-throughput MoE out\n"
      "      --json FILE           also write the rows as JSON\n"
      "  -t, --min-tokens N        attn: fewest tokens per rank (default 8K)\n"
      "  -T, --max-tokens N        attn: most tokens per rank (default 512K on GPUs, 32K on the host);\n"
      "                            moe-ll, moe-ht: keep the sizes of their lists inside [-t, -T]\n"
      "      --tokens N[,N...]     moe-ll, moe-ht, layer: tokens per rank to run (default 1,32,128,256;\n"
      "                            moe-ht 4096,8192; layer 128,4096 on GPUs, 16,288 on the host)\n"
      "      --wire fp8|bf16       moe-ll, moe-ht: only that dispatch wire (default both)\n"
      "      --mode dedup|per-expert  moe-ll: only that mode (default both)\n"
      "      --alignment N         moe-ht: each local expert's rows padded to a multiple of N (default 128)\n"
      "      --routing KIND        moe-ht: uniform (default: each token's experts drawn from all), local (from\n"
      "                            its own rank's experts: no token leaves its rank) or hot (from rank 0's:\n"
      "                            every token goes to rank 0)\n"
      "      --keep-experts F      moe-ht: only the ids of each rank's first floor(L x F) experts kept, the\n"
      "                            others -1 (0 < F <= 1; one expert group of the layer's --split experts)\n"
      "      --scales group|row    moe-ht, FP8: recv.scales group-major (default) or row-major\n"
      "                            (SY_MOE_HT_SCALES_ROW_MAJOR)\n"
      "      --recv device|arena   moe-ht, layer: recv in plain device memory (default) or the object's receive arena\n"
      "                            (config.recv_arena_bytes: the dispatch's first copy in place)\n"
      "      --num-sms N           moe-ht, layer: the SMs its kernels may hold (default 16)\n"
      "      --micro-batches N|W,W..  layer: micro-batches of ways b and c, 2 to 8 (default 2): N of even size, or\n"
      "                            one a weight, each its share of the tokens (1,3,3,1: small first and last;\n"
      "                            with --split experts its share of the experts)\n"
      "      --split tokens|experts  layer (prefill): micro-batches of the tokens (default), or of each rank's\n"
      "                            experts in groups as even as they allow (or by the weights, each its share of\n"
      "                            the experts), every token in each (an expert's GEMMs\n"
      "                            keep all its rows; a token crosses a link once a group it has experts in there;\n"
      "                            the groups' outputs summed: --group-sum)\n"
      "      --group-sum add|kernel  layer, --split experts: each group's combine after the first adds into the\n"
      "                            output (sy_moe_ht_combine_add; default), or the groups' partial outputs are\n"
      "                            summed by a kernel after the last\n"
      "      --end-sms N           layer, --split experts: the step's ends, the first group's layout and dispatch\n"
      "                            and the last group's combine (forward and backward), on N SMs\n"
      "                            (sy_moe_ht_set_num_sms): no GEMM runs beside them\n"
      "      --gemm-sms N          layer: the SMs the micro-batches' GEMMs target (cublasLt; default: those the\n"
      "                            communication leaves; 0: every SM)\n"
      "      --layers N            layer: N MoE layers a step (default 1), each micro-batch's next layer after its\n"
      "                            last one: only the first dispatch and the last combine are left with nothing\n"
      "                            beside them; every way runs N layers\n"
      "      --settle S            layer: each way's untimed calls before its timing fill S seconds (default 3 on\n"
      "                            a GPU: at its power limit a GPU's clock follows its temperature, which an idle\n"
      "                            moment, e.g. the CPU's check of a way, lowers; 0: the usual 20 ms)\n"
      "      --ways LIST           layer: the ways to time, in this order (default comm,compute,gemms,a,b,c; a\n"
      "                            way may come back, e.g. c,b,c,b: each timing a row); the targets' lines need\n"
      "                            the ways they compare; s (with --end-sms N, named only): a with every\n"
      "                            communication call on N SMs, the step with no overlap that b and c must beat\n"
      "      --gemm-beside F       layer: of each micro-batch's experts, the share F whose GEMMs run on --gemm-sms\n"
      "                            beside the communication; the rest on every SM once it has ended (default 1)\n"
      "      --expert-weights distinct|shared  layer: each expert its own W1 and W2 (default) or one pair for all\n"
      "                            (every expert's FLOPs on one expert's weight bytes, L2-resident)\n"
      "      --soak SECONDS        the entry soak for this long (default 60): exit non-zero on any wrong element,\n"
      "                            failed call or memory growth past --soak-growth SIZE (default 32M)\n"
      "      --seed N              soak: the first round's seed (default 0x50a4)\n"
      "environment: SY_BENCH_CUPTI=PATH (libcupti for the kernel-time columns), SY_BENCH_NO_CUPTI=1 (none: the\n"
      "  default of pool and layer, whose host times CUPTI adds to), SY_BENCH_TIMELINE=FILE (each timed pass's\n"
      "  last call's kernels appended to FILE, %%r the rank: start, end, stream, grid, block, shared memory,\n"
      "  name), SY_BENCH_GEMM_WORKSPACE=MiB (layer: cuBLASLt's workspace; default 0 for decode, 32 for prefill),\n"
      "  SY_BENCH_LAYER_MARKS=FILE (layer: each way's wall-clock start and end appended to FILE, rank 0),\n"
      "  SY_BENCH_ENQUEUE_FILE=FILE (layer: each way's enqueue samples appended to FILE, rank 0)\n"
      "entries:\n");
  for (int i = 0; i < num_entries; i++) fprintf(f, "  %-12s %s\n", entries[i].name, entries[i].doc);
}

/* The options only some entries read, so that one given to another entry, which would ignore it, is refused. names:
 * its spellings; entries: the entries that read it; sizes: an option of the sizes to run (the refusal says which
 * options the entry takes for those). The others (--backend, --world, -n, -w, -c, --no-nccl, --json) apply to all. */
static const struct entry_option {
  const char *names[10];
  const char *entries; /* as the message says them: "moe-ll, moe-ht and layer" */
  int sizes;
} entry_options[] = {
    {{"-b", "--minbytes", "-e", "--maxbytes", "-f", "--stepfactor"}, "alltoall", 1},
    {{"-t", "--min-tokens", "-T", "--max-tokens"}, "attn, moe-ll and moe-ht", 1},
    {{"--tokens"}, "moe-ll, moe-ht and layer", 1},
    {{"--wire"}, "moe-ll and moe-ht", 0},
    {{"--mode"}, "moe-ll", 0},
    {{"--alignment", "--routing", "--keep-experts", "--scales"}, "moe-ht", 0},
    {{"--recv", "--num-sms"}, "moe-ht and layer", 0},
    {{"--micro-batches", "--split", "--group-sum", "--end-sms", "--gemm-sms", "--layers", "--settle", "--ways",
      "--gemm-beside", "--expert-weights"},
     "layer",
     0},
    {{"--seed", "--soak-growth", "--soak-without-moe-ht"}, "soak", 0},
};

/* What an entry's sizes come from, for the refusal of another entry's size option. */
static const char *entry_sizes(const char *entry) {
  static const char *const sizes[][2] = {{"alltoall", "-b/-e/-f (bytes per rank)"},
                                         {"attn", "-t/-T (tokens per rank)"},
                                         {"moe-ll", "--tokens (kept inside -t/-T)"},
                                         {"moe-ht", "--tokens (kept inside -t/-T)"},
                                         {"layer", "--tokens"},
                                         {"pool", "no size options"},
                                         {"soak", "no size options (it draws its own shapes)"}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    if (!strcmp(entry, sizes[i][0])) return sizes[i][1];
  return "no size options";
}

/* Whether `list` ("a, b and c") names `entry`. */
static int names_entry(const char *list, const char *entry) {
  const size_t len = strlen(entry);
  for (const char *p = strstr(list, entry); p; p = strstr(p + 1, entry))
    if ((p == list || p[-1] == ' ') && (!p[len] || p[len] == ',' || p[len] == ' ')) return 1;
  return 0;
}

/* The row of entry_options that names option `a`, or -1 (an option every entry reads, or none). */
static int entry_option_row(const char *a) {
  for (int i = 0; i < (int)(sizeof entry_options / sizeof entry_options[0]); i++)
    for (int k = 0; k < 10 && entry_options[i].names[k]; k++)
      if (!strcmp(a, entry_options[i].names[k])) return i;
  return -1;
}

/* The world of a launcher's variables (src/boot/launch.c's list), 0 when none is set; *var: the variable read. */
static int launcher_world(const char **var) {
  static const char *const names[] = {"SY_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE",
                                      "PMI_SIZE"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *v = getenv(names[i]);
    if (v && *v) {
      *var = names[i];
      return atoi(v);
    }
  }
  return 0;
}

static const bench_entry_t *find_entry(const char *name) {
  for (int i = 0; i < num_entries; i++)
    if (!strcmp(entries[i].name, name)) return &entries[i];
  return NULL;
}

typedef struct rank_job {
  const bench_opts_t *opts;
  int rank; /* host backend: this thread's rank; cuda: -1 (from the launcher) */
  int status;
} rank_job_t;

static int setup_nccl(bench_ctx_t *ctx) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (ctx->rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) return 1;
  ncclUniqueId *all = calloc((size_t)ctx->world, sizeof id);
  if (!all || sy_comm_allgather_host(ctx->comm, &id, all, sizeof id) != SY_SUCCESS) {
    free(all);
    return 1;
  }
  ncclComm_t nc = NULL;
  ncclResult_t r = ncclCommInitRank(&nc, ctx->world, all[0], ctx->rank);
  free(all);
  if (r != ncclSuccess) {
    fprintf(stderr, "sy-bench: rank %d: ncclCommInitRank: %s\n", ctx->rank, ncclGetErrorString(r));
    return 1;
  }
  ctx->nccl = nc;
  return 0;
}

static int op_empty(bench_ctx_t *ctx, void *arg) { return sy__cuda_empty_launch(ctx->stream) != SY_SUCCESS; }

static void print_header(bench_ctx_t *ctx) {
  char device[320] = "host threads";
  if (ctx->backend == SY_BACKEND_CUDA) {
    int dev = 0;
    struct cudaDeviceProp prop;
    sy_comm_device(ctx->comm, &dev);
    if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
      snprintf(device, sizeof device, "%s (%d SMs)", prop.name, prop.multiProcessorCount);
  }
  int nccl_version = 0;
  if (ctx->nccl) ncclGetVersion(&nccl_version);
  time_t now = time(NULL);
  struct tm utc; /* every rank thread prints a header: gmtime's static result would be shared */
  char date[64];
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&now, &utc));
  bench_print(ctx, "# sy-bench %s: switchyard %s, backend %s, world %d, device %s\n", ctx->opts->entry, sy_version(),
              sy_backend_name(ctx->backend), ctx->world, device);
  if (ctx->nccl)
    bench_print(ctx, "# baseline: nccl %d.%d.%d in the same process on the same bytes\n", nccl_version / 10000,
                (nccl_version / 100) % 100, nccl_version % 100);
  else bench_print(ctx, "# baseline: none (%s)\n", ctx->backend == SY_BACKEND_HOST ? "host backend" : "--no-nccl");
  bench_print(ctx, "# %s; %d timed calls per size after %d warm-up, medians; check %s\n", date, ctx->opts->iters,
              ctx->opts->warmup, ctx->opts->check ? "on" : "off");
  if (ctx->backend == SY_BACKEND_CUDA) {
    bench_timing_t t;
    memset(&t, 0, sizeof t);
    const char *why = "";
    char floor_kernel[96] = "";
    const int ktime = bench_ktime_available(&why);
    if (bench_time(ctx, op_empty, NULL, &t) == 0 && t.kernel_us > 0)
      snprintf(floor_kernel, sizeof floor_kernel, ", %.2f us kernel time", t.kernel_us);
    if (ktime) bench_print(ctx, "# kernel time: CUPTI activity records, the device time a call's kernels held alone\n");
    else bench_print(ctx, "# kernel time: not measured (%s)\n", why);
    if (t.valid)
      bench_print(ctx, "# launch floor: an empty kernel takes %.2f us event-timed, %.2f us host-observed%s\n",
                  t.time_us, t.host_us, floor_kernel);
  }
}

static void *rank_main(void *p) {
  rank_job_t *job = p;
  const bench_opts_t *opts = job->opts;
  bench_ctx_t ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.opts = opts;
  sy_comm_config_t cfg = SY_COMM_CONFIG_INIT;
  cfg.backend = opts->backend;
  if (opts->backend == SY_BACKEND_HOST) {
    cfg.rank = job->rank;
    cfg.world_size = opts->world;
  }
  cfg.heap_bytes = find_entry(opts->entry)->heap_bytes(opts);
  sy_status_t st = sy_comm_init(&ctx.comm, &cfg);
  if (st != SY_SUCCESS) {
    fprintf(stderr, "sy-bench: sy_comm_init: %s (%s)\n", sy_status_name(st), sy_status_string(st));
    job->status = 1;
    return NULL;
  }
  sy_comm_rank(ctx.comm, &ctx.rank);
  sy_comm_size(ctx.comm, &ctx.world);
  sy_comm_backend(ctx.comm, &ctx.backend);
  const char *heap_env = getenv("SY_HEAP_SIZE");
  if (ctx.rank == 0 && cfg.heap_bytes && heap_env && *heap_env) /* the config's size wins over the variable */
    fprintf(stderr,
            "sy-bench: note: %s sizes its symmetric heap itself (%zu MiB a rank); SY_HEAP_SIZE=%s is not used\n",
            opts->entry, cfg.heap_bytes >> 20, heap_env);
  int rc = 0;
  if (ctx.backend == SY_BACKEND_CUDA) {
    /* the communication's stream at the highest priority, as NCCL's and the library's own (layer: the GEMMs' stream
     * at the lowest, so a communication kernel's blocks go first where both wait for SMs) */
    int lowest = 0, highest = 0;
    if (cudaDeviceGetStreamPriorityRange(&lowest, &highest) != cudaSuccess ||
        cudaStreamCreateWithPriority(&ctx.stream, cudaStreamNonBlocking, highest) != cudaSuccess)
      rc = 1;
    if (!rc && opts->nccl) rc = setup_nccl(&ctx);
  }
  if (!rc) {
    print_header(&ctx);
    bench_gpu_state_t gpu_before = {0};
    int dev = 0;
    if (ctx.backend == SY_BACKEND_CUDA && sy_comm_device(ctx.comm, &dev) == SY_SUCCESS)
      bench_gpu_state(dev, &gpu_before);
    rc = find_entry(opts->entry)->run(&ctx);
    bench_gpu_state_report(&ctx, &gpu_before);
  }
  long long wrong = bench_allreduce_max(&ctx, ctx.total_wrong);
  sy_status_t async = SY_SUCCESS;
  char detail[256] = "";
  sy_comm_async_error(ctx.comm, &async, detail, sizeof detail);
  if (async != SY_SUCCESS) {
    fprintf(stderr, "sy-bench: rank %d: %s: %s\n", ctx.rank, sy_status_name(async), detail);
    rc = 1;
  }
  bench_print(&ctx, "# %s: %s\n", opts->entry,
              rc      ? (strcmp(opts->entry, "soak") ? "FAILED to run" : "FAILED")
              : wrong ? "WRONG RESULTS"
                      : "all results correct");
  if (ctx.nccl) ncclCommDestroy((ncclComm_t)ctx.nccl);
  if (ctx.stream) cudaStreamDestroy(ctx.stream);
  sy_comm_destroy(ctx.comm);
  job->status = rc || wrong ? 1 : 0;
  return NULL;
}

static int parse_size_arg(const char *flag, const char *text, size_t *out) {
  if (sy__parse_size(text, out) != SY_SUCCESS || *out == 0) {
    fprintf(stderr, "sy-bench: %s %s: want a positive size such as 64K or 512M\n", flag, text);
    return 1;
  }
  return 0;
}

static int parse_int_arg(const char *flag, const char *text, int min, int *out) {
  long long v;
  if (sy__parse_int(text, &v) != SY_SUCCESS || v < min || v > 1000000) {
    fprintf(stderr, "sy-bench: %s %s: want an integer >= %d\n", flag, text, min);
    return 1;
  }
  *out = (int)v;
  return 0;
}

/* A number in (lo, hi] (lo_open) or [lo, hi]; the message says what is wanted. */
static int parse_double_arg(const char *flag, const char *text, double lo, int lo_open, double hi, const char *want,
                            double *out) {
  char *end;
  const double v = strtod(text, &end);
  if (*end || !*text || !((lo_open ? v > lo : v >= lo) && v <= hi)) {
    fprintf(stderr, "sy-bench: %s %s: want %s\n", flag, text, want);
    return 1;
  }
  *out = v;
  return 0;
}

/* --json FILE: opened for appending (so nothing in it changes) while the options are read, so that a path that cannot
 * be written fails now, with the reason, not after the run; a file this made is removed again. */
static int test_open(const char *flag, const char *path) {
  const int existed = access(path, F_OK) == 0;
  FILE *f = fopen(path, "a");
  if (!f) return fprintf(stderr, "sy-bench: %s %s: %s\n", flag, path, strerror(errno)) > 0;
  fclose(f);
  if (!existed) remove(path);
  return 0;
}

/* "N" (even micro-batches) or "W,W,..." (one a weight) into opts->micro_batches and opts->mb_weights. */
static int parse_micro_batches(const char *flag, const char *text, bench_opts_t *opts) {
  memset(opts->mb_weights, 0, sizeof opts->mb_weights);
  if (!strchr(text, ',')) {
    if (parse_int_arg(flag, text, 2, &opts->micro_batches)) return 1;
    return opts->micro_batches > 8 && fprintf(stderr, "sy-bench: %s %s: at most 8\n", flag, text) > 0;
  }
  char buf[128];
  const int max = (int)(sizeof opts->mb_weights / sizeof opts->mb_weights[0]);
  int n = 0, bad = strlen(text) >= sizeof buf || strstr(text, ",,") || text[0] == ',' || text[strlen(text) - 1] == ',';
  if (!bad) strcpy(buf, text);
  for (char *save = NULL, *item = bad ? NULL : strtok_r(buf, ",", &save); item && !bad;
       item = strtok_r(NULL, ",", &save)) {
    long long w;
    bad = n == max || sy__parse_int(item, &w) != SY_SUCCESS || w < 1 || w > 1000;
    if (!bad) opts->mb_weights[n++] = (int)w;
  }
  if (bad || n < 2)
    return fprintf(stderr, "sy-bench: %s %s: want 2 to %d weights from 1 to 1000, comma-separated\n", flag, text, max) >
           0;
  opts->micro_batches = n;
  return 0;
}

/* "1,32,128" into opts->token_list. */
static int parse_token_list(const char *flag, const char *text, bench_opts_t *opts) {
  char buf[256];
  if (strlen(text) >= sizeof buf) return fprintf(stderr, "sy-bench: %s: list too long\n", flag) > 0;
  if (strstr(text, ",,") || text[0] == ',' || text[strlen(text) - 1] == ',')
    return fprintf(stderr, "sy-bench: %s %s: an empty item\n", flag, text) > 0;
  strcpy(buf, text);
  opts->num_token_list = 0;
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    size_t v;
    if (opts->num_token_list == BENCH_MAX_TOKEN_LIST || sy__parse_size(item, &v) != SY_SUCCESS || v == 0 ||
        v > INT32_MAX) {
      fprintf(stderr, "sy-bench: %s %s: want up to %d positive token counts, comma-separated\n", flag, text,
              BENCH_MAX_TOKEN_LIST);
      return 1;
    }
    opts->token_list[opts->num_token_list++] = (int64_t)v;
  }
  if (!opts->num_token_list) return fprintf(stderr, "sy-bench: %s: empty list\n", flag) > 0;
  return 0;
}

int main(int argc, char **argv) {
  bench_opts_t opts = {
      NULL,   SY_BACKEND_AUTO,  4, 64 << 10, 0, 2,  20,   5, 1, 1,   NULL, 8192, 0, 0,   0, {0}, NULL, NULL, 0, 0,
      0x50a4, (size_t)32 << 20, 0, 0,        0, -1, NULL, 0, 0, {0}, 0,    0,    0, {0}, 0, -1,  0,    0,    0, 0};
  size_t tokens_arg = 0;
  int world_given = 0, min_bytes_given = 0;
  const char *launcher_var = NULL;
  const char *given[sizeof entry_options / sizeof entry_options[0]] = {0}; /* an option of each row, as given */
  /* --name=value as --name value (in `args`, static: reachable to the end, as argv is) */
  static char **args;
  args = calloc(2 * (size_t)argc + 1, sizeof *args);
  if (!args) return fprintf(stderr, "sy-bench: out of memory\n"), 1;
  int nargs = 0;
  for (int i = 0; i < argc; i++) {
    const char *eq = strncmp(argv[i], "--", 2) ? NULL : strchr(argv[i], '=');
    if (!eq || i == 0) {
      args[nargs++] = argv[i];
      continue;
    }
    args[nargs++] = strndup(argv[i], (size_t)(eq - argv[i])); /* kept to the end of the process, as argv is */
    args[nargs++] = (char *)eq + 1;
  }
  argc = nargs, argv = args;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    const int row = entry_option_row(a);
    if (row >= 0) given[row] = a;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--no-nccl")) {
      opts.nccl = 0;
      continue;
    } else if (!strcmp(a, "--soak-without-moe-ht")) {
      opts.soak_no_moe_ht = 1;
      continue;
    } else if (a[0] != '-') {
      if (opts.entry) {
        fprintf(stderr, "sy-bench: one entry at a time (%s and %s given)\n", opts.entry, a);
        return 2;
      }
      opts.entry = a;
      continue;
    } else if (!v) {
      fprintf(stderr, "sy-bench: %s needs a value\n", a);
      return 2;
    } else if (!strcmp(a, "--backend")) {
      if (!strcasecmp(v, "auto")) opts.backend = SY_BACKEND_AUTO;
      else if (!strcasecmp(v, "cuda")) opts.backend = SY_BACKEND_CUDA;
      else if (!strcasecmp(v, "host")) opts.backend = SY_BACKEND_HOST;
      else bad = fprintf(stderr, "sy-bench: --backend %s: want auto, cuda or host\n", v) > 0;
    } else if (!strcmp(a, "--world")) {
      bad = parse_int_arg(a, v, 1, &opts.world);
      world_given = 1;
    } else if (!strcmp(a, "-b") || !strcmp(a, "--minbytes")) {
      bad = parse_size_arg(a, v, &opts.min_bytes);
      min_bytes_given = 1;
    } else if (!strcmp(a, "-e") || !strcmp(a, "--maxbytes")) bad = parse_size_arg(a, v, &opts.max_bytes);
    else if (!strcmp(a, "-f") || !strcmp(a, "--stepfactor")) bad = parse_int_arg(a, v, 2, &opts.step_factor);
    else if (!strcmp(a, "-n") || !strcmp(a, "--iters")) bad = parse_int_arg(a, v, 1, &opts.iters);
    else if (!strcmp(a, "-w") || !strcmp(a, "--warmup")) bad = parse_int_arg(a, v, 0, &opts.warmup);
    else if (!strcmp(a, "-c") || !strcmp(a, "--check")) {
      bad = parse_int_arg(a, v, 0, &opts.check) ||
            (opts.check > 1 && fprintf(stderr, "sy-bench: %s %s: want 0 or 1\n", a, v) > 0);
    } else if (!strcmp(a, "--json")) {
      opts.json_path = v;
      bad = test_open(a, v);
    } else if (!strcmp(a, "-t") || !strcmp(a, "--min-tokens")) {
      bad = parse_size_arg(a, v, &tokens_arg);
      opts.min_tokens = (int64_t)tokens_arg;
      opts.tokens_given |= BENCH_MIN_TOKENS_GIVEN;
    } else if (!strcmp(a, "-T") || !strcmp(a, "--max-tokens")) {
      bad = parse_size_arg(a, v, &tokens_arg);
      opts.max_tokens = (int64_t)tokens_arg;
      opts.tokens_given |= BENCH_MAX_TOKENS_GIVEN;
    } else if (!strcmp(a, "--tokens")) bad = parse_token_list(a, v, &opts);
    else if (!strcmp(a, "--soak")) {
      char *end;
      opts.soak_s = strtod(v, &end);
      if (*end || !(opts.soak_s > 0 && opts.soak_s <= 1e7))
        bad = fprintf(stderr, "sy-bench: --soak %s: want a positive number of seconds\n", v) > 0;
    } else if (!strcmp(a, "--alignment")) bad = parse_int_arg(a, v, 1, &opts.alignment);
    else if (!strcmp(a, "--num-sms")) bad = parse_int_arg(a, v, 1, &opts.num_sms);
    else if (!strcmp(a, "--gemm-sms")) bad = parse_int_arg(a, v, 0, &opts.gemm_sms);
    else if (!strcmp(a, "--end-sms")) bad = parse_int_arg(a, v, 2, &opts.end_sms);
    else if (!strcmp(a, "--micro-batches")) {
      bad = parse_micro_batches(a, v, &opts);
    } else if (!strcmp(a, "--split")) {
      if (strcmp(v, "tokens") && strcmp(v, "experts"))
        bad = fprintf(stderr, "sy-bench: --split %s: expected tokens or experts\n", v) > 0;
      opts.split_experts = !strcmp(v, "experts");
    } else if (!strcmp(a, "--group-sum")) {
      if (strcmp(v, "add") && strcmp(v, "kernel"))
        bad = fprintf(stderr, "sy-bench: --group-sum %s: expected add or kernel\n", v) > 0;
      opts.group_kernel = !strcmp(v, "kernel");
    } else if (!strcmp(a, "--soak-growth")) bad = parse_size_arg(a, v, &opts.soak_growth);
    else if (!strcmp(a, "--seed")) {
      char *end;
      opts.seed = strtoull(v, &end, 0);
      if (*end || !*v) bad = fprintf(stderr, "sy-bench: --seed %s: want an unsigned integer\n", v) > 0;
    } else if (!strcmp(a, "--wire")) {
      if (strcmp(v, "fp8") && strcmp(v, "bf16"))
        bad = fprintf(stderr, "sy-bench: --wire %s: expected fp8 or bf16\n", v) > 0;
      opts.wire_only = v;
    } else if (!strcmp(a, "--keep-experts")) {
      char *end;
      opts.keep_experts = strtod(v, &end);
      if (*end || !*v || !(opts.keep_experts > 0 && opts.keep_experts <= 1))
        bad = fprintf(stderr, "sy-bench: --keep-experts %s: want a share in (0, 1]\n", v) > 0;
    } else if (!strcmp(a, "--routing")) {
      if (strcmp(v, "uniform") && strcmp(v, "local") && strcmp(v, "hot"))
        bad = fprintf(stderr, "sy-bench: --routing %s: expected uniform, local or hot\n", v) > 0;
      opts.routing = v;
    } else if (!strcmp(a, "--scales")) {
      if (strcmp(v, "group") && strcmp(v, "row"))
        bad = fprintf(stderr, "sy-bench: --scales %s: expected group or row\n", v) > 0;
      opts.scales_row_major = !strcmp(v, "row");
    } else if (!strcmp(a, "--layers")) {
      bad = parse_int_arg(a, v, 1, &opts.layers) ||
            (opts.layers > 64 && fprintf(stderr, "sy-bench: --layers %s: at most 64\n", v) > 0);
    } else if (!strcmp(a, "--settle")) {
      bad = parse_double_arg(a, v, 0, 0, 600, "seconds, 0 to 600", &opts.settle_s);
    } else if (!strcmp(a, "--ways")) {
      opts.num_ways = bench_layer_parse_ways(v, opts.ways, BENCH_MAX_WAYS);
      bad = opts.num_ways < 0;
    } else if (!strcmp(a, "--gemm-beside")) {
      bad = parse_double_arg(a, v, 0, 1, 1, "a share above 0 and at most 1", &opts.gemm_beside);
    } else if (!strcmp(a, "--expert-weights")) {
      if (strcmp(v, "distinct") && strcmp(v, "shared"))
        bad = fprintf(stderr, "sy-bench: --expert-weights %s: expected distinct or shared\n", v) > 0;
      opts.shared_weights = !strcmp(v, "shared");
    } else if (!strcmp(a, "--recv")) {
      if (strcmp(v, "device") && strcmp(v, "arena"))
        bad = fprintf(stderr, "sy-bench: --recv %s: expected device or arena\n", v) > 0;
      opts.recv_arena = !strcmp(v, "arena");
    } else if (!strcmp(a, "--mode")) {
      if (strcmp(v, "dedup") && strcmp(v, "per-expert"))
        bad = fprintf(stderr, "sy-bench: --mode %s: expected dedup or per-expert\n", v) > 0;
      opts.mode_only = v;
    } else {
      fprintf(stderr, "sy-bench: unknown option %s (sy-bench --help lists the options)\n", a);
      return 2;
    }
    if (bad) return 2;
    i++;
  }
  if (opts.soak_s > 0 && !opts.entry) opts.entry = "soak";
  if (opts.soak_s > 0 && strcmp(opts.entry, "soak")) {
    fprintf(stderr, "sy-bench: --soak runs the entry soak, not %s\n", opts.entry);
    return 2;
  }
  if (!opts.entry) {
    usage(stderr);
    return 2;
  }
  if (!find_entry(opts.entry)) {
    fprintf(stderr, "sy-bench: no entry named %s; the entries:", opts.entry);
    for (int e = 0; e < num_entries; e++) fprintf(stderr, " %s", entries[e].name);
    fprintf(stderr, " (sy-bench --help says what each does)\n");
    return 2;
  }
  /* An option the entry does not read would be ignored: refused, naming what the entry takes instead. */
  for (size_t i = 0; i < sizeof given / sizeof given[0]; i++) {
    if (!given[i] || names_entry(entry_options[i].entries, opts.entry)) continue;
    if (entry_options[i].sizes)
      fprintf(stderr, "sy-bench: %s applies to %s, not %s; %s takes %s\n", given[i], entry_options[i].entries,
              opts.entry, opts.entry, entry_sizes(opts.entry));
    else fprintf(stderr, "sy-bench: %s applies to %s, not %s\n", given[i], entry_options[i].entries, opts.entry);
    return 2;
  }
  if (find_entry(opts.entry)->host_times && !getenv("SY_BENCH_TIMELINE")) setenv("SY_BENCH_NO_CUPTI", "1", 0);
  if (opts.backend == SY_BACKEND_AUTO) {
    const char *env = getenv("SY_BACKEND");
    char reason[256];
    if (env && !strcasecmp(env, "host")) opts.backend = SY_BACKEND_HOST;
    else if (env && !strcasecmp(env, "cuda")) opts.backend = SY_BACKEND_CUDA;
    else if (env && *env && strcasecmp(env, "auto")) { /* as the library's resolve_backend (src/core/comm.c) */
      fprintf(stderr, "sy-bench: environment variable SY_BACKEND=%s is not auto, cuda or host\n", env);
      return 2;
    } else opts.backend = sy__cuda_available(reason, sizeof reason) ? SY_BACKEND_CUDA : SY_BACKEND_HOST;
  }
  if (opts.backend == SY_BACKEND_HOST && launcher_world(&launcher_var) > 1) {
    /* each process would run a host world of its own, --world threads, none of them the launcher's ranks */
    fprintf(stderr,
            "sy-bench: the host backend runs its ranks as threads of one process, but a launcher started this one "
            "(%s=%s): run sy-bench without a launcher and pick the ranks with --world N\n",
            launcher_var, getenv(launcher_var));
    return 2;
  }
  if (opts.backend == SY_BACKEND_CUDA && world_given)
    fprintf(stderr, "sy-bench: --world is ignored on the cuda backend (the ranks are the launcher's processes)\n");
  if (!opts.max_tokens) opts.max_tokens = opts.backend == SY_BACKEND_CUDA ? 512 * 1024 : 32 * 1024;
  /* -T alone below the default -t (moe-ll -T 128): the default gives way. */
  if (!(opts.tokens_given & BENCH_MIN_TOKENS_GIVEN) && opts.min_tokens > opts.max_tokens)
    opts.min_tokens = opts.max_tokens;
  if (opts.min_tokens > opts.max_tokens) {
    fprintf(stderr, "sy-bench: --min-tokens %lld is larger than --max-tokens %lld\n", (long long)opts.min_tokens,
            (long long)opts.max_tokens);
    return 2;
  }
  if (!opts.max_bytes) opts.max_bytes = opts.backend == SY_BACKEND_CUDA ? (size_t)512 << 20 : (size_t)16 << 20;
  if (opts.min_bytes > opts.max_bytes) {
    fprintf(stderr, "sy-bench: %s--minbytes %zu is larger than --maxbytes %zu%s\n",
            min_bytes_given ? "" : "the default ", opts.min_bytes, opts.max_bytes,
            min_bytes_given ? "" : " (give a smaller -b)");
    return 2;
  }
  if (opts.backend == SY_BACKEND_HOST || !strcmp(opts.entry, "soak")) opts.nccl = 0; /* the soak has no baseline */
  setenv("NCCL_NVLS_ENABLE", "0", 0); /* NVLink multicast stays off on our machines */

  int status = 0;
  if (opts.backend == SY_BACKEND_HOST) {
    rank_job_t *jobs = calloc((size_t)opts.world, sizeof *jobs);
    pthread_t *threads = calloc((size_t)opts.world, sizeof *threads);
    for (int r = 0; r < opts.world; r++) {
      jobs[r].opts = &opts;
      jobs[r].rank = r;
      pthread_create(&threads[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < opts.world; r++) {
      pthread_join(threads[r], NULL);
      status |= jobs[r].status;
    }
    free(jobs);
    free(threads);
  } else {
    rank_job_t job = {&opts, -1, 0};
    rank_main(&job);
    status = job.status;
  }
  if (opts.json_path && json_rows) {
    FILE *f = fopen(opts.json_path, "w");
    if (!f) {
      fprintf(stderr, "sy-bench: cannot write %s: %s\n", opts.json_path, strerror(errno));
      status = 1;
    } else {
      fprintf(f, "{\n  \"entry\": \"%s\",\n  \"version\": \"%s\",\n  \"rows\": [\n%s\n  ]\n}\n", opts.entry,
              sy_version(), json_rows);
      fclose(f);
    }
  }
  free(json_rows);
  return status;
}
