/*
 * launch.cuh — how the cuda backend calls CUDA and launches kernels: SY_CUDA_CHECK (a CUDA error becomes
 * SY_ERR_CUDA with a log line naming the call, and a non-sticky error is cleared) and launch_pdl (a kernel launch
 * with programmatic dependent launch: its blocks may start while the stream's previous kernel finishes, so the
 * kernel calls pdl_begin() from cuda/device.cuh first). Implemented in launch.cu.
 */
#ifndef SY_EXEC_LAUNCH_CUH
#define SY_EXEC_LAUNCH_CUH

#include <cuda_runtime.h>

#include "core/internal.h"

namespace sy {

/* Maps a CUDA error to SY_ERR_CUDA with a log line naming the call; clears a non-sticky error. */
sy_status_t cuda_error(cudaError_t err, const char *what, const char *file, int line);
#define SY_CUDA_CHECK(call)                                                                          \
  do {                                                                                               \
    cudaError_t sy_cuda_err_ = (call);                                                               \
    if (sy_cuda_err_ != cudaSuccess) return sy::cuda_error(sy_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

/* A kernel's dynamic shared memory limit belongs to the function, not to an object: raises it to `bytes`, never
 * lowering it under an object created earlier that needs more (two MoE objects of different sizes on one GPU). */
sy_status_t raise_smem_limit(const void *kernel, size_t bytes);

/* Whether kernels are launched with programmatic dependent launch (SY_PDL, default on). */
bool pdl_enabled();

/* Launches kernel(params) on `stream`, with programmatic dependent launch where pdl_enabled(): the kernel's
 * blocks may start while the previous kernel on the stream finishes, and must call pdl_begin() first. */
template <typename Params>
sy_status_t launch_pdl(void (*kernel)(Params), int blocks, int threads, size_t smem, cudaStream_t stream,
                       const Params &params) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)blocks);
  cfg.blockDim = dim3((unsigned)threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  SY_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, params));
  return SY_SUCCESS;
}

/* The device half of launch_pdl: the kernel may have started while the stream's previous kernel was still
 * running, so nothing is read or written before that kernel has completed; then the next one may launch. Called
 * first thing by every thread of a kernel launched with launch_pdl. */
__device__ __forceinline__ void pdl_begin() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* pdl_begin without the early trigger, for a kernel that runs long (the high-throughput MoE's dispatch, combine and
 * quantisation: milliseconds at prefill sizes): the stream's next kernel launches when this one exits, not at its
 * start. Launched early, the next kernel's blocks would sit on SMs beyond the SM budget, waiting, for this kernel's
 * whole run — and a GEMM on another stream that needs those SMs would wait with them (run 46: a layout's 129 blocks
 * behind a 4.8 ms combine held the expert GEMMs back for all of it). */
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

/* The other half of pdl_begin, for a kernel that called pdl_wait: the stream's next kernel may launch once every
 * block of this one has called it or exited (the layout kernel, after its last phase). */
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

} // namespace sy

#endif
