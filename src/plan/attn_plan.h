/*
 * attn_plan.h — the attention-dispatch plan as one rank holds it: for each of the four directions, the
 * row segments it sends to every peer and receives from every peer. Built on the CPU by attn_plan.c from
 * the global description (sy_attn_plan_desc_t), identically on every rank; read by the host backend (which
 * pulls using the receive lists), by the CUDA kernels (which push using the send lists), and by tests.
 *
 * Row indices:
 *   Q forward    src = owner's MLP row,        dst = row in the destination's q_recv
 *   KV forward   src = owner's MLP row,        dst = row in the destination's kv_recv
 *   Q reverse    src = row in the attention rank's q_recv layout, dst = owner's MLP row
 *   KV backward  src = row in the attention rank's kv_recv layout,
 *                dst = owner's staging row c * num_tokens + t (replica c of token t)
 * Arrival order at a forward destination: by source rank, then sequence, then replica, so the rows one
 * source sends one destination form one contiguous block there.
 */
#ifndef SY_PLAN_ATTN_PLAN_H
#define SY_PLAN_ATTN_PLAN_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sy_attn_seg {
  int64_t src_row; /* in the sender's buffer */
  int64_t dst_row; /* in the receiver's buffer */
  int64_t rows;    /* > 0 */
} sy_attn_seg_t;

/* One direction as this rank sees it. Segments are grouped by peer (send: destination; recv: source) and,
 * within a peer, in ascending dst_row on both sides (for the KV backward that is replica, then token, so the
 * src_rows are not ascending there). Adjacent rows that continue on both sides are merged into one segment. */
typedef struct sy_attn_dir {
  /* Send side: send_segs[send_start[p] .. send_start[p + 1]) go to peer p, in the order the peer's buffer
   * receives them (ascending dst_row). send_rows[p] = their total rows. */
  int64_t *send_start; /* [world_size + 1] */
  sy_attn_seg_t *send_segs;
  int64_t *send_rows; /* [world_size] */
  /* Receive side: recv_segs[recv_start[s] .. recv_start[s + 1]) come from peer s (src_row in s's buffer,
   * dst_row in ours), ascending dst_row. recv_rows[s] = their total rows; recv_total = rows this rank's
   * output buffer must hold for this direction (forward: the attention layout's rows; Q reverse: num_tokens;
   * KV backward: max_replicas * num_tokens). */
  int64_t *recv_start; /* [world_size + 1] */
  sy_attn_seg_t *recv_segs;
  int64_t *recv_rows; /* [world_size] */
  int64_t recv_total;
} sy_attn_dir_t;

enum { SY_ATTN_Q_FWD = 0, SY_ATTN_KV_FWD = 1, SY_ATTN_Q_REV = 2, SY_ATTN_KV_BWD = 3, SY_ATTN_DIRS = 4 };

struct sy_attn_plan {
  int world_size, rank, max_replicas, num_seqs;
  int64_t num_tokens; /* this rank's MLP rows */
  sy_attn_dir_t dir[SY_ATTN_DIRS];
  /* Forward metadata per sequence (sy_attn_plan_seqs): this rank's sequences as sent — q_send[i], kv_send[i *
   * max_replicas + c], dst_rank / dst_row -1 where not sent — and the ones it receives, in arrival order. */
  int64_t *seq_start; /* [num_seqs + 1]: this rank's sequences' first MLP rows */
  sy_attn_seq_place_t *q_send, *kv_send, *q_recv, *kv_recv;
  int64_t q_recv_count, kv_recv_count;
  /* Global W x W row counts, row = source: q_counts[s * W + d] rows of Q from s to d (forward). */
  int64_t *q_counts, *kv_counts;
  /* Over every rank (the same on every rank): the most MLP rows, Q and KV attention-layout rows. */
  int64_t max_num_tokens, max_q_recv_rows, max_kv_recv_rows;
  uint64_t fingerprint; /* sy__attn_desc_fingerprint of the description it was built from */
  /* Backend copies (the cuda backend uploads the send lists at create); NULL on the host backend. */
  void *device;
  /* stream NULL: at once, after the device is done with it (a device synchronisation, then cudaFree); else stream-ordered */
  void (*device_free)(void *device, cudaStream_t stream);
  sy_backend_t backend;
};

/* Builds rank `rank`'s plan; SY_ERR_INVALID_ARG with a log line naming the argument on inconsistent input. */
sy_status_t sy__attn_plan_build(const sy_attn_plan_desc_t *desc, int rank, struct sy_attn_plan **plan);
/* A 64-bit hash of a valid description: world_size, max_replicas, then per rank num_seqs and num_tokens, then
 * per rank and sequence its length, q_dst and kv_dst list, in that order. Equal descriptions give equal
 * fingerprints on every rank; the backends compare them at every call (SY_ERR_MISMATCH where they differ). */
uint64_t sy__attn_desc_fingerprint(const sy_attn_plan_desc_t *desc);
/* stream: where the backend's copy is freed (NULL: at once, see device_free). */
void sy__attn_plan_free(struct sy_attn_plan *plan, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
