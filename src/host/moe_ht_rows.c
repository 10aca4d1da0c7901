/*
 * moe_ht_rows.c — the MoE high-throughput calls that move rows, on the host backend (moe_ht.c says how a call's
 * exchange goes). Each rank computes its own outputs in the copy phase, reading its peers' offers:
 *   dispatch          the experts' rank pulls: for each source ascending, its tokens in order, each entry here
 *                     takes its expert's next row (and must sit where the source's position says: offsets plus
 *                     the earlier sources' counts plus pos); the token is put on the wire once (ref/moe_ht_ref.c)
 *                     and copied to each of its rows here; then the padding, offsets and counts, and the handle's
 *                     recv_rows, which the combines read.
 *   combine           the owner pulls: per token, per rank holding its experts (ascending), that rank's partial
 *                     over the token's rows there (recv_rows, in ascending k: fmaf(w, y, .) from +0, rounded to
 *                     bf16), added in rank order and rounded once (ref/moe_ref.h's rules); with add
 *                     (sy_moe_ht_combine_add) the token's row of out added last, a token with no expert skipped.
 *   combine_backward  the experts' rank pulls each row's grad_out from its owner: bf16(w x g) into grad_rows,
 *                     the 32-lane dot product with rows_in into grad_row_weights.
 * Every loop checks the group's abort per token, so a rank whose round failed waits for no more than a token's
 * work of a peer still reading its buffers.
 */
#include "host/moe_ht.h"

#include "ref/moe_ht_ref.h"
#include "ref/moe_ref.h"

#include <stdlib.h>
#include <string.h>

static const int32_t *section(const unsigned char *handle, size_t offset) { return (const int32_t *)(handle + offset); }

static int names_rank(const int32_t *ids, int K, int L, int p) {
  for (int k = 0; k < K; k++)
    if (ids[k] >= 0 && ids[k] / L == p) return 1;
  return 0;
}

static sy_status_t internal(const char *fn, const char *what, int source, int token) {
  SY_WARN("%s: the handles disagree (%s, source %d, token %d): were they written by one sy_moe_ht_layout call?", fn,
          what, source, token);
  return SY_ERR_INTERNAL;
}

/* Local expert e's first row and the row after its padding in a layout (stride 0: the contiguous one). */
static int32_t expert_begin(const int32_t *offsets, int stride, int e) {
  return stride > 0 ? (int32_t)((int64_t)e * stride) : offsets[e];
}

/* The rows of this rank's handle a call needs: each count within a positive stride, the rows used within rows. */
static sy_status_t check_rows(const struct sy_moe_ht *moe, const unsigned char *handle, const sy_moe_ht_recv_t *recv,
                              const char *fn) {
  const host_moe_ht_t *hm = moe->backend_state;
  const int W = moe->comm->world_size, L = moe->local_experts;
  const int32_t *recv_counts = section(handle, hm->hl.recv_counts), *offsets = section(handle, hm->hl.offsets);
  for (int e = 0; recv->expert_stride > 0 && e < L; e++) {
    int32_t n = 0;
    for (int s = 0; s < W; s++) n += recv_counts[(size_t)s * L + e];
    SY_ARG_CHECK(n <= recv->expert_stride, fn, "recv->expert_stride=%d but local expert %d has %d rows here",
                 recv->expert_stride, e, n);
  }
  SY_ARG_CHECK(recv->expert_stride > 0 || offsets[L] <= recv->rows, fn,
               "recv->rows=%d but the layout needs %d rows here (sy_moe_ht_layout's host_counts[2 L] tell them)",
               recv->rows, offsets[L]);
  return SY_SUCCESS;
}

/* A combine's own checks: the handle's, a dispatch recorded its rows with this recv's stride, they fit. */
static sy_status_t check_combine(const struct sy_moe_ht *moe, const sy_moe_ht_call_t *call, ht_offer_t *offer,
                                 const char *fn) {
  sy_moe_ht_handle_header_t header;
  SY_CHECK(sy__host_moe_ht_check_handle(moe, call, &header, fn));
  offer->layout = header.layout;
  SY_ARG_CHECK(header.dispatched != 0, fn,
               "handle=%p: no dispatch used its layout yet (the combines read the rows the dispatch recorded there)",
               call->handle);
  SY_ARG_CHECK(call->recv->expert_stride == header.expert_stride, fn,
               "recv->expert_stride=%d but the dispatch of this handle had %d (pass that dispatch's recv)",
               call->recv->expert_stride, header.expert_stride);
  return check_rows(moe, call->handle, call->recv, fn);
}

static void offer_init(const struct sy_moe_ht *moe, const sy_moe_ht_call_t *call, ht_offer_t *offer) {
  memset(offer, 0, sizeof *offer);
  offer->config = moe->config;
  offer->serial = moe->serial;
  offer->num_tokens = call->num_tokens;
  offer->handle = call->handle;
  offer->call = call;
}

/* ---- dispatch -------------------------------------------------------------------------------------------------------- */

/* Source s's tokens into this rank's rows, and its part of recv_rows. */
static sy_status_t dispatch_source(sy_comm_t comm, const struct sy_moe_ht *moe, int s, const sy_moe_ht_call_t *call) {
  static const char *fn = "sy_moe_ht_dispatch";
  host_moe_ht_t *hm = moe->backend_state;
  const sy_moe_ht_config_t *c = &moe->config;
  const int me = comm->rank, L = moe->local_experts, K = c->top_k, H = c->hidden, kk = hm->hl.kk;
  const ht_offer_t *o = sy__host_exchange_slot(comm, s);
  const sy_moe_ht_call_t *src = o->call;
  const sy_moe_ht_recv_t *recv = call->recv;
  const int32_t *ids = section(o->handle, hm->hl.ids), *pos = section(o->handle, hm->hl.pos);
  int32_t *recv_rows = (int32_t *)(void *)((unsigned char *)call->handle + hm->hl.recv_rows);
  const int given = c->wire == SY_MOE_WIRE_FP8_GIVEN, fp8 = sy__moe_ht_fp8(c->wire);
  const size_t row_bytes = (size_t)H * sy__moe_ht_wire_elem(c->wire), groups = (size_t)H / SY_MOE_FP8_GROUP;
  const int32_t *offsets = section(call->handle, hm->hl.offsets);
  memcpy(hm->first, hm->fill, (size_t)L * sizeof *hm->fill);
  int i = 0;
  for (int t = 0; t < o->num_tokens; t++) {
    if (sy__host_group_aborted(comm->backend_state)) return SY_ERR_ABORTED;
    if (!names_rank(ids + (size_t)t * K, K, L, me)) continue;
    int32_t *entry = recv_rows + ((size_t)s * c->max_tokens + (size_t)i++) * kk;
    sy__moe_ht_encode_token(c->wire, (const unsigned char *)src->tokens + (size_t)t * H * (given ? 1 : 2),
                            given ? src->token_scales + (size_t)t * groups : NULL, H, hm->wire, hm->scales, 1);
    int j = 0;
    for (int k = 0; k < K; k++) {
      const int32_t x = ids[(size_t)t * K + k];
      if (x < 0 || x / L != me) continue;
      const int e = x - me * L;
      const int32_t row = hm->fill[e]++;
      if (pos[(size_t)t * K + k] != row - hm->first[e]) return internal(fn, "a position", s, t);
      if (row >= expert_begin(offsets, recv->expert_stride, e + 1)) /* never past the expert's rows */
        return internal(fn, "a row past its expert's", s, t);
      memcpy((unsigned char *)recv->tokens + (size_t)row * row_bytes, hm->wire, row_bytes);
      if (fp8) {
        float *sc = recv->scales + sy__moe_ht_scale_first(c, row);
        const int64_t stride = sy__moe_ht_scale_stride(c, recv->rows);
        for (size_t g = 0; g < groups; g++) sc[(int64_t)g * stride] = hm->scales[g];
      }
      recv->src[2 * (size_t)row] = s;
      recv->src[2 * (size_t)row + 1] = t;
      recv->weights[row] = src->weights ? src->weights[(size_t)t * K + k] : 0.0f;
      entry[j++] = row;
    }
    while (j < kk) entry[j++] = -1;
  }
  const int32_t *recv_counts = section(call->handle, hm->hl.recv_counts);
  if (i != section(call->handle, hm->hl.recv_tokens)[s]) return internal(fn, "a token count", s, -1);
  for (int e = 0; e < L; e++)
    if (hm->fill[e] - hm->first[e] != recv_counts[(size_t)s * L + e]) return internal(fn, "a row count", s, -1);
  return SY_SUCCESS;
}

static sy_status_t dispatch_rows(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call) {
  host_moe_ht_t *hm = moe->backend_state;
  const int L = moe->local_experts, stride = call->recv->expert_stride;
  const sy_moe_ht_recv_t *recv = call->recv;
  const int32_t *offsets = section(call->handle, hm->hl.offsets);
  for (int e = 0; e < L; e++) hm->fill[e] = expert_begin(offsets, stride, e);
  for (int s = 0; s < comm->world_size; s++) SY_CHECK(dispatch_source(comm, moe, s, call));
  for (int e = 0; e < L; e++) { /* the padding after each expert's rows, its first row and count */
    const int32_t begin = expert_begin(offsets, stride, e), end = expert_begin(offsets, stride, e + 1);
    for (int32_t row = hm->fill[e]; row < end; row++) {
      recv->src[2 * (size_t)row] = recv->src[2 * (size_t)row + 1] = -1;
      recv->weights[row] = 0.0f;
    }
    recv->expert_offsets[e] = begin;
    recv->expert_counts[e] = hm->fill[e] - begin;
  }
  recv->expert_offsets[L] = expert_begin(offsets, stride, L);
  sy_moe_ht_handle_header_t header;
  memcpy(&header, call->handle, sizeof header);
  header.dispatched = (int32_t)(moe->dispatches + 1);
  header.expert_stride = stride;
  memcpy(call->handle, &header, sizeof header);
  return SY_SUCCESS;
}

sy_status_t sy__host_moe_ht_dispatch(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                     cudaStream_t stream) {
  static const char *fn = "sy_moe_ht_dispatch";
  ht_offer_t offer;
  offer_init(moe, call, &offer);
  sy_moe_ht_handle_header_t header;
  offer.status = sy__host_moe_ht_check_handle(moe, call, &header, fn);
  offer.layout = header.layout;
  if (offer.status == SY_SUCCESS) offer.status = check_rows(moe, call->handle, call->recv, fn);
  SY_CHECK(sy__host_exchange_begin(comm, SY_HOST_OP_MOE_HT_DISPATCH, &offer));
  sy_status_t verdict = sy__host_moe_ht_verdict(comm, &offer, 1, fn);
  if (verdict == SY_SUCCESS) verdict = dispatch_rows(comm, moe, call);
  SY_CHECK(sy__host_exchange_end(comm)); /* no source reuses its tokens before every rank has read them */
  return verdict;
}

/* ---- combine -------------------------------------------------------------------------------------------------------- */

/* The owner's tokens: per rank holding a token's experts, that rank's partial from its rows, in rank order. */
static sy_status_t combine_tokens(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call) {
  static const char *fn = "sy_moe_ht_combine";
  host_moe_ht_t *hm = moe->backend_state;
  const sy_moe_ht_config_t *c = &moe->config;
  const int W = comm->world_size, me = comm->rank, L = moe->local_experts, K = c->top_k, H = c->hidden;
  const int kk = hm->hl.kk;
  const int32_t *ids = section(call->handle, hm->hl.ids);
  memset(hm->next, 0, (size_t)W * sizeof *hm->next);
  for (int t = 0; t < call->num_tokens; t++) {
    if (sy__host_group_aborted(comm->backend_state)) return SY_ERR_ABORTED;
    const int32_t *tid = ids + (size_t)t * K;
    for (int h = 0; h < H; h++) hm->acc[h] = 0.0f;
    for (int k = 0; call->token_values && k < K; k++) call->token_values[(size_t)t * K + k] = 0.0f;
    int named = 0;
    for (int p = 0; p < W; p++) {
      if (!names_rank(tid, K, L, p)) continue;
      named = 1;
      const ht_offer_t *o = sy__host_exchange_slot(comm, p);
      const sy_moe_ht_call_t *at_p = o->call;
      const int32_t *entry =
          section(o->handle, hm->hl.recv_rows) + ((size_t)me * c->max_tokens + (size_t)hm->next[p]++) * kk;
      for (int h = 0; h < H; h++) hm->partial[h] = 0.0f;
      int j = 0;
      for (int k = 0; k < K; k++) {
        if (tid[k] < 0 || tid[k] / L != p) continue;
        const int32_t row = entry[j++];
        if (row < 0 || row >= at_p->recv->rows) return internal(fn, "a row", me, t);
        const float w = at_p->row_weights ? at_p->row_weights[row] : 1.0f;
        sy__moe_fma_row(hm->partial, w, (const uint16_t *)at_p->tokens + (size_t)row * H, H);
        if (call->token_values && at_p->row_values) call->token_values[(size_t)t * K + k] = at_p->row_values[row];
      }
      sy__moe_round_row(hm->partial, hm->rounded, H);
      sy__moe_add_row(hm->acc, hm->rounded, H);
    }
    uint16_t *o = call->out ? (uint16_t *)call->out + (size_t)t * H : NULL;
    if (o && call->add && !named) continue; /* sy_moe_ht_combine_add: a token with no expert keeps its row */
    if (o && call->add) sy__moe_add_row(hm->acc, o, H);
    if (o) sy__moe_round_row(hm->acc, o, H);
  }
  return SY_SUCCESS;
}

sy_status_t sy__host_moe_ht_combine(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                    cudaStream_t stream) {
  static const char *fn = "sy_moe_ht_combine";
  ht_offer_t offer;
  offer_init(moe, call, &offer);
  offer.status = check_combine(moe, call, &offer, fn);
  SY_CHECK(sy__host_exchange_begin(comm, SY_HOST_OP_MOE_HT_COMBINE, &offer));
  sy_status_t verdict = sy__host_moe_ht_verdict(comm, &offer, 1, fn);
  if (verdict == SY_SUCCESS) verdict = combine_tokens(comm, moe, call);
  SY_CHECK(sy__host_exchange_end(comm));
  return verdict;
}

/* ---- the combine's backward ------------------------------------------------------------------------------------- */

static sy_status_t backward_rows(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call) {
  host_moe_ht_t *hm = moe->backend_state;
  const sy_moe_ht_config_t *c = &moe->config;
  const int W = comm->world_size, me = comm->rank, L = moe->local_experts, K = c->top_k, H = c->hidden;
  const int kk = hm->hl.kk, stride = call->recv->expert_stride;
  const int32_t *recv_rows = section(call->handle, hm->hl.recv_rows);
  uint16_t *grad_rows = call->out;
  for (int s = 0; s < W; s++) {
    const ht_offer_t *o = sy__host_exchange_slot(comm, s);
    const int32_t *ids = section(o->handle, hm->hl.ids);
    int i = 0;
    for (int t = 0; t < o->num_tokens; t++) {
      if (sy__host_group_aborted(comm->backend_state)) return SY_ERR_ABORTED;
      if (!names_rank(ids + (size_t)t * K, K, L, me)) continue;
      const int32_t *entry = recv_rows + ((size_t)s * c->max_tokens + (size_t)i++) * kk;
      const uint16_t *g = (const uint16_t *)o->call->tokens + (size_t)t * H;
      for (int j = 0; j < kk && entry[j] >= 0; j++) {
        const size_t row = (size_t)entry[j];
        if (call->row_weights) sy__moe_ht_scale_row(call->row_weights[row], g, grad_rows + row * H, H);
        else memcpy(grad_rows + row * H, g, (size_t)H * sizeof *g);
        if (call->grad_row_weights)
          call->grad_row_weights[row] = sy__moe_ht_dot(g, (const uint16_t *)call->rows_in + row * H, H);
      }
    }
  }
  const int32_t *recv_counts = section(call->handle, hm->hl.recv_counts),
                *offsets = section(call->handle, hm->hl.offsets);
  for (int e = 0; call->grad_row_weights && e < L; e++) { /* padding rows: 0 */
    int32_t n = 0;
    for (int s = 0; s < W; s++) n += recv_counts[(size_t)s * L + e];
    for (int32_t row = expert_begin(offsets, stride, e) + n; row < expert_begin(offsets, stride, e + 1); row++)
      call->grad_row_weights[row] = 0.0f;
  }
  return SY_SUCCESS;
}

sy_status_t sy__host_moe_ht_combine_backward(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                             cudaStream_t stream) {
  static const char *fn = "sy_moe_ht_combine_backward";
  ht_offer_t offer;
  offer_init(moe, call, &offer);
  offer.status = check_combine(moe, call, &offer, fn);
  SY_CHECK(sy__host_exchange_begin(comm, SY_HOST_OP_MOE_HT_COMBINE_BACKWARD, &offer));
  sy_status_t verdict = sy__host_moe_ht_verdict(comm, &offer, 1, fn);
  if (verdict == SY_SUCCESS) verdict = backward_rows(comm, moe, call);
  SY_CHECK(sy__host_exchange_end(comm)); /* no owner reuses its grad_out before every rank has read it */
  return verdict;
}
