/*
 * attn_ref.h — the reference of the attention dispatch: the row copies one receiver makes for a direction, and
 * the KV backward's post-process (replica staging -> grad_out) with its summation order and rounding
 * (convert.h). The host backend runs these; the CUDA kernels must match them byte for byte, and the GPU tests
 * compare against them.
 */
#ifndef SY_REF_ATTN_REF_H
#define SY_REF_ATTN_REF_H

#include "core/internal.h"
#include "ref/convert.h"
#include "ref/copy.h"

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

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
void sy__ref_attn_pull(const struct sy_attn_plan *plan, int dir, const void *const *src, size_t row_bytes, void *dst);
/* The same copies, each segment made by copy(ctx, ...) in the same order; returns 0, or the first nonzero copy
 * result (the later segments are not copied). */
int sy__ref_attn_pull_by(const struct sy_attn_plan *plan, int dir, const void *const *src, size_t row_bytes, void *dst,
                         sy_ref_copy_fn copy, void *ctx);

/* The KV backward's post-process at the owner, from staging (replica c of token t at row c * num_tokens + t,
 * row_bytes each, rows of absent replicas never read) into out.
 * Summed (flags 0): out row t, element by element, is the fp32 sum (sy__ref_add_f32) of the replicas the
 * token's sequence has, in replica order 0, 1, ..., starting from the first present replica (no +0.0 seed,
 * so a lone replica of -0.0 stays -0.0), converted once to dtype with round to nearest even (fp32: stored as
 * is); a token whose sequence has no replica gets all-zero bits.
 * SY_ATTN_UNSUMMED: out row c * num_tokens + t = staging's row for a present replica, all-zero bits for an
 * absent one (max_replicas * num_tokens rows). row_bytes is a multiple of dtype's size. */
void sy__ref_attn_kv_reduce(const struct sy_attn_plan *plan, const void *staging, size_t row_bytes, sy_dtype_t dtype,
                            unsigned flags, void *out);

/* Bytes of one element of dtype; 0 for a value outside sy_dtype_t. */
size_t sy__dtype_size(sy_dtype_t dtype);

#ifdef __cplusplus
}
#endif
#endif
