/*
 * test_attn_plan.c — the attention-dispatch metadata planner (src/plan/attn_plan.c): hand-built examples
 * with the rows written out (the seed's 3-rank walkthrough, merging, the KV backward's staging order),
 * invariants on seeded random descriptions checked against a token-by-token reference model (send and
 * receive lists agree exactly, forward then reverse is the identity, counts transpose, totals, per-source
 * blocks contiguous and in (source, sequence, replica) order, segments sorted and maximally merged), every
 * rejected input, and the build time at the bench's scale.
 */
#include "check.h"
#include "core/internal.h"
#include "plan/attn_plan.h"
#include "switchyard.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXW 8

/* ---- the log, read back ----------------------------------------------------------------------------- */

/* ---- a description the test owns ---------------------------------------------------------------------- */

typedef struct test_desc {
  int world, replicas;
  int num_seqs[MAXW];
  int64_t num_tokens[MAXW];
  int64_t *lens[MAXW];
  int *q[MAXW];
  int *kv[MAXW];
  const int64_t *lens_c[MAXW];
  const int *q_c[MAXW];
  const int *kv_c[MAXW];
  sy_attn_plan_desc_t desc;
} test_desc_t;

static void td_init(test_desc_t *t, int world, int replicas, const int *num_seqs) {
  memset(t, 0, sizeof *t);
  t->world = world;
  t->replicas = replicas;
  for (int r = 0; r < world; r++) {
    int n = num_seqs[r];
    t->num_seqs[r] = n;
    t->lens[r] = calloc((size_t)n + 1, sizeof(int64_t));
    t->q[r] = calloc((size_t)n + 1, sizeof(int));
    t->kv[r] = calloc((size_t)n * (size_t)replicas + 1, sizeof(int));
    t->lens_c[r] = t->lens[r];
    t->q_c[r] = t->q[r];
    t->kv_c[r] = t->kv[r];
  }
  sy_attn_plan_desc_t d = SY_ATTN_PLAN_DESC_INIT;
  d.world_size = world;
  d.max_replicas = replicas;
  d.num_seqs = t->num_seqs;
  d.num_tokens = t->num_tokens;
  d.seq_lens = t->lens_c;
  d.q_dst = t->q_c;
  d.kv_dst = t->kv_c;
  t->desc = d;
}

static void td_sum(test_desc_t *t) {
  for (int r = 0; r < t->world; r++) {
    t->num_tokens[r] = 0;
    for (int i = 0; i < t->num_seqs[r]; i++) t->num_tokens[r] += t->lens[r][i];
  }
}

static void td_free(test_desc_t *t) {
  for (int r = 0; r < t->world; r++) free(t->lens[r]), free(t->q[r]), free(t->kv[r]);
}

static int build_all(const sy_attn_plan_desc_t *desc, struct sy_attn_plan **plans) {
  int ok = 1;
  for (int r = 0; r < desc->world_size; r++) {
    plans[r] = NULL;
    sy_status_t st = sy__attn_plan_build(desc, r, &plans[r]);
    CHECK_OK(st);
    if (st != SY_SUCCESS || !plans[r]) ok = 0;
  }
  return ok;
}

static void free_all(struct sy_attn_plan **plans, int world) {
  for (int r = 0; r < world; r++) sy__attn_plan_free(plans[r]);
}

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

/* ---- the reference model and the invariants -------------------------------------------------------- */

static int64_t enc(int peer, int64_t row) { return ((int64_t)peer << 40) | row; }

typedef struct model {
  int world, replicas;
  int64_t fwd_total[2][MAXW];          /* [Q/KV][destination] */
  int64_t *expect[SY_ATTN_DIRS][MAXW]; /* expected origin enc(sender, src_row) of each received row */
  int64_t expect_len[SY_ATTN_DIRS][MAXW];
} model_t;

/* Token by token: the arrival order (source, sequence, replica) and the transposes. */
static void model_build(model_t *m, const test_desc_t *t) {
  memset(m, 0, sizeof *m);
  const int W = t->world, C = t->replicas;
  m->world = W, m->replicas = C;
  for (int s = 0; s < W; s++)
    for (int i = 0; i < t->num_seqs[s]; i++) {
      if (t->q[s][i] >= 0) m->fwd_total[0][t->q[s][i]] += t->lens[s][i];
      for (int c = 0; c < C; c++)
        if (t->kv[s][i * C + c] >= 0) m->fwd_total[1][t->kv[s][i * C + c]] += t->lens[s][i];
    }
  for (int r = 0; r < W; r++) {
    m->expect_len[SY_ATTN_Q_FWD][r] = m->fwd_total[0][r];
    m->expect_len[SY_ATTN_KV_FWD][r] = m->fwd_total[1][r];
    m->expect_len[SY_ATTN_Q_REV][r] = t->num_tokens[r];
    m->expect_len[SY_ATTN_KV_BWD][r] = C * t->num_tokens[r];
    for (int d = 0; d < SY_ATTN_DIRS; d++) {
      m->expect[d][r] = malloc(((size_t)m->expect_len[d][r] + 1) * sizeof(int64_t));
      for (int64_t x = 0; x < m->expect_len[d][r]; x++) m->expect[d][r][x] = -1;
    }
  }
  int64_t q_next[MAXW] = {0}, kv_next[MAXW] = {0};
  for (int s = 0; s < W; s++) {
    int64_t t0 = 0;
    for (int i = 0; i < t->num_seqs[s]; i++) {
      for (int64_t k = 0; k < t->lens[s][i]; k++) {
        int d = t->q[s][i];
        if (d >= 0) {
          int64_t x = q_next[d]++;
          m->expect[SY_ATTN_Q_FWD][d][x] = enc(s, t0 + k);
          m->expect[SY_ATTN_Q_REV][s][t0 + k] = enc(d, x);
        }
        for (int c = 0; c < C; c++) {
          d = t->kv[s][i * C + c];
          if (d < 0) continue;
          /* kv_next advances per token of the whole sequence; rows of one sequence are consecutive. */
          int64_t x = kv_next[d] + k;
          m->expect[SY_ATTN_KV_FWD][d][x] = enc(s, t0 + k);
          m->expect[SY_ATTN_KV_BWD][s][c * t->num_tokens[s] + t0 + k] = enc(d, x);
        }
      }
      for (int c = 0; c < C; c++)
        if (t->kv[s][i * C + c] >= 0) kv_next[t->kv[s][i * C + c]] += t->lens[s][i];
      t0 += t->lens[s][i];
    }
  }
}

static void model_free(model_t *m) {
  for (int d = 0; d < SY_ATTN_DIRS; d++)
    for (int r = 0; r < m->world; r++) free(m->expect[d][r]);
}

/* One side's list structure: starts monotone, segments of a peer ascending and maximally merged,
 * rows per peer. */
static void check_side(const int64_t *start, const sy_attn_seg_t *segs, const int64_t *rows, int W) {
  CHECK_EQ_INT(start[0], 0);
  for (int p = 0; p < W; p++) {
    CHECK(start[p + 1] >= start[p]);
    int64_t sum = 0;
    for (int64_t k = start[p]; k < start[p + 1]; k++) {
      CHECK(segs[k].rows > 0);
      CHECK(segs[k].src_row >= 0 && segs[k].dst_row >= 0);
      sum += segs[k].rows;
      if (k > start[p]) {
        const sy_attn_seg_t *a = &segs[k - 1], *b = &segs[k];
        CHECK(a->dst_row + a->rows <= b->dst_row);                                          /* ascending, no overlap */
        CHECK(!(a->src_row + a->rows == b->src_row && a->dst_row + a->rows == b->dst_row)); /* merged */
      }
    }
    CHECK_EQ_INT(sum, rows[p]);
  }
}

/* Every invariant of the brief on one description. */
static void check_invariants(const test_desc_t *t) {
  const int W = t->world, C = t->replicas;
  struct sy_attn_plan *p[MAXW];
  if (!build_all(&t->desc, p)) return;
  model_t m;
  model_build(&m, t);
  int64_t *got_send[MAXW], *got_recv[MAXW];
  for (int dir = 0; dir < SY_ATTN_DIRS; dir++) {
    for (int r = 0; r < W; r++) {
      const sy_attn_dir_t *D = &p[r]->dir[dir];
      CHECK_EQ_INT(D->recv_total, m.expect_len[dir][r]);
      check_side(D->send_start, D->send_segs, D->send_rows, W);
      check_side(D->recv_start, D->recv_segs, D->recv_rows, W);
      size_t len = (size_t)m.expect_len[dir][r] + 1;
      got_send[r] = malloc(len * sizeof(int64_t));
      got_recv[r] = malloc(len * sizeof(int64_t));
      for (size_t x = 0; x < len; x++) got_send[r][x] = got_recv[r][x] = -1;
    }
    /* What s sends d is exactly what d expects from s. */
    for (int s = 0; s < W; s++)
      for (int d = 0; d < W; d++) {
        const sy_attn_dir_t *S = &p[s]->dir[dir], *R = &p[d]->dir[dir];
        int64_t n = S->send_start[d + 1] - S->send_start[d];
        CHECK_EQ_INT(n, R->recv_start[s + 1] - R->recv_start[s]);
        CHECK_EQ_INT(S->send_rows[d], R->recv_rows[s]);
        if (n != R->recv_start[s + 1] - R->recv_start[s]) continue;
        CHECK(!memcmp(S->send_segs + S->send_start[d], R->recv_segs + R->recv_start[s],
                      (size_t)n * sizeof(sy_attn_seg_t)));
      }
    /* Row by row, against the model; a row written twice shows as a mismatch. */
    int twice = 0, out_of_range = 0;
    for (int s = 0; s < W; s++) {
      const sy_attn_dir_t *S = &p[s]->dir[dir];
      for (int d = 0; d < W; d++)
        for (int64_t k = S->send_start[d]; k < S->send_start[d + 1]; k++)
          for (int64_t j = 0; j < S->send_segs[k].rows; j++) {
            int64_t x = S->send_segs[k].dst_row + j;
            if (x >= m.expect_len[dir][d]) {
              out_of_range++;
              continue;
            }
            if (got_send[d][x] != -1) twice++;
            got_send[d][x] = enc(s, S->send_segs[k].src_row + j);
          }
      const sy_attn_dir_t *R = &p[s]->dir[dir];
      for (int q = 0; q < W; q++)
        for (int64_t k = R->recv_start[q]; k < R->recv_start[q + 1]; k++)
          for (int64_t j = 0; j < R->recv_segs[k].rows; j++) {
            int64_t x = R->recv_segs[k].dst_row + j;
            if (x >= m.expect_len[dir][s]) {
              out_of_range++;
              continue;
            }
            got_recv[s][x] = enc(q, R->recv_segs[k].src_row + j);
          }
    }
    CHECK_EQ_INT(twice, 0);
    CHECK_EQ_INT(out_of_range, 0);
    for (int r = 0; r < W; r++) {
      size_t len = (size_t)m.expect_len[dir][r];
      CHECK(!memcmp(got_send[r], m.expect[dir][r], len * sizeof(int64_t)));
      CHECK(!memcmp(got_recv[r], m.expect[dir][r], len * sizeof(int64_t)));
    }
    /* Forward: the rows from one source form one block at the destination, sources in rank order. */
    if (dir == SY_ATTN_Q_FWD || dir == SY_ATTN_KV_FWD)
      for (int d = 0; d < W; d++) {
        const sy_attn_dir_t *R = &p[d]->dir[dir];
        int64_t base = 0;
        for (int s = 0; s < W; s++) {
          int64_t next = base;
          for (int64_t k = R->recv_start[s]; k < R->recv_start[s + 1]; k++) {
            CHECK_EQ_INT(R->recv_segs[k].dst_row, next);
            next += R->recv_segs[k].rows;
          }
          base = next;
        }
        CHECK_EQ_INT(base, R->recv_total);
      }
    for (int r = 0; r < W; r++) free(got_send[r]), free(got_recv[r]);
  }

  /* Counts: identical on every rank, equal to the lists' rows, reverse = transpose of forward. */
  for (int r = 0; r < W; r++) {
    CHECK(!memcmp(p[r]->q_counts, p[0]->q_counts, (size_t)W * W * sizeof(int64_t)));
    CHECK(!memcmp(p[r]->kv_counts, p[0]->kv_counts, (size_t)W * W * sizeof(int64_t)));
  }
  const int64_t *qc = p[0]->q_counts, *kc = p[0]->kv_counts;
  for (int s = 0; s < W; s++)
    for (int d = 0; d < W; d++) {
      CHECK_EQ_INT(p[s]->dir[SY_ATTN_Q_FWD].send_rows[d], qc[s * W + d]);
      CHECK_EQ_INT(p[d]->dir[SY_ATTN_Q_REV].send_rows[s], qc[s * W + d]);
      CHECK_EQ_INT(p[s]->dir[SY_ATTN_Q_REV].recv_rows[d], qc[s * W + d]);
      CHECK_EQ_INT(p[s]->dir[SY_ATTN_KV_FWD].send_rows[d], kc[s * W + d]);
      CHECK_EQ_INT(p[d]->dir[SY_ATTN_KV_BWD].send_rows[s], kc[s * W + d]);
      CHECK_EQ_INT(p[s]->dir[SY_ATTN_KV_BWD].recv_rows[d], kc[s * W + d]);
    }

  /* Per-sequence metadata, and forward-then-reverse composed through the plan's own lists. */
  for (int s = 0; s < W; s++) {
    const struct sy_attn_plan *P = p[s];
    CHECK_EQ_INT(P->num_seqs, t->num_seqs[s]);
    CHECK_EQ_INT(P->num_tokens, t->num_tokens[s]);
    CHECK_EQ_INT(P->max_replicas, C);
    CHECK_EQ_INT(P->seq_start[P->num_seqs], P->num_tokens);
    for (int i = 0; i < P->num_seqs; i++) {
      const int64_t st = P->seq_start[i], len = t->lens[s][i];
      CHECK_EQ_INT(P->seq_start[i + 1] - st, len);
      const sy_attn_seq_place_t *qp = &P->q_send[i];
      CHECK(qp->src_rank == s && qp->seq == i && qp->replica == 0 && qp->src_row == st && qp->rows == len);
      CHECK_EQ_INT(qp->dst_rank, t->q[s][i]);
      const int d = qp->dst_rank;
      if (d < 0) {
        CHECK_EQ_INT(qp->dst_row, -1);
        for (int64_t k = 0; k < len; k++) CHECK_EQ_INT(m.expect[SY_ATTN_Q_REV][s][st + k], -1);
      } else {
        CHECK_EQ_INT(m.expect[SY_ATTN_Q_FWD][d][qp->dst_row], enc(s, st));
        CHECK_EQ_INT(m.expect[SY_ATTN_Q_REV][s][st + len - 1], enc(d, qp->dst_row + len - 1));
      }
      for (int c = 0; c < C; c++) {
        const sy_attn_seq_place_t *kp = &P->kv_send[i * C + c];
        CHECK(kp->src_rank == s && kp->seq == i && kp->replica == c && kp->src_row == st && kp->rows == len);
        const int kd = kp->dst_rank;
        const int64_t x = kp->dst_row;
        CHECK_EQ_INT(kd, t->kv[s][i * C + c]);
        if (kd < 0) {
          CHECK_EQ_INT(x, -1);
          continue;
        }
        CHECK_EQ_INT(m.expect[SY_ATTN_KV_FWD][kd][x], enc(s, st));
        CHECK_EQ_INT(m.expect[SY_ATTN_KV_BWD][s][c * P->num_tokens + st], enc(kd, x));
      }
    }
  }
  /* What each rank receives, sequence by sequence: every source's sends to it, in (source, sequence, replica)
   * order, back to back from row 0 (and so the model's rows, through the send lists checked above). */
  for (int d = 0; d < W; d++)
    for (int kv = 0; kv < 2; kv++) {
      const sy_attn_seq_place_t *got = kv ? p[d]->kv_recv : p[d]->q_recv;
      const int64_t count = kv ? p[d]->kv_recv_count : p[d]->q_recv_count;
      int64_t k = 0, row = 0;
      for (int s = 0; s < W; s++) {
        const int per = kv ? C : 1;
        for (int64_t i = 0; i < (int64_t)p[s]->num_seqs * per; i++) {
          const sy_attn_seq_place_t *want = kv ? &p[s]->kv_send[i] : &p[s]->q_send[i];
          if (want->dst_rank != d) continue;
          CHECK(k < count);
          if (k >= count) break;
          CHECK(!memcmp(&got[k], want, sizeof *want));
          CHECK_EQ_INT(got[k].dst_row, row);
          row += got[k].rows;
          k++;
        }
      }
      CHECK_EQ_INT(k, count);
      CHECK_EQ_INT(row, p[d]->dir[kv ? SY_ATTN_KV_FWD : SY_ATTN_Q_FWD].recv_total);
    }
  model_free(&m);
  free_all(p, W);
}

/* ---- seeded random descriptions ----------------------------------------------------------------------- */

static uint64_t rng_state;
static uint32_t rnd(void) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state >> 16);
}
static int rnd_in(int lo, int hi) { return lo + (int)(rnd() % (uint32_t)(hi - lo + 1)); }

enum { SHAPE_RANDOM, SHAPE_ALL_TO_ONE, SHAPE_ONE_RECEIVES_NOTHING, SHAPE_EMPTY_RANKS, SHAPE_CONTIGUOUS, SHAPES };

/* A random description: destinations (some -1), KV lists of distinct ranks in random slots. */
static void random_desc(test_desc_t *t, int W, int C, int shape, int max_len) {
  int ns[MAXW] = {0};
  for (int r = 0; r < W; r++) ns[r] = rnd_in(0, 12);
  if (shape == SHAPE_EMPTY_RANKS) ns[rnd_in(0, W - 1)] = 0, ns[0] = 0;
  td_init(t, W, C, ns);
  const int sink = rnd_in(0, W - 1), starved = rnd_in(0, W - 1);
  for (int r = 0; r < W; r++) {
    for (int i = 0; i < ns[r]; i++) {
      t->lens[r][i] = rnd_in(1, max_len);
      int q = rnd_in(0, 5) == 0 ? -1 : rnd_in(0, W - 1);
      if (shape == SHAPE_ALL_TO_ONE) q = sink;
      if (shape == SHAPE_ONE_RECEIVES_NOTHING && q == starved) q = W > 1 ? (q + 1) % W : -1;
      if (shape == SHAPE_CONTIGUOUS) q = (i * W) / (ns[r] ? ns[r] : 1); /* runs of sequences to one rank */
      t->q[r][i] = q;
      int *kv = t->kv[r] + (size_t)i * C;
      for (int c = 0; c < C; c++) kv[c] = -1;
      int want = rnd_in(0, C);
      for (int k = 0; k < want; k++) {
        int d = rnd_in(0, W - 1);
        if (shape == SHAPE_ALL_TO_ONE) d = sink;
        if (shape == SHAPE_ONE_RECEIVES_NOTHING && d == starved) continue;
        int dup = 0;
        for (int c = 0; c < C; c++) dup |= kv[c] == d;
        if (dup) continue;
        int slot = rnd_in(0, C - 1);
        if (kv[slot] == -1) kv[slot] = d;
      }
    }
  }
  td_sum(t);
}

static void test_random(void) {
  rng_state = 0x5c09737a48bdf9ebull;
  int cases = 0;
  for (int W = 1; W <= MAXW; W++)
    for (int C = 0; C <= W; C++)
      for (int shape = 0; shape < SHAPES; shape++)
        for (int trial = 0; trial < 3; trial++) {
          test_desc_t t;
          random_desc(&t, W, C, shape, trial == 0 ? 1 : 9);
          if (C == 0) t.desc.kv_dst = NULL;
          int before = check_failures_;
          check_invariants(&t);
          if (check_failures_ != before)
            fprintf(stderr, "  (random case W=%d C=%d shape=%d trial=%d)\n", W, C, shape, trial);
          td_free(&t);
          cases++;
        }
  printf("random: %d descriptions\n", cases);
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
  sy__attn_plan_free(ok);
  /* Rank 1 has no sequences: NULL per-rank arrays are fine there. */
  t.lens_c[1] = NULL, t.q_c[1] = NULL, t.kv_c[1] = NULL;
  CHECK_OK(sy__attn_plan_build(&t.desc, 1, &ok));
  sy__attn_plan_free(ok);
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
  t.lens[0][1] = 0;
  REJECT(&t.desc, 0, "seq_lens[0][1]=0 must be > 0");
  t.lens[0][1] = -5;
  REJECT(&t.desc, 0, "seq_lens[0][1]=-5 must be > 0");
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
    sy__attn_plan_free(plan);
  }
  printf("timing: W=%d, %d sequences and %lld tokens per rank, C=%d: slowest rank %.2f ms, all ranks %.2f ms\n", W, N,
         (long long)t.num_tokens[0], C, worst * 1e3, total * 1e3);
  CHECK(worst < 0.5);
  td_free(&t);
}

int main(void) {
  char dir[] = "/tmp/sy_test_attn_plan_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(check_log_path, sizeof check_log_path, "%s/log.txt", dir);
  setenv("SY_DEBUG_FILE", check_log_path, 1);
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();

  test_walkthrough();
  test_merging();
  test_random();
  test_reject();
  test_timing();

  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  unlink(check_log_path);
  CHECK_EQ_INT(rmdir(dir), 0);
  return check_report();
}
