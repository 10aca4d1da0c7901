/*
 * host.h — what the host backend's files share. Ranks are threads of one process: a group of world_size
 * threads forms at init (group.c) and every collective is an exchange through it — each rank publishes a
 * pointer to its arguments, a barrier, every rank reads all of them and reaches the same verdict, a second
 * barrier. The files: group.c (formation, bounded barrier, exchange, abort), comm.c (symmetric memory, signals,
 * the backend table, init), alltoall.c, attn.c, moe.c (the operations, plain C loops over src/ref's rules).
 */
#ifndef SY_HOST_HOST_H
#define SY_HOST_HOST_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct host_group host_group_t; /* group.c */
typedef struct host_state host_state_t;

/* One symmetric allocation: every rank's copy, in the order the collective allocations happened. */
typedef struct host_block {
  void **ptrs; /* world entries; ptrs[rank] is this rank's */
  size_t bytes, reserved;
  uint64_t seq;
} host_block_t;

struct host_state {
  host_group_t *group;
  int rank, world;
  uint64_t boot_timeout_ms;
  size_t heap_bytes, heap_used;
  host_block_t *blocks;
  int block_count, block_capacity;
  uint64_t alloc_seq, wait_calls, a2a_calls;
  /* alltoallv scratch: world x world matrices and the senders' buffers */
  size_t *a2a_send_bytes, *a2a_send_offsets;
  const void **a2a_send;
};

/* ---- the group (group.c) -------------------------------------------------------------------------------- */

uint64_t sy__host_now_ns(void); /* CLOCK_MONOTONIC */
void sy__host_state_free(host_state_t *hs);
/* Init's rendezvous: joins (or starts) the forming group config->host_group and waits, bounded by
 * config->boot_timeout_ms, until all world_size ranks arrived (SY_ERR_TIMEOUT naming the missing ranks). On
 * success hs->group is set and the group owns hs; on failure the caller still owns hs. */
sy_status_t sy__host_group_join(host_state_t *hs, const sy_resolved_config_t *config);
/* Destroy's half: leaves the group without waiting; the last member frees every rank's state and memory, so no
 * peer ever writes into memory freed under it. */
void sy__host_group_leave(host_state_t *hs);
/* The group's abort status (0 until some wait timed out) and, when raised, its detail line. */
int sy__host_group_aborted(const host_state_t *hs);
sy_status_t sy__host_group_error(const host_state_t *hs, char *detail, size_t detail_bytes);
/* A wait of this rank timed out: records it on the communicator, logs it, aborts the group (SY_ERR_TIMEOUT). */
sy_status_t sy__host_fail_timeout(sy_comm_t comm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A barrier of the group bounded by timeout_ms; op names the caller in the error. */
sy_status_t sy__host_group_barrier(sy_comm_t comm, const char *op, uint64_t timeout_ms);
/* First half of an exchange: publishes `mine` for every rank to read and waits (bounded by timeout_ms) until all
 * have published. Then sy__host_exchange_slot reads any rank's; the exchange ends with a barrier, before which
 * `mine` must stay valid. A timeout aborts the group (SY_ERR_TIMEOUT, sticky); a wait that saw the group abort
 * returns SY_ERR_ABORTED. */
sy_status_t sy__host_exchange_within(sy_comm_t comm, const char *op, const void *mine, uint64_t timeout_ms);
const void *sy__host_exchange_slot(sy_comm_t comm, int rank);
/* The same bounded by comm->timeout_ms: what the operations use. */
sy_status_t sy__host_exchange_begin(sy_comm_t comm, const char *op, const void *mine);
sy_status_t sy__host_barrier(sy_comm_t comm, const char *op);

/* ---- the operations (alltoall.c, attn.c, moe.c), in the backend table of comm.c --------------------------- */

sy_status_t sy__host_alltoallv(sy_comm_t comm, const sy_a2a_args_t *args, cudaStream_t stream);

sy_status_t sy__host_attn_create(sy_comm_t comm, struct sy_attn *attn);
void sy__host_attn_destroy(sy_comm_t comm, struct sy_attn *attn);
sy_status_t sy__host_attn_plan_upload(sy_comm_t comm, struct sy_attn_plan *plan);
sy_status_t sy__host_attn_run(sy_comm_t comm, struct sy_attn *attn, const struct sy_attn_plan *plan,
                              const sy_attn_call_t *call, cudaStream_t stream);

sy_status_t sy__host_moe_create(sy_comm_t comm, struct sy_moe *moe);
void sy__host_moe_destroy(sy_comm_t comm, struct sy_moe *moe);
sy_status_t sy__host_moe_dispatch_send(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args,
                                       cudaStream_t stream);
sy_status_t sy__host_moe_dispatch_recv(sy_comm_t comm, struct sy_moe *moe, const sy_moe_recv_t *recv,
                                       cudaStream_t stream);
sy_status_t sy__host_moe_combine_send(sy_comm_t comm, struct sy_moe *moe, const void *expert_out, cudaStream_t stream);
sy_status_t sy__host_moe_combine_recv(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args, void *out,
                                      cudaStream_t stream);
/* Whether combine_recv's num_tokens and expert_ids (args) are this rank's dispatch of the current call;
 * SY_ERR_INVALID_ARG with a log line from fn naming the argument otherwise. Changes nothing: sy_moe_combine
 * asks before its send half so a rejected call leaves every buffer as it was. */
sy_status_t sy__host_moe_check_combine(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args,
                                       const char *fn);

#ifdef __cplusplus
}
#endif
#endif
