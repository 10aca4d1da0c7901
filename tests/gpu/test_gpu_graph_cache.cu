/*
 * test_gpu_graph_cache.cu — the graph cache (switchyard.h, "A CUDA graph per shape bucket"; src/exec/graph_cache.c,
 * src/cuda/graph.cu) on one GPU, called as a user calls it. The step enqueues K small kernels, kernel k adding
 * k + 1 to each of the bucket's first `bucket` floats of the buffer the user struct points to; a host model of
 * every buffer (seeded, never zero, past-the-bucket floats included) says what each run must leave. Checks:
 *   a. a bucket's first run: `warmup` eager runs, one capture, one instantiation, one replay (stats exact), and
 *      the buffer exact after each of 10 runs, the warm-up's additions included; warmup 0 as well;
 *   b. other n of the same bucket replay its graph (no capture); a new bucket gets its own graph;
 *   c. a refresh after the user points the step at a second buffer: one capture, one update, no instantiation;
 *      the writes land in the second buffer, the first unchanged; buckets not refreshed keep the old pointer;
 *   d. a refresh after the step gains a kernel (K + 1): the update is refused and the graph instantiated anew;
 *      without the refresh the old graph goes on replaying K kernels;
 *   e. a step failing inside the capture, and one that breaks it (a synchronisation): the run fails, the stream
 *      leaves capture mode, nothing captured runs, and the next run warms up and captures again;
 *   f. run on a capturing stream (each capture mode) or on the NULL stream: SY_ERR_INVALID_ARG, nothing enqueued,
 *      the capture intact;
 *   g. host time of a replay against the same step launched eagerly, K = 1, 20, 100 (a table and the issue's
 *      target line; timing never fails the test, the buffers after the timed runs do);
 *   h. a replay keeps the priorities of the streams the step was captured on: a step forks a small probe kernel onto
 *      a high-priority stream beside a long filler (many waves of blocks) on the low-priority run stream; the probe
 *      reads how many filler blocks had finished when it ran. Eagerly it runs within the filler's first waves (the
 *      control: if it does not, the device does not order by priority and the check says so and passes); the replay
 *      must too. With SY_GRAPH_NODE_PRIORITY=0 (CUDA's default instantiation) the probe waits for the filler's
 *      last wave: printed, to show the check can tell. Refreshes: with nothing changed the graph is updated in place
 *      (cudaGraphExecUpdate) and the probe stays early; moved to a second low-priority stream and refreshed, the
 *      replay's probe runs late as the eager one does; moved back and refreshed, early again (how each refresh was
 *      done is printed; CUDA may refuse an update whose priorities changed, and the cache then instantiates anew).
 * Nothing may hang: every wait polls cudaStreamQuery against a host deadline, and an alarm ends the process as a
 * last resort.
 */
#include <sched.h>
#include <signal.h>
#include <unistd.h>
#include <algorithm>

#include "gpu_test.h"

#define CAPACITY     1024 /* floats per buffer: the buckets used here stay below 512, the rest must stay as filled */
#define WAIT_S       5.0  /* what one step's work may take */
#define ALARM_S      240  /* the whole test, as a last resort (CTest's timeout is 300 s) */
#define TIMED_RUNS   200
#define TIMED_WARMUP 20
#define TARGET_US    5.0 /* the issue's target: host time of a replay */

typedef struct {
  float *buf;       /* device, CAPACITY floats: the step's target */
  int kernels;      /* K */
  int calls;        /* the step's calls so far (eager and captured) */
  int fail_at_call; /* this call fails after enqueuing half its kernels; -1: none */
  int sync_at_call; /* this call synchronises its stream (breaking a capture); -1: none */
  int last_bucket;
} step_user_t;

typedef struct {
  sy_comm_t comm;
  cudaStream_t stream;
  float *dev[2];   /* two device buffers */
  float *host;     /* pinned: a buffer copied back */
  float *model[2]; /* what each device buffer must hold */
} fixture_t;

__global__ void add_kernel(float *buf, int n, float value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) buf[i] += value;
}

/* Kernel k adds k + 1: a lost, repeated or extra kernel changes the sum. */
static sy_status_t step_add(void *user, int bucket, cudaStream_t stream) {
  step_user_t *u = (step_user_t *)user;
  const int call = u->calls++;
  u->last_bucket = bucket;
  if (call == u->sync_at_call) (void)cudaStreamSynchronize(stream); /* refused in a capture, which it breaks */
  for (int k = 0; k < u->kernels; k++) {
    if (call == u->fail_at_call && k == u->kernels / 2) return SY_ERR_INTERNAL;
    add_kernel<<<(bucket + 127) / 128, 128, 0, stream>>>(u->buf, bucket, (float)(k + 1));
  }
  return cudaGetLastError() == cudaSuccess ? SY_SUCCESS : SY_ERR_CUDA;
}

static float step_sum(int kernels) { return (float)(kernels * (kernels + 1) / 2); }

/* Check h's kernels. prio_state: reset by the step's first kernel each run. */
typedef struct {
  unsigned started; /* a filler block has started */
  unsigned done;    /* filler blocks finished */
  unsigned seen;    /* done, as the probe read it */
  unsigned gate_ok; /* the gate saw a filler block start (else it gave up after a second) */
} prio_state_t;

__global__ void prio_reset_kernel(prio_state_t *st) { *st = prio_state_t{0, 0, 0xffffffffu, 0}; }

__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

/* Each block (1,024 threads: at most two resident an SM) holds its SM for spin_ns, then counts itself done. */
__global__ void prio_filler_kernel(prio_state_t *st, unsigned long long spin_ns) {
  if (threadIdx.x == 0) atomicExch(&st->started, 1u);
  const unsigned long long t0 = globaltimer_ns();
  while (globaltimer_ns() - t0 < spin_ns) {
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(&st->done, 1u);
}

/* On the high-priority stream before the probe: returns once the filler runs (bounded: one second), so that the
 * probe is enqueued while the filler's blocks wait for SMs, whatever order the graph launches its branches in. */
__global__ void prio_gate_kernel(prio_state_t *st) {
  const unsigned long long t0 = globaltimer_ns();
  while (atomicAdd(&st->started, 0u) == 0u)
    if (globaltimer_ns() - t0 > 1000000000ull) return;
  st->gate_ok = 1;
}

__global__ void prio_probe_kernel(prio_state_t *st) { st->seen = atomicAdd(&st->done, 0u); }

typedef struct {
  prio_state_t *st; /* device */
  cudaStream_t hi;  /* the stream the probe is forked onto: the high-priority one, or (check h's refresh) another */
  cudaEvent_t fork, join;
  int blocks; /* the filler's */
} prio_user_t;

#define PRIO_SPIN_NS 20000ull /* a filler block's time: 2 x SMs of them run at once, waves of 20 us */
#define PRIO_WAVES   40

static sy_status_t step_priority(void *user, int bucket, cudaStream_t stream) {
  prio_user_t *u = (prio_user_t *)user;
  (void)bucket;
  prio_reset_kernel<<<1, 1, 0, stream>>>(u->st);
  if (cudaEventRecord(u->fork, stream) != cudaSuccess || cudaStreamWaitEvent(u->hi, u->fork, 0) != cudaSuccess)
    return SY_ERR_CUDA;
  prio_filler_kernel<<<u->blocks, 1024, 0, stream>>>(u->st, PRIO_SPIN_NS);
  prio_gate_kernel<<<1, 32, 0, u->hi>>>(u->st);
  prio_probe_kernel<<<1, 32, 0, u->hi>>>(u->st);
  if (cudaEventRecord(u->join, u->hi) != cudaSuccess || cudaStreamWaitEvent(stream, u->join, 0) != cudaSuccess)
    return SY_ERR_CUDA;
  return cudaGetLastError() == cudaSuccess ? SY_SUCCESS : SY_ERR_CUDA;
}

/* ---- host helpers -------------------------------------------------------------------------------------- */
static void on_alarm(int sig) {
  static const char msg[] = "test_gpu_graph_cache: still running at the alarm: a wait without a deadline hung\n";
  (void)sig;
  if (write(2, msg, sizeof msg - 1) < 0) _exit(2);
  _exit(1);
}

/* Polls until `stream` is done; a stream still busy after WAIT_S, or a CUDA error, ends the test. */
static void finish_stream(cudaStream_t stream, const char *what) {
  const double deadline = gt_now_s() + WAIT_S;
  for (;;) {
    const cudaError_t err = cudaStreamQuery(stream);
    if (err == cudaSuccess) return;
    if (err != cudaErrorNotReady) {
      GT_FAIL("%s: cudaStreamQuery: %s", what, cudaGetErrorString(err));
      exit(1);
    }
    if (gt_now_s() > deadline) {
      GT_FAIL("%s: the stream is still busy after %.0f s", what, WAIT_S);
      exit(1);
    }
    sched_yield();
  }
}

/* Fills device buffer `which` and its model with a seeded pattern of small integers (never zero). */
static void fill(fixture_t *f, int which, uint32_t seed) {
  for (int i = 0; i < CAPACITY; i++)
    f->host[i] = f->model[which][i] = (float)(wl_mix((uint64_t)seed << 32 | (uint64_t)i) % 1000 + 1);
  GT_CUDA(cudaMemcpyAsync(f->dev[which], f->host, CAPACITY * sizeof(float), cudaMemcpyHostToDevice, f->stream));
  finish_stream(f->stream, "fill");
}

/* `times` executions of the K-kernel step for `bucket` on buffer `which`. */
static void model_add(fixture_t *f, int which, int bucket, int kernels, int times) {
  for (int i = 0; i < bucket; i++) f->model[which][i] += (float)times * step_sum(kernels);
}

/* Copies buffer `which` back (stream-ordered, bounded wait) and compares it with its model; returns #wrong. */
static int expect_buffer(fixture_t *f, int which, const char *what) {
  GT_CUDA(cudaMemcpyAsync(f->host, f->dev[which], CAPACITY * sizeof(float), cudaMemcpyDeviceToHost, f->stream));
  finish_stream(f->stream, what);
  int wrong = 0;
  for (int i = 0; i < CAPACITY; i++) {
    if (f->host[i] == f->model[which][i]) continue;
    if (wrong < 3) GT_FAIL("%s: buffer %d [%d] is %.0f, want %.0f", what, which, i, f->host[i], f->model[which][i]);
    wrong++;
  }
  if (wrong) GT_FAIL("%s: buffer %d: %d of %d floats wrong", what, which, wrong, CAPACITY);
  return wrong;
}

typedef struct {
  uint64_t eager_runs, captures, updates, instantiations, replays;
  int graphs;
} counts_t;

static void expect_counts(sy_graph_cache_t cache, const char *what, counts_t want) {
  sy_graph_cache_stats_t s = SY_GRAPH_CACHE_STATS_INIT;
  GT_OK(sy_graph_cache_stats(cache, &s));
  if (s.eager_runs != want.eager_runs || s.captures != want.captures || s.updates != want.updates ||
      s.instantiations != want.instantiations || s.replays != want.replays || s.graphs != want.graphs)
    GT_FAIL(
        "%s: stats eager/captures/updates/instantiations/replays/graphs %llu/%llu/%llu/%llu/%llu/%d, want "
        "%llu/%llu/%llu/%llu/%llu/%d",
        what, (unsigned long long)s.eager_runs, (unsigned long long)s.captures, (unsigned long long)s.updates,
        (unsigned long long)s.instantiations, (unsigned long long)s.replays, s.graphs,
        (unsigned long long)want.eager_runs, (unsigned long long)want.captures, (unsigned long long)want.updates,
        (unsigned long long)want.instantiations, (unsigned long long)want.replays, want.graphs);
}

static void expect_status(const char *what, const char *call, sy_status_t got, sy_status_t want) {
  if (got != want) GT_FAIL("%s: %s returned %s, want %s", what, call, sy_status_name(got), sy_status_name(want));
}

static void expect_not_capturing(cudaStream_t stream, const char *what) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  GT_CUDA(cudaStreamIsCapturing(stream, &status));
  if (status != cudaStreamCaptureStatusNone) GT_FAIL("%s: the stream was left capturing (status %d)", what, status);
}

static sy_graph_cache_t make_cache(fixture_t *f, int warmup, step_user_t *u) {
  sy_graph_cache_config_t config = SY_GRAPH_CACHE_CONFIG_INIT;
  config.warmup = warmup;
  sy_graph_cache_t cache = NULL;
  GT_OK(sy_graph_cache_create(f->comm, &config, step_add, u, &cache));
  return cache;
}

/* One run of n (must succeed) whose bucket must be `bucket`. */
static void run_n(sy_graph_cache_t cache, step_user_t *u, int n, int bucket, cudaStream_t stream, const char *what) {
  const int calls = u->calls;
  u->last_bucket = -1;
  const sy_status_t st = sy_graph_cache_run(cache, n, stream);
  if (st != SY_SUCCESS) {
    GT_FAIL("%s: sy_graph_cache_run(n=%d) returned %s", what, n, sy_status_name(st));
    exit(1);
  }
  if (u->calls != calls && u->last_bucket != bucket)
    GT_FAIL("%s: n=%d: the step ran for %d, want %d", what, n, u->last_bucket, bucket);
}

/* ---- a, b: first use, replays, buckets ---------------------------------------------------------------- */
static void check_first_use(fixture_t *f, int warmup) {
  char what[96];
  snprintf(what, sizeof what, "check a (first use, warmup %d)", warmup);
  fill(f, 0, 100u + (uint32_t)warmup);
  step_user_t u = {f->dev[0], 20, 0, -1, -1, 0};
  sy_graph_cache_t cache = make_cache(f, warmup, &u);
  expect_counts(cache, what, counts_t{0, 0, 0, 0, 0, 0});
  for (int r = 1; r <= 10; r++) {
    run_n(cache, &u, 50, 56, f->stream, what);
    model_add(f, 0, 56, 20, r == 1 ? warmup + 1 : 1); /* the first run: the warm-ups, then the graph */
    char label[128];
    snprintf(label, sizeof label, "%s, run %d", what, r);
    expect_counts(cache, label, counts_t{(uint64_t)warmup, 1, 0, 1, (uint64_t)r, 1});
    expect_buffer(f, 0, label);
  }
  if (u.calls != warmup + 1)
    GT_FAIL("%s: the step ran %d times, want %d (warm-ups and one capture)", what, u.calls, warmup + 1);
  GT_OK(sy_graph_cache_destroy(cache));
}

static void check_same_bucket(fixture_t *f) {
  const char *what = "check b (same bucket, new bucket)";
  fill(f, 0, 200u);
  step_user_t u = {f->dev[0], 20, 0, -1, -1, 0};
  sy_graph_cache_t cache = make_cache(f, 1, &u);
  run_n(cache, &u, 56, 56, f->stream, what);
  model_add(f, 0, 56, 20, 2);
  static const int same[] = {49, 51, 53, 55, 56, 52, 50};
  const int k = (int)(sizeof same / sizeof same[0]);
  for (int i = 0; i < k; i++) {
    run_n(cache, &u, same[i], 56, f->stream, what);
    model_add(f, 0, 56, 20, 1);
  }
  expect_counts(cache, what, counts_t{1, 1, 0, 1, (uint64_t)k + 1, 1});
  expect_buffer(f, 0, what);
  if (u.calls != 2) GT_FAIL("%s: the step ran %d times, want 2 (a warm-up and one capture)", what, u.calls);

  run_n(cache, &u, 57, 64, f->stream, what); /* the next bucket: its own warm-up, capture and graph */
  model_add(f, 0, 64, 20, 2);
  for (int n = 58; n <= 64; n += 3) {
    run_n(cache, &u, n, 64, f->stream, what);
    model_add(f, 0, 64, 20, 1);
  }
  run_n(cache, &u, 1, 1, f->stream, what); /* the smallest bucket */
  model_add(f, 0, 1, 20, 2);
  expect_counts(cache, what, counts_t{3, 3, 0, 3, (uint64_t)k + 1 + 4 + 1, 3});
  expect_buffer(f, 0, what);
  GT_OK(sy_graph_cache_destroy(cache));
}

/* ---- c, d: refresh ------------------------------------------------------------------------------------- */
static void check_refresh_pointer(fixture_t *f) {
  const char *what = "check c (refresh: a new buffer)";
  fill(f, 0, 300u);
  fill(f, 1, 301u);
  step_user_t u = {f->dev[0], 20, 0, -1, -1, 0};
  sy_graph_cache_t cache = make_cache(f, 1, &u);
  run_n(cache, &u, 50, 56, f->stream, what);
  run_n(cache, &u, 60, 64, f->stream, what);
  model_add(f, 0, 56, 20, 2);
  model_add(f, 0, 64, 20, 2);
  expect_counts(cache, what, counts_t{2, 2, 0, 2, 2, 2});

  u.buf = f->dev[1];
  GT_OK(sy_graph_cache_refresh(cache, 53)); /* bucket 56 only */
  run_n(cache, &u, 50, 56, f->stream, what);
  model_add(f, 1, 56, 20, 1);
  expect_counts(cache, "check c: after the refresh of bucket 56", counts_t{2, 3, 1, 2, 3, 2});
  run_n(cache, &u, 50, 56, f->stream, what); /* replayed: no capture */
  model_add(f, 1, 56, 20, 1);
  run_n(cache, &u, 60, 64, f->stream, what); /* not refreshed: still the first buffer */
  model_add(f, 0, 64, 20, 1);
  expect_counts(cache, "check c: bucket 64 not refreshed", counts_t{2, 3, 1, 2, 5, 2});
  expect_buffer(f, 0, "check c: the first buffer");
  expect_buffer(f, 1, "check c: the second buffer");

  GT_OK(sy_graph_cache_refresh(cache, 0)); /* every bucket, then back to the first buffer for both */
  u.buf = f->dev[0];
  run_n(cache, &u, 64, 64, f->stream, what);
  run_n(cache, &u, 56, 56, f->stream, what);
  model_add(f, 0, 64, 20, 1);
  model_add(f, 0, 56, 20, 1);
  expect_counts(cache, "check c: after refresh(0)", counts_t{2, 5, 3, 2, 7, 2});
  run_n(cache, &u, 51, 56, f->stream, what); /* destroyed while its replay may run: the replay still completes */
  model_add(f, 0, 56, 20, 1);
  GT_OK(sy_graph_cache_destroy(cache));
  expect_buffer(f, 0, "check c: the first buffer at the end");
  expect_buffer(f, 1, "check c: the second buffer at the end");
}

static void check_refresh_topology(fixture_t *f) {
  const char *what = "check d (refresh: K + 1 kernels)";
  fill(f, 0, 400u);
  step_user_t u = {f->dev[0], 20, 0, -1, -1, 0};
  sy_graph_cache_t cache = make_cache(f, 1, &u);
  run_n(cache, &u, 100, 104, f->stream, what);
  model_add(f, 0, 104, 20, 2);
  u.kernels = 21;
  run_n(cache, &u, 100, 104, f->stream, what); /* not refreshed: the captured 20 kernels replay */
  model_add(f, 0, 104, 20, 1);
  expect_counts(cache, "check d: before the refresh", counts_t{1, 1, 0, 1, 2, 1});
  expect_buffer(f, 0, "check d: before the refresh");

  GT_OK(sy_graph_cache_refresh(cache, 104));
  run_n(cache, &u, 97, 104, f->stream, what);
  model_add(f, 0, 104, 21, 1);
  expect_counts(cache, "check d: update refused", counts_t{1, 2, 0, 2, 3, 1});
  run_n(cache, &u, 104, 104, f->stream, what);
  model_add(f, 0, 104, 21, 1);
  expect_buffer(f, 0, "check d: 21 kernels");

  u.kernels = 20; /* and back: refused again */
  GT_OK(sy_graph_cache_refresh(cache, 0));
  run_n(cache, &u, 104, 104, f->stream, what);
  model_add(f, 0, 104, 20, 1);
  expect_counts(cache, "check d: back to 20 kernels", counts_t{1, 3, 0, 3, 5, 1});
  expect_buffer(f, 0, "check d: back to 20 kernels");
  GT_OK(sy_graph_cache_destroy(cache));
}

/* ---- e: a step that fails inside the capture ------------------------------------------------------------ */
static void check_capture_failure(fixture_t *f, bool by_sync) {
  const char *what =
      by_sync ? "check e (a synchronisation breaks the capture)" : "check e (the step fails in the capture)";
  fill(f, 0, by_sync ? 501u : 500u);
  step_user_t u = {f->dev[0], 20, 0, -1, -1, 0};
  if (by_sync) u.sync_at_call = 1; /* call 0: the warm-up; call 1: the capture */
  else u.fail_at_call = 1;
  sy_graph_cache_t cache = make_cache(f, 1, &u);
  const sy_status_t st = sy_graph_cache_run(cache, 30, f->stream);
  expect_status(what, "the run whose capture fails", st, by_sync ? SY_ERR_CUDA : SY_ERR_INTERNAL);
  expect_not_capturing(f->stream, what);
  model_add(f, 0, 32, 20, 1); /* the warm-up ran; nothing captured did */
  expect_counts(cache, "check e: after the failure", counts_t{1, 0, 0, 0, 0, 0});
  expect_buffer(f, 0, "check e: after the failure");

  run_n(cache, &u, 30, 32, f->stream, what); /* tries again: warm-up, capture, graph */
  model_add(f, 0, 32, 20, 2);
  run_n(cache, &u, 31, 32, f->stream, what);
  model_add(f, 0, 32, 20, 1);
  expect_counts(cache, "check e: the next runs", counts_t{2, 1, 0, 1, 2, 1});
  expect_buffer(f, 0, "check e: the next runs");
  GT_OK(sy_graph_cache_destroy(cache));
}

/* ---- f: runs refused --------------------------------------------------------------------------------------- */
static void check_refused(fixture_t *f) {
  const char *what = "check f (capturing or NULL stream)";
  fill(f, 0, 600u);
  step_user_t u = {f->dev[0], 20, 0, -1, -1, 0};
  sy_graph_cache_t cache = make_cache(f, 1, &u);
  run_n(cache, &u, 8, 8, f->stream, what);
  model_add(f, 0, 8, 20, 2);
  cudaStream_t c;
  GT_CUDA(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
  static const cudaStreamCaptureMode modes[] = {cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeGlobal,
                                                cudaStreamCaptureModeRelaxed};
  for (int m = 0; m < 3; m++) {
    GT_CUDA(cudaStreamBeginCapture(c, modes[m]));
    const sy_status_t fresh = sy_graph_cache_run(cache, 100, c); /* a bucket without a graph yet */
    const sy_status_t known = sy_graph_cache_run(cache, 8, c);   /* one with a graph */
    cudaGraph_t graph = NULL;
    const cudaError_t end = cudaStreamEndCapture(c, &graph);
    size_t nodes = 99;
    if (graph) GT_CUDA(cudaGraphGetNodes(graph, NULL, &nodes));
    if (graph) GT_CUDA(cudaGraphDestroy(graph));
    expect_status(what, "sy_graph_cache_run(new bucket) on a capturing stream", fresh, SY_ERR_INVALID_ARG);
    expect_status(what, "sy_graph_cache_run(cached bucket) on a capturing stream", known, SY_ERR_INVALID_ARG);
    if (end != cudaSuccess)
      GT_FAIL("%s: mode %d: the refused runs broke the capture: %s", what, m, cudaGetErrorString(end));
    else if (nodes != 0) GT_FAIL("%s: mode %d: the refused runs left %zu nodes in the capture", what, m, nodes);
  }
  expect_status(what, "sy_graph_cache_run on the NULL stream", sy_graph_cache_run(cache, 8, NULL), SY_ERR_INVALID_ARG);
  expect_status(what, "sy_graph_cache_run(new bucket) on the NULL stream", sy_graph_cache_run(cache, 100, NULL),
                SY_ERR_INVALID_ARG);
  if (u.calls != 2) GT_FAIL("%s: the step ran %d times, want 2 (the refused runs call nothing)", what, u.calls);
  expect_counts(cache, what, counts_t{1, 1, 0, 1, 1, 1});
  run_n(cache, &u, 8, 8, c, what); /* the stream that was capturing works as any other */
  model_add(f, 0, 8, 20, 1);
  finish_stream(c, what);
  expect_buffer(f, 0, what);
  GT_CUDA(cudaStreamDestroy(c));
  GT_OK(sy_graph_cache_destroy(cache));
}

/* ---- g: host time ---------------------------------------------------------------------------------------- */
static double median_us(double *t, int n) {
  std::sort(t, t + n);
  return (n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2])) * 1e6;
}

/* Medians of the host time of one replay and of one eager step; the GPU drained between calls, outside the
 * timing, so that no call waits for queue space. Returns the number of wrong floats afterwards. */
static int time_kernels(fixture_t *f, int kernels, double *replay_us, double *eager_us) {
  static double t[TIMED_RUNS];
  char what[64];
  snprintf(what, sizeof what, "check g (K=%d)", kernels);
  fill(f, 0, 700u + (uint32_t)kernels);
  step_user_t u = {f->dev[0], kernels, 0, -1, -1, 0};
  sy_graph_cache_t cache = make_cache(f, 1, &u);
  run_n(cache, &u, 64, 64, f->stream, what);
  for (int i = 0; i < TIMED_WARMUP + TIMED_RUNS; i++) {
    finish_stream(f->stream, what);
    const double t0 = gt_now_s();
    const sy_status_t st = sy_graph_cache_run(cache, 64, f->stream);
    const double t1 = gt_now_s();
    if (st != SY_SUCCESS) GT_OK(st);
    if (i >= TIMED_WARMUP) t[i - TIMED_WARMUP] = t1 - t0;
  }
  *replay_us = median_us(t, TIMED_RUNS);
  expect_counts(cache, what, counts_t{1, 1, 0, 1, 1 + TIMED_WARMUP + TIMED_RUNS, 1});
  for (int i = 0; i < TIMED_WARMUP + TIMED_RUNS; i++) {
    finish_stream(f->stream, what);
    const double t0 = gt_now_s();
    const sy_status_t st = step_add(&u, 64, f->stream);
    const double t1 = gt_now_s();
    if (st != SY_SUCCESS) GT_OK(st);
    if (i >= TIMED_WARMUP) t[i - TIMED_WARMUP] = t1 - t0;
  }
  *eager_us = median_us(t, TIMED_RUNS);
  model_add(f, 0, 64, kernels, 2 + 2 * (TIMED_WARMUP + TIMED_RUNS));
  GT_OK(sy_graph_cache_destroy(cache));
  return expect_buffer(f, 0, what);
}

static void check_host_time(fixture_t *f) {
  static const int ks[] = {1, 20, 100};
  double replay[3], eager[3], worst = 0;
  int worst_k = 0;
  for (int i = 0; i < 3; i++) {
    time_kernels(f, ks[i], &replay[i], &eager[i]);
    if (replay[i] > worst) worst = replay[i], worst_k = ks[i];
  }
  cudaDeviceProp prop;
  int device = -1;
  GT_CUDA(cudaGetDevice(&device));
  GT_CUDA(cudaGetDeviceProperties(&prop, device));
  printf(
      "# graph cache host time: device %s, bucket 64, median of %d calls after %d warm-up, stream drained "
      "between calls\n",
      prop.name, TIMED_RUNS, TIMED_WARMUP);
  printf("# %7s %10s %10s %8s\n", "kernels", "eager_us", "replay_us", "ratio");
  for (int i = 0; i < 3; i++) printf("  %7d %10.2f %10.2f %8.1f\n", ks[i], eager[i], replay[i], eager[i] / replay[i]);
  printf("# target: replay <= %.0f us host time: %s (largest median %.2f us, at K=%d)\n", TARGET_US,
         worst <= TARGET_US ? "met" : "NOT met", worst, worst_k);
}

/* ---- h: the streams' priorities in a replay ------------------------------------------------------------- */
/* The probe's view after one run of the step (eager or a replay): filler blocks done when it ran; -1 if the gate gave
 * up (the filler never started within a second). */
static long prio_seen(prio_user_t *u, cudaStream_t lo, const char *what) {
  finish_stream(lo, what);
  prio_state_t h;
  GT_CUDA(cudaMemcpy(&h, u->st, sizeof h, cudaMemcpyDeviceToHost));
  if (!h.gate_ok) return -1;
  return (long)h.seen;
}

/* The median probe view of three runs of the cache's bucket 1. */
static long prio_runs(sy_graph_cache_t cache, prio_user_t *u, cudaStream_t lo, const char *what) {
  long v[3];
  for (int r = 0; r < 3; r++) {
    const sy_status_t st = sy_graph_cache_run(cache, 1, lo);
    if (st != SY_SUCCESS) {
      GT_FAIL("%s: sy_graph_cache_run returned %s", what, sy_status_name(st));
      exit(1);
    }
    v[r] = prio_seen(u, lo, what);
  }
  std::sort(v, v + 3);
  return v[1];
}

/* The same of three eager steps. */
static long prio_eager(prio_user_t *u, cudaStream_t lo, const char *what) {
  long v[3];
  for (int r = 0; r < 3; r++) {
    if (step_priority(u, 1, lo) != SY_SUCCESS) GT_FAIL("%s: the eager step failed", what);
    v[r] = prio_seen(u, lo, what);
  }
  std::sort(v, v + 3);
  return v[1];
}

/* The median probe view of three replays of a fresh cache's graph (instantiated with the environment as it is). */
static long prio_replays(fixture_t *f, prio_user_t *u, cudaStream_t lo, const char *what) {
  sy_graph_cache_config_t config = SY_GRAPH_CACHE_CONFIG_INIT;
  config.warmup = 0;
  sy_graph_cache_t cache = NULL;
  GT_OK(sy_graph_cache_create(f->comm, &config, step_priority, u, &cache));
  const long v = prio_runs(cache, u, lo, what);
  GT_OK(sy_graph_cache_destroy(cache));
  return v;
}

/* The cache's counts of updates in place and instantiations. */
static void prio_counts(sy_graph_cache_t cache, uint64_t *updates, uint64_t *instantiations) {
  sy_graph_cache_stats_t st = SY_GRAPH_CACHE_STATS_INIT;
  GT_OK(sy_graph_cache_stats(cache, &st));
  *updates = st.updates, *instantiations = st.instantiations;
}

/* Refreshes and the priorities: after the first replays, the bucket refreshed with nothing changed (an update in
 * place: the probe must stay early); then the probe forked onto `low` (a second low-priority stream) and refreshed
 * (the replay must follow the new capture); then back onto the high-priority stream and refreshed. Out: the median
 * probe views after each refresh, and how each was done (1: updated in place, 0: instantiated anew). */
static void prio_refreshes(fixture_t *f, prio_user_t *u, cudaStream_t lo, cudaStream_t low, long view[3],
                           int in_place[3], const char *what) {
  sy_graph_cache_config_t config = SY_GRAPH_CACHE_CONFIG_INIT;
  config.warmup = 0;
  sy_graph_cache_t cache = NULL;
  GT_OK(sy_graph_cache_create(f->comm, &config, step_priority, u, &cache));
  (void)prio_runs(cache, u, lo, what);
  cudaStream_t hi = u->hi;
  const cudaStream_t probe[3] = {hi, low, hi};
  for (int i = 0; i < 3; i++) {
    uint64_t u0, i0, u1, i1;
    prio_counts(cache, &u0, &i0);
    u->hi = probe[i];
    GT_OK(sy_graph_cache_refresh(cache, 0));
    view[i] = prio_runs(cache, u, lo, what);
    prio_counts(cache, &u1, &i1);
    in_place[i] = u1 == u0 + 1 && i1 == i0;
  }
  u->hi = hi;
  GT_OK(sy_graph_cache_destroy(cache));
}

static void check_priorities(fixture_t *f) {
  const char *what = "check h (the streams' priorities in a replay)";
  int lowest = 0, highest = 0, device = -1, sms = 0;
  GT_CUDA(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  GT_CUDA(cudaGetDevice(&device));
  GT_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  prio_user_t u;
  memset(&u, 0, sizeof u);
  u.blocks = 2 * sms * PRIO_WAVES;
  cudaStream_t lo = NULL;
  GT_CUDA(cudaStreamCreateWithPriority(&lo, cudaStreamNonBlocking, lowest));
  GT_CUDA(cudaStreamCreateWithPriority(&u.hi, cudaStreamNonBlocking, highest));
  GT_CUDA(cudaEventCreateWithFlags(&u.fork, cudaEventDisableTiming));
  GT_CUDA(cudaEventCreateWithFlags(&u.join, cudaEventDisableTiming));
  GT_CUDA(cudaMalloc((void **)&u.st, sizeof(prio_state_t)));
  const long half = u.blocks / 2;

  const long eager = prio_eager(&u, lo, what);
  const char *saved = getenv("SY_GRAPH_NODE_PRIORITY");
  unsetenv("SY_GRAPH_NODE_PRIORITY");
  const long replay = prio_replays(f, &u, lo, what);
  setenv("SY_GRAPH_NODE_PRIORITY", "0", 1);
  const long plain = prio_replays(f, &u, lo, what);
  if (saved) setenv("SY_GRAPH_NODE_PRIORITY", saved, 1);
  else unsetenv("SY_GRAPH_NODE_PRIORITY");
  printf(
      "# check h: of %d filler blocks (%d waves), done when the high-priority probe ran (median of 3): eager %ld, "
      "replay %ld, replay with SY_GRAPH_NODE_PRIORITY=0 %ld\n",
      u.blocks, PRIO_WAVES, eager, replay, plain);
  if (eager < 0 || replay < 0 || plain < 0) GT_FAIL("%s: the filler never started within a second", what);
  else if (eager >= half)
    printf(
        "# check h: the device ran the eager probe after half the filler: it does not order by priority here; "
        "not checked\n");
  else {
    if (replay >= half)
      GT_FAIL("%s: the replay's probe ran after %ld of %d filler blocks (eagerly after %ld): the priorities were lost",
              what, replay, u.blocks, eager);
    if (plain < half)
      printf("# check h: without the node priorities the probe still ran early: this run could not tell\n");
    /* the refreshes: the probe on a second low-priority stream (eagerly late, the control), then back */
    cudaStream_t low = NULL;
    GT_CUDA(cudaStreamCreateWithPriority(&low, cudaStreamNonBlocking, lowest));
    cudaStream_t hi = u.hi;
    u.hi = low;
    const long eager_low = prio_eager(&u, lo, what);
    u.hi = hi;
    long view[3] = {-1, -1, -1};
    int in_place[3] = {0, 0, 0};
    prio_refreshes(f, &u, lo, low, view, in_place, what);
    static const char *how[2] = {"instantiated anew", "updated in place"};
    printf(
        "# check h: refreshed as captured: %ld (%s); the probe moved to a low-priority stream (eagerly %ld): %ld "
        "(%s); moved back: %ld (%s)\n",
        view[0], how[in_place[0]], eager_low, view[1], how[in_place[1]], view[2], how[in_place[2]]);
    if (!in_place[0]) GT_FAIL("%s: a refresh with nothing changed was not updated in place", what);
    if (view[0] < 0 || view[1] < 0 || view[2] < 0 || eager_low < 0)
      GT_FAIL("%s: the filler never started within a second", what);
    else {
      if (view[0] >= half)
        GT_FAIL("%s: refreshed in place, the probe ran after %ld of %d filler blocks: the update lost the priorities",
                what, view[0], u.blocks);
      if (eager_low < half)
        printf("# check h: the eager probe on a low-priority stream ran early: the refresh's move is not checked\n");
      else if (view[1] < half)
        GT_FAIL(
            "%s: after a refresh that moved the probe to a low-priority stream it ran after %ld of %d filler "
            "blocks (eagerly after %ld): the replay kept the old priorities",
            what, view[1], u.blocks, eager_low);
      if (view[2] >= half)
        GT_FAIL(
            "%s: moved back to the high-priority stream and refreshed, the probe ran after %ld of %d filler "
            "blocks: the replay lost the priorities",
            what, view[2], u.blocks);
    }
    GT_CUDA(cudaStreamDestroy(low));
  }
  GT_CUDA(cudaFree(u.st));
  GT_CUDA(cudaEventDestroy(u.fork));
  GT_CUDA(cudaEventDestroy(u.join));
  GT_CUDA(cudaStreamDestroy(u.hi));
  GT_CUDA(cudaStreamDestroy(lo));
}

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(ALARM_S);
  int rank, world;
  fixture_t f;
  memset(&f, 0, sizeof f);
  f.comm = gt_init("test_gpu_graph_cache", &rank, &world);
  sy_backend_t backend = SY_BACKEND_HOST;
  GT_OK(sy_comm_backend(f.comm, &backend));
  if (backend != SY_BACKEND_CUDA) {
    GT_FAIL("the communicator is not on the cuda backend (SY_BACKEND set?): this test needs graphs");
    return gt_finish("test_gpu_graph_cache");
  }
  GT_CUDA(cudaStreamCreateWithFlags(&f.stream, cudaStreamNonBlocking));
  for (int b = 0; b < 2; b++) {
    GT_CUDA(cudaMalloc((void **)&f.dev[b], CAPACITY * sizeof(float)));
    f.model[b] = (float *)malloc(CAPACITY * sizeof(float));
  }
  GT_CUDA(cudaHostAlloc((void **)&f.host, CAPACITY * sizeof(float), cudaHostAllocDefault));

  check_first_use(&f, 2);
  check_first_use(&f, 0);
  check_same_bucket(&f);
  check_refresh_pointer(&f);
  check_refresh_topology(&f);
  check_capture_failure(&f, false);
  check_capture_failure(&f, true);
  check_refused(&f);
  check_host_time(&f);
  check_priorities(&f);

  sy_status_t async = SY_ERR_INTERNAL;
  GT_OK(sy_comm_async_error(f.comm, &async, NULL, 0));
  GT_CHECK(async == SY_SUCCESS);
  finish_stream(f.stream, "the end");
  GT_CUDA(cudaStreamDestroy(f.stream));
  for (int b = 0; b < 2; b++) {
    GT_CUDA(cudaFree(f.dev[b]));
    free(f.model[b]);
  }
  GT_CUDA(cudaFreeHost(f.host));
  GT_OK(sy_comm_destroy(f.comm));
  return gt_finish("test_gpu_graph_cache");
}
