/*
 * moe_ht_check.c — sy-bench `moe-ht`'s expectation (moe_ht.h), computed on the host from switchyard.h's words
 * ("MoE high throughput") and every rank's inputs, and compared with what one checked round wrote:
 *   layout    the exact layout's host_counts: each local expert's rows, offsets (counts rounded up to the
 *             alignment, summed), the rows needed
 *   dispatch  recv.expert_offsets and expert_counts; each local expert's rows in order of source rank, then
 *             source token: src {s, t}, the routing weight, the payload (bf16: the token's bits; FP8: the
 *             token quantised by ref/fp8.h, bytes and group-major scales); padding rows src {-1, -1}, weight
 *             0, tokens and scales left as they were (poison), and so every row past the last expert's
 *   combine   out[t] = bf16(sum over t's ranks p, ascending, from +0, of bf16(the fmaf chain over t's rows on
 *             p in ascending k of w x y, from +0))
 *   combine_backward  grad_rows[r] = bf16(w x grad_out[t]) (padding left alone), grad_weights[r] = the
 *             32-lane dot product of grad_out[t] and rows_in[r] (padding 0)
 *   dispatch's backward  grad_x as the combine with w = 1 over grad_rows; token_values[t][k] = grad_weights of
 *             (t, k)'s row, 0 where k names no expert
 * The round's inputs make each of these a function of the tokens alone: Y = x of the row's token, grad_out = x.
 */
#include <math.h>
#include <stdio.h>

#include "moe_ht.h"
#include "ref/convert.h"
#include "ref/fp8.h"

const char *const moe_ht_op_names[MOE_HT_OPS] = {"layout", "dispatch", "combine", "combine_bwd", "dispatch_bwd"};

#define REPORT_MAX 8 /* mismatches printed per check */

typedef struct reporter {
  int rank, own;
  int *printed;
  long long *wrong;
} reporter_t;

/* Counts one wrong element of call `op`; prints the first few. */
static void bad(reporter_t *r, int op, const char *what, long long index, uint32_t got, uint32_t want) {
  r->wrong[op]++;
  if ((*r->printed)++ < REPORT_MAX)
    fprintf(stderr, "sy-bench moe-ht: rank %d: %s: %s[%lld] is 0x%x, want 0x%x%s\n", r->rank, moe_ht_op_names[op], what,
            index, got, want, (got & 0xFF) == MOE_HT_POISON && got != want ? " (poison: never written?)" : "");
}

static uint32_t fbits(float f) { return sy__float_to_bits(f); }
static float bf(uint16_t h) { return sy__bf16_to_float(h); }

static int is_mine(int32_t id, int L, int me) { return id >= 0 && id / L == me; }

int moe_ht_expect(const moe_ht_shape_t *sh, const moe_ht_inputs_t *in, moe_ht_expect_t *ex) {
  const int W = sh->world, L = sh->num_experts / W, me = sh->rank, K = sh->top_k;
  memset(ex, 0, sizeof *ex);
  ex->local = L;
  ex->counts = calloc((size_t)L, sizeof *ex->counts);
  ex->offsets = calloc((size_t)L + 1, sizeof *ex->offsets);
  if (!ex->counts || !ex->offsets) return 1;
  for (int s = 0; s < W; s++)
    for (size_t i = 0; i < (size_t)in->num_tokens[s] * K; i++)
      if (is_mine(in->ids[s][i], L, me)) ex->counts[in->ids[s][i] - me * L]++;
  long long at = 0;
  for (int e = 0; e < L; e++) {
    ex->offsets[e] = (int32_t)at;
    at += (ex->counts[e] + sh->alignment - 1) / sh->alignment * (long long)sh->alignment;
    ex->filled += ex->counts[e];
    if (at > INT32_MAX) return 1;
  }
  ex->offsets[L] = (int32_t)at;
  ex->padding = at - ex->filled;
  return 0;
}

void moe_ht_expect_free(moe_ht_expect_t *ex) {
  free(ex->counts), free(ex->offsets);
  memset(ex, 0, sizeof *ex);
}

/* Calls visit(ctx, s, t, k, e, row, x_t) for every row of this rank in the layout's order: sources ascending,
 * their tokens ascending, a token's experts here in ascending k. fill: [L] scratch. */
typedef void (*row_fn)(void *ctx, int s, int t, int k, int row, const uint16_t *x_t);
static void walk_rows(const moe_ht_shape_t *sh, const moe_ht_inputs_t *in, const moe_ht_expect_t *ex, int32_t *fill,
                      row_fn visit, void *ctx) {
  const int W = sh->world, L = ex->local, me = sh->rank, K = sh->top_k, H = sh->hidden;
  memset(fill, 0, (size_t)L * sizeof *fill);
  for (int s = 0; s < W; s++) {
    const uint16_t *x = in->num_tokens[s] ? in->tokens(in->arg, s) : NULL;
    for (int t = 0; t < in->num_tokens[s]; t++)
      for (int k = 0; k < K; k++) {
        const int32_t id = in->ids[s][(size_t)t * K + k];
        if (!is_mine(id, L, me)) continue;
        const int e = id - me * L;
        visit(ctx, s, t, k, ex->offsets[e] + fill[e]++, x + (size_t)t * H);
      }
  }
}

typedef struct fill_ctx {
  uint16_t *y;
  int hidden;
} fill_ctx_t;

static void fill_row(void *p, int s, int t, int k, int row, const uint16_t *x_t) {
  fill_ctx_t *c = p;
  memcpy(c->y + (size_t)row * c->hidden, x_t, (size_t)c->hidden * 2);
}

void moe_ht_fill_rows(const moe_ht_shape_t *sh, const moe_ht_inputs_t *in, const moe_ht_expect_t *ex, uint16_t *y) {
  int32_t *fill = malloc((size_t)ex->local * sizeof *fill);
  fill_ctx_t c = {y, sh->hidden};
  if (fill) walk_rows(sh, in, ex, fill, fill_row, &c);
  free(fill);
}

/* The combine_backward's order: 32 lanes, lane l over h = 8l .. 8l + 7, 256 + 8l .., ... with fmaf from +0, then
 * the butterfly s_l = s_l + s_(l xor d) for d = 16 .. 1; s_0 (the inputs here hold no NaN). */
static float dot32(const uint16_t *a, const uint16_t *b, int H) {
  float s[32], n[32];
  for (int l = 0; l < 32; l++) {
    s[l] = 0.0f;
    for (int piece = 8 * l; piece < H; piece += 256)
      for (int h = piece; h < piece + 8 && h < H; h++) s[l] = fmaf(bf(a[h]), bf(b[h]), s[l]);
  }
  for (int d = 16; d >= 1; d /= 2) {
    for (int l = 0; l < 32; l++) n[l] = s[l] + s[l ^ d];
    memcpy(s, n, sizeof s);
  }
  return s[0];
}

/* The weight the checked combine and combine_backward applied to the row of (s, t, k). */
static float row_weight(const moe_ht_shape_t *sh, const moe_ht_inputs_t *in, int s, int t, int k) {
  if (sh->unit_weights) return 1.0f;
  return in->weights[s] ? in->weights[s][(size_t)t * sh->top_k + k] : 0.0f;
}

typedef struct experts_ctx {
  const moe_ht_shape_t *sh;
  const moe_ht_inputs_t *in;
  const moe_ht_got_t *got;
  reporter_t *rep;
  uint8_t *q;    /* [hidden]: the expected E4M3 bytes */
  float *scales; /* [hidden / 128] */
} experts_ctx_t;

/* One row of the experts' side: the dispatch's row and the combine_backward's. */
static void check_row(void *p, int s, int t, int k, int row, const uint16_t *x_t) {
  experts_ctx_t *c = p;
  const moe_ht_shape_t *sh = c->sh;
  const moe_ht_got_t *g = c->got;
  const int H = sh->hidden, G = H / SY_MOE_FP8_GROUP;
  const size_t r = (size_t)row;
  reporter_t *rep = c->rep;
  if (g->src) {
    if (g->src[2 * r] != s)
      bad(rep, MOE_HT_DISPATCH, "recv.src (rank)", (long long)(2 * r), (uint32_t)g->src[2 * r], (uint32_t)s);
    if (g->src[2 * r + 1] != t)
      bad(rep, MOE_HT_DISPATCH, "recv.src (token)", (long long)(2 * r + 1), (uint32_t)g->src[2 * r + 1], (uint32_t)t);
  }
  if (g->weights) {
    const float w = c->in->weights[s] ? c->in->weights[s][(size_t)t * sh->top_k + k] : 0.0f;
    if (fbits(g->weights[r]) != fbits(w))
      bad(rep, MOE_HT_DISPATCH, "recv.weights", (long long)r, fbits(g->weights[r]), fbits(w));
  }
  if (g->tokens && sh->wire == SY_MOE_WIRE_BF16) {
    const uint16_t *got = (const uint16_t *)g->tokens + r * H;
    if (memcmp(got, x_t, (size_t)H * 2))
      for (int h = 0; h < H; h++)
        if (got[h] != x_t[h]) bad(rep, MOE_HT_DISPATCH, "recv.tokens", (long long)(r * H + h), got[h], x_t[h]);
  } else if (g->tokens) {
    sy__fp8_quantize_token(x_t, H, sh->wire == SY_MOE_WIRE_FP8_UE8M0, c->q, c->scales, 1);
    const uint8_t *got = g->tokens + r * H;
    if (memcmp(got, c->q, (size_t)H))
      for (int h = 0; h < H; h++)
        if (got[h] != c->q[h]) bad(rep, MOE_HT_DISPATCH, "recv.tokens", (long long)(r * H + h), got[h], c->q[h]);
    for (int gi = 0; g->scales && gi < G; gi++) {
      const size_t at = moe_ht_scale_at(sh, (size_t)g->rows, (size_t)r, (size_t)gi);
      if (fbits(g->scales[at]) != fbits(c->scales[gi]))
        bad(rep, MOE_HT_DISPATCH, "recv.scales", (long long)at, fbits(g->scales[at]), fbits(c->scales[gi]));
    }
  }
  const float w = row_weight(sh, c->in, s, t, k);
  if (g->grad_rows) {
    const uint16_t *got = g->grad_rows + r * H;
    for (int h = 0; h < H; h++) {
      const uint16_t want = sh->unit_weights ? x_t[h] : sy__float_to_bf16(w * bf(x_t[h]));
      if (got[h] != want) bad(rep, MOE_HT_COMBINE_BWD, "grad_rows", (long long)(r * H + h), got[h], want);
    }
  }
  if (g->grad_weights) {
    const float want = dot32(x_t, x_t, H);
    if (fbits(g->grad_weights[r]) != fbits(want))
      bad(rep, MOE_HT_COMBINE_BWD, "grad_row_weights", (long long)r, fbits(g->grad_weights[r]), fbits(want));
  }
}

/* Padding rows: src {-1, -1}, weight 0 and grad_row_weights 0 written; tokens, scales, grad_rows left alone. */
static void check_padding(const moe_ht_shape_t *sh, const moe_ht_expect_t *ex, const moe_ht_got_t *g, reporter_t *rep) {
  const int H = sh->hidden, G = H / SY_MOE_FP8_GROUP;
  const size_t row_bytes = moe_ht_row_bytes(sh->wire, H);
  for (int e = 0; e < ex->local; e++)
    for (size_t r = (size_t)ex->offsets[e] + (size_t)ex->counts[e]; r < (size_t)ex->offsets[e + 1]; r++) {
      for (int i = 0; g->src && i < 2; i++)
        if (g->src[2 * r + i] != -1)
          bad(rep, MOE_HT_DISPATCH, "recv.src (padding)", (long long)(2 * r + i), (uint32_t)g->src[2 * r + i],
              0xFFFFFFFFu);
      if (g->weights && fbits(g->weights[r]) != 0)
        bad(rep, MOE_HT_DISPATCH, "recv.weights (padding)", (long long)r, fbits(g->weights[r]), 0);
      if (g->grad_weights && fbits(g->grad_weights[r]) != 0)
        bad(rep, MOE_HT_COMBINE_BWD, "grad_row_weights (padding)", (long long)r, fbits(g->grad_weights[r]), 0);
      for (size_t i = 0; g->tokens && i < row_bytes; i++)
        if (g->tokens[r * row_bytes + i] != MOE_HT_POISON)
          bad(rep, MOE_HT_DISPATCH, "recv.tokens (padding, left alone)", (long long)(r * row_bytes + i),
              g->tokens[r * row_bytes + i], MOE_HT_POISON);
      for (int gi = 0; g->scales && sh->wire != SY_MOE_WIRE_BF16 && gi < G; gi++) {
        uint32_t v;
        const size_t at = moe_ht_scale_at(sh, (size_t)g->rows, (size_t)r, (size_t)gi);
        memcpy(&v, &g->scales[at], 4);
        if (v != 0xEEEEEEEEu)
          bad(rep, MOE_HT_DISPATCH, "recv.scales (padding, left alone)", (long long)at, v, 0xEEEEEEEEu);
      }
      for (int h = 0; g->grad_rows && h < H; h++)
        if (g->grad_rows[r * H + h] != 0xEEEE)
          bad(rep, MOE_HT_COMBINE_BWD, "grad_rows (padding, left alone)", (long long)(r * H + h),
              g->grad_rows[r * H + h], 0xEEEE);
    }
}

/* Rows past the last expert's (offsets[L] .. rows) are left as they were: the metadata and scales all of them,
 * tokens and grad_rows the first (where an overrun lands). */
static void check_tail(const moe_ht_shape_t *sh, const moe_ht_expect_t *ex, const moe_ht_got_t *g, reporter_t *rep) {
  const size_t H = (size_t)sh->hidden, G = H / SY_MOE_FP8_GROUP, row_bytes = moe_ht_row_bytes(sh->wire, sh->hidden);
  const size_t used = (size_t)ex->offsets[ex->local], rows = (size_t)g->rows;
  const uint32_t poison4 = 0x01010101u * MOE_HT_POISON;
  for (size_t r = used; r < rows; r++) {
    uint32_t v;
    for (int i = 0; g->src && i < 2; i++)
      if ((uint32_t)g->src[2 * r + i] != poison4)
        bad(rep, MOE_HT_DISPATCH, "recv.src (past the rows used)", (long long)(2 * r + i), (uint32_t)g->src[2 * r + i],
            poison4);
    if (g->weights && fbits(g->weights[r]) != poison4)
      bad(rep, MOE_HT_DISPATCH, "recv.weights (past the rows used)", (long long)r, fbits(g->weights[r]), poison4);
    if (g->grad_weights && fbits(g->grad_weights[r]) != poison4)
      bad(rep, MOE_HT_COMBINE_BWD, "grad_row_weights (past the rows used)", (long long)r, fbits(g->grad_weights[r]),
          poison4);
    for (size_t gi = 0; g->scales && gi < G; gi++)
      if (memcpy(&v, &g->scales[moe_ht_scale_at(sh, rows, r, gi)], 4), v != poison4)
        bad(rep, MOE_HT_DISPATCH, "recv.scales (past the rows used)", (long long)moe_ht_scale_at(sh, rows, r, gi), v,
            poison4);
  }
  if (used >= rows) return;
  for (size_t i = 0; g->tokens && i < row_bytes; i++)
    if (g->tokens[used * row_bytes + i] != MOE_HT_POISON)
      bad(rep, MOE_HT_DISPATCH, "recv.tokens (past the rows used)", (long long)(used * row_bytes + i),
          g->tokens[used * row_bytes + i], MOE_HT_POISON);
  for (size_t h = 0; g->grad_rows && h < H; h++)
    if (g->grad_rows[used * H + h] != (uint16_t)(0x0101u * MOE_HT_POISON))
      bad(rep, MOE_HT_COMBINE_BWD, "grad_rows (past the rows used)", (long long)(used * H + h),
          g->grad_rows[used * H + h], 0x0101u * MOE_HT_POISON);
}

/* The tokens' side on this rank: the combine's out, dispatch's backward's grad_x and token_values. */
static int check_tokens(const moe_ht_shape_t *sh, const moe_ht_inputs_t *in, const moe_ht_got_t *g, reporter_t *rep) {
  const int W = sh->world, L = sh->num_experts / W, me = sh->rank, K = sh->top_k, H = sh->hidden;
  const int n = in->num_tokens[me];
  if (!n) return 0;
  const uint16_t *x = in->tokens(in->arg, me);
  const int32_t *ids = in->ids[me];
  float *acc = malloc(4 * (size_t)H * sizeof *acc);
  if (!acc) return 1;
  float *sum_out = acc, *sum_gx = acc + H, *part_out = acc + 2 * H, *part_gx = acc + 3 * H;
  for (int t = 0; t < n; t++) {
    const uint16_t *x_t = x + (size_t)t * H;
    const int32_t *id_t = ids + (size_t)t * K;
    for (int h = 0; h < 2 * H; h++) acc[h] = 0.0f;
    for (int p = 0; p < W; p++) {
      int here = 0;
      for (int k = 0; k < K; k++) here |= id_t[k] >= 0 && id_t[k] / L == p;
      if (!here) continue;
      for (int h = 0; h < 2 * H; h++) part_out[h] = 0.0f;
      for (int k = 0; k < K; k++) {
        if (!(id_t[k] >= 0 && id_t[k] / L == p)) continue;
        const float w = row_weight(sh, in, me, t, k);
        for (int h = 0; h < H; h++) {
          const float y = bf(x_t[h]);
          part_out[h] = fmaf(w, y, part_out[h]);
          const float grad_row = sh->unit_weights ? y : bf(sy__float_to_bf16(w * y));
          part_gx[h] = fmaf(1.0f, grad_row, part_gx[h]);
        }
      }
      for (int h = 0; h < H; h++) {
        sum_out[h] = sum_out[h] + bf(sy__float_to_bf16(part_out[h]));
        sum_gx[h] = sum_gx[h] + bf(sy__float_to_bf16(part_gx[h]));
      }
    }
    for (int h = 0; h < H; h++) {
      const size_t at = (size_t)t * H + h;
      const uint16_t want_out = sy__float_to_bf16(sum_out[h]), want_gx = sy__float_to_bf16(sum_gx[h]);
      if (g->out && g->out[at] != want_out) bad(rep, MOE_HT_COMBINE, "out", (long long)at, g->out[at], want_out);
      if (g->grad_x && g->grad_x[at] != want_gx)
        bad(rep, MOE_HT_DISPATCH_BWD, "grad_x", (long long)at, g->grad_x[at], want_gx);
    }
    if (g->token_values) {
      const float dot = dot32(x_t, x_t, H);
      for (int k = 0; k < K; k++) {
        const size_t at = (size_t)t * K + k;
        const float want = id_t[k] >= 0 ? dot : 0.0f;
        if (fbits(g->token_values[at]) != fbits(want))
          bad(rep, MOE_HT_DISPATCH_BWD, "token_values", (long long)at, fbits(g->token_values[at]), fbits(want));
      }
    }
  }
  free(acc);
  return 0;
}

int moe_ht_check(const moe_ht_shape_t *sh, const moe_ht_inputs_t *in, const moe_ht_expect_t *ex,
                 const moe_ht_got_t *got, long long wrong[MOE_HT_OPS]) {
  const int L = ex->local;
  reporter_t rep = {sh->rank, 0, NULL, wrong};
  rep.printed = got->printed ? got->printed : &rep.own;
  if (got->host_counts) {
    for (int e = 0; e < L; e++) {
      if (got->host_counts[e] != ex->counts[e])
        bad(&rep, MOE_HT_LAYOUT, "host_counts (counts)", e, (uint32_t)got->host_counts[e], (uint32_t)ex->counts[e]);
      if (got->host_counts[L + e] != ex->offsets[e])
        bad(&rep, MOE_HT_LAYOUT, "host_counts (offsets)", L + e, (uint32_t)got->host_counts[L + e],
            (uint32_t)ex->offsets[e]);
    }
    if (got->host_counts[2 * L] != ex->offsets[L])
      bad(&rep, MOE_HT_LAYOUT, "host_counts (rows)", 2 * L, (uint32_t)got->host_counts[2 * L],
          (uint32_t)ex->offsets[L]);
  }
  for (int e = 0; e <= L; e++) {
    if (got->expert_offsets && got->expert_offsets[e] != ex->offsets[e])
      bad(&rep, MOE_HT_DISPATCH, "recv.expert_offsets", e, (uint32_t)got->expert_offsets[e], (uint32_t)ex->offsets[e]);
    if (e < L && got->expert_counts && got->expert_counts[e] != ex->counts[e])
      bad(&rep, MOE_HT_DISPATCH, "recv.expert_counts", e, (uint32_t)got->expert_counts[e], (uint32_t)ex->counts[e]);
  }
  const int H = sh->hidden;
  experts_ctx_t c = {sh, in, got, &rep, malloc((size_t)H), malloc((size_t)(H / SY_MOE_FP8_GROUP + 1) * sizeof(float))};
  int32_t *fill = malloc((size_t)L * sizeof *fill);
  int rc = !c.q || !c.scales || !fill;
  if (!rc) walk_rows(sh, in, ex, fill, check_row, &c);
  if (!rc) check_padding(sh, ex, got, &rep);
  if (!rc) check_tail(sh, ex, got, &rep);
  free(c.q), free(c.scales), free(fill);
  return rc || check_tokens(sh, in, got, &rep);
}
