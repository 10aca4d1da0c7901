/*
 * backend.h — the cuda backend's state, shared by its .cu files: the host-mapped error slot the host
 * polls, the device-side state (call counters, abort flag), the symmetric control region (per-peer
 * counters and mailboxes), and the context every kernel gets by value.
 *
 * Control region (symmetric, one per communicator, zeroed at init). Index = the peer the entry is about:
 *   barrier[s]   at rank r: the last barrier call number rank s reached (SET by s)
 *   a2a_mail[p]  at rank r: receiver p entered all-to-all call n and wants r's bytes at {offset, bytes}:
 *                four 8-byte words, each 32 bits of payload and the low 32 bits of n (self-validating, so
 *                the receiver posts with plain stores and no fence, and the sender knows the mail is whole
 *                when all four words carry n)
 *   a2a_data[s]  at rank r: pieces of the current call that arrived from s (ADDed by s, reset by r)
 *   abort_from   at rank r (one word): 0, or 1 + a rank s whose wait timed out and which told r so
 *                (device.cuh: report_error_ctx_at); the first such word stays where s reaches r by
 *                load/store, a later one may overwrite it where only by puts
 *   abort_mail[s] at rank r: that wait's fields, written by s (self-validating words: no order with abort_from)
 * Counters only grow, except a2a_data, which the receiver resets after consuming a call; the sender of the
 * next call writes only after the receiver's next mail, so the reset cannot race.
 */
#ifndef SY_CUDA_BACKEND_H
#define SY_CUDA_BACKEND_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "boot/boot.h"
#include "core/internal.h"
#include "exec/launch.cuh"
#include "exec/work_queue.cuh"

namespace sy {

/* What a failed device wait was waiting for, and the trace's operations and phases: op_list.h. */
enum op_id : int {
  OP_NONE = 0,
#define SY_CUDA_OP(id, trace_name, detail) id,
#define SY_CUDA_PHASE(id, trace_name)
#include "cuda/op_list.h"
#undef SY_CUDA_OP
#undef SY_CUDA_PHASE
};
const char *op_name(int op);  /* the error detail's words */
const char *op_trace(int op); /* the trace's */

enum trace_phase : uint16_t {
  PH_NONE = 0,
#define SY_CUDA_OP(id, trace_name, detail)
#define SY_CUDA_PHASE(id, trace_name) id,
#include "cuda/op_list.h"
#undef SY_CUDA_OP
#undef SY_CUDA_PHASE
};
const char *phase_name(int phase);

/* Per-phase device timestamps (SY_TRACE_FILE): thread 0 of a block marks the begin and end of each phase; the
 * host writes them as Chrome trace JSON at destroy (pid = rank, tid = block). */
struct trace_event {
  uint64_t t_ns; /* %globaltimer */
  uint32_t call;
  uint16_t op, phase;
  uint16_t block;
  int16_t peer;
  uint8_t begin;
  uint8_t pad_[11];
};
static_assert(sizeof(trace_event) == 32, "trace_event is 32 bytes");

/* Host-mapped (cudaHostAllocMapped): written by the device once, read by the host without synchronising. */
struct error_slot {
  int status;         /* 0, or a sy_status_t; written last */
  int op, peer, rank; /* rank: where the error happened (another rank's: a timeout it told this one) */
  uint64_t call, expected, seen, waited_ns;
  int own_op, own_peer; /* a told timeout: the wait of this rank it ended (0 and -1 where none) */
};

/* A timed-out wait as its rank s tells its peers: the error_slot's fields of that wait — call, expected, seen,
 * waited_ns, (op << 32) | (uint32_t)peer — each as two self-validating words, (value << 32) | (s + 1) and
 * (value's high half) | (s + 1), put as values (no source buffer) in any order (device.cuh: report_error_ctx_at). */
struct abort_mail {
  uint64_t word[2 * 5];
};

/* Device memory, local to this rank. */
struct dev_state {
  int abort;         /* raised by the first failed wait; every wait checks it */
  int told;          /* this rank's first timeout was told to the peers, or a peer's was adopted here */
  int error_claimed; /* first-error arbitration */
  uint64_t barrier_calls;
  uint64_t a2a_calls;
  unsigned a2a_blocks_done;
  unsigned trace_next;    /* next free trace_event */
  ticket_queue a2a_queue; /* the all-to-all's pieces in the ticket order (exec/work_queue.cuh) */
  /* What telling the peers of a timeout needs (device.cuh: report_error_ctx_at), set at init: kept here rather than
   * passed from the context, so that the waits' cold call takes fewer arguments (its stack and the kernels' spills) */
  uint64_t timeout_ns;
  uint64_t *abort_from;    /* this rank's address of the control region's abort_from (the same offset at every peer) */
  abort_mail *abort_mails; /* likewise abort_mail[0] */
  int rank, world_size, force_put;
};

struct a2a_mail {
  uint64_t word[4]; /* (payload32 << 32) | call32: offset low/high, bytes low/high */
};

/* Symmetric control region; world_size entries each, laid out by ctrl_layout(). */
struct ctrl_layout {
  size_t barrier, a2a_data, a2a_mail, abort_from, abort_mail, total;
};
ctrl_layout make_ctrl_layout(int world_size);

constexpr int DEV_PEER_TAB = 8;

struct dev_ctx {
  error_slot *slot; /* device alias of the host-mapped slot */
  dev_state *state;
  char *ctrl; /* symmetric control region (this rank's address; the same offset on every rank) */
  uint64_t timeout_ns;
  int rank, world_size;
  int force_put;
  ctrl_layout layout;
  trace_event *trace; /* NULL unless SY_TRACE_FILE is set */
  uint32_t trace_cap;
  /* world_size <= DEV_PEER_TAB: every rank's control region as this GPU reaches it (NULL: puts only), looked
   * up once by the host so that kernels skip nvshmem_ptr's dependent loads (peer_ctrl()) */
  char *peer_ctrl[DEV_PEER_TAB];
};

/* Host-side state of one communicator. */
/* Which order blocks take a call's pieces in where there are more pieces than blocks (SY_PIECE_ORDER). */
enum { PIECE_ORDER_AUTO = 0, PIECE_ORDER_STATIC = 1, PIECE_ORDER_TICKETS = 2 };

struct cuda_state {
  dev_ctx ctx;
  error_slot *slot_host; /* host address of ctx.slot */
  sy_boot_t *boot;
  int num_sms;
  int a2a_blocks;    /* blocks per all-to-all launch (SY_A2A_BLOCKS, else the SM count) */
  size_t a2a_ce_min; /* SY_A2A_CE: a self pair of at least this many bytes goes by cudaMemcpyAsync; 0: never */
  size_t max_piece;  /* the largest piece of one pair's bytes with its own signal (SY_A2A_CHUNK; ref/pieces.h) */
  int piece_order;   /* SY_PIECE_ORDER: PIECE_ORDER_AUTO, _STATIC or _TICKETS */
  bool nvshmem_up;
  char trace_path[512];
  /* The library's own stream-ordered work (plan uploads when the caller gives no stream): a non-blocking stream
   * at the device's highest priority, a pool and pinned staging slots; made at first use (pool.cu: aux_get). */
  cudaStream_t aux_stream;
  sy_pool_t aux_pool;
  sy_host_pool_t aux_staging;
};

/* pool.cu: the communicator's own stream, pool and staging, made at first use; and their release at destroy. */
sy_status_t aux_get(sy_comm_t comm, cuda_state **st);
void aux_release(cuda_state *st);
/* Waits (host, polling, bounded by timeout_ms) until everything enqueued on `stream` is done; SY_ERR_TIMEOUT
 * naming `what` otherwise. Synchronises with that stream only. */
sy_status_t stream_wait(cudaStream_t stream, uint64_t timeout_ms, const char *what);

/* trace.cu: reserve the buffer at init (when SY_TRACE_FILE is set) and write it out at destroy. */
sy_status_t trace_init(cuda_state *st, int rank);
void trace_finish(cuda_state *st);

/* Kernel launches (signal.cu, alltoall.cu). Arguments are already checked by src/core. */
sy_status_t launch_barrier(cuda_state *st, cudaStream_t stream);
sy_status_t launch_signal_wait(cuda_state *st, uint64_t *signal, uint64_t value, cudaStream_t stream);
sy_status_t launch_alltoallv(cuda_state *st, const sy_a2a_args_t *args, cudaStream_t stream);

} // namespace sy

/* Attention dispatch on the GPU (attn.cu). */
extern "C" {
sy_status_t sy__cuda_attn_create(sy_comm_t comm, struct sy_attn *attn);
void sy__cuda_attn_destroy(sy_comm_t comm, struct sy_attn *attn);
sy_status_t sy__cuda_attn_plan_upload(sy_comm_t comm, struct sy_attn_plan *plan, sy_pool_t pool, sy_host_pool_t staging,
                                      cudaStream_t stream);
sy_status_t sy__cuda_attn_run(sy_comm_t comm, struct sy_attn *attn, const struct sy_attn_plan *plan,
                              const sy_attn_call_t *call, cudaStream_t stream);
/* MoE low-latency dispatch and combine on the GPU (moe.cu). */
sy_status_t sy__cuda_moe_create(sy_comm_t comm, struct sy_moe *moe);
void sy__cuda_moe_destroy(sy_comm_t comm, struct sy_moe *moe);
sy_status_t sy__cuda_moe_dispatch_send(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args,
                                       cudaStream_t stream);
sy_status_t sy__cuda_moe_dispatch_recv(sy_comm_t comm, struct sy_moe *moe, const sy_moe_recv_t *recv,
                                       cudaStream_t stream);
sy_status_t sy__cuda_moe_combine_send(sy_comm_t comm, struct sy_moe *moe, const void *expert_out, cudaStream_t stream);
sy_status_t sy__cuda_moe_combine_recv(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args, void *out,
                                      cudaStream_t stream);
sy_status_t sy__cuda_moe_dispatch(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args,
                                  const sy_moe_recv_t *recv, cudaStream_t stream);
sy_status_t sy__cuda_moe_combine(sy_comm_t comm, struct sy_moe *moe, const void *expert_out,
                                 const sy_moe_dispatch_args_t *args, void *out, cudaStream_t stream);
}

#endif
