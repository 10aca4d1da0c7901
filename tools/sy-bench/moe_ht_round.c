/*
 * moe_ht_round.c — one checked round of the high-throughput MoE calls (moe_ht.h), for sy-bench `moe-ht` and the
 * soak: the outputs poisoned, the calls of a step in order on one handle (layout, dispatch, combine of Y,
 * combine_backward with grad_out = x and rows_in = Y, dispatch's backward), what they wrote copied back, and
 * moe_ht_check's verdict. Y is what the experts would read: the dispatched rows themselves on the BF16 wire,
 * else each row's token in bf16, uploaded (so every expectation is a function of the tokens alone).
 */
#include "moe_ht.h"

/* Fills the outputs of a round with the poison (padding rows must keep it where the header says so). */
static int poison(bench_ctx_t *ctx, moe_ht_bench_t *b, size_t T) {
  const sy_moe_ht_recv_t *rv = &b->recv;
  const size_t rows = (size_t)rv->rows, H = (size_t)b->cfg.hidden, K = (size_t)b->cfg.top_k;
  const size_t L = (size_t)b->sizes.local_experts;
  int rc = fill_bytes(ctx, rv->tokens, MOE_HT_POISON, rows * b->sizes.row_bytes);
  if (rv->scales) rc |= fill_bytes(ctx, rv->scales, MOE_HT_POISON, rows * b->sizes.scale_bytes);
  rc |= fill_bytes(ctx, rv->src, MOE_HT_POISON, rows * 8) | fill_bytes(ctx, rv->weights, MOE_HT_POISON, rows * 4);
  rc |= fill_bytes(ctx, rv->expert_offsets, MOE_HT_POISON, (L + 1) * 4);
  rc |= fill_bytes(ctx, rv->expert_counts, MOE_HT_POISON, L * 4);
  rc |= fill_bytes(ctx, b->grad_rows, MOE_HT_POISON, rows * H * 2);
  rc |= fill_bytes(ctx, b->grad_weights, MOE_HT_POISON, rows * 4);
  rc |= fill_bytes(ctx, b->out, MOE_HT_POISON, T * H * 2) | fill_bytes(ctx, b->grad_x, MOE_HT_POISON, T * H * 2);
  rc |= fill_bytes(ctx, b->token_values, MOE_HT_POISON, T * K * 4);
  return rc;
}

/* The calls in the step's order until one does not succeed; *done: the last one that did (MOE_HT_LAYOUT - 1:
 * none). */
static sy_status_t calls(bench_ctx_t *ctx, moe_ht_bench_t *b, const void *Y, const float *weights, int exact,
                         int *done) {
  const sy_moe_ht_recv_t *rv = &b->recv;
  const float *row_w = b->unit_weights ? NULL : rv->weights;
  const int T = b->tokens;
  sy_status_t st =
      sy_moe_ht_layout(b->moe, b->ids, b->id_type, T, b->handle, exact ? b->host_counts : NULL, ctx->stream);
  *done = st ? MOE_HT_LAYOUT - 1 : MOE_HT_LAYOUT;
  if (!st && !(st = sy_moe_ht_dispatch(b->moe, b->handle, T, b->x, NULL, weights, rv, ctx->stream))) ++*done;
  if (!st && !(st = sy_moe_ht_combine(b->moe, b->handle, T, Y, rv, row_w, NULL, b->out, NULL, ctx->stream))) ++*done;
  if (!st && !(st = sy_moe_ht_combine_backward(b->moe, b->handle, T, b->x, rv, row_w, Y, b->grad_rows, b->grad_weights,
                                               ctx->stream)))
    ++*done;
  if (!st && !(st = sy_moe_ht_combine(b->moe, b->handle, T, b->grad_rows, rv, NULL, b->grad_weights, b->grad_x,
                                      b->token_values, ctx->stream)))
    ++*done;
  return st;
}

/* Host copies of what the calls up to `done` wrote, into got (tok, meta, outs, host: buffers sized by the round):
 * the row arrays up to rows_used and one row more, the per-row metadata and scales whole. */
static int copy_back(bench_ctx_t *ctx, moe_ht_bench_t *b, size_t rows_used, size_t T, int done, uint8_t *tok,
                     uint8_t *meta, uint16_t *outs, uint16_t *host, moe_ht_got_t *got) {
  const sy_moe_ht_recv_t *rv = &b->recv;
  const size_t rows = (size_t)rv->rows, H = (size_t)b->cfg.hidden, K = (size_t)b->cfg.top_k;
  const size_t L = (size_t)b->sizes.local_experts, row_bytes = b->sizes.row_bytes;
  const size_t scale_n = rv->scales ? H / SY_MOE_FP8_GROUP * rows : 0;
  const size_t copied = rows_used < rows ? rows_used + 1 : rows; /* the row after the last expert's: left alone */
  int rc = 0;
  if (done >= MOE_HT_DISPATCH) {
    int32_t *src = (int32_t *)meta, *offsets = src + 2 * rows, *counts = offsets + L + 1;
    float *w = (float *)(counts + L), *gw = w + rows, *scales = gw + rows;
    rc |= from_dev(ctx, tok, rv->tokens, copied * row_bytes) || from_dev(ctx, src, rv->src, rows * 8);
    rc |= from_dev(ctx, offsets, rv->expert_offsets, (L + 1) * 4) || from_dev(ctx, counts, rv->expert_counts, L * 4);
    rc |= from_dev(ctx, w, rv->weights, rows * 4) || (scale_n && from_dev(ctx, scales, rv->scales, scale_n * 4));
    got->tokens = tok, got->src = src, got->expert_offsets = offsets, got->expert_counts = counts, got->weights = w;
    got->scales = scale_n ? scales : NULL;
    if (done >= MOE_HT_COMBINE_BWD) {
      rc |= from_dev(ctx, host, b->grad_rows, copied * H * 2) || from_dev(ctx, gw, b->grad_weights, rows * 4);
      got->grad_rows = host, got->grad_weights = gw;
    }
  }
  if (done >= MOE_HT_COMBINE) rc |= from_dev(ctx, outs, b->out, T * H * 2), got->out = outs;
  if (done >= MOE_HT_DISPATCH_BWD) {
    float *tv = (float *)(outs + 2 * T * H);
    rc |= from_dev(ctx, outs + T * H, b->grad_x, T * H * 2) || from_dev(ctx, tv, b->token_values, T * K * 4);
    got->grad_x = outs + T * H, got->token_values = tv;
  }
  return rc;
}

int moe_ht_round(bench_ctx_t *ctx, moe_ht_bench_t *b, const moe_ht_shape_t *sh, const moe_ht_inputs_t *in,
                 const moe_ht_expect_t *ex, int exact, long long wrong[MOE_HT_OPS]) {
  const size_t rows_used = (size_t)ex->offsets[ex->local], rows = (size_t)b->recv.rows;
  const size_t T = (size_t)in->num_tokens[sh->rank], H = (size_t)sh->hidden, K = (size_t)sh->top_k;
  const size_t L = (size_t)ex->local, scale_n = b->recv.scales ? H / SY_MOE_FP8_GROUP * rows : 0;
  int rc = rows_used > rows || poison(ctx, b, T);
  const void *Y = sh->wire == SY_MOE_WIRE_BF16 ? b->recv.tokens : b->y;
  uint16_t *host = malloc((rows_used + 1) * H * 2);
  uint8_t *tok = malloc((rows_used + 1) * b->sizes.row_bytes);
  uint8_t *meta = malloc(rows * 16 + scale_n * 4 + (L + 1) * 8 + 16);
  uint16_t *outs = malloc(2 * T * H * 2 + T * K * 4 + 16);
  rc |= !host || !tok || !meta || !outs;
  if (!rc && sh->wire != SY_MOE_WIRE_BF16) {
    moe_ht_fill_rows(sh, in, ex, host);
    rc = to_dev(ctx, b->y, host, rows_used * H * 2);
  }
  rc = bench_allreduce_max(ctx, rc) != 0; /* the calls are collective: every rank makes them or none does */
  b->tokens = (int)T;
  b->unit_weights = sh->unit_weights;
  if (exact) b->counts_valid = 0; /* until this round's layout answers */
  int done = MOE_HT_LAYOUT - 1;
  const sy_status_t st =
      rc ? SY_ERR_INTERNAL : calls(ctx, b, Y, in->weights[sh->rank] ? b->weights : NULL, exact, &done);
  int failed = st != SY_SUCCESS && st != SY_ERR_UNSUPPORTED;
  if (gpu(ctx) && cudaStreamSynchronize(ctx->stream) != cudaSuccess) failed = 1;
  if (failed) fprintf(stderr, "sy-bench moe-ht: rank %d: checked round: %s\n", ctx->rank, sy_status_name(st));
  failed = bench_allreduce_max(ctx, failed) != 0;
  done = failed ? MOE_HT_LAYOUT - 1 : -(int)bench_allreduce_max(ctx, -done); /* the fewest any rank made */
  if (exact && done >= MOE_HT_LAYOUT) b->counts_valid = 1;
  moe_ht_got_t got;
  memset(&got, 0, sizeof got);
  got.rows = (int)rows;
  got.printed = b->printed;
  got.host_counts = b->counts_valid ? b->host_counts : NULL;
  int crc = !failed && copy_back(ctx, b, rows_used, T, done, tok, meta, outs, host, &got);
  long long w[MOE_HT_OPS] = {0, 0, 0, 0, 0};
  if (!crc && !failed) crc = moe_ht_check(sh, in, ex, &got, w);
  free(host), free(tok), free(meta), free(outs);
  crc = bench_allreduce_max(ctx, crc) != 0;
  for (int op = 0; op < MOE_HT_OPS; op++) {
    const int ran = op == MOE_HT_LAYOUT ? b->counts_valid : op <= done;
    wrong[op] = !ran ? -1 : crc || failed ? 1 : bench_allreduce_max(ctx, w[op]);
  }
  return failed;
}
