/*
 * fp8.cuh — bf16 and FP8 values in the kernels: a bf16 half of a 32-bit word as fp32, two fp32 as bf16, and
 * the FP8 E4M3 quantisation of 16 bf16 elements a lane (8 lanes a 128-element group) that the MoE modes share:
 * the same numbers as ref/fp8.h (sy__fp8_scale; the quotient by the scale's reciprocal, or IEEE division where that
 * could differ, then the hardware conversion cvt.rn.satfinite.e4m3x2, which test_gpu_fp8 checks against
 * sy__fp8_e4m3_encode on every fp32 input).
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

/* Where the quotients x / scale go by the scale's reciprocal (ref/fp8.h: sy__fp8_div_recip; the same E4M3 codes
 * as IEEE division) rather than by division, at build time: 1 (the default) every quantisation, 2 only the
 * high-throughput mode's kernel that quantises the tokens ahead of the dispatch (sy_ht_quantise), 0 none; 0 and 2
 * for measuring. Run 38 (4 x H200) measured 1 faster than 0 everywhere (FP8 dispatch -12% at world 4, -18.5% and
 * -9% at world 1 with 16 and 132 SMs), and 2 as 1 at world 4; run 31 had measured a different form, with range
 * checks on every element, slower inside the dispatch kernel (bench/NOTES.md). */
#ifndef SY_FP8_RECIP
#define SY_FP8_RECIP 1
#endif
#if SY_FP8_RECIP < 0 || SY_FP8_RECIP > 2
#error "SY_FP8_RECIP: 0, 1 or 2"
#endif
constexpr bool FP8_RECIP_INLINE = SY_FP8_RECIP == 1; /* quantisations inside the MoE kernels */
constexpr bool FP8_RECIP_AHEAD = SY_FP8_RECIP != 0;  /* sy_ht_quantise */

/* FP8 quantisation of a lane's 16 bf16 elements (a, b), 8 lanes per 128-element group: the group's scale
 * (amax / 448, or its power of two) into *scale and the 16 E4M3 codes. Every lane of the warp must call it (the
 * group's amax by shuffles); lanes with no data pass zeros. RECIP: the quotients by the reciprocal where the scale
 * allows it (above). */
template <bool RECIP = FP8_RECIP_INLINE>
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
  /* q = E4M3(x / scale), the host's numbers: the quotient by the scale's reciprocal where that gives the IEEE
   * division's E4M3 code on every input (ref/fp8.h: sy__fp8_div_recip, three operations an element; checked on
   * every pair by test_gpu_fp8), else IEEE division; then the hardware conversion (cvt.rn.satfinite.e4m3x2, which
   * test_gpu_fp8 checks against sy__fp8_e4m3_encode on every fp32 input). */
  if (RECIP && sy__fp8_recip_ok(scale)) {
    const float r = 1.0f / scale;
#pragma unroll
    for (int i = 0; i < 16; i++) x[i] = sy__fp8_div_recip(x[i], scale, r);
  } else {
#pragma unroll
    for (int i = 0; i < 16; i++) x[i] = __fdiv_rn(x[i], scale);
  }
  uint32_t q[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const __nv_fp8x2_storage_t lo =
        __nv_cvt_float2_to_fp8x2(make_float2(x[4 * i], x[4 * i + 1]), __NV_SATFINITE, __NV_E4M3);
    const __nv_fp8x2_storage_t hi =
        __nv_cvt_float2_to_fp8x2(make_float2(x[4 * i + 2], x[4 * i + 3]), __NV_SATFINITE, __NV_E4M3);
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
