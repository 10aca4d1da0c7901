/*
 * probe.cu — the direct-store bandwidth reference for benchmarks: every rank writes a pattern into every
 * peer's copy of a symmetric buffer at once with plain 16-byte stores (no loads, no signals), so sy-bench can
 * put each operation's bandwidth beside what the links give in the same run.
 */
#include <nvshmem.h>

#include "cuda/backend.h"

namespace sy {

__global__ void __launch_bounds__(512) store_probe_kernel(char *buf, size_t bytes_per_peer, int rank, int world) {
  const int peers = world - 1;
  const int blocks_per_peer = gridDim.x / peers;
  const int k = blockIdx.x / blocks_per_peer, b = blockIdx.x % blocks_per_peer;
  if (k >= peers) return;
  const int p = (rank + 1 + k) % world;
  uint4 *dst = (uint4 *)nvshmem_ptr(buf + (size_t)rank * bytes_per_peer, p);
  if (!dst) return;
  const uint4 v = make_uint4(0x9E3779B9u ^ rank, (unsigned)p, 0x85EBCA6Bu, 0xC2B2AE35u);
  const size_t n = bytes_per_peer / 16;
  for (size_t i = (size_t)b * blockDim.x + threadIdx.x; i < n; i += (size_t)blocks_per_peer * blockDim.x) dst[i] = v;
}

} // namespace sy

/* buf: symmetric, at least world_size * bytes_per_peer bytes; rank r writes slot r of every peer. */
extern "C" sy_status_t sy__cuda_store_probe(sy_comm_t comm, void *buf, size_t bytes_per_peer, cudaStream_t stream) {
  if (comm->backend != SY_BACKEND_CUDA || comm->world_size < 2) return SY_ERR_UNSUPPORTED;
  sy::cuda_state *st = (sy::cuda_state *)comm->backend_state;
  const int peers = comm->world_size - 1;
  const int per_peer = st->num_sms / peers > 0 ? st->num_sms / peers : 1;
  sy::store_probe_kernel<<<per_peer * peers, 512, 0, stream>>>((char *)buf, bytes_per_peer, comm->rank,
                                                               comm->world_size);
  SY_CUDA_CHECK(cudaGetLastError());
  return SY_SUCCESS;
}

namespace sy {
__global__ void empty_kernel() {}
} // namespace sy

/* The launch floor for benchmarks: one empty kernel on the stream. */
extern "C" sy_status_t sy__cuda_empty_launch(cudaStream_t stream) {
  sy::empty_kernel<<<1, 32, 0, stream>>>();
  SY_CUDA_CHECK(cudaGetLastError());
  return SY_SUCCESS;
}
