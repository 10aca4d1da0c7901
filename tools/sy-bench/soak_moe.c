/*
 * soak_moe.c — the soak's MoE rounds (soak.h): one dispatch and its combine per round, on one of six objects
 * (the three wires, each in the default and the per-expert mode; same shape: max_tokens T, hidden H, top_k K,
 * L experts per rank), one call each or the four halves, int32 or int64 ids (the combine's type drawn apart), a
 * routing of any of tests/workload's shapes with its token count per rank (0 included, NULL buffers then half the
 * time), specials among the tokens and expert outputs now and then, and the optional weights left out where the
 * header allows. One round in sixteen destroys the object it uses and creates it again first.
 * Expected: sy__moe_ref_dispatch and sy__moe_ref_combine (src/ref) over every rank's inputs, regenerated here
 * (tests/workload, keyed by the round's seed); every output array compared whole, poison included (slots past
 * a count, rows past num_tokens).
 */
#include "core/internal.h"
#include "ref/moe_layout.h"
#include "ref/moe_ref.h"
#include "soak.h"

enum { T = 64, H = 512, K = 4, OBJECTS = 6 };
static const sy_moe_wire_t wires[3] = {SY_MOE_WIRE_FP8, SY_MOE_WIRE_FP8_UE8M0, SY_MOE_WIRE_BF16};

/* recv's five arrays and out, laid out in one block (host and device alike). */
enum { R_TOKENS, R_SCALES, R_SRC, R_COUNTS, R_RANK_COUNTS, R_OUT, R_N };

struct soak_moe {
  int W, L, E;
  size_t S;
  size_t off[R_N], bytes[R_N], total;
  sy_moe_config_t config[OBJECTS];
  sy_moe_t moe[OBJECTS];
  uint8_t *d_out, *d_in;           /* device: the outputs' block; inputs: tokens, ids, cids, w, cw, y */
  uint8_t *h_got, *h_want, *h_in;  /* host copies of the blocks */
  uint16_t **tokens, **y;          /* [W]: every rank's tokens [T][H] and expert outputs [L][S][H] */
  int64_t **ids;                   /* [W]: every rank's ids [T][K] */
  uint8_t **typed;                 /* [W]: the ids in the round's index type */
  float *w, *cw;                   /* this rank's weights [T][K] */
  int32_t *counts;                 /* [L] */
  sy_moe_dispatch_args_t *sources; /* [W] */
};

static int experts_per_rank(int world) { return world >= 4 ? 2 : (8 + world - 1) / world; }

static sy_moe_config_t object_config(int world, int obj) {
  sy_moe_config_t c = SY_MOE_CONFIG_INIT;
  c.max_tokens = T;
  c.hidden = H;
  c.top_k = K;
  c.num_experts = world * experts_per_rank(world);
  c.wire = wires[obj % 3];
  c.flags = obj >= 3 ? SY_MOE_PER_EXPERT : 0u;
  return c;
}

size_t soak_moe_heap(int world, sy_backend_t backend) {
  size_t sum = 0;
  for (int obj = 0; obj < OBJECTS; obj++) {
    const sy_moe_config_t c = object_config(world, obj);
    sy_moe_layout_t layout;
    if (sy__moe_layout(&c, world, &layout) == SY_SUCCESS) sum += layout.total + 4096;
  }
  return sum;
}

/* Input block offsets: tokens, ids, cids (int64 room each), w, cw, y. */
enum { I_TOKENS, I_IDS, I_CIDS, I_W, I_CW, I_Y, I_N };

static size_t in_offset(const soak_moe_t *s, int which) {
  const size_t sizes[I_N] = {(size_t)T * H * 2, (size_t)T * K * 8, (size_t)T * K * 8,
                             (size_t)T * K * 4, (size_t)T * K * 4, (size_t)s->L * s->S * H * 2};
  size_t at = 0;
  for (int i = 0; i < which; i++) at += (sizes[i] + 255) / 256 * 256;
  return at;
}

int soak_moe_open(bench_ctx_t *ctx, soak_moe_t **out) {
  soak_moe_t *s = calloc(1, sizeof *s);
  if (!s) return 1;
  *out = s;
  s->W = ctx->world, s->L = experts_per_rank(s->W), s->E = s->W * s->L, s->S = (size_t)s->W * T;
  const size_t L = (size_t)s->L, S = s->S, W = (size_t)s->W;
  const size_t bytes[R_N] = {L * S * H * 2,    L * (H / SY_MOE_FP8_GROUP) * S * 4, L * S * 8, L * 4, L * W * 4,
                             (size_t)T * H * 2};
  for (int i = 0; i < R_N; i++) {
    s->off[i] = s->total;
    s->bytes[i] = bytes[i];
    s->total += (bytes[i] + 255) / 256 * 256;
  }
  const size_t in_total = in_offset(s, I_N);
  s->d_out = soak_alloc(ctx, s->total), s->d_in = soak_alloc(ctx, in_total);
  s->h_got = malloc(s->total), s->h_want = malloc(s->total), s->h_in = malloc(in_total);
  s->tokens = calloc(W, sizeof *s->tokens), s->y = calloc(W, sizeof *s->y), s->ids = calloc(W, sizeof *s->ids);
  s->typed = calloc(W, sizeof *s->typed), s->sources = calloc(W, sizeof *s->sources);
  s->w = malloc((size_t)T * K * 4), s->cw = malloc((size_t)T * K * 4), s->counts = malloc(L * 4);
  if (!s->d_out || !s->d_in || !s->h_got || !s->h_want || !s->h_in || !s->tokens || !s->y || !s->ids || !s->typed ||
      !s->sources || !s->w || !s->cw || !s->counts)
    return 1;
  for (size_t r = 0; r < W; r++) {
    s->tokens[r] = malloc((size_t)T * H * 2), s->y[r] = malloc(L * S * H * 2);
    s->ids[r] = malloc((size_t)T * K * 8), s->typed[r] = malloc((size_t)T * K * 8);
    if (!s->tokens[r] || !s->y[r] || !s->ids[r] || !s->typed[r]) return 1;
  }
  /* every page touched now (see soak_a2a_open) */
  memset(s->h_got, 0, s->total), memset(s->h_want, 0, s->total), memset(s->h_in, 0, in_total);
  for (size_t r = 0; r < W; r++) memset(s->y[r], 0, L * S * H * 2);
  if (soak_fill(ctx, s->d_out, 0, s->total) || soak_fill(ctx, s->d_in, 0, in_total) || soak_sync(ctx)) return 1;
  for (int obj = 0; obj < OBJECTS; obj++) {
    s->config[obj] = object_config(s->W, obj);
    if (sy_moe_create(ctx->comm, &s->config[obj], &s->moe[obj]) != SY_SUCCESS) return 1;
  }
  return 0;
}

void soak_moe_close(bench_ctx_t *ctx, soak_moe_t *s) {
  if (!s) return;
  for (int obj = 0; obj < OBJECTS; obj++)
    if (s->moe[obj]) sy_moe_destroy(s->moe[obj]);
  for (int r = 0; r < s->W && s->tokens && s->y && s->ids && s->typed; r++)
    free(s->tokens[r]), free(s->y[r]), free(s->ids[r]), free(s->typed[r]);
  soak_free(ctx, s->d_out), soak_free(ctx, s->d_in);
  free(s->h_got), free(s->h_want), free(s->h_in), free(s->tokens), free(s->y), free(s->ids), free(s->typed);
  free(s->sources), free(s->w), free(s->cw), free(s->counts);
  free(s);
}

static void put_ids(const int64_t *ids, size_t n, sy_index_type_t type, void *out) {
  for (size_t i = 0; i < n; i++) {
    if (type == SY_INDEX_INT64) ((int64_t *)out)[i] = ids[i];
    else ((int32_t *)out)[i] = (int32_t)ids[i];
  }
}

/* Every rank's inputs of the round, and rank r's expert outputs in the slots its experts fill (poison elsewhere). */
static void generate(soak_moe_t *s, const wl_moe_t *m, sy_index_type_t id_type, int me) {
  for (int r = 0; r < s->W; r++) {
    const int n = wl_moe_num_tokens(m, 0, r);
    wl_moe_ids(m, 0, r, n, s->ids[r]);
    wl_moe_tokens(m, 0, r, n, s->tokens[r]);
    put_ids(s->ids[r], (size_t)n * K, id_type, s->typed[r]);
    s->sources[r] = (sy_moe_dispatch_args_t){s->tokens[r], n, s->typed[r], id_type, NULL};
  }
  wl_moe_weights(m, 0, me, s->sources[me].num_tokens, 0, s->w);
  wl_moe_weights(m, 0, me, s->sources[me].num_tokens, 1, s->cw);
  for (int r = 0; r < s->W; r++) {
    memset(s->counts, 0, (size_t)s->L * sizeof *s->counts);
    for (int src = 0; src < s->W; src++)
      for (size_t i = 0; i < (size_t)s->sources[src].num_tokens * K; i++)
        if (s->ids[src][i] >= 0 && s->ids[src][i] / s->L == r) s->counts[s->ids[src][i] % s->L]++;
    memset(s->y[r], SOAK_POISON, (size_t)s->L * s->S * H * 2);
    for (int e = 0; e < s->L; e++)
      for (int slot = 0; slot < s->counts[e]; slot++)
        wl_moe_expert_row(m, 0, r, e, slot, s->y[r] + ((size_t)e * s->S + (size_t)slot) * H);
  }
}

static sy_moe_recv_t recv_in(const soak_moe_t *s, uint8_t *block, sy_moe_wire_t wire) {
  sy_moe_recv_t r;
  r.tokens = block + s->off[R_TOKENS];
  r.scales = wire == SY_MOE_WIRE_BF16 ? NULL : (float *)(block + s->off[R_SCALES]);
  r.src = (int32_t *)(block + s->off[R_SRC]);
  r.expert_counts = (int32_t *)(block + s->off[R_COUNTS]);
  r.rank_counts = (int32_t *)(block + s->off[R_RANK_COUNTS]);
  return r;
}

/* The round's calls on object obj: dispatch then combine, one call each or the halves. */
static int moe_calls(bench_ctx_t *ctx, soak_moe_t *s, sy_moe_t moe, uint64_t seed, sy_index_type_t id_type,
                     sy_index_type_t cid_type, int halves, sy_moe_wire_t wire, int per_expert) {
  const int me = ctx->rank, n = s->sources[me].num_tokens;
  uint8_t *in = s->d_in;
  const int null_bufs = n == 0 && soak_pick(seed, 60 + (uint64_t)me, 2);
  const void *x = null_bufs ? NULL : in + in_offset(s, I_TOKENS), *ids = null_bufs ? NULL : in + in_offset(s, I_IDS);
  const void *cids = null_bufs ? NULL : in + in_offset(s, I_CIDS), *y = in + in_offset(s, I_Y);
  /* per expert: the dispatch's weights are optional and the combine's count; default: the other way round */
  const float *w = null_bufs || (per_expert && soak_pick(seed, 70 + (uint64_t)me, 2))
                       ? NULL
                       : (const float *)(in + in_offset(s, I_W));
  const float *cw = null_bufs || (!per_expert && soak_pick(seed, 80 + (uint64_t)me, 2))
                        ? NULL
                        : (const float *)(in + in_offset(s, I_CW));
  void *out = null_bufs ? NULL : s->d_out + s->off[R_OUT];
  const sy_moe_recv_t recv = recv_in(s, s->d_out, wire);
  sy_status_t st;
  if (!halves) {
    st = sy_moe_dispatch(moe, x, n, ids, id_type, w, &recv, ctx->stream);
    if (st == SY_SUCCESS) st = sy_moe_combine(moe, y, cids, cid_type, cw, n, out, ctx->stream);
  } else {
    st = sy_moe_dispatch_send(moe, x, n, ids, id_type, w, ctx->stream);
    if (st == SY_SUCCESS) st = sy_moe_dispatch_recv(moe, &recv, ctx->stream);
    if (st == SY_SUCCESS) st = sy_moe_combine_send(moe, y, ctx->stream);
    if (st == SY_SUCCESS) st = sy_moe_combine_recv(moe, cids, cid_type, cw, n, out, ctx->stream);
  }
  return st != SY_SUCCESS;
}

/* Uploads this rank's inputs into the device input block and poisons the outputs. */
static int upload(bench_ctx_t *ctx, soak_moe_t *s, sy_index_type_t cid_type) {
  const int me = ctx->rank, n = s->sources[me].num_tokens;
  uint8_t *h = s->h_in;
  memcpy(h + in_offset(s, I_TOKENS), s->tokens[me], (size_t)n * H * 2);
  memcpy(h + in_offset(s, I_IDS), s->typed[me], (size_t)n * K * 8);
  put_ids(s->ids[me], (size_t)n * K, cid_type, h + in_offset(s, I_CIDS));
  memcpy(h + in_offset(s, I_W), s->w, (size_t)n * K * 4);
  memcpy(h + in_offset(s, I_CW), s->cw, (size_t)n * K * 4);
  memcpy(h + in_offset(s, I_Y), s->y[me], (size_t)s->L * s->S * H * 2);
  return soak_to_dev(ctx, s->d_in, h, in_offset(s, I_N)) || soak_fill(ctx, s->d_out, SOAK_POISON, s->total);
}

/* The outputs against src/ref's dispatch and combine of every rank's inputs. */
static int check(bench_ctx_t *ctx, soak_moe_t *s, int obj, uint64_t seed, soak_stats_t *st) {
  const sy_moe_config_t *c = &s->config[obj];
  const int me = ctx->rank;
  if (soak_to_host(ctx, s->h_got, s->d_out, s->total)) return 1;
  memset(s->h_want, SOAK_POISON, s->total);
  const sy_moe_recv_t want = recv_in(s, s->h_want, c->wire);
  const float *weights = c->flags & SY_MOE_PER_EXPERT ? s->cw : s->w;
  if (sy__moe_ref_dispatch(c, s->W, me, s->sources, &want) != SY_SUCCESS ||
      sy__moe_ref_combine(c, s->W, me, s->sources, weights, (const void *const *)s->y, s->h_want + s->off[R_OUT]) !=
          SY_SUCCESS)
    return 1;
  static const char *const names[R_N] = {"moe recv.tokens",        "moe recv.scales",      "moe recv.src",
                                         "moe recv.expert_counts", "moe recv.rank_counts", "moe combine out"};
  const size_t elems[R_N] = {c->wire == SY_MOE_WIRE_BF16 ? 2u : 1u, 4, 4, 4, 4, 2};
  for (int i = 0; i < R_N; i++) {
    if (i == R_SCALES && c->wire == SY_MOE_WIRE_BF16) continue;
    const size_t bytes = i == R_TOKENS ? (size_t)s->L * s->S * H * elems[i] : s->bytes[i];
    st->wrong[SOAK_MOE] +=
        soak_compare(st, names[i], seed, s->h_got + s->off[i], s->h_want + s->off[i], bytes, elems[i]);
  }
  return 0;
}

int soak_moe_round(bench_ctx_t *ctx, soak_moe_t *s, uint64_t seed, soak_stats_t *st) {
  const int obj = (int)soak_pick(seed, 50, OBJECTS);
  if (soak_pick(seed, 51, 16) == 0) { /* collective: every rank draws the same */
    sy_moe_destroy(s->moe[obj]);
    s->moe[obj] = NULL;
    if (sy_moe_create(ctx->comm, &s->config[obj], &s->moe[obj]) != SY_SUCCESS) return 1;
    st->moe_recreated++;
  }
  const sy_moe_config_t *c = &s->config[obj];
  const wl_moe_t m = {.seed = 0x50a4ull,
                      .salt = seed,
                      .world = s->W,
                      .num_experts = s->E,
                      .top_k = K,
                      .hidden = H,
                      .max_tokens = T,
                      .route = (wl_route_t)soak_pick(seed, 52, 7),
                      .specials = soak_pick(seed, 53, 4) == 0,
                      .draw = WL_DRAW_GPU};
  const sy_index_type_t id_type = soak_pick(seed, 54, 2) ? SY_INDEX_INT64 : SY_INDEX_INT32;
  const sy_index_type_t cid_type = soak_pick(seed, 55, 2) ? SY_INDEX_INT64 : SY_INDEX_INT32;
  const int halves = (int)soak_pick(seed, 56, 2), per_expert = (c->flags & SY_MOE_PER_EXPERT) != 0;
  generate(s, &m, id_type, ctx->rank);
  if (upload(ctx, s, cid_type)) return 1;
  if (moe_calls(ctx, s, s->moe[obj], seed, id_type, cid_type, halves, c->wire, per_expert)) return 1;
  if (check(ctx, s, obj, seed, st)) return 1;
  st->calls[SOAK_MOE]++;
  st->moe_wires[obj % 3]++;
  st->moe_per_expert += per_expert;
  st->moe_halves += halves;
  return 0;
}
