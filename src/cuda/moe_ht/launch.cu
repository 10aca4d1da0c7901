/*
 * launch.cu — the host side of the MoE high-throughput kernels: create (the workspace, the device-local state,
 * the layout scratch, the mapped counts of the exact mode, the put path's staging where some peer is not
 * load/store reachable or SY_FORCE_PUT is set),
 * destroy, and the launches (layout: one kernel and, in the exact mode, the bounded host wait; dispatch and
 * combine: one kernel each).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/moe_ht/ht.cuh"
#include "cuda/moe_ht/pipe.cuh"
#include "ref/moe_ht_ref.h"

using namespace sy;

struct ht_gpu {
  ht_ws_layout wl;
  sy_moe_ht_handle_layout_t hl;
  char *ws;
  char *peer_ws[HT_PEER_TAB];
  char *local_blob; /* ht_local, sent, consumed, masks, word_prefix, expert_count */
  ht_local *local;
  uint64_t *sent, *consumed;
  uint32_t *masks;
  int32_t *word_prefix, *expert_count;
  size_t mask_bytes;
  char *mapped;  /* host: [2 L + 1] int32, then the stamp */
  char *staging; /* the put path: a slot per (block, warp); NULL where every peer is reachable */
  size_t stage_bytes;
  bool staging_registered;
  int32_t *mapped_counts_dev;
  uint64_t *mapped_stamp_dev;
  size_t smem, pipe_smem; /* the data kernels' dynamic shared memory: the dispatch's, the combine's (pipes) */
  int recv_own;           /* ht_params.recv_own */
  int own_queue;          /* SY_HT_OWN_QUEUE: 1, 0, or -1 (auto: the queue, but not for the combine's backward
                           * at world 1: sy__cuda_moe_ht_combine_backward) */
  int owner_ahead;        /* SY_HT_OWNER_AHEAD, resolved: the combine runs as sy_ht_combine_ahead */
  uint64_t *probe;        /* SY_HT_PROBE: [HT_PROBE_KERNELS][2 C][HT_PROBE_SLOTS] */
  char *quant;            /* SY_HT_PREQUANT, FP8 wires: [max_tokens][hidden] E4M3, then */
  float *quant_scales;    /* [max_tokens][hidden / 128] fp32: the tokens quantised ahead of the dispatch */
  int scale_hint;         /* SY_HT_SCALE_HINT, resolved (FP8 wires only): the dispatch runs as sy_ht_dispatch_hint */
  int roles;              /* sy__moe_ht_roles: a channel's two roles on one block's warps (ht.cuh) */
  int pull;               /* sy__moe_ht_pull: the dispatch pulled (pull.cu: sy_ht_dispatch_pull) */
  int pull_pipes;         /* then its pipelines a block, HT_PULL_STAGES stages each, */
  uint32_t pull_smem;     /* where the stages start in its dynamic shared memory, */
  size_t pull_stage_bytes, pull_kernel_smem; /* a stage's bytes, its dynamic shared memory, */
  int32_t *pull_tok;                         /* [W][max_tokens] the token of each message (scratch) */
  cudaStream_t pull_side;                    /* SY_HT_PULL_OVERLAP: the tokens' copy beside the pull kernel, */
  cudaEvent_t pull_fork, pull_join;          /* forked from and joined to the call's stream */
  int send_warps;                            /* then the dispatch kernel's role 0 warps (SY_HT_SEND_WARPS), */
  int expert_warps;                          /* the combine kernel's (SY_HT_EXPERT_WARPS) */
  int blocks;                                /* the data kernels' grid: C by warps, 2 C by blocks */
  int layout_resident; /* the layout kernel's blocks the GPU holds at once (its grid barriers need them all) */
  uint32_t role_state, pipe_role_state; /* by warps: role 0's per-peer state in the dispatch's, the combine's smem */
  char probe_path[256];
};

/* SY_HT_PROBE's records: the dispatch, the combine (weighted), the combine's backward (the dispatch kernel), the
 * dispatch's backward (the combine kernel without weights: an unweighted combine lands there too) — each the last
 * such call's. */
enum { HT_PROBE_KERNELS = 4 };
static const char *const probe_kernel[HT_PROBE_KERNELS] = {"dispatch", "combine", "combine_bwd", "dispatch_bwd"};

static void probe_setup(sy_comm_t comm, ht_gpu *g) {
  const char *pattern = sy__env_str(SY_ENVID_SY_HT_PROBE);
  if (!pattern || !*pattern) return;
  size_t n = 0; /* %r: the rank */
  for (const char *p = pattern; *p && n + 16 < sizeof g->probe_path; p++) {
    if (p[0] == '%' && p[1] == 'r') n += (size_t)snprintf(g->probe_path + n, 16, "%d", comm->rank), p++;
    else g->probe_path[n++] = *p;
  }
  g->probe_path[n] = '\0';
  const size_t bytes = (size_t)HT_PROBE_KERNELS * 2 * g->wl.channels * HT_PROBE_SLOTS * 8;
  if (cudaMalloc((void **)&g->probe, bytes) != cudaSuccess || cudaMemset(g->probe, 0, bytes) != cudaSuccess) {
    SY_WARN("SY_HT_PROBE: no device memory for %zu bytes of probes; not probing", bytes);
    cudaFree(g->probe);
    g->probe = NULL;
  }
}

/* At destroy: a line per (kernel, block) that ran: times in us from the kernel's first block's start. A row is the
 * last launch's unit (ht.cuh: role r of first channel c at r B + c), labelled by the object's C: with a call's
 * budget below config.num_sms (sy_moe_ht_set_num_sms) the labels are off and rows of earlier, larger calls stay. */
static void probe_write(const ht_gpu *g, int rank) {
  const size_t per = (size_t)2 * g->wl.channels * HT_PROBE_SLOTS, C = (size_t)g->wl.channels;
  uint64_t *h = (uint64_t *)malloc(per * HT_PROBE_KERNELS * 8);
  FILE *f = h ? fopen(g->probe_path, "w") : NULL;
  if (!f || cudaMemcpy(h, g->probe, per * HT_PROBE_KERNELS * 8, cudaMemcpyDeviceToHost) != cudaSuccess) {
    SY_WARN("SY_HT_PROBE: cannot write %s", g->probe_path);
    if (f) fclose(f);
    free(h);
    return;
  }
  fprintf(f, "# rank kernel block role start_us end_us own_us wait_us work_us rounds items sync_us plan_us\n");
  if (SY_HT_PROBE_BINS) /* then after each block's line its own, wait and work in bins (ht.cuh) */
    fprintf(f, "#bins rank kernel block role own[%d] wait[%d] work[%d] (us; bins of %.1f us)\n", SY_HT_PROBE_BINS,
            SY_HT_PROBE_BINS, SY_HT_PROBE_BINS, (double)(1ull << SY_HT_PROBE_BIN_SHIFT) / 1e3);
  for (int k = 0; k < HT_PROBE_KERNELS; k++) {
    const uint64_t *r = h + per * k;
    uint64_t t0 = 0;
    for (size_t b = 0; b < 2 * C; b++)
      if (r[b * HT_PROBE_SLOTS + PR_START] && (!t0 || r[b * HT_PROBE_SLOTS + PR_START] < t0))
        t0 = r[b * HT_PROBE_SLOTS + PR_START];
    for (size_t b = 0; b < 2 * C; b++) {
      const uint64_t *v = r + b * HT_PROBE_SLOTS;
      if (!v[PR_START]) continue;
      fprintf(f, "%d %s %zu %s %.2f %.2f %.2f %.2f %.2f %llu %llu %.2f %.2f\n", rank, probe_kernel[k], b,
              b < C ? "send" : "recv", (v[PR_START] - t0) / 1e3, (v[PR_END] - t0) / 1e3, v[PR_OWN] / 1e3,
              v[PR_WAIT] / 1e3, v[PR_WORK] / 1e3, (unsigned long long)v[PR_ROUNDS], (unsigned long long)v[PR_ITEMS],
              v[PR_SYNC] / 1e3, v[PR_PLAN] / 1e3);
      if (!SY_HT_PROBE_BINS) continue;
      fprintf(f, "#bins %d %s %zu %s", rank, probe_kernel[k], b, b < C ? "send" : "recv");
      for (int i = 0; i < 3 * SY_HT_PROBE_BINS; i++) fprintf(f, " %.2f", v[PR_BINS + i] / 1e3);
      fprintf(f, "\n");
    }
  }
  fclose(f);
  free(h);
}

/* This launch's probe record, or NULL. */
static uint64_t *probe_of(const ht_gpu *g, int kernel) {
  return g->probe ? g->probe + (size_t)kernel * 2 * g->wl.channels * HT_PROBE_SLOTS : NULL;
}

static cuda_state *state_of(sy_comm_t comm) { return (cuda_state *)comm->backend_state; }
static size_t align_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

/* The layout kernel's dynamic shared memory (ht_layout_smem: the tallies, or the exchange's ok[W] and rows[L + 1]). */
static size_t layout_smem(sy_comm_t comm, const struct sy_moe_ht *moe, const ht_gpu *g) {
  return ht_layout_smem(moe->config.num_experts, comm->world_size, g->wl.channels, moe->local_experts);
}

/* The dispatch's split of a channel's own tokens (their rows here) between its two blocks, in 1/1024 for the
 * receiving one: that block also expands every message from the other ranks, the sending one writes the messages.
 * With uniform routing a token has K/W rows here, K (W - 1)/W rows come from the other ranks, and it goes to
 * m = (W - 1)(1 - (1 - 1/W)^K) other ranks: the receiving block's share q of the own rows evens the two,
 * m + (1 - q) own = remote + q own, clamped to [0, 1/2] (1/2 at world 1: no messages). SY_HT_RECV_OWN overrides. */
static int recv_own_share(int W, int K) {
  long long env = -1;
  if (sy__env_int(SY_ENVID_SY_HT_RECV_OWN, &env) == SY_SUCCESS && env >= 0) return env > 1024 ? 1024 : (int)env;
  const double own = (double)K / W, remote = (double)K * (W - 1) / W, m = (W - 1) * (1.0 - pow(1.0 - 1.0 / W, K));
  double q = (m + own - remote) / (2 * own);
  q = q < 0 ? 0 : q > 0.5 ? 0.5 : q;
  return (int)(q * 1024 + 0.5);
}

/* The data kernels' instances for this object: by warps or by blocks (SY_HT_ROLES), the FP8 scales' L2 policy
 * (SY_HT_SCALE_HINT), the combine's owners ahead (SY_HT_OWNER_AHEAD). */
typedef void (*ht_kernel)(ht_params);
static ht_kernel dispatch_fn(const ht_gpu *g, bool hint) {
  if (g->roles) return hint ? sy_ht_dispatch_hint_roles : sy_ht_dispatch_roles;
  return hint ? sy_ht_dispatch_hint : sy_ht_dispatch;
}
static ht_kernel combine_fn_of(const ht_gpu *g) {
  if (g->roles) return g->owner_ahead ? sy_ht_combine_ahead_roles : sy_ht_combine_roles;
  return g->owner_ahead ? sy_ht_combine_ahead : sy_ht_combine;
}

static void free_gpu(sy_comm_t comm, ht_gpu *g, bool free_ws) {
  if (g->probe) cudaFree(g->probe);
  if (g->quant) cudaFree(g->quant);
  if (g->pull_tok) cudaFree(g->pull_tok);
  if (g->pull_fork) cudaEventDestroy(g->pull_fork);
  if (g->pull_join) cudaEventDestroy(g->pull_join);
  if (g->pull_side) cudaStreamDestroy(g->pull_side);
  if (g->staging_registered && !comm->destroyed) nvshmemx_buffer_unregister(g->staging); /* NVSHMEM still up */
  if (g->staging) cudaFree(g->staging);
  if (g->local_blob) cudaFree(g->local_blob);
  if (g->mapped) cudaFreeHost(g->mapped);
  if (free_ws && g->ws) sy__mem_free_within(comm, g->ws); /* a create's failure: its sy_last_error kept */
  free(g);
}

static sy_status_t create_local(sy_comm_t comm, struct sy_moe_ht *moe, ht_gpu *g) {
  const sy_moe_ht_config_t *c = &moe->config;
  const size_t W = (size_t)comm->world_size, C = (size_t)g->wl.channels, E = (size_t)c->num_experts;
  const size_t words = ((size_t)c->max_tokens + 31) / 32;
  g->mask_bytes = align_up(E * words * 4, 256);
  const size_t local_bytes =
      align_up(sizeof(ht_local), 256) + align_up(2 * W * C * 8, 256) + 2 * g->mask_bytes + align_up((E + 1) * 4, 256);
  SY_CUDA_CHECK(cudaMalloc((void **)&g->local_blob, local_bytes));
  SY_CUDA_CHECK(cudaMemset(g->local_blob, 0, local_bytes));
  char *p = g->local_blob;
  g->local = (ht_local *)p, p += align_up(sizeof(ht_local), 256);
  g->sent = (uint64_t *)p, g->consumed = g->sent + W * C, p += align_up(2 * W * C * 8, 256);
  g->masks = (uint32_t *)p, p += g->mask_bytes;
  g->word_prefix = (int32_t *)p, p += g->mask_bytes;
  g->expert_count = (int32_t *)p;
  const size_t L = (size_t)moe->local_experts;
  SY_CUDA_CHECK(cudaHostAlloc((void **)&g->mapped, align_up((2 * L + 1) * 4, 8) + 8, cudaHostAllocMapped));
  memset(g->mapped, 0, align_up((2 * L + 1) * 4, 8) + 8);
  SY_CUDA_CHECK(cudaHostGetDevicePointer((void **)&g->mapped_counts_dev, g->mapped, 0));
  g->mapped_stamp_dev = (uint64_t *)((char *)g->mapped_counts_dev + align_up((2 * L + 1) * 4, 8));
  g->recv_own = recv_own_share((int)W, c->top_k);
  long long queue = -1;
  SY_CHECK(sy__env_int(SY_ENVID_SY_HT_OWN_QUEUE, &queue));
  g->own_queue = queue < 0 ? -1 : queue > 0;
  /* the combine's owners a batch ahead (faster at world 1 and 2 measured: bench/NOTES.md, run 37) */
  int ahead = 1;
  SY_CHECK(sy__env_bool(SY_ENVID_SY_HT_OWNER_AHEAD, &ahead));
  g->owner_ahead = ahead;
  probe_setup(comm, g);
  /* the pulled BF16 / given-FP8 dispatch's copy of the tokens beside its kernel (experimental: bench/NOTES.md) */
  long long overlap = 0;
  SY_CHECK(sy__env_int(SY_ENVID_SY_HT_PULL_OVERLAP, &overlap));
  if (g->pull && overlap > 0 && (c->wire == SY_MOE_WIRE_BF16 || c->wire == SY_MOE_WIRE_FP8_GIVEN)) {
    SY_CUDA_CHECK(cudaStreamCreateWithFlags(&g->pull_side, cudaStreamNonBlocking));
    SY_CUDA_CHECK(cudaEventCreateWithFlags(&g->pull_fork, cudaEventDisableTiming));
    SY_CUDA_CHECK(cudaEventCreateWithFlags(&g->pull_join, cudaEventDisableTiming));
  }
  /* the FP8 wires' tokens quantised ahead of the dispatch (auto: from world 2, where the sending blocks'
   * quantisation held the dispatch back; at world 1 the extra pass over the tokens costs more: bench/NOTES.md) */
  long long prequant = -1;
  SY_CHECK(sy__env_int(SY_ENVID_SY_HT_PREQUANT, &prequant));
  if (!g->pull && (prequant > 0 || (prequant < 0 && W > 1)) && /* (pulled: quantised into the workspace's copy) */
      (c->wire == SY_MOE_WIRE_FP8 || c->wire == SY_MOE_WIRE_FP8_UE8M0)) {
    const size_t T = (size_t)c->max_tokens, H = (size_t)c->hidden;
    SY_CUDA_CHECK(cudaMalloc((void **)&g->quant, align_up(T * H, 256) + T * (H / SY_MOE_FP8_GROUP) * 4));
    g->quant_scales = (float *)(g->quant + align_up(T * H, 256));
  }
  /* the rows' group-major scales under an L2 evict_last policy (auto: where the dispatch holds at least half the
   * GPU's SMs; measured faster at 132 SMs of 132 and slower at 16: bench/NOTES.md) */
  long long hint = -1;
  SY_CHECK(sy__env_int(SY_ENVID_SY_HT_SCALE_HINT, &hint));
  int sms = 0, hdev = 0;
  SY_CUDA_CHECK(cudaGetDevice(&hdev));
  SY_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, hdev));
  g->scale_hint = c->wire != SY_MOE_WIRE_BF16 && !(c->flags & SY_MOE_HT_SCALES_ROW_MAJOR) &&
                  (hint < 0 ? 2 * c->num_sms >= sms : hint > 0); /* row-major scales are contiguous: no policy */
  const size_t recv_smem = W * 24 + E * 4, send_smem = W * 24;
  g->smem = recv_smem > send_smem ? recv_smem : send_smem;
  if (g->roles) { /* both roles in a block: role 0's per-peer state (24 W bytes) after role 1's and rowbase */
    g->role_state = (uint32_t)align_up(g->smem, 16);
    g->smem = g->role_state + W * 24;
  }
  int optin = 0, dev = 0;
  SY_CUDA_CHECK(cudaGetDevice(&dev));
  SY_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  cudaFuncAttributes attr;
  if (g->pull) { /* pull.cu: rowbase [W][L], then HT_PULL_STAGES stages (a row, its FP8 scales) a pipeline */
    SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, sy_ht_dispatch_pull));
    const size_t row = c->wire == SY_MOE_WIRE_BF16 ? (size_t)c->hidden * 2
                                                   : (size_t)c->hidden + (size_t)(c->hidden / SY_MOE_FP8_GROUP) * 4;
    g->pull_stage_bytes = align_up(row, 128);
    g->pull_smem = (uint32_t)align_up(W * (size_t)moe->local_experts * 4, 128);
    const size_t lead = g->pull_smem + attr.sharedSizeBytes + 1024 + HT_PULL_ALIGN; /* (the stages' alignment) */
    const size_t room = (size_t)optin > lead ? (size_t)optin - lead : 0;
    const int fit = (int)(room / (HT_PULL_STAGES * g->pull_stage_bytes));
    g->pull_pipes = fit < HT_PULL_PIPES ? fit : HT_PULL_PIPES;
    if (g->pull_pipes < 1) {
      SY_WARN("sy_moe_ht_create: SY_HT_PULL: a %zu-byte row's %d stages do not fit the dispatch's shared memory (%d)",
              row, HT_PULL_STAGES, optin);
      return SY_ERR_UNSUPPORTED;
    }
    g->pull_kernel_smem = g->pull_smem + HT_PULL_ALIGN + (size_t)g->pull_pipes * HT_PULL_STAGES * g->pull_stage_bytes;
    SY_CHECK(raise_smem_limit((const void *)sy_ht_dispatch_pull, g->pull_kernel_smem));
    SY_CUDA_CHECK(cudaMalloc((void **)&g->pull_tok, W * (size_t)c->max_tokens * 4));
  }
  SY_CHECK(raise_smem_limit((const void *)dispatch_fn(g, false), g->smem));
  SY_CHECK(raise_smem_limit((const void *)dispatch_fn(g, true), g->smem));
  /* the combine gathers through a pipe a warp after that */
  g->pipe_smem = ht_pipes_at((int)W, (int)E) + HT_DWARPS * sizeof(ht_pipe) + SY_HT_PIPE_ALIGN;
  if (g->roles) {
    g->pipe_role_state = (uint32_t)align_up(g->pipe_smem, 16);
    g->pipe_smem = g->pipe_role_state + W * 24;
  }
  if (g->owner_ahead) { /* its two batches' plans take more static shared memory: the lockstep where it does not fit */
    SY_CUDA_CHECK(cudaFuncGetAttributes(
        &attr, g->roles ? (const void *)sy_ht_combine_ahead_roles : (const void *)sy_ht_combine_ahead));
    if (g->pipe_smem + attr.sharedSizeBytes > (size_t)optin) {
      SY_INFO(
          "moe_ht: %d experts on %d ranks: the combine's owners in lockstep (a batch ahead needs %zu bytes of "
          "shared memory, at most %d)",
          (int)E, (int)W, g->pipe_smem + attr.sharedSizeBytes, optin);
      g->owner_ahead = 0;
    }
  }
  const void *combine_fn = (const void *)combine_fn_of(g);
  SY_CUDA_CHECK(cudaFuncGetAttributes(&attr, combine_fn));
  if (g->pipe_smem + attr.sharedSizeBytes > (size_t)optin) {
    SY_WARN("sy_moe_ht_create: %d experts on %d ranks need %zu bytes of the combine's shared memory (at most %d)",
            (int)E, (int)W, g->pipe_smem + attr.sharedSizeBytes, optin);
    return SY_ERR_UNSUPPORTED;
  }
  SY_CHECK(raise_smem_limit(combine_fn, g->pipe_smem));
  /* From world 2 a channel's blocks wait on the peers' blocks (rings, inboxes), so a call's grid must be resident at
   * once on every rank: a budget past what the GPU holds would end every call in SY_ERR_TIMEOUT. Refused here,
   * naming the argument (every rank's create fails at the verdict). World 1 waits on no other block. */
  if (W > 1) {
    int per_d = 0, per_c = 0;
    SY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_d, dispatch_fn(g, g->scale_hint != 0), HT_DTHREADS,
                                                                g->smem));
    SY_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_c, (ht_kernel)combine_fn, HT_DTHREADS, g->pipe_smem));
    const int most = (per_d < per_c ? per_d : per_c) * sms;
    if (g->blocks > most) {
      SY_WARN(
          "sy_moe_ht_create: config->num_sms=%d: its dispatch and combine run %d blocks at once and this GPU holds "
          "%d of them (%d SMs); from world 2 every block of a call must be resident together (a smaller num_sms)",
          c->num_sms, g->blocks, most, sms);
      return SY_ERR_INVALID_ARG;
    }
  }
  const size_t xsmem = layout_smem(comm, moe, g);
  if (xsmem > 200 * 1024) {
    SY_WARN(
        "sy_moe_ht_create: %d local experts on %d ranks need %zu bytes of the layout's shared memory (at most "
        "%d)",
        moe->local_experts, comm->world_size, xsmem, 200 * 1024);
    return SY_ERR_UNSUPPORTED;
  }
  SY_CHECK(raise_smem_limit((const void *)sy_ht_layout, xsmem));
  int per_sm = 0;
  SY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sy_ht_layout, HT_LTHREADS, xsmem));
  g->layout_resident = per_sm * sms;
  if (g->layout_resident < 1) {
    SY_WARN("sy_moe_ht_create: the layout kernel (%d threads, %zu bytes of shared memory) fits on no SM", HT_LTHREADS,
            xsmem);
    return SY_ERR_UNSUPPORTED;
  }
  return SY_SUCCESS;
}

extern "C" sy_status_t sy__cuda_moe_ht_create(sy_comm_t comm, struct sy_moe_ht *moe) {
  cuda_state *st = state_of(comm);
  const int W = comm->world_size;
  if (W > HT_MAX_WORLD) {
    SY_WARN("sy_moe_ht_create: the cuda backend's high-throughput MoE runs on at most %d ranks (world size %d)",
            HT_MAX_WORLD, W);
    return SY_ERR_UNSUPPORTED;
  }
  ht_gpu *g = (ht_gpu *)calloc(1, sizeof *g);
  if (!g) return SY_ERR_NO_MEMORY;
  /* the roles' placement and split; a bad variable fails the create on every rank at the verdict below, after the
   * collective allocation every rank must join (the workspace's size is the placement's either way) */
  g->roles = sy__moe_ht_roles(&moe->config, W);
  g->pull = moe->pull; /* (SY_HT_PULL as every rank resolved it: core/moe_ht.c) */
  sy_status_t env_st = SY_SUCCESS;
  long long roles = -1, sw = 6, ew = 8, pull = -1;
  if (sy__env_int(SY_ENVID_SY_HT_PULL, &pull) != SY_SUCCESS) {
    SY_WARN("sy_moe_ht_create: SY_HT_PULL=%s: an integer (0 push, a positive value pull, negative auto)",
            getenv("SY_HT_PULL"));
    env_st = SY_ERR_INVALID_ARG;
  }
  long long pull_sms = 64;
  if (sy__env_int(SY_ENVID_SY_HT_PULL_SMS, &pull_sms) != SY_SUCCESS || pull_sms < 0 || pull_sms > INT32_MAX) {
    SY_WARN("sy_moe_ht_create: SY_HT_PULL_SMS=%s: an SM count, 0 or more", getenv("SY_HT_PULL_SMS"));
    env_st = SY_ERR_INVALID_ARG;
  }
  if (sy__env_int(SY_ENVID_SY_HT_ROLES, &roles) != SY_SUCCESS ||
      sy__env_int(SY_ENVID_SY_HT_SEND_WARPS, &sw) != SY_SUCCESS ||
      sy__env_int(SY_ENVID_SY_HT_EXPERT_WARPS, &ew) != SY_SUCCESS || sw < 2 || sw > HT_DWARPS - 2 || ew < 2 ||
      ew > HT_DWARPS - 2) {
    const char *r = getenv("SY_HT_ROLES"), *a = getenv("SY_HT_SEND_WARPS"), *b = getenv("SY_HT_EXPERT_WARPS");
    SY_WARN(
        "sy_moe_ht_create: SY_HT_ROLES=%s, SY_HT_SEND_WARPS=%s, SY_HT_EXPERT_WARPS=%s: the first an integer, the "
        "others each 2 to %d (warps of a block's %d)",
        r ? r : "(unset)", a ? a : "(unset)", b ? b : "(unset)", HT_DWARPS - 2, HT_DWARPS);
    env_st = SY_ERR_INVALID_ARG;
    sw = 6, ew = 8;
  }
  g->send_warps = (int)sw;
  g->expert_warps = (int)ew;
  g->wl = sy__moe_ht_ws_layout(&moe->config, W, g->roles, g->pull);
  g->blocks = g->roles ? g->wl.channels : 2 * g->wl.channels;
  g->hl = sy__moe_ht_handle_layout(&moe->config, W);
  sy_status_t s = sy_mem_alloc(comm, g->wl.bytes, (void **)&g->ws); /* collective */
  if (s == SY_ERR_NO_MEMORY && moe->pull == 2) {
    /* auto's pull judged its heap by the bookkeeping (core/moe_ht.c: heap_left); where the heap itself (fragmented,
     * or sized by NVSHMEM_SYMMETRIC_SIZE) cannot hold the tokens' copy, every rank (the allocation's verdict is
     * joint) falls back to the push's smaller workspace, as auto would have chosen with less heap */
    SY_INFO("sy_moe_ht_create: the pulled dispatch's workspace (%zu bytes) does not fit the symmetric heap; pushing",
            g->wl.bytes);
    moe->pull = g->pull = 0;
    g->wl = sy__moe_ht_ws_layout(&moe->config, W, g->roles, 0);
    s = sy_mem_alloc(comm, g->wl.bytes, (void **)&g->ws);
  }
  if (s != SY_SUCCESS) {
    free(g);
    return s;
  }
  /* Stores where a peer is load/store reachable, NVSHMEM puts from a staging slot per (block, warp) elsewhere (or
   * everywhere but here with SY_FORCE_PUT); the staging is registered only where a peer is really remote. */
  bool need_puts = false, remote_peer = false;
  for (int p = 0; p < W; p++) {
    char *q = p == comm->rank ? g->ws : (char *)nvshmem_ptr(g->ws, p);
    remote_peer = remote_peer || !q;
    if (p != comm->rank && st->ctx.force_put) q = NULL;
    need_puts = need_puts || !q;
    if (p < HT_PEER_TAB) g->peer_ws[p] = q;
  }
  s = create_local(comm, moe, g);
  if (s == SY_SUCCESS) s = env_st;
  if (s == SY_SUCCESS && g->pull && need_puts) { /* every rank's verdict below: all fail together */
    SY_WARN("sy_moe_ht_create: SY_HT_PULL=%s needs every peer load/store reachable (rank %d reaches some by puts%s)",
            getenv("SY_HT_PULL"), comm->rank, st->ctx.force_put ? ", SY_FORCE_PUT" : "");
    s = SY_ERR_UNSUPPORTED;
  }
  if (s == SY_SUCCESS && need_puts) { /* (block 0's warp 0 also stages its inbox entries there) */
    g->stage_bytes = align_up(g->wl.msg_bytes + 32 * g->wl.payload_offset, 256);
    if (g->stage_bytes < g->wl.inbox_bytes) g->stage_bytes = align_up(g->wl.inbox_bytes, 256);
    const size_t bytes = (size_t)g->blocks * HT_DWARPS * g->stage_bytes;
    const cudaError_t err = cudaMalloc((void **)&g->staging, bytes);
    if (err != cudaSuccess) s = cuda_error(err, "cudaMalloc(moe_ht put staging)", __FILE__, __LINE__);
    else if (remote_peer) {
      if (nvshmemx_buffer_register(g->staging, bytes) != 0) {
        SY_WARN("sy_moe_ht_create: nvshmemx_buffer_register of %zu bytes of put staging failed", bytes);
        s = SY_ERR_NVSHMEM;
      } else {
        g->staging_registered = true;
      }
    }
  }
  if (s == SY_SUCCESS) {
    cudaError_t err = cudaMemset(g->ws, 0, g->wl.ring);
    /* the pull's counters too (pull.cu): the symmetric heap hands out an earlier object's bytes */
    if (err == cudaSuccess && g->pull) err = cudaMemset(g->ws + g->wl.pull_sync, 0, 16 + (size_t)W * 8);
    if (err == cudaSuccess) cudaDeviceSynchronize();
    else s = cuda_error(err, "cudaMemset(moe_ht workspace)", __FILE__, __LINE__);
  }
  /* every rank's verdict, after a barrier that orders every rank's zeroed counters before anyone writes one */
  nvshmem_barrier_all();
  int mine = s == SY_SUCCESS, *all = (int *)malloc(sizeof(int) * (size_t)W);
  sy_status_t ag = all ? sy_comm_allgather_host(comm, &mine, all, sizeof mine) : SY_ERR_NO_MEMORY;
  int all_ok = ag == SY_SUCCESS;
  for (int r = 0; all && ag == SY_SUCCESS && r < W; r++) all_ok &= all[r];
  free(all);
  if (s == SY_SUCCESS && !all_ok) s = ag != SY_SUCCESS ? ag : SY_ERR_INTERNAL;
  if (s != SY_SUCCESS) {
    free_gpu(comm, g, true);
    return s;
  }
  SY_INFO(
      "moe_ht: workspace %zu bytes (%d channels, %d-slot rings of %zu-byte messages), handle %zu bytes, %s, "
      "%s%s%s%s%s",
      g->wl.bytes, g->wl.channels, HT_SLOTS, g->wl.msg_bytes, g->hl.bytes,
      g->roles ? "a channel's two roles on one block's warps (SY_HT_ROLES)" : "a block a role",
      g->staging ? "puts to some peers" : "stores to every peer",
      g->quant ? ", FP8 quantised ahead (SY_HT_PREQUANT)" : "",
      g->scale_hint ? ", FP8 scales under an L2 policy (SY_HT_SCALE_HINT)" : "",
      g->owner_ahead ? ", the combine's owners a batch ahead (SY_HT_OWNER_AHEAD)" : "",
      g->pull ? ", the dispatch pulled (SY_HT_PULL)" : "");
  if (moe->config.recv_arena_bytes) moe->arena = g->ws + g->wl.arena;
  moe->backend_state = g;
  return SY_SUCCESS;
}

extern "C" void sy__cuda_moe_ht_destroy(sy_comm_t comm, struct sy_moe_ht *moe) {
  ht_gpu *g = (ht_gpu *)moe->backend_state;
  if (!g) return;
  cudaDeviceSynchronize();
  if (g->probe) probe_write(g, comm->rank);
  free_gpu(comm, g, comm->error == SY_SUCCESS); /* after an error the communicator frees the workspace */
  moe->backend_state = NULL;
}

/* The channels a call serves at once under its SM budget (sy_moe_ht_set_num_sms): every channel (config.num_sms),
 * or fewer, each block serving several in turn (ht.cuh: role_chan); and its grid, a block a channel's role (or, with
 * both roles in a block, a block a channel). */
static int call_channels(const struct sy_moe_ht *moe, const ht_gpu *g) {
  const int C = g->wl.channels, per = g->roles ? moe->call_sms : moe->call_sms / 2;
  return per < 1 ? 1 : per < C ? per : C;
}
static int call_blocks(const ht_gpu *g, int B) { return g->roles ? B : 2 * B; }
/* The data kernels' channels at world 1, where no ring is used (a channel is only a range of tokens, and of the own
 * rows' split between its two roles): a smaller budget cuts the tokens into its own B channels instead of serving
 * the object's C in turn, which measured the whole step's combine's backward +28% there at 16 SMs of 132
 * (bench/NOTES.md, run 52). From world 2 the rings are the object's channels. The layout keeps them at every world
 * size. */
static void data_channels(sy_comm_t comm, ht_params *P) {
  if (comm->world_size == 1) P->C = P->B;
}

static void fill(sy_comm_t comm, const struct sy_moe_ht *moe, const ht_gpu *g, const sy_moe_ht_call_t *call,
                 ht_params *P) {
  const sy_moe_ht_config_t *c = &moe->config;
  memset(P, 0, sizeof *P);
  P->ctx = state_of(comm)->ctx;
  P->ws = g->ws;
  memcpy(P->peer_ws, g->peer_ws, sizeof P->peer_ws);
  P->wl = g->wl;
  P->local = g->local;
  P->sent = g->sent;
  P->consumed = g->consumed;
  P->staging = g->staging;
  P->stage_bytes = g->stage_bytes;
  P->masks = g->masks;
  P->word_prefix = g->word_prefix;
  P->expert_count = g->expert_count;
  P->handle = (char *)call->handle;
  P->hl = g->hl;
  P->object = moe->id;
  P->world_size = comm->world_size;
  P->L = moe->local_experts;
  P->E = c->num_experts;
  P->T = c->max_tokens;
  P->K = c->top_k;
  P->kk = g->hl.kk;
  P->hidden = c->hidden;
  P->wire = (int)c->wire;
  P->alignment = c->expert_alignment;
  P->C = g->wl.channels;
  P->B = call_channels(moe, g);
  if (g->roles) P->role_warps = g->send_warps, P->role_state = g->role_state; /* the combine sets its own */
  P->pull_smem = g->pull_smem;
  P->pull_pipes = g->pull_pipes;
  P->pull_stage_bytes = (uint32_t)g->pull_stage_bytes;
  P->pull_tok = g->pull_tok;
  P->recv_own = g->recv_own;
  P->own_queue = g->own_queue != 0; /* auto, the combine's backward: sy__cuda_moe_ht_combine_backward */
  P->scales_row_major = (c->flags & SY_MOE_HT_SCALES_ROW_MAJOR) != 0;
  P->num_tokens = call->num_tokens;
  P->expert_ids = call->expert_ids;
  P->id64 = call->id_type == SY_INDEX_INT64;
  P->tokens = call->tokens;
  P->token_scales = call->token_scales;
  P->weights = call->weights;
  if (call->recv) P->recv = *call->recv;
  P->row_weights = call->row_weights;
  P->row_values = call->row_values;
  P->out = call->out;
  P->add = call->add;
  P->token_values = call->token_values;
  P->rows_in = call->rows_in;
  P->grad_row_weights = call->grad_row_weights;
}

/* The exact mode: waits (bounded by the communicator's timeout) until the layout kernel has stamped the mapped
 * counts with a layout number past `before`, then copies them out. */
static sy_status_t wait_counts(sy_comm_t comm, struct sy_moe_ht *moe, ht_gpu *g, uint64_t before, int32_t *out) {
  const size_t L = (size_t)moe->local_experts;
  volatile uint64_t *stamp = (volatile uint64_t *)(g->mapped + align_up((2 * L + 1) * 4, 8));
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (uint32_t polls = 0; *stamp <= before; polls++) {
    if ((polls & 1023u) == 1023u) {
      clock_gettime(CLOCK_MONOTONIC, &now);
      const uint64_t ms = (uint64_t)(now.tv_sec - t0.tv_sec) * 1000 + (uint64_t)((now.tv_nsec - t0.tv_nsec) / 1000000);
      if (ms > comm->timeout_ms + 1000) {
        SY_WARN(
            "sy_moe_ht_layout: the counts did not arrive within %llu ms (a peer that never entered the call, "
            "or an earlier kernel on the stream that does not end)",
            (unsigned long long)(comm->timeout_ms + 1000));
        return SY_ERR_TIMEOUT;
      }
      const sy_status_t e = sy__comm_health(comm);
      if (e != SY_SUCCESS) return e;
    }
  }
  __sync_synchronize();
  memcpy(out, g->mapped, (2 * L + 1) * 4);
  return SY_SUCCESS;
}

extern "C" sy_status_t sy__cuda_moe_ht_layout(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                              cudaStream_t stream) {
  ht_gpu *g = (ht_gpu *)moe->backend_state;
  if (call->host_counts) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    SY_CUDA_CHECK(cudaStreamIsCapturing(stream, &cs));
    if (cs != cudaStreamCaptureStatusNone) {
      SY_WARN(
          "sy_moe_ht_layout: host_counts (the exact mode) waits on the host and cannot be captured in a CUDA "
          "graph; pass NULL (the worst case) in a graph");
      return SY_ERR_INVALID_ARG;
    }
  }
  ht_params P;
  fill(comm, moe, g, call, &P);
  const size_t L = (size_t)moe->local_experts;
  const uint64_t before = *(volatile uint64_t *)(g->mapped + align_up((2 * L + 1) * 4, 8));
  if (call->host_counts) {
    P.host_counts = g->mapped_counts_dev;
    P.host_stamp = g->mapped_stamp_dev;
  }
  /* one kernel (layout.cu) within the SM budget (config.num_sms or the call's), as the dispatch and combine are: a
   * layout runs beside the expert GEMMs, which hold the other SMs. A block a 1,024 entries or 32 experts, and one
   * more for the exchange, at least one */
  const int64_t entries = (int64_t)call->num_tokens * moe->config.top_k, per = HT_LTHREADS / 32;
  int64_t need = (entries + HT_LTHREADS - 1) / HT_LTHREADS;
  if ((moe->config.num_experts + per - 1) / per > need) need = (moe->config.num_experts + per - 1) / per;
  if (need + 1 < moe->call_sms) need = need + 1;
  else need = moe->call_sms;
  const int blocks = (int)(need < g->layout_resident ? need : g->layout_resident); /* resident at once */
  SY_CHECK(launch_pdl(sy_ht_layout, blocks, HT_LTHREADS, layout_smem(comm, moe, g), stream, P));
  if (!call->host_counts) return SY_SUCCESS;
  return wait_counts(comm, moe, g, before, call->host_counts);
}

/* The pulled dispatch's copy of the caller's tokens (and given FP8 scales) into this rank's copy in the workspace. */
static cudaError_t copy_tokens(const struct sy_moe_ht *moe, const sy_moe_ht_call_t *call, char *q, float *qs,
                               cudaStream_t stream) {
  const size_t H = (size_t)moe->config.hidden, n = (size_t)call->num_tokens;
  if (n == 0) return cudaSuccess;
  const bool given = moe->config.wire == SY_MOE_WIRE_FP8_GIVEN;
  cudaError_t err = cudaMemcpyAsync(q, call->tokens, n * (given ? H : 2 * H), cudaMemcpyDeviceToDevice, stream);
  if (err == cudaSuccess && given)
    err = cudaMemcpyAsync(qs, call->token_scales, n * (H / SY_MOE_FP8_GROUP) * 4, cudaMemcpyDeviceToDevice, stream);
  return err;
}

extern "C" sy_status_t sy__cuda_moe_ht_dispatch(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                                cudaStream_t stream) {
  ht_gpu *g = (ht_gpu *)moe->backend_state;
  ht_params P;
  fill(comm, moe, g, call, &P);
  data_channels(comm, &P);
  P.probe = probe_of(g, 0);
  const size_t H = (size_t)moe->config.hidden, T = (size_t)moe->config.max_tokens, n = (size_t)call->num_tokens;
  /* pulled, or pushed through the rings (an object that pulls keeps its rings: the combines use them). By default a
   * wire whose tokens are copied before the kernel (BF16, given FP8) pushes above SY_HT_PULL_SMS SMs, where the
   * copy costs more than the pull saves (world 2, 132 SMs: BF16 event time 268 us pulled against 238 pushed, run 63);
   * every rank sets the same budget before the same call (sy_moe_ht_set_num_sms), so every rank takes the same way */
  const bool copied = moe->config.wire == SY_MOE_WIRE_BF16 || moe->config.wire == SY_MOE_WIRE_FP8_GIVEN;
  const bool pull = g->pull && !(moe->pull == 2 && copied && moe->call_sms > moe->pull_sms);
  /* SY_HT_PULL_OVERLAP: the copy beside the kernel, whose own items read the caller's tokens and scales by bulk
   * copies (16-byte aligned; otherwise this call copies first) */
  const bool beside = pull && copied && g->pull_side &&
                      (((uintptr_t)call->tokens | (uintptr_t)call->token_scales) & 15u) == 0; /* (scales NULL: BF16) */
  /* the pull (pull.cu): this rank's tokens (or their FP8 bytes and scales) into its copy in the workspace, which every
   * rank reads: by a copy engine, or quantised there; then the handle's ids and positions and the weights */
  char *pull_q = pull ? g->ws + g->wl.pull : NULL;
  float *pull_qs = pull ? (float *)(g->ws + g->wl.pull + T * H) : NULL;
  const bool quantise =
      moe->config.wire != SY_MOE_WIRE_BF16 && moe->config.wire != SY_MOE_WIRE_FP8_GIVEN && (g->quant || pull);
  if (quantise && n > 0) { /* quantised first, on the dispatch's SMs; then sent as given */
    const ht_quant_params Q = {(const uint16_t *)call->tokens,
                               pull ? pull_q : g->quant,
                               pull ? pull_qs : g->quant_scales,
                               call->num_tokens,
                               moe->config.hidden,
                               moe->config.wire == SY_MOE_WIRE_FP8_UE8M0};
    const int blocks = (call->num_tokens + HT_DWARPS - 1) / HT_DWARPS;
    const int most = call_blocks(g, P.B);
    SY_CHECK(launch_pdl(sy_ht_quantise, blocks < most ? blocks : most, HT_DTHREADS, 0, stream, Q));
  }
  if (quantise) {
    P.wire = SY_MOE_WIRE_FP8_GIVEN;
    P.tokens = pull ? pull_q : g->quant;
    P.token_scales = pull ? pull_qs : g->quant_scales;
  } else if (pull && !beside) {
    SY_CUDA_CHECK(copy_tokens(moe, call, pull_q, pull_qs, stream));
    P.tokens = pull_q;
    if (moe->config.wire == SY_MOE_WIRE_FP8_GIVEN) P.token_scales = pull_qs;
  }
  if (pull) {
    const size_t K = (size_t)moe->config.top_k, TK = T * K;
    char *meta = g->ws + g->wl.pull_meta;
    if (n > 0) {
      SY_CUDA_CHECK(
          cudaMemcpyAsync(meta, (const char *)call->handle + g->hl.ids, n * K * 4, cudaMemcpyDeviceToDevice, stream));
      SY_CUDA_CHECK(cudaMemcpyAsync(meta + TK * 4, (const char *)call->handle + g->hl.pos, n * K * 4,
                                    cudaMemcpyDeviceToDevice, stream));
      if (call->weights)
        SY_CUDA_CHECK(cudaMemcpyAsync(meta + 2 * TK * 4, call->weights, n * K * 4, cudaMemcpyDeviceToDevice, stream));
    }
    P.pull = 1;
    if (!beside)
      return launch_pdl(sy_ht_dispatch_pull, call_blocks(g, P.B), HT_DTHREADS, g->pull_kernel_smem, stream, P);
    /* SY_HT_PULL_OVERLAP: the tokens' copy on the side stream, forked after everything before (the ids' copies just
     * above, and the previous call's kernel, which ended once every peer had read the copy this one overwrites), then
     * sy_ht_pull_ready marks it; the kernel beside it takes its own channels first from the caller's tokens; the
     * call's stream joins the side stream after the kernel. Every piece is stream-ordered, so a capture keeps it. */
    P.pull_overlap = 1;
    SY_CUDA_CHECK(cudaEventRecord(g->pull_fork, stream));
    SY_CUDA_CHECK(cudaStreamWaitEvent(g->pull_side, g->pull_fork, 0));
    /* from the fork on, every way out joins the side stream back (a capture must end joined) */
    cudaError_t err = copy_tokens(moe, call, pull_q, pull_qs, g->pull_side);
    if (err == cudaSuccess) {
      sy_ht_pull_ready<<<1, 32, 0, g->pull_side>>>(P);
      err = cudaGetLastError();
    }
    sy_status_t ks = SY_SUCCESS;
    if (err == cudaSuccess)
      ks = launch_pdl(sy_ht_dispatch_pull, call_blocks(g, P.B), HT_DTHREADS, g->pull_kernel_smem, stream, P);
    const cudaError_t jr = cudaEventRecord(g->pull_join, g->pull_side);
    const cudaError_t jw = jr == cudaSuccess ? cudaStreamWaitEvent(stream, g->pull_join, 0) : jr;
    if (err == cudaSuccess) err = jw;
    if (err != cudaSuccess) return cuda_error(err, "the pulled dispatch's side stream", __FILE__, __LINE__);
    return ks;
  }
  /* the first copy in place (dispatch.cu): every rank of an object with an arena publishes its inbox entries; the
   * senders store into this rank's rows where recv.tokens lies in its arena */
  P.inplace = moe->arena != NULL && comm->world_size > 1 && !P.pull;
  const size_t row_bytes = (size_t)moe->config.hidden * sy__moe_ht_wire_elem(moe->config.wire);
  const size_t tok_bytes = (size_t)call->recv->rows * row_bytes;
  P.inplace_off = P.inplace && call->recv->rows > 0 && sy__moe_ht_in_arena(moe, call->recv->tokens, tok_bytes)
                      ? (int64_t)((const char *)call->recv->tokens - moe->arena)
                      : -1;
  return launch_pdl(dispatch_fn(g, g->scale_hint), call_blocks(g, P.B), HT_DTHREADS, g->smem, stream, P);
}

extern "C" sy_status_t sy__cuda_moe_ht_combine(sy_comm_t comm, struct sy_moe_ht *moe, const sy_moe_ht_call_t *call,
                                               cudaStream_t stream) {
  ht_gpu *g = (ht_gpu *)moe->backend_state;
  ht_params P;
  fill(comm, moe, g, call, &P);
  data_channels(comm, &P);
  P.probe = probe_of(g, call->row_weights ? 1 : 3);
  if (g->roles) P.role_warps = g->expert_warps, P.role_state = g->pipe_role_state;
  return launch_pdl(combine_fn_of(g), call_blocks(g, P.B), HT_DTHREADS, g->pipe_smem, stream, P);
}

/* The dispatch kernel with grad_out as the tokens (bf16, no weights) and the receiving side writing gradients. */
extern "C" sy_status_t sy__cuda_moe_ht_combine_backward(sy_comm_t comm, struct sy_moe_ht *moe,
                                                        const sy_moe_ht_call_t *call, cudaStream_t stream) {
  ht_gpu *g = (ht_gpu *)moe->backend_state;
  ht_params P;
  fill(comm, moe, g, call, &P);
  data_channels(comm, &P);
  P.mode = HT_COMBINE_BACKWARD;
  P.wire = SY_MOE_WIRE_BF16;
  P.weights = NULL;
  P.token_scales = NULL;
  P.probe = probe_of(g, 2);
  /* auto: at world 1 both blocks of a channel write only own rows, so the static split is already even, and the
   * queue measured 11% slower on the gradients (bench/NOTES.md, the own-token queue) */
  if (g->own_queue < 0 && comm->world_size == 1) P.own_queue = 0;
  if (g->roles && !P.own_queue) /* the static split by the roles' warps (at world 1 every row is an own row) */
    P.recv_own = comm->world_size == 1 ? 1024 * (HT_DWARPS - g->send_warps) / HT_DWARPS : g->recv_own;
  return launch_pdl(dispatch_fn(g, false), call_blocks(g, P.B), HT_DTHREADS, g->smem, stream, P);
}
