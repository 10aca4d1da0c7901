/*
 * moe_ht.c — sy-bench entry `moe-ht`: the MoE high-throughput mode (switchyard.h, "MoE high throughput") at
 * training and prefill sizes, beside NCCL moving the same bytes and, at world 1, a device-to-device copy of the
 * dispatch's output bytes (the memory ceiling).
 *
 *   sizes    4,096 and 8,192 tokens per rank (--tokens LIST; -t/-T keep the part of the list inside them), hidden
 *            7168, top-8 of 256 experts (the nearest multiple of the world size when 256 is not one)
 *   wires    dispatch FP8 (E4M3, one fp32 scale per 128 elements, quantised in the kernel) and BF16 (--wire);
 *            combine and both backwards BF16
 *   config   expert alignment 128 (--alignment), an SM budget of 16 (--num-sms)
 *   routing  seeded and uniform (tests/workload, moe-ll's): each token picks 8 distinct experts, weights in (0, 1];
 *            one routing per size, the same for both wires, and any rank can regenerate any rank's;
 *            --keep-experts F sets every id outside each rank's first floor(L x F) experts to -1 (one expert group's
 *            routing), and the targets are then not judged
 *
 * Per size and wire: one exact-mode layout (host_counts), whose counts are printed; with --check one checked
 * round (moe_ht_check.c); then each call of a step timed alone (moe_ht_time.c) in worst-case mode (host_counts
 * NULL, recv.rows = max_rows): layout, dispatch, combine (weighted), combine_bwd, dispatch_bwd (the combine with
 * row_weights NULL, carrying the weights' gradient back through row_values).
 * Bytes per call, the largest of any rank (every rank knows every rank's routing), over the call's time (kernel
 * time where measured, else events; the slowest rank's):
 *   DeepEP's count  the rows a rank receives, one per (token, rank) it names, its own rank included, x the wire's
 *                   bytes (dispatch) or bf16 (the rest); the NVLink targets are in this count
 *   link            the same without a rank's own tokens: the bytes that cross links (0 at world 1)
 *   HBM             the call's algorithmic bytes read + written: payload and per-row metadata (src, weights), not
 *                   the transport's rings or the handle (the layout: ids read, ids and positions written)
 * NCCL: grouped ncclSend/ncclRecv carrying per (source, destination) pair those de-duplicated rows: the dispatch's
 * at the wire's bytes, the combine's reversed in bf16, combine_bwd's as the dispatch's in bf16, dispatch_bwd's as
 * the combine's. Self pairs included.
 */
#include <math.h>

#include "moe_ht.h"
#include "workload.h"

static const int64_t default_tokens[] = {4096, 8192};
static const sy_moe_wire_t wires[] = {SY_MOE_WIRE_FP8, SY_MOE_WIRE_BF16};
#define NUM_WIRES         2
#define DEFAULT_ALIGNMENT 128
#define DEFAULT_SMS       16
#define MAX_CONFIGS       (BENCH_MAX_TOKEN_LIST * NUM_WIRES)

/* The targets: one GPU at 4,096 tokens (time, and the copy's HBM bytes/s), four GPUs over NVLink. */
#define TARGET_TOKENS      4096
#define TARGET_DISP_BF16   200.0
#define TARGET_DISP_FP8    120.0
#define TARGET_COMBINE     200.0
#define TARGET_PCT_CEILING 70.0
#define TARGET_WORLD       4
#define TARGET_NVL_GBS     380.0
#define TARGET_SMS         16

static const char *wire_name(sy_moe_wire_t wire) { return wire == SY_MOE_WIRE_BF16 ? "bf16" : "fp8"; }

/* One call of one configuration. */
typedef struct ht_row {
  bench_timing_t ours, nccl;
  int state;                                  /* 0: not run, 1: timed, 2: unsupported */
  double deepep_bytes, link_bytes, hbm_bytes; /* the busiest rank's */
  long long wrong;                            /* -1: not checked */
} ht_row_t;

typedef struct ht_result {
  int T;
  sy_moe_wire_t wire;
  int created; /* 0: sy_moe_ht_create said SY_ERR_UNSUPPORTED */
  int pulled;  /* sy_moe_ht_sizes_t.dispatch_pulled: 0 pushed, 1 pulled, 2 pulled but above SY_HT_PULL_SMS SMs */
  ht_row_t row[MOE_HT_OPS];
  bench_timing_t copy;
  double copy_bytes;
} ht_result_t;

/* The host side of one token count: every rank's routing and what follows from it. */
typedef struct ht_scratch {
  int W, me, T, E, L, align;
  int32_t *all_ids;         /* [W][T][K] */
  float *all_w;             /* [W][T][K] */
  uint16_t *x_me, *x_other; /* [T][H]: this rank's tokens, and another rank's regenerated */
  int x_other_rank;
  long long *msgs;          /* [W][W]: tokens s sends d, one per (token, rank) */
  long long *filled, *used; /* [W]: rows with a source on each rank, and with the padding */
  int32_t *expert_rows;     /* [E] */
  const int32_t **ids_of;
  const float **w_of;
  int *num_tokens;
} ht_scratch_t;

/* The sizes to run: --tokens, else the default list; -t/-T given on the command line keep those inside them. */
static int token_sizes(const bench_opts_t *o, int64_t *out) {
  const int64_t *list = o->num_token_list ? o->token_list : default_tokens;
  const int n = o->num_token_list ? o->num_token_list : (int)(sizeof default_tokens / sizeof *default_tokens);
  int kept = 0;
  for (int i = 0; i < n; i++) {
    if ((o->tokens_given & BENCH_MIN_TOKENS_GIVEN) && list[i] < o->min_tokens) continue;
    if ((o->tokens_given & BENCH_MAX_TOKENS_GIVEN) && list[i] > o->max_tokens) continue;
    out[kept++] = list[i];
  }
  return kept;
}

/* The transport's rings are bounded by the configuration, not the tokens (about W x num_sms x 64 messages of a
 * token's bytes on the cuda backend, none on the host), and sy_moe_ht_workspace_size needs a communicator: the
 * heap is SY_HEAP_SIZE's (1G by default); where create fails for room the entry says what the object asked for. */
size_t bench_moe_ht_heap(const bench_opts_t *opts) { return 0; }

static const uint16_t *tokens_of(void *arg, int rank) {
  ht_scratch_t *h = arg;
  if (rank == h->me) return h->x_me;
  if (h->x_other_rank != rank) wl_moe_uniform_tokens(rank, h->T, HIDDEN, h->x_other);
  h->x_other_rank = rank;
  return h->x_other;
}

static moe_ht_inputs_t inputs_of(ht_scratch_t *h) {
  for (int s = 0; s < h->W; s++) {
    h->ids_of[s] = h->all_ids + (size_t)s * h->T * TOP_K;
    h->w_of[s] = h->all_w + (size_t)s * h->T * TOP_K;
    h->num_tokens[s] = h->T;
  }
  return (moe_ht_inputs_t){h->num_tokens, h->ids_of, h->w_of, tokens_of, h};
}

static int alloc_scratch(bench_ctx_t *ctx, moe_ht_bench_t *b, ht_scratch_t *h, size_t most) {
  const size_t W = (size_t)h->W;
  h->all_ids = malloc(W * most * TOP_K * sizeof *h->all_ids);
  h->all_w = malloc(W * most * TOP_K * sizeof *h->all_w);
  h->x_me = malloc(most * HIDDEN * 2), h->x_other = malloc(most * HIDDEN * 2);
  h->msgs = calloc(W * W + 2 * W, sizeof *h->msgs);
  h->expert_rows = calloc((size_t)h->E, sizeof *h->expert_rows);
  h->ids_of = calloc(W, sizeof *h->ids_of), h->w_of = calloc(W, sizeof *h->w_of);
  h->num_tokens = calloc(W, sizeof *h->num_tokens);
  b->x = dev_alloc(ctx, most * HIDDEN * 2);
  b->ids = dev_alloc(ctx, most * TOP_K * sizeof(int32_t));
  b->weights = dev_alloc(ctx, most * TOP_K * sizeof(float));
  b->nccl.send_bytes = calloc(4 * W, sizeof(size_t));
  if (!h->all_ids || !h->all_w || !h->x_me || !h->x_other || !h->msgs || !h->expert_rows || !h->ids_of || !h->w_of ||
      !h->num_tokens || !b->x || !b->ids || !b->weights || !b->nccl.send_bytes)
    return 1;
  h->filled = h->msgs + W * W, h->used = h->filled + W;
  b->nccl.send_off = b->nccl.send_bytes + W, b->nccl.recv_bytes = b->nccl.send_bytes + 2 * W;
  b->nccl.recv_off = b->nccl.send_bytes + 3 * W;
  return 0;
}

static void free_scratch(bench_ctx_t *ctx, moe_ht_bench_t *b, ht_scratch_t *h) {
  free(h->all_ids), free(h->all_w), free(h->x_me), free(h->x_other), free(h->msgs), free(h->expert_rows);
  free(h->ids_of), free(h->w_of), free(h->num_tokens);
  dev_free(ctx, b->x), dev_free(ctx, b->ids), dev_free(ctx, b->weights);
  dev_free(ctx, b->nccl.nccl_send), dev_free(ctx, b->nccl.nccl_recv);
  free(b->nccl.send_bytes);
}

/* --keep-experts F: the experts of each rank's L whose ids stay, floor(L x F) (L without it). */
static int kept_experts(const bench_ctx_t *ctx, int L) {
  return ctx->opts->keep_experts > 0 ? (int)(L * ctx->opts->keep_experts) : L;
}

/* One token count's inputs: every rank's routing and weights, this rank's tokens (to the device too), the pairs,
 * each rank's rows. */
static int load_size(bench_ctx_t *ctx, moe_ht_bench_t *b, ht_scratch_t *h, int T) {
  const int W = h->W, L = h->L;
  h->T = T, h->x_other_rank = -1, b->tokens = T;
  const char *routing = ctx->opts->routing ? ctx->opts->routing : "uniform";
  for (int r = 0; r < W; r++) { /* the experts a token draws from: all, its rank's own (local) or rank 0's (hot) */
    const int first = !strcmp(routing, "local") ? r * L : 0, n = !strcmp(routing, "uniform") ? h->E : L;
    wl_moe_range_routing(r, T, first, n, TOP_K, h->all_ids + (size_t)r * T * TOP_K, h->all_w + (size_t)r * T * TOP_K);
  }
  const int keep = kept_experts(ctx, L);
  if (keep < L) wl_moe_keep_experts(h->all_ids, (size_t)W * T * TOP_K, L, 0, keep); /* --keep-experts */
  wl_moe_uniform_tokens(h->me, T, HIDDEN, h->x_me);
  memset(h->msgs, 0, (size_t)W * W * sizeof *h->msgs);
  memset(h->expert_rows, 0, (size_t)h->E * sizeof *h->expert_rows);
  for (int s = 0; s < W; s++)
    for (int t = 0; t < T; t++) {
      const int32_t *id = h->all_ids + ((size_t)s * T + t) * TOP_K;
      for (int d = 0; d < W; d++) {
        int here = 0;
        for (int k = 0; k < TOP_K; k++) here |= id[k] >= 0 && id[k] / L == d;
        h->msgs[(size_t)s * W + d] += here;
      }
      for (int k = 0; k < TOP_K; k++)
        if (id[k] >= 0) h->expert_rows[id[k]]++;
    }
  for (int p = 0; p < W; p++) {
    h->filled[p] = h->used[p] = 0;
    for (int e = p * L; e < (p + 1) * L; e++) {
      h->filled[p] += h->expert_rows[e];
      h->used[p] += (h->expert_rows[e] + h->align - 1) / h->align * (long long)h->align;
    }
  }
  int rc = to_dev(ctx, b->x, h->x_me, (size_t)T * HIDDEN * 2);
  rc |= to_dev(ctx, b->ids, h->all_ids + (size_t)h->me * T * TOP_K, (size_t)T * TOP_K * sizeof(int32_t));
  rc |= to_dev(ctx, b->weights, h->all_w + (size_t)h->me * T * TOP_K, (size_t)T * TOP_K * sizeof(float));
  return bench_allreduce_max(ctx, rc) != 0;
}

/* Each call's bytes, the largest of any rank (the header's three counts). */
static void count_bytes(const ht_scratch_t *h, sy_moe_wire_t wire, ht_result_t *res) {
  const int W = h->W;
  const double H = HIDDEN, T = h->T, K = TOP_K, bf16_row = 2 * H;
  const double wire_row = (double)(moe_ht_row_bytes(wire, HIDDEN) + moe_ht_scale_bytes(wire, HIDDEN));
  for (int p = 0; p < W; p++) {
    long long in = 0;
    for (int s = 0; s < W; s++) in += h->msgs[(size_t)s * W + p];
    const double link = (double)(in - h->msgs[(size_t)p * W + p]);
    const double filled = (double)h->filled[p], used = (double)h->used[p], meta = 12; /* src + weight */
    const double deepep[MOE_HT_OPS] = {0, in * wire_row, in * bf16_row, in * bf16_row, in * bf16_row};
    const double links[MOE_HT_OPS] = {0, link * wire_row, link * bf16_row, link * bf16_row, link * bf16_row};
    const double hbm[MOE_HT_OPS] = {
        3 * T * K * 4,
        T * bf16_row + T * K * 4 + filled * wire_row + used * meta,
        filled * (bf16_row + meta) + T * bf16_row,
        T * bf16_row + filled * (2 * bf16_row + meta) + used * 4,
        filled * (bf16_row + meta) + T * bf16_row + T * K * 4,
    };
    for (int op = 0; op < MOE_HT_OPS; op++) {
      ht_row_t *r = &res->row[op];
      r->deepep_bytes = fmax(r->deepep_bytes, deepep[op]);
      r->link_bytes = fmax(r->link_bytes, links[op]);
      r->hbm_bytes = fmax(r->hbm_bytes, hbm[op]);
    }
  }
}

/* ---- ours -------------------------------------------------------------------------------------------------- */

/* The exact-mode layout: its counts printed; checked (wrong[MOE_HT_LAYOUT]) in the round. Non-zero on failure;
 * *unsupported where the call is not there. */
static int exact_layout(bench_ctx_t *ctx, moe_ht_bench_t *b, const moe_ht_expect_t *ex, int *unsupported) {
  const double t0 = bench_now_s();
  int rc = moe_ht_op_exact_layout(ctx, b);
  const double host_us = (bench_now_s() - t0) * 1e6;
  const long long code = bench_allreduce_max(ctx, !rc ? 0 : b->last == SY_ERR_UNSUPPORTED ? 1 : 2);
  *unsupported = code == 1;
  if (code) {
    if (code == 2 && rc)
      fprintf(stderr, "sy-bench moe-ht: rank %d: exact layout: %s (%s)\n", ctx->rank, sy_status_name(b->last),
              sy_status_string(b->last));
    return code == 2;
  }
  const int L = b->sizes.local_experts;
  int lo = INT32_MAX, hi = 0;
  for (int e = 0; e < L; e++)
    lo = b->host_counts[e] < lo ? b->host_counts[e] : lo, hi = b->host_counts[e] > hi ? b->host_counts[e] : hi;
  bench_print(ctx,
              "#   exact layout (rank 0): %d rows needed of %d (max_rows), local expert rows %d..%d (expected %lld "
              "with a source, %lld padding), returned after %.1f us\n",
              b->host_counts[2 * L], b->sizes.max_rows, lo, hi, ex->filled, ex->padding, host_us);
  return 0;
}

/* Ours on one configuration: create, the exact layout, the check, each call timed, destroy. Non-zero on failure. */
static int measure_ours(bench_ctx_t *ctx, moe_ht_bench_t *b, ht_scratch_t *h, ht_result_t *res, int *missing) {
  const sy_status_t st = sy_moe_ht_create(ctx->comm, &b->cfg, &b->moe);
  const long long code = bench_allreduce_max(ctx, st == SY_SUCCESS ? 0 : st == SY_ERR_UNSUPPORTED ? 1 : 2);
  if (code) { /* a rank without an object: the others' would wait for it in the collective destroy, so leak it */
    b->moe = NULL;
    *missing |= code == 1;
    for (int op = 0; code == 1 && op < MOE_HT_OPS; op++) res->row[op].state = 2;
    if (code == 1) return 0;
    size_t need = 0;
    sy_moe_ht_workspace_size(ctx->comm, &b->cfg, &need);
    if (st != SY_SUCCESS)
      fprintf(stderr,
              "sy-bench moe-ht: rank %d: sy_moe_ht_create (%d tokens, %s): %s (%s); its workspace: %.1f MiB of "
              "symmetric memory (SY_HEAP_SIZE)\n",
              ctx->rank, res->T, wire_name(res->wire), sy_status_name(st), sy_status_string(st),
              (double)need / (1 << 20));
    return 1;
  }
  res->created = 1;
  moe_ht_expect_t ex;
  memset(&ex, 0, sizeof ex);
  moe_ht_inputs_t in = inputs_of(h);
  const moe_ht_shape_t sh = {
      h->W, h->me, HIDDEN, TOP_K, h->E, h->align, b->cfg.wire, 0, (b->cfg.flags & SY_MOE_HT_SCALES_ROW_MAJOR) != 0};
  b->sizes = (sy_moe_ht_sizes_t)SY_MOE_HT_SIZES_INIT;
  int rc = sy_moe_ht_sizes(b->moe, &b->sizes) != SY_SUCCESS || moe_ht_expect(&sh, &in, &ex);
  rc = bench_allreduce_max(ctx, rc || moe_ht_alloc_config(ctx, b)) != 0;
  res->pulled = b->sizes.dispatch_pulled;
  if (!rc)
    bench_print(ctx, "#   the dispatch %s (SY_HT_PULL as the ranks resolved it)\n",
                b->sizes.dispatch_pulled == 2 ? (b->cfg.wire == SY_MOE_WIRE_FP8 || b->cfg.wire == SY_MOE_WIRE_FP8_UE8M0
                                                     ? "pulled by the receivers"
                                                     : "pulled by the receivers, pushed above SY_HT_PULL_SMS SMs")
                : b->sizes.dispatch_pulled == 1 ? "pulled by the receivers"
                                                : "pushed by the senders");
  int unsupported = 0;
  if (!rc) rc = exact_layout(ctx, b, &ex, &unsupported);
  b->counts_valid = !rc && !unsupported;
  *missing |= unsupported;
  long long wrong[MOE_HT_OPS] = {-1, -1, -1, -1, -1};
  if (!rc && ctx->opts->check) rc = moe_ht_round(ctx, b, &sh, &in, &ex, 0, wrong);
  for (int op = 0; op < MOE_HT_OPS; op++) res->row[op].wrong = wrong[op];
  for (int op = 0; op < MOE_HT_OPS && !rc; op++) {
    rc = moe_ht_time_op(ctx, b, op, &res->row[op].ours, &unsupported);
    res->row[op].state = rc ? 0 : unsupported ? 2 : 1;
    if (unsupported) {
      *missing = 1;
      break; /* every later call needs this one */
    }
  }
  moe_ht_free_config(ctx, b);
  moe_ht_expect_free(&ex);
  sy_moe_ht_destroy(b->moe);
  b->moe = NULL;
  return rc;
}

/* ---- the baselines ----------------------------------------------------------------------------------------- */

static int measure_nccl(bench_ctx_t *ctx, moe_ht_bench_t *b, ht_scratch_t *h, ht_result_t *res) {
  const size_t wire_row = moe_ht_row_bytes(res->wire, HIDDEN) + moe_ht_scale_bytes(res->wire, HIDDEN);
  const size_t bf16_row = (size_t)HIDDEN * 2;
  /* dispatch, combine, combine_bwd (the dispatch's pairs in bf16); dispatch_bwd is the combine's */
  const int ops[3] = {MOE_HT_DISPATCH, MOE_HT_COMBINE, MOE_HT_COMBINE_BWD}, reverse[3] = {0, 1, 0};
  const size_t bytes[3] = {wire_row, bf16_row, bf16_row};
  int rc = 0;
  for (int i = 0; i < 3 && !rc; i++) {
    if (ops[i] == MOE_HT_COMBINE_BWD && wire_row == bf16_row) {
      res->row[ops[i]].nccl = res->row[MOE_HT_DISPATCH].nccl;
      continue;
    }
    rc = bench_allreduce_max(ctx, moe_nccl_pairs(ctx, &b->nccl, h->msgs, reverse[i], bytes[i])) != 0;
    if (!rc) rc = bench_time(ctx, moe_op_nccl, &b->nccl, &res->row[ops[i]].nccl);
  }
  res->row[MOE_HT_DISPATCH_BWD].nccl = res->row[MOE_HT_COMBINE].nccl;
  return rc;
}

/* ---- output ------------------------------------------------------------------------------------------------ */

static double basis_us(const bench_timing_t *t) { return t->kernel_us > 0 ? t->kernel_us : t->time_us; }
static double gbs(double bytes, const bench_timing_t *t) {
  return t->valid && bytes > 0 && basis_us(t) > 0 ? bytes / (basis_us(t) * 1e3) : 0;
}
static double ceiling_gbs(const ht_result_t *res) { return gbs(2 * res->copy_bytes, &res->copy); }
/* NCCL's time / ours, on kernel time where both have it. */
static double speedup(const ht_row_t *r) {
  if (r->state != 1 || !r->nccl.valid) return 0;
  const int k = r->ours.kernel_us > 0 && r->nccl.kernel_us > 0;
  const double ours = k ? r->ours.kernel_us : r->ours.time_us, base = k ? r->nccl.kernel_us : r->nccl.time_us;
  return ours > 0 ? base / ours : 0;
}

static void print_header(bench_ctx_t *ctx, int experts, int align, int sms) {
  const int W = ctx->world;
  bench_print(ctx,
              "# moe-ht: hidden %d, top-%d of %d experts (%d per rank), expert alignment %d, num_sms %d; bf16 "
              "tokens in, combine bf16 out\n",
              HIDDEN, TOP_K, experts, experts / W, align, sms);
  if (experts != NUM_EXPERTS)
    bench_print(ctx, "# note: %d experts is not a multiple of world %d; using the nearest multiple, %d\n", NUM_EXPERTS,
                W, experts);
  if (ctx->opts->scales_row_major)
    bench_print(ctx, "# FP8 recv.scales row-major, [rows][hidden / 128] (SY_MOE_HT_SCALES_ROW_MAJOR)\n");
  if (ctx->opts->recv_arena)
    bench_print(ctx,
                "# recv from the object's receive arena (config.recv_arena_bytes): the dispatch's first copy in "
                "place\n");
  const char *routing = ctx->opts->routing ? ctx->opts->routing : "uniform";
  bench_print(ctx, "# routing: seeded, each token to %d distinct experts drawn uniformly from %s, weights in (0, 1]\n",
              TOP_K,
              !strcmp(routing, "local") ? "its own rank's (local: no token leaves its rank)"
              : !strcmp(routing, "hot") ? "rank 0's (hot: every token goes to rank 0)"
                                        : "all");
  if (ctx->opts->keep_experts > 0)
    bench_print(ctx, "# --keep-experts %g: only the ids of each rank's first %d of %d experts kept, the others -1\n",
                ctx->opts->keep_experts, kept_experts(ctx, experts / W), experts / W);

  bench_print(ctx,
              "# calls, each timed alone in worst-case mode (host_counts NULL, recv.rows = max_rows): layout; "
              "dispatch; combine (weighted by recv.weights); combine_bwd (grad rows and the row weights' gradient); "
              "dispatch_bwd (sy_moe_ht_combine, row_weights NULL, the weights' gradient back through row_values)\n");
  bench_print(ctx,
              "# _us = CUDA events, kern = kernel time (CUPTI), host = enqueue to stream sync; medians, slowest rank. "
              "GB/s on kernel time where measured, else events, the busiest rank's bytes: deepep = rows received, "
              "one per (token, rank), own rank included (DeepEP's count), x wire bytes (dispatch) or bf16; link = "
              "the same without the own rank; hbm = payload + per-row metadata read and written\n");
  if (!gpu(ctx))
    bench_print(ctx, "# host backend: no kernels; the event columns repeat the host-observed time, no baselines\n");
  bench_print(ctx,
              "# nccl: grouped ncclSend/ncclRecv carrying per (source, destination) those rows (dispatch: wire bytes; "
              "combine: reversed, bf16; combine_bwd: bf16; dispatch_bwd: the combine's); x_nccl = nccl / ours on "
              "kernel time where both have it\n");
  bench_print(ctx,
              "# ceiling (world 1): cudaMemcpyAsync device to device of the dispatch's output bytes, read + write "
              "over its event time; %%ceil = the call's hbm GB/s over it\n");
  bench_print(ctx,
              "# #wrong: elements differing from the host's expectation in one checked round (-1: not checked); "
              "sms: config.num_sms\n");
  bench_print(ctx, "#  %6s %5s %-12s %9s %9s %9s %8s %8s %8s %6s %4s | %9s %9s %6s | %6s\n", "tokens", "wire", "call",
              "time_us", "kern_us", "host_us", "deepep", "link", "hbm", "%ceil", "sms", "nccl_us", "kern_us", "x_nccl",
              "#wrong");
}

static void print_result(bench_ctx_t *ctx, const ht_result_t *res, int experts, int sms) {
  const double ceil_gbs = ceiling_gbs(res);
  char f[12][24];
  for (int op = 0; op < MOE_HT_OPS; op++) {
    const ht_row_t *r = &res->row[op];
    const bench_timing_t *o = &r->ours, *n = &r->nccl;
    const int ours = r->state == 1, base = n->valid;
    const double d = ours ? gbs(r->deepep_bytes, o) : 0, l = ours ? gbs(r->link_bytes, o) : 0;
    const double m = ours ? gbs(r->hbm_bytes, o) : 0, pct = ceil_gbs > 0 && m > 0 ? 100 * m / ceil_gbs : 0;
    const double x = speedup(r);
    char ours_cols[160], nccl_cols[64];
    if (ours)
      snprintf(ours_cols, sizeof ours_cols, "%9.2f %s %9.2f %s %s %s %s", o->time_us,
               bench_fmt_us(f[0], 24, 9, o->kernel_us), o->host_us, bench_fmt_us(f[1], 24, 8, d),
               bench_fmt_us(f[2], 24, 8, l), bench_fmt_us(f[3], 24, 8, m), bench_fmt_us(f[4], 24, 6, pct));
    else
      snprintf(ours_cols, sizeof ours_cols, "%9s %9s %9s %8s %8s %8s %6s", r->state == 2 ? "unsupp." : "n/a", "", "",
               "", "", "", "");
    if (base)
      snprintf(nccl_cols, sizeof nccl_cols, "%9.2f %s %s", n->time_us, bench_fmt_us(f[5], 24, 9, n->kernel_us),
               bench_fmt_us(f[6], 24, 6, x));
    else snprintf(nccl_cols, sizeof nccl_cols, "%9s %9s %6s", op == MOE_HT_LAYOUT ? "" : "n/a", "", "");
    bench_print(ctx, "   %6d %5s %-12s %s %4d | %s | %6lld\n", res->T, wire_name(res->wire), moe_ht_op_names[op],
                ours_cols, sms, nccl_cols, r->wrong);
    bench_json(ctx,
               "{\"entry\": \"moe-ht\", \"backend\": \"%s\", \"world\": %d, \"routing\": \"%s\", "
               "\"keep_experts\": %g, "
               "\"tokens_per_rank\": %d, \"hidden\": %d, "
               "\"top_k\": %d, \"num_experts\": %d, \"wire\": \"%s\", \"alignment\": %d, \"num_sms\": %d, "
               "\"dispatch_pulled\": %d, \"call\": \"%s\", \"supported\": %s, \"time_us\": %.3f, \"kernel_us\": %s, "
               "\"host_us\": %.3f, "
               "\"deepep_bytes\": %.0f, \"deepep_GBs\": %.3f, \"link_bytes\": %.0f, \"link_GBs\": %.3f, "
               "\"hbm_bytes\": %.0f, \"hbm_GBs\": %.3f, \"pct_of_ceiling\": %.1f, \"wrong\": %lld, "
               "\"nccl\": {%s\"time_us\": %.3f, \"kernel_us\": %s}, \"speedup_nccl\": %.3f, "
               "\"ceiling\": {%s\"copy_bytes\": %.0f, \"time_us\": %.3f, \"hbm_GBs\": %.3f}}",
               sy_backend_name(ctx->backend), ctx->world, ctx->opts->routing ? ctx->opts->routing : "uniform",
               ctx->opts->keep_experts > 0 ? ctx->opts->keep_experts : 1.0, res->T, HIDDEN, TOP_K, experts,
               wire_name(res->wire), ctx->opts->alignment ? ctx->opts->alignment : DEFAULT_ALIGNMENT, sms, res->pulled,
               moe_ht_op_names[op], ours ? "true" : "false", ours ? o->time_us : 0,
               bench_json_us(f[7], 24, ours ? o->kernel_us : 0), ours ? o->host_us : 0, r->deepep_bytes, d,
               r->link_bytes, l, r->hbm_bytes, m, pct, r->wrong, base ? "" : "\"absent\": true, ", n->time_us,
               bench_json_us(f[8], 24, n->kernel_us), x, ceil_gbs > 0 ? "" : "\"absent\": true, ", res->copy_bytes,
               res->copy.time_us, ceil_gbs);
  }
  if (ceil_gbs > 0)
    bench_print(ctx, "#   ceiling: a %.1f MiB device-to-device copy takes %.2f us: %.1f GB/s read + write\n",
                res->copy_bytes / (1 << 20), res->copy.time_us, ceil_gbs);
}

/* The targets, where this run has their setting. */
static void print_targets(bench_ctx_t *ctx, const ht_result_t *res, int n, int sms) {
  if (ctx->opts->keep_experts > 0) return; /* fewer rows than the targets' routing: nothing to judge */
  for (int i = 0; i < n; i++) {
    const ht_result_t *r = &res[i];
    const ht_row_t *d = &r->row[MOE_HT_DISPATCH], *c = &r->row[MOE_HT_COMBINE];
    if (d->state != 1 || c->state != 1) continue;
    if (ctx->world == 1 && r->T == TARGET_TOKENS && gpu(ctx)) {
      const double ceil_gbs = ceiling_gbs(r), want = r->wire == SY_MOE_WIRE_BF16 ? TARGET_DISP_BF16 : TARGET_DISP_FP8;
      const double pd = ceil_gbs > 0 ? 100 * gbs(d->hbm_bytes, &d->ours) / ceil_gbs : 0;
      const double pc = ceil_gbs > 0 ? 100 * gbs(c->hbm_bytes, &c->ours) / ceil_gbs : 0;
      const int met = basis_us(&d->ours) <= want && basis_us(&c->ours) <= TARGET_COMBINE && pd >= TARGET_PCT_CEILING &&
                      pc >= TARGET_PCT_CEILING;
      bench_print(ctx,
                  "# target (1 GPU, %d tokens, %s dispatch): dispatch %.2f us (<= %.0f), combine %.2f us (<= %.0f), "
                  "%.1f%% / %.1f%% of the copy's HBM GB/s (>= %.0f%%): %s\n",
                  TARGET_TOKENS, wire_name(r->wire), basis_us(&d->ours), want, basis_us(&c->ours), TARGET_COMBINE, pd,
                  pc, TARGET_PCT_CEILING, met ? "met" : "NOT met");
    }
    if (ctx->world == TARGET_WORLD && r->T == TARGET_TOKENS && r->wire == SY_MOE_WIRE_BF16 && gpu(ctx)) {
      const double gd = gbs(d->deepep_bytes, &d->ours), gc = gbs(c->deepep_bytes, &c->ours);
      const int met = gd >= TARGET_NVL_GBS && gc >= TARGET_NVL_GBS && sms <= TARGET_SMS;
      bench_print(ctx,
                  "# target (%d GPUs, %d tokens, bf16 dispatch, <= %d SMs): dispatch %.1f GB/s, combine %.1f GB/s "
                  "(DeepEP's count, >= %.0f) with %d SMs: %s\n",
                  TARGET_WORLD, TARGET_TOKENS, TARGET_SMS, gd, gc, TARGET_NVL_GBS, sms, met ? "met" : "NOT met");
    }
  }
}

int bench_moe_ht(bench_ctx_t *ctx) {
  const bench_opts_t *o = ctx->opts;
  const int W = ctx->world;
  int64_t sizes[BENCH_MAX_TOKEN_LIST];
  const int num_sizes = token_sizes(o, sizes);
  if (!num_sizes) {
    bench_print(ctx, "# moe-ht: no size of the list lies in [-t %lld, -T %lld]\n", (long long)o->min_tokens,
                (long long)o->max_tokens);
    return 1;
  }
  int64_t most = 0;
  for (int i = 0; i < num_sizes; i++) most = sizes[i] > most ? sizes[i] : most;
  const int experts = moe_experts_for(W), align = o->alignment ? o->alignment : DEFAULT_ALIGNMENT;
  const int sms = o->num_sms ? o->num_sms : DEFAULT_SMS;
  moe_ht_bench_t b;
  memset(&b, 0, sizeof b);
  ht_scratch_t h;
  memset(&h, 0, sizeof h);
  h.W = W, h.me = ctx->rank, h.E = experts, h.L = experts / W, h.align = align;
  if (kept_experts(ctx, h.L) < 1) {
    bench_print(ctx, "# moe-ht: --keep-experts %g keeps none of the %d experts a rank\n", o->keep_experts, h.L);
    return 1;
  }
  if (o->routing && strcmp(o->routing, "uniform") && h.L < TOP_K) {
    bench_print(ctx, "# moe-ht: --routing %s needs at least %d experts a rank (%d here)\n", o->routing, TOP_K, h.L);
    return 1;
  }
  int rc = bench_allreduce_max(ctx, alloc_scratch(ctx, &b, &h, (size_t)most)) != 0, missing = 0;
  if (!rc) print_header(ctx, experts, align, sms);
  ht_result_t *res = calloc(MAX_CONFIGS, sizeof *res);
  int n = 0;
  rc = rc || !res;
  for (int si = 0; si < num_sizes && !rc; si++) {
    rc = load_size(ctx, &b, &h, (int)sizes[si]);
    for (int wi = 0; wi < NUM_WIRES && !rc; wi++) {
      if (o->wire_only && strcmp(o->wire_only, wire_name(wires[wi]))) continue;
      ht_result_t *r = &res[n++];
      r->T = (int)sizes[si], r->wire = wires[wi];
      for (int op = 0; op < MOE_HT_OPS; op++) r->row[op].wrong = -1;
      sy_moe_ht_config_t cfg = SY_MOE_HT_CONFIG_INIT;
      cfg.max_tokens = r->T, cfg.hidden = HIDDEN, cfg.top_k = TOP_K, cfg.num_experts = experts;
      cfg.wire = r->wire, cfg.expert_alignment = align, cfg.num_sms = sms;
      if (o->scales_row_major && r->wire != SY_MOE_WIRE_BF16) cfg.flags = SY_MOE_HT_SCALES_ROW_MAJOR;
      if (o->recv_arena && sy_moe_ht_recv_bytes(ctx->comm, &cfg, -1, &cfg.recv_arena_bytes) != SY_SUCCESS) {
        rc = 1;
        break;
      }
      b.cfg = cfg;
      count_bytes(&h, r->wire, r);
      rc = measure_ours(ctx, &b, &h, r, &missing);
      if (!rc && ctx->nccl) rc = measure_nccl(ctx, &b, &h, r);
      if (!rc && gpu(ctx) && W == 1) {
        r->copy_bytes =
            (double)h.filled[0] * (double)(moe_ht_row_bytes(r->wire, HIDDEN) + moe_ht_scale_bytes(r->wire, HIDDEN));
        rc = moe_ht_time_copy(ctx, &b, (size_t)r->copy_bytes, &r->copy);
      }
      for (int op = 0; op < MOE_HT_OPS; op++) ctx->total_wrong += r->row[op].wrong > 0 ? r->row[op].wrong : 0;
      print_result(ctx, r, experts, sms);
    }
  }
  if (res) print_targets(ctx, res, n, sms);
  if (missing) {
    bench_print(ctx,
                "# moe-ht: %s on the %s backend: its high-throughput MoE calls are not built yet (the rows marked "
                "unsupp. or n/a); exit status 1\n",
                sy_status_name(SY_ERR_UNSUPPORTED), sy_backend_name(ctx->backend));
    rc = 1;
  }
  free(res);
  free_scratch(ctx, &b, &h);
  return rc;
}
