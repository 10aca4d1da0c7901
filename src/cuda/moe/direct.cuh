/*
 * direct.cuh — the one-call dispatch's own entries (SY_MOE_DIRECT): the messages to this rank carried only their
 * headers; after its signal adds each sending block stores its own-rank entries (own_list, send.cuh) straight into
 * the expert buffers, while the other ranks' messages travel — nothing to copy for them after the wait.
 *   threads s < rank  wait for the lower sources' counts words (the call; each source's block 0 publishes it with
 *                     its message count and counts, before its whole signal is in);
 *   threads e         first slot of this rank's entries of local expert e: the lower sources' counts summed;
 *   the block         a run of entries of one token at a time: the slot of each, then the rows (the token again,
 *                     quantised, or round 0 kept in registers when the block held a single one-round token).
 */
#ifndef SY_CUDA_MOE_DIRECT_CUH
#define SY_CUDA_MOE_DIRECT_CUH

#include "cuda/moe/route.cuh"

namespace sy {

template <int MODE>
__device__ __forceinline__ void place_own(const moe_params &P, send_state &S, send_shared &sh) {
  constexpr bool fp8 = MODE & MODE_FP8, TR = MODE & MODE_TRACE;
  const int me = P.ctx.rank, parity = S.parity, slots = P.slots, vslot = S.vslot, vectors = S.vectors;
  const uint64_t call = S.call;
  const unsigned lane = threadIdx.x & 31u;
  const int ue8m0 = P.wire == SY_MOE_WIRE_FP8_UE8M0;
  if (threadIdx.x == 0) trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_LOCAL, true, -1, call);
  int *lower = (int *)S.unit_masks; /* [world]: source s < me sent messages here (the masks are no longer read) */
  int *first_slot = S.named;        /* [local_experts]: the slot of this rank's first entry of each local expert */
  for (int s = threadIdx.x; s < me; s += blockDim.x) {
    const bool ok = wait_geq(P.ctx, (const uint64_t *)(P.ws + counter_offset(P, parity, s, SY_MOE_COUNTER_COUNTS)),
                             call, OP_MOE_DISPATCH_RECV, s, call);
    lower[s] = ok && *(const volatile uint64_t *)(P.ws + counter_offset(P, parity, s, SY_MOE_COUNTER_MESSAGES)) > 0;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < P.local_experts; e += blockDim.x) {
    int acc = 0;
    for (int s = 0; s < me; s++)
      if (lower[s]) acc += *(const volatile int *)(P.ws + counts_offset(P, parity, s, e));
    first_slot[e] = acc;
  }
  __syncthreads();
  const int n = sh.nown < P.own_cap ? sh.nown : P.own_cap;
  const bool keep = S.first_token + (int)gridDim.x >= P.num_tokens && vectors <= MOE_THREADS;
  const uint64_t row_bytes = (uint64_t)P.hidden * (fp8 ? 1 : 2);
  char **rows = sh.header;                   /* the run's rows (the messages are sent: the array is free) */
  float **scale_rows = (float **)sh.payload; /* and their scales' first slot */
  for (int i0 = 0; i0 < n;) { /* a run of entries of one token (the list is in the block's token order) */
    const int t = S.own_list[i0].x;
    int i1 = i0 + 1;
    while (i1 < n && S.own_list[i1].x == t) i1++;
    if (threadIdx.x < (unsigned)(i1 - i0)) {
      const int4 en = S.own_list[i0 + threadIdx.x]; /* {token, message index, local expert << 5 | k, position} */
      const int e = en.z >> 5, k = en.z & 31, slot = first_slot[e] + en.w;
      const uint64_t at = (uint64_t)e * slots + (uint64_t)(slot < slots ? slot : 0);
      if (slot >= slots)
        report_error(P.ctx, SY_ERR_INTERNAL, OP_MOE_SLOTS, e, call, (uint64_t)slots, (uint64_t)slot + 1);
      rows[threadIdx.x] = slot < slots ? (char *)P.recv.tokens + at * row_bytes : nullptr;
      scale_rows[threadIdx.x] = fp8 ? P.recv.scales + (uint64_t)e * P.scale_groups * slots + (uint64_t)slot : nullptr;
      if (slot < slots) {
        P.recv.src[2 * at] = me;
        P.recv.src[2 * at + 1] = t;
        P.slot_of[((uint64_t)me * P.messages_per_source + (uint64_t)en.y) * P.top_k + k] = slot;
      }
    }
    __syncthreads();
    const int nrows = i1 - i0;
    const uint16_t *tok = P.tokens + (uint64_t)t * P.hidden;
    if (fp8) {
      for (int v0 = vslot & ~31; v0 < vectors; v0 += MOE_THREADS) {
        const int v = v0 + (int)lane;
        const bool active = v < vectors;
        uint4 qv = S.kept;
        float scale = S.kept_scale;
        if (!keep) qv = load_quantise16(tok, v, active, ue8m0, &scale);
        if (active)
          for (int j = 0; j < nrows; j++) {
            if (!rows[j]) continue;
            *(uint4 *)(rows[j] + (uint64_t)v * 16) = qv;
            if ((lane & 7u) == 0) scale_rows[j][(uint64_t)(v / 8) * slots] = scale;
          }
      }
    } else {
      for (int v = vslot; v < vectors; v += MOE_THREADS) {
        const uint4 a = keep ? S.kept : __ldg((const uint4 *)(tok + (uint64_t)v * 8));
        for (int j = 0; j < nrows; j++)
          if (rows[j]) *(uint4 *)(rows[j] + (uint64_t)v * 16) = a;
      }
    }
    __syncthreads();
    i0 = i1;
  }
  if (threadIdx.x == 0) trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_LOCAL, false, -1, call);
}

} // namespace sy

#endif
