/*
 * test_moe_ht_host_args.c — the MoE high-throughput mode's argument checks (src/core/moe_ht.c) and the host
 * backend's (src/host/moe_ht*.c) on two ranks:
 *  - every bad configuration field, and every bad argument of each call, is SY_ERR_INVALID_ARG on the calling
 *    rank with a log line naming it, every output buffer untouched; the peer waits in its call meanwhile and the
 *    next good call gives exactly the expected results on both ranks;
 *  - what the backend checks (ids out of range or repeated, num_tokens not the handle's, a handle of another
 *    object or never laid out, handles of different layout calls, rows that do not fit recv.rows or the stride,
 *    a combine before any dispatch or with another stride) fails the call on every rank, nothing written, the
 *    failing rank's log naming the argument and the peer's naming that rank;
 *  - a rank with no tokens passes NULL buffers; ranks that configure differently get SY_ERR_MISMATCH with nothing
 *    created; ranks inside calls of differently configured objects get SY_ERR_MISMATCH, of objects configured
 *    alike SY_ERR_INVALID_ARG (nothing written, the communicator usable); a backend without the
 *    mode's entries gives SY_ERR_UNSUPPORTED naming it; a missing peer is a sticky SY_ERR_TIMEOUT after which
 *    destroy is still accepted;
 *  - the receive arena (config.recv_arena_bytes): ranks that reserve differently refused, recvs carved by first
 *    fit, a full arena, a freed gap reused, bad frees refused.
 */
#include "core/internal.h"
#include "moe_ht_test.h"

#include <pthread.h>
#include <stddef.h>
#include <time.h>
#include <unistd.h>

#define FP8 SY_MOE_WIRE_FP8

static const ht_case_t small = {"args", 2, 4, 2, 128, 4, FP8, 16, WL_HT_UNIFORM, COUNTS_WORST, SY_INDEX_INT32, 40, 0};

/* Every rank full: num_tokens = max_tokens. */
static void gen_full(const ht_case_t *c, world_t *wd) {
  world_gen(c, 0, wd);
  const wl_moe_ht_t m = ht_gen(c);
  for (int r = 0; r < c->W; r++) {
    wd->n[r] = c->T;
    wl_moe_ht_ids(&m, r, c->T, wd->ids[r]);
    wl_moe_ht_rows(&m, BUF_TOKENS, r, c->T, 0, wd->tok[r]);
    wl_moe_ht_fp8(&m, BUF_TOKENS, r, c->T, wd->q[r], wd->qs[r]);
    wl_moe_ht_values(&m, VAL_WEIGHTS, r, (int64_t)c->T * c->K, 0, wd->w[r]);
    wl_moe_ht_rows(&m, BUF_GRAD, r, c->T, 0, wd->g[r]);
  }
}

/* ---- one rank's buffers, and the snapshot that says they were not touched ----------------------------------- */

enum { NBUF = 13 };

typedef struct bufs {
  const ht_case_t *c;
  void *handle, *handle2;
  int32_t host_counts[2 * 4 + 1];
  sy_moe_ht_recv_t recv;
  uint16_t *y, *out, *grad_rows;
  float *row_values, *token_values, *grad_w;
  void *ptr[NBUF];
  size_t bytes[NBUF];
  unsigned char *snap[NBUF];
} bufs_t;

static void bufs_alloc(sy_moe_ht_t moe, const ht_case_t *c, bufs_t *b) {
  memset(b, 0, sizeof *b);
  b->c = c;
  sy_moe_ht_sizes_t z = SY_MOE_HT_SIZES_INIT;
  CHECK_OK(sy_moe_ht_sizes(moe, &z));
  const size_t R = (size_t)z.max_rows, L = (size_t)z.local_experts, H = (size_t)c->H, T = (size_t)c->T;
  const size_t bytes[NBUF] = {z.handle_bytes,
                              z.handle_bytes,
                              sizeof b->host_counts,
                              R * z.row_bytes,
                              R * z.scale_bytes,
                              R * 8,
                              R * 4,
                              (L + 1) * 4,
                              L * 4,
                              T * H * 2,
                              T * c->K * 4,
                              R * H * 2,
                              R * 4};
  for (int i = 0; i < NBUF; i++) b->bytes[i] = bytes[i], b->ptr[i] = i == 2 ? (void *)b->host_counts : malloc(bytes[i]);
  b->handle = b->ptr[0], b->handle2 = b->ptr[1];
  b->recv = (sy_moe_ht_recv_t){b->ptr[3], b->ptr[4], b->ptr[5], b->ptr[6], b->ptr[7], b->ptr[8], (int)R, 0};
  b->out = b->ptr[9], b->token_values = b->ptr[10], b->grad_rows = b->ptr[11], b->grad_w = b->ptr[12];
  for (int i = 0; i < NBUF; i++) memset(b->ptr[i], POISON, b->bytes[i]);
  b->y = malloc(R * H * 2);
  b->row_values = malloc(R * 4);
}

/* The combine's inputs of rank me over every row (moe_ht_test.h's expectation regenerates them). */
static void gen_rows(const ht_case_t *c, int me, bufs_t *b) {
  const wl_moe_ht_t m = ht_gen(c);
  wl_moe_ht_rows(&m, BUF_Y, me, b->recv.rows, 0, b->y);
  wl_moe_ht_values(&m, VAL_ROW_VALUES, me, b->recv.rows, 0, b->row_values);
}

static void bufs_free(bufs_t *b) {
  for (int i = 0; i < NBUF; i++) {
    if (i != 2) free(b->ptr[i]);
    free(b->snap[i]);
  }
  free(b->y), free(b->row_values);
}

static void poison(bufs_t *b) {
  for (int i = 2; i < NBUF; i++) memset(b->ptr[i], POISON, b->bytes[i]); /* the handles keep their layouts */
}

static void snapshot(bufs_t *b) {
  for (int i = 0; i < NBUF; i++) {
    free(b->snap[i]);
    b->snap[i] = malloc(b->bytes[i]);
    memcpy(b->snap[i], b->ptr[i], b->bytes[i]);
  }
}

static int untouched(const bufs_t *b) {
  for (int i = 0; i < NBUF; i++)
    if (memcmp(b->snap[i], b->ptr[i], b->bytes[i])) {
      fprintf(stderr, "buffer %d was written\n", i);
      return 0;
    }
  return 1;
}

/* The log since the last look contains every needle (one read, so that lines of both ranks are seen). */
static int log_has_all(const char *const *needles, int n, int line) {
  char *text = check_read_file(check_log_path);
  const long end = text ? (long)strlen(text) : 0;
  int found = text != NULL;
  for (int i = 0; found && i < n; i++)
    found = strstr(text + (check_log_pos < end ? check_log_pos : end), needles[i]) != NULL;
  if (!found)
    fprintf(stderr, "line %d: the log lacks \"%s\"...; it says:\n%s\n", line, needles[0],
            text ? text + check_log_pos : "");
  check_log_pos = end;
  free(text);
  return found;
}

/* Rank 0 alone: rejected as invalid, naming needle, nothing written (the peer waits in its next call). */
#define REJECT(call, needle)                   \
  do {                                         \
    snapshot(b);                               \
    CHECK_STATUS(call, SY_ERR_INVALID_ARG);    \
    const char *needles_[1] = {needle};        \
    CHECK(log_has_all(needles_, 1, __LINE__)); \
    CHECK(untouched(b));                       \
  } while (0)

/* Every rank calls; every rank is rejected with nothing written; the log names the argument (`needle`, from the
 * rank that failed) and the failing rank (from the other). The barriers keep rank 0's reading of the log from
 * taking the peer's lines of another call. */
#define REJECT_ALL(comm, me, call, needle, peer_needle)                 \
  do {                                                                  \
    CHECK_OK(sy_comm_barrier(comm, NULL));                              \
    snapshot(b);                                                        \
    CHECK_STATUS(call, SY_ERR_INVALID_ARG);                             \
    CHECK(untouched(b));                                                \
    CHECK_OK(sy_comm_barrier(comm, NULL)); /* both lines are written */ \
    const char *needles_[2] = {needle, peer_needle};                    \
    if ((me) == 0) CHECK(log_has_all(needles_, 2, __LINE__));           \
    CHECK_OK(sy_comm_barrier(comm, NULL));                              \
  } while (0)

/* config_rejections on every rank (the creates are collective: a refused one still makes the ranks' exchange):
 * rank 0 checks as REJECT does, the other ranks the status alone (one reader of the log's position). */
#define REJECT_R(me, call, needle)               \
  do {                                           \
    if ((me) == 0) REJECT(call, needle);         \
    else CHECK_STATUS(call, SY_ERR_INVALID_ARG); \
  } while (0)

/* ---- configurations -------------------------------------------------------------------------------------------- */

static void config_rejections(sy_comm_t comm, bufs_t *b, int me) {
  const sy_moe_ht_config_t good = ht_config(&small);
  size_t bytes = 0;
  sy_moe_ht_t moe = (sy_moe_ht_t)&bytes; /* must be cleared on rejection */
  REJECT_R(me, sy_moe_ht_workspace_size(NULL, &good, &bytes), "comm is NULL");
  REJECT_R(me, sy_moe_ht_workspace_size(comm, &good, NULL), "bytes is NULL");
  REJECT_R(me, sy_moe_ht_workspace_size(comm, NULL, &bytes), "config is NULL");
  REJECT_R(me, sy_moe_ht_create(comm, &good, NULL), "moe is NULL");
  REJECT_R(me, sy_moe_ht_create(comm, NULL, &moe), "config is NULL");
  CHECK(moe == NULL);
  static const struct {
    int field, value;
    sy_moe_wire_t wire;
    const char *needle;
  } bad[] = {
      {0, 8, FP8, "config->size=8"},
      {1, 0, FP8, "config->max_tokens=0"},
      {1, -3, FP8, "config->max_tokens=-3"},
      {1, 0x40000000, FP8, "rows exceeds 2^31 - 1"},
      {2, 0, FP8, "config->hidden=0"},
      {2, 100, FP8, "config->hidden=100 is not a positive multiple of 128"},
      {2, 136, SY_MOE_WIRE_FP8_GIVEN, "config->hidden=136 is not a positive multiple of 128"},
      {2, 12, SY_MOE_WIRE_BF16, "config->hidden=12 is not a positive multiple of 8"},
      {2, (1 << 20) + 128, FP8, "config->hidden=1048704 exceeds 1048576"},
      {3, 0, FP8, "config->top_k=0"},
      {3, 33, FP8, "config->top_k=33"},
      {4, 0, FP8, "config->num_experts=0"},
      {4, 3, FP8, "config->num_experts=3 is not a positive multiple of the world size 2"},
      {4, -2, FP8, "config->num_experts=-2"},
      {5, 9, FP8, "config->wire=9"},
      {6, -1, FP8, "config->expert_alignment=-1"},
      {6, 1025, FP8, "config->expert_alignment=1025"},
      {7, -1, FP8, "config->num_sms=-1"},
      {7, 1025, FP8, "config->num_sms=1025"},
      {8, 2, FP8, "config->flags=0x2: unknown bits 0x2"},
      {8, 0x81, FP8, "config->flags=0x81: unknown bits 0x80"},
      {8, 1, SY_MOE_WIRE_BF16, "config->flags=0x1: SY_MOE_HT_SCALES_ROW_MAJOR with the BF16 wire"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sy_moe_ht_config_t c = good;
    c.wire = bad[i].wire;
    const int v = bad[i].value;
    if (bad[i].field == 0) c.size = (size_t)v;
    if (bad[i].field == 1) c.max_tokens = v;
    if (bad[i].field == 2) c.hidden = v;
    if (bad[i].field == 3) c.top_k = v;
    if (bad[i].field == 4) c.num_experts = v;
    if (bad[i].field == 5) c.wire = (sy_moe_wire_t)v;
    if (bad[i].field == 6) c.expert_alignment = v;
    if (bad[i].field == 7) c.num_sms = v;
    if (bad[i].field == 8) c.flags = (unsigned)v;
    REJECT_R(me, sy_moe_ht_workspace_size(comm, &c, &bytes), bad[i].needle);
    moe = (sy_moe_ht_t)&bytes;
    REJECT_R(me, sy_moe_ht_create(comm, &c, &moe), bad[i].needle);
    CHECK(moe == NULL);
  }
  sy_moe_ht_config_t c = good;
  c.top_k = 8; /* num_experts 4 */
  REJECT_R(me, sy_moe_ht_create(comm, &c, &moe), "config->top_k=8 exceeds config->num_experts=4");
  c = good; /* the edges that are fine */
  c.wire = SY_MOE_WIRE_BF16, c.hidden = 136, c.top_k = 32, c.num_experts = 32;
  c.expert_alignment = 1024, c.num_sms = 1024;
  bytes = 1;
  CHECK_OK(sy_moe_ht_workspace_size(comm, &c, &bytes));
  CHECK_EQ_INT(bytes, 0);
  c = good, c.max_tokens = 1, c.hidden = 1 << 20; /* the largest row */
  CHECK_OK(sy_moe_ht_workspace_size(comm, &c, &bytes));
}

/* ---- the calls: rank 0's local rejections, then every rank's collective ones, then the good call ------------- */

typedef struct ctx {
  sy_comm_t comm;
  sy_moe_ht_t moe, other; /* other: a second object of the same configuration */
  int me;
  world_t wd;
  naive_t *nv;
} ctx_t;

static void layout_args(ctx_t *x, bufs_t *b) {
  const ht_case_t *c = &small;
  const int me = x->me, n = x->wd.n[me], K = c->K;
  int32_t *ids = x->wd.ids[me], bad_ids[4 * 2];
  sy_moe_ht_t moe = x->moe;
  if (me == 0) {
    REJECT(sy_moe_ht_layout(NULL, ids, SY_INDEX_INT32, n, b->handle, NULL, NULL), "moe is NULL");
    REJECT(sy_moe_ht_layout(moe, ids, SY_INDEX_INT32, n, NULL, NULL, NULL), "handle is NULL");
    REJECT(sy_moe_ht_layout(moe, ids, SY_INDEX_INT32, -1, b->handle, NULL, NULL), "num_tokens=-1 outside [0, ");
    REJECT(sy_moe_ht_layout(moe, ids, SY_INDEX_INT32, 5, b->handle, NULL, NULL), "num_tokens=5 outside");
    REJECT(sy_moe_ht_layout(moe, ids, (sy_index_type_t)5, n, b->handle, NULL, NULL), "id_type=5");
    REJECT(sy_moe_ht_layout(moe, NULL, SY_INDEX_INT32, n, b->handle, NULL, NULL), "expert_ids is NULL while");
    REJECT(sy_moe_ht_layout(moe, ids, SY_INDEX_INT32, n, b->handle, (int32_t *)b->handle + 4, NULL), "handle=");
  }
  /* ids out of range (rank 0), repeated within a token (rank 1): every rank fails */
  memcpy(bad_ids, ids, sizeof bad_ids);
  if (me == 0) bad_ids[1 * K + 0] = 4;
  REJECT_ALL(x->comm, me, sy_moe_ht_layout(moe, bad_ids, SY_INDEX_INT32, n, b->handle, b->host_counts, NULL),
             "expert_ids[1][0]=4 outside [-1, num_experts=4) (rank 0, token 1, k 0)",
             "sy_moe_ht_layout: rank 0 rejected its arguments");
  memcpy(bad_ids, ids, sizeof bad_ids);
  if (me == 1) bad_ids[2 * K + 1] = bad_ids[2 * K + 0] = 3;
  REJECT_ALL(x->comm, me, sy_moe_ht_layout(moe, bad_ids, SY_INDEX_INT32, n, b->handle, b->host_counts, NULL),
             "expert_ids[2][1]=3 repeats expert_ids[2][0] (rank 1", "sy_moe_ht_layout: rank 1 rejected");
  CHECK_OK(sy_moe_ht_layout(moe, ids, SY_INDEX_INT32, n, b->handle, b->host_counts, NULL));
  check_layout(c, &x->wd, x->nv, me, b->handle, b->host_counts, "layout after rejected calls");
}

static void dispatch_args(ctx_t *x, bufs_t *b) {
  const int me = x->me, n = x->wd.n[me];
  const void *tok = x->wd.tok[me];
  const float *w = x->wd.w[me];
  sy_moe_ht_t moe = x->moe;
  sy_moe_ht_recv_t r;
  if (me == 0) {
    REJECT(sy_moe_ht_dispatch(NULL, b->handle, n, tok, NULL, w, &b->recv, NULL), "moe is NULL");
    REJECT(sy_moe_ht_dispatch(moe, NULL, n, tok, NULL, w, &b->recv, NULL), "handle is NULL");
    REJECT(sy_moe_ht_dispatch(moe, b->handle, 5, tok, NULL, w, &b->recv, NULL), "num_tokens=5 outside");
    REJECT(sy_moe_ht_dispatch(moe, b->handle, n, NULL, NULL, w, &b->recv, NULL), "tokens is NULL while num_tokens=4");
    REJECT(sy_moe_ht_dispatch(moe, b->handle, n, tok, w, w, &b->recv, NULL), "without SY_MOE_WIRE_FP8_GIVEN");
    REJECT(sy_moe_ht_dispatch(moe, b->handle, n, tok, NULL, w, NULL, NULL), "recv is NULL");
    const char *needles[] = {"recv->rows=-1 is negative",
                             "recv->expert_stride=-1 is negative",
                             "exceeds recv->rows",
                             "recv->src is NULL",
                             "recv->weights is NULL",
                             "recv->expert_offsets is NULL",
                             "recv->expert_counts is NULL",
                             "recv->tokens is NULL while recv->rows",
                             "recv->scales is NULL with an FP8 wire",
                             "overlap",
                             "is not 16-byte aligned"};
    for (int i = 0; i < 11; i++) {
      r = b->recv;
      if (i == 0) r.rows = -1;
      if (i == 1) r.expert_stride = -1;
      if (i == 2) r.expert_stride = r.rows;
      if (i == 3) r.src = NULL;
      if (i == 4) r.weights = NULL;
      if (i == 5) r.expert_offsets = NULL;
      if (i == 6) r.expert_counts = NULL;
      if (i == 7) r.tokens = NULL;
      if (i == 8) r.scales = NULL;
      if (i == 9) r.src = (int32_t *)b->recv.tokens + 2;
      if (i == 10) r.tokens = (char *)b->recv.tokens + 8;
      REJECT(sy_moe_ht_dispatch(moe, b->handle, n, tok, NULL, w, &r, NULL), needles[i]);
    }
    REJECT(sy_moe_ht_dispatch(moe, b->handle, n, tok, NULL, b->recv.weights, &b->recv, NULL), "recv->weights=");
    REJECT(sy_moe_ht_dispatch(moe, b->recv.src, n, tok, NULL, w, &b->recv, NULL), "and handle=");
  }
  /* what the backend sees: a handle never laid out (rank 0) */
  REJECT_ALL(x->comm, me, sy_moe_ht_dispatch(moe, me ? b->handle : b->handle2, n, tok, NULL, w, &b->recv, NULL),
             "holds no layout of this object (magic 0xeeeeeeee", "sy_moe_ht_dispatch: rank 0 rejected");
  /* num_tokens not the layout's (rank 0) */
  REJECT_ALL(x->comm, me, sy_moe_ht_dispatch(moe, b->handle, me ? n : n - 1, tok, NULL, w, &b->recv, NULL),
             "num_tokens=3 but the handle's layout (call 1) had 4 tokens", "rank 0 rejected");
  /* too few rows (rank 1: the rows host_counts gave, less one); a stride below a count (rank 0) */
  const int L = small.E / small.W, needed = b->host_counts[2 * L];
  int most = 0;
  for (int e = 0; e < L; e++) most = b->host_counts[e] > most ? b->host_counts[e] : most;
  r = b->recv;
  if (me == 1) r.rows = needed - 1;
  REJECT_ALL(x->comm, me, sy_moe_ht_dispatch(moe, b->handle, n, tok, NULL, w, &r, NULL), "but the layout needs",
             "rank 1 rejected");
  r = b->recv;
  if (me == 0) r.expert_stride = most - 1;
  CHECK(most > 1);
  REJECT_ALL(x->comm, me, sy_moe_ht_dispatch(moe, b->handle, n, tok, NULL, w, &r, NULL), "but local expert",
             "rank 0 rejected");
  /* a handle of the other object (rank 0), then handles of two layout calls of this object */
  CHECK_OK(sy_moe_ht_layout(x->other, x->wd.ids[me], SY_INDEX_INT32, n, b->handle2, NULL, NULL));
  REJECT_ALL(x->comm, me, sy_moe_ht_dispatch(moe, me ? b->handle : b->handle2, n, tok, NULL, w, &b->recv, NULL),
             "holds no layout of this object (magic 0x4d4f4548", "rank 0 rejected");
  CHECK_OK(sy_moe_ht_layout(moe, x->wd.ids[me], SY_INDEX_INT32, n, b->handle2, NULL, NULL));
  REJECT_ALL(x->comm, me, sy_moe_ht_dispatch(moe, me ? b->handle2 : b->handle, n, tok, NULL, w, &b->recv, NULL),
             "handle: rank 1's handle holds this object's layout 2, rank 0's layout 1",
             "handle: rank 1's handle holds");
  /* a combine before any dispatch of its layout */
  REJECT_ALL(x->comm, me, sy_moe_ht_combine(moe, b->handle, n, b->y, &b->recv, NULL, NULL, b->out, NULL, NULL),
             "no dispatch used its layout yet", "rejected");
  CHECK_OK(sy_moe_ht_dispatch(moe, b->handle, n, tok, NULL, w, &b->recv, NULL)); /* the older layout is fine */
  check_dispatch(&small, &x->wd, x->nv, me, &b->recv, "dispatch after rejected calls");
}

static void combine_args(ctx_t *x, bufs_t *b) {
  const int me = x->me, n = x->wd.n[me];
  sy_moe_ht_t moe = x->moe;
  const float *rw = b->recv.weights, *rv = b->row_values;
  if (me == 0) {
    REJECT(sy_moe_ht_combine(moe, NULL, n, b->y, &b->recv, rw, rv, b->out, b->token_values, NULL), "handle is NULL");
    REJECT(sy_moe_ht_combine(moe, b->handle, 5, b->y, &b->recv, rw, rv, b->out, b->token_values, NULL), "num_tokens=5");
    REJECT(sy_moe_ht_combine(moe, b->handle, n, b->y, NULL, rw, rv, b->out, b->token_values, NULL), "recv is NULL");
    REJECT(sy_moe_ht_combine(moe, b->handle, n, NULL, &b->recv, rw, rv, b->out, b->token_values, NULL),
           "rows_in is NULL while recv->rows");
    REJECT(sy_moe_ht_combine(moe, b->handle, n, b->y, &b->recv, rw, rv, NULL, b->token_values, NULL),
           "out is NULL while num_tokens=4");
    REJECT(sy_moe_ht_combine(moe, b->handle, n, b->y, &b->recv, rw, rv, b->out, NULL, NULL),
           "token_values is NULL while row_values=");
    REJECT(sy_moe_ht_combine(moe, b->handle, n, b->y, &b->recv, rw, NULL, b->out, b->token_values, NULL),
           "row_values is NULL while token_values=");
    REJECT(sy_moe_ht_combine(moe, b->handle, n, b->y, &b->recv, rw, rv, b->y, b->token_values, NULL), "and rows_in=");
    /* sy_moe_ht_combine_add: the same checks, under its own name */
    REJECT(sy_moe_ht_combine_add(moe, b->handle, n, b->y, &b->recv, rw, rv, NULL, b->token_values, NULL),
           "sy_moe_ht_combine_add: invalid argument: out is NULL while num_tokens=4");
    REJECT(sy_moe_ht_combine_add(moe, b->handle, n, b->y, &b->recv, rw, rv, b->y, b->token_values, NULL),
           "and rows_in=");
    sy_moe_ht_recv_t r = b->recv;
    r.expert_offsets = NULL;
    REJECT(sy_moe_ht_combine(moe, b->handle, n, b->y, &r, rw, rv, b->out, b->token_values, NULL),
           "recv->expert_offsets is NULL");
  }
  sy_moe_ht_recv_t r = b->recv;
  if (me == 1) r.expert_stride = 1;
  REJECT_ALL(x->comm, me, sy_moe_ht_combine(moe, b->handle, n, b->y, &r, rw, rv, b->out, b->token_values, NULL),
             "recv->expert_stride=1 but the dispatch of this handle had 0", "sy_moe_ht_combine: rank 1 rejected");
  REJECT_ALL(x->comm, me,
             sy_moe_ht_combine(moe, b->handle, me ? n : 2, b->y, &b->recv, rw, rv, b->out, b->token_values, NULL),
             "num_tokens=2 but the handle's layout", "rank 0 rejected");
  CHECK_OK(sy_moe_ht_combine(moe, b->handle, n, b->y, &b->recv, rw, rv, b->out, b->token_values, NULL));
  check_combine(&small, &x->wd, x->nv, me, 0, 1, b->out, b->token_values, "combine after rejected calls");
}

static void backward_args(ctx_t *x, bufs_t *b) {
  const int me = x->me, n = x->wd.n[me];
  sy_moe_ht_t moe = x->moe;
  const float *rw = b->recv.weights;
  const uint16_t *g = x->wd.g[me];
  if (me == 0) {
    REJECT(sy_moe_ht_combine_backward(moe, NULL, n, g, &b->recv, rw, b->y, b->grad_rows, b->grad_w, NULL),
           "handle is NULL");
    REJECT(sy_moe_ht_combine_backward(moe, b->handle, n, NULL, &b->recv, rw, b->y, b->grad_rows, b->grad_w, NULL),
           "grad_out is NULL while num_tokens=4");
    REJECT(sy_moe_ht_combine_backward(moe, b->handle, n, g, &b->recv, rw, b->y, NULL, b->grad_w, NULL),
           "grad_rows is NULL while recv->rows");
    REJECT(sy_moe_ht_combine_backward(moe, b->handle, n, g, &b->recv, rw, NULL, b->grad_rows, b->grad_w, NULL),
           "rows_in is NULL while grad_row_weights=");
    REJECT(
        sy_moe_ht_combine_backward(moe, b->handle, n, b->grad_rows, &b->recv, rw, b->y, b->grad_rows, b->grad_w, NULL),
        "and grad_out=");
    REJECT(sy_moe_ht_combine_backward(moe, b->handle, n, g, NULL, rw, b->y, b->grad_rows, b->grad_w, NULL),
           "recv is NULL");
  }
  REJECT_ALL(
      x->comm, me,
      sy_moe_ht_combine_backward(moe, b->handle, me ? 1 : n, g, &b->recv, rw, b->y, b->grad_rows, b->grad_w, NULL),
      "num_tokens=1 but the handle's layout", "sy_moe_ht_combine_backward: rank 1 rejected");
  CHECK_OK(sy_moe_ht_combine_backward(moe, b->handle, n, g, &b->recv, rw, b->y, b->grad_rows, b->grad_w, NULL));
  check_backward(&small, &x->wd, x->nv, me, b->y, 1, b->recv.rows, b->grad_rows, b->grad_w,
                 "backward after rejected calls");
}

/* Rank 0 with no tokens: NULL for every buffer it has none of. */
static void empty_rank(ctx_t *x, bufs_t *b) {
  const int me = x->me;
  sy_moe_ht_t moe = x->moe;
  x->wd.n[0] = 0;
  const int zeros[MAX_RANKS] = {0};
  naive_rows(&small, &x->wd, zeros, x->nv);
  poison(b);
  const int n = x->wd.n[me];
  const int32_t *ids = me ? x->wd.ids[me] : NULL;
  const void *tok = me ? (const void *)x->wd.tok[me] : NULL;
  const float *w = me ? x->wd.w[me] : NULL;
  uint16_t *out = me ? b->out : NULL, *g = me ? x->wd.g[me] : NULL;
  float *tv = me ? b->token_values : NULL;
  CHECK_OK(sy_moe_ht_layout(moe, ids, SY_INDEX_INT32, n, b->handle, NULL, NULL));
  CHECK_OK(sy_moe_ht_dispatch(moe, b->handle, n, tok, NULL, w, &b->recv, NULL));
  check_dispatch(&small, &x->wd, x->nv, me, &b->recv, "an empty rank");
  CHECK_OK(sy_moe_ht_combine(moe, b->handle, n, b->y, &b->recv, b->recv.weights, b->row_values, out, tv, NULL));
  if (me) check_combine(&small, &x->wd, x->nv, me, 0, 1, b->out, b->token_values, "an empty rank");
  CHECK_OK(
      sy_moe_ht_combine_backward(moe, b->handle, n, g, &b->recv, b->recv.weights, b->y, b->grad_rows, b->grad_w, NULL));
  check_backward(&small, &x->wd, x->nv, me, b->y, 1, b->recv.rows, b->grad_rows, b->grad_w, "an empty rank");
}

/* Wires' own arguments: token_scales with FP8_GIVEN, recv.scales with BF16. */
static void wire_args(ctx_t *x, bufs_t *b) {
  const int me = x->me, n = x->wd.n[me];
  for (int given = 0; given < 2; given++) {
    ht_case_t c = small;
    c.wire = given ? SY_MOE_WIRE_FP8_GIVEN : SY_MOE_WIRE_BF16;
    const sy_moe_ht_config_t config = ht_config(&c);
    sy_moe_ht_t moe = NULL;
    CHECK_OK(sy_moe_ht_create(x->comm, &config, &moe));
    if (!moe) return;
    CHECK_OK(sy_moe_ht_layout(moe, x->wd.ids[me], SY_INDEX_INT32, n, b->handle2, NULL, NULL));
    if (me == 0 && given)
      REJECT(sy_moe_ht_dispatch(moe, b->handle2, n, x->wd.q[me], NULL, x->wd.w[me], &b->recv, NULL),
             "token_scales is NULL while num_tokens=4 with SY_MOE_WIRE_FP8_GIVEN");
    if (me == 0 && !given)
      REJECT(sy_moe_ht_dispatch(moe, b->handle2, n, x->wd.tok[me], NULL, x->wd.w[me], &b->recv, NULL),
             "with the BF16 wire, which has no scales");
    CHECK_OK(sy_moe_ht_destroy(moe));
  }
}

/* sy_moe_ht_recv_alloc / _free (local: rank 0 alone): every bad argument rejected naming it, *recv zeroed and the
 * pool untouched; a good allocation's sections in order, 256-byte aligned, apart, sized for the wire; freed once; a recv
 * it did not fill (another live allocation at expert_offsets) or one changed since refused, nothing freed. */
static void recv_pool_args(ctx_t *x, bufs_t *b) {
  sy_pool_t pool = NULL;
  CHECK_OK(sy_pool_create(x->comm, NULL, &pool));
  if (!pool) return;
  sy_moe_ht_recv_t r;
  memset(&r, 0x5a, sizeof r);
  REJECT(sy_moe_ht_recv_alloc(NULL, pool, 4, 0, &r, NULL), "sy_moe_ht_recv_alloc: invalid argument: moe is NULL");
  REJECT(sy_moe_ht_recv_alloc(x->moe, NULL, 4, 0, &r, NULL), "sy_moe_ht_recv_alloc: invalid argument: pool is NULL");
  REJECT(sy_moe_ht_recv_alloc(x->moe, pool, 4, 0, NULL, NULL), "sy_moe_ht_recv_alloc: invalid argument: recv is NULL");
  REJECT(sy_moe_ht_recv_alloc(x->moe, pool, -1, 0, &r, NULL), "rows=-1 is negative");
  REJECT(sy_moe_ht_recv_alloc(x->moe, pool, 4, -2, &r, NULL), "expert_stride=-2 is negative");
  REJECT(sy_moe_ht_recv_alloc(x->moe, pool, 4, 3, &r, NULL), "expert_stride=3 x 2 local experts exceeds rows=4");
  sy_moe_ht_recv_t zero; /* a refused allocation leaves no stale buffers in recv (switchyard.h's conventions) */
  memset(&zero, 0, sizeof zero);
  CHECK(!memcmp(&r, &zero, sizeof r));
  sy_pool_stats_t ps = SY_POOL_STATS_INIT;
  CHECK_OK(sy_pool_stats(pool, &ps));
  CHECK_EQ_INT(ps.allocs, 0);
  /* 5 rows, the masked layout of stride 2, FP8 (hidden 128: one scale a row) */
  CHECK_OK(sy_moe_ht_recv_alloc(x->moe, pool, 5, 2, &r, NULL));
  CHECK_EQ_INT(r.rows, 5);
  CHECK_EQ_INT(r.expert_stride, 2);
  char *sec[6] = {(char *)r.expert_offsets, (char *)r.expert_counts, (char *)r.src,
                  (char *)r.weights,        (char *)r.scales,        (char *)r.tokens};
  const size_t need[6] = {3 * 4, 2 * 4, 5 * 8, 5 * 4, 5 * 4, 5 * 128};
  for (int i = 0; i < 6; i++) {
    CHECK(sec[i] != NULL && (uintptr_t)sec[i] % 256 == 0);
    if (i) CHECK(sec[i] >= sec[i - 1] + need[i - 1]); /* in order, apart */
    if (sec[i]) memset(sec[i], 0, need[i]);           /* every byte writable (AddressSanitizer's view) */
  }
  CHECK_OK(sy_pool_stats(pool, &ps));
  CHECK_EQ_INT(ps.live, 1);
  REJECT(sy_moe_ht_recv_free(x->moe, pool, NULL, NULL), "sy_moe_ht_recv_free: invalid argument: recv is NULL");
  sy_moe_ht_recv_t other = r;
  other.expert_offsets = r.src; /* not what the pool gave out */
  REJECT(sy_moe_ht_recv_free(x->moe, pool, &other, NULL), "is not a live allocation of this pool");
  /* a recv the caller filled, whose expert_offsets is another live allocation of the pool, or a recv changed since
   * the alloc: refused, nothing freed, *recv as it was */
  void *mine = NULL;
  CHECK_OK(sy_pool_alloc(pool, 64, &mine, NULL));
  other = r;
  other.expert_offsets = mine;
  sy_moe_ht_recv_t kept = other;
  REJECT(sy_moe_ht_recv_free(x->moe, pool, &other, NULL), "recv does not match what sy_moe_ht_recv_alloc gave out");
  CHECK(!memcmp(&other, &kept, sizeof other));
  other = r;
  other.rows = 4;
  REJECT(sy_moe_ht_recv_free(x->moe, pool, &other, NULL), "rows=4, the allocation at expert_offsets holds");
  other = r;
  other.rows = -1;
  REJECT(sy_moe_ht_recv_free(x->moe, pool, &other, NULL), "recv does not match");
  other = r;
  other.tokens = (char *)r.tokens + 256;
  REJECT(sy_moe_ht_recv_free(x->moe, pool, &other, NULL), "recv does not match");
  other = r;
  other.scales = NULL;
  REJECT(sy_moe_ht_recv_free(x->moe, pool, &other, NULL), "recv does not match");
  CHECK_OK(sy_pool_stats(pool, &ps));
  CHECK_EQ_INT(ps.live, 2);
  CHECK_EQ_INT(ps.frees, 0);
  CHECK_OK(sy_pool_free(pool, mine, NULL));
  CHECK_OK(sy_moe_ht_recv_free(x->moe, pool, &r, NULL));
  CHECK(r.expert_offsets == NULL && r.tokens == NULL && r.rows == 0);
  REJECT(sy_moe_ht_recv_free(x->moe, pool, &r, NULL), "recv->expert_offsets is NULL");
  /* no rows: the offsets and counts only, tokens NULL as the dispatch allows */
  CHECK_OK(sy_moe_ht_recv_alloc(x->moe, pool, 0, 0, &r, NULL));
  CHECK(r.tokens == NULL && r.expert_offsets != NULL && r.expert_counts != NULL && r.rows == 0);
  CHECK_OK(sy_moe_ht_recv_free(x->moe, pool, &r, NULL));
  CHECK_OK(sy_pool_stats(pool, &ps));
  CHECK_EQ_INT(ps.live, 0);
  CHECK_EQ_INT(ps.allocs, 3);
  CHECK_EQ_INT(ps.frees, 3);
  CHECK_OK(sy_pool_destroy(pool));
}

static void args_rank(int me, sy_comm_t comm, void *arg) {
  const ht_case_t *c = &small;
  const sy_moe_ht_config_t config = ht_config(c);
  ctx_t x;
  memset(&x, 0, sizeof x);
  x.comm = comm, x.me = me;
  /* Ranks that disagree: nothing created anywhere, the communicator still usable. */
  sy_moe_ht_config_t other = config;
  other.expert_alignment = me == 0 ? 16 : 32;
  CHECK_STATUS(sy_moe_ht_create(comm, &other, &x.moe), SY_ERR_MISMATCH);
  CHECK(x.moe == NULL);
  CHECK_OK(sy_comm_barrier(comm, NULL));
  const char *mismatch[1] = {"configures max_tokens=4 hidden=128 top_k=2 num_experts=4 wire=0 expert_alignment="};
  if (me == 0) CHECK(log_has_all(mismatch, 1, __LINE__));
  CHECK_OK(sy_moe_ht_create(comm, &config, &x.moe));
  CHECK_OK(sy_moe_ht_create(comm, &config, &x.other));
  if (!x.moe || !x.other) return;
  sy_moe_ht_config_t row_major = config; /* an FP8 wire takes SY_MOE_HT_SCALES_ROW_MAJOR: the scales' bytes as before */
  row_major.flags = SY_MOE_HT_SCALES_ROW_MAJOR;
  sy_moe_ht_t rm = NULL;
  CHECK_OK(sy_moe_ht_create(comm, &row_major, &rm));
  sy_moe_ht_sizes_t zr = SY_MOE_HT_SIZES_INIT;
  CHECK_OK(sy_moe_ht_sizes(rm, &zr));
  CHECK(zr.scale_bytes == (size_t)config.hidden / 128 * sizeof(float));
  CHECK_OK(sy_moe_ht_destroy(rm));
  sy_moe_ht_config_t k32 = config; /* sy_moe_ht_combine_add takes top_k <= 31 */
  k32.top_k = 32, k32.num_experts = 32 * c->W;
  sy_moe_ht_t m32 = NULL;
  CHECK_OK(sy_moe_ht_create(comm, &k32, &m32));
  uint16_t row[128] = {0};
  if (me == 0) { /* rejected before any exchange: rank 0 alone */
    CHECK_STATUS(sy_moe_ht_combine_add(m32, row, 0, NULL, NULL, NULL, NULL, row, NULL, NULL), SY_ERR_INVALID_ARG);
    const char *k32_needle[1] = {
        "sy_moe_ht_combine_add: invalid argument: the object's config->top_k=32: adding into "
        "out takes top_k <= 31"};
    CHECK(log_has_all(k32_needle, 1, __LINE__));
  }
  CHECK_OK(sy_moe_ht_destroy(m32));
  bufs_t bufs, *b = &bufs;
  bufs_alloc(x.moe, c, b);
  config_rejections(comm, b, me); /* every rank: a refused create still makes the ranks' exchange (collective) */
  if (me == 0) {
    sy_moe_ht_sizes_t z = SY_MOE_HT_SIZES_INIT;
    REJECT(sy_moe_ht_sizes(NULL, &z), "sy_moe_ht_sizes: invalid argument: moe is NULL");
    REJECT(sy_moe_ht_sizes(x.moe, NULL), "sizes is NULL");
    z.size = 8;
    REJECT(sy_moe_ht_sizes(x.moe, &z), "sizes->size=8 is too small (initialise it with SY_MOE_HT_SIZES_INIT)");
    /* the calls' SM budget: 2 .. config.num_sms (16 by default), 0 for config.num_sms */
    REJECT(sy_moe_ht_set_num_sms(NULL, 4), "sy_moe_ht_set_num_sms: invalid argument: moe is NULL");
    REJECT(sy_moe_ht_set_num_sms(x.moe, 1),
           "sy_moe_ht_set_num_sms: invalid argument: num_sms=1 outside [2, 16] (config.num_sms=16, and 2 at least; "
           "0: config.num_sms)");
    REJECT(sy_moe_ht_set_num_sms(x.moe, 17), "num_sms=17 outside [2, 16]");
    REJECT(sy_moe_ht_set_num_sms(x.moe, -2), "num_sms=-2 outside");
    CHECK_OK(sy_moe_ht_set_num_sms(x.moe, 2));
    CHECK_OK(sy_moe_ht_set_num_sms(x.moe, 16));
    CHECK_OK(sy_moe_ht_set_num_sms(x.moe, 0));
    struct {
      sy_moe_ht_sizes_t s;
      int tail;
    } longer = {SY_MOE_HT_SIZES_INIT, 77};
    longer.s.size = sizeof longer;
    CHECK_OK(sy_moe_ht_sizes(x.moe, &longer.s));
    CHECK(longer.s.size == sizeof longer && longer.tail == 77 && longer.s.local_experts == 2);
    CHECK(longer.s.dispatch_pulled == 0);           /* (the host backend pushes nothing either way) */
    sy_moe_ht_sizes_t older = SY_MOE_HT_SIZES_INIT; /* a caller's struct from before dispatch_pulled */
    older.size = offsetof(sy_moe_ht_sizes_t, dispatch_pulled);
    older.dispatch_pulled = 77;
    CHECK_OK(sy_moe_ht_sizes(x.moe, &older));
    CHECK(older.size == offsetof(sy_moe_ht_sizes_t, dispatch_pulled) && older.dispatch_pulled == 77 &&
          older.local_experts == 2 && older.scale_bytes == longer.s.scale_bytes);
    recv_pool_args(&x, b);
  }
  gen_full(c, &x.wd);
  gen_rows(c, me, b);
  x.nv = malloc(sizeof *x.nv);
  const int zeros[MAX_RANKS] = {0};
  naive_rows(c, &x.wd, zeros, x.nv);
  layout_args(&x, b);
  dispatch_args(&x, b);
  combine_args(&x, b);
  backward_args(&x, b);
  wire_args(&x, b);
  empty_rank(&x, b);
  CHECK_OK(sy_moe_ht_destroy(x.moe));
  CHECK_OK(sy_moe_ht_destroy(x.other));
  CHECK_OK(sy_moe_ht_destroy(NULL));
  world_free(c, &x.wd);
  free(x.nv);
  bufs_free(b);
  (void)arg;
}

/* ---- the receive arena (config.recv_arena_bytes; sy_moe_ht_recv_alloc with pool NULL) ---------------------------- */

/* Two threads freeing copies of one recv at once (run 44's review): one frees it, the other is refused. */
typedef struct race {
  sy_moe_ht_t moe;
  sy_moe_ht_recv_t r;
  pthread_barrier_t *go;
  sy_status_t st;
} race_t;

static void *race_free(void *arg) {
  race_t *x = (race_t *)arg;
  pthread_barrier_wait(x->go);
  x->st = sy_moe_ht_recv_free(x->moe, NULL, &x->r, NULL);
  return NULL;
}

/* Both ranks: ranks that reserve different arenas get SY_ERR_MISMATCH naming it; then each rank carves its own recvs
 * by first fit: apart, inside the arena, 256-byte aligned; a full arena is SY_ERR_NO_MEMORY naming the sizes; a freed
 * gap is handed out again; a recv the arena did not give out, one changed since, or one freed twice is refused,
 * nothing freed; without an arena pool NULL is refused. */
static void arena_rank(int me, sy_comm_t comm, void *arg) {
  (void)arg;
  sy_moe_ht_config_t config = ht_config(&small);
  /* a recv of 5 rows (FP8, hidden 128, L = 2): six 256-aligned sections, 2,048 bytes; three and 384 spare */
  const size_t one = 256 * 6 + 5 * 128;
  sy_moe_ht_t moe = NULL;
  config.recv_arena_bytes = me == 0 ? 0 : 3 * one;
  CHECK_STATUS(sy_moe_ht_create(comm, &config, &moe), SY_ERR_MISMATCH);
  CHECK(moe == NULL);
  CHECK_OK(sy_comm_barrier(comm, NULL));
  const char *mismatch[1] = {"recv_arena_bytes=6528, this rank 4 / 128 / 2 / 4 / 0 / 16 / 16 / 0x0 / 0"};
  if (me == 0) CHECK(log_has_all(mismatch, 1, __LINE__));
  CHECK_OK(sy_comm_barrier(comm, NULL));
  config.recv_arena_bytes = 3 * one;
  size_t got = 0; /* sy_moe_ht_recv_bytes: the six sections rounded up to 256 bytes */
  CHECK_OK(sy_moe_ht_recv_bytes(comm, &config, 5, &got));
  CHECK(got == 2048);
  CHECK_OK(sy_moe_ht_recv_bytes(comm, &config, 0, &got));
  CHECK(got == 2 * 256); /* the offsets and counts; src, weights, scales and tokens of no rows take nothing */
  CHECK_OK(sy_moe_ht_recv_bytes(comm, &config, -1, &got)); /* max_rows: 4 x 2 x 2 + 2 x 15 = 46 rows */
  CHECK(got == 256 + 256 + 512 + 256 + 256 + 46 * 128);
  if (me == 0) {
    CHECK_STATUS(sy_moe_ht_recv_bytes(comm, &config, -2, &got), SY_ERR_INVALID_ARG);
    const char *n0[1] = {"sy_moe_ht_recv_bytes: invalid argument: rows=-2: want >= 0, or -1 (max_rows)"};
    CHECK(log_has_all(n0, 1, __LINE__));
    CHECK_STATUS(sy_moe_ht_recv_bytes(comm, &config, 5, NULL), SY_ERR_INVALID_ARG);
  }
  CHECK_OK(sy_comm_barrier(comm, NULL));
  size_t ws_plain = 0, ws_arena = 0;
  sy_moe_ht_config_t plain = config;
  plain.recv_arena_bytes = 0;
  CHECK_OK(sy_moe_ht_workspace_size(comm, &plain, &ws_plain));
  CHECK_OK(sy_moe_ht_workspace_size(comm, &config, &ws_arena));
  CHECK(ws_plain == 0 && ws_arena == 0); /* the host backend reserves no symmetric memory, its arena is host memory */
  CHECK_OK(sy_moe_ht_create(comm, &config, &moe));
  if (!moe) return;
  sy_moe_ht_recv_t r[4];
  memset(r, 0, sizeof r);
  for (int i = 0; i < 3; i++) {
    CHECK_OK(sy_moe_ht_recv_alloc(moe, NULL, 5, 2, &r[i], NULL));
    CHECK(r[i].rows == 5 && r[i].expert_stride == 2 && r[i].scales != NULL && r[i].tokens != NULL);
    CHECK((uintptr_t)r[i].expert_offsets % 256 == 0 && (uintptr_t)r[i].tokens % 256 == 0);
    if (i) CHECK((char *)r[i].expert_offsets >= (char *)r[i - 1].tokens + 5 * 128); /* first fit: in order, apart */
    memset(r[i].tokens, i, 5 * 128);                                                /* every byte writable */
  }
  CHECK((char *)r[2].tokens + 5 * 128 <= (char *)r[0].expert_offsets + 3 * one);
  CHECK_OK(sy_comm_barrier(comm, NULL));
  sy_moe_ht_recv_t full;
  memset(&full, 0x5a, sizeof full);
  const sy_moe_ht_recv_t before = full;
  CHECK_STATUS(sy_moe_ht_recv_alloc(moe, NULL, 1, 0, &full, NULL), SY_ERR_NO_MEMORY);
  sy_moe_ht_recv_t zero;
  memset(&zero, 0, sizeof zero);
  CHECK(!memcmp(&full, &zero, sizeof full) && memcmp(&before, &zero, sizeof full));
  CHECK_OK(sy_comm_barrier(comm, NULL));
  const char *no_gap[1] = {
      "1 rows need 1536 bytes of the receive arena, which has no such gap (6144 of 6528 bytes in use by 3 recvs)"};
  if (me == 0) CHECK(log_has_all(no_gap, 1, __LINE__));
  /* the middle one freed, then handed out again at its place */
  void *middle = r[1].expert_offsets;
  CHECK_OK(sy_moe_ht_recv_free(moe, NULL, &r[1], NULL));
  CHECK(r[1].expert_offsets == NULL && r[1].rows == 0);
  CHECK_OK(sy_moe_ht_recv_alloc(moe, NULL, 4, 0, &r[1], NULL));
  CHECK(r[1].expert_offsets == middle);
  CHECK_OK(sy_comm_barrier(comm, NULL));
  if (me == 0) {
    sy_moe_ht_recv_t other = r[0];
    other.expert_offsets = r[0].src; /* inside the arena, not an allocation's start */
    CHECK_STATUS(sy_moe_ht_recv_free(moe, NULL, &other, NULL), SY_ERR_INVALID_ARG);
    const char *n1[1] = {"is not a live allocation of this object's receive arena"};
    CHECK(log_has_all(n1, 1, __LINE__));
    other = r[0];
    other.rows = 4; /* changed since */
    CHECK_STATUS(sy_moe_ht_recv_free(moe, NULL, &other, NULL), SY_ERR_INVALID_ARG);
    const char *n2[1] = {"recv does not match what sy_moe_ht_recv_alloc gave out (rows=4"};
    CHECK(log_has_all(n2, 1, __LINE__));
    int on_stack = 0;
    other = r[0];
    other.expert_offsets = &on_stack; /* outside the arena */
    CHECK_STATUS(sy_moe_ht_recv_free(moe, NULL, &other, NULL), SY_ERR_INVALID_ARG);
    CHECK(log_has_all(n1, 1, __LINE__));
  }
  for (int i = 0; i < 3; i++) CHECK_OK(sy_moe_ht_recv_free(moe, NULL, &r[i], NULL));
  CHECK_STATUS(sy_moe_ht_recv_free(moe, NULL, &r[0], NULL), SY_ERR_INVALID_ARG); /* freed already: zeroed */
  /* every byte back: the whole arena in one piece (three recvs of 5 rows fit again) */
  for (int i = 0; i < 3; i++) CHECK_OK(sy_moe_ht_recv_alloc(moe, NULL, 5, 0, &r[i], NULL));
  for (int i = 0; i < 3; i++) CHECK_OK(sy_moe_ht_recv_free(moe, NULL, &r[i], NULL));
  CHECK_OK(sy_comm_barrier(comm, NULL));
  /* the same recv freed by two threads at once, again and again: one gets SY_SUCCESS, the other SY_ERR_INVALID_ARG
   * (a recv no longer live, or freed meanwhile), never another status; the arena is whole after each */
  int odd = 0;
  for (int it = 0; it < 200; it++) {
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 2);
    race_t x[2] = {{moe, {0}, &go, SY_SUCCESS}, {moe, {0}, &go, SY_SUCCESS}};
    CHECK_OK(sy_moe_ht_recv_alloc(moe, NULL, 5, 0, &x[0].r, NULL));
    x[1].r = x[0].r;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, race_free, &x[1]) == 0);
    race_free(&x[0]);
    pthread_join(th, NULL);
    pthread_barrier_destroy(&go);
    const int ok = (x[0].st == SY_SUCCESS && x[1].st == SY_ERR_INVALID_ARG) ||
                   (x[0].st == SY_ERR_INVALID_ARG && x[1].st == SY_SUCCESS);
    if (!ok && !odd++)
      fprintf(stderr, "rank %d: two frees of one recv returned %s and %s\n", me, sy_status_name(x[0].st),
              sy_status_name(x[1].st));
  }
  CHECK_EQ_INT(odd, 0);
  for (int i = 0; i < 3; i++) CHECK_OK(sy_moe_ht_recv_alloc(moe, NULL, 5, 0, &r[i], NULL));
  for (int i = 0; i < 3; i++) CHECK_OK(sy_moe_ht_recv_free(moe, NULL, &r[i], NULL));
  CHECK_OK(sy_comm_barrier(comm, NULL));
  /* an arena past 2^48 bytes is refused naming the field (every rank: a rank-local check before the collective) */
  sy_moe_ht_config_t huge = config;
  huge.recv_arena_bytes = SIZE_MAX - 100; /* its rounding up would wrap */
  sy_moe_ht_t none = NULL;
  CHECK_STATUS(sy_moe_ht_create(comm, &huge, &none), SY_ERR_INVALID_ARG);
  CHECK(none == NULL);
  CHECK_OK(sy_comm_barrier(comm, NULL));
  const char *n4[1] = {"config->recv_arena_bytes=18446744073709551515 exceeds 281474976710656"};
  if (me == 0) CHECK(log_has_all(n4, 1, __LINE__));
  /* a caller built before recv_arena_bytes (its config ends there): accepted, no arena */
  sy_moe_ht_config_t older = config;
  older.size = offsetof(sy_moe_ht_config_t, recv_arena_bytes);
  older.recv_arena_bytes = 12345; /* past the caller's struct: never read */
  sy_moe_ht_t bare = NULL;
  CHECK_OK(sy_moe_ht_create(comm, &older, &bare));
  if (me == 0 && bare) {
    CHECK_STATUS(sy_moe_ht_recv_alloc(bare, NULL, 5, 0, &r[3], NULL), SY_ERR_INVALID_ARG);
    const char *n3[1] = {"pool is NULL and the object has no receive arena (config.recv_arena_bytes=0)"};
    CHECK(log_has_all(n3, 1, __LINE__));
  }
  CHECK_OK(sy_comm_barrier(comm, NULL));
  CHECK_OK(sy_moe_ht_destroy(bare));
  CHECK_OK(sy_moe_ht_destroy(moe));
}

/* ---- a backend without the mode, objects that differ, a peer that never comes ---------------------------------- */

static void unsupported_rank(int me, sy_comm_t comm, void *arg) {
  const sy_backend_ops_t *saved = comm->ops;
  sy_backend_ops_t ops = *saved;
  ops.moe_ht_create = NULL;
  comm->ops = &ops;
  const sy_moe_ht_config_t config = ht_config(&small);
  sy_moe_ht_t moe = (sy_moe_ht_t)&ops;
  CHECK_STATUS(sy_moe_ht_create(comm, &config, &moe), SY_ERR_UNSUPPORTED);
  CHECK(moe == NULL);
  const char *needle[1] = {"sy_moe_ht_create: the host backend has no high-throughput MoE yet"};
  CHECK(log_has_all(needle, 1, __LINE__));
  comm->ops = saved;
  CHECK_OK(sy_moe_ht_create(comm, &config, &moe));
  ops.moe_ht_create = saved->moe_ht_create;
  ops.moe_ht_combine_backward = NULL;
  comm->ops = &ops;
  CHECK_STATUS(sy_moe_ht_combine_backward(moe, &ops, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL), SY_ERR_UNSUPPORTED);
  needle[0] = "sy_moe_ht_combine_backward: the host backend has no high-throughput MoE yet";
  CHECK(log_has_all(needle, 1, __LINE__));
  comm->ops = saved;
  CHECK_OK(sy_moe_ht_destroy(moe));
  (void)me, (void)arg;
}

static void objects_rank(int me, sy_comm_t comm, void *arg) {
  sy_moe_ht_config_t a = ht_config(&small), bcfg = a;
  bcfg.hidden = 256;
  sy_moe_ht_t moe_a = NULL, moe_b = NULL;
  CHECK_OK(sy_moe_ht_create(comm, &a, &moe_a));
  CHECK_OK(sy_moe_ht_create(comm, &bcfg, &moe_b));
  void *handle = calloc(1, 1 << 16);
  CHECK_STATUS(sy_moe_ht_layout(me ? moe_b : moe_a, NULL, SY_INDEX_INT32, 0, handle, NULL, NULL), SY_ERR_MISMATCH);
  CHECK_STATUS(sy_moe_ht_layout(moe_a, NULL, SY_INDEX_INT32, 0, handle, NULL, NULL), SY_ERR_MISMATCH); /* sticky */
  CHECK_OK(sy_moe_ht_destroy(moe_a));
  CHECK_OK(sy_moe_ht_destroy(moe_b));
  free(handle);
  (void)arg;
}

/* Two objects of one configuration (two layers of one shape), the ranks in different objects' calls (another
 * order of the layers on one rank): every call fails with SY_ERR_INVALID_ARG on every rank, nothing written (before,
 * the host backend saw nothing amiss: a dispatch wrote past an exactly sized recv, a combine mixed the layers),
 * and the communicator stays usable: the same calls in the same order succeed. */
static void same_shape_objects_rank(int me, sy_comm_t comm, void *arg) {
  const sy_moe_ht_config_t c = ht_config(&small);
  sy_moe_ht_t moe[2] = {NULL, NULL};
  CHECK_OK(sy_moe_ht_create(comm, &c, &moe[0]));
  CHECK_OK(sy_moe_ht_create(comm, &c, &moe[1]));
  sy_moe_ht_sizes_t z = SY_MOE_HT_SIZES_INIT;
  CHECK_OK(sy_moe_ht_sizes(moe[0], &z));
  void *handle[2] = {calloc(1, z.handle_bytes), calloc(1, z.handle_bytes)};
  CHECK_STATUS(sy_moe_ht_layout(moe[me], NULL, SY_INDEX_INT32, 0, handle[me], NULL, NULL), SY_ERR_INVALID_ARG);
  const char *needle[] = {"rank 1 calls it on this communicator's moe_ht object #2, this rank on #1"};
  if (me == 0) CHECK(log_has_all(needle, 1, __LINE__)); /* one reader of the shared log */
  sy_status_t async = SY_ERR_INTERNAL;
  CHECK_OK(sy_comm_async_error(comm, &async, NULL, 0));
  CHECK_EQ_INT(async, SY_SUCCESS); /* not sticky */
  for (int i = 0; i < 2; i++) CHECK_OK(sy_moe_ht_layout(moe[i], NULL, SY_INDEX_INT32, 0, handle[i], NULL, NULL));
  sy_moe_ht_recv_t recv = {0}; /* 0 rows: buffers the call checks, none it writes past */
  int32_t offsets[8] = {0}, counts[8] = {0}, src[2] = {0};
  float weights[1] = {0}, scales[1] = {0};
  unsigned char tokens[16] = {0};
  recv.expert_offsets = offsets, recv.expert_counts = counts, recv.src = src, recv.weights = weights;
  recv.scales = scales, recv.tokens = tokens;
  CHECK_STATUS(sy_moe_ht_dispatch(moe[me], handle[me], 0, NULL, NULL, NULL, &recv, NULL), SY_ERR_INVALID_ARG);
  for (int i = 0; i < 2; i++) CHECK_OK(sy_moe_ht_dispatch(moe[i], handle[i], 0, NULL, NULL, NULL, &recv, NULL));
  CHECK_OK(sy_moe_ht_destroy(moe[0]));
  CHECK_OK(sy_moe_ht_destroy(moe[1]));
  free(handle[0]), free(handle[1]);
  (void)arg;
}

/* The communicator destroyed before its objects (a review found a use after free there): sy_comm_destroy warns and
 * keeps the communicator's struct for the objects' destroys, their other calls are refused, a second destroy of
 * the communicator too, and the last object's destroy frees it (ASan and LeakSanitizer in CI's build watch). Its
 * own communicator (a host group of its own), not run_ranks' one. */
static void comm_first_rank(int me, sy_comm_t outer, void *arg) {
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  config.backend = SY_BACKEND_HOST;
  config.rank = me, config.world_size = 2, config.host_group = 77001, config.timeout_ms = TEST_TIMEOUT_MS;
  sy_comm_t comm = NULL;
  CHECK_OK(sy_comm_init(&comm, &config));
  if (!comm) return;
  const sy_moe_ht_config_t c = ht_config(&small);
  sy_moe_ht_t moe[2] = {NULL, NULL};
  CHECK_OK(sy_moe_ht_create(comm, &c, &moe[0]));
  CHECK_OK(sy_moe_ht_create(comm, &c, &moe[1]));
  CHECK_OK(sy_moe_ht_destroy(moe[1])); /* one destroyed in order, one left */
  CHECK_OK(sy_comm_destroy(comm));
  const char *needle[] = {"sy_comm_destroy: 1 attention or MoE objects made on this communicator are still alive"};
  if (me == 0) CHECK(log_has_all(needle, 1, __LINE__));
  void *handle = calloc(1, 1 << 16);
  CHECK_STATUS(sy_moe_ht_layout(moe[0], NULL, SY_INDEX_INT32, 0, handle, NULL, NULL), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy_comm_destroy(comm), SY_ERR_INVALID_ARG);
  CHECK_OK(sy_moe_ht_destroy(moe[0])); /* the last: frees the communicator's struct */
  free(handle);
  (void)outer, (void)arg;
}

/* config.num_sms 1 (the calls hold 2 at least): the calls' budget may be set to those 2, not past them. */
static void one_sm_rank(int me, sy_comm_t comm, void *arg) {
  sy_moe_ht_config_t c = ht_config(&small);
  c.num_sms = 1;
  sy_moe_ht_t moe = NULL;
  CHECK_OK(sy_moe_ht_create(comm, &c, &moe));
  CHECK_OK(sy_moe_ht_set_num_sms(moe, 2));
  CHECK_STATUS(sy_moe_ht_set_num_sms(moe, 3), SY_ERR_INVALID_ARG);
  CHECK_OK(sy_moe_ht_set_num_sms(moe, 0));
  CHECK_OK(sy_moe_ht_destroy(moe));
  (void)me, (void)arg;
}

/* One rank refuses its own arguments (a bad top_k, then moe NULL), the other's are good: the create fails on every
 * rank with SY_ERR_INVALID_ARG at once (the refusing rank still makes the ranks' exchange; before, the other waited
 * there until SY_BOOT_TIMEOUT_MS and recorded a timeout), the good rank's log names the refusing rank, and the
 * communicator stays usable: the next create, good everywhere, succeeds. */
static void one_refuses_rank(int me, sy_comm_t comm, void *arg) {
  const sy_moe_ht_config_t good = ht_config(&small);
  sy_moe_ht_config_t bad = good;
  bad.top_k = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  sy_moe_ht_t moe = NULL;
  CHECK_STATUS(sy_moe_ht_create(comm, me == 0 ? &bad : &good, &moe), SY_ERR_INVALID_ARG);
  CHECK(moe == NULL);
  CHECK_STATUS(sy_moe_ht_create(comm, &good, me == 1 ? NULL : &moe), SY_ERR_INVALID_ARG);
  CHECK(moe == NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  if (took > 2.0) fprintf(stderr, "rank %d: the refused creates took %.1f s (want at once)\n", me, took);
  CHECK(took <= 2.0);
  sy_status_t async = SY_ERR_INTERNAL;
  CHECK_OK(sy_comm_async_error(comm, &async, NULL, 0));
  CHECK_EQ_INT(async, SY_SUCCESS);
  char *text = check_read_file(check_log_path); /* the whole log: both ranks read it at once here */
  const char *named = me == 0 ? "[rank 0] sy warn: sy_moe_ht_create: rank 1 refused its arguments (its log names them)"
                              : "[rank 1] sy warn: sy_moe_ht_create: rank 0 refused its arguments (its log names them)";
  CHECK(text && strstr(text, named));
  free(text);
  CHECK_OK(sy_moe_ht_create(comm, &good, &moe));
  CHECK_OK(sy_moe_ht_destroy(moe));
  (void)arg;
}

typedef struct timeout_shared {
  int rank0_failed;
} timeout_shared_t;

static void timeout_rank(int me, sy_comm_t comm, void *arg) {
  timeout_shared_t *sh = arg;
  const sy_moe_ht_config_t config = ht_config(&small);
  sy_moe_ht_t moe = NULL;
  CHECK_OK(sy_moe_ht_create(comm, &config, &moe));
  if (!moe) return;
  void *handle = calloc(1, 1 << 16);
  if (me == 0) {
    CHECK_STATUS(sy_moe_ht_layout(moe, NULL, SY_INDEX_INT32, 0, handle, NULL, NULL), SY_ERR_TIMEOUT);
    CHECK_STATUS(sy_moe_ht_layout(moe, NULL, SY_INDEX_INT32, 0, handle, NULL, NULL), SY_ERR_TIMEOUT); /* sticky */
    __atomic_store_n(&sh->rank0_failed, 1, __ATOMIC_RELEASE);
  } else {
    while (!__atomic_load_n(&sh->rank0_failed, __ATOMIC_ACQUIRE)) usleep(1000);
    CHECK_STATUS(sy_moe_ht_layout(moe, NULL, SY_INDEX_INT32, 0, handle, NULL, NULL), SY_ERR_TIMEOUT);
  }
  /* the queries still answer; every call that would work returns the error */
  sy_moe_ht_sizes_t sizes = SY_MOE_HT_SIZES_INIT;
  CHECK_OK(sy_moe_ht_sizes(moe, &sizes));
  CHECK_EQ_INT(sizes.local_experts, 2);
  size_t bytes = 1;
  CHECK_OK(sy_moe_ht_workspace_size(comm, &config, &bytes));
  CHECK_STATUS(sy_moe_ht_combine(moe, handle, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL), SY_ERR_TIMEOUT);
  sy_moe_ht_t again = NULL;
  CHECK_STATUS(sy_moe_ht_create(comm, &config, &again), SY_ERR_TIMEOUT);
  CHECK_OK(sy_moe_ht_destroy(moe)); /* accepted after the error */
  free(handle);
}

int main(void) {
  seed_from_env();
  char dir[] = "/tmp/sy_test_moe_ht_args_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(check_log_path, sizeof check_log_path, "%s/log.txt", dir);
  setenv("SY_DEBUG_FILE", check_log_path, 1);
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();

  run_ranks(2, args_rank, NULL);
  run_ranks(2, arena_rank, NULL);
  run_ranks(1, unsupported_rank, NULL);
  run_ranks(2, objects_rank, NULL);
  run_ranks(2, same_shape_objects_rank, NULL);
  run_ranks(1, one_sm_rank, NULL);
  run_ranks(2, comm_first_rank, NULL);
  setenv("SY_BOOT_TIMEOUT_MS", "10000", 1); /* a regression waits this long in the exchange, not 60 s */
  run_ranks(2, one_refuses_rank, NULL);
  unsetenv("SY_BOOT_TIMEOUT_MS");
  timeout_shared_t sh = {0};
  run_ranks_timeout(2, 300, timeout_rank, &sh);

  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  unlink(check_log_path);
  CHECK_EQ_INT(rmdir(dir), 0);
  return check_report();
}
