/*
 * moe_ll.c — the MoE low-latency dispatch and combine from a user's side, as in the README: every rank sends
 * its tokens to their top-k experts, the "experts" return their inputs unchanged, and the combine's weighted
 * sum (weights summing to 1) gives each token back. Run it on GPUs: `build/bin/syrun -n 2 build/bin/sy-example-moe`
 * (ranks may share a GPU: `--gpus 0,0`); without a GPU, `build/bin/sy-example-moe --host 4` runs the same calls on
 * the host backend, 4 ranks as threads of this process, with host memory for every buffer. Exits 0 when every
 * token came back within bf16 rounding.
 */
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

/* Buffers: device memory on the GPU, host memory on the host backend (which reads and writes what it is given). */
static int alloc(int host, void **p, size_t bytes) {
  if (host) return (*p = malloc(bytes)) == NULL;
  return cudaMalloc(p, bytes) != cudaSuccess;
}
/* A copy from pageable host memory may return before the DMA lands, and the calls below run on a non-blocking
 * stream, which does not wait for cudaMemcpy's legacy stream: the uploads are complete when this returns. */
static int copy(int host, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  if (host) return memcpy(dst, src, bytes), 0;
  return cudaMemcpy(dst, src, bytes, kind) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess;
}

/* One rank's part; host: the host backend's rank (a thread). */
static int run(sy_comm_t comm, int host) {
  int rank, world;
  CHECK(sy_comm_rank(comm, &rank));
  CHECK(sy_comm_size(comm, &world));

  sy_moe_config_t config = SY_MOE_CONFIG_INIT;
  config.max_tokens = 64, config.hidden = 1024, config.top_k = 4, config.num_experts = 8 * world;
  config.wire = SY_MOE_WIRE_BF16;
  sy_moe_t moe;
  CHECK(sy_moe_create(comm, &config, &moe));
  const int T = config.max_tokens, H = config.hidden, K = config.top_k;
  sy_moe_recv_sizes_t sizes = SY_MOE_RECV_SIZES_INIT; /* what the dispatch writes here, buffer by buffer */
  CHECK(sy_moe_recv_sizes(moe, &sizes));

  /* This rank's tokens (bf16), their top-k distinct experts and weights 1/k. */
  uint16_t *tokens_h = malloc((size_t)T * H * 2);
  int32_t *ids_h = malloc((size_t)T * K * 4);
  float *weights_h = malloc((size_t)T * K * 4);
  for (int t = 0; t < T; t++) {
    for (int h = 0; h < H; h++) tokens_h[(size_t)t * H + h] = (uint16_t)(0x3f80 + ((rank * 31 + t * 7 + h) & 0x7f));
    for (int k = 0; k < K; k++) {
      ids_h[t * K + k] = (rank + t + k * 5) % config.num_experts;
      weights_h[t * K + k] = 1.0f / K;
    }
  }
  void *tokens, *ids, *out;
  float *weights;
  sy_moe_recv_t recv = {0};
  CHECK(alloc(host, &tokens, (size_t)T * H * 2));
  CHECK(alloc(host, &ids, (size_t)T * K * 4));
  CHECK(alloc(host, (void **)&weights, (size_t)T * K * 4));
  CHECK(alloc(host, &out, (size_t)T * H * 2));
  CHECK(alloc(host, &recv.tokens, sizes.tokens_bytes)); /* [L][S][hidden] bf16; the BF16 wire has no scales */
  CHECK(alloc(host, (void **)&recv.src, sizes.src_bytes));
  CHECK(alloc(host, (void **)&recv.expert_counts, sizes.expert_counts_bytes));
  CHECK(alloc(host, (void **)&recv.rank_counts, sizes.rank_counts_bytes));
  CHECK(copy(host, tokens, tokens_h, (size_t)T * H * 2, cudaMemcpyHostToDevice));
  CHECK(copy(host, ids, ids_h, (size_t)T * K * 4, cudaMemcpyHostToDevice));
  CHECK(copy(host, weights, weights_h, (size_t)T * K * 4, cudaMemcpyHostToDevice));
  cudaStream_t stream = NULL; /* the host backend's calls complete before they return: no stream */
  if (!host) CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  /* Dispatch: every token lands in each of its experts' buffers, expert-major. The experts would run their
   * GEMMs on recv.tokens here (expert_counts[e] rows each); these return their inputs, so expert_out = recv.tokens. */
  CHECK(sy_moe_dispatch(moe, tokens, T, ids, SY_INDEX_INT32, weights, &recv, stream));
  CHECK(sy_moe_combine(moe, recv.tokens, ids, SY_INDEX_INT32, weights, T, out, stream));
  if (!host) CHECK(cudaStreamSynchronize(stream));
  sy_status_t async;
  char detail[256];
  CHECK(sy_comm_async_error(comm, &async, detail, sizeof detail)); /* a timed-out wait would show here */
  if (async != SY_SUCCESS) return fprintf(stderr, "rank %d: %s: %s\n", rank, sy_status_name(async), detail), 1;

  uint16_t *out_h = malloc((size_t)T * H * 2);
  CHECK(copy(host, out_h, out, (size_t)T * H * 2, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (size_t i = 0; i < (size_t)T * H; i++) {
    const double a = bf16_to_float(tokens_h[i]), b = bf16_to_float(out_h[i]);
    if (fabs(a - b) / fabs(a) > worst) worst = fabs(a - b) / fabs(a);
  }
  printf("rank %d of %d: %d tokens to %d experts and back, largest relative difference %.2g\n", rank, world, T,
         config.num_experts, worst);
  CHECK(sy_moe_destroy(moe));
  void *bufs[] = {tokens, ids, weights, out, recv.tokens, recv.src, recv.expert_counts, recv.rank_counts};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) host ? free(bufs[i]) : (void)cudaFree(bufs[i]);
  if (!host) cudaStreamDestroy(stream);
  free(tokens_h), free(ids_h), free(weights_h), free(out_h);
  return worst <= 1.0 / 64 ? 0 : 1; /* bf16 keeps 8 significant bits; the partials and their sum round twice */
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
    const int world = atoi(argv[2]);
    if (world < 1 || world > 64) return fprintf(stderr, "--host %s: want 1 to 64 ranks\n", argv[2]), 2;
    host_rank_t r[64];
    for (int i = 0; i < world; i++) {
      r[i] = (host_rank_t){i, world, 0, 0};
      if (pthread_create(&r[i].thread, NULL, host_main, &r[i])) return fprintf(stderr, "pthread_create failed\n"), 1;
    }
    int rc = 0;
    for (int i = 0; i < world; i++) pthread_join(r[i].thread, NULL), rc |= r[i].rc;
    return rc;
  }
  if (argc != 1) return fprintf(stderr, "usage: %s [--host RANKS]  (GPUs: under syrun; --host: no GPU)\n", argv[0]), 2;
  sy_comm_t comm;
  if (sy_comm_init(&comm, NULL) != SY_SUCCESS) /* rank and world from the launcher (syrun, torchrun, srun, mpirun) */
    return fprintf(stderr, "%s\n(no GPU here? `%s --host 4` runs the same calls on the host backend)\n",
                   sy_last_error(), argv[0]),
           1;
  const int rc = run(comm, 0);
  CHECK(sy_comm_destroy(comm));
  return rc;
}
