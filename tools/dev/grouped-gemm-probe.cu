/*
 * grouped-gemm-probe.cu — issue 21, way b at world 1: the layer's micro-batches lose to the whole step because their
 * expert GEMMs are strided-batched over the busiest expert's rows (every expert padded to it) and slower per row at
 * the smaller stride (NOTES, "MoE layer step: measured"). Would a grouped GEMM with each expert's exact rows
 * (cublasGemmGroupedBatchedEx: per-group sizes on the host, so the exact mode's host counts) keep the rows' cost?
 * For T tokens a rank (top-8 of 256 experts, seeded uniform routing, world 1: every expert local), each of the
 * layer's two GEMMs (x[rows x 7168] W1[7168 x 2048], then mid[rows x 2048] W2[2048 x 7168]; bf16, fp32 accumulate):
 *   lt-strided   cublasLt strided-batched over 256 experts x the busiest expert's rows (the layer's way now)
 *   grouped      cublasGemmGroupedBatchedEx, 256 groups of one, each expert's own rows
 *   one-gemm     one GEMM over every row (the floor where every expert shares its weights, as sy-bench's do)
 * with the weights shared by every expert (sy-bench layer's setting) and, for the first two, distinct per expert
 * (a real layer's: 15 GB of weights at world 1). Event time, median of 10 after 3 warm-ups; µs and TFLOP/s on the
 * real rows. No check of the products' bits: it times shapes, the layer's CPU reference checks the math.
 *   nvcc -O2 -arch=sm_90 -std=c++17 -o /tmp/ggp tools/dev/grouped-gemm-probe.cu -lcublasLt -lcublas && /tmp/ggp
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "probe_check.cuh"
#define CB(x)                                                                      \
  do {                                                                             \
    int s_ = (int)(x);                                                             \
    if (s_ != 0) {                                                                 \
      fprintf(stderr, "%s:%d %s: cublas status %d\n", __FILE__, __LINE__, #x, s_); \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static const int E = 256, K = 8, H = 7168, F = 2048;
static cublasLtHandle_t lt;
static cublasHandle_t blas;
static void *lt_work;
static const size_t lt_work_bytes = 32u << 20;

__host__ __device__ static uint32_t mix(uint32_t x) {
  x ^= x >> 16, x *= 0x7feb352dU, x ^= x >> 15, x *= 0x846ca68bU, x ^= x >> 16;
  return x;
}

/* each token's K distinct experts, uniform; counts per expert */
static std::vector<int> route(int T, uint32_t seed) {
  std::vector<int> counts(E, 0);
  for (int t = 0; t < T; t++) {
    int chosen[K], n = 0;
    for (uint32_t j = 0; n < K; j++) {
      const int e = (int)(mix(seed * 0x9e3779b9U ^ mix((uint32_t)t * 64 + j)) % E);
      bool dup = false;
      for (int i = 0; i < n; i++) dup = dup || chosen[i] == e;
      if (!dup) chosen[n++] = e;
    }
    for (int i = 0; i < K; i++) counts[chosen[i]]++;
  }
  return counts;
}

/* row-major C[e] (stride x n) = A[e] (stride x k) B[e] (k x n), B[e] = B + e * b_stride; as the layer's gemm_gpu */
static void lt_strided(const __nv_bfloat16 *A, const __nv_bfloat16 *B, __nv_bfloat16 *C, int stride, int k, int n,
                       int64_t b_stride, cudaStream_t s, int batch = E, int sms = 0) {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t ls[3];
  CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (sms > 0) CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof sms));
  const uint64_t dims[3][3] = {{(uint64_t)n, (uint64_t)k, (uint64_t)n},
                               {(uint64_t)k, (uint64_t)stride, (uint64_t)k},
                               {(uint64_t)n, (uint64_t)stride, (uint64_t)n}};
  const int64_t strides[3] = {b_stride, (int64_t)stride * k, (int64_t)stride * n};
  for (int i = 0; i < 3; i++) {
    CB(cublasLtMatrixLayoutCreate(&ls[i], CUDA_R_16BF, dims[i][0], dims[i][1], (int64_t)dims[i][2]));
    CB(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    CB(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                        sizeof strides[i]));
  }
  const float one = 1.0f, zero = 0.0f;
  CB(cublasLtMatmul(lt, op, &one, B, ls[0], A, ls[1], &zero, C, ls[2], C, ls[2], NULL, lt_work, lt_work_bytes, s));
  for (int i = 0; i < 3; i++) cublasLtMatrixLayoutDestroy(ls[i]);
  cublasLtMatmulDescDestroy(op);
}

/* the same with each expert's own rows: group e is C^T (n x rows_e) = B_e^T (n x k) A_e^T (k x rows_e) */
struct grouped_args {
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m, n, k, lda, ldb, ldc, size;
  std::vector<float> alpha, beta;
  void **ptrs; /* device: [3][groups] */
  int groups;
};

static grouped_args *grouped_make(const std::vector<int> &counts, const __nv_bfloat16 *A, const __nv_bfloat16 *B,
                                  __nv_bfloat16 *C, int stride, int k, int n, int64_t b_stride) {
  grouped_args *g = new grouped_args;
  std::vector<void *> host;
  std::vector<const void *> a, b;
  std::vector<void *> c;
  for (int e = 0; e < E; e++) {
    if (!counts[e]) continue;
    g->ta.push_back(CUBLAS_OP_N), g->tb.push_back(CUBLAS_OP_N);
    g->m.push_back(n), g->n.push_back(counts[e]), g->k.push_back(k);
    g->lda.push_back(n), g->ldb.push_back(k), g->ldc.push_back(n), g->size.push_back(1);
    g->alpha.push_back(1.0f), g->beta.push_back(0.0f);
    b.push_back(B + (size_t)e * b_stride);
    a.push_back(A + (size_t)e * stride * k);
    c.push_back(C + (size_t)e * stride * n);
  }
  g->groups = (int)g->m.size();
  for (auto p : b) host.push_back((void *)p);
  for (auto p : a) host.push_back((void *)p);
  for (auto p : c) host.push_back(p);
  CK(cudaMalloc(&g->ptrs, host.size() * sizeof(void *)));
  CK(cudaMemcpy(g->ptrs, host.data(), host.size() * sizeof(void *), cudaMemcpyHostToDevice));
  return g;
}

static void grouped_run(grouped_args *g, cudaStream_t s) {
  CB(cublasSetStream(blas, s));
  void **p = g->ptrs;
  CB(cublasGemmGroupedBatchedEx(
      blas, g->ta.data(), g->tb.data(), g->m.data(), g->n.data(), g->k.data(), g->alpha.data(), (const void *const *)p,
      CUDA_R_16BF, g->lda.data(), (const void *const *)(p + g->groups), CUDA_R_16BF, g->ldb.data(), g->beta.data(),
      p + 2 * g->groups, CUDA_R_16BF, g->ldc.data(), g->groups, g->size.data(), CUBLAS_COMPUTE_32F));
}

template <typename Fn>
static double time_us(Fn fn, cudaStream_t s) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; i++) fn();
  std::vector<float> t;
  for (int i = 0; i < 10; i++) {
    CK(cudaEventRecord(a, s));
    fn();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000.0f);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a), cudaEventDestroy(b);
  return 0.5 * (t[4] + t[5]);
}

__global__ void fill(__nv_bfloat16 *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16((float)(int)(mix((uint32_t)i ^ seed) % 17 - 8) / 64.0f);
}

int main() {
  CB(cublasLtCreate(&lt));
  CB(cublasCreate(&blas));
  CK(cudaMalloc(&lt_work, lt_work_bytes));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t wsz = (size_t)H * F;
  __nv_bfloat16 *w1, *w2; /* E distinct matrices each; "shared" uses the first */
  CK(cudaMalloc(&w1, wsz * E * 2));
  CK(cudaMalloc(&w2, wsz * E * 2));
  fill<<<1024, 256, 0, s>>>(w1, wsz * E, 1);
  fill<<<1024, 256, 0, s>>>(w2, wsz * E, 2);
  printf("%-6s %-9s %-13s %6s %6s %6s %10s %10s %8s\n", "T", "weights", "way", "rows", "max", "groups", "gemm1_us",
         "gemm2_us", "TFLOP/s");
  for (int T : {4096, 2048, 1024}) {
    const std::vector<int> counts = route(T, 7);
    const int rows = T * K, mx = *std::max_element(counts.begin(), counts.end());
    const int stride = (mx + 15) / 16 * 16;
    __nv_bfloat16 *x, *mid, *y;
    CK(cudaMalloc(&x, (size_t)E * stride * H * 2));
    CK(cudaMalloc(&mid, (size_t)E * stride * F * 2));
    CK(cudaMalloc(&y, (size_t)E * stride * H * 2));
    fill<<<1024, 256, 0, s>>>(x, (size_t)E * stride * H, 3);
    const double flops = 2.0 * 2.0 * rows * (double)H * F; /* both GEMMs, real rows */
    for (int distinct = 0; distinct < 2; distinct++) {
      const int64_t bs = distinct ? (int64_t)wsz : 0;
      const char *wn = distinct ? "distinct" : "shared";
      const double l1 = time_us([&] { lt_strided(x, w1, mid, stride, H, F, bs, s); }, s);
      const double l2 = time_us([&] { lt_strided(mid, w2, y, stride, F, H, bs, s); }, s);
      printf("%-6d %-9s %-13s %6d %6d %6d %10.1f %10.1f %8.1f\n", T, wn, "lt-strided", rows, mx, E, l1, l2,
             flops / (l1 + l2) / 1e6);
      grouped_args *g1 = grouped_make(counts, x, w1, mid, stride, H, F, bs);
      grouped_args *g2 = grouped_make(counts, mid, w2, y, stride, F, H, bs);
      const double q1 = time_us([&] { grouped_run(g1, s); }, s);
      const double q2 = time_us([&] { grouped_run(g2, s); }, s);
      printf("%-6d %-9s %-13s %6d %6d %6d %10.1f %10.1f %8.1f\n", T, wn, "grouped", rows, mx, g1->groups, q1, q2,
             flops / (q1 + q2) / 1e6);
      cudaFree(g1->ptrs), cudaFree(g2->ptrs);
      delete g1, delete g2;
      if (!distinct) { /* every row through one GEMM: the floor where the experts share weights */
        const double o1 = time_us([&] { lt_strided(x, w1, mid, rows, H, F, 0, s, 1); }, s);
        const double o2 = time_us([&] { lt_strided(mid, w2, y, rows, F, H, 0, s, 1); }, s);
        printf("%-6d %-9s %-13s %6d %6d %6d %10.1f %10.1f %8.1f\n", T, wn, "one-gemm", rows, mx, 1, o1, o2,
               flops / (o1 + o2) / 1e6);
      }
    }
    CK(cudaStreamSynchronize(s));
    cudaFree(x), cudaFree(mid), cudaFree(y);
  }
  /* the expert-group split (way b by experts): every token, the experts in G groups; each group's GEMMs are the
   * whole step's stride over E / G experts; on every SM and on the SMs 16 communication SMs leave */
  {
    const std::vector<int> counts = route(4096, 7);
    const int mx = *std::max_element(counts.begin(), counts.end()), stride = (mx + 15) / 16 * 16;
    __nv_bfloat16 *x, *mid, *y;
    CK(cudaMalloc(&x, (size_t)E * stride * H * 2));
    CK(cudaMalloc(&mid, (size_t)E * stride * F * 2));
    CK(cudaMalloc(&y, (size_t)E * stride * H * 2));
    fill<<<1024, 256, 0, s>>>(x, (size_t)E * stride * H, 3);
    int dev_sms = 0;
    CK(cudaDeviceGetAttribute(&dev_sms, cudaDevAttrMultiProcessorCount, 0));
    printf("\nexpert groups, T 4096, stride %d, shared weights: G, SM target, gemm1+gemm2 us of one group, x G\n",
           stride);
    for (int G : {1, 2, 4, 8})
      for (int sms : {0, dev_sms - 16, dev_sms - 8}) {
        const int batch = E / G;
        const double g1 = time_us([&] { lt_strided(x, w1, mid, stride, H, F, 0, s, batch, sms); }, s);
        const double g2 = time_us([&] { lt_strided(mid, w2, y, stride, F, H, 0, s, batch, sms); }, s);
        printf("G %d  sms %3d  one group %8.1f us  x G %8.1f us\n", G, sms ? sms : dev_sms, g1 + g2, G * (g1 + g2));
      }
  }
  CK(cudaGetLastError());
  return 0;
}
