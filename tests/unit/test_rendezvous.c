/*
 * test_rendezvous.c — the boot allgather (src/boot/rendezvous.c) with ranks as threads: directory mode and
 * TCP mode at world 1, 2, 3 and 8 over many rounds of distinct data (checked byte for byte, blob sizes from 0
 * to 256 KiB), reuse of one directory by successive boots, blob-size mismatch, ranks that never arrive (at
 * open, or in a later round), rank 0 never listening, duplicate ranks and a wrong world size, and
 * sy__boot_open's choice of transport from the environment. Every failing case must end within its bound.
 */
#include "boot/boot.h"
#include "check.h"

#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef enum transport { VIA_DIR, VIA_TCP, VIA_ENV } transport_t;

typedef struct job {
  transport_t transport;
  const char *dir;
  const char *addr;
  int port;
  int world; /* what every rank says the world is */
  uint64_t timeout_ms;
  int rounds;
  int epoch;     /* mixed into the data, so a stale file of an earlier boot shows */
  int skip_rank; /* this rank stops calling at skip_round (keeping its boot open); -1: none */
  int skip_round;
  int odd_rank; /* this rank passes one byte more at odd_round; -1: none */
  int odd_round;
  int late_rank; /* this rank opens late_ms late; -1: none */
  int late_ms;
  int direct_tcp_rank; /* VIA_ENV: this rank opens with sy__boot_open_tcp(addr, port) instead; -1: none */
  int finished;        /* ranks done (atomic): the skipping rank waits for the others before closing */
} job_t;

typedef struct rank_run {
  job_t *job;
  int rank;                        /* the rank this thread claims */
  int world;                       /* the world size it claims */
  sy_status_t open_status, status; /* status: first failure (open included), SY_SUCCESS if none */
  int failed_round;                /* -1: none */
  int wrong_bytes;                 /* bytes of recv that differed from the expected */
  double seconds;
} rank_run_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t round_bytes(int round) {
  static const size_t sizes[] = {16, 1, 0, 300, 4096, 256 * 1024 + 5, 8, 65536 + 3, 40, 7};
  return sizes[round % 10];
}

static unsigned char pattern(int epoch, int rank, int round, size_t i) {
  return (unsigned char)(epoch * 61 + rank * 131 + round * 29 + (int)(i * 7) + (int)(i >> 8) * 3 + 1);
}

static sy_status_t open_boot(const job_t *job, int rank, int world, sy_boot_t **boot) {
  if (rank == job->direct_tcp_rank) return sy__boot_open_tcp(job->addr, job->port, rank, world, job->timeout_ms, boot);
  switch (job->transport) {
    case VIA_DIR: return sy__boot_open_dir(job->dir, rank, world, job->timeout_ms, boot);
    case VIA_TCP: return sy__boot_open_tcp(job->addr, job->port, rank, world, job->timeout_ms, boot);
    default: return sy__boot_open(rank, world, job->timeout_ms, boot);
  }
}

static void *rank_main(void *arg) {
  rank_run_t *run = arg;
  job_t *job = run->job;
  sy__log_set_rank(run->rank);
  run->failed_round = -1;
  run->status = SY_SUCCESS;
  double t0 = now_s();
  if (run->rank == job->late_rank) usleep((useconds_t)job->late_ms * 1000);
  sy_boot_t *boot = NULL;
  run->open_status = open_boot(job, run->rank, run->world, &boot);
  run->status = run->open_status;
  for (int round = 0; run->status == SY_SUCCESS && round < job->rounds; round++) {
    if (run->rank == job->skip_rank && round >= job->skip_round) {
      /* Never arrives in this round; stays connected until the others have given up. */
      double give_up = now_s() + 30;
      while (__atomic_load_n(&job->finished, __ATOMIC_ACQUIRE) < job->world - 1 && now_s() < give_up) usleep(5000);
      break;
    }
    size_t bytes = round_bytes(round);
    size_t mine = bytes + (run->rank == job->odd_rank && round == job->odd_round);
    unsigned char *send = malloc(mine + 1);
    unsigned char *recv = malloc((size_t)run->world * mine + 1);
    for (size_t i = 0; i < mine; i++) send[i] = pattern(job->epoch, run->rank, round, i);
    memset(recv, 0xEE, (size_t)run->world * mine + 1);
    sy_status_t st = (round % 4 == 3) ? sy__boot_barrier(boot) : sy__boot_allgather(boot, send, recv, mine);
    if (st != SY_SUCCESS) {
      run->status = st;
      run->failed_round = round;
    } else if (round % 4 != 3) {
      for (int r = 0; r < run->world; r++)
        for (size_t i = 0; i < bytes; i++)
          run->wrong_bytes += recv[(size_t)r * bytes + i] != pattern(job->epoch, r, round, i);
      run->wrong_bytes += recv[(size_t)run->world * bytes] != 0xEE; /* nothing written past the end */
    }
    free(send);
    free(recv);
  }
  sy__boot_close(boot);
  run->seconds = now_s() - t0;
  __atomic_fetch_add(&job->finished, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Runs one thread per entry of claims (rank, world pairs; world -1: job->world). */
static void run_ranks(job_t *job, int count, const int *ranks, const int *worlds, rank_run_t *runs) {
  pthread_t threads[64];
  job->finished = 0;
  for (int i = 0; i < count; i++) {
    runs[i] = (rank_run_t){job, ranks[i], worlds && worlds[i] > 0 ? worlds[i] : job->world, 0, 0, -1, 0, 0};
    pthread_create(&threads[i], NULL, rank_main, &runs[i]);
  }
  for (int i = 0; i < count; i++) pthread_join(threads[i], NULL);
}

static void run_all(job_t *job, rank_run_t *runs) {
  int ranks[64];
  for (int r = 0; r < job->world; r++) ranks[r] = r;
  run_ranks(job, job->world, ranks, NULL, runs);
}

static job_t base_job(transport_t transport, const char *dir, int port, int world) {
  job_t job;
  memset(&job, 0, sizeof job);
  job.transport = transport;
  job.dir = dir;
  job.addr = "127.0.0.1";
  job.port = port;
  job.world = world;
  job.timeout_ms = 20000; /* generous: a loaded machine must not time out a healthy job */
  job.rounds = 12;
  job.skip_rank = job.odd_rank = job.late_rank = job.direct_tcp_rank = -1;
  return job;
}

/* A TCP port nobody listens on right now. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

static char work_dir[256];

static void make_dir(char *out, size_t bytes, const char *name) {
  snprintf(out, bytes, "%s/%s.XXXXXX", work_dir, name);
  if (!mkdtemp(out)) perror("mkdtemp");
}

static int count_entries(const char *dir) {
  int count = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) count += e->d_name[0] != '.';
  if (d) closedir(d);
  return count;
}

static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[512];
  while (d && (e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

/* Log capture: the warn lines of one case go to a file, returned as text (caller frees). */
static char log_path[300];
static void log_capture_start(void) {
  snprintf(log_path, sizeof log_path, "%s/log", work_dir);
  unlink(log_path);
  setenv("SY_DEBUG", "WARN", 1);
  setenv("SY_DEBUG_FILE", log_path, 1);
  sy__log_reset();
}
static char *log_capture_end(void) {
  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  static char text[16384];
  text[0] = '\0';
  FILE *f = fopen(log_path, "r");
  if (f) {
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
  }
  unlink(log_path);
  return text;
}
static void check_text_has(const char *log, const char *needle, int line) {
  if (!strstr(log, needle)) fprintf(stderr, "line %d: log lacks \"%s\"; log:\n%s\n", line, needle, log);
  CHECK(strstr(log, needle) != NULL);
}
#define CHECK_LOG_HAS(log, needle) check_text_has(log, needle, __LINE__)

static void check_all_ok(const rank_run_t *runs, int count, const char *what) {
  for (int i = 0; i < count; i++) {
    if (runs[i].status != SY_SUCCESS || runs[i].wrong_bytes)
      fprintf(stderr, "%s: rank %d: %s at round %d, %d wrong bytes\n", what, runs[i].rank,
              sy_status_name(runs[i].status), runs[i].failed_round, runs[i].wrong_bytes);
    CHECK_OK(runs[i].status);
    CHECK_EQ_INT(runs[i].wrong_bytes, 0);
  }
}

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

static void test_tcp_misconfigured(void) {
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

  /* Two processes claim rank 1: every rank fails with SY_ERR_BOOTSTRAP naming it. */
  job = base_job(VIA_TCP, NULL, free_port(), 3);
  job.timeout_ms = 10000;
  const int dup[] = {0, 1, 1};
  log_capture_start();
  double t0 = now_s();
  run_ranks(&job, 3, dup, NULL, runs);
  log = log_capture_end();
  for (int i = 0; i < 3; i++) CHECK_STATUS(runs[i].open_status, SY_ERR_BOOTSTRAP);
  CHECK(now_s() - t0 < 8);
  CHECK_LOG_HAS(log, "rank 1 connected twice");

  /* A rank with the wrong world size. */
  job = base_job(VIA_TCP, NULL, free_port(), 2);
  job.timeout_ms = 10000;
  const int ranks[] = {0, 1}, worlds[] = {2, 3};
  log_capture_start();
  run_ranks(&job, 2, ranks, worlds, runs);
  log = log_capture_end();
  for (int i = 0; i < 2; i++) CHECK_STATUS(runs[i].open_status, SY_ERR_BOOTSTRAP);
  CHECK_LOG_HAS(log, "has world size 3, rank 0 has 2");
}

/* sy__boot_open picks the transport from the environment. */
static void test_open_from_env(void) {
  const char *vars[] = {"SY_BOOT_DIR", "SY_BOOT_ADDR", "SY_BOOT_PORT", "MASTER_ADDR", "MASTER_PORT"};
  for (int i = 0; i < 5; i++) unsetenv(vars[i]);
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
  for (int i = 0; i < 5; i++) unsetenv(vars[i]);
}

static void test_arguments(void) {
  sy_boot_t *boot = NULL;
  char dir[300];
  make_dir(dir, sizeof dir, "args");
  CHECK_STATUS(sy__boot_open_dir(dir, 2, 2, 1000, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_dir(dir, 0, 0, 1000, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_dir(dir, 0, 2, 0, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_dir(NULL, 0, 2, 1000, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_tcp("127.0.0.1", 0, 1, 2, 1000, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_tcp(NULL, 5000, 1, 2, 1000, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open(-1, 2, 1000, &boot), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__boot_open_trivial(NULL), SY_ERR_INVALID_ARG);
  char missing[320];
  snprintf(missing, sizeof missing, "%s/none", dir);
  CHECK_STATUS(sy__boot_open_dir(missing, 0, 2, 1000, &boot), SY_ERR_BOOTSTRAP);
  /* A name that does not resolve (at once, or after retries where resolution fails "temporarily"). */
  CHECK_STATUS(sy__boot_open_tcp("host.invalid", 5000, 1, 2, 300, &boot), SY_ERR_BOOTSTRAP);
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
  test_tcp_misconfigured();
  test_open_from_env();

  remove_dir(work_dir);
  return check_report();
}
