/*
 * launch.cu — the host side of the MoE low-latency kernels: create (every rank's configuration compared, the
 * shared-memory verdicts, the workspace, the device-local state, the kernels' attributes), destroy, and the six
 * launches, each filling moe_params (moe.cuh) and picking the kernel instance of its mode (kernels.cuh).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda/backend.h"
#include "cuda/moe/kernels.cuh"

using namespace sy;

struct moe_gpu {
  sy_moe_layout_t layout;
  char *ws;
  moe_local *local;
  uint64_t *calls;  /* [blocks], after local */
  char *local_blob; /* local and calls, ids, slot_of */
  int32_t *ids, *slot_of;
  char *staging;
  size_t stage_bytes;
  bool staging_registered;
  int blocks;              /* send kernels' grid (the SM count) */
  bool expert_token_masks; /* dispatch_send's per-expert token masks fit (moe_params.expert_token_masks) */
  bool fused_ok;           /* a block of each fused kernel fits on an SM (else the one-call forms launch the halves) */
  bool direct;      /* the fused dispatch may place this rank's own entries itself (its list fits: moe_params.direct) */
  bool direct_auto; /* ... then only per expert, and from blocks / 2 tokens (SY_MOE_DIRECT unset or auto) */
  char *peer_tab[MOE_PEER_TAB]; /* W <= MOE_PEER_TAB: each rank's workspace as this GPU reaches it (NULL: puts) */
  int own_cap;                  /* its list's entries: ceil(max_tokens / blocks) x top_k */
  size_t ds_smem, dr_smem, cs_smem, fd_smem; /* fd: the fused dispatch */
};

static cuda_state *state_of(sy_comm_t comm) { return (cuda_state *)comm->backend_state; }

/* Launches one of the kernels, with programmatic dependent launch unless SY_PDL=0. */
static sy_status_t launch(moe_kernel_t kernel, int blocks, size_t smem, cudaStream_t stream, const moe_params &P) {
  return launch_pdl(kernel, blocks, MOE_THREADS, smem, stream, P);
}

/* The MODE bits of a configuration on a communicator (the kernel instance), without MODE_DIRECT (a per-call
 * choice). */
static int mode_of(sy_comm_t comm, const sy_moe_config_t *c) {
  return (c->wire != SY_MOE_WIRE_BF16 ? MODE_FP8 : 0) | ((c->flags & SY_MOE_PER_EXPERT) ? MODE_PE : 0) |
         (state_of(comm)->ctx.trace ? MODE_TRACE : 0);
}

static size_t align_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

static void fill_params(sy_comm_t comm, const struct sy_moe *moe, const moe_gpu *g, moe_params *P) {
  const sy_moe_config_t *c = &moe->config;
  memset(P, 0, sizeof *P);
  P->ctx = state_of(comm)->ctx;
  P->ws = g->ws;
  memcpy(P->peer_tab, g->peer_tab, sizeof P->peer_tab);
  P->local = g->local;
  P->calls = g->calls;
  P->ncalls = g->blocks;
  P->ids = g->ids;
  P->slot_of = g->slot_of;
  P->staging = g->staging;
  P->stage_bytes = g->stage_bytes;
  P->layout = g->layout;
  P->max_tokens = c->max_tokens;
  P->messages_per_source = (int)g->layout.messages_per_source;
  P->hidden = c->hidden;
  P->top_k = c->top_k;
  P->num_experts = c->num_experts;
  P->local_experts = moe->local_experts;
  P->world_size = comm->world_size;
  P->slots = moe->slots;
  P->scale_groups = c->hidden / SY_MOE_FP8_GROUP;
  P->wire = (int)c->wire;
  P->per_expert = (c->flags & SY_MOE_PER_EXPERT) != 0;
  P->expert_token_masks = g->expert_token_masks;
  const uint64_t L = (uint64_t)moe->local_experts;
  P->local_experts_magic = (uint64_t)c->num_experts * L < (1ull << 32) ? ((1ull << 32) + L - 1) / L : 0;
}

/* A call's tokens (dispatch_send; NULL in combine_recv), num_tokens, ids and weights. */
static void set_args(moe_params *P, const sy_moe_dispatch_args_t *a) {
  P->tokens = (const uint16_t *)a->tokens;
  P->num_tokens = a->num_tokens;
  P->expert_ids = a->expert_ids;
  P->id64 = a->id_type == SY_INDEX_INT64;
  P->weights = a->weights;
}

static void free_gpu(sy_comm_t comm, moe_gpu *g, bool free_ws) {
  if (g->staging_registered && !comm->destroyed) nvshmemx_buffer_unregister(g->staging); /* NVSHMEM still up */
  if (g->staging) cudaFree(g->staging);
  if (g->local_blob) cudaFree(g->local_blob);
  if (free_ws && g->ws) sy__mem_free_within(comm, g->ws); /* a create's failure: its sy_last_error kept */
  free(g);
}

/* Whether every rank's create succeeded (s: this rank's), after a barrier that also orders every rank's zeroed
 * counters before anyone raises one. */
static sy_status_t agree_on_success(sy_comm_t comm, sy_status_t s) {
  const int W = comm->world_size;
  nvshmem_barrier_all();
  int ok = s == SY_SUCCESS, oks[1024];
  int *all_ok = W <= 1024 ? oks : (int *)malloc(sizeof(int) * (size_t)W);
  sy_status_t ag = all_ok ? sy_comm_allgather_host(comm, &ok, all_ok, sizeof ok) : SY_ERR_NO_MEMORY;
  for (int r = 0; ag == SY_SUCCESS && r < W; r++)
    if (!all_ok[r]) ag = SY_ERR_INTERNAL;
  if (all_ok && all_ok != oks) free(all_ok);
  return s == SY_SUCCESS ? ag : s;
}

extern "C" sy_status_t sy__cuda_moe_create(sy_comm_t comm, struct sy_moe *moe) {
  cuda_state *st = state_of(comm);
  const sy_moe_config_t *c = &moe->config;
  const int W = comm->world_size, T = c->max_tokens, K = c->top_k;
  sy_status_t s = SY_SUCCESS; /* core/moe.c checked that every rank configures alike */

  moe_gpu *g = (moe_gpu *)calloc(1, sizeof *g);
  if (!g) return SY_ERR_NO_MEMORY;
  SY_CHECK(sy__moe_layout(c, W, &g->layout));
  /* Shared memory: the same on every rank (same configuration, same device kind), so the verdict is too. */
  int smem_max = 0;
  SY_CUDA_CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, comm->device));
  const size_t M = g->layout.messages_per_source;
  /* dispatch_send's positions from per-expert token masks when they take at most 32 KiB (e.g. 256 experts, 1,024
   * tokens), else by counting (slower at many tokens: bench/NOTES.md, "MoE dispatch: routing") */
  const send_smem plain = send_smem_layout(W, T, K, c->num_experts, (int)M, false, 0);
  const send_smem masked = send_smem_layout(W, T, K, c->num_experts, (int)M, true, 0);
  const size_t mask_bytes = masked.bytes - plain.bytes;
  g->expert_token_masks = mask_bytes <= 32768 && masked.bytes + 2048 <= (size_t)smem_max;
  g->ds_smem = g->expert_token_masks ? masked.bytes : plain.bytes;
  g->dr_smem = ((size_t)W + 1) * 4 + (size_t)c->num_experts * 4; /* start[W + 1], first[W][L] */
  g->cs_smem = (size_t)W * sizeof(char *) + ((size_t)W + 1) * 4;
  const size_t static_reserve = 2048; /* the kernels' static shared arrays */
  if (g->ds_smem + static_reserve > (size_t)smem_max || g->dr_smem + static_reserve > (size_t)smem_max ||
      (uint64_t)W * (uint64_t)M * (uint64_t)K >= (1ull << 31)) {
    SY_WARN(
        "sy_moe_create: config->max_tokens=%d, top_k=%d, num_experts=%d on %d ranks needs %zu bytes of shared "
        "memory per block (max_tokens x (top_k + 3) x 4 for the ids and routing, num_experts x 4 for the counts), "
        "more than this GPU's %d; lower max_tokens",
        T, K, c->num_experts, W, (g->ds_smem > g->dr_smem ? g->ds_smem : g->dr_smem) + static_reserve, smem_max);
    free(g);
    return SY_ERR_UNSUPPORTED;
  }
  g->blocks = st->num_sms;
  /* The one-call dispatch places this rank's own entries itself (SY_MOE_DIRECT; auto: per expert, where one
   * message per (token, expert) would otherwise be written and copied again, and from blocks / 2 tokens: below
   * that, and in the default mode, the grid-wide copy of the receiving part is the faster; bench/NOTES.md, "MoE
   * dispatch: own tokens placed by the sender (direct)") if its list fits. */
  const char *direct_env = sy__env_str(SY_ENVID_SY_MOE_DIRECT);
  int want_direct = (c->flags & SY_MOE_PER_EXPERT) != 0;
  g->direct_auto = strcmp(direct_env, "auto") == 0;
  sy_status_t env_status = SY_SUCCESS; /* a malformed value fails the create on every rank, below */
  if (strcmp(direct_env, "auto") != 0 && sy__parse_bool(direct_env, &want_direct) != SY_SUCCESS) {
    SY_WARN("sy_moe_create: environment variable SY_MOE_DIRECT=%s is malformed (want auto, 0 or 1); nothing created",
            direct_env);
    env_status = SY_ERR_INVALID_ARG;
  }
  g->own_cap = (T + g->blocks - 1) / g->blocks * K;
  const size_t direct_smem =
      send_smem_layout(W, T, K, c->num_experts, (int)M, g->expert_token_masks, g->own_cap).bytes_direct;
  g->direct = want_direct && direct_smem + static_reserve <= (size_t)smem_max;
  g->fd_smem = g->direct ? direct_smem : g->ds_smem;
  if (g->fd_smem < g->dr_smem) g->fd_smem = g->dr_smem;
  g->stage_bytes = align_up(g->layout.msg_bytes + (size_t)MOE_MAX_K * g->layout.payload_offset, 256);
  if (g->stage_bytes < align_up((size_t)c->hidden * 2, 256)) g->stage_bytes = align_up((size_t)c->hidden * 2, 256);

  s = sy_mem_alloc(comm, g->layout.total, (void **)&g->ws); /* collective: every rank, or none */
  if (s != SY_SUCCESS) {
    free(g);
    return s;
  }
  /* Puts are needed where some peer is not load/store reachable (or SY_FORCE_PUT): they are staged in device
   * memory, registered with NVSHMEM only where a peer really is remote (a put to a peer that NVSHMEM reaches
   * over P2P reads any device memory). The verdicts may differ between ranks; nothing collective depends on
   * them. */
  bool need_puts = false, remote_peer = false;
  for (int p = 0; p < W; p++) {
    if (p == comm->rank) continue;
    remote_peer = remote_peer || !nvshmem_ptr(g->ws, p);
    need_puts = need_puts || st->ctx.force_put || !nvshmem_ptr(g->ws, p);
  }
  for (int p = 0; p < W && W <= MOE_PEER_TAB; p++)
    g->peer_tab[p] = p == comm->rank ? g->ws : st->ctx.force_put ? NULL : (char *)nvshmem_ptr(g->ws, p);
  const size_t local_bytes = align_up(sizeof(moe_local) + (size_t)g->blocks * 8, 256) +
                             align_up((size_t)T * K * 4, 256) + (size_t)W * M * K * 4;
  cudaError_t err = cudaMalloc((void **)&g->local_blob, local_bytes);
  if (err == cudaSuccess) err = cudaMemset(g->local_blob, 0, local_bytes);
  if (err == cudaSuccess && need_puts) err = cudaMalloc((void **)&g->staging, (size_t)g->blocks * g->stage_bytes);
  if (err == cudaSuccess) err = cudaMemset(g->ws + g->layout.counters_offset, 0, g->layout.counters_bytes);
  /* This configuration's kernel instances (the fused dispatch with and without the direct part). */
  const int mode = mode_of(comm, c);
  const struct {
    moe_kernel_t kernel;
    size_t smem;
  } used[] = {{dispatch_send_kernels[mode], g->ds_smem},          {dispatch_recv_kernels[mode], g->dr_smem},
              {combine_send_kernels[mode], g->cs_smem},           {dispatch_kernels[mode], g->fd_smem},
              {dispatch_kernels[mode | MODE_DIRECT], g->fd_smem}, {combine_kernels[mode], g->cs_smem}};
  for (const auto &u : used)
    if (err == cudaSuccess && raise_smem_limit((const void *)u.kernel, u.smem) != SY_SUCCESS)
      err = cudaErrorInvalidValue;
  /* The fused kernels need one resident block per SM of their grid: check that one fits at all. */
  g->fused_ok = true;
  for (int i = 3; i < 6 && err == cudaSuccess; i++) {
    if (i == 4 && !g->direct) continue;
    int fit = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, used[i].kernel, MOE_THREADS, used[i].smem);
    g->fused_ok = g->fused_ok && fit >= 1;
  }
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) s = cuda_error(err, "MoE state", __FILE__, __LINE__);
  if (s == SY_SUCCESS && g->staging && remote_peer) {
    if (nvshmemx_buffer_register(g->staging, (size_t)g->blocks * g->stage_bytes) != 0) {
      SY_WARN("sy_moe_create: nvshmemx_buffer_register of %zu bytes of put staging failed",
              (size_t)g->blocks * g->stage_bytes);
      s = SY_ERR_NVSHMEM;
    } else {
      g->staging_registered = true;
    }
  }
  char *p = g->local_blob;
  g->local = (moe_local *)p;
  g->calls = (uint64_t *)(p + align_up(sizeof(moe_local), 8));
  p += align_up(sizeof(moe_local) + (size_t)g->blocks * 8, 256);
  g->ids = (int32_t *)p;
  p += align_up((size_t)T * K * 4, 256);
  g->slot_of = (int32_t *)p;
  if (s == SY_SUCCESS) s = env_status;
  s = agree_on_success(comm, s);
  if (s != SY_SUCCESS) {
    free_gpu(comm, g, true);
    return s;
  }
  SY_INFO("moe: workspace %zu bytes, %d blocks per kernel, %s, one-call forms %s", g->layout.total, g->blocks,
          need_puts ? "puts to some peers" : "stores to every peer",
          !g->fused_ok ? "as two kernels (a fused block does not fit on an SM)"
          : g->direct  ? "fused, own tokens placed by the sender"
                       : "fused");
  moe->backend_state = g;
  return SY_SUCCESS;
}

extern "C" void sy__cuda_moe_destroy(sy_comm_t comm, struct sy_moe *moe) {
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  if (!g) return;
  cudaDeviceSynchronize();
  /* After an error the workspace stays with the communicator, which frees it (a peer may still write). */
  free_gpu(comm, g, comm->error == SY_SUCCESS);
  moe->backend_state = NULL;
}

extern "C" sy_status_t sy__cuda_moe_dispatch_send(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *a,
                                                  cudaStream_t stream) {
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  moe_params P;
  fill_params(comm, moe, g, &P);
  set_args(&P, a);
  const int blocks = a->num_tokens < 1 ? 1 : a->num_tokens < g->blocks ? a->num_tokens : g->blocks;
  return launch(dispatch_send_kernels[mode_of(comm, &moe->config)], blocks, g->ds_smem, stream, P);
}

extern "C" sy_status_t sy__cuda_moe_dispatch_recv(sy_comm_t comm, struct sy_moe *moe, const sy_moe_recv_t *recv,
                                                  cudaStream_t stream) {
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  moe_params P;
  fill_params(comm, moe, g, &P);
  P.recv = *recv;
  return launch(dispatch_recv_kernels[mode_of(comm, &moe->config)], g->blocks, g->dr_smem, stream, P);
}

extern "C" sy_status_t sy__cuda_moe_combine_send(sy_comm_t comm, struct sy_moe *moe, const void *expert_out,
                                                 cudaStream_t stream) {
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  moe_params P;
  fill_params(comm, moe, g, &P);
  P.expert_out = (const uint16_t *)expert_out;
  return launch(combine_send_kernels[mode_of(comm, &moe->config)], g->blocks, g->cs_smem, stream, P);
}

extern "C" sy_status_t sy__cuda_moe_combine_recv(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *a,
                                                 void *out, cudaStream_t stream) {
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  moe_params P;
  fill_params(comm, moe, g, &P);
  set_args(&P, a);
  P.out = (uint16_t *)out;
  const int blocks = a->num_tokens < 1 ? 1 : a->num_tokens < g->blocks ? a->num_tokens : g->blocks;
  return launch(combine_recv_kernels[mode_of(comm, &moe->config)], blocks, 0, stream, P);
}

/* The one-call forms: both halves in one kernel, on a grid of at most one block per SM (every block resident,
 * as the receiving part waits for the sending part of other blocks), unless SY_MOE_FUSED=0. */
static bool fused_enabled(void) {
  static int fused = -1;
  if (fused < 0) {
    int on = 1;
    if (sy__env_bool(SY_ENVID_SY_MOE_FUSED, &on) != SY_SUCCESS) on = 1;
    fused = on;
  }
  return fused != 0;
}

extern "C" sy_status_t sy__cuda_moe_dispatch(sy_comm_t comm, struct sy_moe *moe, const sy_moe_dispatch_args_t *a,
                                             const sy_moe_recv_t *recv, cudaStream_t stream) {
  if (!fused_enabled() || !((moe_gpu *)moe->backend_state)->fused_ok) {
    SY_CHECK(sy__cuda_moe_dispatch_send(comm, moe, a, stream));
    return sy__cuda_moe_dispatch_recv(comm, moe, recv, stream);
  }
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  moe_params P;
  fill_params(comm, moe, g, &P);
  set_args(&P, a);
  P.recv = *recv;
  const bool direct = g->direct && (!g->direct_auto || a->num_tokens * 2 >= g->blocks);
  P.own_cap = g->own_cap;
  return launch(dispatch_kernels[mode_of(comm, &moe->config) | (direct ? MODE_DIRECT : 0)], g->blocks, g->fd_smem,
                stream, P);
}

extern "C" sy_status_t sy__cuda_moe_combine(sy_comm_t comm, struct sy_moe *moe, const void *expert_out,
                                            const sy_moe_dispatch_args_t *a, void *out, cudaStream_t stream) {
  if (!fused_enabled() || !((moe_gpu *)moe->backend_state)->fused_ok) {
    SY_CHECK(sy__cuda_moe_combine_send(comm, moe, expert_out, stream));
    return sy__cuda_moe_combine_recv(comm, moe, a, out, stream);
  }
  moe_gpu *g = (moe_gpu *)moe->backend_state;
  moe_params P;
  fill_params(comm, moe, g, &P);
  set_args(&P, a);
  P.expert_out = (const uint16_t *)expert_out;
  P.out = (uint16_t *)out;
  return launch(combine_kernels[mode_of(comm, &moe->config)], g->blocks, g->cs_smem, stream, P);
}
