/*
 * layer_mask_absent.c — layer_relu_mask in a build without CUDA kernels (SY_CUDA_KERNELS=OFF): never reached,
 * no communicator has the cuda backend there (layer_mask.cu is the real one).
 */
#ifndef SY_BENCH_CUDA
#include <cuda_runtime_api.h>
#include <stdint.h>

int layer_relu_mask(uint16_t *d, const uint16_t *mid, size_t n, cudaStream_t stream);
int layer_relu_mask(uint16_t *d, const uint16_t *mid, size_t n, cudaStream_t stream) {
  (void)d, (void)mid, (void)n, (void)stream;
  return 1;
}
#endif
