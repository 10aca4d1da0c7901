/*
 * layout.cu — sy_moe_ht_layout on the GPU: one kernel (sy_ht_layout), no host round trip. Its blocks (at most the
 * SM budget's, config.num_sms or the call's, and at most what the GPU holds at once: launch.cu) go through its
 * phases with grid barriers (layout_sync: a counter in ht_local, a bounded wait, the counter back to 0 when the last
 * block ends) after zero, after count, and among the prefix blocks after prefix:
 *   zero      the scratch below and the handle's send counts cleared
 *   count     a thread an entry (token, k): its id checked (a bad one marked and counted as -1) and copied into
 *             the handle, its token's bit set in the expert's token mask, the expert's entry count, and per
 *             destination rank (a token once per rank: at the first k naming that rank) the channel's send count
 *   then, at once, on the last block (x):
 *   exchange  to each rank its counts (after that rank's ack of the previous layout), from each rank its counts
 *             (then the ack), the offsets, the handle's header, and the exact mode's host copy
 *   and on the others (all blocks where there is one):
 *   prefix    a warp an expert: the popcounts of its mask words, prefix-summed (word_prefix); the first bad entry
 *             count marked reported
 *   pos       a thread an entry: its position = word_prefix + the popcount of the earlier bits of its word — how
 *             many earlier tokens of this rank name the same expert
 * So the exchange's waits on the peers overlap prefix and pos, and the layout holds no more SMs than its budget:
 * as five kernels under programmatic dependent launch (runs 46-54) each kernel's successor waited resident beside
 * it, up to twice the budget's SMs. Blocks of HT_LTHREADS threads: at world 1 on 16 SMs a thread a token of
 * 256-thread blocks left each SM eight warps whose loads waited one after the other (run 54). The stream's next
 * kernel is let launch when every block has passed its last phase (pdl_trigger), not at the start. The grid
 * barriers need every block resident at once (one an SM): the layouts of several objects on several streams whose
 * blocks together exceed the SMs that kernels of their own kind leave free wait for each other until the timeout.
 * A block whose barrier failed (timeout or abort, reported) skips its later phases; the handle is then marked
 * unwritten when the last block ends, even where the exchange itself succeeded.
 */
#include "cuda/moe_ht/ht.cuh"

using namespace sy;

/* The scratch that count adds into (the first num_tokens' mask words of each expert, the experts' counts and the
 * first-bad mark, the handle's send counts), cleared by the grid. */
__device__ __forceinline__ void zero_phase(const ht_params &P) {
  const size_t stride = (size_t)gridDim.x * blockDim.x, i0 = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t used = ((size_t)P.num_tokens + 31) / 32, words = ((size_t)P.T + 31) / 32;
  for (size_t j = i0; j < (size_t)P.E * used; j += stride) P.masks[j / used * words + j % used] = 0;
  for (size_t j = i0; j <= (size_t)P.E; j += stride) P.expert_count[j] = 0;
  int32_t *send_chan = hsec(P, P.hl.send_chan);
  for (size_t j = i0; j < (size_t)P.world_size * P.C; j += stride) send_chan[j] = 0;
}

/* Grid barrier: every block's earlier writes (each thread's, by the block barrier and the release) before any
 * block's later reads; `target` = the arrivals so far in this call, this one included. Thread 0 waits, bounded
 * (wait_geq's rules: the communicator's timeout and abort). The blocks are at most the SM budget's and what the GPU
 * holds, one an SM, so they are resident together once the kernels holding other SMs end, which they do without
 * waiting for this one (other objects' layouts aside: the header above). */
__device__ __forceinline__ bool layout_sync(const ht_params &P, uint64_t target) {
  __shared__ int ok;
  __syncthreads();
  if (threadIdx.x == 0) {
    atom_add_acq_rel_gpu(&P.local->lbar, (uint64_t)1);
    ok = wait_geq(P.ctx, &P.local->lbar, target, OP_MOE_HT_LAYOUT_SYNC, (int)blockIdx.x, 0);
  }
  __syncthreads();
  return ok != 0;
}

/* Entry (t, k): an id outside [-1, E), or equal to the id at an earlier k of its token, is counted as -1 (an
 * earlier id outside [-1, E) counts as -1 there too: it repeats nothing) and marked in expert_count[E] by the key
 * N K - i, so that the largest key names the first bad entry in (t, k) order — the one the host backend's check
 * names — whichever thread comes first (prefix reports it; 0 = none; N K < 2^31 by create's max_rows bound). The
 * token's send count to the expert's rank is taken at the first k naming an expert of that rank (an earlier repeat
 * names the same rank as the id it repeats). The earlier ids are loaded again: their lines are in L1, the neighbouring threads' entries. The
 * counts go to the block's tallies in shared memory where it has them (tally: [E] then [W][C]), else to global. */
__device__ __forceinline__ void count_entry(const ht_params &P, int64_t i, int t, int k, int32_t *tally) {
  const int64_t e = ht_id(P, t, k);
  bool bad = e < -1 || e >= P.E, first_of_rank = true;
  const int r = bad || e < 0 ? -1 : (int)e / P.L;
  for (int j = 0; j < k; j++) {
    const int64_t f = ht_id(P, t, j);
    if (f < 0 || f >= P.E) continue;
    bad |= f == e;
    first_of_rank &= (int)f / P.L != r;
  }
  if (bad) atomicMax((unsigned *)(P.expert_count + P.E), (unsigned)((int64_t)P.num_tokens * P.K - i));
  hsec(P, P.hl.ids)[i] = bad ? -1 : (int32_t)e;
  if (bad || e < 0) return;
  atomicOr(P.masks + (size_t)e * ((P.T + 31) / 32) + t / 32, 1u << (t % 32));
  if (tally) atomicAdd(tally + e, 1);
  else atomicAdd(P.expert_count + e, 1);
  if (!first_of_rank) return;
  int c = (int)((int64_t)t * P.C / P.num_tokens);
  while (c + 1 < P.C && chan_begin(c + 1, P.num_tokens, P.C) <= t) c++;
  while (c > 0 && chan_begin(c, P.num_tokens, P.C) > t) c--;
  if (tally) atomicAdd(tally + P.E + r * P.C + c, 1);
  else atomicAdd(hsec(P, P.hl.send_chan) + (size_t)r * P.C + c, 1);
}

/* The layout holds at most the SM budget's blocks (launch.cu), so each phase strides over its entries or experts;
 * consecutive threads take consecutive entries (the ids' loads, the handle's stores coalesce). With the tallies in
 * shared memory (ht_tally_words; launch.cu gives the bytes) a block's entries add there and the block adds each
 * non-zero tally into global memory once: the global counters of one expert, or of one channel to one
 * rank, otherwise take an atomic from every entry naming them (at world 1, 4,096 tokens: 256 a channel). */
__device__ __forceinline__ void count_phase(const ht_params &P, int32_t *tally) {
  const int words = ht_tally_words(P.E, P.world_size, P.C);
  for (int j = threadIdx.x; j < words; j += blockDim.x) tally[j] = 0;
  __syncthreads();
  const int64_t n = (int64_t)P.num_tokens * P.K, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    count_entry(P, i, (int)(i / P.K), (int)(i % P.K), words ? tally : nullptr);
  if (!words) return;
  __syncthreads();
  int32_t *send_chan = hsec(P, P.hl.send_chan);
  for (int j = threadIdx.x; j < words; j += blockDim.x) {
    const int32_t v = tally[j];
    if (v) atomicAdd(j < P.E ? P.expert_count + j : send_chan + (j - P.E), v);
  }
}

/* The sum of v over lanes 0..lane of the warp (every lane calls it). */
__device__ __forceinline__ int32_t warp_inclusive_sum(int32_t v, int lane) {
  for (int d = 1; d < 32; d <<= 1) {
    const int32_t o = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += o;
  }
  return v;
}

/* Expert e's mask words' popcounts, prefix-summed by a warp, 32 words a round. */
__device__ __forceinline__ void prefix_expert(const ht_params &P, int e, int lane) {
  const int words = (P.num_tokens + 31) / 32, stride = (P.T + 31) / 32;
  const uint32_t *mask = P.masks + (size_t)e * stride;
  int32_t *prefix = P.word_prefix + (size_t)e * stride;
  int32_t carry = 0;
  for (int base = 0; base < words; base += 32) {
    const int w = base + lane;
    const int v = w < words ? __popc(mask[w]) : 0;
    const int incl = warp_inclusive_sum(v, lane);
    if (w < words) prefix[w] = carry + incl - v;
    carry += __shfl_sync(0xffffffffu, incl, 31);
  }
}

/* prefix on blocks [0, blocks): a warp an expert. */
__device__ __forceinline__ void prefix_phase(const ht_params &P, int blocks) {
  if (blockIdx.x == 0 && threadIdx.x == 0) { /* the first bad entry, count's mark (count_entry) */
    const unsigned key = ((const unsigned *)P.expert_count)[P.E];
    if (key) {
      const int64_t i = (int64_t)P.num_tokens * P.K - key;
      const int t = (int)(i / P.K), k = (int)(i % P.K);
      report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_HT_IDS, t, 0, (uint64_t)k, (uint64_t)ht_id(P, t, k));
    }
  }
  const int per_block = (int)blockDim.x / 32, lane = threadIdx.x & 31;
  for (int e = blockIdx.x * per_block + (int)threadIdx.x / 32; e < P.E; e += blocks * per_block)
    prefix_expert(P, e, lane); /* warp-uniform: its shuffles agree */
}

/* Entry (t, k)'s position among the rank's entries of its expert (-1 where it names none). */
__device__ __forceinline__ void pos_entry(const ht_params &P, int64_t i, int t) {
  const int e = hsec(P, P.hl.ids)[i];
  int32_t v = -1;
  if (e >= 0) {
    const size_t w = (size_t)e * ((P.T + 31) / 32) + t / 32;
    v = P.word_prefix[w] + __popc(P.masks[w] & ((1u << (t % 32)) - 1u));
  }
  hsec(P, P.hl.pos)[i] = v;
}

/* pos on blocks [0, blocks). */
__device__ __forceinline__ void pos_phase(const ht_params &P, int blocks) {
  const int64_t n = (int64_t)P.num_tokens * P.K, stride = (int64_t)blocks * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) pos_entry(P, i, (int)(i / P.K));
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

/* rows[0..L) replaced by their exclusive prefix sum and rows[L] set to the total, by the block: a thread sums a
 * contiguous run, the runs' sums are scanned by warps, then each thread writes its run's prefixes (a thread's serial
 * walk over the L rows, a dependent shared load and store each, took ~9 us of the exchange at L = 256). The totals
 * fit in int32: create refuses a configuration whose max_rows exceeds 2^31 - 1. Every thread calls it. */
__device__ __forceinline__ void exclusive_scan(int32_t *rows, int L) {
  __shared__ int32_t warp_sum[HT_LTHREADS / 32];
  const int per = (L + (int)blockDim.x - 1) / (int)blockDim.x, lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int b = (int)threadIdx.x * per, end = b + per < L ? b + per : L;
  int32_t run = 0;
  for (int i = b; i < end; i++) run += rows[i];
  const int32_t incl = warp_inclusive_sum(run, lane);
  if (lane == 31) warp_sum[warp] = incl;
  __syncthreads();
  int32_t at = incl - run;
  for (int j = 0; j < warp; j++) at += warp_sum[j];
  for (int i = b; i < end; i++) {
    const int32_t r = rows[i];
    rows[i] = at;
    at += r;
  }
  if (threadIdx.x == blockDim.x - 1) rows[L] = at; /* the last thread's prefix past its run: the total */
  __syncthreads();
}

/* One block, shared memory: ok[W] and the offsets' [L + 1] rows. Threads stride over ranks for the waits and the
 * counters (a thread per rank) and over (rank, word) for the copies, so no thread walks L words alone (a load
 * then a store per word through pointers the compiler cannot prove apart: each waits for the last). Then the
 * offsets: each expert's rows summed over sources by a thread each, prefix-summed by the block in shared memory. */
__device__ __forceinline__ void exchange_phase(const ht_params &P, char *smem) {
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
  exclusive_scan(rows, L);
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

/* A layout whose barrier failed (reported): its exchange did not run; mark the handle unwritten and advance the
 * layout number, as a failed exchange does. */
__device__ __forceinline__ void layout_failed(const ht_params &P) { exchange_failed(P, P.local->layouts + 1); }

__global__ void __launch_bounds__(HT_LTHREADS) sy_ht_layout(const __grid_constant__ ht_params P) {
  extern __shared__ __align__(16) char smem[];
  pdl_wait(); /* the previous kernel (a combine reading this handle, say) has ended */
  const uint32_t G = gridDim.x, x = G - 1, work = G > 1 ? G - 1 : 1; /* x: the exchange's block */
  zero_phase(P);
  bool ok = layout_sync(P, G);
  if (ok) {
    count_phase(P, (int32_t *)smem);
    ok = layout_sync(P, 2 * (uint64_t)G);
  }
  if (!ok) {
    if (blockIdx.x == x) layout_failed(P);
  } else if (G > 1 && blockIdx.x == x) {
    exchange_phase(P, smem);
  } else {
    prefix_phase(P, (int)work);
    ok = layout_sync(P, 2 * (uint64_t)G + work);
    if (ok) pos_phase(P, (int)work);
    if (G == 1 && !ok) layout_failed(P);
    else if (G == 1) {
      __syncthreads();
      exchange_phase(P, smem);
    }
  }
  pdl_trigger();
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (!ok) P.local->lfail = 1u; /* before this block's release below */
  if (atom_add_acq_rel_gpu(&P.local->ldone, 1u) != G - 1) return;
  /* the last block: every block is past its barriers, and x's header (stored before its release) is seen here */
  if (P.local->lfail) {
    ((sy_moe_ht_handle_header_t *)P.handle)->magic = 0; /* a block skipped prefix or pos */
    P.local->lfail = 0;
  }
  P.local->lbar = 0;
  P.local->ldone = 0;
}
