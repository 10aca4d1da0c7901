/*
 * test_gpu_moe_graph.c — the MoE low-latency dispatch and combine captured in CUDA graphs, on the GPUs against
 * the CPU reference (the host backend of the same library, run in this process on W threads with every rank's
 * inputs), bit for bit, with every output poisoned before each checked replay so unwritten slots and rows show:
 *  - one round of the four halves captured once in a CUDA graph and replayed 10,000 times (SY_MOE_GRAPH_REPLAYS
 *    changes that) with fresh inputs copied into the captured buffers before each replay, checked every
 *    100th replay and the last, with eager rounds on the same object before the capture and after the replays;
 *    likewise one round of the one-call forms (by default the fused kernels), half as many replays;
 *  - before the capture, calls rejected at the boundary that change nothing: the legacy default stream, a half
 *    out of order.
 * Each rank regenerates every rank's inputs from the seed (SY_TEST_SEED overrides it; a failure prints it), with
 * tests/workload's generators in the GPU tests' draw (gpu_moe_test.h). The eager cases: test_gpu_moe.c.
 */
#include "gpu_moe_test.h"

/* ---- cases ------------------------------------------------------------------------------------------------- */

#define GRAPH_SETS        37 /* input sets the replays cycle through; prime, so every 100th replay meets all */
#define GRAPH_CHECK_EVERY 100

/* One round captured (the four halves, or with MODE_ONE_CALL sy_moe_dispatch and sy_moe_combine); rounds = the
 * input sets the replays cycle through. */
static const moe_case_t graph_cases[] = {
    {.name = "graph fp8",
     .E = 0,
     .K = 4,
     .H = 256,
     .T = 16,
     .wire = FP8,
     .flags = 0,
     .id_type = I32,
     .route = WL_ROUTE_MIXED,
     .rounds = GRAPH_SETS,
     .mode = MODE_HALVES,
     .specials = 0,
     .salt = 40,
     .graph_share = 1},
    {.name = "graph bf16 per-expert",
     .E = 0,
     .K = 8,
     .H = 128,
     .T = 16,
     .wire = BF16,
     .flags = PE,
     .id_type = I64,
     .route = WL_ROUTE_MIXED,
     .rounds = GRAPH_SETS,
     .mode = MODE_HALVES,
     .specials = 1,
     .salt = 41,
     .graph_share = 5,
     .combine_other = 1},
    {.name = "graph fp8 one-call",
     .E = 0,
     .K = 8,
     .H = 512,
     .T = 16,
     .wire = FP8,
     .flags = 0,
     .id_type = I64,
     .route = WL_ROUTE_MIXED,
     .rounds = GRAPH_SETS,
     .mode = MODE_ONE_CALL,
     .specials = 1,
     .salt = 42,
     .graph_share = 2},
};

/* ---- the graph case ----------------------------------------------------------------------------------------- */

/* Input set `set` into the captured input buffers: the fresh data of one replay (or eager round). */
static void load_set(const run_t *run, uint8_t *d_in, const uint8_t *d_pool, int set, cudaStream_t stream) {
  GT_CUDA(cudaMemcpyAsync(d_in, d_pool + (size_t)set * run->in_total, run->in_total, cudaMemcpyDeviceToDevice, stream));
}

/* One round enqueued on stream: the one-call forms, or the four halves. */
static void enqueue_round(sy_moe_t moe, const moe_case_t *c, const round_args_t *a, int halves, cudaStream_t stream) {
  if (!halves) {
    GT_OK(sy_moe_dispatch(moe, a->tokens, a->n, a->ids, c->id_type, a->w, &a->recv, stream));
    GT_OK(sy_moe_combine(moe, a->y, a->cids, a->combine_type, a->cw, a->n, a->out, stream));
  } else {
    GT_OK(sy_moe_dispatch_send(moe, a->tokens, a->n, a->ids, c->id_type, a->w, stream));
    GT_OK(sy_moe_dispatch_recv(moe, &a->recv, stream));
    GT_OK(sy_moe_combine_send(moe, a->y, stream));
    GT_OK(sy_moe_combine_recv(moe, a->cids, a->combine_type, a->cw, a->n, a->out, stream));
  }
}

/* One eager round of input set `set` (already in d_in), checked at once. */
static void graph_eager_round(const run_t *run, sy_moe_t moe, int set, int halves, uint8_t *d_in, uint8_t *d_out,
                              uint8_t *h_got, cudaStream_t stream, const char *when) {
  const moe_case_t *c = run->c;
  round_args_t a = round_args(run, set, run->me, d_in, d_out);
  GT_CUDA(cudaMemsetAsync(d_out, POISON, run->out_total, stream));
  enqueue_round(moe, c, &a, halves, stream);
  GT_CUDA(cudaMemcpyAsync(h_got, d_out, run->out_total, cudaMemcpyDeviceToHost, stream));
  GT_CUDA(cudaStreamSynchronize(stream));
  char what[160];
  snprintf(what, sizeof what, "%s (W=%d): eager round %s, input set %d", c->name, run->W, when, set);
  compare_round(run, what, h_got, run->want + (size_t)set * run->out_total);
}

static void run_graph_case(sy_comm_t comm, int rank, int W, const moe_case_t *base, int replays, cudaStream_t stream) {
  const double t0 = gt_now_s();
  const int before = gt_failures;
  moe_case_t gc = *base;
  gc.E = 8 * W;
  const moe_case_t *c = &gc;
  run_t run;
  run_init(&run, c, W, rank);
  gt_run_host(W, oracle_rank, &run); /* every input set's expected outputs, one set per oracle round */
  /* Every set's input block on the device; before each replay one copy brings the set into the captured buffers. */
  uint8_t *d_pool, *d_in, *d_out, *h_in, *h_got;
  GT_CUDA(cudaMalloc((void **)&d_pool, (size_t)run.rounds * run.in_total));
  GT_CUDA(cudaMalloc((void **)&d_in, run.in_total));
  GT_CUDA(cudaMalloc((void **)&d_out, run.out_total));
  GT_CUDA(cudaMallocHost((void **)&h_in, run.in_total));
  GT_CUDA(cudaMallocHost((void **)&h_got, run.out_total));
  for (int set = 0; set < run.rounds; set++) {
    fill_inputs(&run, set, rank, round_combine_type(c, set), h_in);
    GT_CUDA(cudaMemcpy(d_pool + (size_t)set * run.in_total, h_in, run.in_total, cudaMemcpyHostToDevice));
  }
  const sy_moe_config_t config = case_config(c);
  sy_moe_t moe = NULL;
  GT_OK(sy_moe_create(comm, &config, &moe));
  const round_args_t a = round_args(&run, 0, rank, d_in, d_out); /* the same pointers in every set */

  const int before_set = run.rounds - 1, after_set = run.rounds - 2;
  load_set(&run, d_in, d_pool, before_set, stream);
  graph_eager_round(&run, moe, before_set, 0, d_in, d_out, h_got, stream, "before the capture");

  /* Rejected at the boundary, changing nothing (valid inputs otherwise): the legacy default stream, which a
   * capture could not use either, and a half out of order. The object's next half is still dispatch_send. */
  GT_CHECK(sy_moe_dispatch_send(moe, a.tokens, a.n, a.ids, c->id_type, a.w, NULL) == SY_ERR_INVALID_ARG);
  GT_CHECK(sy_moe_combine_send(moe, a.y, stream) == SY_ERR_INVALID_ARG);

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  GT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue_round(moe, c, &a, c->mode != MODE_ONE_CALL, stream);
  GT_CUDA(cudaStreamEndCapture(stream, &graph));
  GT_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  /* Every rank replays the same number of times whatever it finds (stopping early would strand the peers). */
  int checked = 0;
  const double r0 = gt_now_s();
  for (int i = 0; i < replays; i++) {
    const int set = i % run.rounds, check = i % GRAPH_CHECK_EVERY == 0 || i == replays - 1;
    if (check) GT_CUDA(cudaMemsetAsync(d_out, POISON, run.out_total, stream));
    load_set(&run, d_in, d_pool, set, stream);
    GT_CUDA(cudaGraphLaunch(exec, stream));
    if (!check) continue;
    GT_CUDA(cudaMemcpyAsync(h_got, d_out, run.out_total, cudaMemcpyDeviceToHost, stream));
    GT_CUDA(cudaStreamSynchronize(stream));
    char what[160];
    snprintf(what, sizeof what, "%s (W=%d): replay %d of %d, input set %d", c->name, W, i, replays, set);
    compare_round(&run, what, h_got, run.want + (size_t)set * run.out_total);
    checked++;
  }
  GT_CUDA(cudaStreamSynchronize(stream));
  const double replay_s = gt_now_s() - r0;
  check_async(comm, c->name);

  /* The object goes on eagerly after the replays: its phase lives on the device. */
  load_set(&run, d_in, d_pool, after_set, stream);
  graph_eager_round(&run, moe, after_set, 1, d_in, d_out, h_got, stream, "after the replays");
  check_async(comm, c->name);

  GT_CUDA(cudaGraphExecDestroy(exec));
  GT_CUDA(cudaGraphDestroy(graph));
  GT_OK(sy_moe_destroy(moe));
  char extra[128];
  snprintf(extra, sizeof extra, "%d replays ran, %d checked, %.1f us each", replays, checked,
           replays ? replay_s * 1e6 / replays : 0.0);
  summary(comm, &run, before, extra, gt_now_s() - t0);
  GT_CUDA(cudaFree(d_pool));
  GT_CUDA(cudaFree(d_in));
  GT_CUDA(cudaFree(d_out));
  GT_CUDA(cudaFreeHost(h_in));
  GT_CUDA(cudaFreeHost(h_got));
  run_free(&run);
}

int main(void) {
  int rank, W;
  cudaStream_t stream;
  sy_comm_t comm = moe_test_open("test_gpu_moe_graph", &rank, &W, &stream);
  int replays = 10000;
  const char *replays_env = getenv("SY_MOE_GRAPH_REPLAYS");
  if (replays_env && atoi(replays_env) > 0) replays = atoi(replays_env);

  /* The symmetric heap the cases need. */
  const int ngraphs = (int)(sizeof graph_cases / sizeof graph_cases[0]);
  size_t heap = 0;
  const size_t most = moe_check_heap(comm, W, graph_cases, ngraphs, &heap);
  if (rank == 0)
    printf("[test rank 0] %d ranks, seed 0x%llx, largest workspace %.1f MiB of a %.0f MiB heap, %d graph replays\n", W,
           (unsigned long long)test_seed, most / 1048576.0, heap / 1048576.0, replays);

  const double t0 = gt_now_s();
  int ran = 0;
  for (int i = 0; i < ngraphs; i++) {
    int n = replays / graph_cases[i].graph_share;
    run_graph_case(comm, rank, W, &graph_cases[i], n > 0 ? n : 1, stream);
    ran++;
  }
  check_async(comm, "at the end");
  if (rank == 0) printf("[test rank 0] %d cases run in %.1f s\n", ran, gt_now_s() - t0);
  GT_CUDA(cudaStreamDestroy(stream));
  GT_OK(sy_comm_destroy(comm));
  return gt_finish("test_gpu_moe_graph");
}
