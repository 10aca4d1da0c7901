/*
 * bench.h — sy-bench's driver interface: one entry per operation, one driver that sets up the ranks (one
 * process per GPU under syrun/torchrun, or threads on the host backend), the NCCL baseline communicator
 * in the same process, timing (CUDA events and host clock, medians after warm-up), and the output: a `#`
 * header, one row per size, a footer, --json FILE, non-zero exit on any wrong value.
 */
#ifndef SY_BENCH_H
#define SY_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "switchyard.h"

#define BENCH_MAX_TOKEN_LIST   16
#define BENCH_MIN_TOKENS_GIVEN 1u
#define BENCH_MAX_TOKENS_GIVEN 2u

#define BENCH_MAX_WAYS 16 /* layer: the most ways --ways names */

typedef struct bench_opts {
  const char *entry;
  sy_backend_t backend;
  int world;        /* host backend: threads */
  size_t min_bytes; /* per rank */
  size_t max_bytes;
  int step_factor;
  int iters, warmup;
  int check;
  int nccl;
  const char *json_path;
  int64_t min_tokens, max_tokens; /* token-based entries (attn): tokens per rank */
  unsigned tokens_given;          /* BENCH_MIN_TOKENS_GIVEN | BENCH_MAX_TOKENS_GIVEN: set on the command line */
  int num_token_list;             /* --tokens: entries with a list of sizes (moe-ll, moe-ht); 0: the entry's default */
  int64_t token_list[BENCH_MAX_TOKEN_LIST];
  const char *wire_only, *mode_only; /* --wire (moe-ll, moe-ht), --mode (moe-ll): only that wire or mode */
  double soak_s;                     /* soak: seconds to run (--soak) */
  int soak_no_moe_ht;                /* soak: leave the high-throughput MoE out (--soak-without-moe-ht) */
  uint64_t seed;                     /* soak: the first round's seed (--seed) */
  size_t soak_growth;                /* soak: memory growth allowed, bytes (--soak-growth) */
  int alignment;                     /* moe-ht: expert alignment (--alignment); 0: the entry's default */
  int num_sms;                       /* moe-ht: the SM budget (--num-sms); 0: the entry's default */
  int micro_batches;                 /* layer: ways b and c's micro-batches (--micro-batches); 0: 2 */
  int gemm_sms;                      /* layer: the micro-batches' GEMMs' SM target (--gemm-sms); -1: the SMs the
                                      * communication leaves; 0: every SM */
  const char *routing;               /* moe-ht: uniform (NULL), local or hot (--routing) */
  int scales_row_major;              /* moe-ht: the FP8 rows' scales row-major (--scales row) */
  int recv_arena;                    /* moe-ht: recv from the object's receive arena (--recv arena): the dispatch's
                                      * first copy in place */
  int mb_weights[8];                 /* layer: the micro-batches' shares of the tokens, or with --split experts of
                                      * each rank's experts (--micro-batches 1,3,3,1);
                                      * all 0: even */
  int shared_weights;                /* layer: one W1 and W2 for every expert (--expert-weights shared) */
  double gemm_beside;                /* layer: the share of a micro-batch's experts whose GEMMs run beside the
                                      * communication (--gemm-beside); 0: all */
  int layers;                        /* layer: MoE layers a step (--layers); 0: 1 */
  int ways[BENCH_MAX_WAYS];          /* layer: the ways timed, in this order (--ways; a way may come back); */
  int num_ways;                      /* 0: comm, compute, gemms, a, b, c */
  double settle_s;                   /* layer: each timing's untimed calls fill this long (--settle); < 0: 3 s on a
                                      * GPU, BENCH_WARM_S on the host backend */
  int split_experts;                 /* layer: micro-batches by groups of each rank's experts, every token in each
                                      * (--split experts); 0: by tokens */
  int group_kernel;                  /* layer, --split experts: the groups' partial outputs summed by a kernel after
                                      * the last (--group-sum kernel); 0: each group's combine after the first adds
                                      * into the output (sy_moe_ht_combine_add, --group-sum add) */
  double keep_experts;               /* moe-ht: the share of each rank's experts whose ids stay, the first
                                      * floor(L x F) of its L (--keep-experts F; the others -1, as in one group of the
                                      * layer's --split experts); 0: all */
  int end_sms;                       /* layer, --split experts: the SM budget of the step's ends, the first group's
                                      * layout and dispatch and the last group's combine (--end-sms; no GEMM beside
                                      * them); 0: the layer's budget */
} bench_opts_t;

/* One measured variant at one size. */
typedef struct bench_timing {
  double time_us;   /* median device time per call (CUDA events); host backend: = host_us */
  double host_us;   /* median host-observed time per call (enqueue to stream sync) */
  double graph_us;  /* moe-ll: median device time inside a replayed CUDA graph (no host enqueue gaps); 0: n/a */
  double kernel_us; /* median kernel time per call (CUPTI: the device time the call's kernels held alone); 0: n/a */
  double algbw_gbs; /* bytes per rank / time */
  double busbw_gbs; /* algbw * (world - 1) / world */
  long long wrong;  /* wrong bytes in the checked call; -1: not checked */
  int valid;
} bench_timing_t;

typedef struct bench_ctx {
  const bench_opts_t *opts;
  sy_comm_t comm;
  int rank, world;
  sy_backend_t backend;
  cudaStream_t stream;
  void *nccl; /* ncclComm_t, or NULL when there is no baseline (host backend, --no-nccl) */
  long long total_wrong;
  double warm_s; /* what bench_warm fills (0: BENCH_WARM_S); the layer sets its --settle */
} bench_ctx_t;

typedef struct bench_entry {
  const char *name;
  const char *doc;
  int (*run)(bench_ctx_t *ctx);                   /* 0 on success (wrong values are counted in ctx->total_wrong) */
  size_t (*heap_bytes)(const bench_opts_t *opts); /* symmetric memory the entry needs per rank */
  int host_times; /* 1: its figures include host times and no kernel time: CUPTI, which adds to every launch even
                   * while its activities are off, stays unloaded (SY_BENCH_NO_CUPTI) unless SY_BENCH_TIMELINE asks
                   * for it */
} bench_entry_t;

/* Entries (one file each). */
int bench_alltoall(bench_ctx_t *ctx);
size_t bench_alltoall_heap(const bench_opts_t *opts);
int bench_attn(bench_ctx_t *ctx);
size_t bench_attn_heap(const bench_opts_t *opts);
int bench_moe(bench_ctx_t *ctx);
size_t bench_moe_heap(const bench_opts_t *opts);
int bench_moe_ht(bench_ctx_t *ctx);
size_t bench_moe_ht_heap(const bench_opts_t *opts);
int bench_pool(bench_ctx_t *ctx); /* pool.c: host time of an allocation + free, not collective */
size_t bench_pool_heap(const bench_opts_t *opts);
int bench_layer(bench_ctx_t *ctx); /* layer.c: one MoE layer's step, its communication beside its GEMMs */
size_t bench_layer_heap(const bench_opts_t *opts);
int bench_soak(bench_ctx_t *ctx); /* soak.c: not a benchmark; every operation checked, memory watched */
size_t bench_soak_heap(const bench_opts_t *opts);

/* Timing: runs op(arg) warmup + iters times on ctx->stream; fills time_us/host_us (medians). */
typedef int (*bench_op_fn)(bench_ctx_t *ctx, void *arg);
/* layer: --ways LIST (comma-separated way names) into ways; the count, or -1 after a message naming the bad name. */
int bench_layer_parse_ways(const char *list, int *ways, int max);
int bench_time(bench_ctx_t *ctx, bench_op_fn op, void *arg, bench_timing_t *out);
/* Warm-up: the --warmup calls, then (with --warmup > 0) rounds of more until ctx->warm_s (0: BENCH_WARM_S) has passed
 * since the first, each round's count from the rate measured so far and the same on every rank; ends synchronised.
 * 0 on success. */
#define BENCH_WARM_S 0.02
int bench_warm(bench_ctx_t *ctx, bench_op_fn op, void *arg);
/* For entries that time inside their own loop (moe-ll times two halves of one call): the monotonic clock in
 * seconds, and the median of v[0..n) (sorts v). */
double bench_now_s(void);
double bench_median(double *v, int n);

/* Kernel time (ktime.c, CUPTI loaded at run time): available() says whether it works here (else why);
 * begin() starts recording, push(i)/pop() bracket the launches of call i (0, 1, ... in stream order),
 * end(n, us) stops and gives us[i] = call i's kernel time in us. Non-zero: no figure. */
int bench_ktime_available(const char **why);
int bench_ktime_begin(void);
void bench_ktime_push(uint64_t call);
void bench_ktime_pop(void);
int bench_ktime_end(int calls, double *us);
/* "%9.2f" of v, or "-" when v is 0 (no figure), into buf. */
const char *bench_fmt_us(char *buf, size_t size, int width, double v);
/* v as a JSON number, or null when 0. */
const char *bench_json_us(char *buf, size_t size, double v);

/* Output (rank 0 prints; every rank calls). */
void bench_print(bench_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends one JSON object (already formatted, no trailing comma) to the --json array. */
void bench_json(bench_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Max wrong across ranks (host allgather); every rank gets the same answer. */
long long bench_allreduce_max(bench_ctx_t *ctx, long long value);
double bench_allreduce_max_d(bench_ctx_t *ctx, double value);
/* The slowest rank's kernel time, or 0 (no figure) where any rank has none. */
double bench_kernel_max(bench_ctx_t *ctx, double kernel_us);

/* gpu_state.c: what slowed a GPU's clock (NVML, opened at run time). */
typedef struct bench_gpu_state {
  int valid;                     /* 1: read */
  unsigned long long power_ns;   /* time slowed by the power limit, since the driver loaded */
  unsigned long long thermal_ns; /* time slowed by temperature, likewise */
  unsigned temp_c;               /* the GPU's temperature now */
} bench_gpu_state_t;
/* CUDA device `device`'s state; non-zero (and valid 0) where NVML or the device is not there. */
int bench_gpu_state(int device, bench_gpu_state_t *out);
/* Every rank, after an entry (cuda backend): the slowdowns since `before` (the most on any rank) printed and added
 * to the JSON; a rank whose GPU was slowed by its temperature warns on stderr. */
void bench_gpu_state_report(bench_ctx_t *ctx, const bench_gpu_state_t *before);

#endif
