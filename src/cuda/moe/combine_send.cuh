/*
 * combine_send.cuh — combine_send: the experts' outputs back to the tokens' owners.
 *   blocks        take received messages (block b: b, b + grid, ...), CS_BATCH at a time with their entries
 *                 staged in shared memory by one round of independent loads; per message, every thread a 16-byte
 *                 vector: default, fmaf(w_k, y_k, .) over the message's entries in k order from +0, rounded to
 *                 bf16, stored into the owner's combine region at [this rank][token]; SY_MOE_PER_EXPERT, y_k into
 *                 [token][k] (direct stores, or a staged NVSHMEM put);
 *   thread p      then adds to owner p's signal word (arrive, moe.cuh).
 * The headers are read from the dispatch region of the call's parity, which stays intact until call n + 2.
 */
#ifndef SY_CUDA_MOE_COMBINE_SEND_CUH
#define SY_CUDA_MOE_COMBINE_SEND_CUH

#include "cuda/moe/moe.cuh"

namespace sy {

constexpr int CS_BATCH = 8; /* received messages whose entries combine_send stages at once per block */

/* combine_send's work for call `call`. */
template <int MODE>
__device__ __forceinline__ void combine_send_body(const moe_params &P, const uint64_t call) {
  constexpr bool PE = MODE & MODE_PE, TR = MODE & MODE_TRACE;
  extern __shared__ uint64_t moe_dyn[];
  const int world = P.world_size, top_k = P.top_k, max_tokens = P.max_tokens, slots = P.slots, hidden = P.hidden;
  const int me = P.ctx.rank;
  char **peers = (char **)moe_dyn;     /* [world] */
  int *start = (int *)(peers + world); /* [world + 1] */
  /* A batch of this block's messages (i0 + q x gridDim.x): per k the local expert, slot and weight; the source
   * and source token — staged with independent loads, one round per batch instead of a chain per message. */
  __shared__ int le_s[CS_BATCH * MOE_MAX_K], slot_s[CS_BATCH * MOE_MAX_K], tok_s[CS_BATCH], src_s[CS_BATCH];
  __shared__ float w_s[CS_BATCH * MOE_MAX_K];
  const int parity = (int)(call & 1);
  for (int p = threadIdx.x; p < world; p += blockDim.x) peers[p] = peer_ws(P, p);
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_COMBINE_SEND, PH_KERNEL, true, -1, call);
    trace<TR>(P.ctx, OP_MOE_COMBINE_SEND, PH_COPY, true, -1, call);
  }
  const int total = wait_dispatch(P, start, parity, call, OP_MOE_COMBINE_SEND);
  char *stage = P.staging ? P.staging + (uint64_t)blockIdx.x * P.stage_bytes : nullptr;
  const int vectors = hidden / 8, G = (int)gridDim.x;
  for (int i0 = blockIdx.x; i0 < total; i0 += G * CS_BATCH) {
    const int left = (total - 1 - i0) / G + 1, nb = left < CS_BATCH ? left : CS_BATCH;
    __syncthreads(); /* the previous batch's staged entries are no longer read */
    for (int j = threadIdx.x; j < nb * top_k; j += blockDim.x) {
      const int q = j / top_k, k = j - q * top_k, i = i0 + q * G;
      const int s = source_of(start, world, i), m = i - start[s];
      const char *msg = P.ws + msg_offset(P, parity, s, m);
      const int2 ent = *(const int2 *)(msg + sy__moe_entry_offset(k));
      const int slot =
          P.slot_of[((uint64_t)s * P.messages_per_source + (uint64_t)m) * top_k + k]; /* where ent.x >= 0 */
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
      const int *le = le_s + q * top_k, *sl = slot_s + q * top_k;
      const float *wq = w_s + q * top_k;
      const int s = src_s[q], tok = tok_s[q];
      char *peer = peers[s];
      if (!PE) {
        const uint64_t off = combine_offset(P, parity, (uint64_t)me * max_tokens + (uint64_t)tok);
        char *dst = peer ? peer + off : stage;
        for (int u = threadIdx.x; u < vectors; u += MOE_THREADS) {
          float acc[8];
#pragma unroll
          for (int i2 = 0; i2 < 8; i2++) acc[i2] = 0.0f;
          for (int k0 = 0; k0 < top_k; k0 += 8) { /* eight loads in flight, then the fmas in k order */
            uint4 y[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
              const int k = k0 + j;
              if (k < top_k && le[k] >= 0)
                y[j] = __ldg((const uint4 *)(P.expert_out + ((uint64_t)le[k] * slots + (uint64_t)sl[k]) * hidden) + u);
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
              const int k = k0 + j;
              if (k >= top_k || le[k] < 0) continue;
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
        if (!peer) { /* inline: out of line it measured slower (bench/NOTES.md, "MoE combine") */
          __syncthreads();
          nvshmemx_putmem_block(P.ws + off, stage, (size_t)hidden * 2, s);
        }
      } else {
        for (int k = 0; k < top_k; k++) {
          if (le[k] < 0) continue;
          const uint64_t off = combine_offset(P, parity, (uint64_t)tok * top_k + (uint64_t)k);
          const uint4 *y = (const uint4 *)(P.expert_out + ((uint64_t)le[k] * slots + (uint64_t)sl[k]) * hidden);
          uint4 *dst = (uint4 *)(peer ? peer + off : stage);
          for (int u = threadIdx.x; u < vectors; u += MOE_THREADS) dst[u] = __ldg(y + u);
          if (!peer) {
            __syncthreads();
            nvshmemx_putmem_block(P.ws + off, stage, (size_t)hidden * 2, s);
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
  for (int p = threadIdx.x; p < world; p += blockDim.x) arrive(P, peers[p], p, parity, SY_MOE_COUNTER_COMBINE);
  __syncthreads();
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_COMBINE_SEND, PH_SIGNAL, false, -1, call);
    trace<TR>(P.ctx, OP_MOE_COMBINE_SEND, PH_KERNEL, false, -1, call);
  }
}

} // namespace sy

#endif
