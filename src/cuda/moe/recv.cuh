/*
 * recv.cuh — dispatch_recv: the messages laid out into the caller's expert-major buffers, on any grid.
 *   threads s     wait (bounded) for source s's signal word of this call (direct: this rank's counts word) and
 *                 read its message count; the counts' prefix over sources gives each (source, local expert) its
 *                 first slot, so every entry's slot is first + the position its sender wrote: no scan;
 *   warps         take the (message, k) entries, a lane each for the lookups (one load round per warp), and copy
 *                 the ones naming an expert here — payload, scales, source — up to four warps sharing a copy;
 *                 each entry's slot is remembered for combine_send (slot_of).
 */
#ifndef SY_CUDA_MOE_RECV_CUH
#define SY_CUDA_MOE_RECV_CUH

#include "cuda/moe/moe.cuh"

namespace sy {

/* first[s][e] (the slot of (source, local expert)'s first entry) from the sources' counts; block 0 also fills
 * rank_counts and expert_counts. A source that sent nothing here wrote no counts: its are 0. */
__device__ __forceinline__ void first_slots(const moe_params &P, const int *start, int *first, int parity,
                                            uint64_t call, int own, const int &own_count) {
  const int world = P.world_size, local_experts = P.local_experts;
  for (int e = threadIdx.x; e < local_experts; e += blockDim.x) {
    int acc = 0;
    for (int s = 0; s < world; s++) {
      const bool sent = s == own ? own_count > 0 : start[s + 1] > start[s];
      const int c = sent ? *(const volatile int *)(P.ws + counts_offset(P, parity, s, e)) : 0;
      first[s * local_experts + e] = acc;
      if (blockIdx.x == 0) P.recv.rank_counts[(size_t)e * world + s] = c;
      acc += c;
    }
    if (blockIdx.x == 0) P.recv.expert_counts[e] = acc;
    if (acc > P.slots) report_error(P.ctx, SY_ERR_INTERNAL, OP_MOE_SLOTS, e, call, (uint64_t)P.slots, (uint64_t)acc);
  }
  __syncthreads();
}

template <int MODE>
__device__ __forceinline__ void dispatch_recv_body(const moe_params &P, const uint64_t call) {
  constexpr bool fp8 = MODE & MODE_FP8, DIRECT = MODE & MODE_DIRECT, TR = MODE & MODE_TRACE;
  extern __shared__ uint64_t moe_dyn[];
  const int world = P.world_size, top_k = P.top_k, local_experts = P.local_experts, slots = P.slots;
  const int scale_groups = P.scale_groups;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x / 32u;
  int *start = (int *)moe_dyn;    /* [world + 1] */
  int *first = start + world + 1; /* [world][local_experts]: slot of (source, local expert)'s first message */
  const int parity = (int)(call & 1);
  const uint64_t row_bytes = (uint64_t)P.hidden * (fp8 ? 1 : 2);

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
  first_slots(P, start, first, parity, call, own, own_count_s);

  /* Entries to warps: with at least two warps per entry, `parts` (up to 4) warps share each entry's copy, a slice
   * each, so a warp's copy is one round of loads. Virtual warp vw of part `part` takes entries vw, vw + nvw, ... (a
   * lane each for the lookups). */
  const int entries = total * top_k, nwarps = (int)gridDim.x * MOE_WARPS;
  const int fit = entries > 0 ? nwarps / entries : 1, parts = fit >= 4 ? 4 : fit >= 2 ? 2 : 1;
  const int nvw = nwarps / parts, gw = (int)blockIdx.x * MOE_WARPS + (int)warp, part = gw / nvw, vw = gw % nvw;
  const int vectors = (int)(row_bytes / 16), per = (vectors + parts - 1) / parts;
  const int v_lo = part * per, v_hi = v_lo + per < vectors ? v_lo + per : vectors;
  for (int i0 = vw; part < parts && i0 < entries; i0 += nvw * 32) {
    /* lane l: entry i0 + l * nvw */
    const int entry = i0 + (int)lane * nvw;
    int s = 0, m = 0, k = 0, e = -1, h = 0;
    if (entry < entries) {
      const int i = entry / top_k;
      k = entry - i * top_k;
      s = source_of(start, world, i);
      m = i - start[s];
      const char *msg = P.ws + msg_offset(P, parity, s, m);
      e = *(const int *)(msg + sy__moe_entry_offset(k));
      const int position = *(const int *)(msg + sy__moe_position_offset(top_k, k));
      if (e >= local_experts) e = -1; /* cannot happen: the sender wrote e - p * L for an expert of p */
      if (e >= 0) {
        h = first[s * local_experts + e] + position;
        if (position < 0 || h >= slots) {
          report_error(P.ctx, SY_ERR_INTERNAL, OP_MOE_DISPATCH_RECV, s, call, (uint64_t)m, (uint64_t)position);
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
      const uint64_t at = (uint64_t)ce * slots + (uint64_t)ch;
      const uint4 *src = (const uint4 *)(msg + P.layout.payload_offset);
      uint4 *dst = (uint4 *)((char *)P.recv.tokens + at * row_bytes);
      /* The small loads first, so they travel with the payload's: this part's first two scales and (part 0) the
       * source token. Plain loads: the poller's acquire and a bar.sync came before, as for the payload. */
      const float *sc = (const float *)(msg + P.layout.scales_offset);
      const int g0 = part * 32 + (int)lane, g1 = g0 + 32 * parts;
      const float sc0 = fp8 && g0 < scale_groups ? sc[g0] : 0.0f, sc1 = fp8 && g1 < scale_groups ? sc[g1] : 0.0f;
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
        float *out = P.recv.scales + (uint64_t)ce * scale_groups * slots + (uint64_t)ch;
        if (g0 < scale_groups) out[(uint64_t)g0 * slots] = sc0;
        if (g1 < scale_groups) out[(uint64_t)g1 * slots] = sc1;
        for (int g = g1 + 32 * parts; g < scale_groups; g += 32 * parts) out[(uint64_t)g * slots] = sc[g];
      }
      if (part == 0 && lane == 0) {
        P.recv.src[2 * at] = cs;
        P.recv.src[2 * at + 1] = token;
        P.slot_of[((uint64_t)cs * P.messages_per_source + (uint64_t)cm) * top_k + ck] = ch;
      }
    }
  }
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_DISPATCH_RECV, PH_POST, false, -1, call);
    trace<TR>(P.ctx, OP_MOE_DISPATCH_RECV, PH_KERNEL, false, -1, call);
  }
}

} // namespace sy

#endif
