/*
 * moe_ht_layout.h — the MoE high-throughput mode's rules shared by both backends: the configuration's
 * defaults, the handle's sections, the largest layout, and how a rank's receive counts become expert offsets.
 * The host backend (host/moe_ht.c), the kernels (cuda/moe_ht/) and the reference (ref/moe_ht_ref.c) use these,
 * so a handle means the same on either side.
 *
 * The handle (device memory the caller keeps for a step; int32 words after a 64-byte header):
 *   header       sy_moe_ht_handle_header_t: magic, the object's id, num_tokens, rows needed, the layout's call
 *   ids          [max_tokens][top_k] the layout's expert ids, -1 where none (an invalid id counts as -1)
 *   pos          [max_tokens][top_k] the entry's position: how many of this rank's earlier tokens name the same
 *                expert (-1 where the id is -1). Row of the entry at the expert's rank p, local expert e:
 *                offsets[e] + sum over sources s' < s of recv_counts[s'][e] + pos
 *   send_tokens  [world_size] tokens this rank sends to each rank (a token once per rank it names)
 *   recv_counts  [world_size][L] rows of each local expert from each source
 *   recv_tokens  [world_size] tokens each source sends here
 *   offsets      [L + 1] the contiguous layout's first row of each local expert (counts rounded up to the
 *                alignment, summed), [L] the rows needed
 *   chan_tokens  [world_size][channels] (cuda backend) tokens each source sends here per channel; channels =
 *                the configuration's num_sms (an upper bound). The host backend leaves it 0
 *   send_chan    [world_size][channels] (cuda backend) tokens this rank sends to each rank per channel
 *   recv_rows    [world_size][max_tokens][kk] written by the dispatch: for source s's i-th token here (in the
 *                source's token order) the rows it filled, its experts here in ascending k, -1 after; kk =
 *                min(top_k, L). The combines read it. The cuda backend's ring dispatch leaves this rank's own tokens
 *                out (their rows come from ids and pos: they take no ring); its pulled one (SY_HT_PULL) writes
 *                them too, which no combine reads
 */
#ifndef SY_REF_MOE_HT_LAYOUT_H
#define SY_REF_MOE_HT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "ref/hd.h"
#include "switchyard.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SY_MOE_HT_HANDLE_MAGIC  0x4d4f4548u /* "HEOM" */
#define SY_MOE_HT_DEFAULT_SMS   16
#define SY_MOE_HT_MAX_ALIGNMENT 1024
/* A row's bytes stay far inside the cuda kernels' 32-bit offsets (cuda/moe_ht/pipe.cuh: bytes < 2^31). */
#define SY_MOE_HT_MAX_HIDDEN    (1 << 20)

typedef struct sy_moe_ht_handle_header {
  uint32_t magic;        /* SY_MOE_HT_HANDLE_MAGIC once a layout wrote it */
  uint32_t object;       /* the object's id (sy_moe_ht.id) */
  int32_t num_tokens;    /* the layout's */
  int32_t rows;          /* rows the contiguous layout needs here (offsets[L]) */
  uint64_t layout;       /* the object's layout call number that wrote it (1, 2, ...) */
  int32_t dispatched;    /* the dispatch (its rows and recv_rows) that used it: the object's dispatch number, 0: none */
  int32_t expert_stride; /* the recv.expert_stride of that dispatch */
  int32_t reserved[8];
} sy_moe_ht_handle_header_t;

typedef struct sy_moe_ht_handle_layout {
  size_t ids, pos, send_tokens, recv_counts, recv_tokens, offsets, chan_tokens, send_chan, recv_rows; /* bytes */
  size_t bytes;
  int kk; /* min(top_k, L) */
} sy_moe_ht_handle_layout_t;

/* The configuration with its defaults applied (expert_alignment 0 -> 1, num_sms 0 -> 16). */
SY_HD sy_moe_ht_config_t sy__moe_ht_defaults(sy_moe_ht_config_t c) {
  if (c.expert_alignment == 0) c.expert_alignment = 1;
  if (c.num_sms == 0) c.num_sms = SY_MOE_HT_DEFAULT_SMS;
  return c;
}

SY_HD int64_t sy__moe_ht_round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/* The most rows a contiguous layout can need on one rank: every token of every rank names min(top_k, L) of
 * its experts, plus each expert's padding. */
SY_HD int64_t sy__moe_ht_max_rows(const sy_moe_ht_config_t *c, int world_size) {
  const int64_t L = c->num_experts / world_size;
  const int64_t kk = c->top_k < L ? c->top_k : L;
  const int64_t per_expert = (int64_t)world_size * c->max_tokens; /* a token names an expert at most once */
  int64_t rows = (int64_t)world_size * c->max_tokens * kk;
  if (rows > per_expert * L) rows = per_expert * L;
  return rows + L * (c->expert_alignment - 1);
}

SY_HD sy_moe_ht_handle_layout_t sy__moe_ht_handle_layout(const sy_moe_ht_config_t *c, int world_size) {
  sy_moe_ht_handle_layout_t h;
  const size_t T = (size_t)c->max_tokens, k = (size_t)c->top_k, W = (size_t)world_size;
  const size_t L = (size_t)(c->num_experts / world_size);
  h.kk = (int)(k < L ? k : L);
  size_t at = sizeof(sy_moe_ht_handle_header_t);
  h.ids = at, at += T * k * 4;
  h.pos = at, at += T * k * 4;
  h.send_tokens = at, at += W * 4;
  h.recv_counts = at, at += W * L * 4;
  h.recv_tokens = at, at += W * 4;
  h.offsets = at, at += (L + 1) * 4;
  h.chan_tokens = at, at += W * (size_t)c->num_sms * 4;
  h.send_chan = at, at += W * (size_t)c->num_sms * 4;
  at = (at + 15) / 16 * 16;
  h.recv_rows = at, at += W * T * (size_t)h.kk * 4;
  h.bytes = (at + 255) / 256 * 256;
  return h;
}

/* The symmetric workspace of the cuda backend (cuda/moe_ht/ht.cuh says what each part is): counters, the count
 * exchange, the receive arena's inboxes, W x C rings of SY_MOE_HT_RING_SLOTS messages, then the receive arena
 * (config.recv_arena_bytes), and with `pull` the tokens' copy the receivers pull from and the pull's counters; the
 * host backend reserves none. Channels C = max(1, num_sms / 2), or num_sms with `roles` (a channel's two roles on one
 * block's warps: SY_HT_ROLES, cuda/moe_ht/ht.cuh). A message: 16-byte header, kk 16-byte entries, the payload (bf16
 * row, or E4M3 bytes then hidden / 128 fp32 scales). */
#ifndef SY_MOE_HT_RING_SLOTS /* a power of two; set at build time only for measuring others (bench/NOTES.md) */
#define SY_MOE_HT_RING_SLOTS 64
#endif
typedef struct sy_moe_ht_ws_layout {
  size_t tail, head, stamp, ack, xdata, inbox, ring, arena, pull, pull_meta, pull_sync, bytes;
  size_t xdata_words, msg_bytes, payload_offset, scales_offset, inbox_bytes;
  int channels;
} sy_moe_ht_ws_layout_t;

SY_HD sy_moe_ht_ws_layout_t sy__moe_ht_ws_layout(const sy_moe_ht_config_t *c, int world_size, int roles, int pull) {
  sy_moe_ht_ws_layout_t w;
  const size_t W = (size_t)world_size, L = (size_t)(c->num_experts / world_size);
  const size_t kk = (size_t)c->top_k < L ? (size_t)c->top_k : L;
  w.channels = roles ? c->num_sms : c->num_sms / 2 > 1 ? c->num_sms / 2 : 1;
  const size_t C = (size_t)w.channels;
  w.payload_offset = 16 + kk * 16;
  w.scales_offset = w.payload_offset + (size_t)c->hidden;
  w.msg_bytes = (w.payload_offset + (size_t)c->hidden * 2 + 15) / 16 * 16; /* the bf16 row is the largest */
  w.xdata_words = L + C + 1;
  size_t at = 0;
  w.tail = at, at += W * C * 8;
  w.head = at, at += W * C * 8;
  w.stamp = at, at += W * 8;
  w.ack = at, at += W * 8;
  w.xdata = at, at += (W * w.xdata_words * 4 + 15) / 16 * 16;
  /* the receive arena's row bases: inbox[d] at s, written by receiver d each dispatch: {uint64 call, int64 the offset
   * of d's recv.tokens in its arena or -1}, then rowbase [L] int32 (d's first row for s's tokens of each of d's
   * experts) */
  w.inbox_bytes = c->recv_arena_bytes ? (16 + L * 4 + 15) / 16 * 16 : 0;
  w.inbox = at, at += W * w.inbox_bytes;
  at = (at + 255) / 256 * 256;
  w.ring = at, at += W * C * SY_MOE_HT_RING_SLOTS * w.msg_bytes;
  at = (at + 255) / 256 * 256;
  w.arena = at, at += c->recv_arena_bytes;
  at = (at + 255) / 256 * 256;
  /* with `pull` (SY_HT_PULL; cuda/moe_ht/pull.cu): this rank's tokens as its receivers pull them, max_tokens rows of
   * the bf16 row's bytes (the FP8 wires: E4M3 [max_tokens][hidden], then fp32 scales [max_tokens][hidden / 128]
   * within that); its handle's ids and positions and the call's weights, [max_tokens][top_k] int32 / int32 / fp32; and
   * the pull's counters: {uint64 call ready, int32 num_tokens, int32 weights given}, then done[W] uint64 (receiver d
   * has read this rank's copy of call n) */
  const size_t TK = (size_t)c->max_tokens * (size_t)c->top_k;
  w.pull = at, at += pull ? (size_t)c->max_tokens * (size_t)c->hidden * 2 : 0;
  at = (at + 255) / 256 * 256;
  w.pull_meta = at, at += pull ? (3 * TK * 4 + 255) / 256 * 256 : 0;
  w.pull_sync = at, at += pull ? 16 + W * 8 : 0;
  w.bytes = (at + 255) / 256 * 256;
  return w;
}

/* The pulled dispatch's items (cuda/moe_ht/pull.cu): grid block b takes items b, b + grid, ... of [0, W C); item i
 * is source *s's tokens of channel *c = i / W, the sources of a channel in turn and rotated by c / (grid / W) where
 * the grid is a multiple of W, so that a block's consecutive items come from different sources (its pipelines then
 * read the local copy and a peer's in turn); every (s, c) once. */
SY_HD void sy__moe_ht_pull_item(int item, int world_size, int grid, int *s, int *c) {
  const int k = grid % world_size ? 0 : grid / world_size; /* (otherwise the plain order alternates already) */
  *c = item / world_size;
  *s = (item % world_size + (k ? *c / k : 0)) % world_size;
}

/* The pulled dispatch's items with its own copy overlapped (SY_HT_PULL_OVERLAP; cuda/moe_ht/pull.cu): items [0, C)
 * are this rank's own channels in order (each block's first items, where the grid holds C blocks: they read the
 * caller's tokens while a copy engine fills the copy its peers read), then the peers' (source, channel) pairs,
 * channel-major, the sources of a channel rotated by the channel; every (s, c) once. */
SY_HD void sy__moe_ht_pull_item_own_first(int item, int world_size, int channels, int me, int *s, int *c) {
  if (item < channels) {
    *s = me, *c = item;
    return;
  }
  const int j = item - channels, peers = world_size - 1;
  *c = j / peers;
  const int q = (j % peers + *c) % peers;
  *s = q < me ? q : q + 1;
}

/* offsets[0..L] from recv_counts [W][L]: expert e's rows summed over sources, rounded up to the alignment. */
SY_HD void sy__moe_ht_offsets(const int32_t *recv_counts, int world_size, int L, int alignment, int32_t *offsets) {
  int64_t at = 0;
  for (int e = 0; e < L; e++) {
    offsets[e] = (int32_t)at;
    int64_t n = 0;
    for (int s = 0; s < world_size; s++) n += recv_counts[(size_t)s * L + e];
    at += sy__moe_ht_round_up(n, alignment);
  }
  offsets[L] = (int32_t)at;
}

#ifdef __cplusplus
}
#endif
#endif
