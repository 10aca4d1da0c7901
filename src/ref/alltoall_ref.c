/*
 * alltoall_ref.c — the reference all-to-all (alltoall_ref.h): what every rank's receive buffer holds afterwards.
 */
#include "ref/alltoall_ref.h"

#include <string.h>

int sy__ref_alltoallv_recv_by(int world, int rank, const void *const *send, const size_t *send_bytes,
                              const size_t *send_offsets, void *recv, const size_t *recv_offsets, sy_ref_copy_fn copy,
                              void *ctx) {
  for (int s = 0; s < world; s++) {
    size_t bytes = send_bytes[(size_t)s * world + rank];
    if (!bytes) continue;
    int stop = copy(ctx, (char *)recv + recv_offsets[s], (const char *)send[s] + send_offsets[(size_t)s * world + rank],
                    bytes);
    if (stop) return stop;
  }
  return 0;
}

void sy__ref_alltoallv_recv(int world, int rank, const void *const *send, const size_t *send_bytes,
                            const size_t *send_offsets, void *recv, const size_t *recv_offsets) {
  sy__ref_alltoallv_recv_by(world, rank, send, send_bytes, send_offsets, recv, recv_offsets, sy__ref_plain_copy, NULL);
}
