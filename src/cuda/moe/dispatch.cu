/*
 * dispatch.cu — the MoE dispatch kernels: dispatch_send, dispatch_recv, and the one-call dispatch that runs both
 * in one kernel. dispatch_send reads as its steps; each step's file says what its warps do.
 */
#include "cuda/moe/direct.cuh"
#include "cuda/moe/kernels.cuh"
#include "cuda/moe/recv.cuh"
#include "cuda/moe/send.cuh"

namespace sy {

/* dispatch_send's work; returns the call number it sent as. */
template <int MODE>
__device__ __forceinline__ uint64_t dispatch_send_body(const moe_params &P) {
  constexpr bool DIRECT = MODE & MODE_DIRECT, TR = MODE & MODE_TRACE;
  __shared__ send_shared sh;
  send_state S;
  send_begin<MODE>(P, S, sh);  /* ids checked into shared memory, the first token's data on its way (route.cuh) */
  route_units<MODE>(P, S);     /* every unit's destinations: per rank a 32-unit mask word (route.cuh) */
  publish_counts<MODE>(P, S);  /* message indices; block 0: message counts and counts per expert (route.cuh) */
  send_tokens<MODE>(P, S, sh); /* the block's tokens quantised into every destination's messages (send.cuh) */
  send_signal<MODE>(P, S);     /* one signal add per destination (send.cuh) */
  if (DIRECT && sh.nown > 0) place_own<MODE>(P, S, sh); /* own entries into the expert buffers (direct.cuh) */
  if (threadIdx.x == 0) trace<TR>(P.ctx, OP_MOE_DISPATCH_SEND, PH_KERNEL, false, -1, S.call);
  return S.call;
}

template <int MODE>
__global__ void __launch_bounds__(MOE_THREADS) moe_dispatch_send_kernel(const __grid_constant__ moe_params P) {
  pdl_begin();
  advance_call(P, dispatch_send_body<MODE>(P));
}

template <int MODE>
__global__ void __launch_bounds__(MOE_THREADS) moe_dispatch_recv_kernel(const __grid_constant__ moe_params P) {
  pdl_begin();
  dispatch_recv_body<MODE>(P, current_call(P));
}

/* sy_moe_dispatch: the two halves in one kernel (one launch, one ramp). The receiving part waits for this rank's
 * own sending part in other blocks, so every block must be resident at once: the grid is at most one block per SM
 * (the host sizes it so). */
template <int MODE>
__global__ void __launch_bounds__(MOE_THREADS) moe_dispatch_kernel(const __grid_constant__ moe_params P) {
  pdl_begin();
  const uint64_t call = dispatch_send_body<MODE>(P);
  __syncthreads(); /* the dynamic shared memory changes hands */
  dispatch_recv_body<MODE>(P, call);
  advance_call(P, call);
}

moe_kernel_t const dispatch_send_kernels[16] = SY_MOE_TABLE(moe_dispatch_send_kernel, MODE_FP8 | MODE_PE | MODE_TRACE);
moe_kernel_t const dispatch_recv_kernels[16] = SY_MOE_TABLE(moe_dispatch_recv_kernel, MODE_FP8 | MODE_TRACE);
moe_kernel_t const dispatch_kernels[16] = SY_MOE_TABLE(moe_dispatch_kernel, 15);

} // namespace sy
