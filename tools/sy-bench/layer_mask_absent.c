/*
 * layer_mask_absent.c — layer_mask.cu's functions in a build without CUDA kernels (SY_CUDA_KERNELS=OFF): never
 * reached, no communicator has the cuda backend there.
 */
#ifndef SY_BENCH_CUDA
#include <cuda_runtime_api.h>
#include <stdint.h>

int layer_relu_mask(uint16_t *d, const uint16_t *mid, size_t n, cudaStream_t stream);
int layer_relu_mask(uint16_t *d, const uint16_t *mid, size_t n, cudaStream_t stream) {
  (void)d, (void)mid, (void)n, (void)stream;
  return 1;
}

int layer_sum_parts(uint16_t *out, uint16_t *const *part, int n, size_t count, cudaStream_t stream);
int layer_sum_parts(uint16_t *out, uint16_t *const *part, int n, size_t count, cudaStream_t stream) {
  (void)out, (void)part, (void)n, (void)count, (void)stream;
  return 1;
}

int layer_fill_weights(uint16_t *w, uint32_t seed, int first_expert, int experts, size_t per, float scale,
                       cudaStream_t stream);
int layer_fill_weights(uint16_t *w, uint32_t seed, int first_expert, int experts, size_t per, float scale,
                       cudaStream_t stream) {
  (void)w, (void)seed, (void)first_expert, (void)experts, (void)per, (void)scale, (void)stream;
  return 1;
}
#endif
