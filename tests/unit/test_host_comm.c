/*
 * test_host_comm.c — the host backend's communicator (src/host/group.c, comm.c): group rendezvous at init,
 * queries, barrier, and the failure paths: a wait nobody satisfies, a rank that never arrives, a rank claimed
 * twice, disagreeing world sizes, a barrier a rank never comes to, and the abort that wakes the others. Ranks
 * are threads; each builds its own communicator as a user would (host_comm_test.h). Symmetric memory, put with
 * signal and the host allgather: test_host_comm_mem.c.
 */
#include "host_comm_test.h"

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
  test_timeout();
  test_abort();
  return check_report();
}
