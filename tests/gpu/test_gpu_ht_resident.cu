/*
 * test_gpu_ht_resident.cu — the high-throughput layout's grid barriers when the GPU cannot hold all of its blocks
 * at once (switchyard.h, "SM budget": the layout's blocks must be resident together; src/cuda/moe_ht/layout.cu).
 * Another kernel (the hog, on its own stream) holds every SM but one: a block an SM, each taking all the shared
 * memory an SM has, so no other block fits beside it. The layout (16 blocks of 1,024 threads, one an SM) then has
 * one block resident and the rest queued behind the hog. The communicator's bound on every wait is 1 s.
 *   a. The hog ends after 0.2 s (under the bound): the layout waits, finishes, and the dispatch behind it is right —
 *      each local expert's counts, offsets, and every row's source (rank 0, the token) in token order.
 *   b. The hog ends after 2.5 s (past the bound): the resident block's barrier times out. The stream must end
 *      (no hang: a host deadline of 10 s); the communicator reports SY_ERR_TIMEOUT naming the moe_ht layout; the
 *      blocks that run later fail too, and the layout's handle is left marked unwritten, so the dispatch queued
 *      behind it writes no row (recv.src, filled with a pattern first, unchanged). Later calls return the error;
 *      destroy succeeds.
 * World 1 only (several ranks sharing the GPU would share its SMs with the hog's other copies); elsewhere it says
 * so and passes.
 */
#include <unistd.h>

#include <vector>

#include "gpu_test.h"

#define HOG_MAX_NS 8000000000ull /* the hog ends by itself after 8 s at the latest */
#define DEADLINE_S 10.0

/* Block 0..n-1: the last to start tells the host; thread 0 then holds its SM until the host's release (or the
 * cap). Its dynamic shared memory (all an SM has) keeps any other block off the SM. */
__global__ void hog(volatile int *release, unsigned *started, volatile int *host_started) {
  if (threadIdx.x != 0) return;
  if (atomicAdd(started, 1u) == gridDim.x - 1) {
    *host_started = 1;
    __threadfence_system();
  }
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (!*release && t - t0 < HOG_MAX_NS);
}

struct hog_state {
  int *release = nullptr, *host_started = nullptr; /* mapped host memory */
  unsigned *started = nullptr;
  cudaStream_t stream = nullptr;
  int smem = 0, blocks = 0;
};

static void hog_setup(hog_state &h) {
  int dev = 0, sms = 0, optin = 0, per_sm = 0;
  GT_CUDA(cudaGetDevice(&dev));
  GT_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  GT_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  GT_CUDA(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  h.smem = optin;
  h.blocks = sms - 1;
  GT_CUDA(cudaFuncSetAttribute(hog, cudaFuncAttributeMaxDynamicSharedMemorySize, h.smem));
  int fit = 0;
  GT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, hog, 32, h.smem));
  if (fit != 1) GT_FAIL("the hog fits %d blocks an SM (want 1: %d of %d bytes of shared memory)", fit, optin, per_sm);
  GT_CUDA(cudaHostAlloc((void **)&h.release, 2 * sizeof(int), cudaHostAllocMapped));
  h.host_started = h.release + 1;
  GT_CUDA(cudaMalloc((void **)&h.started, sizeof(unsigned)));
  GT_CUDA(cudaStreamCreateWithFlags(&h.stream, cudaStreamNonBlocking));
}

/* The hog on every SM but one; returns once all its blocks run. */
static void hog_start(hog_state &h) {
  *(volatile int *)h.release = 0;
  *(volatile int *)h.host_started = 0;
  GT_CUDA(cudaMemsetAsync(h.started, 0, sizeof(unsigned), h.stream));
  int *rel = nullptr, *hs = nullptr;
  GT_CUDA(cudaHostGetDevicePointer((void **)&rel, h.release, 0));
  GT_CUDA(cudaHostGetDevicePointer((void **)&hs, h.host_started, 0));
  hog<<<h.blocks, 32, h.smem, h.stream>>>(rel, h.started, hs);
  GT_CUDA(cudaGetLastError());
  const double t0 = gt_now_s();
  while (!*(volatile int *)h.host_started) {
    if (gt_now_s() - t0 > 5.0) {
      GT_FAIL("the hog's %d blocks did not all start within 5 s", h.blocks);
      exit(1);
    }
    usleep(100);
  }
}

/* Polls the stream against the host deadline; returns the seconds it took, or -1 (and fails) past it. */
static double wait_stream(cudaStream_t s, double t0) {
  for (;;) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return gt_now_s() - t0;
    if (e != cudaErrorNotReady) {
      GT_FAIL("stream: %s", cudaGetErrorString(e));
      exit(1);
    }
    if (gt_now_s() - t0 > DEADLINE_S) {
      GT_FAIL("the stream has not ended after %.0f s: a hang", DEADLINE_S);
      return -1;
    }
    usleep(200);
  }
}

int main(void) {
  gt_require_gpu("test_gpu_ht_resident");
  sy_comm_config_t ccfg = SY_COMM_CONFIG_INIT;
  ccfg.timeout_ms = 1000;
  sy_comm_t comm = NULL;
  GT_OK(sy_comm_init(&comm, &ccfg));
  int rank = 0, world = 0;
  GT_OK(sy_comm_rank(comm, &rank));
  GT_OK(sy_comm_size(comm, &world));
  gt_rank = rank;
  if (world != 1) {
    printf("[test rank %d] test_gpu_ht_resident: world 1 only (world %d here): nothing checked\n", rank, world);
    GT_OK(sy_comm_destroy(comm));
    return gt_finish("test_gpu_ht_resident");
  }

  const int T = 4096, H = 256, K = 8, E = 64;
  sy_moe_ht_config_t cfg = SY_MOE_HT_CONFIG_INIT;
  cfg.max_tokens = T, cfg.hidden = H, cfg.top_k = K, cfg.num_experts = E;
  cfg.wire = SY_MOE_WIRE_BF16, cfg.expert_alignment = 1, cfg.num_sms = 16;
  sy_moe_ht_t moe = NULL;
  GT_OK(sy_moe_ht_create(comm, &cfg, &moe));
  sy_moe_ht_sizes_t z = SY_MOE_HT_SIZES_INIT;
  GT_OK(sy_moe_ht_sizes(moe, &z));

  /* ids: K distinct experts a token (t + 7 k + (t / 64) mod E, 7 k distinct mod 64 for k < 8); tokens: bf16 bits */
  std::vector<int32_t> ids((size_t)T * K);
  std::vector<uint16_t> tok((size_t)T * H);
  std::vector<int> count(E, 0), offset(E + 1, 0);
  for (int t = 0; t < T; t++)
    for (int k = 0; k < K; k++) {
      ids[(size_t)t * K + k] = (t + 7 * k + t / 64) % E;
      count[ids[(size_t)t * K + k]]++;
    }
  for (int e = 0; e < E; e++) offset[e + 1] = offset[e] + count[e];
  for (size_t i = 0; i < tok.size(); i++) tok[i] = (uint16_t)(0x3c00 + (i * 2654435761u) % 0x0300);
  const int R = z.max_rows;
  void *dids = NULL, *dtok = NULL, *handle = NULL;
  GT_CUDA(cudaMalloc(&dids, ids.size() * 4));
  GT_CUDA(cudaMalloc(&dtok, tok.size() * 2));
  GT_CUDA(cudaMalloc(&handle, z.handle_bytes));
  GT_CUDA(cudaMemcpy(dids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  GT_CUDA(cudaMemcpy(dtok, tok.data(), tok.size() * 2, cudaMemcpyHostToDevice));
  sy_moe_ht_recv_t recv;
  memset(&recv, 0, sizeof recv);
  GT_CUDA(cudaMalloc(&recv.tokens, (size_t)R * z.row_bytes));
  GT_CUDA(cudaMalloc((void **)&recv.src, (size_t)R * 8));
  GT_CUDA(cudaMalloc((void **)&recv.weights, (size_t)R * 4));
  GT_CUDA(cudaMalloc((void **)&recv.expert_offsets, (E + 1) * 4));
  GT_CUDA(cudaMalloc((void **)&recv.expert_counts, E * 4));
  recv.rows = R;
  cudaStream_t stream;
  GT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  hog_state h;
  hog_setup(h);

  /* a. the hog ends under the bound: the layout finishes, the dispatch is right */
  hog_start(h);
  double t0 = gt_now_s();
  GT_OK(sy_moe_ht_layout(moe, dids, SY_INDEX_INT32, T, handle, NULL, stream));
  GT_OK(sy_moe_ht_dispatch(moe, handle, T, dtok, NULL, NULL, &recv, stream));
  usleep(200000);
  *(volatile int *)h.release = 1;
  const double ta = wait_stream(stream, t0);
  GT_CUDA(cudaStreamSynchronize(h.stream));
  sy_status_t async = SY_SUCCESS;
  char detail[512] = "";
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  if (async != SY_SUCCESS) GT_FAIL("a: the layout behind a hog of 0.2 s: %s: %s", sy_status_name(async), detail);
  std::vector<int32_t> got_counts(E), got_offsets(E + 1), src((size_t)R * 2);
  std::vector<uint16_t> rows((size_t)R * H);
  GT_CUDA(cudaMemcpy(got_counts.data(), recv.expert_counts, E * 4, cudaMemcpyDeviceToHost));
  GT_CUDA(cudaMemcpy(got_offsets.data(), recv.expert_offsets, (E + 1) * 4, cudaMemcpyDeviceToHost));
  GT_CUDA(cudaMemcpy(src.data(), recv.src, src.size() * 4, cudaMemcpyDeviceToHost));
  GT_CUDA(cudaMemcpy(rows.data(), recv.tokens, rows.size() * 2, cudaMemcpyDeviceToHost));
  long long wrong = 0;
  for (int e = 0; e < E; e++) {
    wrong += got_counts[e] != count[e] || got_offsets[e] != offset[e];
    int r = offset[e];
    for (int t = 0; t < T; t++)
      for (int k = 0; k < K; k++)
        if (ids[(size_t)t * K + k] == e) {
          wrong += src[(size_t)r * 2] != 0 || src[(size_t)r * 2 + 1] != t;
          wrong += memcmp(&rows[(size_t)r * H], &tok[(size_t)t * H], (size_t)H * 2) != 0;
          r++;
        }
  }
  wrong += got_offsets[E] != offset[E];
  if (wrong) GT_FAIL("a: %lld wrong counts, offsets or rows after the layout behind a hog of 0.2 s", wrong);
  printf("[test rank %d] a. hog 0.2 s, bound 1 s: layout and dispatch ended after %.3f s, %s\n", rank, ta,
         wrong ? "WRONG" : "every count, offset and row right");

  /* b. the hog ends past the bound: the barrier times out, nothing hangs, the dispatch behind writes no row */
  GT_CUDA(cudaMemset(recv.src, 0x5a, (size_t)R * 8));
  GT_CUDA(cudaDeviceSynchronize());
  hog_start(h);
  t0 = gt_now_s();
  GT_OK(sy_moe_ht_layout(moe, dids, SY_INDEX_INT32, T, handle, NULL, stream));
  GT_OK(sy_moe_ht_dispatch(moe, handle, T, dtok, NULL, NULL, &recv, stream));
  usleep(2500000);
  *(volatile int *)h.release = 1;
  const double tb = wait_stream(stream, t0);
  GT_CUDA(cudaStreamSynchronize(h.stream));
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  if (async != SY_ERR_TIMEOUT || !strstr(detail, "moe_ht layout"))
    GT_FAIL("b: %s: '%s' (want SY_ERR_TIMEOUT naming the moe_ht layout)", sy_status_name(async), detail);
  if (tb > 2.5 + 3.0) GT_FAIL("b: the stream ended after %.3f s (the hog held it 2.5 s, the bound is 1 s)", tb);
  GT_CUDA(cudaMemcpy(src.data(), recv.src, src.size() * 4, cudaMemcpyDeviceToHost));
  long long written = 0;
  for (size_t i = 0; i < src.size(); i++) written += src[i] != 0x5a5a5a5a;
  if (written) GT_FAIL("b: the dispatch behind the failed layout wrote %lld of recv.src's words", written);
  const sy_status_t later = sy_moe_ht_layout(moe, dids, SY_INDEX_INT32, T, handle, NULL, stream);
  if (later != SY_ERR_TIMEOUT) GT_FAIL("b: a layout after the timeout returned %s", sy_status_name(later));
  printf("[test rank %d] b. hog 2.5 s, bound 1 s: the stream ended after %.3f s; %s: %s; recv.src %s\n", rank, tb,
         sy_status_name(async), detail, written ? "WRITTEN" : "untouched");

  GT_CUDA(cudaStreamSynchronize(stream));
  GT_OK(sy_moe_ht_destroy(moe));
  GT_OK(sy_comm_destroy(comm));
  cudaFree(dids), cudaFree(dtok), cudaFree(handle), cudaFree(recv.tokens), cudaFree(recv.src);
  cudaFree(recv.weights), cudaFree(recv.expert_offsets), cudaFree(recv.expert_counts);
  cudaFreeHost(h.release), cudaFree(h.started);
  return gt_finish("test_gpu_ht_resident");
}
