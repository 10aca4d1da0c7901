/*
 * test_syrun.c — the built syrun launcher (SY_BIN_DIR/syrun), run on small shell commands and on this binary
 * in child modes: rank variables and "[rank N] " prefixes on stdout and stderr, whole lines only (chunked
 * writes, partial last lines, long lines), the private SY_BOOT_DIR (exists while running, gone afterwards,
 * on every path), --gpus, the NVLS variables, failure propagation (exit status, signals, stopping the
 * others quickly, or letting them finish with --keep-going), --timeout, SIGTERM and SIGKILL to syrun, usage
 * errors, a missing program, and the rendezvous under syrun: healthy, and with a rank that never joins (rank 0
 * times out naming rank 1).
 */
#include "boot/boot.h"
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SYRUN SY_BIN_DIR "/syrun"

static char work_dir[256];
static char self_path[4096];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return strdup("");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)size + 1);
  size_t n = fread(text, 1, (size_t)size, f);
  text[n] = '\0';
  fclose(f);
  return text;
}

typedef struct result {
  int code; /* exit status, 128 + signal, or -1 when it had to be killed */
  double seconds;
  char *out, *err;
} result_t;

typedef struct started {
  pid_t pid;
  double t0;
  char out_path[300], err_path[300];
} started_t;

/* Starts syrun with args; env: "NAME=VALUE" sets, "NAME" unsets (in the child only). */
static started_t start_syrun(const char *const *args, const char *const *env) {
  started_t s;
  static int serial;
  serial++;
  snprintf(s.out_path, sizeof s.out_path, "%s/out.%d", work_dir, serial);
  snprintf(s.err_path, sizeof s.err_path, "%s/err.%d", work_dir, serial);
  s.t0 = now_s();
  fflush(NULL);
  s.pid = fork();
  if (s.pid == 0) {
    for (; env && *env; env++) {
      const char *eq = strchr(*env, '=');
      if (!eq) {
        unsetenv(*env);
        continue;
      }
      char name[64];
      memcpy(name, *env, (size_t)(eq - *env));
      name[eq - *env] = '\0';
      setenv(name, eq + 1, 1);
    }
    int out = open(s.out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = open(s.err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(out, 1);
    dup2(err, 2);
    const char *argv[64];
    int n = 0;
    argv[n++] = SYRUN;
    for (; *args && n < 63; args++) argv[n++] = *args;
    argv[n] = NULL;
    execv(SYRUN, (char *const *)argv);
    fprintf(stderr, "cannot run %s: %s\n", SYRUN, strerror(errno));
    _exit(126);
  }
  return s;
}

static result_t wait_syrun(started_t *s, double limit_s) {
  result_t r = {-1, 0, NULL, NULL};
  int status = 0;
  for (;;) {
    pid_t done = waitpid(s->pid, &status, WNOHANG);
    if (done == s->pid) {
      r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (now_s() - s->t0 > limit_s) {
      fprintf(stderr, "syrun ran past %.0f s: killing it\n", limit_s);
      kill(s->pid, SIGKILL);
      waitpid(s->pid, &status, 0);
      break;
    }
    usleep(5000);
  }
  r.seconds = now_s() - s->t0;
  r.out = read_file(s->out_path);
  r.err = read_file(s->err_path);
  unlink(s->out_path);
  unlink(s->err_path);
  return r;
}

static result_t run_syrun(const char *const *args, const char *const *env, double limit_s) {
  started_t s = start_syrun(args, env);
  return wait_syrun(&s, limit_s);
}

static void free_result(result_t *r) {
  free(r->out);
  free(r->err);
}

static int count_lines(const char *text) {
  int n = 0;
  for (; *text; text++) n += *text == '\n';
  return n;
}

static void check_has(const char *text, const char *needle, int line) {
  if (!strstr(text, needle)) fprintf(stderr, "line %d: output lacks \"%s\"; output:\n%s\n", line, needle, text);
  CHECK(strstr(text, needle) != NULL);
}
#define CHECK_HAS(text, needle) check_has(text, needle, __LINE__)

static int dir_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---------------------------------------------------------------------------------------------------- */
/* Child modes: this binary run by syrun                                                                  */
/* ---------------------------------------------------------------------------------------------------- */
/* Rank 1 never calls the rendezvous; rank 0 does and must time out naming it. */
static int child_rendezvous_absent(void) {
  sy_launch_info_t info;
  if (sy__launch_info_from_env(&info) != SY_SUCCESS) return 2;
  if (info.rank != 0) {
    sleep(30); /* syrun stops it once rank 0 fails */
    return 0;
  }
  long long timeout_ms;
  if (sy__env_int(SY_ENVID_SY_BOOT_TIMEOUT_MS, &timeout_ms) != SY_SUCCESS) return 2;
  sy_boot_t *boot;
  sy_status_t st = sy__boot_open(info.rank, info.world_size, (uint64_t)timeout_ms, &boot);
  if (st == SY_SUCCESS) {
    int mine = 42, all[2];
    st = sy__boot_allgather(boot, &mine, all, sizeof mine);
    sy__boot_close(boot);
  }
  printf("rendezvous status %s\n", sy_status_name(st));
  return st == SY_SUCCESS ? 0 : 1;
}

/* Every rank: launch info as syrun set it, then rounds of distinct data through sy__boot_open's directory. */
static int child_rendezvous_ok(void) {
  sy_launch_info_t info;
  if (sy__launch_info_from_env(&info) != SY_SUCCESS) return 2;
  if (strcmp(info.source, "syrun") || info.local_rank != info.rank || info.local_size != info.world_size ||
      info.device != info.rank) {
    printf("bad launch info: %s %d/%d local %d/%d device %d\n", info.source, info.rank, info.world_size,
           info.local_rank, info.local_size, info.device);
    return 3;
  }
  sy_boot_t *boot;
  if (sy__boot_open(info.rank, info.world_size, 20000, &boot) != SY_SUCCESS) return 4;
  int wrong = 0;
  for (int round = 0; round < 6; round++) {
    int words = 1 + round * 100;
    int *mine = malloc(sizeof(int) * (size_t)words), *all = malloc(sizeof(int) * (size_t)words * info.world_size);
    for (int i = 0; i < words; i++) mine[i] = info.rank * 100000 + round * 1000 + i;
    if (sy__boot_allgather(boot, mine, all, sizeof(int) * (size_t)words) != SY_SUCCESS) return 5;
    for (int r = 0; r < info.world_size; r++)
      for (int i = 0; i < words; i++) wrong += all[r * words + i] != r * 100000 + round * 1000 + i;
    free(mine);
    free(all);
    if (sy__boot_barrier(boot) != SY_SUCCESS) return 6;
  }
  sy__boot_close(boot);
  printf("rank %d of %d: rendezvous ok, %d wrong\n", info.rank, info.world_size, wrong);
  return wrong ? 7 : 0;
}

/* Lines written in odd-sized pieces (split mid-line), to stdout and stderr, then a line longer than syrun's
 * buffer and a last line without its newline. */
static int child_spew(void) {
  int rank = atoi(getenv("SY_RANK") ? getenv("SY_RANK") : "0");
  char *text = malloc(1 << 20);
  size_t len = 0;
  for (int i = 0; i < 400; i++)
    len += (size_t)sprintf(
        text + len, "spew %d %d %.*s\n", rank, i, 20 + (i * 37) % 150,
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
        "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz");
  for (size_t at = 0, piece = 1; at < len; at += piece, piece = piece % 97 + 13) {
    size_t n = at + piece > len ? len - at : piece;
    if (write(1, text + at, n) < 0 || write(2, text + at, n) < 0) return 1;
  }
  memset(text, 'L', 70000);
  text[70000] = '\n';
  if (write(1, text, 70001) < 0) return 1;
  printf("last %d", rank);
  free(text);
  return 0;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Cases                                                                                                  */
/* ---------------------------------------------------------------------------------------------------- */
static void test_hello(void) {
  result_t r = run_syrun(ARGS("-n", "3", "sh", "-c",
                              "echo hello $SY_RANK $SY_WORLD_SIZE $SY_LOCAL_RANK $SY_LOCAL_SIZE "
                              "$SY_DEVICE; echo oops $SY_RANK >&2"),
                         NULL, 60);
  CHECK_EQ_INT(r.code, 0);
  CHECK_EQ_INT(count_lines(r.out), 3);
  CHECK_HAS(r.out, "[rank 0] hello 0 3 0 3 0\n");
  CHECK_HAS(r.out, "[rank 1] hello 1 3 1 3 1\n");
  CHECK_HAS(r.out, "[rank 2] hello 2 3 2 3 2\n");
  CHECK_EQ_INT(count_lines(r.err), 3);
  CHECK_HAS(r.err, "[rank 0] oops 0\n");
  CHECK_HAS(r.err, "[rank 2] oops 2\n");
  free_result(&r);

  /* "--" before PROGRAM, "-n4" and "--np=" spellings. */
  r = run_syrun(ARGS("-n1", "--", "sh", "-c", "echo one"), NULL, 60);
  CHECK_EQ_INT(r.code, 0);
  CHECK_EQ_STR(r.out, "[rank 0] one\n");
  free_result(&r);
  r = run_syrun(ARGS("--np=2", "sh", "-c", "echo two"), NULL, 60);
  CHECK_EQ_INT(r.code, 0);
  CHECK_EQ_INT(count_lines(r.out), 2);
  free_result(&r);
}

static void test_lines(void) {
  const int ranks = 4;
  result_t r = run_syrun(ARGS("-n", "4", self_path, "--spew"), NULL, 60);
  CHECK_EQ_INT(r.code, 0);
  for (int stream = 0; stream < 2; stream++) {
    const char *text = stream ? r.err : r.out;
    int next[4] = {0, 0, 0, 0}, bad = 0, long_lines = 0, last_lines = 0;
    for (const char *line = text; *line;) {
      const char *end = strchr(line, '\n');
      if (!end) {
        bad++;
        break;
      }
      int rank = -1, body_at = 0;
      if (sscanf(line, "[rank %d] %n", &rank, &body_at) != 1 || rank < 0 || rank >= ranks || body_at == 0) {
        bad++;
      } else {
        const char *body = line + body_at;
        int from, index, pos = 0;
        if (body[0] == 'L') {
          long_lines++;
        } else if (!strncmp(body, "last ", 5)) {
          last_lines += atoi(body + 5) == rank && stream == 0;
        } else if (sscanf(body, "spew %d %d %n", &from, &index, &pos) == 2 && from == rank && index == next[rank] &&
                   end - (body + pos) == 20 + (index * 37) % 150) {
          next[rank]++;
        } else {
          bad++;
        }
      }
      line = end + 1;
    }
    CHECK_EQ_INT(bad, 0);
    for (int k = 0; k < ranks; k++) CHECK_EQ_INT(next[k], 400);
    if (stream == 0) {
      /* 70000 bytes of one line come out as two prefixed pieces (64 KiB, then the rest). */
      CHECK_EQ_INT(long_lines, 2 * ranks);
      CHECK_EQ_INT(last_lines, ranks);
    }
  }
  free_result(&r);
}

static void test_boot_dir(void) {
  char tmp[300];
  snprintf(tmp, sizeof tmp, "TMPDIR=%s", work_dir);
  result_t r = run_syrun(ARGS("-n", "2", "sh", "-c", "test -d \"$SY_BOOT_DIR\" && echo \"dir $SY_BOOT_DIR\""),
                         ARGS(tmp, "SY_BOOT_DIR=/elsewhere"), 60);
  CHECK_EQ_INT(r.code, 0);
  CHECK_EQ_INT(count_lines(r.out), 2);
  char dir0[400] = "", dir1[400] = "";
  const char *at0 = strstr(r.out, "[rank 0] dir "), *at1 = strstr(r.out, "[rank 1] dir ");
  CHECK(at0 && at1);
  if (at0 && at1) {
    sscanf(at0, "[rank 0] dir %399s", dir0);
    sscanf(at1, "[rank 1] dir %399s", dir1);
    CHECK_EQ_STR(dir0, dir1);
    CHECK(strncmp(dir0, work_dir, strlen(work_dir)) == 0); /* under $TMPDIR */
    CHECK(!dir_exists(dir0));                              /* removed at the end */
  }
  free_result(&r);

  /* Removed after a failure too, with the files a rank left in it. */
  r = run_syrun(ARGS("-n", "2", "sh", "-c",
                     "echo \"dir $SY_BOOT_DIR\"; mkdir \"$SY_BOOT_DIR/sub$SY_RANK\"; "
                     "echo x > \"$SY_BOOT_DIR/sub$SY_RANK/f\"; exit 5"),
                ARGS(tmp), 60);
  CHECK_EQ_INT(r.code, 5);
  const char *at = strstr(r.out, "dir ");
  CHECK(at != NULL);
  if (at) {
    sscanf(at, "dir %399s", dir0);
    CHECK(!dir_exists(dir0));
  }
  free_result(&r);
}

static void test_env(void) {
  result_t r = run_syrun(ARGS("-n", "3", "--gpus", "5,6,7", "sh", "-c",
                              "echo dev $SY_DEVICE nvls $NVSHMEM_DISABLE_NVLS nccl $NCCL_NVLS_ENABLE"),
                         ARGS("NVSHMEM_DISABLE_NVLS", "NCCL_NVLS_ENABLE"), 60);
  CHECK_EQ_INT(r.code, 0);
  CHECK_HAS(r.out, "[rank 0] dev 5 nvls 1 nccl 0\n");
  CHECK_HAS(r.out, "[rank 1] dev 6 nvls 1 nccl 0\n");
  CHECK_HAS(r.out, "[rank 2] dev 7 nvls 1 nccl 0\n");
  free_result(&r);
  /* Extra devices are fine; values the user set are kept. */
  r = run_syrun(ARGS("-n", "2", "--gpus=3,1,0", "sh", "-c", "echo dev $SY_DEVICE nvls $NVSHMEM_DISABLE_NVLS"),
                ARGS("NVSHMEM_DISABLE_NVLS=0"), 60);
  CHECK_EQ_INT(r.code, 0);
  CHECK_HAS(r.out, "[rank 0] dev 3 nvls 0\n");
  CHECK_HAS(r.out, "[rank 1] dev 1 nvls 0\n");
  free_result(&r);
  /* stdin is /dev/null: a rank reading it sees end of file at once. */
  r = run_syrun(ARGS("-n", "1", "sh", "-c", "cat; echo done"), NULL, 60);
  CHECK_EQ_INT(r.code, 0);
  CHECK_EQ_STR(r.out, "[rank 0] done\n");
  free_result(&r);
}

/* Whether a process is gone (not even a zombie of ours). */
static int gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

/* "[rank N] pid P" lines: every P must be gone. Returns how many there were. */
static int check_pids_gone(const char *out) {
  int count = 0;
  for (const char *at = strstr(out, "pid "); at; at = strstr(at + 4, "pid ")) {
    int pid = atoi(at + 4);
    if (pid <= 0) continue;
    count++;
    if (!gone(pid)) fprintf(stderr, "process %d outlived syrun\n", pid);
    CHECK(gone(pid));
  }
  return count;
}

/* Shell: wait (up to 20 s) until `n` ranks have run READY, i.e. said their pid and touched a file. */
#define READY "echo pid $$; touch \"$SY_BOOT_DIR/ready.$SY_RANK\"; "
#define AWAIT(n)                                                   \
  "i=0; while [ $(ls \"$SY_BOOT_DIR\" | grep -c '^ready') -lt " #n \
  " ] && [ $i -lt 400 ]; do sleep 0.05; "                          \
  "i=$((i+1)); done; "

static void test_failures(void) {
  /* Rank 1 exits 3 while the others sleep: syrun stops them and returns 3, quickly. */
  result_t r =
      run_syrun(ARGS("-n", "3", "sh", "-c", "if [ $SY_RANK = 1 ]; then " AWAIT(2) "exit 3; fi; " READY "exec sleep 30"),
                NULL, 60);
  CHECK_EQ_INT(r.code, 3);
  CHECK(r.seconds < 10);
  CHECK_HAS(r.err, "syrun: rank 1 exited with status 3; stopping the others\n");
  CHECK_EQ_INT(check_pids_gone(r.out), 2);
  free_result(&r);

  /* Ranks that fail on their own while the others are being stopped are reported too (not those SIGTERM ends):
   * rank 1 exits 4 once the SIGTERM comes, rank 2 dies of it; the status stays the first failure's. */
  r = run_syrun(ARGS("-n", "3", "sh", "-c",
                     "if [ $SY_RANK = 0 ]; then " AWAIT(
                         2) "exit 3; fi; if [ $SY_RANK = 1 ]; then trap 'got=1' TERM; " READY
                            "while [ -z \"$got\" ]; do sleep 0.05; done; exit 4; fi; " READY "exec sleep 30"),
                NULL, 60);
  CHECK_EQ_INT(r.code, 3);
  CHECK_HAS(r.err, "syrun: rank 0 exited with status 3; stopping the others\n");
  CHECK_HAS(r.err, "syrun: rank 1 exited with status 4\n");
  CHECK(strstr(r.err, "rank 2") == NULL);
  free_result(&r);

  /* Every rank fails at once (none ended by the SIGTERM): each is reported, the status is the one first seen. */
  r = run_syrun(ARGS("-n", "3", "sh", "-c", "trap '' TERM; " READY AWAIT(3) "exit $((SY_RANK + 3))"), NULL, 60);
  CHECK(r.code >= 3 && r.code <= 5);
  char first_line[80];
  snprintf(first_line, sizeof first_line, "syrun: rank %d exited with status %d; stopping the others\n", r.code - 3,
           r.code);
  CHECK_HAS(r.err, first_line);
  CHECK_HAS(r.err, "syrun: rank 0 exited with status 3");
  CHECK_HAS(r.err, "syrun: rank 1 exited with status 4");
  CHECK_HAS(r.err, "syrun: rank 2 exited with status 5");
  free_result(&r);

  /* A rank killed by a signal: 128 + signal. SIGUSR1 ends a process without a core file. */
  r = run_syrun(
      ARGS("-n", "2", "sh", "-c", "if [ $SY_RANK = 0 ]; then " AWAIT(1) "kill -USR1 $$; fi; " READY "exec sleep 30"),
      NULL, 60);
  CHECK_EQ_INT(r.code, 128 + SIGUSR1);
  CHECK(r.seconds < 10);
  CHECK_EQ_INT(check_pids_gone(r.out), 1);
  char needle[80];
  snprintf(needle, sizeof needle, "syrun: rank 0 was killed by signal %d", SIGUSR1);
  CHECK_HAS(r.err, needle);
  free_result(&r);

  /* A rank that ignores SIGTERM is killed after the grace period. */
  r = run_syrun(
      ARGS("-n", "2", "sh", "-c",
           "if [ $SY_RANK = 0 ]; then " AWAIT(1) "exit 4; fi; trap '' TERM; " READY "while :; do sleep 0.1; done"),
      NULL, 60);
  CHECK_EQ_INT(r.code, 4);
  CHECK(r.seconds < 15);
  CHECK_HAS(r.err, "syrun: killing rank 1 (still running");
  CHECK_EQ_INT(check_pids_gone(r.out), 1);
  free_result(&r);

  /* The program does not exist: 127, said on the rank's stderr. */
  r = run_syrun(ARGS("-n", "2", "/nonexistent/program", "arg"), NULL, 60);
  CHECK_EQ_INT(r.code, 127);
  CHECK_HAS(r.err, "syrun: cannot run /nonexistent/program");
  free_result(&r);

  /* --timeout: everything is stopped and syrun says so, exit 124. */
  r = run_syrun(ARGS("-n", "2", "--timeout", "1", "sh", "-c", "echo pid $$; exec sleep 30"), NULL, 60);
  CHECK_EQ_INT(r.code, 124);
  CHECK(r.seconds < 10);
  CHECK_HAS(r.err, "syrun: the job ran longer than --timeout 1 s; stopping all ranks");
  CHECK_EQ_INT(check_pids_gone(r.out), 2);
  free_result(&r);

  /* --keep-going: rank 1 fails at once, the others finish their own work and every failure is reported; the
   * status is the first failure's. */
  r = run_syrun(ARGS("-n", "3", "--keep-going", "sh", "-c",
                     "if [ $SY_RANK = 1 ]; then exit 3; fi; sleep 0.5; echo done $SY_RANK; "
                     "if [ $SY_RANK = 2 ]; then exit 5; fi"),
                NULL, 60);
  CHECK_EQ_INT(r.code, 3);
  CHECK_HAS(r.out, "[rank 0] done 0\n");
  CHECK_HAS(r.out, "[rank 2] done 2\n");
  CHECK_HAS(r.err, "syrun: rank 1 exited with status 3; the others run on (--keep-going)\n");
  CHECK_HAS(r.err, "syrun: rank 2 exited with status 5\n");
  CHECK(strstr(r.err, "stopping") == NULL);
  free_result(&r);

  /* All ranks exit 0 at different times: 0. */
  r = run_syrun(ARGS("-n", "3", "sh", "-c", "sleep 0.$SY_RANK; exit 0"), NULL, 60);
  CHECK_EQ_INT(r.code, 0);
  CHECK_EQ_STR(r.err, "");
  free_result(&r);
}

static void test_sigterm(void) {
  char tmp[300];
  snprintf(tmp, sizeof tmp, "TMPDIR=%s", work_dir);
  started_t s = start_syrun(ARGS("-n", "2", "sh", "-c", "echo pid $$ dir $SY_BOOT_DIR; exec sleep 30"), ARGS(tmp));
  /* Wait until both ranks have said who they are. */
  double give_up = now_s() + 30;
  char *out = NULL;
  while (now_s() < give_up) {
    free(out);
    out = read_file(s.out_path);
    if (count_lines(out) == 2) break;
    usleep(10000);
  }
  CHECK_EQ_INT(count_lines(out), 2);
  char dir[400] = "";
  const char *at = strstr(out, " dir ");
  if (at) sscanf(at, " dir %399s", dir);
  CHECK(dir_exists(dir));
  kill(s.pid, SIGTERM);
  result_t r = wait_syrun(&s, 30);
  CHECK_EQ_INT(r.code, 128 + SIGTERM);
  CHECK(r.seconds < 20);
  CHECK(!dir_exists(dir));
  CHECK_EQ_INT(check_pids_gone(out), 2);
  CHECK_HAS(r.err, "syrun: got signal 15; passing it to every rank");
  free(out);
  free_result(&r);
}

/* SIGKILL to syrun: nothing it started outlives it (the ranks, what they started, its watcher), within two
 * seconds, and its directory goes with them. This process adopts the orphans (a subreaper) so that it can
 * reap them and tell "gone" from "a zombie nobody reaped". */
static void test_sigkill(void) {
  char tmp[300];
  snprintf(tmp, sizeof tmp, "TMPDIR=%s", work_dir);
  CHECK_EQ_INT(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  started_t s =
      start_syrun(ARGS("-n", "2", "sh", "-c", "sleep 30 & echo pid $!; echo pid $$ dir $SY_BOOT_DIR; wait"), ARGS(tmp));
  double give_up = now_s() + 30;
  char *out = NULL;
  while (now_s() < give_up) {
    free(out);
    out = read_file(s.out_path);
    if (count_lines(out) == 4) break;
    usleep(10000);
  }
  CHECK_EQ_INT(count_lines(out), 4);
  char dir[400] = "";
  const char *at = strstr(out, " dir ");
  if (at) sscanf(at, " dir %399s", dir);
  CHECK(dir_exists(dir));
  kill(s.pid, SIGKILL);
  result_t r = wait_syrun(&s, 30);
  CHECK_EQ_INT(r.code, 128 + SIGKILL);
  const double killed_at = now_s();
  int children = 1;
  while (now_s() < killed_at + 2 && (children || dir_exists(dir))) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    children = !(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD);
    usleep(10000);
  }
  CHECK_EQ_INT(children, 0);
  CHECK(!dir_exists(dir));
  CHECK_EQ_INT(check_pids_gone(out), 4);
  CHECK_EQ_INT(prctl(PR_SET_CHILD_SUBREAPER, 0), 0);
  free(out);
  free_result(&r);
}

static void test_usage(void) {
  const char *const *const bad[] = {
      ARGS("sh", "-c", "true"),                 /* no -n */
      ARGS("-n", "0", "true"),                  /* too few ranks */
      ARGS("-n", "x", "true"),                  /* not a number */
      ARGS("-n", "2"),                          /* no program */
      ARGS("-n"),                               /* no value */
      ARGS("--bogus", "-n", "2", "true"),       /* unknown option */
      ARGS("-n", "3", "--gpus", "1,2", "true"), /* fewer devices than ranks */
      ARGS("-n", "2", "--gpus", "1,,2", "true"),
      ARGS("-n", "2", "--gpus", "a,b", "true"),
      ARGS("-n", "2", "--timeout", "-1", "true"),
      ARGS("-n", "100000", "true"),
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    result_t r = run_syrun(bad[i], NULL, 60);
    if (r.code != 2) fprintf(stderr, "usage case %zu: exit %d\n", i, r.code);
    CHECK_EQ_INT(r.code, 2);
    CHECK_HAS(r.err, "usage: syrun -n N");
    free_result(&r);
  }
  result_t r = run_syrun(ARGS("--help"), NULL, 60);
  CHECK_EQ_INT(r.code, 0);
  CHECK_HAS(r.out, "usage: syrun -n N");
  free_result(&r);
  r = run_syrun(ARGS("-h"), NULL, 60);
  CHECK_EQ_INT(r.code, 0);
  free_result(&r);
}

static void test_rendezvous_under_syrun(void) {
  result_t r = run_syrun(ARGS("-n", "4", self_path, "--rendezvous-ok"), NULL, 60);
  CHECK_EQ_INT(r.code, 0);
  for (int k = 0; k < 4; k++) {
    char needle[64];
    snprintf(needle, sizeof needle, "[rank %d] rank %d of 4: rendezvous ok, 0 wrong\n", k, k);
    CHECK_HAS(r.out, needle);
  }
  free_result(&r);

  /* Rank 1 never joins: rank 0 gives up after SY_BOOT_TIMEOUT_MS, names rank 1, and syrun stops rank 1. */
  r = run_syrun(ARGS("-n", "2", self_path, "--rendezvous-child"), ARGS("SY_DEBUG=WARN", "SY_BOOT_TIMEOUT_MS=500"), 60);
  CHECK(r.code != 0);
  CHECK_EQ_INT(r.code, 1);
  CHECK(r.seconds < 10);
  CHECK_HAS(r.err, "[rank 0] sy warn: rendezvous: round 0: rank 1 never arrived within 500 ms (dir ");
  CHECK_HAS(r.out, "[rank 0] rendezvous status SY_ERR_TIMEOUT\n");
  CHECK_HAS(r.err, "syrun: rank 0 exited with status 1; stopping the others\n");
  free_result(&r);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--rendezvous-child")) return child_rendezvous_absent();
  if (argc > 1 && !strcmp(argv[1], "--rendezvous-ok")) return child_rendezvous_ok();
  if (argc > 1 && !strcmp(argv[1], "--spew")) return child_spew();

  ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
  if (n <= 0) {
    perror("readlink /proc/self/exe");
    return 1;
  }
  self_path[n] = '\0';
  const char *tmp = getenv("TMPDIR");
  snprintf(work_dir, sizeof work_dir, "%s/sy-syrun-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(work_dir)) {
    perror("mkdtemp");
    return 1;
  }
  unsetenv("SY_BOOT_DIR");

  test_hello();
  test_lines();
  test_boot_dir();
  test_env();
  test_failures();
  test_sigterm();
  test_sigkill();
  test_usage();
  test_rendezvous_under_syrun();

  rmdir(work_dir);
  return check_report();
}
