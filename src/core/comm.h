/*
 * comm.h — the communicator object and the backend table every operation goes through: the argument packs the
 * front-ends (core/) build after checking, the per-operation objects (attention, MoE), the sticky error
 * state, and the backends' entry points (host/, cuda/). docs/architecture.md draws how they fit.
 */
#ifndef SY_CORE_COMM_H
#define SY_CORE_COMM_H

#include "core/log.h"
#include "mem/arena.h"
#include "switchyard.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Argument pack of one all-to-all call, validated by src/core before any backend sees it. */
typedef struct sy_a2a_args {
  const void *send;
  void *recv;
  const size_t *send_bytes, *send_offsets; /* world_size each */
  const size_t *recv_bytes, *recv_offsets; /* world_size each */
} sy_a2a_args_t;

/* One attention-dispatch call as the backends see it (src/core/attn.c builds it after checking). */
struct sy_attn_plan;
typedef struct sy_attn_channel {
  int dir;         /* SY_ATTN_Q_FWD, SY_ATTN_KV_FWD, SY_ATTN_Q_REV, SY_ATTN_KV_BWD (src/plan/attn_plan.h) */
  const void *src; /* the sender's rows */
  size_t row_bytes;
  void *dst; /* the receiver's rows (symmetric); KV backward: the object's staging */
} sy_attn_channel_t;

typedef struct sy_attn_call {
  int num_channels; /* 1, or 2 for Q+KV forward (one kernel, both channels) */
  sy_attn_channel_t ch[2];
  int kv_backward; /* ch[0] lands in attn->staging; then the reduce into grad_out */
  sy_dtype_t dtype;
  unsigned flags; /* SY_ATTN_UNSUMMED */
  void *grad_out;
} sy_attn_call_t;

/* The attention-dispatch object (public handle sy_attn_t). */
struct sy_attn {
  sy_comm_t comm;
  sy_attn_config_t config;
  void *staging; /* symmetric, max_replicas * max_tokens * max_kv_grad_row_bytes (NULL if 0) */
  size_t staging_bytes;
  void *backend_state;
};

/* One MoE dispatch's inputs as the backends see them (src/core/moe.c checks them first). */
typedef struct sy_moe_dispatch_args {
  const void *tokens; /* bf16 [num_tokens][hidden] (NULL in combine_recv) */
  int num_tokens;
  const void *expert_ids; /* [num_tokens][top_k] */
  sy_index_type_t id_type;
  const float *weights; /* [num_tokens][top_k] or NULL */
} sy_moe_dispatch_args_t;

/* The MoE low-latency object (public handle sy_moe_t). */
struct sy_moe {
  sy_comm_t comm;
  sy_moe_config_t config;
  int local_experts; /* L = num_experts / world_size */
  int slots;         /* S = world_size * max_tokens */
  int next_half;     /* 0 dispatch_send, 1 dispatch_recv, 2 combine_send, 3 combine_recv: the order the API enforces */
  void *backend_state;
};

/* The MoE high-throughput object (public handle sy_moe_ht_t). */
struct sy_moe_ht {
  sy_comm_t comm;
  sy_moe_ht_config_t config; /* defaults applied (ref/moe_ht_layout.h) */
  uint32_t id;               /* this process's creation number of the object, written into its handles */
  uint64_t serial;   /* its creation number on the communicator (1, 2, ...), alike on every rank: the host backend's
                    * calls tell ranks in different objects' calls apart by it (the ids differ between ranks) */
  int local_experts; /* L */
  int max_rows;
  uint64_t layouts, dispatches; /* calls so far */
  int call_sms;                 /* the SM budget of the calls enqueued now (sy_moe_ht_set_num_sms; config.num_sms) */
  int pull;     /* the cuda backend's dispatch pulls (SY_HT_PULL as every rank resolved it at create): 0 no, 1 every
                 * call, 2 by default (every rank auto): a BF16 or given-FP8 call above pull_sms SMs pushes */
  int pull_sms; /* SY_HT_PULL_SMS, alike on every rank */
  void *backend_state;
  /* the receive arena (config.recv_arena_bytes; sy_moe_ht_recv_alloc with pool NULL): the cuda backend's part of
   * the symmetric workspace, or (host backend) host memory of the object's own; its allocations by first fit, freed
   * in stream order (mem/arena.h) */
  char *arena;
  int arena_own; /* arena is the object's malloc */
  sy_arena_t book;
};

/* Where the cuda backend's high-throughput data kernels run a channel's two roles (SY_HT_ROLES resolved for this
 * configuration and world size; cuda/moe_ht/ht.cuh): 1 on one block's warps at once, 0 on two blocks. The
 * workspace's channels follow it (sy__moe_ht_ws_layout), so the size query and the create read the same. Auto (-1):
 * 1 at world size 2 with at most SY_HT_ROLES_AUTO_SMS_W2 SMs, from world size 3 with at most SY_HT_ROLES_AUTO_SMS.
 * Measured at world 4 (4 x H100; bench/NOTES.md, runs 39 and 40): by warps 13-14% faster over the four calls at 16
 * SMs; at 24 and 32 equal over the four (the dispatch kernel faster, the combine kernel 14-20% slower) and 3-7%
 * slower for the dispatch and combine together; at 48 and 64 slower. At world 2 (2 x H200, run 59) by warps is
 * faster over the four calls at 24 (-13%), 32 (-11%) and 48 (-6%; the combine +2%) and 2% slower at 64 (the combine
 * +12%). World 3 and 8: not measured, world 4's rule. */
#define SY_HT_ROLES_AUTO_SMS    16
#define SY_HT_ROLES_AUTO_SMS_W2 48
int sy__moe_ht_roles(const sy_moe_ht_config_t *c, int world_size);
/* Whether the cuda backend's high-throughput dispatch pulls (SY_HT_PULL resolved; 0 at world size 1, where nothing
 * crosses a rank): 1 the receivers pull (cuda/moe_ht/pull.cu), 0 the senders push through the rings. Auto (unset or
 * negative, the default): 1 where this rank reaches every peer by load/store (peers_direct: comm->peers_direct) and
 * the pull fits (fits: its workspace in what is left of the symmetric heap, its stages in shared memory; core/moe_ht.c
 * pull_here); the create then pulls only if every rank answered 1, and falls back to the push where the heap itself
 * cannot hold the pulled workspace (cuda/moe_ht/launch.cu). A positive value: 1 (the create fails where a peer is reached by puts); 0: 0.
 * Measured at world 2 (2 x H200, run 62, 16 SMs, 4,096 tokens): BF16 dispatch 560 us kernel pulled against 648
 * pushed (603.4 against 652.5 with the tokens' copy before the kernel), FP8 580 against 659; faster at 8,192 tokens
 * and at 24 and 32 SMs too. World 4: the pull design's ceiling 546 us against the push's 743 (run 60); the pull
 * itself not yet measured there. The workspace then holds each rank's tokens' copy (sy__moe_ht_ws_layout). */
int sy__moe_ht_pull(const sy_moe_ht_config_t *c, int world_size, int peers_direct, int fits);
/* Whether [p, p + bytes) lies in the object's receive arena (core/moe_ht.c). */
int sy__moe_ht_in_arena(const struct sy_moe_ht *moe, const void *p, size_t bytes);

/* One MoE high-throughput call as the backends see it (src/core/moe_ht.c checks it first). Unused fields 0. */
typedef struct sy_moe_ht_call {
  void *handle;
  int num_tokens;
  const void *expert_ids; /* layout */
  sy_index_type_t id_type;
  int32_t *host_counts;      /* layout: NULL (worst case) or [2 L + 1] */
  const void *tokens;        /* dispatch: [num_tokens][hidden]; combine: rows_in; combine_backward: grad_out */
  const float *token_scales; /* dispatch, SY_MOE_WIRE_FP8_GIVEN */
  const float *weights;      /* dispatch: [num_tokens][top_k] or NULL */
  const sy_moe_ht_recv_t *recv;
  const float *row_weights; /* combine, combine_backward: [recv.rows] or NULL */
  const float *row_values;  /* combine: [recv.rows] or NULL */
  void *out;                /* combine: [num_tokens][hidden]; combine_backward: grad_rows */
  float *token_values;      /* combine: [num_tokens][top_k] or NULL */
  int add;                  /* combine: out is added to (sy_moe_ht_combine_add) */
  const void *rows_in;      /* combine_backward: the combine's input, when grad_row_weights */
  float *grad_row_weights;  /* combine_backward: [recv.rows] or NULL */
} sy_moe_ht_call_t;

typedef struct sy_backend_ops {
  const char *name;
  sy_status_t (*destroy)(sy_comm_t comm);
  sy_status_t (*mem_alloc)(sy_comm_t comm, size_t bytes, void **ptr);
  sy_status_t (*mem_free)(sy_comm_t comm, void *ptr);
  sy_status_t (*peer_ptr)(sy_comm_t comm, const void *ptr, int peer, void **peer_ptr);
  sy_status_t (*barrier)(sy_comm_t comm, cudaStream_t stream);
  sy_status_t (*put_signal)(sy_comm_t comm, void *dst, const void *src, size_t bytes, uint64_t *signal,
                            sy_signal_op_t op, uint64_t value, int peer, cudaStream_t stream);
  sy_status_t (*signal_wait)(sy_comm_t comm, uint64_t *signal, uint64_t value, cudaStream_t stream);
  sy_status_t (*alltoallv)(sy_comm_t comm, const sy_a2a_args_t *args, cudaStream_t stream);
  sy_status_t (*allgather_host)(sy_comm_t comm, const void *send, void *recv, size_t bytes);
  /* Reads the backend's asynchronous error state (device error slot, host group abort). */
  sy_status_t (*poll_error)(sy_comm_t comm, char *detail, size_t detail_bytes);
  /* Attention dispatch: per-object state, plan upload (at plan create), one call. */
  sy_status_t (*attn_create)(sy_comm_t comm, struct sy_attn *attn);
  void (*attn_destroy)(sy_comm_t comm, struct sy_attn *attn);
  /* pool, staging NULL and stream NULL: the backend's own (cuda: the communicator's aux stream, waited for) */
  sy_status_t (*attn_plan_upload)(sy_comm_t comm, struct sy_attn_plan *plan, sy_pool_t pool, sy_host_pool_t staging,
                                  cudaStream_t stream);
  sy_status_t (*attn_run)(sy_comm_t comm, struct sy_attn *attn, const struct sy_attn_plan *plan,
                          const sy_attn_call_t *call, cudaStream_t stream);
  /* MoE low-latency halves (src/core/moe.c enforces their order). */
  sy_status_t (*moe_create)(sy_comm_t comm, struct sy_moe *moe);
  void (*moe_destroy)(sy_comm_t comm, struct sy_moe *moe);
  sy_status_t (*moe_dispatch_send)(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args,
                                   cudaStream_t stream);
  sy_status_t (*moe_dispatch_recv)(sy_comm_t comm, struct sy_moe *moe, const sy_moe_recv_t *recv, cudaStream_t stream);
  sy_status_t (*moe_combine_send)(sy_comm_t comm, struct sy_moe *moe, const void *expert_out, cudaStream_t stream);
  sy_status_t (*moe_combine_recv)(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args, void *out,
                                  cudaStream_t stream);
  /* Optional: whether combine_recv's num_tokens and ids answer this rank's dispatch, asked before anything is
   * enqueued so that a rejected call changes nothing (NULL: the backend checks on the device and reports
   * through the asynchronous error). */
  sy_status_t (*moe_check_combine)(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args,
                                   const char *fn);
  /* Optional: the one-call forms as one operation (NULL: the two halves back to back). */
  sy_status_t (*moe_dispatch)(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args,
                              const sy_moe_recv_t *recv, cudaStream_t stream);
  sy_status_t (*moe_combine)(sy_comm_t comm, struct sy_moe *moe, const void *expert_out,
                             const sy_moe_dispatch_args_t *args, void *out, cudaStream_t stream);
  /* MoE high throughput (src/core/moe_ht.c). */
  sy_status_t (*moe_ht_create)(sy_comm_t comm, struct sy_moe_ht *moe);
  void (*moe_ht_destroy)(sy_comm_t comm, struct sy_moe_ht *moe);
  sy_status_t (*moe_ht_layout)(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                               cudaStream_t stream);
  sy_status_t (*moe_ht_dispatch)(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                 cudaStream_t stream);
  sy_status_t (*moe_ht_combine)(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                cudaStream_t stream);
  sy_status_t (*moe_ht_combine_backward)(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                         cudaStream_t stream);
} sy_backend_ops_t;

/* One symmetric allocation as this rank sees it. */
typedef struct sy_symm_block {
  void *ptr;
  size_t bytes;
} sy_symm_block_t;

struct sy_comm {
  const sy_backend_ops_t *ops;
  sy_backend_t backend;
  int rank;
  int world_size;
  int local_rank;
  int device;          /* cuda: the CUDA device; host: -1 */
  uint64_t timeout_ms; /* bound on every wait */
  size_t heap_bytes;
  int peers_direct;  /* cuda: this rank reaches every peer by load/store (NVLink or the same GPU; not SY_FORCE_PUT) */
  sy_status_t error; /* sticky: first error seen (async or fatal); only destroy is accepted after it */
  char error_detail[256];
  sy_symm_block_t *symm; /* this rank's live symmetric allocations */
  int symm_count, symm_capacity;
  size_t *a2a_scratch;     /* 5 * world_size entries for argument checks (see comm.c) */
  uint64_t moe_ht_created; /* sy_moe_ht_create's successes here: the last object's serial (alike on every rank) */
  int live_objects; /* attention and MoE objects made here and not destroyed (their destroys read the communicator) */
  int destroyed;    /* sy_comm_destroy ran while live_objects > 0: this struct stays for their destroys alone */
  void *backend_state;
};
/* An attention or MoE object made on comm (its create succeeded) / destroyed: the last one's destroy after
 * sy_comm_destroy frees the communicator's struct (sy_comm_destroy left it for them). */
void sy__comm_object_made(sy_comm_t comm);
void sy__comm_object_gone(sy_comm_t comm);

/* Symmetric-allocation registry (mem/symm.c), shared by both backends for argument checks. */
sy_status_t sy__symm_add(sy_comm_t comm, void *ptr, size_t bytes);
sy_status_t sy__symm_remove(sy_comm_t comm, void *ptr);
/* sy_mem_free from inside another public call (a create's failure path): collective as it is, nothing freed after
 * a recorded error (the memory goes with the communicator), and the call's sy_last_error kept (sy_mem_free would
 * open a call of its own and clear it). */
sy_status_t sy__mem_free_within(sy_comm_t comm, void *ptr);
/* The allocation holding [ptr, ptr + bytes), or NULL. bytes may be 0 (then ptr itself must be inside). */
const sy_symm_block_t *sy__symm_find(sy_comm_t comm, const void *ptr, size_t bytes);

/* Refreshes comm->error from the backend's asynchronous state (device error slot, host group abort) and
 * returns it: the gate every public call but destroy passes first. */
sy_status_t sy__comm_health(sy_comm_t comm);
/* A backend's failure of a collective call is the communicator's (a peer may be left waiting): timeouts,
 * mismatches, aborts, CUDA and NVSHMEM errors become sticky. Returns st. */
sy_status_t sy__comm_record(sy_comm_t comm, sy_status_t st, const char *fn);
/* The first exchange of an object's create (core/attn.c, core/moe.c, core/moe_ht.c), over the host allgather
 * before anything is reserved: each rank's `bytes` at `mine` (its configuration) and its verdict on its own
 * arguments (`local`, already logged by this rank where it refused them). Returns `local` where this rank refused
 * them, SY_ERR_INVALID_ARG (logged, naming the rank) where another rank did, else what the exchange returned, with
 * every rank's bytes in `all` (world_size x bytes, rank r's at r x bytes) on success. A rank that refused still
 * makes the exchange, so every rank fails the create at once and the communicator stays usable: one that returned
 * before it would leave the others waiting in it until SY_BOOT_TIMEOUT_MS, or pair it with its next collective. */
sy_status_t sy__create_exchange(sy_comm_t comm, const void *mine, size_t bytes, sy_status_t local, void *all,
                                const char *fn);
/* A create's verdict on its symmetric memory: SY_ERR_NO_MEMORY (logged, naming SY_HEAP_SIZE) where `bytes` exceed
 * this rank's heap, so that the create's exchange fails every rank together instead of sy_mem_alloc refusing on
 * one rank alone (the others then waited in its exchange). */
sy_status_t sy__heap_verdict(sy_comm_t comm, size_t bytes, const char *fn);
/* Rejects the legacy default stream (NULL) on the cuda backend, naming the function (exec/stream.c). */
sy_status_t sy__check_stream(sy_comm_t comm, cudaStream_t stream, const char *fn);

/* Opening of a public call on a communicator: comm non-NULL, the log's rank and a clear sy_last_error
 * (sy__api_enter), no sticky error (a refusal's sy_last_error is the communicator's description). */
#define SY_COMM_GUARD(comm, func)                                     \
  do {                                                                \
    SY_ARG_CHECK((comm) != NULL, func, "comm is NULL");               \
    sy__api_enter((comm)->rank);                                      \
    sy_status_t sy_health_ = sy__comm_health(comm);                   \
    if (sy_health_ != SY_SUCCESS) return sy__comm_refuse(comm, func); \
  } while (0)
/* Returns comm's recorded error, filling sy_last_error with it (when the call has reported nothing yet). */
sy_status_t sy__comm_refuse(sy_comm_t comm, const char *func);

/* Opening of a query that only reads facts fixed when the communicator or an object was made (rank, size,
 * backend, device, sizes a configuration implies): comm non-NULL and the log's rank, but no health gate, so that
 * it still answers after an error (the header's conventions list these calls). */
#define SY_COMM_QUERY_GUARD(comm, func)                 \
  do {                                                  \
    SY_ARG_CHECK((comm) != NULL, func, "comm is NULL"); \
    sy__api_enter((comm)->rank);                        \
  } while (0)

/* Records the first asynchronous/fatal error of a communicator (keeps the first). */
void sy__comm_set_error(sy_comm_t comm, sy_status_t status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Resolved configuration handed to a backend's init. */
typedef struct sy_resolved_config {
  sy_backend_t backend;
  int rank, world_size, local_rank, local_size, device;
  size_t heap_bytes;
  uint64_t timeout_ms, boot_timeout_ms;
  int host_group;
  sy_allgather_fn allgather; /* the caller's bootstrap, or NULL: the launcher's */
  void *allgather_user;
} sy_resolved_config_t;

/* Backends: fill comm->ops and comm->backend_state. */
sy_status_t sy__host_comm_init(sy_comm_t comm, const sy_resolved_config_t *config);
sy_status_t sy__cuda_comm_init(sy_comm_t comm, const sy_resolved_config_t *config);
/* Benchmarks only: every rank stores bytes_per_peer into slot `rank` of every peer's symmetric buf at once
 * (plain stores, no loads, no signals); the direct-store reference sy-bench compares against. */
sy_status_t sy__cuda_store_probe(sy_comm_t comm, void *buf, size_t bytes_per_peer, cudaStream_t stream);
/* Benchmarks only: launches one empty kernel (the launch floor of event-timed calls). */
sy_status_t sy__cuda_empty_launch(cudaStream_t stream);
/* Whether the cuda backend can run here (a device visible and the driver usable); reason on failure. */
int sy__cuda_available(char *reason, size_t reason_bytes);

#ifdef __cplusplus
}
#endif
#endif
