/*
 * work_queue.cuh — how the blocks of a kernel share out its pieces (the all-to-all's and the attention dispatch's:
 * a piece is a range of one (sender, receiver) pair's bytes with its own signal, ref/pieces.h). Two orders, a
 * kernel instance each so that neither carries the other's code:
 *   static    block b takes pieces b, b + grid, ... in bit-reversed order (piece_order): any contiguous range of
 *             its pieces — a pair's — is visited in proportion to its length, so a block's pieces of every pair
 *             are spread over its time and the self copy runs beside the link's pieces, not after them;
 *   tickets   (more pieces than blocks) blocks draw tickets k = 0, 1, ... from one counter in device memory and
 *             take piece k x stride mod pieces (stride coprime to the count, near 0.618 of it: sy__piece_stride),
 *             so no block is left with the last ones. Thread 0 draws the next ticket while the block copies.
 * A kernel walks its pieces as
 *   piece_queue<TICKETS> q = piece_queue_begin<TICKETS>(pieces, stride, counter);
 *   for_each_piece(q, ticket_s, [&](uint32_t piece) { ... });   // every thread of the block
 * and the block that ends the call last sets the counter back to 0 (piece_queue_reset).
 */
#ifndef SY_EXEC_WORK_QUEUE_CUH
#define SY_EXEC_WORK_QUEUE_CUH

#include <stdint.h>

namespace sy {

/* The static order: the pieces of block b are b + grid x k for k < piece_count_of_block; round r visits the
 * k = bit reversal of r over the next power of two above that count (piece_rounds rounds; indices >= count are
 * skipped). */
__device__ __forceinline__ uint32_t piece_count_of_block(uint32_t total) {
  return blockIdx.x < total ? (total - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
}

__device__ __forceinline__ uint32_t piece_rounds(uint32_t m) { return m <= 1 ? m : 1u << (32 - __clz(m - 1)); }

__device__ __forceinline__ uint32_t piece_order(uint32_t r, uint32_t m) {
  if (m <= 1) return r;
  const int lg = 32 - __clz(m - 1);
  return __brev(r) >> (32 - lg);
}

template <bool TICKETS>
struct piece_queue {
  uint32_t total;    /* the kernel's pieces */
  uint32_t mine;     /* static: this block's */
  uint32_t rounds;   /* static: rounds of the bit-reversed walk */
  uint32_t stride;   /* tickets: sy__piece_stride(total) */
  unsigned *counter; /* tickets: the call's ticket counter (device memory, 0 at the call's start) */
  uint32_t ahead;    /* tickets, thread 0: the ticket drawn while the last piece copied */
};

template <bool TICKETS>
__device__ __forceinline__ piece_queue<TICKETS> piece_queue_begin(uint32_t total, uint32_t stride, unsigned *counter) {
  piece_queue<TICKETS> q;
  q.total = total;
  q.mine = piece_count_of_block(total);
  q.rounds = piece_rounds(q.mine);
  q.stride = stride;
  q.counter = counter;
  q.ahead = 0;
  if (TICKETS && threadIdx.x == 0) q.ahead = atomicAdd(counter, 1u);
  return q;
}

/* Calls body(piece) for each of this block's pieces, in the queue's order; every thread of the block calls it
 * (the body too: it may bar.sync). ticket_s: two words of shared memory; the ticket of round r goes through word
 * r & 1, so a round that passes no bar.sync after every thread read its word (a body that returns early) cannot
 * have it overwritten by the next. The loop is the kernel's own, with the body inlined into it. */
template <bool TICKETS, typename Body>
__device__ __forceinline__ void for_each_piece(piece_queue<TICKETS> &q, uint32_t *ticket_s, Body &&body) {
  for (uint32_t r = 0;; r++) {
    uint32_t piece;
    if (!TICKETS) {
      if (r >= q.rounds) break;
      const uint32_t kth = piece_order(r, q.mine);
      if (kth >= q.mine) continue;
      piece = blockIdx.x + kth * gridDim.x;
    } else {
      if (threadIdx.x == 0) ticket_s[r & 1] = q.ahead;
      __syncthreads();
      const uint32_t k = ticket_s[r & 1];
      if (k >= q.total) break;
      if (threadIdx.x == 0) q.ahead = atomicAdd(q.counter, 1u);
      piece = (uint32_t)((uint64_t)k * q.stride % q.total);
    }
    body(piece);
  }
}

/* The block that ends the call last (after an acquire-release count of the blocks): the next call starts from
 * ticket 0. */
template <bool TICKETS>
__device__ __forceinline__ void piece_queue_reset(const piece_queue<TICKETS> &q) {
  if (TICKETS) *q.counter = 0;
}

} // namespace sy

#endif
