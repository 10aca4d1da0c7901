/*
 * moe_ht_test.h — what the MoE high-throughput CPU tests share: a case and every rank's seeded inputs of a round
 * (tests/workload's generators; any rank regenerates any rank's), and the expectation computed here from
 * switchyard.h's words alone: each expert's rows handed out by walking sources, then tokens; the contiguous
 * layout's counts rounded up to the alignment, or the masked one's stride; FP8 groups quantised with amax and
 * scale written out here (only the per-value rules, sy__fp8_group_scale and sy__fp8_e4m3_from_float, come from
 * the library); the combine's and the backward's sums in the orders the header states. Nothing here calls
 * src/ref/moe_ht_ref.c or the backend's helpers.
 */
#ifndef SY_TEST_MOE_HT_TEST_H
#define SY_TEST_MOE_HT_TEST_H

#define TEST_SEED_DEFAULT 0x4854eed5eedull
#include "ranks.h"
#include "ref/fp8.h"
#include "ref/moe_ht_layout.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POISON 0xEE

enum { COUNTS_EXACT, COUNTS_WORST, COUNTS_MASKED }; /* host_counts; recv.rows = max_rows; with expert_stride */
enum { BUF_TOKENS = 0, BUF_Y = 1, BUF_GRAD = 2 };   /* wl_moe_ht_row's `which` */
enum { VAL_WEIGHTS = 0, VAL_ROW_VALUES = 1 };       /* wl_moe_ht_value's `which` */

typedef struct ht_case {
  const char *name;
  int W, E, K, H, T;
  sy_moe_wire_t wire;
  int align; /* expert_alignment (0: 1) */
  wl_ht_route_t route;
  int counts; /* COUNTS_* */
  sy_index_type_t id_type;
  uint64_t salt;
  unsigned flags; /* config.flags (SY_MOE_HT_SCALES_ROW_MAJOR) */
} ht_case_t;

static inline sy_moe_ht_config_t ht_config(const ht_case_t *c) {
  sy_moe_ht_config_t config = SY_MOE_HT_CONFIG_INIT;
  config.max_tokens = c->T;
  config.hidden = c->H;
  config.top_k = c->K;
  config.num_experts = c->E;
  config.wire = c->wire;
  config.expert_alignment = c->align;
  config.flags = c->flags;
  return config;
}

/* recv.scales' index of row `row`'s scale g, as switchyard.h states it: [hidden / 128][rows], or [rows][hidden / 128]
 * with SY_MOE_HT_SCALES_ROW_MAJOR. */
static inline size_t ht_scale_at(const ht_case_t *c, int rows, int row, int g) {
  return c->flags & SY_MOE_HT_SCALES_ROW_MAJOR ? (size_t)row * (size_t)(c->H / 128) + (size_t)g
                                               : (size_t)g * (size_t)rows + (size_t)row;
}

/* The case's generator in a round: round 1 is the same routing with exact values. */
static inline wl_moe_ht_t ht_gen(const ht_case_t *c) {
  const wl_moe_ht_t m = {seed ^ c->salt, c->W, c->E, c->K, c->H, c->T, c->route};
  return m;
}

static inline int ht_align(const ht_case_t *c) { return c->align ? c->align : 1; }
static inline int ht_fp8(const ht_case_t *c) { return c->wire != SY_MOE_WIRE_BF16; }
static inline size_t ht_row_bytes(const ht_case_t *c) { return (size_t)c->H * (ht_fp8(c) ? 1 : 2); }

/* ---- every rank's inputs of a round ------------------------------------------------------------------------ */

typedef struct world {
  int n[MAX_RANKS];
  int32_t *ids[MAX_RANKS];  /* [T][K] */
  uint16_t *tok[MAX_RANKS]; /* bf16 [T][H] (every wire but FP8_GIVEN) */
  uint8_t *q[MAX_RANKS];    /* FP8_GIVEN: E4M3 [T][H] */
  float *qs[MAX_RANKS];     /* FP8_GIVEN: scales [T][H / 128] */
  float *w[MAX_RANKS];      /* weights [T][K] */
  uint16_t *g[MAX_RANKS];   /* the combine backward's grad_out [T][H] */
} world_t;

static inline void world_gen(const ht_case_t *c, int exact, world_t *wd) {
  const wl_moe_ht_t m = ht_gen(c);
  memset(wd, 0, sizeof *wd);
  for (int r = 0; r < c->W; r++) {
    const size_t TH = (size_t)c->T * c->H, TK = (size_t)c->T * c->K;
    wd->n[r] = wl_moe_ht_num_tokens(&m, r);
    wd->ids[r] = malloc(TK * 4);
    wd->tok[r] = malloc(TH * 2);
    wd->q[r] = malloc(TH);
    wd->qs[r] = malloc((TH / 128 + 1) * 4);
    wd->w[r] = malloc(TK * 4);
    wd->g[r] = malloc(TH * 2);
    wl_moe_ht_ids(&m, r, wd->n[r], wd->ids[r]);
    wl_moe_ht_rows(&m, BUF_TOKENS, r, wd->n[r], exact, wd->tok[r]);
    wl_moe_ht_fp8(&m, BUF_TOKENS, r, wd->n[r], wd->q[r], wd->qs[r]);
    wl_moe_ht_values(&m, VAL_WEIGHTS, r, (int64_t)wd->n[r] * c->K, exact, wd->w[r]);
    wl_moe_ht_rows(&m, BUF_GRAD, r, wd->n[r], exact, wd->g[r]);
  }
}

static inline void world_free(const ht_case_t *c, world_t *wd) {
  for (int r = 0; r < c->W; r++)
    free(wd->ids[r]), free(wd->tok[r]), free(wd->q[r]), free(wd->qs[r]), free(wd->w[r]), free(wd->g[r]);
}

/* The caller's tokens of rank r (the given E4M3 bytes or the bf16 values). */
static inline const void *world_tokens(const ht_case_t *c, const world_t *wd, int r) {
  return c->wire == SY_MOE_WIRE_FP8_GIVEN ? (const void *)wd->q[r] : (const void *)wd->tok[r];
}

/* ---- the rows, from the header's words ------------------------------------------------------------------------ */

typedef struct naive {
  int32_t row[MAX_RANKS][64][32];     /* (source, token, k) -> its row on its expert's rank, -1 */
  int32_t count[MAX_RANKS][64];       /* rank, local expert -> rows */
  int32_t first[MAX_RANKS][65];       /* each expert's first row; [L] rows used */
  int32_t contiguous_rows[MAX_RANKS]; /* the contiguous layout's rows needed */
  int32_t sent[MAX_RANKS][MAX_RANKS]; /* tokens s sends p */
} naive_t;

/* strides[p] > 0: rank p's masked layout; else the contiguous one. Cases keep T <= 64, L <= 64, K <= 32. */
static inline void naive_rows(const ht_case_t *c, const world_t *wd, const int *strides, naive_t *nv) {
  const int L = c->E / c->W, K = c->K;
  memset(nv, 0, sizeof *nv);
  for (int p = 0; p < c->W; p++) {
    int32_t at = 0;
    for (int e = 0; e < L; e++) {
      const int x = p * L + e;
      int32_t n = 0;
      for (int s = 0; s < c->W; s++)
        for (int t = 0; t < wd->n[s]; t++)
          for (int k = 0; k < K; k++) n += wd->ids[s][t * K + k] == x;
      nv->count[p][e] = n;
      nv->first[p][e] = strides[p] > 0 ? e * strides[p] : at;
      at += (n + ht_align(c) - 1) / ht_align(c) * ht_align(c);
      int32_t row = nv->first[p][e];
      for (int s = 0; s < c->W; s++)
        for (int t = 0; t < wd->n[s]; t++)
          for (int k = 0; k < K; k++)
            if (wd->ids[s][t * K + k] == x) nv->row[s][t][k] = row++;
    }
    nv->contiguous_rows[p] = at;
    nv->first[p][L] = strides[p] > 0 ? L * strides[p] : at;
  }
  for (int s = 0; s < c->W; s++)
    for (int t = 0; t < c->T; t++)
      for (int k = 0; k < K; k++)
        if (t >= wd->n[s] || wd->ids[s][t * K + k] < 0) nv->row[s][t][k] = -1;
  for (int s = 0; s < c->W; s++)
    for (int t = 0; t < wd->n[s]; t++)
      for (int p = 0; p < c->W; p++) {
        int names = 0;
        for (int k = 0; k < K; k++) names |= wd->ids[s][t * K + k] >= 0 && wd->ids[s][t * K + k] / L == p;
        nv->sent[s][p] += names;
      }
}

/* ---- the checks -------------------------------------------------------------------------------------------------- */

static inline int all_poison(const void *p, size_t bytes) {
  const unsigned char *b = p;
  for (size_t i = 0; i < bytes; i++)
    if (b[i] != POISON) return 0;
  return 1;
}

/* Reports the first few failures of a check; the check counts once. */
#define HT_FAIL(...)                                                 \
  do {                                                               \
    if (bad++ < 4) {                                                 \
      fprintf(stderr, "%s: rank %d: ", what, me);                    \
      fprintf(stderr, __VA_ARGS__);                                  \
      fprintf(stderr, " (seed 0x%llx)\n", (unsigned long long)seed); \
    }                                                                \
  } while (0)

static inline void ht_count(int bad) {
  if (bad) __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);
}

/* The FP8 wire's bytes and scales of one bf16 token, written from the header's words. */
static inline void ht_quantise(const uint16_t *tok, int H, int ue8m0, uint8_t *q, float *scales) {
  for (int g = 0; g < H / 128; g++) {
    float amax = 0.0f;
    for (int i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(sy__bf16_to_float(tok[g * 128 + i])));
    scales[g] = sy__fp8_group_scale(amax, ue8m0);
    for (int i = 0; i < 128; i++)
      q[g * 128 + i] = sy__fp8_e4m3_from_float(sy__bf16_to_float(tok[g * 128 + i]) / scales[g]);
  }
}

/* The layout: host_counts (if given) and the handle's ids, pos, counts and offsets (moe_ht_layout.h's sections). */
static inline void check_layout(const ht_case_t *c, const world_t *wd, const naive_t *nv, int me, const void *handle,
                                const int32_t *host_counts, const char *what) {
  const int L = c->E / c->W, K = c->K;
  const sy_moe_ht_config_t config = sy__moe_ht_defaults(ht_config(c));
  const sy_moe_ht_handle_layout_t hl = sy__moe_ht_handle_layout(&config, c->W);
  const unsigned char *h = handle;
  const int32_t *ids = (const int32_t *)(h + hl.ids), *pos = (const int32_t *)(h + hl.pos);
  const int32_t *send = (const int32_t *)(h + hl.send_tokens), *recv_counts = (const int32_t *)(h + hl.recv_counts);
  const int32_t *recv_tokens = (const int32_t *)(h + hl.recv_tokens), *offsets = (const int32_t *)(h + hl.offsets);
  int bad = 0;
  int32_t *named = calloc((size_t)c->E, sizeof *named);
  for (int t = 0; t < wd->n[me]; t++)
    for (int k = 0; k < K; k++) {
      const int32_t x = wd->ids[me][t * K + k];
      if (ids[t * K + k] != x) HT_FAIL("ids[%d][%d]=%d, want %d", t, k, ids[t * K + k], x);
      const int32_t want = x >= 0 ? named[x]++ : -1;
      if (pos[t * K + k] != want) HT_FAIL("pos[%d][%d]=%d, want %d", t, k, pos[t * K + k], want);
    }
  free(named);
  int32_t at = 0;
  for (int p = 0; p < c->W; p++) {
    if (send[p] != nv->sent[me][p]) HT_FAIL("send_tokens[%d]=%d, want %d", p, send[p], nv->sent[me][p]);
    if (recv_tokens[p] != nv->sent[p][me]) HT_FAIL("recv_tokens[%d]=%d, want %d", p, recv_tokens[p], nv->sent[p][me]);
  }
  for (int e = 0; e < L; e++) {
    int32_t total = 0;
    for (int s = 0; s < c->W; s++) {
      int32_t n = 0;
      for (int t = 0; t < wd->n[s]; t++)
        for (int k = 0; k < K; k++) n += wd->ids[s][t * K + k] == me * L + e;
      if (recv_counts[s * L + e] != n) HT_FAIL("recv_counts[%d][%d]=%d, want %d", s, e, recv_counts[s * L + e], n);
      total += n;
    }
    if (offsets[e] != at) HT_FAIL("offsets[%d]=%d, want %d", e, offsets[e], at);
    if (host_counts && host_counts[e] != total) HT_FAIL("host_counts[%d]=%d, want %d", e, host_counts[e], total);
    if (host_counts && host_counts[L + e] != at) HT_FAIL("host_counts[L + %d]=%d, want %d", e, host_counts[L + e], at);
    at += (total + ht_align(c) - 1) / ht_align(c) * ht_align(c);
  }
  if (offsets[L] != at) HT_FAIL("offsets[L]=%d, want %d", offsets[L], at);
  if (host_counts && host_counts[2 * L] != at) HT_FAIL("host_counts[2 L]=%d, want %d", host_counts[2 * L], at);
  if (at != nv->contiguous_rows[me]) HT_FAIL("rows %d, the walk's %d", at, nv->contiguous_rows[me]);
  ht_count(bad);
}

/* What the dispatch wrote on rank me: every routed row, the padding, the untouched rows, offsets, counts. */
static inline void check_dispatch(const ht_case_t *c, const world_t *wd, const naive_t *nv, int me,
                                  const sy_moe_ht_recv_t *recv, const char *what) {
  const int L = c->E / c->W, K = c->K, H = c->H, G = H / 128, fp8 = ht_fp8(c);
  const size_t rb = ht_row_bytes(c);
  unsigned char *want = malloc(rb);
  float scales[64];
  int bad = 0;
  unsigned char *seen = calloc((size_t)recv->rows + 1, 1);
  for (int s = 0; s < c->W; s++)
    for (int t = 0; t < wd->n[s]; t++)
      for (int k = 0; k < K; k++) {
        const int32_t x = wd->ids[s][t * K + k], row = nv->row[s][t][k];
        if (x < 0 || x / L != me) continue;
        if (row < 0 || row >= recv->rows) {
          HT_FAIL("row %d of (%d, %d, %d) outside the %d rows", row, s, t, k, recv->rows);
          continue;
        }
        seen[row] = 1;
        if (c->wire == SY_MOE_WIRE_BF16) memcpy(want, wd->tok[s] + (size_t)t * H, rb);
        else if (c->wire == SY_MOE_WIRE_FP8_GIVEN)
          memcpy(want, wd->q[s] + (size_t)t * H, rb), memcpy(scales, wd->qs[s] + (size_t)t * G, (size_t)G * 4);
        else ht_quantise(wd->tok[s] + (size_t)t * H, H, c->wire == SY_MOE_WIRE_FP8_UE8M0, want, scales);
        if (memcmp((const unsigned char *)recv->tokens + (size_t)row * rb, want, rb))
          HT_FAIL("row %d (source %d token %d k %d): token bytes differ", row, s, t, k);
        for (int g = 0; fp8 && g < G; g++)
          if (memcmp(&recv->scales[ht_scale_at(c, recv->rows, row, g)], &scales[g], 4))
            HT_FAIL("row %d group %d: scale %a, want %a", row, g,
                    (double)recv->scales[ht_scale_at(c, recv->rows, row, g)], (double)scales[g]);
        if (recv->src[2 * row] != s || recv->src[2 * row + 1] != t)
          HT_FAIL("row %d: src {%d, %d}, want {%d, %d}", row, recv->src[2 * row], recv->src[2 * row + 1], s, t);
        if (memcmp(&recv->weights[row], &wd->w[s][t * K + k], 4))
          HT_FAIL("row %d: weight %a, want %a", row, (double)recv->weights[row], (double)wd->w[s][t * K + k]);
      }
  for (int e = 0; e < L; e++) {
    if (recv->expert_offsets[e] != nv->first[me][e])
      HT_FAIL("expert_offsets[%d]=%d, want %d", e, recv->expert_offsets[e], nv->first[me][e]);
    if (recv->expert_counts[e] != nv->count[me][e])
      HT_FAIL("expert_counts[%d]=%d, want %d", e, recv->expert_counts[e], nv->count[me][e]);
  }
  if (recv->expert_offsets[L] != nv->first[me][L])
    HT_FAIL("expert_offsets[L]=%d, want %d", recv->expert_offsets[L], nv->first[me][L]);
  for (int32_t row = 0; row < recv->rows; row++) {
    if (seen[row]) continue;
    int padding = 0; /* between an expert's count and the next expert's first row */
    for (int e = 0; e < L; e++) padding |= row >= nv->first[me][e] + nv->count[me][e] && row < nv->first[me][e + 1];
    int kept = all_poison((const unsigned char *)recv->tokens + (size_t)row * rb, rb);
    for (int g = 0; fp8 && g < G; g++) kept = kept && all_poison(&recv->scales[ht_scale_at(c, recv->rows, row, g)], 4);
    const float zero = 0.0f;
    if (padding)
      kept = kept && recv->src[2 * row] == -1 && recv->src[2 * row + 1] == -1 && !memcmp(&recv->weights[row], &zero, 4);
    else kept = kept && all_poison(&recv->src[2 * row], 8) && all_poison(&recv->weights[row], 4);
    if (!kept) HT_FAIL("row %d (%s) is not as the header says", row, padding ? "padding" : "unused");
  }
  free(seen);
  free(want);
  ht_count(bad);
}

/* What owner me gets from the combine of y (rank p's rows_in row r: wl_moe_ht_row(BUF_Y, p, r)) weighted with the
 * dispatch's weights (or unweighted), and the token_values carried back from wl_moe_ht_value(VAL_ROW_VALUES). */
static inline void expect_combine(const ht_case_t *c, const world_t *wd, const naive_t *nv, int me, int exact,
                                  int weighted, uint16_t *out, float *token_values) {
  const int L = c->E / c->W, K = c->K, H = c->H;
  const wl_moe_ht_t m = ht_gen(c);
  uint16_t *y = malloc((size_t)K * H * 2);
  for (int t = 0; t < wd->n[me]; t++) {
    const int32_t *ids = wd->ids[me] + (size_t)t * K;
    for (int k = 0; k < K; k++) {
      token_values[t * K + k] = 0.0f;
      if (ids[k] < 0) continue;
      wl_moe_ht_row(&m, BUF_Y, ids[k] / L, nv->row[me][t][k], exact, y + (size_t)k * H);
      token_values[t * K + k] = wl_moe_ht_value(&m, VAL_ROW_VALUES, ids[k] / L, nv->row[me][t][k], exact);
    }
    for (int h = 0; h < H; h++) {
      float acc = 0.0f;
      for (int p = 0; p < c->W; p++) {
        float partial = 0.0f;
        int held = 0;
        for (int k = 0; k < K; k++) {
          if (ids[k] < 0 || ids[k] / L != p) continue;
          partial = fmaf(weighted ? wd->w[me][t * K + k] : 1.0f, sy__bf16_to_float(y[(size_t)k * H + h]), partial);
          held = 1;
        }
        if (held) acc += sy__bf16_to_float(sy__float_to_bf16(partial));
      }
      out[(size_t)t * H + h] = sy__float_to_bf16(acc);
    }
  }
  free(y);
}

static inline void check_combine(const ht_case_t *c, const world_t *wd, const naive_t *nv, int me, int exact,
                                 int weighted, const uint16_t *out, const float *token_values, const char *what) {
  const size_t TH = (size_t)c->T * c->H, TK = (size_t)c->T * c->K, n = (size_t)wd->n[me];
  uint16_t *want = malloc(TH * 2);
  float *want_values = malloc(TK * 4);
  expect_combine(c, wd, nv, me, exact, weighted, want, want_values);
  int bad = 0;
  for (size_t i = 0; i < n * c->H; i++)
    if (out[i] != want[i])
      HT_FAIL("out[%zu][%zu]=0x%04x, want 0x%04x", i / (size_t)c->H, i % (size_t)c->H, out[i], want[i]);
  if (!all_poison(out + n * c->H, (TH - n * c->H) * 2)) HT_FAIL("out past num_tokens=%zu was written", n);
  for (size_t i = 0; token_values && i < n * c->K; i++)
    if (memcmp(&token_values[i], &want_values[i], 4))
      HT_FAIL("token_values[%zu][%zu]=%a, want %a", i / (size_t)c->K, i % (size_t)c->K, (double)token_values[i],
              (double)want_values[i]);
  free(want);
  free(want_values);
  ht_count(bad);
}

/* The header's dot product, written out: 32 lanes of fmaf in ascending h, then the butterfly. */
static inline float ht_dot(const uint16_t *a, const uint16_t *b, int H) {
  float s[32] = {0}, u[32];
  /* switchyard.h: partial sum l takes h = 8l .. 8l + 7, then 256 + 8l .., ... ascending */
  for (int l = 0; l < 32; l++)
    for (int piece = l * 8; piece < H; piece += 256)
      for (int h = piece; h < piece + 8 && h < H; h++)
        s[l] = fmaf(sy__bf16_to_float(a[h]), sy__bf16_to_float(b[h]), s[l]);
  for (int d = 16; d >= 1; d /= 2) {
    for (int l = 0; l < 32; l++) u[l] = s[l] + s[l ^ d];
    memcpy(s, u, sizeof s);
  }
  if (s[0] != s[0]) { /* a NaN is the canonical 0x7FFFFFFF */
    const uint32_t nan = 0x7FFFFFFFu;
    memcpy(&s[0], &nan, 4);
  }
  return s[0];
}

/* What the combine's backward wrote on rank me (y: its rows_in, row_weights: the dispatch's weights or none). */
static inline void check_backward(const ht_case_t *c, const world_t *wd, const naive_t *nv, int me, const uint16_t *y,
                                  int weighted, int rows, const uint16_t *grad_rows, const float *grad_w,
                                  const char *what) {
  const int L = c->E / c->W, K = c->K, H = c->H;
  int bad = 0;
  unsigned char *seen = calloc((size_t)rows + 1, 1);
  uint16_t *want = malloc((size_t)H * 2);
  for (int s = 0; s < c->W; s++)
    for (int t = 0; t < wd->n[s]; t++)
      for (int k = 0; k < K; k++) {
        const int32_t x = wd->ids[s][t * K + k], row = nv->row[s][t][k];
        if (x < 0 || x / L != me) continue;
        seen[row] = 1;
        const uint16_t *g = wd->g[s] + (size_t)t * H;
        for (int h = 0; h < H; h++)
          want[h] = weighted ? sy__float_to_bf16(wd->w[s][t * K + k] * sy__bf16_to_float(g[h])) : g[h];
        if (memcmp(grad_rows + (size_t)row * H, want, (size_t)H * 2)) HT_FAIL("grad_rows[%d] differs", row);
        const float dot = ht_dot(g, y + (size_t)row * H, H);
        if (memcmp(&grad_w[row], &dot, 4))
          HT_FAIL("grad_row_weights[%d]=%a, want %a", row, (double)grad_w[row], (double)dot);
      }
  for (int32_t row = 0; row < rows; row++) {
    if (seen[row]) continue;
    int padding = 0;
    for (int e = 0; e < L; e++) padding |= row >= nv->first[me][e] + nv->count[me][e] && row < nv->first[me][e + 1];
    const float zero = 0.0f;
    int kept = all_poison(grad_rows + (size_t)row * H, (size_t)H * 2);
    kept = kept && (padding ? !memcmp(&grad_w[row], &zero, 4) : all_poison(&grad_w[row], 4));
    if (!kept) HT_FAIL("row %d (%s) is not as the header says", row, padding ? "padding" : "unused");
  }
  free(seen);
  free(want);
  ht_count(bad);
}

#endif
