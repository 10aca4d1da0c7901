/*
 * test_host_comm.c — the host backend's communicator (src/ref/host_backend.c): group rendezvous at init,
 * queries, barrier, symmetric memory and peer pointers, put with signal, the host allgather, and the failure
 * paths: a wait nobody satisfies, a rank that never arrives, a rank claimed twice, disagreeing world sizes.
 * Ranks are threads; each builds its own communicator as a user would.
 */
#include "check.h"
#include "core/internal.h"
#include "switchyard.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS       8
#define LONG_TIMEOUT_MS 30000 /* generous: a loaded 2-core CI machine must not trip it */

/* ---- rank threads ----------------------------------------------------------------------------------- */

typedef struct rank_ctx rank_ctx_t;
typedef void (*rank_fn_t)(rank_ctx_t *ctx);

typedef struct run_shared {
  int world, group;
  size_t heap_bytes;
  uint64_t timeout_ms[MAX_RANKS]; /* 0: LONG_TIMEOUT_MS */
  rank_fn_t fn;
  void *user;
  int counter; /* test scratch, atomic */
  int flag;    /* test scratch, atomic */
} run_shared_t;

struct rank_ctx {
  int rank;
  run_shared_t *run;
  sy_comm_t comm;
  pthread_t thread;
};

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static sy_comm_config_t make_config(int rank, int world, int group, uint64_t timeout_ms) {
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  config.backend = SY_BACKEND_HOST;
  config.rank = rank;
  config.world_size = world;
  config.host_group = group;
  config.timeout_ms = timeout_ms;
  return config;
}

static void *rank_main(void *arg) {
  rank_ctx_t *ctx = arg;
  run_shared_t *run = ctx->run;
  sy_comm_config_t config = make_config(ctx->rank, run->world, run->group,
                                        run->timeout_ms[ctx->rank] ? run->timeout_ms[ctx->rank] : LONG_TIMEOUT_MS);
  config.heap_bytes = run->heap_bytes;
  CHECK_OK(sy_comm_init(&ctx->comm, &config));
  if (!ctx->comm) return NULL;
  run->fn(ctx);
  uint64_t t0 = now_ms();
  CHECK_OK(sy_comm_destroy(ctx->comm));
  CHECK(now_ms() - t0 < 5000); /* destroy never waits for peers */
  return NULL;
}

static void spawn_ranks(run_shared_t *run, rank_ctx_t *ctx) {
  for (int r = 0; r < run->world; r++) {
    ctx[r].rank = r;
    ctx[r].run = run;
    ctx[r].comm = NULL;
    CHECK_EQ_INT(pthread_create(&ctx[r].thread, NULL, rank_main, &ctx[r]), 0);
  }
}

static void join_ranks(run_shared_t *run, rank_ctx_t *ctx) {
  for (int r = 0; r < run->world; r++) pthread_join(ctx[r].thread, NULL);
}

static void run_ranks(run_shared_t *run) {
  rank_ctx_t ctx[MAX_RANKS];
  spawn_ranks(run, ctx);
  join_ranks(run, ctx);
}

static run_shared_t make_run(int world, int group, rank_fn_t fn) {
  run_shared_t run;
  memset(&run, 0, sizeof run);
  run.world = world;
  run.group = group;
  run.fn = fn;
  return run;
}

static unsigned char pattern(int rank, int round, size_t k) {
  uint32_t h = (uint32_t)rank * 2654435761u ^ (uint32_t)round * 40503u ^ (uint32_t)k * 2246822519u;
  h ^= h >> 15;
  return (unsigned char)(h % 255 + 1); /* never zero */
}

/* ---- init, queries, rendezvous ---------------------------------------------------------------------- */

static void fn_queries(rank_ctx_t *ctx) {
  int rank = -5, size = -5, device = -5;
  sy_backend_t backend = SY_BACKEND_AUTO;
  CHECK_OK(sy_comm_rank(ctx->comm, &rank));
  CHECK_OK(sy_comm_size(ctx->comm, &size));
  CHECK_OK(sy_comm_backend(ctx->comm, &backend));
  CHECK_OK(sy_comm_device(ctx->comm, &device));
  CHECK_EQ_INT(rank, ctx->rank);
  CHECK_EQ_INT(size, ctx->run->world);
  CHECK_EQ_INT(backend, SY_BACKEND_HOST);
  CHECK_EQ_INT(device, -1);
  sy_status_t async = SY_ERR_INTERNAL;
  char detail[64] = "junk";
  CHECK_OK(sy_comm_async_error(ctx->comm, &async, detail, sizeof detail));
  CHECK_EQ_INT(async, SY_SUCCESS);
  CHECK_EQ_STR(detail, "");
  CHECK_OK(sy_comm_barrier(ctx->comm, NULL));
}

static void test_init_sizes(void) {
  static const int worlds[] = {1, 2, 3, 4, 8};
  for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
    run_shared_t run = make_run(worlds[i], 100 + worlds[i], fn_queries);
    run_ranks(&run);
  }
}

typedef struct reinit_job {
  int rank, world, group, rounds;
  pthread_t thread;
} reinit_job_t;

/* Back-to-back communicators with one key, ranks not in step: a fast rank's next init must not join the
 * group its slower peers are still leaving. */
static void *reinit_main(void *arg) {
  reinit_job_t *job = arg;
  for (int i = 0; i < job->rounds; i++) {
    sy_comm_config_t config = make_config(job->rank, job->world, job->group, LONG_TIMEOUT_MS);
    sy_comm_t comm = NULL;
    CHECK_OK(sy_comm_init(&comm, &config));
    if (!comm) return NULL;
    int gathered[MAX_RANKS] = {0}, mine = i * 100 + job->rank;
    CHECK_OK(sy_comm_allgather_host(comm, &mine, gathered, sizeof mine));
    for (int r = 0; r < job->world; r++) CHECK_EQ_INT(gathered[r], i * 100 + r);
    if (job->rank == 0) sleep_ms(1); /* make rank 0 the slow one sometimes */
    CHECK_OK(sy_comm_destroy(comm));
  }
  return NULL;
}

static void test_init_twice(void) {
  run_shared_t run = make_run(3, 200, fn_queries);
  run_ranks(&run);
  run_ranks(&run); /* the same key again, once the first group is gone */

  reinit_job_t jobs[4];
  for (int r = 0; r < 4; r++) {
    jobs[r] = (reinit_job_t){r, 4, 201, 20, 0};
    CHECK_EQ_INT(pthread_create(&jobs[r].thread, NULL, reinit_main, &jobs[r]), 0);
  }
  for (int r = 0; r < 4; r++) pthread_join(jobs[r].thread, NULL);
}

static void fn_group_identity(rank_ctx_t *ctx) {
  int mine[2] = {ctx->run->group, ctx->rank}, all[MAX_RANKS][2];
  for (int i = 0; i < 20; i++) {
    memset(all, 0, sizeof all);
    CHECK_OK(sy_comm_allgather_host(ctx->comm, mine, all, sizeof mine));
    for (int r = 0; r < ctx->run->world; r++) {
      CHECK_EQ_INT(all[r][0], ctx->run->group);
      CHECK_EQ_INT(all[r][1], r);
    }
    CHECK_OK(sy_comm_barrier(ctx->comm, NULL));
  }
}

static void test_two_groups(void) {
  run_shared_t a = make_run(3, 300, fn_group_identity), b = make_run(2, 301, fn_group_identity);
  rank_ctx_t ca[MAX_RANKS], cb[MAX_RANKS];
  spawn_ranks(&a, ca);
  spawn_ranks(&b, cb);
  join_ranks(&a, ca);
  join_ranks(&b, cb);
}

typedef struct init_job {
  int rank, world, group;
  sy_status_t status;
  int done; /* atomic */
  pthread_t thread;
} init_job_t;

static void *init_job_main(void *arg) {
  init_job_t *job = arg;
  sy_comm_config_t config = make_config(job->rank, job->world, job->group, LONG_TIMEOUT_MS);
  sy_comm_t comm = NULL;
  job->status = sy_comm_init(&comm, &config);
  if (job->status == SY_SUCCESS) {
    CHECK(comm != NULL);
    CHECK_OK(sy_comm_barrier(comm, NULL));
    CHECK_OK(sy_comm_destroy(comm));
  } else {
    CHECK(comm == NULL);
  }
  __atomic_store_n(&job->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void start_job(init_job_t *job, int rank, int world, int group) {
  *job = (init_job_t){rank, world, group, SY_ERR_INTERNAL, 0, 0};
  CHECK_EQ_INT(pthread_create(&job->thread, NULL, init_job_main, job), 0);
}

/* Waits (bounded) until one of the jobs has returned; its index, or -1. */
static int first_done(init_job_t *jobs, int n) {
  for (uint64_t t0 = now_ms(); now_ms() - t0 < 20000; sleep_ms(2))
    for (int i = 0; i < n; i++)
      if (__atomic_load_n(&jobs[i].done, __ATOMIC_ACQUIRE)) return i;
  return -1;
}

static void test_rank_taken(void) {
  init_job_t jobs[3];
  start_job(&jobs[0], 0, 2, 600);
  sleep_ms(20);
  start_job(&jobs[1], 0, 2, 600); /* rank 0 again */
  int first = first_done(jobs, 2);
  CHECK(first >= 0);
  if (first < 0) first = 1;
  CHECK_EQ_INT(jobs[first].status, SY_ERR_INVALID_ARG);
  start_job(&jobs[2], 1, 2, 600); /* completes the group of whichever rank 0 holds the slot */
  for (int i = 0; i < 3; i++) pthread_join(jobs[i].thread, NULL);
  CHECK_EQ_INT(jobs[1 - first].status, SY_SUCCESS);
  CHECK_EQ_INT(jobs[2].status, SY_SUCCESS);
}

static void test_world_mismatch(void) {
  init_job_t jobs[4];
  start_job(&jobs[0], 0, 2, 700);
  sleep_ms(20);
  start_job(&jobs[1], 1, 3, 700); /* same key, another world size */
  int first = first_done(jobs, 2);
  CHECK(first >= 0);
  if (first < 0) first = 1;
  CHECK_EQ_INT(jobs[first].status, SY_ERR_MISMATCH);
  int n = 2;
  if (first == 1) { /* the world-2 group is forming: complete it */
    start_job(&jobs[n++], 1, 2, 700);
  } else { /* the world-3 one won the key */
    start_job(&jobs[n++], 0, 3, 700);
    start_job(&jobs[n++], 2, 3, 700);
  }
  for (int i = 0; i < n; i++) pthread_join(jobs[i].thread, NULL);
  for (int i = 0; i < n; i++)
    if (i != first) CHECK_EQ_INT(jobs[i].status, SY_SUCCESS);
}

static void test_missing_rank(void) {
  char dir[] = "/tmp/sy_test_host_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char log_path[128];
  snprintf(log_path, sizeof log_path, "%s/boot.log", dir);
  setenv("SY_BOOT_TIMEOUT_MS", "300", 1);
  setenv("SY_DEBUG_FILE", log_path, 1);
  sy__log_reset();

  init_job_t jobs[2];
  uint64_t t0 = now_ms();
  start_job(&jobs[0], 0, 3, 800);
  start_job(&jobs[1], 1, 3, 800); /* rank 2 never comes */
  for (int i = 0; i < 2; i++) pthread_join(jobs[i].thread, NULL);
  uint64_t elapsed = now_ms() - t0;
  for (int i = 0; i < 2; i++) CHECK_EQ_INT(jobs[i].status, SY_ERR_TIMEOUT);
  CHECK(elapsed >= 250);
  CHECK(elapsed < 10000);

  unsetenv("SY_DEBUG_FILE");
  unsetenv("SY_BOOT_TIMEOUT_MS");
  sy__log_reset();
  char *text = check_read_file(log_path);
  CHECK(text != NULL);
  if (text) {
    CHECK(strstr(text, "never arrived") != NULL);
    CHECK(strstr(text, "(SY_BOOT_TIMEOUT_MS): 2\n") != NULL); /* names rank 2, and only it */
    CHECK(strstr(text, "[rank 0] sy warn: init: host group 800") != NULL);
    free(text);
  }
  unlink(log_path);
  CHECK_EQ_INT(rmdir(dir), 0);

  /* The ranks that arrived left cleanly: the group forms later with the same key. */
  run_shared_t run = make_run(3, 800, fn_queries);
  run_ranks(&run);
}

/* ---- barrier ---------------------------------------------------------------------------------------- */

static void fn_barrier_many(rank_ctx_t *ctx) {
  const int world = ctx->run->world, rounds = 500;
  for (int k = 0; k < rounds; k++) {
    if ((k + ctx->rank) % 7 == 0) sched_yield(); /* vary who arrives last */
    __atomic_fetch_add(&ctx->run->counter, 1, __ATOMIC_RELAXED);
    CHECK_OK(sy_comm_barrier(ctx->comm, NULL));
    /* Every rank has counted round k before anyone leaves the barrier of round k ... */
    int seen = __atomic_load_n(&ctx->run->counter, __ATOMIC_RELAXED);
    if (seen < world * (k + 1)) CHECK_EQ_INT(seen, world * (k + 1));
    /* ... and nobody counts round k+1 before everyone left round k's (the next barrier's ordering). */
    if (seen > world * (k + 2)) CHECK_EQ_INT(seen, world * (k + 2));
  }
}

static void test_barrier_many(void) {
  static const int worlds[] = {1, 2, 4, 8};
  for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
    run_shared_t run = make_run(worlds[i], 900 + worlds[i], fn_barrier_many);
    run_ranks(&run);
  }
}

/* ---- symmetric memory ------------------------------------------------------------------------------- */

static void gather_bases(rank_ctx_t *ctx, void *mine, void **bases) {
  CHECK_OK(sy_comm_allgather_host(ctx->comm, &mine, bases, sizeof mine));
}

static void check_peer_ptrs(rank_ctx_t *ctx, char *base, size_t bytes) {
  void *bases[MAX_RANKS] = {0};
  gather_bases(ctx, base, bases);
  CHECK(bases[ctx->rank] == base);
  const size_t offsets[] = {0, 1, 255, bytes / 2, bytes - 1};
  for (int p = 0; p < ctx->run->world; p++) {
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
      if (offsets[i] >= bytes) continue;
      void *q = (void *)1;
      CHECK_OK(sy_comm_peer_ptr(ctx->comm, base + offsets[i], p, &q));
      CHECK(q == (char *)bases[p] + offsets[i]);
    }
  }
}

static void fn_symmetric(rank_ctx_t *ctx) {
  const int world = ctx->run->world, rank = ctx->rank;
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  char *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(sy_mem_alloc(ctx->comm, 4096, (void **)&a));
  CHECK_OK(sy_mem_alloc(ctx->comm, 333, (void **)&b));
  CHECK_OK(sy_mem_alloc(ctx->comm, 1000, (void **)&c));
  if (!a || !b || !c) return;
  CHECK(((uintptr_t)a & 255) == 0 && ((uintptr_t)b & 255) == 0 && ((uintptr_t)c & 255) == 0);
  check_peer_ptrs(ctx, a, 4096);
  check_peer_ptrs(ctx, b, 333);
  check_peer_ptrs(ctx, c, 1000);
  void *self = NULL;
  CHECK_OK(sy_comm_peer_ptr(ctx->comm, a + 17, rank, &self));
  CHECK(self == a + 17);

  /* Stores through a peer pointer are the peer's bytes after a barrier. */
  char *remote = NULL;
  CHECK_OK(sy_comm_peer_ptr(ctx->comm, a + 100 * rank, next, (void **)&remote));
  for (size_t k = 0; k < 100; k++) remote[k] = (char)pattern(rank, 1, k);
  CHECK_OK(sy_comm_barrier(ctx->comm, NULL));
  for (size_t k = 0; k < 100; k++) CHECK_EQ_INT((unsigned char)a[100 * prev + k], pattern(prev, 1, k));

  /* Free the middle one; the others still translate, and a new allocation does too. */
  CHECK_OK(sy_mem_free(ctx->comm, b));
  check_peer_ptrs(ctx, c, 1000);
  check_peer_ptrs(ctx, a, 4096);
  char *blocks[10] = {0};
  for (int i = 0; i < 10; i++) CHECK_OK(sy_mem_alloc(ctx->comm, (size_t)(i * 97 + 1), (void **)&blocks[i]));
  for (int i = 0; i < 10; i += 2) CHECK_OK(sy_mem_free(ctx->comm, blocks[i]));
  for (int i = 1; i < 10; i += 2) check_peer_ptrs(ctx, blocks[i], (size_t)(i * 97 + 1));
  for (int i = 1; i < 10; i += 2) CHECK_OK(sy_mem_free(ctx->comm, blocks[i]));
  CHECK_OK(sy_mem_free(ctx->comm, a));
  /* c is left allocated: destroy frees it. */
}

static void test_symmetric(void) {
  static const int worlds[] = {1, 3, 4};
  for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
    run_shared_t run = make_run(worlds[i], 1000 + worlds[i], fn_symmetric);
    run_ranks(&run);
  }
}

static void fn_alloc_mismatch(rank_ctx_t *ctx) {
  void *p = (void *)1;
  /* Rank 1 asks for more: every rank gets SY_ERR_MISMATCH and nothing stays allocated. */
  CHECK_STATUS(sy_mem_alloc(ctx->comm, ctx->rank == 1 ? 4096 + 256 : 4096, &p), SY_ERR_MISMATCH);
  CHECK(p == NULL);
  CHECK_EQ_INT(ctx->comm->symm_count, 0);
  /* Not sticky: the communicator goes on. */
  void *x = NULL, *y = NULL;
  CHECK_OK(sy_mem_alloc(ctx->comm, 4096, &x));
  CHECK_OK(sy_mem_alloc(ctx->comm, 4000, &y)); /* takes 4096 (256-byte granules) */
  /* The heap (config.heap_bytes = 8192) is full now: every rank gets SY_ERR_NO_MEMORY, nothing allocated. */
  void *z = (void *)1;
  CHECK_STATUS(sy_mem_alloc(ctx->comm, 1, &z), SY_ERR_NO_MEMORY);
  CHECK(z == NULL);
  CHECK_EQ_INT(ctx->comm->symm_count, 2);
  CHECK_STATUS(sy_mem_alloc(ctx->comm, 8193, &z), SY_ERR_INVALID_ARG); /* more than the whole heap: local */
  /* Ranks that free different allocations: every rank gets SY_ERR_MISMATCH, nothing freed. */
  CHECK_STATUS(sy_mem_free(ctx->comm, ctx->rank == 2 ? y : x), SY_ERR_MISMATCH);
  CHECK_EQ_INT(ctx->comm->symm_count, 2);
  CHECK_OK(sy_mem_free(ctx->comm, x));
  CHECK_OK(sy_mem_alloc(ctx->comm, 4096, &z)); /* x's room is back */
  CHECK_OK(sy_mem_free(ctx->comm, z));
  CHECK_OK(sy_mem_free(ctx->comm, y));
  CHECK_EQ_INT(ctx->comm->symm_count, 0);
  sy_status_t async = SY_ERR_INTERNAL;
  CHECK_OK(sy_comm_async_error(ctx->comm, &async, NULL, 0));
  CHECK_EQ_INT(async, SY_SUCCESS);
}

static void test_alloc_mismatch(void) {
  run_shared_t run = make_run(3, 1100, fn_alloc_mismatch);
  run.heap_bytes = 8192;
  run_ranks(&run);
}

/* ---- put with signal --------------------------------------------------------------------------------- */

#define RING_BYTES 4099

static void fn_put_ring(rank_ctx_t *ctx) {
  const int world = ctx->run->world, rank = ctx->rank;
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  unsigned char *buf = NULL, *src = malloc(RING_BYTES);
  uint64_t *sig = NULL;
  CHECK_OK(sy_mem_alloc(ctx->comm, RING_BYTES, (void **)&buf));
  CHECK_OK(sy_mem_alloc(ctx->comm, 2 * sizeof(uint64_t), (void **)&sig));
  if (!buf || !sig || !src) {
    free(src);
    return;
  }
  sig[0] = sig[1] = 0;
  CHECK_OK(sy_comm_barrier(ctx->comm, NULL));
  int bad = 0;
  for (int i = 1; i <= 100; i++) {
    size_t len = i % 10 == 0 ? 0 : (size_t)(i * 37 + 11) % (RING_BYTES + 1); /* 0: signal only */
    for (size_t k = 0; k < len; k++) src[k] = pattern(rank, i, k);
    if (i % 2) {
      CHECK_OK(sy_put_signal(ctx->comm, buf, src, len, &sig[0], SY_SIGNAL_SET, (uint64_t)i, next, NULL));
      memset(src, 0, len); /* the put completed: src is free again */
      CHECK_OK(sy_signal_wait(ctx->comm, &sig[0], (uint64_t)i, NULL));
      CHECK_EQ_INT(__atomic_load_n(&sig[0], __ATOMIC_ACQUIRE), i);
    } else {
      CHECK_OK(sy_put_signal(ctx->comm, buf, src, len, &sig[1], SY_SIGNAL_ADD, 1, next, NULL));
      memset(src, 0, len);
      CHECK_OK(sy_signal_wait(ctx->comm, &sig[1], (uint64_t)(i / 2), NULL));
      CHECK_EQ_INT(__atomic_load_n(&sig[1], __ATOMIC_ACQUIRE), i / 2);
    }
    for (size_t k = 0; k < len; k++) bad += buf[k] != pattern(prev, i, k);
    CHECK_OK(sy_comm_barrier(ctx->comm, NULL)); /* the checker is done before the next put lands */
  }
  CHECK_EQ_INT(bad, 0);
  /* A larger ADD, a put into the middle of dst, and a wait for a value already passed. */
  for (size_t k = 0; k < 10; k++) src[k] = pattern(rank, 999, k);
  CHECK_OK(sy_put_signal(ctx->comm, buf + 1000, src, 10, &sig[1], SY_SIGNAL_ADD, 1000, next, NULL));
  CHECK_OK(sy_signal_wait(ctx->comm, &sig[1], 1050, NULL));
  for (size_t k = 0; k < 10; k++) CHECK_EQ_INT(buf[1000 + k], pattern(prev, 999, k));
  CHECK_OK(sy_signal_wait(ctx->comm, &sig[0], 1, NULL));
  CHECK_OK(sy_comm_barrier(ctx->comm, NULL));
  CHECK_OK(sy_mem_free(ctx->comm, sig));
  CHECK_OK(sy_mem_free(ctx->comm, buf));
  free(src);
}

static void test_put_ring(void) {
  static const int worlds[] = {1, 2, 3, 4};
  for (size_t i = 0; i < sizeof worlds / sizeof worlds[0]; i++) {
    run_shared_t run = make_run(worlds[i], 1200 + worlds[i], fn_put_ring);
    run_ranks(&run);
  }
}

/* ---- allgather_host ---------------------------------------------------------------------------------- */

static void fn_allgather(rank_ctx_t *ctx) {
  const int world = ctx->run->world;
  unsigned char send[14], recv[14 * MAX_RANKS];
  for (size_t k = 0; k < sizeof send; k++) send[k] = pattern(ctx->rank, 7, k);
  memset(recv, 0xEE, sizeof recv);
  CHECK_OK(sy_comm_allgather_host(ctx->comm, send, recv, 13));
  for (int r = 0; r < world; r++)
    for (size_t k = 0; k < 13; k++) CHECK_EQ_INT(recv[13 * r + k], pattern(r, 7, k));
  for (size_t k = 13 * (size_t)world; k < sizeof recv; k++) CHECK_EQ_INT(recv[k], 0xEE);
  /* Rank 2 contributes 14 bytes: every rank gets SY_ERR_MISMATCH and recv untouched. */
  memset(recv, 0xEE, sizeof recv);
  CHECK_STATUS(sy_comm_allgather_host(ctx->comm, send, recv, ctx->rank == 2 ? 14 : 13), SY_ERR_MISMATCH);
  for (size_t k = 0; k < sizeof recv; k++) CHECK_EQ_INT(recv[k], 0xEE);
  CHECK_OK(sy_comm_allgather_host(ctx->comm, send, recv, 1));
  for (int r = 0; r < world; r++) CHECK_EQ_INT(recv[r], pattern(r, 7, 0));
}

static void test_allgather(void) {
  run_shared_t run = make_run(4, 1300, fn_allgather);
  run_ranks(&run);
}

/* ---- timeouts and abort --------------------------------------------------------------------------------- */

static void fn_timeout(rank_ctx_t *ctx) {
  uint64_t *sig = NULL;
  CHECK_OK(sy_mem_alloc(ctx->comm, 64, (void **)&sig));
  if (!sig) return;
  sig[0] = 0;
  CHECK_OK(sy_comm_barrier(ctx->comm, NULL));
  if (ctx->rank == 0) {
    uint64_t t0 = now_ms();
    CHECK_STATUS(sy_signal_wait(ctx->comm, sig, 1, NULL), SY_ERR_TIMEOUT); /* nobody sets it */
    uint64_t elapsed = now_ms() - t0;
    CHECK(elapsed >= 190);
    CHECK(elapsed < 5000);
    __atomic_store_n(&ctx->run->flag, 1, __ATOMIC_RELEASE);
  } else {
    for (uint64_t t0 = now_ms(); !__atomic_load_n(&ctx->run->flag, __ATOMIC_ACQUIRE) && now_ms() - t0 < 20000;)
      sleep_ms(2);
  }
  /* Both ranks see the timeout, with a description of it. */
  sy_status_t async = SY_SUCCESS;
  char detail[256] = "";
  CHECK_OK(sy_comm_async_error(ctx->comm, &async, detail, sizeof detail));
  CHECK_EQ_INT(async, SY_ERR_TIMEOUT);
  CHECK(detail[0] != '\0');
  CHECK(strstr(detail, "signal_wait: rank 0") != NULL);
  CHECK(strstr(detail, "expected >= 1, saw 0") != NULL);
  char small[8] = "xxxxxxx";
  CHECK_OK(sy_comm_async_error(ctx->comm, &async, small, sizeof small)); /* truncated, terminated */
  CHECK_EQ_INT((int)strlen(small), 7);
  /* Later calls fail; the error is sticky. */
  size_t counts[MAX_RANKS] = {0};
  void *p = (void *)1;
  int value = 0, all[MAX_RANKS];
  CHECK(sy_comm_barrier(ctx->comm, NULL) != SY_SUCCESS);
  CHECK(sy_alltoall(ctx->comm, counts, sig, 0, NULL) != SY_SUCCESS);
  CHECK(sy_alltoallv(ctx->comm, counts, counts, counts, sig, counts, counts, NULL) != SY_SUCCESS);
  CHECK(sy_put_signal(ctx->comm, sig, NULL, 0, sig, SY_SIGNAL_SET, 1, 0, NULL) != SY_SUCCESS);
  CHECK(sy_signal_wait(ctx->comm, sig, 0, NULL) != SY_SUCCESS);
  CHECK(sy_mem_alloc(ctx->comm, 64, &p) != SY_SUCCESS);
  CHECK(sy_comm_allgather_host(ctx->comm, &value, all, sizeof value) != SY_SUCCESS);
  CHECK(sy_mem_free(ctx->comm, sig) != SY_SUCCESS);
  CHECK_OK(sy_comm_async_error(ctx->comm, &async, NULL, 0));
  CHECK_EQ_INT(async, SY_ERR_TIMEOUT);
  /* sig stays allocated: destroy (in rank_main) frees it and must not hang. */
}

static void test_timeout(void) {
  run_shared_t run = make_run(2, 1400, fn_timeout);
  run.timeout_ms[0] = run.timeout_ms[1] = 200;
  run_ranks(&run);
}

/* Rank 0's wait times out quickly; rank 1, with a long bound, sits in a barrier: the abort ends it early. */
static void fn_abort_wakes(rank_ctx_t *ctx) {
  uint64_t *sig = NULL;
  CHECK_OK(sy_mem_alloc(ctx->comm, 64, (void **)&sig));
  if (!sig) return;
  sig[0] = 0;
  CHECK_OK(sy_comm_barrier(ctx->comm, NULL));
  uint64_t t0 = now_ms();
  if (ctx->rank == 0) {
    for (; !__atomic_load_n(&ctx->run->flag, __ATOMIC_ACQUIRE) && now_ms() - t0 < 20000;) sleep_ms(1);
    CHECK_STATUS(sy_signal_wait(ctx->comm, sig, 5, NULL), SY_ERR_TIMEOUT);
  } else {
    __atomic_store_n(&ctx->run->flag, 1, __ATOMIC_RELEASE);
    sy_status_t st = sy_comm_barrier(ctx->comm, NULL);
    /* ABORTED: the abort woke the barrier. TIMEOUT only if this thread was descheduled for all of rank 0's
     * 200 ms and reached the barrier after the abort (then the call's entry check reports it). */
    CHECK(st == SY_ERR_ABORTED || st == SY_ERR_TIMEOUT);
    CHECK(now_ms() - t0 < 10000); /* its own bound is 60 s */
  }
  sy_status_t async = SY_SUCCESS;
  char detail[256] = "";
  CHECK_OK(sy_comm_async_error(ctx->comm, &async, detail, sizeof detail));
  CHECK_EQ_INT(async, SY_ERR_TIMEOUT);
  CHECK(strstr(detail, "rank 0") != NULL);
}

/* Rank 1 never comes to the barrier: rank 0's barrier times out naming it. */
static void fn_barrier_timeout(rank_ctx_t *ctx) {
  if (ctx->rank == 0) {
    CHECK_STATUS(sy_comm_barrier(ctx->comm, NULL), SY_ERR_TIMEOUT);
    sy_status_t async = SY_SUCCESS;
    char detail[256] = "";
    CHECK_OK(sy_comm_async_error(ctx->comm, &async, detail, sizeof detail));
    CHECK_EQ_INT(async, SY_ERR_TIMEOUT);
    CHECK(strstr(detail, "barrier: rank 0") != NULL);
    CHECK(strstr(detail, "expected 3 ranks, saw ") != NULL);
    CHECK(strstr(detail, "(missing: 1") != NULL); /* rank 2, if slow to arrive, may be named too */
    __atomic_store_n(&ctx->run->flag, 1, __ATOMIC_RELEASE);
  } else if (ctx->rank == 1) {
    for (uint64_t t0 = now_ms(); !__atomic_load_n(&ctx->run->flag, __ATOMIC_ACQUIRE) && now_ms() - t0 < 20000;)
      sleep_ms(2);
    CHECK_STATUS(sy_comm_barrier(ctx->comm, NULL), SY_ERR_TIMEOUT); /* the recorded error */
  } else {
    sy_status_t st = sy_comm_barrier(ctx->comm, NULL);
    CHECK(st == SY_ERR_ABORTED || st == SY_ERR_TIMEOUT);
  }
}

static void test_abort(void) {
  run_shared_t run = make_run(2, 1500, fn_abort_wakes);
  run.timeout_ms[0] = 200;
  run.timeout_ms[1] = 60000;
  run_ranks(&run);

  run_shared_t run2 = make_run(3, 1501, fn_barrier_timeout);
  run2.timeout_ms[0] = 300;
  run2.timeout_ms[1] = run2.timeout_ms[2] = 60000;
  run_ranks(&run2);
}

int main(void) {
  test_init_sizes();
  test_init_twice();
  test_two_groups();
  test_rank_taken();
  test_world_mismatch();
  test_missing_rank();
  test_barrier_many();
  test_symmetric();
  test_alloc_mismatch();
  test_put_ring();
  test_allgather();
  test_timeout();
  test_abort();
  return check_report();
}
