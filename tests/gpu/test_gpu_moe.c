/*
 * test_gpu_moe.c — the MoE low-latency dispatch and combine on the GPUs against the CPU reference (the host
 * backend of the same library, run in this process on W threads with every rank's inputs), bit for bit, with
 * every output poisoned first so unwritten slots and rows show (slots at or past expert_counts[e], and rows
 * of `out` past num_tokens, must still hold the poison):
 *  - routing: random (ids of -1 at any k, some tokens with no expert), every token to one expert, a rank with
 *    no tokens (sometimes with NULL buffers), several of a token's experts on one rank, every id -1, every
 *    rank full, top_k = num_experts; experts that receive nothing (counted in the summary);
 *  - hidden 128 .. 7168 (and 8 and 200 on the BF16 wire), top-k 1, 2, 3, 4, 6, 8, 16, 8 .. 288 experts (a case
 *    whose experts do not divide among the ranks is skipped, and says so); the FP8, FP8_UE8M0 and BF16 wires;
 *    the default and SY_MOE_PER_EXPERT combines, each given weights it must ignore (the combine's, resp. the
 *    dispatch's) or none; int32 and int64 ids (the combine's in the other type every third round); NaN,
 *    infinities, -0.0 and subnormals in tokens and expert outputs;
 *  - the one-call forms and the four halves, 3 or more rounds per object enqueued back to back on one
 *    stream with no host sync (both parities, num_tokens and routing changing every round), the caller's
 *    inputs overwritten on the stream as soon as the half that reads them is done;
 *  - the first case again beside a smaller object created after it (the kernels' shared memory limits are the
 *    functions', not the objects');
 *  - a malformed SY_MOE_DIRECT, which fails sy_moe_create on every rank;
 *  - last, ids the device must reject (a repeat, one equal to num_experts): reported through
 *    sy_comm_async_error and treated as -1 (the results equal those of the call with -1 there).
 * Each rank regenerates every rank's inputs from the seed (SY_TEST_SEED overrides it; a failure prints it), with
 * tests/workload's generators in the GPU tests' draw (gpu_moe_test.h). The CUDA graph cases: test_gpu_moe_graph.c.
 */
#include "gpu_moe_test.h"

/* ---- cases ------------------------------------------------------------------------------------------------- */

#define CASE(name_, E_, K_, H_, T_, wire_, flags_, ids_, route_, rounds_, mode_, specials_, salt_)            \
  {                                                                                                           \
    .name = name_, .E = E_, .K = K_, .H = H_, .T = T_, .wire = wire_, .flags = flags_, .id_type = ids_,       \
    .route = WL_ROUTE_##route_, .rounds = rounds_, .mode = MODE_##mode_, .specials = specials_, .salt = salt_ \
  }

/* E is chosen divisible by 1, 2, 3, 4 and 8 where the case allows, so that most cases run at every W. */
/* clang-format off */
static const moe_case_t cases[] = {
    /* name, num_experts, top_k, hidden, max_tokens, wire, flags, id type, routing, rounds, halves or one
     * call (alternate: one call in even rounds, halves in odd), special values, seed salt */
    CASE("random",                         48,  4,  256,  32,  FP8,  0,  I32, RANDOM,     4, ALTERNATE, 0,  1),
    CASE("random ue8m0 per-expert",        48,  4,  256,  32,  UE8,  PE, I64, RANDOM,     4, HALVES,    0,  2),
    CASE("random bf16",                    24,  2,  128,  32,  BF16, 0,  I64, RANDOM,     3, ONE_CALL,  0,  3),
    CASE("top-1",                          8,   1,  128,  64,  FP8,  0,  I32, RANDOM,     3, HALVES,    0,  4),
    CASE("top-1 bf16 per-expert",          24,  1,  256,  16,  BF16, PE, I32, RANDOM,     3, ALTERNATE, 0,  5),
    CASE("top-2 ue8m0",                    16,  2,  512,  24,  UE8,  0,  I64, RANDOM,     3, ALTERNATE, 0,  6),
    CASE("one expert",                     24,  2,  256,  32,  FP8,  0,  I32, ONE_EXPERT, 3, ALTERNATE, 0,  7),
    CASE("one expert ue8m0 per-expert",    48,  8,  128,  16,  UE8,  PE, I64, ONE_EXPERT, 3, HALVES,    0,  8),
    CASE("empty rank",                     96,  8,  256,  16,  FP8,  0,  I32, EMPTY_RANK, 8, ALTERNATE, 0,  9),
    CASE("empty rank bf16 per-expert",     24,  2,  128,  16,  BF16, PE, I64, EMPTY_RANK, 4, ONE_CALL,  0, 10),
    CASE("same rank",                      48,  8,  256,  16,  FP8,  0,  I64, SAME_RANK,  3, HALVES,    0, 11),
    CASE("same rank ue8m0 per-expert",     24,  8,  128,  16,  UE8,  PE, I32, SAME_RANK,  3, ALTERNATE, 0, 12),
    CASE("same rank bf16",                 16,  8,  128,  16,  BF16, 0,  I32, SAME_RANK,  3, ONE_CALL,  0, 13),
    CASE("no experts",                     24,  4,  128,  16,  FP8,  0,  I32, NONE,       3, ALTERNATE, 0, 14),
    CASE("no experts bf16 per-expert",     24,  4,  128,  16,  BF16, PE, I64, NONE,       3, HALVES,    0, 15),
    CASE("full ue8m0",                     48,  8,  512,  32,  UE8,  0,  I32, FULL,       3, HALVES,    0, 16),
    CASE("top-k = experts = 8 per-expert", 8,   8,  128,  16,  FP8,  PE, I32, FULL,       3, ALTERNATE, 0, 17),
    CASE("top-16",                         96,  16, 256,  16,  FP8,  0,  I64, RANDOM,     3, ALTERNATE, 0, 18),
    CASE("top-16 bf16 per-expert",         48,  16, 128,  16,  BF16, PE, I32, RANDOM,     3, HALVES,    0, 19),
    CASE("256 experts",                    256, 8,  128,  16,  FP8,  0,  I32, RANDOM,     3, HALVES,    0, 20),
    CASE("288 experts ue8m0",              288, 8,  256,  16,  UE8,  0,  I32, RANDOM,     3, ALTERNATE, 0, 21),
    CASE("288 experts top-16 per-expert",  288, 16, 128,  8,   FP8,  PE, I64, RANDOM,     3, HALVES,    0, 22),
    CASE("specials fp8",                   24,  4,  256,  16,  FP8,  0,  I32, FULL,       3, ONE_CALL,  1, 23),
    CASE("specials ue8m0 per-expert",      48,  8,  128,  16,  UE8,  PE, I64, RANDOM,     3, HALVES,    1, 24),
    CASE("specials bf16 same rank",        24,  8,  128,  16,  BF16, 0,  I32, SAME_RANK,  3, ALTERNATE, 1, 25),
    CASE("bf16 hidden 200",                24,  4,  200,  16,  BF16, 0,  I32, RANDOM,     3, ALTERNATE, 0, 33),
    CASE("bf16 hidden 8 per-expert",       24,  2,  8,    32,  BF16, PE, I64, SAME_RANK,  3, HALVES,    1, 34),
    CASE("hidden 2048",                    48,  8,  2048, 32,  FP8,  0,  I32, RANDOM,     3, ALTERNATE, 0, 26),
    CASE("hidden 2048 bf16 per-expert",    24,  4,  2048, 32,  BF16, PE, I64, SAME_RANK,  3, HALVES,    0, 27),
    CASE("hidden 4096 ue8m0",              24,  8,  4096, 32,  UE8,  0,  I64, RANDOM,     3, HALVES,    0, 28),
    CASE("hidden 4096 per-expert",         48,  8,  4096, 16,  FP8,  PE, I32, EMPTY_RANK, 3, ALTERNATE, 0, 29),
    CASE("hidden 7168, 128 tokens",        24,  8,  7168, 128, FP8,  0,  I32, RANDOM,     3, ALTERNATE, 0, 30),
    CASE("hidden 7168 bf16 per-expert",    24,  8,  7168, 128, BF16, PE, I64, FULL,       3, HALVES,    0, 31),
    CASE("hidden 7168 ue8m0 one expert",   16,  2,  7168, 64,  UE8,  0,  I32, ONE_EXPERT, 3, ONE_CALL,  0, 32),
    /* 288 experts x 1,100 tokens: the token masks would pass 32 KiB, so dispatch_send counts the ranks */
    CASE("1100 tokens (ranks counted)",    288, 8,  128,  1100, FP8, 0,  I32, RANDOM,     2, ALTERNATE, 0, 35),
    CASE("1100 tokens bf16 per-expert",    288, 4,  128,  1100, BF16, PE, I64, SAME_RANK, 2, HALVES,    0, 36),
    /* top-k not a power of two: dispatch_send routes in two passes (repeats by scans, ranks by atomics) */
    CASE("top-6",                          48,  6,  256,  32,  FP8,  0,  I32, RANDOM,     3, ALTERNATE, 1, 37),
    CASE("top-3 bf16 per-expert",          24,  3,  128,  16,  BF16, PE, I64, SAME_RANK,  3, HALVES,    1, 38),
    CASE("top-6 1100 tokens",              288, 6,  128,  1100, FP8, 0,  I64, RANDOM,     2, ALTERNATE, 0, 39),
};
/* clang-format on */

/* ---- what a case's routing gives --------------------------------------------------------------------------- */

/* Experts (over all ranks) that received nothing, summed over the rounds. */
static int empty_experts(const run_t *run) {
  int empty = 0;
  int32_t *counts = (int32_t *)malloc((size_t)run->L * sizeof *counts);
  for (int round = 0; round < run->rounds; round++)
    for (int d = 0; d < run->W; d++) {
      slot_counts(run, round, d, counts);
      for (int e = 0; e < run->L; e++) empty += counts[e] == 0;
    }
  free(counts);
  return empty;
}

/* The routing a case promises, so that a passing case means what its name says; returns the tokens (of
 * every rank and round) that have no expert. */
static int check_routing(const run_t *run) {
  const moe_case_t *c = run->c;
  int no_expert = 0;
  for (int round = 0; round < run->rounds; round++) {
    const int route = wl_moe_route(&run->gen, round);
    const int64_t target = (int64_t)(case_key(c, 2, (uint64_t)round, 0) % (uint64_t)c->E);
    for (int r = 0; r < run->W; r++) {
      const rank_in_t *ri = &run->in[(size_t)round * run->W + r];
      if (c->route == WL_ROUTE_EMPTY_RANK && r == round % run->W && ri->n != 0)
        GT_FAIL("%s: generator: rank %d has %d tokens in round %d, want none", c->name, r, ri->n, round);
      for (int t = 0; t < ri->n; t++) {
        const int64_t *ids = ri->ids + (size_t)t * c->K;
        int experts = 0, to_target = 0, most_on_one_rank = 0;
        for (int k = 0; k < c->K; k++) {
          experts += ids[k] >= 0;
          to_target |= ids[k] == target;
          int on_rank = 0;
          for (int j = 0; j < c->K; j++) on_rank += ids[k] >= 0 && ids[j] >= 0 && ids[j] / run->L == ids[k] / run->L;
          most_on_one_rank = on_rank > most_on_one_rank ? on_rank : most_on_one_rank;
        }
        no_expert += experts == 0;
        if ((route == WL_ROUTE_NONE && experts) || (route == WL_ROUTE_ONE_EXPERT && !to_target) ||
            (route == WL_ROUTE_SAME_RANK && c->K >= 2 && run->L >= 2 && most_on_one_rank < 2))
          GT_FAIL("%s: generator: rank %d token %d of round %d is not routed as '%s' says", c->name, r, t, round,
                  route_names[route]);
      }
    }
  }
  return no_expert;
}

/* ---- an eager case: its rounds enqueued back to back on one stream, then checked ---------------------------- */

/* Enqueues one round of this rank: inputs in, outputs poisoned, dispatch, expert outputs in, combine, outputs
 * out (h_got). The halves form overwrites each input as soon as the half that reads it is done on the stream. */
static void gpu_round(const run_t *run, sy_moe_t moe, int round, uint8_t *d_in, uint8_t *d_out, const uint8_t *h_in,
                      uint8_t *h_got, cudaStream_t stream) {
  const moe_case_t *c = run->c;
  const size_t *o = run->in_off;
  round_args_t a = round_args(run, round, run->me, d_in, d_out);
  GT_CUDA(cudaMemcpyAsync(d_in, h_in, o[IN_Y], cudaMemcpyHostToDevice, stream));
  GT_CUDA(cudaMemsetAsync(d_out, POISON, run->out_total, stream));
  if (!a.halves) {
    GT_OK(sy_moe_dispatch(moe, a.tokens, a.n, a.ids, c->id_type, a.w, &a.recv, stream));
  } else {
    GT_OK(sy_moe_dispatch_send(moe, a.tokens, a.n, a.ids, c->id_type, a.w, stream));
    GT_CUDA(cudaMemsetAsync(d_in, 0xFF, o[IN_CIDS], stream)); /* the dispatch's tokens, ids, weights */
    GT_OK(sy_moe_dispatch_recv(moe, &a.recv, stream));
  }
  /* The experts' outputs arrive after the dispatch, as from the expert GEMMs. */
  GT_CUDA(cudaMemcpyAsync(d_in + o[IN_Y], h_in + o[IN_Y], run->in_bytes[IN_Y], cudaMemcpyHostToDevice, stream));
  if (!a.halves) {
    GT_OK(sy_moe_combine(moe, a.y, a.cids, a.combine_type, a.cw, a.n, a.out, stream));
  } else {
    GT_OK(sy_moe_combine_send(moe, a.y, stream));
    GT_CUDA(cudaMemsetAsync(d_in + o[IN_Y], 0xFF, run->in_bytes[IN_Y], stream));
    GT_OK(sy_moe_combine_recv(moe, a.cids, a.combine_type, a.cw, a.n, a.out, stream));
  }
  GT_CUDA(cudaMemcpyAsync(h_got, d_out, run->out_total, cudaMemcpyDeviceToHost, stream));
}

/* shadow: a second object of the same configuration but one token is created after the case's and lives through
 * its rounds (its kernels need less shared memory: creating it must not lower the kernels' limit under the
 * first object's). */
static void run_case(sy_comm_t comm, int rank, int W, const moe_case_t *c, cudaStream_t stream, int shadow) {
  const double t0 = gt_now_s();
  const int before = gt_failures;
  run_t run;
  run_init(&run, c, W, rank);
  gt_run_host(W, oracle_rank, &run); /* before the GPU part: the ranks then start it together */
  uint8_t *d_in, *d_out, *h_in, *h_got;
  GT_CUDA(cudaMalloc((void **)&d_in, run.in_total));
  GT_CUDA(cudaMalloc((void **)&d_out, run.out_total));
  GT_CUDA(cudaMallocHost((void **)&h_in, (size_t)run.rounds * run.in_total));
  GT_CUDA(cudaMallocHost((void **)&h_got, (size_t)run.rounds * run.out_total));
  for (int round = 0; round < run.rounds; round++)
    fill_inputs(&run, round, rank, round_combine_type(c, round), h_in + (size_t)round * run.in_total);
  const sy_moe_config_t config = case_config(c);
  sy_moe_t moe = NULL;
  GT_OK(sy_moe_create(comm, &config, &moe));
  sy_moe_t small = NULL;
  sy_moe_config_t small_config = config;
  small_config.max_tokens = 1;
  if (shadow) GT_OK(sy_moe_create(comm, &small_config, &small));
  for (int round = 0; round < run.rounds; round++)
    gpu_round(&run, moe, round, d_in, d_out, h_in + (size_t)round * run.in_total, h_got + (size_t)round * run.out_total,
              stream);
  GT_CUDA(cudaStreamSynchronize(stream));
  check_async(comm, c->name);
  GT_OK(sy_moe_destroy(moe));
  if (small) GT_OK(sy_moe_destroy(small));
  for (int round = 0; round < run.rounds; round++) {
    char what[160];
    snprintf(what, sizeof what, "%s%s (W=%d), round %d of %d (%s, %d tokens here)", c->name,
             shadow ? " beside a 1-token object" : "", W, round, run.rounds,
             round_args(&run, round, rank, d_in, d_out).halves ? "halves" : "one call",
             run.in[(size_t)round * W + rank].n);
    compare_round(&run, what, h_got + (size_t)round * run.out_total, run.want + (size_t)round * run.out_total);
  }
  char extra[96];
  snprintf(extra, sizeof extra, "%4d empty experts, %4d tokens with none", empty_experts(&run), check_routing(&run));
  summary(comm, &run, before, extra, gt_now_s() - t0);
  GT_CUDA(cudaFree(d_in));
  GT_CUDA(cudaFree(d_out));
  GT_CUDA(cudaFreeHost(h_in));
  GT_CUDA(cudaFreeHost(h_got));
  run_free(&run);
}

/* ---- a malformed environment, ids the device must reject ----------------------------------------------------- */

/* A malformed SY_MOE_DIRECT fails sy_moe_create on every rank (after the collective reservation, so no rank
 * is left waiting), creating nothing; the variable's previous value is restored. */
static void run_bad_env(sy_comm_t comm, int rank) {
  const moe_case_t c = {.name = "bad env",
                        .E = 8,
                        .K = 2,
                        .H = 256,
                        .T = 4,
                        .wire = FP8,
                        .flags = 0,
                        .id_type = I32,
                        .route = WL_ROUTE_RANDOM,
                        .rounds = 1,
                        .mode = MODE_ONE_CALL,
                        .specials = 0,
                        .salt = 7};
  const char *was = getenv("SY_MOE_DIRECT");
  char saved[64] = "";
  if (was) snprintf(saved, sizeof saved, "%s", was);
  setenv("SY_MOE_DIRECT", "maybe", 1);
  const sy_moe_config_t config = case_config(&c);
  sy_moe_t moe = NULL;
  const sy_status_t st = sy_moe_create(comm, &config, &moe);
  GT_CHECK(st == SY_ERR_INVALID_ARG);
  GT_CHECK(moe == NULL);
  if (was) setenv("SY_MOE_DIRECT", saved, 1);
  else unsetenv("SY_MOE_DIRECT");
  if (rank == 0) printf("[test rank 0] %-32s: SY_MOE_DIRECT=maybe -> %s\n", c.name, sy_status_name(st));
}

/* On rank 0, token 3's k = 1 repeats its k = 0 and token 5's k = 2 is num_experts. The device reports them
 * through sy_comm_async_error — sticky, so this runs last — and treats each as -1: the dispatch's results equal
 * those of the same call with -1 there, run first (dispatch and combine, then the dispatch with the bad ids).
 * Top-k 4: dispatch_send's one-pass routing, which finds repeats by shuffles across the token's lanes. */
static void run_bad_ids(sy_comm_t comm, int rank, int W, cudaStream_t stream) {
  const moe_case_t c = {.name = "bad ids",
                        .E = 8 * W,
                        .K = 4,
                        .H = 256,
                        .T = 16,
                        .wire = FP8,
                        .flags = 0,
                        .id_type = I32,
                        .route = WL_ROUTE_RANDOM,
                        .rounds = 1,
                        .mode = MODE_ONE_CALL,
                        .specials = 0,
                        .salt = 42};
  const int K = c.K;
  run_t run;
  run_init(&run, &c, W, rank);
  rank_in_t *r0 = &run.in[0]; /* round 0, rank 0: every token, and the two rows set */
  r0->n = c.T;
  wl_moe_ids(&run.gen, 0, 0, r0->n, r0->ids);
  wl_moe_weights(&run.gen, 0, 0, r0->n, 0, r0->w);
  wl_moe_weights(&run.gen, 0, 0, r0->n, 1, r0->cw);
  wl_moe_tokens(&run.gen, 0, 0, r0->n, r0->tok);
  const int64_t row3[4] = {1, -1, 2, 3};
  memcpy(r0->ids + 3 * K, row3, sizeof row3);
  r0->ids[5 * K + 2] = -1;
  uint8_t *d_in, *d_out, *h_in, *h_got;
  GT_CUDA(cudaMalloc((void **)&d_in, run.in_total));
  GT_CUDA(cudaMalloc((void **)&d_out, run.out_total));
  GT_CUDA(cudaMallocHost((void **)&h_in, 2 * run.in_total));
  GT_CUDA(cudaMallocHost((void **)&h_got, 2 * run.out_total));
  fill_inputs(&run, 0, rank, I32, h_in); /* the call with -1 */
  r0->ids[3 * K + 1] = 1;
  r0->ids[5 * K + 2] = c.E;
  fill_inputs(&run, 0, rank, I32, h_in + run.in_total); /* the bad ids */
  const sy_moe_config_t config = case_config(&c);
  sy_moe_t moe = NULL;
  GT_OK(sy_moe_create(comm, &config, &moe));
  for (int pass = 0; pass < 2; pass++) {
    round_args_t a = round_args(&run, 0, rank, d_in, d_out);
    GT_CUDA(cudaMemcpyAsync(d_in, h_in + (size_t)pass * run.in_total, run.in_total, cudaMemcpyHostToDevice, stream));
    GT_CUDA(cudaMemsetAsync(d_out, POISON, run.out_total, stream));
    GT_OK(sy_moe_dispatch(moe, a.tokens, a.n, a.ids, c.id_type, a.w, &a.recv, stream));
    if (pass == 0) GT_OK(sy_moe_combine(moe, a.y, a.cids, I32, a.cw, a.n, a.out, stream));
    GT_CUDA(
        cudaMemcpyAsync(h_got + (size_t)pass * run.out_total, d_out, run.out_total, cudaMemcpyDeviceToHost, stream));
  }
  GT_CUDA(cudaStreamSynchronize(stream));
  static const char *const names[OUT_OUT] = {"recv.tokens", "recv.scales", "recv.src", "recv.expert_counts",
                                             "recv.rank_counts"};
  for (int o = 0; o < OUT_OUT; o++) {
    const uint8_t *x = h_got + run.out_off[o], *y = h_got + run.out_total + run.out_off[o];
    size_t at = 0;
    while (at < run.out_bytes[o] && x[at] == y[at]) at++;
    if (at < run.out_bytes[o])
      GT_FAIL("bad ids (W=%d): %s differs from the call with -1 for the bad ids at byte %zu of %zu", W, names[o], at,
              run.out_bytes[o]);
  }
  sy_status_t async = SY_ERR_INTERNAL;
  char detail[256] = "", want3[64], want5[64];
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  snprintf(want3, sizeof want3, "token 3: k 1, id 1");
  snprintf(want5, sizeof want5, "token 5: k 2, id %d", c.E);
  if (rank == 0) {
    GT_CHECK(async == SY_ERR_INVALID_ARG);
    if (!strstr(detail, "an expert id outside") || (!strstr(detail, want3) && !strstr(detail, want5)))
      GT_FAIL("bad ids: rank 0 reports \"%s\", not token 3's repeat or token 5's id %d", detail, c.E);
  } else if (async != SY_SUCCESS) {
    GT_FAIL("bad ids: rank %d has no bad id but reports %s: %s", rank, sy_status_name(async), detail);
  }
  if (rank == 0) printf("[test rank 0] %-32s W=%d: reported as \"%.80s...\"\n", c.name, W, detail);
  GT_OK(sy_moe_destroy(moe));
  GT_CUDA(cudaFree(d_in));
  GT_CUDA(cudaFree(d_out));
  GT_CUDA(cudaFreeHost(h_in));
  GT_CUDA(cudaFreeHost(h_got));
  run_free(&run);
}

int main(void) {
  int rank, W;
  cudaStream_t stream;
  sy_comm_t comm = moe_test_open("test_gpu_moe", &rank, &W, &stream);

  /* The cases this world runs, and the symmetric heap they need. */
  const int ncases = (int)(sizeof cases / sizeof cases[0]);
  size_t heap = 0;
  const size_t most = moe_check_heap(comm, W, cases, ncases, &heap);
  if (rank == 0)
    printf("[test rank 0] %d ranks, seed 0x%llx, largest workspace %.1f MiB of a %.0f MiB heap\n", W,
           (unsigned long long)test_seed, most / 1048576.0, heap / 1048576.0);

  const double t0 = gt_now_s();
  int ran = 0, skipped = 0;
  for (int i = 0; i < ncases; i++) {
    if (cases[i].E % W) {
      if (rank == 0)
        printf("[test rank 0] %-32s W=%d E=%-3d: skipped (%d experts do not divide among %d ranks)\n", cases[i].name, W,
               cases[i].E, cases[i].E, W);
      skipped++;
      continue;
    }
    run_case(comm, rank, W, &cases[i], stream, 0);
    ran++;
  }
  if (rank == 0) printf("[test rank 0] again, beside a second object of 1 token created after it:\n");
  run_case(comm, rank, W, &cases[0], stream, 1); /* "random": 48 experts divide among 1-4 and 8 ranks */
  ran++;
  check_async(comm, "at the end");
  run_bad_env(comm, rank);
  ran++;
  run_bad_ids(comm, rank, W, stream); /* last: its error is sticky */
  ran++;
  if (rank == 0) printf("[test rank 0] %d cases run, %d skipped, in %.1f s\n", ran, skipped, gt_now_s() - t0);
  GT_CUDA(cudaStreamDestroy(stream));
  GT_OK(sy_comm_destroy(comm));
  return gt_finish("test_gpu_moe");
}
