/*
 * fp8.cuh — bf16 and FP8 values in the kernels: a bf16 half of a 32-bit word as fp32, two fp32 as bf16, and
 * the FP8 E4M3 quantisation of 16 bf16 elements a lane (8 lanes a 128-element group) that the MoE modes share:
 * the same numbers as ref/fp8.h (sy__fp8_scale; IEEE division, then the hardware conversion cvt.rn.satfinite.e4m3x2,
 * which test_gpu_fp8 checks against sy__fp8_e4m3_encode on every fp32 input).
 */
#ifndef SY_CUDA_FP8_CUH
#define SY_CUDA_FP8_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "ref/fp8.h"

namespace sy {

__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

/* Two fp32 as bf16 (lo in the low half): the hardware's round to nearest even, a NaN as the canonical 0x7FFF
 * (ref/convert.h: sy__float_to_bf16, bit for bit). */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
         ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}

/* FP8 quantisation of a lane's 16 bf16 elements (a, b), 8 lanes per 128-element group: the group's scale
 * (amax / 448, or its power of two) into *scale and the 16 E4M3 codes. Every lane of the warp must call it (the
 * group's amax by shuffles); lanes with no data pass zeros. */
__device__ __forceinline__ uint4 quantise16(const uint4 a, const uint4 b, int ue8m0, float *scale_out) {
  const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  float x[16];
#pragma unroll
  for (int i = 0; i < 8; i++) {
    x[2 * i] = bf16_lo(w[i]);
    x[2 * i + 1] = bf16_hi(w[i]);
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(x[i]));
  amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
  amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 4));
  const float scale = sy__fp8_scale(amax, ue8m0);
  /* q = E4M3(x / scale): IEEE division as on the host, then the hardware conversion (cvt.rn.satfinite.e4m3x2,
   * which test_gpu_fp8 checks against sy__fp8_e4m3_encode on every fp32 input). */
  uint32_t q[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(x[4 * i], scale), __fdiv_rn(x[4 * i + 1], scale)), __NV_SATFINITE, __NV_E4M3);
    const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(x[4 * i + 2], scale), __fdiv_rn(x[4 * i + 3], scale)), __NV_SATFINITE, __NV_E4M3);
    q[i] = (uint32_t)lo | (uint32_t)hi << 16;
  }
  *scale_out = scale;
  return make_uint4(q[0], q[1], q[2], q[3]);
}

/* Vector v (16 elements) of a bf16 token, loaded (where active) and quantised: quantise16's contract. */
__device__ __forceinline__ uint4 load_quantise16(const uint16_t *tok, int v, bool active, int ue8m0, float *scale) {
  uint4 a = make_uint4(0, 0, 0, 0), b = make_uint4(0, 0, 0, 0);
  if (active) {
    a = __ldg((const uint4 *)(tok + (uint64_t)v * 16));
    b = __ldg((const uint4 *)(tok + (uint64_t)v * 16 + 8));
  }
  return quantise16(a, b, ue8m0, scale);
}

} // namespace sy

#endif
