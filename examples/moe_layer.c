/*
 * moe_layer.c — an MoE layer's forward from a user's side over the high-throughput mode: the layout, the dispatch
 * into each local expert's contiguous rows (exact counts on the host), one GEMM per expert with cuBLAS on its rows,
 * and the weighted combine back to the tokens. Expert e multiplies by W_e = s_e I (s_e = 1 + e / 8), so the result
 * is easy to check: out[t] = sum_k w_k s_(e_k) x[t]. The dispatch's receive buffers come from the object's receive
 * arena (config.recv_arena_bytes), where the senders store each token's first row straight into its place (the
 * dispatch's first copy in place; plain device memory from a pool or cudaMalloc works too). Run it on GPUs:
 * `build/bin/syrun -n 2 build/bin/sy-example-layer` (ranks may share a GPU: `--gpus 0,0`). Exits 0 when every token
 * came back within bf16 rounding. sy-bench layer times the same step with its communication beside the GEMMs (two
 * micro-batches, a CUDA graph).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <switchyard.h>

#define CHECK(call)                                                                                     \
  do {                                                                                                  \
    int rc_ = (int)(call);                                                                              \
    if (rc_ != 0) return fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #call, rc_), 1; \
  } while (0)

static float bf16_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint16_t float_to_bf16(float f) { /* round to nearest even (no NaNs here) */
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

int main(void) {
  sy_comm_t comm;
  CHECK(sy_comm_init(&comm, NULL)); /* rank and world from the launcher */
  int rank, world;
  CHECK(sy_comm_rank(comm, &rank));
  CHECK(sy_comm_size(comm, &world));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  sy_moe_ht_config_t config = SY_MOE_HT_CONFIG_INIT;
  config.max_tokens = 512, config.hidden = 1024, config.top_k = 4, config.num_experts = 8 * world;
  config.wire = SY_MOE_WIRE_BF16, config.expert_alignment = 16;
  CHECK(sy_moe_ht_recv_bytes(comm, &config, -1, &config.recv_arena_bytes)); /* room for one recv of max_rows */
  sy_moe_ht_t moe;
  CHECK(sy_moe_ht_create(comm, &config, &moe));
  sy_moe_ht_sizes_t sizes = SY_MOE_HT_SIZES_INIT;
  CHECK(sy_moe_ht_sizes(moe, &sizes));
  const int T = config.max_tokens, H = config.hidden, K = config.top_k, L = sizes.local_experts;

  /* This rank's tokens, their top-k distinct experts and weights 1/k. */
  uint16_t *x_h = malloc((size_t)T * H * 2);
  int32_t *ids_h = malloc((size_t)T * K * 4);
  float *w_h = malloc((size_t)T * K * 4);
  for (int t = 0; t < T; t++) {
    for (int h = 0; h < H; h++) x_h[(size_t)t * H + h] = float_to_bf16((float)((rank * 31 + t * 7 + h) % 61) / 61);
    for (int k = 0; k < K; k++) ids_h[t * K + k] = (rank + t + k * 3) % config.num_experts, w_h[t * K + k] = 1.0f / K;
  }
  void *x, *ids, *w, *handle, *out, *y;
  CHECK(cudaMalloc(&x, (size_t)T * H * 2));
  CHECK(cudaMalloc(&ids, (size_t)T * K * 4));
  CHECK(cudaMalloc(&w, (size_t)T * K * 4));
  CHECK(cudaMalloc(&out, (size_t)T * H * 2));
  CHECK(cudaMalloc(&handle, sizes.handle_bytes));
  CHECK(cudaMemcpy(x, x_h, (size_t)T * H * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(ids, ids_h, (size_t)T * K * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(w, w_h, (size_t)T * K * 4, cudaMemcpyHostToDevice));

  /* 1. The layout, with the exact counts on the host: each local expert's rows and first row. */
  int32_t *counts = malloc((2 * (size_t)L + 1) * 4);
  CHECK(sy_moe_ht_layout(moe, ids, SY_INDEX_INT32, T, handle, counts, stream));
  const int rows = counts[2 * L];
  sy_moe_ht_recv_t recv = {0}; /* tokens, src, weights, expert offsets and counts for those rows, from the arena */
  CHECK(sy_moe_ht_recv_alloc(moe, NULL, rows, 0, &recv, stream));
  CHECK(cudaMalloc(&y, (size_t)(rows ? rows : 1) * H * 2));

  /* 2. The dispatch: expert e's rows at [offsets[e], offsets[e] + counts[e]), in (source rank, token) order. */
  CHECK(sy_moe_ht_dispatch(moe, handle, T, x, NULL, w, &recv, stream));

  /* 3. The experts: y_e = x_e W_e, one cuBLAS GEMM per local expert on its rows (row-major: y^T = W^T x^T). */
  cublasHandle_t blas;
  CHECK(cublasCreate(&blas));
  CHECK(cublasSetStream(blas, stream));
  uint16_t *W_h = calloc((size_t)H * H, 2);
  void *W;
  CHECK(cudaMalloc(&W, (size_t)L * H * H * 2));
  for (int e = 0; e < L; e++) {
    const float s = 1.0f + (float)(rank * L + e) / 8;
    for (int h = 0; h < H; h++) W_h[(size_t)h * H + h] = float_to_bf16(s);
    CHECK(cudaMemcpy((char *)W + (size_t)e * H * H * 2, W_h, (size_t)H * H * 2, cudaMemcpyHostToDevice));
  }
  const float one = 1.0f, zero = 0.0f;
  for (int e = 0; e < L; e++) {
    const int n = counts[e], first = counts[L + e];
    if (n == 0) continue;
    CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, H, n, H, &one, (char *)W + (size_t)e * H * H * 2, CUDA_R_16BF, H,
                       (char *)recv.tokens + (size_t)first * H * 2, CUDA_R_16BF, H, &zero,
                       (char *)y + (size_t)first * H * 2, CUDA_R_16BF, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  /* 4. The combine: each token's sum over its experts, weighted by the routing weights the rows carry. */
  CHECK(sy_moe_ht_combine(moe, handle, T, y, &recv, recv.weights, NULL, out, NULL, stream));
  CHECK(cudaStreamSynchronize(stream));

  uint16_t *out_h = malloc((size_t)T * H * 2);
  CHECK(cudaMemcpy(out_h, out, (size_t)T * H * 2, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int t = 0; t < T; t++) {
    float scale = 0; /* sum_k w_k s_(e_k) */
    for (int k = 0; k < K; k++) scale += w_h[t * K + k] * (1.0f + (float)ids_h[t * K + k] / 8);
    for (int h = 0; h < H; h++) {
      const float want = scale * bf16_to_float(x_h[(size_t)t * H + h]);
      bad += fabsf(bf16_to_float(out_h[(size_t)t * H + h]) - want) > 0.02f * (fabsf(want) + 0.01f);
    }
  }
  printf("rank %d: %d tokens through %d experts (%d rows here): %s\n", rank, T, config.num_experts, rows,
         bad ? "WRONG" : "ok");

  cublasDestroy(blas);
  CHECK(sy_moe_ht_recv_free(moe, NULL, &recv, stream)); /* nothing enqueued uses it any more: synchronised above */
  sy_moe_ht_destroy(moe);
  sy_comm_destroy(comm);
  return bad != 0;
}
