/*
 * test_gpu_moe_ht.c — the MoE high-throughput layout, dispatch and combine on the GPUs against the CPU oracle (the
 * host backend of the same library, run in this process on W threads with every rank's inputs), bit for bit:
 * the rows (payload, scales, {source, token}, weight; padding rows and rows past the layout poisoned first and
 * compared whole), the offsets and counts, the exact mode's host counts, the combine's tokens and its row values
 * carried back to (token, k). Cases: every wire (FP8, FP8_UE8M0, BF16, FP8_GIVEN; the scales group-major and
 * row-major), alignment 1 / 16 / 128, the contiguous and the masked layout, the exact and the worst-case mode,
 * int32 and int64 ids, routings random, one expert, an empty rank, several experts on one rank, none, and special
 * values; 1 to 8 channels; 3 rounds per object back to back on one stream (the rings' counters carry over),
 * num_tokens and routing changing every round; last, a CUDA graph of the worst-case round replayed with new inputs.
 * Every round also runs the dispatch's backward (the combine unweighted, no row values) and the combine's
 * backward (grad_rows and the row weights' gradient, padding rows poisoned first). The worst-case and masked
 * cases take their receive buffers from a stream-ordered pool (sy_moe_ht_recv_alloc), the exact ones from
 * cudaMalloc; then every case again with them from the object's receive arena (config.recv_arena_bytes), where
 * from world 2 the dispatch takes each arriving token's first row in place; then again with the arena on some ranks
 * only.
 */
#include "gpu_test.h"

typedef struct {
  const char *name;
  int E, K, H, T;
  sy_moe_wire_t wire;
  int align, sms, masked, exact, id64;
  wl_route_t route;
  int specials;
  uint64_t salt;
  unsigned flags; /* config.flags: SY_MOE_HT_SCALES_ROW_MAJOR */
  int call_sms;   /* > 0: the calls' budgets vary (sy_moe_ht_set_num_sms: this, config.num_sms and 2; run_round) */
} ht_case_t;

#define RM SY_MOE_HT_SCALES_ROW_MAJOR /* the cases' flags */
/* clang-format off */
static const ht_case_t cases[] = {
    /* name, experts, top_k, hidden, max_tokens, wire, alignment, num_sms, masked, exact, int64 ids, route, specials,
     * salt, flags, the calls' SM budget */
    {"bf16 random",            48, 4, 256,  40, SY_MOE_WIRE_BF16,      1,   4,  0, 1, 0, WL_ROUTE_RANDOM,     0, 1, 0, 0},
    {"fp8 align 16",           48, 8, 512,  33, SY_MOE_WIRE_FP8,       16,  16, 0, 0, 1, WL_ROUTE_RANDOM,     0, 2, 0, 0},
    {"ue8m0 align 128 masked", 24, 4, 256,  20, SY_MOE_WIRE_FP8_UE8M0, 128, 2,  1, 0, 0, WL_ROUTE_SAME_RANK,  0, 3, 0, 0},
    {"given fp8 one expert",   24, 2, 384,  24, SY_MOE_WIRE_FP8_GIVEN, 1,   6,  0, 1, 0, WL_ROUTE_ONE_EXPERT, 0, 4, 0, 0},
    {"bf16 empty rank masked", 96, 8, 128,  64, SY_MOE_WIRE_BF16,      16,  8,  1, 1, 1, WL_ROUTE_EMPTY_RANK, 0, 5, 0, 0},
    {"fp8 none",               24, 4, 128,  16, SY_MOE_WIRE_FP8,       1,   4,  0, 0, 0, WL_ROUTE_NONE,       0, 6, 0, 0},
    {"fp8 specials",           48, 6, 256,  30, SY_MOE_WIRE_FP8,       1,   16, 0, 1, 0, WL_ROUTE_RANDOM,     1, 7, 0, 0},
    {"bf16 hidden 7168",       24, 4, 7168, 16, SY_MOE_WIRE_BF16,      128, 16, 0, 0, 0, WL_ROUTE_FULL,       0, 8, 0, 0},
    {"fp8 hidden 7168 top-1",  16, 1, 7168, 32, SY_MOE_WIRE_FP8,       1,   8,  0, 1, 1, WL_ROUTE_RANDOM,     0, 9, 0, 0},
    {"bf16 300 tokens",        256, 8, 256, 300, SY_MOE_WIRE_BF16,     16,  16, 0, 0, 0, WL_ROUTE_RANDOM,     0, 10, 0, 0},
    /* 65 scale groups: the receivers' scales past the 64 they load with a message's header */
    {"ue8m0 hidden 8320",      16, 4, 8320, 12, SY_MOE_WIRE_FP8_UE8M0, 16,  4,  0, 1, 0, WL_ROUTE_RANDOM,     0, 11, 0, 0},
    /* recv.scales row-major (SY_MOE_HT_SCALES_ROW_MAJOR) */
    {"fp8 row-major scales",   48, 8, 512,  33, SY_MOE_WIRE_FP8,       16,  16, 0, 0, 1, WL_ROUTE_RANDOM,    0, 12, RM, 0},
    {"given row-major masked", 24, 2, 384,  24, SY_MOE_WIRE_FP8_GIVEN, 1,   6,  1, 1, 0, WL_ROUTE_ONE_EXPERT,0, 13, RM, 0},
    {"ue8m0 8320 row-major",   16, 4, 8320, 12, SY_MOE_WIRE_FP8_UE8M0, 16,  4,  0, 1, 0, WL_ROUTE_RANDOM,    0, 14, RM, 0},
    /* top_k 31: the owners' pipe table full with the add's row (sy_moe_ht_combine_add: top_k + 1 = 32 entries) */
    {"fp8 top-31",             96, 31, 256, 24, SY_MOE_WIRE_FP8,       16,  8,  0, 1, 0, WL_ROUTE_RANDOM,    0, 15, 0, 0},
    {"bf16 top-31 same rank",  96, 31, 512, 20, SY_MOE_WIRE_BF16,      1,   4,  1, 0, 1, WL_ROUTE_SAME_RANK, 0, 16, 0, 0},
    /* the calls' SM budgets below config.num_sms (sy_moe_ht_set_num_sms): blocks serving several channels in turn,
     * the dispatch and the combines of one layout on different budgets */
    {"bf16 300 tokens budgets",256, 8, 256, 300, SY_MOE_WIRE_BF16,     16,  16, 0, 0, 0, WL_ROUTE_RANDOM,    0, 17, 0, 4},
    {"fp8 budgets 6 of 16",    48, 8, 512,  33, SY_MOE_WIRE_FP8,       16,  16, 0, 1, 1, WL_ROUTE_RANDOM,    0, 18, 0, 6},
    {"ue8m0 masked budgets",   24, 4, 256,  20, SY_MOE_WIRE_FP8_UE8M0, 128, 12, 1, 0, 0, WL_ROUTE_SAME_RANK, 0, 19, 0, 5},
    /* ~95 tokens a channel: from world 2 the rings (64 slots) fill while the blocks serve several channels in turn;
     * 32 SMs: a channel's roles on two blocks from world 3 (on one block's warps at world 2, where gpu-check's
     * SY_HT_ROLES=0 pass runs them on two), 16: on one block's warps (from world 2) */
    {"bf16 1500 budgets of 32",48, 8, 128, 1500, SY_MOE_WIRE_BF16,     16,  32, 0, 0, 0, WL_ROUTE_RANDOM,    0, 20, 0, 6},
    {"fp8 1500 budgets of 16", 48, 8, 128, 1500, SY_MOE_WIRE_FP8,      1,   16, 0, 1, 0, WL_ROUTE_RANDOM,    0, 21, 0, 4},
    /* 8,208 experts: the layout's count tallies past its shared memory (E + W x channels > 8,192 words) in global
     * memory; divisible by 1 to 4 ranks */
    {"bf16 8208 experts",      8208, 4, 128, 40, SY_MOE_WIRE_BF16,     1,   4,  0, 1, 0, WL_ROUTE_RANDOM,    0, 22, 0, 0},
    /* one SM: the layout kernel a single block (its exchange after prefix and pos, on the same block) */
    {"fp8 one SM",             48, 4, 256,  40, SY_MOE_WIRE_FP8,       16,  1,  0, 1, 0, WL_ROUTE_RANDOM,    0, 23, 0, 0},
    /* given FP8 on budgets: copied before a pulled dispatch like BF16, so with SY_HT_PULL_SMS between 4 and 12
     * (gpu-check's .pullsms) its dispatches pull and push in turn */
    {"given fp8 budgets",      48, 8, 384,  60, SY_MOE_WIRE_FP8_GIVEN, 16,  12, 0, 0, 0, WL_ROUTE_RANDOM,    0, 24, 0, 4},
};
/* clang-format on */

/* ROUNDS rounds enqueued back to back, then (worst-case cases) REPLAYS replays of a graph captured from round 0,
 * each over new inputs: round ROUNDS + i's routing and payload for round 0's num_tokens */
enum { ROUNDS = 3, REPLAYS = 2 };

/* The most local experts of a case (the "8208 experts" case at world 1). */
enum { MAX_L = 8208 };

/* One rank's outputs of one round (host memory). */
typedef struct {
  uint8_t *tokens, *scales, *src, *weights, *out, *values, *out2, *out3, *grad_rows, *grad_w;
  int32_t offsets[MAX_L + 1], counts[MAX_L], host[2 * MAX_L + 1];
} ht_result_t;

typedef struct {
  const ht_case_t *c;
  int world, rows, stride, groups;
  size_t row_bytes;
  wl_moe_t m;
  ht_result_t *want; /* [ROUNDS + REPLAYS][world] from the oracle */
} ht_run_t;

static sy_moe_ht_config_t config_of(const ht_case_t *c, int T) {
  sy_moe_ht_config_t cfg = SY_MOE_HT_CONFIG_INIT;
  cfg.max_tokens = T, cfg.hidden = c->H, cfg.top_k = c->K, cfg.num_experts = c->E, cfg.wire = c->wire;
  cfg.expert_alignment = c->align, cfg.num_sms = c->sms, cfg.flags = c->flags;
  return cfg;
}

/* The round's inputs of `rank` (host memory): ids (int32 or int64), tokens (bf16, or E4M3 + scales for the
 * given wire), weights, the combine's rows_in and row_values for `rows` rows. */
typedef struct {
  int n;
  void *ids;
  uint8_t *tokens;
  float *scales, *weights, *row_values;
  uint16_t *rows_in, *grad_out;
} ht_inputs_t;

/* Round `round`'s inputs; rounds past ROUNDS (the graph's replays) keep round 0's num_tokens. */
static void make_inputs(const ht_run_t *R, int round, int rank, ht_inputs_t *in) {
  const ht_case_t *c = R->c;
  const int T = c->T, K = c->K, H = c->H;
  in->n = wl_moe_num_tokens(&R->m, round < ROUNDS ? round : 0, rank);
  int64_t *ids = (int64_t *)calloc((size_t)T * K + 1, 8);
  wl_moe_ids(&R->m, round, rank, in->n, ids);
  in->ids = calloc((size_t)T * K + 1, c->id64 ? 8 : 4);
  for (int i = 0; i < in->n * K; i++) {
    if (c->id64) ((int64_t *)in->ids)[i] = ids[i];
    else ((int32_t *)in->ids)[i] = (int32_t)ids[i];
  }
  free(ids);
  uint16_t *bf = (uint16_t *)calloc((size_t)T * H + 1, 2);
  wl_moe_tokens(&R->m, round, rank, in->n, bf);
  in->scales = (float *)calloc((size_t)T * (H / 128 + 1), 4);
  if (c->wire == SY_MOE_WIRE_FP8_GIVEN) { /* E4M3 bytes and scales drawn from the key: any bits travel */
    in->tokens = (uint8_t *)calloc((size_t)T * H + 1, 1);
    uint64_t st = wl_moe_key(R->m.seed, R->m.salt, 9, (uint64_t)round, (uint64_t)rank);
    for (size_t i = 0; i < (size_t)in->n * H; i++) in->tokens[i] = (uint8_t)wl_rand(&st);
    for (size_t i = 0; i < (size_t)in->n * (H / 128); i++) in->scales[i] = (float)(wl_rand(&st) % 1000) / 64.0f;
    free(bf);
  } else {
    in->tokens = (uint8_t *)bf;
  }
  in->weights = (float *)calloc((size_t)T * K + 1, 4);
  wl_moe_weights(&R->m, round, rank, in->n, 0, in->weights);
  in->rows_in = (uint16_t *)calloc((size_t)R->rows * H + 1, 2);
  for (int r = 0; r < R->rows; r++) wl_moe_expert_row(&R->m, round, rank, 0, r, in->rows_in + (size_t)r * H);
  in->grad_out = (uint16_t *)calloc((size_t)T * H + 1, 2);
  wl_moe_tokens(&R->m, round + 100, rank, in->n, in->grad_out);
  in->row_values = (float *)calloc((size_t)R->rows + 1, 4);
  uint64_t st = wl_moe_key(R->m.seed, R->m.salt, 10, (uint64_t)round, (uint64_t)rank);
  for (int r = 0; r < R->rows; r++) in->row_values[r] = (float)(int64_t)(wl_rand(&st) % 2001 - 1000) / 8.0f;
}

static void free_inputs(ht_inputs_t *in) {
  free(in->ids), free(in->tokens), free(in->scales), free(in->weights), free(in->rows_in), free(in->row_values);
  free(in->grad_out);
}

/* Device (or, for the oracle, host) buffers of one rank. */
typedef struct {
  void *ids, *tokens, *handle, *out, *rows_in, *grad_out, *out2, *out3, *grad_rows;
  float *scales, *weights, *row_values, *values, *grad_w;
  sy_moe_ht_recv_t recv;
  size_t handle_bytes;
} ht_bufs_t;

static void *dalloc(int host, size_t bytes) {
  void *p = NULL;
  if (host) p = malloc(bytes ? bytes : 1);
  else GT_CUDA(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}

static void put(int host, void *dst, const void *src, size_t bytes) {
  if (host) memcpy(dst, src, bytes);
  else GT_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

static void get(int host, void *dst, const void *src, size_t bytes) {
  if (host) memcpy(dst, src, bytes);
  else GT_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

static void fill_byte(int host, void *p, int v, size_t bytes) {
  if (host) memset(p, v, bytes);
  else GT_CUDA(cudaMemset(p, v, bytes));
}

static void bufs_alloc(const ht_run_t *R, int host, size_t handle_bytes, ht_bufs_t *b) {
  const ht_case_t *c = R->c;
  const size_t T = (size_t)c->T, K = (size_t)c->K, H = (size_t)c->H, L = (size_t)(c->E / R->world);
  memset(b, 0, sizeof *b);
  b->ids = dalloc(host, T * K * 8);
  b->tokens = dalloc(host, T * H * 2);
  b->scales = (float *)dalloc(host, T * (H / 128 + 1) * 4);
  b->weights = (float *)dalloc(host, T * K * 4);
  b->handle = dalloc(host, handle_bytes);
  b->handle_bytes = handle_bytes;
  b->out = dalloc(host, T * H * 2);
  b->values = (float *)dalloc(host, T * K * 4);
  b->rows_in = dalloc(host, (size_t)R->rows * H * 2);
  b->row_values = (float *)dalloc(host, (size_t)R->rows * 4);
  b->grad_out = dalloc(host, T * H * 2);
  b->out2 = dalloc(host, T * H * 2);
  b->out3 = dalloc(host, T * H * 2);
  b->grad_rows = dalloc(host, (size_t)R->rows * H * 2);
  b->grad_w = (float *)dalloc(host, (size_t)R->rows * 4);
  b->recv.tokens = dalloc(host, (size_t)R->rows * R->row_bytes);
  b->recv.scales = c->wire == SY_MOE_WIRE_BF16 ? NULL : (float *)dalloc(host, (size_t)R->rows * R->groups * 4);
  b->recv.src = (int32_t *)dalloc(host, (size_t)R->rows * 8);
  b->recv.weights = (float *)dalloc(host, (size_t)R->rows * 4);
  b->recv.expert_offsets = (int32_t *)dalloc(host, (L + 1) * 4);
  b->recv.expert_counts = (int32_t *)dalloc(host, L * 4);
  b->recv.rows = R->rows;
  b->recv.expert_stride = R->stride;
}

static void bufs_free(int host, ht_bufs_t *b) {
  void *all[] = {b->grad_out,
                 b->out2,
                 b->out3,
                 b->grad_rows,
                 b->grad_w,
                 b->ids,
                 b->tokens,
                 b->scales,
                 b->weights,
                 b->handle,
                 b->out,
                 b->values,
                 b->rows_in,
                 b->row_values,
                 b->recv.tokens,
                 b->recv.scales,
                 b->recv.src,
                 b->recv.weights,
                 b->recv.expert_offsets,
                 b->recv.expert_counts};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) {
      if (host) free(all[i]);
      else cudaFree(all[i]);
    }
}

/* The round's inputs into the buffers and the outputs poisoned. */
static void load_round(const ht_run_t *R, int host, const ht_inputs_t *in, ht_bufs_t *b) {
  const ht_case_t *c = R->c;
  const size_t T = (size_t)c->T, K = (size_t)c->K, H = (size_t)c->H, L = (size_t)(c->E / R->world);
  put(host, b->ids, in->ids, T * K * (c->id64 ? 8 : 4));
  put(host, b->tokens, in->tokens, T * H * (c->wire == SY_MOE_WIRE_FP8_GIVEN ? 1 : 2));
  put(host, b->scales, in->scales, T * (H / 128) * 4);
  put(host, b->weights, in->weights, T * K * 4);
  put(host, b->rows_in, in->rows_in, (size_t)R->rows * H * 2);
  put(host, b->row_values, in->row_values, (size_t)R->rows * 4);
  put(host, b->grad_out, in->grad_out, T * H * 2);
  fill_byte(host, b->out2, 0xA5, T * H * 2);
  /* what sy_moe_ht_combine_add adds into: grad_out with a -0 in each row (kept bit for bit only where a token with
   * no expert's row is neither read nor written) */
  uint16_t *acc = (uint16_t *)malloc(T * H * 2 + 2);
  memcpy(acc, in->grad_out, T * H * 2);
  for (size_t t = 0; t < T; t++) acc[t * H] = 0x8000;
  put(host, b->out3, acc, T * H * 2);
  free(acc);
  fill_byte(host, b->grad_rows, 0xA5, (size_t)R->rows * H * 2);
  fill_byte(host, b->grad_w, 0xA5, (size_t)R->rows * 4);
  fill_byte(host, b->recv.tokens, 0xA5, (size_t)R->rows * R->row_bytes);
  if (b->recv.scales) fill_byte(host, b->recv.scales, 0xA5, (size_t)R->rows * R->groups * 4);
  fill_byte(host, b->recv.src, 0xA5, (size_t)R->rows * 8);
  fill_byte(host, b->recv.weights, 0xA5, (size_t)R->rows * 4);
  fill_byte(host, b->recv.expert_offsets, 0xA5, (L + 1) * 4);
  fill_byte(host, b->recv.expert_counts, 0xA5, L * 4);
  fill_byte(host, b->out, 0xA5, T * H * 2);
  fill_byte(host, b->values, 0xA5, T * K * 4);
  /* cudaMemcpy and cudaMemset run on the legacy stream, which the test's non-blocking stream does not wait for */
  if (!host) GT_CUDA(cudaDeviceSynchronize());
}

/* layout, dispatch, combine of one round on `stream` (NULL on the host backend). */
/* SY_TEST_TRACE=1: every call synchronised and named on stderr (where a hang is) */
static int trace_on(void) {
  static int on = -1;
  if (on < 0) on = getenv("SY_TEST_TRACE") && atoi(getenv("SY_TEST_TRACE"));
  return on;
}

static void step(const char *what, cudaStream_t stream) {
  if (!trace_on()) return;
  if (stream) GT_CUDA(cudaStreamSynchronize(stream));
  fprintf(stderr, "[test rank %d] %.3f s: %s done\n", gt_rank, gt_now_s(), what);
}

static void run_round(const ht_run_t *R, sy_moe_ht_t moe, int n, ht_bufs_t *b, int32_t *host_counts,
                      cudaStream_t stream, int round) {
  const ht_case_t *c = R->c;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (stream) cudaStreamIsCapturing(stream, &cs);
  const cudaStream_t sync = cs == cudaStreamCaptureStatusNone ? stream : NULL;
  const int budget = c->call_sms; /* the calls' SM budgets, when the case varies them */
  /* the dispatch on the case's budget in even rounds, on config.num_sms in odd ones: with SY_HT_PULL_SMS between the
   * two (gpu-check's .pullsms) one object's dispatches pull and push in turn */
  if (budget) GT_OK(sy_moe_ht_set_num_sms(moe, round % 2 ? 0 : budget));
  GT_OK(sy_moe_ht_layout(moe, n ? b->ids : NULL, c->id64 ? SY_INDEX_INT64 : SY_INDEX_INT32, n, b->handle, host_counts,
                         stream));
  step("layout", sync);
  GT_OK(sy_moe_ht_dispatch(moe, b->handle, n, n ? b->tokens : NULL, c->wire == SY_MOE_WIRE_FP8_GIVEN ? b->scales : NULL,
                           n ? b->weights : NULL, &b->recv, stream));
  step("dispatch", sync);
  if (budget) GT_OK(sy_moe_ht_set_num_sms(moe, 0)); /* config.num_sms */
  GT_OK(sy_moe_ht_combine(moe, b->handle, n, b->rows_in, &b->recv, b->recv.weights, b->row_values, b->out, b->values,
                          stream));
  step("combine", sync);
  /* the dispatch's backward (rows_in standing for the rows' gradient) and the combine's */
  if (budget) GT_OK(sy_moe_ht_set_num_sms(moe, budget));
  GT_OK(sy_moe_ht_combine(moe, b->handle, n, b->rows_in, &b->recv, NULL, NULL, b->out2, NULL, stream));
  if (budget) GT_OK(sy_moe_ht_set_num_sms(moe, 2));
  GT_OK(sy_moe_ht_combine_add(moe, b->handle, n, b->rows_in, &b->recv, b->recv.weights, NULL, b->out3, NULL, stream));
  if (budget) GT_OK(sy_moe_ht_set_num_sms(moe, budget));
  GT_OK(sy_moe_ht_combine_backward(moe, b->handle, n, n ? b->grad_out : NULL, &b->recv, b->recv.weights, b->rows_in,
                                   b->grad_rows, b->grad_w, stream));
  if (budget) GT_OK(sy_moe_ht_set_num_sms(moe, 0));
  step("combine_backward", sync);
}

static void take(const ht_run_t *R, int host, const ht_bufs_t *b, ht_result_t *res) {
  const ht_case_t *c = R->c;
  const size_t T = (size_t)c->T, K = (size_t)c->K, H = (size_t)c->H, L = (size_t)(c->E / R->world);
  res->tokens = (uint8_t *)malloc((size_t)R->rows * R->row_bytes + 1);
  res->scales = (uint8_t *)malloc((size_t)R->rows * R->groups * 4 + 1);
  res->src = (uint8_t *)malloc((size_t)R->rows * 8 + 1);
  res->weights = (uint8_t *)malloc((size_t)R->rows * 4 + 1);
  res->out = (uint8_t *)malloc(T * H * 2);
  res->values = (uint8_t *)malloc(T * K * 4);
  res->out2 = (uint8_t *)malloc(T * H * 2);
  res->out3 = (uint8_t *)malloc(T * H * 2);
  res->grad_rows = (uint8_t *)malloc((size_t)R->rows * H * 2 + 1);
  res->grad_w = (uint8_t *)malloc((size_t)R->rows * 4 + 1);
  get(host, res->out2, b->out2, T * H * 2);
  get(host, res->out3, b->out3, T * H * 2);
  get(host, res->grad_rows, b->grad_rows, (size_t)R->rows * H * 2);
  get(host, res->grad_w, b->grad_w, (size_t)R->rows * 4);
  get(host, res->tokens, b->recv.tokens, (size_t)R->rows * R->row_bytes);
  if (b->recv.scales) get(host, res->scales, b->recv.scales, (size_t)R->rows * R->groups * 4);
  get(host, res->src, b->recv.src, (size_t)R->rows * 8);
  get(host, res->weights, b->recv.weights, (size_t)R->rows * 4);
  get(host, res->offsets, b->recv.expert_offsets, (L + 1) * 4);
  get(host, res->counts, b->recv.expert_counts, L * 4);
  get(host, res->out, b->out, T * H * 2);
  get(host, res->values, b->values, T * K * 4);
}

static void result_free(ht_result_t *r) {
  free(r->tokens), free(r->scales), free(r->src), free(r->weights), free(r->out), free(r->values);
  free(r->out2), free(r->out3), free(r->grad_rows), free(r->grad_w);
}

static void oracle(int rank, sy_comm_t comm, void *arg) {
  ht_run_t *R = (ht_run_t *)arg;
  const sy_moe_ht_config_t cfg = config_of(R->c, R->c->T);
  sy_moe_ht_t moe = NULL;
  GT_OK(sy_moe_ht_create(comm, &cfg, &moe));
  sy_moe_ht_sizes_t sz = SY_MOE_HT_SIZES_INIT;
  GT_OK(sy_moe_ht_sizes(moe, &sz));
  ht_bufs_t b;
  bufs_alloc(R, 1, sz.handle_bytes, &b);
  for (int round = 0; round < ROUNDS + (R->c->exact ? 0 : REPLAYS); round++) {
    ht_inputs_t in;
    make_inputs(R, round, rank, &in);
    load_round(R, 1, &in, &b);
    ht_result_t *res = &R->want[round * R->world + rank];
    run_round(R, moe, in.n, &b, R->c->exact ? res->host : NULL, NULL, round);
    take(R, 1, &b, res);
    free_inputs(&in);
  }
  bufs_free(1, &b);
  GT_OK(sy_moe_ht_destroy(moe));
}

static size_t compare(const char *what, const ht_case_t *c, int round, const void *got, const void *want, size_t n) {
  char label[160];
  snprintf(label, sizeof label, "%s, round %d: %s", c->name, round, what);
  return gt_compare(label, (const uint8_t *)got, (const uint8_t *)want, n);
}

/* Every output of one round against the oracle's; returns the wrong bytes. */
static size_t compare_all(const ht_run_t *R, int round, const ht_result_t *got, const ht_result_t *w,
                          const int32_t *host) {
  const ht_case_t *c = R->c;
  const int L = c->E / R->world;
  size_t wrong = 0;
  wrong += compare("rows", c, round, got->tokens, w->tokens, (size_t)R->rows * R->row_bytes);
  if (c->wire != SY_MOE_WIRE_BF16)
    wrong += compare("scales", c, round, got->scales, w->scales, (size_t)R->rows * R->groups * 4);
  wrong += compare("src", c, round, got->src, w->src, (size_t)R->rows * 8);
  wrong += compare("weights", c, round, got->weights, w->weights, (size_t)R->rows * 4);
  wrong += compare("offsets", c, round, got->offsets, w->offsets, (size_t)(L + 1) * 4);
  wrong += compare("counts", c, round, got->counts, w->counts, (size_t)L * 4);
  wrong += compare("combine out", c, round, got->out, w->out, (size_t)c->T * c->H * 2);
  wrong += compare("token values", c, round, got->values, w->values, (size_t)c->T * c->K * 4);
  wrong += compare("dispatch backward", c, round, got->out2, w->out2, (size_t)c->T * c->H * 2);
  wrong += compare("combine_add", c, round, got->out3, w->out3, (size_t)c->T * c->H * 2);
  wrong += compare("combine backward rows", c, round, got->grad_rows, w->grad_rows, (size_t)R->rows * c->H * 2);
  wrong += compare("combine backward weights", c, round, got->grad_w, w->grad_w, (size_t)R->rows * 4);
  if (host) wrong += compare("host counts", c, round, host, w->host, (size_t)(2 * L + 1) * 4);
  return wrong;
}

/* arena: 1, the receive buffers from the object's receive arena (config.recv_arena_bytes): from world 2 the dispatch
 * then takes each arriving token's first row in place (the senders' stores or puts); 2, the object has the arena but
 * only some ranks take their recv from it (rank + the case's salt even), the others from a pool: senders then store
 * in place to some receivers and into the rings of the others in one call. */
static void run_case(sy_comm_t comm, int rank, int world, const ht_case_t *c, uint64_t seed, cudaStream_t stream,
                     int arena) {
  if (c->E % world) {
    if (rank == 0) printf("  %-26s skipped: %d experts do not divide among %d ranks\n", c->name, c->E, world);
    return;
  }
  if (c->E / world > MAX_L) { /* the results' arrays (ht_result_t) */
    GT_FAIL("%s: %d local experts, more than the test's MAX_L %d", c->name, c->E / world, MAX_L);
    return;
  }
  ht_run_t R;
  memset(&R, 0, sizeof R);
  R.c = c;
  R.world = world;
  R.groups = c->H / 128;
  R.row_bytes = c->wire == SY_MOE_WIRE_BF16 ? (size_t)c->H * 2 : (size_t)c->H;
  R.m = (wl_moe_t){.seed = seed,
                   .salt = c->salt,
                   .world = world,
                   .num_experts = c->E,
                   .top_k = c->K,
                   .hidden = c->H,
                   .max_tokens = c->T,
                   .route = c->route,
                   .specials = c->specials,
                   .draw = WL_DRAW_GPU};
  sy_moe_ht_config_t cfg = config_of(c, c->T);
  sy_moe_ht_t moe = NULL;
  GT_OK(sy_moe_ht_create(comm, &cfg, &moe));
  sy_moe_ht_sizes_t sz = SY_MOE_HT_SIZES_INIT;
  GT_OK(sy_moe_ht_sizes(moe, &sz));
  const int L = c->E / world;
  R.stride = c->masked ? world * c->T : 0;
  R.rows = c->masked ? L * R.stride : sz.max_rows;
  if (arena) { /* the same object's shape with an arena for one recv of R.rows rows */
    GT_OK(sy_moe_ht_destroy(moe));
    GT_OK(sy_moe_ht_recv_bytes(comm, &cfg, R.rows, &cfg.recv_arena_bytes));
    GT_OK(sy_moe_ht_create(comm, &cfg, &moe));
  }
  R.want = (ht_result_t *)calloc((size_t)(ROUNDS + REPLAYS) * world, sizeof(ht_result_t));
  if (trace_on()) fprintf(stderr, "[test rank %d] %.3f s: %s: oracle\n", rank, gt_now_s(), c->name);
  gt_run_host(world, oracle, &R);
  if (trace_on()) fprintf(stderr, "[test rank %d] %.3f s: %s: oracle finished\n", rank, gt_now_s(), c->name);
  ht_bufs_t b;
  bufs_alloc(&R, 0, sz.handle_bytes, &b);
  /* the worst-case and masked cases take their receive buffers from a pool (sy_moe_ht_recv_alloc) */
  sy_pool_t pool = NULL;
  const int in_arena = arena == 1 || (arena == 2 && (rank + (int)c->salt) % 2 == 0);
  if (!c->exact || arena) {
    void *mine[] = {b.recv.tokens,  b.recv.scales,         b.recv.src,
                    b.recv.weights, b.recv.expert_offsets, b.recv.expert_counts};
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
      if (mine[i]) GT_CUDA(cudaFree(mine[i]));
    if (!in_arena) GT_OK(sy_pool_create(comm, NULL, &pool));
    GT_OK(sy_moe_ht_recv_alloc(moe, pool, R.rows, R.stride, &b.recv, stream));
    GT_CUDA(cudaStreamSynchronize(stream));
  }
  size_t wrong = 0;
  for (int round = 0; round < ROUNDS; round++) {
    ht_inputs_t in;
    make_inputs(&R, round, rank, &in);
    load_round(&R, 0, &in, &b);
    int32_t host[2 * MAX_L + 1];
    run_round(&R, moe, in.n, &b, c->exact ? host : NULL, stream, round);
    GT_CUDA(cudaStreamSynchronize(stream));
    ht_result_t got;
    memset(&got, 0, sizeof got);
    take(&R, 0, &b, &got);
    wrong += compare_all(&R, round, &got, &R.want[round * world + rank], c->exact ? host : NULL);
    result_free(&got);
    free_inputs(&in);
  }
  /* a CUDA graph of the worst-case round, replayed over new inputs written into the same buffers */
  if (!c->exact) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ht_inputs_t in;
    make_inputs(&R, 0, rank, &in);
    const int n = in.n;
    GT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    run_round(&R, moe, n, &b, NULL, stream, 0);
    GT_CUDA(cudaStreamEndCapture(stream, &graph));
    GT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    free_inputs(&in);
    for (int replay = 0; replay < REPLAYS; replay++) {
      const int round = ROUNDS + replay; /* new routing and payload, round 0's num_tokens */
      make_inputs(&R, round, rank, &in);
      load_round(&R, 0, &in, &b);
      GT_CUDA(cudaGraphLaunch(exec, stream));
      GT_CUDA(cudaStreamSynchronize(stream));
      ht_result_t got;
      memset(&got, 0, sizeof got);
      take(&R, 0, &b, &got);
      wrong += compare_all(&R, round, &got, &R.want[round * world + rank], NULL);
      result_free(&got);
      free_inputs(&in);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  sy_status_t async = SY_SUCCESS;
  char detail[256] = "";
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  if (async != SY_SUCCESS) GT_FAIL("%s: asynchronous error %s: %s", c->name, sy_status_name(async), detail);
  if (rank == 0)
    printf("  %-26s %s (%d rows max, %d SMs%s)\n", c->name, wrong ? "WRONG" : "ok", R.rows, c->sms,
           arena == 1   ? ", recv in the arena"
           : arena == 2 ? ", recv in the arena on some ranks"
                        : "");
  fflush(stdout);
  if (pool || arena) {
    GT_OK(sy_moe_ht_recv_free(moe, pool, &b.recv, stream)); /* zeroes b.recv: bufs_free skips it */
    GT_CUDA(cudaStreamSynchronize(stream));
    if (pool) GT_OK(sy_pool_destroy(pool));
  }
  bufs_free(0, &b);
  for (int i = 0; i < (ROUNDS + REPLAYS) * world; i++) result_free(&R.want[i]);
  free(R.want);
  GT_OK(sy_moe_ht_destroy(moe));
}

/* A split of a block's warps between a channel's two roles that leaves a role fewer than 2 warps (SY_HT_SEND_WARPS,
 * SY_HT_EXPERT_WARPS with SY_HT_ROLES=1) is refused at create on every rank, SY_ERR_INVALID_ARG, the communicator
 * still usable (the cases after it create objects). Skipped where the caller set any of the three. */
static void bad_role_warps(sy_comm_t comm, int rank) {
  if (getenv("SY_HT_ROLES") || getenv("SY_HT_SEND_WARPS") || getenv("SY_HT_EXPERT_WARPS")) return;
  const sy_moe_ht_config_t cfg = config_of(&cases[0], 64);
  const char *bad[][2] = {{"SY_HT_SEND_WARPS", "15"}, {"SY_HT_SEND_WARPS", "1"}, {"SY_HT_EXPERT_WARPS", "0"}};
  setenv("SY_HT_ROLES", "1", 1);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv(bad[i][0], bad[i][1], 1);
    sy_moe_ht_t moe = NULL;
    const sy_status_t st = sy_moe_ht_create(comm, &cfg, &moe);
    if (st != SY_ERR_INVALID_ARG || moe != NULL)
      GT_FAIL("sy_moe_ht_create with %s=%s: %s (want SY_ERR_INVALID_ARG and no object)", bad[i][0], bad[i][1],
              sy_status_name(st));
    unsetenv(bad[i][0]);
  }
  unsetenv("SY_HT_ROLES");
  if (rank == 0) printf("  %-26s ok\n", "bad role warps refused");
}

/* config.num_sms past what the GPU holds at once (1,024; an H200 has 132 SMs): from world 2 every create fails with
 * SY_ERR_INVALID_ARG and no object (a call's blocks wait on the peers' blocks, so its grid must be resident
 * together); at world 1, where no block waits on another, the object is made. */
static void too_many_sms(sy_comm_t comm, int rank, int world) {
  sy_moe_ht_config_t cfg = config_of(&cases[0], 64);
  cfg.num_sms = 1024;
  sy_moe_ht_t moe = NULL;
  const sy_status_t st = sy_moe_ht_create(comm, &cfg, &moe);
  if (world > 1 && (st != SY_ERR_INVALID_ARG || moe != NULL))
    GT_FAIL("sy_moe_ht_create with num_sms 1024 at world %d, rank %d: %s (want SY_ERR_INVALID_ARG and no object)",
            world, rank, sy_status_name(st));
  if (world == 1 && st != SY_SUCCESS) GT_FAIL("sy_moe_ht_create with num_sms 1024 at world 1: %s", sy_status_name(st));
  if (moe) GT_OK(sy_moe_ht_destroy(moe));
  if (rank == 0) printf("  %-26s ok\n", world > 1 ? "num_sms past the GPU refused" : "num_sms 1024 at world 1");
}

/* Ranks that resolve a variable that sizes the workspace differently (SY_HT_ROLES: rank 0 by warps, the others by
 * blocks; SY_HT_PULL: rank 0 pulls, the others push) would size different workspaces, and ranks that resolve
 * SY_HT_PULL_SMS differently would take different ways on some calls: the create fails on every rank with
 * SY_ERR_MISMATCH, nothing created, the communicator still usable (the cases after it create objects). Skipped
 * at world 1 and where the caller set the variable. */
static void disagreeing(sy_comm_t comm, int rank, int world, const char *var, const char *what) {
  if (world < 2 || getenv(var)) return;
  const sy_moe_ht_config_t cfg = config_of(&cases[0], 64);
  setenv(var, rank == 0 ? "1" : "0", 1);
  sy_moe_ht_t moe = NULL;
  const sy_status_t st = sy_moe_ht_create(comm, &cfg, &moe);
  if (st != SY_ERR_MISMATCH || moe != NULL)
    GT_FAIL("sy_moe_ht_create with %s=%s on rank %d: %s (want SY_ERR_MISMATCH and no object)", var,
            rank == 0 ? "1" : "0", rank, sy_status_name(st));
  unsetenv(var);
  if (rank == 0) printf("  %-26s ok\n", what);
}

/* Bad expert ids on the cuda backend, on every rank (an error of one rank would leave the ranks' collective frees at
 * destroy unmatched), several a rank over 3,000 tokens (12,000 entries: every block of the layout's count takes
 * some): an even rank's token 1700 repeats its k = 0 expert at k = 2 and names expert E at k = 3, token 2900
 * repeats at k = 1; an odd rank's token 800 names E + 7 at k = 3, token 2500 names E at k = 0. The layout reports
 * SY_ERR_INVALID_ARG asynchronously, naming the first bad entry in (token, k) order, as the host backend's check does
 * — the token (peer), k (expected) and the id (saw) — whichever thread found it first; destroy still works. The
 * test's last step: the error stays with the communicator. */
static void bad_ids(sy_comm_t comm, int rank, cudaStream_t stream) {
  const int T = 3000;
  const sy_moe_ht_config_t cfg = config_of(&cases[0], T);
  const int K = cfg.top_k, E = cfg.num_experts;
  const size_t ids_bytes = (size_t)T * K * sizeof(int32_t);
  int32_t *ids = (int32_t *)malloc(ids_bytes);
  if (!ids) {
    GT_FAIL("bad ids: no host memory");
    return;
  }
  sy_moe_ht_t moe = NULL;
  GT_OK(sy_moe_ht_create(comm, &cfg, &moe));
  sy_moe_ht_sizes_t z = SY_MOE_HT_SIZES_INIT;
  GT_OK(sy_moe_ht_sizes(moe, &z));
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++) ids[t * K + k] = (t * 5 + k * 7) % E; /* distinct within a token: 7k mod E, E = 48 */
  int bad_t, bad_k;
  int64_t bad_id;
  if (rank % 2 == 0) {
    ids[2900 * K + 1] = ids[2900 * K];
    ids[1700 * K + 3] = E;
    ids[1700 * K + 2] = ids[1700 * K], bad_t = 1700, bad_k = 2, bad_id = ids[1700 * K];
  } else {
    ids[2500 * K] = E;
    ids[800 * K + 3] = E + 7, bad_t = 800, bad_k = 3, bad_id = E + 7;
  }
  void *dids = NULL, *handle = NULL;
  GT_CUDA(cudaMalloc(&dids, ids_bytes));
  GT_CUDA(cudaMalloc(&handle, z.handle_bytes));
  GT_CUDA(cudaMemcpy(dids, ids, ids_bytes, cudaMemcpyHostToDevice));
  GT_OK(sy_moe_ht_layout(moe, dids, SY_INDEX_INT32, T, handle, NULL, stream));
  GT_CUDA(cudaStreamSynchronize(stream));
  sy_status_t async = SY_SUCCESS;
  char detail[256] = "", want[96];
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  snprintf(want, sizeof want, "token %d: k %d, id %lld", bad_t, bad_k, (long long)bad_id);
  if (async != SY_ERR_INVALID_ARG || !strstr(detail, "moe_ht layout") || !strstr(detail, want))
    GT_FAIL("bad ids: rank %d: %s: '%s' (want SY_ERR_INVALID_ARG naming the layout and '%s')", rank,
            sy_status_name(async), detail, want);
  GT_OK(sy_moe_ht_destroy(moe));
  cudaFree(dids);
  cudaFree(handle);
  free(ids);
  if (rank == 0) printf("  %-26s ok (%s)\n", "first bad id reported", detail);
}

int main(void) {
  int rank, world;
  sy_comm_t comm = gt_init("test_gpu_moe_ht", &rank, &world);
  const char *env = getenv("SY_TEST_SEED");
  const uint64_t seed = env ? strtoull(env, NULL, 0) : 20261126u;
  if (rank == 0) printf("test_gpu_moe_ht: world %d, seed %llu\n", world, (unsigned long long)seed);
  cudaStream_t stream;
  GT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const char *only = getenv("SY_TEST_CASE"); /* one case by its index */
  const int num_cases = (int)(sizeof cases / sizeof cases[0]);
  if (only && (atoi(only) < 0 || atoi(only) >= num_cases)) /* a run of nothing must not pass */
    GT_FAIL("SY_TEST_CASE=%s: no such case (0 to %d)", only, num_cases - 1);
  else {
    if (!only) bad_role_warps(comm, rank);
    if (!only) disagreeing(comm, rank, world, "SY_HT_ROLES", "disagreeing roles refused");
    if (!only) disagreeing(comm, rank, world, "SY_HT_PULL", "disagreeing pull refused");
    if (!only && !getenv("SY_HT_PULL") && !getenv("SY_FORCE_PUT")) /* (compared only where auto pulls) */
      disagreeing(comm, rank, world, "SY_HT_PULL_SMS", "disagreeing pull SMs refused");
    if (!only) too_many_sms(comm, rank, world);
    for (int arena = 0; arena < 3; arena++) /* recv in device memory, in the receive arena, in it on some ranks */
      for (int i = 0; i < num_cases; i++)
        if (!only || atoi(only) == i) run_case(comm, rank, world, &cases[i], seed, stream, arena);
    if (!only) bad_ids(comm, rank, stream); /* last: it leaves the communicator in error */
  }
  cudaStreamDestroy(stream);
  GT_OK(sy_comm_destroy(comm));
  return gt_finish("test_gpu_moe_ht");
}
