/*
 * pipe.cuh — a warp's gather of 16-byte pieces from up to 32 sources through shared memory: the combine's sums
 * (a partial over a message's rows, the owner's sum over its ranks' partials) read their inputs this way.
 *
 * Why: a sum over a few 14 KiB rows done from registers is a chain of dependent passes (load a piece a row, wait,
 * add, store, again 28 times a row), and with 128 registers a thread an SM keeps under 64 KiB in flight, and
 * none while it adds (ncu on 78917cd's combine at 16 SMs: 9.2 of 13.6 cycles between a warp's instructions spent
 * waiting for global loads, 17 GB/s an SM). Here each lane streams its own 16-byte columns of every source by
 * cp.async into its own ring of HT_PIPE_SLOTS slots, HT_PIPE_DEPTH pieces ahead of the one it adds: no registers
 * hold the pieces in flight, and the loads of the next pieces run while the lane adds. A lane reads back only the
 * slots it filled, so the warp never synchronises inside the loop; cp.async.wait_group orders a piece's copy
 * before its read.
 *
 * The order of the pieces: pass-major (a pass is HT_PIPE_PASS bytes of the row, a piece HT_PIPE_VEC vectors a
 * lane), source-minor, so a caller's per-pass arithmetic sees its sources in the table's order — the same order as
 * the fixed-order sums of ref/ (switchyard.h: the combine's order), bit for bit.
 */
#ifndef SY_CUDA_MOE_HT_PIPE_CUH
#define SY_CUDA_MOE_HT_PIPE_CUH

#include <stdint.h>

namespace sy {

/* A piece: HT_PIPE_VEC 16-byte vectors a lane (SY_HT_PIPE_VEC at build time, 1 or 2; bench/NOTES.md, "MoE high
 * throughput: the combine's pipe, leaner"): a pass covers 512 x HT_PIPE_VEC bytes of the row, a lane's vector h of
 * a pass at 512 h + 16 lane. The per-piece work (the copies' issue, the wait, the slot and offset arithmetic, the
 * loop) is paid once a piece, so two vectors a piece halve it per byte (the combine is bound by its instructions:
 * −31% at 16 SMs against one vector in the nested loop before). A lane's ring, and the pieces it has in flight (a
 * slot is refilled at least one piece after it was read). SY_HT_PIPE_SLOTS / SY_HT_PIPE_DEPTH at build time are for
 * measuring other depths. */
#ifndef SY_HT_PIPE_VEC
#define SY_HT_PIPE_VEC 2
#endif
#ifndef SY_HT_PIPE_SLOTS
#define SY_HT_PIPE_SLOTS (16 / SY_HT_PIPE_VEC)
#define SY_HT_PIPE_DEPTH (16 / SY_HT_PIPE_VEC - 2)
#endif
constexpr int HT_PIPE_VEC = SY_HT_PIPE_VEC;
constexpr int HT_PIPE_SLOTS = SY_HT_PIPE_SLOTS;
constexpr int HT_PIPE_DEPTH = SY_HT_PIPE_DEPTH;
constexpr int HT_PIPE_PASS = 512 * HT_PIPE_VEC; /* bytes of the row a pass covers */
static_assert(HT_PIPE_VEC == 1 || HT_PIPE_VEC == 2, "SY_HT_PIPE_VEC: 1 or 2");
static_assert(HT_PIPE_DEPTH >= 1 && HT_PIPE_DEPTH < HT_PIPE_SLOTS - 1 && HT_PIPE_DEPTH <= 32, "pipe ring");
static_assert((HT_PIPE_SLOTS & (HT_PIPE_SLOTS - 1)) == 0, "SY_HT_PIPE_SLOTS: a power of two");

/* One source: its base (a row, or a ring slot's payload) and its weight. */
struct ht_src {
  const char *p;
  float w;
};

/* A warp's pipe in shared memory: the source table (written by the warp, read by every lane) and the lanes'
 * rings, slot-major and then vector-major, so a slot's vector h of the 32 lanes is 512 contiguous bytes (no bank
 * conflicts on a lane's 16-byte reads). */
struct ht_pipe {
  ht_src src[32];
  uint4 ring[HT_PIPE_SLOTS][HT_PIPE_VEC][32];
};

/* The data kernels' dynamic shared memory: their per-peer state and rowbase (W x 24 + E x 4 bytes, rows.cuh),
 * then, where a kernel gathers through pipes (the combine), a pipe a warp from this offset on. */
__host__ __device__ inline size_t ht_pipes_at(int W, int E) { return ((size_t)W * 24 + (size_t)E * 4 + 15) / 16 * 16; }

/* This warp's pipe. The pipes start at a shared address aligned to SY_HT_PIPE_ALIGN bytes (the dynamic shared
 * memory holds that many bytes more; 0: no alignment, for measuring). Where the dynamic shared memory starts
 * depends on the static shared memory the device link gives the kernel, which every __shared__ variable of a
 * function that several kernels inline can move: adding sy_ht_combine_ahead moved it by 1,840 bytes, and the
 * unchanged sy_ht_combine took 10% longer at world 1 with 132 SMs (144 -> 159 us on an H200; its SASS identical).
 * With the pipes at a 1,024-byte boundary it took 139.5-139.9 us, and the ahead instance 135.0-135.1 (run 37).
 * Why the pipes' alignment matters that much is not known. */
#ifndef SY_HT_PIPE_ALIGN
#define SY_HT_PIPE_ALIGN 1024
#endif
static_assert(SY_HT_PIPE_ALIGN == 0 || (SY_HT_PIPE_ALIGN % 16 == 0 && (SY_HT_PIPE_ALIGN & (SY_HT_PIPE_ALIGN - 1)) == 0),
              "SY_HT_PIPE_ALIGN: 0 or a power of two of at least 16");
__device__ __forceinline__ ht_pipe &ht_warp_pipe(int W, int E) {
  extern __shared__ __align__(16) char smem[];
  char *at = smem + ht_pipes_at(W, E);
  constexpr unsigned a = SY_HT_PIPE_ALIGN;
  if constexpr (a != 0) at += (a - ((unsigned)__cvta_generic_to_shared(at) & (a - 1u))) & (a - 1u);
  return ((ht_pipe *)at)[threadIdx.x / 32];
}

__device__ __forceinline__ void cp_async16(uint32_t smem, const void *gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint4 lds128(uint32_t smem) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem)
               : "memory");
  return v;
}

/* Each lane on its own (no warp-wide step inside): for every pass (off = pass * HT_PIPE_PASS + lane * 16 while the
 * warp has bytes left) and every source i in [0, n) in order, piece(off, i, v) with v[h] the source's 16 bytes at
 * off + 512 h (so that each copy instruction of the warp reads 512 contiguous bytes; undefined where off + 512 h >=
 * bytes: the caller writes nothing there and mixes nothing of it into other lanes' values), then done(off). The
 * table pp.src[0, n) is the caller's, written before and visible to every lane (__syncwarp); the sources must not
 * change until the call returns (every copy is complete then). bytes < 2^31, a multiple of 16.
 *
 * The pieces are one flat sequence, k = pass * n + i, piece k in slot k mod HT_PIPE_SLOTS, HT_PIPE_DEPTH pieces
 * issued ahead of the one read. */
template <class Piece, class Done>
__device__ __forceinline__ void pipe_gather(ht_pipe &pp, int n, size_t bytes, Piece piece, Done done) {
  const int lane = threadIdx.x & 31, nb = (int)bytes;
  const int passes = (nb + HT_PIPE_PASS - 1) / HT_PIPE_PASS;
  if (n <= 0) {
    for (int off = lane * 16, p = 0; p < passes; p++, off += HT_PIPE_PASS) done(off);
    return;
  }
  /* slot s, vector h of this lane: ring + 512 (s HT_PIPE_VEC + h) */
  const uint32_t ring = (uint32_t)__cvta_generic_to_shared(&pp.ring[0][0][lane]);
  const int total = passes * n;
  int ioff = lane * 16, isrc = 0; /* the next piece to issue: its offset and source */
  auto slot = [&](int k) { return ring + ((uint32_t)(k & (HT_PIPE_SLOTS - 1)) * HT_PIPE_PASS); };
  /* piece k's copies (none past the row's end), then its group */
  auto issue = [&](int k) {
    const char *g = pp.src[isrc].p + ioff;
    const uint32_t s = slot(k);
#pragma unroll
    for (int h = 0; h < HT_PIPE_VEC; h++)
      if (ioff + 512 * h < nb) cp_async16(s + 512 * h, g + 512 * h);
    cp_async_commit(); /* an empty group past the end keeps the count the wait relies on */
    if (++isrc == n) isrc = 0, ioff += HT_PIPE_PASS;
  };
#pragma unroll
  for (int d = 0; d < HT_PIPE_DEPTH; d++) issue(d);
  int off = lane * 16, i = 0;
  for (int k = 0; k < total; k++) {
    cp_async_wait<HT_PIPE_DEPTH - 1>(); /* piece k has landed */
    uint4 v[HT_PIPE_VEC];
    const uint32_t s = slot(k);
#pragma unroll
    for (int h = 0; h < HT_PIPE_VEC; h++) v[h] = lds128(s + 512 * h);
    issue(k + HT_PIPE_DEPTH);
    piece(off, i, v);
    if (++i == n) {
      done(off);
      i = 0;
      off += HT_PIPE_PASS;
    }
  }
}

} // namespace sy

#endif
