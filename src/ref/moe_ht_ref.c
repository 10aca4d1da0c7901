/*
 * moe_ht_ref.c — the MoE high-throughput mode as plain C: the per-row rules (the given-scales wire, the backward's
 * scaled copy, the 32-lane dot product) that the host backend (host/moe_ht.c) runs and the kernels must match
 * bit for bit, and the reference of whole calls from every rank's inputs, written straight from switchyard.h's
 * words: one global walk over (source, token, k) decides every entry's row (sources ascending, then tokens, per
 * expert), and each call reads its outputs off that walk. No handle is read; the layout and the dispatch write
 * the handle's sections so that tests can compare them.
 */
#include "ref/moe_ht_ref.h"

#include "ref/convert.h"
#include "ref/moe_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the per-row rules ------------------------------------------------------------------------------------------ */

void sy__moe_ht_encode_token(sy_moe_wire_t wire, const void *token, const float *given_scales, int hidden,
                             void *payload, float *scales, int64_t scale_stride) {
  if (wire != SY_MOE_WIRE_FP8_GIVEN) {
    sy__moe_encode_token(wire, token, hidden, payload, scales, scale_stride);
    return;
  }
  memcpy(payload, token, (size_t)hidden);
  for (int g = 0; g < hidden / SY_MOE_FP8_GROUP; g++) scales[(int64_t)g * scale_stride] = given_scales[g];
}

void sy__moe_ht_scale_row(float w, const uint16_t *g, uint16_t *out, int hidden) {
  for (int h = 0; h < hidden; h++) out[h] = sy__float_to_bf16(w * sy__bf16_to_float(g[h]));
}

float sy__moe_ht_dot(const uint16_t *a, const uint16_t *b, int hidden) {
  float s[32], t[32];
  for (int l = 0; l < 32; l++) s[l] = 0.0f;
  for (int h = 0; h < hidden; h++) {
    const int l = (h / 8) % 32;
    s[l] = fmaf(sy__bf16_to_float(a[h]), sy__bf16_to_float(b[h]), s[l]);
  }
  for (int d = 16; d >= 1; d /= 2) {
    for (int l = 0; l < 32; l++) t[l] = s[l] + s[l ^ d];
    memcpy(s, t, sizeof s);
  }
  return s[0] != s[0] ? sy__bits_to_float(0x7FFFFFFFu) : s[0];
}

/* ---- the global walk ---------------------------------------------------------------------------------------------- */

typedef struct ref_plan {
  int W, L, K, T, kk;
  int32_t *row;   /* [W][T][K]: the row of (source, token, k) on its expert's rank, -1 where k names none */
  int32_t *count; /* [W][L]: rows of each rank's local experts, padding excluded */
  int32_t *first; /* [W][L + 1]: each local expert's first row; [L]: rows used, padding included */
} ref_plan_t;

static void plan_free(ref_plan_t *p) {
  free(p->row), free(p->count), free(p->first);
  memset(p, 0, sizeof *p);
}

static int64_t id_of(const ref_plan_t *p, const sy_moe_ht_ref_rank_t *ranks, int s, int t, int k) {
  return sy__moe_id(ranks[s].expert_ids, ranks[s].id_type, (size_t)t * p->K + (size_t)k);
}

/* Every rank's num_tokens and ids. */
static sy_status_t check_ranks(const sy_moe_ht_config_t *c, int W, const sy_moe_ht_ref_rank_t *ranks, const char *fn) {
  for (int s = 0; s < W; s++) {
    SY_ARG_CHECK(ranks[s].num_tokens >= 0 && ranks[s].num_tokens <= c->max_tokens, fn,
                 "ranks[%d].num_tokens=%d outside [0, max_tokens=%d]", s, ranks[s].num_tokens, c->max_tokens);
    SY_CHECK(
        sy__moe_check_ids(fn, s, ranks[s].expert_ids, ranks[s].id_type, ranks[s].num_tokens, c->top_k, c->num_experts));
  }
  return SY_SUCCESS;
}

/* The walk: expert x's rows on its rank are handed out from its first row in order of source, then token.
 * strides[p] > 0: rank p's masked layout (expert e from e * stride); else (or strides NULL) the contiguous
 * one, counts rounded up to the alignment. */
static sy_status_t plan_build(const sy_moe_ht_config_t *config, int W, const sy_moe_ht_ref_rank_t *ranks,
                              const int *strides, ref_plan_t *p) {
  const sy_moe_ht_config_t c = sy__moe_ht_defaults(*config);
  memset(p, 0, sizeof *p);
  p->W = W, p->L = c.num_experts / W, p->K = c.top_k, p->T = c.max_tokens;
  p->kk = p->K < p->L ? p->K : p->L;
  const size_t E = (size_t)c.num_experts;
  p->row = malloc((size_t)W * p->T * p->K * sizeof *p->row);
  p->count = calloc(E, sizeof *p->count);
  p->first = malloc((size_t)W * (p->L + 1) * sizeof *p->first);
  int32_t *next = malloc(E * sizeof *next);
  if (!p->row || !p->count || !p->first || !next) {
    free(next);
    plan_free(p);
    return SY_ERR_NO_MEMORY;
  }
  for (int s = 0; s < W; s++)
    for (int t = 0; t < ranks[s].num_tokens; t++)
      for (int k = 0; k < p->K; k++) {
        const int64_t x = id_of(p, ranks, s, t, k);
        if (x >= 0) p->count[x]++;
      }
  for (int r = 0; r < W; r++) {
    int32_t *first = p->first + (size_t)r * (p->L + 1);
    const int stride = strides ? strides[r] : 0;
    int64_t at = 0;
    for (int e = 0; e < p->L; e++) {
      first[e] = (int32_t)(stride > 0 ? (int64_t)e * stride : at);
      const int64_t n = p->count[(size_t)r * p->L + e];
      at += (n + c.expert_alignment - 1) / c.expert_alignment * c.expert_alignment;
    }
    first[p->L] = (int32_t)(stride > 0 ? (int64_t)p->L * stride : at);
    for (int e = 0; e < p->L; e++) next[(size_t)r * p->L + e] = first[e];
  }
  for (int s = 0; s < W; s++)
    for (int t = 0; t < p->T; t++)
      for (int k = 0; k < p->K; k++) {
        const int64_t x = t < ranks[s].num_tokens ? id_of(p, ranks, s, t, k) : -1;
        p->row[((size_t)s * p->T + t) * p->K + k] = x >= 0 ? next[x]++ : -1;
      }
  free(next);
  return SY_SUCCESS;
}

static int32_t row_of(const ref_plan_t *p, int s, int t, int k) { return p->row[((size_t)s * p->T + t) * p->K + k]; }

/* Whether rank r's rows fit: its rows used within `rows`, and with a stride each count within it. */
static sy_status_t check_rows(const ref_plan_t *p, int r, int rows, int stride, const char *fn) {
  for (int e = 0; stride > 0 && e < p->L; e++)
    SY_ARG_CHECK(p->count[(size_t)r * p->L + e] <= stride, fn,
                 "rank %d: local expert %d has %d rows, more than expert_stride=%d", r, e,
                 p->count[(size_t)r * p->L + e], stride);
  const int32_t needed = p->first[(size_t)r * (p->L + 1) + p->L];
  SY_ARG_CHECK(needed <= rows, fn, "rank %d: the layout needs %d rows, more than rows=%d", r, needed, rows);
  return SY_SUCCESS;
}

/* ---- the calls ----------------------------------------------------------------------------------------------------- */

static void *section(void *handle, size_t offset) { return (unsigned char *)handle + offset; }

sy_status_t sy__moe_ht_ref_layout(const sy_moe_ht_config_t *config, int W, const sy_moe_ht_ref_rank_t *ranks,
                                  void *const *handles) {
  static const char *fn = "sy__moe_ht_ref_layout";
  SY_CHECK(check_ranks(config, W, ranks, fn));
  const sy_moe_ht_config_t c = sy__moe_ht_defaults(*config);
  const sy_moe_ht_handle_layout_t hl = sy__moe_ht_handle_layout(&c, W);
  ref_plan_t p;
  SY_CHECK(plan_build(&c, W, ranks, NULL, &p));
  int32_t *named = malloc((size_t)c.num_experts * sizeof *named);
  if (!named) {
    plan_free(&p);
    return SY_ERR_NO_MEMORY;
  }
  for (int r = 0; handles && r < W; r++) {
    if (!handles[r]) continue;
    const int n = ranks[r].num_tokens, K = p.K, L = p.L;
    int32_t *ids = section(handles[r], hl.ids), *pos = section(handles[r], hl.pos);
    int32_t *send_tokens = section(handles[r], hl.send_tokens), *recv_counts = section(handles[r], hl.recv_counts);
    int32_t *recv_tokens = section(handles[r], hl.recv_tokens), *offsets = section(handles[r], hl.offsets);
    memset(named, 0, (size_t)c.num_experts * sizeof *named);
    for (int t = 0; t < n; t++)
      for (int k = 0; k < K; k++) {
        const int64_t x = id_of(&p, ranks, r, t, k);
        ids[(size_t)t * K + k] = (int32_t)x;
        pos[(size_t)t * K + k] = x >= 0 ? named[x]++ : -1;
      }
    for (int q = 0; q < W; q++) { /* tokens r sends q, and q sends r */
      send_tokens[q] = recv_tokens[q] = 0;
      for (int t = 0; t < ranks[r].num_tokens; t++) {
        int to_q = 0;
        for (int k = 0; k < K; k++) to_q |= id_of(&p, ranks, r, t, k) >= 0 && id_of(&p, ranks, r, t, k) / L == q;
        send_tokens[q] += to_q;
      }
      for (int t = 0; t < ranks[q].num_tokens; t++) {
        int to_r = 0;
        for (int k = 0; k < K; k++) to_r |= id_of(&p, ranks, q, t, k) >= 0 && id_of(&p, ranks, q, t, k) / L == r;
        recv_tokens[q] += to_r;
      }
      for (int e = 0; e < L; e++) {
        int32_t from_q = 0;
        for (int t = 0; t < ranks[q].num_tokens; t++)
          for (int k = 0; k < K; k++) from_q += id_of(&p, ranks, q, t, k) == (int64_t)r * L + e;
        recv_counts[(size_t)q * L + e] = from_q;
      }
    }
    memcpy(offsets, p.first + (size_t)r * (L + 1), (size_t)(L + 1) * sizeof *offsets);
    sy_moe_ht_handle_header_t header;
    memcpy(&header, handles[r], sizeof header);
    header.magic = SY_MOE_HT_HANDLE_MAGIC;
    header.num_tokens = n;
    header.rows = offsets[L];
    memcpy(handles[r], &header, sizeof header);
  }
  free(named);
  plan_free(&p);
  return SY_SUCCESS;
}

/* Rank r's rows of the dispatch: every (s, t, k) routed here, then the padding and the counts. */
static void dispatch_rank(const sy_moe_ht_config_t *c, const ref_plan_t *p, const sy_moe_ht_ref_rank_t *ranks, int r,
                          const sy_moe_ht_recv_t *recv) {
  const int H = c->hidden, L = p->L, fp8 = sy__moe_ht_fp8(c->wire);
  const size_t row_bytes = (size_t)H * sy__moe_ht_wire_elem(c->wire);
  const size_t in_bytes = (size_t)H * (c->wire == SY_MOE_WIRE_FP8_GIVEN ? 1 : 2); /* E4M3 given, else bf16 */
  for (int s = 0; s < p->W; s++)
    for (int t = 0; t < ranks[s].num_tokens; t++)
      for (int k = 0; k < p->K; k++) {
        const int64_t x = id_of(p, ranks, s, t, k);
        if (x < 0 || x / L != r) continue;
        const int32_t row = row_of(p, s, t, k);
        const size_t groups = (size_t)H / SY_MOE_FP8_GROUP;
        sy__moe_ht_encode_token(c->wire, (const unsigned char *)ranks[s].tokens + (size_t)t * in_bytes,
                                ranks[s].token_scales ? ranks[s].token_scales + (size_t)t * groups : NULL, H,
                                (unsigned char *)recv->tokens + (size_t)row * row_bytes,
                                fp8 ? recv->scales + sy__moe_ht_scale_first(c, row) : NULL,
                                sy__moe_ht_scale_stride(c, recv->rows));
        recv->src[2 * (size_t)row] = s;
        recv->src[2 * (size_t)row + 1] = t;
        recv->weights[row] = ranks[s].weights ? ranks[s].weights[(size_t)t * p->K + k] : 0.0f;
      }
  const int32_t *first = p->first + (size_t)r * (L + 1), *count = p->count + (size_t)r * L;
  for (int e = 0; e < L; e++) {
    for (int32_t row = first[e] + count[e]; row < first[e + 1]; row++) {
      recv->src[2 * (size_t)row] = recv->src[2 * (size_t)row + 1] = -1;
      recv->weights[row] = 0.0f;
    }
    recv->expert_counts[e] = count[e];
  }
  memcpy(recv->expert_offsets, first, (size_t)(L + 1) * sizeof *first);
}

/* Rank r's recv_rows: per source s, its i-th token naming one of r's experts, that token's rows here in
 * ascending k, -1 after. */
static void dispatch_recv_rows(const sy_moe_ht_config_t *c, const ref_plan_t *p, const sy_moe_ht_ref_rank_t *ranks,
                               int r, int stride, void *handle) {
  const sy_moe_ht_handle_layout_t hl = sy__moe_ht_handle_layout(c, p->W);
  int32_t *recv_rows = section(handle, hl.recv_rows);
  for (int s = 0; s < p->W; s++) {
    int i = 0;
    for (int t = 0; t < ranks[s].num_tokens; t++) {
      int32_t *entry = recv_rows + ((size_t)s * p->T + i) * p->kk;
      int j = 0;
      for (int k = 0; k < p->K; k++) {
        const int64_t x = id_of(p, ranks, s, t, k);
        if (x >= 0 && x / p->L == r) entry[j++] = row_of(p, s, t, k);
      }
      if (!j) continue;
      while (j < p->kk) entry[j++] = -1;
      i++;
    }
  }
  sy_moe_ht_handle_header_t header;
  memcpy(&header, handle, sizeof header);
  header.expert_stride = stride;
  memcpy(handle, &header, sizeof header);
}

sy_status_t sy__moe_ht_ref_dispatch(const sy_moe_ht_config_t *config, int W, const sy_moe_ht_ref_rank_t *ranks,
                                    const sy_moe_ht_recv_t *const *recv, void *const *handles) {
  static const char *fn = "sy__moe_ht_ref_dispatch";
  SY_CHECK(check_ranks(config, W, ranks, fn));
  const sy_moe_ht_config_t c = sy__moe_ht_defaults(*config);
  int *strides = calloc((size_t)W, sizeof *strides);
  if (!strides) return SY_ERR_NO_MEMORY;
  for (int r = 0; recv && r < W; r++) strides[r] = recv[r] ? recv[r]->expert_stride : 0;
  ref_plan_t p;
  sy_status_t st = plan_build(&c, W, ranks, strides, &p);
  for (int r = 0; st == SY_SUCCESS && recv && r < W; r++)
    if (recv[r]) st = check_rows(&p, r, recv[r]->rows, strides[r], fn);
  for (int r = 0; st == SY_SUCCESS && r < W; r++) {
    if (recv && recv[r]) dispatch_rank(&c, &p, ranks, r, recv[r]);
    if (handles && handles[r]) dispatch_recv_rows(&c, &p, ranks, r, strides[r], handles[r]);
  }
  plan_free(&p);
  free(strides);
  return st;
}

static sy_status_t plan_for_rows(const sy_moe_ht_config_t *c, int W, const sy_moe_ht_ref_rank_t *ranks,
                                 const sy_moe_ht_ref_rows_t *rows, ref_plan_t *p, const char *fn) {
  int *strides = calloc((size_t)W, sizeof *strides);
  if (!strides) return SY_ERR_NO_MEMORY;
  for (int r = 0; r < W; r++) strides[r] = rows[r].expert_stride;
  sy_status_t st = plan_build(c, W, ranks, strides, p);
  free(strides);
  for (int r = 0; st == SY_SUCCESS && r < W; r++) {
    st = check_rows(p, r, rows[r].rows, rows[r].expert_stride, fn);
    if (st != SY_SUCCESS) plan_free(p);
  }
  return st;
}

static sy_status_t ref_combine(const sy_moe_ht_config_t *config, int W, const sy_moe_ht_ref_rank_t *ranks,
                               const sy_moe_ht_ref_rows_t *rows, void *const *out, float *const *token_values, int add,
                               const char *fn) {
  SY_CHECK(check_ranks(config, W, ranks, fn));
  const sy_moe_ht_config_t c = sy__moe_ht_defaults(*config);
  const int H = c.hidden;
  ref_plan_t p;
  SY_CHECK(plan_for_rows(&c, W, ranks, rows, &p, fn));
  float *acc = malloc((size_t)H * sizeof *acc), *partial = malloc((size_t)H * sizeof *partial);
  uint16_t *rounded = malloc((size_t)H * sizeof *rounded);
  if (!acc || !partial || !rounded) {
    free(acc), free(partial), free(rounded), plan_free(&p);
    return SY_ERR_NO_MEMORY;
  }
  for (int o = 0; o < W; o++) {
    uint16_t *o_out = out ? out[o] : NULL;
    float *values = token_values ? token_values[o] : NULL;
    for (int t = 0; (o_out || values) && t < ranks[o].num_tokens; t++) {
      for (int h = 0; h < H; h++) acc[h] = 0.0f;
      for (int k = 0; values && k < p.K; k++) values[(size_t)t * p.K + k] = 0.0f;
      int named = 0;
      for (int r = 0; r < W; r++) {
        int held = 0;
        for (int h = 0; h < H; h++) partial[h] = 0.0f;
        for (int k = 0; k < p.K; k++) {
          const int64_t x = id_of(&p, ranks, o, t, k);
          if (x < 0 || x / p.L != r) continue;
          const int32_t row = row_of(&p, o, t, k);
          const float w = rows[r].row_weights ? rows[r].row_weights[row] : 1.0f;
          sy__moe_fma_row(partial, w, (const uint16_t *)rows[r].rows_in + (size_t)row * H, H);
          if (values && rows[r].row_values) values[(size_t)t * p.K + k] = rows[r].row_values[row];
          held = 1;
        }
        if (!held) continue;
        named = 1;
        sy__moe_round_row(partial, rounded, H);
        sy__moe_add_row(acc, rounded, H);
      }
      if (!o_out || (add && !named)) continue;
      if (add) sy__moe_add_row(acc, o_out + (size_t)t * H, H);
      sy__moe_round_row(acc, o_out + (size_t)t * H, H);
    }
  }
  free(acc), free(partial), free(rounded), plan_free(&p);
  return SY_SUCCESS;
}

sy_status_t sy__moe_ht_ref_combine(const sy_moe_ht_config_t *config, int W, const sy_moe_ht_ref_rank_t *ranks,
                                   const sy_moe_ht_ref_rows_t *rows, void *const *out, float *const *token_values) {
  return ref_combine(config, W, ranks, rows, out, token_values, 0, "sy__moe_ht_ref_combine");
}

sy_status_t sy__moe_ht_ref_combine_add(const sy_moe_ht_config_t *config, int W, const sy_moe_ht_ref_rank_t *ranks,
                                       const sy_moe_ht_ref_rows_t *rows, void *const *out, float *const *token_values) {
  return ref_combine(config, W, ranks, rows, out, token_values, 1, "sy__moe_ht_ref_combine_add");
}

sy_status_t sy__moe_ht_ref_combine_backward(const sy_moe_ht_config_t *config, int W, const sy_moe_ht_ref_rank_t *ranks,
                                            const sy_moe_ht_ref_rows_t *rows, void *const *grad_rows,
                                            float *const *grad_row_weights) {
  static const char *fn = "sy__moe_ht_ref_combine_backward";
  SY_CHECK(check_ranks(config, W, ranks, fn));
  const sy_moe_ht_config_t c = sy__moe_ht_defaults(*config);
  const int H = c.hidden;
  ref_plan_t p;
  SY_CHECK(plan_for_rows(&c, W, ranks, rows, &p, fn));
  for (int r = 0; r < W; r++) {
    uint16_t *g_rows = grad_rows ? grad_rows[r] : NULL;
    float *g_w = grad_row_weights ? grad_row_weights[r] : NULL;
    for (int s = 0; (g_rows || g_w) && s < W; s++)
      for (int t = 0; t < ranks[s].num_tokens; t++)
        for (int k = 0; k < p.K; k++) {
          const int64_t x = id_of(&p, ranks, s, t, k);
          if (x < 0 || x / p.L != r) continue;
          const int32_t row = row_of(&p, s, t, k);
          const uint16_t *g = (const uint16_t *)ranks[s].tokens + (size_t)t * H;
          if (g_rows && rows[r].row_weights)
            sy__moe_ht_scale_row(rows[r].row_weights[row], g, g_rows + (size_t)row * H, H);
          else if (g_rows) memcpy(g_rows + (size_t)row * H, g, (size_t)H * sizeof *g);
          if (g_w) g_w[row] = sy__moe_ht_dot(g, (const uint16_t *)rows[r].rows_in + (size_t)row * H, H);
        }
    const int32_t *first = p.first + (size_t)r * (p.L + 1), *count = p.count + (size_t)r * p.L;
    for (int e = 0; g_w && e < p.L; e++)
      for (int32_t row = first[e] + count[e]; row < first[e + 1]; row++) g_w[row] = 0.0f;
  }
  plan_free(&p);
  return SY_SUCCESS;
}
