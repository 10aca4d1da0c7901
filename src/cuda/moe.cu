/*
 * moe.cu — the MoE low-latency dispatch and combine on the GPU: a kernel per half (and, for the one-call
 * forms, the two halves of a direction in one kernel, SY_MOE_FUSED), in the workspace
 * layout both backends share (sy__moe_layout; src/ref/moe_ref.h draws it) and with the results of the host
 * backend (src/ref/moe_host.c) bit for bit. docs/moe_ll_kernels.md is the plan; in short:
 *
 *   dispatch_send  every block routes all tokens (ballots over "goes to rank p" per 32 units — tokens, or
 *                  (token, k) pairs with SY_MOE_PER_EXPERT — give each unit its message index at p, so
 *                  messages to p are in token order; one pass with a thread per (token, k) when top_k is a
 *                  power of two), while its first token's data loads, then
 *                  blocks take tokens: FP8 quantisation in registers (8 lanes per 128-element group), and the
 *                  message — header, k entries, payload, scales — stored straight into every destination's
 *                  dispatch region (NVLink stores; a staged NVSHMEM put where the peer is not load/store
 *                  reachable). Block 0 stores each destination's message count; then every block, done with its
 *                  messages, adds to the destination's signal word with one release-ordered add (see arrive()).
 *                  Each entry carries its rank among this source's messages naming its expert (from per-expert
 *                  token masks in shared memory), and block 0 stores each destination's per-expert counts.
 *                  Block 0's add also publishes the counts word (the call; SY_MOE_COUNTER_COUNTS) with them.
 *                  Releases to this rank's own words are GPU-scoped, to peers' system-scoped.
 *   dispatch_recv  waits for every source's word; the counts' prefix over sources gives each (source, expert)
 *                  its first slot, so each (message, k) entry's slot is first + rank: the grid's warps copy
 *                  the entries naming a local expert into the caller's expert-major buffers, no scan; and
 *                  remember each entry's slot.
 *   direct         (the one-call dispatch, SY_MOE_DIRECT; by default per expert from SMs / 2 tokens): the
 *                  messages to this rank carry no payload; after its signal adds each sending block stores its
 *                  own-rank entries straight into the expert buffers (slots from the lower sources' counts,
 *                  after their counts words), and the receiving part waits for this rank's counts word only.
 *   combine_send   a block per received message: default, fmaf(w_k, y_k, .) over its entries in k order from
 *                  +0, rounded to bf16, stored into the owner's combine region at [this rank][token];
 *                  SY_MOE_PER_EXPERT, y_k into [token][k]. Then every block adds to each owner's signal word.
 *   combine_recv   waits for every rank's word; a block per token adds the rank partials in rank order (or
 *                  fmaf(w_k, y_k) in k order) from +0 and rounds once.
 * Call numbers live on the device (one slot per block, each advanced by dispatch_send's block for it at its
 * end: moe_local), so every half is graph-capturable and needs no reset; the signal words only grow, by SY_MOE_SIGNAL_STEP per call of their parity.
 * Parity n % 2 of every region is safe to reuse at call n + 2 by the argument in moe_host.c.
 */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <stdlib.h>
#include <string.h>

#include "cuda/device.cuh"
#include "ref/fp8.h"
#include "ref/moe_ref.h"

namespace sy {

constexpr int MOE_THREADS = 512;
constexpr int MOE_WARPS = MOE_THREADS / 32;
constexpr int MOE_MAX_K = 32;
constexpr int MOE_PEER_TAB = 8;
/* A kernel instance per wire and mode (template parameter MODE, these bits), so that no hot path jumps over
 * another mode's inlined code (bench/NOTES.md, "Instruction fetch"): FP8 wire (E4M3 or UE8M0 scales; else BF16),
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
  char *ws; /* this rank's workspace (symmetric) */
  char *peer_tab[MOE_PEER_TAB]; /* W <= MOE_PEER_TAB: peer_ws() of every rank, looked up once by the host */
  moe_local *local;
  uint64_t *calls;    /* [ncalls]: the current call number, one slot per block (moe_local) */
  int ncalls;
  int32_t *ids;       /* [T][K]: this rank's dispatch ids, checked (-1 for a rejected one) */
  int32_t *slot_of;   /* [W][T][K]: slot of (source, message, k) here */
  char *staging;      /* [blocks][stage_bytes]: messages and vectors on their way to a put-only peer */
  uint64_t stage_bytes;
  uint64_t msg_bytes, payload_offset, scales_offset, dispatch_bytes, parity_bytes, counters_offset, counts_offset;
  int T, M, H, K, E, L, W, S, G, wire, per_expert; /* M: messages per source (T, or T x K per expert) */
  int rank_masks; /* dispatch_send keeps a token mask per expert in shared memory for the ranks (else it counts) */
  int self_cap;   /* with direct: entries the block's list of own-rank entries holds (tokens per block x K) */
  uint64_t L_magic; /* ceil(2^32 / L) where num_experts x L < 2^32 (expert -> rank by a multiply), else 0 */
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

/* ---- addressing ---------------------------------------------------------------------------------------------- */

__device__ __forceinline__ uint64_t msg_offset(const moe_params &P, int parity, int source, int index) {
  return (uint64_t)parity * P.parity_bytes + ((uint64_t)source * P.M + (uint64_t)index) * P.msg_bytes;
}

__device__ __forceinline__ uint64_t combine_offset(const moe_params &P, int parity, uint64_t vector) {
  return (uint64_t)parity * P.parity_bytes + P.dispatch_bytes + vector * (uint64_t)P.H * 2u;
}

/* counts[parity][source][local expert]: int32 */
__device__ __forceinline__ uint64_t counts_offset(const moe_params &P, int parity, int source, int e) {
  return P.counts_offset + (((uint64_t)parity * P.W + (uint64_t)source) * P.L + (uint64_t)e) * 4u;
}

__device__ __forceinline__ uint64_t counter_offset(const moe_params &P, int parity, int source, int word) {
  return P.counters_offset + ((uint64_t)parity * P.W + (uint64_t)source) * SY_MOE_COUNTER_BYTES + 8u * (uint64_t)word;
}

/* This rank's workspace as peer p sees it, when p is load/store reachable (else NULL: puts). */
__device__ __forceinline__ char *peer_ws(const moe_params &P, int p) {
  if (P.W <= MOE_PEER_TAB) return P.peer_tab[p]; /* a kernel parameter: no dependent loads at the start */
  if (P.ctx.force_put && p != P.ctx.rank) return nullptr;
  return nvshmem_ptr_cold(P.ws, p);
}

/* The rank holding expert e >= 0: e / L by a multiply-high (exact for e x L < 2^32: the error e x (m - 2^32 / L)
 * / 2^32 stays below 1 / L, under the gap to the next multiple). combine_recv uses it; in dispatch_send's routing
 * it (with a __match_any_sync repeat check) measured 0.8-1.9 us slower at 128-256 tokens (bench/NOTES.md). */
__device__ __forceinline__ int rank_of(const moe_params &P, int e) {
  return P.L_magic ? (int)(((uint64_t)(uint32_t)e * P.L_magic) >> 32) : e / P.L;
}

/* This kernel's call number (the slot of this block; all slots are equal when a kernel starts). */
__device__ __forceinline__ uint64_t current_call(const moe_params &P) {
  return ld_relaxed_gpu(&P.calls[blockIdx.x % (unsigned)P.ncalls]);
}

__device__ __forceinline__ int64_t load_id(const moe_params &P, uint64_t i) {
  return P.id64 ? ((const int64_t *)P.expert_ids)[i] : (int64_t)((const int32_t *)P.expert_ids)[i];
}

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

__device__ __forceinline__ float bf16_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
         ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}

/* Loads of workspace data that peers wrote: plain loads (not the non-coherent path), after the block's
 * pollers' acquire and a bar.sync. */
__device__ __forceinline__ uint4 ld_plain(const void *p) { return *(const uint4 *)p; }

/* Binary search: the source s with start[s] <= i < start[s + 1] (start has W + 1 entries, non-decreasing). */
__device__ __forceinline__ int source_of(const int *start, int W, int i) {
  int lo = 0, hi = W - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (start[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* FP8 quantisation of a lane's 16 bf16 elements (a, b), 8 lanes per 128-element group: the group's scale
 * (amax / 448, or its power of two) into *scale and the 16 E4M3 codes. Every lane of the warp must call it (the
 * group's amax by shuffles); lanes with no data pass zeros. */
__device__ __forceinline__ uint4 quantise16(const uint4 a, const uint4 b, int ue8m0, float *scale_out) {
  const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  float x[16];
#pragma unroll
  for (int i = 0; i < 8; i++) {
    x[2 * i] = bf16_lo(w[i]);
    x[2 * i + 1] = bf16_hi(w[i]);
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(x[i]));
  amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
  amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 4));
  const float scale = sy__fp8_scale(amax, ue8m0);
  /* q = E4M3(x / scale): IEEE division as on the host, then the hardware conversion (cvt.rn.satfinite.e4m3x2,
   * which test_gpu_fp8 checks against sy__fp8_e4m3_encode on every fp32 input). */
  uint32_t q[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(x[4 * i], scale), __fdiv_rn(x[4 * i + 1], scale)), __NV_SATFINITE, __NV_E4M3);
    const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(x[4 * i + 2], scale), __fdiv_rn(x[4 * i + 3], scale)), __NV_SATFINITE, __NV_E4M3);
    q[i] = (uint32_t)lo | (uint32_t)hi << 16;
  }
  *scale_out = scale;
  return make_uint4(q[0], q[1], q[2], q[3]);
}

/* Vector v (16 elements) of a bf16 token, loaded (where active) and quantised: quantise16's contract. */
__device__ __forceinline__ uint4 load_quantise16(const uint16_t *tok, int v, bool active, int ue8m0, float *scale) {
  uint4 a = make_uint4(0, 0, 0, 0), b = make_uint4(0, 0, 0, 0);
  if (active) {
    a = __ldg((const uint4 *)(tok + (uint64_t)v * 16));
    b = __ldg((const uint4 *)(tok + (uint64_t)v * 16 + 8));
  }
  return quantise16(a, b, ue8m0, scale);
}

/* ---- dispatch_send ---------------------------------------------------------------------------------------------- */

/* Routing for top-k not a power of two, or W > 64 (dispatch_send's comment says what it computes): repeats by
 * scans of the token's row and ranks into dmask[t], then a warp per chunk ballots. Out of line: cold at the
 * usual configurations. */
static __device__ __noinline__ void route_two_pass(const moe_params &P, uint64_t call, int *ids,
                                                   unsigned long long *dmask, uint32_t *masks, int *named,
                                                   uint32_t *emask) {
  const int W = P.W, K = P.K, L = P.L, nt = P.num_tokens, KU = P.per_expert ? K : 1, NC = (P.M + 31) / 32;
  const int NT = (P.T + 31) / 32, chunks = (nt * KU + 31) / 32;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x / 32u;
  for (int base = 0; base < nt * K; base += blockDim.x) {
    const int i = base + (int)threadIdx.x, t = i / K, k = i % K;
    uint64_t bit = 0;
    if (i < nt * K && ids[i] >= 0) {
      const int v = ids[i];
      bool dup = false;
      for (int j = 0; j < k; j++) dup = dup || ids[(size_t)t * K + j] == v;
      if (dup) {
        if (blockIdx.x == 0) report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_IDS, t, call, (uint64_t)k, (uint64_t)v);
        ids[i] = -1;
      } else {
        bit = 1ull << ((v / L) & 63);
        if (blockIdx.x == 0) atomicAdd(&named[v], 1); /* a token names an expert once: one message each */
        if (P.rank_masks) atomicOr(&emask[(size_t)v * NT + t / 32], 1u << (t & 31));
      }
    }
    if (W <= 64 && bit) atomicOr(&dmask[t], bit);
  }
  __syncthreads();

  for (int c = (int)warp; c < chunks; c += MOE_WARPS) {
    const int u = c * 32 + (int)lane;
    for (int w0 = 0; w0 < W; w0 += 64) {
      uint64_t dm = 0;
      if (u < nt * KU && W <= 64 && !P.per_expert) dm = dmask[u];
      else if (u < nt * KU)
        for (int k = P.per_expert ? u % K : 0; k < (P.per_expert ? u % K + 1 : K); k++) {
          const int e = ids[(size_t)(u / KU) * K + k];
          const int p = e >= 0 ? e / L : -1;
          if (p >= w0 && p < w0 + 64) dm |= 1ull << (p - w0);
        }
      const int wend = W < w0 + 64 ? W : w0 + 64;
      for (int p = w0; p < wend; p++) {
        const uint32_t m = __ballot_sync(0xFFFFFFFFu, (dm >> (p - w0)) & 1u);
        if (lane == 0) masks[(size_t)p * NC + c] = m;
      }
    }
  }
}

/* Token t's ranks by comparing every earlier id (where the token masks did not fit in shared memory): rank_s[k]
 * += the earlier namings of its k-th expert (matches are rare: shared atomics, after a 64-bit filter of the
 * token's experts). Out of line: cold at the usual sizes. */
static __device__ __noinline__ void ranks_by_scan(const int *ids, int t, int K, int *rank_s) {
  const int *row = ids + (size_t)t * K;
  uint64_t filter = 0;
  for (int k = 0; k < K; k++)
    if (row[k] >= 0) filter |= 1ull << (row[k] & 63);
  for (int j = threadIdx.x; j < t * K; j += blockDim.x) {
    const int v = ids[j];
    if (v < 0 || !((filter >> (v & 63)) & 1u)) continue;
    for (int k = 0; k < K; k++)
      if (row[k] == v) {
        atomicAdd(&rank_s[k], 1);
        break;
      }
  }
}

/* The messages of a token staged for put-only peers (tgt_s[j] NULL): header j and the shared payload, by
 * NVSHMEM block puts. Out of line: cold wherever every peer is load/store reachable. */
static __device__ __noinline__ void put_staged(const moe_params &P, int parity, int ndest, const int *dest_s,
                                               const int *idx_s, char *const *tgt_s, const char *stage) {
  __syncthreads();
  for (int j = 0; j < ndest; j++) {
    if (tgt_s[j]) continue;
    const int p = dest_s[j];
    char *remote = P.ws + msg_offset(P, parity, P.ctx.rank, idx_s[j]);
    nvshmemx_putmem_block(remote, stage + P.msg_bytes + (uint64_t)j * P.payload_offset, P.payload_offset, p);
    nvshmemx_putmem_block(remote + P.payload_offset, stage + P.payload_offset, P.msg_bytes - P.payload_offset, p);
  }
}

/* dispatch_send's work; returns the call number it sent as. */
template <int MODE>
__device__ __forceinline__ uint64_t dispatch_send_body(const moe_params &P) {
  constexpr bool fp8 = MODE & MODE_FP8, PE = MODE & MODE_PE, DIRECT = MODE & MODE_DIRECT, TR = MODE & MODE_TRACE;
  extern __shared__ uint64_t moe_dyn[];
  const int W = P.W, K = P.K, L = P.L, me = P.ctx.rank, nt = P.num_tokens;
  /* Units: tokens (default: a message per (token, rank)) or (token, k) pairs (SY_MOE_PER_EXPERT: a message per
   * (token, expert)), in chunks of 32 (sized for max_tokens). */
  const int KU = PE ? K : 1, NC = (P.M + 31) / 32;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x / 32u;
  /* dynamic: peers[W] (pointers), dmask[T] (W <= 64: the ranks each token goes to), masks[W][NC],
   * prefix[W][NC + 1], ids[T][K] (checked), named[E] (block 0: messages naming each expert), and with
   * rank_masks emask[E][NT] (bit j of word c: token 32c + j names the expert) */
  char **peers = (char **)moe_dyn;
  unsigned long long *dmask = (unsigned long long *)(peers + W);
  uint32_t *masks = (uint32_t *)(dmask + P.T);
  int *prefix = (int *)(masks + (size_t)W * NC);
  int *ids = prefix + (size_t)W * (NC + 1);
  int *named = ids + (size_t)P.T * K;
  const int NT = (P.T + 31) / 32;
  uint32_t *emask = (uint32_t *)(named + P.E);

  __shared__ uint64_t call_s;
  __shared__ int ndest_s, dest_s[MOE_MAX_K], idx_s[MOE_MAX_K];
  __shared__ uint32_t kmask_s[MOE_MAX_K]; /* the k a message carries */
  __shared__ float ent_w_s[MOE_MAX_K];
  __shared__ int rank_s[MOE_MAX_K]; /* per k of the current token: earlier messages naming the same expert */
  __shared__ char *tgt_s[MOE_MAX_K];  /* message (header) */
  __shared__ char *pay_s[MOE_MAX_K];  /* its payload and scales (NULL: direct, to this rank) */
  __shared__ int any_put_s, nself_s;
  /* direct: the block's entries on this rank, {token, message index, local expert << 5 | k, rank}, after emask */
  const size_t list_at = ((size_t)((char *)(emask + (P.rank_masks ? (size_t)P.E * NT : 0)) - (char *)moe_dyn) + 15) &
                         ~(size_t)15;
  int4 *self_list = (int4 *)((char *)moe_dyn + list_at);

  /* The block's first token: its first round of vectors (vector threadIdx.x) and its weights, loaded now, so
   * that their latency passes during the routing instead of after it. */
  const int ue8m0 = P.wire == SY_MOE_WIRE_FP8_UE8M0;
  const int nvec = fp8 ? P.H / 16 : P.H / 8; /* FP8: 16 elements per lane (8 lanes per group); BF16: 8 */
  /* vt: the thread's vector slot, warp 0 (which sets up each token's messages) last: with up to 480 vectors per
   * round (hidden <= 7680 FP8, 3840 BF16) it carries none in round 0, so its setup runs alone before the
   * bar.sync while the other warps quantise. */
  const int vt = (int)(threadIdx.x + MOE_THREADS - 32) % MOE_THREADS;
  /* Tokens go to blocks from the last one down (token t to block grid - 1 - t, and t + grid, ...): block 0, which
   * also publishes the counts and keeps the ids, holds a token only when every block has one. */
  const int tb = (int)gridDim.x - 1 - (int)blockIdx.x; /* this block's first token */
  const bool first_own = tb < nt;
  uint4 pre_a = make_uint4(0, 0, 0, 0), pre_b = make_uint4(0, 0, 0, 0);
  float pre_w = 0.0f;
  if (first_own) {
    const uint16_t *tok0 = P.tokens + (uint64_t)tb * P.H;
    if (vt < nvec) {
      pre_a = __ldg((const uint4 *)(tok0 + (uint64_t)vt * (fp8 ? 16 : 8)));
      if (fp8) pre_b = __ldg((const uint4 *)(tok0 + (uint64_t)vt * 16 + 8));
    }
    if (threadIdx.x < (unsigned)K && P.weights) pre_w = P.weights[(uint64_t)tb * K + threadIdx.x];
  }
  if (threadIdx.x == 0) {
    call_s = current_call(P) + 1;
    nself_s = 0;
  }
  for (int p = threadIdx.x; p < W; p += blockDim.x) peers[p] = peer_ws(P, p);
  /* The ids, loaded once (coalesced, independent loads) into shared memory; outside [-1, E): reported, -1. */
  for (int i = threadIdx.x; i < nt * K; i += blockDim.x) {
    const int64_t id = load_id(P, (uint64_t)i);
    const bool bad = id < -1 || id >= P.E;
    if (bad && blockIdx.x == 0)
      report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_IDS, i / K, current_call(P) + 1, (uint64_t)(i % K),
                   (uint64_t)id);
    ids[i] = bad ? -1 : (int)id;
  }
  const bool one_pass = (K & (K - 1)) == 0 && W <= 64;
  if (!one_pass)
    for (int t = threadIdx.x; t < nt; t += blockDim.x) dmask[t] = 0;
  else if (!PE)
    for (int i = threadIdx.x; i < W * NC; i += blockDim.x) masks[i] = 0;
  if (blockIdx.x == 0)
    for (int e = threadIdx.x; e < P.E; e += blockDim.x) named[e] = 0;
  if (P.rank_masks)
    for (int i = threadIdx.x; i < P.E * NT; i += blockDim.x) emask[i] = 0;
  __syncthreads();
  const uint64_t call = call_s;
  const int parity = (int)(call & 1);
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_KERNEL, true, -1, call);
    trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_ROUTE, true, -1, call);
  }
  /* A repeat of an earlier k of the same token: reported, -1 (clearing a repeat in place cannot hide another:
   * its value stays at its first k, which is never cleared). Then routing: masks[p][c] bit j = unit 32c + j
   * goes to rank p. With K a power of two and W <= 64, one pass: a thread per (token, k), the token's K lanes
   * in one warp — repeats found by shuffles, the token's ranks OR-ed by shuffles, and each warp's ballots put
   * into the masks (OR-ed in for tokens: a warp holds 32 / K of a chunk's 32). Otherwise two: repeats by scans
   * of the token's row and ranks into dmask[t], then a warp per chunk ballots. */
  const int chunks = (nt * KU + 31) / 32;
  if (one_pass) {
    const int lgK = __ffs(K) - 1;
    for (int base = 0; base < nt * K; base += blockDim.x) {
      const int i = base + (int)threadIdx.x, t = i >> lgK, k = i & (K - 1);
      int v = i < nt * K ? ids[i] : -1;
      bool dup = false;
      for (int j = 0; j < K; j++) {
        const int w = __shfl_sync(0xFFFFFFFFu, v, (int)(lane & ~(unsigned)(K - 1)) | j);
        dup |= j < k && w == v;
      }
      if (v >= 0 && dup) {
        if (blockIdx.x == 0) report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_IDS, t, call, (uint64_t)k, (uint64_t)v);
        ids[i] = -1;
        v = -1;
      }
      const int p = v >= 0 ? v / L : -1;
      if (v >= 0) {
        if (blockIdx.x == 0) atomicAdd(&named[v], 1); /* a token names an expert once: one message each */
        if (P.rank_masks) atomicOr(&emask[(size_t)v * NT + t / 32], 1u << (t & 31));
      }
      if (PE) { /* units are the (token, k) = i: this warp's lanes are chunk base / 32 + warp */
        const bool any = base + (int)warp * 32 < nt * K;
        for (int q = 0; q < W; q++) {
          const uint32_t m = __ballot_sync(0xFFFFFFFFu, p == q);
          if (lane == 0 && any) masks[(size_t)q * NC + base / 32 + warp] = m;
        }
      } else {
        uint64_t bit = p >= 0 ? 1ull << p : 0;
        for (int off = 1; off < K; off <<= 1) bit |= __shfl_xor_sync(0xFFFFFFFFu, bit, off);
        /* lanes k = 0 hold their token's ranks: tokens t0 .. t0 + 32 / K - 1, in chunk t0 / 32; lane q (and q
         * + 32) packs rank q's bits and ORs them in */
        const int t0 = (base >> lgK) + (int)warp * (32 >> lgK);
        uint32_t mine0 = 0, mine1 = 0;
        for (int q = 0; q < W; q++) {
          const uint32_t m = __ballot_sync(0xFFFFFFFFu, k == 0 && ((bit >> q) & 1u));
          if (q == (int)lane) mine0 = m;
          if (q == (int)lane + 32) mine1 = m;
        }
        for (int h = 0; h < 2; h++) {
          const uint32_t m = h ? mine1 : mine0;
          if (!m) continue;
          uint32_t packed = 0;
#pragma unroll 1
          for (int j = 0; j < (32 >> lgK); j++) packed |= ((m >> (j << lgK)) & 1u) << j;
          atomicOr(&masks[(size_t)((int)lane + 32 * h) * NC + t0 / 32], packed << (t0 & 31));
        }
      }
    }
  } else {
    route_two_pass(P, call, ids, dmask, masks, named, emask);
  }
  __syncthreads();
  for (int p = threadIdx.x; p < W; p += blockDim.x) {
    int acc = 0;
#pragma unroll(PE ? 4 : 1) /* per expert a warp's 32 (token, k) units make a chunk: 8 x more chunks than tokens / 32 */
    for (int c = 0; c < chunks; c++) {
      prefix[(size_t)p * (NC + 1) + c] = acc;
      acc += __popc(masks[(size_t)p * NC + c]);
    }
    prefix[(size_t)p * (NC + 1) + NC] = acc;
    /* Block 0 tells every destination how many messages it gets (0 too: every destination hears from every
     * source), before its signal add (below) releases it. */
    if (blockIdx.x == 0) {
      const uint64_t off = counter_offset(P, parity, me, SY_MOE_COUNTER_MESSAGES);
      if (peers[p]) *(volatile uint64_t *)(peers[p] + off) = (uint64_t)acc;
      else p_u64_cold((uint64_t *)(P.ws + off), (uint64_t)acc, p);
    }
  }
  /* Block 0 keeps this dispatch's ids for the combine. */
  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) P.local->num_tokens = nt;
    for (int i = threadIdx.x; i < nt * K; i += blockDim.x) P.ids[i] = ids[i];
  }
  __syncthreads();
  /* Block 0 tells every destination with messages how many name each of its experts (ordered before the
   * destination's count word: block 0 takes part in completing every such destination, below). */
  if (blockIdx.x == 0)
#pragma unroll 1
    for (int i = threadIdx.x; i < P.E; i += blockDim.x) {
      const int p = i / L;
      if (prefix[(size_t)p * (NC + 1) + NC] == 0) continue;
      const uint64_t off = counts_offset(P, parity, me, i - p * L);
      if (peers[p]) *(int *)(peers[p] + off) = named[i];
      else p_int_cold((int *)(P.ws + off), named[i], p);
    }
  /* (block 0's signal add, below, publishes them with the counts word too) */
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_ROUTE, false, -1, call);
    trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_COPY, true, -1, call);
  }

  char *stage = P.staging ? P.staging + (uint64_t)blockIdx.x * P.stage_bytes : nullptr;
  uint4 q0 = make_uint4(0, 0, 0, 0); /* round 0 of the token (vector vt), quantised; kept for the direct part */
  float s0 = 0.0f;
  for (int t = tb; t < nt; t += gridDim.x) {
    __syncthreads(); /* the previous token's shared state is no longer read */
    if (threadIdx.x == 0) {
      ndest_s = 0;
      any_put_s = 0;
    }
    if (threadIdx.x < (unsigned)K) rank_s[threadIdx.x] = 0;
    /* Round 0 (vector vt) of the token, loaded before the message setup below (the first token's came
     * with the kernel's start) and quantised after it, so the wait for the data passes during the setup. */
    const uint16_t *tok = P.tokens + (uint64_t)t * P.H;
    const bool first = t == tb, r0 = (vt & ~31) < nvec, act0 = vt < nvec;
    uint4 a0 = pre_a, b0 = pre_b;
    float w_t = pre_w;
    if (!first) {
      if (act0) {
        a0 = __ldg((const uint4 *)(tok + (uint64_t)vt * (fp8 ? 16 : 8)));
        if (fp8) b0 = __ldg((const uint4 *)(tok + (uint64_t)vt * 16 + 8));
      }
      if (threadIdx.x < (unsigned)K && P.weights) w_t = P.weights[(uint64_t)t * K + threadIdx.x];
    }
    __syncthreads();
    /* Ranks: how many earlier tokens name each of this token's experts (a token names an expert at most
     * once, and each naming is one message to the expert's rank): from the expert's token mask, or, where the
     * masks did not fit, by comparing every earlier id (matches are rare: shared atomics, after a 64-bit
     * filter of the token's experts). */
    if (P.rank_masks) {
      if (threadIdx.x < (unsigned)K) {
        const int v = ids[(size_t)t * K + threadIdx.x];
        if (v >= 0) {
          const uint32_t *em = emask + (size_t)v * NT;
          int r = __popc(em[t / 32] & ((1u << (t & 31)) - 1u));
#pragma unroll 1
          for (int c = 0; c < t / 32; c++) r += __popc(em[c]);
          rank_s[threadIdx.x] = r;
        }
      }
    } else {
      ranks_by_scan(ids, t, K, rank_s);
    }
    /* The token's messages: default, thread p for destination p (the k on p: experts [p L, p L + L)); per
     * expert, thread k. */
    for (int x = threadIdx.x; x < (PE ? K : W); x += blockDim.x) {
      const int *row = ids + (size_t)t * K;
      const int p = PE ? (row[x] >= 0 ? row[x] / L : -1) : x;
      if (p < 0) continue;
      const int u = t * KU + (PE ? x : 0), c = u / 32, b = u % 32;
      const uint32_t m = masks[(size_t)p * NC + c];
      if (!((m >> b) & 1u)) continue;
      /* the k the message carries: per expert its own; else the token's k on p (a short loop left rolled: the
       * unrolled one was ~250 instructions fetched once per token) */
      uint32_t kmask = PE ? 1u << x : 0u;
      const int lo = p * L, hi = lo + L;
#pragma unroll 1
      for (int k = 0; k < (PE ? 0 : K); k++) kmask |= (uint32_t)(row[k] >= lo && row[k] < hi) << k;
      const int j = atomicAdd(&ndest_s, 1);
      const int idx = prefix[(size_t)p * (NC + 1) + c] + __popc(m & ((1u << b) - 1u));
      dest_s[j] = p;
      idx_s[j] = idx;
      kmask_s[j] = kmask;
      tgt_s[j] = peers[p] ? peers[p] + msg_offset(P, parity, me, idx) : nullptr;
      pay_s[j] = DIRECT && p == me ? nullptr : tgt_s[j];
      if (!peers[p]) any_put_s = 1;
    }
    if (threadIdx.x < (unsigned)K) ent_w_s[threadIdx.x] = w_t;
    const int *ent_e_s = ids + (size_t)t * K;
    q0 = a0;
    s0 = 0.0f;
    if (fp8 && r0) q0 = quantise16(a0, b0, ue8m0, &s0);
    __syncthreads();
    const int ndest = ndest_s, any_put = any_put_s;
    if (fp8) {
      for (int v0 = vt & ~31; v0 < nvec; v0 += MOE_THREADS) {
        const int v = v0 + (int)lane;
        const bool active = v < nvec;
        uint4 qv = q0;
        float scale = s0;
        if (v0 != (vt & ~31)) qv = load_quantise16(tok, v, active, ue8m0, &scale);
        if (active) {
          const uint64_t po = P.payload_offset + (uint64_t)v * 16, so = P.scales_offset + (uint64_t)(v / 8) * 4;
          for (int j = 0; j < ndest; j++) {
            char *dst = pay_s[j];
            if (!dst) continue;
            *(uint4 *)(dst + po) = qv;
            if ((lane & 7u) == 0) *(float *)(dst + so) = scale;
          }
          if (any_put) {
            *(uint4 *)(stage + po) = qv;
            if ((lane & 7u) == 0) *(float *)(stage + so) = scale;
          }
        }
      }
    } else {
      for (int v = vt; v < nvec; v += MOE_THREADS) {
        const uint4 a = v == vt ? q0 : __ldg((const uint4 *)(tok + (uint64_t)v * 8));
        const uint64_t po = P.payload_offset + (uint64_t)v * 16;
        for (int j = 0; j < ndest; j++)
          if (pay_s[j]) *(uint4 *)(pay_s[j] + po) = a;
        if (any_put) *(uint4 *)(stage + po) = a;
      }
    }
    /* Headers: {source token, entries on p, call, 0}, then per k {local expert on p or -1, weight}, then per k
     * the entry's rank among this source's messages naming that expert (-1 for -1). */
    for (int i = threadIdx.x; i < ndest * (K + 1); i += blockDim.x) {
      const int j = i / (K + 1), r = i % (K + 1), p = dest_s[j];
      const uint32_t kmask = kmask_s[j];
      char *dst = tgt_s[j] ? tgt_s[j] : stage + P.msg_bytes + (uint64_t)j * P.payload_offset;
      if (r == 0) {
        *(int4 *)dst = make_int4(t, __popc(kmask), (int)(uint32_t)call, 0);
      } else {
        const int k = r - 1, e = ent_e_s[k];
        const bool on = (kmask >> k) & 1u;
        *(int2 *)(dst + SY_MOE_MSG_HEADER + 8 * k) = make_int2(on ? e - p * L : -1, __float_as_int(ent_w_s[k]));
        *(int *)(dst + SY_MOE_MSG_HEADER + 8 * K + 4 * k) = on ? rank_s[k] : -1;
        if (DIRECT && on && p == me) { /* placed after the sends (below) */
          const int n = atomicAdd(&nself_s, 1);
          if (n < P.self_cap) self_list[n] = make_int4(t, idx_s[j], (e - p * L) << 5 | k, rank_s[k]);
        }
      }
    }
    if (any_put) put_staged(P, parity, ndest, dest_s, idx_s, tgt_s, stage);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_COPY, false, -1, call);
    trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_SIGNAL, true, -1, call);
  }
  for (int p = threadIdx.x; p < W; p += blockDim.x)
    arrive(P, peers[p], p, parity, SY_MOE_COUNTER_DISPATCH, blockIdx.x == 0 ? call : 0);
  __syncthreads();
  if (threadIdx.x == 0) trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_SIGNAL, false, -1, call);

  /* direct (the one-call dispatch): this rank's own entries, kept out of the messages above, go straight into
   * the expert buffers now, while the other ranks' messages travel — nothing to copy for them after the wait.
   * Their slots follow the lower sources' counts (sum over s < me), which those sources' block 0 published with
   * the counts word in its signal add. A block with a single token of a single round still holds it, quantised,
   * in q0 / s0; otherwise it loads the token again. */
  if (DIRECT && nself_s > 0) { /* (nself_s is final: bar.syncs came after the header loop) */
    if (threadIdx.x == 0) trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_LOCAL, true, -1, call);
    int *lower = (int *)masks; /* [W]: source s < me sent messages here (masks are no longer read) */
    int *fs = named;           /* [L]: the slot of this rank's first entry of each local expert */
    for (int s = threadIdx.x; s < me; s += blockDim.x) {
      const bool ok = wait_geq(P.ctx, (const uint64_t *)(P.ws + counter_offset(P, parity, s, SY_MOE_COUNTER_COUNTS)),
                               call, OP_MOE_DISPATCH_RECV, s, call);
      lower[s] = ok && *(const volatile uint64_t *)(P.ws + counter_offset(P, parity, s, SY_MOE_COUNTER_MESSAGES)) > 0;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < L; e += blockDim.x) {
      int acc = 0;
      for (int s = 0; s < me; s++)
        if (lower[s]) acc += *(const volatile int *)(P.ws + counts_offset(P, parity, s, e));
      fs[e] = acc;
    }
    __syncthreads();
    const int n = nself_s < P.self_cap ? nself_s : P.self_cap;
    const bool keep = tb + (int)gridDim.x >= nt && nvec <= MOE_THREADS;
    const uint64_t row_bytes = (uint64_t)P.H * (fp8 ? 1 : 2);
    char **rows = tgt_s;
    float **srows = (float **)pay_s;
    for (int i0 = 0; i0 < n;) { /* a run of entries of one token (the list is in the block's token order) */
      const int t = self_list[i0].x;
      int i1 = i0 + 1;
      while (i1 < n && self_list[i1].x == t) i1++;
      if (threadIdx.x < (unsigned)(i1 - i0)) {
        const int4 en = self_list[i0 + threadIdx.x];
        const int e = en.z >> 5, k = en.z & 31, slot = fs[e] + en.w;
        const uint64_t at = (uint64_t)e * P.S + (uint64_t)(slot < P.S ? slot : 0);
        if (slot >= P.S) report_error(P.ctx, SY_ERR_INTERNAL, OP_MOE_DISPATCH_RECV, me, call, (uint64_t)P.S, slot);
        rows[threadIdx.x] = slot < P.S ? (char *)P.recv.tokens + at * row_bytes : nullptr;
        srows[threadIdx.x] = fp8 ? P.recv.scales + (uint64_t)e * P.G * P.S + (uint64_t)slot : nullptr;
        if (slot < P.S) {
          P.recv.src[2 * at] = me;
          P.recv.src[2 * at + 1] = t;
          P.slot_of[((uint64_t)me * P.M + (uint64_t)en.y) * K + k] = slot;
        }
      }
      __syncthreads();
      const int nrows = i1 - i0;
      const uint16_t *tok = P.tokens + (uint64_t)t * P.H;
      if (fp8) {
        for (int v0 = vt & ~31; v0 < nvec; v0 += MOE_THREADS) {
          const int v = v0 + (int)lane;
          const bool active = v < nvec;
          uint4 qv = q0;
          float scale = s0;
          if (!keep) qv = load_quantise16(tok, v, active, ue8m0, &scale);
          if (active)
            for (int j = 0; j < nrows; j++) {
              if (!rows[j]) continue;
              *(uint4 *)(rows[j] + (uint64_t)v * 16) = qv;
              if ((lane & 7u) == 0) srows[j][(uint64_t)(v / 8) * P.S] = scale;
            }
        }
      } else {
        for (int v = vt; v < nvec; v += MOE_THREADS) {
          const uint4 a = keep ? q0 : __ldg((const uint4 *)(tok + (uint64_t)v * 8));
          for (int j = 0; j < nrows; j++)
            if (rows[j]) *(uint4 *)(rows[j] + (uint64_t)v * 16) = a;
        }
      }
      __syncthreads();
      i0 = i1;
    }
    if (threadIdx.x == 0) trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_LOCAL, false, -1, call);
  }
  if (threadIdx.x == 0) trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_KERNEL, false, -1, call);
  return call;
}

/* dispatch_send is done with call `call`: block b stores it into slots b, b + grid, ... (every slot once). The
 * fused kernel does this after its receiving part. No block of this kernel reads a slot after another block
 * stored into it (each reads its own, at its start); the next kernel reads them after the kernel boundary. */
__device__ __forceinline__ void advance_call(const moe_params &P, uint64_t call) {
  if (threadIdx.x != 0) return;
#pragma unroll 1
  for (int i = (int)blockIdx.x; i < P.ncalls; i += (int)gridDim.x) P.calls[i] = call;
}

/* ---- dispatch_recv ----------------------------------------------------------------------------------------------- */

/* Every block: wait for each source's word of this call; start[s] = the first flattened message of source s.
 * With `own` >= 0 (direct: this rank's entries are already placed) that source's messages are left out of the
 * flattening, its word is the counts word, and *own_count gets its message count. */
__device__ int wait_dispatch(const moe_params &P, int *start, int parity, uint64_t call, int op, int own = -1,
                             int *own_count = nullptr) {
  __shared__ int total_s;
  for (int s = threadIdx.x; s < P.W; s += blockDim.x) {
    /* combine_send: dispatch_recv waited for the word */
    const bool ok = op != OP_MOE_DISPATCH_RECV ||
                    (s == own ? wait_geq(P.ctx, (const uint64_t *)(P.ws + counter_offset(P, parity, s, SY_MOE_COUNTER_COUNTS)),
                                         call, op, s, call)
                              : wait_geq(P.ctx, (const uint64_t *)(P.ws + counter_offset(P, parity, s, SY_MOE_COUNTER_DISPATCH)),
                                         expected(call), op, s, call));
    uint64_t count = ok ? *(const volatile uint64_t *)(P.ws + counter_offset(P, parity, s, SY_MOE_COUNTER_MESSAGES)) : 0;
    if (count > (uint64_t)P.M) {
      if (op == OP_MOE_DISPATCH_RECV) report_error(P.ctx, SY_ERR_INTERNAL, OP_MOE_DISPATCH_RECV, s, call, P.M, count);
      count = 0;
    }
    if (s == own) *own_count = (int)count;
    start[s + 1] = s == own ? 0 : (int)count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    start[0] = 0;
#pragma unroll 1
    for (int s = 0; s < P.W; s++) start[s + 1] += start[s];
    total_s = start[P.W];
  }
  __syncthreads();
  return total_s;
}

/* dispatch_recv's work for call `call`, on any grid. The sources' counts give each (source, local expert) its
 * first slot (the prefix over sources), and each entry carries its rank among its source's messages naming
 * that expert, so every entry's slot is known without a scan: the grid's warps take the (message, k) entries,
 * a lane each (one load round per warp), and copy the ones naming an expert here, a warp per copy. */
template <int MODE>
__device__ __forceinline__ void dispatch_recv_body(const moe_params &P, const uint64_t call) {
  constexpr bool fp8 = MODE & MODE_FP8, DIRECT = MODE & MODE_DIRECT, TR = MODE & MODE_TRACE;
  extern __shared__ uint64_t moe_dyn[];
  const int W = P.W, K = P.K, L = P.L, S = P.S, G = P.G;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x / 32u;
  int *start = (int *)moe_dyn; /* [W + 1] */
  int *first = start + W + 1;  /* [W][L]: slot of (source, local expert)'s first message */
  const int parity = (int)(call & 1);
  const uint64_t row_bytes = (uint64_t)P.H * (fp8 ? 1 : 2);

  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_DISPATCH_RECV, PH_KERNEL, true, -1, call);
    trace<TR>(P.ctx, OP_MOE_DISPATCH_RECV, PH_WAIT_DATA, true, -1, call);
  }
  __shared__ int own_count_s;
  const int own = DIRECT ? P.ctx.rank : -1;
  const int total = wait_dispatch(P, start, parity, call, OP_MOE_DISPATCH_RECV, own, &own_count_s);
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_DISPATCH_RECV, PH_WAIT_DATA, false, -1, call);
    trace<TR>(P.ctx, OP_MOE_DISPATCH_RECV, PH_POST, true, -1, call);
  }
  /* A source that sent nothing here wrote no counts: its are 0. */
  for (int e = threadIdx.x; e < L; e += blockDim.x) {
    int acc = 0;
    for (int s = 0; s < W; s++) {
      const bool sent = s == own ? own_count_s > 0 : start[s + 1] > start[s];
      const int c = sent ? *(const volatile int *)(P.ws + counts_offset(P, parity, s, e)) : 0;
      first[s * L + e] = acc;
      if (blockIdx.x == 0) P.recv.rank_counts[(size_t)e * W + s] = c;
      acc += c;
    }
    if (blockIdx.x == 0) P.recv.expert_counts[e] = acc;
    if (acc > S) report_error(P.ctx, SY_ERR_INTERNAL, OP_MOE_DISPATCH_RECV, e, call, (uint64_t)S, (uint64_t)acc);
  }
  __syncthreads();

  /* Entries to warps: with at least two warps per entry, `parts` (up to 4) warps share each entry's copy, a
   * slice each, so a warp's copy is one round of loads. Virtual warp vw of part `part` takes entries
   * vw, vw + nvw, ... (a lane each for the lookups). */
  const int items = total * K, nwarps = (int)gridDim.x * MOE_WARPS;
  const int fit = items > 0 ? nwarps / items : 1, parts = fit >= 4 ? 4 : fit >= 2 ? 2 : 1;
  const int nvw = nwarps / parts, gw = (int)blockIdx.x * MOE_WARPS + (int)warp, part = gw / nvw, vw = gw % nvw;
  const int nvec = (int)(row_bytes / 16), per = (nvec + parts - 1) / parts;
  const int v_lo = part * per, v_hi = v_lo + per < nvec ? v_lo + per : nvec;
  for (int i0 = vw; part < parts && i0 < items; i0 += nvw * 32) {
    /* lane l: entry i0 + l * nvw */
    const int item = i0 + (int)lane * nvw;
    int s = 0, m = 0, k = 0, e = -1, h = 0;
    if (item < items) {
      const int i = item / K;
      k = item - i * K;
      s = source_of(start, W, i);
      m = i - start[s];
      const char *msg = P.ws + msg_offset(P, parity, s, m);
      e = *(const int *)(msg + SY_MOE_MSG_HEADER + 8 * k);
      const int r = *(const int *)(msg + SY_MOE_MSG_HEADER + 8 * K + 4 * k);
      if (e >= L) e = -1; /* cannot happen: the sender wrote e - p * L for an expert of p */
      if (e >= 0) {
        h = first[s * L + e] + r;
        if (r < 0 || h >= S) {
          report_error(P.ctx, SY_ERR_INTERNAL, OP_MOE_DISPATCH_RECV, s, call, (uint64_t)m, (uint64_t)r);
          e = -1;
        }
      }
    }
    for (uint32_t todo = __ballot_sync(0xFFFFFFFFu, e >= 0); todo; todo &= todo - 1u) {
      const int from = __ffs(todo) - 1;
      const int cs = __shfl_sync(0xFFFFFFFFu, s, from), cm = __shfl_sync(0xFFFFFFFFu, m, from);
      const int ck = __shfl_sync(0xFFFFFFFFu, k, from), ce = __shfl_sync(0xFFFFFFFFu, e, from);
      const int ch = __shfl_sync(0xFFFFFFFFu, h, from);
      const char *msg = P.ws + msg_offset(P, parity, cs, cm);
      const uint64_t at = (uint64_t)ce * S + (uint64_t)ch;
      const uint4 *src = (const uint4 *)(msg + P.payload_offset);
      uint4 *dst = (uint4 *)((char *)P.recv.tokens + at * row_bytes);
      /* The small loads first, so they travel with the payload's: this part's first two scales and (part 0)
       * the source token. Plain loads: the poller's acquire and a bar.sync came before, as for the payload. */
      const float *sc = (const float *)(msg + P.scales_offset);
      const int g0 = part * 32 + (int)lane, g1 = g0 + 32 * parts;
      const float sc0 = fp8 && g0 < G ? sc[g0] : 0.0f, sc1 = fp8 && g1 < G ? sc[g1] : 0.0f;
      const int token = part == 0 && lane == 0 ? *(const int *)msg : 0;
      for (int v0 = v_lo; v0 < v_hi; v0 += 8 * 32) { /* eight loads in flight per lane */
        uint4 x[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
          const int v = v0 + j * 32 + (int)lane;
          if (v < v_hi) x[j] = ld_plain(src + v);
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
          const int v = v0 + j * 32 + (int)lane;
          if (v < v_hi) dst[v] = x[j];
        }
      }
      if (fp8) {
        float *out = P.recv.scales + (uint64_t)ce * G * S + (uint64_t)ch;
        if (g0 < G) out[(uint64_t)g0 * S] = sc0;
        if (g1 < G) out[(uint64_t)g1 * S] = sc1;
        for (int g = g1 + 32 * parts; g < G; g += 32 * parts) out[(uint64_t)g * S] = sc[g];
      }
      if (part == 0 && lane == 0) {
        P.recv.src[2 * at] = cs;
        P.recv.src[2 * at + 1] = token;
        P.slot_of[((uint64_t)cs * P.M + (uint64_t)cm) * K + ck] = ch;
      }
    }
  }
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_DISPATCH_RECV, PH_POST, false, -1, call);
    trace<TR>(P.ctx, OP_MOE_DISPATCH_RECV, PH_KERNEL, false, -1, call);
  }
}

/* ---- combine_send ---------------------------------------------------------------------------------------------- */

/* combine_send's work for call `call`. */
constexpr int CS_BATCH = 8; /* received messages whose entries combine_send stages at once per block */

template <int MODE>
__device__ __forceinline__ void combine_send_body(const moe_params &P, const uint64_t call) {
  constexpr bool PE = MODE & MODE_PE, TR = MODE & MODE_TRACE;
  extern __shared__ uint64_t moe_dyn[];
  const int W = P.W, K = P.K, T = P.T, S = P.S, H = P.H, me = P.ctx.rank;
  char **peers = (char **)moe_dyn;      /* [W] */
  int *start = (int *)(peers + W);      /* [W + 1] */
  /* A batch of this block's messages (i0 + q x gridDim.x): per k the local expert, slot and weight; the source
   * and source token — staged with independent loads, one round per batch instead of a chain per message. */
  __shared__ int le_s[CS_BATCH * MOE_MAX_K], slot_s[CS_BATCH * MOE_MAX_K], tok_s[CS_BATCH], src_s[CS_BATCH];
  __shared__ float w_s[CS_BATCH * MOE_MAX_K];
  const int parity = (int)(call & 1);
  for (int p = threadIdx.x; p < W; p += blockDim.x) peers[p] = peer_ws(P, p);
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_COMBINE_SEND, PH_KERNEL, true, -1, call);
    trace<TR>(P.ctx, OP_MOE_COMBINE_SEND, PH_COPY, true, -1, call);
  }
  const int total = wait_dispatch(P, start, parity, call, OP_MOE_COMBINE_SEND);
  char *stage = P.staging ? P.staging + (uint64_t)blockIdx.x * P.stage_bytes : nullptr;
  const int nvec = H / 8, G = (int)gridDim.x;
  for (int i0 = blockIdx.x; i0 < total; i0 += G * CS_BATCH) {
    const int left = (total - 1 - i0) / G + 1, nb = left < CS_BATCH ? left : CS_BATCH;
    __syncthreads(); /* the previous batch's staged entries are no longer read */
    for (int j = threadIdx.x; j < nb * K; j += blockDim.x) {
      const int q = j / K, k = j - q * K, i = i0 + q * G;
      const int s = source_of(start, W, i), m = i - start[s];
      const char *msg = P.ws + msg_offset(P, parity, s, m);
      const int2 ent = *(const int2 *)(msg + SY_MOE_MSG_HEADER + 8 * k);
      const int slot = P.slot_of[((uint64_t)s * P.M + (uint64_t)m) * K + k]; /* meaningful where ent.x >= 0 */
      le_s[j] = ent.x;
      w_s[j] = __int_as_float(ent.y);
      slot_s[j] = slot;
      if (k == 0) {
        tok_s[q] = *(const volatile int *)msg;
        src_s[q] = s;
      }
    }
    __syncthreads();
    for (int q = 0; q < nb; q++) {
      if (q > 0) __syncthreads(); /* the put staging is free again */
      const int *le = le_s + q * K, *sl = slot_s + q * K;
      const float *wq = w_s + q * K;
      const int s = src_s[q], tok = tok_s[q];
      char *peer = peers[s];
      if (!PE) {
        const uint64_t off = combine_offset(P, parity, (uint64_t)me * T + (uint64_t)tok);
        char *dst = peer ? peer + off : stage;
        for (int u = threadIdx.x; u < nvec; u += MOE_THREADS) {
          float acc[8];
#pragma unroll
          for (int i2 = 0; i2 < 8; i2++) acc[i2] = 0.0f;
          for (int k0 = 0; k0 < K; k0 += 8) { /* eight loads in flight, then the fmas in k order */
            uint4 y[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
              const int k = k0 + j;
              if (k < K && le[k] >= 0)
                y[j] = __ldg((const uint4 *)(P.expert_out + ((uint64_t)le[k] * S + (uint64_t)sl[k]) * H) + u);
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
              const int k = k0 + j;
              if (k >= K || le[k] < 0) continue;
              const float w = wq[k];
              const uint32_t yw[4] = {y[j].x, y[j].y, y[j].z, y[j].w};
#pragma unroll
              for (int i2 = 0; i2 < 4; i2++) {
                acc[2 * i2] = __fmaf_rn(w, bf16_lo(yw[i2]), acc[2 * i2]);
                acc[2 * i2 + 1] = __fmaf_rn(w, bf16_hi(yw[i2]), acc[2 * i2 + 1]);
              }
            }
          }
          ((uint4 *)dst)[u] = make_uint4(pack_bf16(acc[0], acc[1]), pack_bf16(acc[2], acc[3]),
                                         pack_bf16(acc[4], acc[5]), pack_bf16(acc[6], acc[7]));
        }
        if (!peer) { /* inline: out of line (a __noinline__ wrapper) this combine measured +0.2 to +0.4 us (bench/NOTES.md) */
          __syncthreads();
          nvshmemx_putmem_block(P.ws + off, stage, (size_t)H * 2, s);
        }
      } else {
        for (int k = 0; k < K; k++) {
          if (le[k] < 0) continue;
          const uint64_t off = combine_offset(P, parity, (uint64_t)tok * K + (uint64_t)k);
          const uint4 *y = (const uint4 *)(P.expert_out + ((uint64_t)le[k] * S + (uint64_t)sl[k]) * H);
          uint4 *dst = (uint4 *)(peer ? peer + off : stage);
          for (int u = threadIdx.x; u < nvec; u += MOE_THREADS) dst[u] = __ldg(y + u);
          if (!peer) {
            __syncthreads();
            nvshmemx_putmem_block(P.ws + off, stage, (size_t)H * 2, s);
            __syncthreads();
          }
        }
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_COMBINE_SEND, PH_COPY, false, -1, call);
    trace<TR>(P.ctx, OP_MOE_COMBINE_SEND, PH_SIGNAL, true, -1, call);
  }
  for (int p = threadIdx.x; p < W; p += blockDim.x) arrive(P, peers[p], p, parity, SY_MOE_COUNTER_COMBINE);
  __syncthreads();
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_COMBINE_SEND, PH_SIGNAL, false, -1, call);
    trace<TR>(P.ctx, OP_MOE_COMBINE_SEND, PH_KERNEL, false, -1, call);
  }
}

/* ---- combine_recv ---------------------------------------------------------------------------------------------- */

/* combine_recv's work for call `call`. */
template <int MODE>
__device__ __forceinline__ void combine_recv_body(const moe_params &P, const uint64_t call) {
  constexpr bool PE = MODE & MODE_PE, TR = MODE & MODE_TRACE;
  const int W = P.W, K = P.K, T = P.T, H = P.H;
  __shared__ int id_s[MOE_MAX_K], ranks_s[MOE_MAX_K], nranks_s;
  __shared__ float w_s[MOE_MAX_K];
  const int parity = (int)(call & 1);
  const int dispatched = P.local->num_tokens;
  /* The combine answers this rank's dispatch: its num_tokens and ids must be the dispatch's. */
  if (blockIdx.x == 0) {
    if (threadIdx.x == 0 && P.num_tokens != dispatched)
      report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_COMBINE_ARGS, -1, call, (uint64_t)dispatched,
                   (uint64_t)P.num_tokens);
    const int n = P.num_tokens < dispatched ? P.num_tokens : dispatched;
    /* (A repeated id that the dispatch reported and dropped shows here too; the dispatch's report stays first.) */
    for (int i = threadIdx.x; i < n * K; i += blockDim.x) {
      int64_t id = load_id(P, (uint64_t)i);
      if (id < -1 || id >= P.E) id = -1;
      if (id != P.ids[i]) report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_COMBINE_ARGS, i, call, (uint64_t)P.ids[i], (uint64_t)id);
    }
  }
  /* The first token's ids and weights (this rank's own, from its dispatch) while the partials travel. */
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x / 32u;
  int id_next = -1;
  float w_next = 0.0f;
  if (warp == 0 && lane < (unsigned)K && (int)blockIdx.x < (P.num_tokens < dispatched ? P.num_tokens : dispatched)) {
    id_next = P.ids[(uint64_t)blockIdx.x * K + lane];
    if (PE) w_next = P.weights[(uint64_t)blockIdx.x * K + lane];
  }
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_COMBINE_RECV, PH_KERNEL, true, -1, call);
    trace<TR>(P.ctx, OP_MOE_COMBINE_RECV, PH_WAIT_DATA, true, -1, call);
  }
  for (int r = threadIdx.x; r < W; r += blockDim.x)
    wait_geq(P.ctx, (const uint64_t *)(P.ws + counter_offset(P, parity, r, SY_MOE_COUNTER_COMBINE)), expected(call),
             OP_MOE_COMBINE_RECV, r, call);
  __syncthreads();
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_COMBINE_RECV, PH_WAIT_DATA, false, -1, call);
    trace<TR>(P.ctx, OP_MOE_COMBINE_RECV, PH_REDUCE, true, -1, call);
  }
  const int ntok = P.num_tokens < dispatched ? P.num_tokens : dispatched;
  const int nvec = H / 8;
  for (int t = blockIdx.x; t < ntok; t += gridDim.x) {
    __syncthreads();
    if (warp == 0) {
      /* Lane k: the token's id (loaded before the wait for the first token) and, by default, where its rank
       * stands among the token's distinct ranks, ascending (a match and a count over the lanes, no sort). */
      const int id = lane < (unsigned)K ? id_next : -1;
      if (lane < (unsigned)K) {
        id_s[lane] = id;
        w_s[lane] = w_next;
      }
      const int tn = t + (int)gridDim.x;
      if (lane < (unsigned)K && tn < ntok) {
        id_next = P.ids[(uint64_t)tn * K + lane];
        if (PE) w_next = P.weights[(uint64_t)tn * K + lane];
      }
      if (!PE) {
        const int r = id >= 0 ? rank_of(P, id) : -1;
        const unsigned same = __match_any_sync(0xFFFFFFFFu, r);
        const bool first = r >= 0 && (same & ((1u << lane) - 1u)) == 0; /* the lowest k on rank r */
        const unsigned firsts = __ballot_sync(0xFFFFFFFFu, first);
        int below = 0; /* distinct ranks under r */
        for (unsigned f = firsts; f; f &= f - 1u) below += __shfl_sync(0xFFFFFFFFu, r, __ffs(f) - 1) < r;
        if (first) ranks_s[below] = r;
        if (lane == 0) nranks_s = __popc(firsts);
      }
    }
    __syncthreads();
    /* Two vectors per thread at a time (their loads in flight together), each summed in rank (k) order. */
    for (int u0 = threadIdx.x; u0 < nvec; u0 += 2 * MOE_THREADS) {
      const int u1 = u0 + MOE_THREADS;
      const bool two = u1 < nvec;
      float acc0[8], acc1[8];
#pragma unroll
      for (int i = 0; i < 8; i++) acc0[i] = acc1[i] = 0.0f;
      const int n = PE ? K : nranks_s;
      for (int j0 = 0; j0 < n; j0 += 4) {
        uint4 x0[4], x1[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const int q = j0 + j;
          if (q >= n || (PE && id_s[q] < 0)) continue;
          const char *row = P.ws + combine_offset(P, parity, PE ? (uint64_t)t * K + (uint64_t)q
                                                                           : (uint64_t)ranks_s[q] * T + (uint64_t)t);
          x0[j] = ld_plain(row + 16ull * u0);
          if (two) x1[j] = ld_plain(row + 16ull * u1);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const int q = j0 + j;
          if (q >= n || (PE && id_s[q] < 0)) continue;
          const uint32_t a[4] = {x0[j].x, x0[j].y, x0[j].z, x0[j].w}, b[4] = {x1[j].x, x1[j].y, x1[j].z, x1[j].w};
          if (PE) { /* fmaf(w_k, y_k, .) in k order */
            const float w = w_s[q];
#pragma unroll
            for (int i = 0; i < 4; i++) {
              acc0[2 * i] = __fmaf_rn(w, bf16_lo(a[i]), acc0[2 * i]);
              acc0[2 * i + 1] = __fmaf_rn(w, bf16_hi(a[i]), acc0[2 * i + 1]);
              acc1[2 * i] = __fmaf_rn(w, bf16_lo(b[i]), acc1[2 * i]);
              acc1[2 * i + 1] = __fmaf_rn(w, bf16_hi(b[i]), acc1[2 * i + 1]);
            }
          } else { /* the rank partials added in rank order */
#pragma unroll
            for (int i = 0; i < 4; i++) {
              acc0[2 * i] = __fadd_rn(acc0[2 * i], bf16_lo(a[i]));
              acc0[2 * i + 1] = __fadd_rn(acc0[2 * i + 1], bf16_hi(a[i]));
              acc1[2 * i] = __fadd_rn(acc1[2 * i], bf16_lo(b[i]));
              acc1[2 * i + 1] = __fadd_rn(acc1[2 * i + 1], bf16_hi(b[i]));
            }
          }
        }
      }
      uint4 *out = (uint4 *)(P.out + (uint64_t)t * H);
      out[u0] = make_uint4(pack_bf16(acc0[0], acc0[1]), pack_bf16(acc0[2], acc0[3]), pack_bf16(acc0[4], acc0[5]),
                           pack_bf16(acc0[6], acc0[7]));
      if (two)
        out[u1] = make_uint4(pack_bf16(acc1[0], acc1[1]), pack_bf16(acc1[2], acc1[3]), pack_bf16(acc1[4], acc1[5]),
                             pack_bf16(acc1[6], acc1[7]));
    }
  }
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_COMBINE_RECV, PH_REDUCE, false, -1, call);
    trace<TR>(P.ctx, OP_MOE_COMBINE_RECV, PH_KERNEL, false, -1, call);
  }
}

/* ---- the kernels: one per half, and the one-call forms fused ------------------------------------------------ */

template <int MODE>
__global__ void __launch_bounds__(MOE_THREADS) moe_dispatch_send_kernel(const __grid_constant__ moe_params P) {
  pdl_begin();
  advance_call(P, dispatch_send_body<MODE>(P));
}

template <int MODE>
__global__ void __launch_bounds__(MOE_THREADS) moe_dispatch_recv_kernel(const __grid_constant__ moe_params P) {
  pdl_begin();
  dispatch_recv_body<MODE>(P, current_call(P));
}

template <int MODE>
__global__ void __launch_bounds__(MOE_THREADS) moe_combine_send_kernel(const __grid_constant__ moe_params P) {
  pdl_begin();
  combine_send_body<MODE>(P, current_call(P));
}

template <int MODE>
__global__ void __launch_bounds__(MOE_THREADS) moe_combine_recv_kernel(const __grid_constant__ moe_params P) {
  pdl_begin();
  combine_recv_body<MODE>(P, current_call(P));
}

/* sy_moe_dispatch and sy_moe_combine: the two halves in one kernel (one launch, one ramp). The receiving part
 * waits for this rank's own sending part in other blocks, so every block must be resident at once: the grid
 * is at most one block per SM (the host sizes it so). */
template <int MODE>
__global__ void __launch_bounds__(MOE_THREADS) moe_dispatch_kernel(const __grid_constant__ moe_params P) {
  pdl_begin();
  const uint64_t call = dispatch_send_body<MODE>(P);
  __syncthreads(); /* the dynamic shared memory changes hands */
  dispatch_recv_body<MODE>(P, call);
  advance_call(P, call);
}

template <int MODE>
__global__ void __launch_bounds__(MOE_THREADS) moe_combine_kernel(const __grid_constant__ moe_params P) {
  pdl_begin();
  const uint64_t call = current_call(P);
  combine_send_body<MODE>(P, call);
  __syncthreads();
  combine_recv_body<MODE>(P, call);
}

/* The instances, indexed by the whole MODE; each kernel is instantiated only for the bits its code depends on (the
 * mask): the halves never take the direct part, the combine does not depend on the wire. */
typedef void (*moe_kernel_t)(moe_params);
#define SY_MOE_TABLE(k, mask)                                                                                        \
  {k<0 & (mask)>,  k<1 & (mask)>,  k<2 & (mask)>,  k<3 & (mask)>,  k<4 & (mask)>,  k<5 & (mask)>,                    \
   k<6 & (mask)>,  k<7 & (mask)>,  k<8 & (mask)>,  k<9 & (mask)>,  k<10 & (mask)>, k<11 & (mask)>,                   \
   k<12 & (mask)>, k<13 & (mask)>, k<14 & (mask)>, k<15 & (mask)>}
static moe_kernel_t const dispatch_send_kernels[16] =
    SY_MOE_TABLE(moe_dispatch_send_kernel, MODE_FP8 | MODE_PE | MODE_TRACE);
static moe_kernel_t const dispatch_recv_kernels[16] = SY_MOE_TABLE(moe_dispatch_recv_kernel, MODE_FP8 | MODE_TRACE);
static moe_kernel_t const combine_send_kernels[16] = SY_MOE_TABLE(moe_combine_send_kernel, MODE_PE | MODE_TRACE);
static moe_kernel_t const combine_recv_kernels[16] = SY_MOE_TABLE(moe_combine_recv_kernel, MODE_PE | MODE_TRACE);
static moe_kernel_t const dispatch_kernels[16] = SY_MOE_TABLE(moe_dispatch_kernel, 15);
static moe_kernel_t const combine_kernels[16] = SY_MOE_TABLE(moe_combine_kernel, MODE_PE | MODE_TRACE);
#undef SY_MOE_TABLE

}  // namespace sy

using namespace sy;

/* ---- host side ---------------------------------------------------------------------------------------------------- */

struct moe_gpu {
  sy_moe_layout_t layout;
  char *ws;
  moe_local *local;
  uint64_t *calls; /* [blocks], after local */
  char *local_blob; /* local and calls, ids, slot_of */
  int32_t *ids, *slot_of;
  char *staging;
  size_t stage_bytes;
  bool staging_registered;
  int blocks;  /* send kernels' grid (the SM count) */
  bool rank_masks; /* dispatch_send's per-expert token masks fit (moe_params.rank_masks) */
  bool fused_ok; /* a block of each fused kernel fits on an SM (else the one-call forms launch the halves) */
  bool direct;   /* the fused dispatch may place this rank's own entries itself (its list fits: moe_params.direct) */
  bool direct_auto; /* ... then only per expert, and from blocks / 2 tokens (SY_MOE_DIRECT unset or auto) */
  char *peer_tab[MOE_PEER_TAB]; /* W <= MOE_PEER_TAB: each rank's workspace as this GPU reaches it (NULL: puts) */
  int self_cap;  /* its list's entries: ceil(max_tokens / blocks) x top_k */
  size_t ds_smem, dr_smem, cs_smem, fd_smem; /* fd: the fused dispatch */
};

static cuda_state *state_of(sy_comm_t comm) { return (cuda_state *)comm->backend_state; }

/* Launches one of the kernels, with programmatic dependent launch unless SY_PDL=0. */
static sy_status_t launch(moe_kernel_t kernel, int blocks, size_t smem, cudaStream_t stream, const moe_params &P) {
  return launch_pdl(kernel, blocks, MOE_THREADS, smem, stream, P);
}

/* The MODE bits of a configuration on a communicator (the kernel instance), without MODE_DIRECT (a per-call
 * choice). */
static int mode_of(sy_comm_t comm, const sy_moe_config_t *c) {
  return (c->wire != SY_MOE_WIRE_BF16 ? MODE_FP8 : 0) | ((c->flags & SY_MOE_PER_EXPERT) ? MODE_PE : 0) |
         (state_of(comm)->ctx.trace ? MODE_TRACE : 0);
}

static size_t align_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

static void fill_params(sy_comm_t comm, const struct sy_moe *moe, const moe_gpu *g, moe_params *P) {
  const sy_moe_config_t *c = &moe->config;
  memset(P, 0, sizeof *P);
  P->ctx = state_of(comm)->ctx;
  P->ws = g->ws;
  memcpy(P->peer_tab, g->peer_tab, sizeof P->peer_tab);
  P->local = g->local;
  P->calls = g->calls;
  P->ncalls = g->blocks;
  P->ids = g->ids;
  P->slot_of = g->slot_of;
  P->staging = g->staging;
  P->stage_bytes = g->stage_bytes;
  P->msg_bytes = g->layout.msg_bytes;
  P->payload_offset = g->layout.payload_offset;
  P->scales_offset = g->layout.scales_offset;
  P->dispatch_bytes = g->layout.dispatch_bytes;
  P->parity_bytes = g->layout.parity_bytes;
  P->counters_offset = g->layout.counters_offset;
  P->counts_offset = g->layout.counts_offset;
  P->T = c->max_tokens;
  P->M = (int)g->layout.messages_per_source;
  P->H = c->hidden;
  P->K = c->top_k;
  P->E = c->num_experts;
  P->L = moe->local_experts;
  P->W = comm->world_size;
  P->S = moe->slots;
  P->G = c->hidden / SY_MOE_FP8_GROUP;
  P->wire = (int)c->wire;
  P->per_expert = (c->flags & SY_MOE_PER_EXPERT) != 0;
  P->rank_masks = g->rank_masks;
  P->L_magic = (uint64_t)c->num_experts * (uint64_t)P->L < (1ull << 32) ? ((1ull << 32) + P->L - 1) / P->L : 0;
}

/* A call's tokens (dispatch_send; NULL in combine_recv), num_tokens, ids and weights. */
static void set_args(moe_params *P, const sy_moe_dispatch_args_t *a) {
  P->tokens = (const uint16_t *)a->tokens;
  P->num_tokens = a->num_tokens;
  P->expert_ids = a->expert_ids;
  P->id64 = a->id_type == SY_INDEX_INT64;
  P->weights = a->weights;
}

static void free_gpu(sy_comm_t comm, moe_gpu *g, bool free_ws) {
  if (g->staging_registered) nvshmemx_buffer_unregister(g->staging);
  if (g->staging) cudaFree(g->staging);
  if (g->local_blob) cudaFree(g->local_blob);
  if (free_ws && g->ws) sy_mem_free(comm, g->ws);
  free(g);
}

extern "C" sy_status_t sy__cuda_moe_create(sy_comm_t comm, struct sy_moe *moe) {
  cuda_state *st = state_of(comm);
  const sy_moe_config_t *c = &moe->config;
  const int W = comm->world_size, T = c->max_tokens, K = c->top_k;
  /* Every rank must configure alike: compare over the bootstrap before reserving anything. */
  sy_moe_config_t *all = (sy_moe_config_t *)calloc((size_t)W, sizeof *all);
  if (!all) return SY_ERR_NO_MEMORY;
  sy_status_t s = sy_comm_allgather_host(comm, c, all, sizeof *c);
  for (int r = 0; s == SY_SUCCESS && r < W; r++) {
    const sy_moe_config_t *o = &all[r];
    if (o->max_tokens != c->max_tokens || o->hidden != c->hidden || o->top_k != c->top_k ||
        o->num_experts != c->num_experts || o->wire != c->wire || o->flags != c->flags) {
      SY_WARN("sy_moe_create: rank %d configures max_tokens=%d hidden=%d top_k=%d num_experts=%d wire=%d flags=0x%x, "
              "this rank %d / %d / %d / %d / %d / 0x%x; nothing created",
              r, o->max_tokens, o->hidden, o->top_k, o->num_experts, (int)o->wire, o->flags, c->max_tokens, c->hidden,
              c->top_k, c->num_experts, (int)c->wire, c->flags);
      s = SY_ERR_MISMATCH;
    }
  }
  free(all);
  SY_CHECK(s);

  moe_gpu *g = (moe_gpu *)calloc(1, sizeof *g);
  if (!g) return SY_ERR_NO_MEMORY;
  SY_CHECK(sy__moe_layout(c, W, &g->layout));
  /* Shared memory: the same on every rank (same configuration, same device kind), so the verdict is too. */
  int smem_max = 0;
  SY_CUDA_CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, comm->device));
  const size_t M = g->layout.messages_per_source, NC = (M + 31) / 32;
  g->ds_smem = (size_t)W * sizeof(char *) + (size_t)T * 8 + (size_t)W * NC * 4 + (size_t)W * (NC + 1) * 4 +
               (size_t)T * K * 4 + (size_t)c->num_experts * 4;
  /* dispatch_send's ranks from per-expert token masks when they take at most 32 KiB (e.g. 256 experts, 1,024
   * tokens), else by counting (slower at many tokens, see bench/NOTES.md) */
  const size_t mask_bytes = (size_t)c->num_experts * (((size_t)T + 31) / 32) * 4;
  g->rank_masks = mask_bytes <= 32768 && g->ds_smem + mask_bytes + 2048 <= (size_t)smem_max;
  if (g->rank_masks) g->ds_smem += mask_bytes;
  g->dr_smem = ((size_t)W + 1) * 4 + (size_t)c->num_experts * 4; /* start[W + 1], first[W][L] */
  g->cs_smem = (size_t)W * sizeof(char *) + ((size_t)W + 1) * 4;
  const size_t static_reserve = 2048; /* the kernels' static shared arrays */
  if (g->ds_smem + static_reserve > (size_t)smem_max || g->dr_smem + static_reserve > (size_t)smem_max ||
      (uint64_t)W * (uint64_t)M * (uint64_t)K >= (1ull << 31)) {
    SY_WARN("sy_moe_create: config->max_tokens=%d, top_k=%d, num_experts=%d on %d ranks needs %zu bytes of shared "
            "memory per block (max_tokens x (top_k + 3) x 4 for the ids and routing, num_experts x 4 for the counts), "
            "more than this GPU's %d; lower max_tokens", T, K, c->num_experts, W,
            (g->ds_smem > g->dr_smem ? g->ds_smem : g->dr_smem) + static_reserve, smem_max);
    free(g);
    return SY_ERR_UNSUPPORTED;
  }
  g->blocks = st->num_sms;
  /* The one-call dispatch places this rank's own entries itself (SY_MOE_DIRECT; auto: per expert, where one
   * message per (token, expert) would otherwise be written and copied again, and from blocks / 2 tokens — at
   * one GPU the sending block's rows measured slower than the grid-wide copy in the default mode, and per
   * expert below that, bench/NOTES.md) if its list fits. */
  const char *direct_env = sy__env_str(SY_ENVID_SY_MOE_DIRECT);
  int want_direct = (c->flags & SY_MOE_PER_EXPERT) != 0;
  g->direct_auto = strcmp(direct_env, "auto") == 0;
  sy_status_t env_status = SY_SUCCESS; /* a malformed value fails the create on every rank, below */
  if (strcmp(direct_env, "auto") != 0 && sy__parse_bool(direct_env, &want_direct) != SY_SUCCESS) {
    SY_WARN("sy_moe_create: environment variable SY_MOE_DIRECT=%s is malformed (want auto, 0 or 1); nothing created",
            direct_env);
    env_status = SY_ERR_INVALID_ARG;
  }
  g->self_cap = (T + g->blocks - 1) / g->blocks * K;
  const size_t direct_smem = align_up(g->ds_smem, 16) + (size_t)g->self_cap * 16;
  g->direct = want_direct && direct_smem + static_reserve <= (size_t)smem_max;
  g->fd_smem = g->direct ? direct_smem : g->ds_smem;
  if (g->fd_smem < g->dr_smem) g->fd_smem = g->dr_smem;
  g->stage_bytes = align_up(g->layout.msg_bytes + (size_t)MOE_MAX_K * g->layout.payload_offset, 256);
  if (g->stage_bytes < align_up((size_t)c->hidden * 2, 256)) g->stage_bytes = align_up((size_t)c->hidden * 2, 256);

  s = sy_mem_alloc(comm, g->layout.total, (void **)&g->ws); /* collective: every rank, or none */
  if (s != SY_SUCCESS) {
    free(g);
    return s;
  }
  /* Puts are needed where some peer is not load/store reachable (or SY_FORCE_PUT): they are staged in device
   * memory, registered with NVSHMEM only where a peer really is remote (a put to a peer that NVSHMEM reaches
   * over P2P reads any device memory). The verdicts may differ between ranks; nothing collective depends on
   * them. */
  bool need_puts = false, remote_peer = false;
  for (int p = 0; p < W; p++) {
    if (p == comm->rank) continue;
    remote_peer = remote_peer || !nvshmem_ptr(g->ws, p);
    need_puts = need_puts || st->ctx.force_put || !nvshmem_ptr(g->ws, p);
  }
  for (int p = 0; p < W && W <= MOE_PEER_TAB; p++)
    g->peer_tab[p] = p == comm->rank ? g->ws : st->ctx.force_put ? NULL : (char *)nvshmem_ptr(g->ws, p);
  const size_t local_bytes = align_up(sizeof(moe_local) + (size_t)g->blocks * 8, 256) + align_up((size_t)T * K * 4, 256) +
                             (size_t)W * M * K * 4;
  cudaError_t err = cudaMalloc((void **)&g->local_blob, local_bytes);
  if (err == cudaSuccess) err = cudaMemset(g->local_blob, 0, local_bytes);
  if (err == cudaSuccess && need_puts) err = cudaMalloc((void **)&g->staging, (size_t)g->blocks * g->stage_bytes);
  if (err == cudaSuccess) err = cudaMemset(g->ws + g->layout.counters_offset, 0, g->layout.counters_bytes);
  /* This configuration's kernel instances (the fused dispatch with and without the direct part). */
  const int mode = mode_of(comm, c);
  const struct {
    moe_kernel_t kernel;
    size_t smem;
  } used[] = {{dispatch_send_kernels[mode], g->ds_smem},    {dispatch_recv_kernels[mode], g->dr_smem},
              {combine_send_kernels[mode], g->cs_smem},     {dispatch_kernels[mode], g->fd_smem},
              {dispatch_kernels[mode | MODE_DIRECT], g->fd_smem}, {combine_kernels[mode], g->cs_smem}};
  for (const auto &u : used)
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(u.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)u.smem);
  /* The fused kernels need one resident block per SM of their grid: check that one fits at all. */
  g->fused_ok = true;
  for (int i = 3; i < 6 && err == cudaSuccess; i++) {
    if (i == 4 && !g->direct) continue;
    int fit = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, used[i].kernel, MOE_THREADS, used[i].smem);
    g->fused_ok = g->fused_ok && fit >= 1;
  }
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) s = cuda_error(err, "MoE state", __FILE__, __LINE__);
  if (s == SY_SUCCESS && g->staging && remote_peer) {
    if (nvshmemx_buffer_register(g->staging, (size_t)g->blocks * g->stage_bytes) != 0) {
      SY_WARN("sy_moe_create: nvshmemx_buffer_register of %zu bytes of put staging failed",
              (size_t)g->blocks * g->stage_bytes);
      s = SY_ERR_NVSHMEM;
    } else {
      g->staging_registered = true;
    }
  }
  char *p = g->local_blob;
  g->local = (moe_local *)p;
  g->calls = (uint64_t *)(p + align_up(sizeof(moe_local), 8));
  p += align_up(sizeof(moe_local) + (size_t)g->blocks * 8, 256);
  g->ids = (int32_t *)p;
  p += align_up((size_t)T * K * 4, 256);
  g->slot_of = (int32_t *)p;
  if (s == SY_SUCCESS) s = env_status;
  /* Every rank's counters are zero before anyone raises one; and every rank learns whether all succeeded. */
  nvshmem_barrier_all();
  int ok = s == SY_SUCCESS, oks[1024];
  int *all_ok = W <= 1024 ? oks : (int *)malloc(sizeof(int) * (size_t)W);
  sy_status_t ag = all_ok ? sy_comm_allgather_host(comm, &ok, all_ok, sizeof ok) : SY_ERR_NO_MEMORY;
  for (int r = 0; ag == SY_SUCCESS && r < W; r++)
    if (!all_ok[r]) ag = SY_ERR_INTERNAL;
  if (all_ok && all_ok != oks) free(all_ok);
  if (s == SY_SUCCESS && ag != SY_SUCCESS) s = ag;
  if (s != SY_SUCCESS) {
    free_gpu(comm, g, true);
    return s;
  }
  SY_INFO("moe: workspace %zu bytes, %d blocks per kernel, %s, one-call forms %s",
          g->layout.total, g->blocks, need_puts ? "puts to some peers" : "stores to every peer",
          !g->fused_ok ? "as two kernels (a fused block does not fit on an SM)"
          : g->direct  ? "fused, own tokens placed by the sender"
                       : "fused");
  moe->backend_state = g;
  return SY_SUCCESS;
}

extern "C" void sy__cuda_moe_destroy(sy_comm_t comm, struct sy_moe *moe) {
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  if (!g) return;
  cudaDeviceSynchronize();
  /* After an error the workspace stays with the communicator, which frees it (a peer may still write). */
  free_gpu(comm, g, comm->error == SY_SUCCESS);
  moe->backend_state = NULL;
}

extern "C" sy_status_t sy__cuda_moe_dispatch_send(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *a,
                                                  cudaStream_t stream) {
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  moe_params P;
  fill_params(comm, moe, g, &P);
  set_args(&P, a);
  const int blocks = a->num_tokens < 1 ? 1 : a->num_tokens < g->blocks ? a->num_tokens : g->blocks;
  return launch(dispatch_send_kernels[mode_of(comm, &moe->config)], blocks, g->ds_smem, stream, P);
}

extern "C" sy_status_t sy__cuda_moe_dispatch_recv(sy_comm_t comm, struct sy_moe *moe, const sy_moe_recv_t *recv,
                                                  cudaStream_t stream) {
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  moe_params P;
  fill_params(comm, moe, g, &P);
  P.recv = *recv;
  return launch(dispatch_recv_kernels[mode_of(comm, &moe->config)], g->blocks, g->dr_smem, stream, P);
}

extern "C" sy_status_t sy__cuda_moe_combine_send(sy_comm_t comm, struct sy_moe *moe, const void *expert_out,
                                                 cudaStream_t stream) {
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  moe_params P;
  fill_params(comm, moe, g, &P);
  P.expert_out = (const uint16_t *)expert_out;
  return launch(combine_send_kernels[mode_of(comm, &moe->config)], g->blocks, g->cs_smem, stream, P);
}

extern "C" sy_status_t sy__cuda_moe_combine_recv(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *a,
                                                 void *out, cudaStream_t stream) {
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  moe_params P;
  fill_params(comm, moe, g, &P);
  set_args(&P, a);
  P.out = (uint16_t *)out;
  const int blocks = a->num_tokens < 1 ? 1 : a->num_tokens < g->blocks ? a->num_tokens : g->blocks;
  return launch(combine_recv_kernels[mode_of(comm, &moe->config)], blocks, 0, stream, P);
}

/* The one-call forms: both halves in one kernel, on a grid of at most one block per SM (every block resident,
 * as the receiving part waits for the sending part of other blocks), unless SY_MOE_FUSED=0. */
static bool fused_enabled(void) {
  static int fused = -1;
  if (fused < 0) {
    int on = 1;
    if (sy__env_bool(SY_ENVID_SY_MOE_FUSED, &on) != SY_SUCCESS) on = 1;
    fused = on;
  }
  return fused != 0;
}

extern "C" sy_status_t sy__cuda_moe_dispatch(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *a,
                                             const sy_moe_recv_t *recv, cudaStream_t stream) {
  if (!fused_enabled() || !((moe_gpu *)moe->backend_state)->fused_ok) {
    SY_CHECK(sy__cuda_moe_dispatch_send(comm, moe, a, stream));
    return sy__cuda_moe_dispatch_recv(comm, moe, recv, stream);
  }
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  moe_params P;
  fill_params(comm, moe, g, &P);
  set_args(&P, a);
  P.recv = *recv;
  const bool direct = g->direct && (!g->direct_auto || a->num_tokens * 2 >= g->blocks);
  P.self_cap = g->self_cap;
  return launch(dispatch_kernels[mode_of(comm, &moe->config) | (direct ? MODE_DIRECT : 0)], g->blocks, g->fd_smem, stream, P);
}

extern "C" sy_status_t sy__cuda_moe_combine(sy_comm_t comm, struct sy_moe *moe, const void *expert_out,
                                            const sy_moe_dispatch_args_t *a, void *out, cudaStream_t stream) {
  if (!fused_enabled() || !((moe_gpu *)moe->backend_state)->fused_ok) {
    SY_CHECK(sy__cuda_moe_combine_send(comm, moe, expert_out, stream));
    return sy__cuda_moe_combine_recv(comm, moe, a, out, stream);
  }
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  moe_params P;
  fill_params(comm, moe, g, &P);
  set_args(&P, a);
  P.expert_out = (const uint16_t *)expert_out;
  P.out = (uint16_t *)out;
  return launch(combine_kernels[mode_of(comm, &moe->config)], g->blocks, g->cs_smem, stream, P);
}
