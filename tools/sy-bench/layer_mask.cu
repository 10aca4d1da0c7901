/*
 * layer_mask.cu — sy-bench `layer`'s kernels of its own: the ReLU's gradient mask, d[i] = 0 where the forward's
 * output mid[i] (bf16) is not > 0 (relu(x) > 0 exactly where x > 0); the sum of the expert groups' partial outputs
 * (--split experts); and the experts' weights (layer_weights.h).
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "layer_weights.h" /* and ref/convert.h: sy__bf16_to_float, sy__float_to_bf16 on both sides */

__global__ void layer_relu_mask_kernel(uint16_t *d, const uint16_t *mid, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    if ((mid[i] & 0x8000u) || (mid[i] & 0x7fffu) == 0) d[i] = 0;
}

extern "C" int layer_relu_mask(uint16_t *d, const uint16_t *mid, size_t n, cudaStream_t stream) {
  const unsigned blocks = (unsigned)(n / 256 / 8 + 1 < 4096 ? n / 256 / 8 + 1 : 4096);
  layer_relu_mask_kernel<<<blocks, 256, 0, stream>>>(d, mid, n);
  return cudaGetLastError() != cudaSuccess;
}

#define LAYER_SUM_MAX 8 /* parts layer_sum_parts takes: LAYER_MAX_MB (layer.c checks it) */
struct layer_parts_ptrs {
  const uint16_t *p[LAYER_SUM_MAX];
};

/* Eight elements a thread: out[i] = bf16(sum over the parts in order, fp32). */
__global__ void layer_sum_parts_kernel(uint16_t *out, layer_parts_ptrs parts, int n, size_t count8) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count8; i += (size_t)gridDim.x * blockDim.x) {
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int m = 0; m < n; m++) {
      const uint4 v = ((const uint4 *)parts.p[m])[i];
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; j++) {
        s[2 * j] += sy__bf16_to_float((uint16_t)(w[j] & 0xffffu));
        s[2 * j + 1] += sy__bf16_to_float((uint16_t)(w[j] >> 16));
      }
    }
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; j++)
      w[j] = (uint32_t)sy__float_to_bf16(s[2 * j]) | (uint32_t)sy__float_to_bf16(s[2 * j + 1]) << 16;
    ((uint4 *)out)[i] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

extern "C" int layer_sum_parts(uint16_t *out, uint16_t *const *part, int n, size_t count, cudaStream_t stream) {
  if (n < 1 || n > LAYER_SUM_MAX || count % 8) return 1;
  layer_parts_ptrs ptrs;
  for (int m = 0; m < LAYER_SUM_MAX; m++) ptrs.p[m] = m < n ? part[m] : nullptr;
  const size_t count8 = count / 8;
  const unsigned blocks = (unsigned)(count8 / 256 + 1 < 4096 ? count8 / 256 + 1 : 4096);
  layer_sum_parts_kernel<<<blocks, 256, 0, stream>>>(out, ptrs, n, count8);
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
