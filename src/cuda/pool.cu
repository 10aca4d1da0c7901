/*
 * pool.cu — the cuda side of the pools (src/mem/pool.c, host_pool.c): a stream-ordered cudaMemPool per
 * sy_pool, pinned host slots, and the host functions that give slots back when a stream reaches them.
 */
#include "cuda/backend.h"
#include "mem/pool.h"

using namespace sy;

extern "C" sy_status_t sy__cuda_pool_create(int device, size_t release_threshold, void **handle) {
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool;
  SY_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  uint64_t threshold = release_threshold;
  const cudaError_t err = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (err != cudaSuccess) {
    cudaMemPoolDestroy(pool);
    return cuda_error(err, "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)", __FILE__, __LINE__);
  }
  *handle = pool;
  return SY_SUCCESS;
}

extern "C" void sy__cuda_pool_destroy(void *handle) { cudaMemPoolDestroy((cudaMemPool_t)handle); }

extern "C" sy_status_t sy__cuda_pool_alloc(void *handle, size_t bytes, void **ptr, cudaStream_t stream) {
  const cudaError_t err = cudaMallocFromPoolAsync(ptr, bytes, (cudaMemPool_t)handle, stream);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    SY_WARN("sy_pool_alloc: %zu bytes: the device has no room (cudaMallocFromPoolAsync)", bytes);
    return SY_ERR_NO_MEMORY;
  }
  SY_CUDA_CHECK(err);
  return SY_SUCCESS;
}

extern "C" sy_status_t sy__cuda_pool_free(void *ptr, cudaStream_t stream) {
  if (stream) SY_CUDA_CHECK(cudaFreeAsync(ptr, stream));
  else SY_CUDA_CHECK(cudaFree(ptr));
  return SY_SUCCESS;
}

extern "C" sy_status_t sy__cuda_pool_trim(void *handle, size_t keep_bytes) {
  SY_CUDA_CHECK(cudaMemPoolTrimTo((cudaMemPool_t)handle, keep_bytes));
  return SY_SUCCESS;
}

extern "C" sy_status_t sy__cuda_pool_usage(void *handle, size_t usage[4]) {
  static const cudaMemPoolAttr attrs[4] = {cudaMemPoolAttrReservedMemCurrent, cudaMemPoolAttrUsedMemCurrent,
                                           cudaMemPoolAttrReservedMemHigh, cudaMemPoolAttrUsedMemHigh};
  for (int i = 0; i < 4; i++) {
    uint64_t v = 0;
    SY_CUDA_CHECK(cudaMemPoolGetAttribute((cudaMemPool_t)handle, attrs[i], &v));
    usage[i] = (size_t)v;
  }
  return SY_SUCCESS;
}

extern "C" sy_status_t sy__cuda_pinned_alloc(size_t bytes, void **ptr) {
  SY_CUDA_CHECK(cudaHostAlloc(ptr, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
  return SY_SUCCESS;
}

extern "C" void sy__cuda_pinned_free(void *ptr) { cudaFreeHost(ptr); }

extern "C" sy_status_t sy__cuda_host_func(cudaStream_t stream, void (*fn)(void *), void *arg, const char *func) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  SY_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    sy__arg_error(func, "stream is capturing a graph: a slot given back by a graph would come back at every replay");
    return SY_ERR_INVALID_ARG;
  }
  SY_CUDA_CHECK(cudaLaunchHostFunc(stream, fn, arg));
  return SY_SUCCESS;
}
