/*
 * test_gpu_moe.c — the MoE low-latency dispatch and combine on the GPUs against the CPU reference (the host
 * backend of the same library, run in this process on W threads with every rank's inputs), bit for bit, with
 * every output poisoned first so unwritten slots and rows show (slots at or past expert_counts[e], and rows
 * of `out` past num_tokens, must still hold the poison):
 *  - routing: random (ids of -1 at any k, some tokens with no expert), every token to one expert, a rank with
 *    no tokens (sometimes with NULL buffers), several of a token's experts on one rank, every id -1, every
 *    rank full, top_k = num_experts; experts that receive nothing (counted in the summary);
 *  - hidden 128 .. 7168 (and 8 and 200 on the BF16 wire), top-k 1, 2, 3, 4, 6, 8, 16, 8 .. 288 experts (a case
 *    whose experts do not divide among the ranks is skipped, and says so); the FP8, FP8_UE8M0 and BF16 wires;
 *    the default and SY_MOE_PER_EXPERT combines, each given weights it must ignore (the combine's, resp. the
 *    dispatch's) or none; int32 and int64 ids (the combine's in the other type every third round); NaN,
 *    infinities, -0.0 and subnormals in tokens and expert outputs;
 *  - the one-call forms and the four halves, 3 or more rounds per object enqueued back to back on one
 *    stream with no host sync (both parities, num_tokens and routing changing every round), the caller's
 *    inputs overwritten on the stream as soon as the half that reads them is done;
 *  - one round of the four halves captured once in a CUDA graph and replayed 10,000 times (SY_MOE_GRAPH_REPLAYS
 *    changes that) with fresh inputs copied into the captured buffers before each replay, checked every
 *    100th replay and the last, with eager rounds on the same object before the capture and after the replays;
 *    likewise one round of the one-call forms (by default the fused kernels), half as many replays;
 *  - last, ids the device must reject (a repeat, one equal to num_experts): reported through
 *    sy_comm_async_error and treated as -1 (the results equal those of the call with -1 there).
 * Each rank regenerates every rank's inputs from the seed (SY_TEST_SEED overrides it; a failure prints it), with
 * tests/workload's generators in the GPU tests' draw.
 */
#include "gpu_test.h"

#define POISON            0xEE
#define GRAPH_SETS        37 /* input sets the replays cycle through; prime, so every 100th replay meets all */
#define GRAPH_CHECK_EVERY 100

static uint64_t test_seed = 0x30e5eed5eedull;

/* ---- cases ------------------------------------------------------------------------------------------------ */

enum { MODE_ONE_CALL, MODE_HALVES, MODE_ALTERNATE };
static const char *const route_names[] = {"random", "one expert", "empty rank", "same rank",
                                          "none",   "full",       "mixed"}; /* by wl_route_t */
static const char *const mode_names[] = {"one-call", "halves", "alternate"};

typedef struct moe_case {
  const char *name;
  int E, K, H, T; /* num_experts (0 in a graph case: 8 per rank), top_k, hidden, max_tokens */
  sy_moe_wire_t wire;
  unsigned flags;
  sy_index_type_t id_type;
  int route, rounds, mode, specials; /* route: a wl_route_t */
  uint64_t salt;
  int graph_share;   /* graph cases: replay count divided by this; 0 for the eager cases */
  int combine_other; /* graph cases: the captured combine takes its ids in the other index type */
} moe_case_t;

#define FP8  SY_MOE_WIRE_FP8
#define UE8  SY_MOE_WIRE_FP8_UE8M0
#define BF16 SY_MOE_WIRE_BF16
#define PE   SY_MOE_PER_EXPERT
#define I32  SY_INDEX_INT32
#define I64  SY_INDEX_INT64
#define CASE(name_, E_, K_, H_, T_, wire_, flags_, ids_, route_, rounds_, mode_, specials_, salt_)            \
  {                                                                                                           \
    .name = name_, .E = E_, .K = K_, .H = H_, .T = T_, .wire = wire_, .flags = flags_, .id_type = ids_,       \
    .route = WL_ROUTE_##route_, .rounds = rounds_, .mode = MODE_##mode_, .specials = specials_, .salt = salt_ \
  }

/* E is chosen divisible by 1, 2, 3, 4 and 8 where the case allows, so that most cases run at every W. */
/* clang-format off */
static const moe_case_t cases[] = {
    /* name, num_experts, top_k, hidden, max_tokens, wire, flags, id type, routing, rounds, halves or one
     * call (alternate: one call in even rounds, halves in odd), special values, seed salt */
    CASE("random",                         48,  4,  256,  32,  FP8,  0,  I32, RANDOM,     4, ALTERNATE, 0,  1),
    CASE("random ue8m0 per-expert",        48,  4,  256,  32,  UE8,  PE, I64, RANDOM,     4, HALVES,    0,  2),
    CASE("random bf16",                    24,  2,  128,  32,  BF16, 0,  I64, RANDOM,     3, ONE_CALL,  0,  3),
    CASE("top-1",                          8,   1,  128,  64,  FP8,  0,  I32, RANDOM,     3, HALVES,    0,  4),
    CASE("top-1 bf16 per-expert",          24,  1,  256,  16,  BF16, PE, I32, RANDOM,     3, ALTERNATE, 0,  5),
    CASE("top-2 ue8m0",                    16,  2,  512,  24,  UE8,  0,  I64, RANDOM,     3, ALTERNATE, 0,  6),
    CASE("one expert",                     24,  2,  256,  32,  FP8,  0,  I32, ONE_EXPERT, 3, ALTERNATE, 0,  7),
    CASE("one expert ue8m0 per-expert",    48,  8,  128,  16,  UE8,  PE, I64, ONE_EXPERT, 3, HALVES,    0,  8),
    CASE("empty rank",                     96,  8,  256,  16,  FP8,  0,  I32, EMPTY_RANK, 8, ALTERNATE, 0,  9),
    CASE("empty rank bf16 per-expert",     24,  2,  128,  16,  BF16, PE, I64, EMPTY_RANK, 4, ONE_CALL,  0, 10),
    CASE("same rank",                      48,  8,  256,  16,  FP8,  0,  I64, SAME_RANK,  3, HALVES,    0, 11),
    CASE("same rank ue8m0 per-expert",     24,  8,  128,  16,  UE8,  PE, I32, SAME_RANK,  3, ALTERNATE, 0, 12),
    CASE("same rank bf16",                 16,  8,  128,  16,  BF16, 0,  I32, SAME_RANK,  3, ONE_CALL,  0, 13),
    CASE("no experts",                     24,  4,  128,  16,  FP8,  0,  I32, NONE,       3, ALTERNATE, 0, 14),
    CASE("no experts bf16 per-expert",     24,  4,  128,  16,  BF16, PE, I64, NONE,       3, HALVES,    0, 15),
    CASE("full ue8m0",                     48,  8,  512,  32,  UE8,  0,  I32, FULL,       3, HALVES,    0, 16),
    CASE("top-k = experts = 8 per-expert", 8,   8,  128,  16,  FP8,  PE, I32, FULL,       3, ALTERNATE, 0, 17),
    CASE("top-16",                         96,  16, 256,  16,  FP8,  0,  I64, RANDOM,     3, ALTERNATE, 0, 18),
    CASE("top-16 bf16 per-expert",         48,  16, 128,  16,  BF16, PE, I32, RANDOM,     3, HALVES,    0, 19),
    CASE("256 experts",                    256, 8,  128,  16,  FP8,  0,  I32, RANDOM,     3, HALVES,    0, 20),
    CASE("288 experts ue8m0",              288, 8,  256,  16,  UE8,  0,  I32, RANDOM,     3, ALTERNATE, 0, 21),
    CASE("288 experts top-16 per-expert",  288, 16, 128,  8,   FP8,  PE, I64, RANDOM,     3, HALVES,    0, 22),
    CASE("specials fp8",                   24,  4,  256,  16,  FP8,  0,  I32, FULL,       3, ONE_CALL,  1, 23),
    CASE("specials ue8m0 per-expert",      48,  8,  128,  16,  UE8,  PE, I64, RANDOM,     3, HALVES,    1, 24),
    CASE("specials bf16 same rank",        24,  8,  128,  16,  BF16, 0,  I32, SAME_RANK,  3, ALTERNATE, 1, 25),
    CASE("bf16 hidden 200",                24,  4,  200,  16,  BF16, 0,  I32, RANDOM,     3, ALTERNATE, 0, 33),
    CASE("bf16 hidden 8 per-expert",       24,  2,  8,    32,  BF16, PE, I64, SAME_RANK,  3, HALVES,    1, 34),
    CASE("hidden 2048",                    48,  8,  2048, 32,  FP8,  0,  I32, RANDOM,     3, ALTERNATE, 0, 26),
    CASE("hidden 2048 bf16 per-expert",    24,  4,  2048, 32,  BF16, PE, I64, SAME_RANK,  3, HALVES,    0, 27),
    CASE("hidden 4096 ue8m0",              24,  8,  4096, 32,  UE8,  0,  I64, RANDOM,     3, HALVES,    0, 28),
    CASE("hidden 4096 per-expert",         48,  8,  4096, 16,  FP8,  PE, I32, EMPTY_RANK, 3, ALTERNATE, 0, 29),
    CASE("hidden 7168, 128 tokens",        24,  8,  7168, 128, FP8,  0,  I32, RANDOM,     3, ALTERNATE, 0, 30),
    CASE("hidden 7168 bf16 per-expert",    24,  8,  7168, 128, BF16, PE, I64, FULL,       3, HALVES,    0, 31),
    CASE("hidden 7168 ue8m0 one expert",   16,  2,  7168, 64,  UE8,  0,  I32, ONE_EXPERT, 3, ONE_CALL,  0, 32),
    /* 288 experts x 1,100 tokens: the token masks would pass 32 KiB, so dispatch_send counts the ranks */
    CASE("1100 tokens (ranks counted)",    288, 8,  128,  1100, FP8, 0,  I32, RANDOM,     2, ALTERNATE, 0, 35),
    CASE("1100 tokens bf16 per-expert",    288, 4,  128,  1100, BF16, PE, I64, SAME_RANK, 2, HALVES,    0, 36),
    /* top-k not a power of two: dispatch_send routes in two passes (repeats by scans, ranks by atomics) */
    CASE("top-6",                          48,  6,  256,  32,  FP8,  0,  I32, RANDOM,     3, ALTERNATE, 1, 37),
    CASE("top-3 bf16 per-expert",          24,  3,  128,  16,  BF16, PE, I64, SAME_RANK,  3, HALVES,    1, 38),
    CASE("top-6 1100 tokens",              288, 6,  128,  1100, FP8, 0,  I64, RANDOM,     2, ALTERNATE, 0, 39),
};
/* clang-format on */

/* One round captured (the four halves, or with MODE_ONE_CALL sy_moe_dispatch and sy_moe_combine); rounds = the
 * input sets the replays cycle through. */
static const moe_case_t graph_cases[] = {
    {.name = "graph fp8",
     .E = 0,
     .K = 4,
     .H = 256,
     .T = 16,
     .wire = FP8,
     .flags = 0,
     .id_type = I32,
     .route = WL_ROUTE_MIXED,
     .rounds = GRAPH_SETS,
     .mode = MODE_HALVES,
     .specials = 0,
     .salt = 40,
     .graph_share = 1},
    {.name = "graph bf16 per-expert",
     .E = 0,
     .K = 8,
     .H = 128,
     .T = 16,
     .wire = BF16,
     .flags = PE,
     .id_type = I64,
     .route = WL_ROUTE_MIXED,
     .rounds = GRAPH_SETS,
     .mode = MODE_HALVES,
     .specials = 1,
     .salt = 41,
     .graph_share = 5,
     .combine_other = 1},
    {.name = "graph fp8 one-call",
     .E = 0,
     .K = 8,
     .H = 512,
     .T = 16,
     .wire = FP8,
     .flags = 0,
     .id_type = I64,
     .route = WL_ROUTE_MIXED,
     .rounds = GRAPH_SETS,
     .mode = MODE_ONE_CALL,
     .specials = 1,
     .salt = 42,
     .graph_share = 2},
};

static const char *wire_name(sy_moe_wire_t w) { return w == FP8 ? "fp8" : w == UE8 ? "fp8-ue8m0" : "bf16"; }

static sy_moe_config_t case_config(const moe_case_t *c) {
  sy_moe_config_t config = SY_MOE_CONFIG_INIT;
  config.max_tokens = c->T;
  config.hidden = c->H;
  config.top_k = c->K;
  config.num_experts = c->E;
  config.wire = c->wire;
  config.flags = c->flags;
  return config;
}

/* ---- seeded inputs, any rank's, any round's ---------------------------------------------------------------- */

/* The case's generator at W ranks (tests/workload), in the GPU tests' draw. */
static wl_moe_t case_gen(const moe_case_t *c, int W) {
  const wl_moe_t m = {.seed = test_seed,
                      .salt = c->salt,
                      .world = W,
                      .num_experts = c->E,
                      .top_k = c->K,
                      .hidden = c->H,
                      .max_tokens = c->T,
                      .route = (wl_route_t)c->route,
                      .specials = c->specials,
                      .draw = WL_DRAW_GPU};
  return m;
}

static uint64_t case_key(const moe_case_t *c, uint64_t what, uint64_t round, uint64_t rank) {
  return wl_moe_key(test_seed, c->salt, what, round, rank);
}

/* ---- one case's run: every rank's inputs, the buffers' layouts, the oracle's outputs ---------------------- */

typedef struct rank_in {
  int n;
  int64_t *ids;  /* [T][K] */
  float *w, *cw; /* [T][K]: the dispatch's and the combine's weights */
  uint16_t *tok; /* [T][H] */
} rank_in_t;

/* Inputs of one rank and round, in one block (device or host): the dispatch's tokens, ids and weights (the
 * first IN_CIDS bytes, overwritten once dispatch_send is done), the combine's ids and weights, the expert
 * outputs. Outputs in one block too: recv's five arrays, then out. Each array 256-byte aligned. */
enum { IN_TOKENS, IN_IDS, IN_W, IN_CIDS, IN_CW, IN_Y, IN_N };
enum { OUT_TOKENS, OUT_SCALES, OUT_SRC, OUT_EXPERT_COUNTS, OUT_RANK_COUNTS, OUT_OUT, OUT_N };

typedef struct run {
  const moe_case_t *c;
  wl_moe_t gen; /* the case's generator at W ranks */
  int W, L, S, G, me, rounds;
  size_t in_off[IN_N], in_bytes[IN_N], in_total;
  size_t out_off[OUT_N], out_bytes[OUT_N], out_total;
  rank_in_t *in; /* [rounds][W] */
  uint8_t *want; /* [rounds][out_total]: what the oracle's rank `me` got */
} run_t;

static size_t lay_out(size_t *off, const size_t *bytes, int n) {
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    off[i] = at;
    at += (bytes[i] + 255) / 256 * 256;
  }
  return at ? at : 256;
}

static void run_init(run_t *run, const moe_case_t *c, int W, int me) {
  memset(run, 0, sizeof *run);
  run->c = c;
  run->gen = case_gen(c, W);
  run->W = W;
  run->me = me;
  run->L = c->E / W;
  run->S = W * c->T;
  run->G = c->H / SY_MOE_FP8_GROUP;
  run->rounds = c->rounds;
  const size_t T = (size_t)c->T, K = (size_t)c->K, H = (size_t)c->H, L = (size_t)run->L, S = (size_t)run->S;
  const int fp8 = c->wire != BF16;
  const size_t in_bytes[IN_N] = {T * H * 2, T * K * 8, T * K * 4, T * K * 8, T * K * 4, L * S * H * 2};
  const size_t out_bytes[OUT_N] = {
      L * S * H * (fp8 ? 1 : 2), fp8 ? L * (size_t)run->G * S * 4 : 0, L * S * 8, L * 4, L * (size_t)W * 4, T * H * 2};
  memcpy(run->in_bytes, in_bytes, sizeof in_bytes);
  memcpy(run->out_bytes, out_bytes, sizeof out_bytes);
  run->in_total = lay_out(run->in_off, run->in_bytes, IN_N);
  run->out_total = lay_out(run->out_off, run->out_bytes, OUT_N);
  run->in = (rank_in_t *)calloc((size_t)run->rounds * W, sizeof *run->in);
  for (int round = 0; round < run->rounds; round++) {
    for (int r = 0; r < W; r++) {
      rank_in_t *ri = &run->in[(size_t)round * W + r];
      ri->n = wl_moe_num_tokens(&run->gen, round, r);
      ri->ids = (int64_t *)malloc(T * K * sizeof(int64_t));
      ri->w = (float *)malloc(T * K * sizeof(float));
      ri->cw = (float *)malloc(T * K * sizeof(float));
      ri->tok = (uint16_t *)malloc(T * H * sizeof(uint16_t));
      wl_moe_ids(&run->gen, round, r, ri->n, ri->ids);
      wl_moe_weights(&run->gen, round, r, ri->n, 0, ri->w);
      wl_moe_weights(&run->gen, round, r, ri->n, 1, ri->cw);
      wl_moe_tokens(&run->gen, round, r, ri->n, ri->tok);
    }
  }
  run->want = (uint8_t *)malloc((size_t)run->rounds * run->out_total);
}

static void run_free(run_t *run) {
  for (size_t i = 0; i < (size_t)run->rounds * run->W; i++)
    free(run->in[i].ids), free(run->in[i].w), free(run->in[i].cw), free(run->in[i].tok);
  free(run->in);
  free(run->want);
}

/* Slots each of rank `dest`'s local experts fills in `round`, from every rank's routing. */
static void slot_counts(const run_t *run, int round, int dest, int32_t *counts) {
  memset(counts, 0, (size_t)run->L * sizeof *counts);
  for (int s = 0; s < run->W; s++) {
    const rank_in_t *ri = &run->in[(size_t)round * run->W + s];
    for (size_t i = 0; i < (size_t)ri->n * run->c->K; i++)
      if (ri->ids[i] >= 0 && ri->ids[i] / run->L == dest) counts[ri->ids[i] % run->L]++;
  }
}

static void put_ids(const int64_t *ids, size_t count, sy_index_type_t type, void *buf) {
  for (size_t i = 0; i < count; i++) {
    if (type == I64) ((int64_t *)buf)[i] = ids[i];
    else ((int32_t *)buf)[i] = (int32_t)ids[i];
  }
}

/* Expert outputs [L][S][H] of `rank` in `round`: element h of local expert e's slot s is a function of
 * (round, rank, e, s, h), generated for the filled slots; the rest stay poison (a combine reading one shows). */
static void gen_expert_out(const run_t *run, int round, int rank, uint16_t *y) {
  const moe_case_t *c = run->c;
  int32_t *counts = (int32_t *)malloc((size_t)run->L * sizeof *counts);
  slot_counts(run, round, rank, counts);
  memset(y, POISON, run->in_bytes[IN_Y]);
  for (int e = 0; e < run->L; e++)
    for (int s = 0; s < counts[e]; s++)
      wl_moe_expert_row(&run->gen, round, rank, e, s, y + ((size_t)e * run->S + (size_t)s) * c->H);
  free(counts);
}

/* The input block of `rank` in `round`; rows past num_tokens are poison. */
static void fill_inputs(const run_t *run, int round, int rank, sy_index_type_t combine_type, uint8_t *block) {
  const moe_case_t *c = run->c;
  const rank_in_t *ri = &run->in[(size_t)round * run->W + rank];
  const size_t nk = (size_t)ri->n * c->K;
  memset(block, POISON, run->in_off[IN_Y]);
  memcpy(block + run->in_off[IN_TOKENS], ri->tok, (size_t)ri->n * c->H * 2);
  put_ids(ri->ids, nk, c->id_type, block + run->in_off[IN_IDS]);
  memcpy(block + run->in_off[IN_W], ri->w, nk * 4);
  put_ids(ri->ids, nk, combine_type, block + run->in_off[IN_CIDS]);
  memcpy(block + run->in_off[IN_CW], ri->cw, nk * 4);
  gen_expert_out(run, round, rank, (uint16_t *)(block + run->in_off[IN_Y]));
}

/* What one rank passes in one round, the same on the GPU and in the oracle (pointers into its blocks). */
typedef struct round_args {
  int n, halves;
  sy_index_type_t combine_type;
  const void *tokens, *ids, *cids, *y;
  const float *w, *cw;
  void *out;
  sy_moe_recv_t recv;
} round_args_t;

static sy_index_type_t other_type(sy_index_type_t t) { return t == I32 ? I64 : I32; }

static sy_index_type_t round_combine_type(const moe_case_t *c, int round) {
  if (c->graph_share) return c->combine_other ? other_type(c->id_type) : c->id_type;
  return round % 3 == 2 ? other_type(c->id_type) : c->id_type;
}

static round_args_t round_args(const run_t *run, int round, int rank, uint8_t *in, uint8_t *out) {
  const moe_case_t *c = run->c;
  round_args_t a;
  memset(&a, 0, sizeof a);
  a.n = run->in[(size_t)round * run->W + rank].n;
  const int mode = c->mode == MODE_ALTERNATE ? (round % 2 ? MODE_HALVES : MODE_ONE_CALL) : c->mode;
  a.halves = mode == MODE_HALVES;
  a.combine_type = round_combine_type(c, round);
  const int per_expert = (c->flags & PE) != 0, odd = round % 2 && !c->graph_share;
  /* A rank with no tokens passes NULL buffers about half the time (the header allows it). */
  const int null_buffers = a.n == 0 && case_key(c, 8, (uint64_t)round, (uint64_t)rank) % 2;
  if (!null_buffers) {
    a.tokens = in + run->in_off[IN_TOKENS];
    a.ids = in + run->in_off[IN_IDS];
    a.cids = in + run->in_off[IN_CIDS];
    a.out = out + run->out_off[OUT_OUT];
    /* Per-expert: the dispatch's weights are optional and the combine's count. Default: the dispatch's
     * count; the combine gets other weights, or none, which must change nothing. */
    a.w = per_expert && odd ? NULL : (const float *)(in + run->in_off[IN_W]);
    a.cw = !per_expert && odd ? NULL : (const float *)(in + run->in_off[IN_CW]);
  }
  a.y = in + run->in_off[IN_Y];
  a.recv.tokens = out + run->out_off[OUT_TOKENS];
  a.recv.scales = c->wire == BF16 ? NULL : (float *)(out + run->out_off[OUT_SCALES]);
  a.recv.src = (int32_t *)(out + run->out_off[OUT_SRC]);
  a.recv.expert_counts = (int32_t *)(out + run->out_off[OUT_EXPERT_COUNTS]);
  a.recv.rank_counts = (int32_t *)(out + run->out_off[OUT_RANK_COUNTS]);
  return a;
}

/* ---- the oracle: the host backend on W threads, the same calls on the same inputs ------------------------- */

static void oracle_rank(int r, sy_comm_t comm, void *arg) {
  run_t *run = (run_t *)arg;
  const moe_case_t *c = run->c;
  const sy_moe_config_t config = case_config(c);
  sy_moe_t moe = NULL;
  sy_status_t st = sy_moe_create(comm, &config, &moe);
  if (st != SY_SUCCESS) {
    GT_FAIL("oracle rank %d: sy_moe_create: %s", r, sy_status_name(st));
    return;
  }
  uint8_t *in = (uint8_t *)malloc(run->in_total), *out = (uint8_t *)malloc(run->out_total);
  for (int round = 0; round < run->rounds && st == SY_SUCCESS; round++) {
    fill_inputs(run, round, r, round_combine_type(c, round), in);
    memset(out, POISON, run->out_total);
    round_args_t a = round_args(run, round, r, in, out);
    if (!a.halves) {
      st = sy_moe_dispatch(moe, a.tokens, a.n, a.ids, c->id_type, a.w, &a.recv, NULL);
      if (st == SY_SUCCESS) st = sy_moe_combine(moe, a.y, a.cids, a.combine_type, a.cw, a.n, a.out, NULL);
    } else {
      st = sy_moe_dispatch_send(moe, a.tokens, a.n, a.ids, c->id_type, a.w, NULL);
      if (st == SY_SUCCESS) st = sy_moe_dispatch_recv(moe, &a.recv, NULL);
      if (st == SY_SUCCESS) st = sy_moe_combine_send(moe, a.y, NULL);
      if (st == SY_SUCCESS) st = sy_moe_combine_recv(moe, a.cids, a.combine_type, a.cw, a.n, a.out, NULL);
    }
    if (st != SY_SUCCESS) GT_FAIL("oracle rank %d, %s, round %d: %s", r, c->name, round, sy_status_name(st));
    if (r == run->me) memcpy(run->want + (size_t)round * run->out_total, out, run->out_total);
  }
  sy_moe_destroy(moe);
  free(in);
  free(out);
}

/* ---- comparing ------------------------------------------------------------------------------------------- */

static int all_poison(const uint8_t *p, size_t bytes) {
  for (size_t i = 0; i < bytes; i++)
    if (p[i] != POISON) return 0;
  return 1;
}

/* One output array, element by element; the first few differences named by their indices (dims outermost
 * first) and whether either side is the poison. Returns the elements that differ. */
static size_t compare_array(const char *what, const char *name, const uint8_t *got, const uint8_t *want, size_t bytes,
                            size_t elem, int ndims, const size_t *dims, const char *const *dim_names) {
  if (!memcmp(got, want, bytes)) return 0;
  size_t wrong = 0;
  for (size_t i = 0; i < bytes / elem; i++) {
    if (!memcmp(got + i * elem, want + i * elem, elem)) continue;
    if (wrong++ >= 4) continue;
    char where[160] = "";
    size_t idx[4] = {0, 0, 0, 0}, rest = i, len = 0;
    for (int d = ndims - 1; d >= 0; d--) {
      idx[d] = rest % dims[d];
      rest /= dims[d];
    }
    for (int d = 0; d < ndims && len < sizeof where; d++)
      len += (size_t)snprintf(where + len, sizeof where - len, "[%s %zu]", dim_names[d], idx[d]);
    uint32_t g = 0, w = 0;
    memcpy(&g, got + i * elem, elem);
    memcpy(&w, want + i * elem, elem);
    fprintf(stderr, "[test rank %d] %s: %s%s is 0x%0*x, want 0x%0*x%s (seed 0x%llx)\n", gt_rank, what, name, where,
            (int)elem * 2, g, (int)elem * 2, w,
            all_poison(got + i * elem, elem)    ? " (still poison: not written)"
            : all_poison(want + i * elem, elem) ? " (want the poison: nothing belongs there)"
                                                : "",
            (unsigned long long)test_seed);
  }
  if (wrong) GT_FAIL("%s: %s: %zu of %zu elements differ", what, name, wrong, bytes / elem);
  return wrong;
}

/* All of one round's outputs of this rank against the oracle's. */
static size_t compare_round(const run_t *run, const char *what, const uint8_t *got, const uint8_t *want) {
  const moe_case_t *c = run->c;
  const size_t L = (size_t)run->L, S = (size_t)run->S, H = (size_t)c->H, fp8 = c->wire != BF16;
  static const char *const lsh[] = {"expert", "slot", "byte"}, *const lsh16[] = {"expert", "slot", "element"};
  static const char *const lgs[] = {"expert", "group", "slot"}, *const ls2[] = {"expert", "slot", "field"};
  static const char *const l[] = {"expert"}, *const lw[] = {"expert", "rank"}, *const th[] = {"token", "element"};
  const size_t d_tok[3] = {L, S, H}, d_sc[3] = {L, (size_t)run->G, S}, d_src[3] = {L, S, 2}, d_l[1] = {L},
               d_lw[2] = {L, (size_t)run->W}, d_out[2] = {(size_t)c->T, H};
  const size_t *o = run->out_off, *b = run->out_bytes;
  size_t wrong = 0;
  wrong += compare_array(what, "recv.tokens", got + o[OUT_TOKENS], want + o[OUT_TOKENS], b[OUT_TOKENS], fp8 ? 1 : 2, 3,
                         d_tok, fp8 ? lsh : lsh16);
  if (fp8)
    wrong +=
        compare_array(what, "recv.scales", got + o[OUT_SCALES], want + o[OUT_SCALES], b[OUT_SCALES], 4, 3, d_sc, lgs);
  wrong += compare_array(what, "recv.src", got + o[OUT_SRC], want + o[OUT_SRC], b[OUT_SRC], 4, 3, d_src, ls2);
  wrong += compare_array(what, "recv.expert_counts", got + o[OUT_EXPERT_COUNTS], want + o[OUT_EXPERT_COUNTS],
                         b[OUT_EXPERT_COUNTS], 4, 1, d_l, l);
  wrong += compare_array(what, "recv.rank_counts", got + o[OUT_RANK_COUNTS], want + o[OUT_RANK_COUNTS],
                         b[OUT_RANK_COUNTS], 4, 2, d_lw, lw);
  wrong += compare_array(what, "out", got + o[OUT_OUT], want + o[OUT_OUT], b[OUT_OUT], 2, 2, d_out, th);
  return wrong;
}

/* Experts (over all ranks) that received nothing, summed over the rounds. */
static int empty_experts(const run_t *run) {
  int empty = 0;
  int32_t *counts = (int32_t *)malloc((size_t)run->L * sizeof *counts);
  for (int round = 0; round < run->rounds; round++)
    for (int d = 0; d < run->W; d++) {
      slot_counts(run, round, d, counts);
      for (int e = 0; e < run->L; e++) empty += counts[e] == 0;
    }
  free(counts);
  return empty;
}

/* The routing a case promises, so that a passing case means what its name says; returns the tokens (of
 * every rank and round) that have no expert. */
static int check_routing(const run_t *run) {
  const moe_case_t *c = run->c;
  int no_expert = 0;
  for (int round = 0; round < run->rounds; round++) {
    const int route = wl_moe_route(&run->gen, round);
    const int64_t target = (int64_t)(case_key(c, 2, (uint64_t)round, 0) % (uint64_t)c->E);
    for (int r = 0; r < run->W; r++) {
      const rank_in_t *ri = &run->in[(size_t)round * run->W + r];
      if (c->route == WL_ROUTE_EMPTY_RANK && r == round % run->W && ri->n != 0)
        GT_FAIL("%s: generator: rank %d has %d tokens in round %d, want none", c->name, r, ri->n, round);
      for (int t = 0; t < ri->n; t++) {
        const int64_t *ids = ri->ids + (size_t)t * c->K;
        int experts = 0, to_target = 0, most_on_one_rank = 0;
        for (int k = 0; k < c->K; k++) {
          experts += ids[k] >= 0;
          to_target |= ids[k] == target;
          int on_rank = 0;
          for (int j = 0; j < c->K; j++) on_rank += ids[k] >= 0 && ids[j] >= 0 && ids[j] / run->L == ids[k] / run->L;
          most_on_one_rank = on_rank > most_on_one_rank ? on_rank : most_on_one_rank;
        }
        no_expert += experts == 0;
        if ((route == WL_ROUTE_NONE && experts) || (route == WL_ROUTE_ONE_EXPERT && !to_target) ||
            (route == WL_ROUTE_SAME_RANK && c->K >= 2 && run->L >= 2 && most_on_one_rank < 2))
          GT_FAIL("%s: generator: rank %d token %d of round %d is not routed as '%s' says", c->name, r, t, round,
                  route_names[route]);
      }
    }
  }
  return no_expert;
}

/* This case's failures on every rank, for rank 0's summary line. */
static void summary(sy_comm_t comm, const run_t *run, int failures_before, const char *extra, double seconds) {
  const moe_case_t *c = run->c;
  int mine = gt_failures - failures_before, *all = (int *)calloc((size_t)run->W, sizeof(int));
  GT_OK(sy_comm_allgather_host(comm, &mine, all, sizeof mine));
  char result[128] = "ok";
  size_t len = 0;
  for (int r = 0; r < run->W; r++)
    if (all[r] && len < sizeof result)
      len += (size_t)snprintf(result + len, sizeof result - len, "%sFAILED on rank %d", len ? ", " : "", r);
  if (run->me == 0)
    printf(
        "[test rank 0] %-32s W=%d E=%-3d K=%-2d H=%-4d T=%-3d wire=%-9s flags=%-10s ids=%s rounds=%-2d %-9s "
        "route=%-10s %s: %s (%.2f s)\n",
        c->name, run->W, c->E, c->K, c->H, c->T, wire_name(c->wire), c->flags & PE ? "PER_EXPERT" : "0",
        c->id_type == I32 ? "i32" : "i64", run->rounds, mode_names[c->mode], route_names[c->route], extra, result,
        seconds);
  fflush(stdout);
  free(all);
}

/* ---- an eager case: its rounds enqueued back to back on one stream, then checked ---------------------------- */

/* Enqueues one round of this rank: inputs in, outputs poisoned, dispatch, expert outputs in, combine, outputs
 * out (h_got). The halves form overwrites each input as soon as the half that reads it is done on the stream. */
static void gpu_round(const run_t *run, sy_moe_t moe, int round, uint8_t *d_in, uint8_t *d_out, const uint8_t *h_in,
                      uint8_t *h_got, cudaStream_t stream) {
  const moe_case_t *c = run->c;
  const size_t *o = run->in_off;
  round_args_t a = round_args(run, round, run->me, d_in, d_out);
  GT_CUDA(cudaMemcpyAsync(d_in, h_in, o[IN_Y], cudaMemcpyHostToDevice, stream));
  GT_CUDA(cudaMemsetAsync(d_out, POISON, run->out_total, stream));
  if (!a.halves) {
    GT_OK(sy_moe_dispatch(moe, a.tokens, a.n, a.ids, c->id_type, a.w, &a.recv, stream));
  } else {
    GT_OK(sy_moe_dispatch_send(moe, a.tokens, a.n, a.ids, c->id_type, a.w, stream));
    GT_CUDA(cudaMemsetAsync(d_in, 0xFF, o[IN_CIDS], stream)); /* the dispatch's tokens, ids, weights */
    GT_OK(sy_moe_dispatch_recv(moe, &a.recv, stream));
  }
  /* The experts' outputs arrive after the dispatch, as from the expert GEMMs. */
  GT_CUDA(cudaMemcpyAsync(d_in + o[IN_Y], h_in + o[IN_Y], run->in_bytes[IN_Y], cudaMemcpyHostToDevice, stream));
  if (!a.halves) {
    GT_OK(sy_moe_combine(moe, a.y, a.cids, a.combine_type, a.cw, a.n, a.out, stream));
  } else {
    GT_OK(sy_moe_combine_send(moe, a.y, stream));
    GT_CUDA(cudaMemsetAsync(d_in + o[IN_Y], 0xFF, run->in_bytes[IN_Y], stream));
    GT_OK(sy_moe_combine_recv(moe, a.cids, a.combine_type, a.cw, a.n, a.out, stream));
  }
  GT_CUDA(cudaMemcpyAsync(h_got, d_out, run->out_total, cudaMemcpyDeviceToHost, stream));
}

static void check_async(sy_comm_t comm, const char *what) {
  sy_status_t async = SY_ERR_INTERNAL;
  char detail[256] = "";
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  if (async != SY_SUCCESS) {
    GT_FAIL("%s: async error %s: %s", what, sy_status_name(async), detail);
    exit(1); /* every later call would return it */
  }
}

static void run_case(sy_comm_t comm, int rank, int W, const moe_case_t *c, cudaStream_t stream) {
  const double t0 = gt_now_s();
  const int before = gt_failures;
  run_t run;
  run_init(&run, c, W, rank);
  gt_run_host(W, oracle_rank, &run); /* before the GPU part: the ranks then start it together */
  uint8_t *d_in, *d_out, *h_in, *h_got;
  GT_CUDA(cudaMalloc((void **)&d_in, run.in_total));
  GT_CUDA(cudaMalloc((void **)&d_out, run.out_total));
  GT_CUDA(cudaMallocHost((void **)&h_in, (size_t)run.rounds * run.in_total));
  GT_CUDA(cudaMallocHost((void **)&h_got, (size_t)run.rounds * run.out_total));
  for (int round = 0; round < run.rounds; round++)
    fill_inputs(&run, round, rank, round_combine_type(c, round), h_in + (size_t)round * run.in_total);
  const sy_moe_config_t config = case_config(c);
  sy_moe_t moe = NULL;
  GT_OK(sy_moe_create(comm, &config, &moe));
  for (int round = 0; round < run.rounds; round++)
    gpu_round(&run, moe, round, d_in, d_out, h_in + (size_t)round * run.in_total, h_got + (size_t)round * run.out_total,
              stream);
  GT_CUDA(cudaStreamSynchronize(stream));
  check_async(comm, c->name);
  GT_OK(sy_moe_destroy(moe));
  for (int round = 0; round < run.rounds; round++) {
    char what[160];
    snprintf(what, sizeof what, "%s (W=%d), round %d of %d (%s, %d tokens here)", c->name, W, round, run.rounds,
             round_args(&run, round, rank, d_in, d_out).halves ? "halves" : "one call",
             run.in[(size_t)round * W + rank].n);
    compare_round(&run, what, h_got + (size_t)round * run.out_total, run.want + (size_t)round * run.out_total);
  }
  char extra[96];
  snprintf(extra, sizeof extra, "%4d empty experts, %4d tokens with none", empty_experts(&run), check_routing(&run));
  summary(comm, &run, before, extra, gt_now_s() - t0);
  GT_CUDA(cudaFree(d_in));
  GT_CUDA(cudaFree(d_out));
  GT_CUDA(cudaFreeHost(h_in));
  GT_CUDA(cudaFreeHost(h_got));
  run_free(&run);
}

/* ---- ids the device must reject ---------------------------------------------------------------------------- */

/* On rank 0, token 3's k = 1 repeats its k = 0 and token 5's k = 2 is num_experts. The device reports them
 * through sy_comm_async_error — sticky, so this runs last — and treats each as -1: the dispatch's results equal
 * those of the same call with -1 there, run first (dispatch and combine, then the dispatch with the bad ids).
 * Top-k 4: dispatch_send's one-pass routing, which finds repeats by shuffles across the token's lanes. */
/* A malformed SY_MOE_DIRECT fails sy_moe_create on every rank (after the collective reservation, so no rank
 * is left waiting), creating nothing; the variable's previous value is restored. */
static void run_bad_env(sy_comm_t comm, int rank) {
  const moe_case_t c = {.name = "bad env",
                        .E = 8,
                        .K = 2,
                        .H = 256,
                        .T = 4,
                        .wire = FP8,
                        .flags = 0,
                        .id_type = I32,
                        .route = WL_ROUTE_RANDOM,
                        .rounds = 1,
                        .mode = MODE_ONE_CALL,
                        .specials = 0,
                        .salt = 7};
  const char *was = getenv("SY_MOE_DIRECT");
  char saved[64] = "";
  if (was) snprintf(saved, sizeof saved, "%s", was);
  setenv("SY_MOE_DIRECT", "maybe", 1);
  const sy_moe_config_t config = case_config(&c);
  sy_moe_t moe = NULL;
  const sy_status_t st = sy_moe_create(comm, &config, &moe);
  GT_CHECK(st == SY_ERR_INVALID_ARG);
  GT_CHECK(moe == NULL);
  if (was) setenv("SY_MOE_DIRECT", saved, 1);
  else unsetenv("SY_MOE_DIRECT");
  if (rank == 0) printf("[test rank 0] %-32s: SY_MOE_DIRECT=maybe -> %s\n", c.name, sy_status_name(st));
}

static void run_bad_ids(sy_comm_t comm, int rank, int W, cudaStream_t stream) {
  const moe_case_t c = {.name = "bad ids",
                        .E = 8 * W,
                        .K = 4,
                        .H = 256,
                        .T = 16,
                        .wire = FP8,
                        .flags = 0,
                        .id_type = I32,
                        .route = WL_ROUTE_RANDOM,
                        .rounds = 1,
                        .mode = MODE_ONE_CALL,
                        .specials = 0,
                        .salt = 42};
  const int K = c.K;
  run_t run;
  run_init(&run, &c, W, rank);
  rank_in_t *r0 = &run.in[0]; /* round 0, rank 0: every token, and the two rows set */
  r0->n = c.T;
  wl_moe_ids(&run.gen, 0, 0, r0->n, r0->ids);
  wl_moe_weights(&run.gen, 0, 0, r0->n, 0, r0->w);
  wl_moe_weights(&run.gen, 0, 0, r0->n, 1, r0->cw);
  wl_moe_tokens(&run.gen, 0, 0, r0->n, r0->tok);
  const int64_t row3[4] = {1, -1, 2, 3};
  memcpy(r0->ids + 3 * K, row3, sizeof row3);
  r0->ids[5 * K + 2] = -1;
  uint8_t *d_in, *d_out, *h_in, *h_got;
  GT_CUDA(cudaMalloc((void **)&d_in, run.in_total));
  GT_CUDA(cudaMalloc((void **)&d_out, run.out_total));
  GT_CUDA(cudaMallocHost((void **)&h_in, 2 * run.in_total));
  GT_CUDA(cudaMallocHost((void **)&h_got, 2 * run.out_total));
  fill_inputs(&run, 0, rank, I32, h_in); /* the call with -1 */
  r0->ids[3 * K + 1] = 1;
  r0->ids[5 * K + 2] = c.E;
  fill_inputs(&run, 0, rank, I32, h_in + run.in_total); /* the bad ids */
  const sy_moe_config_t config = case_config(&c);
  sy_moe_t moe = NULL;
  GT_OK(sy_moe_create(comm, &config, &moe));
  for (int pass = 0; pass < 2; pass++) {
    round_args_t a = round_args(&run, 0, rank, d_in, d_out);
    GT_CUDA(cudaMemcpyAsync(d_in, h_in + (size_t)pass * run.in_total, run.in_total, cudaMemcpyHostToDevice, stream));
    GT_CUDA(cudaMemsetAsync(d_out, POISON, run.out_total, stream));
    GT_OK(sy_moe_dispatch(moe, a.tokens, a.n, a.ids, c.id_type, a.w, &a.recv, stream));
    if (pass == 0) GT_OK(sy_moe_combine(moe, a.y, a.cids, I32, a.cw, a.n, a.out, stream));
    GT_CUDA(
        cudaMemcpyAsync(h_got + (size_t)pass * run.out_total, d_out, run.out_total, cudaMemcpyDeviceToHost, stream));
  }
  GT_CUDA(cudaStreamSynchronize(stream));
  static const char *const names[OUT_OUT] = {"recv.tokens", "recv.scales", "recv.src", "recv.expert_counts",
                                             "recv.rank_counts"};
  for (int o = 0; o < OUT_OUT; o++) {
    const uint8_t *x = h_got + run.out_off[o], *y = h_got + run.out_total + run.out_off[o];
    size_t at = 0;
    while (at < run.out_bytes[o] && x[at] == y[at]) at++;
    if (at < run.out_bytes[o])
      GT_FAIL("bad ids (W=%d): %s differs from the call with -1 for the bad ids at byte %zu of %zu", W, names[o], at,
              run.out_bytes[o]);
  }
  sy_status_t async = SY_ERR_INTERNAL;
  char detail[256] = "", want3[64], want5[64];
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  snprintf(want3, sizeof want3, "peer 3: expected 1, saw 1 ");
  snprintf(want5, sizeof want5, "peer 5: expected 2, saw %d ", c.E);
  if (rank == 0) {
    GT_CHECK(async == SY_ERR_INVALID_ARG);
    if (!strstr(detail, "an expert id outside") || (!strstr(detail, want3) && !strstr(detail, want5)))
      GT_FAIL("bad ids: rank 0 reports \"%s\", not token 3's repeat or token 5's id %d", detail, c.E);
  } else if (async != SY_SUCCESS) {
    GT_FAIL("bad ids: rank %d has no bad id but reports %s: %s", rank, sy_status_name(async), detail);
  }
  if (rank == 0) printf("[test rank 0] %-32s W=%d: reported as \"%.80s...\"\n", c.name, W, detail);
  GT_OK(sy_moe_destroy(moe));
  GT_CUDA(cudaFree(d_in));
  GT_CUDA(cudaFree(d_out));
  GT_CUDA(cudaFreeHost(h_in));
  GT_CUDA(cudaFreeHost(h_got));
  run_free(&run);
}

/* ---- the graph case ----------------------------------------------------------------------------------------- */

/* Input set `set` into the captured input buffers: the fresh data of one replay (or eager round). */
static void load_set(const run_t *run, uint8_t *d_in, const uint8_t *d_pool, int set, cudaStream_t stream) {
  GT_CUDA(cudaMemcpyAsync(d_in, d_pool + (size_t)set * run->in_total, run->in_total, cudaMemcpyDeviceToDevice, stream));
}

/* One round enqueued on stream: the one-call forms, or the four halves. */
static void enqueue_round(sy_moe_t moe, const moe_case_t *c, const round_args_t *a, int halves, cudaStream_t stream) {
  if (!halves) {
    GT_OK(sy_moe_dispatch(moe, a->tokens, a->n, a->ids, c->id_type, a->w, &a->recv, stream));
    GT_OK(sy_moe_combine(moe, a->y, a->cids, a->combine_type, a->cw, a->n, a->out, stream));
  } else {
    GT_OK(sy_moe_dispatch_send(moe, a->tokens, a->n, a->ids, c->id_type, a->w, stream));
    GT_OK(sy_moe_dispatch_recv(moe, &a->recv, stream));
    GT_OK(sy_moe_combine_send(moe, a->y, stream));
    GT_OK(sy_moe_combine_recv(moe, a->cids, a->combine_type, a->cw, a->n, a->out, stream));
  }
}

/* One eager round of input set `set` (already in d_in), checked at once. */
static void graph_eager_round(const run_t *run, sy_moe_t moe, int set, int halves, uint8_t *d_in, uint8_t *d_out,
                              uint8_t *h_got, cudaStream_t stream, const char *when) {
  const moe_case_t *c = run->c;
  round_args_t a = round_args(run, set, run->me, d_in, d_out);
  GT_CUDA(cudaMemsetAsync(d_out, POISON, run->out_total, stream));
  enqueue_round(moe, c, &a, halves, stream);
  GT_CUDA(cudaMemcpyAsync(h_got, d_out, run->out_total, cudaMemcpyDeviceToHost, stream));
  GT_CUDA(cudaStreamSynchronize(stream));
  char what[160];
  snprintf(what, sizeof what, "%s (W=%d): eager round %s, input set %d", c->name, run->W, when, set);
  compare_round(run, what, h_got, run->want + (size_t)set * run->out_total);
}

static void run_graph_case(sy_comm_t comm, int rank, int W, const moe_case_t *base, int replays, cudaStream_t stream) {
  const double t0 = gt_now_s();
  const int before = gt_failures;
  moe_case_t gc = *base;
  gc.E = 8 * W;
  const moe_case_t *c = &gc;
  run_t run;
  run_init(&run, c, W, rank);
  gt_run_host(W, oracle_rank, &run); /* every input set's expected outputs, one set per oracle round */
  /* Every set's input block on the device; before each replay one copy brings the set into the captured buffers. */
  uint8_t *d_pool, *d_in, *d_out, *h_in, *h_got;
  GT_CUDA(cudaMalloc((void **)&d_pool, (size_t)run.rounds * run.in_total));
  GT_CUDA(cudaMalloc((void **)&d_in, run.in_total));
  GT_CUDA(cudaMalloc((void **)&d_out, run.out_total));
  GT_CUDA(cudaMallocHost((void **)&h_in, run.in_total));
  GT_CUDA(cudaMallocHost((void **)&h_got, run.out_total));
  for (int set = 0; set < run.rounds; set++) {
    fill_inputs(&run, set, rank, round_combine_type(c, set), h_in);
    GT_CUDA(cudaMemcpy(d_pool + (size_t)set * run.in_total, h_in, run.in_total, cudaMemcpyHostToDevice));
  }
  const sy_moe_config_t config = case_config(c);
  sy_moe_t moe = NULL;
  GT_OK(sy_moe_create(comm, &config, &moe));
  const round_args_t a = round_args(&run, 0, rank, d_in, d_out); /* the same pointers in every set */

  const int before_set = run.rounds - 1, after_set = run.rounds - 2;
  load_set(&run, d_in, d_pool, before_set, stream);
  graph_eager_round(&run, moe, before_set, 0, d_in, d_out, h_got, stream, "before the capture");

  /* Rejected at the boundary, changing nothing (valid inputs otherwise): the legacy default stream, which a
   * capture could not use either, and a half out of order. The object's next half is still dispatch_send. */
  GT_CHECK(sy_moe_dispatch_send(moe, a.tokens, a.n, a.ids, c->id_type, a.w, NULL) == SY_ERR_INVALID_ARG);
  GT_CHECK(sy_moe_combine_send(moe, a.y, stream) == SY_ERR_INVALID_ARG);

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  GT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue_round(moe, c, &a, c->mode != MODE_ONE_CALL, stream);
  GT_CUDA(cudaStreamEndCapture(stream, &graph));
  GT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  /* Every rank replays the same number of times whatever it finds (stopping early would strand the peers). */
  int checked = 0;
  const double r0 = gt_now_s();
  for (int i = 0; i < replays; i++) {
    const int set = i % run.rounds, check = i % GRAPH_CHECK_EVERY == 0 || i == replays - 1;
    if (check) GT_CUDA(cudaMemsetAsync(d_out, POISON, run.out_total, stream));
    load_set(&run, d_in, d_pool, set, stream);
    GT_CUDA(cudaGraphLaunch(exec, stream));
    if (!check) continue;
    GT_CUDA(cudaMemcpyAsync(h_got, d_out, run.out_total, cudaMemcpyDeviceToHost, stream));
    GT_CUDA(cudaStreamSynchronize(stream));
    char what[160];
    snprintf(what, sizeof what, "%s (W=%d): replay %d of %d, input set %d", c->name, W, i, replays, set);
    compare_round(&run, what, h_got, run.want + (size_t)set * run.out_total);
    checked++;
  }
  GT_CUDA(cudaStreamSynchronize(stream));
  const double replay_s = gt_now_s() - r0;
  check_async(comm, c->name);

  /* The object goes on eagerly after the replays: its phase lives on the device. */
  load_set(&run, d_in, d_pool, after_set, stream);
  graph_eager_round(&run, moe, after_set, 1, d_in, d_out, h_got, stream, "after the replays");
  check_async(comm, c->name);

  GT_CUDA(cudaGraphExecDestroy(exec));
  GT_CUDA(cudaGraphDestroy(graph));
  GT_OK(sy_moe_destroy(moe));
  char extra[128];
  snprintf(extra, sizeof extra, "%d replays ran, %d checked, %.1f us each", replays, checked,
           replays ? replay_s * 1e6 / replays : 0.0);
  summary(comm, &run, before, extra, gt_now_s() - t0);
  GT_CUDA(cudaFree(d_pool));
  GT_CUDA(cudaFree(d_in));
  GT_CUDA(cudaFree(d_out));
  GT_CUDA(cudaFreeHost(h_in));
  GT_CUDA(cudaFreeHost(h_got));
  run_free(&run);
}

/* ---- main ------------------------------------------------------------------------------------------------ */

/* "512M", "1G", "1073741824": SY_HEAP_SIZE as the library reads it (K/M/G/T, powers of 1024); 0 if unreadable. */
static size_t parse_size(const char *text) {
  char *end = NULL;
  unsigned long long v = strtoull(text, &end, 10);
  if (end == text) return 0;
  while (*end == ' ') end++;
  int shift = 0;
  switch (*end) {
    case 'k':
    case 'K': shift = 10; break;
    case 'm':
    case 'M': shift = 20; break;
    case 'g':
    case 'G': shift = 30; break;
    case 't':
    case 'T': shift = 40; break;
    default: break;
  }
  return (size_t)(v << shift);
}

int main(void) {
  const char *seed_env = getenv("SY_TEST_SEED");
  if (seed_env) test_seed = strtoull(seed_env, NULL, 0);
  /* The largest workspace here is well under 100 MB; 1 GiB (the default) unless the caller says otherwise.
   * Checked below against every case's sy_moe_workspace_size. */
  setenv("SY_HEAP_SIZE", "1G", 0);
  int rank, W;
  sy_comm_t comm = gt_init("test_gpu_moe", &rank, &W);
  sy_backend_t backend;
  GT_OK(sy_comm_backend(comm, &backend));
  if (backend != SY_BACKEND_CUDA)
    GT_FAIL("the communicator's backend is %s, want cuda (SY_BACKEND?)", sy_backend_name(backend));
  cudaStream_t stream;
  GT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int replays = 10000;
  const char *replays_env = getenv("SY_MOE_GRAPH_REPLAYS");
  if (replays_env && atoi(replays_env) > 0) replays = atoi(replays_env);

  /* The cases this world runs, and the symmetric heap they need. */
  const int ncases = (int)(sizeof cases / sizeof cases[0]), ngraphs = (int)(sizeof graph_cases / sizeof graph_cases[0]);
  size_t most = 0, heap = parse_size(getenv("SY_HEAP_SIZE"));
  for (int i = 0; i < ncases + ngraphs; i++) {
    moe_case_t c = i < ncases ? cases[i] : graph_cases[i - ncases];
    if (c.graph_share) c.E = 8 * W;
    if (c.E % W) continue;
    const sy_moe_config_t config = case_config(&c);
    size_t bytes = 0;
    GT_OK(sy_moe_workspace_size(comm, &config, &bytes));
    most = bytes > most ? bytes : most;
  }
  if (heap && most > heap) {
    GT_FAIL("a case needs %zu bytes of symmetric workspace; SY_HEAP_SIZE=%s is smaller", most, getenv("SY_HEAP_SIZE"));
    exit(1);
  }
  if (rank == 0)
    printf("[test rank 0] %d ranks, seed 0x%llx, largest workspace %.1f MiB of a %.0f MiB heap, %d graph replays\n", W,
           (unsigned long long)test_seed, most / 1048576.0, heap / 1048576.0, replays);

  const double t0 = gt_now_s();
  int ran = 0, skipped = 0;
  for (int i = 0; i < ncases; i++) {
    if (cases[i].E % W) {
      if (rank == 0)
        printf("[test rank 0] %-32s W=%d E=%-3d: skipped (%d experts do not divide among %d ranks)\n", cases[i].name, W,
               cases[i].E, cases[i].E, W);
      skipped++;
      continue;
    }
    run_case(comm, rank, W, &cases[i], stream);
    ran++;
  }
  for (int i = 0; i < ngraphs; i++) {
    int n = replays / graph_cases[i].graph_share;
    run_graph_case(comm, rank, W, &graph_cases[i], n > 0 ? n : 1, stream);
    ran++;
  }
  check_async(comm, "at the end");
  run_bad_env(comm, rank);
  ran++;
  run_bad_ids(comm, rank, W, stream); /* last: its error is sticky */
  ran++;
  if (rank == 0) printf("[test rank 0] %d cases run, %d skipped, in %.1f s\n", ran, skipped, gt_now_s() - t0);
  GT_CUDA(cudaStreamDestroy(stream));
  GT_OK(sy_comm_destroy(comm));
  return gt_finish("test_gpu_moe");
}
