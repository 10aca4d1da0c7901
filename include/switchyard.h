/*
 * switchyard.h — the host API of switchyard, the one header users need.
 *
 * switchyard moves tokens between GPUs: a communicator over NVSHMEM (the `cuda` backend) or over threads
 * of one process (the `host` reference backend, the oracle every GPU test compares against), symmetric
 * memory, stream-ordered signals and barriers with bounded waits, and the all-to-all the later operations
 * (attention dispatch, MoE dispatch/combine) are built on.
 *
 * Conventions
 * - Every function returns sy_status_t: SY_SUCCESS (0) or a negative error. Bad input is rejected with
 *   SY_ERR_INVALID_ARG, a log line naming the argument, and no state changed.
 * - Calls that enqueue GPU work take a cudaStream_t last. They never use the legacy default stream (pass
 *   a stream you created; NULL is rejected on the cuda backend), never synchronise the device, and are
 *   graph-capturable unless their comment says otherwise. On the host backend the stream is ignored and the
 *   call completes before it returns.
 * - Collective calls (marked "collective") must be made by every rank of the communicator, in the same
 *   order. Operations of one communicator must not run concurrently with each other (one stream at a time,
 *   or ordered by events), as with NCCL.
 * - Ranks that call different collectives at the same point: the host backend tags every collective with its
 *   operation and the communicator's collective number and reports SY_ERR_MISMATCH on every rank, with a log
 *   line naming both operations and ranks; nothing is done, and the error is sticky like a timeout. The cuda
 *   backend matches collectives by order only, so there it is undefined: its host-side exchanges over the
 *   bootstrap (inside sy_mem_alloc, sy_comm_allgather_host, sy_moe_create) pair by round, SY_ERR_MISMATCH
 *   where the byte counts differ and one call's bytes handed to the other where they agree; its device-side
 *   operations (barrier, all-to-all, attention, MoE) each count their own calls, so the waits go unanswered
 *   and end in SY_ERR_TIMEOUT (sy_comm_async_error); and sy_mem_alloc, sy_mem_free and the attention and MoE
 *   create and destroy enter NVSHMEM's own collectives (nvshmem_align, nvshmem_free, nvshmem_barrier_all),
 *   which wait without this library's bound.
 * - A collective call that one rank refuses for its own arguments (SY_ERR_INVALID_ARG, nothing enqueued) is, to
 *   the other ranks, a call that rank did not make, as in the bullet above: their device-side waits end in
 *   SY_ERR_TIMEOUT, and host-side exchanges (on the host backend, every call) pair with that rank's next
 *   collective: SY_ERR_MISMATCH if it is another operation, the next call's data if it is the same one, or
 *   SY_ERR_TIMEOUT if it makes none within the bound. The object creates
 *   (sy_attn_create, sy_moe_create, sy_moe_ht_create) are the exception: a rank that refuses its arguments still
 *   meets the others in the create's first exchange, so every rank returns SY_ERR_INVALID_ARG at once (the
 *   others' log names that rank), nothing is created and the communicator stays usable; so does a rank whose
 *   symmetric heap cannot hold the object's workspace (SY_ERR_NO_MEMORY there, naming SY_HEAP_SIZE). A failed create or
 *   allocation sets its output handle to NULL.
 * - Every wait inside the library is bounded (SY_TIMEOUT_MS, or sy_comm_config_t.timeout_ms; the host-side
 *   exchanges of sy_comm_init and of the object creates, which ranks reach at their own host's pace, by
 *   SY_BOOT_TIMEOUT_MS). A wait that
 *   nobody satisfies ends with SY_ERR_TIMEOUT: the communicator records it (sy_comm_async_error), and so do
 *   peers that disagree (SY_ERR_MISMATCH) and failed CUDA or NVSHMEM calls. The first wait to time out returns
 *   SY_ERR_TIMEOUT; the others it ends (the abort) may return SY_ERR_ABORTED, while sy_comm_async_error reports
 *   the timeout on every rank that recorded it. A timeout on one rank also ends the peers' waits: at their next
 *   check of the abort (every 1,024 polls on the cuda backend; at once on the host backend) each rank without an
 *   earlier error records that timeout as its own SY_ERR_TIMEOUT, with the detail of the rank where it happened
 *   (on the cuda backend followed by the peer this rank was waiting on). A rank learns of it at its next wait
 *   that has to poll; its sy_comm_destroy checks for it. Ranks whose arguments disagree at an object's create or at
 *   sy_mem_alloc get SY_ERR_MISMATCH with nothing made, and the communicator goes on (not recorded).
 * - After a recorded error the communicator does no more work: every call that would move data, wait, allocate,
 *   build or enqueue anything returns the recorded error. What still answers: the destroy calls
 *   (sy_comm_destroy, sy_attn_destroy, sy_attn_plan_destroy, sy_moe_destroy, sy_moe_ht_destroy), the frees
 *   (sy_pool_free, sy_moe_ht_recv_free: memory can always be given back),
 *   sy_comm_async_error, and the queries that only read facts fixed when the communicator or the object was
 *   made, so that a caller can still say who failed: sy_comm_rank, sy_comm_size, sy_comm_backend, sy_comm_device,
 *   sy_attn_workspace_size, sy_moe_workspace_size, sy_moe_recv_sizes, sy_moe_ht_workspace_size, sy_moe_ht_sizes,
 *   sy_attn_plan_info and sy_attn_plan_seqs (and the calls that take no communicator). sy_comm_peer_ptr returns the error (a peer's address is a way to touch that peer).
 * - Sizes are in bytes unless a name says otherwise.
 */
#ifndef SWITCHYARD_H
#define SWITCHYARD_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SY_API __attribute__((visibility("default")))
#else
#define SY_API
#endif

#define SY_VERSION_MAJOR 0
#define SY_VERSION_MINOR 1
#define SY_VERSION_PATCH 0
#define SY_VERSION_CODE  (SY_VERSION_MAJOR * 10000 + SY_VERSION_MINOR * 100 + SY_VERSION_PATCH)

/* ---------------------------------------------------------------------------------------------------- */
/* Status codes. One list; the enum, sy_status_name and sy_status_string are all generated from it.       */
/* ---------------------------------------------------------------------------------------------------- */
#define SY_STATUS_LIST(X)                                               \
  X(SY_SUCCESS, 0, "success")                                           \
  X(SY_ERR_INVALID_ARG, -1, "invalid argument")                         \
  X(SY_ERR_NO_MEMORY, -2, "out of memory")                              \
  X(SY_ERR_CUDA, -3, "cuda runtime error")                              \
  X(SY_ERR_NVSHMEM, -4, "nvshmem error")                                \
  X(SY_ERR_TIMEOUT, -5, "timed out waiting for a peer")                 \
  X(SY_ERR_BOOTSTRAP, -6, "bootstrap (rendezvous) failed")              \
  X(SY_ERR_SYSTEM, -7, "system call failed")                            \
  X(SY_ERR_UNSUPPORTED, -8, "not supported by this backend or build")   \
  X(SY_ERR_NO_DEVICE, -9, "no usable GPU")                              \
  X(SY_ERR_ABORTED, -10, "communicator aborted by an earlier error")    \
  X(SY_ERR_MISMATCH, -11, "ranks disagree on a collective's arguments") \
  X(SY_ERR_INTERNAL, -12, "internal error")

typedef enum sy_status {
#define SY_STATUS_ENUM_(name, value, text) name = value,
  SY_STATUS_LIST(SY_STATUS_ENUM_)
#undef SY_STATUS_ENUM_
} sy_status_t;

/* "SY_ERR_TIMEOUT" for SY_ERR_TIMEOUT; "SY_UNKNOWN_STATUS" for a value not in the list. */
SY_API const char *sy_status_name(sy_status_t status);
/* A short lowercase sentence fragment: "timed out waiting for a peer". */
SY_API const char *sy_status_string(sy_status_t status);
/* The message of the calling thread's last failure: the text of the log line that reported it, without the
 * "[rank N] sy warn: " prefix, whatever SY_DEBUG says. For SY_ERR_INVALID_ARG it names the function, the argument
 * and its value ("sy_alltoall: invalid argument: send is NULL with bytes_per_rank=64"); for a call refused after a
 * recorded error, the communicator's description. Calls clear it as they open, so read right after a call that
 * failed it is that call's message ("" if it reported none); after a success it is "" or an earlier failure's.
 * Thread-local (each thread sees its own; never NULL). The text is valid until the thread's next sy_* call, which
 * may replace or clear it; sy_status_name, sy_status_string, sy_version and sy_backend_name leave it as it is. */
SY_API const char *sy_last_error(void);

/* "0.1.0". */
SY_API const char *sy_version(void);
/* SY_VERSION_CODE of the library actually loaded (compare with the header's to catch a mismatch). */
SY_API int sy_version_code(void);

/* ---------------------------------------------------------------------------------------------------- */
/* Communicator                                                                                           */
/* ---------------------------------------------------------------------------------------------------- */
typedef struct sy_comm *sy_comm_t;
/* Stream-ordered device memory and pinned staging (see "Orchestration" at the end). */
typedef struct sy_pool *sy_pool_t;
typedef struct sy_host_pool *sy_host_pool_t;

/* Most ranks one communicator may have; a larger world size (from the config or the launcher's environment) is
 * rejected at init, naming where it came from. */
#define SY_MAX_WORLD_SIZE 65536

typedef enum sy_backend {
  SY_BACKEND_AUTO = 0, /* SY_BACKEND env variable; else cuda when a GPU is visible, host otherwise */
  SY_BACKEND_CUDA = 1, /* NVSHMEM symmetric heap and kernels, one process per GPU */
  SY_BACKEND_HOST = 2  /* ranks are threads of one process; plain C loops with the same semantics */
} sy_backend_t;

/* "auto", "cuda", "host". */
SY_API const char *sy_backend_name(sy_backend_t backend);

/* The caller's allgather over the communicator's ranks (sy_comm_config_t.allgather): every rank gives `bytes`
 * bytes at `send` (the same count on every rank), and `recv` receives world_size * bytes, rank r's at r * bytes.
 * Returns 0 on success; anything else fails the library's call with SY_ERR_BOOTSTRAP. */
typedef int (*sy_allgather_fn)(void *user, const void *send, void *recv, size_t bytes);

typedef struct sy_comm_config {
  size_t size;          /* sizeof(sy_comm_config_t): lets later versions add fields */
  sy_backend_t backend; /* SY_BACKEND_AUTO by default */
  int rank;             /* -1: from the launcher's environment (syrun, torchrun, srun, mpirun) */
  int world_size;       /* -1: from the launcher's environment; 1 when there is none; at most SY_MAX_WORLD_SIZE */
  int device;           /* cuda backend: -1 picks SY_DEVICE, else local rank modulo the visible GPUs */
  size_t heap_bytes;    /* symmetric memory to reserve per rank; 0: SY_HEAP_SIZE (which must not be 0) */
  uint64_t timeout_ms;  /* bound on every wait; 0: SY_TIMEOUT_MS */
  int host_group;       /* host backend: threads that pass the same value form one communicator */
  /* cuda backend: how the ranks meet before NVSHMEM exists. NULL: the launcher's rendezvous (sy_comm_init).
   * Otherwise every host-side exchange goes through this function instead (a torch.distributed group, an MPI
   * communicator: ranks the launcher does not know as a world): NVSHMEM's unique id at init, and the exchanges
   * of sy_mem_alloc, sy_comm_allgather_host and the MoE creates. It needs rank and world_size set;
   * it is called on the thread making the library's call, by every rank at the same points in the same order,
   * and must stay callable until sy_comm_destroy returns. Its waits are bounded by the caller, not by
   * SY_BOOT_TIMEOUT_MS. The host backend, whose ranks meet in the process, never calls it. */
  sy_allgather_fn allgather;
  void *allgather_user; /* passed to allgather */
} sy_comm_config_t;

#define SY_COMM_CONFIG_INIT \
  { sizeof(sy_comm_config_t), SY_BACKEND_AUTO, -1, -1, -1, 0, 0, 0, NULL, NULL }

/* Collective. Creates this rank's communicator. cuda backend: selects the GPU, exchanges NVSHMEM's unique
 * id through the launcher's rendezvous (syrun's private directory, or TCP to MASTER_ADDR: rank 0 listens only
 * at that address and answers only ranks that complete the handshake, with SY_BOOT_SECRET when it is set) or
 * through config->allgather, initialises NVSHMEM and reserves the library's control memory. host backend: each of
 * world_size threads calls it with its own rank; it returns once all have arrived (or fails naming the ranks that
 * never did). config may be NULL (all defaults). Not graph-capturable. */
SY_API sy_status_t sy_comm_init(sy_comm_t *comm, const sy_comm_config_t *config);

/* Collective. Frees everything the communicator holds, symmetric allocations included. Accepted after an
 * error; comm may be NULL (no-op). Destroy the attention and MoE objects made on it first: one still alive is
 * warned of, its destroy then frees only its own memory (the communicator's struct stays until the last such
 * destroy), and its other calls are refused (SY_ERR_INVALID_ARG), as is sy_comm_destroy again meanwhile. After SY_ERR_TIMEOUT a peer may be gone, so the cuda backend then does not
 * wait for the peers: it frees this rank's own resources and leaves the symmetric heap and NVSHMEM to the
 * process's exit (a later sy_comm_init on the cuda backend in the same process returns SY_ERR_UNSUPPORTED). */
SY_API sy_status_t sy_comm_destroy(sy_comm_t comm);

/* Queries of what init fixed; they answer after an error too (see the conventions at the top). */
SY_API sy_status_t sy_comm_rank(sy_comm_t comm, int *rank);
SY_API sy_status_t sy_comm_size(sy_comm_t comm, int *world_size);
SY_API sy_status_t sy_comm_backend(sy_comm_t comm, sy_backend_t *backend);
/* cuda backend: the CUDA device this rank uses; host backend: -1. */
SY_API sy_status_t sy_comm_device(sy_comm_t comm, int *device);

/* The first asynchronous error the communicator saw (a timed-out wait on the device, a peer's arguments
 * that disagree), or SY_SUCCESS. Does not synchronise. When detail is non-NULL, a one-line description
 * (operation, call number, peer, expected and seen values) is written into it (detail_bytes with the NUL). */
SY_API sy_status_t sy_comm_async_error(sy_comm_t comm, sy_status_t *async_status, char *detail, size_t detail_bytes);

/* Collective, blocking, host-side: every rank contributes `bytes` from send; recv receives world_size * bytes
 * in rank order. Travels over the bootstrap (syrun's directory or TCP, or config->allgather), not the GPU: meant
 * for small things such as an ncclUniqueId. Bounded by the bootstrap timeout (config->allgather: by the caller). */
SY_API sy_status_t sy_comm_allgather_host(sy_comm_t comm, const void *send, void *recv, size_t bytes);

/* ---------------------------------------------------------------------------------------------------- */
/* Symmetric memory                                                                                       */
/* ---------------------------------------------------------------------------------------------------- */
/* Collective. Every rank allocates the same number of bytes (ranks that disagree get SY_ERR_MISMATCH);
 * the buffer is at the same offset of every rank's symmetric heap, so peers can address it. Aligned to
 * 256 bytes. Contents are undefined. bytes == 0 is rejected. Not graph-capturable; synchronises. */
SY_API sy_status_t sy_mem_alloc(sy_comm_t comm, size_t bytes, void **ptr);
/* Collective. ptr must come from sy_mem_alloc on this communicator. */
SY_API sy_status_t sy_mem_free(sy_comm_t comm, void *ptr);

/* For ptr inside a symmetric allocation: the address at which this process can load and store the
 * same bytes of `peer` (NVLink/PCIe peer mapping; on the host backend, always). *peer_ptr is NULL, with
 * SY_SUCCESS, when the peer is reachable only by NVSHMEM puts (or SY_FORCE_PUT is set). */
SY_API sy_status_t sy_comm_peer_ptr(sy_comm_t comm, const void *ptr, int peer, void **peer_ptr);

/* ---------------------------------------------------------------------------------------------------- */
/* Signals and barrier                                                                                    */
/* ---------------------------------------------------------------------------------------------------- */
typedef enum sy_signal_op {
  SY_SIGNAL_SET = 0, /* *signal = value */
  SY_SIGNAL_ADD = 1  /* *signal += value */
} sy_signal_op_t;

/* Stream-ordered barrier of all ranks: returns (on the stream) once every rank reached it; every store and
 * put issued before it on any rank is visible after it on every rank. Graph-capturable. */
SY_API sy_status_t sy_comm_barrier(sy_comm_t comm, cudaStream_t stream);

/* Stream-ordered one-sided put with signal: copies bytes from src (this rank's device memory; on the host
 * backend any memory) to dst on `peer` (dst is a symmetric address, as this rank sees it), then applies op
 * with value to `signal` (a symmetric uint64_t) on peer, after the data is visible there. bytes may be 0
 * (signal only). Graph-capturable. */
SY_API sy_status_t sy_put_signal(sy_comm_t comm, void *dst, const void *src, size_t bytes, uint64_t *signal,
                                 sy_signal_op_t op, uint64_t value, int peer, cudaStream_t stream);

/* Stream-ordered bounded wait until this rank's symmetric `signal` >= value. On timeout the stream moves
 * on, the communicator records SY_ERR_TIMEOUT, and later calls return it. Graph-capturable. */
SY_API sy_status_t sy_signal_wait(sy_comm_t comm, uint64_t *signal, uint64_t value, cudaStream_t stream);

/* ---------------------------------------------------------------------------------------------------- */
/* All-to-all                                                                                             */
/* ---------------------------------------------------------------------------------------------------- */
/* Collective, stream-ordered. Rank r sends send_bytes[p] bytes starting at send + send_offsets[p] to every
 * rank p (itself included), which places them at recv + recv_offsets[r]; recv_bytes[r] at p must equal
 * send_bytes[p] at r (a disagreeing pair is not copied and is reported as SY_ERR_MISMATCH through the
 * async error on the cuda backend, returned directly on the host backend).
 * - send: device memory of this rank (any, symmetric or not; see "Buffers" in the attention section for peers
 *   beyond one node); when it lies in a symmetric allocation, every [send_offsets[p], +send_bytes[p]) must lie
 *   inside that allocation. Send ranges may overlap. recv: a symmetric allocation (sy_mem_alloc), every
 *   non-empty [recv_offsets[p], +recv_bytes[p]) inside it; the receive ranges must not overlap each other nor any
 *   send range (no in-place all-to-all: SY_ERR_INVALID_ARG naming both). The offset of an empty range is not
 *   looked at, and with nothing to receive recv may be NULL.
 * - The four arrays are host arrays of world_size entries, read during the call (captured by value in a
 *   graph). Any byte counts and offsets; 16-byte aligned ones take the fast path. A count, an offset plus its
 *   count, or the sum of one side's counts that does not fit a size_t is rejected (SY_ERR_INVALID_ARG, naming
 *   the entry), as is any range that leaves its buffer.
 * - Peers reachable by load/store get direct stores; others get NVSHMEM puts. The call signals every peer
 *   even with nothing to send, and waits (bounded) until each peer has entered the same call before writing
 *   into its recv, so recv may be reused by the caller as soon as the call has completed on the stream.
 * Graph-capturable; the call number lives on the device, so replays need no reset. */
SY_API sy_status_t sy_alltoallv(sy_comm_t comm, const void *send, const size_t *send_bytes, const size_t *send_offsets,
                                void *recv, const size_t *recv_bytes, const size_t *recv_offsets, cudaStream_t stream);

/* sy_alltoallv with bytes_per_rank to and from every rank, packed in rank order on both sides (send and recv
 * hold world_size x bytes_per_rank bytes). Its rejections name sy_alltoall and bytes_per_rank. */
SY_API sy_status_t sy_alltoall(sy_comm_t comm, const void *send, void *recv, size_t bytes_per_rank,
                               cudaStream_t stream);

/* ---------------------------------------------------------------------------------------------------- */
/* Context-parallel attention dispatch                                                                    */
/*                                                                                                        */
/* Tokens live in the MLP layout: rank r holds num_tokens[r] rows, its sequences back to back. A plan      */
/* (built on the CPU from every rank's sequence lengths and placements) says where each sequence's query   */
/* rows go (one rank, or -1 = not sent) and where its key/value rows go (up to max_replicas ranks each).   */
/* At a destination, rows arrive in the attention layout ordered by source rank, then sequence, then       */
/* replica. Four directions move rows by a plan:                                                          */
/*   Q forward      MLP rows -> attention layout (q_recv)                                                 */
/*   Q+KV forward   the same, plus each KV sequence to every listed replica rank (kv_recv)                */
/*   Q reverse      attention-layout rows (e.g. the attention output) -> the owner's original rows        */
/*   KV backward    every replica's KV gradient -> the owner, summed in fp32 in replica order 0, 1, ...   */
/*                  (deterministic), one gradient per owned token; or, with SY_ATTN_UNSUMMED, each replica */
/*                  separately as [max_replicas][num_tokens] rows, absent replicas zero                   */
/* Rows are opaque bytes of any size; the KV backward knows its element type.                             */
/*                                                                                                        */
/* Buffers. Destinations (q_recv, kv_recv, out) are symmetric allocations (sy_mem_alloc): peers write     */
/* them. Sources (q, kv, attn_rows, grad_rows) are read only by this rank's own call (on the cuda backend */
/* by its kernel on this rank's GPU; on the host backend, within the call, by the threads of the ranks it */
/* sends to) and never addressed by a peer: any device memory of this rank will do (cudaMalloc, a pool, a */
/* framework's tensor, or a symmetric allocation such as q_recv itself), symmetric or not. A source that  */
/* lies in a symmetric allocation must have all its rows inside that allocation (checked). Beyond one     */
/* node, where a peer is reachable only by NVSHMEM puts, the puts read the source in place, so there it   */
/* must be memory NVSHMEM can send from: a symmetric allocation, or memory registered with                */
/* nvshmemx_buffer_register.                                                                              */
/* ---------------------------------------------------------------------------------------------------- */
typedef struct sy_attn_plan *sy_attn_plan_t;
typedef struct sy_attn *sy_attn_t;

typedef enum sy_dtype { SY_DTYPE_BF16 = 0, SY_DTYPE_FP16 = 1, SY_DTYPE_FP32 = 2 } sy_dtype_t;

/* Every rank's sequences, the same on every rank (each rank builds the plan for itself from it). */
typedef struct sy_attn_plan_desc {
  size_t size;                    /* sizeof(sy_attn_plan_desc_t) */
  int world_size;                 /* ranks */
  int max_replicas;               /* C: KV destinations per sequence, 1..world_size (0: no KV) */
  const int *num_seqs;            /* [world_size] sequences of each rank */
  const int64_t *num_tokens;      /* [world_size] rows of each rank's MLP layout (= sum of its lengths) */
  const int64_t *const *seq_lens; /* [world_size][num_seqs[r]] tokens, each >= 0 (an empty sequence moves
                                     nothing and keeps its place in sy_attn_plan_seqs' lists) */
  const int *const *q_dst;        /* [world_size][num_seqs[r]] rank, or -1: not sent */
  const int *const *kv_dst;       /* [world_size][num_seqs[r] * max_replicas] rank or -1; NULL when C is 0.
                                     A rank appears at most once in one sequence's list. */
} sy_attn_plan_desc_t;

#define SY_ATTN_PLAN_DESC_INIT \
  { sizeof(sy_attn_plan_desc_t), 0, 0, NULL, NULL, NULL, NULL, NULL }

/* What a plan asks of the buffers, in rows. Symmetric buffers (q_recv, kv_recv, q_reverse's out) must be the
 * same size on every rank: size them by the max_* fields, the most any rank needs, which every rank computes
 * alike from the description (no communication). One buffer serving several plans: the max over the plans. */
typedef struct sy_attn_plan_info {
  size_t size;         /* sizeof(sy_attn_plan_info_t): initialise with SY_ATTN_PLAN_INFO_INIT */
  int64_t num_tokens;  /* this rank's MLP rows */
  int64_t q_recv_rows; /* rows of q_recv (attention layout) this rank receives */
  int64_t kv_recv_rows;
  const int64_t *q_recv_from;  /* [world_size] rows from each source, in arrival order (valid with the plan) */
  const int64_t *kv_recv_from; /* [world_size] */
  const int64_t *q_send_to;    /* [world_size] */
  const int64_t *kv_send_to;   /* [world_size] */
  int64_t max_num_tokens;      /* over every rank: num_tokens (size q_reverse's out, config.max_tokens by it) */
  int64_t max_q_recv_rows;     /* over every rank: q_recv_rows (size q_recv by it) */
  int64_t max_kv_recv_rows;    /* over every rank: kv_recv_rows (size kv_recv by it) */
  uint64_t fingerprint;        /* a hash of the description: equal on every rank for the same description */
} sy_attn_plan_info_t;

#define SY_ATTN_PLAN_INFO_INIT \
  { sizeof(sy_attn_plan_info_t), 0, 0, 0, NULL, NULL, NULL, NULL, 0, 0, 0, 0 }

/* One sequence (or one KV replica of it) as a plan moves it forward: rows [src_row, src_row + rows) of rank
 * src_rank's MLP layout (its sequence seq; replica c of its KV, 0 for Q) land at rows [dst_row, dst_row + rows)
 * of rank dst_rank's q_recv (kv_recv). dst_rank and dst_row are -1 where it is not sent. The reverse directions
 * move the same rows back. */
typedef struct sy_attn_seq_place {
  int src_rank, seq, replica, dst_rank;
  int64_t src_row, dst_row, rows;
} sy_attn_seq_place_t;

/* This rank's forward metadata, sequence by sequence (arrays valid while the plan lives):
 *   q_send[i]                      its sequence i's queries (num_seqs entries);
 *   kv_send[i * max_replicas + c]  replica c of its sequence i's keys/values;
 *   q_recv, kv_recv                the sequences it receives, in arrival order (source rank, then sequence,
 *                                  then replica), back to back from row 0: the attention layout's sequence
 *                                  boundaries (cu_seqlens) and where each came from. */
typedef struct sy_attn_plan_seqs {
  size_t size; /* sizeof(sy_attn_plan_seqs_t) */
  int num_seqs, max_replicas;
  int64_t q_recv_count, kv_recv_count;
  const sy_attn_seq_place_t *q_send, *kv_send, *q_recv, *kv_recv;
} sy_attn_plan_seqs_t;

#define SY_ATTN_PLAN_SEQS_INIT \
  { sizeof(sy_attn_plan_seqs_t), 0, 0, 0, 0, NULL, NULL, NULL, NULL }

/* Builds this rank's plan (forward and reverse metadata) from the global description; rejects inconsistent
 * input naming the argument (lengths that do not tile num_tokens, a rank outside the world, max_replicas too
 * large, a rank listed twice for one sequence). CPU only: comm gives the rank and backend (device copies of
 * the metadata are made here, on the communicator's own non-blocking stream, which the call waits for, bounded:
 * no device synchronisation; sy_attn_plan_create_async below is the stream-ordered form). Not graph-capturable. */
SY_API sy_status_t sy_attn_plan_create(sy_comm_t comm, const sy_attn_plan_desc_t *desc, sy_attn_plan_t *plan);
/* info: initialised with SY_ATTN_PLAN_INFO_INIT (its size field is checked; a larger size from a newer header
 * gets the fields this library knows). */
SY_API sy_status_t sy_attn_plan_info(sy_attn_plan_t plan, sy_attn_plan_info_t *info);
/* seqs: initialised with SY_ATTN_PLAN_SEQS_INIT (its size field is checked). */
SY_API sy_status_t sy_attn_plan_seqs(sy_attn_plan_t plan, sy_attn_plan_seqs_t *seqs);
/* Frees the plan at once: its device copy after the device is done with it (the call synchronises the device
 * that holds it, so a kernel that never ends keeps it waiting). sy_attn_plan_destroy_async gives it back on the
 * stream of the plan's last use instead, without waiting. */
SY_API sy_status_t sy_attn_plan_destroy(sy_attn_plan_t plan);
/* Stream-ordered sy_attn_plan_create: the plan's device copy comes from `pool` on `stream` and is copied there
 * through `staging`'s pinned slots (each given back by the stream when its copy is done), so building a plan never
 * synchronises the device nor waits for the GPU (the host waits only while every staging slot is still in use).
 * Calls on `stream`, or ordered after it by an event, may use the plan. pool, staging NULL: the communicator's own.
 * The plan holds its pool until it is destroyed (the pool, the staging and even the communicator may be destroyed
 * before the plan). Not graph-capturable: a capturing stream is refused. Host backend: as sy_attn_plan_create. A
 * communicator's plans are made and destroyed by one thread at a time, as its other calls are. */
SY_API sy_status_t sy_attn_plan_create_async(sy_comm_t comm, const sy_attn_plan_desc_t *desc, sy_pool_t pool,
                                             sy_host_pool_t staging, cudaStream_t stream, sy_attn_plan_t *plan);
/* The plan freed, its device copy given back to its pool on `stream` (after every call enqueued there before,
 * which must include the plan's last use). */
SY_API sy_status_t sy_attn_plan_destroy_async(sy_attn_plan_t plan, cudaStream_t stream);

typedef struct sy_attn_config {
  size_t size;                  /* sizeof(sy_attn_config_t) */
  int64_t max_tokens;           /* most MLP rows any rank will own in any plan used with this object */
  int max_replicas;             /* most KV replicas per sequence (C) */
  size_t max_kv_grad_row_bytes; /* KV backward: largest gradient row, bytes (0: no KV backward) */
} sy_attn_config_t;

#define SY_ATTN_CONFIG_INIT \
  { sizeof(sy_attn_config_t), 0, 0, 0 }

/* Symmetric memory sy_attn_create reserves for a configuration: the KV backward's replica staging. The cuda
 * backend adds 56 bytes per rank of control words on top; leave that much room in SY_HEAP_SIZE too. */
SY_API sy_status_t sy_attn_workspace_size(sy_comm_t comm, const sy_attn_config_t *config, size_t *bytes);

/* Collective. Reserves what the operation needs; calls of one object follow each other on streams with no
 * barrier or reset in between (call numbers live on the device). */
SY_API sy_status_t sy_attn_create(sy_comm_t comm, const sy_attn_config_t *config, sy_attn_t *attn);
/* Collective (it frees symmetric memory). Accepted after an error. */
SY_API sy_status_t sy_attn_destroy(sy_attn_t attn);

/* Collective, stream-ordered, graph-capturable. q: this rank's MLP rows (device memory), q_row_bytes each.
 * q_recv: a symmetric allocation with room for plan info's q_recv_rows rows (allocate max_q_recv_rows on every
 * rank). Rows of sequences whose destination is -1 are not sent.
 * Every rank must pass a plan built from the same description, with the same row sizes. Each call compares
 * the plans' fingerprints (a hash of the description): where ranks disagree, the host backend returns
 * SY_ERR_MISMATCH from the call on every rank, copies nothing, and logs the ranks whose plans differ; the cuda
 * backend compares per pair (the fingerprint with the call's directions and row sizes), moves no rows between
 * two ranks that disagree, and reports SY_ERR_MISMATCH asynchronously (sy_comm_async_error, then every later
 * call) on both, naming the peer; the call ends without waiting for the rows that were not sent, and serves the
 * pairs that agree. Calls already enqueued behind it (or in a graph) still run and stay correct where their
 * plans agree. The same holds for the three directions below. */
SY_API sy_status_t sy_attn_q_forward(sy_attn_t attn, sy_attn_plan_t plan, const void *q, size_t q_row_bytes,
                                     void *q_recv, cudaStream_t stream);
/* Q forward plus each KV sequence to every replica rank listed for it. kv_recv: symmetric, kv_recv_rows rows. */
SY_API sy_status_t sy_attn_qkv_forward(sy_attn_t attn, sy_attn_plan_t plan, const void *q, size_t q_row_bytes,
                                       void *q_recv, const void *kv, size_t kv_row_bytes, void *kv_recv,
                                       cudaStream_t stream);
/* Attention-layout rows (q_recv_rows of them, row_bytes each) back to their owners' original rows in out
 * (a symmetric allocation of num_tokens rows). Rows of sequences that were not sent are left untouched.
 * attn_rows: a source (see "Buffers" above): any device memory of this rank holding q_recv_rows rows, e.g. the
 * attention output, or q_recv itself; it must not overlap out. */
SY_API sy_status_t sy_attn_q_reverse(sy_attn_t attn, sy_attn_plan_t plan, const void *attn_rows, size_t row_bytes,
                                     void *out, cudaStream_t stream);

#define SY_ATTN_UNSUMMED 1u
/* KV gradients (kv_recv_rows rows in the KV attention layout, row_bytes each, elements of dtype) back to
 * their owners. grad_rows: a source (see "Buffers" above): any device memory of this rank holding kv_recv_rows
 * rows; it must not overlap grad_out or the object's staging. Default: grad_out holds num_tokens rows, each the
 * fp32 sum over the sequence's replicas in replica order, rounded once to dtype; tokens of sequences with no
 * replica are zero. SY_ATTN_UNSUMMED: grad_out holds max_replicas * num_tokens rows, replica c of token t at
 * row c * num_tokens + t, zero where the sequence has no replica c. grad_out: any device memory of this rank. */
SY_API sy_status_t sy_attn_kv_backward(sy_attn_t attn, sy_attn_plan_t plan, const void *grad_rows, size_t row_bytes,
                                       sy_dtype_t dtype, unsigned flags, void *grad_out, cudaStream_t stream);

/* ---- Placement planner (core-attention load balancing) --------------------------------------------- */
/* Every rank holds documents (token counts, back to back in its MLP layout) and is also an attention
 * server. The planner splits documents into head/tail shards and places each shard's queries on a server
 * so that every server's causal attention work — for a shard of q queries over kv keys (its own tokens and
 * every earlier token of its document), q*kv - q*(q-1)/2 — is within `tolerance` of the mean, preferring
 * moves that send fewer bytes (a shard stays on its owner when it can). A shard's KV goes to every server
 * that holds a later-or-same shard of the same document. The result is a plan description (shards are the
 * sequences) ready for sy_attn_plan_create. */
typedef struct sy_attn_placement *sy_attn_placement_t;

typedef struct sy_attn_place_desc {
  size_t size; /* sizeof(sy_attn_place_desc_t) */
  int world_size;
  const int *num_docs;              /* [world_size] */
  const int64_t *const *doc_lens;   /* [world_size][num_docs[r]] tokens, each >= 0 (an empty document stays
                                       one empty sequence on its owner); INT_MAX documents in all at most */
  double tolerance;                 /* every server's work within (1 +- tolerance) x the mean; 0: 0.10 */
  int max_shards_per_doc;           /* 0: 2 x world_size (room to shift a cut between two servers) */
  size_t q_row_bytes, kv_row_bytes; /* weights for "bytes sent" (0: 1 each) */
} sy_attn_place_desc_t;

#define SY_ATTN_PLACE_DESC_INIT \
  { sizeof(sy_attn_place_desc_t), 0, NULL, NULL, 0.0, 0, 0, 0 }

typedef struct sy_attn_place_stats {
  double max_over_mean; /* the most loaded server's work over the mean (1.0 = perfect) */
  double work_max, work_mean;
  int64_t q_rows_moved;  /* query rows placed off their owner */
  int64_t kv_rows_moved; /* KV rows sent to servers other than their owner, counting each replica */
  int shards;            /* sequences in the result */
  int balanced;          /* 1 if every server is within tolerance of the mean, above and below */
  double min_over_mean;  /* the least loaded server's work over the mean */
  double work_min;
} sy_attn_place_stats_t;

/* Pure CPU. On success *placement holds the shards; the caller reads them with sy_attn_placement_desc. */
SY_API sy_status_t sy_attn_place(const sy_attn_place_desc_t *desc, sy_attn_placement_t *placement);
/* Fills desc (pointers owned by the placement, valid until it is destroyed) for sy_attn_plan_create. */
SY_API sy_status_t sy_attn_placement_desc(sy_attn_placement_t placement, sy_attn_plan_desc_t *desc);
SY_API sy_status_t sy_attn_placement_stats(sy_attn_placement_t placement, sy_attn_place_stats_t *stats);
SY_API sy_status_t sy_attn_placement_destroy(sy_attn_placement_t placement);

/* ---------------------------------------------------------------------------------------------------- */
/* Expert-parallel (MoE) low-latency dispatch and combine                                                 */
/*                                                                                                        */
/* num_experts experts are spread evenly: rank p holds experts p*L .. p*L + L - 1 (L = num_experts / world */
/* size), local index e = expert - p*L. Each rank dispatches up to max_tokens BF16 tokens of `hidden`       */
/* elements to its top_k experts (ids -1 = none; an id may appear once per token); the experts' ranks      */
/* receive them in an expert-major layout of S = world_size * max_tokens slots per local expert, ordered by */
/* source rank, then source token. Combine brings the experts' BF16 outputs back and sums them per token.   */
/*                                                                                                        */
/* Wire formats. FP8: E4M3 with one fp32 scale per 128 elements, quantised in the dispatch kernel:          */
/*   amax = max |x| over the group (x = the bf16 value as fp32); scale = amax / 448 (fp32, round to nearest  */
/*   even), or 1 for an all-zero group; q = E4M3(x / scale), round to nearest even, saturating to +-448.     */
/*   FP8_UE8M0: the same with scale rounded up to a power of two (2^ceil(log2(amax / 448))), so dequantising */
/*   is exact in the exponent. BF16: the tokens as they are. The host backend quantises bit for bit alike.   */
/*                                                                                                        */
/* Combine sums in fp32 with fused multiply-adds, accumulators starting at +0, in a fixed order:           */
/*   default (rank-reduced): each expert's rank adds w_k * y_k over the token's experts it holds, k in order,*/
/*     rounds that partial to bf16 and sends one vector per (token, rank); the owner adds the partials in   */
/*     ascending rank order and rounds once to bf16. Each token crosses each link once in both directions.  */
/*   SY_MOE_PER_EXPERT: one copy per (token, expert) both ways — a message per (token, expert) out, y_k    */
/*     back as is — and the owner adds w_k * y_k for k = 0..top_k-1. (The default de-duplicates both ways:  */
/*     a message per (token, rank), expanded to the rank's experts on arrival.)                           */
/* The two modes round differently; each is deterministic (same inputs, same bits).                        */
/*                                                                                                        */
/* Halves. dispatch = dispatch_send + dispatch_recv, combine = combine_send + combine_recv, on one stream.  */
/* Each rank calls them in the order send, recv, send, recv, ... (dispatch, then its combine, then the next */
/* dispatch); receive regions are double-buffered by call parity, so a rank may run ahead of its peers by   */
/* one half but must complete the receive half of call n before the send half of call n + 2. Every call is */
/* graph-capturable (phase and signal values live on the device); none allocates or synchronises. A graph */
/* must hold whole rounds (the four halves in order), as the object's host-side order check advances at    */
/* capture and the device's call number at replay.                                                        */
/*                                                                                                        */
/* Routing weights (fp32 [num_tokens][top_k], w_k for the token's k-th expert). Pass the same weights to  */
/* a dispatch and to the combine that answers it; the mode decides which of the two reads them:           */
/*   default (rank-reduced): the dispatch (sy_moe_dispatch, sy_moe_dispatch_send), because the weights    */
/*     travel with each token and the experts' ranks weight their outputs before adding a token's         */
/*     partials;                                                                                          */
/*   SY_MOE_PER_EXPERT: the combine (sy_moe_combine, sy_moe_combine_recv), because the outputs come back  */
/*     unweighted and this rank weights each one as it sums them.                                         */
/* The call that reads them rejects NULL (with num_tokens > 0), naming itself and the mode; the other     */
/* accepts any pointer, NULL included, and never reads it.                                                */
/*                                                                                                        */
/* Buffers. tokens, expert_ids and weights may be reused once dispatch_send has completed on the stream;    */
/* expert_out once combine_send has; combine_recv's expert_ids and weights until it completes (on the host  */
/* backend every call completes before it returns). recv and out are plain device memory of the caller.   */
/*                                                                                                        */
/* Errors found on the device (cuda backend) are reported through sy_comm_async_error and are sticky like  */
/* any asynchronous error: an id outside [-1, num_experts) or repeated within its token (the entry is      */
/* treated as -1), a combine whose num_tokens or expert_ids differ from its dispatch's (the dispatch's ids  */
/* are used, for the first min(num_tokens, the dispatch's) rows of out). The host backend rejects such     */
/* calls before anything is sent.                                                                          */
/*                                                                                                        */
/* Limits of the cuda backend: about max_tokens x (top_k + 3) x 4 + num_experts x 4 bytes (the ids, the   */
/* routing and the per-expert counts) must fit in one thread block's shared memory (sy_moe_create returns  */
/* SY_ERR_UNSUPPORTED, naming them, otherwise). sy_moe_dispatch and sy_moe_combine run each as one kernel  */
/* of at most one block per SM whose blocks wait for each other (SY_MOE_FUSED=0: two kernels): it needs    */
/* the GPU's SMs to itself long enough to start every block, so a kernel that occupies SMs until this one  */
/* ends must not run beside it.                                                                            */
/* Besides the symmetric workspace it keeps (world_size x m + 1) x max_tokens x top_k x 4 bytes of local */
/* device memory (m = 1, or top_k with SY_MOE_PER_EXPERT), and a staging area for NVSHMEM puts when some  */
/* peer is not load/store reachable.                                                                      */
/* ---------------------------------------------------------------------------------------------------- */
typedef struct sy_moe *sy_moe_t;

/* SY_MOE_WIRE_FP8_GIVEN (high-throughput mode only): the caller passes E4M3 tokens and their fp32 scales, which
 * travel as they are. */
typedef enum sy_moe_wire {
  SY_MOE_WIRE_FP8 = 0,
  SY_MOE_WIRE_FP8_UE8M0 = 1,
  SY_MOE_WIRE_BF16 = 2,
  SY_MOE_WIRE_FP8_GIVEN = 3
} sy_moe_wire_t;
typedef enum sy_index_type { SY_INDEX_INT32 = 0, SY_INDEX_INT64 = 1 } sy_index_type_t;

#define SY_MOE_PER_EXPERT 1u  /* one copy per (token, expert) both ways instead of per (token, rank) */
#define SY_MOE_FP8_GROUP  128 /* elements per FP8 scale */

typedef struct sy_moe_config {
  size_t size;        /* sizeof(sy_moe_config_t) */
  int max_tokens;     /* tokens per rank per call, >= 1 */
  int hidden;         /* elements per token; a multiple of 128 for the FP8 wires, of 8 for BF16 */
  int top_k;          /* experts per token, 1..32 and at most num_experts (a token's experts are distinct) */
  int num_experts;    /* a positive multiple of the world size */
  sy_moe_wire_t wire; /* SY_MOE_WIRE_FP8 by default */
  unsigned flags;     /* SY_MOE_PER_EXPERT */
} sy_moe_config_t;

#define SY_MOE_CONFIG_INIT \
  { sizeof(sy_moe_config_t), 0, 0, 0, 0, SY_MOE_WIRE_FP8, 0u }

/* What a dispatch writes on an experts' rank, in the caller's device memory (L local experts, S slots each).
 * Slots at or beyond expert_counts[e] are left as they were. */
typedef struct sy_moe_recv {
  void *tokens;           /* [L][S][hidden]: E4M3 bytes (FP8 wires) or bf16 */
  float *scales;          /* FP8 wires: [L][hidden/128][S] fp32, group-major and slot-minor (the MN-major
                              scale layout DeepGEMM's m-grouped masked FP8 GEMM reads); BF16: NULL */
  int32_t *src;           /* [L][S][2]: {source rank, source token index} */
  int32_t *expert_counts; /* [L]: slots filled */
  int32_t *rank_counts;   /* [L][W]: slots filled from each source rank (they start at the prefix sum) */
} sy_moe_recv_t;

/* The bytes of each buffer of sy_moe_recv_t for an object (what sy_moe_dispatch writes and its caller
 * allocates), and of the combine's expert_out. Initialise with SY_MOE_RECV_SIZES_INIT (its size field is
 * checked; a later version may add fields at the end). */
typedef struct sy_moe_recv_sizes {
  size_t size;                /* sizeof(sy_moe_recv_sizes_t) */
  int local_experts;          /* L = num_experts / world_size */
  int slots;                  /* S = world_size * max_tokens */
  size_t tokens_bytes;        /* recv.tokens: L x S x hidden x (1 on the FP8 wires, 2 on BF16) */
  size_t scales_bytes;        /* recv.scales: L x hidden/128 x S x 4 on the FP8 wires; 0 on BF16 (pass NULL) */
  size_t src_bytes;           /* recv.src: L x S x 2 x 4 */
  size_t expert_counts_bytes; /* recv.expert_counts: L x 4 */
  size_t rank_counts_bytes;   /* recv.rank_counts: L x world_size x 4 */
  size_t expert_out_bytes;    /* the combine's expert_out: L x S x hidden x 2 */
} sy_moe_recv_sizes_t;

#define SY_MOE_RECV_SIZES_INIT \
  { sizeof(sy_moe_recv_sizes_t), 0, 0, 0, 0, 0, 0, 0, 0 }

/* Symmetric memory sy_moe_create reserves: both parities of the dispatch receive region (world_size x
 * max_tokens messages, x top_k with SY_MOE_PER_EXPERT: a header with the token's local experts, k, weights
 * and places among each expert's slots, the payload, the scales) and of the combine receive region (world_size
 * x max_tokens vectors by default; top_k x max_tokens with SY_MOE_PER_EXPERT), the counters and per-expert
 * message counts — so the caller can size
 * SY_HEAP_SIZE. */
SY_API sy_status_t sy_moe_workspace_size(sy_comm_t comm, const sy_moe_config_t *config, size_t *bytes);
/* Collective. Checks the configuration (naming the field), reserves the workspace. */
SY_API sy_status_t sy_moe_create(sy_comm_t comm, const sy_moe_config_t *config, sy_moe_t *moe);
/* Collective. Accepted after an error. */
SY_API sy_status_t sy_moe_destroy(sy_moe_t moe);
/* Fills sizes (see sy_moe_recv_sizes_t) for this object. Local; answers after an error too. */
SY_API sy_status_t sy_moe_recv_sizes(sy_moe_t moe, sy_moe_recv_sizes_t *sizes);

/* tokens: bf16 [num_tokens][hidden]; expert_ids: [num_tokens][top_k] of id_type; weights: the routing weights
 * (see "Routing weights" above: read here in the default mode, not read with SY_MOE_PER_EXPERT); recv: buffers
 * of the sizes sy_moe_recv_sizes gives. 0 <= num_tokens <= max_tokens. An id outside
 * [-1, num_experts) or repeated within a token is reported as SY_ERR_INVALID_ARG (asynchronously on the cuda
 * backend, through sy_comm_async_error; on the host backend the call is rejected before anything is sent).
 * Collective; every rank calls it, with any num_tokens (0 allowed: tokens, expert_ids and weights may then be
 * NULL; recv may not, as the rank still receives from its peers). */
SY_API sy_status_t sy_moe_dispatch(sy_moe_t moe, const void *tokens, int num_tokens, const void *expert_ids,
                                   sy_index_type_t id_type, const float *weights, const sy_moe_recv_t *recv,
                                   cudaStream_t stream);
SY_API sy_status_t sy_moe_dispatch_send(sy_moe_t moe, const void *tokens, int num_tokens, const void *expert_ids,
                                        sy_index_type_t id_type, const float *weights, cudaStream_t stream);
SY_API sy_status_t sy_moe_dispatch_recv(sy_moe_t moe, const sy_moe_recv_t *recv, cudaStream_t stream);

/* expert_out: bf16 [L][S][hidden], the experts' outputs in the dispatch's slots; expert_ids, weights and
 * num_tokens as given to the dispatch this combine answers (expert_ids in either index type; weights: see
 * "Routing weights" above: read here with SY_MOE_PER_EXPERT, not read in the default mode, which applied the
 * dispatch's on the experts' ranks). out: bf16 [num_tokens][hidden]; a token with no expert gets zeros. With
 * num_tokens 0, expert_ids, weights and out may be NULL; expert_out may not (this rank's experts still answer
 * its peers). */
SY_API sy_status_t sy_moe_combine(sy_moe_t moe, const void *expert_out, const void *expert_ids, sy_index_type_t id_type,
                                  const float *weights, int num_tokens, void *out, cudaStream_t stream);
SY_API sy_status_t sy_moe_combine_send(sy_moe_t moe, const void *expert_out, cudaStream_t stream);
SY_API sy_status_t sy_moe_combine_recv(sy_moe_t moe, const void *expert_ids, sy_index_type_t id_type,
                                       const float *weights, int num_tokens, void *out, cudaStream_t stream);

/* ---------------------------------------------------------------------------------------------------- */
/* MoE high throughput (training, prefill): sy_moe_ht_*.                                                   */
/*                                                                                                        */
/* A separate object, not a mode of sy_moe_t, because its memory and layout are different: the low-latency */
/* mode reserves a receive slot for every (source, token) per expert and keeps every call's messages whole */
/* in symmetric memory (right for 128 tokens, not for 16,384); this mode streams rows through bounded     */
/* per-peer rings into the caller's device memory (or the object's receive arena: recv_arena_bytes),      */
/* packed per expert for grouped GEMMs, and its layout is computed once per step and reused by the        */
/* backward pass.                                                                                          */
/*                                                                                                        */
/* One step, every call collective (every rank makes the same sequence of calls on the object) and on one  */
/* stream per rank:                                            */
/*   sy_moe_ht_layout(ids) -> handle          the layout: one kernel, no host round trip                   */
/*   sy_moe_ht_dispatch(handle, x) -> rows    each local expert's rows contiguous, padded to the alignment */
/*   ... expert GEMMs on rows -> y ...                                                                     */
/*   sy_moe_ht_combine(handle, y) -> out      one bf16 row per token (sy_moe_ht_combine_add: out += that)  */
/* and backward, with the same handle and no new layout work:                                             */
/*   combine's backward:  sy_moe_ht_combine_backward(handle, d_out) -> d_y (and the row weights' gradient)*/
/*   dispatch's backward: sy_moe_ht_combine(handle, d_rows, row_weights = NULL) -> d_x, and with         */
/*                        row_values/token_values the row weights' gradient back to [num_tokens][top_k]. */
/*                                                                                                        */
/* Row r of the dispatch is (token t of source s, its k-th expert): recv.tokens[r] its payload as on the wire,  */
/* recv.src[r] = {s, t}, recv.weights[r] = weights[t][k] of the source (0 without weights).               */
/*                                                                                                        */
/* Layout (what a dispatch writes on each rank; L = num_experts / world_size local experts, expert e of   */
/* rank r is global expert r * L + e). Local expert e's rows are rows [offsets[e], offsets[e] + counts[e]) */
/* of recv, ordered by source rank, then source token; a token that names e reaches it once. offsets[0]=0 */
/* and offsets[e + 1] = offsets[e] + counts[e] rounded up to expert_alignment (contiguous layout), or, with */
/* recv.expert_stride > 0, offsets[e] = e * expert_stride (the masked layout of masked grouped GEMMs; every*/
/* count must fit the stride, and L x expert_stride the rows). Rows between an expert's count and the next */
/* offset are padding: their tokens and scales are left as they were, their src is {-1, -1} and their     */
/* weight 0. Rows from offsets[L] (L x expert_stride) to recv.rows are left as they were.                 */
/*                                                                                                        */
/* Wires: as sy_moe (FP8 per-128 E4M3 with fp32 or UE8M0 scales quantised in the kernel, bit for bit as   */
/* the low-latency mode; BF16 as is) and SY_MOE_WIRE_FP8_GIVEN (tokens already E4M3, scales given).       */
/* Rank-level de-duplication: a token crosses each link once and is copied to each of the rank's experts  */
/* it names on arrival.                                                                                    */
/*                                                                                                        */
/* Combine: row r of y belongs to (token t of source s, expert k of t). The experts' rank computes, per    */
/* (s, t), p = sum over t's rows on this rank in ascending k of w_r * y_r (fp32 fused multiply-adds from   */
/* +0; w_r = row_weights[r], or 1 with row_weights NULL), rounds p to bf16 and sends it; the owner adds   */
/* the partials of t's ranks in ascending rank order from +0 in fp32 and rounds once to bf16. A token with */
/* no expert gets zeros. The same inputs give the same bits on every run and on both backends.            */
/*                                                                                                        */
/* Counts, two ways:                                                                                       */
/*   exact: sy_moe_ht_layout with host_counts != NULL waits on the host, bounded by SY_TIMEOUT_MS, for    */
/*     this rank's counts (pinned memory the device writes; no device-wide synchronisation) and returns   */
/*     them; the caller can then size the expert GEMMs. Not capturable in a CUDA graph.                   */
/*   worst case: host_counts == NULL: nothing waits on the host; the counts stay on the device            */
/*     (recv.expert_offsets, recv.expert_counts); recv.rows is the bound; every call is graph-capturable.  */
/* A layout that needs more rows than recv.rows, or an expert count above recv.expert_stride, is an error */
/* of the dispatch (SY_ERR_INVALID_ARG, asynchronously on the cuda backend; nothing past recv.rows is    */
/* written). sy_moe_ht_sizes gives max_rows, the most any layout can need.                                */
/*                                                                                                        */
/* Handles: a call may use the handle of any earlier layout of its object (several steps may be in        */
/* flight), but every rank passes its handle of the same layout call. The dispatch records its rows in    */
/* the handle (hence the handle is written by sy_moe_ht_layout and sy_moe_ht_dispatch, read by the        */
/* combines); a combine reads the rows of the handle's last dispatch, so pass that dispatch's recv.       */
/* Errors that only the handle or the peers reveal (the ids; a handle of another object, of no layout, or */
/* of another layout call than the peers'; num_tokens not the layout's; rows that do not fit; a combine   */
/* before any dispatch of the handle or with another expert_stride) are SY_ERR_INVALID_ARG: on the host   */
/* backend on every rank, before anything is written; on the cuda backend asynchronously. Ranks in calls  */
/* of different objects of one configuration (two layers of one shape in another order on one rank): on   */
/* the host backend SY_ERR_INVALID_ARG on every rank, nothing written; on the cuda backend each waits in  */
/* its own object's exchange until the bound (SY_ERR_TIMEOUT).                                            */
/*                                                                                                        */
/* SM budget: every kernel of these calls, the layout's included, holds at most config.num_sms SMs       */
/* (default 16; an odd count is rounded down, and 2 at least: a sending and a receiving block), so expert */
/* GEMMs can run beside them on the other SMs; the kernels (the layout, dispatch, combine, their          */
/* backwards, the FP8 quantisation) let the stream's next kernel start only as they end, so it does not   */
/* wait on SMs outside the budget meanwhile. The layout's blocks must be resident together (it is one     */
/* kernel with grid barriers): layouts of several objects at once on several streams whose budgets add up */
/* past the SMs left free wait for each other, and end in SY_ERR_TIMEOUT. From world 2 a call's blocks    */
/* wait on the peers' blocks, so its grid too must be resident at once: sy_moe_ht_create refuses a        */
/* num_sms whose dispatch or combine grid the GPU cannot hold (SY_ERR_INVALID_ARG naming config->num_sms).*/
/* The budget's use: a block runs both halves of its channel on its warps at world 2 with config.num_sms  */
/* at most 48 and from world 3 with at most 16 (whatever the calls' budgets below it), otherwise a block  */
/* runs one half (SY_HT_ROLES). For scale, 4 x H100, world 4, 4,096 tokens, BF16: the four calls took 4.7 */
/* ms together at 16 SMs, 4.0 at 24, 3.5 at 32, 2.9 at 64 (bench/RESULTS.md, run 40); 2 x H200, world 2:  */
/* 3.6 ms at 16 SMs (run 57), 2.5 at 24, 2.0 at 32, 1.6 at 48, 1.4 at 64 (run 59). A call may hold fewer  */
/* (sy_moe_ht_set_num_sms): e.g. a step's first dispatch and last combine on every SM and the calls       */
/* beside the GEMMs on 16 (1 x H200, world 1, 4,096 tokens, 4 expert groups: the step -2.1% to -2.5%      */
/* forward, -3.4% to -4.6% backward; bench/RESULTS.md, run 52).                                           */
/* ---------------------------------------------------------------------------------------------------- */
typedef struct sy_moe_ht *sy_moe_ht_t;

typedef struct sy_moe_ht_config {
  size_t size;          /* sizeof(sy_moe_ht_config_t) */
  int max_tokens;       /* tokens per rank per call, >= 1 */
  int hidden;           /* elements per token; a multiple of 128 for the FP8 wires, of 8 for BF16; at most 2^20 */
  int top_k;            /* experts per token, 1..32 and at most num_experts */
  int num_experts;      /* a positive multiple of the world size */
  sy_moe_wire_t wire;   /* the dispatch's payload; SY_MOE_WIRE_BF16 by default */
  int expert_alignment; /* each local expert's rows padded to a multiple of this (1..1024); 0: 1 */
  int num_sms;          /* SMs the communication kernels may hold; 0: 16 */
  unsigned flags;       /* SY_MOE_HT_* flags below, or 0 */
  /* Symmetric memory reserved at create for receive buffers, the same on every rank (0: none; cuda backend: part
   * of sy_moe_ht_workspace_size). sy_moe_ht_recv_alloc with pool NULL carves a recv from it; a dispatch into such
   * a recv receives each arriving token's first row in place (the senders store it into that row over NVLink, or
   * put it there) and copies only the token's other rows here: the same bits, fewer stores on the receiving GPU
   * (bench/NOTES.md, "the first copy in place"). A recv of a pool is received as before. A recv of R rows takes
   * sy_moe_ht_recv_bytes: its six sections, each rounded up to 256 bytes. Measured (4 x H100, world 4, 16 SMs, 4,096 tokens): BF16 dispatch -9.3%, FP8 -1.9%. */
  size_t recv_arena_bytes;
} sy_moe_ht_config_t;

/* config.flags: the FP8 wires' recv.scales row-major, [rows][hidden/128] (each row's scales contiguous, the layout
 * per-token-group quantisation writes and K-major scale readers take), instead of group-major [hidden/128][rows]
 * (the MN-major layout DeepGEMM's grouped FP8 GEMMs read). Same values, same bits; the BF16 wire refuses it. */
#define SY_MOE_HT_SCALES_ROW_MAJOR 0x1u

#define SY_MOE_HT_CONFIG_INIT \
  { sizeof(sy_moe_ht_config_t), 0, 0, 0, 0, SY_MOE_WIRE_BF16, 0, 0, 0u, 0 }

/* What a dispatch writes on the experts' rank, in the caller's plain device memory. */
typedef struct sy_moe_ht_recv {
  void *tokens;            /* [rows][hidden]: E4M3 bytes (FP8 wires) or bf16; 16-byte aligned */
  float *scales;           /* FP8 wires: [hidden/128][rows] fp32, group-major, row-minor (with
                            * SY_MOE_HT_SCALES_ROW_MAJOR: [rows][hidden/128]); BF16: NULL */
  int32_t *src;            /* [rows][2]: {source rank, source token}; padding {-1, -1} */
  float *weights;          /* [rows]: the routing weight of the row's (token, expert); padding 0 */
  int32_t *expert_offsets; /* [L + 1]: first row of each local expert; [L]: rows used, padding included */
  int32_t *expert_counts;  /* [L]: rows of each local expert, padding excluded */
  int rows;                /* rows the row buffers hold (the bound) */
  int expert_stride;       /* 0: contiguous layout; > 0: expert e starts at row e * expert_stride */
} sy_moe_ht_recv_t;

typedef struct sy_moe_ht_sizes {
  size_t size;         /* sizeof(sy_moe_ht_sizes_t) */
  int local_experts;   /* L */
  int max_rows;        /* the most rows a dispatch can need on one rank (contiguous layout) */
  size_t handle_bytes; /* device memory for a handle */
  size_t row_bytes;    /* recv.tokens bytes per row: hidden (FP8 wires) or 2 x hidden */
  size_t scale_bytes;  /* recv.scales bytes per row: hidden / 128 x 4 (FP8 wires) or 0 */
  int dispatch_pulled; /* the cuda backend's dispatch (SY_HT_PULL as the ranks resolved it at create: README): 1
                        * the receivers pull at every call; 2 (the default from world 2 where every rank reaches every
                        * peer by load/store, its heap holds the tokens' copy, a row is at most 64 KiB and there are at
                        * most 4,096 experts) they pull except a BF16 or given-FP8 wire's calls above SY_HT_PULL_SMS
                        * SMs, which push; 0 the senders push (and on the host backend). Added after scale_bytes: a
                        * caller's struct that ends at scale_bytes (its size) is still answered, without it. */
} sy_moe_ht_sizes_t;

#define SY_MOE_HT_SIZES_INIT \
  { sizeof(sy_moe_ht_sizes_t), 0, 0, 0, 0, 0, 0 }

/* Symmetric memory sy_moe_ht_create reserves (the rings, the counters, and where this rank would pull the dispatch,
 * SY_HT_PULL, its tokens' copy: max_tokens x (2 hidden + 12 top_k) bytes more), to size SY_HEAP_SIZE: the most a
 * create now takes (auto's pull depends on the heap this rank has left, and on every rank's answer at create). The
 * host backend reserves none (its ranks read each other's buffers). Beside it the cuda backend takes plain device
 * memory: the layout's scratch; pushed, with an FP8 wire quantised in the kernel on more than one rank, max_tokens x
 * (hidden + hidden / 32) bytes for the tokens quantised ahead of the dispatch (SY_HT_PREQUANT); pulled, world_size x
 * max_tokens x 4 bytes for the messages' tokens. */
SY_API sy_status_t sy_moe_ht_workspace_size(sy_comm_t comm, const sy_moe_ht_config_t *config, size_t *bytes);
/* Collective. Checks the configuration (naming the field) and reserves the workspace. A configuration whose
 * max_rows would exceed 2^31 - 1 is rejected. */
SY_API sy_status_t sy_moe_ht_create(sy_comm_t comm, const sy_moe_ht_config_t *config, sy_moe_ht_t *moe);
/* Collective. Accepted after an error. Waits (bounded by the communicator's timeout) for receive-arena frees whose
 * streams have not reached them; where some still wait, it frees the rest, keeps the object's bookkeeping for their
 * host functions and returns SY_ERR_TIMEOUT (SY_SUCCESS after an error, when it does not wait; a local wait, so the
 * communicator does not record that timeout). The object is gone whatever it returns: do not destroy it again. */
SY_API sy_status_t sy_moe_ht_destroy(sy_moe_ht_t moe);
/* Local; answers after an error too. */
SY_API sy_status_t sy_moe_ht_sizes(sy_moe_ht_t moe, sy_moe_ht_sizes_t *sizes);
/* The SM budget of this object's calls enqueued from now on (the layout, the dispatch, the combines, the combine's
 * backward): num_sms in [2, max(2, config.num_sms)], or 0 for config.num_sms (the budget a new object starts with). So one
 * object's calls can hold different budgets: e.g. a step's first dispatch and its last combine, which have no expert
 * GEMM beside them, on every SM, and the calls beside the GEMMs on few; config.num_sms sets the most (and the rings'
 * memory). Below config.num_sms each of a call's blocks serves several of the object's channels in turn, in the same
 * order on every rank, so every rank sets the same budget before the same call. A call reads the budget when it is
 * enqueued (a captured graph keeps its calls' budgets). Local (no stream work); the host backend checks it alike. */
SY_API sy_status_t sy_moe_ht_set_num_sms(sy_moe_ht_t moe, int num_sms);
/* A dispatch's receive buffers of `rows` rows as one allocation from `pool` (sy_pool_alloc: stream-ordered and
 * graph-capturable), sized for this object's wire: expert_offsets [L + 1], expert_counts [L], src, weights,
 * scales (FP8 wires; NULL on BF16) and tokens, each 256-byte aligned; recv->rows = rows, recv->expert_stride =
 * expert_stride. The exact size: host_counts[2 L] of sy_moe_ht_layout (the rows that layout needs); the bound:
 * sy_moe_ht_sizes's max_rows (contiguous layout) or L x expert_stride (masked). rows >= 0 (0: no row buffers,
 * tokens NULL), expert_stride >= 0 and L x expert_stride <= rows; the pool must be of the object's
 * communicator. Local. On failure nothing is allocated and *recv is zeroed.
 * pool NULL: the same sections from the object's receive arena (config.recv_arena_bytes; first fit), for use on
 * `stream` or work ordered after it. Memory sy_moe_ht_recv_free gave back on a stream (cuda backend) serves that
 * stream's allocations at once (not the legacy default stream's or cudaStreamPerThread's: theirs wait like any
 * other, nor a stream capturing a graph's, whose work may run on any stream) and other streams' once that stream has
 * reached the free; a recv that took such memory keeps owing that free, however it is freed itself. Where only such
 * memory would fit, the call waits on the host for those streams (bounded by the communicator's timeout:
 * SY_ERR_TIMEOUT naming the bytes; a local wait, which the communicator does not record). No arena:
 * SY_ERR_INVALID_ARG; no room even then: SY_ERR_NO_MEMORY naming the sizes, at once. Each rank carves its own: the
 * ranks' recvs need not agree. */
SY_API sy_status_t sy_moe_ht_recv_alloc(sy_moe_ht_t moe, sy_pool_t pool, int rows, int expert_stride,
                                        sy_moe_ht_recv_t *recv, cudaStream_t stream);
/* The bytes one recv of `rows` rows takes (rows -1: max_rows, the contiguous layout's worst case) from a pool or the
 * receive arena, for this configuration on comm's world size: what to add up for config.recv_arena_bytes. Local; a
 * function of the configuration (answers after an error too). */
SY_API sy_status_t sy_moe_ht_recv_bytes(sy_comm_t comm, const sy_moe_ht_config_t *config, int rows, size_t *bytes);
/* Gives back, in the order of `stream`, what sy_moe_ht_recv_alloc took for recv; then zeroes *recv. Pool NULL (the
 * receive arena): with stream NULL, on the host backend, or on a stream capturing a graph, at once (nothing enqueued
 * may still read or write the recv; a graph's replays do not give it back again); else when the stream gets there
 * (a host function; sy_moe_ht_destroy waits for those still to run, bounded). A recv it did not fill for this
 * object, or one changed since so that it no longer matches the allocation at its expert_offsets (a section moved,
 * or rows changed to a count whose sections have other sizes: each is rounded up to 256 bytes, so a small change of
 * rows may not show), is SY_ERR_INVALID_ARG, nothing freed.
 * Free each recv once: a copy of one already freed may name a newer allocation the pool put at the same address,
 * which this call cannot tell apart (two threads freeing the same recv from the receive arena at once: one of them
 * gets SY_ERR_INVALID_ARG; a pool is one thread's at a time, as sy_pool_free is). Accepted after an error, as sy_pool_free is: memory can always be given back. */
SY_API sy_status_t sy_moe_ht_recv_free(sy_moe_ht_t moe, sy_pool_t pool, sy_moe_ht_recv_t *recv, cudaStream_t stream);

/* The layout of one step. expert_ids: [num_tokens][top_k] of id_type on the device (-1 = none; an id at most
 * once per token; 0 <= num_tokens <= max_tokens); handle: handle_bytes of device memory, written here and read
 * by every later call of the step (keep it until the step's last backward call). host_counts: NULL (worst
 * case), or host memory for 2 x L + 1 int32: the rows of each local expert (counts), then each expert's
 * first row (offsets, contiguous layout), then the rows needed; the call returns once they are known.
 * An id outside [-1, num_experts) or repeated is SY_ERR_INVALID_ARG naming the first such (token, k) (cuda:
 * asynchronously; the bad entries count as -1). */
SY_API sy_status_t sy_moe_ht_layout(sy_moe_ht_t moe, const void *expert_ids, sy_index_type_t id_type, int num_tokens,
                                    void *handle, int32_t *host_counts, cudaStream_t stream);
/* tokens: [num_tokens][hidden] bf16 (E4M3 bytes with SY_MOE_WIRE_FP8_GIVEN); token_scales: fp32
 * [num_tokens][hidden / 128] with SY_MOE_WIRE_FP8_GIVEN, else NULL (a pointer is rejected); weights: fp32
 * [num_tokens][top_k] (the routing weights the rows carry), or NULL (rows get 0). num_tokens: the layout's (in
 * every call below too; a handle holds its layout's num_tokens and object, and a call that disagrees is
 * SY_ERR_INVALID_ARG: on the host backend before anything is sent, on the cuda backend asynchronously). recv:
 * tokens (NULL allowed with rows 0), scales (FP8 wires; NULL on BF16), src, weights, expert_offsets and
 * expert_counts are written; every buffer a call writes may overlap no other buffer of the call. With
 * num_tokens 0, tokens, token_scales and weights may be NULL (in every call below, the token-sized buffers). */
SY_API sy_status_t sy_moe_ht_dispatch(sy_moe_ht_t moe, const void *handle, int num_tokens, const void *tokens,
                                      const float *token_scales, const float *weights, const sy_moe_ht_recv_t *recv,
                                      cudaStream_t stream);
/* rows_in: bf16 [recv.rows][hidden] in the layout of the dispatch (the experts' outputs, or in the backward
 * pass the rows' gradient); recv: that dispatch's recv (its rows and expert_stride as then; its src, offsets
 * and counts may be read; tokens, scales and weights are not); row_weights: fp32 [recv.rows] (e.g.
 * recv.weights) or NULL (unweighted); out: bf16 [num_tokens][hidden]. row_values / token_values (both NULL, or
 * both given; a rank with recv.rows 0 may leave out row_values, one with num_tokens 0 token_values): fp32 per
 * row, carried back to the row's (token, k) into token_values [num_tokens][top_k] (0 where k names no expert,
 * or where the row's rank passed no row_values): e.g. the gradient of the row weights back to the routing
 * weights. */
SY_API sy_status_t sy_moe_ht_combine(sy_moe_ht_t moe, const void *handle, int num_tokens, const void *rows_in,
                                     const sy_moe_ht_recv_t *recv, const float *row_weights, const float *row_values,
                                     void *out, float *token_values, cudaStream_t stream);
/* sy_moe_ht_combine adding into out instead of overwriting it: out must hold bf16 values already (e.g. an earlier
 * combine's over another group of experts, or a shared expert's output). A token with an expert in this layout gets
 * out[t] = bf16(S + float(out[t])), S the fp32 sum sy_moe_ht_combine would round (the same partials, the same order),
 * rounded once; a token with no expert is left as it is (neither read nor written). So G layouts over disjoint
 * groups of experts, the first combined and the others added, give each token its sum with one rounding a group and
 * no partial outputs to add up afterwards. Arguments and checks as sy_moe_ht_combine (token_values: this call's);
 * the object's top_k at most 31. */
SY_API sy_status_t sy_moe_ht_combine_add(sy_moe_ht_t moe, const void *handle, int num_tokens, const void *rows_in,
                                         const sy_moe_ht_recv_t *recv, const float *row_weights,
                                         const float *row_values, void *out, float *token_values, cudaStream_t stream);
/* The combine's backward. grad_out: bf16 [num_tokens][hidden]; writes grad_rows: bf16 [recv.rows][hidden],
 * row r = bf16(w_r x grad_out[t]) (w_r = row_weights[r], or grad_out[t] as is with row_weights NULL; padding
 * rows and rows past the last expert's left as they were; the product in fp32, rounded once), and, when
 * grad_row_weights != NULL, fp32 [recv.rows] (padding rows 0, rows past the last expert's left): the dot
 * product of grad_out[t] and rows_in[r] (the combine's input, needed then only) in a fixed order: 32 partial
 * sums, the l-th (l = 0..31) adding grad_out[t][h] x rows_in[r][h] for the h with (h / 8) mod 32 = l (h = 8l ..
 * 8l + 7, then 256 + 8l .., ...) in ascending order with fused multiply-adds from +0; then for d = 16, 8, 4,
 * 2, 1 each s_l = s_l + s_(l xor d); the result is s_0 (a NaN is the canonical 0x7FFFFFFF). */
SY_API sy_status_t sy_moe_ht_combine_backward(sy_moe_ht_t moe, const void *handle, int num_tokens, const void *grad_out,
                                              const sy_moe_ht_recv_t *recv, const float *row_weights,
                                              const void *rows_in, void *grad_rows, float *grad_row_weights,
                                              cudaStream_t stream);

/* ---------------------------------------------------------------------------------------------------- */
/* Orchestration: stream-ordered device pools and pinned host pools (sy_pool_*, sy_host_pool_*).           */
/* ---------------------------------------------------------------------------------------------------- */
/* Not collective: each rank makes its own. A pool is used by one host thread at a time (like a stream). The
 * handles sy_pool_t and sy_host_pool_t are declared with the communicator. */

/* Device memory allocated and freed in stream order (cuda backend: a cudaMemPool of the communicator's
 * device, cudaMallocFromPoolAsync / cudaFreeAsync): an allocation may be used by work enqueued on `stream`
 * after the call, a free takes effect when the stream reaches it, and neither stalls another stream or the
 * host the way cudaMalloc / cudaFree do. Memory freed on one stream is handed to an allocation on another only
 * once an event orders the two (the caller's cudaStreamWaitEvent), as CUDA's stream-ordered allocator defines.
 * Host backend: host memory, given back at free (reserved = used), the stream ignored. */
typedef struct sy_pool_config {
  size_t size; /* sizeof(sy_pool_config_t) */
  /* [in] bytes the pool keeps from the device when a stream, event or the device synchronises with nothing
   * allocated beyond it: 0 gives back every unused byte, SIZE_MAX (the default) keeps everything, so a steady
   * loop never asks the device again */
  size_t release_threshold;
} sy_pool_config_t;
#define SY_POOL_CONFIG_INIT \
  { sizeof(sy_pool_config_t), SIZE_MAX }

typedef struct sy_pool_stats {
  size_t size;          /* sizeof(sy_pool_stats_t), set by the caller */
  size_t reserved;      /* [out] bytes the pool holds from the device now */
  size_t used;          /* [out] bytes of live allocations (as the pool rounds them) */
  size_t reserved_high; /* [out] the most `reserved` has been */
  size_t used_high;     /* [out] the most `used` has been */
  uint64_t allocs;      /* [out] successful sy_pool_alloc calls */
  uint64_t frees;       /* [out] successful sy_pool_free calls */
  uint64_t live;        /* [out] allocations not yet freed */
} sy_pool_stats_t;
#define SY_POOL_STATS_INIT \
  { sizeof(sy_pool_stats_t), 0, 0, 0, 0, 0, 0, 0 }

/* config NULL: SY_POOL_CONFIG_INIT. */
SY_API sy_status_t sy_pool_create(sy_comm_t comm, const sy_pool_config_t *config, sy_pool_t *pool);
/* Accepted after an error, and after the pool's communicator is destroyed. Attention plans made from the pool
 * (sy_attn_plan_create_async) keep it until the last of them is destroyed; then allocations not yet freed are
 * freed (a warning names how many); work still using them must be done (the memory goes back to the device
 * when it is). */
SY_API sy_status_t sy_pool_destroy(sy_pool_t pool);
/* Stream-ordered, graph-capturable: inside a capture the allocation is the graph's (CUDA's graph memory nodes),
 * outside the pool's reserve, threshold and trim; the pool counts the capture, not the replays, so a graph must
 * free what it allocates, and a capture that is abandoned leaves its allocation counted live. bytes > 0; *ptr is
 * 256-byte aligned. Fails with SY_ERR_NO_MEMORY (nothing allocated) when the device has no room. */
SY_API sy_status_t sy_pool_alloc(sy_pool_t pool, size_t bytes, void **ptr, cudaStream_t stream);
/* Stream-ordered, graph-capturable (inside a capture: an allocation of the same capture). ptr must be a live
 * allocation of this pool (else SY_ERR_INVALID_ARG, nothing freed). Accepted after an error. */
SY_API sy_status_t sy_pool_free(sy_pool_t pool, void *ptr, cudaStream_t stream);
/* Gives unused memory back to the device until the pool holds about keep_bytes in all, never less than its live
 * allocations' chunks (cudaMemPoolTrimTo: a chunk partly in use stays); host-side, synchronises nothing. */
SY_API sy_status_t sy_pool_trim(sy_pool_t pool, size_t keep_bytes);
/* stats->size must be set (SY_POOL_STATS_INIT). Host-side; answers after an error. */
SY_API sy_status_t sy_pool_stats(sy_pool_t pool, sy_pool_stats_t *stats);

/* A ring of pinned host slots for host-to-device staging (plans, counts): a slot is acquired by the host,
 * filled, read by work on a stream (a copy, a kernel through its mapped address), and given back by a host
 * function the stream runs when it gets there (cudaLaunchHostFunc: no polling, no device synchronisation, no
 * CUDA call inside). A few slots carry any number of batches: the host waits for a slot only when every slot is
 * still in use by the GPU. Host backend: host memory, a release with a stream takes effect at once. */
typedef struct sy_host_pool_config {
  size_t size;       /* sizeof(sy_host_pool_config_t) */
  size_t slot_bytes; /* [in] bytes of each slot (no default: > 0) */
  int slots;         /* [in] how many slots (default 4, at most 1024) */
} sy_host_pool_config_t;
#define SY_HOST_POOL_CONFIG_INIT \
  { sizeof(sy_host_pool_config_t), 0, 4 }

typedef struct sy_host_pool_stats {
  size_t size;       /* sizeof(sy_host_pool_stats_t), set by the caller */
  int slots;         /* [out] slots in the pool */
  int free_slots;    /* [out] slots free now */
  uint64_t acquires; /* [out] successful sy_host_pool_acquire calls */
  uint64_t waits;    /* [out] acquires that found no free slot and waited (those that timed out too) */
  uint64_t wait_ns;  /* [out] host time spent in those waits */
} sy_host_pool_stats_t;
#define SY_HOST_POOL_STATS_INIT \
  { sizeof(sy_host_pool_stats_t), 0, 0, 0, 0, 0 }

/* config must set slot_bytes. Pinned memory (cudaHostAlloc, portable and mapped: a kernel may read a slot by
 * its host address). */
SY_API sy_status_t sy_host_pool_create(sy_comm_t comm, const sy_host_pool_config_t *config, sy_host_pool_t *pool);
/* Waits (bounded) for the slots given back on streams, then frees them; after a timeout it warns and leaks the
 * slots rather than free memory the GPU may still read (SY_ERR_TIMEOUT). Slots acquired and never released are
 * freed with the pool (warned). Accepted after an error. */
SY_API sy_status_t sy_host_pool_destroy(sy_host_pool_t pool);
/* A free slot of slot_bytes. When every slot is in use it waits for one to come back, bounded by the
 * communicator's timeout (SY_ERR_TIMEOUT, *slot NULL; a wait of this rank's own, not recorded on the communicator).
 * Never calls CUDA. */
SY_API sy_status_t sy_host_pool_acquire(sy_host_pool_t pool, void **slot);
/* Gives an acquired slot back once `stream` reaches this point (everything enqueued on it before is done with
 * the slot); stream NULL: at once (no GPU work uses it); on the cuda backend cudaStreamLegacy is refused
 * (SY_ERR_INVALID_ARG, the slot still held), as everywhere in the library (the host backend ignores streams). Not graph-capturable: the slot would come back at every replay;
 * inside a capture it is refused (SY_ERR_INVALID_ARG). A slot not acquired: SY_ERR_INVALID_ARG. */
SY_API sy_status_t sy_host_pool_release(sy_host_pool_t pool, void *slot, cudaStream_t stream);
/* stats->size must be set (SY_HOST_POOL_STATS_INIT). */
SY_API sy_status_t sy_host_pool_stats(sy_host_pool_t pool, sy_host_pool_stats_t *stats);

/* A CUDA graph per shape bucket. The caller gives its bucket sizes (ascending; or vLLM's defaults) and a function
 * that enqueues one step for a bucket on a stream; sy_graph_cache_run(n) takes the smallest bucket >= n and, at its
 * first use, runs the step eagerly `warmup` times, captures it (thread-local capture mode), instantiates and
 * launches the graph; later uses replay it (cudaGraphLaunch). When the step's pointers or scalars change, the caller
 * marks the bucket (sy_graph_cache_refresh): its next run captures the step again and updates the instantiated
 * graph in place (cudaGraphExecUpdate), instantiating anew only when the update is refused (a changed topology, or a
 * kernel captured from a stream of another priority: CUDA refuses those — measured, and test_gpu_graph_cache checks
 * it — so a refresh does not replay old priorities; SY_DEBUG=INFO logs each refusal's reason).
 * The step must be capturable (every library call that says so is) and must not synchronise. A replay keeps the
 * priorities of the streams the step's kernels were captured on (cudaGraphInstantiateFlagUseNodePriority), so work
 * forked onto a high-priority stream still goes ahead of work on a low-priority one, as in the eager step (CUDA's
 * default would run every kernel at the priority of the stream the graph is launched into, which
 * SY_GRAPH_NODE_PRIORITY=0 keeps, read when a graph is instantiated). Host backend: every
 * run calls the step (no graphs). Not thread-safe (one host thread at a time, like a stream). */
typedef struct sy_graph_cache *sy_graph_cache_t;

/* One step for `bucket` (the caller's unit: tokens, sequences) on `stream`; a non-success status stops the run. */
typedef sy_status_t (*sy_graph_step_fn)(void *user, int bucket, cudaStream_t stream);

typedef struct sy_graph_cache_config {
  size_t size;        /* sizeof(sy_graph_cache_config_t) */
  const int *buckets; /* [in] ascending, > 0, copied; NULL: 1, 2, 4, then steps of 8 to 256, then steps of 16 to
                         max_bucket, and max_bucket */
  int num_buckets;    /* [in] with buckets: 1 to 4096 */
  int max_bucket;     /* [in] with the default buckets: the largest (default 512; 256 to 65536) */
  int warmup;         /* [in] eager runs of a bucket's step before its capture (default 1; 0 to 100) */
} sy_graph_cache_config_t;
#define SY_GRAPH_CACHE_CONFIG_INIT \
  { sizeof(sy_graph_cache_config_t), NULL, 0, 512, 1 }

typedef struct sy_graph_cache_stats {
  size_t size;             /* sizeof(sy_graph_cache_stats_t), set by the caller */
  uint64_t eager_runs;     /* [out] steps run eagerly (warm-ups; every run on the host backend) */
  uint64_t captures;       /* [out] captures of a step */
  uint64_t updates;        /* [out] refreshed graphs updated in place */
  uint64_t instantiations; /* [out] graphs instantiated (first uses, and updates refused) */
  uint64_t replays;        /* [out] graph launches */
  int graphs;              /* [out] buckets with an instantiated graph */
} sy_graph_cache_stats_t;
#define SY_GRAPH_CACHE_STATS_INIT \
  { sizeof(sy_graph_cache_stats_t), 0, 0, 0, 0, 0, 0 }

/* config NULL: SY_GRAPH_CACHE_CONFIG_INIT. step non-NULL; user is passed to it. */
SY_API sy_status_t sy_graph_cache_create(sy_comm_t comm, const sy_graph_cache_config_t *config, sy_graph_step_fn step,
                                         void *user, sy_graph_cache_t *cache);
/* Frees the graphs (work they enqueued may still run: CUDA keeps what it needs). Accepted after an error. */
SY_API sy_status_t sy_graph_cache_destroy(sy_graph_cache_t cache);
/* The bucket that runs n: the smallest >= n (SY_ERR_INVALID_ARG naming n when n < 1 or above the largest). */
SY_API sy_status_t sy_graph_cache_bucket(sy_graph_cache_t cache, int n, int *bucket);
/* One step for n on stream (not NULL on the cuda backend; not capturing): the bucket's graph, made first if
 * needed. A failure in the step or the capture leaves the bucket as it was (without a graph, or with its old one
 * and still marked for a new capture): the next run tries again. */
SY_API sy_status_t sy_graph_cache_run(sy_graph_cache_t cache, int n, cudaStream_t stream);
/* The step of n's bucket (n = 0: every bucket) changed its pointers or scalars: its next run captures it again and
 * updates its graph. Host-side, immediate. */
SY_API sy_status_t sy_graph_cache_refresh(sy_graph_cache_t cache, int n);
/* stats->size must be set (SY_GRAPH_CACHE_STATS_INIT). */
SY_API sy_status_t sy_graph_cache_stats(sy_graph_cache_t cache, sy_graph_cache_stats_t *stats);

#ifdef __cplusplus
}
#endif
#endif /* SWITCHYARD_H */
