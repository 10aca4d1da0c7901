/*
 * test_attn_plan.c — the attention-dispatch metadata planner (src/plan/attn_plan.c) on hand-built examples
 * with the rows written out (the seed's 3-rank walkthrough, merging, the KV backward's staging order), every
 * rejected input, and the build time at the bench's scale. The invariants on seeded random descriptions:
 * test_attn_plan_random.c.
 */
#include "attn_plan_test.h"

/* Whether peer p's segments of one side are exactly `want` (n of them). */
static int segs_are(const int64_t *start, const sy_attn_seg_t *segs, int p, const sy_attn_seg_t *want, int n) {
  if (start[p + 1] - start[p] != n) return 0;
  for (int k = 0; k < n; k++) {
    const sy_attn_seg_t *g = &segs[start[p] + k];
    if (g->src_row != want[k].src_row || g->dst_row != want[k].dst_row || g->rows != want[k].rows) return 0;
  }
  return 1;
}
#define SEND_IS(plan, d, p, ...)                                                  \
  do {                                                                            \
    const sy_attn_seg_t want_[] = {__VA_ARGS__};                                  \
    CHECK(segs_are((plan)->dir[d].send_start, (plan)->dir[d].send_segs, p, want_, \
                   (int)(sizeof want_ / sizeof want_[0])));                       \
  } while (0)
#define RECV_IS(plan, d, p, ...)                                                  \
  do {                                                                            \
    const sy_attn_seg_t want_[] = {__VA_ARGS__};                                  \
    CHECK(segs_are((plan)->dir[d].recv_start, (plan)->dir[d].recv_segs, p, want_, \
                   (int)(sizeof want_ / sizeof want_[0])));                       \
  } while (0)
#define NONE(plan, d, side, p) CHECK_EQ_INT((plan)->dir[d].side##_start[(p) + 1] - (plan)->dir[d].side##_start[p], 0)

/* ---- hand-built examples ------------------------------------------------------------------------------ */

/* The seed's walkthrough: 3 ranks, one 4-token sequence each, Q R0->2, R1->0, R2->1; KV R0->{2,0},
 * R1->{0}, R2->{1,2}. Per-destination layouts: rank 0 receives KV from source 0 (replica 1) then source 1. */
static void test_walkthrough(void) {
  test_desc_t t;
  const int ns[3] = {1, 1, 1};
  td_init(&t, 3, 2, ns);
  const int q[3] = {2, 0, 1}, kv[3][2] = {{2, 0}, {0, -1}, {1, 2}};
  for (int r = 0; r < 3; r++) {
    t.lens[r][0] = 4;
    t.q[r][0] = q[r];
    t.kv[r][0] = kv[r][0], t.kv[r][1] = kv[r][1];
  }
  td_sum(&t);
  struct sy_attn_plan *p[3];
  if (build_all(&t.desc, p)) {
    /* Forward metadata. */
    CHECK_EQ_INT(p[0]->q_send[0].dst_row, 0);
    CHECK_EQ_INT(p[1]->q_send[0].dst_row, 0);
    CHECK_EQ_INT(p[0]->kv_send[0].dst_row, 0); /* at rank 2, first */
    CHECK_EQ_INT(p[0]->kv_send[1].dst_row, 0); /* at rank 0, first */
    CHECK_EQ_INT(p[1]->kv_send[0].dst_row, 4); /* at rank 0, after source 0 */
    CHECK_EQ_INT(p[1]->kv_send[1].dst_row, -1);
    CHECK_EQ_INT(p[1]->kv_send[1].dst_rank, -1);
    CHECK_EQ_INT(p[2]->kv_send[0].dst_row, 0); /* at rank 1 */
    CHECK_EQ_INT(p[2]->kv_send[1].dst_row, 4); /* at rank 2, after source 0 */
    /* What rank 0 receives, in arrival order: rank 1's Q; KV replica 1 of rank 0's sequence, replica 0 of
     * rank 1's. */
    CHECK_EQ_INT(p[0]->q_recv_count, 1);
    CHECK(p[0]->q_recv[0].src_rank == 1 && p[0]->q_recv[0].dst_row == 0 && p[0]->q_recv[0].rows == 4);
    CHECK_EQ_INT(p[0]->kv_recv_count, 2);
    CHECK(p[0]->kv_recv[0].src_rank == 0 && p[0]->kv_recv[0].replica == 1 && p[0]->kv_recv[0].dst_row == 0);
    CHECK(p[0]->kv_recv[1].src_rank == 1 && p[0]->kv_recv[1].replica == 0 && p[0]->kv_recv[1].dst_row == 4);
    CHECK_EQ_INT(p[1]->seq_start[1], 4);
    /* Q forward. */
    SEND_IS(p[0], SY_ATTN_Q_FWD, 2, {0, 0, 4});
    NONE(p[0], SY_ATTN_Q_FWD, send, 0);
    NONE(p[0], SY_ATTN_Q_FWD, send, 1);
    RECV_IS(p[0], SY_ATTN_Q_FWD, 1, {0, 0, 4});
    CHECK_EQ_INT(p[0]->dir[SY_ATTN_Q_FWD].recv_total, 4);
    /* KV forward at rank 0: source 0's replica 1 at rows 0..3, source 1's replica 0 at 4..7. */
    RECV_IS(p[0], SY_ATTN_KV_FWD, 0, {0, 0, 4});
    RECV_IS(p[0], SY_ATTN_KV_FWD, 1, {0, 4, 4});
    NONE(p[0], SY_ATTN_KV_FWD, recv, 2);
    CHECK_EQ_INT(p[0]->dir[SY_ATTN_KV_FWD].recv_total, 8);
    CHECK_EQ_INT(p[2]->dir[SY_ATTN_KV_FWD].recv_total, 8);
    CHECK_EQ_INT(p[1]->dir[SY_ATTN_KV_FWD].recv_total, 4);
    SEND_IS(p[2], SY_ATTN_KV_FWD, 1, {0, 0, 4});
    SEND_IS(p[2], SY_ATTN_KV_FWD, 2, {0, 4, 4});
    /* Q reverse: rank 0 holds rank 1's queries and returns them. */
    SEND_IS(p[0], SY_ATTN_Q_REV, 1, {0, 0, 4});
    RECV_IS(p[1], SY_ATTN_Q_REV, 0, {0, 0, 4});
    CHECK_EQ_INT(p[1]->dir[SY_ATTN_Q_REV].recv_total, 4);
    /* KV backward at owner 0: replica 0 (held by rank 2) to staging rows 0..3, replica 1 (rank 0) to 4..7. */
    RECV_IS(p[0], SY_ATTN_KV_BWD, 2, {0, 0, 4});
    RECV_IS(p[0], SY_ATTN_KV_BWD, 0, {0, 4, 4});
    CHECK_EQ_INT(p[0]->dir[SY_ATTN_KV_BWD].recv_total, 8);
    SEND_IS(p[0], SY_ATTN_KV_BWD, 0, {0, 4, 4});
    SEND_IS(p[0], SY_ATTN_KV_BWD, 1, {4, 0, 4});
    SEND_IS(p[2], SY_ATTN_KV_BWD, 2, {4, 4, 4}); /* rank 2 returns rank 2's replica 1 */
    SEND_IS(p[2], SY_ATTN_KV_BWD, 0, {0, 0, 4});
    /* Counts. */
    CHECK_EQ_INT(p[1]->q_counts[0 * 3 + 2], 4);
    CHECK_EQ_INT(p[1]->kv_counts[1 * 3 + 0], 4);
    CHECK_EQ_INT(p[1]->kv_counts[1 * 3 + 2], 0);
    CHECK_EQ_INT(p[1]->backend, SY_BACKEND_AUTO);
    CHECK(p[1]->device == NULL);
    free_all(p, 3);
  }
  td_free(&t);
}

/* Merging: neighbouring sequences to one peer become one segment when both sides continue; a sequence
 * sent elsewhere in between keeps them apart; KV backward re-splits what the forward merged when the
 * replicas differ (staging rows are not contiguous), and orders by replica. */
static void test_merging(void) {
  test_desc_t t;
  const int ns[2] = {4, 1};
  td_init(&t, 2, 2, ns);
  const int64_t lens[4] = {2, 3, 1, 2};
  const int q[4] = {1, 1, 0, 1};
  const int kv[4][2] = {{1, -1}, {-1, 1}, {0, 1}, {1, 0}};
  for (int i = 0; i < 4; i++) {
    t.lens[0][i] = lens[i];
    t.q[0][i] = q[i];
    t.kv[0][2 * i] = kv[i][0], t.kv[0][2 * i + 1] = kv[i][1];
  }
  t.lens[1][0] = 5;
  t.q[1][0] = 1;
  t.kv[1][0] = 1, t.kv[1][1] = -1;
  td_sum(&t);
  struct sy_attn_plan *p[2];
  if (build_all(&t.desc, p)) {
    /* Q forward from 0 to 1: sequences 0,1 (rows 0..4 -> 0..4) merge; 3 (rows 6..7 -> 5..6) apart. */
    SEND_IS(p[0], SY_ATTN_Q_FWD, 1, {0, 0, 5}, {6, 5, 2});
    SEND_IS(p[0], SY_ATTN_Q_FWD, 0, {5, 0, 1});
    RECV_IS(p[1], SY_ATTN_Q_FWD, 0, {0, 0, 5}, {6, 5, 2});
    RECV_IS(p[1], SY_ATTN_Q_FWD, 1, {0, 7, 5});
    CHECK_EQ_INT(p[1]->dir[SY_ATTN_Q_FWD].recv_total, 12);
    /* Q reverse: the transpose, merged the same way. */
    SEND_IS(p[1], SY_ATTN_Q_REV, 0, {0, 0, 5}, {5, 6, 2});
    RECV_IS(p[0], SY_ATTN_Q_REV, 1, {0, 0, 5}, {5, 6, 2});
    CHECK_EQ_INT(p[0]->dir[SY_ATTN_Q_REV].recv_total, 8);
    /* KV forward from 0 to 1: all four sequences go, in order: rows 0..7 -> 0..7, one segment. */
    SEND_IS(p[0], SY_ATTN_KV_FWD, 1, {0, 0, 8});
    SEND_IS(p[0], SY_ATTN_KV_FWD, 0, {5, 0, 3}); /* seq 2 replica 0, seq 3 replica 1: contiguous */
    /* KV backward at owner 0 from rank 1: replica 0 of seq 0 (staging 0..1), of seq 3 (6..7); replica 1 of
     * seq 1 (8+2 = 10..12), of seq 2 (8+5 = 13). Sources in rank 1's kv_recv: seq0 0, seq1 2, seq2 5, seq3 6. */
    RECV_IS(p[0], SY_ATTN_KV_BWD, 1, {0, 0, 2}, {6, 6, 2}, {2, 10, 4});
    SEND_IS(p[1], SY_ATTN_KV_BWD, 0, {0, 0, 2}, {6, 6, 2}, {2, 10, 4});
    /* From rank 0 itself: replica 0 of seq 2 (staging 5), replica 1 of seq 3 (8 + 6 = 14..15). */
    RECV_IS(p[0], SY_ATTN_KV_BWD, 0, {0, 5, 1}, {1, 14, 2});
    CHECK_EQ_INT(p[0]->dir[SY_ATTN_KV_BWD].recv_total, 16);
    free_all(p, 2);
  }
  td_free(&t);
}

/* Empty sequences (a packed variable-length batch's padding): accepted, in the metadata in order with 0 rows
 * at the place they would start, in no segment list; the rows around them merge as if they were not there. */
static void test_empty_sequences(void) {
  test_desc_t t;
  const int ns[2] = {4, 2};
  td_init(&t, 2, 2, ns);
  const int64_t lens0[4] = {0, 3, 0, 2}, lens1[2] = {0, 0};
  const int q0[4] = {1, 1, 1, 1}, q1[2] = {0, -1};
  const int kv0[8] = {1, 0, 1, 0, 0, -1, 1, 0}, kv1[4] = {0, 1, -1, -1};
  memcpy(t.lens[0], lens0, sizeof lens0), memcpy(t.lens[1], lens1, sizeof lens1);
  memcpy(t.q[0], q0, sizeof q0), memcpy(t.q[1], q1, sizeof q1);
  memcpy(t.kv[0], kv0, sizeof kv0), memcpy(t.kv[1], kv1, sizeof kv1);
  td_sum(&t);
  struct sy_attn_plan *p[2];
  if (build_all(&t.desc, p)) {
    /* Rank 0's Q: sequences 1 and 3 (rows 0..2, 3..4) land at 0..2 and 3..4 of rank 1: one segment. */
    SEND_IS(p[0], SY_ATTN_Q_FWD, 1, {0, 0, 5});
    RECV_IS(p[1], SY_ATTN_Q_FWD, 0, {0, 0, 5});
    NONE(p[1], SY_ATTN_Q_FWD, send, 0); /* rank 1's empty sequence to rank 0 moves nothing */
    CHECK_EQ_INT(p[1]->dir[SY_ATTN_Q_FWD].recv_total, 5);
    CHECK_EQ_INT(p[0]->dir[SY_ATTN_Q_FWD].recv_total, 0);
    /* Every sequence in the metadata, in order, the empty ones where they would start. */
    CHECK_EQ_INT(p[1]->q_recv_count, 4);
    const int64_t want_row[4] = {0, 0, 3, 3}, want_rows[4] = {0, 3, 0, 2};
    for (int i = 0; i < 4; i++) {
      CHECK(p[1]->q_recv[i].src_rank == 0 && p[1]->q_recv[i].seq == i);
      CHECK_EQ_INT(p[1]->q_recv[i].dst_row, want_row[i]);
      CHECK_EQ_INT(p[1]->q_recv[i].rows, want_rows[i]);
      CHECK_EQ_INT(p[0]->q_send[i].rows, want_rows[i]);
    }
    CHECK_EQ_INT(p[0]->q_recv_count, 1); /* rank 1's empty sequence 0 */
    CHECK(p[0]->q_recv[0].src_rank == 1 && p[0]->q_recv[0].rows == 0 && p[0]->q_recv[0].dst_row == 0);
    CHECK_EQ_INT(p[0]->seq_start[1], 0);
    CHECK_EQ_INT(p[0]->seq_start[4], 5);
    /* KV: rank 0's sequence 1 (rows 0..2) to both, 3 (rows 3..4) to 1 then 0; rank 1 owns no tokens. */
    SEND_IS(p[0], SY_ATTN_KV_FWD, 1, {0, 0, 5});
    SEND_IS(p[0], SY_ATTN_KV_FWD, 0, {0, 0, 5});
    CHECK_EQ_INT(p[0]->kv_recv_count, 5);        /* replicas at rank 0: seq 0 c1, 1 c1, 2 c0, 3 c1; rank 1's seq 0 c0 */
    RECV_IS(p[0], SY_ATTN_KV_BWD, 1, {0, 0, 5}); /* replica 0 of sequences 1 and 3: staging 0..4 */
    RECV_IS(p[0], SY_ATTN_KV_BWD, 0, {0, 5, 5}); /* replica 1 of both: staging 5..9 */
    CHECK_EQ_INT(p[1]->dir[SY_ATTN_KV_BWD].recv_total, 0);
    CHECK_EQ_INT(p[0]->max_num_tokens, 5);
    CHECK_EQ_INT(p[0]->max_q_recv_rows, 5);
    free_all(p, 2);
  }
  td_free(&t);
}

/* ---- rejected input ------------------------------------------------------------------------------------ */

#define REJECT(desc, rank, needle)                                             \
  do {                                                                         \
    struct sy_attn_plan *plan_ = (struct sy_attn_plan *)&rng_state;            \
    CHECK_STATUS(sy__attn_plan_build(desc, rank, &plan_), SY_ERR_INVALID_ARG); \
    CHECK(plan_ == NULL);                                                      \
    CHECK(check_log_has(needle, __LINE__));                                    \
  } while (0)

static void test_reject(void) {
  test_desc_t t;
  const int ns[3] = {2, 0, 1};
  td_init(&t, 3, 2, ns);
  t.lens[0][0] = 3, t.lens[0][1] = 2, t.lens[2][0] = 4;
  t.q[0][0] = 1, t.q[0][1] = -1, t.q[2][0] = 0;
  int kv0[4] = {1, 2, 0, -1}, kv2[2] = {-1, 1};
  memcpy(t.kv[0], kv0, sizeof kv0);
  memcpy(t.kv[2], kv2, sizeof kv2);
  td_sum(&t);
  struct sy_attn_plan *ok = NULL;
  CHECK_OK(sy__attn_plan_build(&t.desc, 1, &ok));
  sy__attn_plan_free(ok, NULL);
  /* Rank 1 has no sequences: NULL per-rank arrays are fine there. */
  t.lens_c[1] = NULL, t.q_c[1] = NULL, t.kv_c[1] = NULL;
  CHECK_OK(sy__attn_plan_build(&t.desc, 1, &ok));
  sy__attn_plan_free(ok, NULL);
  sy_attn_plan_desc_t d;

  CHECK_STATUS(sy__attn_plan_build(&t.desc, 0, NULL), SY_ERR_INVALID_ARG);
  CHECK(check_log_has("plan is NULL", __LINE__));
  REJECT(NULL, 0, "sy_attn_plan_create: invalid argument: desc is NULL");
  d = t.desc, d.size = 8;
  REJECT(&d, 0, "desc->size=8");
  d = t.desc, d.world_size = 0;
  REJECT(&d, 0, "desc->world_size=0");
  REJECT(&t.desc, 3, "rank=3");
  REJECT(&t.desc, -1, "rank=-1");
  d = t.desc, d.max_replicas = -1;
  REJECT(&d, 0, "desc->max_replicas=-1");
  d = t.desc, d.max_replicas = 4;
  REJECT(&d, 0, "desc->max_replicas=4");
  d = t.desc, d.num_seqs = NULL;
  REJECT(&d, 0, "desc->num_seqs is NULL");
  d = t.desc, d.num_tokens = NULL;
  REJECT(&d, 0, "desc->num_tokens is NULL");
  d = t.desc, d.seq_lens = NULL;
  REJECT(&d, 0, "seq_lens is NULL");
  d = t.desc, d.q_dst = NULL;
  REJECT(&d, 0, "q_dst is NULL");
  d = t.desc, d.kv_dst = NULL;
  REJECT(&d, 0, "kv_dst is NULL");
  t.lens_c[2] = NULL;
  REJECT(&t.desc, 0, "seq_lens[2] is NULL");
  t.lens_c[2] = t.lens[2];
  t.q_c[0] = NULL;
  REJECT(&t.desc, 0, "q_dst[0] is NULL");
  t.q_c[0] = t.q[0];
  t.kv_c[2] = NULL;
  REJECT(&t.desc, 0, "kv_dst[2] is NULL");
  t.kv_c[2] = t.kv[2];
  t.num_seqs[1] = -1;
  REJECT(&t.desc, 0, "num_seqs[1]=-1");
  t.num_seqs[1] = 0;
  t.lens[0][1] = -5;
  REJECT(&t.desc, 0, "seq_lens[0][1]=-5 must be >= 0");
  t.lens[0][1] = 2;
  t.num_tokens[2] = 5;
  REJECT(&t.desc, 0, "num_tokens[2]=5 but seq_lens[2] sum to 4");
  t.num_tokens[2] = 4;
  t.q[2][0] = 3;
  REJECT(&t.desc, 1, "q_dst[2][0]=3");
  t.q[2][0] = -2;
  REJECT(&t.desc, 1, "q_dst[2][0]=-2");
  t.q[2][0] = 0;
  t.kv[0][2] = 7;
  REJECT(&t.desc, 2, "kv_dst[0][2]=7");
  t.kv[0][2] = -3;
  REJECT(&t.desc, 2, "kv_dst[0][2]=-3");
  t.kv[0][2] = 0;
  t.kv[0][1] = 1; /* sequence 0 lists rank 1 twice */
  REJECT(&t.desc, 2, "listed twice");
  t.kv[0][1] = 2;
  /* int64 overflow: of one rank's lengths, of the sum over ranks, of the staging rows. */
  t.lens[0][0] = INT64_MAX - 1;
  REJECT(&t.desc, 0, "seq_lens[0] overflow int64");
  t.lens[0][0] = INT64_MAX / 2, t.lens[0][1] = 1;
  td_sum(&t);
  REJECT(&t.desc, 0, "max_replicas=2 * num_tokens[0]");
  t.lens[0][0] = INT64_MAX - 10, t.lens[2][0] = 20;
  td_sum(&t);
  d = t.desc, d.max_replicas = 1;
  t.kv[0][1] = 0; /* with C = 1 the list is kv[0][0], kv[0][1] for the two sequences */
  REJECT(&d, 0, "overflow int64 at rank 2");
  t.lens[0][0] = 3, t.lens[0][1] = 2, t.lens[2][0] = 4;
  td_sum(&t);
  td_free(&t);
}

/* ---- time at the bench's scale ------------------------------------------------------------------------ */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_timing(void) {
  rng_state = 12345;
  const int W = 8, C = 4, N = 10000;
  int ns[MAXW] = {0};
  for (int r = 0; r < W; r++) ns[r] = N;
  test_desc_t t;
  td_init(&t, W, C, ns);
  for (int r = 0; r < W; r++)
    for (int i = 0; i < N; i++) {
      t.lens[r][i] = rnd_in(1, 104); /* ~ 525K tokens per rank */
      t.q[r][i] = rnd_in(0, W - 1);
      int *kv = t.kv[r] + (size_t)i * C;
      int first = rnd_in(0, W - 1);
      for (int c = 0; c < C; c++) kv[c] = rnd_in(0, 3) == 0 ? -1 : (first + c) % W;
    }
  td_sum(&t);
  double worst = 0, total = 0;
  for (int r = 0; r < W; r++) {
    struct sy_attn_plan *plan = NULL;
    double t0 = now_s();
    CHECK_OK(sy__attn_plan_build(&t.desc, r, &plan));
    double dt = now_s() - t0;
    total += dt;
    worst = dt > worst ? dt : worst;
    sy__attn_plan_free(plan, NULL);
  }
  printf("timing: W=%d, %d sequences and %lld tokens per rank, C=%d: slowest rank %.2f ms, all ranks %.2f ms\n", W, N,
         (long long)t.num_tokens[0], C, worst * 1e3, total * 1e3);
  CHECK(worst < 0.5);
  td_free(&t);
}

int main(void) {
  char dir[] = "/tmp/sy_test_attn_plan_XXXXXX";
  plan_log_open(dir);

  test_walkthrough();
  test_merging();
  test_empty_sequences();
  test_reject();
  test_timing();

  plan_log_close(dir);
  return check_report();
}
