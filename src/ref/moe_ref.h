/*
 * moe_ref.h — the MoE low-latency dispatch and combine as plain C (src/ref): the semantics switchyard.h
 * states, written once. Three layers:
 *  - the per-vector rules both backends must round alike: a token onto the wire (FP8 quantisation or the
 *    bf16 as is), one fused multiply-add step of the combine, the bf16 rounding; the expert-id checks;
 *  - the reference of a whole call from every rank's inputs (sy__moe_ref_dispatch for one receiver,
 *    sy__moe_ref_combine for one owner), for GPU tests and benchmarks to compare with;
 *  - the workspace layout (src/core/moe.c computes it for both backends) and the host backend's ops
 *    (moe_host.c, which moves the same vectors through double-buffered receive regions as the kernels do).
 */
#ifndef SY_REF_MOE_REF_H
#define SY_REF_MOE_REF_H

#include "core/internal.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the workspace (sy__moe_layout is in src/core/moe.c; both backends size and address it with it) ------ */
/*
 * Per rank, two parities (call n uses parity n % 2), each:
 *   dispatch region  [W sources][messages_per_source] messages of msg_bytes: a source token bound for this
 *     rank (default: one message per (token, rank), its entries naming every expert of the token here;
 *     SY_MOE_PER_EXPERT: one per (token, expert), one entry set), in the source's token order (then k)
 *     header (16 bytes): int32 source token, int32 entries on this rank, uint32 call number (low bits), 0
 *     entries [top_k] (8 bytes each, by k): int32 local expert (-1: expert k is not on this rank), fp32 weight
 *     ranks [top_k] (int32, by k): how many of the source's earlier messages to this rank name the same local
 *       expert — the entry's place among the source's slots of that expert (-1 where the entry is -1)
 *     payload at payload_offset (16-aligned): hidden E4M3 bytes (FP8 wires) or hidden bf16
 *     scales at scales_offset (FP8 wires): hidden / 128 fp32
 *   combine region   default: [W expert ranks][max_tokens][hidden] bf16, one partial per (rank, token);
 *                    SY_MOE_PER_EXPERT: [max_tokens][top_k][hidden] bf16, one output per (token, k)
 * then the counters, [2 parities][W sources] of 32 bytes (SY_MOE_COUNTER_*): the dispatch signal, the dispatch's
 * message count (stored before the signal), the combine signal, and (CUDA backend) the counts word: the call
 * number, published by the source's block 0 in the release of its signal add, after the message count and the
 * counts below (the one-call dispatch places its own tokens by it, before its whole signal is in). A signal says the source's part of call n is
 * here: the host backend stores n; the CUDA backend's sending blocks each add to it once per call (block 0
 * SY_MOE_SIGNAL_STEP - (blocks - 1), the others 1), so it grows by exactly SY_MOE_SIGNAL_STEP per call of its
 * parity and reaches SY_MOE_SIGNAL_STEP x ceil(n / 2) only when the last block's add lands;
 * then the counts, [2 parities][W sources][local experts] int32: how many of the source's messages name each
 * local expert here (written before the dispatch signal, and only when the source sends any message here), so
 * that a receiver places entry (s, k) at slot sum_{s' < s} counts[s'][e] + rank with no scan of the messages.
 * Messages are 16-byte multiples, regions 256-aligned.
 */
typedef struct sy_moe_layout {
  size_t msg_bytes, payload_offset, scales_offset;
  size_t messages_per_source; /* max_tokens, or max_tokens x top_k with SY_MOE_PER_EXPERT */
  size_t dispatch_bytes;  /* one parity's dispatch region */
  size_t combine_rows;    /* vectors per owner token slot group: W (default) or top_k (per expert) */
  size_t combine_bytes;   /* one parity's combine region */
  size_t parity_bytes;    /* dispatch + combine region of one parity */
  size_t counters_offset; /* 2 * parity_bytes */
  size_t counters_bytes;
  size_t counts_offset;   /* counters_offset + counters_bytes */
  size_t counts_bytes;
  size_t total;           /* what sy_moe_workspace_size reports and sy_moe_create reserves */
} sy_moe_layout_t;

#define SY_MOE_MSG_HEADER 16
#define SY_MOE_COUNTER_BYTES 32 /* per (parity, source): uint64 words below */
#define SY_MOE_COUNTER_DISPATCH 0
#define SY_MOE_COUNTER_MESSAGES 1
#define SY_MOE_COUNTER_COMBINE 2
#define SY_MOE_COUNTER_COUNTS 3 /* CUDA backend: the call whose counts and message count are here */
#define SY_MOE_SIGNAL_STEP (1ull << 20) /* CUDA backend: a signal word's growth per call (more than any grid) */

/* The layout of a checked configuration on world_size ranks; SY_ERR_INVALID_ARG (no log) if a size overflows. */
sy_status_t sy__moe_layout(const sy_moe_config_t *config, int world_size, sy_moe_layout_t *layout);

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
