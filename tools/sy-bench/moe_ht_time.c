/*
 * moe_ht_time.c — sy-bench entry `moe-ht` (moe_ht.c): the calls of one step on one configuration's buffers, each
 * timed alone through bench_time (CUDA events, CUPTI kernel time, host-observed; medians, the slowest rank's),
 * and the memory ceiling, a device-to-device cudaMemcpyAsync timed the same way. The NCCL baseline is moe-ll's
 * (moe_time.c: grouped ncclSend/ncclRecv over per-pair byte counts).
 *
 * The calls, in the order a training step makes them (each needs the one before it on the handle):
 *   layout        sy_moe_ht_layout, worst case (host_counts NULL)
 *   dispatch      sy_moe_ht_dispatch of x with the routing weights
 *   combine       sy_moe_ht_combine of y weighted by recv.weights
 *   combine_bwd   sy_moe_ht_combine_backward: grad_out = x, rows_in = y, row_weights = recv.weights, grad_rows
 *                 and the row weights' gradient
 *   dispatch_bwd  sy_moe_ht_combine of grad_rows, row_weights NULL, row_values = that gradient, token_values
 */
#include "moe_ht.h"

int moe_ht_op(bench_ctx_t *ctx, moe_ht_bench_t *b, int op) {
  const int T = b->tokens;
  switch (op) {
    case MOE_HT_LAYOUT: b->last = sy_moe_ht_layout(b->moe, b->ids, b->id_type, T, b->handle, NULL, ctx->stream); break;
    case MOE_HT_DISPATCH:
      b->last = sy_moe_ht_dispatch(b->moe, b->handle, T, b->x, NULL, b->weights, &b->recv, ctx->stream);
      break;
    case MOE_HT_COMBINE:
      b->last =
          sy_moe_ht_combine(b->moe, b->handle, T, b->y, &b->recv, b->recv.weights, NULL, b->out, NULL, ctx->stream);
      break;
    case MOE_HT_COMBINE_BWD:
      b->last = sy_moe_ht_combine_backward(b->moe, b->handle, T, b->x, &b->recv, b->recv.weights, b->y, b->grad_rows,
                                           b->grad_weights, ctx->stream);
      break;
    default:
      b->last = sy_moe_ht_combine(b->moe, b->handle, T, b->grad_rows, &b->recv, NULL, b->grad_weights, b->grad_x,
                                  b->token_values, ctx->stream);
      break;
  }
  return b->last != SY_SUCCESS;
}

int moe_ht_op_exact_layout(bench_ctx_t *ctx, moe_ht_bench_t *b) {
  b->last = sy_moe_ht_layout(b->moe, b->ids, b->id_type, b->tokens, b->handle, b->host_counts, ctx->stream);
  return b->last != SY_SUCCESS;
}

typedef struct op_arg {
  moe_ht_bench_t *b;
  int op;
} op_arg_t;

static int op_fn(bench_ctx_t *ctx, void *arg) {
  op_arg_t *a = arg;
  return moe_ht_op(ctx, a->b, a->op);
}

int moe_ht_time_op(bench_ctx_t *ctx, moe_ht_bench_t *b, int op, bench_timing_t *t, int *unsupported) {
  memset(t, 0, sizeof *t);
  *unsupported = 0;
  /* one call first: a backend without the call answers SY_ERR_UNSUPPORTED on every rank alike */
  int rc = moe_ht_op(ctx, b, op);
  if (gpu(ctx) && !rc) rc = cudaStreamSynchronize(ctx->stream) != cudaSuccess;
  const long long code = bench_allreduce_max(ctx, !rc ? 0 : b->last == SY_ERR_UNSUPPORTED ? 1 : 2);
  if (code == 1) {
    *unsupported = 1;
    return 0;
  }
  if (code) {
    if (rc)
      fprintf(stderr, "sy-bench moe-ht: rank %d: %s: %s (%s)\n", ctx->rank, moe_ht_op_names[op],
              sy_status_name(b->last), sy_status_string(b->last));
    return 1;
  }
  op_arg_t a = {b, op};
  return bench_time(ctx, op_fn, &a, t);
}

int moe_ht_alloc_config(bench_ctx_t *ctx, moe_ht_bench_t *b) {
  const sy_moe_ht_sizes_t *z = &b->sizes;
  const size_t rows = (size_t)z->max_rows, H = (size_t)b->cfg.hidden, T = (size_t)b->cfg.max_tokens;
  const size_t K = (size_t)b->cfg.top_k, L = (size_t)z->local_experts;
  memset(&b->recv, 0, sizeof b->recv);
  b->handle = dev_alloc(ctx, z->handle_bytes);
  if (b->cfg.recv_arena_bytes) { /* every section from the arena */
    if (sy_moe_ht_recv_alloc(b->moe, NULL, z->max_rows, 0, &b->recv, ctx->stream) != SY_SUCCESS) return 1;
    b->recv_arena = 1;
  } else {
    b->recv.tokens = dev_alloc(ctx, rows * z->row_bytes);
    b->recv.scales = z->scale_bytes ? dev_alloc(ctx, rows * z->scale_bytes) : NULL;
    b->recv.src = dev_alloc(ctx, rows * 2 * sizeof(int32_t));
    b->recv.weights = dev_alloc(ctx, rows * sizeof(float));
    b->recv.expert_offsets = dev_alloc(ctx, (L + 1) * sizeof(int32_t));
    b->recv.expert_counts = dev_alloc(ctx, L * sizeof(int32_t));
    b->recv.rows = z->max_rows;
    b->recv.expert_stride = 0;
  }
  b->y = dev_alloc(ctx, rows * H * 2);
  b->grad_rows = dev_alloc(ctx, rows * H * 2);
  b->grad_weights = dev_alloc(ctx, rows * sizeof(float));
  b->out = dev_alloc(ctx, T * H * 2);
  b->grad_x = dev_alloc(ctx, T * H * 2);
  b->token_values = dev_alloc(ctx, T * K * sizeof(float));
  b->host_counts = malloc((2 * L + 1) * sizeof(int32_t));
  if (!b->handle || !b->recv.tokens || (z->scale_bytes && !b->recv.scales) || !b->recv.src || !b->recv.weights ||
      !b->recv.expert_offsets || !b->recv.expert_counts || !b->y || !b->grad_rows || !b->grad_weights || !b->out ||
      !b->grad_x || !b->token_values || !b->host_counts)
    return 1;
  /* y: bf16 0x3F3F (0.746) everywhere, the rows the timed combines read; the outputs poisoned */
  int rc = fill_bytes(ctx, b->y, 0x3F, rows * H * 2);
  rc |= fill_bytes(ctx, b->handle, 0, z->handle_bytes);
  rc |= fill_bytes(ctx, b->recv.tokens, MOE_HT_POISON, rows * z->row_bytes);
  if (b->recv.scales) rc |= fill_bytes(ctx, b->recv.scales, MOE_HT_POISON, rows * z->scale_bytes);
  rc |= fill_bytes(ctx, b->grad_rows, MOE_HT_POISON, rows * H * 2);
  if (gpu(ctx) && !rc) rc = cudaStreamSynchronize(ctx->stream) != cudaSuccess;
  return rc;
}

void moe_ht_free_config(bench_ctx_t *ctx, moe_ht_bench_t *b) {
  dev_free(ctx, b->handle);
  if (b->recv_arena) {
    if (b->recv.expert_offsets) sy_moe_ht_recv_free(b->moe, NULL, &b->recv, ctx->stream);
    b->recv_arena = 0;
  } else {
    dev_free(ctx, b->recv.tokens), dev_free(ctx, b->recv.scales);
    dev_free(ctx, b->recv.src), dev_free(ctx, b->recv.weights), dev_free(ctx, b->recv.expert_offsets);
    dev_free(ctx, b->recv.expert_counts);
  }
  dev_free(ctx, b->y), dev_free(ctx, b->grad_rows);
  dev_free(ctx, b->grad_weights), dev_free(ctx, b->out), dev_free(ctx, b->grad_x), dev_free(ctx, b->token_values);
  free(b->host_counts);
  b->handle = b->y = b->grad_rows = b->out = b->grad_x = NULL;
  b->grad_weights = b->token_values = NULL;
  b->host_counts = NULL;
  memset(&b->recv, 0, sizeof b->recv);
}

static int op_copy(bench_ctx_t *ctx, void *arg) {
  moe_ht_bench_t *b = arg;
  return cudaMemcpyAsync(b->copy_dst, b->copy_src, b->copy_bytes, cudaMemcpyDeviceToDevice, ctx->stream) != cudaSuccess;
}

int moe_ht_time_copy(bench_ctx_t *ctx, moe_ht_bench_t *b, size_t bytes, bench_timing_t *t) {
  memset(t, 0, sizeof *t);
  b->copy_bytes = bytes;
  b->copy_src = dev_alloc(ctx, bytes), b->copy_dst = dev_alloc(ctx, bytes);
  int rc = !b->copy_src || !b->copy_dst;
  if (!rc) rc = fill_bytes(ctx, b->copy_src, 0x3F, bytes) || fill_bytes(ctx, b->copy_dst, 0, bytes);
  rc = bench_allreduce_max(ctx, rc) != 0;
  if (!rc) rc = bench_time(ctx, op_copy, b, t);
  dev_free(ctx, b->copy_src), dev_free(ctx, b->copy_dst);
  b->copy_src = b->copy_dst = NULL;
  return rc;
}
