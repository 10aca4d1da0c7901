/*
 * attn.c — sy-bench entry `attn`: the attention Q+KV forward (Q rows 4096 B, KV rows 1024 B, C = 2 replicas)
 * on a seeded plan (documents of 256..16K tokens, each rank's sequences to random ranks, KV to two distinct
 * random ranks), tokens per rank from -t to -T (8K..512K), checked against the plan's receive lists and the
 * payload formula (plan and payload from tests/workload), beside:
 *  - NCCL all-to-all-v: grouped ncclSend/ncclRecv moving the same bytes per (source, destination) pair in the
 *    same process. NCCL gets each pair's rows packed (it cannot gather sequences), which favours it.
 *  - the direct-store reference: every rank storing into every peer at once with plain 16-byte stores
 *    (sy__cuda_store_probe), the per-GPU link bandwidth of this run.
 * Two plans per size: `random` (above) and `even`, every rank's tokens cut into W equal sequences, sequence i
 * to rank i for Q and to ranks i and i + 1 for KV, so every pair carries the same bytes.
 * bytes = over all ranks, the most any rank sends to or receives from the others (Q + KV, self excluded):
 * the busiest link end, which bounds the call; busbw = bytes / time.
 */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "core/internal.h"
#include "plan/attn_plan.h"
#include "workload.h"

enum { Q_RB = 4096, KV_RB = 1024, REPLICAS = 2 };

size_t bench_attn_heap(const bench_opts_t *opts) {
  const size_t rows = (size_t)opts->max_tokens * 5 / 4 + 65536; /* receive imbalance of a random plan */
  return rows * Q_RB + (size_t)REPLICAS * rows * KV_RB + ((size_t)256 << 20);
}

/* Wrong bytes in a received buffer: every receive segment of the plan against the formula, and the rows
 * beyond recv_total must keep the poison. */
static long long verify(const sy_attn_dir_t *dir, int W, int which, const uint64_t *got, size_t rb, int64_t cap_rows) {
  long long wrong = 0;
  const size_t words = rb / 8;
  for (int s = 0; s < W; s++) {
    for (int64_t g = dir->recv_start[s]; g < dir->recv_start[s + 1]; g++) {
      const sy_attn_seg_t *seg = &dir->recv_segs[g];
      for (int64_t i = 0; i < seg->rows; i++)
        for (size_t w = 0; w < words; w++)
          wrong += got[(size_t)(seg->dst_row + i) * words + w] != wl_payload_word(s, which, seg->src_row + i, w);
    }
  }
  const uint64_t poison = 0xEEEEEEEEEEEEEEEEull;
  for (int64_t r = dir->recv_total; r < cap_rows && r < dir->recv_total + 16; r++)
    for (size_t w = 0; w < words; w++) wrong += got[(size_t)r * words + w] != poison;
  return wrong;
}

typedef struct attn_bench {
  sy_attn_t attn;
  sy_attn_plan_t plan;
  uint8_t *q, *kv, *q_recv, *kv_recv, *nccl_q_recv, *nccl_kv_recv;
  const struct sy_attn_plan *p;
  int64_t *q_soff, *kv_soff, *q_roff, *kv_roff; /* NCCL: packed offsets per peer, rows */
} attn_bench_t;

static int op_ours(bench_ctx_t *ctx, void *arg) {
  attn_bench_t *b = arg;
  return sy_attn_qkv_forward(b->attn, b->plan, b->q, Q_RB, b->q_recv, b->kv, KV_RB, b->kv_recv, ctx->stream) !=
         SY_SUCCESS;
}

static int op_nccl(bench_ctx_t *ctx, void *arg) {
  attn_bench_t *b = arg;
  ncclComm_t nc = (ncclComm_t)ctx->nccl;
  const sy_attn_dir_t *q = &b->p->dir[SY_ATTN_Q_FWD], *kv = &b->p->dir[SY_ATTN_KV_FWD];
  ncclGroupStart();
  for (int p = 0; p < ctx->world; p++) {
    if (q->send_rows[p])
      ncclSend(b->q + b->q_soff[p] * Q_RB, (size_t)q->send_rows[p] * Q_RB, ncclUint8, p, nc, ctx->stream);
    if (q->recv_rows[p])
      ncclRecv(b->nccl_q_recv + b->q_roff[p] * Q_RB, (size_t)q->recv_rows[p] * Q_RB, ncclUint8, p, nc, ctx->stream);
    if (kv->send_rows[p])
      ncclSend(b->kv + b->kv_soff[p] * KV_RB, (size_t)kv->send_rows[p] * KV_RB, ncclUint8, p, nc, ctx->stream);
    if (kv->recv_rows[p])
      ncclRecv(b->nccl_kv_recv + b->kv_roff[p] * KV_RB, (size_t)kv->recv_rows[p] * KV_RB, ncclUint8, p, nc,
               ctx->stream);
  }
  return ncclGroupEnd() != ncclSuccess;
}

static int op_probe(bench_ctx_t *ctx, void *arg) {
  attn_bench_t *b = arg;
  return sy__cuda_store_probe(ctx->comm, b->q_recv, (size_t)32 << 20, ctx->stream) != SY_SUCCESS;
}

static int gpu(bench_ctx_t *ctx) { return ctx->backend == SY_BACKEND_CUDA; }

static int to_dev(bench_ctx_t *ctx, void *d, const void *h, size_t n) {
  if (!gpu(ctx)) return memcpy(d, h, n), 0;
  return cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) != cudaSuccess;
}

static int from_dev(bench_ctx_t *ctx, void *h, const void *d, size_t n) {
  if (!gpu(ctx)) return memcpy(h, d, n), 0;
  return cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) != cudaSuccess;
}

static void *dev_alloc(bench_ctx_t *ctx, size_t n) {
  void *p = NULL;
  if (gpu(ctx)) return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
  return malloc(n);
}

static void dev_free(bench_ctx_t *ctx, void *p) {
  if (!p) return;
  if (gpu(ctx)) cudaFree(p);
  else free(p);
}

static int poison(bench_ctx_t *ctx, void *d, size_t n) {
  if (!gpu(ctx)) return memset(d, 0xEE, n), 0;
  return cudaMemset(d, 0xEE, n) != cudaSuccess;
}

int bench_attn(bench_ctx_t *ctx) {
  const bench_opts_t *o = ctx->opts;
  const int W = ctx->world;
  const int64_t max_tokens = o->max_tokens;
  const int64_t cap_rows = max_tokens * 5 / 4 + 65536;
  attn_bench_t b;
  memset(&b, 0, sizeof b);
  int rc = 0;
  b.q = dev_alloc(ctx, (size_t)max_tokens * Q_RB);
  /* NCCL sends each pair's KV rows packed, and every token goes to REPLICAS ranks: room for all of them. */
  b.kv = dev_alloc(ctx, (size_t)REPLICAS * max_tokens * KV_RB);
  if (!b.q || !b.kv) return 1;
  if (sy_mem_alloc(ctx->comm, (size_t)cap_rows * Q_RB, (void **)&b.q_recv) != SY_SUCCESS) return 1;
  if (sy_mem_alloc(ctx->comm, (size_t)cap_rows * REPLICAS * KV_RB, (void **)&b.kv_recv) != SY_SUCCESS) return 1;
  if (ctx->nccl) {
    b.nccl_q_recv = dev_alloc(ctx, (size_t)cap_rows * Q_RB);
    b.nccl_kv_recv = dev_alloc(ctx, (size_t)cap_rows * REPLICAS * KV_RB);
    if (!b.nccl_q_recv || !b.nccl_kv_recv) return 1;
  }
  sy_attn_config_t cfg = SY_ATTN_CONFIG_INIT;
  cfg.max_tokens = max_tokens;
  cfg.max_replicas = W >= REPLICAS ? REPLICAS : W;
  if (sy_attn_create(ctx->comm, &cfg, &b.attn) != SY_SUCCESS) return 1;
  b.q_soff = calloc(4 * (size_t)W, sizeof(int64_t));
  b.kv_soff = b.q_soff + W, b.q_roff = b.q_soff + 2 * W, b.kv_roff = b.q_soff + 3 * W;

  /* The direct-store reference: 32 MiB into every peer at once. */
  double store_gbs = 0;
  if (gpu(ctx) && W > 1) {
    bench_timing_t t;
    memset(&t, 0, sizeof t);
    rc |= bench_time(ctx, op_probe, &b, &t);
    store_gbs = t.time_us > 0 ? (double)(W - 1) * (32u << 20) / (t.time_us * 1e3) : 0;
  }
  bench_print(ctx, "# direct-store reference: %.1f GB/s per GPU (every rank storing 32 MiB into each peer at once)\n",
              store_gbs);
  bench_print(ctx,
              "# Q+KV forward: Q rows %d B, KV rows %d B, %d replicas; MiB = the most any rank sends to or "
              "receives from the others; plan: random documents and ranks, or even (every pair the same bytes)\n#\n",
              Q_RB, KV_RB, cfg.max_replicas);
  bench_print(ctx, "# %9s %9s %6s %8s | %10s %9s %10s %8s %6s %7s | %10s %9s %8s | %7s\n", "tokens", "seqs", "plan",
              "MiB", "time_us", "kern_us", "host_us", "busbw", "%store", "#wrong", "nccl_us", "kern_us", "busbw",
              "speedup");
  bench_print(ctx, "# %9s %9s %6s %8s | %10s %9s %10s %8s %6s %7s | %10s %9s %8s | %7s\n", "", "", "", "", "(events)",
              "(kernel)", "", "GB/s", "", "", "(events)", "(kernel)", "GB/s", "(events)");
  uint64_t *h = o->check ? malloc((size_t)max_tokens * Q_RB) : NULL;
  uint64_t *got = o->check ? malloc((size_t)cap_rows * Q_RB) : NULL;
  if (o->check && (!h || !got)) return 1;
  for (int64_t tokens = o->min_tokens; tokens <= max_tokens && !rc; tokens *= 2)
    for (int even = 0; even < 2 && !rc; even++) {
      wl_attn_desc_t g;
      if (wl_attn_documents(&g, W, REPLICAS, tokens, even, 0xA77E + (uint64_t)tokens)) return 1;
      if (sy_attn_plan_create(ctx->comm, &g.desc, &b.plan) != SY_SUCCESS) return 1;
      b.p = b.plan; /* the internal view: sy_attn_plan_t is struct sy_attn_plan * */
      const sy_attn_dir_t *qd = &b.p->dir[SY_ATTN_Q_FWD], *kd = &b.p->dir[SY_ATTN_KV_FWD];
      int64_t qs = 0, ks = 0, qr = 0, kr = 0;
      size_t sent = 0, received = 0;
      for (int p = 0; p < W; p++) {
        b.q_soff[p] = qs, b.kv_soff[p] = ks, b.q_roff[p] = qr, b.kv_roff[p] = kr;
        qs += qd->send_rows[p], ks += kd->send_rows[p], qr += qd->recv_rows[p], kr += kd->recv_rows[p];
        if (p == ctx->rank) continue;
        sent += (size_t)qd->send_rows[p] * Q_RB + (size_t)kd->send_rows[p] * KV_RB;
        received += (size_t)qd->recv_rows[p] * Q_RB + (size_t)kd->recv_rows[p] * KV_RB;
      }
      if (qd->recv_total > cap_rows || kd->recv_total > cap_rows * REPLICAS) {
        bench_print(ctx, "# plan needs more receive rows than reserved; skipped\n");
        sy_attn_plan_destroy(b.plan), wl_attn_desc_free(&g);
        continue;
      }
      bench_timing_t ours, base;
      memset(&ours, 0, sizeof ours);
      memset(&base, 0, sizeof base);
      ours.wrong = -1;
      if (o->check) {
        long long wrong = 0;
        wl_payload_fill_words(h, ctx->rank, 0, tokens, Q_RB);
        rc |= to_dev(ctx, b.q, h, (size_t)tokens * Q_RB);
        wl_payload_fill_words(h, ctx->rank, 1, tokens, KV_RB);
        rc |= to_dev(ctx, b.kv, h, (size_t)tokens * KV_RB);
        rc |= poison(ctx, b.q_recv, (size_t)cap_rows * Q_RB);
        rc |= poison(ctx, b.kv_recv, (size_t)cap_rows * REPLICAS * KV_RB);
        rc |= sy_comm_barrier(ctx->comm, ctx->stream) != SY_SUCCESS;
        rc |= op_ours(ctx, &b);
        if (gpu(ctx)) rc |= cudaStreamSynchronize(ctx->stream) != cudaSuccess;
        rc |= from_dev(ctx, got, b.q_recv, (size_t)(qd->recv_total + 16) * Q_RB);
        wrong += verify(qd, W, 0, got, Q_RB, cap_rows);
        rc |= from_dev(ctx, got, b.kv_recv, (size_t)(kd->recv_total + 16) * KV_RB);
        wrong += verify(kd, W, 1, got, KV_RB, cap_rows * REPLICAS);
        ours.wrong = bench_allreduce_max(ctx, rc ? -1 : wrong);
      }
      rc |= bench_time(ctx, op_ours, &b, &ours);
      if (ctx->nccl) rc |= bench_time(ctx, op_nccl, &b, &base);
      const double max_sent = bench_allreduce_max_d(ctx, (double)(sent > received ? sent : received));
      ours.busbw_gbs = ours.time_us > 0 ? max_sent / (ours.time_us * 1e3) : 0;
      base.busbw_gbs = base.time_us > 0 ? max_sent / (base.time_us * 1e3) : 0;
      const double pct = store_gbs > 0 ? 100.0 * ours.busbw_gbs / store_gbs : 0;
      const double ratio = ctx->nccl && ours.time_us > 0 ? base.time_us / ours.time_us : 0;
      ctx->total_wrong += ours.wrong > 0 ? ours.wrong : 0;
      if (ours.wrong < 0 && o->check) ctx->total_wrong++;
      long long seqs = 0;
      for (int r = 0; r < W; r++) seqs += g.num_seqs[r];
      char nccl_cols[80], f[4][16];
      if (ctx->nccl)
        snprintf(nccl_cols, sizeof nccl_cols, "%10.2f %s %8.2f | %7.2f", base.time_us,
                 bench_fmt_us(f[0], 16, 9, base.kernel_us), base.busbw_gbs, ratio);
      else snprintf(nccl_cols, sizeof nccl_cols, "%10s %9s %8s | %7s", "n/a", "", "", "");
      bench_print(ctx, "  %9lld %9lld %6s %8.2f | %10.2f %s %10.2f %8.2f %6.1f %7lld | %s\n", (long long)tokens, seqs,
                  even ? "even" : "random", max_sent / (1 << 20), ours.time_us,
                  bench_fmt_us(f[1], 16, 9, ours.kernel_us), ours.host_us, ours.busbw_gbs, pct, ours.wrong, nccl_cols);
      bench_json(
          ctx,
          "{\"entry\": \"attn\", \"backend\": \"%s\", \"world\": %d, \"tokens_per_rank\": %lld, \"sequences\": %lld, "
          "\"plan\": \"%s\", \"bytes_max\": %.0f, \"ours\": {\"time_us\": %.3f, \"kernel_us\": %s, \"host_us\": %.3f, "
          "\"busbw_GBs\": %.3f, \"pct_of_store\": %.1f, \"wrong\": %lld}, \"nccl\": {\"time_us\": %.3f, "
          "\"kernel_us\": %s, \"busbw_GBs\": %.3f}, \"store_reference_GBs\": %.3f, \"speedup\": %.3f}",
          sy_backend_name(ctx->backend), W, (long long)tokens, seqs, even ? "even" : "random", max_sent, ours.time_us,
          bench_json_us(f[2], 16, ours.kernel_us), ours.host_us, ours.busbw_gbs, pct, ours.wrong, base.time_us,
          bench_json_us(f[3], 16, base.kernel_us), base.busbw_gbs, store_gbs, ratio);
      sy_attn_plan_destroy(b.plan);
      wl_attn_desc_free(&g);
    }
  free(h), free(got);
  sy_attn_destroy(b.attn);
  sy_mem_free(ctx->comm, b.q_recv);
  sy_mem_free(ctx->comm, b.kv_recv);
  dev_free(ctx, b.q), dev_free(ctx, b.kv), dev_free(ctx, b.nccl_q_recv), dev_free(ctx, b.nccl_kv_recv);
  free(b.q_soff);
  return rc;
}
