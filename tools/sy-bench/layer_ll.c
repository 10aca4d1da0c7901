/*
 * layer_ll.c — sy-bench `layer` at decode shapes (at most 256 tokens a rank) over the low-latency mode: dispatch
 * (BF16 wire, de-duplicated) into each local expert's slots, the FFN over the first `cap` slots of every expert (a
 * capacity: 2 x the mean rows of an expert plus 16, to 16; the dispatch fills an expert's slots from the first, and
 * an expert with more rows than cap is reported as wrong), the weighted combine. Ways: a (sequential) and c (a
 * replayed from the graph cache: the host-time target for decode), with the communication and the GEMMs
 * alone beside them. Two micro-batches would need two objects (the low-latency halves alternate dispatch and
 * combine on one object): not built.
 */
#include <stdlib.h>
#include <string.h>

#include "layer.h"

static int ll_dispatch(layer_bench_t *b, cudaStream_t s) {
  return sy_moe_dispatch(b->ll, b->x, b->T, b->ids, SY_INDEX_INT32, b->weights, &b->ll_recv, s) != SY_SUCCESS;
}

static int ll_ffn(layer_bench_t *b, cudaStream_t s) {
  return layer_ffn(b, b->ll_recv.tokens, b->ll_mid, b->ll_y, b->cap, b->slots, b->L, s);
}

static int ll_combine(layer_bench_t *b, cudaStream_t s) {
  return sy_moe_combine(b->ll, b->ll_y, b->ids, SY_INDEX_INT32, b->weights, b->T, b->out, s) != SY_SUCCESS;
}

static int op_a(bench_ctx_t *ctx, void *arg) {
  layer_bench_t *b = arg;
  return ll_dispatch(b, ctx->stream) || ll_ffn(b, ctx->stream) || ll_combine(b, ctx->stream);
}

static int op_comm(bench_ctx_t *ctx, void *arg) {
  layer_bench_t *b = arg;
  return ll_dispatch(b, ctx->stream) || ll_combine(b, ctx->stream);
}

static int op_compute(bench_ctx_t *ctx, void *arg) { return ll_ffn(arg, ctx->stream); }

static sy_status_t graph_step(void *user, int bucket, cudaStream_t stream) {
  layer_bench_t *b = user;
  (void)bucket;
  return ll_dispatch(b, stream) || ll_ffn(b, stream) || ll_combine(b, stream) ? SY_ERR_INTERNAL : SY_SUCCESS;
}

static int op_c(bench_ctx_t *ctx, void *arg) {
  layer_bench_t *b = arg;
  return sy_graph_cache_run(b->cache, b->T, ctx->stream) != SY_SUCCESS;
}

/* Experts whose rows exceed the capacity (their rows past cap were never computed). */
static long long over_capacity(layer_bench_t *b) {
  int32_t *counts = malloc((size_t)b->L * 4);
  long long over = counts ? 0 : -1;
  if (counts && (!b->gpu || cudaStreamSynchronize(b->ctx->stream) == cudaSuccess) &&
      !layer_get(b, counts, b->ll_recv.expert_counts, (size_t)b->L * 4))
    for (int e = 0; e < b->L; e++) over += counts[e] > b->cap;
  free(counts);
  return over;
}

int layer_decode(layer_bench_t *b) {
  bench_ctx_t *ctx = b->ctx;
  sy_moe_config_t cfg = SY_MOE_CONFIG_INIT;
  cfg.max_tokens = b->T, cfg.hidden = b->H, cfg.top_k = b->K, cfg.num_experts = b->E;
  cfg.wire = SY_MOE_WIRE_BF16;
  sy_moe_recv_sizes_t sz = SY_MOE_RECV_SIZES_INIT;
  int rc = sy_moe_create(ctx->comm, &cfg, &b->ll) != SY_SUCCESS || sy_moe_recv_sizes(b->ll, &sz) != SY_SUCCESS;
  if (!rc) {
    b->L = sz.local_experts, b->slots = sz.slots;
    const long long mean = ((long long)b->T * b->K * ctx->world + b->E - 1) / b->E;
    b->cap = (int)((2 * mean + 16 + 15) / 16 * 16);
    if (b->cap > b->slots) b->cap = b->slots;
    b->ll_recv.tokens = layer_buf(b, sz.tokens_bytes);
    b->ll_recv.src = layer_buf(b, sz.src_bytes);
    b->ll_recv.expert_counts = layer_buf(b, sz.expert_counts_bytes);
    b->ll_recv.rank_counts = layer_buf(b, sz.rank_counts_bytes);
    b->ll_mid = layer_buf(b, (size_t)b->L * b->slots * b->F * 2);
    b->ll_y = layer_buf(b, sz.expert_out_bytes);
    rc = !b->ll_recv.tokens || !b->ll_recv.src || !b->ll_recv.expert_counts || !b->ll_recv.rank_counts || !b->ll_mid ||
         !b->ll_y;
  }
  sy_graph_cache_config_t gc = SY_GRAPH_CACHE_CONFIG_INIT;
  gc.buckets = &b->T, gc.num_buckets = 1;
  rc = rc || sy_graph_cache_create(ctx->comm, &gc, graph_step, b, &b->cache) != SY_SUCCESS;
  bench_print(ctx,
              "# layer decode: %d tokens a rank, low-latency mode, BF16 wire, %d slots an expert (%d experts a "
              "rank), the GEMMs over the first %d\n",
              b->T, b->slots, b->L, b->cap);
  static const layer_way_t ways[] = {{"comm", op_comm, 0}, {"compute", op_compute, 0}, {"a", op_a, 1}, {"c", op_c, 1}};
  double us[4] = {0}, enq[4] = {0};
  if (!rc) rc = layer_run_ways(b, "decode", ways, 4, us, enq) < 0;
  if (!rc) {
    const long long over = bench_allreduce_max(ctx, over_capacity(b));
    if (over) bench_print(ctx, "# layer decode: %lld experts over the capacity of %d rows: WRONG\n", over, b->cap);
    ctx->total_wrong += over != 0;
  }
  if (!rc && b->gpu)
    bench_print(ctx,
                "# target (world 1, 128 tokens): a decode step replayed from the graph cache <= 5 us of host "
                "time: %.2f us at %d tokens: %s\n",
                enq[3], b->T, enq[3] <= 5 ? "met" : "NOT met");
  void *p[] = {b->ll_recv.tokens, b->ll_recv.src, b->ll_recv.expert_counts, b->ll_recv.rank_counts, b->ll_mid, b->ll_y};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) layer_unbuf(b, p[i]);
  if (b->cache) sy_graph_cache_destroy(b->cache);
  b->cache = NULL;
  if (b->ll) sy_moe_destroy(b->ll);
  b->ll = NULL;
  return rc;
}
