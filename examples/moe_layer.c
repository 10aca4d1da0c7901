/*
 * moe_layer.c — an MoE layer's forward from a user's side over the high-throughput mode: the layout, the dispatch
 * into each local expert's contiguous rows (exact counts on the host), one GEMM per expert with cuBLAS on its rows,
 * and the weighted combine back to the tokens. Expert e multiplies by W_e = s_e I + S / 4 (s_e = 1 + e / 8, S the
 * cyclic shift: row h has 1 at column h + 1), so the result is easy to check and tells x W from x W^T:
 * out[t][j] = sum_k w_k s_(e_k) x[t][j] + x[t][j - 1] / 4 (the weights sum to 1; j - 1 cyclic). The dispatch's receive buffers come from the object's receive
 * arena (config.recv_arena_bytes), where the senders store each token's first row straight into its place (the
 * dispatch's first copy in place; plain device memory from a pool or cudaMalloc works too). Run it on GPUs:
 * `build/bin/syrun -n 2 build/bin/sy-example-layer` (ranks may share a GPU: `--gpus 0,0`); without a GPU,
 * `build/bin/sy-example-layer --host 3` runs the same calls on the host backend, 3 ranks as threads of this process,
 * with host memory for every buffer and the experts' GEMMs as C loops (a smaller layer there: 128 tokens, hidden 256,
 * against 512 and 1,024 on GPUs).
 * Exits 0 when every token came back within bf16 rounding. sy-bench layer times the same step with its
 * communication beside the GEMMs (two micro-batches, a CUDA graph).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
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

/* Buffers: device memory on the GPU, host memory on the host backend (which reads and writes what it is given). */
static int alloc(int host, void **p, size_t bytes) {
  if (host) return (*p = malloc(bytes)) == NULL;
  return cudaMalloc(p, bytes) != cudaSuccess;
}
/* A copy from pageable host memory may return before the DMA lands, and the work below runs on a non-blocking
 * stream, which does not wait for cudaMemcpy's legacy stream: the uploads are complete when this returns. */
static int copy(int host, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  if (host) return memcpy(dst, src, bytes), 0;
  return cudaMemcpy(dst, src, bytes, kind) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess;
}

/* The host backend's expert: y = x W on n rows (row-major, bf16 in and out, fp32 sums), as the cuBLAS call below. */
static int gemm_host(const uint16_t *W, const uint16_t *x, uint16_t *y, int n, int H) {
  float *acc = malloc((size_t)H * sizeof *acc);
  if (!acc) return 1;
  for (int r = 0; r < n; r++) {
    for (int j = 0; j < H; j++) acc[j] = 0;
    for (int h = 0; h < H; h++) {
      const float a = bf16_to_float(x[(size_t)r * H + h]);
      if (a == 0) continue;
      for (int j = 0; j < H; j++) acc[j] += a * bf16_to_float(W[(size_t)h * H + j]);
    }
    for (int j = 0; j < H; j++) y[(size_t)r * H + j] = float_to_bf16(acc[j]);
  }
  free(acc);
  return 0;
}

/* One rank's part; host: the host backend's rank (a thread). */
static int run(sy_comm_t comm, int host) {
  int rank, world;
  CHECK(sy_comm_rank(comm, &rank));
  CHECK(sy_comm_size(comm, &world));
  cudaStream_t stream = NULL; /* the host backend's calls complete before they return: no stream */
  if (!host) CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  sy_moe_ht_config_t config = SY_MOE_HT_CONFIG_INIT;
  config.max_tokens = host ? 128 : 512, config.hidden = host ? 256 : 1024, config.top_k = 4;
  config.num_experts = 8 * world, config.wire = SY_MOE_WIRE_BF16, config.expert_alignment = 16;
  CHECK(sy_moe_ht_recv_bytes(comm, &config, -1, &config.recv_arena_bytes)); /* room for one recv of max_rows */
  sy_moe_ht_t moe;
  CHECK(sy_moe_ht_create(comm, &config, &moe));
  sy_moe_ht_sizes_t sizes = SY_MOE_HT_SIZES_INIT;
  CHECK(sy_moe_ht_sizes(moe, &sizes));
  const int T = config.max_tokens, H = config.hidden, K = config.top_k, L = sizes.local_experts;

  /* This rank's tokens, their top-k distinct experts and weights 1/k. */
  uint16_t *x_h = malloc((size_t)T * H * 2), *out_h = malloc((size_t)T * H * 2), *W_h = calloc((size_t)H * H, 2);
  int32_t *ids_h = malloc((size_t)T * K * 4), *counts = malloc((2 * (size_t)L + 1) * 4);
  float *w_h = malloc((size_t)T * K * 4);
  if (!x_h || !out_h || !W_h || !ids_h || !counts || !w_h) return fprintf(stderr, "out of host memory\n"), 1;
  for (int t = 0; t < T; t++) {
    for (int h = 0; h < H; h++) x_h[(size_t)t * H + h] = float_to_bf16((float)((rank * 31 + t * 7 + h) % 61) / 61);
    for (int k = 0; k < K; k++) ids_h[t * K + k] = (rank + t + k * 3) % config.num_experts, w_h[t * K + k] = 1.0f / K;
  }
  void *x, *ids, *w, *handle, *out, *y;
  CHECK(alloc(host, &x, (size_t)T * H * 2));
  CHECK(alloc(host, &ids, (size_t)T * K * 4));
  CHECK(alloc(host, &w, (size_t)T * K * 4));
  CHECK(alloc(host, &out, (size_t)T * H * 2));
  CHECK(alloc(host, &handle, sizes.handle_bytes));
  CHECK(copy(host, x, x_h, (size_t)T * H * 2, cudaMemcpyHostToDevice));
  CHECK(copy(host, ids, ids_h, (size_t)T * K * 4, cudaMemcpyHostToDevice));
  CHECK(copy(host, w, w_h, (size_t)T * K * 4, cudaMemcpyHostToDevice));

  /* 1. The layout, with the exact counts on the host: each local expert's rows and first row. */
  CHECK(sy_moe_ht_layout(moe, ids, SY_INDEX_INT32, T, handle, counts, stream));
  const int rows = counts[2 * L];
  sy_moe_ht_recv_t recv = {0}; /* tokens, src, weights, expert offsets and counts for those rows, from the arena */
  CHECK(sy_moe_ht_recv_alloc(moe, NULL, rows, 0, &recv, stream));
  CHECK(alloc(host, &y, (size_t)(rows ? rows : 1) * H * 2));

  /* 2. The dispatch: expert e's rows at [offsets[e], offsets[e] + counts[e]), in (source rank, token) order. */
  CHECK(sy_moe_ht_dispatch(moe, handle, T, x, NULL, w, &recv, stream));

  /* 3. The experts: y_e = x_e W_e, one GEMM per local expert on its rows (cuBLAS, row-major: y^T = W^T x^T; on the
   *    host backend C loops). */
  cublasHandle_t blas = NULL;
  if (!host) {
    CHECK(cublasCreate(&blas));
    CHECK(cublasSetStream(blas, stream));
  }
  void *W;
  CHECK(alloc(host, &W, (size_t)L * H * H * 2));
  for (int e = 0; e < L; e++) {
    const float s = 1.0f + (float)(rank * L + e) / 8;
    for (int h = 0; h < H; h++) W_h[(size_t)h * H + h] = float_to_bf16(s), W_h[(size_t)h * H + (h + 1) % H] = 0x3e80;
    CHECK(copy(host, (char *)W + (size_t)e * H * H * 2, W_h, (size_t)H * H * 2, cudaMemcpyHostToDevice));
  }
  const float one = 1.0f, zero = 0.0f;
  for (int e = 0; e < L; e++) {
    const int n = counts[e], first = counts[L + e];
    if (n == 0) continue;
    const uint16_t *We = (const uint16_t *)((char *)W + (size_t)e * H * H * 2);
    const uint16_t *xe = (const uint16_t *)((char *)recv.tokens + (size_t)first * H * 2);
    uint16_t *ye = (uint16_t *)((char *)y + (size_t)first * H * 2);
    if (host) CHECK(gemm_host(We, xe, ye, n, H));
    else
      CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, H, n, H, &one, We, CUDA_R_16BF, H, xe, CUDA_R_16BF, H, &zero,
                         ye, CUDA_R_16BF, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  /* 4. The combine: each token's sum over its experts, weighted by the routing weights the rows carry. */
  CHECK(sy_moe_ht_combine(moe, handle, T, y, &recv, recv.weights, NULL, out, NULL, stream));
  if (!host) CHECK(cudaStreamSynchronize(stream));
  sy_status_t async;
  char detail[256];
  CHECK(sy_comm_async_error(comm, &async, detail, sizeof detail)); /* a timed-out wait would show here */
  if (async != SY_SUCCESS) return fprintf(stderr, "rank %d: %s: %s\n", rank, sy_status_name(async), detail), 1;

  CHECK(copy(host, out_h, out, (size_t)T * H * 2, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int t = 0; t < T; t++) {
    float scale = 0; /* sum_k w_k s_(e_k) */
    for (int k = 0; k < K; k++) scale += w_h[t * K + k] * (1.0f + (float)ids_h[t * K + k] / 8);
    for (int h = 0; h < H; h++) {
      const float want =
          scale * bf16_to_float(x_h[(size_t)t * H + h]) + bf16_to_float(x_h[(size_t)t * H + (h + H - 1) % H]) / 4;
      bad += fabsf(bf16_to_float(out_h[(size_t)t * H + h]) - want) > 0.02f * (fabsf(want) + 0.01f);
    }
  }
  printf("rank %d: %d tokens through %d experts (%d rows here): %s\n", rank, T, config.num_experts, rows,
         bad ? "WRONG" : "ok");

  if (blas) cublasDestroy(blas);
  CHECK(sy_moe_ht_recv_free(moe, NULL, &recv, stream)); /* nothing enqueued uses it any more: synchronised above */
  CHECK(sy_moe_ht_destroy(moe));
  void *bufs[] = {x, ids, w, out, handle, y, W};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) host ? free(bufs[i]) : (void)cudaFree(bufs[i]);
  if (!host) cudaStreamDestroy(stream);
  free(x_h), free(ids_h), free(w_h), free(counts), free(W_h), free(out_h);
  return bad != 0;
}

typedef struct host_rank {
  int rank, world, rc;
  pthread_t thread;
} host_rank_t;

/* A rank of the host backend: its communicator names its rank and world, and the group its threads share. */
static void *host_main(void *arg) {
  host_rank_t *r = arg;
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  config.backend = SY_BACKEND_HOST;
  config.rank = r->rank, config.world_size = r->world, config.host_group = 1;
  sy_comm_t comm;
  r->rc = sy_comm_init(&comm, &config) != SY_SUCCESS;
  if (r->rc) return fprintf(stderr, "rank %d: sy_comm_init: %s\n", r->rank, sy_last_error()), NULL;
  r->rc = run(comm, 1);
  if (sy_comm_destroy(comm) != SY_SUCCESS) r->rc = 1;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--host")) { /* ranks as threads, no GPU needed */
    char *end;
    const long world = strtol(argv[2], &end, 10);
    if (*end || world < 1 || world > 64) return fprintf(stderr, "--host %s: want 1 to 64 ranks\n", argv[2]), 2;
    host_rank_t r[64];
    for (int i = 0; i < world; i++) {
      r[i] = (host_rank_t){i, (int)world, 0, 0};
      if (pthread_create(&r[i].thread, NULL, host_main, &r[i])) return fprintf(stderr, "pthread_create failed\n"), 1;
    }
    int rc = 0;
    for (int i = 0; i < world; i++) pthread_join(r[i].thread, NULL), rc |= r[i].rc;
    return rc;
  }
  if (argc != 1) return fprintf(stderr, "usage: %s [--host RANKS]  (GPUs: under syrun; --host: no GPU)\n", argv[0]), 2;
  sy_comm_t comm;
  if (sy_comm_init(&comm, NULL) != SY_SUCCESS) /* rank and world from the launcher (syrun, torchrun, srun, mpirun) */
    return fprintf(stderr, "%s\n(no GPU here? `%s --host 3` runs the same calls on the host backend)\n",
                   sy_last_error(), argv[0]),
           1;
  const int rc = run(comm, 0);
  CHECK(sy_comm_destroy(comm));
  return rc;
}
