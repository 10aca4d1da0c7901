/*
 * test_moe_host_args.c — the MoE dispatch/combine's argument checks (src/core/moe.c) and the host backend's
 * (src/host/moe.c) on two ranks: every bad configuration and bad call is SY_ERR_INVALID_ARG with a log
 * line naming the argument, buffers untouched and the object's next half unchanged (the valid calls after
 * them give exactly the expected results, on both ranks); out-of-order halves name the expected call;
 * invalid ids (out of range, repeated) and a combine whose num_tokens or ids are not the dispatch's are
 * rejected the same way; a rank with zero tokens may pass NULL buffers; ranks that configure differently get
 * SY_ERR_MISMATCH with nothing created; a backend without MoE ops gives SY_ERR_UNSUPPORTED; a missing peer
 * is a sticky SY_ERR_TIMEOUT after which destroy is still accepted.
 */
#include "core/internal.h"
#include "moe_test.h"

#include <unistd.h>

/* ---- the case both ranks run: every rank full in round 0, rank 0 empty (NULL buffers) in round 1 ----------- */

static const moe_case_t small = {"args",        2, 4, 2, 128, 4, SY_MOE_WIRE_FP8, 0, SY_INDEX_INT32,
                                 WL_ROUTE_FULL, 2, 0, 0, 0,   40};
static const moe_case_t small_pe = {
    "args per-expert", 2, 4, 2, 128, 4, SY_MOE_WIRE_FP8, SY_MOE_PER_EXPERT, SY_INDEX_INT64,
    WL_ROUTE_FULL,     1, 0, 0, 0,   41};

static void gen_round(const moe_case_t *c, int round, world_inputs_t *wi) {
  inputs_gen(c, round, wi);
  if (round == 1) wi->n[0] = 0;
}

typedef struct bufs {
  const moe_case_t *c;
  uint16_t *tokens, *out, *y;
  void *ids;
  float *w, *cw;
  sy_moe_recv_t recv;
  size_t bytes[5];
  unsigned char *snapshot[6]; /* what recv's five buffers and out must still hold */
} bufs_t;

static void bufs_alloc(const moe_case_t *c, bufs_t *b) {
  memset(b, 0, sizeof *b);
  b->c = c;
  const size_t L = (size_t)(c->E / c->W), S = (size_t)c->W * c->T;
  b->tokens = malloc((size_t)c->T * c->H * 2);
  b->out = malloc((size_t)c->T * c->H * 2);
  b->y = malloc(L * S * c->H * 2);
  b->ids = malloc((size_t)c->T * c->K * 8);
  b->w = malloc((size_t)c->T * c->K * 4);
  b->cw = malloc((size_t)c->T * c->K * 4);
  b->bytes[0] = L * S * c->H;
  b->bytes[1] = L * (size_t)(c->H / 128) * S * 4;
  b->bytes[2] = L * S * 8;
  b->bytes[3] = L * 4;
  b->bytes[4] = L * (size_t)c->W * 4;
  b->recv.tokens = malloc(b->bytes[0]);
  b->recv.scales = malloc(b->bytes[1]);
  b->recv.src = malloc(b->bytes[2]);
  b->recv.expert_counts = malloc(b->bytes[3]);
  b->recv.rank_counts = malloc(b->bytes[4]);
}

static void bufs_free(bufs_t *b) {
  free(b->tokens), free(b->out), free(b->y), free(b->ids), free(b->w), free(b->cw);
  free(b->recv.tokens), free(b->recv.scales), free(b->recv.src), free(b->recv.expert_counts), free(b->recv.rank_counts);
}

static void **recv_ptrs(bufs_t *b, void *p[6]) {
  p[0] = b->recv.tokens, p[1] = b->recv.scales, p[2] = b->recv.src, p[3] = b->recv.expert_counts;
  p[4] = b->recv.rank_counts, p[5] = b->out;
  return p;
}

static size_t buf_bytes(const bufs_t *b, int i);

static void poison(bufs_t *b) {
  void *p[6];
  recv_ptrs(b, p);
  for (int i = 0; i < 6; i++) memset(p[i], POISON, buf_bytes(b, i));
}

static size_t buf_bytes(const bufs_t *b, int i) { return i < 5 ? b->bytes[i] : (size_t)b->c->T * b->c->H * 2; }

static void snapshot(bufs_t *b) {
  void *p[6];
  recv_ptrs(b, p);
  for (int i = 0; i < 6; i++) {
    free(b->snapshot[i]);
    b->snapshot[i] = malloc(buf_bytes(b, i));
    memcpy(b->snapshot[i], p[i], buf_bytes(b, i));
  }
}

static int untouched(bufs_t *b) {
  void *p[6];
  recv_ptrs(b, p);
  for (int i = 0; i < 6; i++)
    if (memcmp(b->snapshot[i], p[i], buf_bytes(b, i))) return 0;
  return 1;
}

/* Rank 0 only: rejected as invalid, naming needle, nothing written to b's buffers. */
#define REJECT(call, needle)                                                                     \
  do {                                                                                           \
    snapshot(b);                                                                                 \
    CHECK_STATUS(call, SY_ERR_INVALID_ARG);                                                      \
    CHECK(check_log_has(needle, __LINE__));                                                      \
    if (!untouched(b)) fprintf(stderr, "%s:%d: %s wrote a buffer\n", __FILE__, __LINE__, #call); \
    CHECK(untouched(b));                                                                         \
  } while (0)

/* config_rejections on every rank (the creates are collective: a refused one still makes the ranks' exchange):
 * rank 0 checks as REJECT does, the other ranks the status alone (one reader of the log's position). */
#define REJECT_R(me, call, needle)               \
  do {                                           \
    if ((me) == 0) REJECT(call, needle);         \
    else CHECK_STATUS(call, SY_ERR_INVALID_ARG); \
  } while (0)

/* ---- configurations ------------------------------------------------------------------------------------------- */

static void config_rejections(sy_comm_t comm, int me) {
  const sy_moe_config_t good = case_config(&small);
  size_t bytes = 0;
  sy_moe_t moe = (sy_moe_t)&bytes; /* must be cleared on rejection */
  bufs_t bufs, *b = &bufs;
  bufs_alloc(&small, b);
  REJECT_R(me, sy_moe_workspace_size(NULL, &good, &bytes), "comm is NULL");
  REJECT_R(me, sy_moe_workspace_size(comm, &good, NULL), "bytes is NULL");
  REJECT_R(me, sy_moe_workspace_size(comm, NULL, &bytes), "config is NULL");
  REJECT_R(me, sy_moe_create(comm, &good, NULL), "moe is NULL");
  REJECT_R(me, sy_moe_create(comm, NULL, &moe), "config is NULL");
  CHECK(moe == NULL);
  static const struct {
    int field, value;
    sy_moe_wire_t wire;
    const char *needle;
  } bad[] = {
      {0, 8, SY_MOE_WIRE_FP8, "config->size=8"},           {1, 0, SY_MOE_WIRE_FP8, "config->max_tokens=0"},
      {1, -3, SY_MOE_WIRE_FP8, "config->max_tokens=-3"},   {1, 0x7FFFFFFF, SY_MOE_WIRE_FP8, "slots per expert"},
      {2, 0, SY_MOE_WIRE_FP8, "config->hidden=0"},         {2, 100, SY_MOE_WIRE_FP8, "config->hidden=100"},
      {2, 64, SY_MOE_WIRE_FP8_UE8M0, "config->hidden=64"}, {2, 12, SY_MOE_WIRE_BF16, "config->hidden=12"},
      {3, 0, SY_MOE_WIRE_FP8, "config->top_k=0"},          {3, 33, SY_MOE_WIRE_FP8, "config->top_k=33"},
      {4, 0, SY_MOE_WIRE_FP8, "config->num_experts=0"},    {4, 7, SY_MOE_WIRE_FP8, "config->num_experts=7"},
      {4, -2, SY_MOE_WIRE_FP8, "config->num_experts=-2"},  {5, 3, SY_MOE_WIRE_FP8, "config->wire=3"},
      {6, 2, SY_MOE_WIRE_FP8, "config->flags=0x2"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sy_moe_config_t c = good;
    c.wire = bad[i].wire;
    if (bad[i].field == 0) c.size = (size_t)bad[i].value;
    if (bad[i].field == 1) c.max_tokens = bad[i].value;
    if (bad[i].field == 2) c.hidden = bad[i].value;
    if (bad[i].field == 3) c.top_k = bad[i].value;
    if (bad[i].field == 4) c.num_experts = bad[i].value;
    if (bad[i].field == 5) c.wire = (sy_moe_wire_t)bad[i].value;
    if (bad[i].field == 6) c.flags = (unsigned)bad[i].value;
    REJECT_R(me, sy_moe_workspace_size(comm, &c, &bytes), bad[i].needle);
    moe = (sy_moe_t)&bytes;
    REJECT_R(me, sy_moe_create(comm, &c, &moe), bad[i].needle);
    CHECK(moe == NULL);
  }
  /* A token names top_k distinct experts: more than num_experts is named with both fields. */
  sy_moe_config_t c = good;
  c.top_k = 8, c.num_experts = 4;
  REJECT_R(me, sy_moe_workspace_size(comm, &c, &bytes), "config->top_k=8 exceeds config->num_experts=4");
  moe = (sy_moe_t)&bytes;
  REJECT_R(me, sy_moe_create(comm, &c, &moe),
           "config->top_k=8 exceeds config->num_experts=4: a token names top_k distinct");
  CHECK(moe == NULL);
  c = good; /* the edges that are fine */
  c.wire = SY_MOE_WIRE_BF16;
  c.hidden = 136;
  c.top_k = 32;
  c.num_experts = 32;
  CHECK_OK(sy_moe_workspace_size(comm, &c, &bytes));
  for (int i = 0; i < 6; i++) free(b->snapshot[i]);
  bufs_free(b);
}

/* ---- one object through its halves, rank 0 trying every bad call at every step ------------------------------ */

typedef struct shared {
  int rank0_failed; /* the timeout test: rank 0 saw its error */
} shared_t;

static void fill_inputs(const moe_case_t *c, const world_inputs_t *wi, int me, bufs_t *b) {
  memcpy(b->tokens, wi->tok[me], (size_t)wi->n[me] * c->H * 2);
  for (size_t i = 0; i < (size_t)wi->n[me] * c->K; i++) {
    if (c->id_type == SY_INDEX_INT64) ((int64_t *)b->ids)[i] = wi->ids[me][i];
    else ((int32_t *)b->ids)[i] = (int32_t)wi->ids[me][i];
  }
  memcpy(b->w, wi->w[me], (size_t)wi->n[me] * c->K * 4);
  memcpy(b->cw, wi->cw[me], (size_t)wi->n[me] * c->K * 4);
}

/* Rank 0, round 0, next half dispatch_send (n tokens in b): every other half is out of order; dispatch_send's
 * own bad arguments and invalid ids; the one-call dispatch's receive half checked before anything is sent. */
static void reject_before_dispatch_send(sy_moe_t moe, bufs_t *b, int n) {
  const moe_case_t *c = b->c;
  const sy_index_type_t it = c->id_type;
  const int32_t K = c->K;
  int32_t bad_ids[8 * 2];
  int64_t big_ids[8 * 2];
  sy_moe_recv_t r;
  const char *want = "next call is sy_moe_dispatch_send";
  REJECT(sy_moe_dispatch_recv(moe, &b->recv, NULL), want);
  REJECT(sy_moe_combine_send(moe, b->y, NULL), want);
  REJECT(sy_moe_combine_recv(moe, b->ids, it, b->cw, n, b->out, NULL), want);
  REJECT(sy_moe_combine(moe, b->y, b->ids, it, b->cw, n, b->out, NULL), want);
  REJECT(sy_moe_dispatch_send(NULL, b->tokens, n, b->ids, it, b->w, NULL), "moe is NULL");
  REJECT(sy_moe_dispatch_send(moe, b->tokens, -1, b->ids, it, b->w, NULL), "num_tokens=-1");
  REJECT(sy_moe_dispatch_send(moe, b->tokens, c->T + 1, b->ids, it, b->w, NULL), "num_tokens=5");
  REJECT(sy_moe_dispatch_send(moe, NULL, n, b->ids, it, b->w, NULL), "tokens is NULL");
  REJECT(sy_moe_dispatch_send(moe, b->tokens, n, NULL, it, b->w, NULL), "expert_ids is NULL");
  REJECT(sy_moe_dispatch_send(moe, b->tokens, n, b->ids, it, NULL, NULL),
         "weights is NULL while num_tokens=4: the default (rank-reduced) mode reads the routing weights at dispatch");
  REJECT(sy_moe_dispatch_send(moe, b->tokens, n, b->ids, (sy_index_type_t)5, b->w, NULL), "id_type=5");
  /* Invalid ids: out of range either way, repeated within a token (an -1 may repeat). */
  memcpy(bad_ids, b->ids, (size_t)n * K * 4);
  bad_ids[1 * K + 0] = 4;
  REJECT(sy_moe_dispatch_send(moe, b->tokens, n, bad_ids, it, b->w, NULL),
         "expert_ids[1][0]=4 outside [-1, num_experts=4) (rank 0, token 1, k 0)");
  memcpy(bad_ids, b->ids, (size_t)n * K * 4);
  bad_ids[3 * K + 1] = -2;
  REJECT(sy_moe_dispatch_send(moe, b->tokens, n, bad_ids, it, b->w, NULL), "expert_ids[3][1]=-2 outside");
  bad_ids[3 * K + 1] = 2, bad_ids[3 * K + 0] = 2;
  REJECT(sy_moe_dispatch_send(moe, b->tokens, n, bad_ids, it, b->w, NULL),
         "expert_ids[3][1]=2 repeats expert_ids[3][0] (rank 0, token 3, k 1)");
  REJECT(sy_moe_dispatch(moe, b->tokens, n, bad_ids, it, b->w, &b->recv, NULL),
         "sy_moe_dispatch: invalid argument: "
         "expert_ids[3][1]=2 repeats");
  for (int i = 0; i < n * K; i++) big_ids[i] = ((int32_t *)b->ids)[i];
  big_ids[2 * K + 1] = ((int64_t)1 << 32) + 1;
  REJECT(sy_moe_dispatch_send(moe, b->tokens, n, big_ids, SY_INDEX_INT64, b->w, NULL), "expert_ids[2][1]=4294967297");
  /* The one-call form checks the receive half's arguments before sending anything. */
  REJECT(sy_moe_dispatch(moe, b->tokens, n, b->ids, it, b->w, NULL, NULL), "recv is NULL");
  r = b->recv, r.scales = NULL;
  REJECT(sy_moe_dispatch(moe, b->tokens, n, b->ids, it, b->w, &r, NULL), "recv->scales is NULL");
  r = b->recv, r.src = (int32_t *)b->recv.tokens + 8;
  REJECT(sy_moe_dispatch(moe, b->tokens, n, b->ids, it, b->w, &r, NULL), "recv->tokens=");
}

/* Rank 0, round 0, next half dispatch_recv: the others out of order, each of recv's buffers missing, overlap. */
static void reject_before_dispatch_recv(sy_moe_t moe, bufs_t *b, int n) {
  const sy_index_type_t it = b->c->id_type;
  sy_moe_recv_t r;
  const char *want = "next call is sy_moe_dispatch_recv";
  REJECT(sy_moe_dispatch_send(moe, b->tokens, n, b->ids, it, b->w, NULL), want);
  REJECT(sy_moe_dispatch(moe, b->tokens, n, b->ids, it, b->w, &b->recv, NULL), want);
  REJECT(sy_moe_combine_send(moe, b->y, NULL), want);
  REJECT(sy_moe_combine_recv(moe, b->ids, it, b->cw, n, b->out, NULL), want);
  REJECT(sy_moe_dispatch_recv(moe, NULL, NULL), "recv is NULL");
  const char *names[5] = {"recv->tokens is NULL", "recv->scales is NULL", "recv->src is NULL",
                          "recv->expert_counts is NULL", "recv->rank_counts is NULL"};
  for (int i = 0; i < 5; i++) {
    r = b->recv;
    if (i == 0) r.tokens = NULL;
    if (i == 1) r.scales = NULL;
    if (i == 2) r.src = NULL;
    if (i == 3) r.expert_counts = NULL;
    if (i == 4) r.rank_counts = NULL;
    REJECT(sy_moe_dispatch_recv(moe, &r, NULL), names[i]);
  }
  r = b->recv, r.rank_counts = b->recv.expert_counts;
  REJECT(sy_moe_dispatch_recv(moe, &r, NULL), "overlap");
}

/* Rank 0, round 0, next half combine_send (bad_ids: b's ids with token 0's last one changed): the others out
 * of order, a NULL expert_out; the one-call combine checks its receive half against this rank's dispatch. */
static void reject_before_combine_send(sy_moe_t moe, bufs_t *b, int n, const int32_t *bad_ids) {
  const sy_index_type_t it = b->c->id_type;
  const char *want = "next call is sy_moe_combine_send";
  REJECT(sy_moe_dispatch_send(moe, b->tokens, n, b->ids, it, b->w, NULL), want);
  REJECT(sy_moe_dispatch_recv(moe, &b->recv, NULL), want);
  REJECT(sy_moe_combine_recv(moe, b->ids, it, b->cw, n, b->out, NULL), want);
  REJECT(sy_moe_combine_send(moe, NULL, NULL), "expert_out is NULL");
  /* The one-call combine checks its receive half (against this rank's dispatch) before sending. */
  REJECT(sy_moe_combine(moe, b->y, b->ids, it, b->cw, n - 1, b->out, NULL),
         "num_tokens=3 but this rank's dispatch of call 1 had 4 tokens");
  REJECT(sy_moe_combine(moe, b->y, bad_ids, it, b->cw, n, b->out, NULL), "expert_ids[0][1]=");
  /* num_tokens 0 (no buffers needed) after a dispatch of n: refused before sending too (a review found it sent) */
  REJECT(sy_moe_combine(moe, b->y, NULL, it, NULL, 0, NULL, NULL),
         "num_tokens=0 but this rank's dispatch of call 1 had 4");
  REJECT(sy_moe_combine(moe, b->y, b->ids, it, b->cw, n, NULL, NULL), "out is NULL");
}

/* Rank 0, round 0, next half combine_recv: the others out of order; num_tokens or ids not the dispatch's, bad
 * arguments, overlap. */
static void reject_before_combine_recv(sy_moe_t moe, bufs_t *b, int n, const int32_t *bad_ids) {
  const sy_index_type_t it = b->c->id_type;
  const char *want = "next call is sy_moe_combine_recv";
  REJECT(sy_moe_dispatch_send(moe, b->tokens, n, b->ids, it, b->w, NULL), want);
  REJECT(sy_moe_combine_send(moe, b->y, NULL), want);
  REJECT(sy_moe_combine(moe, b->y, b->ids, it, b->cw, n, b->out, NULL), want);
  REJECT(sy_moe_combine_recv(moe, b->ids, it, b->cw, n - 1, b->out, NULL), "num_tokens=3 but");
  REJECT(sy_moe_combine_recv(moe, b->ids, it, b->cw, -1, b->out, NULL), "num_tokens=-1");
  REJECT(sy_moe_combine_recv(moe, NULL, it, NULL, 0, NULL, NULL), "num_tokens=0 but");
  REJECT(sy_moe_combine_recv(moe, bad_ids, it, b->cw, n, b->out, NULL), "but this rank's dispatch of call 1 had");
  REJECT(sy_moe_combine_recv(moe, NULL, it, b->cw, n, b->out, NULL), "expert_ids is NULL");
  REJECT(sy_moe_combine_recv(moe, b->ids, (sy_index_type_t)-1, b->cw, n, b->out, NULL), "id_type=-1");
  REJECT(sy_moe_combine_recv(moe, b->ids, it, b->cw, n, NULL, NULL), "out is NULL");
  REJECT(sy_moe_combine_recv(moe, b->out, it, b->cw, n, (char *)b->out + 4, NULL), "overlap");
}

/* Per expert: the dispatch may leave out its weights, the combine may not. */
static void per_expert_args(int me, sy_comm_t comm) {
  const moe_case_t *c = &small_pe;
  const sy_moe_config_t config_pe = case_config(c);
  sy_moe_t moe = NULL;
  CHECK_OK(sy_moe_create(comm, &config_pe, &moe));
  if (!moe) return;
  bufs_t bufs, *b = &bufs;
  bufs_alloc(c, b);
  world_inputs_t wi;
  inputs_alloc(c, &wi);
  inputs_gen(c, 0, &wi);
  fill_inputs(c, &wi, me, b);
  poison(b);
  CHECK_OK(sy_moe_dispatch(moe, b->tokens, wi.n[me], b->ids, c->id_type, NULL, &b->recv, NULL));
  check_dispatch(c, &wi, me, &b->recv, "per-expert args");
  gen_expert_out(c, 0, me, b->y);
  if (me == 0) {
    REJECT(sy_moe_combine(moe, b->y, b->ids, c->id_type, NULL, wi.n[me], b->out, NULL),
           "weights is NULL while num_tokens=4: SY_MOE_PER_EXPERT reads the routing weights at combine");
    REJECT(sy_moe_combine(moe, b->y, b->ids, c->id_type, (float *)b->out, wi.n[me], b->out, NULL), "and weights=");
  }
  CHECK_OK(sy_moe_combine(moe, b->y, b->ids, c->id_type, b->cw, wi.n[me], b->out, NULL));
  check_combine(c, &wi, 0, me, b->out, "per-expert args");
  CHECK_OK(sy_moe_destroy(moe));
  for (int i = 0; i < 6; i++) free(b->snapshot[i]);
  bufs_free(b);
  inputs_free(c, &wi);
}

static void args_rank(int me, sy_comm_t comm, void *arg) {
  const moe_case_t *c = &small;
  const sy_moe_config_t config = case_config(c);
  config_rejections(comm, me); /* every rank: a refused create still makes the ranks' exchange (collective) */
  sy_moe_t moe = NULL;
  /* Ranks that disagree: nothing created anywhere, the communicator still usable. */
  sy_moe_config_t other = config;
  other.hidden = me == 0 ? 128 : 256;
  CHECK_STATUS(sy_moe_create(comm, &other, &moe), SY_ERR_MISMATCH);
  CHECK(moe == NULL);
  if (me == 0) CHECK(check_log_has("configures max_tokens=4 hidden=", __LINE__));
  CHECK_OK(sy_moe_create(comm, &config, &moe));
  if (!moe) return;
  bufs_t bufs, *b = &bufs;
  bufs_alloc(c, b);
  world_inputs_t wi;
  inputs_alloc(c, &wi);
  const int32_t K = c->K;
  int32_t bad_ids[8 * 2];

  for (int round = 0; round < c->rounds; round++) {
    gen_round(c, round, &wi);
    const int n = wi.n[me];
    fill_inputs(c, &wi, me, b);
    poison(b);
    const sy_index_type_t it = c->id_type;
    const int check = me == 0 && round == 0;
    if (check) reject_before_dispatch_send(moe, b, n);
    if (me == 0 && round == 1) { /* no tokens: no buffers needed */
      CHECK_OK(sy_moe_dispatch_send(moe, NULL, 0, NULL, (sy_index_type_t)it, NULL, NULL));
    } else {
      CHECK_OK(sy_moe_dispatch_send(moe, b->tokens, n, b->ids, it, b->w, NULL));
    }
    if (check) reject_before_dispatch_recv(moe, b, n);
    CHECK_OK(sy_moe_dispatch_recv(moe, &b->recv, NULL));
    check_dispatch(c, &wi, me, &b->recv, me == 0 && round == 0 ? "after rejected calls" : "args");
    gen_expert_out(c, round, me, b->y);
    memcpy(bad_ids, b->ids, (size_t)n * K * 4);
    if (n) bad_ids[K - 1] = bad_ids[K - 1] == 3 ? 2 : 3;
    if (check) reject_before_combine_send(moe, b, n, bad_ids);
    CHECK_OK(sy_moe_combine_send(moe, b->y, NULL));
    if (check) reject_before_combine_recv(moe, b, n, bad_ids);
    if (me == 0 && round == 1) {
      CHECK_OK(sy_moe_combine_recv(moe, NULL, it, NULL, 0, NULL, NULL));
    } else {
      /* The default combine takes its weights from the dispatch: these are ignored. */
      CHECK_OK(sy_moe_combine_recv(moe, b->ids, it, b->cw, n, b->out, NULL));
    }
    check_combine(c, &wi, round, me, b->out, "args");
  }
  CHECK_OK(sy_moe_destroy(moe));
  CHECK_OK(sy_moe_destroy(NULL));
  for (int i = 0; i < 6; i++) free(b->snapshot[i]);
  bufs_free(b);
  inputs_free(c, &wi);

  per_expert_args(me, comm);
  (void)arg;
}

/* ---- a backend without MoE ops, a peer that never comes --------------------------------------------------------- */

static void unsupported_rank(int me, sy_comm_t comm, void *arg) {
  sy_backend_ops_t ops = *comm->ops; /* the cuda backend's table, as far as MoE goes */
  const sy_backend_ops_t *saved = comm->ops;
  ops.moe_create = NULL;
  comm->ops = &ops;
  const sy_moe_config_t config = case_config(&small);
  sy_moe_t moe = (sy_moe_t)&ops;
  CHECK_STATUS(sy_moe_create(comm, &config, &moe), SY_ERR_UNSUPPORTED);
  CHECK(moe == NULL);
  CHECK(check_log_has("backend has no MoE dispatch/combine yet", __LINE__));
  comm->ops = saved;
}

static void timeout_rank(int me, sy_comm_t comm, void *arg) {
  shared_t *sh = arg;
  const moe_case_t *c = &small;
  const sy_moe_config_t config = case_config(c);
  sy_moe_t moe = NULL;
  CHECK_OK(sy_moe_create(comm, &config, &moe));
  if (!moe) return;
  bufs_t b;
  bufs_alloc(c, &b);
  world_inputs_t wi;
  inputs_alloc(c, &wi);
  inputs_gen(c, 0, &wi);
  fill_inputs(c, &wi, me, &b);
  if (me == 0) {
    CHECK_OK(sy_moe_dispatch_send(moe, b.tokens, wi.n[0], b.ids, c->id_type, b.w, NULL));
    CHECK_STATUS(sy_moe_dispatch_recv(moe, &b.recv, NULL), SY_ERR_TIMEOUT);
    CHECK(check_log_has("moe dispatch_recv: call 1: rank 1's dispatch_send did not arrive", __LINE__));
    CHECK_STATUS(sy_moe_combine_send(moe, b.y, NULL), SY_ERR_TIMEOUT); /* sticky */
    sy_status_t async = SY_SUCCESS;
    CHECK_OK(sy_comm_async_error(comm, &async, NULL, 0));
    CHECK_EQ_INT(async, SY_ERR_TIMEOUT);
    __atomic_store_n(&sh->rank0_failed, 1, __ATOMIC_RELEASE);
  } else {
    while (!__atomic_load_n(&sh->rank0_failed, __ATOMIC_ACQUIRE)) usleep(1000);
    CHECK_STATUS(sy_moe_dispatch_send(moe, b.tokens, wi.n[1], b.ids, c->id_type, b.w, NULL), SY_ERR_TIMEOUT);
  }
  CHECK_OK(sy_moe_destroy(moe)); /* accepted after the error */
  bufs_free(&b);
  inputs_free(c, &wi);
}

/* One rank refuses its own arguments (a bad top_k, then moe NULL), the other's are good: the create fails on every
 * rank with SY_ERR_INVALID_ARG at once (the refusing rank still makes the ranks' exchange; before, the ranks' next
 * exchanges paired the wrong calls), the good rank's log names the refusing rank, and the communicator stays
 * usable: the next create, good everywhere, succeeds. */
static void one_refuses_rank(int me, sy_comm_t comm, void *arg) {
  const sy_moe_config_t good = case_config(&small);
  sy_moe_config_t bad = good;
  bad.top_k = 0;
  sy_moe_t moe = NULL;
  CHECK_STATUS(sy_moe_create(comm, me == 0 ? &bad : &good, &moe), SY_ERR_INVALID_ARG);
  CHECK(moe == NULL);
  CHECK_STATUS(sy_moe_create(comm, &good, me == 1 ? NULL : &moe), SY_ERR_INVALID_ARG);
  CHECK(moe == NULL);
  sy_status_t async = SY_ERR_INTERNAL;
  CHECK_OK(sy_comm_async_error(comm, &async, NULL, 0));
  CHECK_EQ_INT(async, SY_SUCCESS);
  char *text = check_read_file(check_log_path); /* the whole log: both ranks read it at once here */
  const char *named = me == 0 ? "[rank 0] sy warn: sy_moe_create: rank 1 refused its arguments (its log names them)"
                              : "[rank 1] sy warn: sy_moe_create: rank 0 refused its arguments (its log names them)";
  CHECK(text && strstr(text, named));
  free(text);
  CHECK_OK(sy_moe_create(comm, &good, &moe));
  CHECK_OK(sy_moe_destroy(moe));
  (void)arg;
}

/* A heap too small for the object on one rank only: before, sy_mem_alloc refused it there alone (naming its own
 * `bytes`) while the other rank waited in the allocation's exchange, and both communicators ended in
 * SY_ERR_MISMATCH. Now the create's exchange carries that verdict: the small rank SY_ERR_NO_MEMORY naming
 * SY_HEAP_SIZE, the other SY_ERR_INVALID_ARG at once, nothing created, the communicators usable. */
static void heap_rank(int me, sy_comm_t comm, void *arg) {
  const sy_moe_config_t good = case_config(&small);
  sy_moe_t moe = (sy_moe_t)&good; /* must come back NULL */
  CHECK_STATUS(sy_moe_create(comm, &good, &moe), me == 0 ? SY_ERR_NO_MEMORY : SY_ERR_INVALID_ARG);
  CHECK(moe == NULL);
  if (me == 0) CHECK(check_log_has("exceeds the symmetric heap", __LINE__));
  CHECK_OK(sy_comm_barrier(comm, NULL)); /* still usable */
  (void)arg;
}

static void heap_too_small_on_one_rank(void) {
  const sy_moe_config_t good = case_config(&small);
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  config.backend = SY_BACKEND_HOST;
  config.rank = 0;
  config.world_size = 1;
  config.host_group = 4099;
  sy_comm_t one = NULL;
  CHECK_OK(sy_comm_init(&one, &config));
  if (!one) return;
  size_t ws = 0; /* the world-2 workspace is larger than the world-1 one: a heap of the latter is too small */
  CHECK_OK(sy_moe_workspace_size(one, &good, &ws));
  CHECK_OK(sy_comm_destroy(one));
  const size_t heaps[2] = {ws, (size_t)1 << 32};
  run_ranks_heaps(2, TEST_TIMEOUT_MS, heaps, heap_rank, NULL);
}

int main(void) {
  seed_from_env();
  char dir[] = "/tmp/sy_test_moe_args_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(check_log_path, sizeof check_log_path, "%s/log.txt", dir);
  setenv("SY_DEBUG_FILE", check_log_path, 1);
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();

  run_ranks(2, args_rank, NULL);
  run_ranks(1, unsupported_rank, NULL);
  setenv("SY_BOOT_TIMEOUT_MS", "10000", 1); /* a regression may wait this long in an exchange, not 60 s */
  run_ranks(2, one_refuses_rank, NULL);
  heap_too_small_on_one_rank();
  unsetenv("SY_BOOT_TIMEOUT_MS");
  shared_t sh = {0};
  run_ranks_timeout(2, 300, timeout_rank, &sh);

  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  unlink(check_log_path);
  CHECK_EQ_INT(rmdir(dir), 0);
  return check_report();
}
