/*
 * attn_ref.h — the CPU reference executor of the attention dispatch (src/ref): the row copies one receiver
 * makes for a direction, the KV backward's post-process (replica staging -> grad_out), and the element
 * conversions that post-process rounds with. The host backend runs these; the CUDA kernels must match them
 * byte for byte, and the GPU tests compare against them.
 *
 * Conversions are bit-exact with CUDA's __bfloat162float / __float2bfloat16_rn / __half2float /
 * __float2half_rn: round to nearest even, subnormals kept (no flush to zero), overflow to infinity, and every
 * NaN to the canonical 0x7FFF (bf16, fp16) or 0x7FFFFFFF (fp32, from fp16). They are plain integer code, so
 * they compile as device code too (SY_REF_HD) and the GPU tests can use them.
 */
#ifndef SY_REF_ATTN_REF_H
#define SY_REF_ATTN_REF_H

#include "core/internal.h"

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__CUDACC__)
#define SY_REF_HD __host__ __device__
#else
#define SY_REF_HD
#endif

static inline SY_REF_HD float sy__bits_to_float(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline SY_REF_HD uint32_t sy__float_to_bits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

/* bf16 is the top half of an fp32: exact, NaN payloads kept (as __bfloat162float). */
static inline SY_REF_HD float sy__bf16_to_float(uint16_t h) { return sy__bits_to_float((uint32_t)h << 16); }

/* Round to nearest even on the 16 dropped bits; the carry runs into the exponent, so the largest finite
 * values round to infinity. NaN -> 0x7FFF whatever its sign and payload. */
static inline SY_REF_HD uint16_t sy__float_to_bf16(float f) {
  uint32_t u = sy__float_to_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Exact (every fp16 is an fp32): subnormals normalised, infinities kept, NaN -> 0x7FFFFFFF. */
static inline SY_REF_HD float sy__fp16_to_float(uint16_t h) {
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
static inline SY_REF_HD uint16_t sy__float_to_fp16(float f) {
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

/* One fp32 add of the KV backward's sum: IEEE binary32, round to nearest even, subnormals kept; a NaN result
 * is the canonical 0x7FFFFFFF, as the GPU's FADD gives (x86 would keep an operand's payload). */
static inline float sy__ref_add_f32(float a, float b) {
  float sum = a + b;
  return sum != sum ? sy__bits_to_float(0x7FFFFFFFu) : sum;
}

struct sy_attn_plan;

/* One receiver's copies for direction dir (SY_ATTN_Q_FWD ...) of its plan: every receive segment from every
 * source s, rows of row_bytes, from src[s] (source s's buffer; may be NULL when s sends nothing) into dst.
 * Buffers must not overlap. */
void sy__ref_attn_pull(const struct sy_attn_plan *plan, int dir, const void *const *src, size_t row_bytes,
                       void *dst);

/* The KV backward's post-process at the owner, from staging (replica c of token t at row c * num_tokens + t,
 * row_bytes each, rows of absent replicas never read) into out.
 * Summed (flags 0): out row t, element by element, is the fp32 sum (sy__ref_add_f32) of the replicas the
 * token's sequence has, in replica order 0, 1, ..., starting from the first present replica (no +0.0 seed,
 * so a lone replica of -0.0 stays -0.0), converted once to dtype with round to nearest even (fp32: stored as
 * is); a token whose sequence has no replica gets all-zero bits.
 * SY_ATTN_UNSUMMED: out row c * num_tokens + t = staging's row for a present replica, all-zero bits for an
 * absent one (max_replicas * num_tokens rows). row_bytes is a multiple of dtype's size. */
void sy__ref_attn_kv_reduce(const struct sy_attn_plan *plan, const void *staging, size_t row_bytes,
                            sy_dtype_t dtype, unsigned flags, void *out);

/* Bytes of one element of dtype; 0 for a value outside sy_dtype_t. */
size_t sy__dtype_size(sy_dtype_t dtype);

#ifdef __cplusplus
}
#endif
#endif
