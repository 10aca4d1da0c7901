/*
 * layer_ffn.c — sy-bench `layer`'s shared part (layer.h): the experts' FFN y = relu(x W1_e) W2_e as two
 * strided-batched cublasLt GEMMs (ReLU the first one's epilogue; bf16 in and out, fp32 accumulation; each expert's
 * own weights, or one pair for all with --expert-weights shared) or, on the host backend, C loops; the inputs and
 * weights; the CPU reference of the layer and the check of sampled tokens; and the table of ways every shape prints.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "layer.h"
#include "layer_weights.h"
#include "ref/convert.h"
#include "workload.h"

void *layer_buf(layer_bench_t *b, size_t n) {
  void *p = NULL;
  if (b->gpu) { /* zeroed too: a way may read a buffer no way timed has written (--ways: layer_ll.c's counts) */
    if (cudaMalloc(&p, n) != cudaSuccess) return NULL;
    if (cudaMemset(p, 0, n) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) return cudaFree(p), NULL;
    return p;
  }
  return calloc(1, n);
}

void layer_unbuf(layer_bench_t *b, void *p) {
  if (!p) return;
  if (b->gpu) cudaFree(p);
  else free(p);
}

int layer_put(layer_bench_t *b, void *dst, const void *src, size_t n) {
  if (!b->gpu) return memcpy(dst, src, n), 0;
  return cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice) != cudaSuccess;
}

int layer_get(layer_bench_t *b, void *dst, const void *src, size_t n) {
  if (!b->gpu) return memcpy(dst, src, n), 0;
  return cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost) != cudaSuccess;
}

/* ---- the GEMMs ---------------------------------------------------------------------------------------------- */

/* Row-major C[e] (rows x n) = A[e] (rows x k) M[e], e < batch, A[e] and C[e] at e x stride rows; M[e]: B[e] (k x n,
 * row-major; B[e] at e x k x n elements, or B[0] for every e with shared weights), or with trans_b B[e]^T of the
 * row-major n x k B[e]; relu on the output with `relu`. cublasLt sees the
 * column-major transposes: C^T = M^T A^T, M^T being B stored n x k column-major (ld n), or (trans_b) B stored
 * k x n column-major (ld k) and transposed. */
static int gemm_gpu(layer_bench_t *b, const uint16_t *A, const uint16_t *B, uint16_t *C, int rows, int stride, int k,
                    int n, int batch, int trans_b, int relu, int sms, cudaStream_t stream) {
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t ls[3] = {NULL, NULL, NULL};
  int rc = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS;
  const cublasLtEpilogue_t epi = relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;
  const cublasOperation_t ta = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (!rc) rc = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) != 0;
  if (!rc) rc = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) != 0;
  const int32_t target = sms;
  if (!rc && sms > 0)
    rc = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &target, sizeof target) != 0;
  const uint64_t a_rows = trans_b ? (uint64_t)k : (uint64_t)n, a_cols = trans_b ? (uint64_t)n : (uint64_t)k;
  const uint64_t dims[3][3] = {{a_rows, a_cols, a_rows}, {k, rows, k}, {n, rows, n}};
  const int64_t strides[3] = {b->shared ? 0 : (int64_t)k * n, (int64_t)stride * k, (int64_t)stride * n};
  for (int i = 0; i < 3 && !rc; i++) {
    rc = cublasLtMatrixLayoutCreate(&ls[i], CUDA_R_16BF, dims[i][0], dims[i][1], (int64_t)dims[i][2]) != 0;
    rc = rc || cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch) != 0;
    rc = rc || cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                                sizeof strides[i]) != 0;
  }
  const float one = 1.0f, zero = 0.0f;
  if (!rc)
    rc = cublasLtMatmul(b->lt, op, &one, B, ls[0], A, ls[1], &zero, C, ls[2], C, ls[2], NULL, b->lt_work,
                        b->lt_work_bytes, stream) != CUBLAS_STATUS_SUCCESS;
  for (int i = 0; i < 3; i++)
    if (ls[i]) cublasLtMatrixLayoutDestroy(ls[i]);
  if (op) cublasLtMatmulDescDestroy(op);
  return rc;
}

/* The host backend's: the same product in double, rounded to bf16 once (relu before or after the rounding: the
 * same). */
static void gemm_host(const uint16_t *A, const uint16_t *B0, uint16_t *C, int rows, int stride, int k, int n, int batch,
                      int trans_b, int relu, int shared) {
  for (int e = 0; e < batch; e++)
    for (int r = 0; r < rows; r++) {
      const uint16_t *B = B0 + (shared ? 0 : (size_t)e * k * n);
      const uint16_t *a = A + ((size_t)e * stride + r) * k;
      uint16_t *c = C + ((size_t)e * stride + r) * n;
      for (int j = 0; j < n; j++) {
        double s = 0;
        for (int i = 0; i < k; i++)
          s += (double)sy__bf16_to_float(a[i]) * sy__bf16_to_float(B[trans_b ? (size_t)j * k + i : (size_t)i * n + j]);
        const float v = (float)s;
        c[j] = sy__float_to_bf16(relu && v < 0 ? 0.0f : v);
      }
    }
}

int layer_ffn(layer_bench_t *b, const uint16_t *in, uint16_t *mid, uint16_t *y, int rows, int stride, int e0,
              int experts, int sms, cudaStream_t stream) {
  if (experts < 1) return 0;
  const size_t r0 = (size_t)e0 * stride, w0 = b->shared ? 0 : (size_t)e0 * b->H * b->F;
  in += r0 * b->H, mid += r0 * b->F, y += r0 * b->H;
  const uint16_t *w1 = b->w1 + w0, *w2 = b->w2 + w0;
  if (!b->gpu) {
    gemm_host(in, w1, mid, rows, stride, b->H, b->F, experts, 0, 1, b->shared);
    gemm_host(mid, w2, y, rows, stride, b->F, b->H, experts, 0, 0, b->shared);
    return 0;
  }
  return gemm_gpu(b, in, w1, mid, rows, stride, b->H, b->F, experts, 0, 1, sms, stream) ||
         gemm_gpu(b, mid, w2, y, rows, stride, b->F, b->H, experts, 0, 0, sms, stream);
}

int layer_ffn_backward(layer_bench_t *b, const uint16_t *dy, const uint16_t *mid, uint16_t *dmid, uint16_t *dxr,
                       int rows, int stride, int e0, int experts, int sms, cudaStream_t stream) {
  if (experts < 1) return 0;
  const size_t n = (size_t)experts * stride * b->F;
  const size_t r0 = (size_t)e0 * stride, w0 = b->shared ? 0 : (size_t)e0 * b->H * b->F;
  dy += r0 * b->H, mid += r0 * b->F, dmid += r0 * b->F, dxr += r0 * b->H;
  const uint16_t *w1 = b->w1 + w0, *w2 = b->w2 + w0;
  if (!b->gpu) {
    gemm_host(dy, w2, dmid, rows, stride, b->H, b->F, experts, 1, 0, b->shared); /* dy W2^T: W2 is [F][H] */
    for (size_t i = 0; i < n; i++)
      if ((mid[i] & 0x8000u) || (mid[i] & 0x7fffu) == 0) dmid[i] = 0;
    gemm_host(dmid, w1, dxr, rows, stride, b->F, b->H, experts, 1, 0, b->shared); /* dmid W1^T: W1 is [H][F] */
    return 0;
  }
  return gemm_gpu(b, dy, w2, dmid, rows, stride, b->H, b->F, experts, 1, 0, sms, stream) ||
         layer_relu_mask(dmid, mid, n, stream) ||
         gemm_gpu(b, dmid, w1, dxr, rows, stride, b->F, b->H, experts, 1, 0, sms, stream);
}

void layer_gemm_experts(const layer_bench_t *b, int part, int *e0, int *experts) {
  const int beside = b->beside < b->L ? b->beside : b->L;
  *e0 = part == LAYER_GEMM_AFTER ? beside : 0;
  *experts = part == LAYER_GEMM_ALL ? b->L : part == LAYER_GEMM_BESIDE ? beside : b->L - beside;
}

void layer_split(const layer_bench_t *b, int m, int *T, int *first) {
  if (m == 0 || b->by_experts) {
    *T = b->T, *first = 0;
    return;
  }
  const int *w = b->ctx->opts->mb_weights;
  if (w[0]) { /* shares by weight: micro-batch m ends at T x (w_1 + .. + w_m) / (w_1 + .. + w_n), rounded down */
    layer_group(w, b->nmb, b->T, m, first, T);
    return;
  }
  const int base = b->T / b->nmb, rest = b->T % b->nmb; /* the first `rest` micro-batches get one more */
  *T = base + (m - 1 < rest);
  *first = (m - 1) * base + (m - 1 < rest ? m - 1 : rest);
}

void layer_group(const int *w, int n, int L, int m, int *e0, int *ne) {
  long long total = 0, before = 0;
  for (int i = 0; i < n; i++) total += w[0] ? w[i] : 1, before += i < m - 1 ? (w[0] ? w[i] : 1) : 0;
  *e0 = (int)((long long)L * before / total);
  *ne = (int)((long long)L * (before + (w[0] ? w[m - 1] : 1)) / total) - *e0;
}

int layer_poison(layer_bench_t *b, uint16_t *out) {
  const size_t n = (size_t)b->T * b->H * 2;
  if (!b->gpu) return memset(out, 0x7f, n), 0;
  return cudaDeviceSynchronize() != cudaSuccess || cudaMemset(out, 0x7f, n) != cudaSuccess ||
         cudaDeviceSynchronize() != cudaSuccess;
}

int layer_sum(layer_bench_t *b, uint16_t *out, uint16_t *const *part, int n, cudaStream_t stream) {
  const size_t count = (size_t)b->T * b->H;
  if (b->gpu) return layer_sum_parts(out, part, n, count, stream);
  for (size_t i = 0; i < count; i++) {
    float s = 0.0f;
    for (int m = 0; m < n; m++) s += sy__bf16_to_float(part[m][i]);
    out[i] = sy__float_to_bf16(s);
  }
  return 0;
}

int layer_max_rows(layer_bench_t *b, int first, int T) {
  const bench_ctx_t *ctx = b->ctx;
  const int L = b->E / ctx->world, lo = ctx->rank * L;
  int32_t *ids = malloc((size_t)b->T * b->K * 4);
  int *rows = calloc((size_t)L, sizeof *rows);
  long long most = -1;
  if (ids && rows) {
    for (int r = 0; r < ctx->world; r++) {
      wl_moe_uniform_routing(r, b->T, b->E, b->K, ids, NULL);
      for (size_t i = (size_t)first * b->K; i < (size_t)(first + T) * b->K; i++)
        if (ids[i] >= lo && ids[i] < lo + L) rows[ids[i] - lo]++;
    }
    most = 0;
    for (int e = 0; e < L; e++) most = rows[e] > most ? rows[e] : most;
  }
  free(ids);
  free(rows);
  most = bench_allreduce_max(b->ctx, most < 0 ? (long long)1 << 40 : most);
  return most >= (long long)1 << 40 ? -1 : (int)((most + 15) / 16 * 16 > 16 ? (most + 15) / 16 * 16 : 16);
}

/* ---- the inputs ----------------------------------------------------------------------------------------------- */

/* The weights' scales: W1's values in [-1/sqrt(H), 1/sqrt(H)), W2's in [-1/sqrt(F), 1/sqrt(F)). */
static float w_scale(const layer_bench_t *b, int which) { return 2.0f / sqrtf((float)(which == 1 ? b->H : b->F)); }

/* Expert e's W1 and W2 (layer_weights.h) into w1_h and w2_h for the reference; with shared weights the one pair. */
static void load_expert(layer_bench_t *b, int e) {
  if (b->shared) e = 0;
  if (b->w_expert == e) return;
  const size_t HF = (size_t)b->H * b->F;
  const float s1 = w_scale(b, 1), s2 = w_scale(b, 2);
  for (size_t i = 0; i < HF; i++) b->w1_h[i] = layer_weight(1, (uint32_t)e, i, s1);
  for (size_t i = 0; i < HF; i++) b->w2_h[i] = layer_weight(2, (uint32_t)e, i, s2);
  b->w_expert = e;
}

/* This rank's experts' W1 and W2 (shared: the one pair) into w1 and w2: on the GPU by a kernel, on the host here. */
static int fill_weights(layer_bench_t *b) {
  const size_t HF = (size_t)b->H * b->F;
  const int n = b->shared ? 1 : b->L, first = b->shared ? 0 : b->ctx->rank * b->L;
  if (b->gpu)
    return layer_fill_weights(b->w1, 1, first, n, HF, w_scale(b, 1), b->ctx->stream) ||
           layer_fill_weights(b->w2, 2, first, n, HF, w_scale(b, 2), b->ctx->stream);
  for (int e = 0; e < n; e++)
    for (size_t i = 0; i < HF; i++) {
      b->w1[(size_t)e * HF + i] = layer_weight(1, (uint32_t)(first + e), i, w_scale(b, 1));
      b->w2[(size_t)e * HF + i] = layer_weight(2, (uint32_t)(first + e), i, w_scale(b, 2));
    }
  return 0;
}

int layer_setup_common(layer_bench_t *b) {
  const bench_ctx_t *ctx = b->ctx;
  const size_t TH = (size_t)b->T * b->H, TK = (size_t)b->T * b->K, HF = (size_t)b->H * b->F;
  const size_t WN = (b->shared ? 1 : (size_t)b->L) * HF; /* a weight's elements on this rank */
  b->x_h = malloc(TH * 2), b->ids_h = malloc(TK * 4), b->weights_h = malloc(TK * 4);
  b->w1_h = malloc(HF * 2), b->w2_h = malloc(HF * 2), b->dout_h = malloc(TH * 2);
  b->w_expert = -1;
  if (!b->x_h || !b->ids_h || !b->weights_h || !b->w1_h || !b->w2_h || !b->dout_h) return 1;
  wl_moe_uniform_routing(ctx->rank, b->T, b->E, b->K, b->ids_h, b->weights_h);
  wl_moe_uniform_tokens(ctx->rank, b->T, b->H, b->x_h);
  for (size_t i = 0; i < TH; i++) /* the output's gradient */
    b->dout_h[i] = layer_weight(3, (uint32_t)ctx->rank, i, 2.0f);
  b->x = layer_buf(b, TH * 2), b->out = layer_buf(b, TH * 2);
  b->ids = layer_buf(b, TK * 4), b->weights = layer_buf(b, TK * 4);
  b->w1 = layer_buf(b, WN * 2), b->w2 = layer_buf(b, WN * 2);
  b->dout = layer_buf(b, TH * 2), b->dx = layer_buf(b, TH * 2);
  int rc = !b->x || !b->out || !b->ids || !b->weights || !b->w1 || !b->w2 || !b->dout || !b->dx;
  rc = rc || layer_put(b, b->x, b->x_h, TH * 2) || layer_put(b, b->ids, b->ids_h, TK * 4) ||
       layer_put(b, b->weights, b->weights_h, TK * 4) || fill_weights(b) || layer_put(b, b->dout, b->dout_h, TH * 2);
  if (rc || !b->gpu) return rc;
  /* the GEMMs' stream at the lowest priority, below the communication's (the bench's stream, at the highest) */
  int lowest = 0, highest = 0;
  rc = cudaDeviceGetStreamPriorityRange(&lowest, &highest) != cudaSuccess ||
       cudaStreamCreateWithPriority(&b->compute, cudaStreamNonBlocking, lowest) != cudaSuccess;
  for (int i = 0; i < 3 * LAYER_MAX_MB && !rc; i++)
    rc = cudaEventCreateWithFlags(&b->ev[i], cudaEventDisableTiming) != cudaSuccess;
  /* cuBLASLt's workspace: 32 MiB for prefill; none for decode (<= 256 tokens), where cuBLASLt otherwise picks
   * split-K kernels whose workspace it clears with memsets, and each memset node adds ~1.8 us to a graph launch's
   * host time, a kernel node a few hundredths (bench/NOTES.md, "Host time of a replayed step").
   * SY_BENCH_GEMM_WORKSPACE=MiB sets it for both. */
  const char *ws = getenv("SY_BENCH_GEMM_WORKSPACE");
  long mib = b->T <= 256 ? 0 : 32;
  if (ws && *ws) {
    char *end = NULL;
    mib = strtol(ws, &end, 10);
    if (*end || mib < 0 || mib > 4096) {
      bench_print(b->ctx, "# layer: SY_BENCH_GEMM_WORKSPACE=%s: not a size in MiB from 0 to 4096\n", ws);
      return 1;
    }
  }
  b->lt_work_bytes = (size_t)mib << 20;
  rc = rc || cublasLtCreate(&b->lt) != CUBLAS_STATUS_SUCCESS ||
       (b->lt_work_bytes && cudaMalloc(&b->lt_work, b->lt_work_bytes) != 0);
  return rc;
}

void layer_teardown_common(layer_bench_t *b) {
  void *p[] = {b->x, b->out, b->ids, b->weights, b->w1, b->w2, b->dout, b->dx};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) layer_unbuf(b, p[i]);
  if (b->gpu) {
    for (int i = 0; i < 3 * LAYER_MAX_MB; i++)
      if (b->ev[i]) cudaEventDestroy(b->ev[i]);
    if (b->compute) cudaStreamDestroy(b->compute);
    if (b->lt) cublasLtDestroy(b->lt);
    if (b->lt_work) cudaFree(b->lt_work);
  }
  free(b->x_h), free(b->ids_h), free(b->weights_h), free(b->w1_h), free(b->w2_h), free(b->dout_h);
  free(b->ref[0]), free(b->ref[1]);
}

/* ---- the check ---------------------------------------------------------------------------------------------- */

/* The forward's mid for token t (every expert's is the same): bf16(relu(x W1)), in double; amb[j] is set where
 * x W1's element j lies so near 0 (|s| <= 2^-16 of the sum of its terms' magnitudes) that the GPU's fp32 sum may
 * land on the other side of the ReLU: its mask there is not the reference's to decide (run 44: one such element,
 * |s| 5e-6 of the elements' rms, put 83 of a token's 7,168 gradient elements past the tolerance at 16,384 tokens). */
static void ref_mid(const layer_bench_t *b, int t, float *mid, unsigned char *amb) {
  const uint16_t *x = b->x_h + (size_t)t * b->H;
  for (int j = 0; j < b->F; j++) {
    double s = 0, mag = 0;
    for (int i = 0; i < b->H; i++) {
      const double term = (double)sy__bf16_to_float(x[i]) * sy__bf16_to_float(b->w1_h[(size_t)i * b->F + j]);
      s += term;
      mag += fabs(term);
    }
    mid[j] = sy__bf16_to_float(sy__float_to_bf16(s < 0 ? 0.0f : (float)s));
    amb[j] = fabs(s) <= ldexp(mag, -16);
  }
}

/* The layer for token t on the host, W1_k and W2_k the weights of the token's k-th expert (load_expert). Forward:
 * sum_k w_k y_k, y_k = bf16(mid_k W2_k). Backward (the gradient of the tokens): sum_k bf16(dmid_k W1_k^T), dmid_k =
 * bf16(dy_k W2_k^T) where mid_k > 0, dy_k = bf16(w_k dout); and slack[h], the most a different ReLU decision at
 * ref_mid's ambiguous elements could move element h (sum over k and those j of |dmid_kj W1_k[h][j]|; 0 in the
 * forward, where such an element is ~0 either way). In double; scratch: F + H floats and F bytes in tmp. */
static void reference(layer_bench_t *b, int t, int backward, double *out, double *slack, float *tmp) {
  const int32_t *ids = b->ids_h + (size_t)t * b->K;
  const float *w = b->weights_h + (size_t)t * b->K;
  float *mid = tmp, *v = tmp + b->F;
  unsigned char *amb = (unsigned char *)(v + b->H);
  for (int h = 0; h < b->H; h++) out[h] = 0, slack[h] = 0;
  const uint16_t *dout = b->dout_h + (size_t)t * b->H;
  float *dmid = backward ? malloc((size_t)b->F * sizeof *dmid) : NULL;
  if (backward && !dmid) return;
  int made = -1; /* the expert whose mid (and, forward, y in v) tmp holds */
  for (int k = 0; k < b->K; k++) {
    if (ids[k] < 0) continue;
    const int e = b->shared ? 0 : ids[k];
    if (made != e) {
      load_expert(b, e);
      ref_mid(b, t, mid, amb);
      if (!backward)
        for (int h = 0; h < b->H; h++) {
          double s = 0;
          for (int j = 0; j < b->F; j++) s += (double)mid[j] * sy__bf16_to_float(b->w2_h[(size_t)j * b->H + h]);
          v[h] = sy__bf16_to_float(sy__float_to_bf16((float)s));
        }
      made = e;
    }
    if (!backward) {
      for (int h = 0; h < b->H; h++) out[h] += (double)w[k] * v[h];
      continue;
    }
    for (int h = 0; h < b->H; h++) v[h] = sy__bf16_to_float(sy__float_to_bf16(w[k] * sy__bf16_to_float(dout[h])));
    for (int j = 0; j < b->F; j++) {
      double s = 0;
      for (int h = 0; h < b->H; h++) s += (double)v[h] * sy__bf16_to_float(b->w2_h[(size_t)j * b->H + h]);
      dmid[j] = sy__bf16_to_float(sy__float_to_bf16((float)s));
    }
    for (int i = 0; i < b->H; i++) {
      double s = 0;
      for (int j = 0; j < b->F; j++) {
        const double term = (double)dmid[j] * sy__bf16_to_float(b->w1_h[(size_t)i * b->F + j]);
        if (amb[j]) slack[i] += fabs(term);
        if (mid[j] > 0) s += term;
      }
      out[i] += sy__bf16_to_float(sy__float_to_bf16((float)s));
    }
  }
  free(dmid);
}

/* Sampled token i: t = i x 2654435761 mod T. Their references, made once a shape and direction (the inputs do not
 * change between the ways; with each expert's own weights a token's reference makes its K experts' weights). */
static int sample_token(const layer_bench_t *b, int i) { return (int)(((long long)i * 2654435761u) % b->T); }

static const double *references(layer_bench_t *b, int samples, int backward) {
  if (b->ref_samples[backward] >= samples) return b->ref[backward];
  const size_t H = (size_t)b->H;
  double *ref = malloc((size_t)samples * 2 * H * sizeof *ref);
  float *tmp = malloc(((size_t)b->F + b->H) * 4 + (size_t)b->F);
  if (!ref || !tmp) return free(ref), free(tmp), NULL;
  for (int i = 0; i < samples; i++)
    reference(b, sample_token(b, i), backward, ref + 2 * H * i, ref + 2 * H * i + H, tmp);
  free(tmp);
  free(b->ref[backward]);
  b->ref[backward] = ref, b->ref_samples[backward] = samples;
  return ref;
}

long long layer_check(layer_bench_t *b, int samples, int backward) {
  uint16_t *got = malloc((size_t)b->H * 2);
  const double *ref = references(b, samples, backward);
  long long wrong = got && ref ? 0 : -1;
  if (b->gpu && cudaStreamSynchronize(b->ctx->stream) != cudaSuccess) wrong = -1;
  const uint16_t *result = backward ? b->dx : b->out;
  for (int i = 0; i < samples && wrong >= 0; i++) {
    const int t = sample_token(b, i);
    if (layer_get(b, got, result + (size_t)t * b->H, (size_t)b->H * 2)) {
      wrong = -1;
      break;
    }
    const double *want = ref + 2 * (size_t)b->H * i, *slack = want + b->H;
    double mean = 0;
    for (int h = 0; h < b->H; h++) mean += fabs(want[h]) / b->H;
    for (int h = 0; h < b->H; h++)
      wrong += !(fabs(sy__bf16_to_float(got[h]) - want[h]) <= LAYER_TOL * (fabs(want[h]) + mean) + slack[h]); /* NaN */
  }
  free(got);
  return wrong;
}

/* ---- the ways ------------------------------------------------------------------------------------------------- */

/* A micro-batch's GEMMs: in one part, or (beside < L) the part beside the communication and the part after it. */
static int gemms_of(layer_bench_t *b, const layer_parts_t *p, int m, cudaStream_t s) {
  if (b->beside >= b->L) return p->compute(b, m, LAYER_GEMM_ALL, s);
  return p->compute(b, m, LAYER_GEMM_BESIDE, s) || p->compute(b, m, LAYER_GEMM_AFTER, s);
}

/* The communication stream's items in order: every micro-batch's comm1 of layer 1, then for each layer l and
 * micro-batch m its comm2 and (l < N) layer l + 1's comm1 — a micro-batch's next layer starts once its last one has
 * ended (stream order), as in a model where it would. Item i: its micro-batch in *m, 1 for a comm1 or 2 for a comm2
 * in *kind, its layer in *l. */
static void comm_item(const layer_bench_t *b, int i, int *l, int *m, int *kind) {
  const int n = b->nmb;
  if (i < n) {
    *l = 0, *m = i + 1, *kind = 1;
    return;
  }
  i -= n;
  const int per = 2 * n;            /* a layer's but the last: comm2 and the next layer's comm1, a micro-batch each */
  if (i >= (b->layers - 1) * per) { /* the last layer's: comm2s alone */
    *l = b->layers - 1, *m = i - (b->layers - 1) * per + 1, *kind = 2;
    return;
  }
  *l = i / per, *m = i % per / 2 + 1, *kind = i % 2 ? 1 : 2;
  if (*kind == 1) *l += 1;
}

int layer_two_streams(layer_bench_t *b, cudaStream_t sc, const layer_parts_t *p) {
  const int n = b->nmb, N = b->layers; /* >= 1 (bench_layer) */
  if (!b->gpu) {
    int rc = 0;
    for (int l = 0; l < N && !rc; l++) {
      for (int m = 1; m <= n && !rc; m++) rc = p->comm1(b, m, sc);
      for (int m = 1; m <= n && !rc; m++) rc = gemms_of(b, p, m, sc);
      for (int m = 1; m <= n && !rc; m++) rc = p->comm2(b, m, sc);
    }
    return rc;
  }
  cudaStream_t sg = b->compute;
  const int split = b->beside < b->L;
  const int items = 2 * n * N; /* every comm1 and comm2 */
  /* events, by micro-batch m: ev[m - 1] its latest comm1 done, ev[n + m - 1] its latest GEMMs done, ev[2n + m - 1]
   * the communication beside its latest GEMMs done. Each wait is enqueued after the record it waits for (a wait on an
   * event not yet recorded waits for nothing), and an event is recorded again only after its last wait. */
  int ic = 0, rc = 0;
  int comm1_done[LAYER_MAX_MB + 1] = {0}, gemms_done[LAYER_MAX_MB + 1] = {0}; /* layers enqueued, a micro-batch */
  for (int g = 0; g < N * n && !rc; g++) {
    const int gl = g / n, gm = g % n + 1; /* the next GEMMs: layer gl, micro-batch gm */
    while (!rc && comm1_done[gm] <= gl) { /* the comm items up to its comm1 */
      int l, m, kind;
      comm_item(b, ic++, &l, &m, &kind);
      if (kind == 2) /* its GEMMs come before these in the GEMMs' order: enqueued */
        rc = gemms_done[m] <= l || cudaStreamWaitEvent(sc, b->ev[n + m - 1], 0) != cudaSuccess || p->comm2(b, m, sc);
      else rc = p->comm1(b, m, sc) || cudaEventRecord(b->ev[m - 1], sc) != cudaSuccess || (comm1_done[m]++, 0);
    }
    rc = rc || cudaStreamWaitEvent(sg, b->ev[gm - 1], 0) != cudaSuccess ||
         p->compute(b, gm, split ? LAYER_GEMM_BESIDE : LAYER_GEMM_ALL, sg);
    /* beside them: every comm item that can run now (a comm2 whose GEMMs were enqueued before these) */
    int beside = 0;
    while (!rc && ic < items) {
      int l, m, kind;
      comm_item(b, ic, &l, &m, &kind);
      if (kind == 2 && gemms_done[m] <= l) break;
      ic++, beside++;
      if (kind == 2) rc = cudaStreamWaitEvent(sc, b->ev[n + m - 1], 0) != cudaSuccess || p->comm2(b, m, sc);
      else rc = p->comm1(b, m, sc) || cudaEventRecord(b->ev[m - 1], sc) != cudaSuccess || (comm1_done[m]++, 0);
    }
    if (!rc && split) { /* the rest on every SM once the communication beside the first part has ended */
      if (beside)
        rc = cudaEventRecord(b->ev[2 * n + gm - 1], sc) != cudaSuccess ||
             cudaStreamWaitEvent(sg, b->ev[2 * n + gm - 1], 0) != cudaSuccess;
      rc = rc || p->compute(b, gm, LAYER_GEMM_AFTER, sg);
    }
    rc = rc || cudaEventRecord(b->ev[n + gm - 1], sg) != cudaSuccess;
    gemms_done[gm]++;
  }
  while (!rc && ic < items) { /* the last layer's comm2s */
    int l, m, kind;
    comm_item(b, ic++, &l, &m, &kind);
    rc = kind != 2 || cudaStreamWaitEvent(sc, b->ev[n + m - 1], 0) != cudaSuccess || p->comm2(b, m, sc);
  }
  return rc;
}

typedef struct layer_run {
  layer_bench_t *b;
  const layer_parts_t *p;
  sy_graph_cache_t cache; /* way c's */
} layer_run_t;

static int op_comm(bench_ctx_t *ctx, void *arg) {
  layer_run_t *r = arg;
  int rc = 0;
  for (int l = 0; l < r->b->layers && !rc; l++)
    rc = r->p->comm1(r->b, 0, ctx->stream) || r->p->comm2(r->b, 0, ctx->stream);
  return rc;
}

static int op_compute(bench_ctx_t *ctx, void *arg) {
  layer_run_t *r = arg;
  int rc = 0;
  for (int l = 0; l < r->b->layers && !rc; l++) rc = r->p->compute(r->b, 0, LAYER_GEMM_ALL, ctx->stream);
  return rc;
}

static int op_gemms(bench_ctx_t *ctx, void *arg) {
  layer_run_t *r = arg;
  int rc = 0;
  for (int l = 0; l < r->b->layers && !rc; l++)
    for (int m = 1; m <= r->b->nmb && !rc; m++) rc = gemms_of(r->b, r->p, m, ctx->stream);
  return rc;
}

static int op_a(bench_ctx_t *ctx, void *arg) {
  layer_run_t *r = arg;
  int rc = 0;
  for (int l = 0; l < r->b->layers && !rc; l++)
    rc = r->p->comm1(r->b, 0, ctx->stream) || r->p->compute(r->b, 0, LAYER_GEMM_ALL, ctx->stream) ||
         r->p->comm2(r->b, 0, ctx->stream);
  return rc;
}

/* Way s: way a with every communication call on the object's SMs (--end-sms; layer.c's budget). */
static int op_s(bench_ctx_t *ctx, void *arg) {
  layer_run_t *r = arg;
  r->b->all_ends = 1;
  const int rc = op_a(ctx, arg);
  r->b->all_ends = 0;
  return rc;
}

static int op_b(bench_ctx_t *ctx, void *arg) {
  layer_run_t *r = arg;
  return layer_two_streams(r->b, ctx->stream, r->p);
}

static sy_status_t graph_step(void *user, int bucket, cudaStream_t stream) {
  layer_run_t *r = user;
  (void)bucket;
  return layer_two_streams(r->b, stream, r->p) ? SY_ERR_INTERNAL : SY_SUCCESS;
}

static int op_c(bench_ctx_t *ctx, void *arg) {
  layer_run_t *r = arg;
  return sy_graph_cache_run(r->cache, r->b->T, ctx->stream) != SY_SUCCESS;
}

/* Median host time of enqueuing op (the stream drained after each, outside the timing). SY_BENCH_ENQUEUE_FILE=FILE
 * (rank 0): each sample, in run order, appended to FILE as a line "shape tokens way us us ..." (label: the caller's
 * "shape tokens way") — is a slow median every sample's, or a few slow ones? */
static double enqueue_us(bench_ctx_t *ctx, bench_op_fn op, void *arg, const char *label) {
  const int n = ctx->opts->iters;
  double *t = calloc((size_t)n, sizeof *t);
  if (!t) return -1;
  for (int i = 0; i < n; i++) {
    const double t0 = bench_now_s();
    if (op(ctx, arg)) return free(t), -1;
    t[i] = (bench_now_s() - t0) * 1e6;
    if (ctx->backend == SY_BACKEND_CUDA) cudaStreamSynchronize(ctx->stream);
  }
  const char *path = ctx->rank == 0 ? getenv("SY_BENCH_ENQUEUE_FILE") : NULL;
  FILE *f = path ? fopen(path, "a") : NULL;
  if (f) {
    fprintf(f, "%s", label);
    for (int i = 0; i < n; i++) fprintf(f, " %.2f", t[i]);
    fprintf(f, "\n");
    fclose(f);
  }
  const double m = bench_median(t, n);
  free(t);
  return m;
}

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const struct {
  const char *name;
  bench_op_fn op;
  int checked;
} ways[LAYER_WAYS] = {[WAY_COMM] = {"comm", op_comm, 0},
                      [WAY_COMPUTE] = {"compute", op_compute, 0},
                      [WAY_GEMMS] = {"gemms", op_gemms, 0},
                      [WAY_A] = {"a", op_a, 1},
                      [WAY_B] = {"b", op_b, 1},
                      [WAY_C] = {"c", op_c, 1},
                      [WAY_S] = {"s", op_s, 1}};

int bench_layer_parse_ways(const char *list, int *out, int max) {
  int n = 0;
  for (const char *s = list; *s;) {
    const size_t len = strcspn(s, ",");
    int w = -1;
    for (int i = 0; i < LAYER_WAYS && w < 0; i++)
      if (strlen(ways[i].name) == len && !strncmp(s, ways[i].name, len)) w = i;
    if (w < 0) {
      fprintf(stderr, "sy-bench: --ways %s: no way '%.*s' (the ways: comm, compute, gemms, a, b, c, s)\n", list,
              (int)len, s);
      return -1;
    }
    if (n == max) {
      fprintf(stderr, "sy-bench: --ways %s: more than %d ways\n", list, max);
      return -1;
    }
    out[n++] = w;
    s += len;
    if (*s == ',' && *++s == 0) break; /* a trailing comma: as if absent */
  }
  if (n == 0) fprintf(stderr, "sy-bench: --ways '%s': no way named\n", list);
  return n ? n : -1;
}

int layer_run_shape(layer_bench_t *b, const layer_parts_t *p, double *us, double *enq) {
  bench_ctx_t *ctx = b->ctx;
  static const int all[] = {WAY_COMM, WAY_COMPUTE, WAY_GEMMS, WAY_A, WAY_B, WAY_C}; /* s: named only */
  const int *order = ctx->opts->num_ways ? ctx->opts->ways : all;
  const int n_order = ctx->opts->num_ways ? ctx->opts->num_ways : (int)(sizeof all / sizeof *all);
  double t_run[BENCH_MAX_WAYS], e_run[BENCH_MAX_WAYS]; /* each timing, in run order */
  layer_run_t run = {b, p, NULL};
  sy_graph_cache_config_t gc = SY_GRAPH_CACHE_CONFIG_INIT;
  gc.buckets = &b->T, gc.num_buckets = 1;
  int rc = sy_graph_cache_create(ctx->comm, &gc, graph_step, &run, &run.cache) != SY_SUCCESS;
  /* ways a and b once, untimed, first: the whole step's buffers and the micro-batches' (their rows, mid and y; the
   * backward's dy) hold this step's values before ways compute and gemms time their GEMMs alone (on unwritten
   * operands a GEMM draws less power, and a GPU at its power limit then clocks higher: run 45's first `gemms` figures
   * were such, and run 48's `compute` timed before any way that writes the whole step's rows read ~20% fast) */
  if (!rc)
    rc = op_a(ctx, &run) || op_b(ctx, &run) ||
         (ctx->backend == SY_BACKEND_CUDA && cudaStreamSynchronize(ctx->stream) != cudaSuccess);
  long long wrong = 0;
  /* SY_BENCH_LAYER_MARKS=FILE: each way's timing, its wall-clock start and end (seconds since the epoch, rank 0),
   * appended to FILE — to line the ways up with a sampler of the GPUs' clocks and power (nvidia-smi -lms) */
  const char *marks = ctx->rank == 0 ? getenv("SY_BENCH_LAYER_MARKS") : NULL;
  for (int j = 0; j < n_order && !rc; j++) {
    const int i = order[j];
    bench_timing_t t;
    memset(&t, 0, sizeof t);
    /* the outputs a checked way must write, poisoned first (bf16 0x7f7f, ~3.4e38, finite: far off any reference),
     * so that a way that leaves them unwritten is not checked on an earlier way's values (the untimed a and b above) */
    if (ways[i].checked && ctx->opts->check) rc = layer_poison(b, p->check == 2 ? b->dx : b->out);
    const double w0 = marks ? wall_s() : 0;
    rc = rc || bench_time(ctx, ways[i].op, &run, &t);
    FILE *f = marks ? fopen(marks, "a") : NULL;
    if (f) fprintf(f, "%s %d %s %.3f %.3f\n", p->shape, b->T, ways[i].name, w0, wall_s()), fclose(f);
    us[i] = t_run[j] = t.time_us;
    char label[96];
    snprintf(label, sizeof label, "%s %d %s", p->shape, b->T, ways[i].name);
    enq[i] = e_run[j] = rc ? -1 : enqueue_us(ctx, ways[i].op, &run, label);
    if (rc || !ways[i].checked || !ctx->opts->check) continue;
    const long long w = layer_check(b, b->gpu ? 4 : 16, p->check == 2);
    if (w)
      bench_print(ctx, "# layer %s: way %s: %lld elements off the reference (rank %d)\n", p->shape, ways[i].name, w,
                  ctx->rank);
    wrong += w != 0;
  }
  if (run.cache) sy_graph_cache_destroy(run.cache);
  for (int i = 0; i < LAYER_WAYS; i++) us[i] = rc ? 0 : bench_allreduce_max_d(ctx, us[i]);
  for (int j = 0; j < n_order; j++) t_run[j] = rc ? 0 : bench_allreduce_max_d(ctx, t_run[j]);
  wrong = bench_allreduce_max(ctx, wrong);
  ctx->total_wrong += wrong;
  bench_print(ctx, "#  shape    tokens  way       step_us   enqueue_us   overlap\n");
  const double lo = us[WAY_COMM] < us[WAY_COMPUTE] ? us[WAY_COMM] : us[WAY_COMPUTE];
  for (int j = 0; j < n_order && !rc; j++) { /* in run order; overlap from the last comm and compute timed */
    const int i = order[j];
    const double eff = i >= WAY_A && lo > 0 ? (us[WAY_COMM] + us[WAY_COMPUTE] - t_run[j]) / lo : NAN;
    bench_print(ctx, "   %-8s %6d  %-8s %9.2f %12.2f %9.2f\n", p->shape, b->T, ways[i].name, t_run[j], e_run[j], eff);
    char overlap[32] = "null"; /* the ways run alone have none */
    if (!isnan(eff)) snprintf(overlap, sizeof overlap, "%.4f", eff);
    bench_json(ctx,
               "{\"entry\": \"layer\", \"backend\": \"%s\", \"world\": %d, \"shape\": \"%s\", \"way\": \"%s\", "
               "\"tokens\": %d, \"step_us\": %.3f, \"enqueue_us\": %.3f, \"overlap\": %s, \"sms\": %d, "
               "\"micro_batches\": %d, \"split\": \"%s\", \"layers\": %d, \"wrong\": %lld}",
               sy_backend_name(ctx->backend), ctx->world, p->shape, ways[i].name, b->T, t_run[j], e_run[j], overlap,
               b->sms, b->nmb, b->by_experts ? "experts" : "tokens", b->layers, wrong);
  }
  return rc ? -1 : (int)wrong;
}
