/*
 * combine_recv.cuh — combine_recv: the owner's sum per token.
 *   block 0       checks the call's num_tokens and ids against this rank's dispatch (reported asynchronously);
 *   threads r     wait (bounded) for expert rank r's combine signal of this call;
 *   blocks        take tokens (block b: b, b + grid, ...); warp 0 finds the token's distinct ranks in ascending
 *                 order (a match and a count over the lanes, no sort); every thread reduces two 16-byte vectors at
 *                 a time with both loads in flight: default, the rank partials added in rank order from +0;
 *                 SY_MOE_PER_EXPERT, fmaf(w_k, y_k, .) in k order from +0; rounded once to bf16. A token with no
 *                 expert gets zero bits. The order of the additions is the host backend's, so the bits are too.
 */
#ifndef SY_CUDA_MOE_COMBINE_RECV_CUH
#define SY_CUDA_MOE_COMBINE_RECV_CUH

#include "cuda/moe/moe.cuh"

namespace sy {

/* combine_recv's work for call `call`. */
template <int MODE>
__device__ __forceinline__ void combine_recv_body(const moe_params &P, const uint64_t call) {
  constexpr bool PE = MODE & MODE_PE, TR = MODE & MODE_TRACE;
  const int world = P.world_size, top_k = P.top_k, max_tokens = P.max_tokens, hidden = P.hidden;
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
    for (int i = threadIdx.x; i < n * top_k; i += blockDim.x) {
      int64_t id = load_id(P, (uint64_t)i);
      if (id < -1 || id >= P.num_experts) id = -1;
      if (id != P.ids[i])
        report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_COMBINE_ARGS, i, call, (uint64_t)P.ids[i], (uint64_t)id);
    }
  }
  /* The first token's ids and weights (this rank's own, from its dispatch) while the partials travel. */
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x / 32u;
  int id_next = -1;
  float w_next = 0.0f;
  if (warp == 0 && lane < (unsigned)top_k &&
      (int)blockIdx.x < (P.num_tokens < dispatched ? P.num_tokens : dispatched)) {
    id_next = P.ids[(uint64_t)blockIdx.x * top_k + lane];
    if (PE) w_next = P.weights[(uint64_t)blockIdx.x * top_k + lane];
  }
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_COMBINE_RECV, PH_KERNEL, true, -1, call);
    trace<TR>(P.ctx, OP_MOE_COMBINE_RECV, PH_WAIT_DATA, true, -1, call);
  }
  for (int r = threadIdx.x; r < world; r += blockDim.x)
    wait_geq(P.ctx, (const uint64_t *)(P.ws + counter_offset(P, parity, r, SY_MOE_COUNTER_COMBINE)), expected(call),
             OP_MOE_COMBINE_RECV, r, call);
  __syncthreads();
  if (threadIdx.x == 0) {
    trace<TR>(P.ctx, OP_MOE_COMBINE_RECV, PH_WAIT_DATA, false, -1, call);
    trace<TR>(P.ctx, OP_MOE_COMBINE_RECV, PH_REDUCE, true, -1, call);
  }
  const int ntok = P.num_tokens < dispatched ? P.num_tokens : dispatched;
  const int vectors = hidden / 8;
  for (int t = blockIdx.x; t < ntok; t += gridDim.x) {
    __syncthreads();
    if (warp == 0) {
      /* Lane k: the token's id (loaded before the wait for the first token) and, by default, where its rank
       * stands among the token's distinct ranks, ascending (a match and a count over the lanes, no sort). */
      const int id = lane < (unsigned)top_k ? id_next : -1;
      if (lane < (unsigned)top_k) {
        id_s[lane] = id;
        w_s[lane] = w_next;
      }
      const int tn = t + (int)gridDim.x;
      if (lane < (unsigned)top_k && tn < ntok) {
        id_next = P.ids[(uint64_t)tn * top_k + lane];
        if (PE) w_next = P.weights[(uint64_t)tn * top_k + lane];
      }
      if (!PE) {
        const int r = id >= 0 ? rank_of_expert(P, id) : -1;
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
    for (int u0 = threadIdx.x; u0 < vectors; u0 += 2 * MOE_THREADS) {
      const int u1 = u0 + MOE_THREADS;
      const bool two = u1 < vectors;
      float acc0[8], acc1[8];
#pragma unroll
      for (int i = 0; i < 8; i++) acc0[i] = acc1[i] = 0.0f;
      const int n = PE ? top_k : nranks_s;
      for (int j0 = 0; j0 < n; j0 += 4) {
        uint4 x0[4], x1[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const int q = j0 + j;
          if (q >= n || (PE && id_s[q] < 0)) continue;
          const char *row = P.ws + combine_offset(P, parity,
                                                  PE ? (uint64_t)t * top_k + (uint64_t)q
                                                     : (uint64_t)ranks_s[q] * max_tokens + (uint64_t)t);
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
      uint4 *out = (uint4 *)(P.out + (uint64_t)t * hidden);
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

} // namespace sy

#endif
