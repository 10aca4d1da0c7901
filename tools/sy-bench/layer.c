/*
 * layer.c — sy-bench entry `layer` (issue 21, first version): one MoE layer's forward step at prefill shapes over
 * the high-throughput mode: layout, dispatch (BF16, worst-case masked layout: each local expert's rows at e x S),
 * the expert FFN — y = relu(x W1) W2, two strided-batched GEMMs through cublasLt (ReLU the first one's epilogue),
 * bf16 in and out, fp32 accumulation; one W1 [H][F] and one W2 [F][H] shared by every expert (the FLOPs of every
 * expert, the weights' bytes of one) — and the weighted combine. Three ways:
 *   a  sequential, eager, one stream;
 *   b  two micro-batches of T/2 tokens: the communication on the bench's stream, the GEMMs on a second stream,
 *      joined by events, so that one micro-batch's dispatch and combine run beside the other's GEMMs
 *      (L0 D0 | L1 D1 beside F0 | C0 beside F1 | C1);
 *   c  (b) captured once in sy_graph_cache and replayed (with programmatic dependent launch unless SY_PDL=0).
 * Beside them, alone: the communication (layout, dispatch, combine) and the GEMMs. Reports step time, host
 * enqueue time, the SMs the communication held (num_sms) and the overlap efficiency
 * (t_comm + t_compute - t_step) / min(t_comm, t_compute). Checked: sampled tokens of mode (a)'s and (c)'s output
 * against a CPU reference of the layer (double accumulation, the GEMMs' outputs rounded to bf16 as the GPU's are)
 * within a relative bf16 tolerance. Host backend: small shapes, the GEMMs as C loops (a smoke test in CI).
 */
#include <cublasLt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ref/convert.h"
#include "workload.h"

#define LAYER_TOL 0.03 /* |got - want| <= LAYER_TOL x (|want| + mean |want|) */

typedef struct mb { /* one micro-batch */
  int T, first;     /* tokens, its first token in the step */
  void *handle;     /* the layout's */
  sy_moe_ht_recv_t recv;
  uint16_t *mid, *y; /* [L S][F], [L S][H] */
} mb_t;

typedef struct layer_bench {
  bench_ctx_t *ctx;
  sy_moe_ht_t moe;
  int gpu, H, F, E, K, L, S, T, sms;
  uint16_t *x, *w1, *w2, *out; /* [T][H], [H][F], [F][H], [T][H] */
  int32_t *ids;                /* [T][K] */
  float *weights;              /* [T][K] */
  mb_t mb[3];                  /* 0: the whole step (a); 1, 2: the halves (b, c) */
  cudaStream_t compute;
  cudaEvent_t ev[4];
  cublasLtHandle_t lt;
  void *lt_work;
  size_t lt_work_bytes;
  sy_graph_cache_t cache;
} layer_bench_t;

static void *buf(layer_bench_t *b, size_t n) {
  void *p = NULL;
  if (b->gpu) return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
  return calloc(1, n);
}

static void unbuf(layer_bench_t *b, void *p) {
  if (!p) return;
  if (b->gpu) cudaFree(p);
  else free(p);
}

static int put(layer_bench_t *b, void *dst, const void *src, size_t n) {
  if (!b->gpu) return memcpy(dst, src, n), 0;
  return cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice) != cudaSuccess;
}

static int get(layer_bench_t *b, void *dst, const void *src, size_t n) {
  if (!b->gpu) return memcpy(dst, src, n), 0;
  return cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost) != cudaSuccess;
}

/* ---- the GEMMs ---------------------------------------------------------------------------------------------- */

/* Row-major C[e] (rows x n) = op(A[e] (rows x k) B (k x n)) for e < batch, A strided by rows x k, C by rows x n,
 * B shared; relu on the output with `relu`. cublasLt sees the column-major transposes: C^T = B^T A^T. */
static int gemm_gpu(layer_bench_t *b, const uint16_t *A, const uint16_t *B, uint16_t *C, int rows, int k, int n,
                    int batch, int relu, cudaStream_t stream) {
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  int rc = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS;
  const cublasLtEpilogue_t epi = relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;
  if (!rc) rc = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) != 0;
  /* "A" of cublasLt: B^T (n x k, ld n, shared); "B": A^T (k x rows, ld k, strided); "C": C^T (n x rows, ld n) */
  const int64_t sa = 0, sb = (int64_t)rows * k, sc = (int64_t)rows * n;
  if (!rc) rc = cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, k, n) != 0;
  if (!rc) rc = cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, rows, k) != 0;
  if (!rc) rc = cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, rows, n) != 0;
  cublasLtMatrixLayout_t ls[3] = {la, lb, lc};
  const int64_t strides[3] = {sa, sb, sc};
  for (int i = 0; i < 3 && !rc; i++) {
    rc |= cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch) != 0;
    rc |= cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                           sizeof strides[i]) != 0;
  }
  const float one = 1.0f, zero = 0.0f;
  if (!rc)
    rc = cublasLtMatmul(b->lt, op, &one, B, la, A, lb, &zero, C, lc, C, lc, NULL, b->lt_work, b->lt_work_bytes,
                        stream) != CUBLAS_STATUS_SUCCESS;
  if (lc) cublasLtMatrixLayoutDestroy(lc);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
  return rc;
}

/* The host backend's: the same product in double, rounded to bf16 once (relu after the rounding: the same). */
static void gemm_host(const uint16_t *A, const uint16_t *B, uint16_t *C, int rows, int k, int n, int batch, int relu) {
  for (int e = 0; e < batch; e++)
    for (int r = 0; r < rows; r++) {
      const uint16_t *a = A + ((size_t)e * rows + r) * k;
      uint16_t *c = C + ((size_t)e * rows + r) * n;
      for (int j = 0; j < n; j++) {
        double s = 0;
        for (int i = 0; i < k; i++) s += (double)sy__bf16_to_float(a[i]) * sy__bf16_to_float(B[(size_t)i * n + j]);
        const float v = (float)s;
        c[j] = sy__float_to_bf16(relu && v < 0 ? 0.0f : v);
      }
    }
}

static int ffn(layer_bench_t *b, mb_t *m, cudaStream_t stream) {
  const int rows = b->S;
  if (!b->gpu) {
    gemm_host(m->recv.tokens, b->w1, m->mid, rows, b->H, b->F, b->L, 1);
    gemm_host(m->mid, b->w2, m->y, rows, b->F, b->H, b->L, 0);
    return 0;
  }
  return gemm_gpu(b, m->recv.tokens, b->w1, m->mid, rows, b->H, b->F, b->L, 1, stream) ||
         gemm_gpu(b, m->mid, b->w2, m->y, rows, b->F, b->H, b->L, 0, stream);
}

/* ---- the communication -------------------------------------------------------------------------------------- */

static int layout(layer_bench_t *b, mb_t *m, cudaStream_t s) {
  return sy_moe_ht_layout(b->moe, b->ids + (size_t)m->first * b->K, SY_INDEX_INT32, m->T, m->handle, NULL, s) != 0;
}

static int dispatch(layer_bench_t *b, mb_t *m, cudaStream_t s) {
  return sy_moe_ht_dispatch(b->moe, m->handle, m->T, b->x + (size_t)m->first * b->H, NULL,
                            b->weights + (size_t)m->first * b->K, &m->recv, s) != 0;
}

static int combine(layer_bench_t *b, mb_t *m, cudaStream_t s) {
  return sy_moe_ht_combine(b->moe, m->handle, m->T, m->y, &m->recv, m->recv.weights, NULL,
                           b->out + (size_t)m->first * b->H, NULL, s) != 0;
}

/* ---- the ways to run it ------------------------------------------------------------------------------------- */

static int op_a(bench_ctx_t *ctx, void *arg) {
  layer_bench_t *b = arg;
  mb_t *m = &b->mb[0];
  return layout(b, m, ctx->stream) || dispatch(b, m, ctx->stream) || ffn(b, m, ctx->stream) ||
         combine(b, m, ctx->stream);
}

static int op_comm(bench_ctx_t *ctx, void *arg) {
  layer_bench_t *b = arg;
  mb_t *m = &b->mb[0];
  return layout(b, m, ctx->stream) || dispatch(b, m, ctx->stream) || combine(b, m, ctx->stream);
}

static int op_compute(bench_ctx_t *ctx, void *arg) {
  layer_bench_t *b = arg;
  return ffn(b, &b->mb[0], ctx->stream);
}

/* Two micro-batches: communication on `sc` (in order: L1 D1 L2 D2 C1 C2), GEMMs on the second stream. */
static int step_b(layer_bench_t *b, cudaStream_t sc) {
  mb_t *m1 = &b->mb[1], *m2 = &b->mb[2];
  if (!b->gpu)
    return layout(b, m1, sc) || dispatch(b, m1, sc) || layout(b, m2, sc) || dispatch(b, m2, sc) || ffn(b, m1, sc) ||
           ffn(b, m2, sc) || combine(b, m1, sc) || combine(b, m2, sc);
  cudaStream_t sg = b->compute;
  int rc = layout(b, m1, sc) || dispatch(b, m1, sc);
  rc = rc || cudaEventRecord(b->ev[0], sc) != cudaSuccess;
  rc = rc || layout(b, m2, sc) || dispatch(b, m2, sc);
  rc = rc || cudaEventRecord(b->ev[1], sc) != cudaSuccess;
  rc = rc || cudaStreamWaitEvent(sg, b->ev[0], 0) != cudaSuccess || ffn(b, m1, sg);
  rc = rc || cudaEventRecord(b->ev[2], sg) != cudaSuccess;
  rc = rc || cudaStreamWaitEvent(sg, b->ev[1], 0) != cudaSuccess || ffn(b, m2, sg);
  rc = rc || cudaEventRecord(b->ev[3], sg) != cudaSuccess;
  rc = rc || cudaStreamWaitEvent(sc, b->ev[2], 0) != cudaSuccess || combine(b, m1, sc);
  rc = rc || cudaStreamWaitEvent(sc, b->ev[3], 0) != cudaSuccess || combine(b, m2, sc);
  return rc;
}

static int op_b(bench_ctx_t *ctx, void *arg) { return step_b(arg, ctx->stream); }

static sy_status_t graph_step(void *user, int bucket, cudaStream_t stream) {
  (void)bucket;
  return step_b(user, stream) ? SY_ERR_INTERNAL : SY_SUCCESS;
}

static int op_c(bench_ctx_t *ctx, void *arg) {
  layer_bench_t *b = arg;
  return sy_graph_cache_run(b->cache, b->T, ctx->stream) != SY_SUCCESS;
}

/* ---- the check ---------------------------------------------------------------------------------------------- */

/* The layer for token t on the host: sum_k w_k y_k, y_k = bf16(bf16(relu(x W1)) W2) (every expert's weights
 * are the same), in double. */
static void reference(const layer_bench_t *b, const uint16_t *x, const int32_t *ids, const float *w, double *out,
                      float *mid, float *y) {
  for (int h = 0; h < b->H; h++) out[h] = 0;
  int any = 0;
  for (int k = 0; k < b->K; k++) any |= ids[k] >= 0;
  if (!any) return;
  for (int j = 0; j < b->F; j++) {
    double s = 0;
    for (int i = 0; i < b->H; i++)
      s += (double)sy__bf16_to_float(x[i]) * sy__bf16_to_float(b->w1[(size_t)i * b->F + j]);
    mid[j] = sy__bf16_to_float(sy__float_to_bf16(s < 0 ? 0.0f : (float)s));
  }
  for (int h = 0; h < b->H; h++) {
    double s = 0;
    for (int j = 0; j < b->F; j++) s += (double)mid[j] * sy__bf16_to_float(b->w2[(size_t)j * b->H + h]);
    y[h] = sy__bf16_to_float(sy__float_to_bf16((float)s));
  }
  for (int k = 0; k < b->K; k++)
    if (ids[k] >= 0)
      for (int h = 0; h < b->H; h++) out[h] += (double)w[k] * y[h];
}

/* Sampled tokens of the output against the reference: the wrong elements. */
static long long check(layer_bench_t *b, const uint16_t *x_h, const int32_t *ids_h, const float *w_h, int samples) {
  uint16_t *got = malloc((size_t)b->H * 2);
  double *want = malloc((size_t)b->H * sizeof *want);
  float *mid = malloc((size_t)b->F * 4), *y = malloc((size_t)b->H * 4);
  long long wrong = 0;
  for (int i = 0; i < samples && got && want && mid && y && wrong >= 0; i++) {
    const int t = (int)(((long long)i * 2654435761u) % b->T);
    if (get(b, got, b->out + (size_t)t * b->H, (size_t)b->H * 2)) {
      wrong = -1;
      break;
    }
    reference(b, x_h + (size_t)t * b->H, ids_h + (size_t)t * b->K, w_h + (size_t)t * b->K, want, mid, y);
    double mean = 0;
    for (int h = 0; h < b->H; h++) mean += fabs(want[h]) / b->H;
    for (int h = 0; h < b->H; h++)
      wrong += fabs(sy__bf16_to_float(got[h]) - want[h]) > LAYER_TOL * (fabs(want[h]) + mean);
  }
  free(got), free(want), free(mid), free(y);
  return wrong;
}

/* ---- set-up --------------------------------------------------------------------------------------------------- */

static int setup_mb(layer_bench_t *b, mb_t *m, int T, int first, size_t handle_bytes) {
  const size_t rows = (size_t)b->L * b->S;
  m->T = T, m->first = first;
  m->handle = buf(b, handle_bytes);
  m->recv = (sy_moe_ht_recv_t){0};
  m->recv.tokens = buf(b, rows * b->H * 2);
  m->recv.src = buf(b, rows * 8);
  m->recv.weights = buf(b, rows * 4);
  m->recv.expert_offsets = buf(b, ((size_t)b->L + 1) * 4);
  m->recv.expert_counts = buf(b, (size_t)b->L * 4);
  m->recv.rows = (int)rows;
  m->recv.expert_stride = b->S;
  m->mid = buf(b, rows * b->F * 2);
  m->y = buf(b, rows * b->H * 2);
  return !m->handle || !m->recv.tokens || !m->recv.src || !m->recv.weights || !m->recv.expert_offsets ||
         !m->recv.expert_counts || !m->mid || !m->y;
}

static void free_mb(layer_bench_t *b, mb_t *m) {
  void *p[] = {
      m->handle, m->recv.tokens, m->recv.src, m->recv.weights, m->recv.expert_offsets, m->recv.expert_counts, m->mid,
      m->y};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) unbuf(b, p[i]);
}

/* Weights: bf16 of a small uniform value, seeded the same on every rank (every expert shares them). */
static void fill_weights(uint16_t *w, size_t n, uint32_t seed, float scale) {
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    w[i] = sy__float_to_bf16(scale * ((float)(s >> 8) / 16777216.0f - 0.5f));
  }
}

static int setup(layer_bench_t *b, uint16_t **x_h, int32_t **ids_h, float **w_h) {
  bench_ctx_t *ctx = b->ctx;
  sy_moe_ht_config_t cfg = SY_MOE_HT_CONFIG_INIT;
  cfg.max_tokens = b->T, cfg.hidden = b->H, cfg.top_k = b->K, cfg.num_experts = b->E;
  cfg.wire = SY_MOE_WIRE_BF16, cfg.expert_alignment = 16, cfg.num_sms = b->sms;
  if (sy_moe_ht_create(ctx->comm, &cfg, &b->moe) != SY_SUCCESS) return 1;
  sy_moe_ht_sizes_t sizes = SY_MOE_HT_SIZES_INIT;
  if (sy_moe_ht_sizes(b->moe, &sizes) != SY_SUCCESS) return 1;
  b->L = sizes.local_experts;
  /* a worst-case stride: 1.5 x the mean rows of an expert, to the alignment (uniform routing stays under it) */
  const long long mean = ((long long)b->T * b->K * ctx->world + b->E - 1) / b->E;
  b->S = (int)((mean * 3 / 2 + 15) / 16 * 16);
  *x_h = malloc((size_t)b->T * b->H * 2);
  *ids_h = malloc((size_t)b->T * b->K * 4);
  *w_h = malloc((size_t)b->T * b->K * 4);
  uint16_t *w1 = malloc((size_t)b->H * b->F * 2), *w2 = malloc((size_t)b->F * b->H * 2);
  if (!*x_h || !*ids_h || !*w_h || !w1 || !w2) return 1;
  wl_moe_uniform_routing(ctx->rank, b->T, b->E, b->K, *ids_h, *w_h);
  wl_moe_uniform_tokens(ctx->rank, b->T, b->H, *x_h);
  fill_weights(w1, (size_t)b->H * b->F, 1, 2.0f / sqrtf((float)b->H));
  fill_weights(w2, (size_t)b->F * b->H, 2, 2.0f / sqrtf((float)b->F));
  b->x = buf(b, (size_t)b->T * b->H * 2), b->out = buf(b, (size_t)b->T * b->H * 2);
  b->ids = buf(b, (size_t)b->T * b->K * 4), b->weights = buf(b, (size_t)b->T * b->K * 4);
  b->w1 = buf(b, (size_t)b->H * b->F * 2), b->w2 = buf(b, (size_t)b->F * b->H * 2);
  int rc = !b->x || !b->out || !b->ids || !b->weights || !b->w1 || !b->w2;
  rc = rc || put(b, b->x, *x_h, (size_t)b->T * b->H * 2) || put(b, b->ids, *ids_h, (size_t)b->T * b->K * 4) ||
       put(b, b->weights, *w_h, (size_t)b->T * b->K * 4) || put(b, b->w1, w1, (size_t)b->H * b->F * 2) ||
       put(b, b->w2, w2, (size_t)b->F * b->H * 2);
  if (!b->gpu) { /* the host's GEMMs read the weights where the check does */
    memcpy(b->w1, w1, (size_t)b->H * b->F * 2), memcpy(b->w2, w2, (size_t)b->F * b->H * 2);
  }
  free(w1), free(w2);
  const int half = b->T / 2;
  rc = rc || setup_mb(b, &b->mb[0], b->T, 0, sizes.handle_bytes) ||
       setup_mb(b, &b->mb[1], half, 0, sizes.handle_bytes) ||
       setup_mb(b, &b->mb[2], b->T - half, half, sizes.handle_bytes);
  if (rc || !b->gpu) return rc;
  rc = cudaStreamCreateWithFlags(&b->compute, cudaStreamNonBlocking) != cudaSuccess;
  for (int i = 0; i < 4 && !rc; i++) rc = cudaEventCreateWithFlags(&b->ev[i], cudaEventDisableTiming) != cudaSuccess;
  b->lt_work_bytes = 32u << 20;
  rc = rc || cublasLtCreate(&b->lt) != CUBLAS_STATUS_SUCCESS || cudaMalloc(&b->lt_work, b->lt_work_bytes) != 0;
  return rc;
}

static void teardown(layer_bench_t *b) {
  if (b->cache) sy_graph_cache_destroy(b->cache);
  for (int i = 0; i < 3; i++) free_mb(b, &b->mb[i]);
  void *p[] = {b->x, b->out, b->ids, b->weights, b->w1, b->w2};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) unbuf(b, p[i]);
  if (b->gpu) {
    for (int i = 0; i < 4; i++)
      if (b->ev[i]) cudaEventDestroy(b->ev[i]);
    if (b->compute) cudaStreamDestroy(b->compute);
    if (b->lt) cublasLtDestroy(b->lt);
    if (b->lt_work) cudaFree(b->lt_work);
  }
  if (b->moe) sy_moe_ht_destroy(b->moe);
}

/* ---- the entry ------------------------------------------------------------------------------------------------ */

/* Median host time of enqueuing op (the stream drained after each, outside the timing). */
static double enqueue_us(bench_ctx_t *ctx, bench_op_fn op, void *arg) {
  const int n = ctx->opts->iters;
  double *t = calloc((size_t)n, sizeof *t);
  if (!t) return -1;
  for (int i = 0; i < n; i++) {
    const double t0 = bench_now_s();
    if (op(ctx, arg)) return free(t), -1;
    t[i] = (bench_now_s() - t0) * 1e6;
    if (ctx->backend == SY_BACKEND_CUDA) cudaStreamSynchronize(ctx->stream);
  }
  const double m = bench_median(t, n);
  free(t);
  return m;
}

int bench_layer(bench_ctx_t *ctx) {
  layer_bench_t b = {0};
  b.ctx = ctx;
  b.gpu = ctx->backend == SY_BACKEND_CUDA;
  b.H = b.gpu ? 7168 : 256, b.F = b.gpu ? 2048 : 128, b.K = b.gpu ? 8 : 4;
  b.E = b.gpu ? 256 : 8 * ctx->world;
  if (b.E % ctx->world) b.E = (b.E / ctx->world + 1) * ctx->world;
  b.T = ctx->opts->num_token_list ? (int)ctx->opts->token_list[0] : b.gpu ? 4096 : 64;
  b.sms = ctx->opts->num_sms ? ctx->opts->num_sms : 16;
  uint16_t *x_h = NULL;
  int32_t *ids_h = NULL;
  float *w_h = NULL;
  int rc = setup(&b, &x_h, &ids_h, &w_h);
  sy_graph_cache_config_t gc = SY_GRAPH_CACHE_CONFIG_INIT;
  const int bucket = b.T;
  gc.buckets = &bucket, gc.num_buckets = 1;
  rc = rc || sy_graph_cache_create(ctx->comm, &gc, graph_step, &b, &b.cache) != SY_SUCCESS;
  if (rc) bench_print(ctx, "# layer: set-up failed (rank %d)\n", ctx->rank);
  bench_print(ctx,
              "# layer: forward, %d tokens a rank, hidden %d, ffn %d, top-%d of %d experts (%d a rank), BF16, "
              "worst-case masked layout (stride %d rows an expert), communication SMs %d; GEMMs: %s, "
              "one W1 [%d][%d] and W2 [%d][%d] for every expert\n",
              b.T, b.H, b.F, b.K, b.E, b.L, b.S, b.sms, b.gpu ? "cublasLt" : "C loops (host backend)", b.H, b.F, b.F,
              b.H);
  bench_print(ctx,
              "# ways: a = sequential; b = two micro-batches on two streams; c = (b) replayed from the "
              "graph cache (PDL %s)\n",
              getenv("SY_PDL") && !strcmp(getenv("SY_PDL"), "0") ? "off" : "on");
  struct {
    const char *name;
    bench_op_fn op;
    int check;
  } ways[] = {{"comm", op_comm, 0}, {"compute", op_compute, 0}, {"a", op_a, 1}, {"b", op_b, 1}, {"c", op_c, 1}};
  bench_timing_t t[5];
  double enq[5];
  long long wrong = 0;
  for (int i = 0; i < 5 && !rc; i++) {
    memset(&t[i], 0, sizeof t[i]);
    rc = bench_time(ctx, ways[i].op, &b, &t[i]);
    enq[i] = rc ? -1 : enqueue_us(ctx, ways[i].op, &b);
    if (!rc && ways[i].check && ctx->opts->check) {
      if (b.gpu) rc = cudaStreamSynchronize(ctx->stream) != cudaSuccess;
      const long long w = rc ? -1 : check(&b, x_h, ids_h, w_h, b.gpu ? 4 : 16);
      if (w)
        bench_print(ctx, "# layer: way %s: %lld elements off the reference (rank %d)\n", ways[i].name, w, ctx->rank);
      wrong += w ? 1 : 0;
    }
  }
  double us[5];
  for (int i = 0; i < 5; i++) us[i] = rc ? 0 : bench_allreduce_max_d(ctx, t[i].time_us);
  wrong = bench_allreduce_max(ctx, wrong);
  ctx->total_wrong += wrong;
  bench_print(ctx, "#  way      step_us   enqueue_us   overlap\n");
  for (int i = 0; i < 5 && !rc; i++) {
    const double tc = us[0], tg = us[1];
    const double lo = tc < tg ? tc : tg;
    const double eff = i >= 2 && lo > 0 ? (tc + tg - us[i]) / lo : NAN;
    bench_print(ctx, "   %-8s %9.2f %12.2f %9.2f\n", ways[i].name, us[i], enq[i], eff);
    bench_json(ctx,
               "{\"entry\": \"layer\", \"way\": \"%s\", \"tokens\": %d, \"step_us\": %.3f, "
               "\"enqueue_us\": %.3f, \"overlap\": %.4f, \"sms\": %d, \"wrong\": %lld}",
               ways[i].name, b.T, us[i], enq[i], isnan(eff) ? -1.0 : eff, b.sms, wrong);
  }
  if (!rc && b.gpu)
    bench_print(ctx, "# target (world 1, %d tokens): way b hides >= 70%% of the communication: overlap %.2f: %s\n", b.T,
                (us[0] + us[1] - us[3]) / (us[0] < us[1] ? us[0] : us[1]),
                (us[0] + us[1] - us[3]) / (us[0] < us[1] ? us[0] : us[1]) >= 0.7 ? "met" : "NOT met");
  teardown(&b);
  free(x_h), free(ids_h), free(w_h);
  return rc;
}

/* The high-throughput MoE's rings are bounded by the configuration (as for moe-ht): SY_HEAP_SIZE's default. */
size_t bench_layer_heap(const bench_opts_t *opts) {
  (void)opts;
  return 0;
}
