/*
 * test_gpu_ring.c — put with signal around the ring: rank r puts a seeded buffer into rank r+1's symmetric
 * buffer and raises its signal (SET to the round number, then ADD 1), r+1 waits for the signal (bounded) and
 * checks every byte against the payload formula. Sizes from 1 byte to 8 MiB, odd ones included.
 */
#include "gpu_test.h"

int main(void) {
  int rank, world;
  sy_comm_t comm = gt_init("test_gpu_ring", &rank, &world);
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  const size_t max_bytes = 8u << 20;
  static const size_t sizes[] = {1, 3, 16, 100, 4096, 65537, 1u << 20, 8u << 20};
  const int nsizes = (int)(sizeof sizes / sizeof sizes[0]);

  uint8_t *dst = NULL;
  uint64_t *signal = NULL;
  GT_OK(sy_mem_alloc(comm, max_bytes, (void **)&dst));
  GT_OK(sy_mem_alloc(comm, 2 * sizeof(uint64_t), (void **)&signal));
  GT_CUDA(cudaMemset(signal, 0, 2 * sizeof(uint64_t)));
  uint8_t *src = NULL;
  GT_CUDA(cudaMalloc((void **)&src, max_bytes));
  uint8_t *host = (uint8_t *)malloc(max_bytes), *want = (uint8_t *)malloc(max_bytes);
  cudaStream_t stream;
  GT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  GT_CUDA(cudaDeviceSynchronize());
  GT_OK(sy_comm_barrier(comm, stream));

  uint64_t adds = 0;
  for (int round = 1; round <= 3 * nsizes; round++) {
    const size_t bytes = sizes[(round - 1) % nsizes];
    for (size_t i = 0; i < bytes; i++) host[i] = wl_payload_byte((uint64_t)round, rank, next, i);
    GT_CUDA(cudaMemcpyAsync(src, host, bytes, cudaMemcpyHostToDevice, stream));
    /* signal[0]: SET to the round; signal[1]: ADD 1 (a second, empty put) */
    GT_OK(sy_put_signal(comm, dst, src, bytes, &signal[0], SY_SIGNAL_SET, (uint64_t)round, next, stream));
    GT_OK(sy_put_signal(comm, dst, src, 0, &signal[1], SY_SIGNAL_ADD, 1, next, stream));
    adds++;
    GT_OK(sy_signal_wait(comm, &signal[0], (uint64_t)round, stream));
    GT_OK(sy_signal_wait(comm, &signal[1], adds, stream));
    GT_CUDA(cudaMemcpyAsync(host, dst, bytes, cudaMemcpyDeviceToHost, stream));
    GT_CUDA(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < bytes; i++) want[i] = wl_payload_byte((uint64_t)round, prev, rank, i);
    char what[64];
    snprintf(what, sizeof what, "round %d (%zu bytes from rank %d)", round, bytes, prev);
    gt_compare(what, host, want, bytes);
    /* nobody overwrites dst before everyone has checked it */
    GT_OK(sy_comm_barrier(comm, stream));
  }
  uint64_t sig[2];
  GT_CUDA(cudaMemcpy(sig, signal, sizeof sig, cudaMemcpyDeviceToHost));
  GT_CHECK(sig[0] == (uint64_t)(3 * nsizes) && sig[1] == adds);
  sy_status_t async;
  GT_OK(sy_comm_async_error(comm, &async, NULL, 0));
  GT_CHECK(async == SY_SUCCESS);
  GT_CUDA(cudaFree(src));
  GT_OK(sy_mem_free(comm, dst));
  GT_OK(sy_mem_free(comm, signal));
  GT_CUDA(cudaStreamDestroy(stream));
  GT_OK(sy_comm_destroy(comm));
  free(host);
  free(want);
  return gt_finish("test_gpu_ring");
}
