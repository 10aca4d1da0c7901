/*
 * pipe.cuh — a warp's gather of 16-byte pieces from up to 32 sources through shared memory: the combine's sums
 * (a partial over a message's rows, the owner's sum over its ranks' partials) read their inputs this way.
 *
 * Why: a sum over a few 14 KiB rows done from registers is a chain of dependent passes (load a piece a row, wait,
 * add, store, again 28 times a row), and with 128 registers a thread an SM keeps under 64 KiB in flight, and
 * none while it adds (ncu on 78917cd's combine at 16 SMs: 9.2 of 13.6 cycles between a warp's instructions spent
 * waiting for global loads, 17 GB/s an SM). Here each lane streams its own 16-byte column of every source by
 * cp.async into its own ring of HT_PIPE_SLOTS slots, HT_PIPE_DEPTH pieces ahead of the one it adds: no registers
 * hold the pieces in flight, and the loads of the next pieces run while the lane adds. A lane reads back only the
 * slots it filled, so the warp never synchronises inside the loop; cp.async.wait_group orders a piece's copy
 * before its read.
 *
 * The order of the pieces: pass-major (a pass is 512 bytes of the row, a piece a lane), source-minor, so a
 * caller's per-pass arithmetic sees its sources in the table's order — the same order as the fixed-order sums of
 * ref/ (switchyard.h: the combine's order), bit for bit.
 */
#ifndef SY_CUDA_MOE_HT_PIPE_CUH
#define SY_CUDA_MOE_HT_PIPE_CUH

#include <stdint.h>

namespace sy {

/* A lane's ring, and the pieces it has in flight (a slot is refilled at least one piece after it was read).
 * SY_HT_PIPE_SLOTS / SY_HT_PIPE_DEPTH at build time are for measuring other depths (bench/NOTES.md). */
#ifndef SY_HT_PIPE_SLOTS
#define SY_HT_PIPE_SLOTS 16
#define SY_HT_PIPE_DEPTH 14
#endif
constexpr int HT_PIPE_SLOTS = SY_HT_PIPE_SLOTS;
constexpr int HT_PIPE_DEPTH = SY_HT_PIPE_DEPTH;
static_assert(HT_PIPE_DEPTH >= 1 && HT_PIPE_DEPTH < HT_PIPE_SLOTS && HT_PIPE_DEPTH <= 32, "pipe ring");

/* One source: its base (a row, or a ring slot's payload), its weight, and a tag the caller gives it (a rank). */
struct ht_src {
  const char *p;
  float w;
  int tag;
};

/* A warp's pipe in shared memory: the source table (written by the warp, read by every lane) and the lanes'
 * rings, slot-major so a slot's 32 pieces are 512 contiguous bytes. */
struct ht_pipe {
  ht_src src[32];
  uint4 ring[HT_PIPE_SLOTS][32];
};

/* The data kernels' dynamic shared memory: their per-peer state and rowbase (W x 24 + E x 4 bytes, rows.cuh),
 * then, where a kernel gathers through pipes (the combine), a pipe a warp from this offset on. */
__host__ __device__ inline size_t ht_pipes_at(int W, int E) { return ((size_t)W * 24 + (size_t)E * 4 + 15) / 16 * 16; }

/* This warp's pipe. */
__device__ __forceinline__ ht_pipe &ht_warp_pipe(int W, int E) {
  extern __shared__ __align__(16) char smem[];
  return ((ht_pipe *)(smem + ht_pipes_at(W, E)))[threadIdx.x / 32];
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* Each lane on its own (no warp-wide step inside): for every pass (off = pass * 512 + lane * 16 while the warp
 * has bytes left) and every source i in [0, n) in order, piece(off, i, v) with v the source's 16 bytes at off
 * (undefined where off >= bytes: the caller writes nothing there and mixes nothing of it into other lanes'
 * values), then done(off). The table pp.src[0, n) is
 * the caller's, written before and visible to every lane (__syncwarp); the sources must not change until the
 * call returns (every copy is complete then). */
template <class Piece, class Done>
__device__ __forceinline__ void pipe_gather(ht_pipe &pp, int n, size_t bytes, Piece piece, Done done) {
  const int lane = threadIdx.x & 31;
  const size_t lane16 = (size_t)lane * 16;
  const int passes = (int)((bytes + 511) / 512);
  int ipass = 0, isrc = 0;  /* the next piece to issue */
  int islot = 0, rslot = 0; /* the slots of the next piece to issue and to read */
  auto issue = [&]() {
    if (ipass < passes) {
      const size_t off = (size_t)ipass * 512 + lane16;
      if (off < bytes) cp_async16(&pp.ring[islot][lane], pp.src[isrc].p + off);
      if (++islot == HT_PIPE_SLOTS) islot = 0;
      if (++isrc == n) isrc = 0, ipass++;
    }
    cp_async_commit(); /* an empty group past the end keeps the count the wait relies on */
  };
  if (n > 0)
    for (int d = 0; d < HT_PIPE_DEPTH; d++) issue();
  for (int pass = 0; pass < passes; pass++) {
    const size_t off = (size_t)pass * 512 + lane16;
    for (int i = 0; i < n; i++) {
      cp_async_wait<HT_PIPE_DEPTH - 1>(); /* the oldest piece not yet read has landed */
      const uint4 v = pp.ring[rslot][lane];
      if (++rslot == HT_PIPE_SLOTS) rslot = 0;
      issue();
      piece(off, i, v);
    }
    done(off);
  }
}

} // namespace sy

#endif
