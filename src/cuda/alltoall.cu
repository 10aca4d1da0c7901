/*
 * alltoall.cu — sy_alltoallv on the GPU: one kernel per call. A piece is a range of one (sender, receiver) pair's
 * bytes with its own signal; a pair's piece count depends only on its bytes, the world size and SY_A2A_CHUNK
 * (sy__piece_count, ref/pieces.h), so sender and receiver agree on it without talking.
 *   block 0       posts mail to every sender p: "entered call n; put your bytes at this offset (from the control
 *                 region), this many" — self-validating words, no fence                  [receiver half, start]
 *   all blocks    take the pieces, pair after pair over peers rank + 1, rank + 2, ... (exec/work_queue.cuh: the
 *                 static bit-reversed order, or tickets with SY_PIECE_ORDER=tickets or auto on more than one
 *                 rank); before a block's first piece for a peer, wait (bounded) for that peer's mail (kept per
 *                 peer in shared memory) and check its byte count against ours; then copy the piece with direct
 *                 16-byte stores (peer load/store reachable) or one NVSHMEM put-with-signal, and add 1 to the
 *                 peer's a2a_data[rank] after the data                                   [sender half]
 *   block 0       waits (bounded) until a2a_data[s] reaches s's piece count, resets it to 0 [receiver half, end]
 *   last block    advances the call number kept on the device.
 * A sender whose byte count disagrees with the receiver's sends a mismatch flag instead of data; both sides then
 * report SY_ERR_MISMATCH.
 */
#include <nvshmem.h>
#include <nvshmemx.h>

#include "cuda/device.cuh"
#include "exec/work_queue.cuh"
#include "ref/pieces.h"

namespace sy {

constexpr int A2A_THREADS = 512;
constexpr uint32_t A2A_MAX_PIECES = 1024;          /* per (sender, receiver) pair and call */
constexpr uint64_t A2A_MISMATCH_FLAG = 1ull << 62; /* added to a2a_data instead of pieces */

template <int MAXW>
struct a2a_params {
  dev_ctx ctx;
  const char *send;
  char *recv;
  uint64_t max_piece; /* SY_A2A_CHUNK: the largest piece */
  uint32_t stride;    /* the ticket order's (TICKETS): sy__piece_stride(pieces) */
  uint64_t send_bytes[MAXW], send_offsets[MAXW], recv_bytes[MAXW], recv_offsets[MAXW];
};

__host__ __device__ inline uint32_t a2a_piece_count(uint64_t bytes, int world_size, uint64_t max_piece) {
  return sy__piece_count(bytes, (uint32_t)world_size, max_piece, A2A_MAX_PIECES);
}

/* TICKETS: the ticket order (more pieces than blocks), else the static bit-reversed order. TRACE: the instance with
 * the trace points (SY_TRACE_FILE). A kernel instance each, so that no branch jumps over the other's code. */
template <int MAXW, bool TICKETS, bool TRACE>
__global__ void __launch_bounds__(A2A_THREADS) alltoallv_kernel(const __grid_constant__ a2a_params<MAXW> P) {
  pdl_begin();
  const dev_ctx &ctx = P.ctx;
  const int W = ctx.world_size, me = ctx.rank;
  uint64_t *data = (uint64_t *)(ctx.ctrl + ctx.layout.a2a_data);

  __shared__ uint64_t call_s;
  __shared__ uint32_t prefix_s[MAXW + 1]; /* piece prefix over the shifted peer order k -> (me + 1 + k) % W */
  /* per peer, once the block has its mail: its offset, state (1 send, 0 skip: failed wait, -1 mismatch, -2 not
   * yet waited for) and control region if load/store reachable */
  __shared__ int64_t delta_s[MAXW];
  __shared__ int state_s[MAXW];
  __shared__ char *peer_base_s[MAXW];

  for (int k = threadIdx.x; k < W; k += blockDim.x)
    prefix_s[k + 1] = a2a_piece_count(P.send_bytes[(me + 1 + k) % W], W, P.max_piece);
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

  __shared__ uint32_t ticket_s[2];
  piece_queue<TICKETS> queue = piece_queue_begin<TICKETS>(prefix_s[W], P.stride, &ctx.state->a2a_queue);
  for_each_piece(queue, ticket_s, [&](uint32_t piece) {
    int lo_k = 0, hi_k = W - 1; /* the k with prefix_s[k] <= piece < prefix_s[k + 1] */
    while (lo_k < hi_k) {
      int mid = (lo_k + hi_k + 1) / 2;
      if (prefix_s[mid] <= piece) lo_k = mid;
      else hi_k = mid - 1;
    }
    const int p = (me + 1 + lo_k) % W;
    const uint32_t j = piece - prefix_s[lo_k], count = prefix_s[lo_k + 1] - prefix_s[lo_k];
    uint64_t lo, hi;
    sy__piece_range(P.send_bytes[p], count, j, &lo, &hi);
    const char *src = P.send + P.send_offsets[p] + lo;
    if (state_s[p] == -2) { /* the block's first piece for p (every thread reads -2 before thread 0 writes) */
      if (hi > lo) prefetch_l2_block(src, hi - lo); /* the piece's source, into L2 while the mail travels */
      __syncthreads();
      if (threadIdx.x == 0) {
        trace<TRACE>(ctx, OP_A2A_READY, PH_WAIT_READY, true, p, call);
        uint64_t delta = 0, bytes = 0;
        int s =
            wait_mail(ctx, (const a2a_mail *)(ctx.ctrl + ctx.layout.a2a_mail), p, call, OP_A2A_READY, &delta, &bytes)
                ? 1
                : 0;
        trace<TRACE>(ctx, OP_A2A_READY, PH_WAIT_READY, false, p, call);
        if (s) {
          delta_s[p] = (int64_t)delta;
          if (bytes != P.send_bytes[p]) { /* reported by piece 0's block, below; delta_s keeps p's count */
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
    if (state == 0) return;
    if (state < 0) { /* only piece 0's block reports it and tells the receiver, once */
      if (j == 0 && threadIdx.x == 0) {
        report_error(ctx, SY_ERR_MISMATCH, OP_A2A_MISMATCH, p, call, P.send_bytes[p], (uint64_t)delta_s[p]);
        /* the flag carries our byte count, so the receiver can say what we meant to send */
        const uint64_t flag = A2A_MISMATCH_FLAG + P.send_bytes[p];
        if (peer_base) red_add_release((uint64_t *)(peer_base + ((char *)peer_count - ctx.ctrl)), flag, p != me);
        else signal_add_cold(peer_count, flag, p, false);
      }
      return;
    }
    const int64_t dst_off = delta_s[p] + (int64_t)lo; /* from the control region, valid on every rank */
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_A2A_DATA, PH_COPY, true, p, call);
    if (peer_base) {
      copy_block(peer_base + dst_off, src, hi - lo);
      /* One release for the block: bar.sync orders every thread's stores before thread 0's red.release (system
       * scope; GPU scope to this rank itself), and release is cumulative, so the receiver's acquire of the count
       * sees the whole piece. */
      __syncthreads();
      if (threadIdx.x == 0) red_add_release((uint64_t *)(peer_base + ((char *)peer_count - ctx.ctrl)), 1, p != me);
    } else if (hi > lo) {
      put_signal_nbi_block_cold(ctx.ctrl + dst_off, src, hi - lo, peer_count, 1, p);
    } else if (threadIdx.x == 0) {
      signal_add_cold(peer_count, 1, p, false);
    }
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_A2A_DATA, PH_COPY, false, p, call);
  });

  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_A2A_DATA, PH_WAIT_DATA, true, -1, call);
    for (int s = threadIdx.x; s < W; s += blockDim.x) {
      const uint64_t expect = a2a_piece_count(P.recv_bytes[s], W, P.max_piece);
      if (!wait_geq(ctx, data + s, expect, OP_A2A_DATA, s, call)) continue;
      const uint64_t seen = ld_acquire_sys(data + s);
      if (seen >= A2A_MISMATCH_FLAG)
        report_error(ctx, SY_ERR_MISMATCH, OP_A2A_MISMATCH, s, call, P.recv_bytes[s], seen - A2A_MISMATCH_FLAG);
      else if (seen != expect) report_error(ctx, SY_ERR_MISMATCH, OP_A2A_DATA, s, call, expect, seen);
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
      piece_queue_close(queue);
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
  P.max_piece = st->max_piece;
  for (int p = 0; p < W; p++) {
    P.send_bytes[p] = args->send_bytes[p];
    P.send_offsets[p] = args->send_offsets[p];
    P.recv_bytes[p] = args->recv_bytes[p];
    P.recv_offsets[p] = args->recv_offsets[p];
  }
  /* SY_A2A_CE, world 1: the bytes by a copy engine, before the kernel on the same stream; the kernel then sees an
   * empty pair (still signalled, as every pair is). Byte counts that disagree stay with the kernel, which reports
   * them. At more ranks the self pair stays in the kernel, where it overlaps the links' traffic (a copy on a forked
   * stream would keep that: not built). */
  const int me = st->ctx.rank;
  const uint64_t self = args->send_bytes[me];
  if (W == 1 && st->a2a_ce_min && self >= st->a2a_ce_min && self == args->recv_bytes[me]) {
    SY_CUDA_CHECK(cudaMemcpyAsync((char *)args->recv + args->recv_offsets[me],
                                  (const char *)args->send + args->send_offsets[me], self, cudaMemcpyDeviceToDevice,
                                  stream));
    P.send_bytes[me] = P.recv_bytes[me] = 0;
  }
  uint64_t pieces = 0;
  for (int p = 0; p < W; p++) pieces += a2a_piece_count(P.send_bytes[p], W, P.max_piece);
  unsigned grid = pieces < (uint64_t)st->a2a_blocks ? (unsigned)pieces : (unsigned)st->a2a_blocks;
  /* auto: the ticket order where a link is crossed, the static one at world 1 (bench/NOTES.md, "pieces by ticket") */
  const bool tickets = st->piece_order == PIECE_ORDER_TICKETS || (st->piece_order == PIECE_ORDER_AUTO && W > 1);
  const bool dynamic = tickets && pieces > grid && pieces < (1ull << 31);
  P.stride = dynamic ? sy__piece_stride((uint32_t)pieces) : 1;
  void (*const kernels[2][2])(a2a_params<MAXW>) = {
      {alltoallv_kernel<MAXW, false, false>, alltoallv_kernel<MAXW, false, true>},
      {alltoallv_kernel<MAXW, true, false>, alltoallv_kernel<MAXW, true, true>}};
  return launch_pdl(kernels[dynamic][st->ctx.trace != nullptr], (int)grid, A2A_THREADS, 0, stream, P);
}

sy_status_t launch_alltoallv(cuda_state *st, const sy_a2a_args_t *args, cudaStream_t stream) {
  const int W = st->ctx.world_size;
  if (W <= 8) return launch<8>(st, args, stream);
  if (W <= 64) return launch<64>(st, args, stream);
  if (W <= 256) return launch<256>(st, args, stream);
  SY_WARN("sy_alltoallv: the cuda backend supports up to 256 ranks, this communicator has %d", W);
  return SY_ERR_UNSUPPORTED;
}

} // namespace sy
