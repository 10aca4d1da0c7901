/*
 * moe.cuh — what every phase of the MoE low-latency kernels shares: the kernel parameters, the instance bits
 * (MODE), the workspace addressing (ref/moe_layout.h, the host backend's too), the signal arithmetic (arrive,
 * expected), the call number kept on the device, and the small bf16 and FP8 helpers. The phases, in a token's
 * order: route.cuh and send.cuh (dispatch_send), direct.cuh (the one-call dispatch's own entries), recv.cuh
 * (dispatch_recv), combine_send.cuh, combine_recv.cuh; dispatch.cu and combine.cu instantiate the kernels and
 * launch.cu is the host side. docs/architecture.md follows a token through them.
 */
#ifndef SY_CUDA_MOE_MOE_CUH
#define SY_CUDA_MOE_MOE_CUH

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include "cuda/device.cuh"
#include "cuda/fp8.cuh"
#include "ref/fp8.h"
#include "ref/moe_layout.h"

namespace sy {

constexpr int MOE_THREADS = 512;
constexpr int MOE_WARPS = MOE_THREADS / 32;
constexpr int MOE_MAX_K = 32;
constexpr int MOE_PEER_TAB = 8;
/* A kernel instance per wire and mode (template parameter MODE, these bits), so that no hot path jumps over
 * another mode's inlined code (bench/NOTES.md, "instruction fetch"): FP8 wire (E4M3 or UE8M0 scales; else BF16),
 * SY_MOE_PER_EXPERT, the one-call dispatch's direct part (SY_MOE_DIRECT), and the trace points (SY_TRACE_FILE). */
constexpr int MODE_FP8 = 1, MODE_PE = 2, MODE_DIRECT = 4, MODE_TRACE = 8;

/* Device-local state of one object. The current call number is kept once per block slot (calls[blocks], after
 * this struct): every kernel's block b reads slot b, and dispatch_send's block b stores the new number into
 * slots b, b + grid, ... at its end — each slot exactly once per call, no two blocks on one slot, so no atomic,
 * no fence and no last block; the next kernel sees all slots equal (the kernel boundary orders them). */
struct moe_local {
  int num_tokens; /* this rank's dispatch of the current call */
};

struct moe_params {
  dev_ctx ctx;
  char *ws;                     /* this rank's workspace (symmetric) */
  char *peer_tab[MOE_PEER_TAB]; /* world_size <= MOE_PEER_TAB: peer_ws() of every rank, looked up once by the host */
  moe_local *local;
  uint64_t *calls; /* [ncalls]: the current call number, one slot per block (moe_local) */
  int ncalls;
  int32_t *ids;     /* [max_tokens][top_k]: this rank's dispatch ids, checked (-1 for a rejected one) */
  int32_t *slot_of; /* [world_size][messages_per_source][top_k]: slot of (source, message, k) here */
  char *staging;    /* [blocks][stage_bytes]: messages and vectors on their way to a put-only peer */
  uint64_t stage_bytes;
  sy_moe_layout_t layout; /* the workspace (ref/moe_layout.h) */
  int max_tokens, messages_per_source, hidden, top_k, num_experts, local_experts, world_size;
  int slots;        /* per local expert in the caller's buffers: world_size x max_tokens */
  int scale_groups; /* FP8 scales per token: hidden / 128 */
  int wire, per_expert;
  int expert_token_masks;       /* dispatch_send keeps a token mask per expert in shared memory for the positions (else
                           * it counts) */
  int own_cap;                  /* with direct: entries the block's own_list holds (tokens per block x top_k) */
  uint64_t local_experts_magic; /* ceil(2^32 / local_experts) where num_experts x local_experts < 2^32 (expert ->
                                 * rank by a multiply), else 0 */
  /* the call's arguments */
  const uint16_t *tokens;
  int num_tokens;
  const void *expert_ids;
  int id64;
  const float *weights;
  sy_moe_recv_t recv;
  const uint16_t *expert_out;
  uint16_t *out;
};

/* ---- dispatch_send's dynamic shared memory: one layout for the host's sizing and the kernel's addressing ---------- */

/* Byte offsets, in order: peers[world] (pointers), token_ranks[max_tokens] (world <= 64: the ranks each token goes
 * to, uint64), unit_masks[world][mask_words] (bit j of word c: unit 32c + j goes to rank p), prefix[world][mask_words
 * + 1] (messages to p before word c), ids[max_tokens][top_k] (checked), named[num_experts] (block 0: messages naming
 * each expert), with expert_token_masks expert_tokens[num_experts][token_words] (bit j of word c: token 32c + j names
 * the expert), then, 16-aligned, the direct part's own_list[own_cap] (int4). */
struct send_smem {
  uint64_t token_ranks, unit_masks, prefix, ids, named, expert_tokens, own_list;
  uint64_t bytes;        /* without the direct part */
  uint64_t bytes_direct; /* with it */
};

__host__ __device__ __forceinline__ send_smem send_smem_layout(int world, int max_tokens, int top_k, int num_experts,
                                                               int messages_per_source, bool expert_token_masks,
                                                               int own_cap) {
  const uint64_t mask_words = ((uint64_t)messages_per_source + 31) / 32, token_words = ((uint64_t)max_tokens + 31) / 32;
  send_smem l;
  l.token_ranks = (uint64_t)world * sizeof(char *);
  l.unit_masks = l.token_ranks + (uint64_t)max_tokens * 8;
  l.prefix = l.unit_masks + (uint64_t)world * mask_words * 4;
  l.ids = l.prefix + (uint64_t)world * (mask_words + 1) * 4;
  l.named = l.ids + (uint64_t)max_tokens * (uint64_t)top_k * 4;
  l.expert_tokens = l.named + (uint64_t)num_experts * 4;
  l.bytes = l.expert_tokens + (expert_token_masks ? (uint64_t)num_experts * token_words * 4 : 0);
  l.own_list = (l.bytes + 15) & ~(uint64_t)15;
  l.bytes_direct = l.own_list + (uint64_t)own_cap * 16;
  return l;
}

/* ---- addressing (ref/moe_layout.h's offsets) ------------------------------------------------------------------ */

__device__ __forceinline__ uint64_t msg_offset(const moe_params &P, int parity, int source, int index) {
  return sy__moe_msg_offset(&P.layout, parity, source, index);
}

__device__ __forceinline__ uint64_t combine_offset(const moe_params &P, int parity, uint64_t vector) {
  return sy__moe_combine_offset(&P.layout, parity, vector);
}

__device__ __forceinline__ uint64_t counts_offset(const moe_params &P, int parity, int source, int e) {
  return sy__moe_counts_offset(&P.layout, parity, source, e);
}

__device__ __forceinline__ uint64_t counter_offset(const moe_params &P, int parity, int source, int word) {
  return sy__moe_counter_offset(&P.layout, parity, source, word);
}

/* This rank's workspace as peer p sees it, when p is load/store reachable (else NULL: puts). */
__device__ __forceinline__ char *peer_ws(const moe_params &P, int p) {
  if (P.world_size <= MOE_PEER_TAB) return P.peer_tab[p]; /* a kernel parameter: no dependent loads at the start */
  if (P.ctx.force_put && p != P.ctx.rank) return nullptr;
  return nvshmem_ptr_cold(P.ws, p);
}

/* The rank holding expert e >= 0: e / local_experts by a multiply-high (exact for e x local_experts < 2^32: the
 * error e x (m - 2^32 / L) / 2^32 stays below 1 / L, under the gap to the next multiple). combine_recv uses it;
 * dispatch_send's routing divides (bench/NOTES.md, "MoE dispatch: routing"). */
__device__ __forceinline__ int rank_of_expert(const moe_params &P, int e) {
  return P.local_experts_magic ? (int)(((uint64_t)(uint32_t)e * P.local_experts_magic) >> 32) : e / P.local_experts;
}

/* This kernel's call number (the slot of this block; all slots are equal when a kernel starts). */
__device__ __forceinline__ uint64_t current_call(const moe_params &P) {
  return ld_relaxed_gpu(&P.calls[blockIdx.x % (unsigned)P.ncalls]);
}

/* dispatch_send is done with call `call`: block b stores it into slots b, b + grid, ... (every slot once). The
 * fused kernel does this after its receiving part. No block of this kernel reads a slot after another block
 * stored into it (each reads its own, at its start); the next kernel reads them after the kernel boundary. */
__device__ __forceinline__ void advance_call(const moe_params &P, uint64_t call) {
  if (threadIdx.x != 0) return;
#pragma unroll 1
  for (int i = (int)blockIdx.x; i < P.ncalls; i += (int)gridDim.x) P.calls[i] = call;
}

__device__ __forceinline__ int64_t load_id(const moe_params &P, uint64_t i) {
  return P.id64 ? ((const int64_t *)P.expert_ids)[i] : (int64_t)((const int32_t *)P.expert_ids)[i];
}

/* ---- signals ------------------------------------------------------------------------------------------------- */

/* arrive()'s put path (out of line: cold wherever every peer is load/store reachable). */
static __device__ __noinline__ void arrive_put(char *word, char *counts_word, int p, uint64_t add, uint64_t counts) {
  nvshmem_quiet();
  if (counts) nvshmemx_signal_op((uint64_t *)counts_word, counts, NVSHMEM_SIGNAL_SET, p);
  nvshmemx_signal_op((uint64_t *)word, add, NVSHMEM_SIGNAL_ADD, p);
}

/* This block is done with its part of the call for destination/owner p: it adds to p's signal word `word`, so
 * that every call raises the word by exactly SY_MOE_SIGNAL_STEP, whatever the grid: block 0 adds
 * STEP - (blocks - 1) and every other block 1. Every contribution is positive, so the word reaches
 * STEP x (calls of this parity so far) only when the last block's add lands — and not a moment before (expected()).
 * One thread per p, after the block's stores (bar.sync): its release orders the block's stores, to p's memory
 * too, before its add, and the receiver's acquire of the sum synchronises with every add — at system scope for
 * a peer, at GPU scope for this rank's own word (no other GPU waits for it). The put path quiets the block's
 * puts first and adds by an NVSHMEM signal. No counter to reset, no last block. With `counts` = the call
 * (dispatch_send's block 0) the same release also publishes the counts word: the call, after the message count
 * and the counts (one fence for both words). */
__device__ __forceinline__ void arrive(const moe_params &P, char *peer, int p, int parity, int word,
                                       uint64_t counts = 0) {
  const uint64_t add = blockIdx.x == 0 ? SY_MOE_SIGNAL_STEP - (gridDim.x - 1u) : 1u;
  const uint64_t off = counter_offset(P, parity, P.ctx.rank, word);
  const uint64_t coff = counter_offset(P, parity, P.ctx.rank, SY_MOE_COUNTER_COUNTS);
  const bool own = p == P.ctx.rank;
  if (peer && counts) {
    fence_acq_rel(!own);
    st_relaxed_sys((uint64_t *)(peer + coff), counts);
    red_add_relaxed_sys((uint64_t *)(peer + off), add);
  } else if (peer) {
    if (own) red_add_release_gpu((uint64_t *)(peer + off), add);
    else red_add_release_sys((uint64_t *)(peer + off), add);
  } else {
    arrive_put(P.ws + off, P.ws + coff, p, add, counts);
  }
}

/* The value a signal word reaches when every sender's blocks arrived for call `call` (parity call % 2; calls
 * start at 1): STEP x the number of calls of that parity up to this one. */
__device__ __forceinline__ uint64_t expected(uint64_t call) { return SY_MOE_SIGNAL_STEP * ((call + 1) / 2); }

/* Every block: wait for each source's word of this call (combine_send: dispatch_recv already waited); start[s] =
 * the first flattened message of source s. With `own` >= 0 (direct: this rank's entries are already placed) that
 * source's messages are left out of the flattening, its word is the counts word, and *own_count gets its message
 * count. Returns the messages in all. */
__device__ __forceinline__ int wait_dispatch(const moe_params &P, int *start, int parity, uint64_t call, int op,
                                             int own = -1, int *own_count = nullptr) {
  __shared__ int total_s;
  for (int s = threadIdx.x; s < P.world_size; s += blockDim.x) {
    const bool ok =
        op != OP_MOE_DISPATCH_RECV ||
        (s == own ? wait_geq(P.ctx, (const uint64_t *)(P.ws + counter_offset(P, parity, s, SY_MOE_COUNTER_COUNTS)),
                             call, op, s, call)
                  : wait_geq(P.ctx, (const uint64_t *)(P.ws + counter_offset(P, parity, s, SY_MOE_COUNTER_DISPATCH)),
                             expected(call), op, s, call));
    uint64_t count =
        ok ? *(const volatile uint64_t *)(P.ws + counter_offset(P, parity, s, SY_MOE_COUNTER_MESSAGES)) : 0;
    if (count > (uint64_t)P.messages_per_source) {
      if (op == OP_MOE_DISPATCH_RECV)
        report_error(P.ctx, SY_ERR_INTERNAL, OP_MOE_MESSAGES, s, call, P.messages_per_source, count);
      count = 0;
    }
    if (s == own) *own_count = (int)count;
    start[s + 1] = s == own ? 0 : (int)count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    start[0] = 0;
#pragma unroll 1
    for (int s = 0; s < P.world_size; s++) start[s + 1] += start[s];
    total_s = start[P.world_size];
  }
  __syncthreads();
  return total_s;
}

/* ---- values ----------------------------------------------------------------------------------------------------- */

/* Loads of workspace data that peers wrote: plain loads (not the non-coherent path), after the block's
 * pollers' acquire and a bar.sync. */
__device__ __forceinline__ uint4 ld_plain(const void *p) { return *(const uint4 *)p; }

/* Binary search: the source s with start[s] <= i < start[s + 1] (start has world + 1 entries, non-decreasing). */
__device__ __forceinline__ int source_of(const int *start, int world, int i) {
  int lo = 0, hi = world - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (start[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

} // namespace sy

#endif
