/*
 * ht.cuh — the MoE high-throughput kernels' shared part: the workspace, the parameters every kernel gets, and
 * the rings.
 *
 * Workspace (symmetric, zeroed at create; W ranks, C channels, R slots per ring):
 *   tail[s][c]    at receiver r: messages source s has written into ring (s -> r, c) so far (s stores, release)
 *   head[d][c]    at sender s: messages receiver d has consumed from ring (s -> d, c) so far (d stores, release)
 *   stamp[s]      at r: the layout call whose counts source s wrote into xdata[s] (s stores, release)
 *   ack[d]        at s: the layout call whose counts from s receiver d has read (d stores): s writes the next
 *                 layout's counts into d's xdata only after d's ack of the previous
 *   xdata[s]      at r: [L + C + 1] int32 from s: its rows for each of r's experts, its tokens to r per channel,
 *                 its tokens to r
 *   ring[s][c]    at r: R slots of msg_bytes from source s, channel c
 *   inbox[d]      at s (with a receive arena): receiver d's {call, recv.tokens offset}, then its rows for s's tokens
 *                 (d stores, then a release; or puts, a quiet and a signal; dispatch.cu: the first copy in place)
 *   arena         recv buffers (sy_moe_ht_recv_alloc with pool NULL), written by their rank and its senders; not
 *                 zeroed
 * Every counter only grows over the object's life: a ring (s -> d, c) carries the dispatch's tokens from s to
 * d and the combine's partials from s to d alike, one FIFO, and both ends count the messages of every call, so
 * a call's messages follow the previous call's in the same ring without a reset or a barrier.
 *
 * Channels: a rank's tokens [0, num_tokens) are cut into C ranges, channel c holding [c N / C, (c + 1) N / C)
 * (C = SMs / 2 with the roles by blocks, C = SMs by warps: below). Channel c's sending role writes its messages in
 * token order into ring (me -> d, c) for every d; its receiving role reads ring (s -> me, c) for every s. A message: a 16-byte header {token, entries, 0, 0}, kk
 * entries of 16 bytes {local expert, position, weight bits, k} (the combine: {row value bits, k, 0, 0}), then
 * the payload (bf16 row; or E4M3 bytes and hidden / 128 fp32 scales).
 */
#ifndef SY_CUDA_MOE_HT_HT_CUH
#define SY_CUDA_MOE_HT_HT_CUH

#include <stdint.h>

#include "cuda/backend.h"
#include "cuda/device.cuh"
#include "ref/convert.h"
#include "ref/fp8.h"
#include "ref/moe_ht_layout.h"

namespace sy {

constexpr int HT_LTHREADS = 1024; /* the layout kernel: a thread an entry, a warp an expert */
/* The layout's count tallies in shared memory (the experts' counts [E], then the send counts [W][C]), summed into
 * global memory once a block, where they fit in this many words (else its atomics go to global memory). */
constexpr int HT_TALLY_WORDS = 8192;
__host__ __device__ inline int ht_tally_words(int E, int W, int C) {
  const long long n = (long long)E + (long long)W * C;
  return n <= HT_TALLY_WORDS ? (int)n : 0;
}
/* The layout kernel's dynamic shared memory: the count's tallies, then (on the exchange's block) ok[W] and the
 * offsets' rows[L + 1]. */
__host__ __device__ inline size_t ht_layout_smem(int E, int W, int C, int L) {
  const size_t tally = (size_t)ht_tally_words(E, W, C) * 4, exchange = ((size_t)W + (size_t)L + 1) * 4;
  return tally > exchange ? tally : exchange;
}
constexpr int HT_DTHREADS = 512; /* the data kernels (dispatch, combine): 16 warps, one block an SM */
constexpr int HT_DWARPS = HT_DTHREADS / 32;
constexpr int HT_BATCH = 32; /* tokens a block takes in order between two counter updates (a lane a token) */
constexpr int HT_SLOTS = SY_MOE_HT_RING_SLOTS; /* R: slots per ring */
static_assert(HT_SLOTS >= 2 * HT_BATCH && (HT_SLOTS & (HT_SLOTS - 1)) == 0,
              "SY_MOE_HT_RING_SLOTS: a power of two of at least 2 HT_BATCH (a sender's batch to one ring; the "
              "combine's owners a batch ahead hold two batches' messages from a peer)");
constexpr int HT_PER_PEER = HT_SLOTS / 2; /* at most from one peer a round: half a ring, which its writer refills */
constexpr int HT_ROUND = HT_PER_PEER > 64 ? HT_PER_PEER : 64; /* messages a block takes from all its peers a round */
constexpr int HT_PEER_TAB = 8;
#ifndef SY_HT_PULL_STAGES
#define SY_HT_PULL_STAGES 3 /* (build-time, for measuring: bench/NOTES.md) */
#endif
#ifndef SY_HT_PULL_PIPES
#define SY_HT_PULL_PIPES 8
#endif
#ifndef SY_HT_PULL_ALIGN
#define SY_HT_PULL_ALIGN 1024
#endif
/* SY_HT_PULL (pull.cu): a pipeline's stages, and at most this many pipelines a block (as the shared memory holds). */
constexpr int HT_PULL_STAGES = SY_HT_PULL_STAGES;
constexpr int HT_PULL_PIPES = SY_HT_PULL_PIPES;
static_assert(HT_PULL_STAGES >= 2 && HT_PULL_PIPES >= 1 && HT_PULL_PIPES <= HT_DWARPS &&
                  HT_PULL_PIPES * HT_PULL_STAGES <= HT_DTHREADS,
              "SY_HT_PULL_STAGES >= 2 (a stage reloads while the next is read), 1 <= SY_HT_PULL_PIPES <= the block's "
              "warps, and their product's mbarriers initialised by the block's threads");
/* The stages start at a shared address aligned to this many bytes (0: none, for measuring). The dynamic shared memory
 * starts where the device link ends the kernel's static shared memory, which it aligns to 16 bytes whatever the extern
 * declaration says: pull.cu's stages sat 80 bytes past a 128-byte boundary (a helper's read of the SASS, run 61),
 * where tools/dev/expand-ceiling.cu's (built alone) sit on 512 — and its bulk copies ran at twice pull.cu's rate. */
constexpr unsigned HT_PULL_ALIGN = SY_HT_PULL_ALIGN;
static_assert(HT_PULL_ALIGN == 0 || (HT_PULL_ALIGN >= 128 && (HT_PULL_ALIGN & (HT_PULL_ALIGN - 1)) == 0),
              "SY_HT_PULL_ALIGN: 0 or a power of two of at least 128");
constexpr int HT_MAX_WORLD = 1024; /* the blocks keep per-peer counters in shared memory */

typedef sy_moe_ht_ws_layout_t ht_ws_layout;

struct ht_local {
  uint64_t layouts;    /* layout calls done */
  ticket_queue own;    /* the dispatch kernel's own-token queue (exec/work_queue.cuh) */
  uint32_t own_done;   /* blocks of the running call that have ended */
  uint32_t disp_done;  /* with a receive arena: units of the running dispatch that have ended */
  uint64_t dispatches; /* with a receive arena: dispatch calls done (the inboxes' call numbers) */
  uint64_t lbar;       /* the layout kernel's grid barrier: the running layout's arrivals (0 between layouts) */
  uint32_t ldone;      /* the layout kernel's blocks that have ended (0 between layouts) */
  uint32_t lfail;      /* a block of the running layout failed a barrier (0 between layouts) */
  uint64_t pulls;      /* SY_HT_PULL: dispatch calls done (the copies' call numbers) */
  uint32_t pull_done;  /* then the blocks of the running one that have ended (0 between calls) */
  uint32_t pad_[1];
  /* then sent[W][C] and consumed[W][C], uint64 */
};

struct ht_params {
  dev_ctx ctx;
  char *ws;
  char *peer_ws[HT_PEER_TAB]; /* W <= HT_PEER_TAB: each rank's workspace as this GPU reaches it */
  ht_ws_layout wl;
  ht_local *local;
  uint64_t *sent, *consumed; /* [W][C] */
  char *staging;             /* NULL where every peer is load/store reachable; else a slot per (block, warp) */
  size_t stage_bytes;        /* a slot: msg_bytes - payload_offset of payload, then 32 headers of payload_offset */
  uint32_t *masks;           /* layout scratch: [E][ceil(max_tokens / 32)] token bits per expert */
  int32_t *word_prefix;      /* [E][ceil(max_tokens / 32)] */
  int32_t *expert_count;     /* [E] this rank's entries per expert; [E]: the first bad entry (layout.cu) */
  char *handle;
  sy_moe_ht_handle_layout_t hl;
  int32_t *host_counts; /* device alias of the mapped [2 L + 1] (exact mode), else NULL */
  volatile uint64_t *host_stamp;
  uint32_t object;
  int world_size, L, E, T, K, kk, hidden, wire, alignment, C;
  int B; /* the channels served at once (the call's SM budget, sy_moe_ht_set_num_sms): a role's blocks, each serving
          * channels c, c + B, ... in turn */
  int recv_own;         /* the dispatch without the queue: the share (in 1/1024) of a channel's own tokens its receiving
                   block writes */
  int own_queue;        /* the dispatch: this rank's own tokens' rows from the own-token queue (dispatch.cu) */
  int scales_row_major; /* SY_MOE_HT_SCALES_ROW_MAJOR: recv.scales [rows][hidden / 128], else [hidden / 128][rows] */
  int role_warps;       /* 0: a channel's two roles on two blocks; S in [2, 14]: on one block, warps [0, S) and [S, 16)
                           (SY_HT_ROLES, below) */
  uint32_t role_state;  /* role_warps > 0: where role 0's per-peer state starts in the dynamic shared memory */
  uint64_t *probe;      /* SY_HT_PROBE: this kernel's [2 C][HT_PROBE_SLOTS] per-block times of the call, else NULL */
  int inplace;          /* the dispatch of an object with a receive arena, world > 1: the inboxes (dispatch.cu) */
  int pull;             /* the dispatch pulled (SY_HT_PULL; pull.cu): */
  int pull_pipes;       /* its pipelines a block (warps [0, pull_pipes)), HT_PULL_STAGES stages each, */
  uint32_t pull_smem, pull_stage_bytes; /* the first stage in the dynamic shared memory, a stage's bytes, */
  int32_t *pull_tok;                    /* [W][T] the token of source s's message i here (scratch, this GPU's memory) */
  int pull_overlap; /* SY_HT_PULL_OVERLAP: the own copy by a copy engine beside the kernel (launch.cu), which marks it
                     * ready (sy_ht_pull_ready); own items first, from the caller's tokens (P.tokens, P.token_scales) */
  int64_t inplace_off; /* then this rank's recv.tokens in its arena (bytes from the arena's start), or -1 */
  /* the call */
  int mode; /* HT_DISPATCH, or HT_COMBINE_BACKWARD (the dispatch kernel carrying grad_out as a bf16 token) */
  int num_tokens;
  const void *expert_ids;
  int id64;
  const void *tokens;
  const float *token_scales;
  const float *weights;
  sy_moe_ht_recv_t recv;
  const float *row_weights, *row_values;
  void *out; /* combine: [num_tokens][hidden]; combine_backward: grad_rows */
  int add;   /* combine: out is added to (sy_moe_ht_combine_add) */
  float *token_values;
  const void *rows_in; /* combine_backward: the combine's input (for grad_row_weights) */
  float *grad_row_weights;
};

enum { HT_DISPATCH = 0, HT_COMBINE_BACKWARD = 1 };

/* A channel's two roles (SY_HT_ROLES; bench/NOTES.md, "both roles in every block"): the dispatch kernel's
 * sending (role 0) and receiving (role 1), the combine's experts' side (0) and owners (1).
 *   by blocks (P.role_warps 0): 2 C blocks of 16 warps; block c runs channel c's role 0, block C + c its role 1.
 *   by warps (P.role_warps S): C blocks; block c runs channel c's role 0 on warps [0, S) and its role 1 on warps
 *                              [S, 16) at once, each role with its own named barrier (1 + role) and per-peer state.
 * So a role's code sees its own threads only: role_tid / role_threads / role_warp / role_nwarps in place of
 * threadIdx.x / blockDim.x / the warp / HT_DWARPS, role_sync in place of __syncthreads. Role r of channel c is
 * unit r C + c either way (the probe's row; the own-token queue counts units); with a call's budget below
 * config.num_sms (P.B < P.C) read B for C in these counts, each unit serving channels c, c + B, ... in turn. The
 * block-wide barriers (__syncthreads) come only before the roles start (rows_setup, own_begin). */
template <bool RM>
__device__ __forceinline__ int role_of(const ht_params &P) {
  if constexpr (RM) return (int)(threadIdx.x / 32) >= P.role_warps;
  return (int)blockIdx.x >= P.B;
}
template <bool RM>
__device__ __forceinline__ int role_warp0(const ht_params &P) {
  if constexpr (RM) return (int)(threadIdx.x / 32) >= P.role_warps ? P.role_warps : 0;
  return 0;
}
template <bool RM>
__device__ __forceinline__ int role_nwarps(const ht_params &P) {
  if constexpr (RM) return (int)(threadIdx.x / 32) >= P.role_warps ? HT_DWARPS - P.role_warps : P.role_warps;
  return HT_DWARPS;
}
template <bool RM>
__device__ __forceinline__ int role_tid(const ht_params &P) {
  return (int)threadIdx.x - 32 * role_warp0<RM>(P);
}
template <bool RM>
__device__ __forceinline__ int role_threads(const ht_params &P) {
  return 32 * role_nwarps<RM>(P);
}
template <bool RM>
__device__ __forceinline__ int role_warp(const ht_params &P) {
  return (int)(threadIdx.x / 32) - role_warp0<RM>(P);
}
/* The first channel this thread's role serves (then every P.B-th: a budget below config.num_sms serves the C channels
 * B at a time, each unit its channels in ascending order, alike on every rank, so a channel's roles on two ranks
 * never wait on each other across channels), and its unit. */
template <bool RM>
__device__ __forceinline__ int role_chan(const ht_params &P) {
  return RM || (int)blockIdx.x < P.B ? (int)blockIdx.x : (int)blockIdx.x - P.B;
}
template <bool RM>
__device__ __forceinline__ int role_unit(const ht_params &P) {
  return role_of<RM>(P) * P.B + role_chan<RM>(P);
}
/* Units of the grid: each of its roles. */
__device__ __forceinline__ int role_units(const ht_params &P) { return 2 * P.B; }
/* The role's barrier (bar.sync orders the memory accesses of the threads it joins, as __syncthreads does). */
template <bool RM>
__device__ __forceinline__ void role_sync(const ht_params &P) {
  if constexpr (!RM) {
    __syncthreads();
  } else {
    asm volatile("bar.sync %0, %1;" ::"r"(1 + role_of<RM>(P)), "r"(role_threads<RM>(P)) : "memory");
  }
}
/* The same, returning whether any of the role's threads passed v != 0. */
template <bool RM>
__device__ __forceinline__ bool role_sync_or(const ht_params &P, int v) {
  if constexpr (!RM) {
    return __syncthreads_or(v) != 0;
  } else {
    int r;
    asm volatile(
        "{\n\t.reg .pred p, q;\n\tsetp.ne.s32 q, %1, 0;\n\tbar.red.or.pred p, %2, %3, q;\n\tselp.s32 %0, 1, "
        "0, p;\n\t}"
        : "=r"(r)
        : "r"(v), "r"(1 + role_of<RM>(P)), "r"(role_threads<RM>(P))
        : "memory");
    return r != 0;
  }
}

/* The per-unit probe (SY_HT_PROBE, for measuring: bench/NOTES.md): thread 0 of each role adds up where its time
 * went in shared memory and writes the sums at its end (row: its unit), so each call overwrites the last one's.
 * Slots: */
#ifndef SY_HT_PROBE_BINS
#define SY_HT_PROBE_BINS 0 /* off: the kernels are the same as without it */
#endif
#ifndef SY_HT_PROBE_BIN_SHIFT
#define SY_HT_PROBE_BIN_SHIFT 18 /* 262 us a bin */
#endif
enum {
  PR_START, /* globaltimer at the role's start, ns */
  PR_END,   /* at its end */
  PR_OWN,   /* ns writing (dispatch) or summing (combine) this rank's own tokens outside the rings */
  PR_WAIT,  /* ns waiting: the senders for ring room, the receivers for messages (rounds or batches with none) */
  PR_WORK,  /* ns in rounds or batches that moved messages */
  PR_ROUNDS,
  PR_ITEMS, /* messages or tokens moved */
  PR_SYNC,  /* ns in fences, tail and head stores */
  PR_PLAN,  /* ns the dispatch's senders plan their batches (ring indices, destinations: dispatch.cu, plan_batch) */
  /* with SY_HT_PROBE_BINS = B > 0 (build time): own, wait and work again, each in B bins by when the time ended (bin
   * i: [i, i + 1) x 2^SY_HT_PROBE_BIN_SHIFT ns after the role's start, the last bin open-ended), to see whether the
   * two roles wait at the same time or in turns (bench/NOTES.md, run 42) */
  PR_BINS,
  HT_PROBE_SLOTS = PR_BINS + 3 * SY_HT_PROBE_BINS
};
template <bool RM>
__device__ __forceinline__ uint64_t *probe_acc(const ht_params &P) {
  __shared__ uint64_t acc[RM ? 2 : 1][HT_PROBE_SLOTS]; /* a row a role in the block (RM: each instance its own) */
  return acc[RM ? role_of<RM>(P) : 0];
}
template <bool RM>
__device__ __forceinline__ void probe_begin(const ht_params &P) {
  if (!P.probe || role_tid<RM>(P)) return;
  uint64_t *a = probe_acc<RM>(P);
  for (int i = 0; i < HT_PROBE_SLOTS; i++) a[i] = 0;
  a[PR_START] = global_timer_ns();
}
/* The role's thread 0: adds the time since `since` (or a count) to slot i. */
template <bool RM>
__device__ __forceinline__ void probe_add(const ht_params &P, int i, uint64_t v) {
  if (!P.probe || role_tid<RM>(P) != 0) return;
  uint64_t *a = probe_acc<RM>(P);
  a[i] += v;
#if SY_HT_PROBE_BINS > 0
  if (i == PR_OWN || i == PR_WAIT || i == PR_WORK) {
    const uint64_t b = (global_timer_ns() - a[PR_START]) >> SY_HT_PROBE_BIN_SHIFT;
    a[PR_BINS + (i - PR_OWN) * SY_HT_PROBE_BINS + (b < SY_HT_PROBE_BINS ? b : SY_HT_PROBE_BINS - 1)] += v;
  }
#endif
}
__device__ __forceinline__ uint64_t probe_now(const ht_params &P) { return P.probe ? global_timer_ns() : 0; }
/* The role's thread 0: slot i so far (0 elsewhere). */
template <bool RM>
__device__ __forceinline__ uint64_t probe_get(const ht_params &P, int i) {
  return P.probe && role_tid<RM>(P) == 0 ? probe_acc<RM>(P)[i] : 0;
}
template <bool RM>
__device__ __forceinline__ void probe_end(const ht_params &P) {
  if (!P.probe || role_tid<RM>(P)) return;
  uint64_t *a = probe_acc<RM>(P);
  a[PR_END] = global_timer_ns();
  for (int i = 0; i < HT_PROBE_SLOTS; i++) P.probe[(size_t)role_unit<RM>(P) * HT_PROBE_SLOTS + i] = a[i];
}

/* Peer p's workspace as this GPU reaches it, or NULL: NVSHMEM puts (a peer not load/store reachable, or
 * SY_FORCE_PUT). */
__device__ __forceinline__ char *ht_peer(const ht_params &P, int p) {
  if (P.world_size <= HT_PEER_TAB) return P.peer_ws[p];
  if (P.ctx.force_put && p != P.ctx.rank) return nullptr;
  return nvshmem_ptr_cold(P.ws, p);
}

/* The put path, out of line (cold wherever every peer is load/store reachable). A warp's staging slot. */
__device__ __forceinline__ char *ht_stage(const ht_params &P) {
  return P.staging + ((size_t)blockIdx.x * HT_DWARPS + threadIdx.x / 32) * P.stage_bytes;
}

/* The whole warp: bytes from this GPU's src to the symmetric dst at p; returns once src may be reused. */
static __device__ __noinline__ void ht_put_warp(void *dst, const void *src, size_t bytes, int p) {
  nvshmemx_putmem_warp(dst, src, bytes, p);
}

/* One thread, after the block's puts (bar.sync): their completion, then p's counter set to v. */
static __device__ __noinline__ void ht_signal_set(uint64_t *sig, uint64_t v, int p) {
  nvshmem_quiet();
  nvshmemx_signal_op(sig, v, NVSHMEM_SIGNAL_SET, p);
}

template <typename T>
__device__ __forceinline__ T *ht_at(char *base, size_t off) {
  return (T *)(base + off);
}

__device__ __forceinline__ int32_t *hsec(const ht_params &P, size_t off) { return (int32_t *)(P.handle + off); }

__device__ __forceinline__ int chan_begin(int c, int n, int C) { return (int)((int64_t)c * n / C); }

/* The ring slot of message `index` of (source s -> this rank's peer, channel c), in `base`'s workspace. */
__device__ __forceinline__ char *ring_slot(const ht_params &P, char *base, int s, int c, uint64_t index) {
  return base + P.wl.ring + (((size_t)s * P.C + c) * HT_SLOTS + (size_t)(index % HT_SLOTS)) * P.wl.msg_bytes;
}

__device__ __forceinline__ uint64_t *tail_word(const ht_params &P, char *base, int s, int c) {
  return ht_at<uint64_t>(base, P.wl.tail) + (size_t)s * P.C + c;
}

__device__ __forceinline__ uint64_t *head_word(const ht_params &P, char *base, int d, int c) {
  return ht_at<uint64_t>(base, P.wl.head) + (size_t)d * P.C + c;
}

/* The receive arena's inbox of receiver d in `base`'s workspace (ht_ws_layout): {call, d's recv.tokens offset or -1},
 * then d's row bases [L] for this rank's tokens. */
__device__ __forceinline__ char *inbox_at(const ht_params &P, char *base, int d) {
  return base + P.wl.inbox + (size_t)d * P.wl.inbox_bytes;
}

/* How a receiver's head store is ordered after its reads of the slots (build time; bench/NOTES.md, runs 33 and 34):
 * 0 a release store per peer; 1 (the default) a fence.acq_rel.sys, then relaxed stores — the same release pattern
 * in PTX's memory model, one fence for all the peers a thread hands back to (the combine's owners: 3 at world 4;
 * measured 3-4% faster there than 0); 2 relaxed stores, no fence (DeepEP's receivers do this: every slot value a
 * warp loaded was consumed by its stores before the barrier that precedes the head store, so no write the sender
 * makes after seeing the head can reach those loads — an argument from the hardware, outside PTX's model, which
 * allows load buffering; measured 1-2% faster again than 1, and not the default for that reason). */
#ifndef SY_HT_HEAD_ORDER
#define SY_HT_HEAD_ORDER 1
#endif

/* A receiver hands `consumed` back to sender s: its head word for (me, c), by a release store or (no load/store
 * route) a quiet and a signal set: several threads and kernels give the same word back, and a quiet first keeps
 * an older, smaller value from landing after a newer one (after the block's reads of the slots: bar.sync first).
 * fenced: with SY_HT_HEAD_ORDER 1, the caller has run the fence for this store already. */
__device__ __forceinline__ void ht_give_back(const ht_params &P, int s, int c, uint64_t consumed, bool fenced = false) {
  char *sp = ht_peer(P, s);
  if (sp) {
#if SY_HT_HEAD_ORDER == 0
    (void)fenced;
    st_release_sys(head_word(P, sp, P.ctx.rank, c), consumed);
#else
    if (SY_HT_HEAD_ORDER == 1 && !fenced) fence_acq_rel(true);
    st_relaxed_sys(head_word(P, sp, P.ctx.rank, c), consumed);
#endif
  } else {
    ht_signal_set(head_word(P, P.ws, P.ctx.rank, c), consumed, s);
  }
}

/* A sender publishes `sent` as its tail at receiver d for channel c, after the block's stores or puts (bar.sync
 * first; for stores the caller has fenced). */
__device__ __forceinline__ void ht_publish(const ht_params &P, int d, int c, uint64_t sent) {
  char *dp = ht_peer(P, d);
  if (dp) st_relaxed_sys(tail_word(P, dp, P.ctx.rank, c), sent);
  else ht_signal_set(tail_word(P, P.ws, P.ctx.rank, c), sent, d);
}

/* The bounded wait of one thread for *word >= want, with the op and peer an error names. */
__device__ __forceinline__ bool ht_wait(const ht_params &P, const uint64_t *word, uint64_t want, int op, int peer) {
  return wait_geq(P.ctx, word, want, op, peer, 0);
}

/* Expert id (t, k) of the call (either index type); -1 stays -1. */
__device__ __forceinline__ int64_t ht_id(const ht_params &P, int t, int k) {
  const size_t i = (size_t)t * P.K + k;
  return P.id64 ? ((const int64_t *)P.expert_ids)[i] : (int64_t)((const int32_t *)P.expert_ids)[i];
}

} // namespace sy

extern "C" {
sy_status_t sy__cuda_moe_ht_create(sy_comm_t comm, struct sy_moe_ht *moe);
void sy__cuda_moe_ht_destroy(sy_comm_t comm, struct sy_moe_ht *moe);
sy_status_t sy__cuda_moe_ht_layout(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                   cudaStream_t stream);
sy_status_t sy__cuda_moe_ht_dispatch(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                     cudaStream_t stream);
sy_status_t sy__cuda_moe_ht_combine(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                    cudaStream_t stream);
sy_status_t sy__cuda_moe_ht_combine_backward(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                             cudaStream_t stream);
}

/* kernels (layout.cu, dispatch.cu, combine.cu) */
/* The layout (layout.cu): one kernel of at most the SM budget's blocks of HT_LTHREADS threads; its dynamic shared
 * memory is ht_layout_smem's. Its scratch is cleared by its own first phase (not memsets: a memset node adds ~1.8 us
 * to a graph launch's host time, a kernel node a few hundredths; bench/NOTES.md, "Host time of a replayed step"). */
__global__ void sy_ht_layout(const __grid_constant__ sy::ht_params P);
__global__ void sy_ht_dispatch(const __grid_constant__ sy::ht_params P);
/* The same with the rows' FP8 scales stored under an L2 evict_last policy (SY_HT_SCALE_HINT; rows.cuh: sink_scale). */
__global__ void sy_ht_dispatch_hint(const __grid_constant__ sy::ht_params P);
/* The same two with a channel's two roles on one block's warps (SY_HT_ROLES; P.role_warps > 0). */
__global__ void sy_ht_dispatch_roles(const __grid_constant__ sy::ht_params P);
__global__ void sy_ht_dispatch_hint_roles(const __grid_constant__ sy::ht_params P);
/* The FP8 wires' quantisation ahead of the dispatch (SY_HT_PREQUANT): bf16 tokens [num_tokens][hidden] into E4M3
 * bytes q [num_tokens][hidden] and fp32 scales qs [num_tokens][hidden / 128] (the given wire's layout). */
struct ht_quant_params {
  const uint16_t *tokens;
  char *q;
  float *qs;
  int num_tokens, hidden, ue8m0;
};
__global__ void sy_ht_quantise(ht_quant_params Q);
/* The dispatch pulled (SY_HT_PULL; pull.cu): its own kernel, no ring. */
__global__ void sy_ht_dispatch_pull(const __grid_constant__ sy::ht_params P);
/* SY_HT_PULL_OVERLAP: after the copy on the side stream, this rank's copy marked ready for the call (pull.cu). */
__global__ void sy_ht_pull_ready(const __grid_constant__ sy::ht_params P);
__global__ void sy_ht_combine(sy::ht_params P);
/* The same with each channel's owner block planning and waiting a batch ahead (SY_HT_OWNER_AHEAD; combine.cu). */
__global__ void sy_ht_combine_ahead(sy::ht_params P);
/* Both with a channel's two roles on one block's warps (SY_HT_ROLES). */
__global__ void sy_ht_combine_roles(sy::ht_params P);
__global__ void sy_ht_combine_ahead_roles(sy::ht_params P);

#endif
