/*
 * combine.cu — the MoE combine kernels: combine_send, combine_recv, and the one-call combine that runs both in one
 * kernel.
 */
#include "cuda/moe/combine_recv.cuh"
#include "cuda/moe/combine_send.cuh"
#include "cuda/moe/kernels.cuh"

namespace sy {

template <int MODE>
__global__ void __launch_bounds__(MOE_THREADS) moe_combine_send_kernel(const __grid_constant__ moe_params P) {
  pdl_begin();
  combine_send_body<MODE>(P, current_call(P));
}

template <int MODE>
__global__ void __launch_bounds__(MOE_THREADS) moe_combine_recv_kernel(const __grid_constant__ moe_params P) {
  pdl_begin();
  combine_recv_body<MODE>(P, current_call(P));
}

/* sy_moe_combine: the two halves in one kernel; as the one-call dispatch, every block must be resident at once. */
template <int MODE>
__global__ void __launch_bounds__(MOE_THREADS) moe_combine_kernel(const __grid_constant__ moe_params P) {
  pdl_begin();
  const uint64_t call = current_call(P);
  combine_send_body<MODE>(P, call);
  __syncthreads();
  combine_recv_body<MODE>(P, call);
}

moe_kernel_t const combine_send_kernels[16] = SY_MOE_TABLE(moe_combine_send_kernel, MODE_PE | MODE_TRACE);
moe_kernel_t const combine_recv_kernels[16] = SY_MOE_TABLE(moe_combine_recv_kernel, MODE_PE | MODE_TRACE);
moe_kernel_t const combine_kernels[16] = SY_MOE_TABLE(moe_combine_kernel, MODE_PE | MODE_TRACE);

} // namespace sy
