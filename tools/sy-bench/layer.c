/*
 * layer.c — sy-bench entry `layer` (issue 21): one MoE layer's step; this file the entry and the prefill shapes
 * (more than 256 tokens a rank; decode: layer_ll.c) over the high-throughput mode: layout, dispatch (BF16, worst-case
 * masked layout: each local expert's rows at e x S, S the routing's busiest expert to 16 — a bound the caller
 * knows), the expert FFN — y = relu(x W1_e) W2_e, two strided-batched GEMMs through cublasLt (ReLU the first one's
 * epilogue), bf16 in and out, fp32 accumulation; each expert e its own W1 [H][F] and W2 [F][H] (--expert-weights
 * shared: one pair for every expert, every expert's FLOPs on one expert's weight bytes, as before run 46) — and the
 * weighted combine. The ways:
 *   a  sequential, eager, one stream;
 *   b  micro-batches (--micro-batches, default 2) of T/n tokens, or of shares by weight (--micro-batches 1,3,3,1:
 *      the first dispatch and the last combine, which nothing hides, small): the communication on the bench's stream (the
 *      highest priority), the GEMMs on a second one (the lowest, cublasLt told the SMs the communication leaves),
 *      joined by events, so that one micro-batch's dispatch and combine run beside another's GEMMs
 *      (L1 D1 | L2 D2 beside F1 | C1 beside F2 | C2 for two);
 *      With --split experts the micro-batches are groups of each rank's experts instead (as even as they allow, or
 *      shares by the weights: 1,6,6,1 a small first dispatch and last combine), every token in each: a
 *      group's layout sees the ids of its experts only (the others -1), its GEMMs keep every row of its experts
 *      (token micro-batches halve them, and each re-reads every expert's weights), a token crosses a link once a
 *      group it has experts in there, and each group's combine after the first adds into the output
 *      (sy_moe_ht_combine_add: the group's fp32 sum plus the row so far, rounded once; a token with no expert in
 *      the group untouched), or with --group-sum kernel the groups' combines leave partial outputs (each rounded to
 *      bf16) that a kernel after the last adds up (fp32, in group order, rounded again);
 *   c  (b) captured once in sy_graph_cache and replayed (with programmatic dependent launch unless SY_PDL=0);
 *   s  (a) with every communication call on the --end-sms budget (named in --ways only; needs --end-sms): the step
 *      with no overlap and no SM given up, in the same process as b and c, so the line after the targets says
 *      what the overlap is worth (run 53: at world 1 the sequential step with its communication on 132 SMs beat
 *      b and c on 16).
 * Beside them, alone: the communication (layout, dispatch, combine), the GEMMs (on every SM), and the micro-batches'
 * GEMMs in turn on the SMs the communication leaves them (way gemms: what b and c cannot go below). Reports step time, host
 * enqueue time, the SMs the communication held (num_sms) and the overlap efficiency
 * (t_comm + t_compute - t_step) / min(t_comm, t_compute). Checked: sampled tokens of mode (a)'s and (c)'s output
 * against a CPU reference of the layer (double accumulation, the GEMMs' outputs rounded to bf16 as the GPU's are)
 * within a relative bf16 tolerance (layer_ffn.c). The backward (the tokens' gradient: the combine's backward, the
 * FFN's, the dispatch's) runs the same ways after the forward's, checked the same way. Host backend: small shapes,
 * the GEMMs as C loops (a smoke test in CI).
 */
#include <stdlib.h>
#include <string.h>

#include "layer.h"
#include "workload.h" /* wl_moe_keep_experts */

/* ---- the communication -------------------------------------------------------------------------------------- */

static int layout(layer_bench_t *b, mb_t *m, cudaStream_t s) {
  const int32_t *ids = m->ids ? m->ids : b->ids + (size_t)m->first * b->K;
  return sy_moe_ht_layout(b->moe, ids, SY_INDEX_INT32, m->T, m->handle, NULL, s) != 0;
}

static int dispatch(layer_bench_t *b, mb_t *m, cudaStream_t s) {
  return sy_moe_ht_dispatch(b->moe, m->handle, m->T, b->x + (size_t)m->first * b->H, NULL,
                            b->weights + (size_t)m->first * b->K, &m->recv, s) != 0;
}

/* By expert groups with --group-sum add, the groups' combines (and the dispatch's backwards) after the first add into
 * the output (sy_moe_ht_combine_add): they run in group order on the communication stream. */
static int adds(const layer_bench_t *b, const mb_t *m) { return b->group_add && m > &b->mb[1]; }

static int combine(layer_bench_t *b, mb_t *m, cudaStream_t s) {
  uint16_t *out = m->out ? m->out : b->out + (size_t)m->first * b->H;
  if (adds(b, m))
    return sy_moe_ht_combine_add(b->moe, m->handle, m->T, m->y, &m->recv, m->recv.weights, NULL, out, NULL, s) != 0;
  return sy_moe_ht_combine(b->moe, m->handle, m->T, m->y, &m->recv, m->recv.weights, NULL, out, NULL, s) != 0;
}

static int ffn(layer_bench_t *b, mb_t *m, int e0, int experts, int sms, cudaStream_t s) {
  return layer_ffn(b, m->recv.tokens, m->mid, m->y, m->S, m->S, e0, experts, sms, s);
}

/* The backward: the combine's (dy = w_r dout[t] into each row), the FFN's, the dispatch's (a combine without
 * weights: the rows' gradients summed back to their tokens). The forward's rows, mid and layout stay from the
 * forward ways that ran before. */
static int combine_bwd(layer_bench_t *b, mb_t *m, cudaStream_t s) {
  return sy_moe_ht_combine_backward(b->moe, m->handle, m->T, b->dout + (size_t)m->first * b->H, &m->recv,
                                    m->recv.weights, NULL, m->dy, NULL, s) != 0;
}

static int ffn_bwd(layer_bench_t *b, mb_t *m, int e0, int experts, int sms, cudaStream_t s) {
  return layer_ffn_backward(b, m->dy, m->mid, m->dmid, m->dxr, m->S, m->S, e0, experts, sms, s);
}

static int dispatch_bwd(layer_bench_t *b, mb_t *m, cudaStream_t s) {
  uint16_t *dx = m->dx ? m->dx : b->dx + (size_t)m->first * b->H;
  if (adds(b, m)) return sy_moe_ht_combine_add(b->moe, m->handle, m->T, m->dxr, &m->recv, NULL, NULL, dx, NULL, s) != 0;
  return sy_moe_ht_combine(b->moe, m->handle, m->T, m->dxr, &m->recv, NULL, NULL, dx, NULL, s) != 0;
}

/* ---- the parts of its steps (layer_run_shape makes the ways of them) ------------------------------------------ */

/* --end-sms: the SM budget of the calls that follow (sy_moe_ht_set_num_sms): the step's ends' — the first group's
 * layout and dispatch (comm1: nothing beside them yet), the last group's combine (comm2: nothing beside it any more),
 * forward and backward — or the layer's; way s: every call at the ends' budget. */
static int budget(layer_bench_t *b, int m, int comm1) {
  if (!b->end_sms) return 0;
  const int end = b->all_ends || (m && (comm1 ? m == 1 : m == b->nmb));
  return sy_moe_ht_set_num_sms(b->moe, end ? b->end_sms : b->sms) != SY_SUCCESS;
}
static int part_ld(layer_bench_t *b, int m, cudaStream_t s) {
  return budget(b, m, 1) || layout(b, &b->mb[m], s) || dispatch(b, &b->mb[m], s);
}
/* The SMs a compute part's GEMMs target: a micro-batch's (m > 0) beside the communication, those it leaves; the rest
 * of a micro-batch's experts after it (LAYER_GEMM_AFTER), and the whole step's, every SM. */
static int part_sms(const layer_bench_t *b, int m, int part) { return m && part != LAYER_GEMM_AFTER ? b->gemm_sms : 0; }
/* The experts a compute part takes: a micro-batch of an expert group (--split experts) its group's, all of them at
 * once (--gemm-beside is refused with it); else layer_gemm_experts's. */
static void part_experts(const layer_bench_t *b, int m, int part, int *e0, int *experts) {
  if (m && b->by_experts) *e0 = b->mb[m].e0, *experts = b->mb[m].ne;
  else layer_gemm_experts(b, part, e0, experts);
}
static int part_ffn(layer_bench_t *b, int m, int part, cudaStream_t s) {
  int e0, experts;
  part_experts(b, m, part, &e0, &experts);
  return ffn(b, &b->mb[m], e0, experts, part_sms(b, m, part), s);
}
/* By expert groups with --group-sum kernel each group's combine (the dispatch's backward) leaves a partial output,
 * rounded to bf16; after the last group's, on the same stream (after every group's, which come in order there), their
 * sum in fp32 in group order, rounded to bf16, is the output. */
_Static_assert(LAYER_MAX_MB <= 8, "layer_sum_parts (layer_mask.cu) takes at most 8 parts");
static int sum_groups(layer_bench_t *b, int m, int backward, cudaStream_t s) {
  if (!m || !b->by_experts || b->group_add || m != b->nmb) return 0;
  uint16_t *part[LAYER_MAX_MB];
  for (int i = 0; i < b->nmb; i++) part[i] = backward ? b->mb[i + 1].dx : b->mb[i + 1].out;
  return layer_sum(b, backward ? b->dx : b->out, part, b->nmb, s);
}
static int part_c(layer_bench_t *b, int m, cudaStream_t s) {
  return budget(b, m, 0) || combine(b, &b->mb[m], s) || sum_groups(b, m, 0, s);
}
static int part_cb(layer_bench_t *b, int m, cudaStream_t s) { return budget(b, m, 1) || combine_bwd(b, &b->mb[m], s); }
static int part_ffn_bwd(layer_bench_t *b, int m, int part, cudaStream_t s) {
  int e0, experts;
  part_experts(b, m, part, &e0, &experts);
  return ffn_bwd(b, &b->mb[m], e0, experts, part_sms(b, m, part), s);
}
static int part_db(layer_bench_t *b, int m, cudaStream_t s) {
  return budget(b, m, 0) || dispatch_bwd(b, &b->mb[m], s) || sum_groups(b, m, 1, s);
}

/* ---- set-up --------------------------------------------------------------------------------------------------- */

static double share(double part, double whole) { return whole > 0 ? part / whole : 0; }

/* Expert group m's ids: the step's with every entry outside its local experts e0 .. e0 + ne - 1 (on every rank) -1. */
static int32_t *group_ids(layer_bench_t *b, const mb_t *m) {
  const size_t n = (size_t)b->T * b->K;
  int32_t *h = malloc(n * 4), *d = layer_buf(b, n * 4);
  if (h && d) {
    memcpy(h, b->ids_h, n * 4);
    wl_moe_keep_experts(h, n, b->L, m->e0, m->ne);
    if (layer_put(b, d, h, n * 4)) layer_unbuf(b, d), d = NULL;
  } else if (d) layer_unbuf(b, d), d = NULL;
  free(h);
  return d;
}

static int setup_mb(layer_bench_t *b, mb_t *m, int index, size_t handle_bytes) {
  layer_split(b, index, &m->T, &m->first);
  m->e0 = 0, m->ne = b->L, m->ids = NULL, m->out = m->dx = NULL;
  if (index && b->by_experts) { /* group index of nmb: its share of the local experts (layer_group) */
    layer_group(b->ctx->opts->mb_weights, b->nmb, b->L, index, &m->e0, &m->ne);
    m->ids = group_ids(b, m);
    if (!m->ids) return 1;
    if (!b->group_add) { /* partial outputs, summed by a kernel after the last group (--group-sum kernel) */
      m->out = layer_buf(b, (size_t)b->T * b->H * 2);
      m->dx = layer_buf(b, (size_t)b->T * b->H * 2);
      if (!m->out || !m->dx) return 1;
    }
  }
  m->S = layer_max_rows(b, m->first, m->T); /* by expert groups: the whole step's bound, a group's at most that */
  if (m->S < 0) return 1;
  const size_t rows = (size_t)b->L * m->S;
  m->handle = layer_buf(b, handle_bytes);
  m->recv = (sy_moe_ht_recv_t){0};
  if (b->ctx->opts->recv_arena) { /* from the object's receive arena: the dispatch's first copy in place */
    if (sy_moe_ht_recv_alloc(b->moe, NULL, (int)rows, m->S, &m->recv, NULL) != SY_SUCCESS) return 1;
  } else {
    m->recv.tokens = layer_buf(b, rows * b->H * 2);
    m->recv.src = layer_buf(b, rows * 8);
    m->recv.weights = layer_buf(b, rows * 4);
    m->recv.expert_offsets = layer_buf(b, ((size_t)b->L + 1) * 4);
    m->recv.expert_counts = layer_buf(b, (size_t)b->L * 4);
    m->recv.rows = (int)rows;
    m->recv.expert_stride = m->S;
  }
  m->mid = layer_buf(b, rows * b->F * 2);
  m->y = layer_buf(b, rows * b->H * 2);
  m->dy = layer_buf(b, rows * b->H * 2);
  m->dmid = layer_buf(b, rows * b->F * 2);
  m->dxr = layer_buf(b, rows * b->H * 2);
  return !m->handle || !m->recv.tokens || !m->recv.src || !m->recv.weights || !m->recv.expert_offsets ||
         !m->recv.expert_counts || !m->mid || !m->y || !m->dy || !m->dmid || !m->dxr;
}

static void free_mb(layer_bench_t *b, mb_t *m) {
  if (b->ctx->opts->recv_arena && m->recv.expert_offsets) sy_moe_ht_recv_free(b->moe, NULL, &m->recv, NULL);
  void *p[] = {m->handle,
               m->recv.tokens,
               m->recv.src,
               m->recv.weights,
               m->recv.expert_offsets,
               m->recv.expert_counts,
               m->mid,
               m->y,
               m->dy,
               m->dmid,
               m->dxr,
               m->ids,
               m->out,
               m->dx};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) layer_unbuf(b, p[i]);
}

static int setup_prefill(layer_bench_t *b) {
  bench_ctx_t *ctx = b->ctx;
  sy_moe_ht_config_t cfg = SY_MOE_HT_CONFIG_INIT;
  cfg.max_tokens = b->T, cfg.hidden = b->H, cfg.top_k = b->K, cfg.num_experts = b->E;
  cfg.wire = SY_MOE_WIRE_BF16, cfg.expert_alignment = 16, cfg.num_sms = b->sms;
  if (ctx->opts->recv_arena) { /* room for every micro-batch's recv (masked: L x S rows) */
    const int L = b->E / ctx->world;
    size_t bytes = 0;
    for (int m = 0; m <= b->nmb; m++) {
      int T = 0, first = 0;
      size_t one = 0;
      layer_split(b, m, &T, &first);
      const int S = layer_max_rows(b, first, T);
      if (S < 0 || sy_moe_ht_recv_bytes(ctx->comm, &cfg, L * S, &one) != SY_SUCCESS) return 1;
      bytes += one;
    }
    cfg.recv_arena_bytes = (size_t)bench_allreduce_max(ctx, (long long)bytes); /* alike on every rank */
  }
  b->end_sms = b->by_experts ? ctx->opts->end_sms : 0;
  if (b->end_sms > b->sms) cfg.num_sms = b->end_sms; /* the most a call takes; the others b->sms (budget) */
  const sy_status_t st = sy_moe_ht_create(ctx->comm, &cfg, &b->moe);
  if (st != SY_SUCCESS) { /* e.g. the receive arena past the heap: say what it needs and where to set it */
    size_t need = 0;
    sy_moe_ht_workspace_size(ctx->comm, &cfg, &need);
    fprintf(stderr,
            "sy-bench layer: rank %d: sy_moe_ht_create (%d tokens, num_sms %d%s): %s (%s); its workspace: %.1f MiB of "
            "symmetric memory (SY_HEAP_SIZE)\n",
            ctx->rank, b->T, cfg.num_sms, cfg.recv_arena_bytes ? ", the receive arena in it" : "", sy_status_name(st),
            sy_status_string(st), (double)need / (1 << 20));
    return 1;
  }
  if (sy_moe_ht_set_num_sms(b->moe, b->sms) != SY_SUCCESS) return 1;
  sy_moe_ht_sizes_t sizes = SY_MOE_HT_SIZES_INIT;
  if (sy_moe_ht_sizes(b->moe, &sizes) != SY_SUCCESS) return 1;
  if (sizes.local_experts != b->L) return 1; /* the weights were made for E / world experts a rank */
  int dev = 0, sm_count = 0;
  if (b->gpu && (cudaGetDevice(&dev) != cudaSuccess ||
                 cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess))
    return 1;
  b->gemm_sms = b->ctx->opts->gemm_sms >= 0 ? b->ctx->opts->gemm_sms : sm_count > b->sms ? sm_count - b->sms : 0;
  for (int m = 0; m <= b->nmb; m++)
    if (setup_mb(b, &b->mb[m], m, sizes.handle_bytes)) return 1;
  return 0;
}

static int prefill(layer_bench_t *b) {
  int rc = setup_prefill(b);
  char split[LAYER_MAX_MB * 40] = "", beside[96] = "", ends[96] = "";
  if (b->end_sms)
    snprintf(ends, sizeof ends, " (the first group's dispatch and the last group's combine %d: --end-sms)", b->end_sms);
  if (b->beside < b->L)
    snprintf(beside, sizeof beside, " (%d experts of %d; the rest on every SM after the communication beside them)",
             b->beside, b->L);
  for (int m = 1; m <= b->nmb; m++) {
    const size_t at = strlen(split);
    if (b->by_experts)
      snprintf(split + at, sizeof split - at, "%slocal experts %d-%d", m > 1 ? ", " : "", b->mb[m].e0,
               b->mb[m].e0 + b->mb[m].ne - 1);
    else snprintf(split + at, sizeof split - at, "%s%d tokens (%d rows)", m > 1 ? ", " : "", b->mb[m].T, b->mb[m].S);
  }
  bench_print(b->ctx,
              "# layer prefill: %d tokens a rank, high-throughput mode, BF16 wire, masked layout of %d rows an expert "
              "(%d experts a rank; the routing's busiest expert, to 16); %d micro-batches%s: %s; communication "
              "SMs %d%s, the micro-batches' GEMMs on %d%s%s%s\n",
              b->T, b->mb[0].S, b->L, b->nmb,
              b->by_experts ? " by expert groups, every token in each (--split experts; their outputs summed; way "
                              "comm and the overlap measure count the whole step's communication once, where the "
                              "groups send a token once a group)"
                            : "",
              split, b->sms, ends, b->gemm_sms, b->gemm_sms || !b->gpu ? "" : " (no SM target: every SM)", beside,
              b->ctx->opts->recv_arena ? "; recv in the receive arena (--recv arena)" : "");
  static const layer_parts_t fwd = {"prefill", part_ld, part_ffn, part_c, 1};
  static const layer_parts_t bwd = {"backward", part_cb, part_ffn_bwd, part_db, 2};
  double us[LAYER_WAYS] = {0}, enq[LAYER_WAYS] = {0}, ub[LAYER_WAYS] = {0}, eb[LAYER_WAYS] = {0};
  if (!rc) rc = layer_run_shape(b, &fwd, us, enq) < 0;
  if (!rc) rc = layer_run_shape(b, &bwd, ub, eb) < 0; /* after the forward ways: their rows stay */
  /* each target's line where --ways timed what it compares */
  const int have_b = us[WAY_COMM] > 0 && us[WAY_COMPUTE] > 0 && us[WAY_B] > 0,
            have_c = us[WAY_COMPUTE] > 0 && us[WAY_C] > 0 && ub[WAY_COMPUTE] > 0 && ub[WAY_C] > 0,
            have_g = have_c && us[WAY_GEMMS] > 0 && ub[WAY_GEMMS] > 0;
  if (!rc && b->gpu && have_b) {
    const double lo = us[WAY_COMM] < us[WAY_COMPUTE] ? us[WAY_COMM] : us[WAY_COMPUTE],
                 hidden = lo > 0 ? (us[WAY_COMM] + us[WAY_COMPUTE] - us[WAY_B]) / lo : 0;
    bench_print(b->ctx,
                "# target (world 1, 4096 tokens): way b hides >= 70%% of the communication: %.0f%% at %d "
                "tokens: %s\n",
                100 * hidden, b->T, hidden >= 0.7 ? "met" : "NOT met");
  }
  if (!rc && b->gpu && have_c) {
    const double exposed = share(us[WAY_C] - us[WAY_COMPUTE], us[WAY_C]),
                 exposed_b = share(ub[WAY_C] - ub[WAY_COMPUTE], ub[WAY_C]);
    bench_print(b->ctx,
                "# target (4 GPUs, prefill): exposed communication in way c, (t_c - t_compute) / t_c, <= 10%% of the "
                "step: forward %.0f%%, backward %.0f%% at world %d: %s\n",
                100 * exposed, 100 * exposed_b, b->ctx->world, exposed <= 0.1 && exposed_b <= 0.1 ? "met" : "NOT met");
  }
  if (!rc && b->gpu && have_g) {
    /* the part of it that no overlap removes: the micro-batches' GEMMs alone on the SMs the communication leaves
     * (way gemms) against the whole step's on every SM; the rest is the communication not hidden */
    bench_print(b->ctx,
                "# of which the GEMMs beside the communication, (t_gemms - t_compute) / t_c: forward %.0f%%, backward "
                "%.0f%%; the communication not hidden, (t_c - t_gemms) / t_c: forward %.0f%%, backward %.0f%%\n",
                100 * share(us[WAY_GEMMS] - us[WAY_COMPUTE], us[WAY_C]),
                100 * share(ub[WAY_GEMMS] - ub[WAY_COMPUTE], ub[WAY_C]),
                100 * share(us[WAY_C] - us[WAY_GEMMS], us[WAY_C]), 100 * share(ub[WAY_C] - ub[WAY_GEMMS], ub[WAY_C]));
  }
  if (!rc && us[WAY_S] > 0 && ub[WAY_S] > 0 && (us[WAY_B] > 0 || us[WAY_C] > 0)) {
    /* the overlap's worth: against the step with no overlap whose communication takes every SM it may (way s);
     * at world 1 the communication is HBM traffic, which the GEMMs beside it need too */
    char vs[2][96];
    for (int w = 0; w < 2; w++) {
      const int way = w ? WAY_C : WAY_B;
      snprintf(vs[w], sizeof vs[w], "way %c forward %+.1f%%, backward %+.1f%%", w ? 'c' : 'b',
               100 * (us[way] / us[WAY_S] - 1), 100 * (ub[way] / ub[WAY_S] - 1));
    }
    bench_print(b->ctx, "# against way s (no overlap, its communication on %d SMs): %s%s%s (negative: faster than s)\n",
                b->end_sms, us[WAY_B] > 0 && ub[WAY_B] > 0 ? vs[0] : "",
                us[WAY_B] > 0 && ub[WAY_B] > 0 && us[WAY_C] > 0 && ub[WAY_C] > 0 ? "; " : "",
                us[WAY_C] > 0 && ub[WAY_C] > 0 ? vs[1] : "");
  }
  for (int i = 0; i <= b->nmb; i++) free_mb(b, &b->mb[i]);
  if (b->moe) sy_moe_ht_destroy(b->moe);
  b->moe = NULL;
  return rc;
}

/* ---- the entry ------------------------------------------------------------------------------------------------ */

int bench_layer(bench_ctx_t *ctx) {
  const int gpu = ctx->backend == SY_BACKEND_CUDA;
  /* a GPU at its power limit clocks by its temperature, which falls while it idles (the CPU's check of a way): each
   * timing after seconds of its own way, so that no way is timed on a GPU the one before it left cool (run 47) */
  ctx->warm_s = ctx->opts->settle_s >= 0 ? ctx->opts->settle_s : gpu ? 3.0 : 0;
  static const int64_t gpu_tokens[] = {128, 4096}, host_tokens[] = {16, 288};
  const int64_t *tokens = ctx->opts->num_token_list ? ctx->opts->token_list : gpu ? gpu_tokens : host_tokens;
  const int n = ctx->opts->num_token_list ? ctx->opts->num_token_list : 2;
  int rc = 0;
  if (ctx->opts->end_sms && !ctx->opts->split_experts) {
    bench_print(ctx, "# layer: --end-sms needs --split experts (the first and the last group's object)\n");
    ctx->warm_s = 0;
    return 1;
  }
  int way_s = 0;
  for (int i = 0; i < ctx->opts->num_ways; i++) way_s = way_s || ctx->opts->ways[i] == WAY_S;
  if (way_s && !ctx->opts->end_sms) {
    bench_print(ctx, "# layer: --ways s needs --end-sms N (the SMs its communication calls take)\n");
    ctx->warm_s = 0;
    return 1;
  }
  if (ctx->opts->split_experts) { /* every size checked before any runs */
    const int E = gpu ? 256 : 8 * ctx->world, L = (E + ctx->world - 1) / ctx->world,
              groups = ctx->opts->micro_batches ? ctx->opts->micro_batches : 2;
    int small = 0, empty = 0;
    for (int i = 0; i < n; i++) small = small || tokens[i] <= 256;
    for (int m = 1; m <= groups; m++) {
      int e0, ne;
      layer_group(ctx->opts->mb_weights, groups, L, m, &e0, &ne);
      empty = empty || ne < 1;
    }
    const double f = ctx->opts->gemm_beside;
    if (small || empty || (f > 0 && f < 1)) {
      bench_print(ctx,
                  "# layer: --split experts: prefill sizes only (every --tokens above 256), every group at least one "
                  "of the %d experts a rank has (--micro-batches: at most %d groups; weights each its share of the "
                  "experts), no --gemm-beside\n",
                  L, L);
      ctx->warm_s = 0;
      return 1;
    }
  }
  for (int i = 0; i < n && !rc; i++) {
    layer_bench_t b = {0};
    b.ctx = ctx;
    b.gpu = gpu;
    b.H = gpu ? 7168 : 128, b.F = gpu ? 2048 : 64, b.K = gpu ? 8 : 2;
    b.E = gpu ? 256 : 8 * ctx->world;
    if (b.E % ctx->world) b.E = (b.E / ctx->world + 1) * ctx->world;
    b.L = b.E / ctx->world;
    b.shared = ctx->opts->shared_weights;
    b.layers = ctx->opts->layers > 1 ? ctx->opts->layers : 1;
    const double f = ctx->opts->gemm_beside; /* of the L experts, those beside the communication: F x L, at least 1 */
    b.beside = f > 0 && f < 1 ? (int)(f * b.L + 0.5) : b.L;
    if (b.beside < 1) b.beside = 1;
    b.T = (int)tokens[i];
    b.sms = ctx->opts->num_sms ? ctx->opts->num_sms : 16;
    b.nmb = ctx->opts->micro_batches ? ctx->opts->micro_batches : 2;
    b.by_experts = ctx->opts->split_experts;
    b.group_add = b.by_experts && !ctx->opts->group_kernel;
    if (i == 0)
      bench_print(
          ctx,
          "# layer: forward; %d layer%s a step (the same weights each); hidden %d, ffn %d, top-%d of %d experts; "
          "GEMMs: %s, %s W1 [%d][%d] and W2 [%d][%d]%s; ways: a sequential, b %d micro-batches on two streams, c "
          "replayed from the graph cache (PDL %s); comm and compute: each alone; each timing after %.2f s of its "
          "way's untimed calls (--settle; with -w 0 none)\n",
          b.layers, b.layers > 1 ? "s" : "", b.H, b.F, b.K, b.E, gpu ? "cublasLt" : "C loops (host backend)",
          ctx->opts->shared_weights ? "one" : "each expert's own", b.H, b.F, b.F, b.H,
          ctx->opts->shared_weights ? " for every expert (--expert-weights shared)" : "", b.nmb,
          getenv("SY_PDL") && !strcmp(getenv("SY_PDL"), "0") ? "off" : "on",
          ctx->warm_s > 0 ? ctx->warm_s : BENCH_WARM_S);
    int next = b.by_experts ? b.T : 0; /* the micro-batches tile the step's tokens in order (weights: none empty) */
    for (int m = 1; m <= b.nmb && !rc && !b.by_experts; m++) {
      int T = 0, first = 0;
      layer_split(&b, m, &T, &first);
      if (first != next || (T < 1 && ctx->opts->mb_weights[0])) {
        bench_print(ctx, "# layer: --micro-batches: micro-batch %d of %d gets tokens [%d, %d) of %d\n", m, b.nmb, first,
                    first + T, b.T);
        rc = 1;
      }
      next = first + T;
    }
    if (!rc && next != b.T) {
      bench_print(ctx, "# layer: the micro-batches cover %d of %d tokens\n", next, b.T);
      rc = 1;
    }
    if (rc) break;
    rc = layer_setup_common(&b);
    if (!rc) rc = b.T <= 256 ? layer_decode(&b) : prefill(&b);
    if (rc) bench_print(ctx, "# layer: %d tokens: failed (rank %d)\n", b.T, ctx->rank);
    layer_teardown_common(&b);
  }
  ctx->warm_s = 0;
  return rc;
}

/* The rings and buffers are bounded by the configuration (as for moe-ht and moe-ll): SY_HEAP_SIZE's default. */
size_t bench_layer_heap(const bench_opts_t *opts) {
  (void)opts;
  return 0;
}
