/*
 * test_rendezvous.c — the boot allgather (src/boot/rendezvous.c) with ranks as threads: directory mode and
 * TCP mode at world 1, 2, 3 and 8 over many rounds of distinct data (checked byte for byte, blob sizes from 0
 * to 256 KiB), reuse of one directory by successive boots, blob-size mismatch, ranks that never arrive (at
 * open, or in a later round), rank 0 never listening, and sy__boot_open's choice of transport from the
 * environment (SY_BOOT_SECRET included). Every failing case must end within its bound. What rank 0 refuses
 * (idle and garbage connections, bad ranks, secrets) and where it listens: test_rendezvous_tcp.c.
 */
#include "rendezvous_test.h"

static void test_healthy(void) {
  static const int worlds[] = {1, 2, 3, 8};
  for (int w = 0; w < 4; w++) {
    rank_run_t runs[8];
    char dir[300], what[64];
    make_dir(dir, sizeof dir, "healthy");
    job_t job = base_job(VIA_DIR, dir, 0, worlds[w]);
    run_all(&job, runs);
    snprintf(what, sizeof what, "dir world %d", worlds[w]);
    check_all_ok(runs, worlds[w], what);
    /* Each rank deleted its files of every round but the last (the others may still be reading that). */
    CHECK_EQ_INT(count_entries(dir), worlds[w]);
    remove_dir(dir);

    job = base_job(VIA_TCP, NULL, free_port(), worlds[w]);
    run_all(&job, runs);
    snprintf(what, sizeof what, "tcp world %d", worlds[w]);
    check_all_ok(runs, worlds[w], what);
  }
  /* A host name rather than an address; rank 0 opening late (the others retry until it listens). */
  rank_run_t runs[3];
  job_t job = base_job(VIA_TCP, NULL, free_port(), 3);
  job.addr = "localhost";
  job.late_rank = 0;
  job.late_ms = 300;
  job.rounds = 5;
  run_all(&job, runs);
  check_all_ok(runs, 3, "tcp localhost, rank 0 late");
  /* The trivial boot: world 1, a copy. */
  sy_boot_t *boot;
  CHECK_OK(sy__boot_open_trivial(&boot));
  unsigned char in[5] = {1, 2, 3, 4, 5}, out[6] = {0, 0, 0, 0, 0, 0xEE};
  CHECK_OK(sy__boot_allgather(boot, in, out, 5));
  CHECK(memcmp(in, out, 5) == 0 && out[5] == 0xEE);
  CHECK_OK(sy__boot_barrier(boot));
  sy__boot_close(boot);
}

/* Successive boots in one directory (a communicator destroyed and created again under one syrun): a new
 * boot must never read an earlier boot's file, even when the earlier boot ran a single round. */
static void test_dir_reuse(void) {
  char dir[300];
  make_dir(dir, sizeof dir, "reuse");
  for (int epoch = 1; epoch <= 6; epoch++) {
    rank_run_t runs[4];
    job_t job = base_job(VIA_DIR, dir, 0, 4);
    job.epoch = epoch;
    job.rounds = epoch % 2 ? 1 : 3;
    run_all(&job, runs);
    check_all_ok(runs, 4, "dir reuse");
    CHECK_EQ_INT(count_entries(dir), 4);
  }
  remove_dir(dir);
}

static void test_mismatch(transport_t transport) {
  for (int odd = 0; odd < 3; odd += 2) { /* the odd one out is rank 0, then rank 2 */
    rank_run_t runs[3];
    char dir[300] = "";
    if (transport == VIA_DIR) make_dir(dir, sizeof dir, "mismatch");
    job_t job = base_job(transport, dir, transport == VIA_TCP ? free_port() : 0, 3);
    job.odd_rank = odd;
    job.odd_round = 2; /* after two good rounds; round 2 is the 0-byte one: 1 byte against 0 */
    job.timeout_ms = 10000;
    log_capture_start();
    double t0 = now_s();
    run_all(&job, runs);
    double seconds = now_s() - t0;
    char *log = log_capture_end();
    for (int r = 0; r < 3; r++) {
      CHECK_STATUS(runs[r].status, SY_ERR_MISMATCH);
      CHECK_EQ_INT(runs[r].failed_round, 2);
      CHECK_EQ_INT(runs[r].wrong_bytes, 0);
    }
    CHECK(seconds < 8); /* found at once, not by timing out */
    char needle[64];
    snprintf(needle, sizeof needle, "rank %d passed 1 bytes", odd == 0 ? 0 : 2);
    if (transport == VIA_TCP && odd == 0) snprintf(needle, sizeof needle, "rank 0 passed 1");
    CHECK_LOG_HAS(log, needle);
    if (transport == VIA_DIR) remove_dir(dir);
  }
}

/* World 3, only ranks 0 and 1 ever call: both fail with SY_ERR_TIMEOUT near the 300 ms bound, naming rank 2. */
static void test_never_arrives(transport_t transport) {
  rank_run_t runs[2];
  char dir[300] = "";
  if (transport == VIA_DIR) make_dir(dir, sizeof dir, "absent");
  job_t job = base_job(transport, dir, transport == VIA_TCP ? free_port() : 0, 3);
  job.timeout_ms = 300;
  const int ranks[] = {0, 1};
  log_capture_start();
  run_ranks(&job, 2, ranks, NULL, runs);
  char *log = log_capture_end();
  for (int i = 0; i < 2; i++) {
    CHECK_STATUS(runs[i].status, SY_ERR_TIMEOUT);
    CHECK(runs[i].seconds < 5);
  }
  CHECK(runs[0].seconds > 0.25); /* it did wait for the bound */
  if (transport == VIA_DIR) {
    CHECK_LOG_HAS(log, "[rank 0] sy warn: rendezvous: round 0: rank 2 never arrived within 300 ms (dir ");
    CHECK_LOG_HAS(log, "[rank 1] sy warn: rendezvous: round 0: rank 2 never arrived within 300 ms (dir ");
    remove_dir(dir);
  } else {
    CHECK_LOG_HAS(log, "[rank 0] sy warn: rendezvous: rank 2 never connected within 300 ms");
    CHECK_LOG_HAS(log, "[rank 1] sy warn: rendezvous: round 0: rank 0 reports: rank 2 never connected within 300 ms");
  }

  /* Two missing ranks are both named. */
  if (transport == VIA_DIR) {
    make_dir(dir, sizeof dir, "absent2");
    job = base_job(transport, dir, 0, 4);
    job.timeout_ms = 300;
    log_capture_start();
    run_ranks(&job, 2, ranks, NULL, runs);
    log = log_capture_end();
    CHECK_STATUS(runs[0].status, SY_ERR_TIMEOUT);
    CHECK_STATUS(runs[1].status, SY_ERR_TIMEOUT);
    CHECK_LOG_HAS(log, "round 0: ranks 2, 3 never arrived within 300 ms");
    remove_dir(dir);
  }

  /* Rank 2 takes part in rounds 0 and 1, then never arrives in round 2 (it stays connected). */
  rank_run_t all[3];
  if (transport == VIA_DIR) make_dir(dir, sizeof dir, "absent3");
  job = base_job(transport, dir, transport == VIA_TCP ? free_port() : 0, 3);
  job.timeout_ms = 300;
  job.skip_rank = 2;
  job.skip_round = 2;
  log_capture_start();
  run_all(&job, all);
  log = log_capture_end();
  for (int r = 0; r < 2; r++) {
    CHECK_STATUS(all[r].status, SY_ERR_TIMEOUT);
    CHECK_EQ_INT(all[r].failed_round, 2);
    CHECK_EQ_INT(all[r].wrong_bytes, 0);
    CHECK(all[r].seconds < 5);
  }
  CHECK_OK(all[2].status);
  if (transport == VIA_DIR) {
    CHECK_LOG_HAS(log, "round 2: rank 2 never arrived within 300 ms");
    remove_dir(dir);
  } else {
    CHECK_LOG_HAS(log, "[rank 0] sy warn: rendezvous: round 2: rank 2 never sent within 300 ms");
    CHECK_LOG_HAS(log, "[rank 1] sy warn: rendezvous: round 2: rank 0 reports: round 2: rank 2 never sent");
  }
}

static void test_tcp_unreachable(void) {
  /* Rank 0 never listens: the others retry until the bound, then say rank 0 was not reachable. */
  rank_run_t runs[3];
  int port = free_port();
  job_t job = base_job(VIA_TCP, NULL, port, 3);
  job.timeout_ms = 300;
  const int others[] = {1, 2};
  log_capture_start();
  run_ranks(&job, 2, others, NULL, runs);
  char *log = log_capture_end();
  char needle[128];
  snprintf(needle, sizeof needle, "rank 0 at 127.0.0.1:%d was not reachable within 300 ms", port);
  for (int i = 0; i < 2; i++) {
    CHECK_STATUS(runs[i].status, SY_ERR_TIMEOUT);
    CHECK(runs[i].seconds > 0.25 && runs[i].seconds < 5);
  }
  CHECK_LOG_HAS(log, needle);
}

/* sy__boot_open picks the transport from the environment. */
static void test_open_from_env(void) {
  const char *vars[] = {"SY_BOOT_DIR", "SY_BOOT_ADDR", "SY_BOOT_PORT", "MASTER_ADDR", "MASTER_PORT", "SY_BOOT_SECRET"};
  const int var_count = (int)(sizeof vars / sizeof vars[0]);
  for (int i = 0; i < var_count; i++) unsetenv(vars[i]);
  rank_run_t runs[3];

  /* SY_BOOT_DIR: the directory. */
  char dir[300];
  make_dir(dir, sizeof dir, "env");
  setenv("SY_BOOT_DIR", dir, 1);
  job_t job = base_job(VIA_ENV, NULL, 0, 3);
  run_all(&job, runs);
  check_all_ok(runs, 3, "env dir");
  CHECK_EQ_INT(count_entries(dir), 3);
  remove_dir(dir);
  unsetenv("SY_BOOT_DIR");

  /* World 1: trivial, whatever else is (not) set. */
  job = base_job(VIA_ENV, NULL, 0, 1);
  run_all(&job, runs);
  check_all_ok(runs, 1, "env world 1");

  /* Nothing set beyond one rank: a bootstrap error saying what to set. */
  sy_boot_t *boot = NULL;
  log_capture_start();
  CHECK_STATUS(sy__boot_open(0, 2, 1000, &boot), SY_ERR_BOOTSTRAP);
  char *log = log_capture_end();
  CHECK_LOG_HAS(log, "set MASTER_ADDR and MASTER_PORT");
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  CHECK_STATUS(sy__boot_open(1, 2, 1000, &boot), SY_ERR_BOOTSTRAP); /* no port anywhere */

  /* MASTER_ADDR with MASTER_PORT: TCP on MASTER_PORT + 1 (MASTER_PORT itself is torch's). */
  int port = free_port();
  char text[16];
  snprintf(text, sizeof text, "%d", port - 1);
  setenv("MASTER_PORT", text, 1);
  job = base_job(VIA_ENV, NULL, port, 3);
  job.rounds = 4;
  job.direct_tcp_rank = 2; /* it connects to `port` itself: proves that is where rank 0 listens */
  run_all(&job, runs);
  check_all_ok(runs, 3, "env MASTER_ADDR");

  /* SY_BOOT_SECRET: ranks 0 and 1 take it from the environment, rank 2 passes the same one itself; then rank 2
   * passes none and rank 0 refuses it. The secret appears in no log line. */
  static const char secret[] = "env-secret-8j2Q";
  setenv("SY_BOOT_SECRET", secret, 1);
  port = free_port();
  snprintf(text, sizeof text, "%d", port - 1);
  setenv("MASTER_PORT", text, 1);
  job = base_job(VIA_ENV, NULL, port, 3);
  job.rounds = 4;
  job.direct_tcp_rank = 2;
  job.secret = secret;
  log_capture_level("INFO");
  run_all(&job, runs);
  log = log_capture_end();
  check_all_ok(runs, 3, "env SY_BOOT_SECRET");
  CHECK(strstr(log, secret) == NULL);
  port = free_port();
  snprintf(text, sizeof text, "%d", port - 1);
  setenv("MASTER_PORT", text, 1);
  job = base_job(VIA_ENV, NULL, port, 3);
  job.direct_tcp_rank = 2;
  job.timeout_ms = 1000;
  log_capture_level("INFO");
  run_all(&job, runs);
  log = log_capture_end();
  CHECK_STATUS(runs[2].status, SY_ERR_BOOTSTRAP);
  CHECK_STATUS(runs[0].status, SY_ERR_TIMEOUT);
  CHECK_LOG_HAS(log, "says it is rank 2 but holds no SY_BOOT_SECRET; rank 0 requires it");
  CHECK(strstr(log, secret) == NULL);
  unsetenv("SY_BOOT_SECRET");

  /* SY_BOOT_ADDR / SY_BOOT_PORT win over MASTER_*. */
  setenv("MASTER_ADDR", "host.invalid", 1);
  setenv("SY_BOOT_ADDR", "127.0.0.1", 1);
  snprintf(text, sizeof text, "%d", free_port());
  setenv("SY_BOOT_PORT", text, 1);
  job = base_job(VIA_ENV, NULL, 0, 2);
  job.rounds = 4;
  run_all(&job, runs);
  check_all_ok(runs, 2, "env SY_BOOT_ADDR");
  setenv("SY_BOOT_PORT", "70000", 1);
  CHECK_STATUS(sy__boot_open(1, 2, 1000, &boot), SY_ERR_INVALID_ARG);
  for (int i = 0; i < var_count; i++) unsetenv(vars[i]);
}

static void test_arguments(void) {
  sy_boot_t *boot = NULL;
  char dir[300];
  make_dir(dir, sizeof dir, "args");
  CHECK_STATUS(sy__boot_open_dir(dir, 2, 2, 1000, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_dir(dir, 0, 0, 1000, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_dir(dir, 0, 2, 0, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_dir(NULL, 0, 2, 1000, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_tcp("127.0.0.1", 0, 1, 2, 1000, NULL, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_tcp(NULL, 5000, 1, 2, 1000, NULL, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open(-1, 2, 1000, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_trivial(NULL), SY_ERR_INVALID_ARG);
  char missing[320];
  snprintf(missing, sizeof missing, "%s/none", dir);
  CHECK_STATUS(sy__boot_open_dir(missing, 0, 2, 1000, &boot), SY_ERR_BOOTSTRAP);
  /* A name that does not resolve (at once, or after retries where resolution fails "temporarily"). */
  CHECK_STATUS(sy__boot_open_tcp("host.invalid", 5000, 1, 2, 300, NULL, &boot), SY_ERR_BOOTSTRAP);
  /* A boot of world 1 in a directory works alone; NULL buffers only with 0 bytes. */
  CHECK_OK(sy__boot_open_dir(dir, 0, 1, 1000, &boot));
  CHECK_STATUS(sy__boot_allgather(boot, NULL, NULL, 4), SY_ERR_INVALID_ARG);
  CHECK_OK(sy__boot_allgather(boot, NULL, NULL, 0));
  CHECK_OK(sy__boot_barrier(boot));
  sy__boot_close(boot);
  sy__boot_close(NULL);
  CHECK_STATUS(sy__boot_allgather(NULL, NULL, NULL, 0), SY_ERR_INVALID_ARG);
  remove_dir(dir);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(work_dir, sizeof work_dir, "%s/sy-rendezvous-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(work_dir)) {
    perror("mkdtemp");
    return 1;
  }
  unsetenv("SY_BOOT_DIR");
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();

  test_arguments();
  test_healthy();
  test_dir_reuse();
  test_mismatch(VIA_DIR);
  test_mismatch(VIA_TCP);
  test_never_arrives(VIA_DIR);
  test_never_arrives(VIA_TCP);
  test_tcp_unreachable();
  test_open_from_env();

  remove_dir(work_dir);
  return check_report();
}
