/*
 * attn.c — the attention dispatch on the host backend. Ranks are threads that see each other's memory,
 * so one call is an exchange (group.c: a peer inside another collective is SY_ERR_MISMATCH everywhere): every
 * rank publishes its call (source pointers, plan), every rank checks that all agree (the same verdict
 * everywhere, from the same published data), each receiver pulls its rows from the senders' sources by its
 * plan's receive lists (ref/attn_ref.c) in bounded pieces (sy__host_copy), and the closing round, so no sender
 * returns and reuses or frees a source while a peer still reads it — not even when that round times out, which
 * ends the copies at the next piece and waits for them to stop. The KV backward pulls into this rank's own
 * staging and then reduces it into grad_out, which no peer touches.
 */
#include "host/host.h"
#include "plan/attn_plan.h"
#include "ref/attn_ref.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct host_attn {
  const void **src; /* [world]: one channel's source pointers, gathered from the offers */
  uint64_t calls;
} host_attn_t;

/* What a rank publishes for a call (and, with call == NULL, for create). */
typedef struct attn_offer {
  int ok; /* create: this rank made its state */
  const struct sy_attn_plan *plan;
  const sy_attn_call_t *call;
  sy_attn_config_t config;
} attn_offer_t;

sy_status_t sy__host_attn_plan_upload(sy_comm_t comm, struct sy_attn_plan *plan, sy_pool_t pool, sy_host_pool_t staging,
                                      cudaStream_t stream) {
  return SY_SUCCESS; /* the host backend reads the plan where it is */
}

sy_status_t sy__host_attn_create(sy_comm_t comm, struct sy_attn *attn) {
  const int world = comm->world_size;
  host_attn_t *ha = calloc(1, sizeof *ha);
  const void **src = calloc((size_t)world, sizeof *src);
  attn_offer_t offer;
  memset(&offer, 0, sizeof offer);
  offer.config = attn->config;
  /* A local failure is published too, so every rank reaches the same verdict and nobody hangs. */
  offer.ok = ha && src;
  sy_status_t st = sy__host_exchange_begin(comm, SY_HOST_OP_ATTN_CREATE, &offer);
  sy_status_t verdict = SY_SUCCESS;
  if (st == SY_SUCCESS) {
    for (int r = 0; r < world; r++) {
      const attn_offer_t *o = sy__host_exchange_slot(comm, r);
      if (!o->ok) {
        if (verdict == SY_SUCCESS) SY_WARN("attn_create: rank %d could not create its state; nothing created", r);
        verdict = SY_ERR_NO_MEMORY;
      } else if (o->config.max_tokens != attn->config.max_tokens ||
                 o->config.max_replicas != attn->config.max_replicas ||
                 o->config.max_kv_grad_row_bytes != attn->config.max_kv_grad_row_bytes) {
        if (verdict == SY_SUCCESS)
          SY_WARN(
              "attn_create: rank %d configures max_tokens=%lld max_replicas=%d max_kv_grad_row_bytes=%zu, this "
              "rank %lld / %d / %zu; nothing created",
              r, (long long)o->config.max_tokens, o->config.max_replicas, o->config.max_kv_grad_row_bytes,
              (long long)attn->config.max_tokens, attn->config.max_replicas, attn->config.max_kv_grad_row_bytes);
        verdict = SY_ERR_MISMATCH;
      }
    }
    st = sy__host_exchange_end(comm);
  }
  if (st == SY_SUCCESS) st = verdict;
  if (st != SY_SUCCESS) {
    free((void *)src);
    free(ha);
    return st;
  }
  ha->src = src;
  attn->backend_state = ha;
  return SY_SUCCESS;
}

void sy__host_attn_destroy(sy_comm_t comm, struct sy_attn *attn) {
  host_attn_t *ha = attn->backend_state;
  if (!ha) return;
  free((void *)ha->src);
  free(ha);
  attn->backend_state = NULL;
}

static const char *dir_name(int dir) {
  static const char *names[SY_ATTN_DIRS] = {"q forward", "kv forward", "q reverse", "kv backward"};
  return dir >= 0 && dir < SY_ATTN_DIRS ? names[dir] : "?";
}

/* Whether every rank's plan comes from the same description as rank 0's (their fingerprints agree); else logs
 * rank 0's fingerprint and the ranks whose plans differ. Plans that agree on every pair's row counts but not on
 * where the rows are would otherwise pass, and a receiver would pull the wrong rows, or read past the sender's. */
static sy_status_t check_fingerprints(sy_comm_t comm, uint64_t call_number) {
  const int world = comm->world_size;
  const uint64_t first = ((const attn_offer_t *)sy__host_exchange_slot(comm, 0))->plan->fingerprint;
  char ranks[160] = "";
  size_t n = 0;
  int differ = 0;
  for (int r = 1; r < world; r++) {
    const uint64_t fp = ((const attn_offer_t *)sy__host_exchange_slot(comm, r))->plan->fingerprint;
    if (fp == first) continue;
    if (n < sizeof ranks) {
      const int w = snprintf(ranks + n, sizeof ranks - n, "%s%d (0x%016" PRIx64 ")", differ ? ", " : "", r, fp);
      n = w < 0 ? sizeof ranks : n + (size_t)w;
    }
    differ++;
  }
  if (!differ) return SY_SUCCESS;
  SY_WARN("attn: call %llu: ranks hold plans of different descriptions: rank 0's fingerprint is 0x%016" PRIx64
          ", ranks with another (%d): %s%s; nothing copied",
          (unsigned long long)call_number, first, differ, ranks, n >= sizeof ranks ? "..." : "");
  return SY_ERR_MISMATCH;
}

/* Whether every rank's offer agrees with this rank's: the same kind of call (channels, directions, row
 * sizes, dtype, flags), plans of the same shape and of the same description (fingerprints), and for every
 * channel and every pair of ranks the rows the sender's plan sends equal the rows the receiver's plan expects.
 * Every rank evaluates the same data, so every rank reaches the same verdict. Logs the first disagreement. */
static sy_status_t check_offers(sy_comm_t comm, const attn_offer_t *mine, uint64_t call_number) {
  const int world = comm->world_size;
  const sy_attn_call_t *me = mine->call;
  for (int r = 0; r < world; r++) {
    const attn_offer_t *o = sy__host_exchange_slot(comm, r);
    const sy_attn_call_t *c = o->call;
    int same = c->num_channels == me->num_channels && c->kv_backward == me->kv_backward;
    for (int i = 0; same && i < me->num_channels; i++)
      same = c->ch[i].dir == me->ch[i].dir && c->ch[i].row_bytes == me->ch[i].row_bytes;
    if (same && me->kv_backward) same = c->dtype == me->dtype && c->flags == me->flags;
    if (!same) {
      SY_WARN(
          "attn: call %llu: rank %d calls %s%s with %zu-byte rows (dtype %d, flags %u), this rank %s%s with %zu "
          "(dtype %d, flags %u); nothing copied",
          (unsigned long long)call_number, r, dir_name(c->ch[0].dir), c->num_channels > 1 ? " + kv" : "",
          c->ch[0].row_bytes, (int)c->dtype, c->flags, dir_name(me->ch[0].dir), me->num_channels > 1 ? " + kv" : "",
          me->ch[0].row_bytes, (int)me->dtype, me->flags);
      return SY_ERR_MISMATCH;
    }
    if (o->plan->world_size != world || o->plan->max_replicas != mine->plan->max_replicas) {
      SY_WARN(
          "attn: call %llu: rank %d's plan has world_size %d and max_replicas %d, this rank's %d and %d; "
          "nothing copied",
          (unsigned long long)call_number, r, o->plan->world_size, o->plan->max_replicas, mine->plan->world_size,
          mine->plan->max_replicas);
      return SY_ERR_MISMATCH;
    }
  }
  SY_CHECK(check_fingerprints(comm, call_number));
  for (int i = 0; i < me->num_channels; i++) {
    const int dir = me->ch[i].dir;
    for (int s = 0; s < world; s++) {
      const struct sy_attn_plan *sender = ((const attn_offer_t *)sy__host_exchange_slot(comm, s))->plan;
      for (int r = 0; r < world; r++) {
        const struct sy_attn_plan *receiver = ((const attn_offer_t *)sy__host_exchange_slot(comm, r))->plan;
        if (sender->dir[dir].send_rows[r] == receiver->dir[dir].recv_rows[s]) continue;
        SY_WARN(
            "attn: call %llu: %s: rank %d's plan sends %lld rows to rank %d, whose plan expects %lld (were the "
            "plans built from one description?); nothing copied",
            (unsigned long long)call_number, dir_name(dir), s, (long long)sender->dir[dir].send_rows[r], r,
            (long long)receiver->dir[dir].recv_rows[s]);
        return SY_ERR_MISMATCH;
      }
    }
  }
  return SY_SUCCESS;
}

sy_status_t sy__host_attn_run(sy_comm_t comm, struct sy_attn *attn, const struct sy_attn_plan *plan,
                              const sy_attn_call_t *call, cudaStream_t stream) {
  host_attn_t *ha = attn->backend_state;
  const int world = comm->world_size;
  const uint64_t call_number = ++ha->calls;
  attn_offer_t offer;
  memset(&offer, 0, sizeof offer);
  offer.ok = 1;
  offer.plan = plan;
  offer.call = call;
  offer.config = attn->config;
  SY_CHECK(sy__host_exchange_begin(comm, SY_HOST_OP_ATTN, &offer));
  sy_status_t verdict = check_offers(comm, &offer, call_number);
  if (verdict != SY_SUCCESS) {
    sy__comm_set_error(comm, verdict, "attn: call %llu: ranks disagree on the call's arguments (see log)",
                       (unsigned long long)call_number);
  } else {
    for (int i = 0; verdict == SY_SUCCESS && i < call->num_channels; i++) {
      for (int s = 0; s < world; s++)
        ha->src[s] = ((const attn_offer_t *)sy__host_exchange_slot(comm, s))->call->ch[i].src;
      /* Stops at the abort (SY_ERR_ABORTED) with the rest not copied. */
      verdict = (sy_status_t)sy__ref_attn_pull_by(plan, call->ch[i].dir, ha->src, call->ch[i].row_bytes,
                                                  call->ch[i].dst, sy__host_copy, comm);
    }
  }
  /* No sender returns (and reuses its rows) before every receiver has stopped pulling. */
  SY_CHECK(sy__host_exchange_end(comm));
  if (verdict == SY_SUCCESS && call->kv_backward)
    sy__ref_attn_kv_reduce(plan, call->ch[0].dst, call->ch[0].row_bytes, call->dtype, call->flags, call->grad_out);
  return verdict;
}
