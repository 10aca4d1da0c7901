/*
 * bulk.cuh — the dispatch kernel's copies by the bulk copy engine (TMA, cp.async.bulk): a warp moves a payload
 * through HT_BULK_BUFS chunks of its own shared memory — lane 0 loads a chunk with one instruction (an mbarrier
 * counts its bytes), then a lane per destination stores it with one instruction — where the register copy
 * (rows.cuh: warp_copy) spends a load and a store per 16 bytes a lane. The destinations may be rows here, ring
 * slots of a peer reached by NVLink, or the put path's staging. SY_HT_BULK=0 keeps the register copy.
 *
 * Proxies (PTX memory model): the bulk copies are the async proxy. A ring slot that a peer wrote by ordinary
 * stores and this rank then acquired (its tail) is read by a bulk load only after fence.proxy.async.global; bulk
 * stores are complete (wait_group 0) and fenced the same way before the block's ordinary release of the tail
 * (bulk_drain), and before the kernel ends.
 */
#ifndef SY_CUDA_MOE_HT_BULK_CUH
#define SY_CUDA_MOE_HT_BULK_CUH

#include <stdint.h>

#include "cuda/moe_ht/rows.cuh"

namespace sy {

constexpr int HT_BULK_BUFS = 2;       /* chunks a warp keeps in flight */
constexpr int HT_BULK_CHUNK = 4096;   /* bytes a chunk: 8 KiB a warp, 128 KiB a block of 16 warps */

/* A warp's part of the bulk area (dynamic shared memory at P.bulk_at): its barriers, then its chunks. */
struct ht_bulk_warp {
  uint64_t bar[HT_BULK_BUFS];
  uint32_t parity; /* bit b: the phase parity the next wait on bar[b] waits for */
  uint32_t pad[3];
  __align__(128) char buf[HT_BULK_BUFS][HT_BULK_CHUNK];
};

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bulk_fence_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

/* The whole warp, once per kernel, before its first bulk copy. */
__device__ __forceinline__ void bulk_init(ht_bulk_warp *w) {
  if ((threadIdx.x & 31) == 0) {
    for (int b = 0; b < HT_BULK_BUFS; b++)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&w->bar[b])) : "memory");
    w->parity = 0;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncwarp();
}

/* One lane: `bytes` (a multiple of 16, 16-byte aligned) from global src into the chunk, counted on bar. */
__device__ __forceinline__ void bulk_load(void *chunk, const void *src, uint32_t bytes, uint64_t *bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(chunk)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

/* Every lane: until the phase of bar with this parity has completed (the chunk's bytes are in shared memory). */
__device__ __forceinline__ void bulk_wait(uint64_t *bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

/* One lane: the chunk's bytes to global dst (a row here, a peer's ring slot, the staging), as a bulk group. */
__device__ __forceinline__ void bulk_store(void *dst, const void *chunk, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_addr(chunk)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* The calling thread's bulk stores: their reads of shared memory done (the chunks may be refilled). */
__device__ __forceinline__ void bulk_read_done() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }

/* The calling thread's bulk stores complete and ordered before its later ordinary accesses (any thread may call
 * it: one with no bulk group returns at once). Before a block barrier that precedes a release of their data. */
__device__ __forceinline__ void bulk_drain() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  bulk_fence_global();
}

/* Whether the bulk copy can take src and every sink (16-byte aligned, a multiple of 16 bytes). */
__device__ __forceinline__ bool bulk_fits(const char *src, size_t bytes, const ht_sink *s, int n) {
  uintptr_t a = (uintptr_t)src | (uintptr_t)bytes;
  for (int i = 0; i < n; i++) a |= (uintptr_t)s[i].body;
  return (a & 15) == 0;
}

/* The whole warp: `bytes` from global src into each of the n sinks' bodies through the warp's chunks. Returns
 * once the chunks may be reused (the stores may still be landing: bulk_drain before publishing them). */
__device__ __forceinline__ void warp_copy_bulk(const char *src, size_t bytes, const ht_sink *s, int n,
                                               ht_bulk_warp *w) {
  const int lane = threadIdx.x & 31;
  const int chunks = (int)((bytes + HT_BULK_CHUNK - 1) / HT_BULK_CHUNK);
  auto size = [&](int k) { return (uint32_t)min((size_t)HT_BULK_CHUNK, bytes - (size_t)k * HT_BULK_CHUNK); };
  uint32_t parity = w->parity;
  __syncwarp();
  if (lane == 0) {
    bulk_fence_global(); /* src may be a ring slot a peer wrote by ordinary stores */
    for (int k = 0; k < chunks && k < HT_BULK_BUFS; k++)
      bulk_load(w->buf[k], src + (size_t)k * HT_BULK_CHUNK, size(k), &w->bar[k]);
  }
  for (int k = 0; k < chunks; k++) {
    const int b = k % HT_BULK_BUFS;
    bulk_wait(&w->bar[b], (parity >> b) & 1u);
    parity ^= 1u << b;
    for (int i = lane; i < n; i += 32) bulk_store(s[i].body + (size_t)k * HT_BULK_CHUNK, w->buf[b], size(k));
    if (k + HT_BULK_BUFS < chunks) {
      if (lane < n) bulk_read_done();
      __syncwarp(); /* every lane past its wait and its stores' reads: the chunk may be refilled */
      if (lane == 0)
        bulk_load(w->buf[b], src + (size_t)(k + HT_BULK_BUFS) * HT_BULK_CHUNK, size(k + HT_BULK_BUFS), &w->bar[b]);
    }
  }
  if (lane < n) bulk_read_done();
  __syncwarp();
  if (lane == 0) w->parity = parity;
  __syncwarp();
}

} // namespace sy

#endif
