/*
 * alltoall.c — the public all-to-all entry points, sy_alltoallv and sy_alltoall: every byte count, offset and
 * receive range checked here, once, before the backend (host/alltoall.c, cuda/alltoall.cu) sees the call.
 */
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>

static int compare_ranges(const void *a, const void *b) {
  const size_t *x = a, *y = b; /* {offset, bytes, peer} */
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

sy_status_t sy_alltoallv(sy_comm_t comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                         void *recv, const size_t *recv_bytes, const size_t *recv_offsets, cudaStream_t stream) {
  static const char *fn = "sy_alltoallv";
  SY_COMM_GUARD(comm, fn);
  SY_CHECK(sy__check_stream(comm, stream, fn));
  SY_ARG_CHECK(send_bytes && send_offsets && recv_bytes && recv_offsets, fn,
               "send_bytes=%p send_offsets=%p recv_bytes=%p recv_offsets=%p: all four arrays are required",
               (const void *)send_bytes, (const void *)send_offsets, (const void *)recv_bytes,
               (const void *)recv_offsets);
  const int world = comm->world_size;
  size_t total_recv = 0;
  for (int p = 0; p < world; p++) {
    SY_ARG_CHECK(send_offsets[p] <= SIZE_MAX - send_bytes[p], fn, "send_offsets[%d]=%zu + send_bytes[%d]=%zu overflows",
                 p, send_offsets[p], p, send_bytes[p]);
    SY_ARG_CHECK(recv_offsets[p] <= SIZE_MAX - recv_bytes[p], fn, "recv_offsets[%d]=%zu + recv_bytes[%d]=%zu overflows",
                 p, recv_offsets[p], p, recv_bytes[p]);
    SY_ARG_CHECK(send_bytes[p] == 0 || send != NULL, fn, "send is NULL with send_bytes[%d]=%zu", p, send_bytes[p]);
    total_recv += recv_bytes[p];
  }
  if (total_recv > 0) {
    SY_ARG_CHECK(recv != NULL, fn, "recv is NULL while %zu bytes are to be received", total_recv);
    const sy_symm_block_t *blk = sy__symm_find(comm, recv, 0);
    SY_ARG_CHECK(blk != NULL, fn, "recv=%p is not a symmetric allocation (use sy_mem_alloc)", recv);
    size_t room = blk->bytes - (size_t)((const char *)recv - (const char *)blk->ptr);
    /* Receive ranges inside the allocation and not overlapping (sorted by offset). */
    size_t *ranges = comm->a2a_scratch; /* 3 * world entries are free here */
    int n = 0;
    for (int p = 0; p < world; p++) {
      if (!recv_bytes[p]) continue;
      SY_ARG_CHECK(recv_offsets[p] + recv_bytes[p] <= room, fn,
                   "recv_offsets[%d]=%zu + recv_bytes[%d]=%zu runs past the symmetric allocation (%zu bytes from recv)",
                   p, recv_offsets[p], p, recv_bytes[p], room);
      ranges[3 * n] = recv_offsets[p];
      ranges[3 * n + 1] = recv_bytes[p];
      ranges[3 * n + 2] = (size_t)p;
      n++;
    }
    qsort(ranges, (size_t)n, 3 * sizeof(size_t), compare_ranges);
    for (int i = 1; i < n; i++) {
      SY_ARG_CHECK(ranges[3 * (i - 1)] + ranges[3 * (i - 1) + 1] <= ranges[3 * i], fn,
                   "receive ranges of peers %zu and %zu overlap (recv_offsets %zu + %zu > %zu)",
                   ranges[3 * (i - 1) + 2], ranges[3 * i + 2], ranges[3 * (i - 1)], ranges[3 * (i - 1) + 1],
                   ranges[3 * i]);
    }
  }
  sy_a2a_args_t args = {send, recv, send_bytes, send_offsets, recv_bytes, recv_offsets};
  return comm->ops->alltoallv(comm, &args, stream);
}

sy_status_t sy_alltoall(sy_comm_t comm, const void *send, void *recv, size_t bytes_per_rank, cudaStream_t stream) {
  static const char *fn = "sy_alltoall";
  SY_ARG_CHECK(comm != NULL, fn, "comm is NULL");
  const int world = comm->world_size;
  SY_ARG_CHECK(bytes_per_rank <= SIZE_MAX / (size_t)world, fn, "bytes_per_rank=%zu times world_size=%d overflows",
               bytes_per_rank, world);
  /* a2a_scratch: [0, 3 world) is sy_alltoallv's range-check scratch, then bytes, then offsets. */
  size_t *bytes = comm->a2a_scratch + 3 * (size_t)world, *offsets = bytes + world;
  for (int p = 0; p < world; p++) {
    bytes[p] = bytes_per_rank;
    offsets[p] = (size_t)p * bytes_per_rank;
  }
  sy_status_t st = sy_alltoallv(comm, send, bytes, offsets, recv, bytes, offsets, stream);
  return st;
}
