/*
 * gpu_moe_test.h — what the MoE GPU tests (test_gpu_moe.c: the eager cases, a malformed SY_MOE_DIRECT and the
 * ids the device must reject; test_gpu_moe_graph.c: the CUDA graph cases) share: a case and its
 * configuration; every rank's seeded inputs of every round (tests/workload's generators in the GPU tests'
 * draw; SY_TEST_SEED overrides the seed) and the layout of one rank's input and output blocks; what one rank
 * passes in one round; the oracle (the host backend on W threads, the same calls on the same inputs); one
 * round's outputs compared array by array, the first differences named; a case's summary line; the tests'
 * opening (seed, heap, a cuda communicator, a stream) and the check that the heap holds every case's workspace.
 */
#ifndef SY_GPU_MOE_TEST_H
#define SY_GPU_MOE_TEST_H

#include "gpu_test.h"

#define POISON 0xEE

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

static inline const char *wire_name(sy_moe_wire_t w) { return w == FP8 ? "fp8" : w == UE8 ? "fp8-ue8m0" : "bf16"; }

static inline sy_moe_config_t case_config(const moe_case_t *c) {
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
static inline wl_moe_t case_gen(const moe_case_t *c, int W) {
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

static inline uint64_t case_key(const moe_case_t *c, uint64_t what, uint64_t round, uint64_t rank) {
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

static inline size_t lay_out(size_t *off, const size_t *bytes, int n) {
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    off[i] = at;
    at += (bytes[i] + 255) / 256 * 256;
  }
  return at ? at : 256;
}

static inline void run_init(run_t *run, const moe_case_t *c, int W, int me) {
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

static inline void run_free(run_t *run) {
  for (size_t i = 0; i < (size_t)run->rounds * run->W; i++)
    free(run->in[i].ids), free(run->in[i].w), free(run->in[i].cw), free(run->in[i].tok);
  free(run->in);
  free(run->want);
}

/* Slots each of rank `dest`'s local experts fills in `round`, from every rank's routing. */
static inline void slot_counts(const run_t *run, int round, int dest, int32_t *counts) {
  memset(counts, 0, (size_t)run->L * sizeof *counts);
  for (int s = 0; s < run->W; s++) {
    const rank_in_t *ri = &run->in[(size_t)round * run->W + s];
    for (size_t i = 0; i < (size_t)ri->n * run->c->K; i++)
      if (ri->ids[i] >= 0 && ri->ids[i] / run->L == dest) counts[ri->ids[i] % run->L]++;
  }
}

static inline void put_ids(const int64_t *ids, size_t count, sy_index_type_t type, void *buf) {
  for (size_t i = 0; i < count; i++) {
    if (type == I64) ((int64_t *)buf)[i] = ids[i];
    else ((int32_t *)buf)[i] = (int32_t)ids[i];
  }
}

/* Expert outputs [L][S][H] of `rank` in `round`: element h of local expert e's slot s is a function of
 * (round, rank, e, s, h), generated for the filled slots; the rest stay poison (a combine reading one shows). */
static inline void gen_expert_out(const run_t *run, int round, int rank, uint16_t *y) {
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
static inline void fill_inputs(const run_t *run, int round, int rank, sy_index_type_t combine_type, uint8_t *block) {
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

static inline sy_index_type_t other_type(sy_index_type_t t) { return t == I32 ? I64 : I32; }

static inline sy_index_type_t round_combine_type(const moe_case_t *c, int round) {
  if (c->graph_share) return c->combine_other ? other_type(c->id_type) : c->id_type;
  return round % 3 == 2 ? other_type(c->id_type) : c->id_type;
}

static inline round_args_t round_args(const run_t *run, int round, int rank, uint8_t *in, uint8_t *out) {
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

static inline void oracle_rank(int r, sy_comm_t comm, void *arg) {
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

static inline int all_poison(const uint8_t *p, size_t bytes) {
  for (size_t i = 0; i < bytes; i++)
    if (p[i] != POISON) return 0;
  return 1;
}

/* One output array, element by element; the first few differences named by their indices (dims outermost
 * first) and whether either side is the poison. Returns the elements that differ. */
static inline size_t compare_array(const char *what, const char *name, const uint8_t *got, const uint8_t *want,
                                   size_t bytes, size_t elem, int ndims, const size_t *dims,
                                   const char *const *dim_names) {
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
static inline size_t compare_round(const run_t *run, const char *what, const uint8_t *got, const uint8_t *want) {
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

/* ---- a case's summary line --------------------------------------------------------------------------------- */

/* This case's failures on every rank, for rank 0's summary line. */
static inline void summary(sy_comm_t comm, const run_t *run, int failures_before, const char *extra, double seconds) {
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

/* ---- the tests' opening --------------------------------------------------------------------------------- */

static inline void check_async(sy_comm_t comm, const char *what) {
  sy_status_t async = SY_ERR_INTERNAL;
  char detail[256] = "";
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  if (async != SY_SUCCESS) {
    GT_FAIL("%s: async error %s: %s", what, sy_status_name(async), detail);
    exit(1); /* every later call would return it */
  }
}

/* "512M", "1G", "1073741824": SY_HEAP_SIZE as the library reads it (K/M/G/T, powers of 1024); 0 if unreadable. */
static inline size_t parse_size(const char *text) {
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

/* The opening of the MoE GPU tests: the seed (SY_TEST_SEED overrides it); the symmetric heap, 1 GiB (the
 * default) unless the caller says otherwise (the largest workspace here is well under 100 MB; moe_check_heap
 * checks it against every case's sy_moe_workspace_size); a communicator, on the cuda backend; a stream. */
static inline sy_comm_t moe_test_open(const char *test, int *rank, int *W, cudaStream_t *stream) {
  const char *seed_env = getenv("SY_TEST_SEED");
  if (seed_env) test_seed = strtoull(seed_env, NULL, 0);
  setenv("SY_HEAP_SIZE", "1G", 0);
  sy_comm_t comm = gt_init(test, rank, W);
  sy_backend_t backend;
  GT_OK(sy_comm_backend(comm, &backend));
  if (backend != SY_BACKEND_CUDA)
    GT_FAIL("the communicator's backend is %s, want cuda (SY_BACKEND?)", sy_backend_name(backend));
  GT_CUDA(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking));
  return comm;
}

/* The largest symmetric workspace of the cases this world runs (a graph case with 8 experts per rank; a case
 * whose experts do not divide among the ranks does not run); the test ends here if SY_HEAP_SIZE is smaller.
 * *heap: SY_HEAP_SIZE in bytes, 0 if unreadable. */
static inline size_t moe_check_heap(sy_comm_t comm, int W, const moe_case_t *cases, int n, size_t *heap) {
  size_t most = 0;
  *heap = parse_size(getenv("SY_HEAP_SIZE"));
  for (int i = 0; i < n; i++) {
    moe_case_t c = cases[i];
    if (c.graph_share) c.E = 8 * W;
    if (c.E % W) continue;
    const sy_moe_config_t config = case_config(&c);
    size_t bytes = 0;
    GT_OK(sy_moe_workspace_size(comm, &config, &bytes));
    most = bytes > most ? bytes : most;
  }
  if (*heap && most > *heap) {
    GT_FAIL("a case needs %zu bytes of symmetric workspace; SY_HEAP_SIZE=%s is smaller", most, getenv("SY_HEAP_SIZE"));
    exit(1);
  }
  return most;
}

#endif
