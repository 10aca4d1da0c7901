/*
 * layer_ll.c — sy-bench `layer` at decode shapes (at most 256 tokens a rank) over the low-latency mode: dispatch
 * (BF16 wire, de-duplicated) into each local expert's slots, the FFN over the first `cap` slots of every expert (a
 * capacity: the routing's busiest expert, to 16 (layer_max_rows); the dispatch fills an expert's slots from the
 * first, and an expert with more rows than cap is reported as wrong), the weighted combine. The low-latency halves
 * alternate dispatch and combine on one object, so each micro-batch has an object of its own. Ways: a (sequential),
 * b (the micro-batches: the communication on the bench's stream, the GEMMs on a second one, joined by events), c (b
 * replayed from the graph cache: the host-time target for decode), with the communication and the GEMMs
 * alone beside them.
 */
#include <stdlib.h>
#include <string.h>

#include "layer.h"

typedef struct llmb llmb_t;

static int ll_dispatch(layer_bench_t *b, llmb_t *m, cudaStream_t s) {
  return sy_moe_dispatch(m->moe, b->x + (size_t)m->first * b->H, m->T, b->ids + (size_t)m->first * b->K, SY_INDEX_INT32,
                         b->weights + (size_t)m->first * b->K, &m->recv, s) != SY_SUCCESS;
}

static int ll_ffn(layer_bench_t *b, llmb_t *m, int part, cudaStream_t s) {
  int e0, experts;
  layer_gemm_experts(b, part, &e0, &experts);
  return layer_ffn(b, m->recv.tokens, m->mid, m->y, m->cap, m->slots, e0, experts, 0, s);
}

static int ll_combine(layer_bench_t *b, llmb_t *m, cudaStream_t s) {
  return sy_moe_combine(m->moe, m->y, b->ids + (size_t)m->first * b->K, SY_INDEX_INT32,
                        b->weights + (size_t)m->first * b->K, m->T, b->out + (size_t)m->first * b->H, s) != SY_SUCCESS;
}

/* The parts of its step (layer_run_shape makes the ways of them). */
static int part_d(layer_bench_t *b, int m, cudaStream_t s) { return ll_dispatch(b, &b->ll[m], s); }
static int part_ffn(layer_bench_t *b, int m, int part, cudaStream_t s) { return ll_ffn(b, &b->ll[m], part, s); }
static int part_c(layer_bench_t *b, int m, cudaStream_t s) { return ll_combine(b, &b->ll[m], s); }

/* Experts of the micro-batches whose rows exceed the capacity (their rows past cap were never computed). */
static long long over_capacity(layer_bench_t *b) {
  int32_t *counts = malloc((size_t)b->L * 4);
  long long over = counts ? 0 : -1;
  if (b->gpu && cudaStreamSynchronize(b->ctx->stream) != cudaSuccess) over = -1;
  for (int i = 0; i <= b->nmb && over >= 0; i++) {
    if (!b->ll[i].moe || b->ll[i].T == 0) continue;
    if (layer_get(b, counts, b->ll[i].recv.expert_counts, (size_t)b->L * 4)) over = -1;
    for (int e = 0; e < b->L && over >= 0; e++) over += counts[e] > b->ll[i].cap;
  }
  free(counts);
  return over;
}

static int setup_llmb(layer_bench_t *b, llmb_t *m, int index) {
  bench_ctx_t *ctx = b->ctx;
  int T, first;
  layer_split(b, index, &T, &first);
  sy_moe_config_t cfg = SY_MOE_CONFIG_INIT;
  cfg.max_tokens = T > 0 ? T : 1, cfg.hidden = b->H, cfg.top_k = b->K, cfg.num_experts = b->E;
  cfg.wire = SY_MOE_WIRE_BF16;
  sy_moe_recv_sizes_t sz = SY_MOE_RECV_SIZES_INIT;
  m->T = T, m->first = first;
  if (sy_moe_create(ctx->comm, &cfg, &m->moe) != SY_SUCCESS || sy_moe_recv_sizes(m->moe, &sz) != SY_SUCCESS) return 1;
  if (sz.local_experts != b->L) return 1; /* the weights were made for E / world experts a rank */
  m->slots = sz.slots;
  m->cap = layer_max_rows(b, first, T);
  if (m->cap < 0) return 1;
  if (m->cap > m->slots) m->cap = m->slots;
  m->recv.tokens = layer_buf(b, sz.tokens_bytes);
  m->recv.src = layer_buf(b, sz.src_bytes);
  m->recv.expert_counts = layer_buf(b, sz.expert_counts_bytes);
  m->recv.rank_counts = layer_buf(b, sz.rank_counts_bytes);
  m->mid = layer_buf(b, (size_t)b->L * m->slots * b->F * 2);
  m->y = layer_buf(b, sz.expert_out_bytes);
  return !m->recv.tokens || !m->recv.src || !m->recv.expert_counts || !m->recv.rank_counts || !m->mid || !m->y;
}

static void free_llmb(layer_bench_t *b, llmb_t *m) {
  void *p[] = {m->recv.tokens, m->recv.src, m->recv.expert_counts, m->recv.rank_counts, m->mid, m->y};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) layer_unbuf(b, p[i]);
  if (m->moe) sy_moe_destroy(m->moe);
  memset(m, 0, sizeof *m);
}

int layer_decode(layer_bench_t *b) {
  bench_ctx_t *ctx = b->ctx;
  int rc = 0;
  for (int m = 0; m <= b->nmb && !rc; m++) rc = setup_llmb(b, &b->ll[m], m);
  bench_print(ctx,
              "# layer decode: %d tokens a rank, low-latency mode, BF16 wire, %d slots an expert (%d experts a "
              "rank), the GEMMs over the first %d (the routing's busiest expert, to 16; micro-batch 1 of %d: %d)\n",
              b->T, b->ll[0].slots, b->L, b->ll[0].cap, b->nmb, b->ll[1].cap);
  static const layer_parts_t parts = {"decode", part_d, part_ffn, part_c, 1};
  double us[LAYER_WAYS] = {0}, enq[LAYER_WAYS] = {0};
  if (!rc) rc = layer_run_shape(b, &parts, us, enq) < 0;
  if (!rc) {
    const long long over = bench_allreduce_max(ctx, over_capacity(b));
    if (over) bench_print(ctx, "# layer decode: %lld experts over their capacity: WRONG\n", over);
    ctx->total_wrong += over != 0;
  }
  if (!rc && b->gpu && us[WAY_C] > 0) /* (--ways may leave c out) */
    bench_print(ctx,
                "# target (world 1, 128 tokens): a decode step replayed from the graph cache <= 5 us of host "
                "time: %.2f us at %d tokens: %s\n",
                enq[WAY_C], b->T, enq[WAY_C] <= 5 ? "met" : "NOT met");
  for (int i = 0; i <= b->nmb; i++) free_llmb(b, &b->ll[i]);
  return rc;
}
