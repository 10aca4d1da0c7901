/*
 * attn_check.c — the invariants of attn_check.h. The expected plan comes from a model built straight from
 * the description: the arrival order (source, sequence, replica) gives every sequence's destination row,
 * and from that the origin of every row each direction delivers (encoded peer << 40 | row).
 */
#include "attn_check.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define ROW_MAP_LIMIT (1 << 20) /* rows of all origin maps together: more, and only the segments are checked */

static int64_t enc(int peer, int64_t row) { return ((int64_t)peer << 40) | row; }

/* ---- the model of a plan set ---------------------------------------------------------------------------- */

typedef struct model {
  int W, C;
  int64_t *q_row[FUZZ_MAX_WORLD], *kv_row[FUZZ_MAX_WORLD]; /* destination row of each sequence (replica), -1 */
  int64_t q_rows[FUZZ_MAX_WORLD], kv_rows[FUZZ_MAX_WORLD]; /* forward totals at each destination */
  int64_t q_pair[FUZZ_MAX_WORLD][FUZZ_MAX_WORLD], kv_pair[FUZZ_MAX_WORLD][FUZZ_MAX_WORLD]; /* [source][dest] */
  int64_t len[SY_ATTN_DIRS][FUZZ_MAX_WORLD];     /* rows each rank's output of a direction holds */
  int64_t src_len[SY_ATTN_DIRS][FUZZ_MAX_WORLD]; /* rows each rank's input of a direction holds */
  int64_t *origin[SY_ATTN_DIRS][FUZZ_MAX_WORLD]; /* NULL: maps too large, segments only */
} model_t;

static void model_build(model_t *m, const sy_attn_plan_desc_t *d) {
  memset(m, 0, sizeof *m);
  const int W = d->world_size, C = d->max_replicas;
  m->W = W, m->C = C;
  for (int s = 0; s < W; s++) {
    const int n = d->num_seqs[s];
    m->q_row[s] = malloc(((size_t)n + 1) * sizeof(int64_t));
    m->kv_row[s] = malloc(((size_t)n * C + 1) * sizeof(int64_t));
    for (int i = 0; i < n; i++) {
      const int64_t len = d->seq_lens[s][i];
      const int q = d->q_dst[s][i];
      m->q_row[s][i] = q >= 0 ? m->q_rows[q] : -1;
      if (q >= 0) m->q_rows[q] += len, m->q_pair[s][q] += len;
      for (int c = 0; c < C; c++) {
        const int kd = d->kv_dst[s][(size_t)i * C + c];
        m->kv_row[s][(size_t)i * C + c] = kd >= 0 ? m->kv_rows[kd] : -1;
        if (kd >= 0) m->kv_rows[kd] += len, m->kv_pair[s][kd] += len;
      }
    }
  }
  int64_t all = 0;
  for (int r = 0; r < W; r++) {
    const int64_t t = d->num_tokens[r];
    m->len[SY_ATTN_Q_FWD][r] = m->src_len[SY_ATTN_Q_REV][r] = m->q_rows[r];
    m->len[SY_ATTN_KV_FWD][r] = m->src_len[SY_ATTN_KV_BWD][r] = m->kv_rows[r];
    m->len[SY_ATTN_Q_REV][r] = m->src_len[SY_ATTN_Q_FWD][r] = m->src_len[SY_ATTN_KV_FWD][r] = t;
    m->len[SY_ATTN_KV_BWD][r] = (int64_t)C * t;
    for (int dir = 0; dir < SY_ATTN_DIRS; dir++) all += m->len[dir][r];
  }
  if (all > ROW_MAP_LIMIT) return;
  for (int dir = 0; dir < SY_ATTN_DIRS; dir++)
    for (int r = 0; r < W; r++) {
      m->origin[dir][r] = malloc(((size_t)m->len[dir][r] + 1) * sizeof(int64_t));
      for (int64_t x = 0; x < m->len[dir][r]; x++) m->origin[dir][r][x] = -1;
    }
  for (int s = 0; s < W; s++) {
    int64_t start = 0;
    for (int i = 0; i < d->num_seqs[s]; i++) {
      const int64_t len = d->seq_lens[s][i];
      for (int64_t k = 0; k < len; k++) {
        const int q = d->q_dst[s][i];
        if (q >= 0) {
          m->origin[SY_ATTN_Q_FWD][q][m->q_row[s][i] + k] = enc(s, start + k);
          m->origin[SY_ATTN_Q_REV][s][start + k] = enc(q, m->q_row[s][i] + k);
        }
        for (int c = 0; c < C; c++) {
          const int kd = d->kv_dst[s][(size_t)i * C + c];
          if (kd < 0) continue;
          const int64_t x = m->kv_row[s][(size_t)i * C + c] + k;
          m->origin[SY_ATTN_KV_FWD][kd][x] = enc(s, start + k);
          m->origin[SY_ATTN_KV_BWD][s][c * d->num_tokens[s] + start + k] = enc(kd, x);
        }
      }
      start += len;
    }
  }
}

static void model_free(model_t *m) {
  for (int r = 0; r < m->W; r++) {
    free(m->q_row[r]), free(m->kv_row[r]);
    for (int dir = 0; dir < SY_ATTN_DIRS; dir++) free(m->origin[dir][r]);
  }
}

/* ---- the plans against the model ---------------------------------------------------------------------- */

static int same_place(const sy_attn_seq_place_t *a, const sy_attn_seq_place_t *b) {
  return a->src_rank == b->src_rank && a->seq == b->seq && a->replica == b->replica && a->dst_rank == b->dst_rank &&
         a->src_row == b->src_row && a->dst_row == b->dst_row && a->rows == b->rows;
}

/* sy_attn_plan_info and sy_attn_plan_seqs on every rank. */
static void check_seqs(const sy_attn_plan_desc_t *d, sy_attn_plan_t const *p, const model_t *m) {
  const int W = m->W, C = m->C;
  int64_t max_tokens = 0, max_q = 0, max_kv = 0; /* the maxima over ranks every rank's info gives */
  for (int r = 0; r < W; r++) {
    if (d->num_tokens[r] > max_tokens) max_tokens = d->num_tokens[r];
    if (m->q_rows[r] > max_q) max_q = m->q_rows[r];
    if (m->kv_rows[r] > max_kv) max_kv = m->kv_rows[r];
  }
  for (int r = 0; r < W; r++) {
    sy_attn_plan_info_t info = SY_ATTN_PLAN_INFO_INIT;
    FUZZ_CHECK(sy_attn_plan_info(p[r], &info) == SY_SUCCESS);
    FUZZ_CHECK(info.num_tokens == d->num_tokens[r]);
    FUZZ_CHECK(info.q_recv_rows == m->q_rows[r] && info.kv_recv_rows == m->kv_rows[r]);
    FUZZ_CHECK(info.max_num_tokens == max_tokens && info.max_q_recv_rows == max_q && info.max_kv_recv_rows == max_kv);
    for (int peer = 0; peer < W; peer++) {
      FUZZ_CHECK(info.q_send_to[peer] == m->q_pair[r][peer] && info.q_recv_from[peer] == m->q_pair[peer][r]);
      FUZZ_CHECK(info.kv_send_to[peer] == m->kv_pair[r][peer] && info.kv_recv_from[peer] == m->kv_pair[peer][r]);
    }
    sy_attn_plan_seqs_t seqs = SY_ATTN_PLAN_SEQS_INIT;
    FUZZ_CHECK(sy_attn_plan_seqs(p[r], &seqs) == SY_SUCCESS);
    FUZZ_CHECK(seqs.num_seqs == d->num_seqs[r] && seqs.max_replicas == C);
    int64_t start = 0;
    for (int i = 0; i < d->num_seqs[r]; i++) {
      const int64_t len = d->seq_lens[r][i];
      const int q = d->q_dst[r][i];
      sy_attn_seq_place_t want = {r, i, 0, q, start, m->q_row[r][i], len};
      FUZZ_CHECK(same_place(&seqs.q_send[i], &want));
      for (int c = 0; c < C; c++) {
        const size_t at = (size_t)i * C + c;
        sy_attn_seq_place_t kv = {r, i, c, d->kv_dst[r][at], start, m->kv_row[r][at], len};
        FUZZ_CHECK(same_place(&seqs.kv_send[at], &kv));
      }
      start += len;
    }
    /* What r receives: every source's sends to r in (source, sequence, replica) order, back to back. */
    int64_t qk = 0, kvk = 0, q_row = 0, kv_row = 0;
    for (int s = 0; s < W; s++) {
      sy_attn_plan_seqs_t from = SY_ATTN_PLAN_SEQS_INIT;
      FUZZ_CHECK(sy_attn_plan_seqs(p[s], &from) == SY_SUCCESS);
      for (int i = 0; i < d->num_seqs[s]; i++) {
        if (from.q_send[i].dst_rank == r) {
          FUZZ_CHECK(qk < seqs.q_recv_count && same_place(&seqs.q_recv[qk], &from.q_send[i]));
          FUZZ_CHECK(seqs.q_recv[qk++].dst_row == q_row);
          q_row += from.q_send[i].rows;
        }
        for (int c = 0; c < C; c++) {
          const sy_attn_seq_place_t *kv = &from.kv_send[(size_t)i * C + c];
          if (kv->dst_rank != r) continue;
          FUZZ_CHECK(kvk < seqs.kv_recv_count && same_place(&seqs.kv_recv[kvk], kv));
          FUZZ_CHECK(seqs.kv_recv[kvk++].dst_row == kv_row);
          kv_row += kv->rows;
        }
      }
    }
    FUZZ_CHECK(qk == seqs.q_recv_count && kvk == seqs.kv_recv_count);
    FUZZ_CHECK(q_row == m->q_rows[r] && kv_row == m->kv_rows[r]);
  }
}

/* One side's segment lists: starts monotone, per peer ascending destination rows, merged, summing to rows[p]. */
static void check_side(const int64_t *start, const sy_attn_seg_t *segs, const int64_t *rows, int W) {
  FUZZ_CHECK(start[0] == 0);
  for (int peer = 0; peer < W; peer++) {
    FUZZ_CHECK(start[peer + 1] >= start[peer]);
    int64_t sum = 0;
    for (int64_t k = start[peer]; k < start[peer + 1]; k++) {
      FUZZ_CHECK(segs[k].rows > 0 && segs[k].src_row >= 0 && segs[k].dst_row >= 0);
      sum += segs[k].rows;
      if (k == start[peer]) continue;
      const sy_attn_seg_t *a = &segs[k - 1], *b = &segs[k];
      FUZZ_CHECK(a->dst_row + a->rows <= b->dst_row);
      FUZZ_CHECK(!(a->src_row + a->rows == b->src_row && a->dst_row + a->rows == b->dst_row));
    }
    FUZZ_CHECK(sum == rows[peer]);
  }
}

/* One direction: both sides' structure, sender and receiver agree segment for segment, every segment inside
 * both buffers, and (maps permitting) every destination row written once, from the model's source row. */
static void check_direction(sy_attn_plan_t const *p, const model_t *m, int dir) {
  const int W = m->W;
  for (int r = 0; r < W; r++) {
    const sy_attn_dir_t *D = &p[r]->dir[dir];
    FUZZ_CHECK(D->recv_total == m->len[dir][r]);
    check_side(D->send_start, D->send_segs, D->send_rows, W);
    check_side(D->recv_start, D->recv_segs, D->recv_rows, W);
  }
  for (int s = 0; s < W; s++)
    for (int d = 0; d < W; d++) {
      const sy_attn_dir_t *S = &p[s]->dir[dir], *R = &p[d]->dir[dir];
      const int64_t n = S->send_start[d + 1] - S->send_start[d];
      FUZZ_CHECK(n == R->recv_start[s + 1] - R->recv_start[s] && S->send_rows[d] == R->recv_rows[s]);
      FUZZ_CHECK(
          !memcmp(S->send_segs + S->send_start[d], R->recv_segs + R->recv_start[s], (size_t)n * sizeof *S->send_segs));
      for (int64_t k = S->send_start[d]; k < S->send_start[d + 1]; k++) {
        const sy_attn_seg_t *g = &S->send_segs[k];
        FUZZ_CHECK(g->src_row + g->rows <= m->src_len[dir][s] && g->dst_row + g->rows <= m->len[dir][d]);
      }
    }
  if (!m->origin[dir][0]) return;
  for (int d = 0; d < W; d++) {
    const int64_t len = m->len[dir][d];
    int64_t *got = malloc(((size_t)len + 1) * sizeof *got);
    for (int64_t x = 0; x < len; x++) got[x] = -1;
    for (int s = 0; s < W; s++) {
      const sy_attn_dir_t *S = &p[s]->dir[dir];
      for (int64_t k = S->send_start[d]; k < S->send_start[d + 1]; k++)
        for (int64_t j = 0; j < S->send_segs[k].rows; j++) {
          const int64_t x = S->send_segs[k].dst_row + j;
          FUZZ_CHECK(got[x] == -1); /* written once */
          got[x] = enc(s, S->send_segs[k].src_row + j);
        }
    }
    FUZZ_CHECK(!memcmp(got, m->origin[dir][d], (size_t)len * sizeof *got));
    free(got);
  }
}

void fuzz_check_plans(const sy_attn_plan_desc_t *desc, sy_attn_plan_t const *plans) {
  model_t m;
  model_build(&m, desc);
  const int W = m.W;
  check_seqs(desc, plans, &m);
  for (int dir = 0; dir < SY_ATTN_DIRS; dir++) check_direction(plans, &m, dir);
  for (int r = 0; r < W; r++)
    for (int s = 0; s < W; s++)
      for (int d = 0; d < W; d++) {
        FUZZ_CHECK(plans[r]->q_counts[s * W + d] == m.q_pair[s][d]);
        FUZZ_CHECK(plans[r]->kv_counts[s * W + d] == m.kv_pair[s][d]);
      }
  model_free(&m);
}

/* ---- placement ------------------------------------------------------------------------------------------ */

static int64_t prefix_work(int64_t x) { return x * (x + 1) / 2; }

/* The shards of rank r's document j start at sequence *seq: check them and the KV rule, add their work. */
static void check_document(const sy_attn_plan_desc_t *d, int r, int64_t L, int *seq, int64_t load[], int *widest,
                           int64_t *q_moved, int64_t *kv_moved) {
  const int W = d->world_size, C = d->max_replicas, first = *seq;
  if (L == 0) { /* an empty document: one empty sequence on its owner, which alone holds its (no) keys */
    FUZZ_CHECK(*seq < d->num_seqs[r] && d->seq_lens[r][*seq] == 0 && d->q_dst[r][*seq] == r);
    FUZZ_CHECK(C >= 1 && d->kv_dst[r][(size_t)*seq * C] == r);
    for (int c = 1; c < C; c++) FUZZ_CHECK(d->kv_dst[r][(size_t)*seq * C + c] == -1);
    (*seq)++;
    return;
  }
  int64_t a = 0;
  while (a < L && *seq < d->num_seqs[r]) a += d->seq_lens[r][(*seq)++];
  FUZZ_CHECK(a == L); /* consecutive shards tile the document exactly */
  a = 0;
  for (int k = first; k < *seq; k++) {
    const int64_t b = a + d->seq_lens[r][k];
    const int server = d->q_dst[r][k];
    FUZZ_CHECK(d->seq_lens[r][k] > 0 && server >= 0 && server < W);
    if (k > first) FUZZ_CHECK(server != d->q_dst[r][k - 1]); /* neighbours on one server are merged */
    load[server] += prefix_work(b) - prefix_work(a);
    if (server != r) *q_moved += b - a;
    int n = 0;
    for (int s = 0; s < W; s++) {
      int holds = 0;
      for (int k2 = k; k2 < *seq; k2++) holds |= d->q_dst[r][k2] == s;
      if (!holds) continue;
      FUZZ_CHECK(n < C && d->kv_dst[r][(size_t)k * C + n] == s);
      n++;
      if (s != r) *kv_moved += b - a;
    }
    for (int c = n; c < C; c++) FUZZ_CHECK(d->kv_dst[r][(size_t)k * C + c] == -1);
    if (n > *widest) *widest = n;
    a = b;
  }
}

void fuzz_check_placement(const sy_attn_place_desc_t *in, sy_attn_placement_t placement) {
  sy_attn_plan_desc_t d;
  sy_attn_place_stats_t st;
  FUZZ_CHECK(sy_attn_placement_desc(placement, &d) == SY_SUCCESS);
  FUZZ_CHECK(sy_attn_placement_stats(placement, &st) == SY_SUCCESS);
  const int W = in->world_size;
  FUZZ_CHECK(d.size == sizeof d && d.world_size == W && d.max_replicas >= 1 && d.max_replicas <= W);
  int64_t load[FUZZ_MAX_WORLD] = {0}, q_moved = 0, kv_moved = 0, total = 0;
  int widest = 1, shards = 0;
  for (int r = 0; r < W; r++) {
    int seq = 0;
    int64_t tokens = 0;
    for (int j = 0; j < in->num_docs[r]; j++) {
      const int64_t L = in->doc_lens[r][j];
      tokens += L;
      total += prefix_work(L);
      check_document(&d, r, L, &seq, load, &widest, &q_moved, &kv_moved);
    }
    FUZZ_CHECK(seq == d.num_seqs[r] && d.num_tokens[r] == tokens); /* no shard beyond the documents */
    shards += d.num_seqs[r];
  }
  FUZZ_CHECK(d.max_replicas == widest);
  int64_t max = 0, min = load[0], sum = 0;
  for (int r = 0; r < W; r++) {
    max = load[r] > max ? load[r] : max;
    min = load[r] < min ? load[r] : min;
    sum += load[r];
  }
  FUZZ_CHECK(sum == total); /* work conserved */
  const double mean = (double)total / W, tol = in->tolerance > 0 ? in->tolerance : 0.10;
  FUZZ_CHECK(fabs(st.work_max - (double)max) <= 1e-9 * (double)max);
  FUZZ_CHECK(fabs(st.work_min - (double)min) <= 1e-9 * (double)min);
  FUZZ_CHECK(fabs(st.work_mean - mean) <= 1e-9 * mean);
  FUZZ_CHECK(st.q_rows_moved == q_moved && st.kv_rows_moved == kv_moved && st.shards == shards);
  /* balanced: within tolerance of the mean both ways (rounding decides only at the very edge) */
  const double hi = (1 + tol) * mean, lo = (1 - tol) * mean;
  if (total == 0) FUZZ_CHECK(st.balanced == 1);
  else if (st.balanced) FUZZ_CHECK((double)max <= hi * (1 + 1e-9) && (double)min >= lo * (1 - 1e-9));
  else FUZZ_CHECK((double)max > hi * (1 - 1e-9) || (double)min < lo * (1 + 1e-9));
}
