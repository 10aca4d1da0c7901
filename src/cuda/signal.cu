/*
 * signal.cu — the stream-ordered barrier and the bounded signal wait. Both keep their call number on the
 * device (dev_state), so a captured graph stays right on every replay, and neither needs a reset. Both launch
 * with programmatic dependent launch (exec/launch.cuh) like every kernel of the library.
 */
#include <nvshmem.h>
#include <nvshmemx.h>

#include "cuda/device.cuh"

namespace sy {

/* One block, one thread per peer: raise this rank's arrival at every peer (direct store where the peer is
 * load/store reachable, an NVSHMEM signal otherwise), then wait for every peer's arrival. */
__global__ void barrier_kernel(dev_ctx ctx) {
  pdl_begin();
  const int peer = threadIdx.x;
  const uint64_t call = ctx.state->barrier_calls + 1;
  uint64_t *arrive = (uint64_t *)(ctx.ctrl + ctx.layout.barrier);
  bool ok = true;
  for (int p = peer; p < ctx.world_size; p += blockDim.x) {
    nvshmem_quiet(); /* puts issued earlier by this rank are complete before we say we arrived */
    uint64_t *remote = (uint64_t *)peer_ctrl(ctx, arrive + ctx.rank, p);
    if (remote) {
      __threadfence_system();
      st_release_sys(remote, call);
    } else {
      nvshmemx_signal_op(arrive + ctx.rank, call, NVSHMEM_SIGNAL_SET, p);
    }
  }
  if (threadIdx.x == 0) trace(ctx, OP_BARRIER, PH_WAIT, true, -1, call);
  for (int p = peer; p < ctx.world_size && ok; p += blockDim.x)
    ok = wait_geq(ctx, arrive + p, call, OP_BARRIER, p, call);
  __syncthreads();
  if (threadIdx.x == 0) {
    trace(ctx, OP_BARRIER, PH_WAIT, false, -1, call);
    ctx.state->barrier_calls = call;
  }
}

struct signal_wait_params {
  dev_ctx ctx;
  const uint64_t *signal;
  uint64_t value;
};

__global__ void signal_wait_kernel(signal_wait_params P) {
  pdl_begin();
  trace(P.ctx, OP_SIGNAL_WAIT, PH_WAIT, true, -1, P.value);
  wait_geq(P.ctx, P.signal, P.value, OP_SIGNAL_WAIT, P.ctx.rank, P.value);
  trace(P.ctx, OP_SIGNAL_WAIT, PH_WAIT, false, -1, P.value);
}

sy_status_t launch_barrier(cuda_state *st, cudaStream_t stream) {
  int threads = st->ctx.world_size < 1024 ? st->ctx.world_size : 1024;
  threads = (threads + 31) / 32 * 32;
  return launch_pdl(barrier_kernel, 1, threads, 0, stream, st->ctx);
}

sy_status_t launch_signal_wait(cuda_state *st, uint64_t *signal, uint64_t value, cudaStream_t stream) {
  return launch_pdl(signal_wait_kernel, 1, 1, 0, stream, signal_wait_params{st->ctx, signal, value});
}

} // namespace sy
