/*
 * layer_mask.cu — sy-bench `layer`'s kernels of its own: the ReLU's gradient mask, d[i] = 0 where the forward's
 * output mid[i] (bf16) is not > 0 (relu(x) > 0 exactly where x > 0); and the experts' weights (layer_weights.h).
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "layer_weights.h"

__global__ void layer_relu_mask_kernel(uint16_t *d, const uint16_t *mid, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if ((mid[i] & 0x8000u) || (mid[i] & 0x7fffu) == 0) d[i] = 0;
}

extern "C" int layer_relu_mask(uint16_t *d, const uint16_t *mid, size_t n, cudaStream_t stream) {
  const unsigned blocks = (unsigned)(n / 256 / 8 + 1 < 4096 ? n / 256 / 8 + 1 : 4096);
  layer_relu_mask_kernel<<<blocks, 256, 0, stream>>>(d, mid, n);
  return cudaGetLastError() != cudaSuccess;
}

__global__ void layer_fill_weights_kernel(uint16_t *w, uint32_t seed, int first_expert, int experts, size_t per,
                                          float scale) {
  const size_t n = (size_t)experts * per;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    w[i] = layer_weight(seed, (uint32_t)(first_expert + (int)(i / per)), i % per, scale);
}

extern "C" int layer_fill_weights(uint16_t *w, uint32_t seed, int first_expert, int experts, size_t per, float scale,
                                  cudaStream_t stream) {
  layer_fill_weights_kernel<<<4096, 256, 0, stream>>>(w, seed, first_expert, experts, per, scale);
  return cudaGetLastError() != cudaSuccess || cudaStreamSynchronize(stream) != cudaSuccess;
}
