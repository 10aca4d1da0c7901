/*
 * attn.c — the public entry points of the context-parallel attention dispatch: plans (built by src/plan,
 * uploaded by the backend), the dispatch object (its symmetric staging for the KV backward), and the four
 * directions. Each checks everything it can at the boundary, once, and hands the backend a sy_attn_call_t it
 * can trust; a rejected call changes nothing. Failures a backend reports for the collective as a whole
 * (a timed-out wait, ranks that disagree) are sticky, as in comm.c.
 */
#include "exec/graph.h"
#include "internal.h"
#include "mem/pool.h"
#include "plan/attn_plan.h"
#include "ref/attn_ref.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- plans ------------------------------------------------------------------------------------------------ */

/* Both creates: the plan built here, its device copy made by the backend (pool, staging, stream as
 * attn_plan_upload takes them). */
static sy_status_t plan_create(sy_comm_t comm, const sy_attn_plan_desc_t *desc, sy_pool_t pool, sy_host_pool_t staging,
                               cudaStream_t stream, sy_attn_plan_t *plan_out, const char *fn) {
  SY_ARG_CHECK(desc != NULL, fn, "desc is NULL");
  SY_ARG_CHECK(desc->size >= sizeof(sy_attn_plan_desc_t), fn,
               "desc->size=%zu is too small (initialise the description with SY_ATTN_PLAN_DESC_INIT)", desc->size);
  SY_ARG_CHECK(desc->world_size == comm->world_size, fn, "desc->world_size=%d but the communicator has %d ranks",
               desc->world_size, comm->world_size);
  sy_attn_plan_desc_t d = *desc; /* a newer caller's larger struct: its known prefix */
  d.size = sizeof d;
  struct sy_attn_plan *plan = NULL;
  SY_CHECK(sy__attn_plan_build(&d, comm->rank, &plan));
  plan->backend = comm->backend;
  if (comm->ops->attn_plan_upload) {
    sy_status_t st = comm->ops->attn_plan_upload(comm, plan, pool, staging, stream);
    if (st != SY_SUCCESS) {
      SY_INFO("%s: the backend could not take the plan: %s", fn, sy_status_name(st));
      sy__attn_plan_free(plan, NULL);
      return st;
    }
  }
  *plan_out = plan;
  return SY_SUCCESS;
}

sy_status_t sy_attn_plan_create(sy_comm_t comm, const sy_attn_plan_desc_t *desc, sy_attn_plan_t *plan_out) {
  static const char *fn = "sy_attn_plan_create";
  if (plan_out) *plan_out = NULL; /* first: a refusal of any argument leaves no stale handle */
  SY_COMM_GUARD(comm, fn);
  SY_ARG_CHECK(plan_out != NULL, fn, "plan is NULL");
  return plan_create(comm, desc, NULL, NULL, NULL, plan_out, fn);
}

sy_status_t sy_attn_plan_create_async(sy_comm_t comm, const sy_attn_plan_desc_t *desc, sy_pool_t pool,
                                      sy_host_pool_t staging, cudaStream_t stream, sy_attn_plan_t *plan_out) {
  static const char *fn = "sy_attn_plan_create_async";
  if (plan_out) *plan_out = NULL; /* first: a refusal of any argument leaves no stale handle */
  SY_COMM_GUARD(comm, fn);
  SY_ARG_CHECK(plan_out != NULL, fn, "plan is NULL");
  SY_ARG_CHECK(!pool || sy__pool_comm(pool) == comm, fn, "pool was made on another communicator");
  SY_ARG_CHECK(!staging || sy__host_pool_comm(staging) == comm, fn, "staging was made on another communicator");
  SY_CHECK(sy__check_stream(comm, stream, fn));
  if (comm->backend == SY_BACKEND_CUDA) { /* a capture would keep the upload and refuse the staging's release */
    int capturing = 0;
    SY_CHECK(sy__cuda_stream_capturing(stream, &capturing));
    SY_ARG_CHECK(!capturing, fn, "stream is capturing a graph: build plans outside captures");
  }
  return plan_create(comm, desc, pool, staging, stream, plan_out, fn);
}

sy_status_t sy_attn_plan_info(sy_attn_plan_t plan, sy_attn_plan_info_t *info) {
  static const char *fn = "sy_attn_plan_info";
  SY_ARG_CHECK(plan != NULL, fn, "plan is NULL");
  SY_ARG_CHECK(info != NULL, fn, "info is NULL");
  SY_ARG_CHECK(info->size >= sizeof(sy_attn_plan_info_t), fn,
               "info->size=%zu is too small (initialise it with SY_ATTN_PLAN_INFO_INIT)", info->size);
  const size_t size = info->size; /* a newer caller's larger struct: its known prefix is filled */
  memset(info, 0, sizeof *info);
  info->size = size;
  info->num_tokens = plan->num_tokens;
  info->q_recv_rows = plan->dir[SY_ATTN_Q_FWD].recv_total;
  info->kv_recv_rows = plan->dir[SY_ATTN_KV_FWD].recv_total;
  info->q_recv_from = plan->dir[SY_ATTN_Q_FWD].recv_rows;
  info->kv_recv_from = plan->dir[SY_ATTN_KV_FWD].recv_rows;
  info->q_send_to = plan->dir[SY_ATTN_Q_FWD].send_rows;
  info->kv_send_to = plan->dir[SY_ATTN_KV_FWD].send_rows;
  info->max_num_tokens = plan->max_num_tokens;
  info->max_q_recv_rows = plan->max_q_recv_rows;
  info->max_kv_recv_rows = plan->max_kv_recv_rows;
  info->fingerprint = plan->fingerprint;
  return SY_SUCCESS;
}

sy_status_t sy_attn_plan_seqs(sy_attn_plan_t plan, sy_attn_plan_seqs_t *seqs) {
  static const char *fn = "sy_attn_plan_seqs";
  SY_ARG_CHECK(plan != NULL, fn, "plan is NULL");
  SY_ARG_CHECK(seqs != NULL, fn, "seqs is NULL");
  SY_ARG_CHECK(seqs->size >= sizeof(sy_attn_plan_seqs_t), fn,
               "seqs->size=%zu is too small (initialise it with SY_ATTN_PLAN_SEQS_INIT)", seqs->size);
  const size_t size = seqs->size; /* a newer caller's larger struct: its known prefix is filled */
  memset(seqs, 0, sizeof *seqs);
  seqs->size = size;
  seqs->num_seqs = plan->num_seqs;
  seqs->max_replicas = plan->max_replicas;
  seqs->q_recv_count = plan->q_recv_count;
  seqs->kv_recv_count = plan->kv_recv_count;
  seqs->q_send = plan->q_send;
  seqs->kv_send = plan->kv_send;
  seqs->q_recv = plan->q_recv;
  seqs->kv_recv = plan->kv_recv;
  return SY_SUCCESS;
}

sy_status_t sy_attn_plan_destroy(sy_attn_plan_t plan) {
  if (plan) sy__attn_plan_free(plan, NULL); /* frees the backend's copy through plan->device_free */
  return SY_SUCCESS;
}

sy_status_t sy_attn_plan_destroy_async(sy_attn_plan_t plan, cudaStream_t stream) {
  static const char *fn = "sy_attn_plan_destroy_async";
  SY_ARG_CHECK(plan == NULL || plan->backend != SY_BACKEND_CUDA || (stream != NULL && stream != cudaStreamLegacy), fn,
               "stream is %s (the legacy default stream); pass the stream of the plan's last use",
               stream ? "cudaStreamLegacy" : "NULL");
  if (plan) sy__attn_plan_free(plan, stream);
  return SY_SUCCESS;
}

/* ---- the dispatch object ------------------------------------------------------------------------------------ */

/* Copies the caller's config (a newer caller's larger struct: its known prefix) and checks it. */
static sy_status_t read_config(sy_comm_t comm, const sy_attn_config_t *in, sy_attn_config_t *config, const char *fn) {
  SY_ARG_CHECK(in != NULL, fn, "config is NULL (it has no defaults: set max_tokens and max_replicas)");
  SY_ARG_CHECK(in->size >= sizeof(sy_attn_config_t), fn,
               "config->size=%zu is too small (initialise the config with SY_ATTN_CONFIG_INIT)", in->size);
  *config = *in;
  config->size = sizeof *config;
  SY_ARG_CHECK(config->max_tokens >= 1, fn, "config->max_tokens=%lld must be >= 1", (long long)config->max_tokens);
  SY_ARG_CHECK(config->max_replicas >= 1 && config->max_replicas <= comm->world_size, fn,
               "config->max_replicas=%d outside [1, world_size=%d]", config->max_replicas, comm->world_size);
  const size_t row = config->max_kv_grad_row_bytes;
  SY_ARG_CHECK(row % 2 == 0, fn, "config->max_kv_grad_row_bytes=%zu is not a whole number of bf16/fp16/fp32 elements",
               row);
  /* The staging, max_replicas * max_tokens rows, must have a size (and room to round it up to 256). */
  const size_t limit = SIZE_MAX - 255;
  SY_ARG_CHECK(row == 0 || ((uint64_t)config->max_tokens <= limit / (size_t)config->max_replicas &&
                            row <= limit / ((size_t)config->max_replicas * (size_t)config->max_tokens)),
               fn, "config: max_replicas=%d * max_tokens=%lld * max_kv_grad_row_bytes=%zu overflows",
               config->max_replicas, (long long)config->max_tokens, row);
  return SY_SUCCESS;
}

static size_t staging_bytes(const sy_attn_config_t *config) {
  size_t bytes = (size_t)config->max_replicas * (size_t)config->max_tokens * config->max_kv_grad_row_bytes;
  return (bytes + 255) / 256 * 256;
}

/* Only the KV backward's replica staging. A backend reserves its own control words (a few per rank) on top
 * of this, in its attn_create; the cuda backend's are (48 bytes of mail + 8) * world_size bytes, 256-aligned. */
sy_status_t sy_attn_workspace_size(sy_comm_t comm, const sy_attn_config_t *config_in, size_t *bytes) {
  static const char *fn = "sy_attn_workspace_size";
  SY_COMM_QUERY_GUARD(comm, fn); /* a function of the configuration: answers after an error too */
  SY_ARG_CHECK(bytes != NULL, fn, "bytes is NULL");
  sy_attn_config_t config;
  SY_CHECK(read_config(comm, config_in, &config, fn));
  *bytes = staging_bytes(&config);
  return SY_SUCCESS;
}

sy_status_t sy_attn_create(sy_comm_t comm, const sy_attn_config_t *config_in, sy_attn_t *attn_out) {
  static const char *fn = "sy_attn_create";
  if (attn_out)
    *attn_out = NULL; /* first: a refusal of any argument, the communicator's included, leaves no stale handle */
  SY_COMM_GUARD(comm, fn);
  if (!comm->ops->attn_create || !comm->ops->attn_run) { /* alike on every rank */
    SY_WARN("%s: the %s backend has no attention dispatch", fn, comm->ops->name);
    return SY_ERR_UNSUPPORTED;
  }
  /* this rank's own checks; a refusal still joins the ranks' verdict */
  sy_attn_config_t config;
  memset(&config, 0, sizeof config);
  sy_status_t local = attn_out ? SY_SUCCESS : (sy__arg_error(fn, "attn is NULL"), SY_ERR_INVALID_ARG);
  if (local == SY_SUCCESS) local = read_config(comm, config_in, &config, fn);
  /* a heap too small for the staging on any rank: every rank fails, together (the cuda backend's control words, a
   * few bytes a rank, are left to its own allocation) */
  if (local == SY_SUCCESS) local = sy__heap_verdict(comm, staging_bytes(&config), fn);
  /* every rank's verdict on its own arguments first (sy__create_exchange): a refusal fails the create everywhere at
   * once; the configuration travels with it, which gives the exchange a size of its own (the host backend tells it
   * from a sy_comm_allgather_host of a few bytes called at the same point) */
  sy_attn_config_t *all = calloc((size_t)comm->world_size, sizeof *all);
  sy_status_t verdict = all ? sy__create_exchange(comm, &config, sizeof config, local, all, fn) : SY_ERR_NO_MEMORY;
  free(all);
  SY_CHECK(verdict);
  struct sy_attn *attn = calloc(1, sizeof *attn);
  if (!attn) return SY_ERR_NO_MEMORY; /* the peers time out in the collective below, as for any local failure */
  attn->comm = comm;
  attn->config = config;
  attn->staging_bytes = staging_bytes(&config);
  sy_status_t st = SY_SUCCESS;
  if (attn->staging_bytes) SY_CHECK_GOTO(sy_mem_alloc(comm, attn->staging_bytes, &attn->staging), st, fail);
  SY_CHECK_GOTO(comm->ops->attn_create(comm, attn), st, fail_staging);
  sy__comm_object_made(comm);
  *attn_out = attn;
  return SY_SUCCESS;
fail_staging:
  /* The backends decide create together, so every rank frees here together (after an error sy_mem_free
   * returns it at once and the staging goes with the communicator). */
  if (attn->staging) sy__mem_free_within(comm, attn->staging); /* keeps sy_last_error: the failure's */
fail:
  free(attn);
  return st;
}

/* Collective. Accepted after an error: then the staging stays with the communicator, which frees it. */
sy_status_t sy_attn_destroy(sy_attn_t attn) {
  if (!attn) return SY_SUCCESS;
  sy_comm_t comm = attn->comm;
  sy__api_enter(comm->rank);
  /* the backend's own memory, also after sy_comm_destroy (the symmetric parts went with the communicator) */
  if (comm->ops->attn_destroy) comm->ops->attn_destroy(comm, attn);
  sy_status_t st = SY_SUCCESS;
  if (attn->staging && !comm->destroyed && sy__comm_health(comm) == SY_SUCCESS) st = sy_mem_free(comm, attn->staging);
  free(attn);
  sy__comm_object_gone(comm);
  return st;
}

/* ---- the four directions ------------------------------------------------------------------------------------ */

/* What every direction checks: the object, the communicator's health, the stream, and a plan of this
 * communicator that fits the object's configuration. */
static sy_status_t check_call(sy_attn_t attn, sy_attn_plan_t plan, cudaStream_t stream, const char *fn) {
  SY_ARG_CHECK(attn != NULL, fn, "attn is NULL");
  sy_comm_t comm = attn->comm;
  SY_COMM_GUARD(comm, fn);
  SY_CHECK(sy__check_stream(comm, stream, fn));
  SY_ARG_CHECK(plan != NULL, fn, "plan is NULL");
  SY_ARG_CHECK(plan->rank == comm->rank && plan->world_size == comm->world_size && plan->backend == comm->backend, fn,
               "plan was built for rank %d of %d on the %s backend; this communicator is rank %d of %d on %s",
               plan->rank, plan->world_size, sy_backend_name(plan->backend), comm->rank, comm->world_size,
               sy_backend_name(comm->backend));
  /* the plan's most tokens on any rank, not this rank's: the same on every rank (plans of other descriptions are a
   * mismatch), so every rank refuses together instead of the others waiting for this one */
  SY_ARG_CHECK(plan->max_num_tokens <= attn->config.max_tokens, fn,
               "plan gives a rank %lld tokens (this rank %lld), more than config.max_tokens=%lld",
               (long long)plan->max_num_tokens, (long long)plan->num_tokens, (long long)attn->config.max_tokens);
  SY_ARG_CHECK(plan->max_replicas <= attn->config.max_replicas, fn,
               "plan has max_replicas=%d, more than config.max_replicas=%d", plan->max_replicas,
               attn->config.max_replicas);
  return SY_SUCCESS;
}

/* rows * row_bytes, or SIZE_MAX when it does not fit. */
static size_t rows_bytes(int64_t rows, size_t row_bytes) {
  if (rows <= 0 || row_bytes == 0) return 0;
  return (uint64_t)rows > SIZE_MAX / row_bytes ? SIZE_MAX : (size_t)rows * row_bytes;
}

static int64_t rows_sent(const sy_attn_plan_t plan, int dir) {
  int64_t rows = 0;
  for (int p = 0; p < plan->world_size; p++) rows += plan->dir[dir].send_rows[p];
  return rows;
}

static int overlap(const void *a, size_t a_bytes, const void *b, size_t b_bytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

/* A source of rows (q, kv, attn_rows, grad_rows): read only by this rank's own call, so any memory of this rank
 * the backend can read (header: "Sources"). What can be checked here: its rows, src_bytes from src, do not run past
 * the end of the address space, and, where src lies in a symmetric allocation, not past that allocation. */
static sy_status_t check_source(sy_comm_t comm, const void *src, const char *src_name, int64_t src_rows,
                                size_t src_bytes, const char *fn) {
  if (!src || src_bytes == 0) return SY_SUCCESS;
  SY_ARG_CHECK((uintptr_t)src <= UINTPTR_MAX - src_bytes, fn,
               "%s=%p: its %lld rows (%zu bytes) run past the end of the address space", src_name, src,
               (long long)src_rows, src_bytes);
  const sy_symm_block_t *b = sy__symm_find(comm, src, 0);
  if (!b) return SY_SUCCESS;
  const size_t room = b->bytes - (size_t)((const char *)src - (const char *)b->ptr);
  SY_ARG_CHECK(src_bytes <= room, fn,
               "%s=%p lies in a symmetric allocation with room for %zu bytes from it; its %lld rows need %zu", src_name,
               src, room, (long long)src_rows, src_bytes);
  return SY_SUCCESS;
}

/* A channel's buffers: row_bytes > 0; the source non-NULL when rows are sent (src_rows of it are read when
 * src_rows >= 0 is known); the destination symmetric with room for dst_rows rows when any arrive, apart
 * from the source. */
static sy_status_t check_channel(sy_comm_t comm, sy_attn_plan_t plan, int dir, const void *src, const char *src_name,
                                 int64_t src_rows, size_t row_bytes, const char *row_name, const void *dst,
                                 const char *dst_name, int64_t dst_rows, const char *fn) {
  SY_ARG_CHECK(row_bytes > 0, fn, "%s=0", row_name);
  const int64_t sent = rows_sent(plan, dir);
  SY_ARG_CHECK(sent == 0 || src != NULL, fn, "%s is NULL while this rank sends %lld rows", src_name, (long long)sent);
  const size_t dst_bytes = rows_bytes(dst_rows, row_bytes), src_bytes = rows_bytes(src_rows, row_bytes);
  SY_ARG_CHECK(dst_bytes != SIZE_MAX && src_bytes != SIZE_MAX, fn, "%s=%zu times %lld rows overflows", row_name,
               row_bytes, (long long)(dst_bytes == SIZE_MAX ? dst_rows : src_rows));
  SY_CHECK(check_source(comm, src, src_name, src_rows, src_bytes, fn));
  if (dst_bytes) {
    SY_ARG_CHECK(dst != NULL, fn, "%s is NULL while %lld rows of %zu bytes arrive here", dst_name, (long long)dst_rows,
                 row_bytes);
    const sy_symm_block_t *b = sy__symm_find(comm, dst, 0);
    SY_ARG_CHECK(b != NULL, fn, "%s=%p is not a symmetric allocation (use sy_mem_alloc)", dst_name, dst);
    const size_t room = b->bytes - (size_t)((const char *)dst - (const char *)b->ptr);
    SY_ARG_CHECK(dst_bytes <= room, fn,
                 "%s=%p has room for %zu bytes in its symmetric allocation, %lld rows of %zu bytes need %zu", dst_name,
                 dst, room, (long long)dst_rows, row_bytes, dst_bytes);
    SY_ARG_CHECK(!src || !overlap(src, src_bytes, dst, dst_bytes), fn, "%s=%p and %s=%p overlap", src_name, src,
                 dst_name, dst);
  }
  return SY_SUCCESS;
}

static sy_status_t run(sy_attn_t attn, sy_attn_plan_t plan, const sy_attn_call_t *call, cudaStream_t stream,
                       const char *fn) {
  return sy__comm_record(attn->comm, attn->comm->ops->attn_run(attn->comm, attn, plan, call, stream), fn);
}

sy_status_t sy_attn_q_forward(sy_attn_t attn, sy_attn_plan_t plan, const void *q, size_t q_row_bytes, void *q_recv,
                              cudaStream_t stream) {
  static const char *fn = "sy_attn_q_forward";
  SY_CHECK(check_call(attn, plan, stream, fn));
  SY_CHECK(check_channel(attn->comm, plan, SY_ATTN_Q_FWD, q, "q", plan->num_tokens, q_row_bytes, "q_row_bytes", q_recv,
                         "q_recv", plan->dir[SY_ATTN_Q_FWD].recv_total, fn));
  sy_attn_call_t call;
  memset(&call, 0, sizeof call);
  call.num_channels = 1;
  call.ch[0] = (sy_attn_channel_t){SY_ATTN_Q_FWD, q, q_row_bytes, q_recv};
  return run(attn, plan, &call, stream, fn);
}

sy_status_t sy_attn_qkv_forward(sy_attn_t attn, sy_attn_plan_t plan, const void *q, size_t q_row_bytes, void *q_recv,
                                const void *kv, size_t kv_row_bytes, void *kv_recv, cudaStream_t stream) {
  static const char *fn = "sy_attn_qkv_forward";
  SY_CHECK(check_call(attn, plan, stream, fn));
  SY_ARG_CHECK(plan->max_replicas > 0, fn, "plan has max_replicas=0 (no KV destinations); use sy_attn_q_forward");
  const int64_t q_rows = plan->dir[SY_ATTN_Q_FWD].recv_total, kv_rows = plan->dir[SY_ATTN_KV_FWD].recv_total;
  SY_CHECK(check_channel(attn->comm, plan, SY_ATTN_Q_FWD, q, "q", plan->num_tokens, q_row_bytes, "q_row_bytes", q_recv,
                         "q_recv", q_rows, fn));
  SY_CHECK(check_channel(attn->comm, plan, SY_ATTN_KV_FWD, kv, "kv", plan->num_tokens, kv_row_bytes, "kv_row_bytes",
                         kv_recv, "kv_recv", kv_rows, fn));
  /* Both receive regions are written by the same call; the sources are only read. */
  const size_t q_bytes = rows_bytes(q_rows, q_row_bytes), kv_bytes = rows_bytes(kv_rows, kv_row_bytes);
  SY_ARG_CHECK(!overlap(q_recv, q_bytes, kv_recv, kv_bytes), fn,
               "q_recv=%p (%zu bytes) and kv_recv=%p (%zu bytes) overlap", q_recv, q_bytes, kv_recv, kv_bytes);
  SY_ARG_CHECK(!q || !overlap(q, rows_bytes(plan->num_tokens, q_row_bytes), kv_recv, kv_bytes), fn,
               "q=%p and kv_recv=%p overlap", q, kv_recv);
  SY_ARG_CHECK(!kv || !overlap(kv, rows_bytes(plan->num_tokens, kv_row_bytes), q_recv, q_bytes), fn,
               "kv=%p and q_recv=%p overlap", kv, q_recv);
  sy_attn_call_t call;
  memset(&call, 0, sizeof call);
  call.num_channels = 2;
  call.ch[0] = (sy_attn_channel_t){SY_ATTN_Q_FWD, q, q_row_bytes, q_recv};
  call.ch[1] = (sy_attn_channel_t){SY_ATTN_KV_FWD, kv, kv_row_bytes, kv_recv};
  return run(attn, plan, &call, stream, fn);
}

sy_status_t sy_attn_q_reverse(sy_attn_t attn, sy_attn_plan_t plan, const void *attn_rows, size_t row_bytes, void *out,
                              cudaStream_t stream) {
  static const char *fn = "sy_attn_q_reverse";
  SY_CHECK(check_call(attn, plan, stream, fn));
  SY_CHECK(check_channel(attn->comm, plan, SY_ATTN_Q_REV, attn_rows, "attn_rows", plan->dir[SY_ATTN_Q_FWD].recv_total,
                         row_bytes, "row_bytes", out, "out", plan->num_tokens, fn));
  sy_attn_call_t call;
  memset(&call, 0, sizeof call);
  call.num_channels = 1;
  call.ch[0] = (sy_attn_channel_t){SY_ATTN_Q_REV, attn_rows, row_bytes, out};
  return run(attn, plan, &call, stream, fn);
}

sy_status_t sy_attn_kv_backward(sy_attn_t attn, sy_attn_plan_t plan, const void *grad_rows, size_t row_bytes,
                                sy_dtype_t dtype, unsigned flags, void *grad_out, cudaStream_t stream) {
  static const char *fn = "sy_attn_kv_backward";
  SY_CHECK(check_call(attn, plan, stream, fn));
  SY_ARG_CHECK(plan->max_replicas > 0, fn, "plan has max_replicas=0: no KV rows went out, none come back");
  const size_t elem = sy__dtype_size(dtype);
  SY_ARG_CHECK(elem != 0, fn, "dtype=%d is not a sy_dtype_t", (int)dtype);
  SY_ARG_CHECK((flags & ~SY_ATTN_UNSUMMED) == 0, fn, "flags=0x%x: only SY_ATTN_UNSUMMED (0x%x) is defined", flags,
               SY_ATTN_UNSUMMED);
  SY_ARG_CHECK(row_bytes > 0 && row_bytes % elem == 0, fn, "row_bytes=%zu is not a positive multiple of %zu (dtype %d)",
               row_bytes, elem, (int)dtype);
  SY_ARG_CHECK(row_bytes <= attn->config.max_kv_grad_row_bytes, fn,
               "row_bytes=%zu exceeds config.max_kv_grad_row_bytes=%zu (the staging's row)", row_bytes,
               attn->config.max_kv_grad_row_bytes);
  const int64_t src_rows = plan->dir[SY_ATTN_KV_FWD].recv_total;
  const int64_t sent = rows_sent(plan, SY_ATTN_KV_BWD);
  SY_ARG_CHECK(sent == 0 || grad_rows != NULL, fn, "grad_rows is NULL while this rank sends %lld rows",
               (long long)sent);
  const size_t src_bytes = rows_bytes(src_rows, row_bytes);
  SY_ARG_CHECK(src_bytes != SIZE_MAX, fn, "row_bytes=%zu times %lld rows overflows", row_bytes, (long long)src_rows);
  SY_CHECK(check_source(attn->comm, grad_rows, "grad_rows", src_rows, src_bytes, fn));
  /* The staging holds config.max_replicas * config.max_tokens rows of max_kv_grad_row_bytes: room for these. */
  const int64_t out_rows =
      (flags & SY_ATTN_UNSUMMED) ? (int64_t)plan->max_replicas * plan->num_tokens : plan->num_tokens;
  const size_t out_bytes = rows_bytes(out_rows, row_bytes);
  SY_ARG_CHECK(out_bytes == 0 || grad_out != NULL, fn, "grad_out is NULL while this rank owns %lld tokens",
               (long long)plan->num_tokens);
  SY_ARG_CHECK(!grad_rows || !overlap(grad_rows, src_bytes, grad_out, out_bytes), fn,
               "grad_rows=%p and grad_out=%p overlap", grad_rows, grad_out);
  SY_ARG_CHECK(!overlap(attn->staging, attn->staging_bytes, grad_out, out_bytes) &&
                   !(grad_rows && overlap(attn->staging, attn->staging_bytes, grad_rows, src_bytes)),
               fn, "grad_rows=%p or grad_out=%p overlaps the object's staging", grad_rows, grad_out);
  sy_attn_call_t call;
  memset(&call, 0, sizeof call);
  call.num_channels = 1;
  call.ch[0] = (sy_attn_channel_t){SY_ATTN_KV_BWD, grad_rows, row_bytes, attn->staging};
  call.kv_backward = 1;
  call.dtype = dtype;
  call.flags = flags;
  call.grad_out = grad_out;
  return run(attn, plan, &call, stream, fn);
}
