/*
 * pool.h — the pools' backend entry points: src/mem/pool.c and host_pool.c keep the public calls, their
 * argument checks and the bookkeeping both backends share (the live allocations, the slots' states), and call
 * the cuda backend (src/cuda/pool.cu; src/cuda/absent.c in a build without it) for device memory, pinned
 * memory and the host functions a stream runs.
 */
#ifndef SY_MEM_POOL_H
#define SY_MEM_POOL_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Internal calls of the library's own users of the pools (the attention plan's upload). */
sy_comm_t sy__pool_comm(sy_pool_t pool);
sy_comm_t sy__host_pool_comm(sy_host_pool_t pool);
size_t sy__host_pool_slot_bytes(sy_host_pool_t pool);
/* One more holder of the pool (an attention plan): sy_pool_destroy destroys it when the last holder calls it. */
void sy__pool_retain(sy_pool_t pool);
/* The bytes of the pool's live allocation at ptr (its start; a multiple of 256), or 0 if there is none. */
size_t sy__pool_live_bytes(sy_pool_t pool, const void *ptr);
/* Frees a live allocation at once, after the device is done with it (a device synchronisation, then cudaFree). */
sy_status_t sy__pool_free_now(sy_pool_t pool, void *ptr);

/* A cudaMemPool on `device` with the release threshold; *handle is the pool. */
sy_status_t sy__cuda_pool_create(int device, size_t release_threshold, void **handle);
void sy__cuda_pool_destroy(void *handle);
sy_status_t sy__cuda_pool_alloc(void *handle, size_t bytes, void **ptr, cudaStream_t stream);
/* stream NULL: at once, after a synchronisation of the device that holds ptr (cudaFree alone would not wait for
 * memory from a stream-ordered pool): the plan's destroy and the pool destroy's clean-up of leaked allocations. */
sy_status_t sy__cuda_pool_free(void *ptr, cudaStream_t stream);
sy_status_t sy__cuda_pool_trim(void *handle, size_t keep_bytes);
/* usage[4]: reserved, used, reserved_high, used_high (bytes) */
sy_status_t sy__cuda_pool_usage(void *handle, size_t usage[4]);
/* Pinned, portable, mapped host memory. */
sy_status_t sy__cuda_pinned_alloc(size_t bytes, void **ptr);
void sy__cuda_pinned_free(void *ptr);
/* fn(arg) on the host when `stream` reaches this point (cudaLaunchHostFunc). Refused (SY_ERR_INVALID_ARG,
 * naming `func`) inside a stream capture. */
sy_status_t sy__cuda_host_func(cudaStream_t stream, void (*fn)(void *), void *arg, const char *func);

#ifdef __cplusplus
}
#endif

#endif /* SY_MEM_POOL_H */
