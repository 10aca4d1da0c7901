/*
 * symm.c — symmetric memory: the public sy_mem_alloc / sy_mem_free / sy_comm_peer_ptr, and this rank's list
 * of live symmetric allocations. Both backends allocate through their table (NVSHMEM's heap, or host memory
 * every rank-thread sees) and register here, so the API layer can check that a receive range or a signal
 * really is symmetric memory before any peer writes to it.
 */
#include "core/internal.h"

#include <stdlib.h>

sy_status_t sy__symm_add(sy_comm_t comm, void *ptr, size_t bytes) {
  if (comm->symm_count == comm->symm_capacity) {
    int cap = comm->symm_capacity ? 2 * comm->symm_capacity : 16;
    sy_symm_block_t *grown = realloc(comm->symm, (size_t)cap * sizeof *grown);
    if (!grown) return SY_ERR_NO_MEMORY;
    comm->symm = grown;
    comm->symm_capacity = cap;
  }
  comm->symm[comm->symm_count].ptr = ptr;
  comm->symm[comm->symm_count].bytes = bytes;
  comm->symm_count++;
  return SY_SUCCESS;
}

sy_status_t sy__symm_remove(sy_comm_t comm, void *ptr) {
  for (int i = 0; i < comm->symm_count; i++) {
    if (comm->symm[i].ptr == ptr) {
      comm->symm[i] = comm->symm[--comm->symm_count];
      return SY_SUCCESS;
    }
  }
  return SY_ERR_INVALID_ARG;
}

const sy_symm_block_t *sy__symm_find(sy_comm_t comm, const void *ptr, size_t bytes) {
  uintptr_t p = (uintptr_t)ptr;
  for (int i = 0; i < comm->symm_count; i++) {
    uintptr_t base = (uintptr_t)comm->symm[i].ptr;
    size_t size = comm->symm[i].bytes;
    if (p >= base && p - base < size && bytes <= size - (p - base)) return &comm->symm[i];
  }
  return NULL;
}

/* ---- symmetric memory --------------------------------------------------------------------------------- */

sy_status_t sy_mem_alloc(sy_comm_t comm, size_t bytes, void **ptr) {
  static const char *fn = "sy_mem_alloc";
  if (ptr) *ptr = NULL; /* first: a refusal of any argument, the communicator's included, leaves no stale pointer */
  SY_COMM_GUARD(comm, fn);
  SY_ARG_CHECK(ptr != NULL, fn, "ptr is NULL");
  SY_ARG_CHECK(bytes > 0, fn, "bytes=0");
  SY_ARG_CHECK(bytes <= comm->heap_bytes, fn,
               "bytes=%zu exceeds the symmetric heap (%zu bytes; raise SY_HEAP_SIZE "
               "or config.heap_bytes)",
               bytes, comm->heap_bytes);
  void *p = NULL;
  SY_CHECK(comm->ops->mem_alloc(comm, bytes, &p));
  sy_status_t st = sy__symm_add(comm, p, bytes);
  if (st != SY_SUCCESS) {
    comm->ops->mem_free(comm, p);
    return st;
  }
  *ptr = p;
  return SY_SUCCESS;
}

sy_status_t sy_mem_free(sy_comm_t comm, void *ptr) {
  static const char *fn = "sy_mem_free";
  SY_COMM_GUARD(comm, fn);
  SY_ARG_CHECK(ptr != NULL, fn, "ptr is NULL");
  const sy_symm_block_t *b = sy__symm_find(comm, ptr, 0);
  SY_ARG_CHECK(b && b->ptr == ptr, fn, "ptr=%p is not a symmetric allocation of this communicator", ptr);
  SY_CHECK(comm->ops->mem_free(comm, ptr));
  return sy__symm_remove(comm, ptr);
}

sy_status_t sy__mem_free_within(sy_comm_t comm, void *ptr) {
  if (sy__comm_health(comm) != SY_SUCCESS) return SY_SUCCESS; /* as sy_mem_free's guard: it goes with the comm */
  const sy_symm_block_t *b = sy__symm_find(comm, ptr, 0);
  if (!b || b->ptr != ptr) return SY_ERR_INTERNAL;
  SY_CHECK(comm->ops->mem_free(comm, ptr));
  return sy__symm_remove(comm, ptr);
}

sy_status_t sy_comm_peer_ptr(sy_comm_t comm, const void *ptr, int peer, void **peer_ptr) {
  static const char *fn = "sy_comm_peer_ptr";
  SY_COMM_GUARD(comm, fn); /* after an error no peer is to be touched, so none is handed out */
  SY_ARG_CHECK(peer_ptr != NULL, fn, "peer_ptr is NULL");
  *peer_ptr = NULL;
  SY_ARG_CHECK(peer >= 0 && peer < comm->world_size, fn, "peer=%d outside [0, %d)", peer, comm->world_size);
  SY_ARG_CHECK(sy__symm_find(comm, ptr, 0) != NULL, fn, "ptr=%p is not inside a symmetric allocation", ptr);
  return comm->ops->peer_ptr(comm, ptr, peer, peer_ptr);
}
