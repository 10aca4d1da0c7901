/*
 * attn_plan.c — builds one rank's attention-dispatch plan (src/plan/attn_plan.h) from the global
 * description every rank holds. It sits between sy_attn_plan_create (src/core/attn.c) and the executors:
 * the host backend pulls with the receive lists, the CUDA kernels push with the send lists, so both sides
 * of every transfer must be derived from one walk and agree exactly.
 *
 * One pass over every rank's sequences, in (source, sequence, replica) order, hands out the running
 * destination offsets (that order is the arrival order at a destination), fills the W x W counts, records
 * the per-sequence forward metadata (sy_attn_plan_seqs) and collects this rank's unmerged forward segments
 * (what it sends, what it receives). The four directions
 * are then emitted from those raw lists:
 *   Q forward / KV forward   as they are;
 *   Q reverse                the forward lists with source and destination swapped;
 *   KV backward              the KV forward lists swapped, the owner's row replaced by the staging row
 *                            c * num_tokens + t, and re-sorted by (peer, replica) so every peer's
 *                            segments stay in ascending destination order.
 * Emission is a stable counting sort by peer (by peer and replica for KV backward) followed by merging of
 * neighbours that continue contiguously on both sides. Merging happens on the final rows, never before a
 * transformation, because rows contiguous in the forward layout need not be in the staging layout.
 * An empty sequence (0 tokens) is in the per-sequence metadata like any other (dst_row: where it would start)
 * and in no segment list: it moves nothing.
 * The fingerprint (sy__attn_desc_fingerprint) hashes the description, so that ranks holding plans of different
 * descriptions find out at their next call (the backends compare it) instead of moving rows by different maps.
 * Sizes: every row count is bounded by validate() (lengths, their sums over a rank and over the world, the
 * staging's max_replicas x num_tokens fit int64); allocations of counts x sizes are checked (alloc_n).
 * Cost: O(total sequences x max_replicas + world_size^2) per rank.
 */
#include "plan/attn_plan.h"

#include <stdlib.h>
#include <string.h>

#define FUNC "sy_attn_plan_create"

/* A forward segment before merging: rows [src_row, src_row + rows) of the source's MLP layout land at
 * dst_row of the destination's attention layout; peer is the other rank, replica the KV slot (0 for Q). */
typedef struct raw_seg {
  int64_t src_row, dst_row, rows;
  int peer, replica;
} raw_seg_t;

typedef enum emit_mode {
  EMIT_FORWARD,     /* as collected */
  EMIT_REVERSE,     /* source and destination swapped */
  EMIT_KV_BWD_SEND, /* swapped; destination = staging row at the peer (the owner) */
  EMIT_KV_BWD_RECV  /* swapped; destination = staging row here (we are the owner) */
} emit_mode_t;

/* ---- validation --------------------------------------------------------------------------------------- */

#define REJECT_IF(cond, ...)            \
  do {                                  \
    if (cond) {                         \
      sy__arg_error(FUNC, __VA_ARGS__); \
      status = SY_ERR_INVALID_ARG;      \
      goto done;                        \
    }                                   \
  } while (0)

/* Checks the whole description (every rank's plan depends on every rank's sequences) and counts the
 * forward segments `rank` will receive. Allocates only a scratch array, freed before it returns. */
static sy_status_t validate(const sy_attn_plan_desc_t *desc, int rank, int64_t *q_recv_count, int64_t *kv_recv_count) {
  SY_ARG_CHECK(desc, FUNC, "desc is NULL");
  SY_ARG_CHECK(desc->size >= sizeof(sy_attn_plan_desc_t), FUNC,
               "desc->size=%zu is smaller than sizeof(sy_attn_plan_desc_t)=%zu", desc->size,
               sizeof(sy_attn_plan_desc_t));
  const int world = desc->world_size, replicas = desc->max_replicas;
  SY_ARG_CHECK(world >= 1, FUNC, "desc->world_size=%d must be >= 1", world);
  SY_ARG_CHECK(rank >= 0 && rank < world, FUNC, "rank=%d outside [0, world_size=%d)", rank, world);
  SY_ARG_CHECK(replicas >= 0 && replicas <= world, FUNC, "desc->max_replicas=%d outside [0, world_size=%d]", replicas,
               world);
  SY_ARG_CHECK(desc->num_seqs, FUNC, "desc->num_seqs is NULL");
  SY_ARG_CHECK(desc->num_tokens, FUNC, "desc->num_tokens is NULL");

  sy_status_t status = SY_SUCCESS;
  int64_t *mark = NULL; /* mark[d] = global index of the last sequence that listed d as a KV replica */
  if (replicas > 1) {
    mark = malloc((size_t)world * sizeof *mark);
    if (!mark) return SY_ERR_NO_MEMORY;
    for (int d = 0; d < world; d++) mark[d] = -1;
  }
  int64_t q_in = 0, kv_in = 0, global_seq = 0, all_tokens = 0;
  for (int r = 0; r < world; r++) {
    const int n = desc->num_seqs[r];
    REJECT_IF(n < 0, "num_seqs[%d]=%d must be >= 0", r, n);
    if (n > 0) {
      REJECT_IF(!desc->seq_lens, "seq_lens is NULL (num_seqs[%d]=%d)", r, n);
      REJECT_IF(!desc->q_dst, "q_dst is NULL (num_seqs[%d]=%d)", r, n);
      REJECT_IF(replicas > 0 && !desc->kv_dst, "kv_dst is NULL with max_replicas=%d (num_seqs[%d]=%d)", replicas, r, n);
      REJECT_IF(!desc->seq_lens[r], "seq_lens[%d] is NULL (num_seqs[%d]=%d)", r, r, n);
      REJECT_IF(!desc->q_dst[r], "q_dst[%d] is NULL (num_seqs[%d]=%d)", r, r, n);
      REJECT_IF(replicas > 0 && !desc->kv_dst[r], "kv_dst[%d] is NULL (num_seqs[%d]=%d, max_replicas=%d)", r, r, n,
                replicas);
    }
    int64_t sum = 0;
    for (int i = 0; i < n; i++, global_seq++) {
      const int64_t len = desc->seq_lens[r][i];
      REJECT_IF(len < 0, "seq_lens[%d][%d]=%lld must be >= 0", r, i, (long long)len);
      REJECT_IF(len > INT64_MAX - sum, "seq_lens[%d] overflow int64 at sequence %d", r, i);
      sum += len;
      const int q = desc->q_dst[r][i];
      REJECT_IF(q < -1 || q >= world, "q_dst[%d][%d]=%d outside [-1, world_size=%d)", r, i, q, world);
      if (q == rank) q_in++;
      for (int c = 0; c < replicas; c++) {
        const size_t at = (size_t)i * (size_t)replicas + (size_t)c;
        const int d = desc->kv_dst[r][at];
        REJECT_IF(d < -1 || d >= world, "kv_dst[%d][%zu]=%d outside [-1, world_size=%d)", r, at, d, world);
        if (d < 0) continue;
        if (mark) {
          REJECT_IF(mark[d] == global_seq, "kv_dst[%d][%zu]=%d: rank %d listed twice for sequence %d", r, at, d, d, i);
          mark[d] = global_seq;
        }
        if (d == rank) kv_in++;
      }
    }
    REJECT_IF(desc->num_tokens[r] != sum, "num_tokens[%d]=%lld but seq_lens[%d] sum to %lld", r,
              (long long)desc->num_tokens[r], r, (long long)sum);
    REJECT_IF(sum > INT64_MAX - all_tokens, "num_tokens summed over ranks overflow int64 at rank %d", r);
    all_tokens += sum;
    REJECT_IF(replicas > 0 && sum > INT64_MAX / replicas,
              "max_replicas=%d * num_tokens[%d]=%lld overflows int64 (staging rows)", replicas, r, (long long)sum);
  }
  *q_recv_count = q_in;
  *kv_recv_count = kv_in;
done:
  free(mark);
  return status;
}

/* ---- emission ----------------------------------------------------------------------------------------- */

/* malloc of count x each bytes that never returns NULL for a zero count (so a NULL always means failure) and
 * returns NULL where the product does not fit a size_t. */
static void *alloc_n(size_t count, size_t each) {
  if (count == 0) count = 1;
  return count > SIZE_MAX / each ? NULL : malloc(count * each);
}

/* Emits one side of one direction: a stable counting sort of the raw segments by peer (and replica for
 * KV backward), the row transformation of `mode`, and merging of contiguous neighbours of one peer. */
static sy_status_t emit(const raw_seg_t *raw, int64_t count, int world, int replicas, emit_mode_t mode,
                        const int64_t *num_tokens, int rank, int64_t **start_out, sy_attn_seg_t **segs_out,
                        int64_t **rows_out) {
  const int per_peer = (mode == EMIT_KV_BWD_SEND || mode == EMIT_KV_BWD_RECV) && replicas > 0 ? replicas : 1;
  const size_t buckets = (size_t)world * (size_t)per_peer;
  int64_t *bucket_start = calloc(buckets + 1, sizeof *bucket_start);
  int64_t *order = alloc_n((size_t)count, sizeof *order);
  int64_t *start = calloc((size_t)world + 1, sizeof *start);
  int64_t *rows = calloc((size_t)world, sizeof *rows);
  sy_attn_seg_t *segs = alloc_n((size_t)count, sizeof *segs);
  if (!bucket_start || !order || !start || !rows || !segs) {
    free(bucket_start), free(order), free(start), free(rows), free(segs);
    return SY_ERR_NO_MEMORY;
  }
  for (int64_t k = 0; k < count; k++)
    bucket_start[(size_t)raw[k].peer * per_peer + (per_peer > 1 ? raw[k].replica : 0) + 1]++;
  for (size_t b = 0; b < buckets; b++) bucket_start[b + 1] += bucket_start[b];
  for (int64_t k = 0; k < count; k++)
    order[bucket_start[(size_t)raw[k].peer * per_peer + (per_peer > 1 ? raw[k].replica : 0)]++] = k;

  int64_t out = 0;
  int last_peer = -1;
  for (int64_t k = 0; k < count; k++) {
    const raw_seg_t *r = &raw[order[k]];
    sy_attn_seg_t seg = {r->src_row, r->dst_row, r->rows};
    switch (mode) {
      case EMIT_FORWARD: break;
      case EMIT_REVERSE: seg.src_row = r->dst_row, seg.dst_row = r->src_row; break;
      case EMIT_KV_BWD_SEND:
        seg.src_row = r->dst_row, seg.dst_row = (int64_t)r->replica * num_tokens[r->peer] + r->src_row;
        break;
      case EMIT_KV_BWD_RECV:
        seg.src_row = r->dst_row, seg.dst_row = (int64_t)r->replica * num_tokens[rank] + r->src_row;
        break;
    }
    sy_attn_seg_t *prev = out > 0 ? &segs[out - 1] : NULL;
    if (prev && last_peer == r->peer && prev->src_row + prev->rows == seg.src_row &&
        prev->dst_row + prev->rows == seg.dst_row) {
      prev->rows += seg.rows; /* one bulk copy instead of two */
    } else {
      segs[out++] = seg;
      start[r->peer + 1]++;
    }
    rows[r->peer] += seg.rows;
    last_peer = r->peer;
  }
  for (int p = 0; p < world; p++) start[p + 1] += start[p];
  if (out < count) {
    sy_attn_seg_t *shrunk = realloc(segs, (size_t)(out ? out : 1) * sizeof *segs);
    if (shrunk) segs = shrunk;
  }
  free(bucket_start);
  free(order);
  *start_out = start;
  *segs_out = segs;
  *rows_out = rows;
  return SY_SUCCESS;
}

static sy_status_t emit_send(sy_attn_dir_t *dir, const raw_seg_t *raw, int64_t count, int world, int replicas,
                             emit_mode_t mode, const int64_t *num_tokens, int rank) {
  return emit(raw, count, world, replicas, mode, num_tokens, rank, &dir->send_start, &dir->send_segs, &dir->send_rows);
}

static sy_status_t emit_recv(sy_attn_dir_t *dir, const raw_seg_t *raw, int64_t count, int world, int replicas,
                             emit_mode_t mode, const int64_t *num_tokens, int rank) {
  return emit(raw, count, world, replicas, mode, num_tokens, rank, &dir->recv_start, &dir->recv_segs, &dir->recv_rows);
}

/* ---- fingerprint -------------------------------------------------------------------------------------- */

/* One word into the hash: splitmix64's finalizer over the running state plus the word, so every word reaches
 * every bit of the result. */
static uint64_t fp_add(uint64_t h, uint64_t word) {
  uint64_t x = h + 0x9e3779b97f4a7c15ull + word;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t sy__attn_desc_fingerprint(const sy_attn_plan_desc_t *desc) {
  const int world = desc->world_size, replicas = desc->max_replicas;
  uint64_t h = fp_add(0x7379617474666e31ull /* "syattfn1" */, (uint64_t)(uint32_t)world);
  h = fp_add(h, (uint64_t)(uint32_t)replicas);
  for (int r = 0; r < world; r++) {
    h = fp_add(h, (uint64_t)(uint32_t)desc->num_seqs[r]);
    h = fp_add(h, (uint64_t)desc->num_tokens[r]);
  }
  for (int r = 0; r < world; r++) {
    const int n = desc->num_seqs[r];
    for (int i = 0; i < n; i++) {
      h = fp_add(h, (uint64_t)desc->seq_lens[r][i]);
      h = fp_add(h, (uint64_t)(uint32_t)desc->q_dst[r][i]);
      for (int c = 0; c < replicas; c++) h = fp_add(h, (uint64_t)(uint32_t)desc->kv_dst[r][(size_t)i * replicas + c]);
    }
  }
  return h;
}

/* ---- build -------------------------------------------------------------------------------------------- */

sy_status_t sy__attn_plan_build(const sy_attn_plan_desc_t *desc, int rank, struct sy_attn_plan **plan_out) {
  SY_ARG_CHECK(plan_out, FUNC, "plan is NULL");
  *plan_out = NULL;
  int64_t q_recv_count = 0, kv_recv_count = 0;
  sy_status_t status = validate(desc, rank, &q_recv_count, &kv_recv_count);
  if (status != SY_SUCCESS) return status;

  const int world = desc->world_size, replicas = desc->max_replicas, n = desc->num_seqs[rank];
  const size_t nkv = (size_t)n * (size_t)replicas;
  struct sy_attn_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return SY_ERR_NO_MEMORY;
  plan->world_size = world;
  plan->rank = rank;
  plan->max_replicas = replicas;
  plan->num_seqs = n;
  plan->num_tokens = desc->num_tokens[rank];
  plan->device = NULL;
  plan->device_free = NULL;
  plan->backend = SY_BACKEND_AUTO;

  plan->seq_start = alloc_n((size_t)n + 1, sizeof *plan->seq_start);
  plan->q_send = alloc_n((size_t)n, sizeof *plan->q_send);
  plan->kv_send = alloc_n(nkv, sizeof *plan->kv_send);
  plan->q_recv = alloc_n((size_t)q_recv_count, sizeof *plan->q_recv);
  plan->kv_recv = alloc_n((size_t)kv_recv_count, sizeof *plan->kv_recv);
  plan->q_counts = calloc((size_t)world * (size_t)world, sizeof *plan->q_counts);
  plan->kv_counts = calloc((size_t)world * (size_t)world, sizeof *plan->kv_counts);
  int64_t *q_next = calloc((size_t)world, sizeof *q_next); /* next free row of each destination's q_recv */
  int64_t *kv_next = calloc((size_t)world, sizeof *kv_next);
  raw_seg_t *q_send = alloc_n((size_t)n, sizeof *q_send);
  raw_seg_t *kv_send = alloc_n(nkv, sizeof *kv_send);
  raw_seg_t *q_recv = alloc_n((size_t)q_recv_count, sizeof *q_recv);
  raw_seg_t *kv_recv = alloc_n((size_t)kv_recv_count, sizeof *kv_recv);
  if (!plan->seq_start || !plan->q_send || !plan->kv_send || !plan->q_recv || !plan->kv_recv || !plan->q_counts ||
      !plan->kv_counts || !q_next || !kv_next || !q_send || !kv_send || !q_recv || !kv_recv) {
    status = SY_ERR_NO_MEMORY;
    goto done;
  }

  /* The one walk in arrival order: source, then sequence, then replica. Raw segments (n*_send, n*_recv) of
   * non-empty sequences only; every sequence this rank receives in the metadata (q_seqs, kv_seqs). */
  int64_t nq_send = 0, nkv_send = 0, nq_recv = 0, nkv_recv = 0, q_seqs = 0, kv_seqs = 0;
  for (int s = 0; s < world; s++) {
    const int ns = desc->num_seqs[s];
    const int mine = s == rank;
    int64_t *q_counts_s = plan->q_counts + (size_t)s * world, *kv_counts_s = plan->kv_counts + (size_t)s * world;
    int64_t seq_start = 0;
    for (int i = 0; i < ns; i++) {
      const int64_t len = desc->seq_lens[s][i];
      const int q = desc->q_dst[s][i];
      sy_attn_seq_place_t place = {s, i, 0, q, seq_start, -1, len};
      if (q >= 0) {
        place.dst_row = q_next[q];
        q_next[q] += len;
        q_counts_s[q] += len;
        if (mine && len > 0) q_send[nq_send++] = (raw_seg_t){seq_start, place.dst_row, len, q, 0};
        if (q == rank) {
          plan->q_recv[q_seqs++] = place;
          if (len > 0) q_recv[nq_recv++] = (raw_seg_t){seq_start, place.dst_row, len, s, 0};
        }
      }
      if (mine) {
        plan->seq_start[i] = seq_start;
        plan->q_send[i] = place;
      }
      const int *kv_list = replicas > 0 ? desc->kv_dst[s] + (size_t)i * replicas : NULL;
      for (int c = 0; c < replicas; c++) {
        const int d = kv_list[c];
        sy_attn_seq_place_t kv_place = {s, i, c, d, seq_start, -1, len};
        if (d >= 0) {
          kv_place.dst_row = kv_next[d];
          kv_next[d] += len;
          kv_counts_s[d] += len;
          if (mine && len > 0) kv_send[nkv_send++] = (raw_seg_t){seq_start, kv_place.dst_row, len, d, c};
          if (d == rank) {
            plan->kv_recv[kv_seqs++] = kv_place;
            if (len > 0) kv_recv[nkv_recv++] = (raw_seg_t){seq_start, kv_place.dst_row, len, s, c};
          }
        }
        if (mine) plan->kv_send[(size_t)i * replicas + c] = kv_place;
      }
      seq_start += len;
    }
    if (mine) plan->seq_start[n] = seq_start;
  }
  if (q_seqs != q_recv_count || kv_seqs != kv_recv_count) { /* validate() and the walk must agree */
    status = SY_ERR_INTERNAL;
    goto done;
  }
  plan->q_recv_count = q_seqs;
  plan->kv_recv_count = kv_seqs;
  for (int r = 0; r < world; r++) { /* what every rank's buffers need, the same on every rank */
    if (q_next[r] > plan->max_q_recv_rows) plan->max_q_recv_rows = q_next[r];
    if (kv_next[r] > plan->max_kv_recv_rows) plan->max_kv_recv_rows = kv_next[r];
    if (desc->num_tokens[r] > plan->max_num_tokens) plan->max_num_tokens = desc->num_tokens[r];
  }
  plan->fingerprint = sy__attn_desc_fingerprint(desc);

  const int64_t *tokens = desc->num_tokens;
  sy_attn_dir_t *dir = plan->dir;
  SY_CHECK_GOTO(emit_send(&dir[SY_ATTN_Q_FWD], q_send, nq_send, world, replicas, EMIT_FORWARD, tokens, rank), status,
                done);
  SY_CHECK_GOTO(emit_recv(&dir[SY_ATTN_Q_FWD], q_recv, nq_recv, world, replicas, EMIT_FORWARD, tokens, rank), status,
                done);
  SY_CHECK_GOTO(emit_send(&dir[SY_ATTN_KV_FWD], kv_send, nkv_send, world, replicas, EMIT_FORWARD, tokens, rank), status,
                done);
  SY_CHECK_GOTO(emit_recv(&dir[SY_ATTN_KV_FWD], kv_recv, nkv_recv, world, replicas, EMIT_FORWARD, tokens, rank), status,
                done);
  SY_CHECK_GOTO(emit_send(&dir[SY_ATTN_Q_REV], q_recv, nq_recv, world, replicas, EMIT_REVERSE, tokens, rank), status,
                done);
  SY_CHECK_GOTO(emit_recv(&dir[SY_ATTN_Q_REV], q_send, nq_send, world, replicas, EMIT_REVERSE, tokens, rank), status,
                done);
  SY_CHECK_GOTO(emit_send(&dir[SY_ATTN_KV_BWD], kv_recv, nkv_recv, world, replicas, EMIT_KV_BWD_SEND, tokens, rank),
                status, done);
  SY_CHECK_GOTO(emit_recv(&dir[SY_ATTN_KV_BWD], kv_send, nkv_send, world, replicas, EMIT_KV_BWD_RECV, tokens, rank),
                status, done);
  dir[SY_ATTN_Q_FWD].recv_total = q_next[rank];
  dir[SY_ATTN_KV_FWD].recv_total = kv_next[rank];
  dir[SY_ATTN_Q_REV].recv_total = plan->num_tokens;
  dir[SY_ATTN_KV_BWD].recv_total = (int64_t)replicas * plan->num_tokens;

done:
  free(q_next);
  free(kv_next);
  free(q_send);
  free(kv_send);
  free(q_recv);
  free(kv_recv);
  if (status != SY_SUCCESS) {
    sy__attn_plan_free(plan, NULL);
    return status;
  }
  *plan_out = plan;
  return SY_SUCCESS;
}

void sy__attn_plan_free(struct sy_attn_plan *plan, cudaStream_t stream) {
  if (!plan) return;
  if (plan->device && plan->device_free) plan->device_free(plan->device, stream);
  for (int d = 0; d < SY_ATTN_DIRS; d++) {
    sy_attn_dir_t *dir = &plan->dir[d];
    free(dir->send_start);
    free(dir->send_segs);
    free(dir->send_rows);
    free(dir->recv_start);
    free(dir->recv_segs);
    free(dir->recv_rows);
  }
  free(plan->seq_start);
  free(plan->q_send);
  free(plan->kv_send);
  free(plan->q_recv);
  free(plan->kv_recv);
  free(plan->q_counts);
  free(plan->kv_counts);
  free(plan);
}
