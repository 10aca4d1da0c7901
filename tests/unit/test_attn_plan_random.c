/*
 * test_attn_plan_random.c — the attention-dispatch metadata planner (src/plan/attn_plan.c): invariants on
 * seeded random descriptions (C = 0..W replicas, W = 1..8; shapes: random, all to one rank, one rank receiving
 * nothing, empty ranks, runs of sequences to one rank, empty sequences), checked against a token-by-token
 * reference model: send and receive lists agree exactly, forward then reverse is the identity, counts transpose,
 * totals and their maxima over ranks, per-source blocks contiguous and in (source, sequence, replica) order,
 * segments sorted and maximally merged; every rank's fingerprint is the same, and changing any one entry of the
 * description changes it. The hand-built examples, rejected input and timing: test_attn_plan.c.
 */
#include "attn_plan_test.h"

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

/* One direction's lists on every rank: the structure of each side, what s sends d is exactly what d expects
 * from s, and row by row against the model (a row written twice shows as a mismatch); forward, the rows from
 * one source form one block at the destination, sources in rank order. */
static void check_direction(struct sy_attn_plan *const *p, const model_t *m, int W, int dir) {
  int64_t *got_send[MAXW], *got_recv[MAXW];
  for (int r = 0; r < W; r++) {
    const sy_attn_dir_t *D = &p[r]->dir[dir];
    CHECK_EQ_INT(D->recv_total, m->expect_len[dir][r]);
    check_side(D->send_start, D->send_segs, D->send_rows, W);
    check_side(D->recv_start, D->recv_segs, D->recv_rows, W);
    size_t len = (size_t)m->expect_len[dir][r] + 1;
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
      CHECK(
          !memcmp(S->send_segs + S->send_start[d], R->recv_segs + R->recv_start[s], (size_t)n * sizeof(sy_attn_seg_t)));
    }
  /* Row by row, against the model; a row written twice shows as a mismatch. */
  int twice = 0, out_of_range = 0;
  for (int s = 0; s < W; s++) {
    const sy_attn_dir_t *S = &p[s]->dir[dir];
    for (int d = 0; d < W; d++)
      for (int64_t k = S->send_start[d]; k < S->send_start[d + 1]; k++)
        for (int64_t j = 0; j < S->send_segs[k].rows; j++) {
          int64_t x = S->send_segs[k].dst_row + j;
          if (x >= m->expect_len[dir][d]) {
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
          if (x >= m->expect_len[dir][s]) {
            out_of_range++;
            continue;
          }
          got_recv[s][x] = enc(q, R->recv_segs[k].src_row + j);
        }
  }
  CHECK_EQ_INT(twice, 0);
  CHECK_EQ_INT(out_of_range, 0);
  for (int r = 0; r < W; r++) {
    size_t len = (size_t)m->expect_len[dir][r];
    CHECK(!memcmp(got_send[r], m->expect[dir][r], len * sizeof(int64_t)));
    CHECK(!memcmp(got_recv[r], m->expect[dir][r], len * sizeof(int64_t)));
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
static void check_counts(struct sy_attn_plan *const *p, int W) {
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
}

/* Per-sequence metadata, and forward-then-reverse composed through the plan's own lists. */
static void check_seq_places(const test_desc_t *t, struct sy_attn_plan *const *p, const model_t *m) {
  const int W = t->world, C = t->replicas;
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
      if (len == 0) { /* an empty sequence: sent where its place would start, no row anywhere */
        CHECK(d < 0 ? qp->dst_row == -1 : qp->dst_row >= 0 && qp->dst_row <= m->expect_len[SY_ATTN_Q_FWD][d]);
        for (int c = 0; c < C; c++) {
          const sy_attn_seq_place_t *kp = &P->kv_send[i * C + c];
          CHECK(kp->rows == 0 && kp->replica == c && kp->dst_rank == t->kv[s][i * C + c]);
          CHECK(kp->dst_rank < 0 ? kp->dst_row == -1 : kp->dst_row <= m->expect_len[SY_ATTN_KV_FWD][kp->dst_rank]);
        }
        continue;
      }
      if (d < 0) {
        CHECK_EQ_INT(qp->dst_row, -1);
        for (int64_t k = 0; k < len; k++) CHECK_EQ_INT(m->expect[SY_ATTN_Q_REV][s][st + k], -1);
      } else {
        CHECK_EQ_INT(m->expect[SY_ATTN_Q_FWD][d][qp->dst_row], enc(s, st));
        CHECK_EQ_INT(m->expect[SY_ATTN_Q_REV][s][st + len - 1], enc(d, qp->dst_row + len - 1));
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
        CHECK_EQ_INT(m->expect[SY_ATTN_KV_FWD][kd][x], enc(s, st));
        CHECK_EQ_INT(m->expect[SY_ATTN_KV_BWD][s][c * P->num_tokens + st], enc(kd, x));
      }
    }
  }
}

/* What each rank receives, sequence by sequence: every source's sends to it, in (source, sequence, replica)
 * order, back to back from row 0 (and so the model's rows, through the send lists checked above). */
static void check_recv_places(struct sy_attn_plan *const *p, int W, int C) {
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
}

/* What every rank's buffers need, over every rank: the same on every rank, the most of the model's totals. */
static void check_maxima(struct sy_attn_plan *const *p, const test_desc_t *t, const model_t *m) {
  int64_t tokens = 0, q = 0, kv = 0;
  for (int r = 0; r < t->world; r++) {
    tokens = t->num_tokens[r] > tokens ? t->num_tokens[r] : tokens;
    q = m->fwd_total[0][r] > q ? m->fwd_total[0][r] : q;
    kv = m->fwd_total[1][r] > kv ? m->fwd_total[1][r] : kv;
  }
  for (int r = 0; r < t->world; r++) {
    CHECK_EQ_INT(p[r]->max_num_tokens, tokens);
    CHECK_EQ_INT(p[r]->max_q_recv_rows, q);
    CHECK_EQ_INT(p[r]->max_kv_recv_rows, kv);
    CHECK(p[r]->fingerprint == p[0]->fingerprint);
  }
}

/* One entry of the description changed (then restored): a different fingerprint. The entry is drawn from the
 * lengths and destinations (the hash reads the description as it is, valid or not); a length changes with
 * num_tokens, so that it is not only num_tokens that tells the two apart. */
static void check_fingerprint_changes(test_desc_t *t, uint64_t want_not) {
  const int W = t->world, C = t->replicas;
  const int r = rnd_in(0, W - 1);
  if (t->num_seqs[r] == 0) return;
  const int i = rnd_in(0, t->num_seqs[r] - 1), field = rnd_in(0, C > 0 ? 2 : 1);
  int64_t *len = &t->lens[r][i];
  int *dst = field == 1 ? &t->q[r][i] : C > 0 ? &t->kv[r][i * C + rnd_in(0, C - 1)] : &t->q[r][i];
  const int64_t old_len = *len;
  const int old_dst = *dst;
  if (field == 0) *len += 1, t->num_tokens[r] += 1;
  else *dst = old_dst == -1 ? 0 : -1;
  CHECK(sy__attn_desc_fingerprint(&t->desc) != want_not);
  *len = old_len, *dst = old_dst;
  td_sum(t);
}

/* Every invariant of the brief on one description. */
static void check_invariants(test_desc_t *t) {
  const int W = t->world, C = t->replicas;
  struct sy_attn_plan *p[MAXW];
  if (!build_all(&t->desc, p)) return;
  model_t m;
  model_build(&m, t);
  for (int dir = 0; dir < SY_ATTN_DIRS; dir++) check_direction(p, &m, W, dir);
  check_counts(p, W);
  check_seq_places(t, p, &m);
  check_recv_places(p, W, C);
  check_maxima(p, t, &m);
  check_fingerprint_changes(t, p[0]->fingerprint);
  CHECK(sy__attn_desc_fingerprint(&t->desc) == p[0]->fingerprint);
  model_free(&m);
  free_all(p, W);
}

/* ---- seeded random descriptions ----------------------------------------------------------------------- */

enum {
  SHAPE_RANDOM,
  SHAPE_ALL_TO_ONE,
  SHAPE_ONE_RECEIVES_NOTHING,
  SHAPE_EMPTY_RANKS,
  SHAPE_CONTIGUOUS,
  SHAPE_EMPTY_SEQS,
  SHAPES
};

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
      if (shape == SHAPE_EMPTY_SEQS && rnd_in(0, 2) == 0) t->lens[r][i] = 0;
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

int main(void) {
  char dir[] = "/tmp/sy_test_attn_plan_random_XXXXXX";
  plan_log_open(dir);

  test_random();

  plan_log_close(dir);
  return check_report();
}
