/*
 * pool.cu — the cuda side of the pools (src/mem/pool.c, host_pool.c): a stream-ordered cudaMemPool per
 * sy_pool, pinned host slots, and the host functions that give slots back when a stream reaches them; and the
 * communicator's own stream, pool and staging (aux_get) for the library's stream-ordered work when the caller
 * gives none.
 */
#include <sched.h>
#include <time.h>

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
  if (stream) {
    SY_CUDA_CHECK(cudaFreeAsync(ptr, stream));
    return SY_SUCCESS;
  }
  /* At once: cudaFree does not synchronise for memory from cudaMallocFromPoolAsync (CUDA's note on cudaFree), so
   * the device that holds it is synchronised first — the "after the device is done with it" the callers promise
   * (sy_attn_plan_destroy, sy_pool_destroy's clean-up). */
  cudaPointerAttributes at;
  SY_CUDA_CHECK(cudaPointerGetAttributes(&at, ptr));
  int current = -1;
  SY_CUDA_CHECK(cudaGetDevice(&current));
  if (at.device >= 0 && at.device != current) SY_CUDA_CHECK(cudaSetDevice(at.device));
  cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess) err = cudaFree(ptr);
  if (at.device >= 0 && at.device != current) (void)cudaSetDevice(current);
  SY_CUDA_CHECK(err);
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
  const cudaError_t err = cudaHostAlloc(ptr, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
  if (err == cudaErrorMemoryAllocation) { /* out of pinned memory: the pools' own status for it, as sy_pool_alloc's */
    (void)cudaGetLastError();
    SY_WARN("sy_host_pool_create: %zu bytes of pinned host memory: none left (cudaHostAlloc)", bytes);
    return SY_ERR_NO_MEMORY;
  }
  SY_CUDA_CHECK(err);
  return SY_SUCCESS;
}

extern "C" void sy__cuda_pinned_free(void *ptr) { cudaFreeHost(ptr); }

extern "C" sy_status_t sy__cuda_host_func(cudaStream_t stream, void (*fn)(void *), void *arg, const char *func) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  SY_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    sy__arg_error(func, "stream is capturing a graph: a host function a graph holds would run at every replay");
    return SY_ERR_INVALID_ARG;
  }
  SY_CUDA_CHECK(cudaLaunchHostFunc(stream, fn, arg));
  return SY_SUCCESS;
}

namespace sy {

/* The aux staging: 4 pinned slots of 256 KiB (a plan's metadata is a few KiB to a few MiB; larger plans go
 * through the slots in pieces). */
constexpr size_t AUX_SLOT_BYTES = 256 << 10;
constexpr int AUX_SLOTS = 4;

sy_status_t aux_get(sy_comm_t comm, cuda_state **out) {
  cuda_state *st = (cuda_state *)comm->backend_state;
  *out = st;
  if (st->aux_stream && st->aux_pool && st->aux_staging) return SY_SUCCESS;
  if (!st->aux_stream) {
    int least = 0, greatest = 0;
    SY_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    SY_CUDA_CHECK(cudaStreamCreateWithPriority(&st->aux_stream, cudaStreamNonBlocking, greatest));
  }
  if (!st->aux_pool) {
    sy_pool_config_t pc = SY_POOL_CONFIG_INIT;
    SY_CHECK(sy_pool_create(comm, &pc, &st->aux_pool));
  }
  if (!st->aux_staging) {
    sy_host_pool_config_t hc = SY_HOST_POOL_CONFIG_INIT;
    hc.slot_bytes = AUX_SLOT_BYTES;
    hc.slots = AUX_SLOTS;
    SY_CHECK(sy_host_pool_create(comm, &hc, &st->aux_staging));
  }
  return SY_SUCCESS;
}

void aux_release(cuda_state *st) {
  if (st->aux_stream) (void)stream_wait(st->aux_stream, st->ctx.timeout_ns / 1000000, "destroy");
  if (st->aux_staging) (void)sy_host_pool_destroy(st->aux_staging);
  if (st->aux_pool) (void)sy_pool_destroy(st->aux_pool);
  if (st->aux_stream) cudaStreamDestroy(st->aux_stream);
  st->aux_stream = nullptr;
  st->aux_staging = nullptr;
  st->aux_pool = nullptr;
}

sy_status_t stream_wait(cudaStream_t stream, uint64_t timeout_ms, const char *what) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int polls = 0;; polls++) {
    const cudaError_t err = cudaStreamQuery(stream);
    if (err == cudaSuccess) return SY_SUCCESS;
    if (err != cudaErrorNotReady) return cuda_error(err, "cudaStreamQuery", __FILE__, __LINE__);
    clock_gettime(CLOCK_MONOTONIC, &t);
    const uint64_t ms = (uint64_t)(t.tv_sec - t0.tv_sec) * 1000 + (uint64_t)((t.tv_nsec - t0.tv_nsec) / 1000000);
    if (ms > timeout_ms) {
      SY_WARN("%s: the library's stream did not finish in %llu ms", what, (unsigned long long)timeout_ms);
      return SY_ERR_TIMEOUT;
    }
    if (polls > 64) sched_yield();
  }
}

} // namespace sy
