/*
 * soak_a2a_attn.c — the soak's all-to-all and attention rounds (soak.h).
 *
 * All-to-all: sy_alltoallv with a random byte count per (source, destination) pair (none, a few, up to
 * A2A_PAIR bytes; 16-byte aligned or not, with gaps between the segments on both sides), the payload
 * wl_payload_byte (the GPU tests'); expected: the receive buffer poisoned, then every source's segment placed
 * by sy__ref_alltoallv_recv from the sources regenerated here; the whole used range compared, gaps included.
 *
 * Attention: a random plan each round (tests/workload's short sequences of any kind, sy-bench's documents, or
 * sy_attn_place's shards of random documents), one of the four directions with random row sizes (any byte
 * count for the opaque rows; bf16, fp16 or fp32 gradients, summed or not). Expected: the output poisoned, then
 * every receive segment of the plan filled from the payload formula (rows of the GPU tests' encoding, keyed by
 * the source's rank and row), and for the KV backward sy__ref_attn_kv_reduce over that staging; the output's
 * rows compared, with up to 16 rows past a forward destination's end that must keep the poison.
 */
#include "plan/attn_plan.h"
#include "ref/alltoall_ref.h"
#include "ref/attn_ref.h"
#include "soak.h"

/* ---- all-to-all ----------------------------------------------------------------------------------------------- */

enum { A2A_GAP = 48 };

struct soak_a2a {
  size_t pair_cap, cap; /* largest pair, bytes of each side's buffer */
  uint8_t *send, *recv; /* device; recv symmetric */
  uint8_t *h_send, *h_got, *h_want, *h_src;
  size_t *sb, *so, *rb, *ro, *all_sb, *all_so; /* [W] x 4, [W * W] x 2 */
  const void **srcs;
};

static size_t a2a_pair_cap(sy_backend_t backend) { return backend == SY_BACKEND_CUDA ? (size_t)1 << 20 : 96 << 10; }

size_t soak_a2a_heap(int world, sy_backend_t backend) {
  return (size_t)world * (a2a_pair_cap(backend) + A2A_GAP + 16) + 4096;
}

int soak_a2a_open(bench_ctx_t *ctx, soak_a2a_t **out) {
  const size_t W = (size_t)ctx->world;
  soak_a2a_t *s = calloc(1, sizeof *s);
  if (!s) return 1;
  *out = s;
  s->pair_cap = a2a_pair_cap(ctx->backend);
  s->cap = soak_a2a_heap(ctx->world, ctx->backend);
  s->send = soak_alloc(ctx, s->cap);
  s->h_send = malloc(s->cap), s->h_got = malloc(s->cap), s->h_want = malloc(s->cap), s->h_src = malloc(s->cap);
  s->sb = calloc(6 * W + 2 * W * W, sizeof(size_t));
  s->srcs = calloc(W, sizeof *s->srcs);
  if (!s->send || !s->h_send || !s->h_got || !s->h_want || !s->h_src || !s->sb || !s->srcs) return 1;
  s->so = s->sb + W, s->rb = s->so + W, s->ro = s->rb + W, s->all_sb = s->ro + W, s->all_so = s->all_sb + W * W;
  if (sy_mem_alloc(ctx->comm, s->cap, (void **)&s->recv) != SY_SUCCESS) return 1;
  /* every page touched now, so that memory the rounds reach only later does not read as growth */
  memset(s->h_send, 0, s->cap), memset(s->h_got, 0, s->cap), memset(s->h_want, 0, s->cap), memset(s->h_src, 0, s->cap);
  return soak_fill(ctx, s->send, 0, s->cap) || soak_fill(ctx, s->recv, 0, s->cap) || soak_sync(ctx);
}

void soak_a2a_close(bench_ctx_t *ctx, soak_a2a_t *s) {
  if (!s) return;
  if (s->recv) sy_mem_free(ctx->comm, s->recv);
  soak_free(ctx, s->send);
  free(s->h_send), free(s->h_got), free(s->h_want), free(s->h_src), free(s->sb), free(s->srcs);
  free(s);
}

/* Bytes source `src` sends `dst` in the round: none (1 in 8), 1..64 (1 in 8), else up to the cap. */
static size_t pair_bytes(const soak_a2a_t *s, uint64_t seed, int world, int src, int dst, int aligned) {
  const uint64_t pair = (uint64_t)src * (uint64_t)world + (uint64_t)dst, kind = soak_pick(seed, 100 + 2 * pair, 8);
  size_t n = soak_pick(seed, 101 + 2 * pair, kind == 1 ? 64 : s->pair_cap) + 1;
  if (kind == 0) return 0;
  if (aligned) n = (n + 15) & ~(size_t)15;
  return n > s->pair_cap ? s->pair_cap & ~(size_t)15 : n;
}

/* Offsets of n segments of the given sizes, packed with random gaps (16-byte multiples when aligned). */
static size_t lay_out(uint64_t seed, uint64_t what, int n, const size_t *bytes, int aligned, size_t *off) {
  size_t at = 0;
  for (int p = 0; p < n; p++) {
    at += aligned ? 16 * soak_pick(seed, what + (uint64_t)p, A2A_GAP / 16 + 1) : soak_pick(seed, what + p, A2A_GAP);
    off[p] = at;
    at += bytes[p];
    if (aligned) at = (at + 15) & ~(size_t)15;
  }
  return at;
}

int soak_a2a_round(bench_ctx_t *ctx, soak_a2a_t *s, uint64_t seed, soak_stats_t *st) {
  const int W = ctx->world, me = ctx->rank, aligned = (int)soak_pick(seed, 1, 2);
  for (int p = 0; p < W; p++) {
    s->sb[p] = pair_bytes(s, seed, W, me, p, aligned);
    s->rb[p] = pair_bytes(s, seed, W, p, me, aligned);
  }
  const size_t send_end = lay_out(seed, 1000 + 64 * (uint64_t)me, W, s->sb, aligned, s->so);
  const size_t recv_end = lay_out(seed, 9000 + 64 * (uint64_t)me, W, s->rb, aligned, s->ro);
  memset(s->h_send, 0x5A, send_end);
  for (int p = 0; p < W; p++)
    for (size_t i = 0; i < s->sb[p]; i++) s->h_send[s->so[p] + i] = wl_payload_byte(seed, me, p, i);
  const size_t check_end = recv_end + A2A_GAP < s->cap ? recv_end + A2A_GAP : s->cap;
  if (soak_to_dev(ctx, s->send, s->h_send, send_end) || soak_fill(ctx, s->recv, SOAK_POISON, check_end)) return 1;
  if (sy_alltoallv(ctx->comm, s->send, s->sb, s->so, s->recv, s->rb, s->ro, ctx->stream) != SY_SUCCESS) return 1;
  if (soak_to_host(ctx, s->h_got, s->recv, check_end)) return 1;
  /* The reference: every source's segment for this rank regenerated, placed by sy__ref_alltoallv_recv. */
  memset(s->all_sb, 0, (size_t)W * W * sizeof(size_t));
  memset(s->all_so, 0, (size_t)W * W * sizeof(size_t));
  for (int src = 0; src < W; src++) {
    uint8_t *seg = s->h_src + (size_t)src * s->pair_cap;
    for (size_t i = 0; i < s->rb[src]; i++) seg[i] = wl_payload_byte(seed, src, me, i);
    s->srcs[src] = seg;
    s->all_sb[(size_t)src * W + me] = s->rb[src];
  }
  memset(s->h_want, SOAK_POISON, check_end);
  sy__ref_alltoallv_recv(W, me, s->srcs, s->all_sb, s->all_so, s->h_want, s->ro);
  st->wrong[SOAK_A2A] += soak_compare(st, "alltoallv recv", seed, s->h_got, s->h_want, check_end, 1);
  st->calls[SOAK_A2A]++;
  return 0;
}

/* ---- attention ------------------------------------------------------------------------------------------------ */

enum { MAXT = 4096, Q_RB_MAX = 256, KV_RB_MAX = 128, G_RB_MAX = 128, TAIL_ROWS = 16 };

struct soak_attn {
  sy_attn_t attn;
  int64_t cap_rows;                     /* rows any receive buffer may need: every rank's tokens */
  uint8_t *q, *kv, *rows_in, *grad_out; /* device */
  uint8_t *q_recv, *kv_recv, *out;      /* symmetric */
  uint8_t *h_in, *h_got, *h_want, *h_staging;
  size_t h_bytes;
};

size_t soak_attn_heap(int world, sy_backend_t backend) {
  const size_t cap = (size_t)world * MAXT;
  return cap * (Q_RB_MAX + KV_RB_MAX + G_RB_MAX) + (size_t)MAXT * Q_RB_MAX + 3 * 4096;
}

int soak_attn_open(bench_ctx_t *ctx, soak_attn_t **out) {
  soak_attn_t *s = calloc(1, sizeof *s);
  if (!s) return 1;
  *out = s;
  s->cap_rows = (int64_t)ctx->world * MAXT;
  const size_t cap = (size_t)s->cap_rows;
  s->h_bytes = cap * Q_RB_MAX;
  s->q = soak_alloc(ctx, (size_t)MAXT * Q_RB_MAX);
  s->kv = soak_alloc(ctx, (size_t)MAXT * KV_RB_MAX);
  s->rows_in = soak_alloc(ctx, cap * Q_RB_MAX);
  s->grad_out = soak_alloc(ctx, cap * G_RB_MAX);
  s->h_in = malloc(s->h_bytes), s->h_got = malloc(s->h_bytes), s->h_want = malloc(s->h_bytes);
  s->h_staging = malloc(cap * G_RB_MAX);
  if (!s->q || !s->kv || !s->rows_in || !s->grad_out || !s->h_in || !s->h_got || !s->h_want || !s->h_staging) return 1;
  if (sy_mem_alloc(ctx->comm, cap * Q_RB_MAX, (void **)&s->q_recv) != SY_SUCCESS ||
      sy_mem_alloc(ctx->comm, cap * KV_RB_MAX, (void **)&s->kv_recv) != SY_SUCCESS ||
      sy_mem_alloc(ctx->comm, (size_t)MAXT * Q_RB_MAX, (void **)&s->out) != SY_SUCCESS)
    return 1;
  /* every page touched now (see soak_a2a_open) */
  memset(s->h_in, 0, s->h_bytes), memset(s->h_got, 0, s->h_bytes), memset(s->h_want, 0, s->h_bytes);
  memset(s->h_staging, 0, cap * G_RB_MAX);
  if (soak_fill(ctx, s->q, 0, (size_t)MAXT * Q_RB_MAX) || soak_fill(ctx, s->kv, 0, (size_t)MAXT * KV_RB_MAX) ||
      soak_fill(ctx, s->rows_in, 0, cap * Q_RB_MAX) || soak_fill(ctx, s->grad_out, 0, cap * G_RB_MAX) ||
      soak_fill(ctx, s->q_recv, 0, cap * Q_RB_MAX) || soak_fill(ctx, s->kv_recv, 0, cap * KV_RB_MAX) ||
      soak_fill(ctx, s->out, 0, (size_t)MAXT * Q_RB_MAX) || soak_sync(ctx))
    return 1;
  sy_attn_config_t c = SY_ATTN_CONFIG_INIT;
  c.max_tokens = MAXT;
  c.max_replicas = ctx->world;
  c.max_kv_grad_row_bytes = G_RB_MAX;
  return sy_attn_create(ctx->comm, &c, &s->attn) != SY_SUCCESS;
}

void soak_attn_close(bench_ctx_t *ctx, soak_attn_t *s) {
  if (!s) return;
  if (s->attn) sy_attn_destroy(s->attn);
  if (s->q_recv) sy_mem_free(ctx->comm, s->q_recv);
  if (s->kv_recv) sy_mem_free(ctx->comm, s->kv_recv);
  if (s->out) sy_mem_free(ctx->comm, s->out);
  soak_free(ctx, s->q), soak_free(ctx, s->kv), soak_free(ctx, s->rows_in), soak_free(ctx, s->grad_out);
  free(s->h_in), free(s->h_got), free(s->h_want), free(s->h_staging);
  free(s);
}

/* Row `row` of rank `rank`'s buffer `which` (the GPU tests' encoding, wl_payload_fill_odd's bytes). */
static void payload_row(uint8_t *out, uint64_t seed, int which, int rank, int64_t row, size_t rb) {
  for (size_t b = 0; b < rb; b++)
    out[b] = wl_payload_byte(seed + (uint64_t)which, rank, (int)(row & 0xFFFF), (uint64_t)row * rb + b);
}

/* Row `row` of rank `rank`'s KV gradient: wl_grad_bits's elements of dtype. */
static void grad_row(uint8_t *out, uint64_t seed, sy_dtype_t dtype, int rank, int64_t row, size_t rb) {
  const size_t elem = sy__dtype_size(dtype);
  for (size_t e = 0; e < rb / elem; e++) {
    const uint32_t bits = wl_grad_bits(seed, dtype, rank, row, e, 0);
    if (elem == 4) memcpy(out + 4 * e, &bits, 4);
    else memcpy(out + 2 * e, &(uint16_t){(uint16_t)bits}, 2);
  }
}

/* What direction dir delivers here: every receive segment of the plan, rows from the source's formula. */
static void expect_rows(const struct sy_attn_plan *plan, int dir, uint64_t seed, int which, sy_dtype_t dtype, size_t rb,
                        uint8_t *want) {
  const sy_attn_dir_t *d = &plan->dir[dir];
  for (int src = 0; src < plan->world_size; src++)
    for (int64_t g = d->recv_start[src]; g < d->recv_start[src + 1]; g++)
      for (int64_t i = 0; i < d->recv_segs[g].rows; i++) {
        uint8_t *row = want + (size_t)(d->recv_segs[g].dst_row + i) * rb;
        if (dir == SY_ATTN_KV_BWD) grad_row(row, seed, dtype, src, d->recv_segs[g].src_row + i, rb);
        else payload_row(row, seed, which, src, d->recv_segs[g].src_row + i, rb);
      }
}

/* A random description: short sequences (any kind, 0..3 replicas), documents, or sy_attn_place's shards. */
static int make_desc(bench_ctx_t *ctx, uint64_t seed, wl_attn_desc_t *g, sy_attn_placement_t *placement,
                     sy_attn_plan_desc_t *desc, soak_stats_t *st) {
  const int W = ctx->world, kind = (int)soak_pick(seed, 10, 5);
  *placement = NULL;
  if (kind <= 2) {
    const int C = (int)soak_pick(seed, 11, (uint64_t)(W < 3 ? W : 3) + 1);
    if (wl_attn_short_seqs(g, W, C, (wl_attn_kind_t)soak_pick(seed, 12, WL_ATTN_KINDS),
                           1 + (int)soak_pick(seed, 13, 12), WL_DRAW_GPU, seed))
      return 1;
  } else if (kind == 3) {
    const int replicas = W >= 2 ? 1 + (int)soak_pick(seed, 14, 2) : 1;
    if (wl_attn_documents(g, W, replicas, 256 + (int64_t)soak_pick(seed, 15, MAXT - 255), (int)soak_pick(seed, 16, 2),
                          seed))
      return 1;
  }
  if (kind <= 3) {
    *desc = g->desc;
    return 0;
  }
  int num_docs[64];
  int64_t *lens[64], flat[64 * 6];
  for (int r = 0; r < W && r < 64; r++) {
    num_docs[r] = 1 + (int)soak_pick(seed, 20 + (uint64_t)r, 6);
    lens[r] = flat + 6 * r;
    for (int i = 0; i < num_docs[r]; i++) lens[r][i] = 1 + (int64_t)soak_pick(seed, 100 + 6 * (uint64_t)r + i, 600);
  }
  sy_attn_place_desc_t pd = SY_ATTN_PLACE_DESC_INIT;
  pd.world_size = W;
  pd.num_docs = num_docs;
  pd.doc_lens = (const int64_t *const *)lens;
  if (W > 64 || sy_attn_place(&pd, placement) != SY_SUCCESS) return 1;
  st->attn_placed++;
  return sy_attn_placement_desc(*placement, desc) != SY_SUCCESS;
}

/* One call of direction dir with its inputs uploaded; *out and *out_rows: where the result is and how many rows
 * of rb it has; the second channel of the Q+KV forward is checked by the caller. */
static int attn_call(bench_ctx_t *ctx, soak_attn_t *s, sy_attn_plan_t plan, int dir, uint64_t seed, size_t rb,
                     size_t kv_rb, sy_dtype_t dtype, unsigned flags) {
  const struct sy_attn_plan *p = plan; /* the internal view: sy_attn_plan_t is struct sy_attn_plan * */
  const int me = ctx->rank;
  int rc = 0;
  switch (dir) {
    case SOAK_Q_FWD:
    case SOAK_QKV_FWD:
      for (int64_t i = 0; i < p->num_tokens; i++) payload_row(s->h_in + (size_t)i * rb, seed, 0, me, i, rb);
      rc |= soak_to_dev(ctx, s->q, s->h_in, (size_t)p->num_tokens * rb);
      if (dir == SOAK_Q_FWD)
        return rc || sy_attn_q_forward(s->attn, plan, s->q, rb, s->q_recv, ctx->stream) != SY_SUCCESS;
      for (int64_t i = 0; i < p->num_tokens; i++) payload_row(s->h_in + (size_t)i * kv_rb, seed, 1, me, i, kv_rb);
      rc |= soak_to_dev(ctx, s->kv, s->h_in, (size_t)p->num_tokens * kv_rb);
      return rc || sy_attn_qkv_forward(s->attn, plan, s->q, rb, s->q_recv, s->kv, kv_rb, s->kv_recv, ctx->stream) !=
                       SY_SUCCESS;
    case SOAK_Q_REV: {
      const int64_t rows = p->dir[SY_ATTN_Q_FWD].recv_total;
      for (int64_t i = 0; i < rows; i++) payload_row(s->h_in + (size_t)i * rb, seed, 2, me, i, rb);
      rc |= soak_to_dev(ctx, s->rows_in, s->h_in, (size_t)rows * rb);
      return rc || sy_attn_q_reverse(s->attn, plan, s->rows_in, rb, s->out, ctx->stream) != SY_SUCCESS;
    }
    default: {
      const int64_t rows = p->dir[SY_ATTN_KV_FWD].recv_total;
      for (int64_t i = 0; i < rows; i++) grad_row(s->h_in + (size_t)i * rb, seed, dtype, me, i, rb);
      rc |= soak_to_dev(ctx, s->rows_in, s->h_in, (size_t)rows * rb);
      return rc ||
             sy_attn_kv_backward(s->attn, plan, s->rows_in, rb, dtype, flags, s->grad_out, ctx->stream) != SY_SUCCESS;
    }
  }
}

/* The output of one channel against its expectation: rows [0, rows) and up to TAIL_ROWS more that keep the poison. */
static int check_rows(bench_ctx_t *ctx, soak_attn_t *s, soak_stats_t *st, const char *what, uint64_t seed,
                      const uint8_t *dev, int64_t rows, int64_t cap_rows, size_t rb, size_t elem) {
  const int64_t n = rows + TAIL_ROWS < cap_rows ? rows + TAIL_ROWS : cap_rows;
  if (soak_to_host(ctx, s->h_got, dev, (size_t)n * rb)) return 1;
  if (n > rows) memset(s->h_want + (size_t)rows * rb, SOAK_POISON, (size_t)(n - rows) * rb);
  st->wrong[SOAK_ATTN] += soak_compare(st, what, seed, s->h_got, s->h_want, (size_t)n * rb, elem);
  return 0;
}

int soak_attn_round(bench_ctx_t *ctx, soak_attn_t *s, uint64_t seed, soak_stats_t *st) {
  static const size_t q_sizes[] = {16, 40, 64, 100, 256}, kv_sizes[] = {8, 24, 64, 128}, g_elems[] = {4, 8, 32};
  static const sy_dtype_t dtypes[] = {SY_DTYPE_BF16, SY_DTYPE_FP16, SY_DTYPE_FP32};
  wl_attn_desc_t g;
  memset(&g, 0, sizeof g);
  sy_attn_placement_t placement = NULL;
  sy_attn_plan_desc_t desc;
  sy_attn_plan_t plan = NULL;
  int rc = make_desc(ctx, seed, &g, &placement, &desc, st);
  if (!rc && sy_attn_plan_create(ctx->comm, &desc, &plan) != SY_SUCCESS) rc = 1;
  if (rc) {
    fprintf(stderr, "sy-bench soak: rank %d: attention plan of seed 0x%llx failed\n", ctx->rank,
            (unsigned long long)seed);
    goto done;
  }
  const struct sy_attn_plan *p = plan;
  const int dir = p->max_replicas > 0 ? (int)soak_pick(seed, 30, 4) : 2 * (int)soak_pick(seed, 30, 2);
  const sy_dtype_t dtype = dtypes[soak_pick(seed, 31, 3)];
  const unsigned flags = soak_pick(seed, 32, 2) ? SY_ATTN_UNSUMMED : 0;
  const size_t elem = sy__dtype_size(dtype), kv_rb = kv_sizes[soak_pick(seed, 33, 4)];
  const size_t rb = dir == SOAK_KV_BWD ? elem * g_elems[soak_pick(seed, 34, 3)] : q_sizes[soak_pick(seed, 35, 5)];
  const int64_t q_rows = p->dir[SY_ATTN_Q_FWD].recv_total, kv_rows = p->dir[SY_ATTN_KV_FWD].recv_total;
  /* the outputs start as poison: rows nobody writes must keep it */
  if (dir <= SOAK_QKV_FWD) rc |= soak_fill(ctx, s->q_recv, SOAK_POISON, (size_t)s->cap_rows * rb);
  if (dir == SOAK_QKV_FWD) rc |= soak_fill(ctx, s->kv_recv, SOAK_POISON, (size_t)s->cap_rows * kv_rb);
  if (dir == SOAK_Q_REV) rc |= soak_fill(ctx, s->out, SOAK_POISON, (size_t)MAXT * rb);
  if (dir == SOAK_KV_BWD) rc |= soak_fill(ctx, s->grad_out, SOAK_POISON, (size_t)s->cap_rows * rb);
  rc = rc || attn_call(ctx, s, plan, dir, seed, rb, kv_rb, dtype, flags);
  if (rc) goto done;
  if (dir <= SOAK_QKV_FWD) {
    expect_rows(p, SY_ATTN_Q_FWD, seed, 0, dtype, rb, s->h_want);
    rc |= check_rows(ctx, s, st, "attn q_recv", seed, s->q_recv, q_rows, s->cap_rows, rb, 1);
  }
  if (dir == SOAK_QKV_FWD) {
    expect_rows(p, SY_ATTN_KV_FWD, seed, 1, dtype, kv_rb, s->h_want);
    rc |= check_rows(ctx, s, st, "attn kv_recv", seed, s->kv_recv, kv_rows, s->cap_rows, kv_rb, 1);
  }
  if (dir == SOAK_Q_REV) {
    memset(s->h_want, SOAK_POISON, (size_t)p->num_tokens * rb); /* rows of sequences not sent stay untouched */
    expect_rows(p, SY_ATTN_Q_REV, seed, 2, dtype, rb, s->h_want);
    rc |= check_rows(ctx, s, st, "attn q_reverse out", seed, s->out, p->num_tokens, MAXT, rb, 1);
  }
  if (dir == SOAK_KV_BWD) {
    const int64_t out_rows = flags ? (int64_t)p->max_replicas * p->num_tokens : p->num_tokens;
    memset(s->h_staging, 0, (size_t)p->max_replicas * (size_t)p->num_tokens * rb);
    expect_rows(p, SY_ATTN_KV_BWD, seed, 0, dtype, rb, s->h_staging);
    sy__ref_attn_kv_reduce(p, s->h_staging, rb, dtype, flags, s->h_want);
    rc |= check_rows(ctx, s, st, "attn kv_backward grad_out", seed, s->grad_out, out_rows, s->cap_rows, rb, elem);
  }
  st->attn_dirs[dir]++;
  st->calls[SOAK_ATTN]++;
done:
  if (plan) sy_attn_plan_destroy(plan);
  if (placement) sy_attn_placement_destroy(placement);
  wl_attn_desc_free(&g);
  return rc;
}
