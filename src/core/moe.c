/*
 * moe.c — the public entry points of the expert-parallel (MoE) low-latency dispatch and combine: the object
 * (its configuration, its workspace size), and the four halves. Each checks everything it can at the
 * boundary, once, and hands the backend arguments it can trust; a rejected call changes nothing (not the
 * object's next half either). The halves' order is enforced here per object: dispatch_send, dispatch_recv,
 * combine_send, combine_recv, dispatch_send, ... (the double-buffered receive regions are only safe in that
 * order: docs/architecture.md). Failures a backend reports for the collective as a whole (a timed-out wait, ranks
 * that disagree) are sticky, as in comm.c.
 */
#include "internal.h"
#include "ref/moe_layout.h"
#include "ref/moe_ref.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int mul_size(size_t a, size_t b, size_t *out) {
  if (a && b > SIZE_MAX / a) return 0;
  *out = a * b;
  return 1;
}

/* ---- the object --------------------------------------------------------------------------------------------- */

/* Copies the caller's config (a newer caller's larger struct: its known prefix) and checks it, naming the
 * field. */
static sy_status_t read_config(sy_comm_t comm, const sy_moe_config_t *in, sy_moe_config_t *config, const char *fn) {
  SY_ARG_CHECK(in != NULL, fn, "config is NULL (it has no defaults: set max_tokens, hidden, top_k, num_experts)");
  SY_ARG_CHECK(in->size >= sizeof(sy_moe_config_t), fn,
               "config->size=%zu is too small (initialise the config with SY_MOE_CONFIG_INIT)", in->size);
  *config = *in;
  config->size = sizeof *config;
  const int W = comm->world_size;
  SY_ARG_CHECK(config->max_tokens >= 1, fn, "config->max_tokens=%d must be >= 1", config->max_tokens);
  SY_ARG_CHECK(
      config->wire == SY_MOE_WIRE_FP8 || config->wire == SY_MOE_WIRE_FP8_UE8M0 || config->wire == SY_MOE_WIRE_BF16, fn,
      "config->wire=%d is not a wire of the low-latency mode (SY_MOE_WIRE_FP8, _FP8_UE8M0, _BF16%s)", (int)config->wire,
      config->wire == SY_MOE_WIRE_FP8_GIVEN ? "; SY_MOE_WIRE_FP8_GIVEN is the high-throughput mode's: sy_moe_ht_create"
                                            : "");
  const int multiple = config->wire == SY_MOE_WIRE_BF16 ? 8 : SY_MOE_FP8_GROUP;
  SY_ARG_CHECK(config->hidden >= 1 && config->hidden % multiple == 0, fn,
               "config->hidden=%d is not a positive multiple of %d (%s)", config->hidden, multiple,
               config->wire == SY_MOE_WIRE_BF16 ? "the BF16 wire's 16-byte rows" : "the FP8 wires' scale group");
  SY_ARG_CHECK(config->top_k >= 1 && config->top_k <= 32, fn, "config->top_k=%d outside [1, 32]", config->top_k);
  SY_ARG_CHECK(config->num_experts >= 1 && config->num_experts % W == 0, fn,
               "config->num_experts=%d is not a positive multiple of the world size %d", config->num_experts, W);
  SY_ARG_CHECK(config->top_k <= config->num_experts, fn,
               "config->top_k=%d exceeds config->num_experts=%d: a token names top_k distinct experts, and only "
               "num_experts exist",
               config->top_k, config->num_experts);
  SY_ARG_CHECK((config->flags & ~SY_MOE_PER_EXPERT) == 0, fn,
               "config->flags=0x%x: only SY_MOE_PER_EXPERT (0x%x) is defined", config->flags, SY_MOE_PER_EXPERT);
  /* Slots are int32 (src pairs, counts); the caller's [L][S][hidden] buffers and the workspace need a size. */
  const int64_t slots = (int64_t)W * config->max_tokens;
  SY_ARG_CHECK(slots <= INT32_MAX, fn, "config->max_tokens=%d x world size %d = %lld slots per expert exceeds 2^31 - 1",
               config->max_tokens, W, (long long)slots);
  size_t recv_bytes;
  sy_moe_layout_t layout;
  SY_ARG_CHECK(mul_size((size_t)(config->num_experts / W) * (size_t)slots, (size_t)config->hidden * 2, &recv_bytes) &&
                   sy__moe_layout(config, W, &layout) == SY_SUCCESS,
               fn, "config: max_tokens=%d, hidden=%d, top_k=%d, num_experts=%d on %d ranks: the sizes overflow",
               config->max_tokens, config->hidden, config->top_k, config->num_experts, W);
  return SY_SUCCESS;
}

sy_status_t sy_moe_workspace_size(sy_comm_t comm, const sy_moe_config_t *config_in, size_t *bytes) {
  static const char *fn = "sy_moe_workspace_size";
  SY_COMM_QUERY_GUARD(comm, fn); /* a function of the configuration: answers after an error too */
  SY_ARG_CHECK(bytes != NULL, fn, "bytes is NULL");
  sy_moe_config_t config;
  SY_CHECK(read_config(comm, config_in, &config, fn));
  sy_moe_layout_t layout;
  SY_CHECK(sy__moe_layout(&config, comm->world_size, &layout));
  *bytes = layout.total;
  return SY_SUCCESS;
}

/* Collective: every rank must configure alike. Compared over the create's first exchange (sy__create_exchange,
 * which also carries each rank's verdict on its own arguments, `local`) before any backend reserves anything, so
 * that a rank whose configuration differs, or that refused its arguments, fails the create everywhere, with nothing
 * created and the communicator still usable. */
static sy_status_t same_config_everywhere(sy_comm_t comm, const sy_moe_config_t *c, sy_status_t local, const char *fn) {
  const int W = comm->world_size;
  sy_moe_config_t *all = calloc((size_t)W, sizeof *all);
  if (!all) return SY_ERR_NO_MEMORY; /* the peers' exchange then fails or times out: a local failure */
  sy_status_t s = sy__create_exchange(comm, c, sizeof *c, local, all, fn);
  for (int r = 0; s == SY_SUCCESS && r < W; r++) {
    const sy_moe_config_t *o = &all[r];
    if (o->max_tokens != c->max_tokens || o->hidden != c->hidden || o->top_k != c->top_k ||
        o->num_experts != c->num_experts || o->wire != c->wire || o->flags != c->flags) {
      SY_WARN(
          "%s: rank %d configures max_tokens=%d hidden=%d top_k=%d num_experts=%d wire=%d flags=0x%x, "
          "this rank %d / %d / %d / %d / %d / 0x%x; nothing created",
          fn, r, o->max_tokens, o->hidden, o->top_k, o->num_experts, (int)o->wire, o->flags, c->max_tokens, c->hidden,
          c->top_k, c->num_experts, (int)c->wire, c->flags);
      s = SY_ERR_MISMATCH;
    }
  }
  free(all);
  return s;
}

sy_status_t sy_moe_create(sy_comm_t comm, const sy_moe_config_t *config_in, sy_moe_t *moe_out) {
  static const char *fn = "sy_moe_create";
  if (moe_out)
    *moe_out = NULL; /* first: a refusal of any argument, the communicator's included, leaves no stale handle */
  SY_COMM_GUARD(comm, fn);
  if (!comm->ops->moe_create) { /* alike on every rank */
    SY_WARN("%s: the %s backend has no MoE dispatch/combine yet (its kernels are not written)", fn, comm->ops->name);
    return SY_ERR_UNSUPPORTED;
  }
  /* this rank's own checks; a refusal still joins the ranks' exchange (same_config_everywhere) */
  sy_moe_config_t config;
  memset(&config, 0, sizeof config);
  sy_status_t local = moe_out ? SY_SUCCESS : (sy__arg_error(fn, "moe is NULL"), SY_ERR_INVALID_ARG);
  if (local == SY_SUCCESS) local = read_config(comm, config_in, &config, fn);
  sy_moe_layout_t layout;
  if (local == SY_SUCCESS && sy__moe_layout(&config, comm->world_size, &layout) == SY_SUCCESS)
    local = sy__heap_verdict(comm, layout.total, fn); /* a heap too small on any rank: every rank fails, together */
  SY_CHECK(same_config_everywhere(comm, &config, local, fn));
  struct sy_moe *moe = calloc(1, sizeof *moe);
  if (!moe) return SY_ERR_NO_MEMORY; /* the peers fail in the backend's collective, as for any local failure */
  moe->comm = comm;
  moe->config = config;
  moe->local_experts = config.num_experts / comm->world_size;
  moe->slots = comm->world_size * config.max_tokens;
  moe->next_half = 0;
  /* The backends decide create together: every rank creates, or none does. */
  sy_status_t st = comm->ops->moe_create(comm, moe);
  if (st != SY_SUCCESS) {
    free(moe);
    return st;
  }
  sy__comm_object_made(comm);
  *moe_out = moe;
  return SY_SUCCESS;
}

/* Collective. Accepted after an error (then the workspace stays with the communicator, which frees it). */
sy_status_t sy_moe_destroy(sy_moe_t moe) {
  if (!moe) return SY_SUCCESS;
  sy_comm_t comm = moe->comm;
  sy__api_enter(comm->rank);
  sy__comm_health(comm); /* after sy_comm_destroy its recorded error: nothing polled */
  /* the backend's own memory, also after sy_comm_destroy (the symmetric parts went with the communicator) */
  if (comm->ops->moe_destroy) comm->ops->moe_destroy(comm, moe);
  free(moe);
  sy__comm_object_gone(comm);
  return SY_SUCCESS;
}

/* The bytes of the caller's buffers this object's calls write or read: sy_moe_recv_t's five and the combine's
 * expert_out. read_config made sure L x S x hidden x 2 fits a size_t, and every other size is smaller. */
static void recv_sizes(const struct sy_moe *moe, sy_moe_recv_sizes_t *s) {
  const size_t L = (size_t)moe->local_experts, S = (size_t)moe->slots, H = (size_t)moe->config.hidden;
  const int fp8 = moe->config.wire != SY_MOE_WIRE_BF16;
  memset(s, 0, sizeof *s);
  s->size = sizeof *s;
  s->local_experts = moe->local_experts;
  s->slots = moe->slots;
  s->tokens_bytes = L * S * H * sy__moe_wire_elem(moe->config.wire);
  s->scales_bytes = fp8 ? L * (H / SY_MOE_FP8_GROUP) * S * sizeof(float) : 0;
  s->src_bytes = L * S * 2 * sizeof(int32_t);
  s->expert_counts_bytes = L * sizeof(int32_t);
  s->rank_counts_bytes = L * (size_t)moe->comm->world_size * sizeof(int32_t);
  s->expert_out_bytes = L * S * H * 2;
}

/* Reads what the object was created with: answers after an error too. */
sy_status_t sy_moe_recv_sizes(sy_moe_t moe, sy_moe_recv_sizes_t *sizes) {
  static const char *fn = "sy_moe_recv_sizes";
  SY_ARG_CHECK(moe != NULL, fn, "moe is NULL");
  SY_COMM_QUERY_GUARD(moe->comm, fn);
  SY_ARG_CHECK(sizes != NULL, fn, "sizes is NULL");
  SY_ARG_CHECK(sizes->size >= sizeof(sy_moe_recv_sizes_t), fn,
               "sizes->size=%zu is too small (initialise it with SY_MOE_RECV_SIZES_INIT)", sizes->size);
  const size_t size = sizes->size; /* a newer caller's larger struct: its known prefix is filled */
  recv_sizes(moe, sizes);
  sizes->size = size;
  return SY_SUCCESS;
}

/* ---- the halves ------------------------------------------------------------------------------------------- */

/* The routing weights are read by one call per round, by mode: the default (rank-reduced) mode's dispatch sends
 * them with each token, because the experts' ranks weight their outputs before adding a token's partials there;
 * SY_MOE_PER_EXPERT's combine applies them at the owner, because the experts' outputs come back unweighted. The
 * other call accepts any weights (NULL included) and the backend gets NULL there, so it never reads them. */
static int weights_at_dispatch(const struct sy_moe *moe) { return !(moe->config.flags & SY_MOE_PER_EXPERT); }

enum { HALF_DISPATCH_SEND = 0, HALF_DISPATCH_RECV = 1, HALF_COMBINE_SEND = 2, HALF_COMBINE_RECV = 3 };

static const char *half_name(int half) {
  static const char *names[4] = {"sy_moe_dispatch_send (or sy_moe_dispatch)", "sy_moe_dispatch_recv",
                                 "sy_moe_combine_send (or sy_moe_combine)", "sy_moe_combine_recv"};
  return half >= 0 && half < 4 ? names[half] : "?";
}

/* The object, the communicator's health, the stream, and the halves' order. */
static sy_status_t check_call(sy_moe_t moe, int half, cudaStream_t stream, const char *fn) {
  SY_ARG_CHECK(moe != NULL, fn, "moe is NULL");
  SY_COMM_GUARD(moe->comm, fn);
  SY_CHECK(sy__check_stream(moe->comm, stream, fn));
  SY_ARG_CHECK(moe->next_half == half, fn,
               "called out of order: this object's next call is %s (each rank calls dispatch_send, dispatch_recv, "
               "combine_send, combine_recv, dispatch_send, ...)",
               half_name(moe->next_half));
  return SY_SUCCESS;
}

static sy_status_t check_index_type(sy_index_type_t id_type, const char *fn) {
  SY_ARG_CHECK(id_type == SY_INDEX_INT32 || id_type == SY_INDEX_INT64, fn,
               "id_type=%d is not a sy_index_type_t (SY_INDEX_INT32, SY_INDEX_INT64)", (int)id_type);
  return SY_SUCCESS;
}

static sy_status_t check_num_tokens(const sy_moe_t moe, int num_tokens, const char *fn) {
  SY_ARG_CHECK(num_tokens >= 0 && num_tokens <= moe->config.max_tokens, fn,
               "num_tokens=%d outside [0, config.max_tokens=%d]", num_tokens, moe->config.max_tokens);
  return SY_SUCCESS;
}

static sy_status_t check_dispatch_send(sy_moe_t moe, const sy_moe_dispatch_args_t *a, const char *fn) {
  SY_CHECK(check_num_tokens(moe, a->num_tokens, fn));
  SY_CHECK(check_index_type(a->id_type, fn));
  if (a->num_tokens == 0) return SY_SUCCESS;
  SY_ARG_CHECK(a->tokens != NULL, fn, "tokens is NULL while num_tokens=%d", a->num_tokens);
  SY_ARG_CHECK(a->expert_ids != NULL, fn, "expert_ids is NULL while num_tokens=%d", a->num_tokens);
  SY_ARG_CHECK(a->weights != NULL || !weights_at_dispatch(moe), fn,
               "weights is NULL while num_tokens=%d: the default (rank-reduced) mode reads the routing weights at "
               "dispatch, which sends them with each token for the experts' ranks to weight their outputs before "
               "summing them; its combine does not read them (SY_MOE_PER_EXPERT reads them at combine instead)",
               a->num_tokens);
  /* The host backend's ids are host memory: checked here, naming this call (the backend checks again before
   * writing anything); the cuda kernel checks them on the device and reports through the async error. */
  if (moe->comm->backend == SY_BACKEND_HOST)
    SY_CHECK(sy__moe_check_ids(fn, moe->comm->rank, a->expert_ids, a->id_type, a->num_tokens, moe->config.top_k,
                               moe->config.num_experts));
  return SY_SUCCESS;
}

static int overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return a && b && a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

static sy_status_t check_recv(sy_moe_t moe, const sy_moe_recv_t *recv, const char *fn) {
  SY_ARG_CHECK(recv != NULL, fn, "recv is NULL");
  const int fp8 = moe->config.wire != SY_MOE_WIRE_BF16;
  SY_ARG_CHECK(recv->tokens != NULL, fn, "recv->tokens is NULL");
  SY_ARG_CHECK(!fp8 || recv->scales != NULL, fn, "recv->scales is NULL with an FP8 wire");
  SY_ARG_CHECK(recv->src != NULL, fn, "recv->src is NULL");
  SY_ARG_CHECK(recv->expert_counts != NULL, fn, "recv->expert_counts is NULL");
  SY_ARG_CHECK(recv->rank_counts != NULL, fn, "recv->rank_counts is NULL");
  /* The five outputs are written by one call: none may overlap another. */
  sy_moe_recv_sizes_t z;
  recv_sizes(moe, &z);
  const char *names[5] = {"recv->tokens", "recv->scales", "recv->src", "recv->expert_counts", "recv->rank_counts"};
  const void *ptrs[5] = {recv->tokens, fp8 ? recv->scales : NULL, recv->src, recv->expert_counts, recv->rank_counts};
  const size_t bytes[5] = {z.tokens_bytes, z.scales_bytes, z.src_bytes, z.expert_counts_bytes, z.rank_counts_bytes};
  for (int i = 0; i < 5; i++)
    for (int j = i + 1; j < 5; j++)
      SY_ARG_CHECK(!overlap(ptrs[i], bytes[i], ptrs[j], bytes[j]), fn,
                   "%s=%p (%zu bytes) and %s=%p (%zu bytes) overlap", names[i], ptrs[i], bytes[i], names[j], ptrs[j],
                   bytes[j]);
  return SY_SUCCESS;
}

static sy_status_t check_combine_recv(sy_moe_t moe, const sy_moe_dispatch_args_t *a, const void *out, const char *fn) {
  SY_CHECK(check_num_tokens(moe, a->num_tokens, fn));
  SY_CHECK(check_index_type(a->id_type, fn));
  /* The host backend knows this rank's dispatch here (num_tokens 0 included: a combine of 0 tokens after a dispatch
   * of some is refused before anything is sent); the cuda backend's kernel checks on the device. */
  if (a->num_tokens == 0)
    return moe->comm->ops->moe_check_combine ? moe->comm->ops->moe_check_combine(moe->comm, moe, a, fn) : SY_SUCCESS;
  SY_ARG_CHECK(a->expert_ids != NULL, fn, "expert_ids is NULL while num_tokens=%d", a->num_tokens);
  SY_ARG_CHECK(a->weights != NULL || weights_at_dispatch(moe), fn,
               "weights is NULL while num_tokens=%d: SY_MOE_PER_EXPERT reads the routing weights at combine, where "
               "this rank weights each expert's output as it sums them; its dispatch does not read them (the default "
               "mode reads them at dispatch instead)",
               a->num_tokens);
  SY_ARG_CHECK(out != NULL, fn, "out is NULL while num_tokens=%d", a->num_tokens);
  const size_t entries = (size_t)a->num_tokens * (size_t)moe->config.top_k;
  const size_t out_bytes = (size_t)a->num_tokens * (size_t)moe->config.hidden * 2;
  SY_ARG_CHECK(!overlap(out, out_bytes, a->expert_ids, entries * (a->id_type == SY_INDEX_INT64 ? 8 : 4)), fn,
               "out=%p and expert_ids=%p overlap", out, a->expert_ids);
  SY_ARG_CHECK(!overlap(out, out_bytes, a->weights, entries * 4), fn, "out=%p and weights=%p overlap", out,
               (const void *)a->weights); /* NULL here unless this call reads them */
  if (moe->comm->ops->moe_check_combine) SY_CHECK(moe->comm->ops->moe_check_combine(moe->comm, moe, a, fn));
  return SY_SUCCESS;
}

/* Runs one half in the backend; the object moves to its next half only when the half was done. */
static sy_status_t run_half(sy_moe_t moe, int half, sy_status_t st, const char *fn) {
  st = sy__comm_record(moe->comm, st, fn);
  if (st == SY_SUCCESS) moe->next_half = (half + 1) % 4;
  return st;
}

sy_status_t sy_moe_dispatch_send(sy_moe_t moe, const void *tokens, int num_tokens, const void *expert_ids,
                                 sy_index_type_t id_type, const float *weights, cudaStream_t stream) {
  static const char *fn = "sy_moe_dispatch_send";
  SY_CHECK(check_call(moe, HALF_DISPATCH_SEND, stream, fn));
  const sy_moe_dispatch_args_t args = {tokens, num_tokens, expert_ids, id_type,
                                       weights_at_dispatch(moe) ? weights : NULL};
  SY_CHECK(check_dispatch_send(moe, &args, fn));
  sy_comm_t comm = moe->comm;
  return run_half(moe, HALF_DISPATCH_SEND, comm->ops->moe_dispatch_send(comm, moe, &args, stream), fn);
}

sy_status_t sy_moe_dispatch_recv(sy_moe_t moe, const sy_moe_recv_t *recv, cudaStream_t stream) {
  static const char *fn = "sy_moe_dispatch_recv";
  SY_CHECK(check_call(moe, HALF_DISPATCH_RECV, stream, fn));
  SY_CHECK(check_recv(moe, recv, fn));
  sy_comm_t comm = moe->comm;
  return run_half(moe, HALF_DISPATCH_RECV, comm->ops->moe_dispatch_recv(comm, moe, recv, stream), fn);
}

sy_status_t sy_moe_dispatch(sy_moe_t moe, const void *tokens, int num_tokens, const void *expert_ids,
                            sy_index_type_t id_type, const float *weights, const sy_moe_recv_t *recv,
                            cudaStream_t stream) {
  static const char *fn = "sy_moe_dispatch";
  SY_CHECK(check_call(moe, HALF_DISPATCH_SEND, stream, fn));
  const sy_moe_dispatch_args_t args = {tokens, num_tokens, expert_ids, id_type,
                                       weights_at_dispatch(moe) ? weights : NULL};
  SY_CHECK(check_dispatch_send(moe, &args, fn));
  SY_CHECK(check_recv(moe, recv, fn));
  sy_comm_t comm = moe->comm;
  if (comm->ops->moe_dispatch) { /* the backend's one-operation form */
    SY_CHECK(run_half(moe, HALF_DISPATCH_SEND, comm->ops->moe_dispatch(comm, moe, &args, recv, stream), fn));
    return run_half(moe, HALF_DISPATCH_RECV, SY_SUCCESS, fn);
  }
  SY_CHECK(run_half(moe, HALF_DISPATCH_SEND, comm->ops->moe_dispatch_send(comm, moe, &args, stream), fn));
  return run_half(moe, HALF_DISPATCH_RECV, comm->ops->moe_dispatch_recv(comm, moe, recv, stream), fn);
}

sy_status_t sy_moe_combine_send(sy_moe_t moe, const void *expert_out, cudaStream_t stream) {
  static const char *fn = "sy_moe_combine_send";
  SY_CHECK(check_call(moe, HALF_COMBINE_SEND, stream, fn));
  SY_ARG_CHECK(expert_out != NULL, fn, "expert_out is NULL");
  sy_comm_t comm = moe->comm;
  return run_half(moe, HALF_COMBINE_SEND, comm->ops->moe_combine_send(comm, moe, expert_out, stream), fn);
}

sy_status_t sy_moe_combine_recv(sy_moe_t moe, const void *expert_ids, sy_index_type_t id_type, const float *weights,
                                int num_tokens, void *out, cudaStream_t stream) {
  static const char *fn = "sy_moe_combine_recv";
  SY_CHECK(check_call(moe, HALF_COMBINE_RECV, stream, fn));
  const sy_moe_dispatch_args_t args = {NULL, num_tokens, expert_ids, id_type,
                                       weights_at_dispatch(moe) ? NULL : weights};
  SY_CHECK(check_combine_recv(moe, &args, out, fn));
  sy_comm_t comm = moe->comm;
  return run_half(moe, HALF_COMBINE_RECV, comm->ops->moe_combine_recv(comm, moe, &args, out, stream), fn);
}

sy_status_t sy_moe_combine(sy_moe_t moe, const void *expert_out, const void *expert_ids, sy_index_type_t id_type,
                           const float *weights, int num_tokens, void *out, cudaStream_t stream) {
  static const char *fn = "sy_moe_combine";
  SY_CHECK(check_call(moe, HALF_COMBINE_SEND, stream, fn));
  SY_ARG_CHECK(expert_out != NULL, fn, "expert_out is NULL");
  const sy_moe_dispatch_args_t args = {NULL, num_tokens, expert_ids, id_type,
                                       weights_at_dispatch(moe) ? NULL : weights};
  SY_CHECK(check_combine_recv(moe, &args, out, fn));
  sy_comm_t comm = moe->comm;
  if (comm->ops->moe_combine) {
    SY_CHECK(run_half(moe, HALF_COMBINE_SEND, comm->ops->moe_combine(comm, moe, expert_out, &args, out, stream), fn));
    return run_half(moe, HALF_COMBINE_RECV, SY_SUCCESS, fn);
  }
  SY_CHECK(run_half(moe, HALF_COMBINE_SEND, comm->ops->moe_combine_send(comm, moe, expert_out, stream), fn));
  return run_half(moe, HALF_COMBINE_RECV, comm->ops->moe_combine_recv(comm, moe, &args, out, stream), fn);
}
