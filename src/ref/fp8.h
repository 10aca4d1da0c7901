/*
 * fp8.h — FP8 E4M3 and the per-128-element quantisation of the MoE dispatch, defined once for the host
 * backend and (as __host__ __device__ inline code) for the kernels, so both round alike. The rules are the
 * ones switchyard.h states: scale = amax / 448 (or 1 for an all-zero group), optionally rounded up to a power
 * of two (UE8M0); q = E4M3(x / scale) with round-to-nearest-even and saturation to +-448; NaN -> 0x7F.
 *
 * The arithmetic is the SY_HD functions below (integer code on the fp32 bits, plus two IEEE fp32 divisions;
 * the kernels quotient x / scale by the scale's reciprocal and two fused multiply-adds instead, sy__fp8_div_recip,
 * which gives the same E4M3 codes); the host backend calls them through the declared sy__fp8_* functions (fp8.c),
 * the kernels inline them. They match only under IEEE fp32 semantics (correctly rounded division, reciprocal and
 * fmaf, no reassociation, subnormals kept): build the kernels without --use_fast_math, -prec-div=false or
 * -ftz=true (nvcc's defaults are right), and the host without -ffast-math.
 */
#ifndef SY_REF_FP8_H
#define SY_REF_FP8_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ref/convert.h"
#include "ref/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SY_FP8_E4M3_MAX 448.0f /* 0x7E = 0 1111 110 = 1.75 * 2^8 */

/* fp32 -> E4M3, rounding the exact fp32 value once, to nearest even. The same as CUDA's
 * __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) (cvt.rn.satfinite.e4m3x2.f32 on sm_89+):
 *   |x| above 464 (the midpoint between 448 and the 480 E4M3 lacks) and +-inf -> +-448 (0x7E / 0xFE); up to
 *   464 the rounding itself gives 448 (the tie at 464 goes to the even 448);
 *   |x| at most 2^-10 (half the smallest subnormal, 2^-9; the tie goes to the even zero) -> +-0, sign kept;
 *   any NaN, either sign -> 0x7F. */
SY_HD uint8_t sy__fp8_e4m3_encode(float x) {
  const uint32_t u = sy__float_to_bits(x);
  const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;
  if (a > 0x43E80000u) return (uint8_t)(sign | 0x7Eu); /* > 464 */
  if (a >= 0x3C800000u) { /* >= 2^-6, normal E4M3: rebias the exponent by 127 - 7, keep 3 of 23 mantissa bits */
    uint32_t h = (a - 0x3C000000u) >> 20;
    const uint32_t rest = a & 0xFFFFFu;
    if (rest > 0x80000u || (rest == 0x80000u && (h & 1u))) h++; /* a carry moves into the exponent */
    return (uint8_t)(sign | h);
  }
  if (a <= 0x3A800000u) return sign; /* <= 2^-10 */
  /* Subnormal E4M3 m * 2^-9: a's value is (mantissa | 1 << 23) * 2^(exponent - 150), exponent 117 .. 120;
   * m = 8 (rounding up from below 2^-6) is the encoding of 2^-6, the smallest normal. */
  const uint32_t exponent = a >> 23;
  const uint32_t mantissa = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 141u - exponent; /* 21 .. 24 */
  uint32_t m = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (m & 1u))) m++;
  return (uint8_t)(sign | m);
}

/* E4M3 -> fp32, exact; 0x7F / 0xFF (NaN) -> 0x7FFFFFFF, the sign dropped (as CUDA's E4M3 -> half -> float). */
SY_HD float sy__fp8_e4m3_decode(uint8_t q) {
  const uint32_t sign = (uint32_t)(q & 0x80u) << 24;
  const uint32_t exponent = (q >> 3) & 0xFu, mantissa = q & 7u;
  if ((q & 0x7Fu) == 0x7Fu) return sy__bits_to_float(0x7FFFFFFFu);
  if (exponent == 0) { /* m * 2^-9: exact in fp32; a zero keeps its sign */
    const float v = (float)mantissa * 0.001953125f;
    return sign ? -v : v;
  }
  return sy__bits_to_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

/* The scale of a group from its amax (>= 0, as max |x|): 1 when amax is 0; else s = amax / 448 in fp32
 * (IEEE division, round to nearest even; for a bf16 amax, s is never 0, subnormal for amax below 448 * 2^-126);
 * ue8m0: the smallest power of two >= s (s itself when it is one, subnormal powers included). Other amax:
 * NaN -> NaN, +inf -> +inf (both modes); a positive amax so small that s rounds to 0 (at most 224 * 2^-149,
 * never a bf16) gives 0, or 2^-149 with ue8m0. */
SY_HD float sy__fp8_scale(float amax, int ue8m0) {
  if (amax == 0.0f) return 1.0f;
  const float s = amax / SY_FP8_E4M3_MAX;
  if (!ue8m0) return s;
  const uint32_t u = sy__float_to_bits(s);
  const uint32_t exponent = (u >> 23) & 0xFFu, mantissa = u & 0x7FFFFFu, sign = u & 0x80000000u;
  if (exponent == 0xFFu) return s; /* NaN, inf */
  if (exponent != 0) return mantissa ? sy__bits_to_float(sign | ((exponent + 1u) << 23)) : s;
  /* Zero or subnormal: the bits are the multiple of 2^-149; round that integer up to a power of two (2^23
   * is the bit pattern of 2^-126, the smallest normal). */
  uint32_t p = 1;
  while (p < mantissa) p <<= 1;
  return sy__bits_to_float(sign | p);
}

/* One element of a group: E4M3(x / scale), IEEE fp32 division. */
SY_HD uint8_t sy__fp8_quantize(float x, float scale) { return sy__fp8_e4m3_encode(x / scale); }

/* x / scale by the scale's reciprocal r = 1 / scale (IEEE, once a group), for the kernels' quantisation
 * (cuda/fp8.cuh: quantise16): q0 = x r, the residual x - q0 scale (exact, by a fused multiply-add), then q0 plus
 * residual x r rounded once, with x's sign (a sum of opposite zeros is +0, and x's sign is the quotient's). Three
 * operations and a sign copy an element where an IEEE division is about eight on sm_90, with a range check and a
 * slow path.
 * Not always the IEEE quotient's bits, but always its E4M3 code, which is all the quantisation keeps: checked on
 * every bf16 x of either sign under the scale (both modes) of every bf16 amax >= |x| whose scale passes
 * sy__fp8_recip_ok — 2,090,062,078 pairs, none differing (tests/gpu/test_gpu_fp8.cu on the GPU's arithmetic; the
 * host's in tests/unit/test_fp8.c, every amax and a sample of x, all with SY_TEST_FP8_ALL=1). Below
 * SY_FP8_RECIP_MIN the residual can be subnormal and inexact (with 2^-126 as the bound, 103 positive pairs'
 * codes differ), and an infinite or NaN scale has no usable reciprocal: callers divide there. Measured (run 38, 4 x
 * H200, 4,096 tokens): the FP8 dispatch at world 4 (16 SMs) 1,203-1,208 -> 1,059-1,063 us, at world 1 611-612 ->
 * 499 (16 SMs) and 122.1-122.5 -> 111.6-111.7 (132 SMs). */
#define SY_FP8_RECIP_MIN 0x1p-100f
/* The upper bound only keeps +inf (and NaN) out: the scale of a finite bf16 amax is at most ~2^119.2, and every
 * such scale is in the check. */
SY_HD int sy__fp8_recip_ok(float scale) { return scale >= SY_FP8_RECIP_MIN && scale <= 0x1p127f; }
SY_HD float sy__fp8_div_recip(float x, float scale, float r) {
#ifdef __CUDA_ARCH__
  const float q0 = __fmul_rn(x, r); /* never contracted into the sums below */
  return copysignf(__fmaf_rn(__fmaf_rn(-q0, scale, x), r, q0), x);
#else
  const float q0 = x * r;
  return copysignf(fmaf(fmaf(-q0, scale, x), r, q0), x);
#endif
}

/* The declared, out-of-line forms (fp8.c), for the host backend and the tests. */

/* E4M3 (bias 7, no infinities, max 448 = 0x7E, NaN = 0x7F/0xFF) from fp32: round to nearest even, values
 * beyond +-448 (after rounding) saturate to +-448, NaN gives 0x7F. Bit-exact with CUDA's
 * __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3). = sy__fp8_e4m3_encode. */
uint8_t sy__fp8_e4m3_from_float(float x);
/* E4M3 to fp32 (exact). = sy__fp8_e4m3_decode. */
float sy__fp8_e4m3_to_float(uint8_t q);

/* The scale of one group from its amax (>= 0): amax / 448, or 1 when amax is 0; ue8m0: rounded up to the
 * next power of two (a power of two stays). = sy__fp8_scale. */
float sy__fp8_group_scale(float amax, int ue8m0);

/* Quantises one token: `hidden` bf16 values (a multiple of 128) to E4M3 bytes and hidden / 128 scales
 * (scales[g * scale_stride] for group g). amax is fmaxf over |x|, starting at +0, so a NaN element does not
 * reach it: the NaN becomes 0x7F and the rest of its group is quantised as if it were absent. An infinite
 * element makes the scale +inf: it becomes 0x7F (inf / inf) and the group's finite elements +-0. */
void sy__fp8_quantize_token(const uint16_t *bf16, int hidden, int ue8m0, uint8_t *q, float *scales,
                            int64_t scale_stride);

#ifdef __cplusplus
}
#endif
#endif
