/*
 * absent.c — the cuda backend's entry points in a build without it (cmake -DSY_CUDA_KERNELS=OFF: no nvcc, no
 * NVSHMEM; the sanitizer and fuzzing builds CI makes). The backend is never available, so SY_BACKEND=auto
 * picks the host backend; asking for cuda by name fails at sy_comm_init with SY_ERR_UNSUPPORTED and a log
 * line that says why. The full build compiles the .cu files of src/cuda instead of this file.
 */
#include "core/internal.h"
#include "exec/graph.h"
#include "mem/pool.h"

#include <stdio.h>

#define SY_CUDA_ABSENT_WHY "this build has no cuda backend (configured with SY_CUDA_KERNELS=OFF)"

int sy__cuda_available(char *reason, size_t reason_bytes) {
  if (reason && reason_bytes) snprintf(reason, reason_bytes, "%s", SY_CUDA_ABSENT_WHY);
  return 0;
}

sy_status_t sy__cuda_comm_init(sy_comm_t comm, const sy_resolved_config_t *config) {
  SY_WARN("sy_comm_init: backend cuda: %s; use the host backend (SY_BACKEND=host)", SY_CUDA_ABSENT_WHY);
  return SY_ERR_UNSUPPORTED;
}

sy_status_t sy__cuda_store_probe(sy_comm_t comm, void *buf, size_t bytes_per_peer, cudaStream_t stream) {
  return SY_ERR_UNSUPPORTED;
}

sy_status_t sy__cuda_empty_launch(cudaStream_t stream) { return SY_ERR_UNSUPPORTED; }

/* The pools' cuda side (src/cuda/pool.cu): never reached, no communicator has this backend. */
sy_status_t sy__cuda_pool_create(int device, size_t release_threshold, void **handle) { return SY_ERR_UNSUPPORTED; }
void sy__cuda_pool_destroy(void *handle) {}
sy_status_t sy__cuda_pool_alloc(void *handle, size_t bytes, void **ptr, cudaStream_t stream) {
  return SY_ERR_UNSUPPORTED;
}
sy_status_t sy__cuda_pool_free(void *ptr, cudaStream_t stream) { return SY_ERR_UNSUPPORTED; }
sy_status_t sy__cuda_pool_trim(void *handle, size_t keep_bytes) { return SY_ERR_UNSUPPORTED; }
sy_status_t sy__cuda_pool_usage(void *handle, size_t usage[4]) { return SY_ERR_UNSUPPORTED; }
sy_status_t sy__cuda_pinned_alloc(size_t bytes, void **ptr) { return SY_ERR_UNSUPPORTED; }
void sy__cuda_pinned_free(void *ptr) {}
sy_status_t sy__cuda_host_func(cudaStream_t stream, void (*fn)(void *), void *arg, const char *func) {
  return SY_ERR_UNSUPPORTED;
}

/* The graph cache's cuda side (src/cuda/graph.cu): never reached. */
sy_status_t sy__cuda_stream_capturing(cudaStream_t stream, int *capturing) { return SY_ERR_UNSUPPORTED; }
sy_status_t sy__cuda_graph_capture(cudaStream_t stream, sy_graph_step_fn step, void *user, int bucket, void **graph) {
  return SY_ERR_UNSUPPORTED;
}
sy_status_t sy__cuda_graph_instantiate(void *graph, void **exec) { return SY_ERR_UNSUPPORTED; }
sy_status_t sy__cuda_graph_update(void *exec, void *graph, int *updated) { return SY_ERR_UNSUPPORTED; }
sy_status_t sy__cuda_graph_launch(void *exec, cudaStream_t stream) { return SY_ERR_UNSUPPORTED; }
void sy__cuda_graph_destroy(void *graph, void *exec) {}
