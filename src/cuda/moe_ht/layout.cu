/*
 * layout.cu — sy_moe_ht_layout on the GPU: five small kernels, no host round trip.
 *   zero      the scratch below and the handle's send counts cleared (sy_ht_layout_zero)
 *   count     a thread a token: its ids checked (a bad one reported and counted as -1) and copied into the
 *             handle, its bit set in each named expert's token mask, the expert's entry count, and per
 *             destination rank (a token once per rank) the channel's send count
 *   prefix    a block an expert: the popcounts of its mask words, prefix-summed (word_prefix)
 *   pos       a thread a token: each entry's position = word_prefix + the popcount of the earlier bits of
 *             its word — how many earlier tokens of this rank name the same expert
 *   exchange  one block: to each rank its counts (after that rank's ack of the previous layout), from each
 *             rank its counts (then the ack), the offsets, the handle's header, and the exact mode's host copy
 * Before them, zero clears the scratch (masks, counts) and the handle's send counts. Each kernel has at most the SM
 * budget's blocks (config.num_sms, launch.cu), as the dispatch and combine do, its threads striding over the tokens
 * or experts: a layout runs beside the expert GEMMs.
 */
#include "cuda/moe_ht/ht.cuh"

using namespace sy;

__global__ void sy_ht_layout_zero(ht_zero_params Z) {
  pdl_begin();
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (int i = 0; i < 3; i++)
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < Z.n[i]; j += stride) Z.w[i][j] = 0;
}

__device__ __forceinline__ void count_token(const ht_params &P, int t) {
  int32_t *ids = hsec(P, P.hl.ids) + (size_t)t * P.K;
  int ranks[32], nr = 0;
  for (int k = 0; k < P.K; k++) {
    int64_t e = ht_id(P, t, k);
    bool bad = e < -1 || e >= P.E;
    for (int j = 0; j < k && !bad && e >= 0; j++) bad = ids[j] == e;
    if (bad) {
      report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_HT_IDS, t, 0, (uint64_t)k, (uint64_t)e);
      e = -1;
    }
    ids[k] = (int32_t)e;
    if (e < 0) continue;
    atomicOr(P.masks + (size_t)e * ((P.T + 31) / 32) + t / 32, 1u << (t % 32));
    atomicAdd(P.expert_count + e, 1);
    const int r = (int)(e / P.L);
    bool seen = false;
    for (int j = 0; j < nr; j++) seen |= ranks[j] == r;
    if (!seen) ranks[nr++] = r;
  }
  int c = (int)((int64_t)t * P.C / P.num_tokens);
  while (c + 1 < P.C && chan_begin(c + 1, P.num_tokens, P.C) <= t) c++;
  while (c > 0 && chan_begin(c, P.num_tokens, P.C) > t) c--;
  int32_t *send_chan = hsec(P, P.hl.send_chan);
  for (int j = 0; j < nr; j++) atomicAdd(send_chan + (size_t)ranks[j] * P.C + c, 1);
}

/* The layout's kernels hold at most the SM budget's blocks (launch.cu), so each strides over its tokens or experts. */
__global__ void sy_ht_layout_count(ht_params P) {
  pdl_begin();
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < P.num_tokens; t += gridDim.x * blockDim.x) count_token(P, t);
}

__device__ __forceinline__ void prefix_expert(const ht_params &P, int e) {
  const int words = (P.num_tokens + 31) / 32, stride = (P.T + 31) / 32;
  const uint32_t *mask = P.masks + (size_t)e * stride;
  int32_t *prefix = P.word_prefix + (size_t)e * stride;
  __shared__ int32_t carry;
  __shared__ int32_t warp_sum[HT_WARPS];
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < words; base += blockDim.x) {
    const int w = base + threadIdx.x;
    const int v = w < words ? __popc(mask[w]) : 0;
    int incl = v; /* inclusive scan in the warp, then over warps */
    for (int d = 1; d < 32; d <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, incl, d);
      if ((threadIdx.x & 31) >= d) incl += o;
    }
    if ((threadIdx.x & 31) == 31) warp_sum[threadIdx.x / 32] = incl;
    __syncthreads();
    int before = carry;
    for (int j = 0; j < (int)threadIdx.x / 32; j++) before += warp_sum[j];
    if (w < words) prefix[w] = before + incl - v;
    __syncthreads();
    if (threadIdx.x == blockDim.x - 1) carry = before + incl;
    __syncthreads();
  }
}

__global__ void sy_ht_layout_prefix(ht_params P) {
  pdl_begin();
  for (int e = blockIdx.x; e < P.E; e += gridDim.x) prefix_expert(P, e); /* block-uniform: its barriers agree */
}

__device__ __forceinline__ void pos_token(const ht_params &P, int t) {
  const int stride = (P.T + 31) / 32;
  const int32_t *ids = hsec(P, P.hl.ids) + (size_t)t * P.K;
  int32_t *pos = hsec(P, P.hl.pos) + (size_t)t * P.K;
  for (int k = 0; k < P.K; k++) {
    const int e = ids[k];
    if (e < 0) {
      pos[k] = -1;
      continue;
    }
    const size_t w = (size_t)e * stride + t / 32;
    pos[k] = P.word_prefix[w] + __popc(P.masks[w] & ((1u << (t % 32)) - 1u));
  }
}

__global__ void sy_ht_layout_pos(ht_params P) {
  pdl_begin();
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < P.num_tokens; t += gridDim.x * blockDim.x) pos_token(P, t);
}

/* The exchange's put path (out of line; its arguments by value, so the kernel's parameters stay in the constant
 * bank): rank d's L expert counts and C channel counts from this rank and the total into x (this rank's row of d's
 * xdata, by its symmetric address), then, ordered after them by a fence, the stamp. */
static __device__ __noinline__ void counts_put(int *x, uint64_t *stamp, const int32_t *counts, const int32_t *chans,
                                               int L, int C, int32_t total, uint64_t n, int d) {
  for (int e = 0; e < L; e++) nvshmem_int_p(x + e, counts[e], d);
  for (int c = 0; c < C; c++) nvshmem_int_p(x + L + c, chans[c], d);
  nvshmem_int_p(x + L + C, total, d);
  nvshmem_fence();
  nvshmem_uint64_p(stamp, n, d);
}

/* After a failed wait (reported): the layout number still advances, so the next layout's exchange waits for the
 * acks of this one (and fails fast on the abort) instead of reusing its number and overwriting counts a peer has
 * not read; the handle is marked unwritten, so a dispatch queued behind rejects it. */
__device__ __forceinline__ void exchange_failed(const ht_params &P, uint64_t n) {
  if (threadIdx.x != 0) return;
  ((sy_moe_ht_handle_header_t *)P.handle)->magic = 0;
  P.local->layouts = n;
}

/* One block, shared memory: ok[W] and the offsets' [L + 1] rows. Threads stride over ranks for the waits and the
 * counters (a thread per rank) and over (rank, word) for the copies, so no thread walks L words alone (a load
 * then a store per word through pointers the compiler cannot prove apart: each waits for the last). Then the
 * offsets: each expert's rows summed over sources by a thread each, prefix-summed by thread 0 in shared memory. */
__global__ void sy_ht_layout_exchange(ht_params P) {
  pdl_begin();
  extern __shared__ __align__(16) char smem[];
  const uint64_t n = P.local->layouts + 1;
  const int W = P.world_size, L = P.L, C = P.C, me = P.ctx.rank;
  const int xw = (int)P.wl.xdata_words, words = L + C + 1; /* a rank's counts: L experts, C channels, total */
  int *ok = (int *)smem;                                   /* [W] the rank's ack (out) or stamp (in) came */
  int32_t *rows = (int32_t *)(smem + (size_t)W * 4);       /* [L + 1] */
  int32_t *send_tokens = hsec(P, P.hl.send_tokens), *send_chan = hsec(P, P.hl.send_chan);
  /* out: each rank's ack of the previous layout's counts, then its counts from us */
  int bad = 0;
  for (int d = threadIdx.x; d < W; d += blockDim.x) {
    int32_t total = 0;
    for (int c = 0; c < C; c++) total += send_chan[(size_t)d * C + c];
    send_tokens[d] = total;
    ok[d] = ht_wait(P, ht_at<uint64_t>(P.ws, P.wl.ack) + d, n - 1, OP_MOE_HT_EXCHANGE, d);
    if (!ok[d]) bad = 1;     /* reported; the other ranks still get their counts */
    else if (!ht_peer(P, d)) /* the put path: one thread, its own order */
      counts_put(ht_at<int>(P.ws, P.wl.xdata) + (size_t)me * xw, ht_at<uint64_t>(P.ws, P.wl.stamp) + me,
                 P.expert_count + (size_t)d * L, send_chan + (size_t)d * C, L, C, total, n, d);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < W * words; i += blockDim.x) {
    const int d = i / words, j = i % words;
    char *peer = ok[d] ? ht_peer(P, d) : nullptr;
    if (!peer) continue;
    const int32_t v = j < L       ? P.expert_count[(size_t)d * L + j]
                      : j < L + C ? send_chan[(size_t)d * C + j - L]
                                  : send_tokens[d];
    ht_at<int32_t>(peer, P.wl.xdata)[(size_t)me * xw + j] = v;
  }
  __syncthreads(); /* the block's stores, then each rank's stamp (release: cumulative over the barrier) */
  for (int d = threadIdx.x; d < W; d += blockDim.x) {
    char *peer = ok[d] ? ht_peer(P, d) : nullptr;
    if (peer) st_release_sys(ht_at<uint64_t>(peer, P.wl.stamp) + me, n);
  }
  /* in: each rank's stamp, then its counts, then the ack that lets it write the next layout's (not after a failed
   * wait: one timeout is enough) */
  if (__syncthreads_or(bad)) return exchange_failed(P, n);
  for (int s = threadIdx.x; s < W; s += blockDim.x) {
    ok[s] = ht_wait(P, ht_at<uint64_t>(P.ws, P.wl.stamp) + s, n, OP_MOE_HT_EXCHANGE, s);
    bad |= !ok[s];
  }
  if (__syncthreads_or(bad)) return exchange_failed(P, n);
  int32_t *recv_counts = hsec(P, P.hl.recv_counts), *recv_tokens = hsec(P, P.hl.recv_tokens);
  int32_t *chan_tokens = hsec(P, P.hl.chan_tokens);
  for (int i = threadIdx.x; i < W * words; i += blockDim.x) {
    const int s = i / words, j = i % words;
    const int32_t v = ht_at<int32_t>(P.ws, P.wl.xdata)[(size_t)s * xw + j];
    if (j < L) recv_counts[(size_t)s * L + j] = v;
    else if (j < L + C) chan_tokens[(size_t)s * C + j - L] = v;
    else recv_tokens[s] = v;
  }
  __syncthreads(); /* the reads above before the acks that let the sources overwrite them */
  for (int s = threadIdx.x; s < W; s += blockDim.x) {
    char *sp = ht_peer(P, s);
    if (sp) st_release_sys(ht_at<uint64_t>(sp, P.wl.ack) + me, n);
    else p_u64_cold(ht_at<uint64_t>(P.ws, P.wl.ack) + me, n, s);
  }
  /* the offsets (sy__moe_ht_offsets' numbers): each expert's rows rounded up to the alignment, then a prefix sum */
  for (int e = threadIdx.x; e < L; e += blockDim.x) {
    int64_t sum = 0;
    for (int s = 0; s < W; s++) sum += recv_counts[(size_t)s * L + e];
    rows[e] = (int32_t)sy__moe_ht_round_up(sum, P.alignment);
    if (P.host_counts) P.host_counts[e] = (int32_t)sum;
  }
  __syncthreads();
  int32_t *offsets = hsec(P, P.hl.offsets);
  if (threadIdx.x == 0) {
    int64_t at = 0;
    for (int e = 0; e < L; e++) {
      const int32_t r = rows[e];
      rows[e] = (int32_t)at;
      at += r;
    }
    rows[L] = (int32_t)at;
  }
  __syncthreads();
  for (int e = threadIdx.x; e <= L; e += blockDim.x) {
    offsets[e] = rows[e];
    if (P.host_counts) P.host_counts[L + e] = rows[e]; /* [2 L]: the rows needed */
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  sy_moe_ht_handle_header_t *h = (sy_moe_ht_handle_header_t *)P.handle;
  h->object = P.object;
  h->num_tokens = P.num_tokens;
  h->rows = rows[L];
  h->layout = n;
  h->dispatched = 0;
  h->expert_stride = 0;
  h->magic = SY_MOE_HT_HANDLE_MAGIC;
  P.local->layouts = n;
  if (P.host_counts) {
    __threadfence_system();
    *P.host_stamp = n;
    __threadfence_system();
  }
}
