/*
 * work_queue.cuh — the one device work queue: how the blocks of a kernel share out work that no block owns.
 *
 * ticket_queue: a grow-only ticket counter in device memory, zeroed once when its object is made and never reset
 * (DESIGN.md: counters instead of resets). `next` counts every ticket ever drawn; `base` is the first ticket of
 * the running call. A block reads the base when it starts (ticket_queue_base, after the kernel's
 * griddepcontrol.wait), draws call-relative tickets k = 0, 1, ... (ticket_draw; a k past the call's work means
 * none is left), and the block that ends the call last (each kernel counts its blocks out already) closes the call
 * (ticket_queue_close: base = next). So a call starts at ticket 0 without a reset kernel or a memset, and no
 * ticket of one call is ever read as the next call's. Its users:
 *   - the all-to-all's and the attention dispatch's pieces (a piece is a range of one (sender, receiver) pair's
 *     bytes with its own signal, ref/pieces.h), through piece_queue below;
 *   - the high-throughput MoE dispatch's own-token rows (cuda/moe_ht/dispatch.cu: own_chunk, own_drain), token k =
 *     ticket k, drawn by warps.
 *
 * piece_queue: two orders of a kernel's pieces, a kernel instance each so that neither carries the other's code:
 *   static    block b takes pieces b, b + grid, ... in bit-reversed order (piece_order): any contiguous range of
 *             its pieces — a pair's — is visited in proportion to its length, so a block's pieces of every pair
 *             are spread over its time and the self copy runs beside the link's pieces, not after them;
 *   tickets   (more pieces than blocks) blocks draw tickets from a ticket_queue and take piece k x stride mod
 *             pieces (stride coprime to the count, near 0.618 of it: sy__piece_stride), so no block is left with
 *             the last ones. Thread 0 draws the next ticket while the block copies.
 * A kernel walks its pieces as
 *   piece_queue<TICKETS> q = piece_queue_begin<TICKETS>(pieces, stride, &queue);
 *   for_each_piece(q, ticket_s, [&](uint32_t piece) { ... });   // every thread of the block
 * and the block that ends the call last calls piece_queue_close(q).
 */
#ifndef SY_EXEC_WORK_QUEUE_CUH
#define SY_EXEC_WORK_QUEUE_CUH

#include <stdint.h>

namespace sy {

struct ticket_queue {
  unsigned long long next; /* tickets drawn, every call's */
  unsigned long long base; /* the running call's first ticket */
};

/* Thread 0 of each block, once, when the block starts (after griddepcontrol.wait: the last call's close is then
 * visible). */
__device__ __forceinline__ uint64_t ticket_queue_base(const ticket_queue *q) {
  return *(volatile const unsigned long long *)&q->base;
}

/* The next call-relative ticket (one atomic). */
__device__ __forceinline__ uint64_t ticket_draw(ticket_queue *q, uint64_t base) {
  return atomicAdd(&q->next, 1ull) - base;
}

/* The block that ends the call last, once every block has stopped drawing: the next call's tickets start here. */
__device__ __forceinline__ void ticket_queue_close(ticket_queue *q) { q->base = atomicAdd(&q->next, 0ull); }

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
  uint32_t total;      /* the kernel's pieces */
  uint32_t mine;       /* static: this block's */
  uint32_t rounds;     /* static: rounds of the bit-reversed walk */
  uint32_t stride;     /* tickets: sy__piece_stride(total) */
  ticket_queue *queue; /* tickets: the kernel's queue */
  uint64_t base;       /* tickets, thread 0: the call's first ticket */
  uint32_t ahead;      /* tickets, thread 0: the ticket drawn while the last piece copied */
};

template <bool TICKETS>
__device__ __forceinline__ piece_queue<TICKETS> piece_queue_begin(uint32_t total, uint32_t stride,
                                                                  ticket_queue *queue) {
  piece_queue<TICKETS> q;
  q.total = total;
  q.mine = piece_count_of_block(total);
  q.rounds = piece_rounds(q.mine);
  q.stride = stride;
  q.queue = queue;
  q.base = 0;
  q.ahead = 0;
  if (TICKETS && threadIdx.x == 0) {
    q.base = ticket_queue_base(queue);
    q.ahead = (uint32_t)ticket_draw(queue, q.base);
  }
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
      if (threadIdx.x == 0) q.ahead = (uint32_t)ticket_draw(q.queue, q.base);
      piece = (uint32_t)((uint64_t)k * q.stride % q.total);
    }
    body(piece);
  }
}

/* The block that ends the call last (after an acquire-release count of the blocks): the next call's tickets
 * start after this call's. */
template <bool TICKETS>
__device__ __forceinline__ void piece_queue_close(const piece_queue<TICKETS> &q) {
  if (TICKETS) ticket_queue_close(q.queue);
}

} // namespace sy

#endif
