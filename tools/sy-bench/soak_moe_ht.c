/*
 * soak_moe_ht.c — the soak's high-throughput MoE rounds (soak.h): one step per round (layout, dispatch, combine,
 * combine_backward, dispatch's backward: moe_ht_round) on one of six objects (the three wires the kernel quantises
 * or carries, each with two of the alignments 1, 16, 128 and SM budgets; same shape: max_tokens T, hidden H, top_k
 * K, L experts per rank), a routing of any of tests/workload's shapes with its token count per rank (0 included),
 * int32 or int64 ids, the layout exact (host_counts) or worst case, the combines weighted by recv.weights or not,
 * each rank's dispatch with or without weights. One round in sixteen destroys its object and creates it again
 * first. Expected: moe_ht_check (sy-bench moe-ht's, from switchyard.h's words) over every rank's inputs,
 * regenerated here; every output compared, padding rows left alone included. Where the backend has no
 * high-throughput mode (sy_moe_ht_create answers SY_ERR_UNSUPPORTED on every rank) the soak leaves it out and says
 * so; a call answering it on an object that exists fails the round.
 */
#include "moe_ht.h"
#include "soak.h"

enum { T = 48, H = 384, K = 4, OBJECTS = 6 };
static const sy_moe_wire_t wires[3] = {SY_MOE_WIRE_FP8, SY_MOE_WIRE_FP8_UE8M0, SY_MOE_WIRE_BF16};
static const int alignments[OBJECTS] = {1, 16, 128, 128, 1, 16};
static const int sms[OBJECTS] = {16, 3, 1, 5, 16, 8};

struct soak_moe_ht {
  int W, L, E, available;
  sy_moe_ht_config_t config[OBJECTS];
  sy_moe_ht_t moe[OBJECTS];
  moe_ht_bench_t b;      /* buffers for the largest object */
  sy_moe_ht_recv_t full; /* b.recv as allocated */
  int num_tokens[64];
  int32_t **ids;   /* [W] every rank's ids [T][K] */
  float **weights; /* [W] every rank's weights [T][K] */
  const int32_t **ids_in;
  const float **weights_in;
  uint16_t **tokens; /* [W] every rank's tokens [T][H] */
  int64_t *ids64;    /* [T][K] */
  uint8_t *typed;    /* this rank's ids in the round's type */
};

static int experts_per_rank(int world) { return world >= 4 ? 2 : (8 + world - 1) / world; }

static sy_moe_ht_config_t object_config(int world, int obj) {
  sy_moe_ht_config_t c = SY_MOE_HT_CONFIG_INIT;
  c.max_tokens = T, c.hidden = H, c.top_k = K, c.num_experts = world * experts_per_rank(world);
  c.wire = wires[obj % 3], c.expert_alignment = alignments[obj], c.num_sms = sms[obj];
  if (obj >= 3 && c.wire != SY_MOE_WIRE_BF16) c.flags = SY_MOE_HT_SCALES_ROW_MAJOR; /* the second round of wires */
  return c;
}

/* The rings are the backend's and bounded by the configuration (sy_moe_ht_workspace_size needs a communicator,
 * so it cannot be asked here): room for six objects of this small shape. */
size_t soak_moe_ht_heap(int world, sy_backend_t backend) { return (size_t)OBJECTS * (64u << 20); }

int soak_moe_ht_available(const soak_moe_ht_t *s) { return s && s->available; }

static const uint16_t *tokens_of(void *arg, int rank) { return ((soak_moe_ht_t *)arg)->tokens[rank]; }

int soak_moe_ht_open(bench_ctx_t *ctx, soak_moe_ht_t **out) {
  soak_moe_ht_t *s = calloc(1, sizeof *s);
  if (!s) return 1;
  *out = s;
  s->W = ctx->world, s->L = experts_per_rank(s->W), s->E = s->W * s->L;
  const size_t W = (size_t)s->W;
  if (s->W > 64) return 1;
  s->ids = calloc(W, sizeof *s->ids), s->weights = calloc(W, sizeof *s->weights);
  s->tokens = calloc(W, sizeof *s->tokens);
  s->ids_in = calloc(W, sizeof *s->ids_in), s->weights_in = calloc(W, sizeof *s->weights_in);
  s->ids64 = malloc((size_t)T * K * 8), s->typed = malloc((size_t)T * K * 8);
  if (!s->ids || !s->weights || !s->tokens || !s->ids_in || !s->weights_in || !s->ids64 || !s->typed) return 1;
  for (size_t r = 0; r < W; r++) {
    s->ids[r] = malloc((size_t)T * K * 4), s->weights[r] = malloc((size_t)T * K * 4);
    s->tokens[r] = malloc((size_t)T * H * 2);
    if (!s->ids[r] || !s->weights[r] || !s->tokens[r]) return 1;
  }
  sy_status_t st = SY_SUCCESS;
  for (int obj = 0; obj < OBJECTS && st == SY_SUCCESS; obj++) {
    s->config[obj] = object_config(s->W, obj);
    st = sy_moe_ht_create(ctx->comm, &s->config[obj], &s->moe[obj]);
  }
  const long long code = bench_allreduce_max(ctx, st == SY_SUCCESS ? 0 : st == SY_ERR_UNSUPPORTED ? 1 : 2);
  if (code) { /* an object missing on some rank: the collective destroys could not pair up, so none is made */
    memset(s->moe, 0, sizeof s->moe);
    if (code == 2 && st != SY_SUCCESS)
      fprintf(stderr, "sy-bench soak: rank %d: sy_moe_ht_create: %s (%s)\n", ctx->rank, sy_status_name(st),
              sy_status_string(st));
    return code == 2;
  }
  s->available = 1;
  /* the buffers: the largest of every object's needs */
  moe_ht_bench_t *b = &s->b;
  b->cfg = s->config[0];
  b->sizes = (sy_moe_ht_sizes_t)SY_MOE_HT_SIZES_INIT;
  for (int obj = 0; obj < OBJECTS; obj++) {
    sy_moe_ht_sizes_t z = SY_MOE_HT_SIZES_INIT;
    if (sy_moe_ht_sizes(s->moe[obj], &z) != SY_SUCCESS) return 1;
    b->sizes.local_experts = z.local_experts;
    if (z.max_rows > b->sizes.max_rows) b->sizes.max_rows = z.max_rows;
    if (z.handle_bytes > b->sizes.handle_bytes) b->sizes.handle_bytes = z.handle_bytes;
    if (z.row_bytes > b->sizes.row_bytes) b->sizes.row_bytes = z.row_bytes;
    if (z.scale_bytes > b->sizes.scale_bytes) b->sizes.scale_bytes = z.scale_bytes;
  }
  b->x = soak_alloc(ctx, (size_t)T * H * 2), b->ids = soak_alloc(ctx, (size_t)T * K * 8);
  b->weights = soak_alloc(ctx, (size_t)T * K * 4);
  if (!b->x || !b->ids || !b->weights || moe_ht_alloc_config(ctx, b)) return 1;
  s->full = b->recv;
  return 0;
}

void soak_moe_ht_close(bench_ctx_t *ctx, soak_moe_ht_t *s) {
  if (!s) return;
  for (int obj = 0; obj < OBJECTS; obj++)
    if (s->moe[obj]) sy_moe_ht_destroy(s->moe[obj]);
  s->b.recv = s->full;
  moe_ht_free_config(ctx, &s->b);
  soak_free(ctx, s->b.x), soak_free(ctx, s->b.ids), soak_free(ctx, s->b.weights);
  for (int r = 0; r < s->W && s->ids && s->weights && s->tokens; r++)
    free(s->ids[r]), free(s->weights[r]), free(s->tokens[r]);
  free(s->ids), free(s->weights), free(s->tokens), free(s->ids_in), free(s->weights_in), free(s->ids64);
  free(s->typed);
  free(s);
}

/* Every rank's inputs of the round (keyed by its seed), this rank's to the device. */
static int generate(bench_ctx_t *ctx, soak_moe_ht_t *s, const wl_moe_t *m, uint64_t seed, sy_index_type_t id_type) {
  const int me = ctx->rank;
  for (int r = 0; r < s->W; r++) {
    const int n = wl_moe_num_tokens(m, 0, r);
    s->num_tokens[r] = n;
    wl_moe_ids(m, 0, r, n, s->ids64);
    for (size_t i = 0; i < (size_t)n * K; i++) s->ids[r][i] = (int32_t)s->ids64[i];
    if (r == me)
      for (size_t i = 0; i < (size_t)n * K; i++) {
        if (id_type == SY_INDEX_INT64) ((int64_t *)s->typed)[i] = s->ids64[i];
        else ((int32_t *)s->typed)[i] = (int32_t)s->ids64[i];
      }
    wl_moe_tokens(m, 0, r, n, s->tokens[r]);
    wl_moe_weights(m, 0, r, n, 0, s->weights[r]);
    s->ids_in[r] = s->ids[r];
    s->weights_in[r] = soak_pick(seed, 100 + (uint64_t)r, 4) ? s->weights[r] : NULL; /* dispatched without: 1 in 4 */
  }
  const size_t n = (size_t)s->num_tokens[me], id_bytes = id_type == SY_INDEX_INT64 ? 8 : 4;
  return soak_to_dev(ctx, s->b.x, s->tokens[me], n * H * 2) || soak_to_dev(ctx, s->b.ids, s->typed, n * K * id_bytes) ||
         soak_to_dev(ctx, s->b.weights, s->weights[me], n * K * 4) || soak_sync(ctx);
}

int soak_moe_ht_round(bench_ctx_t *ctx, soak_moe_ht_t *s, uint64_t seed, soak_stats_t *st) {
  const int obj = (int)soak_pick(seed, 90, OBJECTS);
  if (soak_pick(seed, 91, 16) == 0) { /* collective: every rank draws the same */
    sy_moe_ht_destroy(s->moe[obj]);
    s->moe[obj] = NULL;
    if (sy_moe_ht_create(ctx->comm, &s->config[obj], &s->moe[obj]) != SY_SUCCESS) return 1;
    st->moe_ht_recreated++;
  }
  const sy_moe_ht_config_t *c = &s->config[obj];
  const wl_moe_t m = {.seed = 0x50a4ull,
                      .salt = seed,
                      .world = s->W,
                      .num_experts = s->E,
                      .top_k = K,
                      .hidden = H,
                      .max_tokens = T,
                      .route = (wl_route_t)soak_pick(seed, 92, 7),
                      .specials = 0, /* the expectation's sums assume finite tokens */
                      .draw = WL_DRAW_GPU};
  const sy_index_type_t id_type = soak_pick(seed, 93, 2) ? SY_INDEX_INT64 : SY_INDEX_INT32;
  const int exact = (int)soak_pick(seed, 94, 2), unit = (int)soak_pick(seed, 95, 2);
  if (generate(ctx, s, &m, seed, id_type)) return 1;
  moe_ht_bench_t *b = &s->b;
  b->moe = s->moe[obj], b->cfg = *c, b->id_type = id_type, b->counts_valid = 0, b->printed = &st->reported;
  b->sizes = (sy_moe_ht_sizes_t)SY_MOE_HT_SIZES_INIT;
  if (sy_moe_ht_sizes(b->moe, &b->sizes) != SY_SUCCESS) return 1;
  b->recv = s->full;
  b->recv.rows = b->sizes.max_rows;
  if (c->wire == SY_MOE_WIRE_BF16) b->recv.scales = NULL;
  const moe_ht_shape_t sh = {
      s->W, ctx->rank, H, K, s->E, c->expert_alignment, c->wire, unit, (c->flags & SY_MOE_HT_SCALES_ROW_MAJOR) != 0};
  const moe_ht_inputs_t in = {s->num_tokens, s->ids_in, s->weights_in, tokens_of, s};
  moe_ht_expect_t ex;
  long long wrong[MOE_HT_OPS];
  if (moe_ht_expect(&sh, &in, &ex)) {
    moe_ht_expect_free(&ex);
    return 1;
  }
  int rc = moe_ht_round(ctx, b, &sh, &in, &ex, exact, wrong);
  moe_ht_expect_free(&ex);
  for (int op = MOE_HT_DISPATCH; op < MOE_HT_OPS && !rc; op++)
    if (wrong[op] < 0) {
      fprintf(stderr, "sy-bench soak: rank %d: moe-ht: %s did not run (SY_ERR_UNSUPPORTED on an object that exists)\n",
              ctx->rank, moe_ht_op_names[op]);
      rc = 1;
    }
  if (rc) return 1;
  /* wrong[] is already the most of any rank: counted once, on rank 0 */
  for (int op = 0; op < MOE_HT_OPS && ctx->rank == 0; op++) st->wrong[SOAK_MOE_HT] += wrong[op] > 0 ? wrong[op] : 0;
  st->calls[SOAK_MOE_HT]++;
  st->moe_ht_wires[obj % 3]++;
  st->moe_ht_exact += exact;
  st->moe_ht_unit += unit;
  return 0;
}
