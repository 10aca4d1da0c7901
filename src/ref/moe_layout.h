/*
 * moe_layout.h — the MoE low-latency workspace, written once for both backends: the host backend (host/moe.c)
 * and the kernels (cuda/moe/) size it with sy__moe_layout (moe_layout.c) and address it with the SY_HD functions
 * below, so a message, a counter or a count sits at the same byte on either side.
 *
 * Per rank, two parities (call n uses parity n % 2; why two suffice: docs/architecture.md), each:
 *   dispatch region  [world_size sources][messages_per_source] messages of msg_bytes: a source token bound for
 *     this rank (default: one message per (token, rank), its entries naming every expert of the token here;
 *     SY_MOE_PER_EXPERT: one per (token, expert), one entry set), in the source's token order (then k):
 *     header       sy_moe_msg_header_t (16 bytes): source token, entries on this rank, call number (low bits)
 *     entries      [top_k] sy_moe_msg_entry_t (8 bytes, by k): local expert (-1: expert k is not on this rank),
 *                  the weight the source gave
 *     positions    [top_k] int32 (by k): how many of the source's earlier messages to this rank name the same
 *                  local expert — the entry's place among the source's slots of that expert (-1 where the entry
 *                  is -1), so a receiver places it at slot first[source][expert] + position without a scan
 *     payload      at payload_offset (16-aligned): hidden E4M3 bytes (FP8 wires) or hidden bf16
 *     scales       at scales_offset (FP8 wires): hidden / 128 fp32
 *   combine region   default: [world_size expert ranks][max_tokens][hidden] bf16, one partial per (rank, token);
 *                    SY_MOE_PER_EXPERT: [max_tokens][top_k][hidden] bf16, one output per (token, k)
 * then the counters, [2 parities][world_size sources] of SY_MOE_COUNTER_BYTES, four uint64 words:
 *   DISPATCH  the source's dispatch of call n is here. The host backend stores n; the cuda backend's sending
 *             blocks each add once per call (block 0 SY_MOE_SIGNAL_STEP - (blocks - 1), the others 1), so the
 *             word grows by exactly SY_MOE_SIGNAL_STEP per call of its parity and reaches
 *             SY_MOE_SIGNAL_STEP x ceil(n / 2) only when the last block's add lands
 *   MESSAGES  how many messages the source sent here (stored before DISPATCH is raised)
 *   COMBINE   the source's combine of call n is here (as DISPATCH)
 *   COUNTS    (cuda backend) the call whose message count and counts are here, published by the source's block 0
 *             with its signal add, before the whole DISPATCH sum is in (the one-call dispatch places its own
 *             tokens by it)
 * then the counts, [2 parities][world_size sources][local_experts] int32: how many of the source's messages
 * name each local expert here (written before DISPATCH is raised, and only when the source sends any message
 * here). Messages are 16-byte multiples, regions 256-aligned. A receiver needs room for every source's whole
 * call because it cannot tell a sender to wait: the regions are sized for the worst routing.
 */
#ifndef SY_REF_MOE_LAYOUT_H
#define SY_REF_MOE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "ref/hd.h"
#include "switchyard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sy_moe_msg_header {
  int32_t src_token; /* index in the source's tokens */
  int32_t entries;   /* entries >= 0 below: the token's experts on this rank */
  uint32_t call;     /* low bits of the call number, for debugging */
  uint32_t reserved;
} sy_moe_msg_header_t;

typedef struct sy_moe_msg_entry {
  int32_t local_expert; /* expert k's index on this rank, or -1 when expert k is elsewhere (or none) */
  float weight;         /* w_k as the source gave it (0 when it gave none) */
} sy_moe_msg_entry_t;

#define SY_MOE_MSG_HEADER       16
#define SY_MOE_COUNTER_BYTES    32 /* per (parity, source): the uint64 words below */
#define SY_MOE_COUNTER_DISPATCH 0
#define SY_MOE_COUNTER_MESSAGES 1
#define SY_MOE_COUNTER_COMBINE  2
#define SY_MOE_COUNTER_COUNTS   3
#define SY_MOE_SIGNAL_STEP      (1ull << 20) /* cuda backend: a signal word's growth per call (more than any grid) */

typedef struct sy_moe_layout {
  int world_size, local_experts, top_k;
  size_t msg_bytes, payload_offset, scales_offset;
  size_t messages_per_source; /* max_tokens, or max_tokens x top_k with SY_MOE_PER_EXPERT */
  size_t dispatch_bytes;      /* one parity's dispatch region */
  size_t combine_rows;        /* vectors per owner token slot group: world_size (default) or top_k (per expert) */
  size_t combine_row_bytes;   /* hidden x 2 */
  size_t combine_bytes;       /* one parity's combine region */
  size_t parity_bytes;        /* dispatch + combine region of one parity */
  size_t counters_offset;     /* 2 x parity_bytes */
  size_t counters_bytes;
  size_t counts_offset; /* counters_offset + counters_bytes */
  size_t counts_bytes;
  size_t total; /* what sy_moe_workspace_size reports and sy_moe_create reserves */
} sy_moe_layout_t;

/* The layout of a checked configuration on world_size ranks; SY_ERR_INVALID_ARG (no log) if a size overflows. */
sy_status_t sy__moe_layout(const sy_moe_config_t *config, int world_size, sy_moe_layout_t *layout);

/* Byte offsets into a rank's workspace (the same on every rank: add a rank's base, or a peer's mapping of it). */

/* Message `index` from `source` in the dispatch region of `parity`. */
SY_HD uint64_t sy__moe_msg_offset(const sy_moe_layout_t *l, int parity, int source, int index) {
  return (uint64_t)parity * l->parity_bytes +
         ((uint64_t)source * l->messages_per_source + (uint64_t)index) * l->msg_bytes;
}

/* Within a message: entry k (sy_moe_msg_entry_t) and position k (int32). */
SY_HD uint64_t sy__moe_entry_offset(int k) { return SY_MOE_MSG_HEADER + 8u * (uint64_t)k; }
SY_HD uint64_t sy__moe_position_offset(int top_k, int k) {
  return SY_MOE_MSG_HEADER + 8u * (uint64_t)top_k + 4u * (uint64_t)k;
}

/* Vector `vector` (hidden bf16) of the combine region of `parity`: default rank x max_tokens + token, per expert
 * token x top_k + k. */
SY_HD uint64_t sy__moe_combine_offset(const sy_moe_layout_t *l, int parity, uint64_t vector) {
  return (uint64_t)parity * l->parity_bytes + l->dispatch_bytes + vector * l->combine_row_bytes;
}

/* The int32 count of `source`'s messages naming local expert e, for `parity`. */
SY_HD uint64_t sy__moe_counts_offset(const sy_moe_layout_t *l, int parity, int source, int e) {
  return l->counts_offset +
         (((uint64_t)parity * (uint64_t)l->world_size + (uint64_t)source) * (uint64_t)l->local_experts + (uint64_t)e) *
             4u;
}

/* Counter word `word` (SY_MOE_COUNTER_*) of `source`, for `parity`. */
SY_HD uint64_t sy__moe_counter_offset(const sy_moe_layout_t *l, int parity, int source, int word) {
  return l->counters_offset + ((uint64_t)parity * (uint64_t)l->world_size + (uint64_t)source) * SY_MOE_COUNTER_BYTES +
         8u * (uint64_t)word;
}

#ifdef __cplusplus
}
#endif
#endif
