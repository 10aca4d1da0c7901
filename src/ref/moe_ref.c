/*
 * moe_ref.c — the MoE low-latency dispatch and combine as plain C: the per-vector rules (wire encoding, the
 * combine's fused multiply-adds and bf16 rounding) that the host backend (host/moe.c) runs and the kernels
 * must match bit for bit, and the reference of a whole call from every rank's inputs, written straight from
 * switchyard.h's words (no messages, no regions) for the GPU tests to compare against.
 */
#include "ref/moe_ref.h"

#include "ref/attn_ref.h"
#include "ref/fp8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- expert ids ---------------------------------------------------------------------------------------------- */

sy_status_t sy__moe_check_ids(const char *fn, int rank, const void *ids, sy_index_type_t type, int num_tokens,
                              int top_k, int num_experts) {
  for (int t = 0; t < num_tokens; t++) {
    const size_t row = (size_t)t * (size_t)top_k;
    for (int k = 0; k < top_k; k++) {
      const int64_t id = sy__moe_id(ids, type, row + (size_t)k);
      SY_ARG_CHECK(id >= -1 && id < num_experts, fn,
                   "expert_ids[%d][%d]=%lld outside [-1, num_experts=%d) (rank %d, token %d, k %d)", t, k,
                   (long long)id, num_experts, rank, t, k);
      for (int j = 0; id >= 0 && j < k; j++)
        SY_ARG_CHECK(sy__moe_id(ids, type, row + (size_t)j) != id, fn,
                     "expert_ids[%d][%d]=%lld repeats expert_ids[%d][%d] (rank %d, token %d, k %d): an expert may "
                     "appear once per token",
                     t, k, (long long)id, t, j, rank, t, k);
    }
  }
  return SY_SUCCESS;
}

/* ---- the per-vector rules --------------------------------------------------------------------------------- */

void sy__moe_encode_token(sy_moe_wire_t wire, const uint16_t *token, int hidden, void *payload, float *scales,
                          int64_t scale_stride) {
  if (wire == SY_MOE_WIRE_BF16) {
    memcpy(payload, token, (size_t)hidden * sizeof(uint16_t));
    return;
  }
  sy__fp8_quantize_token(token, hidden, wire == SY_MOE_WIRE_FP8_UE8M0, payload, scales, scale_stride);
}

/* fmaf: one rounding of w * y + acc, as the GPU's FFMA (subnormals kept: no flush to zero on either side). A
 * NaN's payload may differ from the GPU's canonical one, but every sum ends in sy__float_to_bf16, which maps
 * all NaNs to 0x7FFF. */
void sy__moe_fma_row(float *acc, float w, const uint16_t *y, int hidden) {
  for (int i = 0; i < hidden; i++) acc[i] = fmaf(w, sy__bf16_to_float(y[i]), acc[i]);
}

void sy__moe_add_row(float *acc, const uint16_t *p, int hidden) {
  for (int i = 0; i < hidden; i++) acc[i] = acc[i] + sy__bf16_to_float(p[i]);
}

void sy__moe_round_row(const float *acc, uint16_t *out, int hidden) {
  for (int i = 0; i < hidden; i++) out[i] = sy__float_to_bf16(acc[i]);
}

/* ---- the reference of a whole call -------------------------------------------------------------------------- */

static sy_status_t check_sources(const sy_moe_config_t *config, int world, const sy_moe_dispatch_args_t *sources,
                                 const char *fn) {
  for (int s = 0; s < world; s++) {
    const sy_moe_dispatch_args_t *a = &sources[s];
    SY_ARG_CHECK(a->num_tokens >= 0 && a->num_tokens <= config->max_tokens, fn,
                 "sources[%d].num_tokens=%d outside [0, max_tokens=%d]", s, a->num_tokens, config->max_tokens);
    SY_CHECK(sy__moe_check_ids(fn, s, a->expert_ids, a->id_type, a->num_tokens, config->top_k, config->num_experts));
  }
  return SY_SUCCESS;
}

sy_status_t sy__moe_ref_dispatch(const sy_moe_config_t *config, int world, int rank,
                                 const sy_moe_dispatch_args_t *sources, const sy_moe_recv_t *recv) {
  static const char *fn = "sy__moe_ref_dispatch";
  SY_CHECK(check_sources(config, world, sources, fn));
  const int L = config->num_experts / world, K = config->top_k, hidden = config->hidden;
  const size_t S = (size_t)world * (size_t)config->max_tokens, groups = (size_t)hidden / SY_MOE_FP8_GROUP;
  const size_t row_bytes = (size_t)hidden * sy__moe_wire_elem(config->wire);
  const int fp8 = config->wire != SY_MOE_WIRE_BF16;
  for (int e = 0; e < L; e++) {
    const int64_t expert = (int64_t)rank * L + e;
    int32_t slot = 0;
    for (int s = 0; s < world; s++) {
      const sy_moe_dispatch_args_t *a = &sources[s];
      int32_t from_s = 0;
      for (int t = 0; t < a->num_tokens; t++) {
        int routed = 0;
        for (int k = 0; k < K; k++) routed |= sy__moe_id(a->expert_ids, a->id_type, (size_t)t * K + k) == expert;
        if (!routed) continue;
        const size_t at = (size_t)e * S + (size_t)slot;
        sy__moe_encode_token(config->wire, (const uint16_t *)a->tokens + (size_t)t * hidden, hidden,
                             (unsigned char *)recv->tokens + at * row_bytes,
                             fp8 ? recv->scales + (size_t)e * groups * S + (size_t)slot : NULL, (int64_t)S);
        recv->src[2 * at] = s;
        recv->src[2 * at + 1] = t;
        slot++;
        from_s++;
      }
      recv->rank_counts[(size_t)e * world + s] = from_s;
    }
    recv->expert_counts[e] = slot;
  }
  return SY_SUCCESS;
}

sy_status_t sy__moe_ref_combine(const sy_moe_config_t *config, int world, int owner,
                                const sy_moe_dispatch_args_t *sources, const float *weights,
                                const void *const *expert_out, void *out) {
  static const char *fn = "sy__moe_ref_combine";
  SY_CHECK(check_sources(config, world, sources, fn));
  const int L = config->num_experts / world, K = config->top_k, hidden = config->hidden;
  const size_t S = (size_t)world * (size_t)config->max_tokens;
  const sy_moe_dispatch_args_t *mine = &sources[owner];
  /* slot[x]: where the owner's next token routed to expert x lands on x's rank; it starts past every earlier
   * source's tokens routed there. */
  int32_t *slot = calloc((size_t)config->num_experts, sizeof *slot);
  float *acc = malloc((size_t)hidden * sizeof *acc), *partial = malloc((size_t)hidden * sizeof *partial);
  uint16_t *rounded = malloc((size_t)hidden * sizeof *rounded);
  int32_t *token_slot = malloc((size_t)K * sizeof *token_slot);
  if (!slot || !acc || !partial || !rounded || !token_slot) {
    free(slot), free(acc), free(partial), free(rounded), free(token_slot);
    return SY_ERR_NO_MEMORY;
  }
  for (int s = 0; s < owner; s++)
    for (size_t i = 0; i < (size_t)sources[s].num_tokens * K; i++) {
      const int64_t id = sy__moe_id(sources[s].expert_ids, sources[s].id_type, i);
      if (id >= 0) slot[id]++;
    }
  for (int t = 0; t < mine->num_tokens; t++) {
    const size_t row = (size_t)t * K;
    for (int k = 0; k < K; k++) {
      const int64_t id = sy__moe_id(mine->expert_ids, mine->id_type, row + k);
      token_slot[k] = id >= 0 ? slot[id]++ : -1;
    }
    /* y_k: expert k's output for this token, in its rank's expert_out. */
#define Y(k, id) \
  ((const uint16_t *)expert_out[(id) / L] + ((size_t)((id) % L) * S + (size_t)token_slot[k]) * (size_t)hidden)
    for (int i = 0; i < hidden; i++) acc[i] = 0.0f;
    if (config->flags & SY_MOE_PER_EXPERT) {
      for (int k = 0; k < K; k++) {
        const int64_t id = sy__moe_id(mine->expert_ids, mine->id_type, row + k);
        if (id >= 0) sy__moe_fma_row(acc, weights[row + k], Y(k, id), hidden);
      }
    } else {
      for (int r = 0; r < world; r++) {
        int held = 0;
        for (int i = 0; i < hidden; i++) partial[i] = 0.0f;
        for (int k = 0; k < K; k++) {
          const int64_t id = sy__moe_id(mine->expert_ids, mine->id_type, row + k);
          if (id < 0 || id / L != r) continue;
          sy__moe_fma_row(partial, weights[row + k], Y(k, id), hidden);
          held = 1;
        }
        if (!held) continue;
        sy__moe_round_row(partial, rounded, hidden);
        sy__moe_add_row(acc, rounded, hidden);
      }
    }
#undef Y
    sy__moe_round_row(acc, (uint16_t *)out + (size_t)t * hidden, hidden);
  }
  free(slot), free(acc), free(partial), free(rounded), free(token_slot);
  return SY_SUCCESS;
}
