/*
 * rendezvous_test.h — what the boot allgather tests share (test_rendezvous.c, test_rendezvous_tcp.c): ranks as
 * threads, each opening a boot (directory, TCP or from the environment) and running rounds of distinct data
 * checked byte for byte; per-thread claims (rank, world size, secret, start delay) for the misconfigured cases;
 * free ports, scratch directories and the capture of the log's lines.
 */
#ifndef SY_TEST_RENDEZVOUS_TEST_H
#define SY_TEST_RENDEZVOUS_TEST_H

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
  const char *secret;  /* VIA_TCP and direct_tcp_rank: every rank's secret unless its claim says (NULL: none) */
  int finished;        /* ranks done (atomic): the skipping rank waits for the others before closing */
} job_t;

/* What one thread claims to be: a rank, a world size (<= 0: the job's), a secret (NULL: the job's; "": none),
 * and how late it opens. */
typedef struct claim {
  int rank, world;
  const char *secret;
  int delay_ms;
} claim_t;

typedef struct rank_run {
  job_t *job;
  int rank;                        /* the rank this thread claims */
  int world;                       /* the world size it claims */
  const char *secret;              /* the secret it holds (NULL or "": none) */
  int delay_ms;                    /* it opens this late */
  sy_status_t open_status, status; /* status: first failure (open included), SY_SUCCESS if none */
  int failed_round;                /* -1: none */
  int wrong_bytes;                 /* bytes of recv that differed from the expected */
  double seconds;
} rank_run_t;

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline size_t round_bytes(int round) {
  static const size_t sizes[] = {16, 1, 0, 300, 4096, 256 * 1024 + 5, 8, 65536 + 3, 40, 7};
  return sizes[round % 10];
}

static inline unsigned char pattern(int epoch, int rank, int round, size_t i) {
  return (unsigned char)(epoch * 61 + rank * 131 + round * 29 + (int)(i * 7) + (int)(i >> 8) * 3 + 1);
}

static inline sy_status_t open_boot(const job_t *job, const rank_run_t *run, sy_boot_t **boot) {
  int rank = run->rank, world = run->world;
  if (rank == job->direct_tcp_rank || job->transport == VIA_TCP)
    return sy__boot_open_tcp(job->addr, job->port, rank, world, job->timeout_ms, run->secret, boot);
  if (job->transport == VIA_DIR) return sy__boot_open_dir(job->dir, rank, world, job->timeout_ms, boot);
  return sy__boot_open(rank, world, job->timeout_ms, boot);
}

static inline void *rank_main(void *arg) {
  rank_run_t *run = arg;
  job_t *job = run->job;
  sy__log_set_rank(run->rank);
  run->failed_round = -1;
  run->status = SY_SUCCESS;
  double t0 = now_s();
  if (run->rank == job->late_rank) usleep((useconds_t)job->late_ms * 1000);
  if (run->delay_ms > 0) usleep((useconds_t)run->delay_ms * 1000);
  sy_boot_t *boot = NULL;
  run->open_status = open_boot(job, run, &boot);
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

/* Starts one thread per claim (runs[i] and threads[i] for claims[i]); join_claims waits for them. */
static inline void start_claims(job_t *job, int count, const claim_t *claims, rank_run_t *runs, pthread_t *threads) {
  for (int i = 0; i < count; i++) {
    const claim_t *c = &claims[i];
    runs[i] = (rank_run_t){
        job, c->rank, c->world > 0 ? c->world : job->world, c->secret ? c->secret : job->secret, c->delay_ms, 0, 0, -1,
        0,   0};
    pthread_create(&threads[i], NULL, rank_main, &runs[i]);
  }
}
static inline void join_claims(int count, pthread_t *threads) {
  for (int i = 0; i < count; i++) pthread_join(threads[i], NULL);
}

/* Runs one thread per claim. */
static inline void run_claims(job_t *job, int count, const claim_t *claims, rank_run_t *runs) {
  pthread_t threads[64];
  job->finished = 0;
  start_claims(job, count, claims, runs, threads);
  join_claims(count, threads);
}

/* Runs one thread per entry of ranks (with worlds[i] when worlds is not NULL and it is > 0). */
static inline void run_ranks(job_t *job, int count, const int *ranks, const int *worlds, rank_run_t *runs) {
  claim_t claims[64];
  for (int i = 0; i < count; i++) claims[i] = (claim_t){ranks[i], worlds ? worlds[i] : 0, NULL, 0};
  run_claims(job, count, claims, runs);
}

static inline void run_all(job_t *job, rank_run_t *runs) {
  int ranks[64];
  for (int r = 0; r < job->world; r++) ranks[r] = r;
  run_ranks(job, job->world, ranks, NULL, runs);
}

static inline job_t base_job(transport_t transport, const char *dir, int port, int world) {
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
static inline int free_port(void) {
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

static inline void make_dir(char *out, size_t bytes, const char *name) {
  snprintf(out, bytes, "%s/%s.XXXXXX", work_dir, name);
  if (!mkdtemp(out)) perror("mkdtemp");
}

static inline int count_entries(const char *dir) {
  int count = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) count += e->d_name[0] != '.';
  if (d) closedir(d);
  return count;
}

static inline void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[1024];
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
static inline void log_capture_level(const char *level) {
  snprintf(log_path, sizeof log_path, "%s/log", work_dir);
  unlink(log_path);
  setenv("SY_DEBUG", level, 1);
  setenv("SY_DEBUG_FILE", log_path, 1);
  sy__log_reset();
}
static inline void log_capture_start(void) { log_capture_level("WARN"); }
static inline char *log_capture_end(void) {
  unsetenv("SY_DEBUG_FILE");
  setenv("SY_DEBUG", "WARN", 1);
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
static inline void check_text_has(const char *log, const char *needle, int line) {
  if (!strstr(log, needle)) fprintf(stderr, "line %d: log lacks \"%s\"; log:\n%s\n", line, needle, log);
  CHECK(strstr(log, needle) != NULL);
}
#define CHECK_LOG_HAS(log, needle) check_text_has(log, needle, __LINE__)

static inline void check_all_ok(const rank_run_t *runs, int count, const char *what) {
  for (int i = 0; i < count; i++) {
    if (runs[i].status != SY_SUCCESS || runs[i].wrong_bytes)
      fprintf(stderr, "%s: rank %d: %s at round %d, %d wrong bytes\n", what, runs[i].rank,
              sy_status_name(runs[i].status), runs[i].failed_round, runs[i].wrong_bytes);
    CHECK_OK(runs[i].status);
    CHECK_EQ_INT(runs[i].wrong_bytes, 0);
  }
}

#endif /* SY_TEST_RENDEZVOUS_TEST_H */
