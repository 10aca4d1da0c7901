/*
 * syrun.c — the one-node launcher: `syrun -n N [--gpus LIST] [--timeout SECONDS] [--] PROGRAM ARGS...`
 * starts N ranks of PROGRAM, each told who it is through SY_RANK / SY_WORLD_SIZE / SY_LOCAL_RANK /
 * SY_LOCAL_SIZE / SY_DEVICE and given a private directory (SY_BOOT_DIR) where the rendezvous
 * (src/boot/rendezvous.c) exchanges NVSHMEM's unique id. Output comes back line by line prefixed
 * "[rank N] ". The first rank to fail stops the others (with --keep-going the others run to their own end) and
 * its status becomes syrun's; the directory is removed on every path out (normal end, failure, timeout,
 * SIGINT/SIGTERM/SIGHUP). A SIGKILL of syrun takes the ranks with it (PR_SET_PDEATHSIG), and a watcher process
 * kills what they started and removes the directory.
 *
 * Shape: one thread, one poll() loop over every child's stdout and stderr pipe plus a self-pipe the signal
 * handlers write to (SIGCHLD included), so output, exits, signals and deadlines are handled in one place.
 * Each rank runs in its own process group, so stopping a rank stops what it started too.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "syrun_watch.h"

#define SYRUN_MAX_RANKS 256   /* one node; two pipes per rank stay well inside the default fd limit */
#define SYRUN_GRACE_MS  3000  /* SIGTERM, then this long, then SIGKILL */
#define SYRUN_DRAIN_MS  2000  /* after the last rank exits, how long leftovers may hold its output open */
#define SYRUN_LINE_MAX  65536 /* a longer line is passed on in pieces, each with its own prefix */
#define EXIT_USAGE      2
#define EXIT_TIMEOUT    124
#define EXIT_NOT_RUN    127
#define EXIT_SYRUN      1 /* syrun itself failed (pipe, fork, temp dir) */

static const char usage_text[] =
    "usage: syrun -n N [--gpus LIST] [--timeout SECONDS] [--keep-going] [--] PROGRAM [ARGS...]\n"
    "Starts N ranks of PROGRAM on this node for switchyard.\n"
    "  -n, --np N          number of ranks (1..256)\n"
    "  --gpus LIST         comma-separated CUDA devices, the i-th for rank i (default: rank i -> device i)\n"
    "  --timeout SECONDS   stop every rank and exit 124 when the job runs longer\n"
    "  --keep-going        when a rank fails, let the others run to their own end (--timeout still applies)\n"
    "  -h, --help          this text\n"
    "Each rank gets SY_RANK, SY_WORLD_SIZE, SY_LOCAL_RANK, SY_LOCAL_SIZE, SY_DEVICE and SY_BOOT_DIR (a private\n"
    "directory under $TMPDIR or /tmp, removed at the end), and NVSHMEM_DISABLE_NVLS=1, NCCL_NVLS_ENABLE=0\n"
    "unless already set. Its stdout and stderr come back line by line prefixed \"[rank N] \"; stdin is\n"
    "/dev/null. When a rank fails the others are stopped (SIGTERM, then SIGKILL; not with --keep-going) and\n"
    "syrun exits with the first failure's status (128 + signal for a signal); every failure is reported.\n"
    "Exit 2: bad usage; 124: --timeout; 127: PROGRAM could not be run.\n";

typedef struct options {
  int ranks;
  int *devices;     /* ranks entries */
  double timeout_s; /* 0: none */
  int keep_going;   /* a failing rank does not stop the others */
  char **program;   /* argv of PROGRAM, NULL-terminated */
} options_t;

typedef struct stream {
  int fd;     /* read end of the child's pipe; -1 once closed */
  int out_fd; /* where its lines go: 1 or 2 */
  char *buf;
  size_t used;
} stream_t;

typedef struct rank_proc {
  pid_t pid; /* also its process group */
  int running;
  char prefix[32];
  stream_t out, err;
} rank_proc_t;

typedef struct job {
  int n;
  rank_proc_t *ranks;
  int running;
  int exit_code;    /* -1 until a failure, timeout or signal decides it */
  int keep_going;   /* --keep-going: a failure is reported, the others run on */
  int stopping;     /* SIGTERM (or the forwarded signal) has gone out */
  int stop_signal;  /* stopping: the signal that went out */
  int killed;       /* SIGKILL has gone out */
  uint64_t kill_at; /* stopping: when SIGKILL follows */
  uint64_t timeout_at;
  uint64_t drain_until; /* all exited: stop waiting for leftovers holding the pipes */
  int output_broken[3];
} job_t;

static int wake_pipe[2] = {-1, -1};
static volatile sig_atomic_t signal_count, last_signal;

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void on_signal(int sig) {
  int saved = errno;
  if (sig != SIGCHLD) {
    last_signal = sig;
    signal_count++;
  }
  if (write(wake_pipe[1], "", 1) < 0) { /* full pipe: a wake-up is pending anyway */
  }
  errno = saved;
}

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "syrun: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n%s", usage_text);
  return EXIT_USAGE;
}

static int parse_int_text(const char *text, long min, long max, int *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < min || v > max) return -1;
  *out = (int)v;
  return 0;
}

/* Fills opts; returns -1 on success, else the exit code (0 for --help). opts->devices is the caller's to free
 * on every path. */
static int parse_args(int argc, char **argv, options_t *opts) {
  const char *gpus = NULL;
  memset(opts, 0, sizeof *opts);
  int i = 1;
  for (; i < argc; i++) {
    const char *arg = argv[i];
    const char *value = NULL;
    if (!strcmp(arg, "--")) {
      i++;
      break;
    }
    if (arg[0] != '-' || !arg[1]) break; /* PROGRAM */
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      fputs(usage_text, stdout);
      return 0;
    }
    if (!strcmp(arg, "--keep-going")) {
      opts->keep_going = 1;
      continue;
    }
    /* Options with a value: "-n 4", "-n4", "--np 4", "--np=4", and likewise --gpus, --timeout. */
    const char *name = NULL;
    static const char *const names[] = {"--np", "--gpus", "--timeout"};
    if (!strncmp(arg, "-n", 2)) {
      name = "--np";
      value = arg[2] ? arg + 2 : NULL;
    } else {
      for (int k = 0; k < 3; k++) {
        size_t len = strlen(names[k]);
        if (!strncmp(arg, names[k], len) && (arg[len] == '\0' || arg[len] == '=')) {
          name = names[k];
          value = arg[len] == '=' ? arg + len + 1 : NULL;
        }
      }
    }
    if (!name) return usage_error("unknown option %s", arg);
    if (!value) {
      if (i + 1 >= argc) return usage_error("%s needs a value", arg);
      value = argv[++i];
    }
    if (!strcmp(name, "--np")) {
      if (parse_int_text(value, 1, SYRUN_MAX_RANKS, &opts->ranks) != 0)
        return usage_error("-n %s: want a rank count in 1..256", value);
    } else if (!strcmp(name, "--gpus")) {
      gpus = value;
    } else {
      char *end;
      errno = 0;
      double t = strtod(value, &end);
      if (errno || end == value || *end || !(t > 0) || !isfinite(t) || t > 1e8)
        return usage_error("--timeout %s: want a positive number of seconds", value);
      opts->timeout_s = t;
    }
  }
  if (opts->ranks == 0) return usage_error("%s", "-n N is required");
  if (i >= argc) return usage_error("%s", "no PROGRAM given");
  opts->program = argv + i;
  opts->devices = calloc((size_t)opts->ranks, sizeof *opts->devices);
  if (!opts->devices) return EXIT_SYRUN;
  for (int r = 0; r < opts->ranks; r++) opts->devices[r] = r;
  if (gpus) {
    int count = 0;
    const char *p = gpus;
    for (;;) {
      const char *comma = strchr(p, ',');
      size_t len = comma ? (size_t)(comma - p) : strlen(p);
      char item[32];
      int device;
      if (len == 0 || len >= sizeof item) return usage_error("--gpus %s: want comma-separated device numbers", gpus);
      memcpy(item, p, len);
      item[len] = '\0';
      if (parse_int_text(item, 0, INT_MAX, &device) != 0)
        return usage_error("--gpus %s: want comma-separated device numbers", gpus);
      if (count < opts->ranks) opts->devices[count] = device;
      count++;
      if (!comma) break;
      p = comma + 1;
    }
    if (count < opts->ranks) {
      char msg[96];
      snprintf(msg, sizeof msg, "--gpus %%s names %d devices for %d ranks", count, opts->ranks);
      return usage_error(msg, gpus);
    }
  }
  return -1;
}

/* ---------------------------------------------------------------------------------------------------- */
/* Output                                                                                                 */
/* ---------------------------------------------------------------------------------------------------- */
static void write_out(job_t *job, int fd, const char *data, size_t len) {
  while (len && !job->output_broken[fd]) {
    ssize_t n = write(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) { /* the reader went away (EPIPE: SIGPIPE is ignored): keep running, drop output */
      job->output_broken[fd] = 1;
      return;
    }
    data += n;
    len -= (size_t)n;
  }
}

/* One line (without its newline) with the rank's prefix, in one write so lines never interleave. */
static void emit_line(job_t *job, const rank_proc_t *rank, int fd, const char *line, size_t len) {
  size_t prefix_len = strlen(rank->prefix);
  char *out = malloc(prefix_len + len + 1);
  if (!out) return;
  memcpy(out, rank->prefix, prefix_len);
  memcpy(out + prefix_len, line, len);
  out[prefix_len + len] = '\n';
  write_out(job, fd, out, prefix_len + len + 1);
  free(out);
}

static void stream_close(job_t *job, rank_proc_t *rank, stream_t *s) {
  if (s->fd < 0) return;
  if (s->used) emit_line(job, rank, s->out_fd, s->buf, s->used); /* a last line without its newline */
  s->used = 0;
  close(s->fd);
  s->fd = -1;
}

/* Reads what the pipe has (one buffer's worth), passes on complete lines. until_empty: keep reading until
 * the pipe is empty (a rank that just exited: its last words go out before syrun's line about it). */
static void stream_read(job_t *job, rank_proc_t *rank, stream_t *s, int until_empty) {
  while (s->fd >= 0) {
    ssize_t n = read(s->fd, s->buf + s->used, SYRUN_LINE_MAX - s->used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      stream_close(job, rank, s);
      return;
    }
    s->used += (size_t)n;
    size_t start = 0;
    for (size_t i = 0; i < s->used; i++) {
      if (s->buf[i] != '\n') continue;
      emit_line(job, rank, s->out_fd, s->buf + start, i - start);
      start = i + 1;
    }
    if (start == 0 && s->used == SYRUN_LINE_MAX) { /* one line longer than the buffer: pass on a piece */
      emit_line(job, rank, s->out_fd, s->buf, s->used);
      start = s->used;
    }
    memmove(s->buf, s->buf + start, s->used - start);
    s->used -= start;
    if (!until_empty) return;
  }
}

/* ---------------------------------------------------------------------------------------------------- */
/* Processes                                                                                              */
/* ---------------------------------------------------------------------------------------------------- */
static void signal_groups(job_t *job, int sig) {
  /* Exited ranks too: what they started may still run in their group. */
  for (int r = 0; r < job->n; r++)
    if (job->ranks[r].pid > 0) kill(-job->ranks[r].pid, sig);
}

static void stop_all(job_t *job, int sig) {
  if (job->stopping) return;
  job->stopping = 1;
  job->stop_signal = sig;
  job->kill_at = now_ms() + SYRUN_GRACE_MS;
  signal_groups(job, sig);
}

static void set_env_int(const char *name, long value) {
  char text[32];
  snprintf(text, sizeof text, "%ld", value);
  setenv(name, text, 1);
}

/* In the child, after fork: becomes rank `r` and execs PROGRAM; never returns. It dies with syrun (parent):
 * PR_SET_PDEATHSIG outlives exec; a syrun that died before the prctl shows as a changed parent. */
static void child_exec(const options_t *opts, int r, int out_fd, int err_fd, pid_t parent) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(EXIT_SYRUN);
  setpgid(0, 0);
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd >= 0) dup2(null_fd, 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  set_env_int("SY_RANK", r);
  set_env_int("SY_LOCAL_RANK", r);
  set_env_int("SY_DEVICE", opts->devices[r]);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &dfl, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execvp(opts->program[0], opts->program);
  fprintf(stderr, "syrun: cannot run %s: %s\n", opts->program[0], strerror(errno));
  _exit(EXIT_NOT_RUN);
}

static int start_rank(job_t *job, const options_t *opts, int r) {
  rank_proc_t *rank = &job->ranks[r];
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return -1;
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return -1;
  }
  fflush(NULL);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[0]);
    close(err_pipe[1]);
    return -1;
  }
  if (pid == 0) child_exec(opts, r, out_pipe[1], err_pipe[1], parent);
  setpgid(pid, pid); /* also here: kill(-pid) must work even before the child gets to run */
  close(out_pipe[1]);
  close(err_pipe[1]);
  fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  rank->pid = pid;
  rank->running = 1;
  rank->out.fd = out_pipe[0];
  rank->err.fd = err_pipe[0];
  job->running++;
  return 0;
}

static rank_proc_t *find_rank(job_t *job, pid_t pid) {
  for (int r = 0; r < job->n; r++)
    if (job->ranks[r].pid == pid) return &job->ranks[r];
  return NULL;
}

/* Once stopping, whether a rank's end is the stop's consequence: killed by the signal syrun sent (or by SIGKILL once
 * sent), or a shell's exit status for one (128 + it). Other ends (an exit status of its own, another signal) are
 * the rank's own failures, reported like the first (which alone decides syrun's status). */
static int stopped_by_us(const job_t *job, int status) {
  const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status) > 128 ? WEXITSTATUS(status) - 128 : 0;
  return sig && (sig == job->stop_signal || (sig == SIGKILL && job->killed));
}

static void reap(job_t *job) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    rank_proc_t *rank = find_rank(job, pid);
    if (!rank) continue;
    rank->running = 0;
    job->running--;
    int failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (!failed || (job->stopping && stopped_by_us(job, status))) continue;
    int r = (int)(rank - job->ranks);
    stream_read(job, rank, &rank->out, 1);
    stream_read(job, rank, &rank->err, 1);
    char what[64];
    const int first = job->exit_code < 0 && !job->stopping,
              code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (WIFEXITED(status)) snprintf(what, sizeof what, "exited with status %d", WEXITSTATUS(status));
    else snprintf(what, sizeof what, "was killed by signal %d", WTERMSIG(status));
    if (first) job->exit_code = code; /* while stopping the code is already decided */
    const char *then = job->n == 1 || !first ? ""
                       : job->keep_going     ? "; the others run on (--keep-going)"
                                             : "; stopping the others";
    fprintf(stderr, "syrun: rank %d %s%s\n", r, what, then);
    if (!job->keep_going) stop_all(job, SIGTERM);
  }
}

/* The poll loop: until every rank has exited and its output is passed on. */
static void run_job(job_t *job, const options_t *opts) {
  int handled_signals = 0;
  struct pollfd *pfds = calloc((size_t)job->n * 2 + 1, sizeof *pfds);
  stream_t **streams = calloc((size_t)job->n * 2 + 1, sizeof *streams);
  rank_proc_t **owners = calloc((size_t)job->n * 2 + 1, sizeof *owners);
  if (!pfds || !streams || !owners) {
    fprintf(stderr, "syrun: out of memory; stopping all ranks\n");
    job->exit_code = EXIT_SYRUN;
    stop_all(job, SIGKILL);
    while (job->running > 0 && waitpid(-1, NULL, 0) > 0) job->running--;
    goto done;
  }
  for (;;) {
    int n = 0;
    pfds[n++] = (struct pollfd){wake_pipe[0], POLLIN, 0};
    for (int r = 0; r < job->n; r++) {
      rank_proc_t *rank = &job->ranks[r];
      stream_t *both[2] = {&rank->out, &rank->err};
      for (int k = 0; k < 2; k++)
        if (both[k]->fd >= 0) {
          streams[n] = both[k];
          owners[n] = rank;
          pfds[n++] = (struct pollfd){both[k]->fd, POLLIN, 0};
        }
    }
    uint64_t now = now_ms();
    if (job->running == 0) {
      if (n == 1) break;
      if (!job->drain_until) job->drain_until = now + SYRUN_DRAIN_MS;
      if (now >= job->drain_until) { /* something the ranks started holds their output: stop it */
        signal_groups(job, SIGKILL);
        for (int i = 1; i < n; i++) stream_close(job, owners[i], streams[i]);
        break;
      }
    }
    /* The nearest deadline bounds the wait. */
    uint64_t wake = UINT64_MAX;
    if (job->timeout_at && !job->stopping) wake = job->timeout_at;
    if (job->stopping && !job->killed && job->running > 0 && job->kill_at < wake) wake = job->kill_at;
    if (job->drain_until && job->drain_until < wake) wake = job->drain_until;
    int wait_ms = wake == UINT64_MAX ? -1 : wake <= now ? 0 : wake - now > INT_MAX ? INT_MAX : (int)(wake - now);
    int ready = poll(pfds, (nfds_t)n, wait_ms);
    if (ready < 0 && errno != EINTR) {
      fprintf(stderr, "syrun: poll failed: %s; stopping all ranks\n", strerror(errno));
      if (job->exit_code < 0) job->exit_code = EXIT_SYRUN;
      stop_all(job, SIGTERM);
    }
    if (ready > 0 && pfds[0].revents) {
      char sink[64];
      while (read(wake_pipe[0], sink, sizeof sink) > 0) {
      }
    }
    if (signal_count != handled_signals) {
      int sig = last_signal;
      if (handled_signals == 0 && !job->stopping) {
        fprintf(stderr, "syrun: got signal %d; passing it to every rank\n", sig);
        if (job->exit_code < 0) job->exit_code = 128 + sig;
        stop_all(job, sig);
      } else if (!job->killed) { /* asked again: no more grace */
        fprintf(stderr, "syrun: got signal %d again; killing every rank\n", sig);
        if (job->exit_code < 0) job->exit_code = 128 + sig;
        signal_groups(job, SIGKILL);
        job->killed = 1;
      }
      handled_signals = signal_count;
    }
    for (int i = 1; ready > 0 && i < n; i++)
      if (pfds[i].revents) stream_read(job, owners[i], streams[i], 0);
    reap(job);
    now = now_ms();
    if (job->timeout_at && !job->stopping && now >= job->timeout_at) {
      fprintf(stderr, "syrun: the job ran longer than --timeout %g s; stopping all ranks\n", opts->timeout_s);
      job->exit_code = EXIT_TIMEOUT;
      stop_all(job, SIGTERM);
    }
    if (job->stopping && !job->killed && now >= job->kill_at && job->running > 0) {
      char names[256] = "";
      size_t len = 0;
      for (int r = 0; r < job->n && len + 16 < sizeof names; r++)
        if (job->ranks[r].running) len += (size_t)snprintf(names + len, sizeof names - len, "%s%d", len ? ", " : "", r);
      fprintf(stderr, "syrun: killing rank%s %s (still running %d s after SIGTERM)\n", job->running > 1 ? "s" : "",
              names, SYRUN_GRACE_MS / 1000);
      signal_groups(job, SIGKILL);
      job->killed = 1;
    }
  }
done:
  free(pfds);
  free(streams);
  free(owners);
}

int main(int argc, char **argv) {
  options_t opts;
  int code = parse_args(argc, argv, &opts);
  if (code >= 0) {
    free(opts.devices);
    return code;
  }

  /* Signals arrive through the self-pipe; blocked until the loop runs so none is lost or seen early. */
  if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    fprintf(stderr, "syrun: pipe: %s\n", strerror(errno));
    return EXIT_SYRUN;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_NOCLDSTOP;
  sigset_t handled, old_mask;
  sigemptyset(&handled);
  int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    sigaction(sigs[i], &sa, NULL);
    sigaddset(&handled, sigs[i]);
  }
  signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill syrun before it cleans up */
  sigprocmask(SIG_BLOCK, &handled, &old_mask);

  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  size_t dir_len = strlen(tmp) + 32;
  char *dir = malloc(dir_len);
  if (!dir) return EXIT_SYRUN;
  snprintf(dir, dir_len, "%s/syrun.XXXXXX", tmp);
  if (!mkdtemp(dir)) {
    fprintf(stderr, "syrun: cannot create a private directory under %s: %s\n", tmp, strerror(errno));
    return EXIT_SYRUN;
  }
  int watch_fd = syrun_watch_start(dir, wake_pipe);
  if (watch_fd < 0) {
    fprintf(stderr, "syrun: cannot start the watcher of %s: %s\n", dir, strerror(errno));
    syrun_remove_dir(dir);
    return EXIT_SYRUN;
  }
  setenv("SY_BOOT_DIR", dir, 1);
  set_env_int("SY_WORLD_SIZE", opts.ranks);
  set_env_int("SY_LOCAL_SIZE", opts.ranks);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 0); /* NVLink multicast stays off on our GPU machines */
  setenv("NCCL_NVLS_ENABLE", "0", 0);

  job_t job;
  memset(&job, 0, sizeof job);
  job.n = opts.ranks;
  job.exit_code = -1;
  job.keep_going = opts.keep_going;
  job.ranks = calloc((size_t)opts.ranks, sizeof *job.ranks);
  if (!job.ranks) {
    syrun_remove_dir(dir);
    return EXIT_SYRUN;
  }
  for (int r = 0; r < opts.ranks; r++) {
    rank_proc_t *rank = &job.ranks[r];
    snprintf(rank->prefix, sizeof rank->prefix, "[rank %d] ", r);
    rank->out = (stream_t){-1, 1, malloc(SYRUN_LINE_MAX), 0};
    rank->err = (stream_t){-1, 2, malloc(SYRUN_LINE_MAX), 0};
    if (!rank->out.buf || !rank->err.buf) {
      syrun_remove_dir(dir);
      return EXIT_SYRUN;
    }
  }
  for (int r = 0; r < opts.ranks; r++) {
    if (start_rank(&job, &opts, r) != 0) {
      fprintf(stderr, "syrun: cannot start rank %d: %s; stopping the others\n", r, strerror(errno));
      job.exit_code = EXIT_SYRUN;
      stop_all(&job, SIGTERM);
      break;
    }
    syrun_watch_note(watch_fd, job.ranks[r].pid);
  }
  if (opts.timeout_s > 0) job.timeout_at = now_ms() + (uint64_t)(opts.timeout_s * 1000.0);
  sigprocmask(SIG_SETMASK, &old_mask, NULL);
  run_job(&job, &opts);
  syrun_remove_dir(dir);
  syrun_watch_note(watch_fd, 0); /* cleaned up: the watcher leaves everything as it is */
  close(watch_fd);

  for (int r = 0; r < opts.ranks; r++) {
    free(job.ranks[r].out.buf);
    free(job.ranks[r].err.buf);
  }
  free(job.ranks);
  free(opts.devices);
  free(dir);
  return job.exit_code < 0 ? 0 : job.exit_code;
}
