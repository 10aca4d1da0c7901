/*
 * host.h — what the host backend's files share. Ranks are threads of one process: a group of world_size
 * threads forms at init (group.c) and every collective is an exchange through it. An exchange names its
 * operation; the group numbers the communicator's collectives, and each rank publishes (operation, number, a
 * pointer to its arguments) and meets the others in a round; the last to arrive checks that all published the
 * same operation and number (else SY_ERR_MISMATCH on every rank, nothing read). Then every rank reads all
 * arguments and reaches the same verdict, receivers copy from the senders' buffers, and a closing round ends the
 * copy phase. No rank leaves a failed round while a peer is still in its copy phase, so no peer reads a buffer
 * its owner got back; copies go in bounded pieces that stop when the group aborts, which bounds that wait by one
 * piece. The files: group.c (formation, rounds, exchange, abort), comm.c (symmetric memory, signals, the backend
 * table, init), alltoall.c, attn.c, moe.c, moe_ht.c (the operations, plain C loops over src/ref's rules).
 */
#ifndef SY_HOST_HOST_H
#define SY_HOST_HOST_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct host_group host_group_t; /* group.c */
typedef struct host_state host_state_t;

/* The host backend's collectives (X(id, name)): every exchange names one, so that ranks inside different
 * collectives are told apart, and the name is what the logs say. sy_moe_create and sy_moe_ht_create open with
 * core's host allgather of their configuration, so a rank there is in allgather_host first. */
#define SY_HOST_OP_LIST(X)                         \
  X(SY_HOST_OP_BARRIER, "barrier")                 \
  X(SY_HOST_OP_MEM_ALLOC, "mem_alloc")             \
  X(SY_HOST_OP_MEM_FREE, "mem_free")               \
  X(SY_HOST_OP_ALLGATHER, "allgather_host")        \
  X(SY_HOST_OP_ALLTOALLV, "alltoallv")             \
  X(SY_HOST_OP_ATTN_CREATE, "attn_create")         \
  X(SY_HOST_OP_ATTN, "attn")                       \
  X(SY_HOST_OP_MOE_CREATE, "moe_create")           \
  X(SY_HOST_OP_MOE_HT_CREATE, "moe_ht_create")     \
  X(SY_HOST_OP_MOE_HT_LAYOUT, "moe_ht_layout")     \
  X(SY_HOST_OP_MOE_HT_DISPATCH, "moe_ht_dispatch") \
  X(SY_HOST_OP_MOE_HT_COMBINE, "moe_ht_combine")   \
  X(SY_HOST_OP_MOE_HT_COMBINE_BACKWARD, "moe_ht_combine_backward")

typedef enum sy_host_op {
#define SY_HOST_OP_ENUM(id, name) id,
  SY_HOST_OP_LIST(SY_HOST_OP_ENUM)
#undef SY_HOST_OP_ENUM
      SY_HOST_OP_COUNT
} sy_host_op_t;

/* "alltoallv" for SY_HOST_OP_ALLTOALLV; "?" outside the list. */
const char *sy__host_op_name(int op);

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
  /* The current collective: its number (counted per communicator, every exchange and barrier), its operation,
   * and the bound of its rounds. */
  uint64_t collective;
  int op;
  uint64_t round_timeout_ms;
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

/* The exchange, every collective's opening. sy__host_exchange_begin starts collective number n + 1 of op: it
 * publishes `mine` and waits (bounded by comm->timeout_ms; _within: by timeout_ms) until every rank has
 * published. Ranks that published another operation or number: SY_ERR_MISMATCH on every rank, logged with both
 * operations and ranks, recorded on the communicator (sticky), nothing read. A timeout aborts the group
 * (SY_ERR_TIMEOUT, sticky); a wait that saw the group abort returns SY_ERR_ABORTED. On any failure the
 * exchange is over (do not call _end). On success this rank is in the copy phase: sy__host_exchange_slot reads
 * any rank's published pointer, sy__host_copy copies from peers' buffers, and sy__host_exchange_end must
 * follow (on every path), before which `mine` and every buffer it points to stay valid. */
sy_status_t sy__host_exchange_begin(sy_comm_t comm, sy_host_op_t op, const void *mine);
sy_status_t sy__host_exchange_within(sy_comm_t comm, sy_host_op_t op, const void *mine, uint64_t timeout_ms);
const void *sy__host_exchange_slot(sy_comm_t comm, int rank);
/* A sy_ref_copy_fn (ctx: the communicator) for the copy phase: copies in pieces of at most SY_HOST_COPY_PIECE
 * bytes and, before each, checks the group's abort: SY_ERR_ABORTED once it is raised (the rest not copied). */
#define SY_HOST_COPY_PIECE ((size_t)4 << 20)
int sy__host_copy(void *comm, void *dst, const void *src, size_t bytes);
/* Ends the copy phase and meets every rank in the closing round (same bound as the opening). When the round
 * fails (a timeout, the group aborted) it still returns only once no peer is in its copy phase: each leaves it
 * within one piece of the abort. */
sy_status_t sy__host_exchange_end(sy_comm_t comm);
/* A collective with nothing to exchange (sy_comm_barrier): one round of op, checked like an exchange. */
sy_status_t sy__host_sync(sy_comm_t comm, sy_host_op_t op);
/* A further round inside the current collective, after its exchange ended (every rank is known to be in it). */
sy_status_t sy__host_barrier(sy_comm_t comm);

/* ---- the operations (alltoall.c, attn.c, moe.c, moe_ht.c), in the backend table of comm.c ------------------- */

sy_status_t sy__host_alltoallv(sy_comm_t comm, const sy_a2a_args_t *args, cudaStream_t stream);

sy_status_t sy__host_attn_create(sy_comm_t comm, struct sy_attn *attn);
void sy__host_attn_destroy(sy_comm_t comm, struct sy_attn *attn);
sy_status_t sy__host_attn_plan_upload(sy_comm_t comm, struct sy_attn_plan *plan, sy_pool_t pool, sy_host_pool_t staging,
                                      cudaStream_t stream);
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

sy_status_t sy__host_moe_ht_create(sy_comm_t comm, struct sy_moe_ht *moe);
void sy__host_moe_ht_destroy(sy_comm_t comm, struct sy_moe_ht *moe);
sy_status_t sy__host_moe_ht_layout(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                   cudaStream_t stream);
sy_status_t sy__host_moe_ht_dispatch(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                     cudaStream_t stream);
sy_status_t sy__host_moe_ht_combine(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                    cudaStream_t stream);
sy_status_t sy__host_moe_ht_combine_backward(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
