/*
 * attn.cu — attention dispatch on the GPU: one kernel per call moves rows by a plan's send lists (plan/attn_plan.h),
 * for one channel (Q forward, Q reverse, KV backward) or two (Q+KV forward), and for the KV backward then reduces
 * the replicas that landed in the object's staging into the caller's gradient. A piece is a range of one (sender,
 * receiver, channel)'s bytes with its own signal (ref/pieces.h: a function of the bytes, the world size, the
 * channel count and SY_A2A_CHUNK, so both sides agree without talking).
 *   block 0       posts mail to every sender p: "entered call n; channel 0's rows go at this offset (from the
 *                 communicator's control region), channel 1's at that one; my call's fingerprint is f"
 *                                                                                          [receiver half, start]
 *   all blocks    take the pieces, (peer, channel) after (peer, channel) over peers rank + 1, rank + 2, ...
 *                 (exec/work_queue.cuh: tickets where there are more pieces than blocks, unless SY_PIECE_ORDER is
 *                 static; else the static bit-reversed order); before a block's first piece for a peer, wait
 *                 (bounded) for that peer's mail (kept per peer in shared memory) and compare its fingerprint with
 *                 ours; per piece, walk the pair's segments (ascending destination rows) and copy — large copies
 *                 with the whole block, small ones one warp each — with direct stores (peer load/store reachable)
 *                 or NVSHMEM puts; then one counter update at the receiver
 *   receiver      waits (bounded) until each source's counter reaches its expected total (block 0; for the KV
 *                 backward every block, which then sums its share of the tokens)
 *   last block    advances the call number and the expected counter bases (counters only grow: no reset).
 * The call's fingerprint is the plan's (a hash of its description, plan/attn_plan.h) mixed with the call's shape
 * (channels, directions, row sizes). A sender whose receiver mailed another one sends that pair no rows: it
 * reports SY_ERR_MISMATCH, and the block holding the pair's first piece adds ATTN_MISMATCH_FLAG to the receiver's
 * counter, once, in place of all the pair's pieces (the other pieces add nothing), so the receiver's wait ends and
 * it reports too (and skips the KV backward's reduce). Plans that agree on every pair's counts but not on where the
 * rows are would otherwise write past the receiver's rows or read past ours.
 * Counters after a flagged pair: the counter grew by exactly ATTN_MISMATCH_FLAG, whatever either plan says the
 * pair's pieces are (plans that differ may differ in those counts too), and the receiver's last block advances
 * that source's base by the same (block 0 tells it through its arrival, ATTN_DONE_FLAGGED), not by the pieces it
 * expected: so the next call, already enqueued before the host saw the error, expects from every source what it
 * will send, on both ranks.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <stdlib.h>
#include <string.h>

#include "cuda/attn.cuh"
#include "cuda/device.cuh"
#include "exec/launch.cuh"
#include "exec/work_queue.cuh"
#include "plan/attn_plan.h"
#include "ref/pieces.h"

namespace sy {

constexpr int ATTN_THREADS = 512;
constexpr uint32_t ATTN_MAX_PIECES = 1024;
constexpr uint64_t ATTN_SMALL_COPY = 2048; /* copies below this (a segment's part of a piece) are one warp's */
constexpr int ATTN_PARAM_W = 8;   /* up to this world size the per-peer row counts travel as kernel parameters */
constexpr int ATTN_SEG_CAP = 256; /* a pair with up to this many segments has them staged in shared memory */
/* Added once to a receiver's counter in place of a flagged pair's pieces: more than any source's pieces in one call
 * (so the receiver tells it from pieces: its counter reaches base + ATTN_MISMATCH_FLAG exactly), small enough that
 * counters growing by it on every call (a graph replayed after the error) do not wrap within 2^44 calls. */
constexpr uint64_t ATTN_MISMATCH_FLAG = 1ull << 20;
static_assert(ATTN_MISMATCH_FLAG > 2 * (uint64_t)ATTN_MAX_PIECES, "the mismatch flag must exceed a call's pieces");
/* Added by block 0 to blocks_done beside its arrival when a source flagged a mismatch; the last block then
 * advances the bases by what each source added (attn_advance_flagged). Far above any grid. */
constexpr unsigned ATTN_DONE_FLAGGED = 1u << 31;

/* One receiver's mail at a sender: 3 values, 2 self-validating words each (device.cuh): where channel 0's rows
 * go, where channel 1's go (offsets from the control region), the call's fingerprint. */
struct attn_mail {
  uint64_t word[6];
};

/* Device-local state of one attention object. */
struct attn_local {
  uint64_t calls;
  unsigned blocks_done; /* blocks done with this call, plus ATTN_DONE_FLAGGED when a source flagged a mismatch */
  unsigned pad_;
  ticket_queue queue; /* the pieces in the ticket order (exec/work_queue.cuh) */
  uint64_t base[1];   /* [W]: pieces expected from each source before this call */
};

struct attn_gpu {
  char *ctrl; /* symmetric: mail[W] then data[W] */
  attn_mail *mail;
  uint64_t *data;
  attn_local *local;
};

struct attn_chan {
  attn_dir_dev d;
  const char *src;
  char *dst;
  uint64_t row_bytes;
  /* W <= ATTN_PARAM_W: d's send_start, send_rows and recv_rows, copied by the host, so that the kernel's first
   * steps (the piece counts, the piece's pair, its segments) start without a dependent load */
  int64_t send_start[ATTN_PARAM_W + 1], send_rows[ATTN_PARAM_W], recv_rows[ATTN_PARAM_W];
};

enum { REDUCE_NONE = 0, REDUCE_SUM = 1, REDUCE_UNSUMMED = 2 };

struct attn_params {
  dev_ctx ctx;
  attn_mail *mail;
  uint64_t *data;
  attn_local *local;
  int nch;
  attn_chan ch[2];
  uint64_t max_piece;   /* SY_A2A_CHUNK: the largest piece */
  uint64_t fingerprint; /* the call's (call_fingerprint): every pair's two ends must mail the same */
  uint32_t stride;      /* the ticket order's (the kernel instance with TICKETS; exec/work_queue.cuh) */
  /* KV backward post-process */
  int reduce, dtype, num_seqs, C;
  int64_t num_tokens;
  const int64_t *seq_start;
  const int *kv_dst;
  char *grad_out;
};

__host__ __device__ inline uint32_t attn_piece_count(uint64_t bytes, int pairs, uint64_t max_piece) {
  return sy__piece_count(bytes, (uint32_t)pairs, max_piece, ATTN_MAX_PIECES);
}

/* The plan's per-peer figures: from the kernel parameters for the kernel instance of W <= ATTN_PARAM_W. */
template <int MAXW>
__device__ __forceinline__ int64_t send_start_of(const attn_chan &ch, int p) {
  return MAXW <= ATTN_PARAM_W ? ch.send_start[p] : ch.d.send_start[p];
}
template <int MAXW>
__device__ __forceinline__ int64_t send_rows_of(const attn_chan &ch, int p) {
  return MAXW <= ATTN_PARAM_W ? ch.send_rows[p] : ch.d.send_rows[p];
}

template <int MAXW>
__device__ inline uint64_t attn_expected(const attn_params &P, int s) {
  uint64_t e = 0;
  for (int c = 0; c < P.nch; c++) {
    const int64_t rows = MAXW <= ATTN_PARAM_W ? P.ch[c].recv_rows[s] : P.ch[c].d.recv_rows[s];
    e += attn_piece_count((uint64_t)rows * P.ch[c].row_bytes, P.ctx.world_size * P.nch, P.max_piece);
  }
  return e;
}

/* Element access for the reduce. */
__device__ inline float load_elem(const char *row, int64_t e, int dtype) {
  if (dtype == SY_DTYPE_BF16) return __uint_as_float((uint32_t)((const uint16_t *)row)[e] << 16);
  if (dtype == SY_DTYPE_FP16) return __half2float(((const __half *)row)[e]);
  return ((const float *)row)[e];
}

__device__ inline void store_elem(char *row, int64_t e, int dtype, float v) {
  if (dtype == SY_DTYPE_BF16) ((__nv_bfloat16 *)row)[e] = __float2bfloat16_rn(v);
  else if (dtype == SY_DTYPE_FP16) ((__half *)row)[e] = __float2half_rn(v);
  else ((float *)row)[e] = v;
}

/* KV backward: rows of this rank's tokens, one warp per row. Sum: the first present replica's value, then the
 * others added in replica order, in fp32, rounded once (the reference in src/ref does the same). */
static __device__ __noinline__ void attn_reduce(const attn_params &P, const char *staging, uint64_t rb) {
  const int64_t N = P.num_tokens;
  const int C = P.C, esize = P.dtype == SY_DTYPE_FP32 ? 4 : 2;
  const int64_t E = (int64_t)(rb / esize);
  const unsigned lane = threadIdx.x & 31u;
  const int64_t warp = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t t = warp; t < N; t += warps) {
    int lo = 0, hi = P.num_seqs - 1; /* the sequence s with seq_start[s] <= t < seq_start[s + 1] */
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (P.seq_start[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    const int *dst = P.kv_dst + (int64_t)lo * C;
    if (P.reduce == REDUCE_UNSUMMED) {
      for (int c = 0; c < C; c++) {
        char *out = P.grad_out + ((int64_t)c * N + t) * (int64_t)rb;
        if (dst[c] >= 0) {
          copy_warp(out, staging + ((int64_t)c * N + t) * (int64_t)rb, rb);
        } else {
          for (uint64_t b = lane; b < rb; b += 32) out[b] = 0;
        }
      }
      continue;
    }
    char *out = P.grad_out + t * (int64_t)rb;
    for (int64_t e = lane; e < E; e += 32) {
      float acc = 0.0f;
      bool any = false;
      for (int c = 0; c < C; c++) {
        if (dst[c] < 0) continue;
        const float v = load_elem(staging + ((int64_t)c * N + t) * (int64_t)rb, e, P.dtype);
        acc = any ? acc + v : v;
        any = true;
      }
      if (any) store_elem(out, e, P.dtype, acc);
      else if (esize == 2) ((uint16_t *)out)[e] = 0;
      else ((uint32_t *)out)[e] = 0;
    }
  }
}

/* Bytes [lo, hi) of a pair's rows, whose segments (from `first`, ng in all) map its ascending bytes to source and
 * destination rows: large copies by the whole block, small ones one warp each, in turn; direct stores where the
 * peer is load/store reachable (peer_base: its control region), else NVSHMEM puts. dst_base: where the channel's
 * rows go at the peer, from the control region. Every thread of the block calls it. */
__device__ __forceinline__ void copy_segments(const dev_ctx &ctx, const attn_chan &ch, const int64_t *segs,
                                              int64_t first, int64_t ng, uint64_t lo, uint64_t hi, int64_t dst_base,
                                              char *peer_base, int p) {
  const unsigned warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  const uint64_t rb = ch.row_bytes;
  unsigned small = 0;
  for (int64_t g = first; g < ng; g++) {
    const int64_t src_row = segs[4 * g], dst_row = segs[4 * g + 1], rows = segs[4 * g + 2], cum = segs[4 * g + 3];
    const uint64_t seg_lo = (uint64_t)cum * rb, seg_hi = seg_lo + (uint64_t)rows * rb;
    if (seg_lo >= hi) break;
    const uint64_t a = lo > seg_lo ? lo : seg_lo, b = hi < seg_hi ? hi : seg_hi;
    const char *src = ch.src + (uint64_t)src_row * rb + (a - seg_lo);
    const int64_t dst_off = dst_base + (int64_t)((uint64_t)dst_row * rb + (a - seg_lo));
    if (b - a >= ATTN_SMALL_COPY) {
      if (peer_base) copy_block(peer_base + dst_off, src, b - a);
      else put_nbi_block_cold(ctx.ctrl + dst_off, src, b - a, p);
    } else {
      if (small++ % nwarps == warp) {
        if (peer_base) copy_warp(peer_base + dst_off, src, b - a);
        else put_nbi_warp_cold(ctx.ctrl + dst_off, src, b - a, p);
      }
    }
  }
}

/* Sender, thread 0 of the block holding the pair's first piece (channel 0, piece 0; every pair has it: an empty
 * pair still has one piece): receiver p mailed another call fingerprint (theirs) than ours. Reports
 * SY_ERR_MISMATCH and adds ATTN_MISMATCH_FLAG to p's counter of us, the pair's one add in this call: the blocks
 * holding its other pieces add nothing (count_mapped: that word where p is load/store reachable, else NULL: a
 * signal). Out of line, as every cold path (report_error_at's comment): it takes fields, not the context. */
static __device__ __noinline__ void attn_mismatch_send(dev_state *state, error_slot *slot, int rank,
                                                       uint64_t timeout_ns, uint64_t *count_at_peer,
                                                       uint64_t *count_mapped, int p, uint64_t call, uint64_t mine,
                                                       uint64_t theirs) {
  report_error_at(state, slot, rank, timeout_ns, SY_ERR_MISMATCH, OP_ATTN_MISMATCH, p, call, mine, theirs);
  if (count_mapped) red_add_release(count_mapped, ATTN_MISMATCH_FLAG, p != rank);
  else signal_add_cold(count_at_peer, ATTN_MISMATCH_FLAG, p, false);
}

/* The last block, after a call in which some source flagged a mismatch (block 0 saw it): a source's counter grew by
 * ATTN_MISMATCH_FLAG exactly where it flagged (its one add, seen by block 0's wait, which this read follows through
 * blocks_done), else by the pieces block 0 waited for; each base grows by the same, so that the next call waits
 * for what that call's senders add. Out of line: cold. */
template <int MAXW>
static __device__ __noinline__ void attn_advance_flagged(const attn_params &P) {
  for (int s = threadIdx.x; s < P.ctx.world_size; s += blockDim.x) {
    const uint64_t base = P.local->base[s];
    const bool flagged = ld_acquire_sys(P.data + s) >= base + ATTN_MISMATCH_FLAG;
    P.local->base[s] = base + (flagged ? ATTN_MISMATCH_FLAG : attn_expected<MAXW>(P, s));
  }
}

/* After the pieces: the wait for every source's counter (block 0, and every block where a reduce follows; block 0
 * reports a source that flagged a mismatch) and the reduce. Then the last block advances the call number and the
 * expected counter bases, a thread per source; the next call reads them after the kernel boundary. One
 * acquire-release atomic, no separate fences. Block 0's arrival carries ATTN_DONE_FLAGGED where a source flagged a
 * mismatch (last_s 2): that source's base grows by the flag. */
template <int MAXW, bool TICKETS, bool TRACE>
__device__ __forceinline__ void attn_finish(const attn_params &P, const piece_queue<TICKETS> &queue, uint64_t call,
                                            int W, int &flagged_s) {
  const dev_ctx &ctx = P.ctx;
  if (blockIdx.x == 0 || P.reduce != REDUCE_NONE) {
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_ATTN_DATA, PH_WAIT_DATA, true, -1, call);
    for (int s = threadIdx.x; s < W; s += blockDim.x) {
      const uint64_t base = P.local->base[s], want = base + attn_expected<MAXW>(P, s);
      const uint64_t seen = wait_geq_seen(ctx, P.data + s, want, OP_ATTN_DATA, s, call);
      if (seen >= base + ATTN_MISMATCH_FLAG) { /* s sent the mismatch flag, not rows */
        flagged_s = 1;
        if (blockIdx.x == 0) report_error(ctx, SY_ERR_MISMATCH, OP_ATTN_MISMATCH_RECV, s, call, P.fingerprint, 0);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_ATTN_DATA, PH_WAIT_DATA, false, -1, call);
    if (P.reduce != REDUCE_NONE && !aborted(ctx) && !flagged_s) attn_reduce(P, P.ch[0].dst, P.ch[0].row_bytes);
  }

  __shared__ int last_s;
  __syncthreads();
  if (threadIdx.x == 0) {
    trace<TRACE>(ctx, OP_ATTN_DATA, PH_KERNEL, false, -1, call);
    const unsigned arrive = blockIdx.x == 0 && flagged_s ? 1u + ATTN_DONE_FLAGGED : 1u;
    const unsigned done = atom_add_acq_rel_gpu(&P.local->blocks_done, arrive) + arrive;
    last_s = (done & ~ATTN_DONE_FLAGGED) != gridDim.x ? 0 : done & ATTN_DONE_FLAGGED ? 2 : 1;
  }
  __syncthreads();
  if (last_s) {
    if (last_s == 1)
      for (int s = threadIdx.x; s < W; s += blockDim.x) P.local->base[s] += attn_expected<MAXW>(P, s);
    else attn_advance_flagged<MAXW>(P);
    if (threadIdx.x == 0) {
      P.local->blocks_done = 0;
      piece_queue_close(queue);
      P.local->calls = call;
    }
  }
}

/* TICKETS: the ticket order (more pieces than blocks), else the static bit-reversed order; a kernel instance each,
 * so that the small calls' kernel carries none of the ticket code (bench/NOTES.md, "instruction fetch"). TRACE: the
 * trace points (SY_TRACE_FILE), likewise. */
template <int MAXW, bool TICKETS, bool TRACE>
__global__ void __launch_bounds__(ATTN_THREADS) attn_kernel(const __grid_constant__ attn_params P) {
  pdl_begin();
  const dev_ctx &ctx = P.ctx;
  const int W = ctx.world_size, me = ctx.rank, nch = P.nch;

  __shared__ uint64_t call_s;
  __shared__ uint32_t prefix_s[2 * MAXW + 1]; /* pieces over (k, channel), k -> peer (me + 1 + k) % W */
  /* per peer, once the block has its mail: destinations of both channels (from the control region; on a
   * mismatch [0] holds the receiver's fingerprint), state (1 send, 0 skip: failed wait, -1 mismatch, -2 not yet
   * waited for) and control region if load/store reachable */
  __shared__ int64_t delta_s[MAXW][2];
  __shared__ int state_s[MAXW];
  __shared__ char *peer_base_s[MAXW];
  __shared__ int flagged_s; /* a sender flagged a mismatch instead of sending (the reduce is skipped) */
  __shared__ int64_t seg_s[4 * ATTN_SEG_CAP]; /* the current pair's segments, where it has at most ATTN_SEG_CAP */

  for (int i = threadIdx.x; i < W * nch; i += blockDim.x) {
    const int p = (me + 1 + i / nch) % W, c = i % nch;
    prefix_s[i + 1] =
        attn_piece_count((uint64_t)send_rows_of<MAXW>(P.ch[c], p) * P.ch[c].row_bytes, W * nch, P.max_piece);
  }
  for (int p = threadIdx.x; p < W; p += blockDim.x) state_s[p] = -2;
  if (threadIdx.x == 0) call_s = ld_relaxed_gpu(&P.local->calls) + 1, flagged_s = 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    prefix_s[0] = 0;
    for (int i = 0; i < W * nch; i++) prefix_s[i + 1] += prefix_s[i];
  }
  __syncthreads();
  const uint64_t call = call_s;
  if (threadIdx.x == 0) trace<TRACE>(ctx, OP_ATTN_DATA, PH_KERNEL, true, -1, call);

  if (blockIdx.x == 0) {
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_ATTN_READY, PH_POST_READY, true, -1, call);
    const uint64_t v[3] = {(uint64_t)(P.ch[0].dst - ctx.ctrl), nch > 1 ? (uint64_t)(P.ch[1].dst - ctx.ctrl) : 0,
                           P.fingerprint};
    for (int p = threadIdx.x; p < W; p += blockDim.x) post_mail_words<3>(ctx, P.mail[me].word, p, call, v);
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_ATTN_READY, PH_POST_READY, false, -1, call);
  }

  __shared__ uint32_t ticket_s[2];
  piece_queue<TICKETS> queue = piece_queue_begin<TICKETS>(prefix_s[W * nch], P.stride, &P.local->queue);
  for_each_piece(queue, ticket_s, [&](uint32_t piece) {
    int lo_i = 0, hi_i = W * nch - 1;
    while (lo_i < hi_i) {
      int mid = (lo_i + hi_i + 1) / 2;
      if (prefix_s[mid] <= piece) lo_i = mid;
      else hi_i = mid - 1;
    }
    const int p = (me + 1 + lo_i / nch) % W, c = lo_i % nch;
    const uint32_t j = piece - prefix_s[lo_i], count = prefix_s[lo_i + 1] - prefix_s[lo_i];
    const attn_chan &ch = P.ch[c];
    const uint64_t rb = ch.row_bytes, pair = (uint64_t)send_rows_of<MAXW>(ch, p) * rb;
    uint64_t lo, hi;
    sy__piece_range(pair, count, j, &lo, &hi);
    /* The pair's segments: staged in shared memory (one round of independent loads) where they fit, else read
     * from the plan in global memory. */
    const int64_t g0 = send_start_of<MAXW>(ch, p), ng = send_start_of<MAXW>(ch, p + 1) - g0;
    const bool staged = ng <= ATTN_SEG_CAP;
    __syncthreads(); /* the previous piece's segments are no longer read */
    if (staged && hi > lo)
      for (int i = threadIdx.x; i < 4 * ng; i += blockDim.x) seg_s[i] = ch.d.segs[4 * g0 + i];
    __syncthreads();
    const int64_t *segs = staged ? seg_s : ch.d.segs + 4 * g0;
    int64_t first = 0;
    if (hi > lo) {
      int64_t last = ng - 1;
      while (first < last) { /* the last segment starting at or before lo */
        int64_t mid = (first + last + 1) / 2;
        if ((uint64_t)segs[4 * mid + 3] * rb <= lo) first = mid;
        else last = mid - 1;
      }
    }
    if (state_s[p] == -2) { /* the block's first piece for p: its mail (every thread reads -2 before thread 0 writes) */
      /* The piece's source lines on their way into L2 while the mail travels. */
      for (int64_t g = first; hi > lo && g < ng; g++) {
        const uint64_t seg_lo = (uint64_t)segs[4 * g + 3] * rb, seg_hi = seg_lo + (uint64_t)segs[4 * g + 2] * rb;
        if (seg_lo >= hi) break;
        const uint64_t a = lo > seg_lo ? lo : seg_lo, b = hi < seg_hi ? hi : seg_hi;
        if (b > a) prefetch_l2_block(ch.src + (uint64_t)segs[4 * g] * rb + (a - seg_lo), b - a);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        trace<TRACE>(ctx, OP_ATTN_READY, PH_WAIT_READY, true, p, call);
        uint64_t v[3] = {0, 0, 0};
        int ok = wait_mail_words<3>(ctx, P.mail[p].word, p, call, OP_ATTN_READY, v) ? 1 : 0;
        if (ok && v[2] != P.fingerprint) ok = -1, v[0] = v[2]; /* reported by the pair's first piece, below */
        delta_s[p][0] = (int64_t)v[0];
        delta_s[p][1] = (int64_t)v[1];
        peer_base_s[p] = peer_ctrl(ctx, ctx.ctrl, p);
        state_s[p] = ok;
        trace<TRACE>(ctx, OP_ATTN_READY, PH_WAIT_READY, false, p, call);
      }
      __syncthreads();
    }
    if (state_s[p] <= 0) { /* a failed wait, or a mismatch: no rows for p; its first piece's block flags it */
      if (state_s[p] < 0 && c == 0 && j == 0 && threadIdx.x == 0) {
        uint64_t *count_at_peer = P.data + me;
        uint64_t *mapped = peer_base_s[p] ? (uint64_t *)(peer_base_s[p] + ((char *)count_at_peer - ctx.ctrl)) : nullptr;
        attn_mismatch_send(ctx.state, ctx.slot, me, ctx.timeout_ns, count_at_peer, mapped, p, call, P.fingerprint,
                           (uint64_t)delta_s[p][0]);
      }
      return;
    }
    char *peer_base = peer_base_s[p];
    if (threadIdx.x == 0) trace<TRACE>(ctx, OP_ATTN_DATA, PH_COPY, true, p, call);
    if (hi > lo) copy_segments(ctx, ch, segs, first, ng, lo, hi, delta_s[p][c], peer_base, p);
    /* One counter update per piece, after the whole block's stores (bar.sync, then a cumulative release). */
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t *count_at_peer = P.data + me;
      if (peer_base) {
        red_add_release((uint64_t *)(peer_base + ((char *)count_at_peer - ctx.ctrl)), 1,
                        p != me); /* GPU scope to itself */
      } else {
        signal_add_cold(count_at_peer, 1, p, true);
      }
      trace<TRACE>(ctx, OP_ATTN_DATA, PH_COPY, false, p, call);
    }
  });

  attn_finish<MAXW, TICKETS, TRACE>(P, queue, call, W, flagged_s);
}

template <int MAXW>
static sy_status_t launch(cuda_state *st, attn_params &P, bool dynamic, int blocks, cudaStream_t stream) {
  void (*const kernels[2][2])(attn_params) = {{attn_kernel<MAXW, false, false>, attn_kernel<MAXW, false, true>},
                                              {attn_kernel<MAXW, true, false>, attn_kernel<MAXW, true, true>}};
  return launch_pdl(kernels[dynamic][st->ctx.trace != nullptr], blocks, ATTN_THREADS, 0, stream, P);
}

} // namespace sy

using namespace sy;

static cuda_state *state_of(sy_comm_t comm) { return (cuda_state *)comm->backend_state; }

/* splitmix64's finalizer over h plus a word. */
static uint64_t mix_word(uint64_t h, uint64_t word) {
  uint64_t x = h + 0x9e3779b97f4a7c15ull + word;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* What a call mails and compares (the kernel's header): the plan's fingerprint and the call's shape — its
 * channels' directions and row sizes, which both ends of a pair must share as well. */
static uint64_t call_fingerprint(const struct sy_attn_plan *plan, const sy_attn_call_t *call) {
  uint64_t h = mix_word(plan->fingerprint, (uint64_t)call->num_channels);
  for (int c = 0; c < call->num_channels; c++) {
    h = mix_word(h, (uint64_t)call->ch[c].dir);
    h = mix_word(h, (uint64_t)call->ch[c].row_bytes);
  }
  return h;
}

extern "C" sy_status_t sy__cuda_attn_create(sy_comm_t comm, struct sy_attn *attn) {
  const int W = comm->world_size;
  attn_gpu *g = (attn_gpu *)calloc(1, sizeof *g);
  if (!g) return SY_ERR_NO_MEMORY;
  const size_t ctrl_bytes = (size_t)W * (sizeof(attn_mail) + sizeof(uint64_t));
  sy_status_t s = sy_mem_alloc(comm, ctrl_bytes, (void **)&g->ctrl);
  if (s != SY_SUCCESS) {
    free(g);
    return s;
  }
  g->mail = (attn_mail *)g->ctrl;
  g->data = (uint64_t *)(g->ctrl + (size_t)W * sizeof(attn_mail));
  const size_t local_bytes = sizeof(attn_local) + sizeof(uint64_t) * (size_t)W;
  cudaError_t err = cudaMalloc((void **)&g->local, local_bytes);
  if (err == cudaSuccess) err = cudaMemset(g->local, 0, local_bytes);
  if (err == cudaSuccess) err = cudaMemset(g->ctrl, 0, ctrl_bytes);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    if (g->local) cudaFree(g->local);
    sy__mem_free_within(comm, g->ctrl); /* keeps the create's sy_last_error */
    free(g);
    return cuda_error(err, "attention control state", __FILE__, __LINE__);
  }
  nvshmem_barrier_all(); /* every rank's control words are zero before anyone posts into them */
  attn->backend_state = g;
  return SY_SUCCESS;
}

extern "C" void sy__cuda_attn_destroy(sy_comm_t comm, struct sy_attn *attn) {
  attn_gpu *g = (attn_gpu *)attn->backend_state;
  if (!g) return;
  cudaDeviceSynchronize();
  cudaFree(g->local);
  if (!comm->destroyed) sy_mem_free(comm, g->ctrl); /* else it went with the communicator */
  free(g);
  attn->backend_state = NULL;
}

extern "C" sy_status_t sy__cuda_attn_run(sy_comm_t comm, struct sy_attn *attn, const struct sy_attn_plan *plan,
                                         const sy_attn_call_t *call, cudaStream_t stream) {
  cuda_state *st = state_of(comm);
  attn_gpu *g = (attn_gpu *)attn->backend_state;
  const attn_plan_dev *dev = (const attn_plan_dev *)plan->device;
  if (!dev) {
    SY_WARN("attention dispatch: the plan has no device copy (was it created on this communicator?)");
    return SY_ERR_INVALID_ARG;
  }
  attn_params P;
  memset(&P, 0, sizeof P);
  P.ctx = st->ctx;
  P.mail = g->mail;
  P.data = g->data;
  P.local = g->local;
  P.nch = call->num_channels;
  P.max_piece = st->max_piece;
  P.fingerprint = call_fingerprint(plan, call);
  uint64_t pieces = 0;
  for (int c = 0; c < P.nch; c++) {
    const int d = call->ch[c].dir;
    P.ch[c].d = dev->dir[d];
    P.ch[c].src = (const char *)call->ch[c].src;
    P.ch[c].dst = (char *)call->ch[c].dst;
    P.ch[c].row_bytes = call->ch[c].row_bytes;
    if (plan->world_size <= ATTN_PARAM_W) {
      const sy_attn_dir_t *dir = &plan->dir[d];
      for (int p = 0; p <= plan->world_size; p++) P.ch[c].send_start[p] = dir->send_start[p];
      for (int p = 0; p < plan->world_size; p++) {
        P.ch[c].send_rows[p] = dir->send_rows[p];
        P.ch[c].recv_rows[p] = dir->recv_rows[p];
      }
    }
    for (int p = 0; p < plan->world_size; p++)
      pieces += attn_piece_count((uint64_t)plan->dir[d].send_rows[p] * call->ch[c].row_bytes, plan->world_size * P.nch,
                                 P.max_piece);
  }
  if (call->kv_backward) {
    P.reduce = (call->flags & SY_ATTN_UNSUMMED) ? REDUCE_UNSUMMED : REDUCE_SUM;
    P.dtype = (int)call->dtype;
    P.num_seqs = plan->num_seqs;
    P.C = plan->max_replicas;
    P.num_tokens = plan->num_tokens;
    P.seq_start = dev->seq_start;
    P.kv_dst = dev->kv_dst;
    P.grad_out = (char *)call->grad_out;
  }
  int blocks = pieces < (uint64_t)st->a2a_blocks ? (int)pieces : st->a2a_blocks;
  const bool dynamic = st->piece_order != PIECE_ORDER_STATIC && pieces > (uint64_t)blocks && pieces < (1ull << 31);
  if (dynamic) P.stride = sy__piece_stride((uint32_t)pieces);
  if (P.reduce != REDUCE_NONE) blocks = st->a2a_blocks; /* the reduce wants the whole GPU */
  if (blocks < 1) blocks = 1;
  const int W = comm->world_size;
  if (W <= 8) return launch<8>(st, P, dynamic, blocks, stream);
  if (W <= 64) return launch<64>(st, P, dynamic, blocks, stream);
  if (W <= 256) return launch<256>(st, P, dynamic, blocks, stream);
  SY_WARN("attention dispatch: the cuda backend supports up to 256 ranks, this communicator has %d", W);
  return SY_ERR_UNSUPPORTED;
}
