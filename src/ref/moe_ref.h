/*
 * moe_ref.h — the MoE low-latency dispatch and combine as plain C (src/ref): the semantics switchyard.h
 * states, written once. Three layers:
 *  - the per-vector rules both backends must round alike: a token onto the wire (FP8 quantisation or the
 *    bf16 as is), one fused multiply-add step of the combine, the bf16 rounding; the expert-id checks;
 *  - the reference of a whole call from every rank's inputs (sy__moe_ref_dispatch for one receiver,
 *    sy__moe_ref_combine for one owner), for GPU tests and benchmarks to compare with;
 * The workspace both backends move the vectors through is moe_layout.h's.
 */
#ifndef SY_REF_MOE_REF_H
#define SY_REF_MOE_REF_H

#include "core/internal.h"
#include "ref/moe_layout.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- expert ids ---------------------------------------------------------------------------------------------- */

static inline int64_t sy__moe_id(const void *ids, sy_index_type_t type, size_t index) {
  return type == SY_INDEX_INT64 ? ((const int64_t *)ids)[index] : (int64_t)((const int32_t *)ids)[index];
}

/* num_tokens x top_k ids of rank `rank`: each in [-1, num_experts) and none >= 0 twice within a token.
 * Otherwise SY_ERR_INVALID_ARG with a log line from fn naming the rank, token and k. */
sy_status_t sy__moe_check_ids(const char *fn, int rank, const void *ids, sy_index_type_t type, int num_tokens,
                              int top_k, int num_experts);

/* ---- the per-vector rules --------------------------------------------------------------------------------- */

/* Bytes of one element on the wire: 1 (FP8 wires) or 2 (BF16). */
static inline size_t sy__moe_wire_elem(sy_moe_wire_t wire) { return wire == SY_MOE_WIRE_BF16 ? 2 : 1; }

/* One bf16 token (hidden elements) as the wire carries it: FP8 wires, hidden E4M3 bytes into payload and
 * hidden / 128 scales at scales[g * scale_stride] (sy__fp8_quantize_token; UE8M0 scales for
 * SY_MOE_WIRE_FP8_UE8M0); BF16, the token as it is (scales unused). */
void sy__moe_encode_token(sy_moe_wire_t wire, const uint16_t *token, int hidden, void *payload, float *scales,
                          int64_t scale_stride);

/* acc[i] = fmaf(w, y[i] as fp32, acc[i]) for i < hidden: one step of a combine sum. */
void sy__moe_fma_row(float *acc, float w, const uint16_t *y, int hidden);
/* acc[i] = acc[i] + p[i] as fp32: the owner adding a rank's partial (the same as fmaf(1, p, acc)). */
void sy__moe_add_row(float *acc, const uint16_t *p, int hidden);
/* out[i] = bf16(acc[i]), round to nearest even (sy__float_to_bf16). */
void sy__moe_round_row(const float *acc, uint16_t *out, int hidden);

/* ---- the reference of a whole call -------------------------------------------------------------------------- */

/* What rank `rank` receives from a dispatch in which rank s called with sources[s] (tokens, num_tokens,
 * expert_ids, id_type, weights; world entries): recv's tokens, scales (FP8 wires), src, expert_counts and
 * rank_counts as switchyard.h lays them out, slots of local expert e in order of source rank, then source
 * token; slots beyond a count untouched. Every source's ids are checked first (SY_ERR_INVALID_ARG, nothing
 * written). */
sy_status_t sy__moe_ref_dispatch(const sy_moe_config_t *config, int world_size, int rank,
                                 const sy_moe_dispatch_args_t *sources, const sy_moe_recv_t *recv);

/* What owner rank `owner` gets from the combine answering that dispatch: expert_out[r] is rank r's
 * [L][S][hidden] bf16 expert outputs in the dispatch's slots; weights are the owner's [num_tokens][top_k]
 * routing weights (the dispatch's in the default mode, the combine's with SY_MOE_PER_EXPERT). out: bf16
 * [num_tokens][hidden]. Default: per rank r ascending holding any of the token's experts, the partial
 * fmaf(w_k, y_k, .) over those experts in k order from +0, rounded to bf16; the owner adds the partials in
 * rank order from +0 and rounds once. SY_MOE_PER_EXPERT: fmaf(w_k, y_k, .) for k = 0..top_k-1 from +0,
 * rounded once. A token with no expert: zero bits. */
sy_status_t sy__moe_ref_combine(const sy_moe_config_t *config, int world_size, int owner,
                                const sy_moe_dispatch_args_t *sources, const float *weights,
                                const void *const *expert_out, void *out);

#ifdef __cplusplus
}
#endif
#endif
