/*
 * test_gpu_faults.c — a rank SIGKILLed in the middle of a call: the others must end with SY_ERR_TIMEOUT within
 * the bound (SY_TIMEOUT_MS = 2000 here), name the dead rank as the peer they waited for (or a survivor that failed
 * on it in an earlier call: one that got its part from the victim before the kill goes on to its next call and
 * waits there for that survivor; run 56 met it once in attn-qkv-forward), and exit cleanly (destroy returns, exit
 * status 0); syrun must report the dead rank. Ranks share one GPU (syrun --gpus 0,0,0). A survivor may report
 * another survivor's timeout, told to it (the detail names that rank, then the peer this rank was waiting on:
 * device.cuh, report_error_ctx_at and adopt_timeout_at): then the peer it was waiting on is the one it names, and its
 * own wait may have been shorter than the bound, but not longer than it plus the slack.
 *
 * One program, two roles:
 *  - the driver (no arguments: what ctest and gpu-check run; skips with 77 without a GPU): for each scenario
 *    below it starts `syrun -n W --keep-going --gpus D,D,D <this program> --rank ...` (--keep-going: syrun
 *    reports the dead rank but lets the survivors run on, so what they report is their own doing, not syrun's
 *    SIGTERM) and checks syrun's status (128 + SIGKILL, the victim's), syrun's line naming the victim, no
 *    failure reported for any survivor, and each rank's verdict file;
 *  - a rank (--rank SCENARIO DIR): GOOD_CALLS calls that must succeed, then the victim enqueues the next call
 *    and SIGKILLs itself (with the kernel in flight, or for the MoE between the dispatch and the combine, or
 *    before it enters the call at all: the high-throughput MoE's exact mode, whose layout waits on the host),
 *    while the survivors keep calling until a call fails, and write their verdict to DIR/rank.R before
 *    destroying (under a watchdog: a destroy that does not return within DESTROY_BOUND_S is a failure too).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_test.h"

enum { OP_ALLTOALL, OP_ATTN_QKV, OP_ATTN_KV_BWD, OP_MOE, OP_MOE_HT, OP_MOE_HT_EXACT };
enum { KILL_IN_FLIGHT, KILL_MID_ROUND, KILL_BEFORE };
enum { GOOD_CALLS = 3, EXTRA_CALLS = 4, WORLD = 3, TIMEOUT_MS = 2000 };
#define SLACK_S         3.0  /* launch and time-slicing slack on top of the bound */
#define DESTROY_BOUND_S 20.0 /* destroy after a peer died: must return within this */

typedef struct scenario {
  const char *name;
  int op, victim, kill_point, delay_us;
} scenario_t;

static const scenario_t scenarios[] = {
    {"alltoall", OP_ALLTOALL, 1, KILL_IN_FLIGHT, 0},
    {"alltoall-late", OP_ALLTOALL, 2, KILL_IN_FLIGHT, 300},
    {"attn-qkv-forward", OP_ATTN_QKV, 2, KILL_IN_FLIGHT, 0},
    {"attn-kv-backward", OP_ATTN_KV_BWD, 0, KILL_IN_FLIGHT, 100},
    {"moe-dispatch", OP_MOE, 0, KILL_IN_FLIGHT, 0},
    {"moe-mid-round", OP_MOE, 1, KILL_MID_ROUND, 0},
    /* The high-throughput MoE (layout, dispatch, combine a call; worst-case counts unless _EXACT). */
    {"moe-ht-dispatch", OP_MOE_HT, 0, KILL_IN_FLIGHT, 0},
    {"moe-ht-mid-round", OP_MOE_HT, 2, KILL_MID_ROUND, 0},
    /* The victim never enters the call: the survivors' layouts wait on the host for counts that need its own (the
     * exact mode's bounded host wait, which must return the device wait's SY_ERR_TIMEOUT, not hang). */
    {"moe-ht-exact", OP_MOE_HT_EXACT, 1, KILL_BEFORE, 0},
};
static const int num_scenarios = (int)(sizeof scenarios / sizeof scenarios[0]);

/* ---- a rank's side ------------------------------------------------------------------------------------------- */

static FILE *verdict;
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *watch_phase;
static double watch_deadline;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(verdict, fmt, ap);
  va_end(ap);
  fputc('\n', verdict);
  fflush(verdict);
}

/* The watchdog: a phase that outlives its deadline is written down and the rank exits 4. */
static void watch(const char *phase, double seconds) {
  pthread_mutex_lock(&watch_lock);
  watch_phase = phase;
  watch_deadline = phase ? gt_now_s() + seconds : 0;
  pthread_mutex_unlock(&watch_lock);
}

static void *watchdog(void *arg) {
  (void)arg;
  for (;;) {
    usleep(100000);
    pthread_mutex_lock(&watch_lock);
    const int late = watch_phase && gt_now_s() > watch_deadline;
    if (late) {
      say("hung %s", watch_phase);
      fprintf(stderr, "[test rank %d] %s did not return in time\n", gt_rank, watch_phase);
      _exit(4);
    }
    pthread_mutex_unlock(&watch_lock);
  }
  return NULL;
}

typedef struct op_state {
  sy_comm_t comm;
  cudaStream_t stream;
  int rank, world;
  void *send, *recv;   /* alltoall */
  size_t per_peer;     /* alltoall */
  wl_attn_desc_t desc; /* attention */
  sy_attn_t attn;      /* attention */
  sy_attn_plan_t plan; /* attention */
  void *q, *kv, *q_recv, *kv_recv, *grad, *grad_out;
  sy_moe_t moe; /* MoE */
  sy_moe_recv_t mrecv;
  void *x, *ids, *weights, *expert_out, *out;
  int tokens;
  sy_moe_ht_t ht; /* the high-throughput MoE (x, ids, weights, expert_out and out as above) */
  sy_moe_ht_recv_t hrecv;
  void *handle;
  int32_t *host_counts; /* the exact mode's, 2 L + 1 */
} op_state_t;

static void *dev_zeros(size_t bytes) {
  void *p = NULL;
  GT_CUDA(cudaMalloc(&p, bytes));
  GT_CUDA(cudaMemset(p, 0x11, bytes));
  return p;
}

static void *symm(sy_comm_t comm, size_t bytes) {
  void *p = NULL;
  GT_OK(sy_mem_alloc(comm, bytes, &p));
  return p;
}

/* The tokens, ids and weights of `tokens` tokens of `hidden`, top-4 over `experts` experts (both MoE modes). */
static void moe_inputs(op_state_t *s, int tokens, int hidden, int experts) {
  const size_t T = (size_t)tokens, H = (size_t)hidden;
  int32_t *ids = (int32_t *)malloc(T * 4 * sizeof *ids);
  float *w = (float *)malloc(T * 4 * sizeof *w);
  uint16_t *x = (uint16_t *)malloc(T * H * sizeof *x);
  wl_moe_uniform_routing(s->rank, tokens, experts, 4, ids, w);
  wl_moe_uniform_tokens(s->rank, tokens, hidden, x);
  s->ids = dev_zeros(T * 4 * sizeof *ids);
  s->weights = dev_zeros(T * 4 * sizeof *w);
  s->x = dev_zeros(T * H * sizeof *x);
  s->out = dev_zeros(T * H * 2);
  GT_CUDA(cudaMemcpy(s->ids, ids, T * 4 * sizeof *ids, cudaMemcpyHostToDevice));
  GT_CUDA(cudaMemcpy(s->weights, w, T * 4 * sizeof *w, cudaMemcpyHostToDevice));
  GT_CUDA(cudaMemcpy(s->x, x, T * H * sizeof *x, cudaMemcpyHostToDevice));
  free(ids), free(w), free(x);
}

static void moe_ht_setup(op_state_t *s) {
  sy_moe_ht_config_t c = SY_MOE_HT_CONFIG_INIT;
  c.max_tokens = s->tokens = 256;
  c.hidden = 1024;
  c.top_k = 4;
  c.num_experts = 4 * s->world;
  c.num_sms = 4;
  GT_OK(sy_moe_ht_create(s->comm, &c, &s->ht));
  sy_moe_ht_sizes_t z = SY_MOE_HT_SIZES_INIT;
  GT_OK(sy_moe_ht_sizes(s->ht, &z));
  const size_t R = (size_t)z.max_rows, L = (size_t)z.local_experts;
  s->handle = dev_zeros(z.handle_bytes);
  s->hrecv.tokens = dev_zeros(R * z.row_bytes);
  s->hrecv.src = (int32_t *)dev_zeros(R * 2 * sizeof(int32_t));
  s->hrecv.weights = (float *)dev_zeros(R * sizeof(float));
  s->hrecv.expert_offsets = (int32_t *)dev_zeros((L + 1) * sizeof(int32_t));
  s->hrecv.expert_counts = (int32_t *)dev_zeros(L * sizeof(int32_t));
  s->hrecv.rows = z.max_rows;
  s->expert_out = dev_zeros(R * (size_t)c.hidden * 2);
  s->host_counts = (int32_t *)calloc(2 * L + 1, sizeof(int32_t));
  moe_inputs(s, c.max_tokens, c.hidden, c.num_experts);
}

static void moe_setup(op_state_t *s) {
  sy_moe_config_t c = SY_MOE_CONFIG_INIT;
  c.max_tokens = s->tokens = 128;
  c.hidden = 1024;
  c.top_k = 4;
  c.num_experts = 4 * s->world;
  GT_OK(sy_moe_create(s->comm, &c, &s->moe));
  const size_t L = 4, S = (size_t)s->world * (size_t)c.max_tokens, H = (size_t)c.hidden;
  s->mrecv.tokens = dev_zeros(L * S * H);
  s->mrecv.scales = (float *)dev_zeros(L * (H / SY_MOE_FP8_GROUP) * S * sizeof(float));
  s->mrecv.src = (int32_t *)dev_zeros(L * S * 2 * sizeof(int32_t));
  s->mrecv.expert_counts = (int32_t *)dev_zeros(L * sizeof(int32_t));
  s->mrecv.rank_counts = (int32_t *)dev_zeros(L * (size_t)s->world * sizeof(int32_t));
  s->expert_out = dev_zeros(L * S * H * 2);
  moe_inputs(s, c.max_tokens, c.hidden, c.num_experts);
}

/* Buffers and objects of the scenario's operation; symmetric ones the same size on every rank. */
static void op_setup(op_state_t *s, int op) {
  if (op == OP_ALLTOALL) {
    s->per_peer = (size_t)1 << 20;
    s->send = dev_zeros(s->per_peer * (size_t)s->world);
    s->recv = symm(s->comm, s->per_peer * (size_t)s->world);
  } else if (op == OP_ATTN_QKV || op == OP_ATTN_KV_BWD) {
    const int64_t tokens = 8192, cap = tokens * s->world; /* rows: at most every rank's to one */
    const int replicas = s->world >= 2 ? 2 : 1;
    if (wl_attn_documents(&s->desc, s->world, replicas, tokens, 0, 0xfa17)) GT_FAIL("wl_attn_documents failed");
    GT_OK(sy_attn_plan_create(s->comm, &s->desc.desc, &s->plan));
    sy_attn_config_t c = SY_ATTN_CONFIG_INIT;
    c.max_tokens = tokens;
    c.max_replicas = replicas;
    c.max_kv_grad_row_bytes = 256;
    GT_OK(sy_attn_create(s->comm, &c, &s->attn));
    s->q = dev_zeros((size_t)tokens * 1024);
    s->kv = dev_zeros((size_t)tokens * 256);
    s->q_recv = symm(s->comm, (size_t)cap * 1024);
    s->kv_recv = symm(s->comm, (size_t)cap * replicas * 256);
    s->grad = dev_zeros((size_t)cap * replicas * 256);
    s->grad_out = dev_zeros((size_t)tokens * 256);
  } else if (op == OP_MOE) {
    moe_setup(s);
  } else {
    moe_ht_setup(s);
  }
  GT_CUDA(cudaDeviceSynchronize());
}

/* One call of the operation (the MoE: a dispatch and its combine; `dispatch_only` leaves the combine out). */
static sy_status_t op_call(op_state_t *s, int op, int dispatch_only) {
  switch (op) {
    case OP_ALLTOALL: return sy_alltoall(s->comm, s->send, s->recv, s->per_peer, s->stream);
    case OP_ATTN_QKV:
      return sy_attn_qkv_forward(s->attn, s->plan, s->q, 1024, s->q_recv, s->kv, 256, s->kv_recv, s->stream);
    case OP_ATTN_KV_BWD:
      return sy_attn_kv_backward(s->attn, s->plan, s->grad, 256, SY_DTYPE_BF16, 0, s->grad_out, s->stream);
    case OP_MOE_HT:
    case OP_MOE_HT_EXACT: {
      sy_status_t st = sy_moe_ht_layout(s->ht, s->ids, SY_INDEX_INT32, s->tokens, s->handle,
                                        op == OP_MOE_HT_EXACT ? s->host_counts : NULL, s->stream);
      if (st == SY_SUCCESS)
        st = sy_moe_ht_dispatch(s->ht, s->handle, s->tokens, s->x, NULL, (const float *)s->weights, &s->hrecv,
                                s->stream);
      if (st != SY_SUCCESS || dispatch_only) return st;
      return sy_moe_ht_combine(s->ht, s->handle, s->tokens, s->expert_out, &s->hrecv, s->hrecv.weights, NULL, s->out,
                               NULL, s->stream);
    }
    default: break;
  }
  sy_status_t st =
      sy_moe_dispatch(s->moe, s->x, s->tokens, s->ids, SY_INDEX_INT32, (const float *)s->weights, &s->mrecv, s->stream);
  if (st != SY_SUCCESS || dispatch_only) return st;
  return sy_moe_combine(s->moe, s->expert_out, s->ids, SY_INDEX_INT32, (const float *)s->weights, s->tokens, s->out,
                        s->stream);
}

static void op_teardown(op_state_t *s) {
  if (s->moe) sy_moe_destroy(s->moe);
  if (s->ht) sy_moe_ht_destroy(s->ht);
  free(s->host_counts);
  if (s->attn) sy_attn_destroy(s->attn);
  if (s->plan) sy_attn_plan_destroy(s->plan);
  wl_attn_desc_free(&s->desc);
}

/* The victim: the call goes in, then SIGKILL (the kernel in flight, or after the dispatch completed); or SIGKILL
 * before the call. */
static void die(op_state_t *s, const scenario_t *sc, int call) {
  sy_status_t st = sc->kill_point == KILL_BEFORE ? SY_SUCCESS : op_call(s, sc->op, sc->kill_point == KILL_MID_ROUND);
  if (sc->kill_point == KILL_MID_ROUND) GT_CUDA(cudaStreamSynchronize(s->stream));
  else if (sc->delay_us) usleep((useconds_t)sc->delay_us);
  say("dying call %d status %s", call, sy_status_name(st));
  kill(getpid(), SIGKILL);
  pause();
}

/* A survivor: calls until one fails, then the verdict. Returns the number of the call that failed, -1 if none. */
static int survive(op_state_t *s, const scenario_t *sc) {
  for (int call = 0; call < GOOD_CALLS + EXTRA_CALLS; call++) {
    if (s->rank == sc->victim && call == GOOD_CALLS) die(s, sc, call);
    watch("a call", TIMEOUT_MS / 1000.0 + 30);
    const double t0 = gt_now_s();
    sy_status_t st = op_call(s, sc->op, 0);
    cudaError_t err = st == SY_SUCCESS ? cudaStreamSynchronize(s->stream) : cudaSuccess;
    const double waited = gt_now_s() - t0;
    watch(NULL, 0);
    sy_status_t async = SY_SUCCESS;
    char detail[256] = "";
    GT_OK(sy_comm_async_error(s->comm, &async, detail, sizeof detail));
    if (err != cudaSuccess) say("cuda-error call %d %s", call, cudaGetErrorString(err));
    if (st == SY_SUCCESS && async == SY_SUCCESS && err == cudaSuccess) continue;
    const char *at = strstr(detail, "peer ");
    const int peer = at ? atoi(at + 5) : -1;
    say("failed call %d status %s async %s peer %d waited %.3f", call, sy_status_name(st), sy_status_name(async), peer,
        waited);
    say("detail %s", detail);
    at = strstr(detail, ": rank "); /* the rank whose wait timed out: this one, or a peer that told it */
    say("origin %d", at ? atoi(at + 7) : -1);
    at = strstr(detail, "this rank was waiting on peer "); /* a told timeout: the wait here that it ended */
    say("own %d", at ? atoi(at + 30) : -1);
    printf("[test rank %d] call %d: %s after %.3f s: %s\n", s->rank, call, sy_status_name(async), waited, detail);
    /* Sticky: a later call returns the same error. */
    sy_status_t later = sy_comm_barrier(s->comm, s->stream);
    say("later %s", sy_status_name(later));
    return call;
  }
  say("no-failure");
  return -1;
}

static int rank_main(const char *name, const char *dir) {
  const scenario_t *sc = NULL;
  for (int i = 0; i < num_scenarios; i++)
    if (!strcmp(scenarios[i].name, name)) sc = &scenarios[i];
  if (!sc) return fprintf(stderr, "test_gpu_faults: no scenario %s\n", name), 2;
  op_state_t s;
  memset(&s, 0, sizeof s);
  s.comm = gt_init("test_gpu_faults", &s.rank, &s.world);
  char path[512];
  snprintf(path, sizeof path, "%s/rank.%d", dir, s.rank);
  verdict = fopen(path, "w");
  if (!verdict) return fprintf(stderr, "test_gpu_faults: cannot write %s: %s\n", path, strerror(errno)), 1;
  pthread_t tid;
  pthread_create(&tid, NULL, watchdog, NULL);
  GT_CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  op_setup(&s, sc->op);
  GT_OK(sy_comm_barrier(s.comm, s.stream));
  GT_CUDA(cudaStreamSynchronize(s.stream));
  survive(&s, sc);
  watch("destroy", DESTROY_BOUND_S);
  const double t0 = gt_now_s();
  op_teardown(&s);
  sy_status_t st = sy_comm_destroy(s.comm);
  watch(NULL, 0);
  say("destroyed %s in %.3f", sy_status_name(st), gt_now_s() - t0);
  cudaStreamDestroy(s.stream);
  say("exit 0");
  fclose(verdict);
  return 0;
}

/* ---- the driver ----------------------------------------------------------------------------------------------- */

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return strdup("");
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, mem);
  fclose(mem);
  fclose(f);
  return text;
}

/* One survivor's verdict file against what it must say; appends the reasons it fails to why, and what it waited
 * and how long destroy took to summary. */
/* The call a survivor's verdict says failed and the peer it names (-1 and -2 where it has none). For a timeout told
 * by another survivor whose wait named this rank r (r in an earlier call, waiting on the dead rank, timed out later
 * than the teller), the peer r was waiting on when it was told, where the detail gives one. */
static void failed_at(const char *text, int r, int *call, int *peer) {
  char status[64], async[64];
  double waited;
  int origin = -1, own = -1;
  *call = -1, *peer = -2;
  const char *at = text ? strstr(text, "failed call ") : NULL;
  if (at) sscanf(at, "failed call %d status %63s async %63s peer %d waited %lf", call, status, async, peer, &waited);
  if (text && (at = strstr(text, "\norigin "))) sscanf(at + 1, "origin %d", &origin);
  if (text && (at = strstr(text, "\nown "))) sscanf(at + 1, "own %d", &own);
  /* the teller's wait named this rank (it waited on r while r waited on the dead rank): r's own wait says more */
  if (origin >= 0 && origin != r && own >= 0 && *peer == r) *peer = own;
}

/* Survivor r's verdict. It must name the dead rank, or else a survivor q that named the dead rank and failed in an
 * earlier call than r: r got its rows from the victim before the kill, went on to its next call and waited there
 * for q, which had stopped (q's failure left q out of that call: a true report one step down the chain, and the
 * chain ends at the dead rank). calls[q], named[q]: each rank's failed call and named peer (failed_at). */
static void check_survivor(const scenario_t *sc, int r, const char *text, const int *calls, const int *named, char *why,
                           size_t why_bytes, char *summary, size_t summary_bytes) {
  int call = -1, peer = -2, origin = -1;
  char status[64] = "", async[64] = "", later[64] = "", destroyed[64] = "-";
  double waited = -1, took = -1;
  const char *at = strstr(text, "failed call ");
  if (at) sscanf(at, "failed call %d status %63s async %63s peer %d waited %lf", &call, status, async, &peer, &waited);
  if ((at = strstr(text, "\norigin "))) sscanf(at + 1, "origin %d", &origin);
  const int told = origin >= 0 && origin != r; /* another survivor's timeout, told to r */
  failed_at(text, r, &call, &peer);            /* a told rank: the peer it was waiting on, where known */
  const int chain = peer >= 0 && peer < WORLD && peer != sc->victim && peer != r && named[peer] == sc->victim &&
                    calls[peer] >= 0 && calls[peer] < call;
  if ((at = strstr(text, "later "))) sscanf(at, "later %63s", later);
  if ((at = strstr(text, "destroyed "))) sscanf(at, "destroyed %63s in %lf", destroyed, &took);
  const double bound = TIMEOUT_MS / 1000.0;
  size_t len = strlen(why);
#define WHY(...) (len += (size_t)snprintf(why + len, len < why_bytes ? why_bytes - len : 0, __VA_ARGS__))
  if (call < 0) WHY(" rank %d: no call failed;", r);
  else {
    if (call < GOOD_CALLS) WHY(" rank %d: call %d failed before the victim died;", r, call);
    if (strcmp(async, "SY_ERR_TIMEOUT") && strcmp(status, "SY_ERR_TIMEOUT"))
      WHY(" rank %d: status %s, async %s, want SY_ERR_TIMEOUT;", r, status, async);
    if (peer != sc->victim && !chain)
      WHY(" rank %d: names peer %d, not the dead rank %d nor a survivor that failed on it earlier;", r, peer,
          sc->victim);
    if ((!told && waited < 0.9 * bound) || waited > bound + SLACK_S)
      WHY(" rank %d: waited %.3f s, want %.1f..%.1f;", r, waited, told ? 0.0 : 0.9 * bound, bound + SLACK_S);
    if (origin < 0 || origin >= WORLD || origin == sc->victim)
      WHY(" rank %d: the detail names rank %d as the one that timed out;", r, origin);
    if (strcmp(later, "SY_ERR_TIMEOUT")) WHY(" rank %d: a later call returned %s;", r, later);
  }
  char hung[64] = "";
  if ((at = strstr(text, "hung "))) sscanf(at, "hung %63[^\n]", hung);
  if (hung[0]) WHY(" rank %d: %s did not return within its bound;", r, hung);
  else if (took < 0) WHY(" rank %d: destroy did not return;", r);
  if (!strstr(text, "exit 0")) WHY(" rank %d: did not reach its exit;", r);
#undef WHY
  const size_t used = strlen(summary);
  char from[48] = "";
  if (told) snprintf(from, sizeof from, " (rank %d's timeout, told to it)", origin);
  snprintf(summary + used, used < summary_bytes ? summary_bytes - used : 0,
           " [rank %d: call %d failed after %.3f s naming peer %d%s%s; destroy %s in %.3f s]", r, call, waited, peer,
           chain ? " (which had failed on the dead rank in an earlier call)" : "", from, destroyed, took);
}

/* Runs one scenario under syrun; 0 when every check holds. */
static int run_scenario(const scenario_t *sc, const char *self, const char *syrun, int device) {
  char dir[256], log[300], gpus[64] = "", limit[32];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/sy-faults.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    GT_FAIL("mkdtemp: %s", strerror(errno));
    return 1;
  }
  snprintf(log, sizeof log, "%s/syrun.log", dir);
  for (int r = 0; r < WORLD; r++)
    snprintf(gpus + strlen(gpus), sizeof gpus - strlen(gpus), "%s%d", r ? "," : "", device);
  snprintf(limit, sizeof limit, "%d", 120);
  const double t0 = gt_now_s();
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    char world[16], timeout[16];
    snprintf(world, sizeof world, "%d", WORLD);
    snprintf(timeout, sizeof timeout, "%d", TIMEOUT_MS);
    setenv("SY_TIMEOUT_MS", timeout, 1);
    setenv("SY_HEAP_SIZE", "256M", 0);
    setenv("SY_TEST_SHARED_GPU", "1", 1);
    /* One piece per pair: with more pieces than blocks, a block stuck on the dead rank's mail may hold a ticket
     * for a live peer's piece, and that live peer's wait may then be the one named (a true report, but not the
     * one this test asks for). */
    if (sc->op == OP_ATTN_QKV || sc->op == OP_ATTN_KV_BWD) setenv("SY_A2A_CHUNK", "16M", 1);
    if (!freopen(log, "w", stdout) || dup2(1, 2) < 0) _exit(126);
    execl(syrun, syrun, "-n", world, "--keep-going", "--gpus", gpus, "--timeout", limit, self, "--rank", sc->name, dir,
          (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  char *out = slurp(log), why[1024] = "", needle[96];
  size_t len = 0;
  if (code != 128 + SIGKILL)
    len += (size_t)snprintf(why + len, sizeof why - len, " syrun exit %d, want %d (the victim's SIGKILL)%s;", code,
                            128 + SIGKILL, code == 124 ? ": the job outlived syrun --timeout" : "");
  snprintf(needle, sizeof needle, "syrun: rank %d was killed by signal %d", sc->victim, SIGKILL);
  if (!strstr(out, needle) && len < sizeof why)
    len += (size_t)snprintf(why + len, sizeof why - len, " no '%s';", needle);
  char summary[768] = "", *verdict_text = NULL;
  size_t verdict_len = 0;
  FILE *verdicts = open_memstream(&verdict_text, &verdict_len);
  int calls[WORLD], named[WORLD];
  for (int r = 0; r < WORLD; r++) {
    char path[320];
    snprintf(path, sizeof path, "%s/rank.%d", dir, r);
    char *text = slurp(path);
    failed_at(r == sc->victim ? NULL : text, r, &calls[r], &named[r]);
    free(text);
  }
  for (int r = 0; r < WORLD; r++) {
    char path[320];
    snprintf(path, sizeof path, "%s/rank.%d", dir, r);
    char *text = slurp(path);
    if (r == sc->victim) {
      if (!strstr(text, "dying call"))
        strncat(why, " the victim never reached its kill point;", sizeof why - strlen(why) - 1);
    } else {
      snprintf(needle, sizeof needle, "syrun: rank %d ", r);
      if (strstr(out, needle) && strlen(why) < sizeof why)
        snprintf(why + strlen(why), sizeof why - strlen(why), " syrun reports rank %d failing;", r);
      check_survivor(sc, r, text, calls, named, why, sizeof why, summary, sizeof summary);
    }
    fprintf(verdicts, "rank %d:\n%s", r, text);
    free(text);
    unlink(path);
  }
  fclose(verdicts);
  const int ok = why[0] == '\0';
  printf("[faults] %-18s rank %d killed %s: %s%s (%.1f s)%s\n", sc->name, sc->victim,
         sc->kill_point == KILL_MID_ROUND ? "between dispatch and combine"
         : sc->kill_point == KILL_BEFORE  ? "before entering the call"
                                          : "with its kernel in flight",
         ok ? "ok" : "FAILED:", ok ? "" : why, gt_now_s() - t0, summary);
  if (!ok) {
    fprintf(stderr, "---- %s: syrun's output ----\n%s---- the verdict files ----\n%s---- end ----\n", sc->name, out,
            verdict_text);
    GT_FAIL("scenario %s:%s", sc->name, why);
  }
  fflush(stdout);
  free(out);
  free(verdict_text);
  unlink(log);
  rmdir(dir);
  return !ok;
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--rank")) return rank_main(argv[2], argv[3]);
  gt_require_gpu("test_gpu_faults");
  const char *outer_rank = getenv("SY_RANK");
  if (outer_rank && atoi(outer_rank) > 0) {
    printf("test_gpu_faults: rank %s: the driver runs on rank 0 only\n", outer_rank);
    return 0;
  }
  char self[4096], syrun[4200];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return perror("readlink /proc/self/exe"), 1;
  self[n] = '\0';
  /* build/tests/gpu/test_gpu_faults -> build/bin/syrun */
  snprintf(syrun, sizeof syrun, "%s", self);
  for (int up = 0; up < 3; up++) {
    char *slash = strrchr(syrun, '/');
    if (slash) *slash = '\0';
  }
  strncat(syrun, "/bin/syrun", sizeof syrun - strlen(syrun) - 1);
  if (access(syrun, X_OK)) return fprintf(stderr, "test_gpu_faults: no syrun at %s\n", syrun), 1;
  const char *dev_env = getenv("SY_DEVICE");
  const int device = dev_env && atoi(dev_env) >= 0 ? atoi(dev_env) : 0;
  gt_rank = 0;
  int failed = 0;
  for (int i = 0; i < num_scenarios; i++) failed += run_scenario(&scenarios[i], self, syrun, device);
  printf("[faults] %d of %d scenarios ok (%d ranks on GPU %d, SY_TIMEOUT_MS=%d)\n", num_scenarios - failed,
         num_scenarios, WORLD, device, TIMEOUT_MS);
  return gt_finish("test_gpu_faults");
}
