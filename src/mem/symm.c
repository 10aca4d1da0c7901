/*
 * symm.c — this rank's list of live symmetric allocations. Both backends register here so the API layer
 * can check that a receive range or a signal really is symmetric memory before any peer writes to it.
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
