/*
 * dispatch.cu — sy_moe_ht_dispatch on the GPU: one kernel running each channel c's two roles (ht.cuh): by blocks,
 * 2 C blocks of 16 warps, block c sending and block C + c receiving; or by warps (SY_HT_ROLES), C blocks whose
 * first SY_HT_SEND_WARPS warps send for channel c while the others receive. Below, "block" means a role's warps.
 *   send (0)        block c walks channel c's tokens in order, HT_BATCH at a time. Warp 0 finds each
 *                   token's destination ranks other than this one (a lane a token) and gives each (token,
 *                   destination) its ring index, a ballot per destination; while a destination's ring has no room
 *                   (warp 0's lanes read the rings' heads) the block writes own rows from the queue (below),
 *                   then waits (bounded); then a warp per token writes its message into every destination's
 *                   ring (header, entries, payload: bf16 as is, FP8 quantised, or the given E4M3 bytes and
 *                   scales); then one fence and a tail store per destination.
 *   receive (1)     block C + c walks the other sources round robin and takes what ring (s -> me, c)
 *                   holds, a round at a time, a warp per message: each entry's row is rowbase[s][e] + position
 *                   (the handle's offsets and counts: rows of expert e from sources before s), and the payload
 *                   goes to every row of the token here (the expansion), with its scales, {s, token} and weight;
 *                   the rows are remembered in the handle (recv_rows) for the combines. Then the head store that
 *                   gives the sender its slots back. A round that finds no message writes own rows from the
 *                   queue instead. It also writes the padding rows of its experts and (block C) the offsets and
 *                   counts.
 *   every role      at its end, the own rows the queue has left.
 * With a call's SM budget below config.num_sms (sy_moe_ht_set_num_sms) a role's block serves channels c, c + B, ...
 * in turn (B the call's channels; ht.cuh: role_chan): read "block c" as the block serving channel c.
 * This rank's own tokens take no ring: their rows come from the own-token queue (own_chunk, own_drain: a token a
 * ticket, any warp takes), or with SY_HT_OWN_QUEUE=0 from a static split of each channel's tokens (own_mid: the
 * receiving block writes [begin, mid) before its rounds, the sending block [mid, end) with each token's
 * messages, reading the token once for all).
 * The combine's backward is this kernel with grad_out as a bf16 token: the receiving side writes gradients.
 * From world 2 the FP8 wires' tokens are quantised first by sy_ht_quantise (below; SY_HT_PREQUANT, launch.cu) and
 * this kernel runs with the given wire on those bytes. The kernel comes in four instances (dispatch_kernel<HINT,
 * RM>): the _hint ones store the rows' FP8 scales under an L2 evict_last policy (SY_HT_SCALE_HINT, rows.cuh), the
 * _roles ones run the roles by warps.
 * A layout that needs more rows than the caller gave is reported (OP_MOE_HT_ROWS) and the messages are
 * consumed without writing a row, so no sender waits in vain.
 */
#include <limits.h>

#include "cuda/moe_ht/rows.cuh"

using namespace sy;

namespace {

/* Channel c's own tokens [begin, mid) have their rows written by its receiving block, [mid, end) by its sending
 * block (P.recv_own: the receiving block's share, launch.cu's recv_own_share). */
__device__ __forceinline__ int own_mid(const ht_params &P, int c) {
  const int b = chan_begin(c, P.num_tokens, P.C), e = chan_begin(c + 1, P.num_tokens, P.C);
  return b + (int)(((int64_t)(e - b) * P.recv_own) >> 10);
}

/* The own-token queue (P.own_queue; SY_HT_OWN_QUEUE=0 keeps the static split of own_mid): this rank's own tokens'
 * rows, a ticket a token, that any warp takes, by one ticket counter in device memory, when its role has nothing
 * better to do — a receiver in a round that found no message, a sender whose destination's ring is full (own_chunk:
 * each of the role's warps one token, then the role's barrier) — and every warp once its block's ring work is done
 * (own_drain: each warp on its own, its next ticket drawn while it writes a token's rows, no barrier). A token a
 * ticket and no barrier between tokens at the end: a warp whose token has no row here goes on at once instead of
 * waiting for the chunk's slowest token (run 50: a group's dispatch at 7% of the rows spent 108 of its 149 µs
 * in 16-token chunks each as long as its slowest token). So neither role waits while own rows are left, whatever
 * the routing. The queue is the library's one (exec/work_queue.cuh: ticket_queue, grow-only, no reset): a warp
 * draws until it gets a ticket past the call's tokens, and the block that ends the call last closes it (own_end). */
struct own_state {
  uint64_t base; /* the call's first ticket */
  int left;      /* this role may still draw */
};

/* Every thread of the block, before the roles start: the queue's state of each role the block runs (q[0], and
 * with both roles in the block q[1]). */
__device__ __forceinline__ void own_begin(const ht_params &P, own_state *q, int n, bool rows_ok) {
  if (threadIdx.x < n) {
    q[threadIdx.x].base = ticket_queue_base(&P.local->own);
    q[threadIdx.x].left = P.own_queue && rows_ok && P.num_tokens > 0;
  }
  __syncthreads();
}

/* Every thread of a role, at its end: the unit that ends last sets the next call's base. */
template <bool RM>
__device__ __forceinline__ void own_end(const ht_params &P) {
  if (!P.own_queue) return;
  role_sync<RM>(P);
  if (role_tid<RM>(P) != 0) return;
  if (atom_add_acq_rel_gpu(&P.local->own_done, 1u) != (unsigned)role_units(P) - 1) return;
  ticket_queue_close(&P.local->own);
  P.local->own_done = 0;
}

struct send_batch {
  int ndst[HT_BATCH];
  int dst[HT_BATCH][32];
  uint64_t slot[HT_BATCH][32];
};

/* The first copy in place (an object with a receive arena, P.inplace; bench/NOTES.md). Each dispatch, every
 * receiver d tells every source s, in s's inbox[d]: where its recv.tokens sits in its arena (-1: not there, or rows
 * that do not fit) and its row bases for s's tokens, stamped with the call's number (the dispatches done, counted
 * alike on every rank). A sender then stores (or puts) each message's payload straight into d's row of the
 * token's first expert there, keeping only the header, the entries and the FP8 scales in the ring slot; d copies
 * that row to the token's other rows. The call's number, on the device (graph replays count too). */
__device__ __forceinline__ uint64_t inplace_call(const ht_params &P) { return __ldcg(&P.local->dispatches) + 1; }

/* Warp 0 of block 0, before the roles start: this rank's inbox entry at every other rank. */
__device__ void inplace_publish(const ht_params &P, const int32_t *rowbase, bool rows_ok, uint64_t call) {
  if (blockIdx.x != 0 || threadIdx.x >= 32) return;
  const int lane = threadIdx.x, W = P.world_size, me = P.ctx.rank, L = P.L;
  const int64_t off = rows_ok ? P.inplace_off : -1;
  for (int s = 0; s < W; s++) {
    if (s == me) continue;
    char *sp = ht_peer(P, s);
    char *ib = sp ? inbox_at(P, sp, me) : ht_stage(P); /* put path: staged, then put */
    for (int e = lane; e < L; e += 32) ((int32_t *)(ib + 16))[e] = rowbase[(size_t)s * L + e];
    if (lane == 0) ((int64_t *)ib)[1] = off;
    __syncwarp();
    if (sp) {
      if (lane == 0) {
        fence_acq_rel(true);
        st_relaxed_sys((uint64_t *)ib, call);
      }
    } else {
      char *remote = inbox_at(P, P.ws, me); /* the symmetric address */
      ht_put_warp(remote + 8, ib + 8, P.wl.inbox_bytes - 8, s);
      if (lane == 0) ht_signal_set((uint64_t *)remote, call, s);
    }
    __syncwarp();
  }
}

/* A sending role's thread 0: waits (bounded) until every other rank has published this call's inbox. */
__device__ bool inplace_wait(const ht_params &P, uint64_t call) {
  for (int d = 0; d < P.world_size; d++)
    if (d != P.ctx.rank && !ht_wait(P, (const uint64_t *)inbox_at(P, P.ws, d), call, OP_MOE_HT_INBOX, d)) return false;
  return true;
}

/* Every lane: receiver d's row, in its arena as `base` reaches d's workspace (its mapping, or the symmetric address
 * for a put), of the token's first entry at d (the lowest lane of `mask`, whose expert e and position pos); NULL
 * where d takes the payload through the ring. */
__device__ __forceinline__ char *inplace_row(const ht_params &P, char *base, int d, unsigned mask, int e, int pos) {
  const char *ib = inbox_at(P, P.ws, d);
  const long long off = __ldcg((const long long *)ib + 1);
  const int f = __ffs(mask) - 1;
  const int ef = __shfl_sync(0xffffffffu, e, f), pf = __shfl_sync(0xffffffffu, pos, f);
  if (off < 0) return nullptr;
  const int32_t rb = __ldcg((const int32_t *)(ib + 16) + (ef - d * P.L));
  const size_t bytes = P.wire == SY_MOE_WIRE_BF16 ? (size_t)P.hidden * 2 : (size_t)P.hidden;
  return base + P.wl.arena + (size_t)off + (size_t)(rb + pf) * bytes;
}

/* Every thread of a role, at the dispatch's end: the unit that ends last counts the call. */
template <bool RM>
__device__ __forceinline__ void inplace_end(const ht_params &P, uint64_t call) {
  role_sync<RM>(P);
  if (role_tid<RM>(P) != 0) return;
  if (atom_add_acq_rel_gpu(&P.local->disp_done, 1u) != (unsigned)role_units(P) - 1) return;
  P.local->disp_done = 0;
  P.local->dispatches = call;
}

/* The combine's backward, a warp: the owner's grad_out row g (a ring slot: CG; or this rank's own grad_out) into
 * the gradient of each of n rows (lanes [0, n) of `row`): bf16(w_r x g) or g as is, and the dot product of g
 * with rows_in[r] in the header's order (ref/moe_ht_ref.c: sy__moe_ht_scale_row, sy__moe_ht_dot): lane l's
 * partial sum takes the 8 elements of every 32nd 16-byte piece, the lanes' sums meet by a butterfly. */
/* SY_HT_GRAD_ONCE (build time; 1, the default): one pass over g serves up to HT_GRAD_ROWS rows (it writes each
 * row's gradient and adds to each row's dot product); 0 (for measuring) reads g again for every row (from L2 for a
 * ring slot: __ldcg). Each row's dot product takes its pieces in the same order either way, so the bits are the
 * same. Run 38 (1 x H100, world 1, BF16, 4,096 tokens): combine_bwd 1,186 -> 1,120 us at 16 SMs, 500 -> 439-443 at
 * 132; run 39 (4 x H100, world 4, 16 SMs): 2,302-2,308 -> 2,203-2,211 us (tools/dev/runs/x-grad-once.sh). ptxas (sm_90,
 * the kernels at 128 registers), when measured: 2 rows a pass with 4 pieces in flight spilled 16 bytes in
 * sy_ht_dispatch (0 reads g again: none) and 40 in sy_ht_dispatch_hint (as with 0); 4 rows 60 and 68 (over the
 * ptxas_spills test's 64). The weighting of a gradient row is written in both forms (the ptx of a shared helper
 * differs: not taken unmeasured). */
#ifndef SY_HT_GRAD_ONCE
#define SY_HT_GRAD_ONCE 1
#endif
#if SY_HT_GRAD_ONCE
#ifndef SY_HT_GRAD_ROWS
#define SY_HT_GRAD_ROWS 2
#endif
#ifndef SY_HT_GRAD_ONCE_UNROLL
#define SY_HT_GRAD_ONCE_UNROLL 4
#endif
constexpr int HT_GRAD_ROWS = SY_HT_GRAD_ROWS;        /* rows a pass over g serves */
constexpr int HT_GO_UNROLL = SY_HT_GRAD_ONCE_UNROLL; /* g's pieces a lane loads at once */
static_assert(HT_GRAD_ROWS >= 1 && HT_GO_UNROLL >= 1, "SY_HT_GRAD_ROWS, SY_HT_GRAD_ONCE_UNROLL: at least 1");
template <bool CG>
__device__ void grad_write(const ht_params &P, const char *g, int row, int n) {
  const int lane = threadIdx.x & 31;
  const size_t bytes = (size_t)P.hidden * 2;
  const bool dot = P.grad_row_weights != nullptr;
  for (int r0 = 0; r0 < n; r0 += HT_GRAD_ROWS) {
    const int m = min(HT_GRAD_ROWS, n - r0);
    int r[HT_GRAD_ROWS];
    float w[HT_GRAD_ROWS], acc[HT_GRAD_ROWS];
#pragma unroll
    for (int j = 0; j < HT_GRAD_ROWS; j++) {
      r[j] = __shfl_sync(0xffffffffu, row, min(r0 + j, n - 1));
      w[j] = P.row_weights ? P.row_weights[r[j]] : 1.0f;
      acc[j] = 0.0f;
    }
    for (size_t base = (size_t)lane * 16; base < bytes; base += HT_GO_UNROLL * 512) {
      uint4 v[HT_GO_UNROLL];
#pragma unroll
      for (int u = 0; u < HT_GO_UNROLL; u++)
        if (base + u * 512 < bytes) v[u] = ld16<CG>(g + base + u * 512);
#pragma unroll
      for (int j = 0; j < HT_GRAD_ROWS; j++) {
        if (j >= m) break;
        char *o = (char *)P.out + (size_t)r[j] * bytes;
        const char *y = dot ? (const char *)P.rows_in + (size_t)r[j] * bytes : nullptr;
        uint4 yv[HT_GO_UNROLL];
#pragma unroll
        for (int u = 0; u < HT_GO_UNROLL; u++)
          if (dot && base + u * 512 < bytes) yv[u] = __ldg((const uint4 *)(y + base + u * 512));
#pragma unroll
        for (int u = 0; u < HT_GO_UNROLL; u++) {
          if (base + u * 512 >= bytes) continue;
          const uint32_t in[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
          uint4 out = v[u];
          if (P.row_weights) {
            uint32_t q[4];
            for (int k = 0; k < 4; k++) q[k] = pack_bf16(w[j] * bf16_lo(in[k]), w[j] * bf16_hi(in[k]));
            out = make_uint4(q[0], q[1], q[2], q[3]);
          }
          *(uint4 *)(o + base + u * 512) = out;
          if (!dot) continue;
          const uint32_t yw[4] = {yv[u].x, yv[u].y, yv[u].z, yv[u].w};
          for (int k = 0; k < 4; k++) {
            acc[j] = fmaf(bf16_lo(in[k]), bf16_lo(yw[k]), acc[j]);
            acc[j] = fmaf(bf16_hi(in[k]), bf16_hi(yw[k]), acc[j]);
          }
        }
      }
    }
    if (!dot) continue;
#pragma unroll
    for (int j = 0; j < HT_GRAD_ROWS; j++) {
      if (j >= m) break;
      for (int d = 16; d >= 1; d >>= 1) acc[j] = acc[j] + __shfl_xor_sync(0xffffffffu, acc[j], d);
      if (lane == 0) P.grad_row_weights[r[j]] = acc[j];
    }
  }
}
#else
constexpr int HT_GRAD_UNROLL = 4; /* g and rows_in: 8 loads a lane in flight */
template <bool CG>
__device__ void grad_write(const ht_params &P, const char *g, int row, int n) {
  const int lane = threadIdx.x & 31;
  const size_t bytes = (size_t)P.hidden * 2;
  const bool dot = P.grad_row_weights != nullptr;
  for (int i = 0; i < n; i++) {
    const int r = __shfl_sync(0xffffffffu, row, i);
    const float w = P.row_weights ? P.row_weights[r] : 1.0f;
    char *o = (char *)P.out + (size_t)r * bytes;
    const char *y = dot ? (const char *)P.rows_in + (size_t)r * bytes : nullptr;
    float acc = 0.0f;
    for (size_t base = (size_t)lane * 16; base < bytes; base += HT_GRAD_UNROLL * 512) {
      uint4 v[HT_GRAD_UNROLL], yv[HT_GRAD_UNROLL];
#pragma unroll
      for (int u = 0; u < HT_GRAD_UNROLL; u++) {
        if (base + u * 512 >= bytes) continue;
        v[u] = ld16<CG>(g + base + u * 512);
        if (dot) yv[u] = __ldg((const uint4 *)(y + base + u * 512));
      }
#pragma unroll
      for (int u = 0; u < HT_GRAD_UNROLL; u++) {
        if (base + u * 512 >= bytes) continue;
        const uint32_t in[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
        uint4 out = v[u];
        if (P.row_weights) {
          uint32_t q[4];
          for (int j = 0; j < 4; j++) q[j] = pack_bf16(w * bf16_lo(in[j]), w * bf16_hi(in[j]));
          out = make_uint4(q[0], q[1], q[2], q[3]);
        }
        *(uint4 *)(o + base + u * 512) = out;
        if (!dot) continue;
        const uint32_t yw[4] = {yv[u].x, yv[u].y, yv[u].z, yv[u].w};
        for (int j = 0; j < 4; j++) {
          acc = fmaf(bf16_lo(in[j]), bf16_lo(yw[j]), acc);
          acc = fmaf(bf16_hi(in[j]), bf16_hi(yw[j]), acc);
        }
      }
    }
    if (!dot) continue;
    for (int d = 16; d >= 1; d >>= 1) acc = acc + __shfl_xor_sync(0xffffffffu, acc, d);
    if (lane == 0) P.grad_row_weights[r] = acc;
  }
}
#endif

/* A warp: token t's messages into the rings of its nd destinations (slot[j] of ring (me -> dst[j], c)) and,
 * with `self`, its own rows here (the dispatch's rows, or the combine's backward's gradients), the token read
 * once for all of them (bf16 as is; FP8 quantised once; or the given E4M3 bytes and scales). sk: the warp's
 * sinks (shared memory). */
/* send_token inlined where the kernel sends and the own-token chunks out of line (a call: the kernel's parameters
 * are __grid_constant__, so a reference to them costs no copy), so that its call sites do not spill the kernel's
 * registers; SY_HT_SEND_INLINE=0 at build time swaps the two (measured slower, bench/NOTES.md). */
#ifndef SY_HT_SEND_INLINE
#define SY_HT_SEND_INLINE 1
#endif
#if SY_HT_SEND_INLINE
#define SY_HT_SEND_ATTR __forceinline__
#define SY_HT_OWN_ATTR  __noinline__
#else
#define SY_HT_SEND_ATTR __noinline__
#define SY_HT_OWN_ATTR
#endif
/* The sinks' stores (rows.cuh: SY_HT_STG, SY_HT_STG_ROLES): weak st.global in the kernels whose roles are blocks (RM
 * false), generic in those with both roles in a block. */
template <bool RM>
constexpr bool ht_stg = RM ? SY_HT_STG_ROLES != 0 : SY_HT_STG != 0;

template <bool HINT, int QPIPE, bool STG>
__device__ SY_HT_SEND_ATTR void send_token(const ht_params &P, int c, int t, const int *dst, const uint64_t *slot,
                                           int nd, bool self, const int32_t *rowbase_me, ht_sink *sk) {
  const int lane = threadIdx.x & 31, me = P.ctx.rank, L = P.L;
  const int32_t *ids = hsec(P, P.hl.ids) + (size_t)t * P.K, *pos = hsec(P, P.hl.pos) + (size_t)t * P.K;
  const int e = lane < P.K ? ids[lane] : -1;
  const float w = (lane < P.K && P.weights) ? P.weights[(size_t)t * P.K + lane] : 0.0f;
  const size_t po = P.wl.payload_offset, so = P.wl.scales_offset, pay = P.wl.msg_bytes - po;
  char *stage = P.staging ? ht_stage(P) : nullptr;
  bool puts = false;
  int ns = 0;
  __syncwarp(); /* the previous token's sinks are read */
  for (int j = 0; j < nd; j++) {
    char *pb = ht_peer(P, dst[j]);
    /* its ring slot; or (put path) a header of this warp's staging, the payload once for every put destination */
    char *m = pb ? ring_slot(P, pb, me, c, slot[j]) : stage + pay + (size_t)j * po;
    const bool here = e >= 0 && e / L == dst[j];
    const unsigned mask = __ballot_sync(0xffffffffu, here);
    if (here) {
      const int i = __popc(mask & ((1u << lane) - 1u));
      ((int4 *)(m + 16))[i] = make_int4(e - dst[j] * L, pos[lane], __float_as_int(w), lane);
    }
    if (lane == 0) *(int4 *)m = make_int4(t, __popc(mask), 0, 0);
    if (pb || !puts) {
      /* the payload: into the slot, or (in place) the receiver's row; the scales stay in the slot */
      char *row = pb && P.inplace ? inplace_row(P, pb, dst[j], mask, e, lane < P.K ? pos[lane] : 0) : nullptr;
      char *body = pb ? (row ? row : m + po) : stage;
      if (lane == 0) sk[ns] = ht_sink{body, (float *)((pb ? m + po : stage) + (so - po)), 1};
      ns++;
    }
    puts |= pb == nullptr;
  }
  int row = -1, k = -1, nself = 0;
  if (self) nself = self_rows(P, rowbase_me, t, row, k);
  const bool grads = P.mode == HT_COMBINE_BACKWARD;
  if (!grads && lane < nself) {
    P.recv.src[(size_t)row * 2] = me;
    P.recv.src[(size_t)row * 2 + 1] = t;
    P.recv.weights[row] = P.weights ? P.weights[(size_t)t * P.K + k] : 0.0f;
    const size_t rb = P.wire == SY_MOE_WIRE_BF16 ? (size_t)P.hidden * 2 : (size_t)P.hidden;
    sk[ns + lane] = row_sink(P, row, rb);
  }
  if (!grads) ns += nself;
  __syncwarp();
  if (ns == 0) {
  } else if (P.wire == SY_MOE_WIRE_BF16 || P.wire == SY_MOE_WIRE_FP8_GIVEN) {
    const size_t bytes = P.wire == SY_MOE_WIRE_BF16 ? (size_t)P.hidden * 2 : (size_t)P.hidden;
    warp_copy<false, STG>((const char *)P.tokens + (size_t)t * bytes, bytes, sk, ns);
    if (P.wire == SY_MOE_WIRE_FP8_GIVEN) {
      const int groups = P.hidden / SY_MOE_FP8_GROUP;
      warp_copy_scales<false, HINT, STG>(P.token_scales + (size_t)t * groups, groups, sk, ns);
    }
  } else {
    warp_quantise<HINT, FP8_RECIP_INLINE, QPIPE, STG>((const uint16_t *)P.tokens + (size_t)t * P.hidden, P.hidden,
                                                      P.wire == SY_MOE_WIRE_FP8_UE8M0, sk, ns);
  }
  if (grads && nself) grad_write<false>(P, (const char *)P.tokens + (size_t)t * P.hidden * 2, row, nself);
  if (!puts) return;
  __syncwarp();
  const size_t used =
      P.wire == SY_MOE_WIRE_BF16 ? (size_t)P.hidden * 2 : (so - po) + (size_t)(P.hidden / SY_MOE_FP8_GROUP) * 4;
  for (int j = 0; j < nd; j++) {
    if (ht_peer(P, dst[j])) continue;
    char *remote = ring_slot(P, P.ws, me, c, slot[j]); /* the slot's symmetric address */
    ht_put_warp(remote, stage + pay + (size_t)j * po, po, dst[j]);
    char *row = nullptr;
    if (P.inplace) { /* the payload to the receiver's row, the FP8 scales to the slot */
      const bool here = e >= 0 && e / L == dst[j];
      row = inplace_row(P, P.ws, dst[j], __ballot_sync(0xffffffffu, here), e, lane < P.K ? pos[lane] : 0);
    }
    if (!row) {
      ht_put_warp(remote + po, stage, used, dst[j]);
      continue;
    }
    ht_put_warp(row, stage, P.wire == SY_MOE_WIRE_BF16 ? (size_t)P.hidden * 2 : (size_t)P.hidden, dst[j]);
    if (P.wire != SY_MOE_WIRE_BF16)
      ht_put_warp(remote + so, stage + (so - po), (size_t)(P.hidden / SY_MOE_FP8_GROUP) * 4, dst[j]);
  }
}

/* Every thread of a role: each warp one token's rows if one is left; true if any warp had one, else false (and the
 * role draws no more). Every call site passes a barrier between two calls, which is what keeps q.left apart: it
 * changes only after the barrier at which every thread has learnt that no warp got a token (so each reads the same
 * q.left on entry). */
template <bool HINT, bool RM>
__device__ SY_HT_OWN_ATTR bool own_chunk(const ht_params &P, own_state &q, const int32_t *rowbase_me, ht_sink *sk) {
  if (!q.left) return false;
  const uint64_t pt = probe_now(P);
  uint64_t t = 0;
  if ((threadIdx.x & 31) == 0) t = ticket_draw(&P.local->own, q.base);
  t = __shfl_sync(0xffffffffu, t, 0);
  const bool got = t < (uint64_t)P.num_tokens;
  if (got) send_token<HINT, RM ? 0 : SY_HT_QPIPE, ht_stg<RM>>(P, 0, (int)t, nullptr, nullptr, 0, true, rowbase_me, sk);
  const bool any = role_sync_or<RM>(P, got);
  if (!any && role_tid<RM>(P) == 0) q.left = 0;
  if (any && P.probe) probe_add<RM>(P, PR_OWN, probe_now(P) - pt);
  return any;
}

/* Every thread of a role whose ring work is done: the tokens the queue has left, each warp on its own (its next
 * ticket drawn before it writes the one it holds), then the role's barrier. */
template <bool HINT, bool RM>
__device__ SY_HT_OWN_ATTR void own_drain(const ht_params &P, const own_state &q, const int32_t *rowbase_me,
                                         ht_sink *sk) {
  role_sync<RM>(P); /* q.left is settled */
  if (!q.left) return;
  const uint64_t pt = probe_now(P);
  const bool lead = (threadIdx.x & 31) == 0;
  uint64_t t = lead ? ticket_draw(&P.local->own, q.base) : 0;
  t = __shfl_sync(0xffffffffu, t, 0);
  while (t < (uint64_t)P.num_tokens) {
    uint64_t next = lead ? ticket_draw(&P.local->own, q.base) : 0; /* in flight while this token's rows are written */
    send_token<HINT, RM ? 0 : SY_HT_QPIPE, ht_stg<RM>>(P, 0, (int)t, nullptr, nullptr, 0, true, rowbase_me, sk);
    t = __shfl_sync(0xffffffffu, next, 0);
  }
  role_sync<RM>(P);
  if (P.probe) probe_add<RM>(P, PR_OWN, probe_now(P) - pt);
}

/* Warp 0: the batch's tokens' destination ranks other than this one (each once, in k order), a lane a token; then
 * each (token, destination) its ring index, in token order per destination (base[d] + the batch's earlier tokens
 * for d), a pass per destination the batch touches, lowest first, which also lists them (`touched`, ascending).
 * SY_HT_PLAN_SERIAL=1 at build time keeps the first form, thread 0 giving every index in turn (for measuring:
 * bench/NOTES.md, run 43). */
#ifndef SY_HT_PLAN_SERIAL
#define SY_HT_PLAN_SERIAL 0
#endif
template <bool RM>
__device__ __noinline__ void plan_batch(const ht_params &P, int t0, int nb, uint64_t *base, send_batch &B, int *touched,
                                        int &ntouched) {
  const int lane = threadIdx.x & 31, me = P.ctx.rank;
  if (role_warp<RM>(P) != 0) return;
  int nd = 0;
  if (lane < nb) {
    const int32_t *ids = hsec(P, P.hl.ids) + (size_t)(t0 + lane) * P.K;
    for (int k0 = 0; k0 < P.K; k0 += 8) {
      int e[8]; /* the loads in flight together, ahead of the list's shared-memory stores */
#pragma unroll
      for (int u = 0; u < 8; u++) e[u] = k0 + u < P.K ? __ldg(ids + k0 + u) : -1;
#pragma unroll
      for (int u = 0; u < 8; u++) {
        if (e[u] < 0 || e[u] / P.L == me) continue;
        const int d = e[u] / P.L;
        bool seen = false;
        for (int i = 0; i < nd; i++) seen |= B.dst[lane][i] == d;
        if (!seen) B.dst[lane][nd++] = d;
      }
    }
    B.ndst[lane] = nd;
  }
  __syncwarp();
#if SY_HT_PLAN_SERIAL
  if (lane != 0) return;
  ntouched = 0;
  for (int j = 0; j < nb; j++)
    for (int i = 0; i < B.ndst[j]; i++) {
      const int d = B.dst[j][i];
      B.slot[j][i] = base[d]++;
      bool listed = false;
      for (int q = 0; q < ntouched; q++) listed |= touched[q] == d;
      if (!listed) touched[ntouched++] = d;
    }
#else
  int nt = 0;
  for (int last = -1;;) {
    int mine = INT_MAX; /* this lane's lowest destination above the last pass's */
    for (int i = 0; i < nd; i++) {
      const int d = B.dst[lane][i];
      if (d > last && d < mine) mine = d;
    }
    const int d = __reduce_min_sync(0xffffffffu, mine);
    if (d == INT_MAX) break;
    int at = -1;
    for (int i = 0; i < nd; i++)
      if (B.dst[lane][i] == d) at = i;
    const unsigned has = __ballot_sync(0xffffffffu, at >= 0);
    if (at >= 0) B.slot[lane][at] = base[d] + __popc(has & ((1u << lane) - 1u));
    __syncwarp(); /* base[d] is read */
    if (lane == 0) base[d] += __popc(has), touched[nt] = d;
    nt++;
    last = d;
  }
  if (lane == 0) ntouched = nt;
#endif
}

/* Warp 0: whether every ring the batch touches has room now (index base[d] - 1 below head + R), a lane a ring. */
__device__ __forceinline__ bool batch_room(const ht_params &P, int c, const uint64_t *base, const int *touched,
                                           int ntouched) {
  bool ok = true;
  for (int i = threadIdx.x & 31; i < ntouched; i += 32) {
    const int d = touched[i];
    if (base[d] > HT_SLOTS && ld_acquire_sys(head_word(P, P.ws, d, c)) < base[d] - HT_SLOTS) ok = false;
  }
  return __all_sync(0xffffffffu, ok);
}

template <bool HINT, bool RM>
__device__ void send_part(const ht_params &P, int c, char *smem, const int32_t *rowbase_me, bool rows_ok,
                          ht_sink *sinks, own_state &q) {
  const int W = P.world_size, C = P.C, me = P.ctx.rank;
  uint64_t *base = (uint64_t *)smem; /* [W] the next index of ring (me -> d, c) */
  __shared__ send_batch B;
  __shared__ int touched[HT_BATCH * 32], ntouched, failed, room;
  for (int d = role_tid<RM>(P); d < W; d += role_threads<RM>(P)) base[d] = P.sent[(size_t)d * C + c];
  if (role_tid<RM>(P) == 0) failed = P.inplace && !inplace_wait(P, inplace_call(P));
  role_sync<RM>(P);
  if (failed) return;
  /* with the queue the own rows are the queue's; at world 1 no token has a message */
  const int end = W == 1 && P.own_queue ? 0 : chan_begin(c + 1, P.num_tokens, C);
  const int mid = P.own_queue ? end : own_mid(P, c);
  ht_sink *sk = sinks + (threadIdx.x / 32) * HT_MAX_SINKS;
  for (int t0 = chan_begin(c, P.num_tokens, C); t0 < end; t0 += HT_BATCH) {
    const int nb = min(HT_BATCH, end - t0);
    uint64_t pt = probe_now(P);
    const uint64_t own0 = probe_get<RM>(P, PR_OWN);
    plan_batch<RM>(P, t0, nb, base, B, touched, ntouched);
    if (P.probe) { /* the planning apart from the wait (a barrier of its own only when probing) */
      role_sync<RM>(P);
      const uint64_t now = probe_now(P);
      probe_add<RM>(P, PR_PLAN, now - pt);
      pt = now;
    }
    for (;;) { /* while a ring it needs is full, own rows from the queue */
      role_sync<RM>(P);
      if (role_warp<RM>(P) == 0) {
        const bool r = batch_room(P, c, base, touched, ntouched);
        if ((threadIdx.x & 31) == 0) room = r;
      }
      role_sync<RM>(P);
      if (room || !own_chunk<HINT, RM>(P, q, rowbase_me, sk)) break;
    }
    if (role_tid<RM>(P) == 0 && !room) /* nothing else to do: the bounded waits */
      for (int i = 0; i < ntouched && !failed; i++) {
        const int d = touched[i];
        if (base[d] > HT_SLOTS && !ht_wait(P, head_word(P, P.ws, d, c), base[d] - HT_SLOTS, OP_MOE_HT_SEND, d))
          failed = 1;
      }
    role_sync<RM>(P);
    if (failed) return;
    if (P.probe) probe_add<RM>(P, PR_WAIT, probe_now(P) - pt - (probe_get<RM>(P, PR_OWN) - own0)), pt = probe_now(P);
    for (int j = role_warp<RM>(P); j < nb; j += role_nwarps<RM>(P))
      send_token<HINT, RM ? 0 : SY_HT_QPIPE, ht_stg<RM>>(P, c, t0 + j, B.dst[j], B.slot[j], B.ndst[j],
                                                         rows_ok && t0 + j >= mid, rowbase_me, sk);
    role_sync<RM>(P);
    if (P.probe) {
      probe_add<RM>(P, PR_WORK, probe_now(P) - pt), pt = probe_now(P);
      probe_add<RM>(P, PR_ROUNDS, 1);
      probe_add<RM>(P, PR_ITEMS, nb);
    }
    if (role_tid<RM>(P) == 0 && ntouched) {
      bool remote = false;
      for (int i = 0; i < ntouched; i++) remote |= touched[i] != me;
      fence_acq_rel(remote);
      for (int i = 0; i < ntouched; i++) ht_publish(P, touched[i], c, base[touched[i]]);
    }
    role_sync<RM>(P);
    if (P.probe) probe_add<RM>(P, PR_SYNC, probe_now(P) - pt);
  }
  for (int d = role_tid<RM>(P); d < W; d += role_threads<RM>(P)) P.sent[(size_t)d * C + c] = base[d];
}

/* A warp expands one message from source s into its rows (the payload, the scales, {s, token} and weight). */
template <bool HINT, bool STG>
__device__ void recv_message(const ht_params &P, const char *m, int s, const int32_t *rowbase, int32_t *rows_out,
                             bool write, ht_sink *sk) {
  /* in place (the senders' payload already in the first row, which this rank's inbox entries announced: rows that
   * fit and recv.tokens in the arena) */
  const bool inplace = P.inplace && P.inplace_off >= 0;
  const int lane = threadIdx.x & 31;
  const bool fp8 = P.wire != SY_MOE_WIRE_BF16;
  const int groups = fp8 ? P.hidden / SY_MOE_FP8_GROUP : 0;
  /* the header, every entry slot (read only below n) and (FP8, up to 64 groups) the scales in one round trip */
  const int4 h = __ldcg((const int4 *)m); /* ring slots are rewritten within a kernel: past L1 */
  const int4 en = lane < P.kk ? __ldcg((const int4 *)(m + 16) + lane) : make_int4(0, 0, 0, 0);
  const float *msc = (const float *)(m + P.wl.scales_offset);
  const bool early = groups <= 64;
  const float sc0 = early && lane < groups ? __ldcg(msc + lane) : 0.0f;
  const float sc1 = early && lane + 32 < groups ? __ldcg(msc + lane + 32) : 0.0f;
  const int t = h.x, n = h.y;
  int row = -1;
  float w = 0.0f;
  if (lane < n) {
    row = rowbase[(size_t)s * P.L + en.x] + en.y;
    w = __int_as_float(en.z);
  }
  if (lane < P.kk) rows_out[lane] = lane < n && write ? row : -1;
  if (!write) return;
  const size_t bytes = fp8 ? (size_t)P.hidden : (size_t)P.hidden * 2;
  __syncwarp(); /* the previous message's sinks are read */
  if (lane < n) {
    P.recv.src[(size_t)row * 2] = s;
    P.recv.src[(size_t)row * 2 + 1] = t;
    P.recv.weights[row] = w;
    sk[lane] = row_sink(P, row, bytes);
  }
  __syncwarp();
  const int r0 = __shfl_sync(0xffffffffu, row, 0);
  if (!inplace) warp_copy<true, STG>(m + P.wl.payload_offset, bytes, sk, n);
  else if (n > 1) /* the first row, written by the sender (ordered before the tail this warp's block acquired) */
    warp_copy<true, STG>((const char *)P.recv.tokens + (size_t)r0 * bytes, bytes, sk + 1, n - 1);
  if (!fp8) return;
  if (early) {
    for (int i = 0; i < n; i++) {
      if (lane < groups) sink_scale<HINT, STG>(sk[i], lane, sc0);
      if (lane + 32 < groups) sink_scale<HINT, STG>(sk[i], lane + 32, sc1);
    }
    return;
  }
  warp_copy_scales<true, HINT, STG>((const float *)(m + P.wl.scales_offset), groups, sk, n);
}

/* The combine's backward: a warp turns one message (the owner's grad_out row) into the gradient of each row it
 * reached in the forward dispatch (the handle's recv_rows). */
__device__ void recv_grad(const ht_params &P, const char *m, const int32_t *rows) {
  const int lane = threadIdx.x & 31;
  const int row = lane < P.kk ? rows[lane] : -1;
  const int n = __popc(__ballot_sync(0xffffffffu, row >= 0));
  grad_write<true>(P, m + P.wl.payload_offset, row, n);
}

/* The combine's backward: grad_row_weights of the padding rows of the experts block c owns, 0. */
template <bool RM>
__device__ void grad_padding(const ht_params &P, int c) {
  if (!P.grad_row_weights) return;
  const int32_t *counts = hsec(P, P.hl.recv_counts), *offsets = hsec(P, P.hl.offsets);
  const int stride = P.recv.expert_stride;
  for (int e = c; e < P.L; e += P.C) {
    int64_t n = 0;
    for (int s = 0; s < P.world_size; s++) n += counts[(size_t)s * P.L + e];
    const int64_t first = (stride ? (int64_t)e * stride : offsets[e]) + n;
    const int64_t end = stride ? (int64_t)(e + 1) * stride : offsets[e + 1];
    for (int64_t r = first + role_tid<RM>(P); r < end; r += role_threads<RM>(P)) P.grad_row_weights[r] = 0.0f;
  }
}

template <bool HINT, bool RM>
__device__ void recv_part(const ht_params &P, int c, char *smem, const int32_t *rowbase, bool rows_ok, ht_sink *sinks,
                          own_state &q) {
  const int W = P.world_size, C = P.C, me = P.ctx.rank;
  uint64_t *cons = (uint64_t *)smem;     /* [W] */
  int32_t *left = (int32_t *)(cons + W); /* [W] messages of this call still to come */
  int32_t *done = left + W;              /* [W] messages taken in this call */
  int32_t *mbase = done + W;             /* [W] the first message index of this channel at s */
  const int32_t *chan = hsec(P, P.hl.chan_tokens);
  for (int s = role_tid<RM>(P); s < W; s += role_threads<RM>(P)) {
    cons[s] = P.consumed[(size_t)s * C + c];
    left[s] = s == me ? 0 : chan[(size_t)s * C + c]; /* this rank's own tokens take no ring */
    done[s] = 0;
    int b = 0;
    for (int j = 0; j < c; j++) b += chan[(size_t)s * C + j];
    mbase[s] = b;
  }
  ht_sink *sk = sinks + (threadIdx.x / 32) * HT_MAX_SINKS;
  if (P.mode == HT_DISPATCH && rows_ok) recv_outputs<RM>(P, c);
  if (P.mode == HT_COMBINE_BACKWARD && rows_ok) grad_padding<RM>(P, c);
  /* without the queue, this rank's own tokens of the channel's first part: their rows (or gradients) */
  const int mid = P.own_queue ? chan_begin(c, P.num_tokens, C) : own_mid(P, c);
  const uint64_t pt = probe_now(P);
  for (int t = chan_begin(c, P.num_tokens, C) + role_warp<RM>(P); rows_ok && t < mid; t += role_nwarps<RM>(P))
    send_token<HINT, RM ? 0 : SY_HT_QPIPE, ht_stg<RM>>(P, c, t, nullptr, nullptr, 0, true, rowbase + (size_t)me * P.L,
                                                       sk);
  if (P.probe) {
    role_sync<RM>(P);
    probe_add<RM>(P, PR_OWN, probe_now(P) - pt);
  }
  const bool write = rows_ok; /* else the messages are consumed and nothing is written */
  int32_t *take = mbase + W;  /* [W] messages this round takes from each source */
  int32_t *recv_rows = hsec(P, P.hl.recv_rows);
  const int32_t *rowbase_me = rowbase + (size_t)me * P.L;
  serve_rounds<RM>(
      P, left, take,
      [&]() { return own_chunk<HINT, RM>(P, q, rowbase_me, sk); }, /* a round without messages: own rows */
      [&](int s) {                                                 /* the messages in source s's ring */
                   const uint64_t avail = ld_acquire_sys(tail_word(P, P.ws, s, c)) - cons[s];
                   return (int)min((uint64_t)min(left[s], HT_PER_PEER), avail);
      },
      [&](int s, int j) {
        const char *m = ring_slot(P, P.ws, s, c, cons[s] + j);
        int32_t *rows = recv_rows + (((size_t)s * P.T) + mbase[s] + done[s] + j) * P.kk;
        if (P.mode == HT_DISPATCH) recv_message<HINT, ht_stg<RM>>(P, m, s, rowbase, rows, write, sk);
        else if (write) recv_grad(P, m, rows);
      },
      [&](int s, int k) { /* the slots are read */
                          cons[s] += k;
                          left[s] -= k;
                          done[s] += k;
      },
      [&](int s) { ht_give_back(P, s, c, cons[s]); }, /* hand them back */
      [&](int s) {
        report_error(P.ctx, SY_ERR_TIMEOUT, OP_MOE_HT_RECV, s, 0, cons[s] + 1,
                     ld_acquire_sys(tail_word(P, P.ws, s, c)));
      });
  for (int s = role_tid<RM>(P); s < W; s += role_threads<RM>(P)) P.consumed[(size_t)s * C + c] = cons[s];
}

/* Shared memory: [W] uint64 and 4 [W] int32 of per-peer state, then rowbase [W][L]; and each warp's sinks. The
 * kernel in two instances: HINT, the rows' FP8 scales under an L2 policy (rows.cuh: sink_scale), or not. */
template <bool HINT, bool RM>
__device__ __forceinline__ void dispatch_kernel(const ht_params &P) {
  pdl_wait();
  extern __shared__ __align__(16) char smem[];
  __shared__ ht_sink sinks[HT_DWARPS * HT_MAX_SINKS];
  if (!ht_handle_ok(P, P.mode == HT_COMBINE_BACKWARD)) return;
  int32_t *rowbase = (int32_t *)(smem + (size_t)P.world_size * 24);
  const bool rows_ok = rows_setup(P, rowbase);
  if (P.inplace) inplace_publish(P, rowbase, rows_ok, inplace_call(P));
  probe_begin<RM>(P);
  __shared__ own_state qs[RM ? 2 : 1];
  own_begin(P, qs, RM ? 2 : 1, rows_ok);
  /* from here on each role by itself (role_sync, never __syncthreads) */
  const int role = role_of<RM>(P);
  own_state &q = qs[RM ? role : 0];
  for (int c = role_chan<RM>(P); c < P.C; c += P.B) { /* its channels in turn (P.B < P.C: a call's smaller budget) */
    if (role == 0)                                    /* by warps, its per-peer state apart from role 1's */
      send_part<HINT, RM>(P, c, RM ? smem + P.role_state : smem, rowbase + (size_t)P.ctx.rank * P.L, rows_ok, sinks, q);
    else recv_part<HINT, RM>(P, c, smem, rowbase, rows_ok, sinks, q);
    role_sync<RM>(P); /* the channel's per-peer state is read before the next one's is written */
  }
  ht_sink *sk = sinks + (threadIdx.x / 32) * HT_MAX_SINKS; /* the ring work is done: what the queue has left */
  own_drain<HINT, RM>(P, q, rowbase + (size_t)P.ctx.rank * P.L, sk);
  own_end<RM>(P);
  if (P.inplace) inplace_end<RM>(P, inplace_call(P));
  probe_end<RM>(P);
  if (P.mode == HT_DISPATCH && role_unit<RM>(P) == P.B && role_tid<RM>(P) == 0) { /* for the combines' check */
    sy_moe_ht_handle_header_t *h = (sy_moe_ht_handle_header_t *)P.handle;
    h->expert_stride = P.recv.expert_stride;
    h->dispatched = 1;
  }
}

} // namespace

__global__ void __launch_bounds__(HT_DTHREADS) sy_ht_dispatch(const __grid_constant__ ht_params P) {
  dispatch_kernel<false, false>(P);
}
__global__ void __launch_bounds__(HT_DTHREADS) sy_ht_dispatch_hint(const __grid_constant__ ht_params P) {
  dispatch_kernel<true, false>(P);
}
__global__ void __launch_bounds__(HT_DTHREADS) sy_ht_dispatch_roles(const __grid_constant__ ht_params P) {
  dispatch_kernel<false, true>(P);
}
__global__ void __launch_bounds__(HT_DTHREADS) sy_ht_dispatch_hint_roles(const __grid_constant__ ht_params P) {
  dispatch_kernel<true, true>(P);
}

/* A warp a token (uniform per warp), the numbers of quantise16 — what send_token's in-kernel quantisation writes
 * into every sink, written once here for the dispatch to copy. */
__global__ void __launch_bounds__(HT_DTHREADS) sy_ht_quantise(ht_quant_params Q) {
  pdl_wait();
  const int groups = Q.hidden / SY_MOE_FP8_GROUP, warps = (int)gridDim.x * HT_DWARPS;
  for (int t = (int)(blockIdx.x * HT_DWARPS + threadIdx.x / 32); t < Q.num_tokens; t += warps) {
    const ht_sink s = {Q.q + (size_t)t * Q.hidden, Q.qs + (size_t)t * groups, 1};
    warp_quantise<false, FP8_RECIP_AHEAD, SY_HT_QPIPE, SY_HT_STG_ROLES != 0>(Q.tokens + (size_t)t * Q.hidden, Q.hidden,
                                                                             Q.ue8m0 != 0, &s, 1);
  }
}
