/*
 * test_gpu_alltoall.c — sy_alltoallv / sy_alltoall on the GPUs against the CPU reference (the host backend,
 * run in this process on threads with the same inputs), bit for bit, receive gaps included:
 *  1. random rounds: uneven sizes (0, odd, 16-aligned, up to 4 MiB), misaligned send offsets, receive ranges
 *     scattered in random order with gaps; recv poisoned first so unwritten bytes show;
 *  2. 200 back-to-back rounds of changing small plans with no barrier or host sync in between;
 *  3. equal splits (sy_alltoall);
 *  4. one all-to-all captured in a CUDA graph and replayed 100 times with fresh input each time;
 *  5. a pair whose byte counts disagree: both ends report SY_ERR_MISMATCH, nobody hangs.
 * Run with SY_FORCE_PUT=1 as well, so the NVSHMEM put path is tested on one node.
 */
#include "gpu_test.h"

#define POISON 0xEE

typedef struct {
  int world;
  size_t send_cap, recv_cap;
  size_t *send_bytes, *send_offsets; /* [s * world + p] */
  size_t *recv_offsets;              /* [p * world + s]: where p puts s's bytes */
  uint64_t seed;
  int me;
  uint8_t *want; /* the oracle's recv of rank `me` */
} plan_t;

static void plan_alloc(plan_t *pl, int world, size_t send_cap, size_t recv_cap) {
  memset(pl, 0, sizeof *pl);
  pl->world = world;
  pl->send_cap = send_cap;
  pl->recv_cap = recv_cap;
  pl->send_bytes = (size_t *)calloc((size_t)world * world, sizeof(size_t));
  pl->send_offsets = (size_t *)calloc((size_t)world * world, sizeof(size_t));
  pl->recv_offsets = (size_t *)calloc((size_t)world * world, sizeof(size_t));
  pl->want = (uint8_t *)malloc(recv_cap);
}

/* Seeded plan, identical on every rank. max_pair bounds one pair's bytes. */
static void plan_random(plan_t *pl, uint64_t seed, size_t max_pair) {
  const int W = pl->world;
  uint64_t rng = seed;
  pl->seed = seed;
  for (int s = 0; s < W; s++) {
    size_t off = wl_rand(&rng) % 40;
    for (int p = 0; p < W; p++) {
      uint64_t kind = wl_rand(&rng) % 6;
      size_t b = kind == 0   ? 0
                 : kind == 1 ? 1 + wl_rand(&rng) % 100
                 : kind == 2 ? 16 * (1 + wl_rand(&rng) % 4096)
                             : wl_rand(&rng) % (max_pair + 1);
      if (b > max_pair) b = max_pair;
      pl->send_bytes[s * W + p] = b;
      pl->send_offsets[s * W + p] = off;
      off += b + wl_rand(&rng) % 33;
    }
    if (off > pl->send_cap) { /* keep inside the send buffer: shrink this row */
      for (int p = 0; p < W; p++) pl->send_bytes[s * W + p] /= 2, pl->send_offsets[s * W + p] /= 2;
    }
  }
  for (int p = 0; p < W; p++) { /* receiver p: sources in a random order, with gaps */
    int *order = (int *)malloc(sizeof(int) * W);
    for (int s = 0; s < W; s++) order[s] = s;
    for (int s = W - 1; s > 0; s--) {
      int k = (int)(wl_rand(&rng) % (uint64_t)(s + 1)), t = order[s];
      order[s] = order[k];
      order[k] = t;
    }
    size_t off = wl_rand(&rng) % 64;
    for (int i = 0; i < W; i++) {
      int s = order[i];
      pl->recv_offsets[p * W + s] = off;
      off += pl->send_bytes[s * W + p] + wl_rand(&rng) % 48;
    }
    if (off > pl->recv_cap) GT_FAIL("plan exceeds recv_cap (%zu > %zu)", off, pl->recv_cap);
    free(order);
  }
}

static void fill_send(const plan_t *pl, int s, uint8_t *host_send) {
  const int W = pl->world;
  memset(host_send, 0x5A, pl->send_cap);
  for (int p = 0; p < W; p++)
    for (size_t i = 0; i < pl->send_bytes[s * W + p]; i++)
      host_send[pl->send_offsets[s * W + p] + i] = wl_payload_byte(pl->seed, s, p, i);
}

/* Per-rank argument arrays of rank r. */
static void rank_args(const plan_t *pl, int r, size_t *sb, size_t *so, size_t *rb, size_t *ro) {
  const int W = pl->world;
  for (int p = 0; p < W; p++) {
    sb[p] = pl->send_bytes[r * W + p];
    so[p] = pl->send_offsets[r * W + p];
    rb[p] = pl->send_bytes[p * W + r];
    ro[p] = pl->recv_offsets[r * W + p];
  }
}

/* The oracle: the host backend runs the same plan; rank `me`'s recv is kept in pl->want. */
static void oracle_rank(int r, sy_comm_t comm, void *arg) {
  plan_t *pl = (plan_t *)arg;
  const int W = pl->world;
  uint8_t *send = (uint8_t *)malloc(pl->send_cap), *recv = NULL;
  size_t *a = (size_t *)malloc(4 * sizeof(size_t) * W);
  fill_send(pl, r, send);
  rank_args(pl, r, a, a + W, a + 2 * W, a + 3 * W);
  if (sy_mem_alloc(comm, pl->recv_cap, (void **)&recv) != SY_SUCCESS) {
    GT_FAIL("oracle: sy_mem_alloc");
  } else {
    memset(recv, POISON, pl->recv_cap);
    sy_status_t st = sy_alltoallv(comm, send, a, a + W, recv, a + 2 * W, a + 3 * W, NULL);
    if (st != SY_SUCCESS) GT_FAIL("oracle alltoallv: %s", sy_status_name(st));
    if (r == pl->me) memcpy(pl->want, recv, pl->recv_cap);
    sy_mem_free(comm, recv);
  }
  free(send);
  free(a);
}

int main(void) {
  int rank, W;
  sy_comm_t comm = gt_init("test_gpu_alltoall", &rank, &W);
  const size_t max_pair = 4u << 20;
  const size_t send_cap = (size_t)W * (max_pair + 64) + 64, recv_cap = send_cap + 64 * (size_t)W;
  uint8_t *send = NULL, *recv = NULL;
  GT_CUDA(cudaMalloc((void **)&send, send_cap));
  GT_OK(sy_mem_alloc(comm, recv_cap, (void **)&recv));
  uint8_t *host_send = (uint8_t *)malloc(send_cap), *got = (uint8_t *)malloc(recv_cap);
  size_t *a = (size_t *)malloc(4 * sizeof(size_t) * W);
  cudaStream_t stream;
  GT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  plan_t pl;
  plan_alloc(&pl, W, send_cap, recv_cap);
  pl.me = rank;
  char what[128];

  /* 1. random rounds, each checked against the oracle */
  for (int round = 0; round < 12; round++) {
    plan_random(&pl, 1000 + (uint64_t)round, round < 4 ? 4096 : max_pair);
    fill_send(&pl, rank, host_send);
    rank_args(&pl, rank, a, a + W, a + 2 * W, a + 3 * W);
    GT_CUDA(cudaMemcpyAsync(send, host_send, send_cap, cudaMemcpyHostToDevice, stream));
    GT_CUDA(cudaMemsetAsync(recv, POISON, recv_cap, stream));
    GT_OK(sy_alltoallv(comm, send, a, a + W, recv, a + 2 * W, a + 3 * W, stream));
    GT_CUDA(cudaMemcpyAsync(got, recv, recv_cap, cudaMemcpyDeviceToHost, stream));
    GT_CUDA(cudaStreamSynchronize(stream));
    gt_run_host(W, oracle_rank, &pl);
    snprintf(what, sizeof what, "random round %d", round);
    gt_compare(what, got, pl.want, recv_cap);
  }

  /* 2. back to back: 200 small changing plans, results copied out in stream order, checked at the end */
  {
    const int rounds = 200;
    const size_t small = 2048, cap = (size_t)W * (small + 128) + 128;
    plan_t bb;
    plan_alloc(&bb, W, cap, cap);
    bb.me = rank;
    uint8_t *results = NULL, *sends = NULL, *dsends = NULL;
    GT_CUDA(cudaMallocHost((void **)&results, (size_t)rounds * cap));
    sends = (uint8_t *)malloc((size_t)rounds * cap);
    GT_CUDA(cudaMalloc((void **)&dsends, (size_t)rounds * cap));
    size_t *args = (size_t *)malloc((size_t)rounds * 4 * W * sizeof(size_t));
    for (int i = 0; i < rounds; i++) {
      plan_random(&bb, 5000 + (uint64_t)i, small);
      fill_send(&bb, rank, sends + (size_t)i * cap);
      rank_args(&bb, rank, args + (size_t)i * 4 * W, args + (size_t)i * 4 * W + W, args + (size_t)i * 4 * W + 2 * W,
                args + (size_t)i * 4 * W + 3 * W);
    }
    GT_CUDA(cudaMemcpyAsync(dsends, sends, (size_t)rounds * cap, cudaMemcpyHostToDevice, stream));
    for (int i = 0; i < rounds; i++) {
      size_t *x = args + (size_t)i * 4 * W;
      GT_CUDA(cudaMemsetAsync(recv, POISON, cap, stream));
      GT_OK(sy_alltoallv(comm, dsends + (size_t)i * cap, x, x + W, recv, x + 2 * W, x + 3 * W, stream));
      GT_CUDA(cudaMemcpyAsync(results + (size_t)i * cap, recv, cap, cudaMemcpyDeviceToHost, stream));
    }
    GT_CUDA(cudaStreamSynchronize(stream));
    size_t wrong = 0;
    for (int i = 0; i < rounds && wrong == 0; i++) {
      plan_random(&bb, 5000 + (uint64_t)i, small);
      gt_run_host(W, oracle_rank, &bb);
      snprintf(what, sizeof what, "back-to-back round %d", i);
      wrong += gt_compare(what, results + (size_t)i * cap, bb.want, cap);
    }
    cudaFreeHost(results);
    cudaFree(dsends);
    free(sends);
    free(args);
  }

  /* 3. equal splits */
  static const size_t per_rank[] = {1, 1000, 16, 1u << 20};
  for (int k = 0; k < 4; k++) {
    const size_t b = per_rank[k];
    for (int p = 0; p < W; p++)
      for (size_t i = 0; i < b; i++) host_send[p * b + i] = wl_payload_byte(77 + (uint64_t)k, rank, p, i);
    GT_CUDA(cudaMemcpyAsync(send, host_send, b * W, cudaMemcpyHostToDevice, stream));
    GT_CUDA(cudaMemsetAsync(recv, POISON, b * W + 64, stream));
    GT_OK(sy_alltoall(comm, send, recv, b, stream));
    GT_CUDA(cudaMemcpyAsync(got, recv, b * W + 64, cudaMemcpyDeviceToHost, stream));
    GT_CUDA(cudaStreamSynchronize(stream));
    for (int s = 0; s < W; s++)
      for (size_t i = 0; i < b; i++) pl.want[s * b + i] = wl_payload_byte(77 + (uint64_t)k, s, rank, i);
    memset(pl.want + b * W, POISON, 64);
    snprintf(what, sizeof what, "sy_alltoall %zu bytes per rank", b);
    gt_compare(what, got, pl.want, b * W + 64);
  }

  /* 4. graph capture once, replay with fresh data */
  {
    const size_t b = 65536 + 48;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    GT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    GT_OK(sy_alltoall(comm, send, recv, b, stream));
    GT_CUDA(cudaStreamEndCapture(stream, &graph));
    GT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    size_t wrong = 0;
    for (int rep = 0; rep < 100 && wrong == 0; rep++) {
      for (int p = 0; p < W; p++)
        for (size_t i = 0; i < b; i++) host_send[p * b + i] = wl_payload_byte(9000 + (uint64_t)rep, rank, p, i);
      GT_CUDA(cudaMemcpyAsync(send, host_send, b * W, cudaMemcpyHostToDevice, stream));
      GT_CUDA(cudaGraphLaunch(exec, stream));
      GT_CUDA(cudaMemcpyAsync(got, recv, b * W, cudaMemcpyDeviceToHost, stream));
      GT_CUDA(cudaStreamSynchronize(stream));
      for (int s = 0; s < W; s++)
        for (size_t i = 0; i < b; i++) pl.want[s * b + i] = wl_payload_byte(9000 + (uint64_t)rep, s, rank, i);
      snprintf(what, sizeof what, "graph replay %d", rep);
      wrong += gt_compare(what, got, pl.want, b * W);
    }
    GT_CUDA(cudaGraphExecDestroy(exec));
    GT_CUDA(cudaGraphDestroy(graph));
  }

  sy_status_t async = SY_ERR_INTERNAL;
  char detail[256];
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  if (async != SY_SUCCESS) GT_FAIL("async error before the mismatch case: %s: %s", sy_status_name(async), detail);

  /* 5. rank 0 sends 10 bytes to rank 1, which expects 12: both report, nobody hangs */
  if (W >= 2) {
    for (int p = 0; p < W; p++) a[p] = 8, a[W + p] = 16 * (size_t)p, a[2 * W + p] = 8, a[3 * W + p] = 16 * (size_t)p;
    if (rank == 0) a[1] = 10;
    if (rank == 1) a[2 * W + 0] = 12;
    GT_OK(sy_alltoallv(comm, send, a, a + W, recv, a + 2 * W, a + 3 * W, stream));
    GT_CUDA(cudaStreamSynchronize(stream));
    GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
    if (rank <= 1) {
      if (async != SY_ERR_MISMATCH)
        GT_FAIL("mismatched pair: async error %s, want SY_ERR_MISMATCH", sy_status_name(async));
      else printf("[test rank %d] mismatch reported: %s\n", rank, detail);
    } else if (async != SY_SUCCESS) {
      GT_FAIL("rank %d is not part of the mismatch but reports %s", rank, sy_status_name(async));
    }
  }
  GT_CUDA(cudaStreamDestroy(stream));
  GT_CUDA(cudaFree(send));
  GT_OK(sy_comm_destroy(comm));
  free(host_send);
  free(got);
  free(a);
  return gt_finish("test_gpu_alltoall");
}
