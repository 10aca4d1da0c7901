/*
 * kernels.cuh — the MoE kernels as the host side (launch.cu) sees them: a table per kernel, indexed by the whole
 * MODE (moe.cuh), each entry the instance for the bits that kernel's code depends on. dispatch.cu and combine.cu
 * define them.
 */
#ifndef SY_CUDA_MOE_KERNELS_CUH
#define SY_CUDA_MOE_KERNELS_CUH

#include "cuda/moe/moe.cuh"

namespace sy {

typedef void (*moe_kernel_t)(moe_params);

/* dispatch.cu: the halves (never the direct part) and the one-call dispatch (every bit) */
extern moe_kernel_t const dispatch_send_kernels[16];
extern moe_kernel_t const dispatch_recv_kernels[16];
extern moe_kernel_t const dispatch_kernels[16];
/* combine.cu: the halves and the one-call combine (not the wire, not the direct part) */
extern moe_kernel_t const combine_send_kernels[16];
extern moe_kernel_t const combine_recv_kernels[16];
extern moe_kernel_t const combine_kernels[16];

/* The instances of kernel template k, indexed by the whole MODE, each instantiated only for the bits in mask. */
/* clang-format off */
#define SY_MOE_TABLE(k, mask)                                                                                        \
  {k<0 & (mask)>,  k<1 & (mask)>,  k<2 & (mask)>,  k<3 & (mask)>,  k<4 & (mask)>,  k<5 & (mask)>,                    \
   k<6 & (mask)>,  k<7 & (mask)>,  k<8 & (mask)>,  k<9 & (mask)>,  k<10 & (mask)>, k<11 & (mask)>,                   \
   k<12 & (mask)>, k<13 & (mask)>, k<14 & (mask)>, k<15 & (mask)>}
/* clang-format on */

} // namespace sy

#endif
