/*
 * alltoall_ref.h — the reference all-to-all: plain C loops that define what each receiver holds afterwards, byte for
 * byte. The host backend runs them; GPU tests and sy-bench compare the kernels' output with them.
 */
#ifndef SY_REF_ALLTOALL_REF_H
#define SY_REF_ALLTOALL_REF_H

#include "ref/copy.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* All-to-all, as seen by one receiver `rank`: for every source s, copies send_bytes[s * world + rank] bytes
 * from send[s] + send_offsets[s * world + rank] to recv + recv_offsets[s]. send[s] is source s's send
 * buffer (may be NULL when s sends this rank nothing); the two matrices are world x world, row = source. */
void sy__ref_alltoallv_recv(int world, int rank, const void *const *send, const size_t *send_bytes,
                            const size_t *send_offsets, void *recv, const size_t *recv_offsets);
/* The same copies, each made by copy(ctx, ...) in source order; returns 0, or the first nonzero copy result
 * (the later copies are not made). */
int sy__ref_alltoallv_recv_by(int world, int rank, const void *const *send, const size_t *send_bytes,
                              const size_t *send_offsets, void *recv, const size_t *recv_offsets, sy_ref_copy_fn copy,
                              void *ctx);

#ifdef __cplusplus
}
#endif
#endif
