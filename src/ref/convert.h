/*
 * convert.h — the element conversions every rounding in switchyard goes through (the KV backward's sum, the MoE
 * combine's bf16 results), written once as integer code so that they compile for the host backend, the tests
 * and device code alike. Bit-exact with CUDA's __bfloat162float / __float2bfloat16_rn / __half2float /
 * __float2half_rn: round to nearest even, subnormals kept (no flush to zero), overflow to infinity, and every
 * NaN to the canonical 0x7FFF (bf16, fp16) or 0x7FFFFFFF (fp32, from fp16). test_bf16 checks them exhaustively.
 */
#ifndef SY_REF_CONVERT_H
#define SY_REF_CONVERT_H

#include <stdint.h>
#include <string.h>

#include "ref/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

SY_HD float sy__bits_to_float(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

SY_HD uint32_t sy__float_to_bits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

/* bf16 is the top half of an fp32: exact, NaN payloads kept (as __bfloat162float). */
SY_HD float sy__bf16_to_float(uint16_t h) { return sy__bits_to_float((uint32_t)h << 16); }

/* Round to nearest even on the 16 dropped bits; the carry runs into the exponent, so the largest finite
 * values round to infinity. NaN -> 0x7FFF whatever its sign and payload. */
SY_HD uint16_t sy__float_to_bf16(float f) {
  uint32_t u = sy__float_to_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Exact (every fp16 is an fp32): subnormals normalised, infinities kept, NaN -> 0x7FFFFFFF. */
SY_HD float sy__fp16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1Fu;
  uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return sy__bits_to_float(mantissa ? 0x7FFFFFFFu : (sign | 0x7F800000u));
  if (exponent == 0) {
    if (mantissa == 0) return sy__bits_to_float(sign);
    /* mantissa * 2^-24: shift the leading one up to bit 10, one exponent step per shift. */
    exponent = 113; /* 2^-14 as an fp32 biased exponent (-14 + 127) */
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      exponent--;
    }
    return sy__bits_to_float(sign | (exponent << 23) | ((mantissa & 0x3FFu) << 13));
  }
  return sy__bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

/* Round to nearest even; below 2^-14 into fp16 subnormals; at or past 65520 to infinity (65504 is the
 * largest fp16 and the tie at 65520 goes to the even neighbour, which is infinity); NaN -> 0x7FFF. */
SY_HD uint16_t sy__float_to_fp16(float f) {
  uint32_t u = sy__float_to_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FFF;
  if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);
  if (a >= 0x38800000u) { /* normal fp16: rebias the exponent by 127 - 15, keep 10 of 23 mantissa bits */
    uint32_t h = (a - 0x38000000u) >> 13;
    uint32_t rest = a & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
  if (a <= 0x33000000u) return sign; /* at most 2^-25: half the smallest subnormal, the tie goes to zero */
  /* Subnormal fp16: m = a's value * 2^24, rounded; a's value is (mantissa | 1 << 23) * 2^(exponent - 150). */
  uint32_t exponent = a >> 23;
  uint32_t mantissa = (a & 0x7FFFFFu) | 0x800000u;
  uint32_t shift = 126 - exponent; /* 14 .. 24 */
  uint32_t m = mantissa >> shift;
  uint32_t rest = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (m & 1u))) m++;
  return (uint16_t)(sign | m);
}

#ifdef __cplusplus
}
#endif
#endif
