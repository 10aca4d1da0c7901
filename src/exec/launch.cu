/*
 * launch.cu — SY_CUDA_CHECK's error mapping, the SY_PDL switch of launch_pdl and raise_smem_limit (launch.cuh).
 */
#include <pthread.h>
#include <string.h>

#include "exec/launch.cuh"

namespace sy {

bool pdl_enabled() {
  static int pdl = -1;
  if (pdl < 0) {
    int on = 1;
    if (sy__env_bool(SY_ENVID_SY_PDL, &on) != SY_SUCCESS) on = 1;
    pdl = on;
  }
  return pdl != 0;
}

sy_status_t cuda_error(cudaError_t err, const char *what, const char *file, int line) {
  const char *base = strrchr(file, '/');
  SY_WARN("cuda error %s (%s) in %s at %s:%d", cudaGetErrorName(err), cudaGetErrorString(err), what,
          base ? base + 1 : file, line);
  (void)cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
  return SY_ERR_CUDA;
}

sy_status_t raise_smem_limit(const void *kernel, size_t bytes) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* two creates at once must not lower it either */
  pthread_mutex_lock(&lock);
  cudaFuncAttributes attr;
  cudaError_t err = cudaFuncGetAttributes(&attr, kernel);
  if (err == cudaSuccess && (size_t)attr.maxDynamicSharedSizeBytes < bytes)
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  pthread_mutex_unlock(&lock);
  return err == cudaSuccess ? SY_SUCCESS : cuda_error(err, "raise_smem_limit", __FILE__, __LINE__);
}

} // namespace sy
