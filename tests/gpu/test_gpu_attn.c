/*
 * test_gpu_attn.c — attention dispatch on the GPUs against the CPU reference (the host backend of the same
 * library, run in this process on threads with the same plans and inputs), bit for bit, with every output
 * poisoned first so unwritten rows show:
 *  - seeded random plans, C = 1..W, some destinations -1, ranks with no sequences; all tokens to one rank;
 *    a rank with no tokens; every destination -1; empty sequences among the others;
 *  - rows of 2, 48, 130 and 4096 bytes;
 *  - Q forward, Q+KV forward, Q reverse (and Q forward then Q reverse returns the input), KV backward summed
 *    (bf16, fp16, fp32; with zeros of both signs, infinities, NaNs and subnormals among the gradients) and
 *    unsummed;
 *  - 1,000 back-to-back Q forwards cycling through 10 plans, no barrier or host sync in between;
 *  - the four directions back to back on two plans (C = 2), then the same eight calls captured once in a CUDA
 *    graph and replayed, every call's outputs checked;
 *  - last (the error is sticky), at W >= 2: rank 1's plan from another description (one pair agreeing on its row
 *    count but not on where the rows are, one disagreeing on the count too): SY_ERR_MISMATCH on every rank, no
 *    rows between rank 1 and the others, the rest delivered, no hang; and the next call, enqueued before the error
 *    was seen, with plans that agree, delivers bit for bit (the flagged call left the counters consistent).
 * Plans, payload rows and gradients come from tests/workload (the GPU tests' draw).
 */
#include "gpu_test.h"

#define POISON 0xEE
#define MAX_W  256 /* the cuda backend's most ranks */

/* ---- plan descriptions ------------------------------------------------------------------------------ */

/* Up to 8 sequences per rank, in the GPU tests' draw (tests/workload). */
static void gen_make(wl_attn_desc_t *g, int W, int C, wl_attn_kind_t kind, uint64_t seed) {
  if (wl_attn_short_seqs(g, W, C, kind, 8, WL_DRAW_GPU, seed)) {
    GT_FAIL("gen_make: out of memory");
    exit(1);
  }
}

/* ---- one scenario, run identically on the GPU (this rank) and on the oracle (every rank as a thread) ---- */
enum { OP_QFWD, OP_QKVFWD, OP_QREV, OP_KVBWD };

typedef struct {
  wl_attn_desc_t *g;
  int op;
  size_t q_rb, kv_rb;
  sy_dtype_t dtype;
  unsigned flags;
  uint64_t seed;
  size_t cap_q, cap_kv, cap_out; /* bytes of each output, the same on every rank */
  int64_t max_tokens;            /* the most MLP rows of any rank */
  int me;
  uint8_t *want[2]; /* the oracle's outputs of rank `me` */
} scen_t;

/* Runs the scenario on `comm` (either backend); outputs copied to out[0], out[1] (host). The inputs of rank r:
 * Q rows (num_tokens), KV rows (num_tokens), attention-layout rows for the reverse directions (q_recv_rows or
 * kv_recv_rows): payload bytes; for the KV backward, elements of dtype, mostly finite and non-zero, one in 32 a
 * special value (the reference's fp32 sum must round and propagate them alike). */
static int run_scenario(sy_comm_t comm, int rank, scen_t *sc, uint8_t *out0, uint8_t *out1, cudaStream_t stream) {
  sy_backend_t backend;
  sy_comm_backend(comm, &backend);
  const int gpu = backend == SY_BACKEND_CUDA;
  sy_attn_plan_t plan = NULL;
  sy_attn_t attn = NULL;
  if (sy_attn_plan_create(comm, &sc->g->desc, &plan) != SY_SUCCESS) return 1;
  sy_attn_plan_info_t info = SY_ATTN_PLAN_INFO_INIT;
  sy_attn_plan_info(plan, &info);
  sy_attn_config_t cfg = SY_ATTN_CONFIG_INIT;
  cfg.max_tokens = sc->max_tokens;
  cfg.max_replicas = sc->g->C;
  cfg.max_kv_grad_row_bytes = sc->op == OP_KVBWD ? sc->kv_rb : 0;
  if (sy_attn_create(comm, &cfg, &attn) != SY_SUCCESS) return 1;
  const int64_t N = info.num_tokens;
  const size_t in_bytes = (size_t)(N ? N : 1) * (sc->q_rb > sc->kv_rb ? sc->q_rb : sc->kv_rb) + 64;
  const size_t attn_in = sc->cap_q > sc->cap_kv ? sc->cap_q : sc->cap_kv;
  uint8_t *h_q = (uint8_t *)malloc(in_bytes), *h_kv = (uint8_t *)malloc(in_bytes),
          *h_a = (uint8_t *)malloc(attn_in + 64);
  uint8_t *q = NULL, *kv = NULL, *a = NULL, *o0 = NULL, *o1 = NULL;
  sy_mem_alloc(comm, sc->cap_q, (void **)&o0);
  sy_mem_alloc(comm, sc->cap_kv, (void **)&o1);
  if (gpu) {
    cudaMalloc((void **)&q, in_bytes), cudaMalloc((void **)&kv, in_bytes), cudaMalloc((void **)&a, attn_in + 64);
  } else {
    q = (uint8_t *)malloc(in_bytes), kv = (uint8_t *)malloc(in_bytes), a = (uint8_t *)malloc(attn_in + 64);
  }
  wl_payload_fill_odd(h_q, N, sc->q_rb, sc->seed, rank, 0);
  wl_payload_fill_odd(h_kv, N, sc->kv_rb, sc->seed, rank, 1);
  if (sc->op == OP_QREV) wl_payload_fill_odd(h_a, info.q_recv_rows, sc->q_rb, sc->seed, rank, 2);
  if (sc->op == OP_KVBWD) wl_grad_fill_specials(h_a, info.kv_recv_rows, sc->kv_rb, sc->dtype, sc->seed, rank);
  uint8_t *grad = NULL;
  const size_t grad_bytes = (size_t)(N ? N : 1) * sc->kv_rb * (size_t)(sc->flags & SY_ATTN_UNSUMMED ? sc->g->C : 1);
  if (gpu) {
    cudaMemcpy(q, h_q, in_bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(kv, h_kv, in_bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(a, h_a, attn_in, cudaMemcpyHostToDevice);
    cudaMemset(o0, POISON, sc->cap_q);
    cudaMemset(o1, POISON, sc->cap_kv);
    cudaMalloc((void **)&grad, grad_bytes);
    cudaMemset(grad, POISON, grad_bytes);
    cudaDeviceSynchronize();
  } else {
    memcpy(q, h_q, in_bytes), memcpy(kv, h_kv, in_bytes), memcpy(a, h_a, attn_in);
    memset(o0, POISON, sc->cap_q), memset(o1, POISON, sc->cap_kv);
    grad = (uint8_t *)malloc(grad_bytes);
    memset(grad, POISON, grad_bytes);
  }
  sy_comm_barrier(comm, stream); /* everyone's outputs are poisoned before anyone writes */
  sy_status_t st = SY_SUCCESS;
  if (sc->op == OP_QFWD) st = sy_attn_q_forward(attn, plan, q, sc->q_rb, o0, stream);
  else if (sc->op == OP_QKVFWD) st = sy_attn_qkv_forward(attn, plan, q, sc->q_rb, o0, kv, sc->kv_rb, o1, stream);
  else if (sc->op == OP_QREV) st = sy_attn_q_reverse(attn, plan, a, sc->q_rb, o0, stream);
  else st = sy_attn_kv_backward(attn, plan, a, sc->kv_rb, sc->dtype, sc->flags, grad, stream);
  if (st != SY_SUCCESS) GT_FAIL("%s op %d: %s", gpu ? "gpu" : "oracle", sc->op, sy_status_name(st));
  const size_t out1_bytes = sc->op == OP_KVBWD ? grad_bytes : sc->cap_kv;
  if (gpu) {
    cudaStreamSynchronize(stream);
    cudaMemcpy(out0, o0, sc->cap_q, cudaMemcpyDeviceToHost);
    cudaMemcpy(out1, sc->op == OP_KVBWD ? grad : o1, out1_bytes, cudaMemcpyDeviceToHost);
    cudaFree(q), cudaFree(kv), cudaFree(a), cudaFree(grad);
  } else {
    memcpy(out0, o0, sc->cap_q);
    memcpy(out1, sc->op == OP_KVBWD ? grad : o1, out1_bytes);
    free(q), free(kv), free(a), free(grad);
  }
  sy_status_t async = SY_SUCCESS;
  char detail[256] = "";
  sy_comm_async_error(comm, &async, detail, sizeof detail);
  if (async != SY_SUCCESS) GT_FAIL("%s: async error %s: %s", gpu ? "gpu" : "oracle", sy_status_name(async), detail);
  sy_mem_free(comm, o0);
  sy_mem_free(comm, o1);
  sy_attn_destroy(attn);
  sy_attn_plan_destroy(plan);
  free(h_q), free(h_kv), free(h_a);
  return st != SY_SUCCESS || async != SY_SUCCESS;
}

static void oracle_rank(int r, sy_comm_t comm, void *arg) {
  scen_t *sc = (scen_t *)arg;
  size_t big = sc->cap_q > sc->cap_kv ? sc->cap_q : sc->cap_kv;
  big = big > sc->cap_out ? big : sc->cap_out;
  uint8_t *o0 = (uint8_t *)malloc(big), *o1 = (uint8_t *)malloc(big);
  run_scenario(comm, r, sc, o0, o1, NULL);
  if (r == sc->me) memcpy(sc->want[0], o0, sc->cap_q), memcpy(sc->want[1], o1, big);
  free(o0), free(o1);
}

/* Output capacities, the same on every rank: the largest need of any rank. */
static void capacities(sy_comm_t comm, scen_t *sc, int W) {
  sy_attn_plan_t plan;
  GT_OK(sy_attn_plan_create(comm, &sc->g->desc, &plan));
  sy_attn_plan_info_t info = SY_ATTN_PLAN_INFO_INIT;
  GT_OK(sy_attn_plan_info(plan, &info));
  int64_t mine[3] = {info.q_recv_rows, info.kv_recv_rows, info.num_tokens}, *all = (int64_t *)calloc(3 * (size_t)W, 8);
  GT_OK(sy_comm_allgather_host(comm, mine, all, sizeof mine));
  int64_t mq = 1, mkv = 1, mn = 1;
  for (int r = 0; r < W; r++) {
    mq = all[3 * r] > mq ? all[3 * r] : mq;
    mkv = all[3 * r + 1] > mkv ? all[3 * r + 1] : mkv;
    mn = all[3 * r + 2] > mn ? all[3 * r + 2] : mn;
  }
  free(all);
  sy_attn_plan_destroy(plan);
  size_t rows_q = (size_t)(mq > mn ? mq : mn), rows_kv = (size_t)(mkv > mn * sc->g->C ? mkv : mn * sc->g->C);
  sc->cap_q = rows_q * sc->q_rb + 64;
  sc->cap_kv = rows_kv * sc->kv_rb + 64;
  sc->cap_out = (size_t)mn * sc->kv_rb * (size_t)sc->g->C + 64;
  sc->max_tokens = mn;
}

static void check_scenario(sy_comm_t comm, int rank, int W, scen_t *sc, cudaStream_t stream, const char *name) {
  capacities(comm, sc, W);
  size_t big = sc->cap_q > sc->cap_kv ? sc->cap_q : sc->cap_kv;
  big = big > sc->cap_out ? big : sc->cap_out;
  uint8_t *got0 = (uint8_t *)malloc(big), *got1 = (uint8_t *)malloc(big);
  sc->want[0] = (uint8_t *)malloc(big);
  sc->want[1] = (uint8_t *)malloc(big);
  sc->me = rank;
  run_scenario(comm, rank, sc, got0, got1, stream);
  gt_run_host(W, oracle_rank, sc);
  char what[160];
  snprintf(what, sizeof what, "%s: op %d, q rows %zu B, kv rows %zu B, output 0", name, sc->op, sc->q_rb, sc->kv_rb);
  gt_compare(what, got0, sc->want[0], sc->cap_q);
  if (sc->op == OP_QKVFWD || sc->op == OP_KVBWD) {
    snprintf(what, sizeof what, "%s: op %d, kv rows %zu B, output 1", name, sc->op, sc->kv_rb);
    size_t n = sc->op == OP_KVBWD ? (size_t)1 : sc->cap_kv;
    if (sc->op == OP_KVBWD) { /* the gradient: this rank's rows only */
      sy_attn_plan_t plan;
      sy_attn_plan_info_t info = SY_ATTN_PLAN_INFO_INIT;
      sy_attn_plan_create(comm, &sc->g->desc, &plan);
      sy_attn_plan_info(plan, &info);
      n = (size_t)info.num_tokens * sc->kv_rb * (size_t)(sc->flags & SY_ATTN_UNSUMMED ? sc->g->C : 1);
      sy_attn_plan_destroy(plan);
    }
    if (n) gt_compare(what, got1, sc->want[1], n);
  }
  free(got0), free(got1), free(sc->want[0]), free(sc->want[1]);
}

/* ---- the four directions back to back, eagerly and as a CUDA graph ------------------------------------------ */

enum { MIX_PLANS = 2, MIX_SEQ = MIX_PLANS * 4, MIX_ROUNDS = 25, MIX_REPLAYS = 50 };

typedef struct {
  scen_t sc[MIX_SEQ];             /* plan k, op o at k * 4 + o; their oracle outputs in sc[i].want */
  uint8_t *in[MIX_SEQ][3];        /* device inputs of each call (run_scenario's: Q rows, KV rows, attention rows) */
  size_t cap_q, cap_kv, cap_grad; /* output room for every call */
  sy_attn_plan_t plan[MIX_PLANS];
  uint8_t *o0, *o1, *grad; /* outputs, poisoned before each call */
} mix_t;

static size_t grad_bytes_of(const scen_t *sc, int64_t N) {
  return (size_t)(N ? N : 1) * sc->kv_rb * (size_t)(sc->flags & SY_ATTN_UNSUMMED ? sc->g->C : 1);
}

/* One call of the sequence: poison, call, outputs copied to res (cap_q + cap_kv + cap_grad bytes, pinned). */
static void mix_call(sy_attn_t attn, mix_t *m, int i, uint8_t *res, cudaStream_t stream) {
  const scen_t *sc = &m->sc[i];
  sy_attn_plan_t plan = m->plan[i / 4];
  uint8_t *q = m->in[i][0], *kv = m->in[i][1], *a = m->in[i][2];
  GT_CUDA(cudaMemsetAsync(m->o0, POISON, m->cap_q, stream));
  GT_CUDA(cudaMemsetAsync(m->o1, POISON, m->cap_kv, stream));
  GT_CUDA(cudaMemsetAsync(m->grad, POISON, m->cap_grad, stream));
  if (sc->op == OP_QFWD) GT_OK(sy_attn_q_forward(attn, plan, q, sc->q_rb, m->o0, stream));
  else if (sc->op == OP_QKVFWD)
    GT_OK(sy_attn_qkv_forward(attn, plan, q, sc->q_rb, m->o0, kv, sc->kv_rb, m->o1, stream));
  else if (sc->op == OP_QREV) GT_OK(sy_attn_q_reverse(attn, plan, a, sc->q_rb, m->o0, stream));
  else GT_OK(sy_attn_kv_backward(attn, plan, a, sc->kv_rb, sc->dtype, sc->flags, m->grad, stream));
  GT_CUDA(cudaMemcpyAsync(res, m->o0, m->cap_q, cudaMemcpyDeviceToHost, stream));
  GT_CUDA(cudaMemcpyAsync(res + m->cap_q, m->o1, m->cap_kv, cudaMemcpyDeviceToHost, stream));
  GT_CUDA(cudaMemcpyAsync(res + m->cap_q + m->cap_kv, m->grad, m->cap_grad, cudaMemcpyDeviceToHost, stream));
}

/* What check_scenario compares: output 0, and output 1 of Q+KV forward, or the gradient of the KV backward. */
static size_t mix_check(const mix_t *m, int i, const uint8_t *res, const char *when) {
  const scen_t *sc = &m->sc[i];
  char what[160];
  snprintf(what, sizeof what, "%s: call %d (plan %d, op %d), output 0", when, i, i / 4, sc->op);
  size_t wrong = gt_compare(what, res, sc->want[0], sc->cap_q);
  if (sc->op == OP_QKVFWD) {
    snprintf(what, sizeof what, "%s: call %d (plan %d, op %d), output 1", when, i, i / 4, sc->op);
    wrong += gt_compare(what, res + m->cap_q, sc->want[1], sc->cap_kv);
  } else if (sc->op == OP_KVBWD) {
    sy_attn_plan_info_t info = SY_ATTN_PLAN_INFO_INIT;
    GT_OK(sy_attn_plan_info(m->plan[i / 4], &info));
    snprintf(what, sizeof what, "%s: call %d (plan %d, op %d), gradient", when, i, i / 4, sc->op);
    const size_t n = (size_t)info.num_tokens * sc->kv_rb * (size_t)(sc->flags & SY_ATTN_UNSUMMED ? sc->g->C : 1);
    if (n) wrong += gt_compare(what, res + m->cap_q + m->cap_kv, sc->want[1], n);
  }
  return wrong;
}

static void mixed_back_to_back(sy_comm_t comm, int rank, int W, cudaStream_t stream) {
  const int C = W >= 2 ? 2 : 1;
  wl_attn_desc_t g[MIX_PLANS];
  mix_t m;
  memset(&m, 0, sizeof m);
  int64_t max_tokens = 1;
  for (int k = 0; k < MIX_PLANS; k++) {
    gen_make(&g[k], W, C, WL_ATTN_RANDOM, 31000 + (uint64_t)k);
    GT_OK(sy_attn_plan_create(comm, &g[k].desc, &m.plan[k]));
    for (int op = OP_QFWD; op <= OP_KVBWD; op++) {
      scen_t *sc = &m.sc[k * 4 + op];
      sc->g = &g[k];
      sc->op = op;
      sc->q_rb = 48;
      sc->kv_rb = 32;
      sc->dtype = k ? SY_DTYPE_FP16 : SY_DTYPE_BF16;
      sc->flags = op == OP_KVBWD && k ? SY_ATTN_UNSUMMED : 0;
      sc->seed = 52000 + 10 * (uint64_t)(k * 4 + op);
      capacities(comm, sc, W);
      sc->me = rank;
      size_t big = sc->cap_q > sc->cap_kv ? sc->cap_q : sc->cap_kv;
      big = big > sc->cap_out ? big : sc->cap_out;
      sc->want[0] = (uint8_t *)malloc(big);
      sc->want[1] = (uint8_t *)malloc(big);
      gt_run_host(W, oracle_rank, sc);
      m.cap_q = sc->cap_q > m.cap_q ? sc->cap_q : m.cap_q;
      m.cap_kv = sc->cap_kv > m.cap_kv ? sc->cap_kv : m.cap_kv;
      max_tokens = sc->max_tokens > max_tokens ? sc->max_tokens : max_tokens;
      /* the inputs run_scenario makes for this scenario */
      sy_attn_plan_info_t info = SY_ATTN_PLAN_INFO_INIT;
      GT_OK(sy_attn_plan_info(m.plan[k], &info));
      const int64_t N = info.num_tokens;
      const size_t in_bytes = (size_t)(N ? N : 1) * (sc->q_rb > sc->kv_rb ? sc->q_rb : sc->kv_rb) + 64;
      const size_t attn_in = (sc->cap_q > sc->cap_kv ? sc->cap_q : sc->cap_kv) + 64;
      uint8_t *h = (uint8_t *)calloc(1, in_bytes > attn_in ? in_bytes : attn_in);
      const size_t gb = grad_bytes_of(sc, N);
      m.cap_grad = gb > m.cap_grad ? gb : m.cap_grad;
      for (int b = 0; b < 3; b++) {
        const size_t n = b < 2 ? in_bytes : attn_in;
        memset(h, 0, n);
        if (b == 0) wl_payload_fill_odd(h, N, sc->q_rb, sc->seed, rank, 0);
        if (b == 1) wl_payload_fill_odd(h, N, sc->kv_rb, sc->seed, rank, 1);
        if (b == 2 && op == OP_QREV) wl_payload_fill_odd(h, info.q_recv_rows, sc->q_rb, sc->seed, rank, 2);
        if (b == 2 && op == OP_KVBWD) wl_grad_fill_specials(h, info.kv_recv_rows, sc->kv_rb, sc->dtype, sc->seed, rank);
        GT_CUDA(cudaMalloc((void **)&m.in[k * 4 + op][b], n));
        GT_CUDA(cudaMemcpy(m.in[k * 4 + op][b], h, n, cudaMemcpyHostToDevice));
      }
      free(h);
    }
  }
  sy_attn_config_t cfg = SY_ATTN_CONFIG_INIT;
  cfg.max_tokens = max_tokens;
  cfg.max_replicas = C;
  cfg.max_kv_grad_row_bytes = 32;
  sy_attn_t attn;
  GT_OK(sy_attn_create(comm, &cfg, &attn));
  GT_OK(sy_mem_alloc(comm, m.cap_q, (void **)&m.o0));
  GT_OK(sy_mem_alloc(comm, m.cap_kv, (void **)&m.o1));
  GT_CUDA(cudaMalloc((void **)&m.grad, m.cap_grad));
  const size_t slot = m.cap_q + m.cap_kv + m.cap_grad;
  uint8_t *res;
  GT_CUDA(cudaMallocHost((void **)&res, (size_t)MIX_ROUNDS * MIX_SEQ * slot));
  GT_CUDA(cudaDeviceSynchronize());
  GT_OK(sy_comm_barrier(comm, stream));

  /* Eagerly: every call right after the previous one on the stream. */
  for (int r = 0; r < MIX_ROUNDS; r++)
    for (int i = 0; i < MIX_SEQ; i++) mix_call(attn, &m, i, res + (size_t)(r * MIX_SEQ + i) * slot, stream);
  GT_CUDA(cudaStreamSynchronize(stream));
  size_t wrong = 0;
  for (int r = 0; r < MIX_ROUNDS && !wrong; r++)
    for (int i = 0; i < MIX_SEQ && !wrong; i++)
      wrong += mix_check(&m, i, res + (size_t)(r * MIX_SEQ + i) * slot, "mixed back-to-back");

  /* The same eight calls as one CUDA graph, replayed; the call numbers advance on the device. */
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  GT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < MIX_SEQ; i++) mix_call(attn, &m, i, res + (size_t)i * slot, stream);
  GT_CUDA(cudaStreamEndCapture(stream, &graph));
  GT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  int replays = 0;
  for (int r = 0; r < MIX_REPLAYS; r++) { /* every rank replays as often whatever it finds */
    memset(res, 0, (size_t)MIX_SEQ * slot);
    GT_CUDA(cudaGraphLaunch(exec, stream));
    GT_CUDA(cudaStreamSynchronize(stream));
    for (int i = 0; i < MIX_SEQ && !wrong; i++) wrong += mix_check(&m, i, res + (size_t)i * slot, "graph replay");
    replays++;
  }
  /* and eagerly again after the replays */
  for (int i = 0; i < MIX_SEQ; i++) mix_call(attn, &m, i, res + (size_t)i * slot, stream);
  GT_CUDA(cudaStreamSynchronize(stream));
  for (int i = 0; i < MIX_SEQ && !wrong; i++)
    wrong += mix_check(&m, i, res + (size_t)i * slot, "eager after the replays");
  if (rank == 0)
    printf("[test rank 0] the four directions back to back: %d eager calls, %d graph replays of %d calls, C=%d\n",
           MIX_ROUNDS * MIX_SEQ + MIX_SEQ, replays, MIX_SEQ, C);
  GT_CUDA(cudaGraphExecDestroy(exec));
  GT_CUDA(cudaGraphDestroy(graph));
  GT_CUDA(cudaFreeHost(res));
  GT_CUDA(cudaFree(m.grad));
  GT_OK(sy_mem_free(comm, m.o0));
  GT_OK(sy_mem_free(comm, m.o1));
  GT_OK(sy_attn_destroy(attn));
  for (int i = 0; i < MIX_SEQ; i++) {
    for (int b = 0; b < 3; b++) GT_CUDA(cudaFree(m.in[i][b]));
    free(m.sc[i].want[0]), free(m.sc[i].want[1]);
  }
  for (int k = 0; k < MIX_PLANS; k++) sy_attn_plan_destroy(m.plan[k]), wl_attn_desc_free(&g[k]);
}

/* Seeded random plans of every kind at C = 1..W, each direction at four row sizes, against the oracle. */
static void random_scenarios(sy_comm_t comm, int rank, int W, cudaStream_t stream) {
  static const size_t row_sizes[] = {2, 48, 130, 4096};
  static const sy_dtype_t dtypes[] = {SY_DTYPE_BF16, SY_DTYPE_FP16, SY_DTYPE_FP32};
  int cases = 0;
  for (int kind = 0; kind < WL_ATTN_KINDS; kind++) {
    for (int C = 1; C <= W; C++) {
      wl_attn_desc_t g;
      gen_make(&g, W, C, (wl_attn_kind_t)kind, 100 + (uint64_t)(kind * 17 + C));
      for (int op = OP_QFWD; op <= OP_KVBWD; op++) {
        for (int ri = 0; ri < 4; ri++) {
          scen_t sc;
          memset(&sc, 0, sizeof sc);
          sc.g = &g;
          sc.op = op;
          sc.q_rb = row_sizes[ri];
          sc.kv_rb = row_sizes[(ri + 1) % 4];
          sc.seed = 7000 + (uint64_t)cases;
          if (op == OP_KVBWD) {
            sc.dtype = dtypes[(cases / 2) % 3];
            if (sc.dtype == SY_DTYPE_FP32 && sc.kv_rb % 4) sc.dtype = SY_DTYPE_BF16;
            sc.flags = (cases % 2) ? SY_ATTN_UNSUMMED : 0;
          }
          char name[96];
          snprintf(name, sizeof name, "%s plan, C=%d", wl_attn_kind_name(kind), C);
          check_scenario(comm, rank, W, &sc, stream, name);
          cases++;
        }
      }
      wl_attn_desc_free(&g);
    }
  }
  if (rank == 0) printf("[test rank 0] %d scenarios checked against the host backend\n", cases);
}

/* Q forward then Q reverse on the GPU returns the input rows of every sent sequence, untouched elsewhere. */
static void forward_then_reverse(sy_comm_t comm, int rank, int W, cudaStream_t stream) {
  wl_attn_desc_t g;
  gen_make(&g, W, 1, WL_ATTN_RANDOM, 4242);
  sy_attn_plan_t plan;
  sy_attn_t attn;
  GT_OK(sy_attn_plan_create(comm, &g.desc, &plan));
  sy_attn_plan_info_t info = SY_ATTN_PLAN_INFO_INIT;
  GT_OK(sy_attn_plan_info(plan, &info));
  sy_attn_config_t cfg = SY_ATTN_CONFIG_INIT;
  cfg.max_tokens = 1 << 16;
  cfg.max_replicas = 1;
  GT_OK(sy_attn_create(comm, &cfg, &attn));
  const size_t rb = 48, cap = (size_t)1 << 22;
  uint8_t *q, *mid, *back, *h = (uint8_t *)malloc(cap), *h2 = (uint8_t *)malloc(cap);
  GT_CUDA(cudaMalloc((void **)&q, cap));
  GT_OK(sy_mem_alloc(comm, cap, (void **)&mid));
  GT_OK(sy_mem_alloc(comm, cap, (void **)&back));
  wl_payload_fill_odd(h, info.num_tokens, rb, 99, rank, 0);
  GT_CUDA(cudaMemcpy(q, h, (size_t)info.num_tokens * rb, cudaMemcpyHostToDevice));
  GT_CUDA(cudaMemset(back, POISON, cap));
  GT_CUDA(cudaDeviceSynchronize());
  GT_OK(sy_comm_barrier(comm, stream));
  GT_OK(sy_attn_q_forward(attn, plan, q, rb, mid, stream));
  GT_OK(sy_attn_q_reverse(attn, plan, mid, rb, back, stream));
  GT_CUDA(cudaStreamSynchronize(stream));
  GT_CUDA(cudaMemcpy(h2, back, (size_t)info.num_tokens * rb, cudaMemcpyDeviceToHost));
  int64_t row = 0;
  size_t wrong = 0;
  for (int s = 0; s < g.num_seqs[rank]; s++) {
    for (int64_t i = 0; i < g.lens[rank][s]; i++, row++)
      for (size_t b = 0; b < rb; b++) wrong += h2[row * rb + b] != (g.q_dst[rank][s] >= 0 ? h[row * rb + b] : POISON);
  }
  if (wrong)
    GT_FAIL("Q forward then Q reverse: %zu bytes differ from the input (or from the poison where unsent)", wrong);
  GT_CUDA(cudaFree(q));
  GT_OK(sy_mem_free(comm, mid));
  GT_OK(sy_mem_free(comm, back));
  GT_OK(sy_attn_destroy(attn));
  GT_OK(sy_attn_plan_destroy(plan));
  free(h), free(h2);
  wl_attn_desc_free(&g);
}

/* 1,000 back-to-back Q forwards, plans cycling, each result copied out in stream order, checked at the end. */
static void back_to_back_q_forwards(sy_comm_t comm, int rank, int W, cudaStream_t stream) {
  const int nplans = 10, calls = 1000;
  const size_t rb = 16;
  wl_attn_desc_t g[10];
  sy_attn_plan_t plans[10];
  size_t cap = 64;
  for (int k = 0; k < nplans; k++) {
    gen_make(&g[k], W, 1, WL_ATTN_RANDOM, 9000 + (uint64_t)k);
    GT_OK(sy_attn_plan_create(comm, &g[k].desc, &plans[k]));
    int64_t total = 0;
    for (int r = 0; r < W; r++) total += g[k].num_tokens[r];
    cap = (size_t)total * rb + 64 > cap ? (size_t)total * rb + 64 : cap;
  }
  sy_attn_t attn;
  sy_attn_config_t cfg = SY_ATTN_CONFIG_INIT;
  cfg.max_tokens = 1 << 16;
  cfg.max_replicas = 1;
  GT_OK(sy_attn_create(comm, &cfg, &attn));
  uint8_t *q, *recv, *results, *h = (uint8_t *)malloc(cap);
  GT_CUDA(cudaMalloc((void **)&q, (size_t)nplans * cap));
  GT_OK(sy_mem_alloc(comm, cap, (void **)&recv));
  GT_CUDA(cudaMallocHost((void **)&results, (size_t)calls * cap));
  for (int k = 0; k < nplans; k++) {
    sy_attn_plan_info_t info = SY_ATTN_PLAN_INFO_INIT;
    GT_OK(sy_attn_plan_info(plans[k], &info));
    wl_payload_fill_odd(h, info.num_tokens, rb, 500 + (uint64_t)k, rank, 0);
    GT_CUDA(cudaMemcpy(q + (size_t)k * cap, h, (size_t)info.num_tokens * rb, cudaMemcpyHostToDevice));
  }
  GT_CUDA(cudaDeviceSynchronize());
  GT_OK(sy_comm_barrier(comm, stream));
  double t0 = gt_now_s();
  for (int i = 0; i < calls; i++) {
    const int k = i % nplans;
    GT_CUDA(cudaMemsetAsync(recv, POISON, cap, stream));
    GT_OK(sy_attn_q_forward(attn, plans[k], q + (size_t)k * cap, rb, recv, stream));
    GT_CUDA(cudaMemcpyAsync(results + (size_t)i * cap, recv, cap, cudaMemcpyDeviceToHost, stream));
  }
  GT_CUDA(cudaStreamSynchronize(stream));
  double dt = gt_now_s() - t0;
  /* expected per plan: the oracle */
  size_t wrong = 0;
  for (int k = 0; k < nplans && !wrong; k++) {
    scen_t sc;
    memset(&sc, 0, sizeof sc);
    sc.g = &g[k];
    sc.op = OP_QFWD;
    sc.q_rb = rb;
    sc.kv_rb = rb;
    sc.seed = 500 + (uint64_t)k;
    sc.cap_q = cap;
    sc.cap_kv = 64;
    sc.cap_out = 64;
    sc.max_tokens = 1 << 16;
    sc.me = rank;
    sc.want[0] = (uint8_t *)malloc(cap);
    sc.want[1] = (uint8_t *)malloc(cap);
    gt_run_host(W, oracle_rank, &sc);
    for (int i = k; i < calls && !wrong; i += nplans) {
      char what[64];
      snprintf(what, sizeof what, "back-to-back call %d (plan %d)", i, k);
      wrong += gt_compare(what, results + (size_t)i * cap, sc.want[0], cap);
    }
    free(sc.want[0]), free(sc.want[1]);
  }
  if (rank == 0)
    printf("[test rank 0] %d back-to-back calls (with a poison memset and a copy-out each) in %.1f ms\n", calls,
           dt * 1e3);
  GT_CUDA(cudaFree(q));
  GT_CUDA(cudaFreeHost(results));
  GT_OK(sy_mem_free(comm, recv));
  GT_OK(sy_attn_destroy(attn));
  for (int k = 0; k < nplans; k++) sy_attn_plan_destroy(plans[k]), wl_attn_desc_free(&g[k]);
  free(h);
}

/* A plan description for mismatched_plans: every rank r owns one sequence of MM_LEN tokens, Q and its one KV
 * replica sent to rank r + 1. Rank 1's variant differs on the two pairs rank 1 is part of: rank 0 owns an unsent
 * 1-token sequence ahead of its sent one (the pair 0 -> 1 agrees on its row count but not on where the rows are),
 * and rank 1's sequence has MM_LEN / 2 tokens (the pair 1 -> 2 % W disagrees on its count, and up to W = 8 on
 * its pieces, too). */
enum { MM_LEN = 16 };

typedef struct {
  int num_seqs[MAX_W], dst[MAX_W], dst0[2];
  int64_t tokens[MAX_W], len[MAX_W], len0[2];
  const int *dsts[MAX_W];
  const int64_t *lens[MAX_W];
  sy_attn_plan_desc_t d;
} mm_desc_t;

static void mm_desc(mm_desc_t *m, int W, int variant) {
  for (int r = 0; r < W; r++) {
    m->num_seqs[r] = 1, m->tokens[r] = m->len[r] = MM_LEN, m->dst[r] = (r + 1) % W;
    m->dsts[r] = &m->dst[r], m->lens[r] = &m->len[r];
  }
  if (variant) {
    m->dst0[0] = -1, m->dst0[1] = 1, m->len0[0] = 1, m->len0[1] = MM_LEN;
    m->num_seqs[0] = 2, m->tokens[0] = 1 + MM_LEN, m->dsts[0] = m->dst0, m->lens[0] = m->len0;
    m->tokens[1] = m->len[1] = MM_LEN / 2;
  }
  sy_attn_plan_desc_t d = SY_ATTN_PLAN_DESC_INIT;
  d.world_size = W, d.max_replicas = 1, d.num_seqs = m->num_seqs, d.num_tokens = m->tokens;
  d.seq_lens = m->lens, d.q_dst = m->dsts, d.kv_dst = m->dsts; /* C = 1: the replica goes where Q goes */
  m->d = d;
}

/* Rank 1 holds a plan of another description (mm_desc) in a Q forward, then every rank the same plan in a KV
 * backward (unsummed); both calls captured in one CUDA graph, so that the second is enqueued before the first can
 * report (the error is sticky: once the host has seen it, no call is accepted) — the case of calls in flight when a
 * mismatch happens. Rows are 4 KiB, so each pair moves in several pieces, taken by several blocks.
 * The Q forward: rank 1 disagrees with every rank, so every rank reports SY_ERR_MISMATCH (as the sender of a
 * disagreeing pair, and its receiver); no rows travel between rank 1 and the others; the call ends without waiting
 * for them; pairs that agree (W >= 3) still deliver.
 * The KV backward must then deliver every rank's gradient bit for bit: it waits for counter bases the flagged call
 * advanced. Had a flagged pair left the receiver's counter ahead of its base, the wait would not wait for the rows
 * (the gradient copied from a staging not yet written, or skipped on a flag seen again); had it left it behind, the
 * wait would time out and the abort skip the gradient. Either way it would not be the rows sent. */
static void mismatched_plans(sy_comm_t comm, int rank, int W, cudaStream_t stream) {
  const size_t rb = 4096, cap = 2 * MM_LEN * rb;
  mm_desc_t base, mine;
  mm_desc(&base, W, 0);
  mm_desc(&mine, W, rank == 1);
  sy_attn_plan_t agreed, own;
  GT_OK(sy_attn_plan_create(comm, &base.d, &agreed));
  GT_OK(sy_attn_plan_create(comm, &mine.d, &own));
  sy_attn_config_t cfg = SY_ATTN_CONFIG_INIT;
  cfg.max_tokens = 2 * MM_LEN, cfg.max_replicas = 1, cfg.max_kv_grad_row_bytes = rb;
  sy_attn_t attn;
  GT_OK(sy_attn_create(comm, &cfg, &attn));
  uint8_t *h = (uint8_t *)malloc(cap), *want = (uint8_t *)malloc(cap), *x, *grad_rows, *grad_out, *recv;
  GT_CUDA(cudaMalloc((void **)&x, cap));
  GT_CUDA(cudaMalloc((void **)&grad_rows, cap));
  GT_CUDA(cudaMalloc((void **)&grad_out, cap));
  GT_OK(sy_mem_alloc(comm, cap, (void **)&recv));
  wl_payload_fill_odd(h, MM_LEN, rb, 31, rank, 0); /* Q rows (rank 1's variant sends the first half) */
  GT_CUDA(cudaMemcpy(x, h, MM_LEN * rb, cudaMemcpyHostToDevice));
  wl_payload_fill_odd(h, MM_LEN, rb, 32, rank, 1); /* the gradients of the MM_LEN KV rows from rank - 1 */
  GT_CUDA(cudaMemcpy(grad_rows, h, MM_LEN * rb, cudaMemcpyHostToDevice));
  GT_CUDA(cudaMemset(recv, POISON, cap));
  GT_CUDA(cudaMemset(grad_out, POISON, cap));
  GT_CUDA(cudaDeviceSynchronize());
  GT_OK(sy_comm_barrier(comm, stream));
  GT_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  GT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  GT_OK(sy_attn_q_forward(attn, own, x, rb, recv, stream)); /* the kernel finds the mismatch */
  GT_OK(sy_attn_kv_backward(attn, agreed, grad_rows, rb, SY_DTYPE_BF16, SY_ATTN_UNSUMMED, grad_out, stream));
  GT_CUDA(cudaStreamEndCapture(stream, &graph));
  GT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const double t0 = gt_now_s();
  GT_CUDA(cudaGraphLaunch(exec, stream));
  GT_CUDA(cudaStreamSynchronize(stream));
  const double dt = gt_now_s() - t0;
  sy_status_t async = SY_SUCCESS;
  char detail[256] = "";
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  if (async != SY_ERR_MISMATCH)
    GT_FAIL("mismatched plans: async error %s, want SY_ERR_MISMATCH", sy_status_name(async));
  else printf("[test rank %d] mismatch reported, both calls done in %.1f ms: %s\n", rank, dt * 1e3, detail);
  const int from = (rank + W - 1) % W, back_from = (rank + 1) % W; /* this rank's one sender of each call */
  GT_CUDA(cudaMemcpy(h, recv, cap, cudaMemcpyDeviceToHost));
  memset(want, POISON, cap);
  if (from != 1 && rank != 1) wl_payload_fill_odd(want, MM_LEN, rb, 31, from, 0);
  gt_compare(from == 1 || rank == 1 ? "mismatched pair: q_recv (no rows)" : "agreeing pair: q_recv", h, want, cap);
  GT_CUDA(cudaMemcpy(h, grad_out, cap, cudaMemcpyDeviceToHost));
  memset(want, POISON, cap);
  wl_payload_fill_odd(want, MM_LEN, rb, 32, back_from, 1);
  gt_compare("the next call, plans agreeing: KV backward's gradient", h, want, cap);
  GT_CUDA(cudaGraphExecDestroy(exec));
  GT_CUDA(cudaGraphDestroy(graph));
  GT_CUDA(cudaFree(x));
  GT_CUDA(cudaFree(grad_rows));
  GT_CUDA(cudaFree(grad_out));
  sy_attn_destroy(attn); /* accepted after the error; the symmetric buffer goes with the communicator */
  sy_attn_plan_destroy(agreed);
  sy_attn_plan_destroy(own);
  free(h), free(want);
}

int main(void) {
  setenv("SY_HEAP_SIZE", "4G", 0); /* outputs and the KV staging of the largest cases */
  int rank, W;
  sy_comm_t comm = gt_init("test_gpu_attn", &rank, &W);
  sy_backend_t backend;
  GT_OK(sy_comm_backend(comm, &backend));
  if (backend != SY_BACKEND_CUDA)
    GT_FAIL("the communicator runs on the %s backend, not cuda (SY_BACKEND?)", sy_backend_name(backend));
  cudaStream_t stream;
  GT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  random_scenarios(comm, rank, W, stream);
  forward_then_reverse(comm, rank, W, stream);
  back_to_back_q_forwards(comm, rank, W, stream);
  mixed_back_to_back(comm, rank, W, stream);

  sy_status_t async;
  char detail[256];
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  if (async != SY_SUCCESS) GT_FAIL("async error: %s: %s", sy_status_name(async), detail);
  if (W >= 2 && async == SY_SUCCESS) mismatched_plans(comm, rank, W, stream);
  GT_CUDA(cudaStreamDestroy(stream));
  GT_OK(sy_comm_destroy(comm));
  return gt_finish("test_gpu_attn");
}
