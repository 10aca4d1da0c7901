/*
 * test_gpu_peer_store.cu — direct NVLink stores: rank r asks sy_comm_peer_ptr for rank r+1's copy of a
 * 256 MiB symmetric buffer, writes a seeded pattern into it with a plain store kernel, and after a barrier
 * rank r+1 reads its buffer back to the host and checks every byte. Prints the store bandwidth seen.
 */
#include "gpu_test.h"

__host__ __device__ static inline uint8_t pattern(int src, uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)src << 56);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return (uint8_t)((x >> 40) | 1);
}

/* 16 bytes per thread per step, built from the byte pattern. */
__global__ void store_kernel(uint4 *dst, size_t nvec, int src) {
  for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < nvec; v += (size_t)gridDim.x * blockDim.x) {
    uint8_t b[16];
#pragma unroll
    for (int k = 0; k < 16; k++) b[k] = pattern(src, v * 16 + k);
    uint4 out;
    memcpy(&out, b, 16);
    dst[v] = out;
  }
}

int main(void) {
  int rank, world;
  sy_comm_t comm = gt_init("test_gpu_peer_store", &rank, &world);
  const size_t bytes = (size_t)256 << 20;
  uint8_t *buf = NULL;
  GT_OK(sy_mem_alloc(comm, bytes, (void **)&buf));
  GT_CUDA(cudaMemset(buf, 0, bytes));
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  void *peer = NULL;
  GT_OK(sy_comm_peer_ptr(comm, buf, next, &peer));
  if (!peer) {
    GT_FAIL("rank %d is not load/store reachable; this test needs NVLink peers (unset SY_FORCE_PUT)", next);
    return gt_finish("test_gpu_peer_store");
  }
  cudaStream_t stream;
  GT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  GT_CUDA(cudaDeviceSynchronize());
  GT_OK(sy_comm_barrier(comm, stream));
  cudaEvent_t e0, e1;
  GT_CUDA(cudaEventCreate(&e0));
  GT_CUDA(cudaEventCreate(&e1));
  GT_CUDA(cudaEventRecord(e0, stream));
  store_kernel<<<132 * 4, 512, 0, stream>>>((uint4 *)peer, bytes / 16, rank);
  GT_CUDA(cudaGetLastError());
  GT_CUDA(cudaEventRecord(e1, stream));
  GT_OK(sy_comm_barrier(comm, stream));
  GT_CUDA(cudaStreamSynchronize(stream));
  float ms = 0;
  GT_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  uint8_t *host = (uint8_t *)malloc(bytes);
  GT_CUDA(cudaMemcpy(host, buf, bytes, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < bytes; i++) {
    if (host[i] != pattern(prev, i)) {
      if (wrong < 5) GT_FAIL("byte %zu from rank %d is 0x%02x, want 0x%02x", i, prev, host[i], pattern(prev, i));
      wrong++;
    }
  }
  if (wrong) GT_FAIL("%zu of %zu bytes wrong", wrong, bytes);
  printf("[test rank %d] stored 256 MiB into rank %d in %.3f ms (%.1f GB/s, one writer per GPU, all at once)\n", rank,
         next, ms, bytes / (ms * 1e-3) / 1e9);
  sy_status_t async;
  GT_OK(sy_comm_async_error(comm, &async, NULL, 0));
  GT_CHECK(async == SY_SUCCESS);
  free(host);
  GT_OK(sy_mem_free(comm, buf));
  GT_CUDA(cudaStreamDestroy(stream));
  GT_OK(sy_comm_destroy(comm));
  return gt_finish("test_gpu_peer_store");
}
