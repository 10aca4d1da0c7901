/*
 * moe.c — sy-bench entry `moe-ll`: the MoE low-latency dispatch and combine (switchyard.h, "Expert-parallel
 * (MoE) low-latency dispatch and combine") at decode sizes, beside NCCL moving the same bytes.
 *
 *   sizes    1, 32, 128, 256 tokens per rank (--tokens LIST; -t/-T keep the part of the list inside them),
 *            hidden 7168, top-8 of 256 experts (the nearest multiple of the world size when 256 is not one)
 *   wires    dispatch FP8 (E4M3, one fp32 scale per 128 elements) and BF16; combine BF16
 *   modes    dedup: the default, one message per (token, expert rank), partial sums reduced on the experts'
 *            rank; per-expert: SY_MOE_PER_EXPERT, one copy per (token, expert) both ways, the k outputs
 *            summed on the owner
 *   routing  seeded and uniform: each token picks 8 distinct experts, weights in (0, 1]; one routing per size,
 *            the same for every wire and mode, and any rank can regenerate any rank's (tests/workload)
 *
 * One timed iteration is one dispatch + combine pair, because the API only accepts the halves in that order
 * (dispatch_send, dispatch_recv, combine_send, combine_recv); CUDA events around each half give its kernel
 * time and the host clock around each half, up to the stream's completion, its host-observed time: medians
 * after warm-up, the slowest rank's. The inputs stay the same from one iteration to the next.
 * The check, once per configuration before timing: expert_counts, rank_counts and every filled slot's src pair
 * against the layout computed here from every rank's routing (slots of a local expert in order of source rank,
 * then source token). Payload bits are the GPU tests' to check.
 * The baseline: NCCL's grouped ncclSend/ncclRecv in this process carrying, per (source, destination) pair, the
 * bytes our dispatch moves (messages x wire bytes: hidden + hidden / 128 x 4 scales for FP8, hidden x 2 for
 * BF16) and, for the combine, the reverse pair's vectors in bf16 (hidden x 2 each). Self pairs included.
 * Per-phase device timestamps: run with SY_TRACE_FILE=moe.%r.json (Chrome trace JSON, one file per rank). * The timed operations: moe_time.c.
 */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "boot/boot.h"
#include "moe.h"
#include "ref/moe_ref.h"
#include "workload.h"

static const int64_t default_tokens[] = {1, 32, 128, 256};
static const sy_moe_wire_t wires[] = {SY_MOE_WIRE_FP8, SY_MOE_WIRE_BF16};
static const unsigned modes[] = {0u, SY_MOE_PER_EXPERT};
#define NUM_WIRES (int)(sizeof wires / sizeof *wires)
#define NUM_MODES (int)(sizeof modes / sizeof *modes)

/* The targets, at 128 tokens per rank on 4 x H200: kernel time and the factor over NCCL. */
#define TARGET_TOKENS      128
#define TARGET_DISPATCH_US 12.0
#define TARGET_COMBINE_US  20.0
#define TARGET_SPEEDUP     5.0

static const char *wire_name(sy_moe_wire_t wire) {
  return wire == SY_MOE_WIRE_BF16 ? "bf16" : wire == SY_MOE_WIRE_FP8 ? "fp8" : "fp8-ue8m0";
}

static const char *mode_name(unsigned flags) { return flags & SY_MOE_PER_EXPERT ? "per-expert" : "dedup"; }

/* Bytes one dispatched vector takes on the wire (what NCCL must carry for it). */
static size_t wire_bytes(sy_moe_wire_t wire) {
  return wire == SY_MOE_WIRE_BF16 ? (size_t)HIDDEN * 2 : (size_t)HIDDEN + HIDDEN / SY_MOE_FP8_GROUP * sizeof(float);
}

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

static sy_moe_config_t make_config(int64_t tokens, int experts, sy_moe_wire_t wire, unsigned flags) {
  sy_moe_config_t c = SY_MOE_CONFIG_INIT;
  c.max_tokens = (int)tokens;
  c.hidden = HIDDEN;
  c.top_k = TOP_K;
  c.num_experts = experts;
  c.wire = wire;
  c.flags = flags;
  return c;
}

/* The heap is reserved before the communicator exists, so the world size comes from the options (host
 * threads) or the launcher's environment; the workspace is sy_moe_workspace_size's own formula
 * (sy__moe_layout) for the largest configuration run. Objects are created one at a time, and the receive
 * buffers are ordinary device memory, so that is all the entry needs; the slack is for the backend's own. */
size_t bench_moe_heap(const bench_opts_t *opts) {
  int world = opts->world;
  sy_launch_info_t info;
  if (opts->backend != SY_BACKEND_HOST)
    world = sy__launch_info_from_env(&info) == SY_SUCCESS && info.world_size >= 1 ? info.world_size : 8;
  int64_t sizes[BENCH_MAX_TOKEN_LIST];
  const int n = token_sizes(opts, sizes);
  size_t most = 0;
  for (int i = 0; i < n; i++)
    for (int w = 0; w < NUM_WIRES; w++)
      for (int m = 0; m < NUM_MODES; m++) {
        const sy_moe_config_t c = make_config(sizes[i], moe_experts_for(world), wires[w], modes[m]);
        sy_moe_layout_t layout;
        if (sizes[i] <= INT32_MAX && sy__moe_layout(&c, world, &layout) == SY_SUCCESS && layout.total > most)
          most = layout.total;
      }
  return most + ((size_t)256 << 20);
}

/* ---- the expectation ----------------------------------------------------------------------------------------- */

/* Messages (dedup: one per token and destination rank holding any of its experts) and copies (per expert: one
 * per token and expert) from every source s to every destination d, [s][d]. */
static void count_pairs(const int32_t *all_ids, int world, int tokens, int local, long long *msgs, long long *copies) {
  memset(msgs, 0, (size_t)world * world * sizeof *msgs);
  memset(copies, 0, (size_t)world * world * sizeof *copies);
  for (int s = 0; s < world; s++)
    for (int t = 0; t < tokens; t++) {
      const int32_t *row = all_ids + ((size_t)s * tokens + t) * TOP_K;
      for (int d = 0; d < world; d++) {
        int here = 0;
        for (int k = 0; k < TOP_K; k++) here += row[k] / local == d;
        msgs[(size_t)s * world + d] += here > 0;
        copies[(size_t)s * world + d] += here;
      }
    }
}

/* Slots this rank's local experts get: [L]. */
static void expected_counts(const int32_t *all_ids, int world, int me, int tokens, int local, int32_t *counts) {
  memset(counts, 0, (size_t)local * sizeof *counts);
  for (size_t i = 0; i < (size_t)world * tokens * TOP_K; i++)
    if (all_ids[i] / local == me) counts[all_ids[i] - me * local]++;
}

/* Mismatches of the receive layout against switchyard.h's: slots of local expert e handed out walking sources,
 * then source tokens; every filled slot's {source rank, source token}; expert_counts; rank_counts. */
static long long check_layout(const int32_t *all_ids, int world, int me, int tokens, int local, const int32_t *counts,
                              const int32_t *rank_counts, const int32_t *src, int32_t *fill, int32_t *want_rank) {
  const size_t slots = (size_t)world * tokens;
  long long wrong = 0;
  memset(fill, 0, (size_t)local * sizeof *fill);
  memset(want_rank, 0, (size_t)local * world * sizeof *want_rank);
  for (int s = 0; s < world; s++)
    for (int t = 0; t < tokens; t++)
      for (int k = 0; k < TOP_K; k++) {
        const int32_t id = all_ids[((size_t)s * tokens + t) * TOP_K + k];
        if (id / local != me) continue;
        const int e = id - me * local;
        const size_t at = (size_t)e * slots + (size_t)fill[e]++;
        wrong += src[2 * at] != s;
        wrong += src[2 * at + 1] != t;
        want_rank[(size_t)e * world + s]++;
      }
  for (int e = 0; e < local; e++) {
    wrong += counts[e] != fill[e];
    for (int s = 0; s < world; s++) wrong += rank_counts[(size_t)e * world + s] != want_rank[(size_t)e * world + s];
  }
  return wrong;
}

/* ---- the entry --------------------------------------------------------------------------------------------------- */

typedef struct moe_host_scratch {
  int32_t *all_ids; /* [W][T][K] every rank's routing */
  float *weights;   /* [T][K] this rank's */
  uint16_t *x;      /* [T][hidden] this rank's tokens */
  int32_t *want;    /* [L] slots of each local expert */
  int32_t *counts, *rank_counts, *src, *fill, *want_rank;
  long long *msgs, *copies; /* [W][W] */
} moe_host_scratch_t;

static void print_header(bench_ctx_t *ctx, int experts, int64_t most_tokens) {
  const int W = ctx->world;
  bench_print(ctx, "# moe-ll: hidden %d, top-%d of %d experts (%d per rank), bf16 tokens in, combine bf16 out\n",
              HIDDEN, TOP_K, experts, experts / W);
  if (experts != NUM_EXPERTS)
    bench_print(ctx, "# note: %d experts is not a multiple of world %d; using the nearest multiple, %d\n", NUM_EXPERTS,
                W, experts);
  bench_print(ctx, "# routing: seeded, each token to %d distinct experts drawn uniformly, weights in (0, 1]\n", TOP_K);
  bench_print(ctx,
              "# mode: dedup = default, one message per (token, expert rank), partials summed on the experts'"
              " rank; per-expert = SY_MOE_PER_EXPERT, one copy per (token, expert) both ways\n");
  bench_print(ctx,
              "# each timed iteration is one dispatch + combine pair (the order the API takes): _us = CUDA events "
              "around each half, kern = kernel time (CUPTI, the header above), host = enqueue to stream sync; medians, "
              "slowest rank\n");
  if (!gpu(ctx))
    bench_print(
        ctx,
        "# host backend: no kernels; the event columns repeat the host-observed time, the kernel columns are empty\n");
  else bench_print(ctx, "# the launch floor above bounds every event time from below\n");
  bench_print(ctx,
              "# nccl: grouped ncclSend/ncclRecv carrying per (source, destination) the bytes our dispatch moves "
              "(messages x (%d + %d) B for fp8, x %d B for bf16) and, for the combine, the reverse pairs' "
              "vectors x %d B; x_ = nccl / ours, on kernel time where both have it (else events)\n",
              HIDDEN, HIDDEN / SY_MOE_FP8_GROUP * 4, 2 * HIDDEN, 2 * HIDDEN);
  bench_print(ctx,
              "# #wrong: receive-layout mismatches (expert_counts, rank_counts, src pairs) against the routing "
              "(-1: not checked); payload bits are the gpu tests' job\n");
  bench_print(ctx,
              "# per-phase device trace: set SY_TRACE_FILE=moe.%%r.json (Chrome trace JSON per rank); largest "
              "size %lld tokens per rank\n#\n",
              (long long)most_tokens);
  bench_print(ctx, "# graph: the same pair captured in a CUDA graph (events inside), replayed; median device time\n");
  bench_print(ctx, "# %6s %5s %10s | %9s %9s %9s %9s | %9s %9s %9s %9s | %6s | %9s %9s %9s %9s | %6s %6s\n", "tokens",
              "wire", "mode", "disp_us", "disp_kern", "disp_grph", "disp_host", "comb_us", "comb_kern", "comb_grph",
              "comb_host", "#wrong", "nccl_disp", "nccl_dk", "nccl_comb", "nccl_ck", "x_disp", "x_comb");
  bench_print(ctx, "# %6s %5s %10s | %9s %9s %9s %9s | %9s %9s %9s %9s | %6s | %9s %9s %9s %9s | %6s %6s\n", "/rank",
              "", "", "(events)", "(kernel)", "(graph)", "(host)", "(events)", "(kernel)", "(graph)", "(host)", "",
              "(events)", "(kernel)", "(events)", "(kernel)", "", "");
}

/* One row of the table: a size, wire and mode; ours and NCCL's figures. */
typedef struct moe_row {
  int T;
  sy_moe_config_t cfg;
  const long long *pairs, *back_pairs; /* [W][W]: messages (dedup) or copies (per expert), out and back */
  bench_timing_t disp, comb, nd, nc;   /* ours, NCCL's: dispatch, combine */
  double halves[4], halves_k[4];       /* the four halves: events, kernel time */
  long long wrong;                     /* -1: not checked */
  int ours;                            /* ours ran (sy_moe_create did not say SY_ERR_UNSUPPORTED) */
} moe_row_t;

/* What the footer reports: the average ratios over NCCL, the row of the target configuration. */
typedef struct moe_tally {
  double sum_xd, sum_xc;
  int ratio_rows, have_target;
  double target[4]; /* dispatch us, combine us, x dispatch, x combine */
  int target_by_kernel;
} moe_tally_t;

/* Buffers for the largest size (T_max tokens per rank), the same on every rank or none: 0, or 1 on every rank
 * where any rank is short of memory. */
static int alloc_buffers(bench_ctx_t *ctx, moe_bench_t *b, moe_host_scratch_t *h, int L, size_t T_max) {
  const int W = ctx->world;
  const size_t S_max = (size_t)W * T_max, H = HIDDEN, groups = HIDDEN / SY_MOE_FP8_GROUP;
  int rc = 0;
  b->x = dev_alloc(ctx, T_max * H * 2);
  b->ids = dev_alloc(ctx, T_max * TOP_K * sizeof(int32_t));
  b->weights = dev_alloc(ctx, T_max * TOP_K * sizeof(float));
  b->recv.tokens = dev_alloc(ctx, (size_t)L * S_max * H * 2); /* room for the BF16 wire */
  b->recv.scales = dev_alloc(ctx, (size_t)L * groups * S_max * sizeof(float));
  b->recv.src = dev_alloc(ctx, (size_t)L * S_max * 2 * sizeof(int32_t));
  b->recv.expert_counts = dev_alloc(ctx, (size_t)L * sizeof(int32_t));
  b->recv.rank_counts = dev_alloc(ctx, (size_t)L * W * sizeof(int32_t));
  b->expert_out = dev_alloc(ctx, (size_t)L * S_max * H * 2);
  b->out = dev_alloc(ctx, T_max * H * 2);
  b->send_bytes = calloc(4 * (size_t)W, sizeof(size_t));
  h->all_ids = malloc((size_t)W * T_max * TOP_K * sizeof *h->all_ids);
  h->weights = malloc(T_max * TOP_K * sizeof *h->weights);
  h->x = malloc(T_max * H * sizeof *h->x);
  h->want = malloc((size_t)L * sizeof *h->want);
  h->counts = malloc((size_t)L * sizeof *h->counts);
  h->fill = malloc((size_t)L * sizeof *h->fill);
  h->rank_counts = malloc((size_t)L * W * sizeof *h->rank_counts);
  h->want_rank = malloc((size_t)L * W * sizeof *h->want_rank);
  h->src = malloc((size_t)L * S_max * 2 * sizeof *h->src);
  h->msgs = malloc(2 * (size_t)W * W * sizeof *h->msgs);
  if (!b->x || !b->ids || !b->weights || !b->recv.tokens || !b->recv.scales || !b->recv.src || !b->recv.expert_counts ||
      !b->recv.rank_counts || !b->expert_out || !b->out || !b->send_bytes || !h->all_ids || !h->weights || !h->x ||
      !h->want || !h->counts || !h->fill || !h->rank_counts || !h->want_rank || !h->src || !h->msgs) {
    fprintf(stderr, "sy-bench: rank %d: moe-ll: out of memory for %lld tokens per rank\n", ctx->rank, (long long)T_max);
    rc = 1;
  }
  rc = bench_allreduce_max(ctx, rc) != 0; /* every rank goes on, or none */
  if (!rc) {
    b->send_off = b->send_bytes + W, b->recv_bytes = b->send_bytes + 2 * W, b->recv_off = b->send_bytes + 3 * W;
    h->copies = h->msgs + (size_t)W * W;
  }
  return rc;
}

static void free_buffers(bench_ctx_t *ctx, moe_bench_t *b, moe_host_scratch_t *h) {
  dev_free(ctx, b->x), dev_free(ctx, b->ids), dev_free(ctx, b->weights), dev_free(ctx, b->recv.tokens);
  dev_free(ctx, b->recv.scales), dev_free(ctx, b->recv.src), dev_free(ctx, b->recv.expert_counts);
  dev_free(ctx, b->recv.rank_counts), dev_free(ctx, b->expert_out), dev_free(ctx, b->out);
  dev_free(ctx, b->nccl_send), dev_free(ctx, b->nccl_recv);
  free(b->send_bytes);
  free(h->all_ids), free(h->weights), free(h->x), free(h->want), free(h->counts), free(h->fill), free(h->rank_counts);
  free(h->want_rank), free(h->src), free(h->msgs);
}

/* One size's inputs, the same for every wire and mode: every rank's routing (this rank's tokens, ids and
 * weights to the device), the pairs both ways, the slots this rank's experts get and their outputs. */
static int load_size(bench_ctx_t *ctx, moe_bench_t *b, moe_host_scratch_t *h, int T, int experts) {
  const int W = ctx->world, me = ctx->rank, L = experts / W;
  const size_t S = (size_t)W * T, H = HIDDEN;
  int rc = 0;
  for (int r = 0; r < W; r++)
    wl_moe_uniform_routing(r, T, experts, TOP_K, h->all_ids + (size_t)r * T * TOP_K, r == me ? h->weights : NULL);
  wl_moe_uniform_tokens(me, T, HIDDEN, h->x);
  count_pairs(h->all_ids, W, T, L, h->msgs, h->copies);
  expected_counts(h->all_ids, W, me, T, L, h->want);
  b->tokens = T;
  rc |= to_dev(ctx, b->x, h->x, (size_t)T * H * 2);
  rc |= to_dev(ctx, b->ids, h->all_ids + (size_t)me * T * TOP_K, (size_t)T * TOP_K * sizeof(int32_t));
  rc |= to_dev(ctx, b->weights, h->weights, (size_t)T * TOP_K * sizeof(float));
  /* The experts' outputs: the slots this size fills, [L][S][hidden], bf16 0x3F3F (0.746). */
  for (int e = 0; e < L && !rc; e++)
    rc |= fill_bytes(ctx, (uint16_t *)b->expert_out + (size_t)e * S * H, 0x3F, (size_t)h->want[e] * H * 2);
  if (gpu(ctx) && !rc) rc = cudaStreamSynchronize(ctx->stream) != cudaSuccess;
  return bench_allreduce_max(ctx, rc) != 0;
}

/* The check: one pair on poisoned receive metadata; the dispatch's layout is compared. *wrong: the most
 * mismatches of any rank, -1 where a rank's check could not run. Non-zero where a rank's pair did not complete
 * (that leaves the object mid-call). */
static int check_pair(bench_ctx_t *ctx, moe_bench_t *b, moe_host_scratch_t *h, int T, int L, long long *wrong) {
  const int W = ctx->world, me = ctx->rank;
  const size_t S = (size_t)W * T;
  long long bad = 0;
  int crc = fill_bytes(ctx, b->recv.src, 0xEE, (size_t)L * S * 2 * sizeof(int32_t));
  crc |= fill_bytes(ctx, b->recv.expert_counts, 0xEE, (size_t)L * sizeof(int32_t));
  crc |= fill_bytes(ctx, b->recv.rank_counts, 0xEE, (size_t)L * W * sizeof(int32_t));
  crc = crc || moe_op_dispatch(ctx, b);
  if (gpu(ctx) && !crc) crc = cudaStreamSynchronize(ctx->stream) != cudaSuccess;
  crc = crc || from_dev(ctx, h->counts, b->recv.expert_counts, (size_t)L * sizeof(int32_t));
  crc = crc || from_dev(ctx, h->rank_counts, b->recv.rank_counts, (size_t)L * W * sizeof(int32_t));
  crc = crc || from_dev(ctx, h->src, b->recv.src, (size_t)L * S * 2 * sizeof(int32_t));
  if (!crc) bad = check_layout(h->all_ids, W, me, T, L, h->counts, h->rank_counts, h->src, h->fill, h->want_rank);
  crc = crc || moe_op_combine(ctx, b);
  if (gpu(ctx) && !crc) crc = cudaStreamSynchronize(ctx->stream) != cudaSuccess;
  *wrong = bench_allreduce_max(ctx, crc ? -1 : bad);
  return bench_allreduce_max(ctx, crc) != 0;
}

/* Ours on the object just created (b->moe): the check (with --check), the pairs, the halves (cuda backend);
 * the object destroyed after. */
static int measure_ours(bench_ctx_t *ctx, moe_bench_t *b, moe_host_scratch_t *h, moe_row_t *row, int L) {
  int rc = 0;
  if (ctx->opts->check && check_pair(ctx, b, h, row->T, L, &row->wrong)) rc = 1;
  if (!rc) rc = moe_time_pairs(ctx, b, &row->disp, &row->comb);
  if (!rc && gpu(ctx)) rc = moe_time_halves(ctx, b, row->halves, row->halves_k);
  sy_moe_destroy(b->moe);
  b->moe = NULL;
  return rc;
}

/* NCCL moving the same bytes: the dispatch's pairs at the wire's bytes, the combine's reverse pairs in bf16. */
static int measure_nccl(bench_ctx_t *ctx, moe_bench_t *b, moe_row_t *row) {
  const size_t H = HIDDEN;
  int rc = bench_allreduce_max(ctx, moe_nccl_pairs(ctx, b, row->pairs, 0, wire_bytes(row->cfg.wire))) != 0;
  if (!rc) rc = bench_time(ctx, moe_op_nccl, b, &row->nd);
  if (!rc) rc = bench_allreduce_max(ctx, moe_nccl_pairs(ctx, b, row->back_pairs, 1, H * 2)) != 0;
  if (!rc) rc = bench_time(ctx, moe_op_nccl, b, &row->nc);
  return rc;
}

/* The row: the table's line (and the halves' lines), its JSON object, and its share of the footer. */
static void print_row(bench_ctx_t *ctx, const moe_row_t *row, int experts, moe_tally_t *tally) {
  const int W = ctx->world, T = row->T;
  const size_t H = HIDDEN;
  const sy_moe_config_t cfg = row->cfg;
  const bench_timing_t *disp = &row->disp, *comb = &row->comb, *nd = &row->nd, *nc = &row->nc;
  const double *halves = row->halves, *halves_k = row->halves_k;
  const int ours = row->ours;
  /* Bytes the busiest rank sends (self included), what both columns move. */
  double disp_bytes = 0, comb_bytes = 0;
  for (int s = 0; s < W; s++) {
    long long out_msgs = 0, back = 0;
    for (int d = 0; d < W; d++) out_msgs += row->pairs[(size_t)s * W + d], back += row->back_pairs[(size_t)d * W + s];
    const double db = (double)out_msgs * wire_bytes(cfg.wire), cb = (double)back * H * 2;
    disp_bytes = db > disp_bytes ? db : disp_bytes;
    comb_bytes = cb > comb_bytes ? cb : comb_bytes;
  }
  const int have_nccl = ctx->nccl && nd->valid && nc->valid;
  /* Ratios on kernel time where both sides have it (the measure), else on event time. */
  const int by_kernel = disp->kernel_us > 0 && comb->kernel_us > 0 && nd->kernel_us > 0 && nc->kernel_us > 0;
  const double od = by_kernel ? disp->kernel_us : disp->time_us, oc = by_kernel ? comb->kernel_us : comb->time_us;
  const double xd = have_nccl && ours && od > 0 ? (by_kernel ? nd->kernel_us : nd->time_us) / od : 0;
  const double xc = have_nccl && ours && oc > 0 ? (by_kernel ? nc->kernel_us : nc->time_us) / oc : 0;
  char our_cols[128], nccl_cols[96], x_cols[32], f[8][16];
  if (ours)
    snprintf(our_cols, sizeof our_cols, "%9.2f %s %s %9.2f | %9.2f %s %s %9.2f | %6lld", disp->time_us,
             bench_fmt_us(f[0], 16, 9, disp->kernel_us), bench_fmt_us(f[1], 16, 9, disp->graph_us), disp->host_us,
             comb->time_us, bench_fmt_us(f[2], 16, 9, comb->kernel_us), bench_fmt_us(f[3], 16, 9, comb->graph_us),
             comb->host_us, row->wrong);
  else
    snprintf(our_cols, sizeof our_cols, "%9s %9s %9s %9s | %9s %9s %9s %9s | %6s", "n/a", "", "", "", "n/a", "", "", "",
             "");
  if (have_nccl)
    snprintf(nccl_cols, sizeof nccl_cols, "%9.2f %s %9.2f %s", nd->time_us, bench_fmt_us(f[4], 16, 9, nd->kernel_us),
             nc->time_us, bench_fmt_us(f[5], 16, 9, nc->kernel_us));
  else snprintf(nccl_cols, sizeof nccl_cols, "%9s %9s %9s %9s", "n/a", "", "n/a", "");
  if (xd > 0 && xc > 0) snprintf(x_cols, sizeof x_cols, "%6.2f %6.2f", xd, xc);
  else snprintf(x_cols, sizeof x_cols, "%6s %6s", "", "");
  bench_print(ctx, "  %6d %5s %10s | %s | %s | %s\n", T, wire_name(cfg.wire), mode_name(cfg.flags), our_cols, nccl_cols,
              x_cols);
  if (halves[0] > 0)
    bench_print(ctx,
                "#        halves, one kernel each: dispatch_send %.2f, dispatch_recv %.2f, combine_send %.2f, "
                "combine_recv %.2f us (events)\n",
                halves[0], halves[1], halves[2], halves[3]);
  if (halves_k[0] > 0)
    bench_print(ctx,
                "#        halves, kernel time:     dispatch_send %.2f, dispatch_recv %.2f, combine_send %.2f, "
                "combine_recv %.2f us\n",
                halves_k[0], halves_k[1], halves_k[2], halves_k[3]);
  bench_json(ctx,
             "{\"entry\": \"moe-ll\", \"backend\": \"%s\", \"world\": %d, \"tokens_per_rank\": %d, "
             "\"hidden\": %d, \"top_k\": %d, \"num_experts\": %d, \"wire\": \"%s\", \"mode\": \"%s\", "
             "\"supported\": %s, "
             "\"dispatch\": {\"time_us\": %.3f, \"kernel_us\": %s, \"graph_us\": %.3f, \"host_us\": %.3f, "
             "\"bytes_max\": %.0f}, "
             "\"combine\": {\"time_us\": %.3f, \"kernel_us\": %s, \"graph_us\": %.3f, \"host_us\": %.3f, "
             "\"bytes_max\": %.0f}, "
             "\"wrong\": %lld, "
             "\"nccl\": {%s\"dispatch_us\": %.3f, \"combine_us\": %.3f, \"dispatch_kernel_us\": %s, "
             "\"combine_kernel_us\": %s}, "
             "\"speedup_dispatch\": %.3f, \"speedup_combine\": %.3f, \"speedup_basis\": \"%s\", "
             "\"halves_us\": {\"dispatch_send\": %.3f, \"dispatch_recv\": %.3f, \"combine_send\": %.3f, "
             "\"combine_recv\": %.3f}, "
             "\"halves_kernel_us\": {\"dispatch_send\": %s, \"dispatch_recv\": %s, \"combine_send\": %s, "
             "\"combine_recv\": %s}}",
             sy_backend_name(ctx->backend), W, T, HIDDEN, TOP_K, experts, wire_name(cfg.wire), mode_name(cfg.flags),
             ours ? "true" : "false", disp->time_us, bench_json_us(f[0], 16, disp->kernel_us), disp->graph_us,
             disp->host_us, disp_bytes, comb->time_us, bench_json_us(f[1], 16, comb->kernel_us), comb->graph_us,
             comb->host_us, comb_bytes, row->wrong, have_nccl ? "" : "\"absent\": true, ", nd->time_us, nc->time_us,
             bench_json_us(f[2], 16, nd->kernel_us), bench_json_us(f[3], 16, nc->kernel_us), xd, xc,
             by_kernel ? "kernel" : "event", halves[0], halves[1], halves[2], halves[3],
             bench_json_us(f[4], 16, halves_k[0]), bench_json_us(f[5], 16, halves_k[1]),
             bench_json_us(f[6], 16, halves_k[2]), bench_json_us(f[7], 16, halves_k[3]));
  if (xd > 0 && xc > 0) tally->sum_xd += xd, tally->sum_xc += xc, tally->ratio_rows++;
  if (ours && T == TARGET_TOKENS && cfg.wire == SY_MOE_WIRE_FP8 && cfg.flags == 0) {
    tally->have_target = 1;
    tally->target[0] = od, tally->target[1] = oc, tally->target[2] = xd, tally->target[3] = xc;
    tally->target_by_kernel = by_kernel;
  }
}

/* One configuration (T tokens per rank, a wire, a mode): ours, NCCL's, the row. Non-zero on failure: where
 * sy_moe_create fails (other than SY_ERR_UNSUPPORTED, which *unsupported remembers) with no row. */
static int run_config(bench_ctx_t *ctx, moe_bench_t *b, moe_host_scratch_t *h, int T, int experts, sy_moe_wire_t wire,
                      unsigned mode, int *unsupported, moe_tally_t *tally) {
  moe_row_t row;
  memset(&row, 0, sizeof row);
  row.T = T;
  row.cfg = make_config(T, experts, wire, mode);
  /* dedup: a message per (token, rank) both ways; per expert: a copy per (token, expert) both ways. */
  row.pairs = (mode & SY_MOE_PER_EXPERT) ? h->copies : h->msgs, row.back_pairs = row.pairs;
  row.wrong = -1;
  int rc = 0;
  /* Until the cuda kernels exist create says SY_ERR_UNSUPPORTED (with a warning): asked once. */
  const sy_status_t st = *unsupported ? SY_ERR_UNSUPPORTED : sy_moe_create(ctx->comm, &row.cfg, &b->moe);
  if (st == SY_ERR_UNSUPPORTED) {
    *unsupported = 1;
  } else if (st != SY_SUCCESS) {
    bench_print(ctx, "# moe-ll: sy_moe_create (%d tokens, %s, %s): %s (%s)\n", T, wire_name(row.cfg.wire),
                mode_name(row.cfg.flags), sy_status_name(st), sy_status_string(st));
    return 1;
  } else {
    row.ours = 1;
    rc = measure_ours(ctx, b, h, &row, experts / ctx->world);
  }
  if (ctx->nccl && !rc) rc = measure_nccl(ctx, b, &row);
  if (ctx->opts->check && row.ours) {
    ctx->total_wrong += row.wrong > 0 ? row.wrong : 0;
    if (row.wrong < 0) ctx->total_wrong++; /* a check that could not run counts as wrong */
  }
  print_row(ctx, &row, experts, tally);
  return rc;
}

/* The footer: the average factor over NCCL, the target, a backend without MoE kernels (non-zero). */
static int print_footer(bench_ctx_t *ctx, const moe_tally_t *t, int unsupported) {
  if (t->ratio_rows)
    bench_print(ctx, "# average over %d rows: dispatch %.2fx, combine %.2fx faster than nccl\n", t->ratio_rows,
                t->sum_xd / t->ratio_rows, t->sum_xc / t->ratio_rows);
  if (t->have_target && gpu(ctx)) {
    const int met = t->target[0] <= TARGET_DISPATCH_US && t->target[1] <= TARGET_COMBINE_US &&
                    (!ctx->nccl || (t->target[2] >= TARGET_SPEEDUP && t->target[3] >= TARGET_SPEEDUP));
    bench_print(ctx,
                "# target (4 x H200, %d tokens, fp8 dispatch, dedup; %s time): dispatch %.2f us (<= %.0f), "
                "combine %.2f us (<= %.0f), %.2fx / %.2fx nccl (>= %.0fx): %s%s\n",
                TARGET_TOKENS, t->target_by_kernel ? "kernel" : "event", t->target[0], TARGET_DISPATCH_US, t->target[1],
                TARGET_COMBINE_US, t->target[2], t->target[3], TARGET_SPEEDUP, met ? "met" : "NOT met",
                ctx->nccl ? "" : " (no nccl baseline)");
  }
  if (unsupported) {
    bench_print(ctx,
                "# moe-ll: sy_moe_create: %s on the %s backend (its MoE kernels are not built yet); the "
                "switchyard columns are n/a\n",
                sy_status_name(SY_ERR_UNSUPPORTED), sy_backend_name(ctx->backend));
    return 1;
  }
  return 0;
}

int bench_moe(bench_ctx_t *ctx) {
  const bench_opts_t *o = ctx->opts;
  const int W = ctx->world;
  int64_t sizes[BENCH_MAX_TOKEN_LIST];
  const int num_sizes = token_sizes(o, sizes);
  if (!num_sizes) {
    bench_print(ctx, "# moe-ll: no size of the list lies in [-t %lld, -T %lld]\n", (long long)o->min_tokens,
                (long long)o->max_tokens);
    return 1;
  }
  int64_t most = 0;
  for (int i = 0; i < num_sizes; i++) most = sizes[i] > most ? sizes[i] : most;
  if (most * W > INT32_MAX) {
    bench_print(ctx, "# moe-ll: %lld tokens per rank x world %d exceeds the slot count an int32 holds\n",
                (long long)most, W);
    return 1;
  }
  const int experts = moe_experts_for(W), L = experts / W;

  moe_bench_t b;
  memset(&b, 0, sizeof b);
  moe_host_scratch_t h;
  memset(&h, 0, sizeof h);
  int rc = alloc_buffers(ctx, &b, &h, L, (size_t)most), unsupported = 0;
  if (!rc) print_header(ctx, experts, most);

  moe_tally_t tally;
  memset(&tally, 0, sizeof tally);
  for (int si = 0; si < num_sizes && !rc; si++) {
    const int T = (int)sizes[si];
    rc = load_size(ctx, &b, &h, T, experts);
    for (int wi = 0; wi < NUM_WIRES && !rc; wi++) {
      for (int mi = 0; mi < NUM_MODES && !rc; mi++) {
        if ((o->wire_only && strcmp(o->wire_only, wire_name(wires[wi]))) ||
            (o->mode_only && strcmp(o->mode_only, mode_name(modes[mi]))))
          continue;
        rc = run_config(ctx, &b, &h, T, experts, wires[wi], modes[mi], &unsupported, &tally);
      }
    }
  }
  if (print_footer(ctx, &tally, unsupported)) rc = 1;
  free_buffers(ctx, &b, &h);
  return rc;
}
