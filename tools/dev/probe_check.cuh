/*
 * probe_check.cuh — what the standalone probes in tools/dev share (each built alone: nvcc tools/dev/NAME.cu): CK, a
 * CUDA runtime call checked, the process ended with the call and its error on failure.
 */
#ifndef SY_TOOLS_DEV_PROBE_CHECK_CUH
#define SY_TOOLS_DEV_PROBE_CHECK_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

#endif
