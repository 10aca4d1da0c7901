/*
 * fp8.h — FP8 E4M3 and the per-128-element quantisation of the MoE dispatch, defined once for the host
 * backend and (as __host__ __device__ inline code) for the kernels, so both round alike. The rules are the
 * ones switchyard.h states: scale = amax / 448 (or 1 for an all-zero group), optionally rounded up to a power
 * of two (UE8M0); q = E4M3(x / scale) with round-to-nearest-even and saturation to +-448; NaN -> 0x7F.
 */
#ifndef SY_REF_FP8_H
#define SY_REF_FP8_H

#include <stdint.h>

#ifdef __CUDACC__
#define SY_HD __host__ __device__ __forceinline__
#else
#define SY_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* E4M3 (bias 7, no infinities, max 448 = 0x7E, NaN = 0x7F/0xFF) from fp32: round to nearest even, values
 * beyond +-448 (after rounding) saturate to +-448, NaN gives 0x7F. Bit-exact with CUDA's
 * __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3). */
uint8_t sy__fp8_e4m3_from_float(float x);
/* E4M3 to fp32 (exact). */
float sy__fp8_e4m3_to_float(uint8_t q);

/* The scale of one group from its amax (>= 0): amax / 448, or 1 when amax is 0; ue8m0: rounded up to the
 * next power of two (a power of two stays). */
float sy__fp8_group_scale(float amax, int ue8m0);

/* Quantises one token: `hidden` bf16 values (a multiple of 128) to E4M3 bytes and hidden / 128 scales
 * (scales[g * scale_stride] for group g). */
void sy__fp8_quantize_token(const uint16_t *bf16, int hidden, int ue8m0, uint8_t *q, float *scales,
                            int64_t scale_stride);

#ifdef __cplusplus
}
#endif
#endif
