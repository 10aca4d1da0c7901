/*
 * rows.cuh — the MoE high-throughput kernels' warp-wide data movement: a payload copied or quantised once into
 * several places (sinks: ring slots, put staging, rows here), and a token's own rows here.
 *
 * Bytes in flight decide these kernels' speed (one block of 16 warps an SM): a lane keeps HT_UNROLL 16-byte
 * loads in flight before it stores, and an FP8 pass loads 4 x 512 elements (16 a lane, a 128-element group
 * per 8 lanes) before it quantises.
 *
 * A rank's own tokens never go through a ring: the block that holds the token writes its rows here directly
 * (their rows are rowbase[me][e] + pos, ref/moe_ht_layout.h), and the combine sums them where it needs them.
 */
#ifndef SY_CUDA_MOE_HT_ROWS_CUH
#define SY_CUDA_MOE_HT_ROWS_CUH

#include "cuda/fp8.cuh"
#include "cuda/moe_ht/ht.cuh"

namespace sy {

/* Where one copy of a payload goes: its bytes and (FP8) its scales, group g at scale[g * scale_stride]. */
struct ht_sink {
  char *body;
  float *scale;
  int64_t scale_stride;
};

/* The sink of recv's row `row` (row_bytes of payload; its scales where the FP8 wires have them). */
__device__ __forceinline__ ht_sink row_sink(const ht_params &P, int32_t row, size_t row_bytes) {
  float *scale = nullptr;
  if (P.recv.scales)
    scale = P.recv.scales + (P.scales_row_major ? (size_t)row * (size_t)(P.hidden / SY_MOE_FP8_GROUP) : (size_t)row);
  return ht_sink{(char *)P.recv.tokens + (size_t)row * row_bytes, scale,
                 P.scales_row_major ? (int64_t)1 : (int64_t)P.recv.rows};
}

/* SY_HT_STG (build time, default 1), for the dispatch kernels whose roles are blocks (world 1; at world 2 above 48
 * SMs, from world 3 above 16, or with SY_HT_ROLES=0): the quantisation's and the copies' stores into sinks as weak st.global with no
 * memory clobber (st_global16, sink_scale), and a pass's scale stored by all 8 lanes of its group (the same value to
 * the same address: one store's worth of sectors) instead of one lane under a branch. A store through a generic
 * pointer may write shared memory for all the compiler knows, and the branch ends a block, so before it each sink's
 * fields were loaded from shared memory after the previous sink's stores: Nsight Compute found the FP8 dispatch's
 * warps at world 1 waiting on those loads most (bench/NOTES.md, run 53). Measured there (1 x H200, kernel us): the
 * FP8 dispatch at 132 SMs 113.2-113.3 -> 110.5-112.3, at 16 SMs 438.0 -> 430.5; BF16 level (163.4 / 163.7). 0: the form before. Every sink is global
 * memory (rows, ring slots, staging, a peer's through nvshmem_ptr). The stores stay weak, as the generic ones were;
 * what publishes them comes after a barrier (__syncthreads, bar.sync asm with a memory clobber, __syncwarp), a fence
 * (asm with a memory clobber) or a call (ht_put_warp, out of line), all with side effects, which a volatile asm is
 * not moved across (nvcc 13.0: checked in its PTX; a review found no ordinary access to the stored bytes by the same
 * thread before them). */
#ifndef SY_HT_STG
#define SY_HT_STG 1
#endif
/* SY_HT_STG_ROLES (build time, default 0): the same choice for the kernels with both roles in a block (SY_HT_ROLES,
 * from world 2) and for the quantisation ahead (sy_ht_quantise, the FP8 path from world 2). There the weak st.global
 * form measured slower (2 x H200, 16 SMs, 4,096 tokens, kernel us; bench/NOTES.md, run 57): the BF16 dispatch
 * 705.50 / 705.66 with it against 696.50 / 696.26 with generic stores, the FP8 dispatch 691.22 / 690.11 against
 * 677.50 / 677.29. That was a build with SY_HT_STG=0 for every kernel; with these defaults each kernel's PTX is
 * that of the same tree built the way measured faster at its world (the plain kernels SY_HT_STG=1, the roles
 * kernels and the quantisation SY_HT_STG=0: nvcc 13.0). The kernels take it as the template parameter STG
 * (dispatch.cu: ht_stg). */
#ifndef SY_HT_STG_ROLES
#define SY_HT_STG_ROLES 0
#endif
template <bool STG>
__device__ __forceinline__ void st_global16(void *p, uint4 v) {
  if constexpr (STG)
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
  else *(uint4 *)p = v;
}

/* Scale g of a sink. Group-major scales (recv.scales [hidden / 128][rows], the default) put a row's scales into
 * hidden / 128 sectors that other rows' stores complete later; row-major ones (stride 1) are contiguous. HINT
 * (SY_HT_SCALE_HINT, a template parameter: the dispatch kernel comes in two instances, since a run-time branch here
 * made the kernel spill): strided scale stores go under an L2 evict_last policy, so that a sector stays in L2 until
 * its rows are all written instead of leaving it part-written (bench/NOTES.md: faster where the dispatch holds most
 * SMs, slower at 16). */
template <bool HINT, bool STG>
__device__ __forceinline__ void sink_scale(const ht_sink &s, int g, float v) {
  float *p = s.scale + (size_t)g * s.scale_stride;
  if (HINT && s.scale_stride != 1) {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol)); /* pure: the compiler may hoist it */
    if constexpr (STG) asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;" ::"l"(p), "f"(v), "l"(pol));
    else asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;" ::"l"(p), "f"(v), "l"(pol) : "memory");
    return;
  }
  if constexpr (STG) asm volatile("st.global.f32 [%0], %1;" ::"l"(p), "f"(v));
  else *p = v;
}

constexpr int HT_MAX_SINKS = 64; /* a token's ring messages (<= top_k) and its rows here (<= top_k) */
constexpr int HT_UNROLL = 4;     /* 16-byte loads a lane keeps in flight (a copy) */

template <bool CG>
__device__ __forceinline__ uint4 ld16(const void *p) {
  return CG ? __ldcg((const uint4 *)p) : __ldg((const uint4 *)p);
}

/* The whole warp: `bytes` (a multiple of 16) from src into each of the n sinks' bodies. CG: src was written in
 * this kernel (a ring slot), so its loads go past L1. */
template <bool CG, bool STG>
__device__ __forceinline__ void warp_copy(const char *src, size_t bytes, const ht_sink *s, int n) {
  const size_t lane16 = (size_t)(threadIdx.x & 31) * 16;
  for (size_t base = lane16; base < bytes; base += HT_UNROLL * 512) {
    uint4 v[HT_UNROLL];
#pragma unroll
    for (int u = 0; u < HT_UNROLL; u++)
      if (base + u * 512 < bytes) v[u] = ld16<CG>(src + base + u * 512);
    for (int i = 0; i < n; i++) {
      char *d = s[i].body;
#pragma unroll
      for (int u = 0; u < HT_UNROLL; u++)
        if (base + u * 512 < bytes) st_global16<STG>(d + base + u * 512, v[u]);
    }
  }
}

/* The whole warp: `groups` fp32 scales from sc into each sink's scales. */
template <bool CG, bool HINT, bool STG>
__device__ __forceinline__ void warp_copy_scales(const float *sc, int groups, const ht_sink *s, int n) {
  for (int g = threadIdx.x & 31; g < groups; g += 32) {
    const float v = CG ? __ldcg(sc + g) : __ldg(sc + g);
    for (int i = 0; i < n; i++) sink_scale<HINT, STG>(s[i], g, v);
  }
}

/* The whole warp: a bf16 token of `hidden` elements (a multiple of 128) as E4M3 with an fp32 scale per 128
 * elements (cuda/fp8.cuh: quantise16, the numbers of ref/fp8.h) into each sink. PIPE > 0: passes of PIPE x 512
 * elements, the next pass's loads issued before this pass is quantised and stored, so a warp's loads stay in flight
 * across its stores; PIPE 0: passes of HT_QPASSES x 512 elements, every load of the pass in flight before the
 * first quantisation, none during the stores. Measured at world 1 (bench/NOTES.md, run 52): PIPE 1 takes the FP8
 * dispatch at 132 SMs from 115.3-116.7 to 111.7-112.6 us, at 16 SMs 439.5-440.3 to 435.9-438.2, quantised ahead
 * (sy_ht_quantise) 541.4-541.6 to 531.9-532.4; PIPE 2 measured no better and spills more. Kernels with both
 * roles in a block (SY_HT_ROLES, from world 2, where the tokens are quantised ahead by default) keep PIPE 0, which
 * spills less there. SY_HT_QPIPE (build time): the PIPE of the other kernels, 0 for the form before. */
#ifndef SY_HT_QPIPE
#define SY_HT_QPIPE 1
#endif
constexpr int HT_QPASSES = 4;
template <bool HINT, bool RECIP = FP8_RECIP_INLINE, int PIPE = 0, bool STG = SY_HT_STG>
__device__ __forceinline__ void warp_quantise(const uint16_t *src, int hidden, bool ue8m0, const ht_sink *s, int n) {
  const int lane = threadIdx.x & 31;
  constexpr int N = PIPE > 0 ? PIPE : HT_QPASSES; /* 512-element vectors a pass */
  auto load = [&](int base, uint4(&r)[N][2]) {    /* a pass's loads, issued at once */
#pragma unroll
                                               for (int u = 0; u < N; u++) {
                                                 const int el = base + u * 512 + lane * 16;
                                                 r[u][0] = r[u][1] = make_uint4(0, 0, 0, 0);
                                                 if (el < hidden) {
                                                   r[u][0] = __ldg((const uint4 *)(src + el));
                                                   r[u][1] = __ldg((const uint4 *)(src + el + 8));
                                                 }
                                               }
  };
  auto store = [&](int base,
                   const uint4(&r)[N][2]) { /* a pass quantised, into every sink */
#pragma unroll
                                            for (int u = 0; u < N; u++) {
                                              const int el =
                                                  base + u * 512 +
                                                  lane *
                                                      16; /* a group (8 lanes) is wholly in or out: hidden % 128 == 0 */
                                              float scale;
                                              const uint4 q = quantise16<RECIP>(r[u][0], r[u][1], ue8m0, &scale);
                                              if (el >= hidden) continue;
                                              for (int i = 0; i < n; i++) {
                                                st_global16<STG>(s[i].body + el, q);
                                                if (STG || (lane & 7) == 0)
                                                  sink_scale<HINT, STG>(s[i], el / SY_MOE_FP8_GROUP, scale);
                                              }
                                            }
  };
  if constexpr (PIPE > 0) {
    uint4 cur[N][2], nxt[N][2];
    load(0, cur);
    for (int base = 0; base < hidden; base += N * 512) { /* uniform: every lane runs every pass */
      if (base + N * 512 < hidden) load(base + N * 512, nxt);
      store(base, cur);
#pragma unroll
      for (int u = 0; u < N; u++) cur[u][0] = nxt[u][0], cur[u][1] = nxt[u][1];
    }
  } else {
    for (int base = 0; base < hidden; base += N * 512) {
      uint4 raw[N][2];
      load(base, raw);
      store(base, raw);
    }
  }
}

/* Token t's entries on this rank (ascending k): returns their count n (uniform); lane i < n gets the i-th one's
 * row (rowbase_me[local expert] + pos) and k, the other lanes -1. */
__device__ __forceinline__ int self_rows(const ht_params &P, const int32_t *rowbase_me, int t, int &row, int &k) {
  const int lane = threadIdx.x & 31, me = P.ctx.rank;
  const int32_t *ids = hsec(P, P.hl.ids) + (size_t)t * P.K, *pos = hsec(P, P.hl.pos) + (size_t)t * P.K;
  const int e = lane < P.K ? ids[lane] : -1;
  const int p = lane < P.K ? pos[lane] : 0; /* loaded beside the id, not after it */
  const bool here = e >= 0 && e / P.L == me;
  const unsigned mask = __ballot_sync(0xffffffffu, here);
  const int r = here ? rowbase_me[e - me * P.L] + p : -1;
  const int n = __popc(mask);
  const unsigned from = __fns(mask, 0, lane + 1); /* the (lane + 1)-th entry's k, or ~0 */
  const int got = __shfl_sync(0xffffffffu, r, from & 31);
  row = lane < n ? got : -1;
  k = lane < n ? (int)from : -1;
  return n;
}

/* Whether token t's experts are all on this rank, with at least one (its combine needs no other rank). */
__device__ __forceinline__ bool self_only(const ht_params &P, int t) {
  const int lane = threadIdx.x & 31, me = P.ctx.rank;
  const int e = lane < P.K ? hsec(P, P.hl.ids)[(size_t)t * P.K + lane] : -1;
  const unsigned here = __ballot_sync(0xffffffffu, e >= 0 && e / P.L == me);
  const unsigned away = __ballot_sync(0xffffffffu, e >= 0 && e / P.L != me);
  return here != 0 && away == 0;
}

/* Thread 0: one round of a block that serves many peers' rings: take[p] (what peer p offers now, at most
 * HT_PER_PEER) becomes what the round takes, HT_ROUND in all, peers served from `start` on (a rotating start, so
 * none starves); item i of the round is {peer, the item's place among that peer's}. Returns the items. */
__device__ __forceinline__ int plan_round(int W, int start, int32_t *take, int2 *items) {
  int n = 0;
  for (int q = 0; q < W; q++) {
    const int p = (start + q) % W;
    const int k = min(take[p], HT_ROUND - n);
    take[p] = k;
    for (int j = 0; j < k; j++) items[n++] = make_int2(p, j);
  }
  return n;
}

/* Where a round's hand-back (or publish) runs (build time; bench/NOTES.md, runs 34 and 35): 1 (the default) by the
 * block's last warp during the next round, while the other warps start its items (the counters are settled right
 * after the round as before, so the next round's offers see them; the fence still follows the barrier that ends the
 * round's reads and writes, so the release pattern is the same); 0 right after the round, by a thread a peer, before
 * the next round starts (its system-scope fence in every round's critical path). Measured on 4 x H200, world 4,
 * 16 SMs: 1 takes the BF16 dispatch from 1,170 to 1,153 us at 4,096 tokens, the dispatch kernel from 2,325 to 2,274
 * at 8,192, combine_bwd -0.7 to -1.1%; the combine and dispatch_bwd within noise. */
#ifndef SY_HT_SETTLE_AHEAD
#define SY_HT_SETTLE_AHEAD 1
#endif

/* The rounds of a block that serves many peers' rings (the dispatch's receiver, the combine's experts' side) until
 * every peer's `left` is 0: each round a thread per peer with messages left sets take[p] = offer(p) (what it may
 * take now, at most HT_PER_PEER), thread 0 plans the round (plan_round), the warps call work(p, j) for each item,
 * and after a barrier a thread per peer that took k > 0 calls settle(p, k) (its counters) and release(p) (the
 * hand-back or publish of those counters; SY_HT_SETTLE_AHEAD 1: in the next round, by the last warp). A round with
 * no item calls idle() on every thread (other work the block may do meanwhile: true if it did some). Bounded: after
 * the timeout with no item from any pending peer, stall(p) reports the first such peer. Returns whether the block
 * stopped early (a timeout or an abort). */
template <bool RM, class Idle, class Offer, class Work, class Settle, class Release, class Stall>
__device__ __forceinline__ bool serve_rounds(const ht_params &P, const int32_t *left, int32_t *take, Idle idle,
                                             Offer offer, Work work, Settle settle, Release release, Stall stall) {
  const int W = P.world_size;
  __shared__ int2 items[HT_ROUND];
  __shared__ int nitems, pending, stalled, next;
  __shared__ uint64_t since;
#if SY_HT_SETTLE_AHEAD
  __shared__ uint32_t owed[HT_MAX_WORLD / 32]; /* peers whose counters wait for their hand-back or publish */
  const bool releaser = role_warp<RM>(P) == role_nwarps<RM>(P) - 1;
  for (int i = role_tid<RM>(P); i < HT_MAX_WORLD / 32; i += role_threads<RM>(P)) owed[i] = 0;
  /* the last warp: what the rounds before have settled, released in its lanes' peers' order (the same thread for
   * a peer every time, so its head or tail stores stay in order) */
  auto release_owed = [&]() {
    const int lane = threadIdx.x & 31;
    for (int p = lane; p < W; p += 32)
      if (owed[p / 32] & (1u << (p % 32))) release(p);
    __syncwarp();
    for (int i = lane; i < (W + 31) / 32; i += 32) owed[i] = 0;
    __syncwarp();
  };
#endif
  if (role_tid<RM>(P) == 0) stalled = 0, since = 0;
  for (int round = 0;; round++) {
    role_sync<RM>(P);
    const uint64_t pt = probe_now(P);
    for (int p = role_tid<RM>(P); p < W; p += role_threads<RM>(P)) take[p] = left[p] > 0 ? offer(p) : 0;
    role_sync<RM>(P);
    if (role_tid<RM>(P) == 0) {
      pending = 0;
      for (int p = 0; p < W; p++) pending += left[p];
      nitems = plan_round(W, round % W, take, items);
      next =
          role_nwarps<RM>(P) - SY_HT_SETTLE_AHEAD; /* items [0, next) go a warp each; the rest to whichever warp is free
                                                first */
    }
    role_sync<RM>(P);
    if (pending == 0 || stalled) break;
    const int n = nitems;
#if SY_HT_SETTLE_AHEAD
    if (releaser) release_owed();
#endif
    const bool busy = n == 0 && idle(); /* every thread: other work while no item is there */
    /* items differ (a message's rows: 1 to top_k), so a warp takes the next one when it is done with its last
     * (measured: the combine's backward 10% faster at world 4 than the items in turn, bench/NOTES.md) */
    int first = role_warp<RM>(P);
#if SY_HT_SETTLE_AHEAD
    if (releaser) { /* released first: its first item from the counter */
      int got = 0;
      if ((threadIdx.x & 31) == 0) got = atomicAdd(&next, 1);
      first = __shfl_sync(0xffffffffu, got, 0);
    }
#endif
    for (int i = first; i < n;) {
      work(items[i].x, items[i].y);
      int got = 0;
      if ((threadIdx.x & 31) == 0) got = atomicAdd(&next, 1);
      i = __shfl_sync(0xffffffffu, got, 0);
    }
    role_sync<RM>(P); /* the round's items are done: settle them, a thread a peer */
    const uint64_t ps = probe_now(P);
    for (int p = role_tid<RM>(P); p < W; p += role_threads<RM>(P))
      if (take[p] > 0) {
        settle(p, take[p]);
#if SY_HT_SETTLE_AHEAD
        atomicOr(&owed[p / 32], 1u << (p % 32));
#else
        release(p);
#endif
      }
    if (P.probe) {
      /* the settling (counters, the hand-back or publish: thread 0's, which settles peer 0 with the first warp's
       * other settling threads) apart from the round's items; idle work has its own slot */
      if (!busy) probe_add<RM>(P, n > 0 ? PR_WORK : PR_WAIT, ps - pt);
      if (n > 0) probe_add<RM>(P, PR_SYNC, probe_now(P) - ps);
      probe_add<RM>(P, PR_ROUNDS, n > 0);
      probe_add<RM>(P, PR_ITEMS, n);
    }
    if (role_tid<RM>(P) == 0) {
      const uint64_t now = global_timer_ns();
      if (n > 0 || busy || since == 0) since = now;
      else if (aborted(P.ctx)) stalled = 1;
      else if (now - since > P.ctx.timeout_ns) {
        int p = 0;
        while (p < W && left[p] == 0) p++;
        stall(p);
        stalled = 1;
      }
    }
  }
#if SY_HT_SETTLE_AHEAD
  if (releaser) release_owed(); /* the last round's */
#endif
  role_sync<RM>(P);
  return stalled != 0;
}

/* The first token of channel c's half that the receiving block handles itself (its own rows or sums): channel
 * c's tokens [begin, mid) go to receiving block C + c, [mid, end) to sending block c, so a rank's own work is
 * split evenly between the two blocks of a channel. */
__device__ __forceinline__ int chan_mid(int c, int n, int C) {
  const int b = chan_begin(c, n, C), e = chan_begin(c + 1, n, C);
  return b + (e - b) / 2;
}

/* This call's rowbase [W][L] in shared memory: (source s, local expert e)'s first row here, from the handle's
 * counts and offsets (or the masked stride). Every block; returns whether the rows fit the caller's recv (block
 * 0 reports when not). */
__device__ __forceinline__ bool rows_setup(const ht_params &P, int32_t *rowbase) {
  const int W = P.world_size, L = P.L;
  const int32_t *counts = hsec(P, P.hl.recv_counts), *offsets = hsec(P, P.hl.offsets);
  const int stride = P.recv.expert_stride;
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (int e = threadIdx.x; e < L; e += blockDim.x) {
    int64_t at = stride ? (int64_t)e * stride : offsets[e], n = 0;
    for (int s = 0; s < W; s++) {
      rowbase[(size_t)s * L + e] = (int32_t)(at + n);
      n += counts[(size_t)s * L + e];
    }
    const int64_t end = stride ? (int64_t)(e + 1) * stride : offsets[e + 1];
    if ((stride && n > stride) || end > P.recv.rows) {
      bad = 1;
      if (blockIdx.x == 0)
        report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_HT_ROWS, stride && n > stride ? e : -1, 0,
                     stride && n > stride ? (uint64_t)stride : (uint64_t)P.recv.rows,
                     stride && n > stride ? (uint64_t)n : (uint64_t)end);
    }
  }
  __syncthreads();
  return !bad;
}

/* The handle belongs to this object's layout of num_tokens tokens and, with `dispatched` (the combines), a
 * dispatch recorded its rows with this recv's layout (every block checks; block 0 reports). */
__device__ __forceinline__ bool ht_handle_mine(const ht_params &P) {
  const sy_moe_ht_handle_header_t *h = (const sy_moe_ht_handle_header_t *)P.handle;
  return h->magic == SY_MOE_HT_HANDLE_MAGIC && h->object == P.object;
}
__device__ __forceinline__ bool ht_handle_ok(const ht_params &P, bool dispatched) {
  const sy_moe_ht_handle_header_t *h = (const sy_moe_ht_handle_header_t *)P.handle;
  const bool mine = ht_handle_mine(P);
  const bool ok = mine && h->num_tokens == P.num_tokens;
  /* the combines read the rows the handle's dispatch recorded, in that dispatch's layout */
  const bool rows = !dispatched || (h->dispatched != 0 && h->expert_stride == P.recv.expert_stride);
  if ((!ok || !rows) && blockIdx.x == 0 && threadIdx.x == 0) {
    if (!ok)
      report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_HT_HANDLE, -1, 0, mine ? (uint64_t)h->num_tokens : h->object,
                   mine ? (uint64_t)P.num_tokens : P.object);
    else
      report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_HT_NOT_DISPATCHED, h->dispatched, 0, (uint64_t)h->expert_stride,
                   (uint64_t)P.recv.expert_stride);
  }
  return ok && rows;
}

/* The dispatch's padding rows of the experts that channel c's receiving unit owns (src {-1, -1}, weight 0) and (c = 0)
 * the offsets and counts (dispatch.cu, pull.cu). */
template <bool RM>
__device__ void recv_outputs(const ht_params &P, int c) {
  const int W = P.world_size, L = P.L;
  const int32_t *counts = hsec(P, P.hl.recv_counts), *offsets = hsec(P, P.hl.offsets);
  const int stride = P.recv.expert_stride;
  for (int e = c; e < L; e += P.C) {
    int64_t n = 0;
    for (int s = 0; s < W; s++) n += counts[(size_t)s * L + e];
    const int64_t first = (stride ? (int64_t)e * stride : offsets[e]) + n;
    const int64_t end = stride ? (int64_t)(e + 1) * stride : offsets[e + 1];
    for (int64_t r = first + role_tid<RM>(P); r < end; r += role_threads<RM>(P)) {
      P.recv.src[r * 2] = -1;
      P.recv.src[r * 2 + 1] = -1;
      P.recv.weights[r] = 0.0f;
    }
  }
  if (c != 0) return;
  for (int e = role_tid<RM>(P); e <= L; e += role_threads<RM>(P))
    P.recv.expert_offsets[e] = stride ? e * stride : offsets[e];
  for (int e = role_tid<RM>(P); e < L; e += role_threads<RM>(P)) {
    int32_t n = 0;
    for (int s = 0; s < W; s++) n += counts[(size_t)s * L + e];
    P.recv.expert_counts[e] = n;
  }
}

} // namespace sy

#endif
