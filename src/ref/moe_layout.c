/*
 * moe_layout.c — sy__moe_layout: the byte sizes and offsets of the MoE workspace (moe_layout.h draws it), with
 * every product and sum checked for overflow, so sy_moe_workspace_size and both backends' create agree.
 */
#include "ref/moe_layout.h"

#include <stdint.h>
#include <string.h>

#include "ref/moe_ref.h"

static int mul_size(size_t a, size_t b, size_t *out) {
  if (a && b > SIZE_MAX / a) return 0;
  *out = a * b;
  return 1;
}

static int add_size(size_t a, size_t b, size_t *out) {
  if (b > SIZE_MAX - a) return 0;
  *out = a + b;
  return 1;
}

static int align_size(size_t x, size_t to, size_t *out) {
  if (!add_size(x, to - 1, out)) return 0;
  *out = *out / to * to;
  return 1;
}

/*
 * The sizes of the workspace moe_layout.h draws:
 *   total = 2 parities x (dispatch region + combine region) + counters, where
 *   dispatch region = W x max_tokens messages (W x max_tokens x top_k with SY_MOE_PER_EXPERT) of
 *                     (16 + 8 x top_k header (16-aligned) + payload + scales),
 *                     payload = hidden bytes (FP8 wires) or 2 x hidden (BF16), scales = hidden / 128 x 4
 *                     (FP8 wires) or 0, each message rounded up to 16 bytes;
 *   combine region  = W x max_tokens x hidden x 2 bytes (one bf16 partial per (expert rank, token)), or with
 *                     SY_MOE_PER_EXPERT top_k x max_tokens x hidden x 2 (one bf16 output per (token, k): a
 *                     token's top_k experts may sit on one rank, so W vectors per token are not always enough);
 *   counters        = 2 parities x W sources x 32 bytes;
 *   counts          = 2 parities x W sources x local experts x 4 bytes;
 * every region rounded up to 256 bytes. A receiver needs room for every source's whole call because it
 * cannot tell a sender to wait: the regions are sized for the worst routing.
 */
sy_status_t sy__moe_layout(const sy_moe_config_t *config, int world, sy_moe_layout_t *layout) {
  sy_moe_layout_t l;
  memset(&l, 0, sizeof l);
  l.world_size = world;
  l.local_experts = config->num_experts / world;
  l.top_k = config->top_k;
  const size_t W = (size_t)world, T = (size_t)config->max_tokens, K = (size_t)config->top_k;
  const size_t H = (size_t)config->hidden;
  const int fp8 = config->wire != SY_MOE_WIRE_BF16;
  size_t header = 0, payload = 0, scales = 0, messages = 0, vectors = 0, counters = 0, counts = 0;
  int ok = align_size(12 * K, 16, &header); /* entries (8 bytes per k), then positions (4 bytes per k) */
  l.payload_offset = SY_MOE_MSG_HEADER + header;
  ok = ok && mul_size(H, sy__moe_wire_elem(config->wire), &payload);
  ok = ok && add_size(l.payload_offset, payload, &l.scales_offset);
  scales = fp8 ? H / SY_MOE_FP8_GROUP * sizeof(float) : 0;
  ok = ok && add_size(l.scales_offset, scales, &l.msg_bytes) && align_size(l.msg_bytes, 16, &l.msg_bytes);
  /* SY_MOE_PER_EXPERT: a message per (token, expert), top_k of them per token at most. */
  ok = ok && mul_size(T, (config->flags & SY_MOE_PER_EXPERT) ? K : 1, &l.messages_per_source);
  ok = ok && mul_size(W, l.messages_per_source, &messages) && mul_size(messages, l.msg_bytes, &l.dispatch_bytes) &&
       align_size(l.dispatch_bytes, 256, &l.dispatch_bytes);
  l.combine_rows = (config->flags & SY_MOE_PER_EXPERT) ? K : W;
  ok = ok && mul_size(H, sizeof(uint16_t), &l.combine_row_bytes) && mul_size(l.combine_rows, T, &vectors) &&
       mul_size(vectors, l.combine_row_bytes, &l.combine_bytes) && align_size(l.combine_bytes, 256, &l.combine_bytes);
  ok = ok && add_size(l.dispatch_bytes, l.combine_bytes, &l.parity_bytes) &&
       mul_size(2, l.parity_bytes, &l.counters_offset);
  ok = ok && mul_size(2 * W, SY_MOE_COUNTER_BYTES, &counters) && align_size(counters, 256, &l.counters_bytes);
  ok = ok && add_size(l.counters_offset, l.counters_bytes, &l.counts_offset);
  /* counts: [2 parities][W sources][local experts] int32; W x local experts = num_experts */
  ok = ok && mul_size(2 * (size_t)config->num_experts, sizeof(int32_t), &counts) &&
       align_size(counts, 256, &l.counts_bytes);
  ok = ok && add_size(l.counts_offset, l.counts_bytes, &l.total);
  if (!ok) return SY_ERR_INVALID_ARG;
  *layout = l;
  return SY_SUCCESS;
}
