/*
 * test_moe_ht_host.c — the MoE high-throughput mode on the host backend (ranks are threads), bit for bit against
 * the expectation moe_ht_test.h computes from the header's words and against the whole-call references of
 * src/ref/moe_ht_ref.c (what the GPU tests compare with), every output poisoned first:
 *  - W = 1..8; every routing of tests/workload (uniform, Zipf-skewed, one expert, empty ranks, experts with no
 *    rows); expert_alignment 1, 16, 128; hidden 2048, 4096, 7168; top-k 1..8 (and top_k above the local experts,
 *    top_k = num_experts); every wire; exact counts (host_counts, recv.rows just what the layout needs), the
 *    worst case (recv.rows = max_rows) and the masked layout (expert_stride); int32 and int64 ids;
 *  - the layout's handle sections, the dispatch, the weighted combine with row values carried back, the
 *    combine's backward with the weights' gradient; the same step again gives the same bits;
 *  - with exact values (small integers, weights of +-0.5, 1, 2): dispatch -> combine round trips (the BF16
 *    wire), and the adjoints in fp64: <dispatch(x), y> = <x, combine(y)> (BF16 wire), <combine(y), g> =
 *    <y, combine_backward(g)>, and the weights' gradient against a finite change of the weights:
 *    <combine(y; w + d), g> - <combine(y; w), g> = sum d x token_values (the gradient carried back);
 *  - the same step with the receive buffers from a pool (sy_moe_ht_recv_alloc, sized by host_counts in the exact
 *    mode): the same bits;
 *  - where the cuda backend runs a channel's two roles (SY_HT_ROLES: auto by warps at world 2 up to
 *    SY_HT_ROLES_AUTO_SMS_W2 SMs, from world 3 up to SY_HT_ROLES_AUTO_SMS, 0 and 1 forcing it) and the workspace's
 *    channels that follow.
 * SY_TEST_SEED overrides the seed; a failure prints it.
 */
#include "core/internal.h" /* sy__moe_ht_roles */
#include "moe_ht_test.h"
#include "ref/moe_ht_ref.h"

#include <stddef.h>
#include <time.h>

#define FP8       SY_MOE_WIRE_FP8
#define UE8       SY_MOE_WIRE_FP8_UE8M0
#define BF16      SY_MOE_WIRE_BF16
#define GIVEN     SY_MOE_WIRE_FP8_GIVEN
#define I32       SY_INDEX_INT32
#define I64       SY_INDEX_INT64
#define ROW_MAJOR SY_MOE_HT_SCALES_ROW_MAJOR

/* name, W, E, K, H, T, wire, align, route, counts, ids, salt[, flags] */
static const ht_case_t cases[] = {
    {"one rank", 1, 8, 2, 2048, 16, BF16, 1, WL_HT_UNIFORM, COUNTS_EXACT, I32, 1, 0},
    {"two ranks zipf fp8 align 128", 2, 16, 4, 2048, 16, FP8, 128, WL_HT_ZIPF, COUNTS_WORST, I64, 2, 0},
    {"three ranks ue8m0 masked", 3, 12, 3, 4096, 8, UE8, 128, WL_HT_UNIFORM, COUNTS_MASKED, I32, 3, 0},
    {"four ranks one expert given", 4, 32, 8, 2048, 12, GIVEN, 16, WL_HT_ONE_EXPERT, COUNTS_EXACT, I32, 4, 0},
    {"five ranks empty bf16", 5, 20, 5, 4096, 6, BF16, 16, WL_HT_EMPTY_RANKS, COUNTS_WORST, I64, 5, 0},
    {"six ranks sparse fp8 masked", 6, 24, 6, 2048, 8, FP8, 1, WL_HT_SPARSE, COUNTS_MASKED, I32, 6, 0},
    {"seven ranks zipf ue8m0 7168", 7, 28, 7, 7168, 3, UE8, 16, WL_HT_ZIPF, COUNTS_EXACT, I32, 7, 0},
    {"eight ranks 7168 bf16", 8, 32, 4, 7168, 4, BF16, 16, WL_HT_UNIFORM, COUNTS_WORST, I32, 8, 0},
    {"eight ranks top-1 given masked", 8, 8, 1, 2048, 16, GIVEN, 1, WL_HT_EMPTY_RANKS, COUNTS_MASKED, I64, 9, 0},
    {"top-k above local experts", 4, 8, 4, 2048, 16, BF16, 16, WL_HT_UNIFORM, COUNTS_EXACT, I32, 10, 0},
    {"top-k = experts", 2, 4, 4, 2048, 8, FP8, 1, WL_HT_UNIFORM, COUNTS_MASKED, I32, 11, 0},
    {"zipf bf16 masked align 128", 4, 16, 2, 4096, 32, BF16, 128, WL_HT_ZIPF, COUNTS_MASKED, I32, 12, 0},
    {"one expert bf16 many tokens", 3, 6, 2, 2048, 64, BF16, 1, WL_HT_ONE_EXPERT, COUNTS_WORST, I64, 13, 0},
    {"sparse given 4096", 2, 8, 3, 4096, 16, GIVEN, 128, WL_HT_SPARSE, COUNTS_EXACT, I32, 14, 0},
    {"empty ranks ue8m0", 4, 16, 6, 2048, 8, UE8, 16, WL_HT_EMPTY_RANKS, COUNTS_EXACT, I32, 15, 0},
    {"256 experts", 8, 256, 8, 2048, 12, FP8, 16, WL_HT_UNIFORM, COUNTS_EXACT, I32, 16, 0},
    {"one rank 7168 masked", 1, 16, 8, 7168, 8, BF16, 16, WL_HT_ZIPF, COUNTS_MASKED, I32, 17, 0},
    /* recv.scales row-major */
    {"one rank fp8 row-major scales", 1, 8, 4, 2048, 16, FP8, 16, WL_HT_UNIFORM, COUNTS_EXACT, I32, 18, ROW_MAJOR},
    {"three ranks ue8m0 row-major masked", 3, 12, 3, 4096, 8, UE8, 128, WL_HT_ZIPF, COUNTS_MASKED, I64, 19, ROW_MAJOR},
    {"four ranks given row-major worst", 4, 16, 6, 2048, 12, GIVEN, 1, WL_HT_EMPTY_RANKS, COUNTS_WORST, I32, 20,
     ROW_MAJOR},
    {"eight ranks fp8 row-major 7168", 8, 32, 8, 7168, 4, FP8, 16, WL_HT_SPARSE, COUNTS_EXACT, I32, 21, ROW_MAJOR},
};

/* ---- what the ranks share --------------------------------------------------------------------------------------- */

enum { ADJ_DISPATCH, ADJ_COMBINE, ADJ_WEIGHTS, ADJOINTS };

typedef struct shared {
  const ht_case_t *c;
  double adj[ADJOINTS][2][MAX_RANKS]; /* per rank: the two sides of each adjoint */
  int empty_experts, steps;
  int add_untouched; /* tokens with no expert that sy_moe_ht_combine_add left as they were */
  /* each rank's combine inputs, for the reference (read after a barrier) */
  const uint16_t *y[MAX_RANKS];
  const float *row_weights[MAX_RANKS], *row_values[MAX_RANKS];
  int rows[MAX_RANKS], stride[MAX_RANKS];
} shared_t;

typedef struct bufs {
  sy_moe_ht_recv_t recv;
  size_t bytes[6]; /* tokens, scales, src, weights, expert_offsets, expert_counts */
  uint16_t *y, *out, *grad_rows;
  float *row_values, *token_values, *grad_w;
} bufs_t;

static void bufs_alloc(const ht_case_t *c, int rows, int stride, bufs_t *b) {
  const size_t L = (size_t)(c->E / c->W), R = (size_t)rows, H = (size_t)c->H;
  memset(b, 0, sizeof *b);
  b->recv.rows = rows;
  b->recv.expert_stride = stride;
  b->bytes[0] = R * ht_row_bytes(c);
  b->bytes[1] = ht_fp8(c) ? R * (H / 128) * 4 : 0;
  b->bytes[2] = R * 8, b->bytes[3] = R * 4, b->bytes[4] = (L + 1) * 4, b->bytes[5] = L * 4;
  b->recv.tokens = malloc(b->bytes[0] + 1);
  b->recv.scales = ht_fp8(c) ? malloc(b->bytes[1] + 1) : NULL;
  b->recv.src = malloc(b->bytes[2] + 1);
  b->recv.weights = malloc(b->bytes[3] + 1);
  b->recv.expert_offsets = malloc(b->bytes[4]);
  b->recv.expert_counts = malloc(b->bytes[5]);
  b->y = malloc(R * H * 2 + 2);
  b->grad_rows = malloc(R * H * 2 + 2);
  b->row_values = malloc(R * 4 + 4);
  b->grad_w = malloc(R * 4 + 4);
  b->out = malloc((size_t)c->T * H * 2);
  b->token_values = malloc((size_t)c->T * c->K * 4);
}

static void *const *recv_ptrs(const bufs_t *b, void *p[6]) {
  p[0] = b->recv.tokens, p[1] = b->recv.scales, p[2] = b->recv.src, p[3] = b->recv.weights;
  p[4] = b->recv.expert_offsets, p[5] = b->recv.expert_counts;
  return p;
}

static void bufs_poison(const ht_case_t *c, bufs_t *b) {
  void *p[6];
  recv_ptrs(b, p);
  for (int i = 0; i < 6; i++)
    if (p[i]) memset(p[i], POISON, b->bytes[i]);
  memset(b->grad_rows, POISON, (size_t)b->recv.rows * c->H * 2);
  memset(b->grad_w, POISON, (size_t)b->recv.rows * 4);
  memset(b->out, POISON, (size_t)c->T * c->H * 2);
  memset(b->token_values, POISON, (size_t)c->T * c->K * 4);
}

static int bufs_same(const ht_case_t *c, const bufs_t *a, const bufs_t *b) {
  void *p[6], *q[6];
  recv_ptrs(a, p), recv_ptrs(b, q);
  for (int i = 0; i < 6; i++)
    if (a->bytes[i] && (!p[i] || !q[i] || memcmp(p[i], q[i], a->bytes[i]))) return 0; /* NULL only when empty */
  const size_t R = (size_t)a->recv.rows;
  return !memcmp(a->out, b->out, (size_t)c->T * c->H * 2) &&
         !memcmp(a->token_values, b->token_values, (size_t)c->T * c->K * 4) &&
         !memcmp(a->grad_rows, b->grad_rows, R * c->H * 2) && !memcmp(a->grad_w, b->grad_w, R * 4);
}

static void bufs_free(bufs_t *b) {
  free(b->recv.tokens), free(b->recv.scales), free(b->recv.src), free(b->recv.weights);
  free(b->recv.expert_offsets), free(b->recv.expert_counts);
  free(b->y), free(b->grad_rows), free(b->row_values), free(b->grad_w), free(b->out), free(b->token_values);
}

/* ---- one step: layout, dispatch, combine, backward ------------------------------------------------------------ */

typedef struct step {
  const ht_case_t *c;
  sy_comm_t comm;
  sy_moe_ht_t moe;
  const world_t *wd;
  int me, exact;
  void *ids; /* this rank's ids in the case's index type */
} step_t;

static sy_status_t run_step(const step_t *st, void *handle, int32_t *host_counts, bufs_t *b) {
  const ht_case_t *c = st->c;
  const world_t *wd = st->wd;
  const int me = st->me, n = wd->n[me];
  sy_status_t s = sy_moe_ht_layout(st->moe, st->ids, c->id_type, n, handle, host_counts, NULL);
  if (s != SY_SUCCESS) return s;
  const float *scales = c->wire == GIVEN ? wd->qs[me] : NULL;
  s = sy_moe_ht_dispatch(st->moe, handle, n, world_tokens(c, wd, me), scales, wd->w[me], &b->recv, NULL);
  if (s != SY_SUCCESS) return s;
  s = sy_moe_ht_combine(st->moe, handle, n, b->y, &b->recv, b->recv.weights, b->row_values, b->out, b->token_values,
                        NULL);
  if (s != SY_SUCCESS) return s;
  return sy_moe_ht_combine_backward(st->moe, handle, n, wd->g[me], &b->recv, b->recv.weights, b->y, b->grad_rows,
                                    b->grad_w, NULL);
}

/* The references of src/ref/moe_ht_ref.c for this rank (every rank's combine inputs through sh). */
static void check_ref(const step_t *st, shared_t *sh, const void *handle, const bufs_t *b, const char *what) {
  const ht_case_t *c = st->c;
  const world_t *wd = st->wd;
  const int me = st->me, W = c->W;
  const sy_moe_ht_config_t config = ht_config(c), defaults = sy__moe_ht_defaults(config);
  const sy_moe_ht_handle_layout_t hl = sy__moe_ht_handle_layout(&defaults, W);
  sy_moe_ht_ref_rank_t ranks[MAX_RANKS];
  for (int r = 0; r < W; r++)
    ranks[r] = (sy_moe_ht_ref_rank_t){wd->n[r], wd->ids[r], I32, world_tokens(c, wd, r), wd->qs[r], wd->w[r]};
  /* layout: the sections the reference writes, into a copy of this rank's handle */
  unsigned char *h = malloc(hl.bytes);
  memcpy(h, handle, hl.bytes);
  const size_t sections[5][2] = {{hl.ids, (size_t)wd->n[me] * c->K * 4},
                                 {hl.pos, (size_t)wd->n[me] * c->K * 4},
                                 {hl.send_tokens, hl.chan_tokens - hl.send_tokens},
                                 {offsetof(sy_moe_ht_handle_header_t, magic), 4},
                                 {offsetof(sy_moe_ht_handle_header_t, num_tokens), 8}}; /* num_tokens, rows */
  for (int i = 0; i < 5; i++) memset(h + sections[i][0], POISON, sections[i][1]);
  void *handles[MAX_RANKS] = {0};
  handles[me] = h;
  CHECK_OK(sy__moe_ht_ref_layout(&config, W, ranks, handles));
  CHECK(!memcmp(h, handle, hl.bytes));
  /* dispatch: a poisoned recv of the same shape, and recv_rows into the copy */
  bufs_t rb;
  bufs_alloc(c, b->recv.rows, b->recv.expert_stride, &rb);
  bufs_poison(c, &rb);
  memset(h + hl.recv_rows, POISON, hl.bytes - hl.recv_rows);
  const sy_moe_ht_recv_t *recv[MAX_RANKS] = {0};
  recv[me] = &rb.recv;
  ranks[me].tokens = world_tokens(c, wd, me);
  CHECK_OK(sy__moe_ht_ref_dispatch(&config, W, ranks, recv, handles));
  void *p[6], *q[6];
  recv_ptrs(b, p), recv_ptrs(&rb, q);
  int same = 1;
  for (int i = 0; i < 6; i++) same = same && (!p[i] || !memcmp(p[i], q[i], b->bytes[i]));
  /* recv_rows: the entries of each source's tokens here */
  const int32_t *recv_tokens = (const int32_t *)((const unsigned char *)handle + hl.recv_tokens);
  for (int s = 0; s < W; s++) {
    const size_t at = hl.recv_rows + (size_t)s * c->T * hl.kk * 4, bytes = (size_t)recv_tokens[s] * hl.kk * 4;
    same = same && !memcmp(h + at, (const unsigned char *)handle + at, bytes);
  }
  if (!same) fprintf(stderr, "%s: rank %d: the dispatch differs from the reference\n", what, me);
  CHECK(same);
  /* combine and backward: every rank's rows through sh */
  sy_moe_ht_ref_rows_t rows[MAX_RANKS];
  for (int r = 0; r < W; r++)
    rows[r] = (sy_moe_ht_ref_rows_t){sh->rows[r], sh->stride[r], sh->y[r], sh->row_weights[r], sh->row_values[r]};
  void *out[MAX_RANKS] = {0}, *grad_rows[MAX_RANKS] = {0};
  float *token_values[MAX_RANKS] = {0}, *grad_w[MAX_RANKS] = {0};
  out[me] = rb.out, token_values[me] = rb.token_values, grad_rows[me] = rb.grad_rows, grad_w[me] = rb.grad_w;
  CHECK_OK(sy__moe_ht_ref_combine(&config, W, ranks, rows, out, token_values));
  for (int r = 0; r < W; r++) ranks[r].tokens = wd->g[r];
  CHECK_OK(sy__moe_ht_ref_combine_backward(&config, W, ranks, rows, grad_rows, grad_w));
  CHECK(bufs_same(c, b, &rb));
  bufs_free(&rb);
  free(h);
}

/* sy_moe_ht_combine_add, the step's weighted combine added into (a) +0 rows: the combine's bits, every token's; (b) the
 * grad_out tokens g (any bf16 rows, each with a -0 or eight): the reference's bits, and a token with no expert keeps
 * its row (-0 included, which +0 + -0 would not). Every rank. */
static void check_add(const step_t *st, shared_t *sh, const void *handle, const bufs_t *b, const char *what) {
  const ht_case_t *c = st->c;
  const world_t *wd = st->wd;
  const int me = st->me, n = wd->n[me], W = c->W, K = c->K;
  const size_t row = (size_t)c->H * 2, bytes = (size_t)n * row;
  uint16_t *z = calloc((size_t)c->T * c->H + 1, 2), *a = malloc(bytes + 2), *r = malloc(bytes + 2);
  CHECK_OK(sy_moe_ht_combine_add(st->moe, handle, n, b->y, &b->recv, b->recv.weights, NULL, z, NULL, NULL));
  if (memcmp(z, b->out, bytes)) fprintf(stderr, "%s: rank %d: combine_add onto +0 is not the combine\n", what, me);
  CHECK(!memcmp(z, b->out, bytes));
  memcpy(a, wd->g[me], bytes);
  for (int t = 0; t < n; t++) /* -0 in each row: kept bit for bit only where the row is neither read nor written */
    for (int h = 0; h < 8 && h < c->H; h++) a[(size_t)t * c->H + h] = 0x8000;
  memcpy(r, a, bytes);
  uint16_t *g = malloc(bytes + 2);
  memcpy(g, a, bytes);
  CHECK_OK(sy_moe_ht_combine_add(st->moe, handle, n, b->y, &b->recv, b->recv.weights, NULL, a, NULL, NULL));
  const sy_moe_ht_config_t config = ht_config(c);
  sy_moe_ht_ref_rank_t ranks[MAX_RANKS];
  sy_moe_ht_ref_rows_t rows[MAX_RANKS];
  for (int p = 0; p < W; p++) {
    ranks[p] = (sy_moe_ht_ref_rank_t){wd->n[p], wd->ids[p], I32, world_tokens(c, wd, p), wd->qs[p], wd->w[p]};
    rows[p] = (sy_moe_ht_ref_rows_t){sh->rows[p], sh->stride[p], sh->y[p], sh->row_weights[p], NULL};
  }
  void *out[MAX_RANKS] = {0};
  out[me] = r;
  CHECK_OK(sy__moe_ht_ref_combine_add(&config, W, ranks, rows, out, NULL));
  if (memcmp(a, r, bytes)) fprintf(stderr, "%s: rank %d: combine_add differs from the reference\n", what, me);
  CHECK(!memcmp(a, r, bytes));
  int kept = 1, none = 0;
  for (int t = 0; t < n; t++) {
    int any = 0;
    for (int k = 0; k < K; k++) any |= wd->ids[me][t * K + k] >= 0;
    if (any) continue;
    none++;
    kept = kept && !memcmp(a + (size_t)t * c->H, g + (size_t)t * c->H, row);
  }
  CHECK(kept);
  __atomic_fetch_add(&sh->add_untouched, none, __ATOMIC_RELAXED);
  free(z), free(a), free(r), free(g);
}

/* ---- exact values: round trips and adjoints ---------------------------------------------------------------------- */

static double dot64(const uint16_t *a, const uint16_t *b, int H) {
  double d = 0.0;
  for (int h = 0; h < H; h++) d += (double)sy__bf16_to_float(a[h]) * (double)sy__bf16_to_float(b[h]);
  return d;
}

/* Each routed row here, in turn: f(row, s, t, k). */
#define FOR_ROWS_HERE(c, wd, nv, me, body)                      \
  for (int s_ = 0; s_ < (c)->W; s_++)                           \
    for (int t_ = 0; t_ < (wd)->n[s_]; t_++)                    \
      for (int k_ = 0; k_ < (c)->K; k_++) {                     \
        const int32_t x_ = (wd)->ids[s_][t_ * (c)->K + k_];     \
        if (x_ < 0 || x_ / ((c)->E / (c)->W) != (me)) continue; \
        const int32_t row = (nv)->row[s_][t_][k_];              \
        body;                                                   \
      }

static void exact_checks(const step_t *st, shared_t *sh, const naive_t *nv, void *handle, bufs_t *b) {
  const ht_case_t *c = st->c;
  const world_t *wd = st->wd;
  const int me = st->me, n = wd->n[me], H = c->H, K = c->K;
  const size_t TH = (size_t)c->T * H;
  uint16_t *out = malloc(TH * 2), *out2 = malloc(TH * 2);
  float *dw = malloc((size_t)c->T * K * 4), *w2 = malloc((size_t)c->T * K * 4);
  if (c->wire == BF16) {
    /* round trips: the dispatched tokens combined back, weighted and not */
    for (int weighted = 0; weighted < 2; weighted++) {
      CHECK_OK(sy_moe_ht_combine(st->moe, handle, n, b->recv.tokens, &b->recv, weighted ? b->recv.weights : NULL, NULL,
                                 out, NULL, NULL));
      int bad = 0;
      for (int t = 0; t < n; t++) {
        double scale = 0.0;
        for (int k = 0; k < K; k++)
          scale += wd->ids[me][t * K + k] >= 0 ? (weighted ? wd->w[me][t * K + k] : 1.0) : 0.0;
        for (int h = 0; h < H; h++) {
          /* a sum from +0 of exact terms is +0 where it is zero */
          const float v = (float)(scale * sy__bf16_to_float(wd->tok[me][(size_t)t * H + h]));
          const uint16_t want = sy__float_to_bf16(v == 0.0f ? 0.0f : v);
          if (out[(size_t)t * H + h] != want && bad++ < 3)
            fprintf(stderr, "t %d h %d: 0x%04x want 0x%04x (scale %g, x %g)\n", t, h, out[(size_t)t * H + h], want,
                    scale, sy__bf16_to_float(wd->tok[me][(size_t)t * H + h]));
        }
      }
      if (bad) fprintf(stderr, "%s: rank %d: %d round-trip values differ (weighted %d)\n", c->name, me, bad, weighted);
      CHECK(bad == 0);
    }
    /* <dispatch(x), y> and <x, combine(y)> */
    double lhs = 0.0, rhs = 0.0;
    FOR_ROWS_HERE(c, wd, nv, me,
                  lhs += dot64((const uint16_t *)b->recv.tokens + (size_t)row * H, b->y + (size_t)row * H, H));
    CHECK_OK(sy_moe_ht_combine(st->moe, handle, n, b->y, &b->recv, NULL, NULL, out, NULL, NULL));
    for (int t = 0; t < n; t++) rhs += dot64(wd->tok[me] + (size_t)t * H, out + (size_t)t * H, H);
    sh->adj[ADJ_DISPATCH][0][me] = lhs, sh->adj[ADJ_DISPATCH][1][me] = rhs;
  }
  /* <combine(y), g> and <y, combine_backward(g)>: b holds both from the step */
  double lhs = 0.0, rhs = 0.0;
  for (int t = 0; t < n; t++) lhs += dot64(b->out + (size_t)t * H, wd->g[me] + (size_t)t * H, H);
  FOR_ROWS_HERE(c, wd, nv, me, rhs += dot64(b->y + (size_t)row * H, b->grad_rows + (size_t)row * H, H));
  sh->adj[ADJ_COMBINE][0][me] = lhs, sh->adj[ADJ_COMBINE][1][me] = rhs;
  /* the weights' gradient carried back to [num_tokens][top_k], against doubling the weights of even k */
  CHECK_OK(sy_moe_ht_combine(st->moe, handle, n, b->y, &b->recv, NULL, b->grad_w, out, dw, NULL));
  for (int i = 0; i < n * K; i++) w2[i] = wd->w[me][i] * (i % K % 2 == 0 ? 2.0f : 1.0f);
  const float *scales = c->wire == GIVEN ? wd->qs[me] : NULL;
  CHECK_OK(sy_moe_ht_dispatch(st->moe, handle, n, world_tokens(c, wd, me), scales, w2, &b->recv, NULL));
  CHECK_OK(sy_moe_ht_combine(st->moe, handle, n, b->y, &b->recv, b->recv.weights, NULL, out2, NULL, NULL));
  lhs = rhs = 0.0;
  for (int t = 0; t < n; t++)
    for (int h = 0; h < H; h++)
      lhs += ((double)sy__bf16_to_float(out2[(size_t)t * H + h]) - sy__bf16_to_float(b->out[(size_t)t * H + h])) *
             sy__bf16_to_float(wd->g[me][(size_t)t * H + h]);
  for (int i = 0; i < n * K; i++) rhs += ((double)w2[i] - wd->w[me][i]) * dw[i];
  sh->adj[ADJ_WEIGHTS][0][me] = lhs, sh->adj[ADJ_WEIGHTS][1][me] = rhs;
  free(out), free(out2), free(dw), free(w2);
}

/* ---- one rank of a case ------------------------------------------------------------------------------------------- */

static int stride_for(const ht_case_t *c, const world_t *wd) {
  naive_t *nv = malloc(sizeof *nv);
  const int zeros[MAX_RANKS] = {0};
  naive_rows(c, wd, zeros, nv);
  int most = 0;
  for (int p = 0; p < c->W; p++)
    for (int e = 0; e < c->E / c->W; e++) most = nv->count[p][e] > most ? nv->count[p][e] : most;
  free(nv);
  return (most + ht_align(c) - 1) / ht_align(c) * ht_align(c) + 1; /* one row to spare, beyond the alignment */
}

static void round_rank(shared_t *sh, step_t *st, void *handle, void *handle2, int round) {
  const ht_case_t *c = st->c;
  const world_t *wd = st->wd;
  const int me = st->me, L = c->E / c->W, W = c->W;
  const sy_moe_ht_config_t config = ht_config(c), defaults = sy__moe_ht_defaults(config);
  const sy_moe_ht_handle_layout_t hl = sy__moe_ht_handle_layout(&defaults, W);
  sy_moe_ht_sizes_t sizes = SY_MOE_HT_SIZES_INIT;
  CHECK_OK(sy_moe_ht_sizes(st->moe, &sizes));
  char what[160];
  snprintf(what, sizeof what, "%s, round %d", c->name, round);
  const int stride = c->counts == COUNTS_MASKED ? stride_for(c, wd) : 0;
  int strides[MAX_RANKS];
  for (int r = 0; r < W; r++) strides[r] = stride;
  naive_t *nv = malloc(sizeof *nv);
  naive_rows(c, wd, strides, nv);
  int rows = c->counts == COUNTS_WORST ? sizes.max_rows : c->counts == COUNTS_MASKED ? L * stride + 3 : 0;
  if (c->counts == COUNTS_EXACT) rows = nv->contiguous_rows[me]; /* what host_counts will say */
  bufs_t b, b2;
  bufs_alloc(c, rows, stride, &b);
  bufs_alloc(c, rows, stride, &b2);
  const wl_moe_ht_t m = ht_gen(c);
  wl_moe_ht_rows(&m, BUF_Y, me, rows, st->exact, b.y);
  wl_moe_ht_values(&m, VAL_ROW_VALUES, me, rows, st->exact, b.row_values);
  memcpy(b2.y, b.y, (size_t)rows * c->H * 2);
  memcpy(b2.row_values, b.row_values, (size_t)rows * 4);
  int32_t host_counts[2 * 256 + 1];
  memset(host_counts, POISON, sizeof host_counts);
  bufs_poison(c, &b);
  memset(handle, POISON, hl.bytes);
  CHECK_OK(run_step(st, handle, c->counts == COUNTS_EXACT ? host_counts : NULL, &b));
  check_layout(c, wd, nv, me, handle, c->counts == COUNTS_EXACT ? host_counts : NULL, what);
  check_dispatch(c, wd, nv, me, &b.recv, what);
  check_combine(c, wd, nv, me, st->exact, 1, b.out, b.token_values, what);
  check_backward(c, wd, nv, me, b.y, 1, rows, b.grad_rows, b.grad_w, what);
  for (int e = 0; e < L; e++) __atomic_fetch_add(&sh->empty_experts, nv->count[me][e] == 0, __ATOMIC_RELAXED);
  /* the references, with every rank's combine inputs */
  sh->y[me] = b.y, sh->row_weights[me] = b.recv.weights, sh->row_values[me] = b.row_values;
  sh->rows[me] = rows, sh->stride[me] = stride;
  CHECK_OK(sy_comm_barrier(st->comm, NULL));
  check_ref(st, sh, handle, &b, what);
  check_add(st, sh, handle, &b, what);
  /* the same step again: the same bits (the handle's layout and dispatch numbers aside) */
  bufs_poison(c, &b2);
  memset(handle2, POISON, hl.bytes);
  CHECK_OK(run_step(st, handle2, NULL, &b2));
  CHECK(bufs_same(c, &b, &b2));
  sy_moe_ht_handle_header_t h1, h2;
  memcpy(&h1, handle, sizeof h1), memcpy(&h2, handle2, sizeof h2);
  CHECK(h2.layout == h1.layout + 1 && h2.dispatched == h1.dispatched + 1);
  h2.layout = h1.layout, h2.dispatched = h1.dispatched;
  memcpy(handle2, &h2, sizeof h2);
  CHECK(!memcmp(handle, handle2, hl.recv_rows)); /* recv_rows: compared against the reference above */
  /* the receive buffers from a pool (sy_moe_ht_recv_alloc), sized by the exact mode's host_counts[2 L] (the rows
   * the layout needs) or as the case's: the same bits */
  sy_pool_t pool = NULL;
  CHECK_OK(sy_pool_create(st->comm, NULL, &pool));
  const int prows = c->counts == COUNTS_EXACT ? host_counts[2 * L] : rows;
  CHECK_EQ_INT(prows, rows);
  bufs_t b3;
  bufs_alloc(c, rows, stride, &b3);
  free(b3.recv.tokens), free(b3.recv.scales), free(b3.recv.src), free(b3.recv.weights);
  free(b3.recv.expert_offsets), free(b3.recv.expert_counts);
  CHECK_OK(sy_moe_ht_recv_alloc(st->moe, pool, prows, stride, &b3.recv, NULL));
  memcpy(b3.y, b.y, (size_t)rows * c->H * 2);
  memcpy(b3.row_values, b.row_values, (size_t)rows * 4);
  bufs_poison(c, &b3);
  memset(handle2, POISON, hl.bytes);
  CHECK_OK(run_step(st, handle2, NULL, &b3));
  CHECK(bufs_same(c, &b, &b3));
  CHECK_OK(sy_comm_barrier(st->comm, NULL)); /* no peer reads b3 any more */
  CHECK_OK(sy_moe_ht_recv_free(st->moe, pool, &b3.recv, NULL));
  bufs_free(&b3);
  CHECK_OK(sy_pool_destroy(pool));
  if (st->exact) exact_checks(st, sh, nv, handle, &b);
  CHECK_OK(sy_comm_barrier(st->comm, NULL)); /* no peer reads b any more */
  bufs_free(&b), bufs_free(&b2);
  free(nv);
}

static void case_rank(int me, sy_comm_t comm, void *arg) {
  shared_t *sh = arg;
  const ht_case_t *c = sh->c;
  const sy_moe_ht_config_t config = ht_config(c);
  const int L = c->E / c->W, kk = c->K < L ? c->K : L, align = ht_align(c);
  size_t ws = 1;
  CHECK_OK(sy_moe_ht_workspace_size(comm, &config, &ws));
  CHECK_EQ_INT(ws, 0); /* the host backend reserves no symmetric memory */
  sy_moe_ht_t moe = NULL;
  CHECK_OK(sy_moe_ht_create(comm, &config, &moe));
  if (!moe) return;
  sy_moe_ht_sizes_t sizes = SY_MOE_HT_SIZES_INIT;
  CHECK_OK(sy_moe_ht_sizes(moe, &sizes));
  const int64_t expanded = (int64_t)c->W * c->T * kk; /* every token at min(top_k, L) experts of a rank */
  CHECK_EQ_INT(sizes.local_experts, L);
  CHECK_EQ_INT(sizes.max_rows, expanded + (int64_t)L * (align - 1));
  CHECK_EQ_INT(sizes.row_bytes, ht_row_bytes(c));
  CHECK_EQ_INT(sizes.scale_bytes, ht_fp8(c) ? c->H / 128 * 4 : 0);
  CHECK_EQ_INT(sizes.handle_bytes, sy__moe_ht_handle_layout(&moe->config, c->W).bytes);
  void *handle = malloc(sizes.handle_bytes), *handle2 = malloc(sizes.handle_bytes);
  int32_t *ids64 = malloc((size_t)c->T * c->K * 8);
  for (int round = 0; round < 2; round++) {
    world_t wd;
    world_gen(c, round, &wd);
    for (int i = 0; i < wd.n[me] * c->K; i++) {
      if (c->id_type == I64) ((int64_t *)(void *)ids64)[i] = wd.ids[me][i];
      else ids64[i] = wd.ids[me][i];
    }
    step_t st = {c, comm, moe, &wd, me, round, ids64};
    round_rank(sh, &st, handle, handle2, round);
    world_free(c, &wd);
    __atomic_fetch_add(&sh->steps, 1, __ATOMIC_RELAXED);
  }
  CHECK_OK(sy_moe_ht_destroy(moe));
  free(handle), free(handle2), free(ids64);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int add_untouched_; /* over every case: tokens with no expert that sy_moe_ht_combine_add kept */

static void run_case(const ht_case_t *c) {
  shared_t *sh = calloc(1, sizeof *sh);
  sh->c = c;
  const int before = check_failures_;
  const double t0 = now_s();
  run_ranks(c->W, case_rank, sh);
  CHECK_EQ_INT(sh->steps, 2 * c->W);
  static const char *names[ADJOINTS] = {"<dispatch(x), y> = <x, combine(y)>", "<combine(y), g> = <y, backward(g)>",
                                        "weights' gradient"};
  double sides[ADJOINTS][2] = {{0}};
  for (int a = 0; a < ADJOINTS; a++) {
    for (int r = 0; r < c->W; r++) sides[a][0] += sh->adj[a][0][r], sides[a][1] += sh->adj[a][1][r];
    if (sides[a][0] != sides[a][1])
      fprintf(stderr, "%s: %s: %.17g != %.17g (seed 0x%llx)\n", c->name, names[a], sides[a][0], sides[a][1],
              (unsigned long long)seed);
    CHECK(sides[a][0] == sides[a][1]);
  }
  if (c->route == WL_HT_SPARSE || c->E >= 64) CHECK(sh->empty_experts > 0);
  add_untouched_ += sh->add_untouched;
  printf(
      "%-32s W=%d E=%-3d K=%d H=%-4d T=%-2d wire=%d align=%-3d %-11s %s ids=%s: %d empty experts, %d tokens "
      "kept by combine_add, adjoints %g %g %g, %.2f s%s\n",
      c->name, c->W, c->E, c->K, c->H, c->T, (int)c->wire, c->align, wl_moe_ht_route_name(c->route),
      c->counts == COUNTS_EXACT   ? "exact "
      : c->counts == COUNTS_WORST ? "worst "
                                  : "masked",
      c->id_type == I32 ? "i32" : "i64", sh->empty_experts, sh->add_untouched, sides[0][0], sides[1][0], sides[2][0],
      now_s() - t0, check_failures_ != before ? "  FAILED" : "");
  fflush(stdout);
  free(sh);
}

/* The routings mean what they say. */
static void test_generators(void) {
  for (int route = 0; route < WL_HT_ROUTES; route++) {
    const wl_moe_ht_t m = {seed, 4, 32, 4, 128, 64, (wl_ht_route_t)route};
    int32_t ids[64 * 4];
    int per_expert[32] = {0}, empty_ranks = 0, tokens = 0;
    for (int r = 0; r < m.world; r++) {
      const int n = wl_moe_ht_num_tokens(&m, r);
      empty_ranks += n == 0;
      tokens += n;
      wl_moe_ht_ids(&m, r, n, ids);
      for (int t = 0; t < n; t++)
        for (int k = 0; k < m.top_k; k++) {
          const int32_t x = ids[t * m.top_k + k];
          CHECK(x >= -1 && x < m.num_experts);
          for (int j = 0; x >= 0 && j < k; j++) CHECK(ids[t * m.top_k + j] != x);
          if (x >= 0) per_expert[x]++;
          if (route == WL_HT_ONE_EXPERT) CHECK(x == (k == t % m.top_k ? wl_moe_ht_target(&m) : -1));
        }
    }
    int most = 0, unused = 0;
    for (int x = 0; x < m.num_experts; x++)
      most = per_expert[x] > most ? per_expert[x] : most, unused += !per_expert[x];
    if (route == WL_HT_EMPTY_RANKS) CHECK(empty_ranks >= 1);
    if (route == WL_HT_SPARSE) CHECK(unused >= m.num_experts / 2);
    if (route == WL_HT_ZIPF) CHECK(most > 4 * tokens * m.top_k / m.num_experts); /* a hot expert */
    if (route == WL_HT_UNIFORM) CHECK(unused < m.num_experts / 4);
  }
}

/* The weights' gradient's dot product (sy__moe_ht_dot, which the host backend and the reference share): the
 * header's order against this test's own reading of it (ht_dot), on hidden sizes that end inside a 256-element
 * stride; a NaN input, of either sign and any payload, gives the canonical 0x7FFFFFFF, as the GPU does. */
static void test_dot(void) {
  const int sizes[] = {8, 256, 264, 2048, 7168 + 8};
  uint16_t a[7176], b[7176];
  uint64_t h = seed ^ 0xd07;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    const int H = sizes[i];
    for (int j = 0; j < H; j++) {
      h = h * 6364136223846793005ull + 1442695040888963407ull;
      a[j] = sy__float_to_bf16((float)((int)(h >> 40 & 0xff) - 128) * 0x1p-6f);
      b[j] = sy__float_to_bf16((float)((int)(h >> 20 & 0xff) - 128) * 0x1p-5f);
    }
    const float got = sy__moe_ht_dot(a, b, H), want = ht_dot(a, b, H);
    CHECK(!memcmp(&got, &want, 4));
    a[H / 2] = 0xFFC1; /* a negative NaN with a payload */
    const float nan = sy__moe_ht_dot(a, b, H);
    uint32_t bits;
    memcpy(&bits, &nan, 4);
    CHECK_EQ_INT((long long)bits, 0x7FFFFFFFll);
  }
}

/* SY_HT_ROLES resolved (sy__moe_ht_roles, what the size query and the cuda backend's create both read) and the
 * channels of the workspace it sizes: by warps num_sms channels, by blocks num_sms / 2 (at least 1). */
static void test_roles(void) {
  const char *was = getenv("SY_HT_ROLES");
  char *saved = was ? strdup(was) : NULL;
  sy_moe_ht_config_t c = SY_MOE_HT_CONFIG_INIT;
  c.max_tokens = 64, c.hidden = 256, c.top_k = 2, c.num_experts = 8;
  c = sy__moe_ht_defaults(c);
  static const struct {
    const char *env; /* NULL: unset */
    int world, sms, want;
  } rows[] = {
      {NULL, 1, 16, 0},
      {NULL, 2, 16, 1},
      {NULL, 4, 2, 1},
      {NULL, 4, SY_HT_ROLES_AUTO_SMS, 1},
      {NULL, 4, SY_HT_ROLES_AUTO_SMS + 1, 0},
      {NULL, 3, SY_HT_ROLES_AUTO_SMS + 1, 0},
      {NULL, 2, SY_HT_ROLES_AUTO_SMS + 1, 1},
      {NULL, 2, SY_HT_ROLES_AUTO_SMS_W2, 1},
      {NULL, 2, SY_HT_ROLES_AUTO_SMS_W2 + 1, 0},
      {NULL, 2, 132, 0},
      {NULL, 8, 132, 0},
      {"-1", 4, 16, 1},
      {"-1", 4, 24, 0},
      {"-1", 2, SY_HT_ROLES_AUTO_SMS_W2, 1},
      {"-1", 2, SY_HT_ROLES_AUTO_SMS_W2 + 1, 0},
      {NULL, 8, SY_HT_ROLES_AUTO_SMS, 1},
      {"1", 1, 16, 1},
      {"1", 4, 132, 1},
      {"0", 4, 16, 0},
      {"0", 1, 3, 0},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    if (rows[i].env) setenv("SY_HT_ROLES", rows[i].env, 1);
    else unsetenv("SY_HT_ROLES");
    c.num_sms = rows[i].sms;
    const int roles = sy__moe_ht_roles(&c, rows[i].world);
    if (roles != rows[i].want)
      fprintf(stderr, "test_roles: SY_HT_ROLES=%s world %d num_sms %d: %d, want %d\n",
              rows[i].env ? rows[i].env : "(unset)", rows[i].world, rows[i].sms, roles, rows[i].want);
    CHECK_EQ_INT(roles, rows[i].want);
    const sy_moe_ht_ws_layout_t w = sy__moe_ht_ws_layout(&c, rows[i].world, roles, 0);
    CHECK_EQ_INT(w.channels, roles ? rows[i].sms : rows[i].sms / 2 > 1 ? rows[i].sms / 2 : 1);
  }
  /* SY_HT_ROLES=8 is 1 (any positive value); a malformed value reads as auto here: the create refuses it */
  setenv("SY_HT_ROLES", "8", 1);
  c.num_sms = 132;
  CHECK_EQ_INT(sy__moe_ht_roles(&c, 4), 1);
  setenv("SY_HT_ROLES", "fast", 1);
  c.num_sms = 16;
  CHECK_EQ_INT(sy__moe_ht_roles(&c, 4), 1);
  if (saved) setenv("SY_HT_ROLES", saved, 1);
  else unsetenv("SY_HT_ROLES");
  free(saved);
}

/* SY_HT_PULL resolved (sy__moe_ht_pull: 0 at world 1 whatever it says; auto, unset or negative, 1 from world 2 where
 * every peer is load/store reachable and the pull's workspace fits; any positive value 1 from world 2) and what it adds
 * to the workspace after the arena: the tokens' copy (max_tokens x hidden x 2 bytes), the ids, positions and weights,
 * the pull's counters; nothing without it. */
static void test_pull(void) {
  const char *was = getenv("SY_HT_PULL");
  char *saved = was ? strdup(was) : NULL;
  sy_moe_ht_config_t c = SY_MOE_HT_CONFIG_INIT;
  c.max_tokens = 100, c.hidden = 256, c.top_k = 2, c.num_experts = 8, c.recv_arena_bytes = 1000;
  c = sy__moe_ht_defaults(c);
  static const struct {
    const char *env; /* NULL: unset */
    int world, direct, fits, want;
  } rows[] = {{NULL, 1, 1, 1, 0}, {NULL, 4, 1, 1, 1}, {NULL, 2, 0, 1, 0}, {NULL, 2, 1, 0, 0},
              {"-1", 4, 1, 1, 1}, {"-3", 8, 0, 1, 0}, {"0", 4, 1, 1, 0},  {"1", 1, 1, 1, 0},
              {"1", 2, 1, 1, 1},  {"2", 4, 0, 0, 1},  {"7", 8, 1, 1, 1}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    if (rows[i].env) setenv("SY_HT_PULL", rows[i].env, 1);
    else unsetenv("SY_HT_PULL");
    const int pull = sy__moe_ht_pull(&c, rows[i].world, rows[i].direct, rows[i].fits);
    CHECK_EQ_INT(pull, rows[i].want);
    const sy_moe_ht_ws_layout_t w0 = sy__moe_ht_ws_layout(&c, rows[i].world, 1, 0);
    const sy_moe_ht_ws_layout_t w = sy__moe_ht_ws_layout(&c, rows[i].world, 1, pull);
    CHECK(w.pull >= w.arena + c.recv_arena_bytes && w.pull % 256 == 0);
    CHECK(w.bytes >= w.pull + (pull ? (size_t)c.max_tokens * c.hidden * 2 : 0));
    CHECK(!pull || (w.pull_meta >= w.pull + (size_t)c.max_tokens * c.hidden * 2 &&
                    w.pull_sync >= w.pull_meta + 3 * (size_t)c.max_tokens * c.top_k * 4 &&
                    w.bytes >= w.pull_sync + 16 + (size_t)rows[i].world * 8 && w.pull_sync % 8 == 0));
    CHECK(pull ? w.bytes > w0.bytes : w.bytes == w0.bytes);
  }
  if (saved) setenv("SY_HT_PULL", saved, 1);
  else unsetenv("SY_HT_PULL");
  free(saved);
}

/* The pulled dispatch's items (sy__moe_ht_pull_item): over every grid, every (source, channel) taken once, and no
 * block given the same source twice in a row where there are several. */
static void test_pull_items(void) {
  static int seen[8 * 40];
  for (int W = 1; W <= 8; W++)
    for (int C = 1; C <= 39; C++)
      for (int G = 1; G <= 69; G++) {
        memset(seen, 0, sizeof seen);
        int repeats = 0;
        for (int b = 0; b < G; b++) {
          int prev = -1;
          for (int item = b; item < W * C; item += G) {
            int s = -1, c = -1;
            sy__moe_ht_pull_item(item, W, G, &s, &c);
            if (s < 0 || s >= W || c < 0 || c >= C) {
              CHECK(0);
              return;
            }
            seen[c * W + s]++;
            repeats += W > 1 && s == prev;
            prev = s;
          }
        }
        int once = 1;
        for (int i = 0; i < W * C; i++) once &= seen[i] == 1;
        CHECK(once);
        CHECK_EQ_INT(repeats, 0);
      }
}

/* The own-first order (sy__moe_ht_pull_item_own_first, SY_HT_PULL_OVERLAP): every (source, channel) once, items [0, C)
 * this rank's own channels in order, and none of the own channels after them. */
static void test_pull_items_own_first(void) {
  static int seen[8 * 40];
  for (int W = 1; W <= 8; W++)
    for (int C = 1; C <= 39; C++)
      for (int me = 0; me < W; me++) {
        memset(seen, 0, sizeof seen);
        int misplaced = 0;
        for (int item = 0; item < W * C; item++) {
          int s = -1, c = -1;
          sy__moe_ht_pull_item_own_first(item, W, C, me, &s, &c);
          if (s < 0 || s >= W || c < 0 || c >= C) {
            CHECK(0);
            return;
          }
          seen[c * W + s]++;
          misplaced += item < C ? s != me || c != item : s == me;
        }
        int once = 1;
        for (int i = 0; i < W * C; i++) once &= seen[i] == 1;
        CHECK(once);
        CHECK_EQ_INT(misplaced, 0);
      }
}

int main(void) {
  seed_from_env();
  test_generators();
  test_dot();
  test_roles();
  test_pull();
  test_pull_items();
  test_pull_items_own_first();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
  CHECK(add_untouched_ > 0); /* the cases route some token to no expert */
  return check_report();
}
