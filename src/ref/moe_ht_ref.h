/*
 * moe_ht_ref.h — the MoE high-throughput mode as plain C (src/ref): the semantics switchyard.h states for
 * sy_moe_ht_*, written once. Two layers:
 *  - the per-row rules both backends must round alike, beside those of the low-latency mode (moe_ref.h: the FP8
 *    encoding, the combine's fused multiply-adds and bf16 roundings): a token onto the wire with the given-scales
 *    wire too, the backward's scaled copy, the 32-lane dot product of the weights' gradient;
 *  - the reference of whole calls over every rank at once (a global view from every rank's inputs, no messages,
 *    no exchange), for the CPU tests and the GPU tests to compare with: the layout (every rank's handle
 *    sections), the dispatch (every rank's receive buffers and recv_rows), the combine and its backward.
 * The handle's sections are moe_ht_layout.h's. The host backend (host/moe_ht.c) runs the same rules rank by
 * rank; these functions do not call it, nor it them.
 */
#ifndef SY_REF_MOE_HT_REF_H
#define SY_REF_MOE_HT_REF_H

#include "core/internal.h"
#include "ref/moe_ht_layout.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the per-row rules --------------------------------------------------------------------------------------- */

/* Bytes of one element of recv.tokens: 1 (the FP8 wires) or 2 (BF16). */
static inline size_t sy__moe_ht_wire_elem(sy_moe_wire_t wire) { return wire == SY_MOE_WIRE_BF16 ? 2 : 1; }
static inline int sy__moe_ht_fp8(sy_moe_wire_t wire) { return wire != SY_MOE_WIRE_BF16; }

/* Where row `row`'s scales sit in recv.scales (of `rows` rows): the first at scale_first, scale g at scale_first +
 * g x scale_stride — group-major ([hidden / 128][rows]) by default, row-major ([rows][hidden / 128]) with
 * SY_MOE_HT_SCALES_ROW_MAJOR. */
static inline int sy__moe_ht_scales_row_major(const sy_moe_ht_config_t *c) {
  return (c->flags & SY_MOE_HT_SCALES_ROW_MAJOR) != 0;
}
static inline size_t sy__moe_ht_scale_first(const sy_moe_ht_config_t *c, int64_t row) {
  return sy__moe_ht_scales_row_major(c) ? (size_t)row * (size_t)(c->hidden / SY_MOE_FP8_GROUP) : (size_t)row;
}
static inline int64_t sy__moe_ht_scale_stride(const sy_moe_ht_config_t *c, int64_t rows) {
  return sy__moe_ht_scales_row_major(c) ? 1 : rows;
}

/* One token as the wire carries it into a row: BF16 the bf16 values as they are; FP8 and FP8_UE8M0 quantised
 * (sy__moe_encode_token, bit for bit the low-latency mode's); FP8_GIVEN the E4M3 bytes and given_scales
 * ([hidden / 128]) as they are. Scales go to scales[g * scale_stride] (unused on BF16). */
void sy__moe_ht_encode_token(sy_moe_wire_t wire, const void *token, const float *given_scales, int hidden,
                             void *payload, float *scales, int64_t scale_stride);

/* The combine's backward for one row: out[h] = bf16(w x g[h]), the product in fp32 rounded once. */
void sy__moe_ht_scale_row(float w, const uint16_t *g, uint16_t *out, int hidden);

/* The weights' gradient of one row: the dot product of two bf16 vectors in the header's order: 32 partial sums,
 * the l-th adding a[h] x b[h] for the h with (h / 8) mod 32 = l (the 8 elements of every 32nd 16-byte piece: a
 * GPU lane's vector loads), ascending, with fused multiply-adds from +0; then for d = 16, 8, 4, 2, 1 every
 * s_l = s_l + s_(l xor d) at once; the result s_0, a NaN as the canonical 0x7FFFFFFF (the GPU's FFMA and FADD
 * give it; x86 keeps an operand's payload). */
float sy__moe_ht_dot(const uint16_t *a, const uint16_t *b, int hidden);

/* ---- the reference of whole calls ----------------------------------------------------------------------------- */

/* One rank's inputs of a step (arrays of world_size of these; configurations as created, defaults applied or
 * not). tokens: the dispatch's [num_tokens][hidden] (bf16, E4M3 bytes with SY_MOE_WIRE_FP8_GIVEN), or the
 * combine backward's grad_out (bf16); the other calls do not read it. */
typedef struct sy_moe_ht_ref_rank {
  int num_tokens;
  const void *expert_ids; /* [num_tokens][top_k] */
  sy_index_type_t id_type;
  const void *tokens;
  const float *token_scales; /* SY_MOE_WIRE_FP8_GIVEN: [num_tokens][hidden / 128] */
  const float *weights;      /* the dispatch's [num_tokens][top_k], or NULL (rows get 0) */
} sy_moe_ht_ref_rank_t;

/* An experts' rank's side of a combine or its backward: its dispatch's recv.rows and recv.expert_stride (which
 * place the rows), the rows (the combine's rows_in), their weights and (combine) values. */
typedef struct sy_moe_ht_ref_rows {
  int rows, expert_stride;
  const void *rows_in;      /* bf16 [rows][hidden] */
  const float *row_weights; /* [rows] or NULL (1) */
  const float *row_values;  /* combine: [rows] or NULL (token_values get 0 from this rank) */
} sy_moe_ht_ref_rows_t;

/* Every call first checks every rank's num_tokens (0..max_tokens) and ids (in [-1, num_experts), none twice in
 * a token): SY_ERR_INVALID_ARG and nothing written otherwise. Outputs are arrays of world_size pointers; a NULL
 * entry (or a NULL array) skips that rank. */

/* The layout: each rank's handle sections ids (normalised, the num_tokens rows), pos (num_tokens rows),
 * send_tokens, recv_counts, recv_tokens, offsets, and of its header magic, num_tokens and rows. The rest of the
 * handle (the header's object, layout and dispatch numbers, chan_tokens, send_chan, recv_rows, the rows past
 * num_tokens) is left as it was. */
sy_status_t sy__moe_ht_ref_layout(const sy_moe_ht_config_t *config, int world_size, const sy_moe_ht_ref_rank_t *ranks,
                                  void *const *handles);

/* The dispatch: each rank's recv (its rows and expert_stride as the caller's) filled as the header says: the
 * rows of every (source, token, k) routed here, padding rows' src {-1, -1} and weight 0, expert_offsets and
 * expert_counts; rows past the last expert's (offsets[L]) untouched. With handles, each rank's recv_rows too
 * (the first recv_tokens[s] entries of each source s) and its header's expert_stride. A rank whose rows need
 * more than recv.rows, or an expert count above a positive expert_stride, is SY_ERR_INVALID_ARG (nothing
 * written on any rank). ranks[s].tokens may be NULL when num_tokens is 0. */
sy_status_t sy__moe_ht_ref_dispatch(const sy_moe_ht_config_t *config, int world_size, const sy_moe_ht_ref_rank_t *ranks,
                                    const sy_moe_ht_recv_t *const *recv, void *const *handles);

/* The combine: each owner's out (bf16 [num_tokens][hidden]): per token, per rank p ascending holding any of its
 * experts, p's partial (fmaf(w_r, y_r, .) over the token's rows there in ascending k from +0, rounded to bf16),
 * added from +0 in rank order and rounded once; a token with no expert gets zeros. token_values:
 * [num_tokens][top_k], rows[p].row_values of the row of (t, k), 0 where k names no expert or p gave no
 * row_values. */
sy_status_t sy__moe_ht_ref_combine(const sy_moe_ht_config_t *config, int world_size, const sy_moe_ht_ref_rank_t *ranks,
                                   const sy_moe_ht_ref_rows_t *rows, void *const *out, float *const *token_values);
/* sy_moe_ht_combine_add's: out holds bf16 rows already; a token with an expert gets bf16(S + float(out[t])), S the
 * combine's sum before its rounding; a token with no expert keeps its row. */
sy_status_t sy__moe_ht_ref_combine_add(const sy_moe_ht_config_t *config, int world_size,
                                       const sy_moe_ht_ref_rank_t *ranks, const sy_moe_ht_ref_rows_t *rows,
                                       void *const *out, float *const *token_values);

/* The combine's backward: each experts' rank's grad_rows (bf16 [rows][hidden]: row r of (s, t, k) is
 * bf16(w_r x grad_out_s[t]), or grad_out_s[t] as it is without row_weights; other rows untouched) and
 * grad_row_weights ([rows]: sy__moe_ht_dot(grad_out_s[t], rows_in[r]); padding rows 0; rows past the last
 * expert's untouched). grad_out is ranks[s].tokens. */
sy_status_t sy__moe_ht_ref_combine_backward(const sy_moe_ht_config_t *config, int world_size,
                                            const sy_moe_ht_ref_rank_t *ranks, const sy_moe_ht_ref_rows_t *rows,
                                            void *const *grad_rows, float *const *grad_row_weights);

#ifdef __cplusplus
}
#endif
#endif
