/*
 * send.cuh — dispatch_send, second phase: the tokens onto the wire, then the signals.
 *   blocks        take tokens (block b: tokens grid - 1 - b, 2 grid - 1 - b, ...); per token, thread p sets up the
 *                 message to destination p (thread k per expert) while the other warps quantise round 0 (FP8: 8
 *                 lanes per 128-element group, 16 elements a lane); then every thread stores its vectors into
 *                 every destination's message and the header entries follow (direct 16-byte stores; a staged
 *                 NVSHMEM block put where the peer is not load/store reachable);
 *   thread p      after the block's last token adds to destination p's signal word (arrive, moe.cuh).
 * Each entry carries its position among this source's messages naming its expert (from the expert's token mask,
 * else by counting), so the receiver places it without a scan.
 */
#ifndef SY_CUDA_MOE_SEND_CUH
#define SY_CUDA_MOE_SEND_CUH

#include "cuda/moe/route.cuh"

namespace sy {

/* Token t's positions by comparing every earlier id (where the expert token masks did not fit in shared memory):
 * position[k] += the earlier namings of its k-th expert (matches are rare: shared atomics, after a 64-bit filter of
 * the token's experts). Out of line: cold at the usual sizes. */
static __device__ __noinline__ void positions_by_scan(const int *ids, int t, int top_k, int *position) {
  const int *row = ids + (size_t)t * top_k;
  uint64_t filter = 0;
  for (int k = 0; k < top_k; k++)
    if (row[k] >= 0) filter |= 1ull << (row[k] & 63);
  for (int j = threadIdx.x; j < t * top_k; j += blockDim.x) {
    const int v = ids[j];
    if (v < 0 || !((filter >> (v & 63)) & 1u)) continue;
    for (int k = 0; k < top_k; k++)
      if (row[k] == v) {
        atomicAdd(&position[k], 1);
        break;
      }
  }
}

/* The messages of a token staged for put-only peers (header[j] NULL): header j and the shared payload, by NVSHMEM
 * block puts. Out of line: cold wherever every peer is load/store reachable. */
static __device__ __noinline__ void put_staged(const moe_params &P, int parity, int ndest, const int *dest,
                                               const int *index, char *const *header, const char *stage) {
  __syncthreads();
  for (int j = 0; j < ndest; j++) {
    if (header[j]) continue;
    const int p = dest[j];
    char *remote = P.ws + msg_offset(P, parity, P.ctx.rank, index[j]);
    const uint64_t payload_offset = P.layout.payload_offset, msg_bytes = P.layout.msg_bytes;
    nvshmemx_putmem_block(remote, stage + msg_bytes + (uint64_t)j * payload_offset, payload_offset, p);
    nvshmemx_putmem_block(remote + payload_offset, stage + payload_offset, msg_bytes - payload_offset, p);
  }
}

/* Token t's positions (how many earlier tokens name each of its experts: a token names an expert at most once, and
 * each naming is one message to the expert's rank) and its messages: default, thread p for destination p (the k on
 * p: experts [p L, p L + L)); per expert, thread k. */
template <int MODE>
__device__ __forceinline__ void token_messages(const moe_params &P, send_state &S, send_shared &sh, int t) {
  constexpr bool PE = MODE & MODE_PE, DIRECT = MODE & MODE_DIRECT;
  const int world = P.world_size, top_k = P.top_k, local_experts = P.local_experts, me = P.ctx.rank;
  const int units_per_token = PE ? top_k : 1, mask_words = S.mask_words;
  if (P.expert_token_masks) {
    if (threadIdx.x < (unsigned)top_k) {
      const int v = S.ids[(size_t)t * top_k + threadIdx.x];
      if (v >= 0) {
        const uint32_t *em = S.expert_tokens + (size_t)v * S.token_words;
        int r = __popc(em[t / 32] & ((1u << (t & 31)) - 1u));
#pragma unroll 1
        for (int c = 0; c < t / 32; c++) r += __popc(em[c]);
        sh.position[threadIdx.x] = r;
      }
    }
  } else {
    positions_by_scan(S.ids, t, top_k, sh.position);
  }
  for (int x = threadIdx.x; x < (PE ? top_k : world); x += blockDim.x) {
    const int *row = S.ids + (size_t)t * top_k;
    const int p = PE ? (row[x] >= 0 ? row[x] / local_experts : -1) : x;
    if (p < 0) continue;
    const int u = t * units_per_token + (PE ? x : 0), c = u / 32, b = u % 32;
    const uint32_t m = S.unit_masks[(size_t)p * mask_words + c];
    if (!((m >> b) & 1u)) continue;
    /* the k the message carries: per expert its own; else the token's k on p (a short loop left rolled: unrolled,
     * its code is fetched anew for every token; bench/NOTES.md, "instruction fetch") */
    uint32_t kmask = PE ? 1u << x : 0u;
    const int lo = p * local_experts, hi = lo + local_experts;
#pragma unroll 1
    for (int k = 0; k < (PE ? 0 : top_k); k++) kmask |= (uint32_t)(row[k] >= lo && row[k] < hi) << k;
    const int j = atomicAdd(&sh.ndest, 1);
    const int index = S.prefix[(size_t)p * (mask_words + 1) + c] + __popc(m & ((1u << b) - 1u));
    sh.dest[j] = p;
    sh.index[j] = index;
    sh.kmask[j] = kmask;
    sh.header[j] = S.peers[p] ? S.peers[p] + msg_offset(P, S.parity, me, index) : nullptr;
    sh.payload[j] = DIRECT && p == me ? nullptr : sh.header[j];
    if (!S.peers[p]) sh.any_put = 1;
  }
}

/* The token's vectors into every message's payload (and the put staging): round 0 (vector vslot, in `first`,
 * already quantised for FP8 with its scale), then the later rounds loaded and quantised here. */
template <int MODE>
__device__ __forceinline__ void token_payload(const moe_params &P, const send_state &S, const send_shared &sh,
                                              const uint16_t *tok, uint4 first, float first_scale, int ndest,
                                              int any_put, char *stage) {
  constexpr bool fp8 = MODE & MODE_FP8;
  const unsigned lane = threadIdx.x & 31u;
  const int ue8m0 = P.wire == SY_MOE_WIRE_FP8_UE8M0, vectors = S.vectors, vslot = S.vslot;
  if (fp8) {
    for (int v0 = vslot & ~31; v0 < vectors; v0 += MOE_THREADS) {
      const int v = v0 + (int)lane;
      const bool active = v < vectors;
      uint4 qv = first;
      float scale = first_scale;
      if (v0 != (vslot & ~31)) qv = load_quantise16(tok, v, active, ue8m0, &scale);
      if (active) {
        const uint64_t po = P.layout.payload_offset + (uint64_t)v * 16,
                       so = P.layout.scales_offset + (uint64_t)(v / 8) * 4;
        for (int j = 0; j < ndest; j++) {
          char *dst = sh.payload[j];
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
    for (int v = vslot; v < vectors; v += MOE_THREADS) {
      const uint4 a = v == vslot ? first : __ldg((const uint4 *)(tok + (uint64_t)v * 8));
      const uint64_t po = P.layout.payload_offset + (uint64_t)v * 16;
      for (int j = 0; j < ndest; j++)
        if (sh.payload[j]) *(uint4 *)(sh.payload[j] + po) = a;
      if (any_put) *(uint4 *)(stage + po) = a;
    }
  }
}

/* The headers: {source token, entries on p, call, 0}, then per k {local expert on p or -1, weight}, then per k the
 * entry's position (-1 for -1). Direct: this rank's entries also go into own_list, placed after the sends. */
template <int MODE>
__device__ __forceinline__ void token_headers(const moe_params &P, const send_state &S, send_shared &sh, int t,
                                              int ndest, char *stage) {
  constexpr bool DIRECT = MODE & MODE_DIRECT;
  const int top_k = P.top_k, local_experts = P.local_experts, me = P.ctx.rank;
  const int *entry_expert = S.ids + (size_t)t * top_k;
  for (int i = threadIdx.x; i < ndest * (top_k + 1); i += blockDim.x) {
    const int j = i / (top_k + 1), r = i % (top_k + 1), p = sh.dest[j];
    const uint32_t kmask = sh.kmask[j];
    char *dst = sh.header[j] ? sh.header[j] : stage + P.layout.msg_bytes + (uint64_t)j * P.layout.payload_offset;
    if (r == 0) {
      *(int4 *)dst = make_int4(t, __popc(kmask), (int)(uint32_t)S.call, 0);
    } else {
      const int k = r - 1, e = entry_expert[k];
      const bool on = (kmask >> k) & 1u;
      *(int2 *)(dst + sy__moe_entry_offset(k)) =
          make_int2(on ? e - p * local_experts : -1, __float_as_int(sh.weight[k]));
      *(int *)(dst + sy__moe_position_offset(top_k, k)) = on ? sh.position[k] : -1;
      if (DIRECT && on && p == me) { /* placed after the sends (direct.cuh) */
        const int n = atomicAdd(&sh.nown, 1);
        if (n < P.own_cap) S.own_list[n] = make_int4(t, sh.index[j], (e - p * local_experts) << 5 | k, sh.position[k]);
      }
    }
  }
}

/* The block's tokens. Round 0 of each (vector vslot) is loaded before its message setup (the first token's came
 * with the kernel's start) and quantised after it, so the wait for the data passes during the setup. */
template <int MODE>
__device__ __forceinline__ void send_tokens(const moe_params &P, send_state &S, send_shared &sh) {
  constexpr bool fp8 = MODE & MODE_FP8;
  const int top_k = P.top_k, num_tokens = P.num_tokens, vslot = S.vslot, vectors = S.vectors;
  const int ue8m0 = P.wire == SY_MOE_WIRE_FP8_UE8M0;
  char *stage = P.staging ? P.staging + (uint64_t)blockIdx.x * P.stage_bytes : nullptr;
  S.kept = make_uint4(0, 0, 0, 0);
  S.kept_scale = 0.0f;
  for (int t = S.first_token; t < num_tokens; t += gridDim.x) {
    __syncthreads(); /* the previous token's shared state is no longer read */
    if (threadIdx.x == 0) {
      sh.ndest = 0;
      sh.any_put = 0;
    }
    if (threadIdx.x < (unsigned)top_k) sh.position[threadIdx.x] = 0;
    const uint16_t *tok = P.tokens + (uint64_t)t * P.hidden;
    const bool first = t == S.first_token, r0 = (vslot & ~31) < vectors, act0 = vslot < vectors;
    uint4 a0 = S.first_a, b0 = S.first_b;
    float w_t = S.first_w;
    if (!first) {
      if (act0) {
        a0 = __ldg((const uint4 *)(tok + (uint64_t)vslot * (fp8 ? 16 : 8)));
        if (fp8) b0 = __ldg((const uint4 *)(tok + (uint64_t)vslot * 16 + 8));
      }
      if (threadIdx.x < (unsigned)top_k && P.weights) w_t = P.weights[(uint64_t)t * top_k + threadIdx.x];
    }
    __syncthreads();
    token_messages<MODE>(P, S, sh, t);
    if (threadIdx.x < (unsigned)top_k) sh.weight[threadIdx.x] = w_t;
    S.kept = a0;
    S.kept_scale = 0.0f;
    if (fp8 && r0) S.kept = quantise16(a0, b0, ue8m0, &S.kept_scale);
    __syncthreads();
    const int ndest = sh.ndest, any_put = sh.any_put;
    token_payload<MODE>(P, S, sh, tok, S.kept, S.kept_scale, ndest, any_put, stage);
    token_headers<MODE>(P, S, sh, t, ndest, stage);
    if (any_put) put_staged(P, S.parity, ndest, sh.dest, sh.index, sh.header, stage);
  }
  __syncthreads();
}

/* Every block, done with its tokens, adds to every destination's signal word; block 0's add also publishes the
 * counts word (the call). */
template <int MODE>
__device__ __forceinline__ void send_signal(const moe_params &P, const send_state &S) {
  constexpr bool TR = MODE & MODE_TRACE;
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_COPY, false, -1, S.call);
    trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_SIGNAL, true, -1, S.call);
  }
  for (int p = threadIdx.x; p < P.world_size; p += blockDim.x)
    arrive(P, S.peers[p], p, S.parity, SY_MOE_COUNTER_DISPATCH, blockIdx.x == 0 ? S.call : 0);
  __syncthreads();
  if (threadIdx.x == 0) trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_SIGNAL, false, -1, S.call);
}

} // namespace sy

#endif
