/*
 * moe_ht.c — the public entry points of the MoE high-throughput mode (sy_moe_ht_*): the object (its
 * configuration, its sizes) and the four calls of a step (layout, dispatch, combine, the combine's backward).
 * Each checks everything it can see at the boundary, once, naming the argument, and hands the backend a call
 * pack it can trust (sy_moe_ht_call_t); a rejected call changes nothing. What only the handle or the peers know
 * (invalid ids, a handle of another object or layout, rows that do not fit) the backends check: the host backend
 * on every rank before anything is written, the cuda backend on the device. Failures a backend reports for the
 * collective as a whole (a timed-out wait, ranks that disagree) are sticky, as in comm.c.
 */
#include "exec/graph.h"
#include "internal.h"
#include "mem/pool.h"
#include "ref/moe_ht_layout.h"
#include "ref/moe_ht_ref.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SY_MOE_HT_MAX_ARENA ((size_t)1 << 48) /* config.recv_arena_bytes' bound */

static int mul_size(size_t a, size_t b, size_t *out) {
  if (a && b > SIZE_MAX / a) return 0;
  *out = a * b;
  return 1;
}

static uint32_t next_object_id; /* process-wide; an object's id is its creation number, from 1 */

/* ---- the object --------------------------------------------------------------------------------------------- */

/* Copies the caller's config (a newer caller's larger struct: its known prefix), applies the defaults and checks
 * it, naming the field. */
static sy_status_t read_config(sy_comm_t comm, const sy_moe_ht_config_t *in, sy_moe_ht_config_t *config,
                               const char *fn) {
  SY_ARG_CHECK(in != NULL, fn, "config is NULL (it has no defaults: set max_tokens, hidden, top_k, num_experts)");
  /* a caller built before recv_arena_bytes (its struct ends there) gets no arena */
  const size_t oldest = offsetof(sy_moe_ht_config_t, recv_arena_bytes);
  SY_ARG_CHECK(in->size >= oldest, fn,
               "config->size=%zu is too small (initialise the config with SY_MOE_HT_CONFIG_INIT)", in->size);
  sy_moe_ht_config_t c;
  memset(&c, 0, sizeof c);
  memcpy(&c, in, in->size < sizeof c ? in->size : sizeof c);
  c.size = sizeof c;
  const int W = comm->world_size;
  SY_ARG_CHECK(c.max_tokens >= 1, fn, "config->max_tokens=%d must be >= 1", c.max_tokens);
  SY_ARG_CHECK(c.wire == SY_MOE_WIRE_FP8 || c.wire == SY_MOE_WIRE_FP8_UE8M0 || c.wire == SY_MOE_WIRE_BF16 ||
                   c.wire == SY_MOE_WIRE_FP8_GIVEN,
               fn, "config->wire=%d is not a sy_moe_wire_t (SY_MOE_WIRE_FP8, _FP8_UE8M0, _BF16, _FP8_GIVEN)",
               (int)c.wire);
  const int multiple = c.wire == SY_MOE_WIRE_BF16 ? 8 : SY_MOE_FP8_GROUP;
  SY_ARG_CHECK(c.hidden >= 1 && c.hidden % multiple == 0, fn, "config->hidden=%d is not a positive multiple of %d (%s)",
               c.hidden, multiple, c.wire == SY_MOE_WIRE_BF16 ? "the BF16 wire's 16-byte rows" : "the FP8 scale group");
  SY_ARG_CHECK(c.hidden <= SY_MOE_HT_MAX_HIDDEN, fn, "config->hidden=%d exceeds %d", c.hidden, SY_MOE_HT_MAX_HIDDEN);
  SY_ARG_CHECK(c.top_k >= 1 && c.top_k <= 32, fn, "config->top_k=%d outside [1, 32]", c.top_k);
  SY_ARG_CHECK(c.num_experts >= 1 && c.num_experts % W == 0, fn,
               "config->num_experts=%d is not a positive multiple of the world size %d", c.num_experts, W);
  SY_ARG_CHECK(c.top_k <= c.num_experts, fn,
               "config->top_k=%d exceeds config->num_experts=%d: a token names top_k distinct experts", c.top_k,
               c.num_experts);
  SY_ARG_CHECK(c.expert_alignment >= 0 && c.expert_alignment <= SY_MOE_HT_MAX_ALIGNMENT, fn,
               "config->expert_alignment=%d outside [0, %d] (0: 1)", c.expert_alignment, SY_MOE_HT_MAX_ALIGNMENT);
  SY_ARG_CHECK(c.num_sms >= 0 && c.num_sms <= 1024, fn, "config->num_sms=%d outside [0, 1024] (0: %d)", c.num_sms,
               SY_MOE_HT_DEFAULT_SMS);
  SY_ARG_CHECK((c.flags & ~SY_MOE_HT_SCALES_ROW_MAJOR) == 0, fn,
               "config->flags=0x%x: unknown bits 0x%x (defined: SY_MOE_HT_SCALES_ROW_MAJOR 0x%x)", c.flags,
               c.flags & ~SY_MOE_HT_SCALES_ROW_MAJOR, SY_MOE_HT_SCALES_ROW_MAJOR);
  SY_ARG_CHECK(c.recv_arena_bytes <= SY_MOE_HT_MAX_ARENA, fn,
               "config->recv_arena_bytes=%zu exceeds %llu (2^48: the workspace's offsets must not overflow)",
               c.recv_arena_bytes, (unsigned long long)SY_MOE_HT_MAX_ARENA);
  SY_ARG_CHECK(!(c.flags & SY_MOE_HT_SCALES_ROW_MAJOR) || sy__moe_ht_fp8(c.wire), fn,
               "config->flags=0x%x: SY_MOE_HT_SCALES_ROW_MAJOR with the BF16 wire, which has no scales", c.flags);
  c = sy__moe_ht_defaults(c);
  /* Rows are int32 (src pairs, offsets, the handle's rows); the row buffers and the handle need a size_t. */
  const int64_t max_rows = sy__moe_ht_max_rows(&c, W);
  SY_ARG_CHECK(max_rows <= INT32_MAX, fn,
               "config: max_tokens=%d x world size %d x min(top_k=%d, %d local experts) + padding to "
               "expert_alignment=%d = %lld rows exceeds 2^31 - 1",
               c.max_tokens, W, c.top_k, c.num_experts / W, c.expert_alignment, (long long)max_rows);
  size_t row_bytes, handle_rows;
  SY_ARG_CHECK(mul_size((size_t)max_rows, (size_t)c.hidden * 2, &row_bytes) &&
                   mul_size((size_t)W * (size_t)c.max_tokens, (size_t)c.top_k * 4, &handle_rows),
               fn, "config: max_tokens=%d, hidden=%d, top_k=%d, num_experts=%d on %d ranks: the sizes overflow",
               c.max_tokens, c.hidden, c.top_k, c.num_experts, W);
  *config = c;
  return SY_SUCCESS;
}

/* The symmetric memory an object reserves: the cuda backend's rings and counters (sy__moe_ht_ws_layout); the
 * host backend reserves none (its ranks read each other's buffers inside each call's exchange). `pull` as resolved
 * (pull_here before the create's exchange: the most it may take). */
static size_t workspace_bytes(sy_comm_t comm, const sy_moe_ht_config_t *c, int pull) {
  return comm->backend == SY_BACKEND_HOST
             ? 0
             : sy__moe_ht_ws_layout(c, comm->world_size, sy__moe_ht_roles(c, comm->world_size), pull).bytes;
}

/* The symmetric heap this rank has left: its size less its live allocations. */
static size_t heap_left(sy_comm_t comm) {
  size_t used = 0;
  for (int i = 0; i < comm->symm_count; i++) used += comm->symm[i].bytes;
  return used < comm->heap_bytes ? comm->heap_bytes - used : 0;
}

/* This rank's own answer to SY_HT_PULL (sy__moe_ht_pull), with its reachability and its heap; auto also keeps to
 * what the pull's shared memory holds on any Hopper GPU (3 stages of a row of at most 64 KiB and the rows' bases of
 * at most 4,096 experts in 227 KiB: cuda/moe_ht/launch.cu), where an explicit SY_HT_PULL=1 fails the create. */
static int pull_here(sy_comm_t comm, const sy_moe_ht_config_t *c) {
  const int W = comm->world_size;
  const size_t pulled = sy__moe_ht_ws_layout(c, W, sy__moe_ht_roles(c, W), 1).bytes;
  const size_t row = (size_t)c->hidden * sy__moe_ht_wire_elem(c->wire) +
                     (sy__moe_ht_fp8(c->wire) ? (size_t)(c->hidden / SY_MOE_FP8_GROUP) * sizeof(float) : 0);
  const int fits = pulled <= heap_left(comm) && row <= ((size_t)64 << 10) && c->num_experts <= 4096;
  return comm->backend == SY_BACKEND_CUDA && sy__moe_ht_pull(c, W, comm->peers_direct, fits);
}

int sy__moe_ht_pull(const sy_moe_ht_config_t *c, int world_size, int peers_direct, int fits) {
  (void)c;
  long long pull = -1;
  if (sy__env_int(SY_ENVID_SY_HT_PULL, &pull) != SY_SUCCESS) pull = 0; /* create fails on it (cuda backend) */
  if (world_size < 2) return 0;
  return pull < 0 ? peers_direct && fits : pull > 0;
}

int sy__moe_ht_roles(const sy_moe_ht_config_t *c, int world_size) {
  long long roles = -1;
  if (sy__env_int(SY_ENVID_SY_HT_ROLES, &roles) != SY_SUCCESS) roles = -1; /* create fails on it (cuda backend) */
  if (roles >= 0) return roles > 0;
  if (world_size < 2) return 0;
  return c->num_sms <= (world_size == 2 ? SY_HT_ROLES_AUTO_SMS_W2 : SY_HT_ROLES_AUTO_SMS);
}

sy_status_t sy_moe_ht_workspace_size(sy_comm_t comm, const sy_moe_ht_config_t *config_in, size_t *bytes) {
  static const char *fn = "sy_moe_ht_workspace_size";
  SY_COMM_QUERY_GUARD(comm, fn); /* a function of the configuration: answers after an error too */
  SY_ARG_CHECK(bytes != NULL, fn, "bytes is NULL");
  sy_moe_ht_config_t config;
  SY_CHECK(read_config(comm, config_in, &config, fn));
  *bytes = workspace_bytes(comm, &config, pull_here(comm, &config));
  return SY_SUCCESS;
}

/* Whether the backend has the entry a call needs; SY_ERR_UNSUPPORTED naming the backend otherwise. */
static sy_status_t backend_has(sy_comm_t comm, int entry, const char *fn) {
  if (entry) return SY_SUCCESS;
  SY_WARN("%s: the %s backend has no high-throughput MoE yet", fn, comm->ops->name);
  return SY_ERR_UNSUPPORTED;
}

/* Collective: every rank must configure alike, compared over the create's first exchange (sy__create_exchange,
 * which also carries each rank's verdict on its own arguments, `local`) before any backend reserves anything: a rank
 * whose configuration differs, or that refused its arguments, fails the create everywhere, nothing created, the
 * communicator still usable. The roles' placement (SY_HT_ROLES resolved) is compared too: it sets the workspace's
 * channels, which every rank must share; and whether the dispatch pulls (SY_HT_PULL), which adds the tokens' copy:
 * where every rank leaves it to the library (auto), it pulls if every rank can (*pull), else the ranks' answers must
 * agree. */
typedef struct config_offer {
  sy_moe_ht_config_t c;
  int roles;
  int pull, pull_auto, pull_sms;
} config_offer_t;

static sy_status_t same_config_everywhere(sy_comm_t comm, const sy_moe_ht_config_t *c, sy_status_t local, int *pull,
                                          int *pull_sms, const char *fn) {
  const int W = comm->world_size;
  config_offer_t mine, *all = calloc((size_t)W, sizeof *all);
  if (!all) return SY_ERR_NO_MEMORY; /* the peers' exchange then fails or times out: a local failure */
  memset(&mine, 0, sizeof mine);
  mine.c = *c;
  mine.roles = local == SY_SUCCESS ? sy__moe_ht_roles(c, W) : 0;
  long long env_pull = -1;
  mine.pull_auto = sy__env_int(SY_ENVID_SY_HT_PULL, &env_pull) == SY_SUCCESS && env_pull < 0;
  mine.pull = local == SY_SUCCESS ? pull_here(comm, c) : 0;
  long long sms = 64;
  if (sy__env_int(SY_ENVID_SY_HT_PULL_SMS, &sms) != SY_SUCCESS || sms < 0 || sms > INT32_MAX)
    sms = 64; /* (the cuda backend's create fails on it) */
  mine.pull_sms = (int)sms;
  sy_status_t s = sy__create_exchange(comm, &mine, sizeof mine, local, all, fn);
  int every_auto = 1, every_pull = 1;
  for (int r = 0; s == SY_SUCCESS && r < W; r++) every_auto &= all[r].pull_auto, every_pull &= all[r].pull;
  if (s == SY_SUCCESS && every_auto) { /* (a rank that cannot pull: every rank pushes) */
    for (int r = 0; r < W; r++) all[r].pull = every_pull;
    mine.pull = every_pull;
  }
  *pull = mine.pull && every_auto ? 2 : mine.pull; /* (2: auto's, by the call's budget and wire: comm.h) */
  *pull_sms = mine.pull_sms;
  for (int r = 0; s == SY_SUCCESS && r < W; r++) {
    const sy_moe_ht_config_t *o = &all[r].c;
    if (o->max_tokens != c->max_tokens || o->hidden != c->hidden || o->top_k != c->top_k ||
        o->num_experts != c->num_experts || o->wire != c->wire || o->expert_alignment != c->expert_alignment ||
        o->num_sms != c->num_sms || o->flags != c->flags || o->recv_arena_bytes != c->recv_arena_bytes) {
      SY_WARN(
          "%s: rank %d configures max_tokens=%d hidden=%d top_k=%d num_experts=%d wire=%d expert_alignment=%d "
          "num_sms=%d flags=0x%x recv_arena_bytes=%zu, this rank %d / %d / %d / %d / %d / %d / %d / 0x%x / %zu; "
          "nothing created",
          fn, r, o->max_tokens, o->hidden, o->top_k, o->num_experts, (int)o->wire, o->expert_alignment, o->num_sms,
          o->flags, o->recv_arena_bytes, c->max_tokens, c->hidden, c->top_k, c->num_experts, (int)c->wire,
          c->expert_alignment, c->num_sms, c->flags, c->recv_arena_bytes);
      s = SY_ERR_MISMATCH;
    } else if (all[r].roles != mine.roles) {
      SY_WARN(
          "%s: rank %d runs a channel's two roles %s, this rank %s (SY_HT_ROLES=%s here): set SY_HT_ROLES alike "
          "on every rank; nothing created",
          fn, r, all[r].roles ? "on one block's warps" : "on two blocks",
          mine.roles ? "on one block's warps" : "on two blocks",
          getenv("SY_HT_ROLES") ? getenv("SY_HT_ROLES") : "(unset)");
      s = SY_ERR_MISMATCH;
    } else if (all[r].pull != mine.pull) {
      SY_WARN(
          "%s: rank %d's dispatch %s, this rank's %s (SY_HT_PULL=%s here): set SY_HT_PULL alike on every rank; "
          "nothing created",
          fn, r, all[r].pull ? "pulls" : "pushes", mine.pull ? "pulls" : "pushes",
          getenv("SY_HT_PULL") ? getenv("SY_HT_PULL") : "(unset)");
      s = SY_ERR_MISMATCH;
    } else if (every_auto && every_pull && all[r].pull_sms != mine.pull_sms) { /* (read only by auto's pull) */
      SY_WARN("%s: rank %d's SY_HT_PULL_SMS is %d, this rank's %d: set it alike on every rank; nothing created", fn, r,
              all[r].pull_sms, mine.pull_sms);
      s = SY_ERR_MISMATCH;
    }
  }
  free(all);
  return s;
}

static uint64_t arena_deadline_ns(const struct sy_moe_ht *moe);

sy_status_t sy_moe_ht_create(sy_comm_t comm, const sy_moe_ht_config_t *config_in, sy_moe_ht_t *moe_out) {
  static const char *fn = "sy_moe_ht_create";
  if (moe_out)
    *moe_out = NULL; /* first: a refusal of any argument, the communicator's included, leaves no stale handle */
  SY_COMM_GUARD(comm, fn);
  SY_CHECK(backend_has(comm, comm->ops->moe_ht_create != NULL, fn)); /* alike on every rank */
  /* this rank's own checks; a refusal still joins the ranks' exchange (same_config_everywhere) */
  sy_moe_ht_config_t config;
  memset(&config, 0, sizeof config);
  sy_status_t local = moe_out ? SY_SUCCESS : (sy__arg_error(fn, "moe is NULL"), SY_ERR_INVALID_ARG);
  if (local == SY_SUCCESS) local = read_config(comm, config_in, &config, fn);
  if (local == SY_SUCCESS) /* a heap too small on any rank: every rank fails, together */
    local = sy__heap_verdict(comm, workspace_bytes(comm, &config, pull_here(comm, &config)), fn);
  int pull = 0, pull_sms = 64;
  SY_CHECK(same_config_everywhere(comm, &config, local, &pull, &pull_sms, fn));
  struct sy_moe_ht *moe = calloc(1, sizeof *moe);
  if (!moe) return SY_ERR_NO_MEMORY; /* the peers fail in the backend's collective, as for any local failure */
  moe->comm = comm;
  moe->config = config;
  moe->id = __atomic_add_fetch(&next_object_id, 1, __ATOMIC_RELAXED);
  moe->serial = comm->moe_ht_created + 1; /* the creates' verdicts are joint: every rank counts alike */
  moe->local_experts = config.num_experts / comm->world_size;
  moe->call_sms = config.num_sms;
  moe->max_rows = (int)sy__moe_ht_max_rows(&config, comm->world_size);
  moe->pull = pull;
  moe->pull_sms = pull_sms;
  sy__arena_init(&moe->book, config.recv_arena_bytes);
  sy_status_t st = comm->ops->moe_ht_create(comm, moe); /* every rank creates, or none does */
  if (st != SY_SUCCESS) {
    if (moe->arena_own) free(moe->arena);
    sy__arena_fini(&moe->book);
    free(moe);
    return sy__comm_record(comm, st, fn);
  }
  comm->moe_ht_created = moe->serial;
  sy__comm_object_made(comm);
  *moe_out = moe;
  return SY_SUCCESS;
}

/* Collective. Accepted after an error. */
sy_status_t sy_moe_ht_destroy(sy_moe_ht_t moe) {
  if (!moe) return SY_SUCCESS;
  sy_comm_t comm = moe->comm;
  sy__api_enter(comm->rank);
  const int healthy = !comm->destroyed && sy__comm_health(comm) == SY_SUCCESS;
  /* the frees' host functions still to run (bounded; not after an error, when a failed device may never run
   * them): their streams' work on the arena ends before them */
  const uint64_t deadline = arena_deadline_ns(moe);
  sy_arena_t *a = &moe->book;
  sy__arena_lock(a);
  while (healthy && a->pending > 0 && sy__arena_wait(a, deadline)) {
  }
  sy__arena_unlock(a);
  /* the backend's own memory, also after sy_comm_destroy (the symmetric parts went with the communicator) */
  if (comm->ops->moe_ht_destroy) comm->ops->moe_ht_destroy(comm, moe); /* cuda: synchronises the device too */
  if (moe->arena_own) free(moe->arena);
  sy__arena_lock(a);
  const int pending = a->pending;
  sy__arena_unlock(a);
  if (pending > 0) { /* their host functions would find the object gone: it stays, the rest is freed */
    SY_WARN(
        "sy_moe_ht_destroy: %d receive-arena frees still wait for their streams (%s); the object's bookkeeping "
        "is left allocated for them",
        pending, healthy ? "the communicator's timeout passed" : "not waited for after an error");
    sy__comm_object_gone(comm);
    return healthy ? SY_ERR_TIMEOUT : SY_SUCCESS;
  }
  sy__arena_fini(a);
  free(moe);
  sy__comm_object_gone(comm);
  return SY_SUCCESS;
}

static void fill_sizes(const struct sy_moe_ht *moe, sy_moe_ht_sizes_t *s) {
  const sy_moe_ht_config_t *c = &moe->config;
  memset(s, 0, sizeof *s);
  s->size = sizeof *s;
  s->local_experts = moe->local_experts;
  s->max_rows = moe->max_rows;
  s->handle_bytes = sy__moe_ht_handle_layout(c, moe->comm->world_size).bytes;
  s->row_bytes = (size_t)c->hidden * sy__moe_ht_wire_elem(c->wire);
  s->scale_bytes = sy__moe_ht_fp8(c->wire) ? (size_t)(c->hidden / SY_MOE_FP8_GROUP) * sizeof(float) : 0;
  s->dispatch_pulled = moe->pull;
}

/* Reads what the object was created with: answers after an error too. */
sy_status_t sy_moe_ht_sizes(sy_moe_ht_t moe, sy_moe_ht_sizes_t *sizes) {
  static const char *fn = "sy_moe_ht_sizes";
  SY_ARG_CHECK(moe != NULL, fn, "moe is NULL");
  SY_COMM_QUERY_GUARD(moe->comm, fn);
  SY_ARG_CHECK(sizes != NULL, fn, "sizes is NULL");
  SY_ARG_CHECK(sizes->size >= offsetof(sy_moe_ht_sizes_t, dispatch_pulled), fn,
               "sizes->size=%zu is too small (initialise it with SY_MOE_HT_SIZES_INIT)", sizes->size);
  /* a newer caller's larger struct: its known prefix filled; an older one's (up to scale_bytes): what it holds */
  const size_t size = sizes->size;
  sy_moe_ht_sizes_t all;
  fill_sizes(moe, &all);
  memcpy(sizes, &all, size < sizeof all ? size : sizeof all);
  sizes->size = size;
  return SY_SUCCESS;
}

sy_status_t sy_moe_ht_set_num_sms(sy_moe_ht_t moe, int num_sms) {
  static const char *fn = "sy_moe_ht_set_num_sms";
  SY_ARG_CHECK(moe != NULL, fn, "moe is NULL");
  const int most = moe->config.num_sms > 2 ? moe->config.num_sms : 2; /* the calls hold 2 at least */
  SY_ARG_CHECK(num_sms == 0 || (num_sms >= 2 && num_sms <= most), fn,
               "num_sms=%d outside [2, %d] (config.num_sms=%d, and 2 at least; 0: config.num_sms)", num_sms, most,
               moe->config.num_sms);
  moe->call_sms = num_sms ? num_sms : moe->config.num_sms;
  return SY_SUCCESS;
}

/* ---- receive buffers from a pool ---------------------------------------------------------------------------- */

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* The receive buffers of `rows` rows as one allocation: the sections in order — offsets, counts, src, weights,
 * scales, tokens — each 256-byte aligned; at[i] from the allocation's start; returns the total (a multiple of 256).
 * With a base, `r` gets the section pointers from it (scales NULL on BF16, tokens NULL without rows) and rows
 * (recv_sections: and the stride); without, r is zeroed. */
static size_t sections_of(const sy_moe_ht_config_t *c, int L_, int rows, char *base, sy_moe_ht_recv_t *r) {
  const size_t L = (size_t)L_, R = (size_t)rows;
  const size_t scale_bytes = sy__moe_ht_fp8(c->wire) ? (size_t)(c->hidden / SY_MOE_FP8_GROUP) * sizeof(float) : 0;
  const size_t row_bytes = (size_t)c->hidden * sy__moe_ht_wire_elem(c->wire);
  const size_t bytes[6] = {(L + 1) * 4, L * 4, R * 8, R * 4, R * scale_bytes, R * row_bytes};
  size_t at[6], total = 0;
  for (int i = 0; i < 6; i++) at[i] = total, total += align256(bytes[i]);
  memset(r, 0, sizeof *r);
  if (!base) return total; /* the size only */
  r->expert_offsets = (int32_t *)(base + at[0]);
  r->expert_counts = (int32_t *)(base + at[1]);
  r->src = (int32_t *)(base + at[2]);
  r->weights = (float *)(base + at[3]);
  r->scales = scale_bytes ? (float *)(base + at[4]) : NULL;
  r->tokens = rows ? (void *)(base + at[5]) : NULL;
  r->rows = rows;
  return total;
}

static size_t recv_sections(const struct sy_moe_ht *moe, int rows, int expert_stride, char *base, sy_moe_ht_recv_t *r) {
  const size_t total = sections_of(&moe->config, moe->local_experts, rows, base, r);
  if (base) r->expert_stride = expert_stride;
  return total;
}

sy_status_t sy_moe_ht_recv_bytes(sy_comm_t comm, const sy_moe_ht_config_t *config_in, int rows, size_t *bytes) {
  static const char *fn = "sy_moe_ht_recv_bytes";
  SY_COMM_QUERY_GUARD(comm, fn);
  SY_ARG_CHECK(bytes != NULL, fn, "bytes is NULL");
  SY_ARG_CHECK(rows >= -1, fn, "rows=%d: want >= 0, or -1 (max_rows)", rows);
  sy_moe_ht_config_t c;
  SY_CHECK(read_config(comm, config_in, &c, fn));
  sy_moe_ht_recv_t r;
  *bytes = sections_of(&c, c.num_experts / comm->world_size,
                       rows >= 0 ? rows : (int)sy__moe_ht_max_rows(&c, comm->world_size), NULL, &r);
  return SY_SUCCESS;
}

/* ---- receive buffers from the object's arena (config.recv_arena_bytes) ---------------------------------------- */

/* The arena's bookkeeping is mem/arena.c's (first fit, frees in stream order); here: which frees are in stream
 * order (cuda backend, a stream that is neither NULL nor capturing), which streams' own frees their allocations may
 * take at once (not the legacy default stream, not cudaStreamPerThread, not a stream capturing a graph), and the
 * host functions. */

/* The communicator's timeout, clamped so that a deadline in ns cannot wrap. */
static uint64_t arena_deadline_ns(const struct sy_moe_ht *moe) {
  const uint64_t most = (UINT64_MAX / 4) / 1000000ull, ms = moe->comm->timeout_ms < most ? moe->comm->timeout_ms : most;
  return sy__arena_now_ns() + ms * 1000000ull;
}

static int arena_reuse_ok(const struct sy_moe_ht *moe, cudaStream_t stream) {
  return moe->comm->backend == SY_BACKEND_CUDA && stream != NULL && stream != cudaStreamLegacy &&
         stream != cudaStreamPerThread;
}

typedef struct arena_cb {
  struct sy_moe_ht *moe;
  uint64_t id;
} arena_cb_t;

/* Run by the stream when it reaches a free (CUDA's thread: a lock, no CUDA call). */
static void arena_back(void *arg) {
  arena_cb_t *cb = (arena_cb_t *)arg;
  sy_arena_t *a = &cb->moe->book;
  sy__arena_lock(a);
  sy__arena_reached(a, cb->id);
  sy__arena_unlock(a);
  free(cb);
}

int sy__moe_ht_in_arena(const struct sy_moe_ht *moe, const void *p, size_t bytes) {
  return moe->arena && p && (const char *)p >= moe->arena &&
         (size_t)((const char *)p - moe->arena) <= moe->config.recv_arena_bytes &&
         bytes <= moe->config.recv_arena_bytes - (size_t)((const char *)p - moe->arena);
}

sy_status_t sy_moe_ht_recv_alloc(sy_moe_ht_t moe, sy_pool_t pool, int rows, int expert_stride, sy_moe_ht_recv_t *recv,
                                 cudaStream_t stream) {
  static const char *fn = "sy_moe_ht_recv_alloc";
  if (recv) memset(recv, 0, sizeof *recv); /* first: a refusal of any argument leaves no stale buffers in recv */
  SY_ARG_CHECK(moe != NULL, fn, "moe is NULL");
  SY_COMM_GUARD(moe->comm, fn);
  SY_ARG_CHECK(pool != NULL || moe->arena != NULL, fn,
               "pool is NULL and the object has no receive arena (config.recv_arena_bytes=0)");
  SY_ARG_CHECK(pool == NULL || sy__pool_comm(pool) == moe->comm, fn, "pool belongs to another communicator than moe");
  SY_ARG_CHECK(recv != NULL, fn, "recv is NULL");
  SY_ARG_CHECK(rows >= 0, fn, "rows=%d is negative", rows);
  const int L = moe->local_experts;
  SY_ARG_CHECK(expert_stride >= 0, fn, "expert_stride=%d is negative (0: the contiguous layout)", expert_stride);
  SY_ARG_CHECK((int64_t)expert_stride * L <= rows, fn,
               "expert_stride=%d x %d local experts exceeds rows=%d (the masked layout's last expert would not fit)",
               expert_stride, L, rows);
  sy_moe_ht_recv_t r;
  const size_t total = recv_sections(moe, rows, expert_stride, NULL, &r);
  void *base = NULL;
  if (!pool) {
    size_t at = 0;
    uint64_t id = 0;
    const uint64_t deadline = arena_deadline_ns(moe);
    int reuse = arena_reuse_ok(moe, stream);
    if (reuse) { /* a capture's work runs when its graph is launched, on any stream: it takes only reached frees */
      int capturing = 0;
      SY_CHECK(sy__cuda_stream_capturing(stream, &capturing));
      reuse = !capturing;
    }
    sy_arena_t *a = &moe->book;
    sy__arena_lock(a);
    int took;
    /* nothing fits until frees on streams are reached: wait for their host functions (bounded) */
    while ((took = sy__arena_take(a, total, stream, reuse, &at, &id)) == 0 && sy__arena_wait(a, deadline)) {
    }
    size_t live = 0, on_streams = 0;
    int blocks = 0;
    sy__arena_usage(a, &live, &on_streams, &blocks);
    sy__arena_unlock(a);
    if (took == -1) {
      SY_WARN("%s: no host memory to list the receive arena's allocations", fn);
      return SY_ERR_NO_MEMORY;
    }
    if (took == 0) {
      SY_WARN(
          "%s: %d rows need %zu bytes of the receive arena; %zu bytes freed on streams did not come back within "
          "%llu ms (those streams have not reached their sy_moe_ht_recv_free)",
          fn, rows, total, on_streams, (unsigned long long)moe->comm->timeout_ms);
      return SY_ERR_TIMEOUT;
    }
    if (took == -2) {
      char more[96] = "";
      if (on_streams) snprintf(more, sizeof more, "; %zu more freed on streams not there yet", on_streams);
      SY_WARN(
          "%s: %d rows need %zu bytes of the receive arena, which has no such gap (%zu of %zu bytes in use by %d "
          "recvs%s)",
          fn, rows, total, live, moe->config.recv_arena_bytes, blocks, more);
      return SY_ERR_NO_MEMORY;
    }
    (void)recv_sections(moe, rows, expert_stride, moe->arena + at, recv);
    return SY_SUCCESS;
  }
  SY_CHECK(sy_pool_alloc(pool, total, &base, stream));
  (void)recv_sections(moe, rows, expert_stride, base, recv);
  return SY_SUCCESS;
}

/* The live block `id` given back: in the order of `stream` (cuda backend, a stream neither NULL nor capturing: a host
 * function tells the arena when the stream gets there), else at once. */
static sy_status_t arena_free(struct sy_moe_ht *moe, uint64_t id, cudaStream_t stream, const char *fn) {
  int ordered = moe->comm->backend == SY_BACKEND_CUDA && stream != NULL;
  if (ordered) {
    int capturing = 0;
    SY_CHECK(sy__cuda_stream_capturing(stream, &capturing));
    ordered = !capturing;
  }
  arena_cb_t *cb = ordered ? malloc(sizeof *cb) : NULL;
  if (ordered && !cb) {
    SY_WARN("%s: no host memory for the free's host function", fn);
    return SY_ERR_NO_MEMORY;
  }
  sy_arena_t *a = &moe->book;
  /* from the free's id to its host function in the stream, no other free: every stream then runs its frees' host
   * functions in id order, which the allocations' debts assume (mem/arena.h) */
  if (ordered) sy__arena_enqueue_lock(a);
  sy__arena_lock(a);
  int i = 0;
  while (i < a->n && !(a->blocks[i].id == id && !a->blocks[i].on_stream)) i++;
  const int found = i < a->n;
  uint64_t old = 0, fid = 0;
  if (found && ordered) fid = sy__arena_free_on(a, i, &old);
  else if (found) sy__arena_free_now(a, i);
  sy__arena_unlock(a);
  if (!found || (ordered && fid == 0)) {
    if (ordered) sy__arena_enqueue_unlock(a);
    free(cb);
    /* the caller found it live a moment ago: another thread freed the same recv meanwhile */
    SY_ARG_CHECK(found, fn, "recv was freed by another call meanwhile (free each recv once)");
    SY_WARN("%s: another free's host function was still being enqueued", fn); /* the enqueue lock forbids it */
    return SY_ERR_INTERNAL;
  }
  if (!ordered) return SY_SUCCESS;
  cb->moe = moe, cb->id = fid;
  const sy_status_t st = sy__cuda_host_func(stream, arena_back, cb, fn);
  sy__arena_lock(a);
  if (st == SY_SUCCESS) sy__arena_enqueued(a, fid, stream);
  else sy__arena_unfree(a, fid, old); /* nothing enqueued: still the caller's */
  sy__arena_unlock(a);
  sy__arena_enqueue_unlock(a);
  if (st != SY_SUCCESS) free(cb);
  return st;
}

sy_status_t sy_moe_ht_recv_free(sy_moe_ht_t moe, sy_pool_t pool, sy_moe_ht_recv_t *recv, cudaStream_t stream) {
  static const char *fn = "sy_moe_ht_recv_free";
  SY_ARG_CHECK(moe != NULL, fn, "moe is NULL");
  SY_ARG_CHECK(pool != NULL || moe->arena != NULL, fn,
               "pool is NULL and the object has no receive arena (config.recv_arena_bytes=0)");
  SY_ARG_CHECK(recv != NULL, fn, "recv is NULL");
  SY_ARG_CHECK(recv->expert_offsets != NULL, fn, "recv->expert_offsets is NULL (not filled by sy_moe_ht_recv_alloc)");
  const char *p = (const char *)recv->expert_offsets;
  const int in = !pool && moe->arena && p >= moe->arena && p < moe->arena + moe->config.recv_arena_bytes;
  if (!pool) sy__arena_lock(&moe->book);
  const int slot = in ? sy__arena_find(&moe->book, (size_t)(p - moe->arena)) : -1;
  const size_t live = pool        ? sy__pool_live_bytes(pool, recv->expert_offsets)
                      : slot >= 0 ? moe->book.blocks[slot].bytes
                                  : 0;
  const uint64_t id = slot >= 0 ? moe->book.blocks[slot].id : 0;
  if (!pool) sy__arena_unlock(&moe->book);
  SY_ARG_CHECK(live != 0, fn,
               "recv->expert_offsets=%p is not a live allocation of this %s (never given out, or freed already)",
               (void *)recv->expert_offsets, pool ? "pool" : "object's receive arena");
  /* every section where this object's allocation of recv->rows rows puts it, in an allocation of that size: a
   * recv the caller filled or changed is refused, nothing freed (its expert_offsets may be another allocation) */
  sy_moe_ht_recv_t want;
  const size_t total =
      recv->rows >= 0 ? recv_sections(moe, recv->rows, recv->expert_stride, (char *)recv->expert_offsets, &want) : 0;
  SY_ARG_CHECK(recv->rows >= 0 && live == total && recv->expert_counts == want.expert_counts && recv->src == want.src &&
                   recv->weights == want.weights && recv->scales == want.scales && recv->tokens == want.tokens,
               fn,
               "recv does not match what sy_moe_ht_recv_alloc gave out (rows=%d, the allocation at expert_offsets "
               "holds %zu bytes, a recv of that many rows %zu; or a section moved): not filled by it for this object, "
               "or changed since",
               recv->rows, live, total);
  if (pool) {
    SY_CHECK(sy_pool_free(pool, recv->expert_offsets, stream));
  } else {
    SY_CHECK(arena_free(moe, id, stream, fn));
  }
  memset(recv, 0, sizeof *recv);
  return SY_SUCCESS;
}

/* ---- the calls of a step ------------------------------------------------------------------------------------ */

/* The object, the communicator's health, the stream, the backend's entry, the handle and num_tokens. */
static sy_status_t check_call(sy_moe_ht_t moe, int entry, const void *handle, int num_tokens, cudaStream_t stream,
                              const char *fn) {
  SY_ARG_CHECK(moe != NULL, fn, "moe is NULL");
  SY_COMM_GUARD(moe->comm, fn);
  SY_CHECK(sy__check_stream(moe->comm, stream, fn));
  SY_CHECK(backend_has(moe->comm, entry, fn));
  SY_ARG_CHECK(handle != NULL, fn, "handle is NULL");
  SY_ARG_CHECK(num_tokens >= 0 && num_tokens <= moe->config.max_tokens, fn,
               "num_tokens=%d outside [0, config.max_tokens=%d]", num_tokens, moe->config.max_tokens);
  return SY_SUCCESS;
}

static int overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return a && b && a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

/* A buffer a call writes (or reads), for the overlap checks: what writes must not overlap anything else. */
typedef struct span {
  const char *name;
  const void *ptr;
  size_t bytes;
  int written;
} span_t;

static sy_status_t check_overlaps(const span_t *spans, int n, const char *fn) {
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      SY_ARG_CHECK(!(spans[i].written || spans[j].written) ||
                       !overlap(spans[i].ptr, spans[i].bytes, spans[j].ptr, spans[j].bytes),
                   fn, "%s=%p (%zu bytes) and %s=%p (%zu bytes) overlap", spans[i].name, spans[i].ptr, spans[i].bytes,
                   spans[j].name, spans[j].ptr, spans[j].bytes);
  return SY_SUCCESS;
}

/* recv's shape, and (the dispatch, which writes it) its buffers. Each combine reads the dispatch's recv. */
static sy_status_t check_recv(sy_moe_ht_t moe, const sy_moe_ht_recv_t *recv, int dispatch, const char *fn) {
  SY_ARG_CHECK(recv != NULL, fn, "recv is NULL");
  const int L = moe->local_experts, fp8 = sy__moe_ht_fp8(moe->config.wire);
  SY_ARG_CHECK(recv->rows >= 0, fn, "recv->rows=%d is negative", recv->rows);
  SY_ARG_CHECK(recv->expert_stride >= 0, fn, "recv->expert_stride=%d is negative (0: the contiguous layout)",
               recv->expert_stride);
  SY_ARG_CHECK((int64_t)recv->expert_stride * L <= recv->rows, fn,
               "recv->expert_stride=%d x %d local experts exceeds recv->rows=%d (the masked layout's last expert "
               "ends at row L x expert_stride)",
               recv->expert_stride, L, recv->rows);
  SY_ARG_CHECK(recv->src != NULL, fn, "recv->src is NULL");
  SY_ARG_CHECK(recv->expert_offsets != NULL, fn, "recv->expert_offsets is NULL");
  SY_ARG_CHECK(recv->expert_counts != NULL, fn, "recv->expert_counts is NULL");
  if (!dispatch) return SY_SUCCESS;
  SY_ARG_CHECK(recv->weights != NULL, fn, "recv->weights is NULL");
  SY_ARG_CHECK(recv->tokens != NULL || recv->rows == 0, fn, "recv->tokens is NULL while recv->rows=%d", recv->rows);
  /* the cuda backend's rows take 16-byte stores (and, pulled, bulk copies); both backends refuse alike */
  SY_ARG_CHECK(((uintptr_t)recv->tokens & 15) == 0, fn, "recv->tokens=%p is not 16-byte aligned", recv->tokens);
  SY_ARG_CHECK(!fp8 || recv->scales != NULL || recv->rows == 0, fn, "recv->scales is NULL with an FP8 wire");
  SY_ARG_CHECK(fp8 || recv->scales == NULL, fn, "recv->scales=%p with the BF16 wire, which has no scales (pass NULL)",
               (void *)recv->scales);
  return SY_SUCCESS;
}

/* Runs the backend's call; a failure of the collective is the communicator's. */
static sy_status_t run(sy_moe_ht_t moe, sy_status_t st, uint64_t *counter, const char *fn) {
  st = sy__comm_record(moe->comm, st, fn);
  if (st == SY_SUCCESS && counter) ++*counter;
  return st;
}

static sy_status_t check_index_type(sy_index_type_t id_type, const char *fn) {
  SY_ARG_CHECK(id_type == SY_INDEX_INT32 || id_type == SY_INDEX_INT64, fn,
               "id_type=%d is not a sy_index_type_t (SY_INDEX_INT32, SY_INDEX_INT64)", (int)id_type);
  return SY_SUCCESS;
}

sy_status_t sy_moe_ht_layout(sy_moe_ht_t moe, const void *expert_ids, sy_index_type_t id_type, int num_tokens,
                             void *handle, int32_t *host_counts, cudaStream_t stream) {
  static const char *fn = "sy_moe_ht_layout";
  SY_CHECK(check_call(moe, moe && moe->comm->ops->moe_ht_layout, handle, num_tokens, stream, fn));
  SY_CHECK(check_index_type(id_type, fn));
  SY_ARG_CHECK(expert_ids != NULL || num_tokens == 0, fn, "expert_ids is NULL while num_tokens=%d", num_tokens);
  const sy_moe_ht_config_t *c = &moe->config;
  const size_t id_bytes = (size_t)num_tokens * (size_t)c->top_k * (id_type == SY_INDEX_INT64 ? 8 : 4);
  const span_t spans[3] = {{"handle", handle, sy__moe_ht_handle_layout(c, moe->comm->world_size).bytes, 1},
                           {"host_counts", host_counts, (2 * (size_t)moe->local_experts + 1) * sizeof(int32_t), 1},
                           {"expert_ids", expert_ids, id_bytes, 0}};
  SY_CHECK(check_overlaps(spans, 3, fn));
  /* the fields a call does not set are 0 */
  const sy_moe_ht_call_t call = {
      .handle = handle,
      .num_tokens = num_tokens,
      .expert_ids = expert_ids,
      .id_type = id_type,
      .host_counts = host_counts,
  };
  sy_comm_t comm = moe->comm;
  return run(moe, comm->ops->moe_ht_layout(comm, moe, &call, stream), &moe->layouts, fn);
}

sy_status_t sy_moe_ht_dispatch(sy_moe_ht_t moe, const void *handle, int num_tokens, const void *tokens,
                               const float *token_scales, const float *weights, const sy_moe_ht_recv_t *recv,
                               cudaStream_t stream) {
  static const char *fn = "sy_moe_ht_dispatch";
  SY_CHECK(check_call(moe, moe && moe->comm->ops->moe_ht_dispatch, handle, num_tokens, stream, fn));
  const sy_moe_ht_config_t *c = &moe->config;
  const int given = c->wire == SY_MOE_WIRE_FP8_GIVEN;
  SY_ARG_CHECK(tokens != NULL || num_tokens == 0, fn, "tokens is NULL while num_tokens=%d", num_tokens);
  SY_ARG_CHECK(!given || token_scales != NULL || num_tokens == 0, fn,
               "token_scales is NULL while num_tokens=%d with SY_MOE_WIRE_FP8_GIVEN (the scales travel with the "
               "tokens)",
               num_tokens);
  SY_ARG_CHECK(given || token_scales == NULL, fn,
               "token_scales=%p without SY_MOE_WIRE_FP8_GIVEN (this wire takes bf16 tokens: pass NULL)",
               (const void *)token_scales);
  SY_CHECK(check_recv(moe, recv, 1, fn));
  const int L = moe->local_experts;
  const size_t rows = (size_t)recv->rows, T = (size_t)num_tokens, K = (size_t)c->top_k, H = (size_t)c->hidden;
  sy_moe_ht_sizes_t z;
  fill_sizes(moe, &z);
  const span_t spans[10] = {{"recv->tokens", recv->tokens, rows * z.row_bytes, 1},
                            {"recv->scales", recv->scales, rows * z.scale_bytes, 1},
                            {"recv->src", recv->src, rows * 8, 1},
                            {"recv->weights", recv->weights, rows * 4, 1},
                            {"recv->expert_offsets", recv->expert_offsets, ((size_t)L + 1) * 4, 1},
                            {"recv->expert_counts", recv->expert_counts, (size_t)L * 4, 1},
                            {"handle", handle, z.handle_bytes, 1},
                            {"tokens", tokens, T * H * (given ? 1 : 2), 0},
                            {"token_scales", token_scales, T * (H / SY_MOE_FP8_GROUP) * 4, 0},
                            {"weights", weights, T * K * 4, 0}};
  SY_CHECK(check_overlaps(spans, 10, fn));
  /* the fields a call does not set are 0 */
  const sy_moe_ht_call_t call = {
      .handle = (void *)handle, /* the dispatch records its rows in the handle (recv_rows) for the combines */
      .num_tokens = num_tokens,
      .tokens = tokens,
      .token_scales = token_scales,
      .weights = weights,
      .recv = recv,
  };
  sy_comm_t comm = moe->comm;
  return run(moe, comm->ops->moe_ht_dispatch(comm, moe, &call, stream), &moe->dispatches, fn);
}

/* sy_moe_ht_combine and sy_moe_ht_combine_add (add: out is read and added to). */
static sy_status_t combine(sy_moe_ht_t moe, const void *handle, int num_tokens, const void *rows_in,
                           const sy_moe_ht_recv_t *recv, const float *row_weights, const float *row_values, void *out,
                           float *token_values, int add, cudaStream_t stream, const char *fn) {
  SY_ARG_CHECK(!add || !moe || moe->config.top_k <= 31, fn,
               "the object's config->top_k=%d: adding into out takes top_k <= 31 (a token's partials and its row of "
               "out are read through one table of 32)",
               moe ? moe->config.top_k : 0);
  SY_CHECK(check_call(moe, moe && moe->comm->ops->moe_ht_combine, handle, num_tokens, stream, fn));
  SY_CHECK(check_recv(moe, recv, 0, fn));
  const size_t rows = (size_t)recv->rows, T = (size_t)num_tokens, H = (size_t)moe->config.hidden;
  SY_ARG_CHECK(rows_in != NULL || rows == 0, fn, "rows_in is NULL while recv->rows=%zu", rows);
  SY_ARG_CHECK(out != NULL || num_tokens == 0, fn, "out is NULL while num_tokens=%d", num_tokens);
  /* Both or neither; a rank with no rows (no tokens) may leave out the one it would not use. */
  const int values = row_values != NULL || token_values != NULL;
  SY_ARG_CHECK(!values || row_values != NULL || rows == 0, fn,
               "row_values is NULL while token_values=%p and recv->rows=%zu (pass both, or neither)",
               (void *)token_values, rows);
  SY_ARG_CHECK(!values || token_values != NULL || num_tokens == 0, fn,
               "token_values is NULL while row_values=%p and num_tokens=%d (pass both, or neither)",
               (const void *)row_values, num_tokens);
  const size_t L = (size_t)moe->local_experts; /* the recv's sections the cuda backend may read */
  const span_t spans[9] = {{"out", out, T * H * 2, 1},
                           {"token_values", token_values, T * (size_t)moe->config.top_k * 4, 1},
                           {"rows_in", rows_in, rows * H * 2, 0},
                           {"row_weights", row_weights, rows * 4, 0},
                           {"row_values", row_values, rows * 4, 0},
                           {"handle", handle, sy__moe_ht_handle_layout(&moe->config, moe->comm->world_size).bytes, 0},
                           {"recv->src", recv->src, rows * 8, 0},
                           {"recv->expert_offsets", recv->expert_offsets, (L + 1) * 4, 0},
                           {"recv->expert_counts", recv->expert_counts, L * 4, 0}};
  SY_CHECK(check_overlaps(spans, 9, fn));
  /* the fields a call does not set are 0 */
  const sy_moe_ht_call_t call = {
      .handle = (void *)handle,
      .num_tokens = num_tokens,
      .tokens = rows_in,
      .recv = recv,
      .row_weights = row_weights,
      .row_values = row_values,
      .out = out,
      .token_values = token_values,
      .add = add,
  };
  sy_comm_t comm = moe->comm;
  return run(moe, comm->ops->moe_ht_combine(comm, moe, &call, stream), NULL, fn);
}

sy_status_t sy_moe_ht_combine(sy_moe_ht_t moe, const void *handle, int num_tokens, const void *rows_in,
                              const sy_moe_ht_recv_t *recv, const float *row_weights, const float *row_values,
                              void *out, float *token_values, cudaStream_t stream) {
  return combine(moe, handle, num_tokens, rows_in, recv, row_weights, row_values, out, token_values, 0, stream,
                 "sy_moe_ht_combine");
}

sy_status_t sy_moe_ht_combine_add(sy_moe_ht_t moe, const void *handle, int num_tokens, const void *rows_in,
                                  const sy_moe_ht_recv_t *recv, const float *row_weights, const float *row_values,
                                  void *out, float *token_values, cudaStream_t stream) {
  return combine(moe, handle, num_tokens, rows_in, recv, row_weights, row_values, out, token_values, 1, stream,
                 "sy_moe_ht_combine_add");
}

sy_status_t sy_moe_ht_combine_backward(sy_moe_ht_t moe, const void *handle, int num_tokens, const void *grad_out,
                                       const sy_moe_ht_recv_t *recv, const float *row_weights, const void *rows_in,
                                       void *grad_rows, float *grad_row_weights, cudaStream_t stream) {
  static const char *fn = "sy_moe_ht_combine_backward";
  SY_CHECK(check_call(moe, moe && moe->comm->ops->moe_ht_combine_backward, handle, num_tokens, stream, fn));
  SY_CHECK(check_recv(moe, recv, 0, fn));
  const size_t rows = (size_t)recv->rows, T = (size_t)num_tokens, H = (size_t)moe->config.hidden;
  SY_ARG_CHECK(grad_out != NULL || num_tokens == 0, fn, "grad_out is NULL while num_tokens=%d", num_tokens);
  SY_ARG_CHECK(grad_rows != NULL || rows == 0, fn, "grad_rows is NULL while recv->rows=%zu", rows);
  SY_ARG_CHECK(rows_in != NULL || grad_row_weights == NULL || rows == 0, fn,
               "rows_in is NULL while grad_row_weights=%p and recv->rows=%zu (the weights' gradient reads the "
               "combine's input)",
               (void *)grad_row_weights, rows);
  const size_t L = (size_t)moe->local_experts; /* the recv's sections the cuda backend may read */
  const span_t spans[9] = {{"grad_rows", grad_rows, rows * H * 2, 1},
                           {"grad_row_weights", grad_row_weights, rows * 4, 1},
                           {"grad_out", grad_out, T * H * 2, 0},
                           {"rows_in", grad_row_weights ? rows_in : NULL, rows * H * 2, 0},
                           {"row_weights", row_weights, rows * 4, 0},
                           {"handle", handle, sy__moe_ht_handle_layout(&moe->config, moe->comm->world_size).bytes, 0},
                           {"recv->src", recv->src, rows * 8, 0},
                           {"recv->expert_offsets", recv->expert_offsets, (L + 1) * 4, 0},
                           {"recv->expert_counts", recv->expert_counts, L * 4, 0}};
  SY_CHECK(check_overlaps(spans, 9, fn));
  /* the fields a call does not set are 0 */
  const sy_moe_ht_call_t call = {
      .handle = (void *)handle,
      .num_tokens = num_tokens,
      .tokens = grad_out,
      .recv = recv,
      .row_weights = row_weights,
      .out = grad_rows,
      .rows_in = grad_row_weights ? rows_in : NULL,
      .grad_row_weights = grad_row_weights,
  };
  sy_comm_t comm = moe->comm;
  return run(moe, comm->ops->moe_ht_combine_backward(comm, moe, &call, stream), NULL, fn);
}
