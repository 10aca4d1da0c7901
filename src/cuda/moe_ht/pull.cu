/*
 * pull.cu — sy_moe_ht_dispatch pulled (SY_HT_PULL, from world 2 where every peer is load/store reachable;
 * bench/NOTES.md, run 60): no ring and no sender. Before the kernel each rank copies its tokens (or quantises its FP8
 * tokens) into its workspace's copy (wl.pull), and its layout's ids and positions and the call's weights beside them
 * (wl.pull_meta, launch.cu). The kernel's blocks then take items (source s, channel c) — s's tokens of channel c,
 * every source this rank included — in turn, a block's items alternating between sources:
 *   scan   a thread a token: its entries on this rank (s's ids read from s's copy), the message's index among s's
 *          messages here (channel order, then token order: the numbering the ring dispatch gives them, which the
 *          combines read through the handle's recv_rows), its rows (rowbase[s][e] + position), each row's {s, token}
 *          and weight; the rows into recv_rows, the token into pull_tok;
 *   pull   warps [0, pull_pipes) each run a pipeline of HT_PULL_STAGES stages of shared memory over the item's
 *          messages: lane 0 loads a message's row (and FP8 scales) from s's copy by one bulk copy, stages ahead, then
 *          stores it into each of its rows by bulk stores, while the next ones load (tools/dev/expand-ceiling.cu's
 *          `pullx`: at world 4 with 16 SMs this runs as fast as from local memory).
 * Calls are numbered alike on every rank (ht_local.pulls): every block marks this rank's copy ready for call n
 * (wl.pull_sync .ready, with its num_tokens and whether weights were given) at its start; a block waits (bounded)
 * for a source's mark before it scans that source. The block that ends last tells every source that this rank has
 * read its copy of call n (done[me] at the source), then waits (bounded) for every rank's word that it has read this
 * rank's, so the next call's copy (before its kernel) overwrites nothing still read. A block's waits never depend on
 * another block of its own rank, so the grid need not be resident at once.
 */
#include "cuda/moe_ht/rows.cuh"

using namespace sy;

namespace {

struct pull_hdr {
  uint64_t ready;     /* the call whose copy is ready */
  int32_t num_tokens; /* its num_tokens */
  int32_t weights;    /* whether it gave weights */
};

__device__ __forceinline__ pull_hdr *hdr_at(const ht_params &P, char *base) {
  return (pull_hdr *)(base + P.wl.pull_sync);
}
__device__ __forceinline__ uint64_t *done_at(const ht_params &P, char *base, int d) {
  return (uint64_t *)(base + P.wl.pull_sync + 16) + d;
}

__device__ __forceinline__ uint32_t saddr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* This rank's copy ready for call `call`: its token count (0 where the handle is not this object's layout, so that
 * the peers take nothing from it) and whether it gave weights. */
__device__ __forceinline__ void mark_ready(const ht_params &P, bool handle_ok, uint64_t call) {
  pull_hdr *h = hdr_at(P, P.ws);
  h->num_tokens = handle_ok ? P.num_tokens : 0;
  h->weights = P.weights != nullptr;
  st_release_sys(&h->ready, call);
}

/* The lanes' reads of a stage (its FP8 scales), before a bulk load overwrites it: a proxy fence of shared memory
 * (none for BF16, whose stages only the async proxy touches; a whole fence.proxy.async before each reload cost ~2%:
 * bench/NOTES.md run 61). */
#define PULL_FENCE() asm volatile("fence.proxy.async.shared::cta;" ::: "memory")

/* The block: item (s, c)'s scan, its messages numbered from mbase (s's messages here in the channels before c).
 * Returns the item's messages (uniform); writes none at or past index `limit`. */
__device__ int scan_item(const ht_params &P, int s, int c, int n_s, bool weights, const int32_t *rowbase, bool rows_ok,
                         int mbase, int limit, int32_t *wsum) {
  const int K = P.K, L = P.L, me = P.ctx.rank, C = P.C, lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const char *sp = ht_peer(P, s);
  const int32_t *ids = (const int32_t *)(sp + P.wl.pull_meta);
  const int32_t *pos = ids + (size_t)P.T * K;
  const float *wts = (const float *)(pos + (size_t)P.T * K);
  int32_t *recv_rows = hsec(P, P.hl.recv_rows);
  const int tb = chan_begin(c, n_s, C), te = chan_begin(c + 1, n_s, C);
  int run = 0;
  for (int r0 = tb; r0 < te; r0 += blockDim.x) {
    const int t = r0 + (int)threadIdx.x;
    uint32_t mask = 0; /* k of this token's entries here */
    if (t < te)
      for (int k = 0; k < K; k++) {
        const int e = __ldcg(ids + (size_t)t * K + k);
        if (e >= 0 && e / L == me) mask |= 1u << k;
      }
    const unsigned bal = __ballot_sync(0xffffffffu, mask != 0);
    if (lane == 0) wsum[warp] = __popc(bal);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < (int)blockDim.x / 32; w++) {
      before += w < warp ? wsum[w] : 0;
      total += wsum[w];
    }
    __syncthreads(); /* wsum is read before the next round writes it */
    const int idx = mbase + run + before + __popc(bal & ((1u << lane) - 1u));
    if (mask && idx < limit) { /* (past the layout's count: the caller reports it) */
      P.pull_tok[(size_t)s * P.T + idx] = t;
      int32_t *out = recv_rows + ((size_t)s * P.T + idx) * P.kk;
      int i = 0;
      for (uint32_t m = mask; m; m &= m - 1, i++) {
        const int k = __ffs(m) - 1;
        const int e = __ldcg(ids + (size_t)t * K + k);
        const int row = rowbase[(size_t)s * L + (e - me * L)] + __ldcg(pos + (size_t)t * K + k);
        out[i] = rows_ok ? row : -1;
        if (!rows_ok) continue;
        P.recv.src[(size_t)row * 2] = s;
        P.recv.src[(size_t)row * 2 + 1] = t;
        P.recv.weights[row] = weights ? __ldcg(wts + (size_t)t * K + k) : 0.0f;
      }
      for (; i < P.kk; i++) out[i] = -1;
    }
    run += total;
  }
  return run;
}

/* Every lane: waits for the mbarrier at b to complete the phase of this parity, bounded (the communicator's timeout,
 * its abort); returns lane 0's verdict (lane 0 reports a timeout, naming source s). */
__device__ bool stage_wait(const ht_params &P, uint32_t b, uint32_t parity, int s) {
  uint64_t t0 = 0;
  bool ok = true;
  for (uint32_t spins = 0;; spins++) {
    uint32_t done;
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(b), "r"(parity)
                 : "memory");
    if (done) break;
    if ((spins & 1023u) != 1023u) continue;
    const uint64_t now = global_timer_ns();
    if (!t0) t0 = now;
    else if (now - t0 > P.ctx.timeout_ns || aborted(P.ctx)) {
      ok = false;
      break;
    }
  }
  const bool all = __shfl_sync(0xffffffffu, ok ? 1 : 0, 0) != 0;
  if (!all && (threadIdx.x & 31) == 0 && !aborted(P.ctx))
    report_error(P.ctx, SY_ERR_TIMEOUT, OP_MOE_HT_RECV, s, 0, parity, 0);
  return all;
}

/* A pipeline warp: the item's messages mbase + w, + pipes, ... from source s's copy into their rows (the scan's).
 * q: the warp's stage uses so far (its mbarriers' phases), alike in every lane. SY_HT_PROBE (thread 0): ns spent
 * waiting for its stages' loads added to waited, for its stores to have read a stage (and reloading it) to rwaited. */
__device__ bool pull_item(const ht_params &P, int s, int mbase, int nmsg, char *stages, uint64_t *bar, uint32_t &q,
                          uint64_t &waited, uint64_t &rwaited) {
  const int lane = threadIdx.x & 31, w = threadIdx.x / 32, pipes = P.pull_pipes, S = HT_PULL_STAGES;
  const bool fp8 = P.wire != SY_MOE_WIRE_BF16;
  const int groups = fp8 ? P.hidden / SY_MOE_FP8_GROUP : 0;
  const size_t bytes = fp8 ? (size_t)P.hidden : (size_t)P.hidden * 2, sbytes = (size_t)groups * 4;
  const bool scales_bulk = fp8 && sbytes % 16 == 0; /* else the lanes load them from s */
  const bool fence = scales_bulk;
  const bool caller = P.pull_overlap && s == P.ctx.rank; /* (own tokens from the caller's buffers: launch.cu) */
  const char *src = caller ? (const char *)P.tokens : ht_peer(P, s) + P.wl.pull;
  const float *ssrc = caller ? P.token_scales : (const float *)(src + (size_t)P.T * P.hidden);
  const int mine = w < nmsg ? (nmsg - w + pipes - 1) / pipes : 0;
  const int32_t *recv_rows = hsec(P, P.hl.recv_rows);
  auto stage = [&](int j) { return stages + (size_t)((q + j) % S) * P.pull_stage_bytes; };
  auto mbar = [&](int j) { return saddr(bar + (q + j) % S); };
  auto token = [&](int j) { return P.pull_tok[(size_t)s * P.T + mbase + w + (size_t)j * pipes]; };
  /* lane 0: message j's row (and FP8 scales) into its stage, by bulk copies completing on the stage's mbarrier */
  auto issue = [&](int j) {
    const int t = token(j);
    const uint32_t b = mbar(j), st = saddr(stage(j));
    const uint32_t tx = (uint32_t)(bytes + (scales_bulk ? sbytes : 0));
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(tx) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(st),
                 "l"(src + (size_t)t * bytes), "r"((uint32_t)bytes), "r"(b)
                 : "memory");
    if (scales_bulk)
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       st + (uint32_t)bytes),
                   "l"(ssrc + (size_t)t * groups), "r"((uint32_t)sbytes), "r"(b)
                   : "memory");
  };
  if (lane == 0) {
    /* once an item, the whole proxy fence: the source's mark was read by the generic proxy (ht_wait, acquire), its copy
     * is read by the async proxy (the bulk loads below); and the lanes' earlier reads of the stages (FP8 scales) */
    asm volatile("fence.proxy.async;" ::: "memory");
    for (int j = 0; j < S && j < mine; j++) issue(j);
  }
  bool ok = true;
  for (int j = 0; j < mine && ok; j++) {
    const uint64_t pt = probe_now(P);
    /* (a load that never completed: the call fails; loads still in flight may land in this block's shared memory
     * after it ends — only after a timeout, which leaves the communicator aborted) */
    if (!(ok = stage_wait(P, mbar(j), ((q + j) / S) & 1u, s))) break;
    if (P.probe) waited += probe_now(P) - pt;
    const int idx = mbase + w + j * pipes;
    const int row = lane < P.kk ? recv_rows[((size_t)s * P.T + idx) * P.kk + lane] : -1;
    const int n = __popc(__ballot_sync(0xffffffffu, row >= 0));
    char *st = stage(j);
    for (int i = 0; i < n; i++) {                     /* the row by a bulk store, then (FP8) its scales by the lanes */
      const int r = __shfl_sync(0xffffffffu, row, i); /* uniform: every lane runs every i */
      if (lane == 0)
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"((char *)P.recv.tokens +
                                                                                         (size_t)r * bytes),
                     "r"(saddr(st)), "r"((uint32_t)bytes)
                     : "memory");
      if (!fp8) continue;
      const ht_sink sk = row_sink(P, r, bytes);
      const int t = scales_bulk ? 0 : token(j);
      for (int g = lane; g < groups; g += 32)
        sink_scale<false, false>(
            sk, g, scales_bulk ? ((const float *)(st + bytes))[g] : __ldcg(ssrc + (size_t)t * groups + g));
    }
    if (lane == 0) asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    __syncwarp(); /* the lanes' reads of this stage are done */
    if (lane == 0 && j >= 1 && j - 1 + S < mine) {
      /* message j - 1's stage, once its stores have read it, takes message j - 1 + S (j's stores stay in flight) */
      const uint64_t pt = probe_now(P);
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      if (fence) PULL_FENCE(); /* (the lanes read a stage only for its scales) */
      issue(j - 1 + S);
      if (P.probe) rwaited += probe_now(P) - pt;
    }
  }
  /* the stages free for the next item once the stores have read them; their writes complete before the block ends */
  if (lane == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  __syncwarp();
  q += mine;
  return ok;
}

} // namespace

__global__ void __launch_bounds__(HT_DTHREADS) sy_ht_dispatch_pull(const __grid_constant__ ht_params P) {
  pdl_wait();
  probe_begin<false>(P); /* SY_HT_PROBE, a row a block: wait (sources' marks, the last block's words, warp 0's waits
                          * for its stores to have read a stage and its reloads), plan (scans), own / work (pipelines
                          * over this rank's / peers' copies, warp 0's waits apart), sync (warp 0's waits for its
                          * stages' loads), rounds (items), items (messages) */
  extern __shared__ __align__(16) char smem[]; /* (as every kernel declares it: pipe.cuh; aligned by hand below) */
  __shared__ __align__(8) uint64_t bar[HT_PULL_PIPES * HT_PULL_STAGES];
  __shared__ int32_t wsum[HT_DWARPS];
  __shared__ int failed, n_s, weights_s;
  const int W = P.world_size, C = P.C, me = P.ctx.rank, w = threadIdx.x / 32;
  const uint64_t call = __ldcg(&P.local->pulls) + 1; /* read by every block before the last one updates it */
  /* a handle that is not this object's layout (reported): this rank still takes part in the call's counters, with no
   * token to give and no item taken, so that no rank waits for it and the calls stay numbered alike */
  const bool handle_ok = ht_handle_ok(P, false);
  int32_t *rowbase = (int32_t *)smem;
  const bool rows_ok = handle_ok && rows_setup(P, rowbase);
  if (threadIdx.x == 0 && !P.pull_overlap) /* this rank's copy is ready (the copies before the kernel): every block
                                            * says so, so that no rank's scan waits on one block of this grid being
                                            * scheduled (SY_HT_PULL_OVERLAP: sy_ht_pull_ready says it) */
    mark_ready(P, handle_ok, call);
  if (threadIdx.x < HT_PULL_PIPES * HT_PULL_STAGES) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(&bar[threadIdx.x])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (threadIdx.x == 0) failed = !handle_ok;
  if (rows_ok && P.mode == HT_DISPATCH)
    for (int c = blockIdx.x; c < C; c += gridDim.x) recv_outputs<false>(P, c);
  __syncthreads();
  uint32_t q = 0;
  char *stages = smem + P.pull_smem; /* the first stage at an HT_PULL_ALIGN boundary (ht.cuh), then this warp's */
  if constexpr (HT_PULL_ALIGN != 0)
    stages += (HT_PULL_ALIGN - (saddr(stages) & (HT_PULL_ALIGN - 1u))) & (HT_PULL_ALIGN - 1u);
  stages += (size_t)w * HT_PULL_STAGES * P.pull_stage_bytes;
  uint64_t waited = 0, rwaited = 0, pt = probe_now(P);
  for (int item = blockIdx.x; item < W * C; item += gridDim.x) {
    int s, c; /* a block's items alternating between sources, or its own channels first (ref/moe_ht_layout.h) */
    if (P.pull_overlap) sy__moe_ht_pull_item_own_first(item, W, C, me, &s, &c);
    else sy__moe_ht_pull_item(item, W, (int)gridDim.x, &s, &c);
    if (threadIdx.x == 0 && P.pull_overlap && s == me) { /* (its own: the caller's tokens, no copy waited for) */
      n_s = failed ? 0 : handle_ok ? P.num_tokens : 0;
      weights_s = P.weights != nullptr;
    } else if (threadIdx.x == 0) {
      char *sp = ht_peer(P, s);
      if (!failed && !ht_wait(P, &hdr_at(P, sp)->ready, call, OP_MOE_HT_RECV, s)) failed = 1;
      n_s = failed ? 0 : __ldcg(&hdr_at(P, sp)->num_tokens);
      weights_s = failed ? 0 : __ldcg(&hdr_at(P, sp)->weights);
      if (!failed && (n_s < 0 || n_s > P.T)) { /* not a count this configuration allows: the copy is not this call's */
        report_error(P.ctx, SY_ERR_INTERNAL, OP_MOE_HT_RECV, s, 0, (uint64_t)P.T, (uint64_t)(int64_t)n_s);
        failed = 1, n_s = 0;
      }
    }
    __syncthreads();
    if (P.probe) probe_add<false>(P, PR_WAIT, probe_now(P) - pt), pt = probe_now(P);
    if (failed) break;
    int mbase = 0;
    for (int j = 0; j < c; j++) mbase += hsec(P, P.hl.chan_tokens)[(size_t)s * C + j];
    const int want = hsec(P, P.hl.chan_tokens)[(size_t)s * C + c]; /* the layout's count: the scan writes no more */
    const int nmsg = scan_item(P, s, c, n_s, weights_s != 0, rowbase, rows_ok, mbase, mbase + want, wsum);
    if (nmsg != want) { /* s's copy is not of this layout (a handle of another layout there): nothing pulled */
      if (threadIdx.x == 0)
        report_error(P.ctx, SY_ERR_INVALID_ARG, OP_MOE_HT_HANDLE, s, 0, (uint64_t)want, (uint64_t)nmsg);
      break; /* uniform: every thread has the scan's count */
    }
    __syncthreads(); /* the scan's rows and tokens, before the pipelines read them */
    if (P.probe) probe_add<false>(P, PR_PLAN, probe_now(P) - pt), pt = probe_now(P);
    const uint64_t waited0 = waited, rwaited0 = rwaited;
    if (rows_ok && w < P.pull_pipes &&
        !pull_item(P, s, mbase, nmsg, stages, bar + w * HT_PULL_STAGES, q, waited, rwaited))
      failed = 1;    /* (reported) */
    __syncthreads(); /* n_s and the stages' next uses; failed */
    if (P.probe) {
      probe_add<false>(P, s == me ? PR_OWN : PR_WORK, probe_now(P) - pt - (waited - waited0) - (rwaited - rwaited0));
      probe_add<false>(P, PR_WAIT, rwaited - rwaited0);
      probe_add<false>(P, PR_SYNC, waited - waited0);
      probe_add<false>(P, PR_ROUNDS, 1);
      probe_add<false>(P, PR_ITEMS, (uint64_t)nmsg);
      pt = probe_now(P);
    }
  }
  if (w < P.pull_pipes && (threadIdx.x & 31) == 0) /* every bulk store of this pipeline written */
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (atom_add_acq_rel_gpu(&P.local->pull_done, 1u) != gridDim.x - 1) {
    probe_end<false>(P);
    return;
  }
  pt = probe_now(P);
  /* the last block: every block has read what it pulled (each waited for its loads) */
  P.local->pull_done = 0;
  for (int s = 0; s < W; s++)
    if (s != me) st_release_sys(done_at(P, ht_peer(P, s), me), call);
  for (int d = 0; d < W; d++)
    if (d != me && !aborted(P.ctx) && !ht_wait(P, done_at(P, P.ws, d), call, OP_MOE_HT_SEND, d)) break;
  /* SY_HT_PULL_OVERLAP: sy_ht_pull_ready read the pulls done before it marked the copy; where every peer failed before
   * reading it (a bad handle there), nothing else orders this update after that read */
  if (P.pull_overlap && !aborted(P.ctx)) ht_wait(P, &hdr_at(P, P.ws)->ready, call, OP_MOE_HT_SEND, me);
  P.local->pulls = call;
  if (P.mode == HT_DISPATCH) { /* for the combines' check */
    sy_moe_ht_handle_header_t *h = (sy_moe_ht_handle_header_t *)P.handle;
    h->expert_stride = P.recv.expert_stride;
    h->dispatched = 1;
  }
  if (P.probe) probe_add<false>(P, PR_WAIT, probe_now(P) - pt);
  probe_end<false>(P);
}

/* SY_HT_PULL_OVERLAP (launch.cu): on the side stream after the copy of this rank's tokens into its workspace, the copy
 * marked ready for the call, as every block of sy_ht_dispatch_pull marks it otherwise. The call's number: the pulls
 * done, which the running dispatch's last block raises only after every peer has read this copy, so after this. */
__global__ void sy_ht_pull_ready(const __grid_constant__ ht_params P) {
  if (threadIdx.x != 0) return;
  const sy_moe_ht_handle_header_t *hh = (const sy_moe_ht_handle_header_t *)P.handle; /* (the kernel reports it) */
  mark_ready(P, ht_handle_mine(P) && hh->num_tokens == P.num_tokens, __ldcg(&P.local->pulls) + 1);
}
