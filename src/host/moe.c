/*
 * moe.c — the MoE low-latency dispatch and combine on the host backend. It moves data the way the kernels do,
 * through the workspace of ref/moe_layout.h, so the semantics match and not only the results: per call parity
 * a dispatch region (one message per (source, token) bound here: routing entries, weights, positions, the token
 * as the wire carries it) and a combine region, plus per-source counters raised after the data.
 *   dispatch_send  checks the ids, encodes each token once (FP8 quantisation, ref/moe_ref.c) and stores a
 *                  message into every destination rank holding one of its experts (SY_MOE_PER_EXPERT: one
 *                  message per (token, expert), k ascending), in token order; then sets each destination's
 *                  message count and counts, and raises its dispatch signal to the call number (every
 *                  destination, even with nothing for it). The caller's buffers are free on return.
 *   dispatch_recv  waits (bounded) for every source's signal, then lays the messages out in the caller's
 *                  recv: for each message (sources ascending, tokens ascending) and each of its entries the
 *                  next slot of that local expert (and checks the position the sender wrote, which the cuda
 *                  backend places by); remembers the slot of every (source, message, k).
 *   combine_send   default: per message, the partial fmaf(w_k, y_k, .) over its entries in k order, rounded
 *                  to bf16, into the owner's region at [this rank][token]; SY_MOE_PER_EXPERT: y_k into
 *                  [token][k]. Then raises every owner's combine signal.
 *   combine_recv   checks num_tokens and ids against this rank's dispatch, waits for every rank's combine
 *                  signal, and reduces into out (partials in rank order, or w_k * y_k in k order).
 * Why two parities suffice for the order DS, DR, CS, CR that core/moe.c enforces: docs/architecture.md.
 * No rank reads another's caller buffers: each half pushes from its own buffers into the symmetric workspaces
 * and signals, so a timed-out wait may return at once (the group's copy-phase rule in group.c concerns the
 * pulling operations). A sender still writing into a workspace after its peer gave up writes memory the group
 * keeps until its last member leaves: after an error moe_destroy leaves the workspace to the communicator.
 */
#include "core/internal.h"
#include "host/host.h"
#include "ref/moe_ref.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(sy_moe_msg_header_t) == SY_MOE_MSG_HEADER, "the header moe_layout.h draws");
_Static_assert(sizeof(sy_moe_msg_entry_t) == 8, "8 bytes per k");

typedef struct host_moe {
  sy_moe_layout_t layout;
  unsigned char *ws;    /* this rank's workspace (symmetric) */
  unsigned char **peer; /* [W] every rank's workspace as this rank addresses it */
  uint64_t calls;       /* dispatch_send calls made: the current call's number, parity calls % 2 */
  int num_tokens;       /* this rank's dispatch of the current call */
  int32_t *ids;         /* [max_tokens][top_k] its ids */
  int32_t *slot_of;     /* [W][messages per source][top_k] slot of (source, message, k) here, -1 for foreign entries */
  int32_t *fill;        /* [L] slots handed out per local expert */
  int32_t *first;       /* [L] fill before the current source's messages */
  int32_t *named;       /* [num_experts] this dispatch's messages naming each expert so far */
  int32_t *sent;        /* [W] messages to each destination */
  unsigned char *wire;  /* one token as the wire carries it (payload, then scales) */
  float *acc;           /* [hidden] */
} host_moe_t;

typedef struct moe_offer {
  int ok; /* this rank created its state (core/moe.c has compared the configurations) */
} moe_offer_t;

/* ---- workspace addressing (moe_layout.h's offsets from a rank's base) ----------------------------------------- */

static unsigned char *message_at(const host_moe_t *hm, unsigned char *base, int parity, int source, int index) {
  return base + sy__moe_msg_offset(&hm->layout, parity, source, index);
}

static uint16_t *combine_at(const host_moe_t *hm, unsigned char *base, int parity, size_t vector) {
  return (uint16_t *)(base + sy__moe_combine_offset(&hm->layout, parity, vector));
}

/* the counts of source's messages per local expert (L of them, consecutive) */
static int32_t *counts_at(const host_moe_t *hm, unsigned char *base, int parity, int source) {
  return (int32_t *)(base + sy__moe_counts_offset(&hm->layout, parity, source, 0));
}

static uint64_t *counter_at(const host_moe_t *hm, unsigned char *base, int parity, int source, int word) {
  return (uint64_t *)(base + sy__moe_counter_offset(&hm->layout, parity, source, word));
}

/* Entry k and position k of a message. */
static sy_moe_msg_entry_t entry_of(const unsigned char *msg, int k) {
  sy_moe_msg_entry_t entry;
  memcpy(&entry, msg + sy__moe_entry_offset(k), sizeof entry);
  return entry;
}

static int32_t position_of(const unsigned char *msg, int top_k, int k) {
  int32_t position;
  memcpy(&position, msg + sy__moe_position_offset(top_k, k), sizeof position);
  return position;
}

/* ---- create / destroy ----------------------------------------------------------------------------------------- */

static void state_free(host_moe_t *hm) {
  if (!hm) return;
  free(hm->peer);
  free(hm->ids);
  free(hm->slot_of);
  free(hm->fill);
  free(hm->first);
  free(hm->named);
  free(hm->sent);
  free(hm->wire);
  free(hm->acc);
  free(hm);
}

static host_moe_t *state_new(sy_comm_t comm, const struct sy_moe *moe) {
  const sy_moe_config_t *c = &moe->config;
  const size_t W = (size_t)comm->world_size, T = (size_t)c->max_tokens, K = (size_t)c->top_k;
  host_moe_t *hm = calloc(1, sizeof *hm);
  if (!hm) return NULL;
  if (sy__moe_layout(c, comm->world_size, &hm->layout) != SY_SUCCESS) {
    free(hm);
    return NULL;
  }
  hm->peer = calloc(W, sizeof *hm->peer);
  hm->ids = calloc(T * K, sizeof *hm->ids);
  hm->slot_of = calloc(W * hm->layout.messages_per_source * K, sizeof *hm->slot_of);
  hm->fill = calloc((size_t)moe->local_experts, sizeof *hm->fill);
  hm->first = calloc((size_t)moe->local_experts, sizeof *hm->first);
  hm->named = calloc((size_t)c->num_experts, sizeof *hm->named);
  hm->sent = calloc(W, sizeof *hm->sent);
  hm->wire = malloc(hm->layout.msg_bytes - hm->layout.payload_offset);
  hm->acc = malloc((size_t)c->hidden * sizeof *hm->acc);
  if (!hm->peer || !hm->ids || !hm->slot_of || !hm->fill || !hm->first || !hm->named || !hm->sent || !hm->wire ||
      !hm->acc) {
    state_free(hm);
    return NULL;
  }
  return hm;
}

sy_status_t sy__host_moe_create(sy_comm_t comm, struct sy_moe *moe) {
  const int world = comm->world_size;
  host_moe_t *hm = state_new(comm, moe);
  moe_offer_t offer;
  memset(&offer, 0, sizeof offer);
  offer.ok = hm != NULL; /* a local failure is published too, so every rank reaches one verdict */
  sy_status_t st = sy__host_exchange_begin(comm, SY_HOST_OP_MOE_CREATE, &offer);
  sy_status_t verdict = SY_SUCCESS;
  if (st == SY_SUCCESS) {
    for (int r = 0; r < world && verdict == SY_SUCCESS; r++) {
      const moe_offer_t *o = sy__host_exchange_slot(comm, r);
      if (!o->ok) {
        SY_WARN("moe_create: rank %d could not create its state; nothing created", r);
        verdict = SY_ERR_NO_MEMORY;
      }
    }
    st = sy__host_exchange_end(comm);
  }
  if (st == SY_SUCCESS) st = verdict;
  /* Collective too: every rank allocates, or none does. */
  if (st == SY_SUCCESS) st = sy_mem_alloc(comm, hm->layout.total, (void **)&hm->ws);
  if (st != SY_SUCCESS) {
    state_free(hm);
    return st;
  }
  /* Counters start at 0 (a fresh allocation is poisoned); no peer may raise one before that, hence the barrier. */
  memset(hm->ws + hm->layout.counters_offset, 0, hm->layout.counters_bytes);
  sy_status_t peers = SY_SUCCESS;
  for (int r = 0; r < world && peers == SY_SUCCESS; r++)
    peers = sy_comm_peer_ptr(comm, hm->ws, r, (void **)&hm->peer[r]);
  st = sy__host_barrier(comm);
  if (st == SY_SUCCESS && peers != SY_SUCCESS) st = SY_ERR_INTERNAL; /* every host rank is addressable */
  if (st != SY_SUCCESS) {
    sy__mem_free_within(comm, hm->ws); /* keeps the create's sy_last_error */
    state_free(hm);
    return st;
  }
  moe->backend_state = hm;
  return SY_SUCCESS;
}

void sy__host_moe_destroy(sy_comm_t comm, struct sy_moe *moe) {
  host_moe_t *hm = moe->backend_state;
  if (!hm) return;
  /* After an error the workspace stays with the communicator, which frees it (a peer may still write). */
  if (comm->error == SY_SUCCESS) {
    sy_status_t st = sy_mem_free(comm, hm->ws);
    if (st != SY_SUCCESS) SY_INFO("moe_destroy: freeing the workspace: %s", sy_status_name(st));
  }
  state_free(hm);
  moe->backend_state = NULL;
}

/* ---- dispatch --------------------------------------------------------------------------------------------------- */

sy_status_t sy__host_moe_dispatch_send(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args,
                                       cudaStream_t stream) {
  host_moe_t *hm = moe->backend_state;
  const sy_moe_config_t *c = &moe->config;
  const int world = comm->world_size, me = comm->rank, L = moe->local_experts, K = c->top_k, H = c->hidden;
  /* Before anything is written: a rejected call changes nothing (the cuda kernel reports it asynchronously). */
  SY_CHECK(sy__moe_check_ids("sy_moe_dispatch_send", me, args->expert_ids, args->id_type, args->num_tokens, K,
                             c->num_experts));
  const uint64_t call = ++hm->calls;
  const int parity = (int)(call & 1);
  const size_t wire_bytes = hm->layout.msg_bytes - hm->layout.payload_offset;
  const size_t payload_bytes = (size_t)H * sy__moe_wire_elem(c->wire);
  hm->num_tokens = args->num_tokens;
  for (size_t i = 0; i < (size_t)args->num_tokens * K; i++)
    hm->ids[i] = (int32_t)sy__moe_id(args->expert_ids, args->id_type, i);
  memset(hm->sent, 0, (size_t)world * sizeof *hm->sent);
  memset(hm->named, 0, (size_t)c->num_experts * sizeof *hm->named);
  const int per_expert = (c->flags & SY_MOE_PER_EXPERT) != 0;
  for (int t = 0; t < args->num_tokens; t++) {
    const int32_t *ids = hm->ids + (size_t)t * K;
    int encoded = 0;
    /* Default: one message per destination rank holding any of the token's experts, naming all of them
     * (kmask: the k it carries); SY_MOE_PER_EXPERT: one message per k, in k order. */
    for (int u = 0; u < (per_expert ? K : world); u++) {
      const int d = per_expert ? (ids[u] >= 0 ? ids[u] / L : -1) : u;
      uint32_t kmask = 0;
      for (int k = 0; d >= 0 && k < K; k++)
        if (ids[k] >= 0 && ids[k] / L == d && (!per_expert || k == u)) kmask |= 1u << k;
      if (!kmask) continue;
      if (!encoded) { /* once per token, whichever ranks it goes to */
        sy__moe_encode_token(c->wire, (const uint16_t *)args->tokens + (size_t)t * H, H, hm->wire,
                             (float *)(hm->wire + payload_bytes), 1);
        encoded = 1;
      }
      unsigned char *msg = message_at(hm, hm->peer[d], parity, me, hm->sent[d]++);
      const sy_moe_msg_header_t header = {t, __builtin_popcount(kmask), (uint32_t)call, 0};
      memcpy(msg, &header, sizeof header);
      for (int k = 0; k < K; k++) {
        const int carried = (kmask >> k) & 1u;
        const sy_moe_msg_entry_t entry = {carried ? ids[k] - d * L : -1,
                                          args->weights ? args->weights[(size_t)t * K + k] : 0.0f};
        const int32_t position = carried ? hm->named[ids[k]]++ : -1;
        memcpy(msg + sy__moe_entry_offset(k), &entry, sizeof entry);
        memcpy(msg + sy__moe_position_offset(K, k), &position, sizeof position);
      }
      memcpy(msg + hm->layout.payload_offset, hm->wire, wire_bytes);
    }
  }
  /* Every destination hears from every source on every call; the release orders the messages (and, where
   * there are any, the counts of each of its experts) before it. */
  for (int d = 0; d < world; d++) {
    if (hm->sent[d] > 0)
      memcpy(counts_at(hm, hm->peer[d], parity, me), hm->named + (size_t)d * L, (size_t)L * sizeof(int32_t));
    *counter_at(hm, hm->peer[d], parity, me, SY_MOE_COUNTER_MESSAGES) = (uint64_t)hm->sent[d];
    __atomic_store_n(counter_at(hm, hm->peer[d], parity, me, SY_MOE_COUNTER_DISPATCH), call, __ATOMIC_RELEASE);
  }
  return SY_SUCCESS;
}

/* Waits for word `word` of every source's counters of this call. */
static sy_status_t wait_sources(sy_comm_t comm, host_moe_t *hm, int word, const char *half) {
  const int parity = (int)(hm->calls & 1);
  for (int s = 0; s < comm->world_size; s++) {
    sy_status_t st = comm->ops->signal_wait(comm, counter_at(hm, hm->ws, parity, s, word), hm->calls, NULL);
    if (st != SY_SUCCESS) {
      SY_WARN("moe %s: call %llu: rank %d's %s did not arrive: %s", half, (unsigned long long)hm->calls, s,
              word == SY_MOE_COUNTER_DISPATCH ? "dispatch_send" : "combine_send", sy_status_name(st));
      return st;
    }
  }
  return SY_SUCCESS;
}

sy_status_t sy__host_moe_dispatch_recv(sy_comm_t comm, struct sy_moe *moe, const sy_moe_recv_t *recv,
                                       cudaStream_t stream) {
  host_moe_t *hm = moe->backend_state;
  const sy_moe_config_t *c = &moe->config;
  const int world = comm->world_size, L = moe->local_experts, K = c->top_k;
  const size_t M = hm->layout.messages_per_source;
  const size_t S = (size_t)moe->slots, groups = (size_t)c->hidden / SY_MOE_FP8_GROUP;
  const size_t row_bytes = (size_t)c->hidden * sy__moe_wire_elem(c->wire);
  const int parity = (int)(hm->calls & 1), fp8 = c->wire != SY_MOE_WIRE_BF16;
  SY_CHECK(wait_sources(comm, hm, SY_MOE_COUNTER_DISPATCH, "dispatch_recv"));
  memset(hm->fill, 0, (size_t)L * sizeof *hm->fill);
  memset(recv->rank_counts, 0, (size_t)L * world * sizeof *recv->rank_counts);
  for (int s = 0; s < world; s++) {
    const uint64_t count = *counter_at(hm, hm->ws, parity, s, SY_MOE_COUNTER_MESSAGES);
    if (count > (uint64_t)M) {
      SY_WARN("moe dispatch_recv: call %llu: rank %d sent %llu messages, more than the %zu a source may",
              (unsigned long long)hm->calls, s, (unsigned long long)count, M);
      return SY_ERR_INTERNAL;
    }
    memcpy(hm->first, hm->fill, (size_t)L * sizeof *hm->fill);
    for (int m = 0; m < (int)count; m++) {
      const unsigned char *msg = message_at(hm, hm->ws, parity, s, m);
      sy_moe_msg_header_t header;
      memcpy(&header, msg, sizeof header);
      int32_t *slot_of = hm->slot_of + ((size_t)s * M + (size_t)m) * K;
      for (int k = 0; k < K; k++) {
        const sy_moe_msg_entry_t entry = entry_of(msg, k);
        slot_of[k] = -1;
        if (entry.local_expert < 0) continue;
        const int e = entry.local_expert;
        const int32_t slot = hm->fill[e]++;
        const int32_t position = position_of(msg, K, k);
        if (position != slot - hm->first[e]) { /* the positions the cuda backend's receiver places by */
          SY_WARN("moe dispatch_recv: call %llu: rank %d's message %d names expert %d at position %d, expected %d",
                  (unsigned long long)hm->calls, s, m, e, position, slot - hm->first[e]);
          return SY_ERR_INTERNAL;
        }
        const size_t at = (size_t)e * S + (size_t)slot;
        memcpy((unsigned char *)recv->tokens + at * row_bytes, msg + hm->layout.payload_offset, row_bytes);
        for (size_t g = 0; fp8 && g < groups; g++)
          memcpy(recv->scales + ((size_t)e * groups + g) * S + (size_t)slot,
                 msg + hm->layout.scales_offset + g * sizeof(float), sizeof(float));
        recv->src[2 * at] = s;
        recv->src[2 * at + 1] = header.src_token;
        recv->rank_counts[(size_t)e * world + s]++;
        slot_of[k] = slot;
      }
    }
    const int32_t *counts = counts_at(hm, hm->ws, parity, s);
    for (int e = 0; count > 0 && e < L; e++)
      if (counts[e] != hm->fill[e] - hm->first[e]) {
        SY_WARN("moe dispatch_recv: call %llu: rank %d counts %d messages to expert %d, sent %d",
                (unsigned long long)hm->calls, s, counts[e], e, hm->fill[e] - hm->first[e]);
        return SY_ERR_INTERNAL;
      }
  }
  for (int e = 0; e < L; e++) recv->expert_counts[e] = hm->fill[e];
  return SY_SUCCESS;
}

/* ---- combine ---------------------------------------------------------------------------------------------------- */

sy_status_t sy__host_moe_combine_send(sy_comm_t comm, struct sy_moe *moe, const void *expert_out, cudaStream_t stream) {
  host_moe_t *hm = moe->backend_state;
  const sy_moe_config_t *c = &moe->config;
  const int world = comm->world_size, me = comm->rank, K = c->top_k, T = c->max_tokens, H = c->hidden;
  const size_t S = (size_t)moe->slots;
  const int parity = (int)(hm->calls & 1), per_expert = (c->flags & SY_MOE_PER_EXPERT) != 0;
  const uint16_t *y = expert_out;
  for (int s = 0; s < world; s++) { /* s: the owner of the tokens */
    const int count = (int)*counter_at(hm, hm->ws, parity, s, SY_MOE_COUNTER_MESSAGES);
    for (int m = 0; m < count; m++) {
      const unsigned char *msg = message_at(hm, hm->ws, parity, s, m);
      sy_moe_msg_header_t header;
      memcpy(&header, msg, sizeof header);
      const int32_t *slot_of = hm->slot_of + ((size_t)s * hm->layout.messages_per_source + (size_t)m) * K;
      if (!per_expert)
        for (int i = 0; i < H; i++) hm->acc[i] = 0.0f;
      for (int k = 0; k < K; k++) {
        const sy_moe_msg_entry_t entry = entry_of(msg, k);
        if (entry.local_expert < 0) continue;
        const uint16_t *y_k = y + ((size_t)entry.local_expert * S + (size_t)slot_of[k]) * (size_t)H;
        if (per_expert)
          memcpy(combine_at(hm, hm->peer[s], parity, (size_t)header.src_token * K + (size_t)k), y_k,
                 (size_t)H * sizeof *y_k);
        else sy__moe_fma_row(hm->acc, entry.weight, y_k, H);
      }
      if (!per_expert)
        sy__moe_round_row(hm->acc, combine_at(hm, hm->peer[s], parity, (size_t)me * T + (size_t)header.src_token), H);
    }
  }
  for (int s = 0; s < world; s++)
    __atomic_store_n(counter_at(hm, hm->peer[s], parity, me, SY_MOE_COUNTER_COMBINE), hm->calls, __ATOMIC_RELEASE);
  return SY_SUCCESS;
}

sy_status_t sy__host_moe_check_combine(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args,
                                       const char *fn) {
  const host_moe_t *hm = moe->backend_state;
  const int K = moe->config.top_k;
  SY_ARG_CHECK(args->num_tokens == hm->num_tokens, fn,
               "num_tokens=%d but this rank's dispatch of call %llu had %d tokens (pass the num_tokens and "
               "expert_ids of the dispatch this combine answers)",
               args->num_tokens, (unsigned long long)hm->calls, hm->num_tokens);
  for (size_t i = 0; i < (size_t)args->num_tokens * K; i++) {
    const int64_t id = sy__moe_id(args->expert_ids, args->id_type, i);
    SY_ARG_CHECK(id == hm->ids[i], fn,
                 "expert_ids[%zu][%zu]=%lld but this rank's dispatch of call %llu had %d there (pass the expert_ids "
                 "of the dispatch this combine answers)",
                 i / (size_t)K, i % (size_t)K, (long long)id, (unsigned long long)hm->calls, hm->ids[i]);
  }
  return SY_SUCCESS;
}

sy_status_t sy__host_moe_combine_recv(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *args, void *out,
                                      cudaStream_t stream) {
  host_moe_t *hm = moe->backend_state;
  const sy_moe_config_t *c = &moe->config;
  const int world = comm->world_size, L = moe->local_experts, K = c->top_k, T = c->max_tokens, H = c->hidden;
  const int parity = (int)(hm->calls & 1);
  SY_CHECK(sy__host_moe_check_combine(comm, moe, args, "sy_moe_combine_recv"));
  SY_CHECK(wait_sources(comm, hm, SY_MOE_COUNTER_COMBINE, "combine_recv"));
  for (int t = 0; t < hm->num_tokens; t++) {
    const int32_t *ids = hm->ids + (size_t)t * K;
    for (int i = 0; i < H; i++) hm->acc[i] = 0.0f;
    if (c->flags & SY_MOE_PER_EXPERT) {
      for (int k = 0; k < K; k++)
        if (ids[k] >= 0)
          sy__moe_fma_row(hm->acc, args->weights[(size_t)t * K + k],
                          combine_at(hm, hm->ws, parity, (size_t)t * K + (size_t)k), H);
    } else {
      for (int r = 0; r < world; r++) {
        int held = 0;
        for (int k = 0; k < K; k++) held |= ids[k] >= 0 && ids[k] / L == r;
        if (held) sy__moe_add_row(hm->acc, combine_at(hm, hm->ws, parity, (size_t)r * T + (size_t)t), H);
      }
    }
    /* A token with no expert: the sum of nothing, +0, whose bf16 is the zero bits. */
    sy__moe_round_row(hm->acc, (uint16_t *)out + (size_t)t * H, H);
  }
  return SY_SUCCESS;
}
