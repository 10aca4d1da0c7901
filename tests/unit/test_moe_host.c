/*
 * test_moe_host.c — the MoE low-latency dispatch and combine on the host backend (ranks are threads), bit for
 * bit against the expectation moe_test.h computes from the header's words, every output poisoned first:
 *  - W = 1, 2, 4, 8; 8 to 288 experts; top-k 1, 2, 4, 8, 16 (and top_k = num_experts); hidden 128 to 7168;
 *    the FP8, FP8_UE8M0 and BF16 wires; the default (rank-reduced) and SY_MOE_PER_EXPERT combines; int32 and
 *    int64 ids (and the combine given the other index type than the dispatch);
 *  - routing: random, every token to one expert, a rank with no tokens, several of a token's experts on one
 *    rank, ids of -1 (tokens with no expert get zeros), every rank full; experts that receive nothing;
 *  - special values (NaN, infinities, -0.0, subnormals) in tokens and expert outputs;
 *  - the one-call forms and the halves called separately, with skewed ranks (random sleeps, one rank late
 *    every round so the others run a half ahead), an all-to-all between halves, inputs overwritten as soon as
 *    dispatch_send returns, the default combine given other (or no) weights than the dispatch's;
 *  - 1,000 back-to-back dispatch+combine calls with fresh data each time;
 *  - the reference functions of src/ref/moe_ref.c (for GPU tests) against the same expectation;
 *  - sy_moe_workspace_size against the formula.
 * SY_TEST_SEED overrides the seed; a failure prints it.
 */
#include "moe_test.h"
#include "ref/moe_ref.h"

enum { MODE_ONE_CALL, MODE_HALVES, MODE_ALTERNATE };

#define FP8  SY_MOE_WIRE_FP8
#define UE8  SY_MOE_WIRE_FP8_UE8M0
#define BF16 SY_MOE_WIRE_BF16
#define PE   SY_MOE_PER_EXPERT
#define I32  SY_INDEX_INT32
#define I64  SY_INDEX_INT64

/* name, W, E, K, H, T, wire, flags, ids, route, rounds, mode, specials, check_ref */
static const moe_case_t cases[] = {
    {"one rank", 1, 8, 2, 128, 16, FP8, 0, I32, WL_ROUTE_RANDOM, 3, MODE_ONE_CALL, 0, 1, 1},
    {"two ranks top-1 ue8m0 per-expert", 2, 8, 1, 256, 16, UE8, PE, I64, WL_ROUTE_RANDOM, 3, MODE_HALVES, 0, 1, 2},
    {"same rank bf16", 2, 16, 8, 128, 12, BF16, 0, I64, WL_ROUTE_SAME_RANK, 3, MODE_HALVES, 0, 1, 3},
    {"hidden 2048", 4, 8, 2, 2048, 6, FP8, 0, I32, WL_ROUTE_RANDOM, 2, MODE_ONE_CALL, 0, 1, 4},
    {"top-16", 4, 32, 16, 128, 8, UE8, 0, I32, WL_ROUTE_RANDOM, 2, MODE_HALVES, 0, 1, 5},
    {"hidden 4096 bf16 per-expert", 4, 64, 8, 4096, 4, BF16, PE, I32, WL_ROUTE_RANDOM, 2, MODE_HALVES, 0, 0, 6},
    {"hidden 7168 eight ranks", 8, 16, 2, 7168, 3, FP8, 0, I64, WL_ROUTE_RANDOM, 1, MODE_ONE_CALL, 0, 0, 7},
    {"288 experts", 8, 288, 8, 128, 16, FP8, 0, I32, WL_ROUTE_RANDOM, 2, MODE_HALVES, 0, 0, 8},
    {"288 experts top-16 per-expert", 8, 288, 16, 256, 8, BF16, PE, I64, WL_ROUTE_RANDOM, 1, MODE_HALVES, 0, 0, 9},
    {"one expert", 2, 8, 2, 128, 16, FP8, 0, I32, WL_ROUTE_ONE_EXPERT, 2, MODE_ONE_CALL, 0, 1, 10},
    {"one expert per-expert", 4, 16, 2, 128, 16, FP8, PE, I32, WL_ROUTE_ONE_EXPERT, 2, MODE_HALVES, 0, 1, 11},
    {"empty rank", 4, 32, 4, 128, 8, FP8, 0, I32, WL_ROUTE_EMPTY_RANK, 4, MODE_ALTERNATE, 0, 1, 12},
    {"no experts", 4, 8, 4, 128, 8, BF16, 0, I32, WL_ROUTE_NONE, 1, MODE_HALVES, 0, 1, 13},
    {"same rank ue8m0", 2, 8, 8, 128, 8, UE8, 0, I64, WL_ROUTE_SAME_RANK, 2, MODE_ALTERNATE, 0, 1, 14},
    {"one rank 288 experts 7168", 1, 288, 16, 7168, 2, UE8, PE, I32, WL_ROUTE_RANDOM, 1, MODE_ONE_CALL, 0, 0, 15},
    {"one expert per rank", 8, 8, 1, 4096, 2, UE8, PE, I64, WL_ROUTE_FULL, 1, MODE_HALVES, 0, 0, 16},
    {"top-k = experts", 2, 4, 4, 128, 8, FP8, 0, I32, WL_ROUTE_RANDOM, 2, MODE_ALTERNATE, 0, 1, 17},
    {"bf16 7168 full", 4, 16, 2, 7168, 4, BF16, 0, I32, WL_ROUTE_FULL, 1, MODE_HALVES, 0, 0, 18},
    {"specials fp8", 2, 8, 4, 256, 16, FP8, 0, I32, WL_ROUTE_FULL, 2, MODE_ONE_CALL, 1, 1, 19},
    {"specials ue8m0 per-expert", 4, 16, 8, 128, 8, UE8, PE, I64, WL_ROUTE_RANDOM, 2, MODE_HALVES, 1, 1, 20},
    {"specials bf16 same rank", 2, 16, 8, 128, 8, BF16, 0, I32, WL_ROUTE_SAME_RANK, 2, MODE_ALTERNATE, 1, 1, 21},
};

static const moe_case_t back_to_back[] = {
    {"1000 calls", 4, 8, 2, 128, 4, FP8, 0, I32, WL_ROUTE_RANDOM, 1000, MODE_ALTERNATE, 0, 0, 30},
    {"1000 calls per-expert", 2, 8, 4, 128, 4, UE8, PE, I64, WL_ROUTE_RANDOM, 1000, MODE_ALTERNATE, 0, 0, 31},
};

/* ---- one rank of a case ------------------------------------------------------------------------------------- */

typedef struct shared {
  const moe_case_t *c;
  int empty_experts; /* experts that received nothing in some round, over all ranks */
  int calls;         /* dispatch+combine pairs completed */
} shared_t;

static size_t up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* The workspace formula, written out here. */
static size_t formula_bytes(const moe_case_t *c) {
  const int fp8 = c->wire != SY_MOE_WIRE_BF16;
  const size_t H = (size_t)c->H,
               msg = up(16 + up(12 * (size_t)c->K, 16) + H * (fp8 ? 1 : 2) + (fp8 ? H / 128 * 4 : 0), 16);
  const size_t per_source = (size_t)c->T * ((c->flags & SY_MOE_PER_EXPERT) ? c->K : 1);
  const size_t dispatch = up((size_t)c->W * per_source * msg, 256);
  const size_t combine = up((size_t)((c->flags & SY_MOE_PER_EXPERT) ? c->K : c->W) * c->T * H * 2, 256);
  return 2 * (dispatch + combine) + up(2 * (size_t)c->W * 32, 256) + up(2 * (size_t)c->E * 4, 256);
}

typedef struct recv_bufs {
  sy_moe_recv_t recv;
  size_t bytes[5]; /* tokens, scales, src, expert_counts, rank_counts */
} recv_bufs_t;

static void recv_alloc(const moe_case_t *c, recv_bufs_t *b) {
  const size_t L = (size_t)(c->E / c->W), S = (size_t)c->W * c->T, fp8 = c->wire != SY_MOE_WIRE_BF16;
  b->bytes[0] = L * S * c->H * (fp8 ? 1 : 2);
  b->bytes[1] = fp8 ? L * (size_t)(c->H / 128) * S * 4 : 0;
  b->bytes[2] = L * S * 8;
  b->bytes[3] = L * 4;
  b->bytes[4] = L * (size_t)c->W * 4;
  b->recv.tokens = malloc(b->bytes[0]);
  b->recv.scales = fp8 ? malloc(b->bytes[1]) : NULL;
  b->recv.src = malloc(b->bytes[2]);
  b->recv.expert_counts = malloc(b->bytes[3]);
  b->recv.rank_counts = malloc(b->bytes[4]);
}

static void recv_poison(recv_bufs_t *b) {
  void *p[5] = {b->recv.tokens, b->recv.scales, b->recv.src, b->recv.expert_counts, b->recv.rank_counts};
  for (int i = 0; i < 5; i++)
    if (p[i]) memset(p[i], POISON, b->bytes[i]);
}

static int recv_same(const recv_bufs_t *a, const recv_bufs_t *b) {
  const void *p[5] = {a->recv.tokens, a->recv.scales, a->recv.src, a->recv.expert_counts, a->recv.rank_counts};
  const void *q[5] = {b->recv.tokens, b->recv.scales, b->recv.src, b->recv.expert_counts, b->recv.rank_counts};
  for (int i = 0; i < 5; i++)
    if (p[i] && memcmp(p[i], q[i], a->bytes[i])) return 0;
  return 1;
}

static void recv_free(recv_bufs_t *b) {
  free(b->recv.tokens), free(b->recv.scales), free(b->recv.src), free(b->recv.expert_counts), free(b->recv.rank_counts);
}

/* ids (int64 values) into buf as type. */
static void put_ids(const int64_t *ids, size_t count, sy_index_type_t type, void *buf) {
  for (size_t i = 0; i < count; i++) {
    if (type == SY_INDEX_INT64) ((int64_t *)buf)[i] = ids[i];
    else ((int32_t *)buf)[i] = (int32_t)ids[i];
  }
}

/* Skew: some halves start late (up to 1.5 ms), and one rank per round is late before its receive halves, so
 * its peers run a half ahead of it. */
static void skew(const moe_case_t *c, int round, int me, int half) {
  const uint64_t h = case_key(c, 9, (uint64_t)round, (uint64_t)me * 4 + (uint64_t)half);
  long us = h % 3 == 0 ? (long)((h >> 8) % 1500) : 0;
  if (me == round % c->W && (half == 1 || half == 3)) us += 2000;
  if (!us) return;
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

static void case_rank(int me, sy_comm_t comm, void *arg) {
  shared_t *sh = arg;
  const moe_case_t *c = sh->c;
  const sy_moe_config_t config = case_config(c);
  const int L = c->E / c->W, S = c->W * c->T, per_expert = (c->flags & SY_MOE_PER_EXPERT) != 0;
  size_t ws = 0;
  CHECK_OK(sy_moe_workspace_size(comm, &config, &ws));
  CHECK_EQ_INT(ws, formula_bytes(c));
  sy_moe_t moe = NULL;
  CHECK_OK(sy_moe_create(comm, &config, &moe));
  if (!moe) return;

  const size_t nk = (size_t)c->T * c->K;
  uint16_t *tokens = malloc((size_t)c->T * c->H * 2), *out = malloc((size_t)c->T * c->H * 2);
  uint16_t *ref_out = malloc((size_t)c->T * c->H * 2), *y = malloc((size_t)L * S * c->H * 2);
  void *ids = malloc(nk * 8), *combine_ids = malloc(nk * 8);
  float *w = malloc(nk * 4), *cw = malloc(nk * 4);
  recv_bufs_t rb, ref_rb;
  recv_alloc(c, &rb);
  recv_alloc(c, &ref_rb);
  uint16_t *all_y[MAX_RANKS] = {0};
  for (int r = 0; c->check_ref && r < c->W; r++) all_y[r] = malloc((size_t)L * S * c->H * 2);
  uint64_t a2a_send[MAX_RANKS], *a2a_recv = NULL;
  CHECK_OK(sy_mem_alloc(comm, MAX_RANKS * sizeof(uint64_t), (void **)&a2a_recv));
  world_inputs_t wi;
  inputs_alloc(c, &wi);
  char what[160];

  for (int round = 0; round < c->rounds; round++) {
    snprintf(what, sizeof what, "%s, round %d", c->name, round);
    inputs_gen(c, round, &wi);
    const int n = wi.n[me];
    memcpy(tokens, wi.tok[me], (size_t)n * c->H * 2);
    put_ids(wi.ids[me], (size_t)n * c->K, c->id_type, ids);
    memcpy(w, wi.w[me], (size_t)n * c->K * 4);
    memcpy(cw, wi.cw[me], (size_t)n * c->K * 4);
    recv_poison(&rb);
    memset(out, POISON, (size_t)c->T * c->H * 2);
    const int mode = c->mode == MODE_ALTERNATE ? (round % 2 ? MODE_HALVES : MODE_ONE_CALL) : c->mode;
    /* Per-expert: the dispatch's weights are optional and the combine's count. Default: the dispatch's count,
     * so the combine gets other weights, or none. */
    const float *dispatch_w = per_expert && round % 2 ? NULL : w;
    const float *combine_w = per_expert ? cw : round % 2 ? NULL : cw;
    /* The combine's ids: the dispatch's values, in the other index type every third round. */
    const sy_index_type_t combine_type = round % 3 == 2 ? (c->id_type == I32 ? I64 : I32) : c->id_type;
    put_ids(wi.ids[me], (size_t)n * c->K, combine_type, combine_ids);
    sy_status_t st;
    if (mode == MODE_ONE_CALL) {
      CHECK_OK(st = sy_moe_dispatch(moe, tokens, n, ids, c->id_type, dispatch_w, &rb.recv, NULL));
    } else {
      skew(c, round, me, 0);
      CHECK_OK(st = sy_moe_dispatch_send(moe, tokens, n, ids, c->id_type, dispatch_w, NULL));
      /* The caller's buffers are free again once dispatch_send returns. */
      memset(tokens, 0xFF, (size_t)c->T * c->H * 2);
      memset(ids, 0x7F, nk * 8);
      memset(w, 0xFF, nk * 4);
      skew(c, round, me, 1);
      if (st == SY_SUCCESS) CHECK_OK(st = sy_moe_dispatch_recv(moe, &rb.recv, NULL));
    }
    if (st != SY_SUCCESS) break;
    check_dispatch(c, &wi, me, &rb.recv, what);
    for (int e = 0; e < L; e++) __atomic_fetch_add(&sh->empty_experts, rb.recv.expert_counts[e] == 0, __ATOMIC_RELAXED);
    if (c->check_ref) {
      sy_moe_dispatch_args_t src[MAX_RANKS];
      for (int s = 0; s < c->W; s++) src[s] = (sy_moe_dispatch_args_t){wi.tok[s], wi.n[s], wi.ids[s], I64, wi.w[s]};
      recv_poison(&ref_rb);
      CHECK_OK(sy__moe_ref_dispatch(&config, c->W, me, src, &ref_rb.recv));
      CHECK(recv_same(&rb, &ref_rb));
    }
    gen_expert_out(c, round, me, y);
    if (mode == MODE_ONE_CALL) {
      CHECK_OK(st = sy_moe_combine(moe, y, combine_ids, combine_type, combine_w, n, out, NULL));
    } else {
      if (round % 3 == 1) { /* other collective work between the halves */
        for (int r = 0; r < c->W; r++) a2a_send[r] = (uint64_t)me << 32 | (uint64_t)r;
        CHECK_OK(sy_alltoall(comm, a2a_send, a2a_recv, sizeof(uint64_t), NULL));
        for (int r = 0; r < c->W; r++) CHECK(a2a_recv[r] == ((uint64_t)r << 32 | (uint64_t)me));
      }
      skew(c, round, me, 2);
      CHECK_OK(st = sy_moe_combine_send(moe, y, NULL));
      if (round % 3 == 2) CHECK_OK(sy_comm_barrier(comm, NULL));
      skew(c, round, me, 3);
      if (st == SY_SUCCESS) CHECK_OK(st = sy_moe_combine_recv(moe, combine_ids, combine_type, combine_w, n, out, NULL));
    }
    if (st != SY_SUCCESS) break;
    check_combine(c, &wi, round, me, out, what);
    if (c->check_ref) {
      sy_moe_dispatch_args_t src[MAX_RANKS];
      for (int s = 0; s < c->W; s++) src[s] = (sy_moe_dispatch_args_t){wi.tok[s], wi.n[s], wi.ids[s], I64, wi.w[s]};
      for (int r = 0; r < c->W; r++) gen_expert_out(c, round, r, all_y[r]);
      memset(ref_out, POISON, (size_t)c->T * c->H * 2);
      CHECK_OK(sy__moe_ref_combine(&config, c->W, me, src, per_expert ? wi.cw[me] : wi.w[me],
                                   (const void *const *)all_y, ref_out));
      CHECK(!memcmp(ref_out, out, (size_t)c->T * c->H * 2));
    }
    __atomic_fetch_add(&sh->calls, 1, __ATOMIC_RELAXED);
  }
  CHECK_OK(sy_mem_free(comm, a2a_recv));
  CHECK_OK(sy_moe_destroy(moe));
  inputs_free(c, &wi);
  for (int r = 0; r < c->W; r++) free(all_y[r]);
  recv_free(&rb);
  recv_free(&ref_rb);
  free(tokens), free(out), free(ref_out), free(y), free(ids), free(combine_ids), free(w), free(cw);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_case(const moe_case_t *c) {
  shared_t sh = {c, 0, 0};
  const int before = check_failures_;
  const double t0 = now_s();
  run_ranks(c->W, case_rank, &sh);
  CHECK_EQ_INT(sh.calls, c->rounds * c->W);
  if (c->E >= 64) CHECK(sh.empty_experts > 0); /* many experts, few tokens: some get nothing */
  printf("%-34s W=%d E=%-3d K=%-2d H=%-4d T=%-2d wire=%d flags=%u ids=%s: %d rounds, %d empty experts, %.2f s%s\n",
         c->name, c->W, c->E, c->K, c->H, c->T, (int)c->wire, c->flags, c->id_type == I32 ? "i32" : "i64", c->rounds,
         sh.empty_experts, now_s() - t0, check_failures_ != before ? "  FAILED" : "");
  fflush(stdout);
}

/* Routing the generators must produce for the cases above to mean what they say. */
static void test_generators(void) {
  const moe_case_t *same = &cases[2], *none = &cases[12], *empty = &cases[11], *one = &cases[9];
  world_inputs_t wi;
  inputs_alloc(same, &wi);
  inputs_gen(same, 0, &wi);
  int shared_rank = 0; /* tokens with two or more experts on one rank */
  for (int r = 0; r < same->W; r++)
    for (int t = 0; t < wi.n[r]; t++) {
      int per_rank[MAX_RANKS] = {0};
      for (int k = 0; k < same->K; k++) {
        const int64_t x = wi.ids[r][(size_t)t * same->K + k];
        if (x >= 0 && ++per_rank[x / (same->E / same->W)] == 2) shared_rank++;
      }
    }
  CHECK(shared_rank > 0);
  inputs_free(same, &wi);
  inputs_alloc(none, &wi);
  inputs_gen(none, 0, &wi);
  for (int r = 0; r < none->W; r++)
    for (size_t i = 0; i < (size_t)wi.n[r] * none->K; i++) CHECK(wi.ids[r][i] == -1);
  inputs_free(none, &wi);
  const wl_moe_t empty_gen = case_gen(empty);
  CHECK_EQ_INT(wl_moe_num_tokens(&empty_gen, 1, 1), 0);
  inputs_alloc(one, &wi);
  inputs_gen(one, 0, &wi);
  for (int r = 0; r < one->W; r++)
    for (int t = 0; t < wi.n[r]; t++)
      CHECK(routed_to(one, &wi, r, t, (int64_t)(case_key(one, 2, 0, 0) % (uint64_t)one->E)));
  inputs_free(one, &wi);
}

int main(void) {
  seed_from_env();
  test_generators();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
  for (size_t i = 0; i < sizeof back_to_back / sizeof back_to_back[0]; i++) run_case(&back_to_back[i]);
  return check_report();
}
