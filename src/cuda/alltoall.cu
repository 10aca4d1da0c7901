/*
 * alltoall.cu — sy_alltoallv on the GPU: one kernel per call.
 *
 *   block 0:    post mail to every sender p: "entered call n; put your bytes at this offset (from the
 *               control region), this many" — self-validating words, no fence   [receiver half, start]
 *   all blocks: work items = (peer, chunk) over peers in the order rank+1, rank+2, ...; with more items than
 *               blocks and the ticket order (SY_PIECE_ORDER=tickets, or auto on more than one rank) the blocks
 *               draw tickets and take item ticket x stride mod items (a golden-ratio stride, as attention: no
 *               block left with the last ones), else block b takes b, b + grid, ... in bit-reversed order
 *               (item_order: every pair's chunks, the self copy's among them, spread over the block's time);
 *               before its first chunk for a peer: wait (bounded) for that peer's mail (kept per peer in shared
 *               memory), check its byte count against ours; then copy each chunk with direct 16-byte stores
 *               (peer load/store reachable) or one NVSHMEM put-with-signal; each chunk adds 1 to the peer's
 *               a2a_data[rank] after its data                       [sender half]
 *   block 0:    wait (bounded) until a2a_data[s] reaches s's chunk count, reset it to 0  [receiver half, end]
 *   last block: advance the call number kept on the device.
 * A pair's chunk count is a function of its byte count, the world size and SY_A2A_CHUNK only (sy__piece_count
 * in ref/pieces.h), so sender and receiver agree on it without talking. A sender whose byte count disagrees
 * with the receiver's sends a mismatch flag instead of data; both sides then report SY_ERR_MISMATCH.
 */
#include <nvshmem.h>
#include <nvshmemx.h>

#include "ref/pieces.h"
#include "cuda/device.cuh"

namespace sy {

constexpr int A2A_THREADS = 512;
constexpr uint32_t A2A_MAX_CHUNKS = 1024;          /* per (sender, receiver) pair and call */
constexpr uint64_t A2A_MISMATCH_FLAG = 1ull << 62; /* added to a2a_data instead of chunks */

template <int MAXW>
struct a2a_params {
  dev_ctx ctx;
  const char *send;
  char *recv;
  uint64_t min_chunk;
  uint32_t stride; /* the ticket order's (DYNAMIC): sy__piece_stride(items) */
  uint64_t send_bytes[MAXW], send_offsets[MAXW], recv_bytes[MAXW], recv_offsets[MAXW];
};

__host__ __device__ inline uint32_t a2a_chunk_count(uint64_t bytes, int world_size, uint64_t max_chunk) {
  return sy__piece_count(bytes, (uint32_t)world_size, max_chunk, A2A_MAX_CHUNKS);
}

__device__ inline void a2a_chunk_range(uint64_t bytes, uint32_t count, uint32_t j, uint64_t *lo, uint64_t *hi) {
  uint64_t len = ((bytes + count - 1) / count + 15) & ~(uint64_t)15;
  uint64_t a = (uint64_t)j * len, b = a + len;
  *lo = a < bytes ? a : bytes;
  *hi = b < bytes ? b : bytes;
}

/* DYNAMIC: the ticket order (more items than blocks), else the static bit-reversed order. TRACE: the instance with
 * the trace points (SY_TRACE_FILE). A kernel instance each, so that no branch jumps over the other's code. */
template <int MAXW, bool DYNAMIC, bool TRACE>
__global__ void __launch_bounds__(A2A_THREADS) alltoallv_kernel(const __grid_constant__ a2a_params<MAXW> P) {
  const dev_ctx &ctx = P.ctx;
  const int W = ctx.world_size, me = ctx.rank;
  uint64_t *data = (uint64_t *)(ctx.ctrl + ctx.layout.a2a_data);

  __shared__ uint64_t call_s;
  __shared__ uint32_t prefix_s[MAXW + 1]; /* chunk prefix over the shifted peer order k -> (me + 1 + k) % W */
  /* per peer, once the block has its mail: its offset, state (1 send, 0 skip: failed wait, -1 mismatch, -2 not
   * yet waited for) and control region if load/store reachable */
  __shared__ int64_t delta_s[MAXW];
  __shared__ int state_s[MAXW];
  __shared__ char *peer_base_s[MAXW];

  for (int k = threadIdx.x; k < W; k += blockDim.x)
    prefix_s[k + 1] = a2a_chunk_count(P.send_bytes[(me + 1 + k) % W], W, P.min_chunk);
  for (int p = threadIdx.x; p < W; p += blockDim.x) state_s[p] = -2;
  if (threadIdx.x == 0) call_s = ld_relaxed_gpu(&ctx.state->a2a_calls) + 1;
  __syncthreads();
  if (threadIdx.x == 0) {
    prefix_s[0] = 0;
    for (int k = 0; k < W; k++) prefix_s[k + 1] += prefix_s[k];
  }
  __syncthreads();
  const uint64_t call = call_s;
  if (threadIdx.x == 0) trace<TRACE>(ctx, OP_A2A_DATA, PH_KERNEL, true, -1, call);

  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_A2A_READY, PH_POST_READY, true, -1, call);
    for (int p = threadIdx.x; p < W; p += blockDim.x)
      post_mail(ctx, (a2a_mail *)(ctx.ctrl + ctx.layout.a2a_mail), p, call,
                (uint64_t)((P.recv + P.recv_offsets[p]) - ctx.ctrl), P.recv_bytes[p]);
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_A2A_READY, PH_POST_READY, false, -1, call);
  }

  const uint32_t total = prefix_s[W], mine = block_item_count(total), rounds = item_rounds(mine);
  /* DYNAMIC: thread 0 draws the next ticket while the block copies; ticket_s alternates by round, as some rounds
   * pass no bar.sync after every thread read it (a skipped peer) */
  __shared__ uint32_t ticket_s[2];
  uint32_t ahead = 0;
  if (DYNAMIC && threadIdx.x == 0) ahead = atomicAdd(&ctx.state->a2a_tickets, 1u);
  for (uint32_t r = 0;; r++) {
    uint32_t item;
    if (!DYNAMIC) {
      if (r >= rounds) break;
      const uint32_t kth = item_order(r, mine);
      if (kth >= mine) continue;
      item = blockIdx.x + kth * gridDim.x;
    } else {
      if (threadIdx.x == 0) ticket_s[r & 1] = ahead;
      __syncthreads();
      const uint32_t k = ticket_s[r & 1];
      if (k >= total) break;
      if (threadIdx.x == 0) ahead = atomicAdd(&ctx.state->a2a_tickets, 1u);
      item = (uint32_t)((uint64_t)k * P.stride % total);
    }
    int lo_k = 0, hi_k = W - 1; /* the k with prefix_s[k] <= item < prefix_s[k + 1] */
    while (lo_k < hi_k) {
      int mid = (lo_k + hi_k + 1) / 2;
      if (prefix_s[mid] <= item) lo_k = mid;
      else hi_k = mid - 1;
    }
    const int p = (me + 1 + lo_k) % W;
    const uint32_t j = item - prefix_s[lo_k], count = prefix_s[lo_k + 1] - prefix_s[lo_k];
    uint64_t lo, hi;
    a2a_chunk_range(P.send_bytes[p], count, j, &lo, &hi);
    const char *src = P.send + P.send_offsets[p] + lo;
    if (state_s[p] == -2) { /* the block's first chunk for p (every thread reads -2 before thread 0 writes) */
      if (hi > lo) prefetch_l2_block(src, hi - lo); /* the chunk's source, into L2 while the mail travels */
      __syncthreads();
      if (threadIdx.x == 0) {
        trace<TRACE>(ctx, OP_A2A_READY, PH_WAIT_READY, true, p, call);
        uint64_t delta = 0, bytes = 0;
        int s = wait_mail(ctx, (const a2a_mail *)(ctx.ctrl + ctx.layout.a2a_mail), p, call, OP_A2A_READY, &delta,
                          &bytes) ? 1 : 0;
        trace<TRACE>(ctx, OP_A2A_READY, PH_WAIT_READY, false, p, call);
        if (s) {
          delta_s[p] = (int64_t)delta;
          if (bytes != P.send_bytes[p]) { /* reported by chunk 0's block, below; delta_s keeps p's count */
            s = -1;
            delta_s[p] = (int64_t)bytes;
          }
        }
        peer_base_s[p] = peer_ctrl(ctx, ctx.ctrl, p);
        state_s[p] = s;
      }
      __syncthreads();
    }
    const int state = state_s[p];
    char *peer_base = peer_base_s[p];
    uint64_t *peer_count = data + me; /* symmetric address of our counter at p */
    if (state == 0) continue;
    if (state < 0) { /* only chunk 0's block reports it and tells the receiver, once */
      if (j == 0 && threadIdx.x == 0) {
        report_error(ctx, SY_ERR_MISMATCH, OP_A2A_MISMATCH, p, call, P.send_bytes[p], (uint64_t)delta_s[p]);
        /* the flag carries our byte count, so the receiver can say what we meant to send */
        const uint64_t flag = A2A_MISMATCH_FLAG + P.send_bytes[p];
        if (peer_base) red_add_release((uint64_t *)(peer_base + ((char *)peer_count - ctx.ctrl)), flag, p != me);
        else signal_add_cold(peer_count, flag, p, false);
      }
      continue;
    }
    const int64_t dst_off = delta_s[p] + (int64_t)lo; /* from the control region, valid on every rank */
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_A2A_DATA, PH_COPY, true, p, call);
    if (peer_base) {
      copy_block(peer_base + dst_off, src, hi - lo);
      /* One release for the block: bar.sync orders every thread's stores before thread 0's red.release (system
       * scope; GPU scope to this rank itself), and release is cumulative, so the receiver's acquire of the count
       * sees the whole chunk. */
      __syncthreads();
      if (threadIdx.x == 0) red_add_release((uint64_t *)(peer_base + ((char *)peer_count - ctx.ctrl)), 1, p != me);
    } else if (hi > lo) {
      put_signal_nbi_block_cold(ctx.ctrl + dst_off, src, hi - lo, peer_count, 1, p);
    } else if (threadIdx.x == 0) {
      signal_add_cold(peer_count, 1, p, false);
    }
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_A2A_DATA, PH_COPY, false, p, call);
  }

  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_A2A_DATA, PH_WAIT_DATA, true, -1, call);
    for (int s = threadIdx.x; s < W; s += blockDim.x) {
      const uint64_t expect = a2a_chunk_count(P.recv_bytes[s], W, P.min_chunk);
      if (!wait_geq(ctx, data + s, expect, OP_A2A_DATA, s, call)) continue;
      const uint64_t seen = ld_acquire_sys(data + s);
      if (seen >= A2A_MISMATCH_FLAG)
        report_error(ctx, SY_ERR_MISMATCH, OP_A2A_MISMATCH, s, call, P.recv_bytes[s], seen - A2A_MISMATCH_FLAG);
      else if (seen != expect)
        report_error(ctx, SY_ERR_MISMATCH, OP_A2A_DATA, s, call, expect, seen);
      data[s] = 0; /* safe: s writes call n+1 only after our mail for n+1, posted after this kernel ends */
    }
    __syncthreads();
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_A2A_DATA, PH_WAIT_DATA, false, -1, call);
  }

  __syncthreads();
  if (threadIdx.x == 0) { /* the last block advances the call number (read after the kernel boundary) */
    trace<TRACE>(ctx, OP_A2A_DATA, PH_KERNEL, false, -1, call);
    if (atom_add_acq_rel_gpu(&ctx.state->a2a_blocks_done, 1u) == gridDim.x - 1) {
      ctx.state->a2a_blocks_done = 0;
      if (DYNAMIC) ctx.state->a2a_tickets = 0;
      ctx.state->a2a_calls = call;
    }
  }
}

template <int MAXW>
static sy_status_t launch(cuda_state *st, const sy_a2a_args_t *args, cudaStream_t stream) {
  a2a_params<MAXW> P;
  const int W = st->ctx.world_size;
  P.ctx = st->ctx;
  P.send = (const char *)args->send;
  P.recv = (char *)args->recv;
  P.min_chunk = st->a2a_chunk;
  uint64_t items = 0;
  for (int p = 0; p < W; p++) {
    P.send_bytes[p] = args->send_bytes[p];
    P.send_offsets[p] = args->send_offsets[p];
    P.recv_bytes[p] = args->recv_bytes[p];
    P.recv_offsets[p] = args->recv_offsets[p];
    items += a2a_chunk_count(P.send_bytes[p], W, P.min_chunk);
  }
  unsigned grid = items < (uint64_t)st->a2a_blocks ? (unsigned)items : (unsigned)st->a2a_blocks;
  /* auto: the ticket order where a link is crossed (2 x H200: 3-7% faster from 16 to 128 MiB per rank), the static
   * one at world 1 (there the tickets measured slower from 16 to 64 MiB; bench/NOTES.md) */
  const bool tickets = st->piece_order == PIECE_ORDER_TICKETS || (st->piece_order == PIECE_ORDER_AUTO && W > 1);
  const bool dynamic = tickets && items > grid && items < (1ull << 31);
  P.stride = dynamic ? sy__piece_stride((uint32_t)items) : 1;
  void (*const kernels[2][2])(a2a_params<MAXW>) = {
      {alltoallv_kernel<MAXW, false, false>, alltoallv_kernel<MAXW, false, true>},
      {alltoallv_kernel<MAXW, true, false>, alltoallv_kernel<MAXW, true, true>}};
  kernels[dynamic][st->ctx.trace != nullptr]<<<grid, A2A_THREADS, 0, stream>>>(P);
  SY_CUDA_CHECK(cudaGetLastError());
  return SY_SUCCESS;
}

sy_status_t launch_alltoallv(cuda_state *st, const sy_a2a_args_t *args, cudaStream_t stream) {
  const int W = st->ctx.world_size;
  if (W <= 8) return launch<8>(st, args, stream);
  if (W <= 64) return launch<64>(st, args, stream);
  if (W <= 256) return launch<256>(st, args, stream);
  SY_WARN("sy_alltoallv: the cuda backend supports up to 256 ranks, this communicator has %d", W);
  return SY_ERR_UNSUPPORTED;
}

}  // namespace sy
