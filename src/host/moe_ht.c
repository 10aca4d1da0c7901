/*
 * moe_ht.c — the MoE high-throughput mode on the host backend: the object, and the layout, which writes the
 * handle (ref/moe_ht_layout.h's sections, in host memory here). Every call is one exchange of the group
 * (group.c), tagged with its operation: each rank checks what it alone can see first (its ids; its handle's
 * magic, object and num_tokens; whether its rows fit) and publishes the outcome with its arguments; after the
 * opening round every rank reads every rank's offer and reaches the same verdict, so a check that fails on one
 * rank fails the call on every rank with nothing written. Then each rank computes its own outputs, reading its
 * peers' published buffers and handles (copy phase), and the closing round ends the call, so no peer frees or
 * reuses a buffer another still reads.
 *   layout            each rank's ids, positions and per-expert counts; the exchange gives every rank what each
 *                     source sends it; then the handle and (exact mode) host_counts.
 *   dispatch, combine, combine_backward: moe_ht_rows.c.
 * No symmetric memory: the rows move by plain loops over the peers' buffers, with src/ref's rounding rules.
 */
#include "host/moe_ht.h"

#include "ref/moe_ref.h"

#include <stdlib.h>
#include <string.h>

/* ---- create / destroy ---------------------------------------------------------------------------------------- */

static void state_free(host_moe_ht_t *hm) {
  if (!hm) return;
  free(hm->ids), free(hm->pos), free(hm->named), free(hm->send), free(hm->recv_counts), free(hm->recv_tokens);
  free(hm->offsets), free(hm->fill), free(hm->first), free(hm->next), free(hm->wire), free(hm->scales);
  free(hm->acc), free(hm->partial), free(hm->rounded);
  free(hm);
}

static host_moe_ht_t *state_new(sy_comm_t comm, const struct sy_moe_ht *moe) {
  const sy_moe_ht_config_t *c = &moe->config;
  const size_t W = (size_t)comm->world_size, TK = (size_t)c->max_tokens * (size_t)c->top_k;
  const size_t L = (size_t)moe->local_experts, H = (size_t)c->hidden;
  host_moe_ht_t *hm = calloc(1, sizeof *hm);
  if (!hm) return NULL;
  hm->hl = sy__moe_ht_handle_layout(c, comm->world_size);
  hm->ids = malloc(TK * sizeof *hm->ids);
  hm->pos = malloc(TK * sizeof *hm->pos);
  hm->named = malloc((size_t)c->num_experts * sizeof *hm->named);
  hm->send = malloc(W * sizeof *hm->send);
  hm->recv_counts = malloc(W * L * sizeof *hm->recv_counts);
  hm->recv_tokens = malloc(W * sizeof *hm->recv_tokens);
  hm->offsets = malloc((L + 1) * sizeof *hm->offsets);
  hm->fill = malloc(L * sizeof *hm->fill);
  hm->first = malloc((L + 1) * sizeof *hm->first);
  hm->next = malloc(W * sizeof *hm->next);
  hm->wire = malloc(H * 2);
  hm->scales = malloc((H / SY_MOE_FP8_GROUP + 1) * sizeof *hm->scales);
  hm->acc = malloc(H * sizeof *hm->acc);
  hm->partial = malloc(H * sizeof *hm->partial);
  hm->rounded = malloc(H * sizeof *hm->rounded);
  if (!hm->ids || !hm->pos || !hm->named || !hm->send || !hm->recv_counts || !hm->recv_tokens || !hm->offsets ||
      !hm->fill || !hm->first || !hm->next || !hm->wire || !hm->scales || !hm->acc || !hm->partial || !hm->rounded) {
    state_free(hm);
    return NULL;
  }
  return hm;
}

sy_status_t sy__host_moe_ht_create(sy_comm_t comm, struct sy_moe_ht *moe) {
  host_moe_ht_t *hm = state_new(comm, moe);
  ht_offer_t offer;
  memset(&offer, 0, sizeof offer);
  if (hm && moe->config.recv_arena_bytes) { /* the receive arena: host memory of the object's own (core frees it) */
    moe->arena = aligned_alloc(256, (moe->config.recv_arena_bytes + 255) & ~(size_t)255);
    moe->arena_own = 1;
    if (!moe->arena)
      SY_WARN("moe_ht_create: no host memory for config.recv_arena_bytes=%zu", moe->config.recv_arena_bytes);
  }
  offer.status = hm && (moe->arena || !moe->arena_own) ? SY_SUCCESS : SY_ERR_NO_MEMORY; /* published too: one verdict */
  offer.config = moe->config;
  offer.serial = moe->serial;
  sy_status_t st = sy__host_exchange_begin(comm, SY_HOST_OP_MOE_HT_CREATE, &offer);
  if (st == SY_SUCCESS) {
    const sy_status_t verdict = sy__host_moe_ht_verdict(comm, &offer, 0, "moe_ht_create");
    st = sy__host_exchange_end(comm);
    if (st == SY_SUCCESS) st = verdict;
  }
  if (st != SY_SUCCESS) {
    state_free(hm);
    return st;
  }
  moe->backend_state = hm;
  return SY_SUCCESS;
}

void sy__host_moe_ht_destroy(sy_comm_t comm, struct sy_moe_ht *moe) {
  state_free(moe->backend_state);
  moe->backend_state = NULL;
}

/* ---- what every call shares ------------------------------------------------------------------------------------ */

sy_status_t sy__host_moe_ht_verdict(sy_comm_t comm, const ht_offer_t *mine, int with_handle, const char *fn) {
  const int world = comm->world_size;
  for (int r = 0; r < world; r++) {
    const ht_offer_t *o = sy__host_exchange_slot(comm, r);
    if (memcmp(&o->config, &mine->config, sizeof o->config)) {
      SY_WARN(
          "%s: rank %d calls it on an object of another configuration (max_tokens=%d hidden=%d top_k=%d "
          "num_experts=%d, this rank's %d / %d / %d / %d): are the ranks in different objects' calls? nothing "
          "written",
          fn, r, o->config.max_tokens, o->config.hidden, o->config.top_k, o->config.num_experts,
          mine->config.max_tokens, mine->config.hidden, mine->config.top_k, mine->config.num_experts);
      sy__comm_set_error(comm, SY_ERR_MISMATCH, "%s: ranks call objects of different configurations", fn);
      return SY_ERR_MISMATCH;
    }
  }
  for (int r = 0; r < world; r++) { /* alike configured, yet other objects (two layers of one shape) */
    const ht_offer_t *o = sy__host_exchange_slot(comm, r);
    if (o->serial == mine->serial) continue;
    sy__arg_error(fn,
                  "rank %d calls it on this communicator's moe_ht object #%llu, this rank on #%llu (objects of one "
                  "configuration: are the ranks in different objects' calls, e.g. two layers in another order?); "
                  "nothing written",
                  r, (unsigned long long)o->serial, (unsigned long long)mine->serial);
    return SY_ERR_INVALID_ARG;
  }
  for (int r = 0; r < world; r++) {
    const ht_offer_t *o = sy__host_exchange_slot(comm, r);
    if (o->status == SY_SUCCESS) continue;
    if (o != mine) /* the rank itself logged the argument */
      SY_WARN(
          "%s: rank %d rejected its arguments (%s; its log line names them): the call fails on every rank, "
          "nothing written",
          fn, r, sy_status_name(o->status));
    return o->status;
  }
  const ht_offer_t *first = sy__host_exchange_slot(comm, 0);
  for (int r = 1; with_handle && r < world; r++) {
    const ht_offer_t *o = sy__host_exchange_slot(comm, r);
    if (o->layout == first->layout) continue;
    SY_WARN(
        "%s: handle: rank %d's handle holds this object's layout %llu, rank 0's layout %llu (every rank passes "
        "the handle of the same sy_moe_ht_layout call); nothing written",
        fn, r, (unsigned long long)o->layout, (unsigned long long)first->layout);
    return SY_ERR_INVALID_ARG;
  }
  return SY_SUCCESS;
}

sy_status_t sy__host_moe_ht_check_handle(const struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                         sy_moe_ht_handle_header_t *header, const char *fn) {
  memcpy(header, call->handle, sizeof *header);
  SY_ARG_CHECK(header->magic == SY_MOE_HT_HANDLE_MAGIC && header->object == moe->id, fn,
               "handle=%p holds no layout of this object (magic 0x%08x, object %u; this object is %u): pass a handle "
               "sy_moe_ht_layout wrote for it",
               call->handle, header->magic, header->object, moe->id);
  SY_ARG_CHECK(call->num_tokens == header->num_tokens, fn,
               "num_tokens=%d but the handle's layout (call %llu) had %d tokens on this rank", call->num_tokens,
               (unsigned long long)header->layout, header->num_tokens);
  return SY_SUCCESS;
}

/* ---- layout ------------------------------------------------------------------------------------------------------- */

/* This rank's side: normalised ids, each entry's position among the earlier tokens naming its expert, the tokens
 * naming each expert and each rank. */
static void local_layout(const struct sy_moe_ht *moe, host_moe_ht_t *hm, const sy_moe_ht_call_t *call, int world) {
  const int K = moe->config.top_k, L = moe->local_experts;
  memset(hm->named, 0, (size_t)moe->config.num_experts * sizeof *hm->named);
  memset(hm->send, 0, (size_t)world * sizeof *hm->send);
  for (int t = 0; t < call->num_tokens; t++) {
    for (int k = 0; k < K; k++) {
      const size_t i = (size_t)t * K + (size_t)k;
      const int32_t x = (int32_t)sy__moe_id(call->expert_ids, call->id_type, i);
      hm->ids[i] = x;
      hm->pos[i] = x >= 0 ? hm->named[x]++ : -1;
    }
    for (int p = 0; p < world; p++) {
      int names_p = 0;
      for (int k = 0; k < K; k++) names_p |= hm->ids[(size_t)t * K + k] >= 0 && hm->ids[(size_t)t * K + k] / L == p;
      hm->send[p] += names_p;
    }
  }
}

static void write_handle(sy_comm_t comm, const struct sy_moe_ht *moe, const host_moe_ht_t *hm,
                         const sy_moe_ht_call_t *call) {
  const sy_moe_ht_handle_layout_t *hl = &hm->hl;
  const int W = comm->world_size, L = moe->local_experts, n = call->num_tokens;
  const size_t nk = (size_t)n * (size_t)moe->config.top_k, channels = (size_t)W * (size_t)moe->config.num_sms;
  unsigned char *h = call->handle;
  sy_moe_ht_handle_header_t header;
  memset(&header, 0, sizeof header);
  header.magic = SY_MOE_HT_HANDLE_MAGIC;
  header.object = moe->id;
  header.num_tokens = n;
  header.rows = hm->offsets[L];
  header.layout = moe->layouts + 1;
  memcpy(h, &header, sizeof header);
  memcpy(h + hl->ids, hm->ids, nk * sizeof(int32_t));
  memcpy(h + hl->pos, hm->pos, nk * sizeof(int32_t));
  memcpy(h + hl->send_tokens, hm->send, (size_t)W * sizeof(int32_t));
  memcpy(h + hl->recv_counts, hm->recv_counts, (size_t)W * L * sizeof(int32_t));
  memcpy(h + hl->recv_tokens, hm->recv_tokens, (size_t)W * sizeof(int32_t));
  memcpy(h + hl->offsets, hm->offsets, ((size_t)L + 1) * sizeof(int32_t));
  memset(h + hl->chan_tokens, 0, channels * sizeof(int32_t)); /* the cuda backend's channels: none here */
  memset(h + hl->send_chan, 0, channels * sizeof(int32_t));
}

sy_status_t sy__host_moe_ht_layout(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                   cudaStream_t stream) {
  static const char *fn = "sy_moe_ht_layout";
  host_moe_ht_t *hm = moe->backend_state;
  const sy_moe_ht_config_t *c = &moe->config;
  const int W = comm->world_size, me = comm->rank, L = moe->local_experts;
  ht_offer_t offer;
  memset(&offer, 0, sizeof offer);
  offer.config = *c;
  offer.serial = moe->serial;
  offer.num_tokens = call->num_tokens;
  offer.status = sy__moe_check_ids(fn, me, call->expert_ids, call->id_type, call->num_tokens, c->top_k, c->num_experts);
  if (offer.status == SY_SUCCESS) local_layout(moe, hm, call, W);
  offer.named = hm->named;
  offer.send = hm->send;
  SY_CHECK(sy__host_exchange_begin(comm, SY_HOST_OP_MOE_HT_LAYOUT, &offer));
  const sy_status_t verdict = sy__host_moe_ht_verdict(comm, &offer, 0, fn);
  for (int s = 0; verdict == SY_SUCCESS && s < W; s++) { /* what each source sends here */
    const ht_offer_t *o = sy__host_exchange_slot(comm, s);
    memcpy(hm->recv_counts + (size_t)s * L, o->named + (size_t)me * L, (size_t)L * sizeof(int32_t));
    hm->recv_tokens[s] = o->send[me];
  }
  SY_CHECK(sy__host_exchange_end(comm));
  if (verdict != SY_SUCCESS) return verdict;
  sy__moe_ht_offsets(hm->recv_counts, W, L, c->expert_alignment, hm->offsets);
  write_handle(comm, moe, hm, call);
  if (call->host_counts) { /* exact: counts, first rows, rows needed */
    for (int e = 0; e < L; e++) {
      int32_t n = 0;
      for (int s = 0; s < W; s++) n += hm->recv_counts[(size_t)s * L + e];
      call->host_counts[e] = n;
      call->host_counts[L + e] = hm->offsets[e];
    }
    call->host_counts[2 * L] = hm->offsets[L];
  }
  return SY_SUCCESS;
}
