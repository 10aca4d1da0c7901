/*
 * test_graph_cache.c — the graph cache on the host backend (src/exec/graph_cache.c; the API at the end of
 * switchyard.h), where every run calls the step and no graph is made:
 *   buckets     the default buckets are exactly 1, 2, 4, 8 .. 256 by 8, 272 .. max_bucket by 16: for every n up
 *               to max_bucket the bucket is the smallest >= n, for several max_bucket values; custom buckets
 *               (copied at create), a single bucket, max_bucket ignored beside them.
 *   bad args    create, bucket, run, refresh and stats each reject every bad argument with SY_ERR_INVALID_ARG and
 *               a log line naming it, leave the output and the stats as they were, and never call the step.
 *   run         the step once per run with the bucket (not n), the user pointer and the stream; warm-up and
 *               refresh change nothing here; a step's error comes back; eager_runs counts the runs, the graph
 *               counts stay 0; stats into a caller's shorter struct fill only its prefix.
 *   sticky      after a recorded mismatch, create and run return it without calling the step; bucket, refresh,
 *               stats and destroy still answer. destroy(NULL) is accepted.
 * The log goes to a file in a scratch directory so the test can read what each rejection named.
 */
#include "host_comm_test.h"

#include <limits.h>
#include <stddef.h>

/* The call must be rejected as invalid, with a log line containing needle. */
#define REJECT(call, needle) CHECK_REJECTED(call, needle)

static int next_group = 7300;

/* Runs fn on `world` rank threads, each with its own host communicator. */
static void run_world(int world, rank_fn_t fn) {
  run_shared_t run = make_run(world, __atomic_fetch_add(&next_group, 1, __ATOMIC_RELAXED), fn);
  run_ranks(&run);
}

/* ---- a step that records its calls ---------------------------------------------------------------------- */

#define MAX_CALLS 64

typedef struct step_log {
  int calls;
  int buckets[MAX_CALLS]; /* the bucket of each call (the first MAX_CALLS) */
  void *user;             /* the last call's user pointer */
  cudaStream_t stream;    /* the last call's stream */
  sy_status_t result;     /* what the step returns */
} step_log_t;

static sy_status_t step_record(void *user, int bucket, cudaStream_t stream) {
  step_log_t *log = user;
  if (log->calls < MAX_CALLS) log->buckets[log->calls] = bucket;
  log->calls++;
  log->user = user;
  log->stream = stream;
  return log->result;
}

static sy_graph_cache_stats_t cache_stats(sy_graph_cache_t cache) {
  sy_graph_cache_stats_t s = SY_GRAPH_CACHE_STATS_INIT;
  CHECK_OK(sy_graph_cache_stats(cache, &s));
  CHECK_EQ_INT(s.size, sizeof s);
  return s;
}

/* The host backend makes no graph: only eager_runs moves. */
static void check_counts(sy_graph_cache_t cache, uint64_t eager_runs) {
  const sy_graph_cache_stats_t s = cache_stats(cache);
  CHECK_EQ_INT(s.eager_runs, eager_runs);
  CHECK_EQ_INT(s.captures, 0);
  CHECK_EQ_INT(s.updates, 0);
  CHECK_EQ_INT(s.instantiations, 0);
  CHECK_EQ_INT(s.replays, 0);
  CHECK_EQ_INT(s.graphs, 0);
}

/* ---- buckets -------------------------------------------------------------------------------------------- */

/* vLLM's rule, written out independently of the library: the smallest of 1, 2, 4, 8 .. 256 by 8, 272 .. by 16
 * that is >= n. */
static int default_bucket_for(int n) {
  if (n <= 2) return n;
  if (n <= 4) return 4;
  if (n <= 256) return (n + 7) / 8 * 8;
  return 256 + (n - 256 + 15) / 16 * 16;
}

/* Every n in [1, max_bucket] maps to the smallest default bucket >= n; max_bucket + 1 and n < 1 are refused;
 * the buckets reached are exactly the default list (3 + 32 + (max_bucket - 256) / 16 of them). */
static void check_default_buckets(sy_graph_cache_t cache, int max_bucket) {
  int distinct = 0, last = 0, wrong = 0;
  for (int n = 1; n <= max_bucket; n++) {
    int b = -1;
    CHECK_OK(sy_graph_cache_bucket(cache, n, &b));
    if (b != default_bucket_for(n) && wrong++ < 5)
      fprintf(stderr, "max_bucket %d: n=%d gives bucket %d, want %d\n", max_bucket, n, b, default_bucket_for(n));
    if (b != last) distinct++;
    last = b;
  }
  CHECK_EQ_INT(wrong, 0);
  CHECK_EQ_INT(last, max_bucket);
  CHECK_EQ_INT(distinct, 3 + 32 + (max_bucket - 256) / 16);
  int b = 12345;
  REJECT(sy_graph_cache_bucket(cache, max_bucket + 1, &b), "outside [1, ");
  REJECT(sy_graph_cache_bucket(cache, 0, &b), "n=0");
  REJECT(sy_graph_cache_bucket(cache, -1, &b), "n=-1");
  REJECT(sy_graph_cache_bucket(cache, INT_MIN, &b), "n=");
  REJECT(sy_graph_cache_bucket(cache, INT_MAX, &b), "n=");
  CHECK_EQ_INT(b, 12345); /* a refused call leaves *bucket alone */
}

static void fn_default_buckets(rank_ctx_t *ctx) {
  step_log_t log = {0};
  sy_graph_cache_t cache = NULL;
  CHECK_OK(sy_graph_cache_create(ctx->comm, NULL, step_record, &log, &cache)); /* NULL config: max_bucket 512 */
  if (cache) check_default_buckets(cache, 512);
  CHECK_OK(sy_graph_cache_destroy(cache));

  static const int maxima[] = {256, 272, 512, 1024, 8192};
  for (size_t i = 0; i < sizeof maxima / sizeof maxima[0]; i++) {
    sy_graph_cache_config_t config = SY_GRAPH_CACHE_CONFIG_INIT;
    config.max_bucket = maxima[i];
    cache = NULL;
    CHECK_OK(sy_graph_cache_create(ctx->comm, &config, step_record, &log, &cache));
    if (cache) check_default_buckets(cache, maxima[i]);
    CHECK_OK(sy_graph_cache_destroy(cache));
  }
  /* A max_bucket off the grid of 16s is a bucket of its own, after the grid's last below it. */
  static const int off_grid[][3] = {{1000, 992, 993}, {257, 256, 257}, {300, 288, 289}};
  for (size_t i = 0; i < sizeof off_grid / sizeof off_grid[0]; i++) {
    sy_graph_cache_config_t config = SY_GRAPH_CACHE_CONFIG_INIT;
    config.max_bucket = off_grid[i][0];
    cache = NULL;
    CHECK_OK(sy_graph_cache_create(ctx->comm, &config, step_record, &log, &cache));
    int b = 0;
    CHECK_OK(sy_graph_cache_bucket(cache, off_grid[i][1], &b));
    CHECK_EQ_INT(b, off_grid[i][1]);
    CHECK_OK(sy_graph_cache_bucket(cache, off_grid[i][2], &b));
    CHECK_EQ_INT(b, off_grid[i][0]);
    CHECK_OK(sy_graph_cache_bucket(cache, off_grid[i][0], &b));
    CHECK_EQ_INT(b, off_grid[i][0]);
    CHECK_STATUS(sy_graph_cache_bucket(cache, off_grid[i][0] + 1, &b), SY_ERR_INVALID_ARG);
    CHECK_OK(sy_graph_cache_destroy(cache));
  }
  /* An older caller's shorter config (no max_bucket, no warmup): the fields past its size take their defaults. */
  sy_graph_cache_config_t old = SY_GRAPH_CACHE_CONFIG_INIT;
  old.size = offsetof(sy_graph_cache_config_t, max_bucket);
  old.max_bucket = 100; /* past the size: never read */
  old.warmup = -1;
  cache = NULL;
  CHECK_OK(sy_graph_cache_create(ctx->comm, &old, step_record, &log, &cache));
  if (cache) check_default_buckets(cache, 512);
  CHECK_OK(sy_graph_cache_destroy(cache));
  CHECK_EQ_INT(log.calls, 0); /* bucket never runs the step */
}

static void fn_custom_buckets(rank_ctx_t *ctx) {
  step_log_t log = {0};
  int buckets[] = {3, 5, 100, 1000};
  sy_graph_cache_config_t config = SY_GRAPH_CACHE_CONFIG_INIT;
  config.buckets = buckets;
  config.num_buckets = 4;
  config.max_bucket = 0; /* only read with the default buckets */
  sy_graph_cache_t cache = NULL;
  CHECK_OK(sy_graph_cache_create(ctx->comm, &config, step_record, &log, &cache));
  if (!cache) return;
  buckets[0] = 50; /* copied at create: later changes do not reach the cache */
  buckets[3] = 2000;
  static const int n[] = {1, 2, 3, 4, 5, 6, 99, 100, 101, 999, 1000};
  static const int want[] = {3, 3, 3, 5, 5, 100, 100, 100, 1000, 1000, 1000};
  for (size_t i = 0; i < sizeof n / sizeof n[0]; i++) {
    int b = -1;
    CHECK_OK(sy_graph_cache_bucket(cache, n[i], &b));
    CHECK_EQ_INT(b, want[i]);
  }
  int b = -1;
  REJECT(sy_graph_cache_bucket(cache, 1001, &b), "n=1001 outside [1, 1000]");
  CHECK_OK(sy_graph_cache_destroy(cache));

  const int one[] = {7};
  config.buckets = one;
  config.num_buckets = 1;
  cache = NULL;
  CHECK_OK(sy_graph_cache_create(ctx->comm, &config, step_record, &log, &cache));
  for (int k = 1; cache && k <= 7; k++) {
    CHECK_OK(sy_graph_cache_bucket(cache, k, &b));
    CHECK_EQ_INT(b, 7);
  }
  if (cache) REJECT(sy_graph_cache_bucket(cache, 8, &b), "n=8 outside [1, 7]");
  CHECK_OK(sy_graph_cache_destroy(cache));
  CHECK_EQ_INT(log.calls, 0);
}

/* ---- bad arguments -------------------------------------------------------------------------------------- */

/* create refused: SY_ERR_INVALID_ARG, the needle in the log, *cache cleared, the step never called. */
static void reject_create(sy_comm_t comm, const sy_graph_cache_config_t *config, sy_graph_step_fn step, step_log_t *log,
                          const char *needle, int line) {
  sy_graph_cache_t cache = (sy_graph_cache_t)log; /* must be cleared by the rejection */
  const sy_status_t st = sy_graph_cache_create(comm, config, step, log, &cache);
  if (st != SY_ERR_INVALID_ARG)
    fprintf(stderr, "line %d: sy_graph_cache_create returned %s, want SY_ERR_INVALID_ARG\n", line, sy_status_name(st));
  CHECK_EQ_INT(st, SY_ERR_INVALID_ARG);
  CHECK(check_log_has(needle, line));
  if (comm) CHECK(cache == NULL);
  if (st == SY_SUCCESS) sy_graph_cache_destroy(cache);
}

static void fn_create_args(rank_ctx_t *ctx) {
  step_log_t log = {0};
  sy_graph_cache_config_t config = SY_GRAPH_CACHE_CONFIG_INIT;
  CHECK_EQ_INT(config.size, sizeof config);
  CHECK(config.buckets == NULL);
  CHECK_EQ_INT(config.max_bucket, 512);
  CHECK_EQ_INT(config.warmup, 1);
  reject_create(NULL, &config, step_record, &log, "comm is NULL", __LINE__);
  REJECT(sy_graph_cache_create(ctx->comm, &config, step_record, &log, NULL), "cache is NULL");
  reject_create(ctx->comm, &config, NULL, &log, "step is NULL", __LINE__);
  reject_create(ctx->comm, NULL, NULL, &log, "step is NULL", __LINE__);
  config.size = 0;
  reject_create(ctx->comm, &config, step_record, &log, "config->size=0", __LINE__);
  config.size = sizeof config + 8;
  reject_create(ctx->comm, &config, step_record, &log, "SY_GRAPH_CACHE_CONFIG_INIT", __LINE__);
  config.size = sizeof config;

  static const int maxima[] = {255, 0, -1, INT_MIN};
  for (size_t i = 0; i < sizeof maxima / sizeof maxima[0]; i++) {
    config.max_bucket = maxima[i];
    char needle[64];
    snprintf(needle, sizeof needle, "config->max_bucket=%d", maxima[i]);
    reject_create(ctx->comm, &config, step_record, &log, needle, __LINE__);
  }
  config.max_bucket = 512;
  config.warmup = -1;
  reject_create(ctx->comm, &config, step_record, &log, "config->warmup=-1", __LINE__);
  config.warmup = 1;

  static const int equal[] = {1, 3, 3, 8}, down[] = {4, 2}, zero[] = {0, 1}, negative[] = {-5, 2}, late[] = {1, 2, -3};
  config.buckets = equal;
  config.num_buckets = 4;
  reject_create(ctx->comm, &config, step_record, &log, "config->buckets[2]=3", __LINE__);
  config.buckets = down;
  config.num_buckets = 2;
  reject_create(ctx->comm, &config, step_record, &log, "config->buckets[1]=2", __LINE__);
  config.buckets = zero;
  reject_create(ctx->comm, &config, step_record, &log, "config->buckets[0]=0", __LINE__);
  config.buckets = negative;
  reject_create(ctx->comm, &config, step_record, &log, "config->buckets[0]=-5", __LINE__);
  config.buckets = late;
  config.num_buckets = 3;
  reject_create(ctx->comm, &config, step_record, &log, "config->buckets[2]=-3", __LINE__);
  config.buckets = down;
  config.num_buckets = 0;
  reject_create(ctx->comm, &config, step_record, &log, "config->num_buckets=0", __LINE__);
  config.num_buckets = -1;
  reject_create(ctx->comm, &config, step_record, &log, "config->num_buckets=-1", __LINE__);
  config.num_buckets = 1; /* {4} alone is ascending: accepted */
  sy_graph_cache_t cache = NULL;
  CHECK_OK(sy_graph_cache_create(ctx->comm, &config, step_record, &log, &cache));
  CHECK_OK(sy_graph_cache_destroy(cache));
  CHECK_EQ_INT(log.calls, 0);
}

/* bucket, run, refresh and stats: every bad argument refused, the step not called, the stats unchanged. */
static void fn_call_args(rank_ctx_t *ctx) {
  step_log_t log = {0};
  const int buckets[] = {2, 16, 64};
  sy_graph_cache_config_t config = SY_GRAPH_CACHE_CONFIG_INIT;
  config.buckets = buckets;
  config.num_buckets = 3;
  sy_graph_cache_t cache = NULL;
  CHECK_OK(sy_graph_cache_create(ctx->comm, &config, step_record, &log, &cache));
  if (!cache) return;
  CHECK_OK(sy_graph_cache_run(cache, 5, NULL)); /* one good run, so "unchanged" is not just "zero" */
  CHECK_EQ_INT(log.calls, 1);

  int b = 12345;
  REJECT(sy_graph_cache_bucket(NULL, 1, &b), "cache is NULL");
  REJECT(sy_graph_cache_bucket(cache, 1, NULL), "bucket is NULL");
  REJECT(sy_graph_cache_bucket(cache, 65, &b), "n=65 outside [1, 64]");
  CHECK_EQ_INT(b, 12345);

  REJECT(sy_graph_cache_run(NULL, 1, NULL), "cache is NULL");
  REJECT(sy_graph_cache_run(cache, 0, NULL), "n=0 outside [1, 64]");
  REJECT(sy_graph_cache_run(cache, -7, NULL), "n=-7");
  REJECT(sy_graph_cache_run(cache, 65, NULL), "n=65 outside [1, 64]");
  REJECT(sy_graph_cache_run(cache, INT_MAX, NULL), "outside [1, 64]");
  CHECK_EQ_INT(log.calls, 1);

  REJECT(sy_graph_cache_refresh(NULL, 0), "cache is NULL");
  REJECT(sy_graph_cache_refresh(cache, 65), "n=65 outside [0, 64]");
  REJECT(sy_graph_cache_refresh(cache, -1), "n=-1");
  CHECK_OK(sy_graph_cache_refresh(cache, 0));
  CHECK_OK(sy_graph_cache_refresh(cache, 64));
  CHECK_OK(sy_graph_cache_refresh(cache, 1));

  sy_graph_cache_stats_t s = SY_GRAPH_CACHE_STATS_INIT;
  REJECT(sy_graph_cache_stats(NULL, &s), "cache is NULL");
  REJECT(sy_graph_cache_stats(cache, NULL), "stats is NULL");
  s.size = 0;
  REJECT(sy_graph_cache_stats(cache, &s), "stats->size=0");
  s.size = sizeof s + 8;
  REJECT(sy_graph_cache_stats(cache, &s), "SY_GRAPH_CACHE_STATS_INIT");
  check_counts(cache, 1);
  CHECK_EQ_INT(log.calls, 1);
  CHECK_OK(sy_graph_cache_destroy(cache));
}

/* ---- run ------------------------------------------------------------------------------------------------ */

/* warmup must not matter here: one step per run, with the bucket, the user pointer and the stream. */
static void run_sequence(sy_comm_t comm, int warmup) {
  step_log_t log = {0};
  sy_graph_cache_config_t config = SY_GRAPH_CACHE_CONFIG_INIT;
  config.warmup = warmup;
  sy_graph_cache_t cache = NULL;
  CHECK_OK(sy_graph_cache_create(comm, &config, step_record, &log, &cache));
  if (!cache) return;
  check_counts(cache, 0);
  static const int n[] = {1, 2, 3, 5, 9, 17, 24, 25, 255, 256, 257, 300, 511, 512, 1, 3, 3};
  static const int want[] = {1, 2, 4, 8, 16, 24, 24, 32, 256, 256, 272, 304, 512, 512, 1, 4, 4};
  const int runs = (int)(sizeof n / sizeof n[0]);
  cudaStream_t stream = (cudaStream_t)(uintptr_t)0x5000; /* the host backend passes it on untouched */
  for (int i = 0; i < runs; i++) {
    CHECK_OK(sy_graph_cache_run(cache, n[i], i % 2 ? stream : NULL));
    CHECK_EQ_INT(log.calls, i + 1);
    CHECK_EQ_INT(log.buckets[i], want[i]);
    CHECK(log.user == &log);
    CHECK(log.stream == (i % 2 ? stream : NULL));
    check_counts(cache, (uint64_t)i + 1);
  }
  /* A refreshed bucket (one, then all) is still one step per run, and nothing is captured. */
  CHECK_OK(sy_graph_cache_refresh(cache, 3));
  CHECK_OK(sy_graph_cache_run(cache, 4, NULL));
  CHECK_OK(sy_graph_cache_refresh(cache, 0));
  CHECK_OK(sy_graph_cache_run(cache, 200, NULL));
  CHECK_EQ_INT(log.calls, runs + 2);
  CHECK_EQ_INT(log.buckets[runs], 4);
  CHECK_EQ_INT(log.buckets[runs + 1], 200);
  check_counts(cache, (uint64_t)runs + 2);
  CHECK_OK(sy_graph_cache_destroy(cache));
}

static void fn_run(rank_ctx_t *ctx) {
  run_sequence(ctx->comm, 0);
  run_sequence(ctx->comm, 1);
  run_sequence(ctx->comm, 3);
}

/* A step's error is the run's; the cache goes on afterwards. */
static void fn_step_error(rank_ctx_t *ctx) {
  step_log_t log = {0};
  sy_graph_cache_t cache = NULL;
  CHECK_OK(sy_graph_cache_create(ctx->comm, NULL, step_record, &log, &cache));
  if (!cache) return;
  static const sy_status_t errors[] = {SY_ERR_INTERNAL, SY_ERR_NO_MEMORY, SY_ERR_UNSUPPORTED};
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
    log.result = errors[i];
    CHECK_STATUS(sy_graph_cache_run(cache, 10, NULL), errors[i]);
    CHECK_EQ_INT(log.calls, (int)i + 1);
    CHECK_EQ_INT(log.buckets[i], 16);
  }
  log.result = SY_SUCCESS;
  CHECK_OK(sy_graph_cache_run(cache, 10, NULL));
  CHECK_EQ_INT(log.calls, 4);
  const sy_graph_cache_stats_t s = cache_stats(cache);
  CHECK(s.eager_runs >= 1 && s.eager_runs <= 4); /* the steps that failed may count or not; the good one does */
  CHECK_EQ_INT(s.captures + s.replays + s.instantiations + s.updates + (uint64_t)s.graphs, 0);
  CHECK_OK(sy_graph_cache_destroy(cache));
}

/* A caller's older, shorter stats struct (size and eager_runs only): its prefix filled, nothing past it. */
static void fn_stats_prefix(rank_ctx_t *ctx) {
  step_log_t log = {0};
  sy_graph_cache_t cache = NULL;
  CHECK_OK(sy_graph_cache_create(ctx->comm, NULL, step_record, &log, &cache));
  if (!cache) return;
  for (int i = 0; i < 3; i++) CHECK_OK(sy_graph_cache_run(cache, 1, NULL));
  sy_graph_cache_stats_t s;
  memset(&s, 0xA5, sizeof s);
  s.size = offsetof(sy_graph_cache_stats_t, captures);
  CHECK_OK(sy_graph_cache_stats(cache, &s));
  CHECK_EQ_INT(s.size, offsetof(sy_graph_cache_stats_t, captures));
  CHECK_EQ_INT(s.eager_runs, 3);
  CHECK(s.captures == 0xA5A5A5A5A5A5A5A5ull);
  CHECK(s.graphs == (int)0xA5A5A5A5);
  CHECK_OK(sy_graph_cache_destroy(cache));
}

/* ---- after a recorded error ------------------------------------------------------------------------------ */

static void fn_sticky(rank_ctx_t *ctx) {
  step_log_t log = {0};
  sy_graph_cache_t cache = NULL;
  CHECK_OK(sy_graph_cache_create(ctx->comm, NULL, step_record, &log, &cache));
  if (!cache) return;
  CHECK_OK(sy_graph_cache_run(cache, 3, NULL));

  uint64_t value = 1, gathered[2];
  if (ctx->rank == 0) CHECK_STATUS(sy_comm_barrier(ctx->comm, NULL), SY_ERR_MISMATCH);
  else CHECK_STATUS(sy_comm_allgather_host(ctx->comm, &value, gathered, sizeof value), SY_ERR_MISMATCH);

  CHECK_STATUS(sy_graph_cache_run(cache, 3, NULL), SY_ERR_MISMATCH);
  CHECK_EQ_INT(log.calls, 1);
  sy_graph_cache_t other = (sy_graph_cache_t)&value;
  CHECK_STATUS(sy_graph_cache_create(ctx->comm, NULL, step_record, &log, &other), SY_ERR_MISMATCH);
  CHECK(other == (sy_graph_cache_t)&value || other == NULL);
  int b = -1;
  CHECK_OK(sy_graph_cache_bucket(cache, 3, &b));
  CHECK_EQ_INT(b, 4);
  CHECK_OK(sy_graph_cache_refresh(cache, 0));
  check_counts(cache, 1);
  CHECK_OK(sy_graph_cache_destroy(cache));
}

int main(void) {
  char dir[] = "/tmp/sy_test_graph_cache_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(check_log_path, sizeof check_log_path, "%s/log.txt", dir);
  setenv("SY_DEBUG_FILE", check_log_path, 1);
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();

  run_world(1, fn_default_buckets);
  run_world(1, fn_custom_buckets);
  run_world(1, fn_create_args);
  run_world(1, fn_call_args);
  run_world(1, fn_run);
  run_world(1, fn_step_error);
  run_world(1, fn_stats_prefix);
  run_world(2, fn_sticky);
  CHECK_OK(sy_graph_cache_destroy(NULL));

  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  unlink(check_log_path);
  CHECK_EQ_INT(rmdir(dir), 0);
  return check_report();
}
