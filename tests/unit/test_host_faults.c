/*
 * test_host_faults.c — the host backend's group exchange when ranks fall out of step (src/host/group.c).
 *   slow copy      a receiver's copy from a sender's buffer stalls past the timeout (the buffer is PROT_NONE;
 *                  a SIGSEGV handler sleeps, then makes it readable), while the other ranks time out at the
 *                  closing round and then free or unmap their buffers as any caller may: no rank returns
 *                  before the receiver stopped copying, the receiver abandons the rest at the abort, nothing
 *                  freed is read, and the timeout names the receiver as slow, not missing. All-to-all and the
 *                  attention dispatch.
 *   out of order   two ranks calling different collectives (every pair of barrier, mem_alloc, mem_free,
 *                  alltoall, allgather_host, attn_create, moe_create; an attention call against an all-to-all):
 *                  SY_ERR_MISMATCH on both, a line naming both operations and ranks, nothing done, sticky; and
 *                  ranks whose collective numbers differ.
 */
#include "host/host.h"
#include "host_comm_test.h"

#include <signal.h>
#include <sys/mman.h>

/* The sanitizers' own SIGSEGV handler would report the stall as a crash: the test's handler takes it. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "handle_segv=0:allow_user_segv_handler=1"; }

/* ---- slow copy ---------------------------------------------------------------------------------------- */

#define SLOW_WORLD      4
#define SLOW_TIMEOUT_MS 400
#define STALL_MS        1500
#define SLOW_ROWS       1024
#define SLOW_ROW_BYTES  4096
#define SLOW_BYTES      ((size_t)SLOW_ROWS * SLOW_ROW_BYTES) /* one pair's bytes: one piece (SY_HOST_COPY_PIECE) */
#define RECV_POISON     0xEE

/* Rank 1's send buffer: PROT_NONE during the call; the first touch stalls STALL_MS, then it becomes readable. */
static struct {
  unsigned char *buf;
  int stalls;            /* atomic */
  uint64_t stall_end_ms; /* atomic: when the stalled copy could go on */
} stall;

static void on_segv(int sig, siginfo_t *si, void *uc) {
  (void)sig, (void)uc;
  const unsigned char *a = si->si_addr;
  if (a >= stall.buf && a < stall.buf + SLOW_BYTES && __atomic_fetch_add(&stall.stalls, 1, __ATOMIC_RELAXED) == 0) {
    struct timespec ts = {STALL_MS / 1000, (long)(STALL_MS % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
    __atomic_store_n(&stall.stall_end_ms, now_ms(), __ATOMIC_RELEASE);
    mprotect(stall.buf, SLOW_BYTES, PROT_READ | PROT_WRITE);
    return;
  }
  signal(SIGSEGV, SIG_DFL); /* a real fault (or a second one): die of it */
}

typedef struct slow_run {
  int attn; /* 0: sy_alltoallv; 1: sy_attn_q_forward */
  sy_status_t status[SLOW_WORLD];
  uint64_t start_ms, returned_ms[SLOW_WORLD];
} slow_run_t;

/* Every rank sends SLOW_BYTES to rank 0 (one sequence of SLOW_ROWS rows with the attention dispatch). */
static sy_status_t slow_call(rank_ctx_t *ctx, const slow_run_t *sr, sy_attn_t attn, sy_attn_plan_t plan,
                             const unsigned char *send, unsigned char *recv) {
  if (sr->attn) return sy_attn_q_forward(attn, plan, send, SLOW_ROW_BYTES, recv, NULL);
  size_t sb[SLOW_WORLD] = {SLOW_BYTES}, so[SLOW_WORLD] = {0}, rb[SLOW_WORLD] = {0}, ro[SLOW_WORLD] = {0};
  for (int s = 0; ctx->rank == 0 && s < SLOW_WORLD; s++) rb[s] = SLOW_BYTES, ro[s] = (size_t)s * SLOW_BYTES;
  return sy_alltoallv(ctx->comm, send, sb, so, recv, rb, ro, NULL);
}

static void make_attn(rank_ctx_t *ctx, sy_attn_t *attn, sy_attn_plan_t *plan) {
  int num_seqs[SLOW_WORLD], q0[1] = {0};
  int64_t num_tokens[SLOW_WORLD], len[1] = {SLOW_ROWS};
  const int64_t *lens[SLOW_WORLD];
  const int *q_dst[SLOW_WORLD];
  for (int r = 0; r < SLOW_WORLD; r++) num_seqs[r] = 1, num_tokens[r] = SLOW_ROWS, lens[r] = len, q_dst[r] = q0;
  sy_attn_plan_desc_t desc = SY_ATTN_PLAN_DESC_INIT;
  desc.world_size = SLOW_WORLD;
  desc.num_seqs = num_seqs;
  desc.num_tokens = num_tokens;
  desc.seq_lens = lens;
  desc.q_dst = q_dst;
  CHECK_OK(sy_attn_plan_create(ctx->comm, &desc, plan));
  sy_attn_config_t config = SY_ATTN_CONFIG_INIT;
  config.max_tokens = SLOW_ROWS;
  config.max_replicas = 1;
  CHECK_OK(sy_attn_create(ctx->comm, &config, attn));
}

static void fn_slow_copy(rank_ctx_t *ctx) {
  slow_run_t *sr = ctx->run->user;
  const int me = ctx->rank;
  unsigned char *recv = NULL;
  sy_attn_t attn = NULL;
  sy_attn_plan_t plan = NULL;
  CHECK_OK(sy_mem_alloc(ctx->comm, SLOW_BYTES * SLOW_WORLD, (void **)&recv));
  if (sr->attn) make_attn(ctx, &attn, &plan);
  unsigned char *send = me == 1 ? stall.buf : malloc(SLOW_BYTES);
  if (!recv || !send || (sr->attn && (!attn || !plan))) abort(); /* the peers would time out: fail loudly */
  memset(send, 'a' + me, SLOW_BYTES);
  memset(recv, RECV_POISON, SLOW_BYTES * SLOW_WORLD);
  CHECK_OK(sy_comm_barrier(ctx->comm, NULL));
  if (me == 1) CHECK_EQ_INT(mprotect(stall.buf, SLOW_BYTES, PROT_NONE), 0);
  CHECK_OK(sy_comm_barrier(ctx->comm, NULL)); /* the buffer is PROT_NONE before rank 0 copies */

  if (me == 0) sr->start_ms = now_ms();
  sy_status_t st = slow_call(ctx, sr, attn, plan, send, recv);
  sr->returned_ms[me] = now_ms();
  sr->status[me] = st;
  /* The call returned: the caller owns its buffer again, and reuses or frees it. */
  if (me == 1) {
    munmap(stall.buf, SLOW_BYTES);
  } else if (me > 1) {
    memset(send, 'X', SLOW_BYTES);
    free(send);
  } else {
    free(send);
    size_t wrong_mine = 0, wrong_stalled = 0, copied_after_abort = 0;
    for (size_t i = 0; i < SLOW_BYTES; i++) wrong_mine += recv[i] != 'a';
    for (size_t i = 0; i < SLOW_BYTES; i++) wrong_stalled += recv[SLOW_BYTES + i] != 'b'; /* its piece completes */
    for (size_t i = 2 * SLOW_BYTES; i < SLOW_WORLD * SLOW_BYTES; i++) copied_after_abort += recv[i] != RECV_POISON;
    CHECK_EQ_INT(wrong_mine, 0);
    CHECK_EQ_INT(wrong_stalled, 0);
    CHECK_EQ_INT(copied_after_abort, 0); /* abandoned at the abort: nothing of ranks 2 and 3, no freed bytes */
  }
  sy_status_t async = SY_SUCCESS;
  char detail[256] = "";
  CHECK_OK(sy_comm_async_error(ctx->comm, &async, detail, sizeof detail));
  CHECK_EQ_INT(async, SY_ERR_TIMEOUT);
  CHECK(strstr(detail, "closing round") != NULL);
  CHECK(strstr(detail, "(missing: none; slow, arrived and still copying: 0)") != NULL);
  if (!strstr(detail, "slow, arrived and still copying: 0")) fprintf(stderr, "rank %d: detail: %s\n", me, detail);
  CHECK_OK(sy_attn_destroy(attn));
  if (plan) CHECK_OK(sy_attn_plan_destroy(plan));
}

static void test_slow_copy(int attn) {
  stall.buf = mmap(NULL, SLOW_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(stall.buf != MAP_FAILED);
  if (stall.buf == MAP_FAILED) return;
  stall.stalls = 0;
  stall.stall_end_ms = 0;
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  CHECK_EQ_INT(sigaction(SIGSEGV, &sa, &old), 0);

  slow_run_t sr;
  memset(&sr, 0, sizeof sr);
  sr.attn = attn;
  run_shared_t run = make_run(SLOW_WORLD, 2300 + attn, fn_slow_copy);
  run.heap_bytes = (size_t)1 << 30;
  for (int r = 0; r < SLOW_WORLD; r++) run.timeout_ms[r] = SLOW_TIMEOUT_MS;
  run.user = &sr;
  run_ranks(&run);
  sigaction(SIGSEGV, &old, NULL);

  const uint64_t stall_end = __atomic_load_n(&stall.stall_end_ms, __ATOMIC_ACQUIRE);
  CHECK_EQ_INT(__atomic_load_n(&stall.stalls, __ATOMIC_RELAXED), 1);
  CHECK(stall_end >= sr.start_ms + STALL_MS - 50);
  int timed_out = 0;
  for (int r = 1; r < SLOW_WORLD; r++) {
    /* One rank's closing round timed out and aborted the group; the others saw the abort. */
    CHECK(sr.status[r] == SY_ERR_TIMEOUT || sr.status[r] == SY_ERR_ABORTED);
    timed_out += sr.status[r] == SY_ERR_TIMEOUT;
    /* None returned while rank 0 could still read its buffer, and none waited much past that. */
    CHECK(sr.returned_ms[r] >= stall_end);
    CHECK(sr.returned_ms[r] - sr.start_ms < STALL_MS + 5000);
  }
  CHECK_EQ_INT(timed_out, 1);
  CHECK_EQ_INT(sr.status[0], SY_ERR_ABORTED); /* the receiver stopped at the abort */
}

/* ---- collectives out of order ------------------------------------------------------------------------- */

enum { OP_BARRIER, OP_ALLOC, OP_FREE, OP_ALLTOALL, OP_ALLGATHER, OP_ATTN_CREATE, OP_MOE_CREATE, OP_COUNT };
/* What the host backend calls each in its line: sy_attn_create and sy_moe_create open with the host allgather of
 * their verdicts and configurations (core/attn.c, core/moe.c), so against sy_comm_allgather_host each is that
 * allgather, checked by its size. */
static const char *const host_names[OP_COUNT] = {"barrier",        "mem_alloc",      "mem_free",      "alltoallv",
                                                 "allgather_host", "allgather_host", "allgather_host"};

typedef struct mixed_run {
  int op[2];
  int bump; /* rank 1 counts one collective more than it made */
} mixed_run_t;

static sy_status_t mixed_call(rank_ctx_t *ctx, int op, void *p, void **out) {
  static char send[2][64];
  int mine = ctx->rank, all[2];
  switch (op) {
    case OP_BARRIER: return sy_comm_barrier(ctx->comm, NULL);
    case OP_ALLOC: return sy_mem_alloc(ctx->comm, 64, out);
    case OP_FREE: return sy_mem_free(ctx->comm, p);
    case OP_ALLTOALL: return sy_alltoall(ctx->comm, send[ctx->rank], p, 16, NULL);
    case OP_ALLGATHER: return sy_comm_allgather_host(ctx->comm, &mine, all, sizeof mine);
    case OP_ATTN_CREATE: {
      sy_attn_config_t config = SY_ATTN_CONFIG_INIT;
      config.max_tokens = 8;
      config.max_replicas = 1;
      return sy_attn_create(ctx->comm, &config, (sy_attn_t *)out);
    }
    default: {
      sy_moe_config_t config = SY_MOE_CONFIG_INIT;
      config.max_tokens = 4;
      config.hidden = 128;
      config.top_k = 2;
      config.num_experts = 4;
      return sy_moe_create(ctx->comm, &config, (sy_moe_t *)out);
    }
  }
}

static void fn_mixed(rank_ctx_t *ctx) {
  const mixed_run_t *mr = ctx->run->user;
  const int me = ctx->rank, op = mr->op[me];
  void *p = NULL, *out = NULL;
  CHECK_OK(sy_mem_alloc(ctx->comm, 256, &p)); /* collective 1 */
  if (!p) return;
  if (mr->bump && me == 1) ((host_state_t *)ctx->comm->backend_state)->collective++; /* a collective it never made */
  CHECK_STATUS(mixed_call(ctx, op, p, &out), SY_ERR_MISMATCH);
  CHECK(out == NULL); /* nothing allocated or created */
  const host_state_t *hs = ctx->comm->backend_state;
  CHECK_EQ_INT(hs->block_count, 1); /* nothing allocated or freed: p is still the one symmetric block */
  CHECK(hs->block_count == 1 && hs->blocks[0].ptrs[me] == p);
  /* Every rank's detail names both operations and both ranks, with their collective numbers. */
  sy_status_t async = SY_SUCCESS;
  char detail[256] = "", want[2][64];
  CHECK_OK(sy_comm_async_error(ctx->comm, &async, detail, sizeof detail));
  CHECK_EQ_INT(async, SY_ERR_MISMATCH);
  for (int r = 0; r < 2; r++) {
    snprintf(want[r], sizeof want[r], "rank %d calls %s (collective %d)", r, host_names[mr->op[r]],
             2 + (mr->bump && r == 1));
    CHECK(strstr(detail, want[r]) != NULL);
  }
  if (!strstr(detail, want[0]) || !strstr(detail, want[1])) fprintf(stderr, "rank %d: detail: %s\n", me, detail);
  CHECK(strstr(detail, "collectives out of order") != NULL);
  /* Sticky: the communicator accepts only destroy (which frees p). */
  CHECK_STATUS(sy_comm_barrier(ctx->comm, NULL), SY_ERR_MISMATCH);
  CHECK_STATUS(sy_mem_free(ctx->comm, p), SY_ERR_MISMATCH);
}

static void run_mixed(int op0, int op1, int bump, int group) {
  mixed_run_t mr = {{op0, op1}, bump};
  run_shared_t run = make_run(2, group, fn_mixed);
  run.heap_bytes = (size_t)1 << 20;
  run.user = &mr;
  run_ranks(&run);
}

static void test_out_of_order(void) {
  int group = 2400;
  for (int a = 0; a < OP_COUNT; a++)
    for (int b = 0; b < OP_COUNT; b++)
      if (strcmp(host_names[a], host_names[b]) != 0) run_mixed(a, b, 0, group++);
  /* The same operation, but rank 1 counts a collective that rank 0 never made. */
  run_mixed(OP_BARRIER, OP_BARRIER, 1, group++);
  run_mixed(OP_ALLTOALL, OP_ALLTOALL, 1, group++);
}

/* An attention call against an all-to-all, after the group's start, a matched create (its verdict, then its own
 * exchange) and an allocation (collectives 0-3; the plan is built locally); the line goes to the log of both
 * ranks. */
static void fn_attn_vs_alltoall(rank_ctx_t *ctx) {
  const int me = ctx->rank;
  int num_seqs[2] = {1, 1}, q_to[1] = {1};
  int64_t num_tokens[2] = {4, 4}, len[1] = {4};
  const int64_t *lens[2] = {len, len};
  const int *q_dst[2] = {q_to, q_to};
  sy_attn_plan_desc_t desc = SY_ATTN_PLAN_DESC_INIT;
  desc.world_size = 2;
  desc.num_seqs = num_seqs;
  desc.num_tokens = num_tokens;
  desc.seq_lens = lens;
  desc.q_dst = q_dst;
  sy_attn_plan_t plan = NULL;
  sy_attn_t attn = NULL;
  sy_attn_config_t config = SY_ATTN_CONFIG_INIT;
  config.max_tokens = 4;
  config.max_replicas = 1;
  char rows[4 * 16], *recv = NULL;
  memset(rows, 1 + me, sizeof rows);
  CHECK_OK(sy_attn_plan_create(ctx->comm, &desc, &plan));
  CHECK_OK(sy_attn_create(ctx->comm, &config, &attn));
  CHECK_OK(sy_mem_alloc(ctx->comm, 8 * 16, (void **)&recv));
  if (!plan || !attn || !recv) return;
  memset(recv, 0xEE, 8 * 16);
  if (me == 0) CHECK_STATUS(sy_attn_q_forward(attn, plan, rows, 16, recv, NULL), SY_ERR_MISMATCH);
  else CHECK_STATUS(sy_alltoall(ctx->comm, rows, recv, 16, NULL), SY_ERR_MISMATCH);
  size_t touched = 0;
  for (size_t i = 0; i < 8 * 16; i++) touched += (unsigned char)recv[i] != 0xEE;
  CHECK_EQ_INT(touched, 0);
  CHECK_OK(sy_attn_destroy(attn));
  CHECK_OK(sy_attn_plan_destroy(plan));
}

static void test_attn_vs_alltoall(void) {
  char dir[] = "/tmp/sy_test_faults_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(check_log_path, sizeof check_log_path, "%s/log", dir);
  setenv("SY_DEBUG_FILE", check_log_path, 1);
  sy__log_reset();
  run_shared_t run = make_run(2, 2500, fn_attn_vs_alltoall);
  run.heap_bytes = (size_t)1 << 20;
  run_ranks(&run);
  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  char *text = check_read_file(check_log_path);
  CHECK(text != NULL);
  for (int r = 0; text && r < 2; r++) {
    char want[200];
    snprintf(want, sizeof want,
             "[rank %d] sy warn: collectives out of order in host group 2500: rank 0 calls attn (collective 4); rank 1 "
             "calls alltoallv (collective 4); nothing done",
             r);
    CHECK(strstr(text, want) != NULL);
    if (!strstr(text, want)) fprintf(stderr, "log lacks \"%s\"; it says:\n%s\n", want, text);
  }
  free(text);
  unlink(check_log_path);
  CHECK_EQ_INT(rmdir(dir), 0);
}

int main(void) {
  test_slow_copy(0);
  test_slow_copy(1);
  test_out_of_order();
  test_attn_vs_alltoall();
  return check_report();
}
