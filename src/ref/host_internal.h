/*
 * host_internal.h — what the host backend's files share: the group exchange (publish a pointer, barrier,
 * read every rank's, barrier) that host_backend.c implements, and the attention-dispatch ops of
 * attn_host.c that host_backend.c puts in its ops table.
 */
#ifndef SY_REF_HOST_INTERNAL_H
#define SY_REF_HOST_INTERNAL_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* First half of an exchange: publishes `mine` for every rank to read and waits (bounded by comm->timeout_ms)
 * until all have published. Then sy__host_exchange_slot reads any rank's; the exchange ends with
 * sy__host_barrier, before which `mine` must stay valid. A timeout aborts the group (SY_ERR_TIMEOUT, sticky);
 * a wait that saw the group abort returns SY_ERR_ABORTED. */
sy_status_t sy__host_exchange_begin(sy_comm_t comm, const char *op, const void *mine);
const void *sy__host_exchange_slot(sy_comm_t comm, int rank);
/* A barrier of the group bounded by comm->timeout_ms; op names the caller in the error. */
sy_status_t sy__host_barrier(sy_comm_t comm, const char *op);

/* Attention dispatch (attn_host.c). */
sy_status_t sy__host_attn_create(sy_comm_t comm, struct sy_attn *attn);
void sy__host_attn_destroy(sy_comm_t comm, struct sy_attn *attn);
sy_status_t sy__host_attn_plan_upload(sy_comm_t comm, struct sy_attn_plan *plan);
sy_status_t sy__host_attn_run(sy_comm_t comm, struct sy_attn *attn, const struct sy_attn_plan *plan,
                              const sy_attn_call_t *call, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
