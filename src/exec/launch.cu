/*
 * launch.cu — SY_CUDA_CHECK's error mapping and the SY_PDL switch of launch_pdl (launch.cuh).
 */
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

} // namespace sy
