/*
 * test_attn_host_args.c — the attention dispatch's argument checks (src/core/attn.c) and its collective
 * agreement checks (src/host/attn.c) on the host backend: every bad argument is SY_ERR_INVALID_ARG with
 * buffers untouched and the communicator still healthy (a valid call works afterwards); ranks that disagree
 * on a call (row sizes, plans, directions, plans that agree on every pair's row counts but not on where the
 * rows are) get SY_ERR_MISMATCH on every rank, nothing copied, the log naming the ranks, and the error is
 * sticky. Sources (q, kv, attn_rows, grad_rows) may be any memory; one that lies in a symmetric allocation
 * must hold its rows inside it (rejected naming the argument otherwise, accepted with room, e.g. q_recv itself).
 */
#include "attn_test.h"
#include "core/log.h"

#include <unistd.h>

/* ---- a fixed two-rank description in which every rank sends and receives Q and KV ------------------------- */

typedef struct fixed {
  int64_t lens0[3], lens1[1], tokens[2];
  int num_seqs[2], q0[3], q1[1], kv0[6], kv1[2];
  const int64_t *lens[2];
  const int *q[2], *kv[2];
  sy_attn_plan_desc_t desc;
} fixed_t;

/* variant 1: rank 0's second sequence goes to rank 1 (other counts); variant 2: rank 0 owns 2 more tokens, an
 * unsent sequence ahead of the others (the same counts for every pair, every row of rank 0 two further on). */
static void fixed_make(fixed_t *f, int variant) {
  memset(f, 0, sizeof *f);
  const int s = variant == 2; /* where rank 0's sequences of variant 0 start in its arrays */
  f->lens0[s] = 3, f->lens0[s + 1] = 5, f->lens1[0] = 4;
  f->tokens[0] = 8, f->tokens[1] = 4;
  f->num_seqs[0] = 2, f->num_seqs[1] = 1;
  f->q0[s] = 1, f->q0[s + 1] = variant == 1 ? 1 : 0, f->q1[0] = 0;
  f->kv0[2 * s] = 0, f->kv0[2 * s + 1] = 1, f->kv0[2 * s + 2] = 1, f->kv0[2 * s + 3] = -1;
  f->kv1[0] = 1, f->kv1[1] = 0;
  if (s) f->lens0[0] = 2, f->tokens[0] += 2, f->num_seqs[0]++, f->q0[0] = -1, f->kv0[0] = -1, f->kv0[1] = -1;
  f->lens[0] = f->lens0, f->lens[1] = f->lens1;
  f->q[0] = f->q0, f->q[1] = f->q1;
  f->kv[0] = f->kv0, f->kv[1] = f->kv1;
  sy_attn_plan_desc_t d = SY_ATTN_PLAN_DESC_INIT;
  d.world_size = 2;
  d.max_replicas = 2;
  d.num_seqs = f->num_seqs;
  d.num_tokens = f->tokens;
  d.seq_lens = f->lens;
  d.q_dst = f->q;
  d.kv_dst = f->kv;
  f->desc = d;
}

/* ---- bad arguments ------------------------------------------------------------------------------------------- */

#define RB   16 /* Q / KV row bytes */
#define GRB  8  /* gradient row bytes */
#define ROWS 64 /* rows of every buffer: more than any rank needs */

typedef struct args_shared {
  sy_attn_plan_t plans[2];
} args_shared_t;

typedef struct bufs {
  unsigned char *q_recv, *kv_recv, *out; /* symmetric, ROWS * RB each */
  unsigned char *q, *kv, *attn_rows, *grads, *grad_out, *local;
  unsigned char *snapshot;
} bufs_t;

#define BUF_BYTES (ROWS * RB)

static void poison_all(bufs_t *b) {
  memset(b->q_recv, POISON, BUF_BYTES);
  memset(b->kv_recv, POISON, BUF_BYTES);
  memset(b->out, POISON, BUF_BYTES);
  memset(b->grad_out, POISON, BUF_BYTES);
  memset(b->local, POISON, BUF_BYTES);
}

/* The outputs still poisoned and the inputs as filled. */
static int untouched(const bufs_t *b, int me) {
  unsigned char poison[BUF_BYTES]; /* one per rank thread: every rank checks at once */
  memset(poison, POISON, sizeof poison);
  unsigned char *want = b->snapshot;
  int same = !memcmp(b->q_recv, poison, BUF_BYTES) && !memcmp(b->kv_recv, poison, BUF_BYTES) &&
             !memcmp(b->out, poison, BUF_BYTES) && !memcmp(b->grad_out, poison, BUF_BYTES) &&
             !memcmp(b->local, poison, BUF_BYTES);
  payload_fill(want, BUF_Q, me, ROWS, 0, RB);
  same = same && !memcmp(b->q, want, BUF_BYTES);
  payload_fill(want, BUF_KV, me, ROWS, 0, RB);
  same = same && !memcmp(b->kv, want, BUF_BYTES);
  return same;
}

/* A rejected call: SY_ERR_INVALID_ARG, nothing written to b's buffers, the communicator healthy. */
#define REJECTED(call)                                                                               \
  do {                                                                                               \
    CHECK_STATUS(call, SY_ERR_INVALID_ARG);                                                          \
    if (!untouched(b, me)) fprintf(stderr, "%s:%d: %s wrote a buffer\n", __FILE__, __LINE__, #call); \
    CHECK(untouched(b, me));                                                                         \
  } while (0)

/* What the calls below take: this rank's plans (other: the peer's), its info, and objects configured short of
 * the plan in one way each. */
typedef struct objs {
  sy_attn_plan_t plan, q_only, other;
  sy_attn_plan_info_t info;
  sy_attn_t attn, few_tokens, few_replicas, no_grads;
} objs_t;

/* The buffers, inputs filled and outputs poisoned; 0 if the symmetric ones could not be had. */
static int bufs_alloc(sy_comm_t comm, int me, bufs_t *b) {
  memset(b, 0, sizeof *b);
  CHECK_OK(sy_mem_alloc(comm, BUF_BYTES, (void **)&b->q_recv));
  CHECK_OK(sy_mem_alloc(comm, BUF_BYTES, (void **)&b->kv_recv));
  CHECK_OK(sy_mem_alloc(comm, BUF_BYTES, (void **)&b->out));
  if (!b->q_recv || !b->kv_recv || !b->out) return 0;
  b->q = malloc(BUF_BYTES), b->kv = malloc(BUF_BYTES), b->attn_rows = malloc(BUF_BYTES), b->grads = malloc(BUF_BYTES);
  b->grad_out = malloc(BUF_BYTES), b->local = malloc(BUF_BYTES), b->snapshot = malloc(BUF_BYTES);
  payload_fill(b->q, BUF_Q, me, ROWS, 0, RB);
  payload_fill(b->kv, BUF_KV, me, ROWS, 0, RB);
  payload_fill(b->attn_rows, BUF_ATTN, me, ROWS, 0, RB);
  memset(b->grads, 0x3C, BUF_BYTES); /* 0x3C3C: a finite bf16 and fp16 */
  poison_all(b);
  return 1;
}

/* ---- plans ---- */
static void plan_args(int me, sy_comm_t comm, const fixed_t *f, bufs_t *b, args_shared_t *shared, objs_t *x) {
  sy_attn_plan_t plan = (sy_attn_plan_t)b; /* must be cleared on rejection */
  REJECTED(sy_attn_plan_create(NULL, &f->desc, &plan));
  REJECTED(sy_attn_plan_create(comm, &f->desc, NULL));
  REJECTED(sy_attn_plan_create(comm, NULL, &plan));
  CHECK(plan == NULL);
  sy_attn_plan_desc_t d = f->desc;
  d.size = 8;
  REJECTED(sy_attn_plan_create(comm, &d, &plan));
  d = f->desc;
  d.world_size = 3;
  REJECTED(sy_attn_plan_create(comm, &d, &plan));
  fixed_t broken;
  fixed_make(&broken, 0);
  broken.tokens[1] = 5; /* lengths do not tile num_tokens */
  REJECTED(sy_attn_plan_create(comm, &broken.desc, &plan));
  fixed_make(&broken, 0);
  broken.kv1[1] = 1; /* rank 1 listed twice for one sequence */
  REJECTED(sy_attn_plan_create(comm, &broken.desc, &plan));
  CHECK(plan == NULL);
  CHECK_OK(sy_attn_plan_create(comm, &f->desc, &plan));
  shared->plans[me] = plan;
  x->plan = plan;
  const sy_attn_plan_info_t info_init = SY_ATTN_PLAN_INFO_INIT;
  x->info = info_init;
  REJECTED(sy_attn_plan_info(NULL, &x->info));
  REJECTED(sy_attn_plan_info(plan, NULL));
  x->info.size = sizeof x->info - 1;
  REJECTED(sy_attn_plan_info(plan, &x->info));
  x->info.size = sizeof x->info;
  CHECK_OK(sy_attn_plan_info(plan, &x->info));
  sy_attn_plan_seqs_t seqs = SY_ATTN_PLAN_SEQS_INIT;
  REJECTED(sy_attn_plan_seqs(NULL, &seqs));
  REJECTED(sy_attn_plan_seqs(plan, NULL));
  seqs.size = sizeof seqs - 1;
  REJECTED(sy_attn_plan_seqs(plan, &seqs));
  seqs.size = sizeof seqs;
  CHECK_OK(sy_attn_plan_seqs(plan, &seqs));
  CHECK(seqs.q_send != NULL && seqs.num_seqs == f->desc.num_seqs[me]);
  CHECK_OK(sy_attn_plan_destroy(NULL));
  /* the stream-ordered create: the same checks, a pool and staging of this communicator, the same plan */
  sy_pool_t pool = NULL;
  sy_host_pool_t staging = NULL;
  sy_host_pool_config_t hc = SY_HOST_POOL_CONFIG_INIT;
  hc.slot_bytes = 4096;
  CHECK_OK(sy_pool_create(comm, NULL, &pool));
  CHECK_OK(sy_host_pool_create(comm, &hc, &staging));
  sy_attn_plan_t async_plan = (sy_attn_plan_t)b;
  REJECTED(sy_attn_plan_create_async(NULL, &f->desc, pool, staging, NULL, &async_plan));
  REJECTED(sy_attn_plan_create_async(comm, NULL, pool, staging, NULL, &async_plan));
  CHECK(async_plan == NULL);
  REJECTED(sy_attn_plan_create_async(comm, &f->desc, pool, staging, NULL, NULL));
  REJECTED(sy_attn_plan_create_async(comm, &broken.desc, pool, staging, NULL, &async_plan));
  CHECK(async_plan == NULL);
  CHECK_OK(sy_attn_plan_create_async(comm, &f->desc, pool, staging, NULL, &async_plan));
  sy_attn_plan_info_t async_info = SY_ATTN_PLAN_INFO_INIT;
  CHECK_OK(sy_attn_plan_info(async_plan, &async_info));
  CHECK(async_info.fingerprint == x->info.fingerprint && async_info.q_recv_rows == x->info.q_recv_rows &&
        async_info.kv_recv_rows == x->info.kv_recv_rows);
  CHECK_OK(sy_attn_plan_destroy_async(async_plan, NULL)); /* host backend: the stream is ignored */
  CHECK_OK(sy_attn_plan_destroy_async(NULL, NULL));
  CHECK_OK(sy_attn_plan_create_async(comm, &f->desc, NULL, NULL, NULL, &async_plan)); /* the communicator's own */
  CHECK_OK(sy_attn_plan_destroy(async_plan));
  CHECK_OK(sy_host_pool_destroy(staging));
  CHECK_OK(sy_pool_destroy(pool));
  fixed_t q_only_desc;
  fixed_make(&q_only_desc, 0);
  q_only_desc.desc.max_replicas = 0;
  q_only_desc.desc.kv_dst = NULL;
  x->q_only = NULL;
  CHECK_OK(sy_attn_plan_create(comm, &q_only_desc.desc, &x->q_only));
}

/* ---- configuration ---- */
static void config_args(int me, sy_comm_t comm, bufs_t *b, objs_t *x) {
  sy_attn_config_t config = SY_ATTN_CONFIG_INIT;
  config.max_tokens = 8;
  config.max_replicas = 2;
  config.max_kv_grad_row_bytes = GRB;
  size_t bytes = 12345;
  REJECTED(sy_attn_workspace_size(NULL, &config, &bytes));
  REJECTED(sy_attn_workspace_size(comm, &config, NULL));
  REJECTED(sy_attn_workspace_size(comm, NULL, &bytes));
  sy_attn_config_t c = config;
  c.size = 4;
  REJECTED(sy_attn_workspace_size(comm, &c, &bytes));
  c = config, c.max_tokens = 0;
  REJECTED(sy_attn_workspace_size(comm, &c, &bytes));
  c = config, c.max_replicas = 0;
  REJECTED(sy_attn_workspace_size(comm, &c, &bytes));
  c = config, c.max_replicas = 3;
  REJECTED(sy_attn_workspace_size(comm, &c, &bytes));
  c = config, c.max_kv_grad_row_bytes = 3;
  REJECTED(sy_attn_workspace_size(comm, &c, &bytes));
  c = config, c.max_tokens = INT64_MAX, c.max_kv_grad_row_bytes = (size_t)1 << 40;
  REJECTED(sy_attn_workspace_size(comm, &c, &bytes));
  CHECK_EQ_INT(bytes, 12345);
  CHECK_OK(sy_attn_workspace_size(comm, &config, &bytes));
  CHECK_EQ_INT(bytes, 256); /* 2 * 8 * 8 = 128, rounded up to 256 */
  c = config, c.max_kv_grad_row_bytes = 0;
  CHECK_OK(sy_attn_workspace_size(comm, &c, &bytes));
  CHECK_EQ_INT(bytes, 0);
  c = config, c.max_tokens = 1000, c.max_kv_grad_row_bytes = 4096;
  CHECK_OK(sy_attn_workspace_size(comm, &c, &bytes));
  CHECK_EQ_INT(bytes, 2 * 1000 * 4096);

  sy_attn_t attn = (sy_attn_t)b;
  REJECTED(sy_attn_create(comm, &config, NULL));
  REJECTED(sy_attn_create(NULL, &config, &attn));
  c = config, c.max_replicas = 3;
  REJECTED(sy_attn_create(comm, &c, &attn));
  CHECK(attn == NULL);
  CHECK_OK(sy_attn_destroy(NULL));
  /* Collective creates, in the same order on both ranks. */
  CHECK_OK(sy_attn_create(comm, &config, &x->attn));
  x->few_tokens = NULL, x->few_replicas = NULL, x->no_grads = NULL;
  c = config, c.max_tokens = 4; /* rank 0 owns 8 */
  CHECK_OK(sy_attn_create(comm, &c, &x->few_tokens));
  c = config, c.max_replicas = 1;
  CHECK_OK(sy_attn_create(comm, &c, &x->few_replicas));
  c = config, c.max_kv_grad_row_bytes = 0;
  CHECK_OK(sy_attn_create(comm, &c, &x->no_grads));
}

/* ---- Q forward ---- */
static void q_forward_args(int me, bufs_t *b, const objs_t *x) {
  sy_attn_t attn = x->attn;
  sy_attn_plan_t plan = x->plan, other = x->other;
  unsigned char *q_recv = b->q_recv;
  const size_t q_need = (size_t)x->info.q_recv_rows * RB; /* > 0 on both ranks */
  CHECK(q_need > 0 && q_need < BUF_BYTES);
  REJECTED(sy_attn_q_forward(NULL, plan, b->q, RB, q_recv, NULL));
  REJECTED(sy_attn_q_forward(attn, NULL, b->q, RB, q_recv, NULL));
  REJECTED(sy_attn_q_forward(attn, other, b->q, RB, q_recv, NULL));
  /* the plan's busiest rank (rank 0, 8 tokens) past max_tokens=4: refused on both ranks, not only on rank 0 (the
   * other would wait for it) */
  REJECTED(sy_attn_q_forward(x->few_tokens, plan, b->q, RB, q_recv, NULL));
  REJECTED(sy_attn_q_forward(x->few_replicas, plan, b->q, RB, q_recv, NULL));
  REJECTED(sy_attn_q_forward(attn, plan, b->q, 0, q_recv, NULL));
  REJECTED(sy_attn_q_forward(attn, plan, NULL, RB, q_recv, NULL));
  REJECTED(sy_attn_q_forward(attn, plan, b->q, RB, NULL, NULL));
  REJECTED(sy_attn_q_forward(attn, plan, b->q, RB, b->local, NULL));                        /* not symmetric */
  REJECTED(sy_attn_q_forward(attn, plan, b->q, RB, q_recv + BUF_BYTES - q_need + 1, NULL)); /* one byte short */
  REJECTED(sy_attn_q_forward(attn, plan, b->q_recv + RB, RB, q_recv, NULL));                /* q overlaps q_recv */
}

/* ---- Q+KV forward ---- */
static void qkv_forward_args(int me, bufs_t *b, const objs_t *x) {
  sy_attn_t attn = x->attn;
  sy_attn_plan_t plan = x->plan;
  unsigned char *q_recv = b->q_recv, *kv_recv = b->kv_recv;
  const size_t kv_need = (size_t)x->info.kv_recv_rows * RB;
  CHECK(kv_need > 0 && kv_need < BUF_BYTES);
  REJECTED(sy_attn_qkv_forward(attn, x->q_only, b->q, RB, q_recv, b->kv, RB, kv_recv, NULL));
  REJECTED(sy_attn_qkv_forward(attn, plan, b->q, RB, q_recv, NULL, RB, kv_recv, NULL));
  REJECTED(sy_attn_qkv_forward(attn, plan, b->q, RB, q_recv, b->kv, 0, kv_recv, NULL));
  REJECTED(sy_attn_qkv_forward(attn, plan, b->q, RB, q_recv, b->kv, RB, b->local, NULL));
  REJECTED(sy_attn_qkv_forward(attn, plan, b->q, RB, q_recv, b->kv, RB, kv_recv + BUF_BYTES - kv_need + 1, NULL));
  REJECTED(sy_attn_qkv_forward(attn, plan, b->q, RB, q_recv, b->kv, RB, q_recv + RB, NULL)); /* the outputs overlap */
  REJECTED(sy_attn_qkv_forward(attn, plan, b->q, RB, q_recv, kv_recv, RB, kv_recv, NULL));   /* kv is kv_recv */
  REJECTED(sy_attn_qkv_forward(attn, plan, b->q, RB, NULL, b->kv, RB, kv_recv, NULL));
  REJECTED(sy_attn_qkv_forward(x->few_replicas, plan, b->q, RB, q_recv, b->kv, RB, kv_recv, NULL));
}

/* ---- Q reverse ---- */
static void q_reverse_args(int me, bufs_t *b, const objs_t *x) {
  sy_attn_t attn = x->attn;
  sy_attn_plan_t plan = x->plan;
  const size_t out_need = (size_t)x->info.num_tokens * RB;
  REJECTED(sy_attn_q_reverse(attn, plan, NULL, RB, b->out, NULL));
  REJECTED(sy_attn_q_reverse(attn, plan, b->attn_rows, 0, b->out, NULL));
  REJECTED(sy_attn_q_reverse(attn, plan, b->attn_rows, RB, NULL, NULL));
  REJECTED(sy_attn_q_reverse(attn, plan, b->attn_rows, RB, b->local, NULL));
  REJECTED(sy_attn_q_reverse(attn, plan, b->attn_rows, RB, b->out + BUF_BYTES - out_need + 1, NULL));
  REJECTED(sy_attn_q_reverse(attn, plan, b->out, RB, b->out + RB, NULL)); /* attn_rows overlaps out */
  REJECTED(sy_attn_q_reverse(attn, x->other, b->attn_rows, RB, b->out, NULL));
}

/* ---- KV backward ---- */
static void kv_backward_args(int me, bufs_t *b, const objs_t *x) {
  sy_attn_t attn = x->attn;
  sy_attn_plan_t plan = x->plan;
  REJECTED(sy_attn_kv_backward(attn, plan, b->grads, GRB, (sy_dtype_t)3, 0, b->grad_out, NULL));
  REJECTED(sy_attn_kv_backward(attn, plan, b->grads, GRB, (sy_dtype_t)-1, 0, b->grad_out, NULL));
  REJECTED(sy_attn_kv_backward(attn, plan, b->grads, GRB, SY_DTYPE_BF16, 2u, b->grad_out, NULL));
  REJECTED(sy_attn_kv_backward(attn, plan, b->grads, 6, SY_DTYPE_FP32, 0, b->grad_out, NULL));
  REJECTED(sy_attn_kv_backward(attn, plan, b->grads, 3, SY_DTYPE_BF16, 0, b->grad_out, NULL));
  REJECTED(sy_attn_kv_backward(attn, plan, b->grads, 0, SY_DTYPE_BF16, 0, b->grad_out, NULL));
  REJECTED(sy_attn_kv_backward(attn, plan, b->grads, GRB + 2, SY_DTYPE_BF16, 0, b->grad_out, NULL));
  REJECTED(sy_attn_kv_backward(attn, plan, b->grads, GRB, SY_DTYPE_BF16, 0, NULL, NULL));
  REJECTED(sy_attn_kv_backward(attn, plan, b->grads, GRB, SY_DTYPE_BF16, SY_ATTN_UNSUMMED, NULL, NULL));
  REJECTED(sy_attn_kv_backward(attn, plan, NULL, GRB, SY_DTYPE_BF16, 0, b->grad_out, NULL));
  REJECTED(sy_attn_kv_backward(attn, plan, b->grads, GRB, SY_DTYPE_BF16, 0, b->grads + GRB, NULL)); /* overlap */
  REJECTED(sy_attn_kv_backward(attn, x->q_only, b->grads, GRB, SY_DTYPE_BF16, 0, b->grad_out, NULL));
  REJECTED(sy_attn_kv_backward(x->no_grads, plan, b->grads, 2, SY_DTYPE_BF16, 0, b->grad_out, NULL));
  REJECTED(sy_attn_kv_backward(x->few_replicas, plan, b->grads, GRB, SY_DTYPE_BF16, 0, b->grad_out, NULL));
  REJECTED(sy_attn_kv_backward(attn, x->other, b->grads, GRB, SY_DTYPE_BF16, 0, b->grad_out, NULL));
}

/* The whole log so far, NUL-terminated (the caller frees it); NULL if unreadable. */
static char *log_text(void) {
  FILE *f = fopen(check_log_path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = n >= 0 ? calloc(1, (size_t)n + 1) : NULL;
  if (text && fread(text, 1, (size_t)n, f) != (size_t)n) text[0] = '\0';
  fclose(f);
  return text;
}

/* ---- sources inside a symmetric allocation: kv_recv (only read here) ends one row too early for each ---- */
static void source_args(int me, bufs_t *b, const objs_t *x) {
  sy_attn_t attn = x->attn;
  sy_attn_plan_t plan = x->plan;
  const size_t mlp = (size_t)x->info.num_tokens * RB, q_rows = (size_t)x->info.q_recv_rows * RB,
               kv_rows = (size_t)x->info.kv_recv_rows * GRB;
  const struct {
    const char *name;
    unsigned char *src;
    size_t need;
  } short_of[4] = {{"q", b->kv_recv + BUF_BYTES - mlp + RB, mlp},
                   {"kv", b->kv_recv + BUF_BYTES - mlp + RB, mlp},
                   {"attn_rows", b->kv_recv + BUF_BYTES - q_rows + RB, q_rows},
                   {"grad_rows", b->kv_recv + BUF_BYTES - kv_rows + GRB, kv_rows}};
  REJECTED(sy_attn_q_forward(attn, plan, short_of[0].src, RB, b->q_recv, NULL));
  REJECTED(sy_attn_qkv_forward(attn, plan, b->q, RB, b->q_recv, short_of[1].src, RB, b->out, NULL));
  REJECTED(sy_attn_q_reverse(attn, plan, short_of[2].src, RB, b->out, NULL));
  REJECTED(sy_attn_kv_backward(attn, plan, short_of[3].src, GRB, SY_DTYPE_BF16, 0, b->grad_out, NULL));
  if (me != 0) return; /* the log lines of rank 0's rejections, which name the argument and the room */
  static const char *const fns[4] = {"sy_attn_q_forward", "sy_attn_qkv_forward", "sy_attn_q_reverse",
                                     "sy_attn_kv_backward"};
  for (int i = 0; i < 4; i++) {
    char want[256];
    const size_t room = (size_t)(b->kv_recv + BUF_BYTES - short_of[i].src);
    snprintf(want, sizeof want, "%s: invalid argument: %s=%p lies in a symmetric allocation with room for %zu bytes",
             fns[i], short_of[i].name, (void *)short_of[i].src, room);
    char *log = log_text();
    if (!log || !strstr(log, want)) fprintf(stderr, "line %d: log lacks \"%s\"\n", __LINE__, want);
    CHECK(log && strstr(log, want));
    free(log);
  }
}

/* ---- nothing sticky: valid calls work ---- */
static void valid_calls_after(sy_comm_t comm, bufs_t *b, const objs_t *x) {
  sy_status_t async = SY_ERR_INTERNAL;
  CHECK_OK(sy_comm_async_error(comm, &async, NULL, 0));
  CHECK_EQ_INT(async, SY_SUCCESS);
  CHECK_OK(sy_comm_barrier(comm, NULL));
  CHECK_OK(sy_attn_q_forward(x->attn, x->plan, b->q, RB, b->q_recv, NULL));
  CHECK(memcmp(b->q_recv, b->q_recv + BUF_BYTES - RB, RB) != 0); /* rows arrived (the tail stays poison) */
  CHECK_OK(sy_attn_q_forward(x->attn, x->q_only, b->q, RB, b->q_recv, NULL));
  CHECK_OK(sy_attn_kv_backward(x->attn, x->plan, b->grads, GRB, SY_DTYPE_BF16, 0, b->grad_out, NULL));
  CHECK_OK(sy_attn_kv_backward(x->attn, x->plan, b->grads, 2, SY_DTYPE_FP16, SY_ATTN_UNSUMMED, b->grad_out, NULL));
  /* Sources in symmetric allocations with room for their rows: q_recv as the reverse's rows, kv_recv as the
   * gradients. */
  CHECK_OK(sy_attn_q_reverse(x->attn, x->plan, b->q_recv, RB, b->out, NULL));
  CHECK_OK(sy_attn_kv_backward(x->attn, x->plan, b->kv_recv, GRB, SY_DTYPE_BF16, 0, b->grad_out, NULL));
}

static void bad_args_rank(int me, sy_comm_t comm, void *arg) {
  args_shared_t *shared = arg;
  fixed_t f;
  fixed_make(&f, 0);
  bufs_t bufs, *b = &bufs;
  if (!bufs_alloc(comm, me, b)) return;
  objs_t x;
  memset(&x, 0, sizeof x);
  plan_args(me, comm, &f, b, shared, &x);
  config_args(me, comm, b, &x);
  CHECK_OK(sy_comm_barrier(comm, NULL)); /* both plans are published */
  x.other = shared->plans[1 - me];

  q_forward_args(me, b, &x);
  qkv_forward_args(me, b, &x);
  q_reverse_args(me, b, &x);
  kv_backward_args(me, b, &x);
  source_args(me, b, &x);
  valid_calls_after(comm, b, &x);

  CHECK_OK(sy_comm_barrier(comm, NULL)); /* the peer is done with this rank's plan */
  CHECK_OK(sy_attn_destroy(x.no_grads));
  CHECK_OK(sy_attn_destroy(x.few_replicas));
  CHECK_OK(sy_attn_destroy(x.few_tokens));
  CHECK_OK(sy_attn_destroy(x.attn));
  CHECK_OK(sy_attn_plan_destroy(x.plan));
  CHECK_OK(sy_attn_plan_destroy(x.q_only));
  CHECK_OK(sy_mem_free(comm, b->q_recv));
  CHECK_OK(sy_mem_free(comm, b->kv_recv));
  CHECK_OK(sy_mem_free(comm, b->out));
  free(b->q), free(b->kv), free(b->attn_rows), free(b->grads), free(b->grad_out), free(b->local), free(b->snapshot);
}

/* ---- ranks that disagree ----------------------------------------------------------------------------------- */

typedef enum disagreement { ROW_BYTES, PLANS, DIRECTIONS, OFFSETS, DISAGREEMENTS } disagreement_t;

static void mismatch_rank(int me, sy_comm_t comm, void *arg) {
  const disagreement_t what = *(const disagreement_t *)arg;
  fixed_t f;
  /* PLANS: rank 1's description sends one more sequence to rank 1; OFFSETS: rank 1's has rank 0's rows two
   * further on, every pair's count the same (before the fingerprints, rank 1 pulled rows 2.. of rank 0's q) */
  fixed_make(&f, me == 1 ? (what == PLANS ? 1 : what == OFFSETS ? 2 : 0) : 0);
  sy_attn_plan_t plan = NULL;
  CHECK_OK(sy_attn_plan_create(comm, &f.desc, &plan));
  sy_attn_config_t config = SY_ATTN_CONFIG_INIT;
  config.max_tokens = 64; /* room for either description's busiest rank: the calls check the plan's most tokens */
  config.max_replicas = 2;
  sy_attn_t attn = NULL;
  CHECK_OK(sy_attn_create(comm, &config, &attn));
  if (what == OFFSETS) { /* the counts agree: only the fingerprints tell */
    sy_attn_plan_info_t info = SY_ATTN_PLAN_INFO_INIT;
    CHECK_OK(sy_attn_plan_info(plan, &info));
    CHECK_EQ_INT(info.q_send_to[1 - me], 3 + me);
    CHECK_EQ_INT(info.q_recv_from[1 - me], 4 - me);
  }
  unsigned char *recv = NULL;
  CHECK_OK(sy_mem_alloc(comm, 64 * 64, (void **)&recv));
  if (!plan || !attn || !recv) return;
  unsigned char *in = malloc(64 * 64), poison[64 * 64];
  payload_fill(in, BUF_Q, me, 64, 0, 32);
  memset(recv, POISON, sizeof poison);
  memset(poison, POISON, sizeof poison);
  CHECK_OK(sy_comm_barrier(comm, NULL));
  const size_t rb = what == ROW_BYTES && me == 1 ? 48 : 32;
  if (what == DIRECTIONS && me == 1) CHECK_STATUS(sy_attn_q_reverse(attn, plan, in, rb, recv, NULL), SY_ERR_MISMATCH);
  else CHECK_STATUS(sy_attn_q_forward(attn, plan, in, rb, recv, NULL), SY_ERR_MISMATCH);
  CHECK(!memcmp(recv, poison, sizeof poison)); /* nothing copied */
  /* Sticky: every later call returns it; destroy is still accepted. */
  sy_status_t async = SY_SUCCESS;
  CHECK_OK(sy_comm_async_error(comm, &async, NULL, 0));
  CHECK_EQ_INT(async, SY_ERR_MISMATCH);
  CHECK_STATUS(sy_attn_q_forward(attn, plan, in, 32, recv, NULL), SY_ERR_MISMATCH);
  CHECK_STATUS(sy_comm_barrier(comm, NULL), SY_ERR_MISMATCH);
  CHECK_OK(sy_attn_destroy(attn));
  CHECK_OK(sy_attn_plan_destroy(plan));
  free(in);
}

/* One rank refuses its own arguments (max_replicas past the world, then attn NULL), the other's are good: the
 * create fails on every rank with SY_ERR_INVALID_ARG at once (the refusing rank still makes the ranks' verdict;
 * before, the other went on into the backend's exchanges and paired them with the refusing rank's next
 * collective), the good rank's log names the refusing rank, and the communicator stays usable. */
static void one_refuses_rank(int me, sy_comm_t comm, void *arg) {
  sy_attn_config_t good = SY_ATTN_CONFIG_INIT, bad;
  good.max_tokens = 8, good.max_replicas = 2, good.max_kv_grad_row_bytes = GRB;
  bad = good, bad.max_replicas = 3;
  sy_attn_t attn = NULL;
  CHECK_STATUS(sy_attn_create(comm, me == 0 ? &bad : &good, &attn), SY_ERR_INVALID_ARG);
  CHECK(attn == NULL);
  CHECK_STATUS(sy_attn_create(comm, &good, me == 1 ? NULL : &attn), SY_ERR_INVALID_ARG);
  CHECK(attn == NULL);
  sy_status_t async = SY_ERR_INTERNAL;
  CHECK_OK(sy_comm_async_error(comm, &async, NULL, 0));
  CHECK_EQ_INT(async, SY_SUCCESS);
  char *text = check_read_file(check_log_path); /* the whole log: both ranks read it at once here */
  const char *named = me == 0 ? "[rank 0] sy warn: sy_attn_create: rank 1 refused its arguments (its log names them)"
                              : "[rank 1] sy warn: sy_attn_create: rank 0 refused its arguments (its log names them)";
  CHECK(text && strstr(text, named));
  free(text);
  CHECK_OK(sy_attn_create(comm, &good, &attn));
  CHECK_OK(sy_attn_destroy(attn));
  (void)arg;
}

/* Ranks whose configurations differ (max_kv_grad_row_bytes): the create fails with SY_ERR_MISMATCH on every rank,
 * and sy_last_error says why (the staging freed on the way out used to clear it). */
static void create_mismatch_rank(int me, sy_comm_t comm, void *arg) {
  sy_attn_config_t config = SY_ATTN_CONFIG_INIT;
  config.max_tokens = 8, config.max_replicas = 2, config.max_kv_grad_row_bytes = me == 0 ? GRB : 2 * GRB;
  sy_attn_t attn = NULL;
  CHECK_STATUS(sy_attn_create(comm, &config, &attn), SY_ERR_MISMATCH);
  CHECK(attn == NULL);
  if (!strstr(sy_last_error(), "nothing created"))
    fprintf(stderr, "rank %d: sy_last_error: '%s'\n", me, sy_last_error());
  CHECK(strstr(sy_last_error(), "nothing created") != NULL);
  (void)arg;
}

/* A heap too small for the staging on one rank only (a review found rank 0 refused alone in sy_mem_alloc and both
 * communicators failed, SY_ERR_MISMATCH): the create's exchange carries the verdict, the small rank gets
 * SY_ERR_NO_MEMORY naming SY_HEAP_SIZE, the other SY_ERR_INVALID_ARG, both at once, both communicators usable. */
static void heap_rank(int me, sy_comm_t comm, void *arg) {
  sy_attn_config_t ac = SY_ATTN_CONFIG_INIT;
  ac.max_tokens = 1024, ac.max_replicas = 2, ac.max_kv_grad_row_bytes = 1024; /* 2 MiB of staging */
  sy_attn_t attn = (sy_attn_t)&ac;                                            /* must come back NULL */
  CHECK_STATUS(sy_attn_create(comm, &ac, &attn), me == 0 ? SY_ERR_NO_MEMORY : SY_ERR_INVALID_ARG);
  CHECK(attn == NULL);
  if (me == 0) CHECK(check_log_has("exceeds the symmetric heap", __LINE__));
  CHECK_OK(sy_comm_barrier(comm, NULL)); /* still usable */
  (void)arg;
}

int main(void) {
  seed_from_env();
  char dir[] = "/tmp/sy_test_attn_args_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(check_log_path, sizeof check_log_path, "%s/log.txt", dir);
  setenv("SY_DEBUG_FILE", check_log_path, 1);
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();
  args_shared_t shared;
  memset(&shared, 0, sizeof shared);
  run_ranks(2, bad_args_rank, &shared);
  char *before = check_read_file(check_log_path); /* the mismatch checks read only what they log */
  check_log_pos = before ? (long)strlen(before) : 0;
  free(before);
  for (int k = 0; k < DISAGREEMENTS; k++) {
    disagreement_t what = (disagreement_t)k;
    run_ranks(2, mismatch_rank, &what);
    if (what == PLANS || what == OFFSETS) { /* both ranks say which rank's plan differs */
      char *text = check_read_file(check_log_path);
      CHECK(text != NULL);
      const char *at = text ? text + check_log_pos : "";
      int lines = 0;
      while ((at = strstr(at, "ranks hold plans of different descriptions: rank 0's fingerprint is 0x")) != NULL)
        lines += strstr(at, ", ranks with another (1): 1 (0x") != NULL, at++;
      CHECK_EQ_INT(lines, 2);
      check_log_pos = text ? (long)strlen(text) : 0;
      free(text);
    }
  }
  setenv("SY_BOOT_TIMEOUT_MS", "10000", 1); /* a regression may wait this long in an exchange, not 60 s */
  run_ranks(2, one_refuses_rank, NULL);
  const size_t heaps[2] = {(size_t)1 << 20, (size_t)1 << 30};
  run_ranks_heaps(2, TEST_TIMEOUT_MS, heaps, heap_rank, NULL);
  run_ranks(2, create_mismatch_rank, NULL);
  unsetenv("SY_BOOT_TIMEOUT_MS");
  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  unlink(check_log_path);
  CHECK_EQ_INT(rmdir(dir), 0);
  return check_report();
}
