/*
 * test_attn_host.c — the attention dispatch on the host backend (ranks are threads), bit for bit against
 * expectations computed here from the plan description alone (attn_test.h), every output poisoned first:
 *  - W = 1, 2, 3, 4, 8 and C = 1..W (and C = 0), seeded random plans, all tokens to one rank, a rank with no
 *    tokens, every destination -1 (outputs keep their poison); rows of 2, 48, 130 and 4096 bytes;
 *  - Q forward; Q reverse; Q forward then Q reverse returns the input rows of sent sequences and leaves the
 *    others untouched; Q+KV forward; KV backward summed (bf16, fp16, fp32, against an fp32 sum in replica
 *    order computed here) and unsummed; inputs are never written; plan info matches the description (its
 *    maxima over ranks, and over the plans of the back-to-back calls, are what the buffers were sized by);
 *  - every kind of tests/workload's plans, empty sequences among them;
 *  - 200 back-to-back calls, a different plan and direction every call, no barrier in between;
 *  - the KV backward's reduce on special values (NaN, infinities, -0.0, subnormals, overflow).
 * SY_TEST_SEED overrides the seed; a failure prints it.
 */
#include "attn_test.h"
#include "plan/attn_plan.h"
#include "ref/attn_ref.h"

#include <math.h>
#include <time.h>

/* ---- gradients --------------------------------------------------------------------------------------------- */

static size_t dtype_bytes(sy_dtype_t dtype) { return dtype == SY_DTYPE_FP32 ? 4 : 2; }

/* The gradient row size for a scenario's KV row size: the same, rounded up to whole elements. */
static size_t grad_row_bytes(size_t kv_rb, sy_dtype_t dtype) {
  const size_t e = dtype_bytes(dtype);
  return (kv_rb + e - 1) / e * e;
}

/* Decoding written here, not taken from src/ref (the encoders are checked exhaustively by test_bf16). Finite
 * fp16 values only (the inputs have no infinity or NaN). */
static float fp16_table[65536];

static void fp16_table_init(void) {
  for (uint32_t bits = 0; bits < 65536; bits++) {
    const int x = (int)(bits >> 10) & 31, m = (int)(bits & 0x3FF);
    const float v = x ? ldexpf((float)(m | 0x400), x - 25) : ldexpf((float)m, -24);
    fp16_table[bits] = bits & 0x8000u ? -v : v;
  }
}

static float grad_value(sy_dtype_t dtype, uint32_t bits) {
  if (dtype == SY_DTYPE_FP32) {
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  if (dtype == SY_DTYPE_BF16) {
    uint32_t u = bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  return fp16_table[bits & 0xFFFFu];
}

/* ---- expectations from the description ---------------------------------------------------------------------- */

/* The image of rank me's forward receive buffer (Q, or KV when kv), rows of rb, starting `shift` rows in. */
static void expect_forward(const gen_t *g, int me, int kv, int which, size_t rb, uint64_t round, unsigned char *image,
                           size_t image_bytes, size_t shift) {
  memset(image, POISON, image_bytes);
  unsigned char *base = image + shift * rb;
  for (int s = 0; s < g->d.W; s++) {
    for (int i = 0; i < g->d.num_seqs[s]; i++) {
      for (int c = 0; c < (kv ? g->d.C : 1); c++) {
        const size_t at = (size_t)i * (size_t)g->d.C + (size_t)c;
        const int d = kv ? g->d.kv_dst[s][at] : g->d.q_dst[s][i];
        const int64_t pos = kv ? g->kv_pos[s][at] : g->q_pos[s][i];
        if (d != me) continue;
        for (int64_t t = 0; t < g->d.lens[s][i]; t++)
          payload_row(base + (size_t)(pos + t) * rb, which, s, g->start[s][i] + t, round, rb);
      }
    }
  }
}

/* Q reverse at owner me: the rows of a sequence sent to rank a come back from a's attention rows (payload
 * `which` of rank a, or when round_trip the rows a received, i.e. me's own Q rows); unsent rows keep the poison. */
static void expect_reverse(const gen_t *g, int me, int round_trip, size_t rb, uint64_t round, unsigned char *image,
                           size_t image_bytes) {
  memset(image, POISON, image_bytes);
  for (int i = 0; i < g->d.num_seqs[me]; i++) {
    const int a = g->d.q_dst[me][i];
    if (a < 0) continue;
    for (int64_t t = 0; t < g->d.lens[me][i]; t++) {
      unsigned char *row = image + (size_t)(g->start[me][i] + t) * rb;
      if (round_trip) payload_row(row, BUF_Q, me, g->start[me][i] + t, round, rb);
      else payload_row(row, BUF_ATTN, a, g->q_pos[me][i] + t, round, rb);
    }
  }
}

static void put_element(unsigned char *p, sy_dtype_t dtype, float v) {
  if (dtype == SY_DTYPE_FP32) {
    memcpy(p, &v, 4);
    return;
  }
  uint16_t h = dtype == SY_DTYPE_BF16 ? sy__float_to_bf16(v) : sy__float_to_fp16(v);
  memcpy(p, &h, 2);
}

/* Element e of gradient row `row` of rank d: from d's input rows when the caller shares them (grads_of[d]),
 * else generated again (wl_grad_bits, as wl_grad_fill made them). */
static uint32_t source_bits(const unsigned char *const *grads_of, sy_dtype_t dtype, int d, int64_t row, size_t e,
                            size_t rb, uint64_t round) {
  if (!grads_of) return wl_grad_bits(seed, dtype, d, row, e, round);
  uint32_t bits = 0;
  memcpy(&bits, grads_of[d] + (size_t)row * rb + e * dtype_bytes(dtype), dtype_bytes(dtype)); /* little-endian */
  return bits;
}

/* KV backward at owner me: summed, or replica by replica. */
static void expect_kv_backward(const gen_t *g, int me, sy_dtype_t dtype, unsigned flags, size_t rb, uint64_t round,
                               const unsigned char *const *grads_of, unsigned char *image, size_t image_bytes) {
  memset(image, POISON, image_bytes);
  const int C = g->d.C;
  const size_t N = (size_t)g->d.num_tokens[me], es = dtype_bytes(dtype);
  for (int i = 0; i < g->d.num_seqs[me]; i++) {
    const int *dst = g->d.kv_dst[me] + (size_t)i * C;
    const int64_t *pos = g->kv_pos[me] + (size_t)i * C;
    for (int64_t t = 0; t < g->d.lens[me][i]; t++) {
      const size_t token = (size_t)(g->start[me][i] + t);
      if (flags & SY_ATTN_UNSUMMED) {
        for (int c = 0; c < C; c++) {
          unsigned char *row = image + ((size_t)c * N + token) * rb;
          if (dst[c] < 0) {
            memset(row, 0, rb);
            continue;
          }
          for (size_t e = 0; e < rb / es; e++) { /* the replica's row as its rank sent it */
            uint32_t bits = source_bits(grads_of, dtype, dst[c], pos[c] + t, e, rb, round);
            if (es == 4) memcpy(row + 4 * e, &bits, 4);
            else {
              uint16_t h = (uint16_t)bits;
              memcpy(row + 2 * e, &h, 2);
            }
          }
        }
        continue;
      }
      unsigned char *row = image + token * rb;
      int any = 0;
      for (int c = 0; c < C; c++) any |= dst[c] >= 0;
      if (!any) {
        memset(row, 0, rb);
        continue;
      }
      for (size_t e = 0; e < rb / es; e++) {
        float sum = 0.0f;
        int first = 1;
        for (int c = 0; c < C; c++) {
          if (dst[c] < 0) continue;
          const float v = grad_value(dtype, source_bits(grads_of, dtype, dst[c], pos[c] + t, e, rb, round));
          sum = first ? v : sum + v;
          first = 0;
        }
        put_element(row + e * es, dtype, sum);
      }
    }
  }
}

/* ---- one scenario on every rank ----------------------------------------------------------------------------- */

typedef struct scen {
  gen_t g;
  size_t q_rb, kv_rb;
  size_t shift;                             /* receive buffers start this many rows into their allocation */
  const unsigned char *grads_of[MAX_RANKS]; /* every rank's gradient rows, for the expectation */
  char name[96];
} scen_t;

static void check_info(sy_attn_plan_t plan, const gen_t *g, int me, const char *name) {
  sy_attn_plan_info_t info = SY_ATTN_PLAN_INFO_INIT;
  CHECK_OK(sy_attn_plan_info(plan, &info));
  int bad = info.num_tokens != g->d.num_tokens[me] || info.q_recv_rows != g->q_total[me] ||
            info.kv_recv_rows != g->kv_total[me] || info.max_num_tokens != g->max_tokens ||
            info.max_q_recv_rows != g->max_q || info.max_kv_recv_rows != g->max_kv;
  for (int p = 0; p < g->d.W && !bad; p++)
    bad = info.q_recv_from[p] != g->q_pair[p][me] || info.q_send_to[p] != g->q_pair[me][p] ||
          info.kv_recv_from[p] != g->kv_pair[p][me] || info.kv_send_to[p] != g->kv_pair[me][p];
  if (bad) fprintf(stderr, "%s: rank %d: plan info disagrees with the description\n", name, me);
  CHECK(!bad);
}

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

/* The plan's per-sequence metadata (sy_attn_plan_seqs) against the description, and each received Q sequence
 * against the rows Q forward delivered: where the metadata says, the source's rows. */
static void check_seqs(sy_attn_plan_t plan, const gen_t *g, int me, const unsigned char *q_recv, size_t rb,
                       const char *name) {
  sy_attn_plan_seqs_t seqs = SY_ATTN_PLAN_SEQS_INIT;
  CHECK_OK(sy_attn_plan_seqs(plan, &seqs));
  CHECK_EQ_INT(seqs.num_seqs, g->d.desc.num_seqs[me]);
  CHECK_EQ_INT(seqs.max_replicas, g->d.C);
  int bad = 0;
  int64_t row = 0;
  for (int i = 0; i < seqs.num_seqs && !bad; i++) {
    const sy_attn_seq_place_t *e = &seqs.q_send[i];
    bad |= e->src_rank != me || e->seq != i || e->src_row != row || e->rows != g->d.desc.seq_lens[me][i] ||
           e->dst_rank != g->d.desc.q_dst[me][i] || (e->dst_rank < 0) != (e->dst_row < 0);
    for (int c = 0; c < g->d.C; c++) {
      const sy_attn_seq_place_t *k = &seqs.kv_send[(size_t)i * g->d.C + c];
      bad |= k->src_row != row || k->replica != c || k->dst_rank != g->d.desc.kv_dst[me][(size_t)i * g->d.C + c];
    }
    row += e->rows;
  }
  unsigned char *want = xmalloc(rb);
  row = 0;
  for (int64_t k = 0; k < seqs.q_recv_count && !bad; k++) {
    const sy_attn_seq_place_t *e = &seqs.q_recv[k];
    bad |= e->dst_rank != me || e->dst_row != row;
    for (int64_t j = 0; j < e->rows && !bad; j++) {
      payload_row(want, BUF_Q, e->src_rank, e->src_row + j, 0, rb);
      bad |= memcmp(q_recv + (size_t)(e->dst_row + j) * rb, want, rb) != 0;
    }
    row += e->rows;
  }
  free(want);
  bad |= row != g->q_total[me];
  if (bad) fprintf(stderr, "%s: rank %d: the plan's sequences disagree with the description or the rows\n", name, me);
  CHECK(!bad);
}

/* Every direction in turn on one plan; each output checked against its image, each input against its copy. */
static void scenario_rank(int me, sy_comm_t comm, void *arg) {
  scen_t *sc = arg;
  const gen_t *g = &sc->g;
  const int C = g->d.C;
  const size_t N = (size_t)g->d.num_tokens[me], q_rb = sc->q_rb, kv_rb = sc->kv_rb, shift = sc->shift;
  char what[192];
  sy_attn_plan_t plan = NULL;
  CHECK_OK(sy_attn_plan_create(comm, &g->d.desc, &plan));
  if (!plan) return;
  check_info(plan, g, me, sc->name);

  const size_t grad_rb_max = grad_row_bytes(kv_rb, SY_DTYPE_FP32);
  sy_attn_config_t config = SY_ATTN_CONFIG_INIT;
  config.max_tokens = g->max_tokens > 0 ? g->max_tokens : 1;
  config.max_replicas = C > 0 ? C : 1;
  config.max_kv_grad_row_bytes = C > 0 ? grad_rb_max : 0;
  size_t workspace = 0;
  CHECK_OK(sy_attn_workspace_size(comm, &config, &workspace));
  const size_t staging = (size_t)config.max_replicas * (size_t)config.max_tokens * config.max_kv_grad_row_bytes;
  CHECK_EQ_INT(workspace, (staging + 255) / 256 * 256);
  sy_attn_t attn = NULL;
  CHECK_OK(sy_attn_create(comm, &config, &attn));

  /* Symmetric outputs, the same size on every rank; local inputs. */
  const size_t q_alloc = ((size_t)g->max_q + shift + 2) * q_rb, kv_alloc = ((size_t)g->max_kv + shift + 2) * kv_rb;
  const size_t out_alloc = ((size_t)g->max_tokens + 2) * q_rb;
  unsigned char *q_recv_base = NULL, *kv_recv_base = NULL, *out = NULL;
  CHECK_OK(sy_mem_alloc(comm, q_alloc, (void **)&q_recv_base));
  CHECK_OK(sy_mem_alloc(comm, kv_alloc, (void **)&kv_recv_base));
  CHECK_OK(sy_mem_alloc(comm, out_alloc, (void **)&out));
  unsigned char *q_recv = q_recv_base + shift * q_rb, *kv_recv = kv_recv_base + shift * kv_rb;
  const size_t q_rows_here = (size_t)g->q_total[me], kv_rows_here = (size_t)g->kv_total[me];
  unsigned char *q = xmalloc(N * q_rb), *kv = xmalloc(N * kv_rb), *attn_rows = xmalloc(q_rows_here * q_rb);
  unsigned char *grads = xmalloc(kv_rows_here * grad_rb_max);
  const size_t grad_out_bytes = ((size_t)(C > 0 ? C : 1) * N + 1) * grad_rb_max + 64;
  unsigned char *grad_out = xmalloc(grad_out_bytes);
  size_t image_bytes = q_alloc > kv_alloc ? q_alloc : kv_alloc;
  image_bytes = image_bytes > out_alloc ? image_bytes : out_alloc;
  unsigned char *image = xmalloc(image_bytes > grad_out_bytes ? image_bytes : grad_out_bytes);
  unsigned char *copy = xmalloc(N * (q_rb > kv_rb ? q_rb : kv_rb) + q_rows_here * q_rb + kv_rows_here * grad_rb_max);
  payload_fill(q, BUF_Q, me, (int64_t)N, 0, q_rb);
  payload_fill(kv, BUF_KV, me, (int64_t)N, 0, kv_rb);
  payload_fill(attn_rows, BUF_ATTN, me, (int64_t)q_rows_here, 0, q_rb);

  /* Q forward. */
  memset(q_recv_base, POISON, q_alloc);
  memcpy(copy, q, N * q_rb);
  CHECK_OK(sy_comm_barrier(comm, NULL));
  CHECK_OK(sy_attn_q_forward(attn, plan, q, q_rb, q_recv, NULL));
  expect_forward(g, me, 0, BUF_Q, q_rb, 0, image, q_alloc, shift);
  snprintf(what, sizeof what, "%s: rank %d: q forward, q_recv", sc->name, me);
  CHECK(!compare_bytes(q_recv_base, image, q_alloc, q_rb, what));
  CHECK(!memcmp(copy, q, N * q_rb));
  check_seqs(plan, g, me, q_recv, q_rb, sc->name);

  /* Q reverse of attention rows. */
  memset(out, POISON, out_alloc);
  memcpy(copy, attn_rows, q_rows_here * q_rb);
  CHECK_OK(sy_comm_barrier(comm, NULL));
  CHECK_OK(sy_attn_q_reverse(attn, plan, attn_rows, q_rb, out, NULL));
  expect_reverse(g, me, 0, q_rb, 0, image, out_alloc);
  snprintf(what, sizeof what, "%s: rank %d: q reverse, out", sc->name, me);
  CHECK(!compare_bytes(out, image, out_alloc, q_rb, what));
  CHECK(!memcmp(copy, attn_rows, q_rows_here * q_rb));

  /* Q reverse of what Q forward delivered: the input again, unsent rows untouched. */
  memset(out, POISON, out_alloc);
  CHECK_OK(sy_comm_barrier(comm, NULL));
  CHECK_OK(sy_attn_q_reverse(attn, plan, q_recv, q_rb, out, NULL));
  expect_reverse(g, me, 1, q_rb, 0, image, out_alloc);
  snprintf(what, sizeof what, "%s: rank %d: q forward then q reverse, out", sc->name, me);
  CHECK(!compare_bytes(out, image, out_alloc, q_rb, what));

  if (C > 0) {
    /* Q+KV forward. */
    memset(q_recv_base, POISON, q_alloc);
    memset(kv_recv_base, POISON, kv_alloc);
    memcpy(copy, kv, N * kv_rb);
    CHECK_OK(sy_comm_barrier(comm, NULL));
    CHECK_OK(sy_attn_qkv_forward(attn, plan, q, q_rb, q_recv, kv, kv_rb, kv_recv, NULL));
    expect_forward(g, me, 0, BUF_Q, q_rb, 0, image, q_alloc, shift);
    snprintf(what, sizeof what, "%s: rank %d: q+kv forward, q_recv", sc->name, me);
    CHECK(!compare_bytes(q_recv_base, image, q_alloc, q_rb, what));
    expect_forward(g, me, 1, BUF_KV, kv_rb, 0, image, kv_alloc, shift);
    snprintf(what, sizeof what, "%s: rank %d: q+kv forward, kv_recv", sc->name, me);
    CHECK(!compare_bytes(kv_recv_base, image, kv_alloc, kv_rb, what));
    CHECK(!memcmp(copy, kv, N * kv_rb));

    /* KV backward: three element types, summed and unsummed. */
    static const sy_dtype_t dtypes[3] = {SY_DTYPE_BF16, SY_DTYPE_FP16, SY_DTYPE_FP32};
    for (int k = 0; k < 6; k++) {
      const sy_dtype_t dtype = dtypes[k / 2];
      const unsigned flags = k % 2 ? SY_ATTN_UNSUMMED : 0;
      const size_t rb = grad_row_bytes(kv_rb, dtype);
      const uint64_t round = 1 + (uint64_t)k;
      wl_grad_fill(grads, seed, dtype, me, (int64_t)kv_rows_here, rb, round);
      sc->grads_of[me] = grads; /* published by the barrier below */
      memcpy(copy, grads, kv_rows_here * rb);
      memset(grad_out, POISON, grad_out_bytes);
      CHECK_OK(sy_comm_barrier(comm, NULL));
      CHECK_OK(sy_attn_kv_backward(attn, plan, grads, rb, dtype, flags, grad_out, NULL));
      expect_kv_backward(g, me, dtype, flags, rb, round, sc->grads_of, image, grad_out_bytes);
      snprintf(what, sizeof what, "%s: rank %d: kv backward %s %s, grad_out", sc->name, me,
               dtype == SY_DTYPE_BF16   ? "bf16"
               : dtype == SY_DTYPE_FP16 ? "fp16"
                                        : "fp32",
               flags ? "unsummed" : "summed");
      CHECK(!compare_bytes(grad_out, image, grad_out_bytes, rb, what));
      CHECK(!memcmp(copy, grads, kv_rows_here * rb));
      CHECK_OK(sy_comm_barrier(comm, NULL)); /* peers have read this rank's gradients before it refills them */
    }
  }

  sy_status_t async = SY_SUCCESS;
  CHECK_OK(sy_comm_async_error(comm, &async, NULL, 0));
  CHECK_EQ_INT(async, SY_SUCCESS);
  CHECK_OK(sy_mem_free(comm, q_recv_base));
  CHECK_OK(sy_mem_free(comm, kv_recv_base));
  CHECK_OK(sy_mem_free(comm, out));
  CHECK_OK(sy_attn_destroy(attn));
  CHECK_OK(sy_attn_plan_destroy(plan));
  free(q);
  free(kv);
  free(attn_rows);
  free(grads);
  free(grad_out);
  free(image);
  free(copy);
}

static void scenarios(void) {
  static const size_t row_sizes[4][2] = {{2, 48}, {48, 130}, {130, 4096}, {4096, 2}};
  static const int worlds[5] = {1, 2, 3, 4, 8};
  int index = 0;
  for (int w = 0; w < 5; w++) {
    const int W = worlds[w];
    for (int C = 0; C <= W; C++) {
      for (int kind = 0; kind < WL_ATTN_KINDS; kind++, index++) {
        if (C == 0 && kind != WL_ATTN_RANDOM) continue; /* C = 0 (no KV) once per world size */
        scen_t *sc = calloc(1, sizeof *sc);
        gen_make(&sc->g, W, C, (wl_attn_kind_t)kind, 6, (uint64_t)index);
        /* 4096-byte rows on every fourth scenario only, to keep the run short */
        sc->q_rb = row_sizes[index % 4][0];
        sc->kv_rb = row_sizes[index % 4][1];
        if (W * C > 16 && sc->kv_rb == 4096) sc->kv_rb = 1030; /* the widest plans: smaller KV rows, same paths */
        sc->shift = (size_t)(index % 3);
        snprintf(sc->name, sizeof sc->name, "W=%d C=%d %s (q %zu B, kv %zu B)", W, C, wl_attn_kind_name(kind), sc->q_rb,
                 sc->kv_rb);
        run_ranks(W, scenario_rank, sc);
        gen_free(&sc->g);
        free(sc);
      }
    }
  }
}

/* ---- 200 back-to-back calls, a new plan every call ---------------------------------------------------------- */

#define B2B_CALLS 200
#define B2B_W     4
#define B2B_C     2

typedef struct b2b {
  gen_t g[B2B_CALLS];
  int64_t max_tokens, max_q, max_kv;
} b2b_t;

static void b2b_rank(int me, sy_comm_t comm, void *arg) {
  b2b_t *b = arg;
  static const size_t rbs[4] = {48, 130, 2, 4096};
  sy_attn_config_t config = SY_ATTN_CONFIG_INIT;
  config.max_tokens = b->max_tokens;
  config.max_replicas = B2B_C;
  config.max_kv_grad_row_bytes = 4096;
  sy_attn_t attn = NULL;
  CHECK_OK(sy_attn_create(comm, &config, &attn));
  const size_t max_rows = (size_t)(b->max_q > b->max_tokens ? b->max_q : b->max_tokens) + 1;
  const size_t alloc = max_rows * 4096, kv_alloc = ((size_t)b->max_kv + 1) * 4096;
  const size_t grad_bytes = (size_t)B2B_C * (size_t)b->max_tokens * 4096 + 64;
  unsigned char *recv = NULL, *kv_recv = NULL;
  CHECK_OK(sy_mem_alloc(comm, alloc, (void **)&recv));
  CHECK_OK(sy_mem_alloc(comm, kv_alloc, (void **)&kv_recv));
  unsigned char *in = xmalloc(((size_t)b->max_kv > max_rows ? (size_t)b->max_kv : max_rows) * 4096);
  unsigned char *kv = xmalloc(max_rows * 4096), *grad_out = xmalloc(grad_bytes);
  unsigned char *image = xmalloc(grad_bytes > kv_alloc ? (grad_bytes > alloc ? grad_bytes : alloc)
                                                       : (kv_alloc > alloc ? kv_alloc : alloc));
  int wrong = 0;
  int64_t most[3] = {0, 0, 0};          /* over the plans: what one buffer serving all of them needs, from plan info */
  for (int k = 0; k < B2B_CALLS; k++) { /* on through a failure: a rank that stopped early would hang its peers */
    const gen_t *g = &b->g[k];
    const int op = k % 4;
    const size_t rb = rbs[(k / 4) % 4];
    const uint64_t round = 100 + (uint64_t)k;
    sy_attn_plan_t plan = NULL;
    CHECK_OK(sy_attn_plan_create(comm, &g->d.desc, &plan));
    if (!plan) break;
    sy_attn_plan_info_t info = SY_ATTN_PLAN_INFO_INIT;
    CHECK_OK(sy_attn_plan_info(plan, &info));
    most[0] = info.max_num_tokens > most[0] ? info.max_num_tokens : most[0];
    most[1] = info.max_q_recv_rows > most[1] ? info.max_q_recv_rows : most[1];
    most[2] = info.max_kv_recv_rows > most[2] ? info.max_kv_recv_rows : most[2];
    const int64_t N = g->d.num_tokens[me];
    char what[128];
    snprintf(what, sizeof what, "back-to-back call %d (op %d, %zu-byte rows): rank %d", k, op, rb, me);
    /* Only this rank writes its outputs (receivers pull), so poisoning them needs no barrier. */
    if (op == 0 || op == 1) {
      payload_fill(in, BUF_Q, me, N, round, rb);
      memset(recv, POISON, alloc);
      if (op == 0) {
        CHECK_OK(sy_attn_q_forward(attn, plan, in, rb, recv, NULL));
      } else {
        payload_fill(kv, BUF_KV, me, N, round, rb);
        memset(kv_recv, POISON, kv_alloc);
        CHECK_OK(sy_attn_qkv_forward(attn, plan, in, rb, recv, kv, rb, kv_recv, NULL));
        expect_forward(g, me, 1, BUF_KV, rb, round, image, kv_alloc, 0);
        wrong += compare_bytes(kv_recv, image, kv_alloc, rb, what);
      }
      expect_forward(g, me, 0, BUF_Q, rb, round, image, alloc, 0);
      wrong += compare_bytes(recv, image, alloc, rb, what);
    } else if (op == 2) {
      payload_fill(in, BUF_ATTN, me, g->q_total[me], round, rb);
      memset(recv, POISON, alloc);
      CHECK_OK(sy_attn_q_reverse(attn, plan, in, rb, recv, NULL));
      expect_reverse(g, me, 0, rb, round, image, alloc);
      wrong += compare_bytes(recv, image, alloc, rb, what);
    } else {
      wl_grad_fill(in, seed, SY_DTYPE_BF16, me, g->kv_total[me], rb, round);
      memset(grad_out, POISON, grad_bytes);
      CHECK_OK(sy_attn_kv_backward(attn, plan, in, rb, SY_DTYPE_BF16, 0, grad_out, NULL));
      expect_kv_backward(g, me, SY_DTYPE_BF16, 0, rb, round, NULL, image, grad_bytes);
      wrong += compare_bytes(grad_out, image, grad_bytes, rb, what);
    }
    CHECK_OK(sy_attn_plan_destroy(plan));
  }
  CHECK_EQ_INT(wrong, 0);
  CHECK(most[0] == b->max_tokens && most[1] == b->max_q && most[2] == b->max_kv);
  CHECK_OK(sy_mem_free(comm, recv));
  CHECK_OK(sy_mem_free(comm, kv_recv));
  CHECK_OK(sy_attn_destroy(attn));
  free(in);
  free(kv);
  free(grad_out);
  free(image);
}

static void back_to_back(void) {
  b2b_t *b = calloc(1, sizeof *b);
  for (int k = 0; k < B2B_CALLS; k++) {
    gen_make(&b->g[k], B2B_W, B2B_C, k % 7 == 6 ? WL_ATTN_EMPTY_RANK : WL_ATTN_RANDOM, 4, 0xb2b000ull + (uint64_t)k);
    if (b->g[k].max_tokens > b->max_tokens) b->max_tokens = b->g[k].max_tokens;
    if (b->g[k].max_q > b->max_q) b->max_q = b->g[k].max_q;
    if (b->g[k].max_kv > b->max_kv) b->max_kv = b->g[k].max_kv;
  }
  run_ranks(B2B_W, b2b_rank, b);
  for (int k = 0; k < B2B_CALLS; k++) gen_free(&b->g[k]);
  free(b);
}

/* ---- the reduce on special values ---------------------------------------------------------------------------- */

/* Builds rank 0's plan of a 3-rank description: rank 0 owns one sequence of `tokens` tokens whose replicas are
 * {0, absent, 1} (C = 3), or a lone replica {0} (C = 1); ranks 1 and 2 own one token each, sent nowhere. */
static struct sy_attn_plan *reduce_plan(int64_t tokens, int lone) {
  const int64_t lens0[1] = {tokens}, lens1[1] = {1}, num_tokens[3] = {tokens, 1, 1};
  const int num_seqs[3] = {1, 1, 1}, q0[1] = {-1}, q1[1] = {-1};
  const int kv0_three[3] = {0, -1, 1}, kv0_lone[1] = {0}, kv1_three[3] = {-1, -1, -1}, kv1_lone[1] = {-1};
  const int64_t *lens[3] = {lens0, lens1, lens1};
  const int *q[3] = {q0, q1, q1};
  const int *kv[3] = {lone ? kv0_lone : kv0_three, lone ? kv1_lone : kv1_three, lone ? kv1_lone : kv1_three};
  sy_attn_plan_desc_t desc = SY_ATTN_PLAN_DESC_INIT;
  desc.world_size = 3;
  desc.max_replicas = lone ? 1 : 3;
  desc.num_seqs = num_seqs;
  desc.num_tokens = num_tokens;
  desc.seq_lens = lens;
  desc.q_dst = q;
  desc.kv_dst = kv;
  struct sy_attn_plan *plan = NULL;
  CHECK_OK(sy__attn_plan_build(&desc, 0, &plan));
  return plan;
}

/* Staging rows for 5 tokens x 3 replicas of one element each: replica 0, replica 1 (absent: must be ignored),
 * replica 2. */
static void reduce_case(sy_dtype_t dtype, const uint32_t *r0, const uint32_t *r2, const uint32_t *want,
                        const char *name) {
  struct sy_attn_plan *plan = reduce_plan(5, 0);
  if (!plan) return;
  const size_t es = dtype_bytes(dtype);
  unsigned char staging[15 * 4], out[15 * 4];
  for (int t = 0; t < 5; t++) {
    const uint32_t rows[3] = {r0[t], es == 4 ? 0x3F800000u : 0x3C00u, r2[t]};
    for (int c = 0; c < 3; c++) memcpy(staging + (size_t)(c * 5 + t) * es, &rows[c], es); /* little-endian */
  }
  memset(out, POISON, sizeof out);
  sy__ref_attn_kv_reduce(plan, staging, es, dtype, 0, out);
  for (int t = 0; t < 5; t++) {
    uint32_t got = 0;
    memcpy(&got, out + (size_t)t * es, es);
    if (got != want[t]) fprintf(stderr, "reduce %s: token %d: 0x%x, want 0x%x\n", name, t, got, want[t]);
    CHECK(got == want[t]);
  }
  memset(out, POISON, sizeof out);
  sy__ref_attn_kv_reduce(plan, staging, es, dtype, SY_ATTN_UNSUMMED, out);
  for (int t = 0; t < 5; t++) {
    CHECK(!memcmp(out + (size_t)t * es, staging + (size_t)t * es, es));
    uint32_t zero = 0, mid = 1;
    memcpy(&mid, out + (size_t)(5 + t) * es, es);
    CHECK(!memcmp(&mid, &zero, es));
    CHECK(!memcmp(out + (size_t)(10 + t) * es, staging + (size_t)(10 + t) * es, es));
  }
  sy__attn_plan_free(plan, NULL);
}

static void reduce_special_values(void) {
  /* Two replicas (0 and 2): -0 + -0, NaN + 1, an infinity minus itself, overflow, a tie. */
  const uint32_t f0[5] = {0x80000000u, 0x7FA00001u, 0x7F800000u, 0x7F7FFFFFu, 0x3F800000u};
  const uint32_t f2[5] = {0x80000000u, 0x3F800000u, 0xFF800000u, 0x7F7FFFFFu, 0x33800000u};
  const uint32_t fw[5] = {0x80000000u, 0x7FFFFFFFu, 0x7FFFFFFFu, 0x7F800000u, 0x3F800000u}; /* 1 + 2^-24 -> 1 */
  reduce_case(SY_DTYPE_FP32, f0, f2, fw, "fp32");
  const uint32_t b0[5] = {0x8000u, 0x7FC1u, 0x0001u, 0x7F7Fu, 0x3F80u};
  const uint32_t b2[5] = {0x8000u, 0x3F80u, 0x0001u, 0x7F7Fu, 0x3B80u};
  const uint32_t bw[5] = {0x8000u, 0x7FFFu, 0x0002u, 0x7F80u, 0x3F80u}; /* 1 + 2^-8: the tie goes to 1 */
  reduce_case(SY_DTYPE_BF16, b0, b2, bw, "bf16");
  const uint32_t h0[5] = {0x8000u, 0x7C00u, 0x0001u, 0x7BFFu, 0x3C01u};
  const uint32_t h2[5] = {0x8000u, 0xFC00u, 0x0001u, 0x7BFFu, 0x1000u};
  const uint32_t hw[5] = {0x8000u, 0x7FFFu, 0x0002u, 0x7C00u, 0x3C02u}; /* 1 + 2^-10 + 2^-11: the tie goes up */
  reduce_case(SY_DTYPE_FP16, h0, h2, hw, "fp16");

  /* A lone replica: fp32 stored as is (NaN payload, -0.0: no +0.0 seed); bf16 / fp16 through fp32 and back,
   * so NaN becomes 0x7FFF and everything else round-trips. */
  struct sy_attn_plan *plan = reduce_plan(4, 1);
  if (!plan) return;
  const uint32_t in32[4] = {0x80000000u, 0x7FA00001u, 0x00000001u, 0xFF800000u};
  uint32_t out32[4];
  sy__ref_attn_kv_reduce(plan, in32, 4, SY_DTYPE_FP32, 0, out32);
  CHECK(!memcmp(in32, out32, sizeof in32));
  const uint16_t inb[4] = {0x8000u, 0xFFC1u, 0x0001u, 0x7F80u}, wantb[4] = {0x8000u, 0x7FFFu, 0x0001u, 0x7F80u};
  const uint16_t inh[4] = {0x8000u, 0xFE01u, 0x0001u, 0xFC00u}, wanth[4] = {0x8000u, 0x7FFFu, 0x0001u, 0xFC00u};
  uint16_t out16[4];
  sy__ref_attn_kv_reduce(plan, inb, 2, SY_DTYPE_BF16, 0, out16);
  CHECK(!memcmp(out16, wantb, sizeof out16));
  sy__ref_attn_kv_reduce(plan, inh, 2, SY_DTYPE_FP16, 0, out16);
  CHECK(!memcmp(out16, wanth, sizeof out16));
  sy__attn_plan_free(plan, NULL);
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void) {
  seed_from_env();
  fp16_table_init();
  double t0 = seconds();
  reduce_special_values();
  scenarios();
  double t1 = seconds();
  back_to_back();
  double t2 = seconds();
  printf("scenarios %.1f s, back-to-back %.1f s (seed 0x%llx)\n", t1 - t0, t2 - t1, (unsigned long long)seed);
  return check_report();
}
