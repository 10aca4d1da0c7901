/*
 * test_moe_host_contract.c — what a caller of the MoE dispatch sizes and passes from the header alone, on the host
 * backend (two ranks, every wire, both modes):
 *  - sy_moe_recv_sizes against the header's formulas, and buffers allocated to exactly those sizes (poisoned guard
 *    bytes after each) that hold a dispatch and feed a combine with the expected results, guards intact;
 *  - its rejections (no object, no struct, a size field too small) name the argument and leave the struct alone;
 *    a newer caller's longer struct keeps its tail; it answers after a recorded error, as the header says;
 *  - the routing-weights rule: the call that reads them (default mode: the dispatch; SY_MOE_PER_EXPERT: the
 *    combine) rejects NULL naming itself and the mode, changing nothing; the other accepts a pointer to unreadable
 *    memory (a PROT_NONE page) and never reads it, in the one-call forms and the halves.
 */
#include "core/internal.h"
#include "moe_test.h"

#include <sys/mman.h>
#include <unistd.h>

#define GUARD 64

static const float *unreadable; /* a PROT_NONE page: reading it is a SIGSEGV */

/* name, W, E, K, H, T, wire, flags, ids, route, rounds (round 0 one call, round 1 halves), -, -, -, salt */
static const moe_case_t cases[] = {
    {"contract fp8", 2, 8, 2, 256, 4, SY_MOE_WIRE_FP8, 0, SY_INDEX_INT32, WL_ROUTE_FULL, 2, 0, 0, 0, 50},
    {"contract ue8m0 per-expert", 2, 4, 4, 128, 3, SY_MOE_WIRE_FP8_UE8M0, SY_MOE_PER_EXPERT, SY_INDEX_INT64,
     WL_ROUTE_FULL, 2, 0, 0, 0, 51},
    {"contract bf16 one expert", 2, 6, 3, 136, 5, SY_MOE_WIRE_BF16, 0, SY_INDEX_INT32, WL_ROUTE_ONE_EXPERT, 2, 0, 0, 0,
     52},
    {"contract bf16 per-expert", 2, 2, 2, 8, 2, SY_MOE_WIRE_BF16, SY_MOE_PER_EXPERT, SY_INDEX_INT32, WL_ROUTE_FULL, 2,
     0, 0, 0, 53},
};

/* The call must be rejected as invalid, with a log line containing needle. */
#define REJECT(call, needle)                \
  do {                                      \
    CHECK_STATUS(call, SY_ERR_INVALID_ARG); \
    CHECK(check_log_has(needle, __LINE__)); \
  } while (0)

enum { B_TOKENS, B_SCALES, B_SRC, B_EXPERT_COUNTS, B_RANK_COUNTS, B_EXPERT_OUT, B_COUNT };

/* The header's formulas, computed here from the case. */
static void expected_sizes(const moe_case_t *c, size_t bytes[B_COUNT]) {
  const size_t L = (size_t)(c->E / c->W), S = (size_t)c->W * c->T, H = (size_t)c->H;
  const int bf16 = c->wire == SY_MOE_WIRE_BF16;
  bytes[B_TOKENS] = L * S * H * (bf16 ? 2 : 1);
  bytes[B_SCALES] = bf16 ? 0 : L * (H / 128) * S * 4;
  bytes[B_SRC] = L * S * 8;
  bytes[B_EXPERT_COUNTS] = L * 4;
  bytes[B_RANK_COUNTS] = L * (size_t)c->W * 4;
  bytes[B_EXPERT_OUT] = L * S * H * 2;
}

static int guards_intact(unsigned char *const buf[B_COUNT], const size_t bytes[B_COUNT]) {
  for (int i = 0; i < B_COUNT; i++)
    if (!all_poison(buf[i] + bytes[i], GUARD)) return 0;
  return 1;
}

/* Rank 0 of the first case: sy_moe_recv_sizes' rejections change nothing; a longer struct keeps its tail. */
static void recv_sizes_args(sy_moe_t moe, const sy_moe_recv_sizes_t *want) {
  sy_moe_recv_sizes_t z, before;
  memset(&z, 0x5A, sizeof z);
  REJECT(sy_moe_recv_sizes(NULL, &z), "sy_moe_recv_sizes: invalid argument: moe is NULL");
  REJECT(sy_moe_recv_sizes(moe, NULL), "sy_moe_recv_sizes: invalid argument: sizes is NULL");
  z.size = 8;
  before = z;
  REJECT(sy_moe_recv_sizes(moe, &z), "sizes->size=8 is too small (initialise it with SY_MOE_RECV_SIZES_INIT)");
  CHECK(memcmp(&z, &before, sizeof z) == 0);
  struct {
    sy_moe_recv_sizes_t s;
    unsigned char tail[16];
  } longer;
  memset(&longer, 0x5A, sizeof longer);
  longer.s.size = sizeof longer;
  CHECK_OK(sy_moe_recv_sizes(moe, &longer.s));
  CHECK_EQ_INT(longer.s.size, sizeof longer);
  CHECK_EQ_INT(longer.s.tokens_bytes, want->tokens_bytes);
  CHECK_EQ_INT(longer.s.expert_out_bytes, want->expert_out_bytes);
  int tail_kept = 1;
  for (size_t i = 0; i < sizeof longer.tail; i++) tail_kept = tail_kept && longer.tail[i] == 0x5A;
  CHECK(tail_kept);
}

/* One round's inputs for rank me: tokens, ids in the case's type, dispatch and combine weights. */
typedef struct inputs {
  uint16_t *tokens, *out;
  void *ids;
  float *w, *cw;
} inputs_t;

static void fill(const moe_case_t *c, const world_inputs_t *wi, int me, inputs_t *in) {
  memcpy(in->tokens, wi->tok[me], (size_t)wi->n[me] * c->H * 2);
  for (size_t i = 0; i < (size_t)wi->n[me] * c->K; i++) {
    if (c->id_type == SY_INDEX_INT64) ((int64_t *)in->ids)[i] = wi->ids[me][i];
    else ((int32_t *)in->ids)[i] = (int32_t)wi->ids[me][i];
  }
  memcpy(in->w, wi->w[me], (size_t)wi->n[me] * c->K * 4);
  memcpy(in->cw, wi->cw[me], (size_t)wi->n[me] * c->K * 4);
}

/* Rank 0: the reading call rejects NULL weights, naming itself and the mode. Called with the object's next half
 * dispatch_send (half 0), combine_send (half 2) or combine_recv (half 3); the caller checks that nothing was written, and the valid
 * calls after it that the object's next half did not move. */
static void weights_rejections(sy_moe_t moe, const moe_case_t *c, const inputs_t *in, int n, int half,
                               const sy_moe_recv_t *recv, const void *expert_out) {
  const int pe = (c->flags & SY_MOE_PER_EXPERT) != 0;
  const sy_index_type_t it = c->id_type;
  char want[256];
  if (half == 0 && !pe) {
    snprintf(want, sizeof want,
             "sy_moe_dispatch: invalid argument: weights is NULL while num_tokens=%d: the default (rank-reduced) "
             "mode reads the routing weights at dispatch",
             n);
    REJECT(sy_moe_dispatch(moe, in->tokens, n, in->ids, it, NULL, recv, NULL), want);
    snprintf(want, sizeof want,
             "sy_moe_dispatch_send: invalid argument: weights is NULL while num_tokens=%d: the default", n);
    REJECT(sy_moe_dispatch_send(moe, in->tokens, n, in->ids, it, NULL, NULL), want);
  }
  if (half == 2 && pe) {
    snprintf(want, sizeof want,
             "sy_moe_combine: invalid argument: weights is NULL while num_tokens=%d: SY_MOE_PER_EXPERT reads the "
             "routing weights at combine, where this rank weights each expert's output",
             n);
    REJECT(sy_moe_combine(moe, expert_out, in->ids, it, NULL, n, in->out, NULL), want);
  }
  if (half == 3 && pe) {
    snprintf(want, sizeof want,
             "sy_moe_combine_recv: invalid argument: weights is NULL while num_tokens=%d: SY_MOE_PER_EXPERT reads the "
             "routing weights at combine",
             n);
    REJECT(sy_moe_combine_recv(moe, in->ids, it, NULL, n, in->out, NULL), want);
  }
}

static void contract_rank(int me, sy_comm_t comm, void *arg) {
  const moe_case_t *c = arg;
  const int pe = (c->flags & SY_MOE_PER_EXPERT) != 0, first = c == &cases[0];
  const sy_moe_config_t config = case_config(c);
  sy_moe_t moe = NULL;
  CHECK_OK(sy_moe_create(comm, &config, &moe));
  if (!moe) return;
  size_t bytes[B_COUNT];
  expected_sizes(c, bytes);
  sy_moe_recv_sizes_t z = SY_MOE_RECV_SIZES_INIT;
  CHECK_OK(sy_moe_recv_sizes(moe, &z));
  CHECK_EQ_INT(z.size, sizeof z);
  CHECK_EQ_INT(z.local_experts, c->E / c->W);
  CHECK_EQ_INT(z.slots, c->W * c->T);
  const size_t got[B_COUNT] = {z.tokens_bytes,        z.scales_bytes,      z.src_bytes,
                               z.expert_counts_bytes, z.rank_counts_bytes, z.expert_out_bytes};
  for (int i = 0; i < B_COUNT; i++) CHECK_EQ_INT(got[i], bytes[i]);
  if (me == 0 && first) recv_sizes_args(moe, &z);

  /* The caller's buffers, to the byte the query gave, each followed by poisoned guard bytes. */
  unsigned char *buf[B_COUNT];
  for (int i = 0; i < B_COUNT; i++) buf[i] = malloc(got[i] + GUARD);
  sy_moe_recv_t recv = {buf[B_TOKENS], z.scales_bytes ? (float *)buf[B_SCALES] : NULL, (int32_t *)buf[B_SRC],
                        (int32_t *)buf[B_EXPERT_COUNTS], (int32_t *)buf[B_RANK_COUNTS]};
  inputs_t in = {malloc((size_t)c->T * c->H * 2), malloc((size_t)c->T * c->H * 2), malloc((size_t)c->T * c->K * 8),
                 malloc((size_t)c->T * c->K * 4), malloc((size_t)c->T * c->K * 4)};
  /* The weights of the call that does not read them: unreadable, so a read would crash the test. */
  const float *dispatch_w = pe ? unreadable : in.w, *combine_w = pe ? in.cw : unreadable;
  world_inputs_t wi;
  inputs_alloc(c, &wi);
  for (int round = 0; round < c->rounds; round++) {
    inputs_gen(c, round, &wi);
    const int n = wi.n[me];
    CHECK(n > 0);
    fill(c, &wi, me, &in);
    for (int i = 0; i < B_COUNT; i++) memset(buf[i], POISON, got[i] + GUARD);
    memset(in.out, POISON, (size_t)c->T * c->H * 2);
    if (me == 0 && round == 0) {
      weights_rejections(moe, c, &in, n, 0, &recv, NULL);
      for (int i = 0; i < B_COUNT; i++) CHECK(all_poison(buf[i], got[i] + GUARD)); /* nothing written */
    }
    if (round == 0) {
      CHECK_OK(sy_moe_dispatch(moe, in.tokens, n, in.ids, c->id_type, dispatch_w, &recv, NULL));
    } else {
      CHECK_OK(sy_moe_dispatch_send(moe, in.tokens, n, in.ids, c->id_type, dispatch_w, NULL));
      CHECK_OK(sy_moe_dispatch_recv(moe, &recv, NULL));
    }
    check_dispatch(c, &wi, me, &recv, c->name);
    gen_expert_out(c, round, me, (uint16_t *)buf[B_EXPERT_OUT]);
    if (round == 0) {
      if (me == 0) weights_rejections(moe, c, &in, n, 2, &recv, buf[B_EXPERT_OUT]);
      CHECK(all_poison(in.out, (size_t)c->T * c->H * 2)); /* the rejected combine wrote nothing */
      CHECK_OK(sy_moe_combine(moe, buf[B_EXPERT_OUT], in.ids, c->id_type, combine_w, n, in.out, NULL));
    } else {
      CHECK_OK(sy_moe_combine_send(moe, buf[B_EXPERT_OUT], NULL));
      if (me == 0) weights_rejections(moe, c, &in, n, 3, &recv, NULL);
      CHECK(all_poison(in.out, (size_t)c->T * c->H * 2)); /* the rejected combine_recv wrote nothing */
      CHECK_OK(sy_moe_combine_recv(moe, in.ids, c->id_type, combine_w, n, in.out, NULL));
    }
    check_combine(c, &wi, round, me, in.out, c->name);
    CHECK(guards_intact(buf, got));
  }
  CHECK_OK(sy_moe_destroy(moe));
  inputs_free(c, &wi);
  for (int i = 0; i < B_COUNT; i++) free(buf[i]);
  free(in.tokens), free(in.out), free(in.ids), free(in.w), free(in.cw);
}

/* After a recorded error the object's sizes and the workspace size still answer; its calls return the error. */
static void after_error_rank(int me, sy_comm_t comm, void *arg) {
  const moe_case_t *c = &cases[0];
  const sy_moe_config_t config = case_config(c);
  sy_moe_t moe = NULL;
  CHECK_OK(sy_moe_create(comm, &config, &moe));
  if (!moe) return;
  CHECK_OK(sy_comm_barrier(comm, NULL)); /* both created before either records an error */
  sy__comm_set_error(comm, SY_ERR_TIMEOUT, "test: a wait timed out");
  sy_moe_recv_sizes_t z = SY_MOE_RECV_SIZES_INIT;
  CHECK_OK(sy_moe_recv_sizes(moe, &z));
  CHECK_EQ_INT(z.slots, c->W * c->T);
  size_t ws = 0;
  CHECK_OK(sy_moe_workspace_size(comm, &config, &ws));
  CHECK(ws > 0);
  CHECK_STATUS(sy_moe_dispatch_send(moe, NULL, 0, NULL, SY_INDEX_INT32, NULL, NULL), SY_ERR_TIMEOUT);
  CHECK_OK(sy_moe_destroy(moe));
  (void)me, (void)arg;
}

int main(void) {
  seed_from_env();
  const long page = sysconf(_SC_PAGESIZE);
  void *p = mmap(NULL, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED);
  if (p == MAP_FAILED) return check_report();
  unreadable = p;
  char dir[] = "/tmp/sy_test_moe_contract_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(check_log_path, sizeof check_log_path, "%s/log.txt", dir);
  setenv("SY_DEBUG_FILE", check_log_path, 1);
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();

  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_ranks(cases[i].W, contract_rank, (void *)&cases[i]);
    printf("%s: done\n", cases[i].name);
  }
  run_ranks(2, after_error_rank, NULL);

  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  unlink(check_log_path);
  CHECK_EQ_INT(rmdir(dir), 0);
  munmap(p, (size_t)page);
  return check_report();
}
