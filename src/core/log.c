/*
 * log.c — one log for the library: SY_DEBUG picks the level, SY_DEBUG_FILE the destination (%h host,
 * %p pid, %r rank). Lines: "[rank N] sy warn: message". Thread-safe; each thread has its own rank (the host
 * backend runs ranks as threads) and its own last failure's message (sy_last_error; log.h says what fills it).
 * A destination with %r is a file per rank, opened at the rank's first line: the line's rank, or for a thread that
 * has none (a line before sy_comm_init, a CUDA host callback) the launcher's (SY_RANK, RANK, SLURM_PROCID,
 * OMPI_COMM_WORLD_RANK, PMI_RANK), else the first rank any thread of the process set, else -1.
 */
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_level = -1; /* -1: not read yet */
static FILE *log_file;     /* NULL with a per-rank destination (rank_files) */
static char *log_pattern;  /* SY_DEBUG_FILE with %r, else NULL */
static struct rank_file {
  int rank;
  FILE *f;
} * rank_files;
static int rank_file_count;
static _Thread_local int log_rank = -1;
static int first_rank = -1; /* the first rank any thread set: a rank-less line's file where no launcher names one */
static _Thread_local char last_error[1024]; /* a message as logged, without the "[rank N] sy warn: " prefix */

void sy__log_set_rank(int rank) {
  log_rank = rank;
  int none = -1;
  if (rank >= 0) __atomic_compare_exchange_n(&first_rank, &none, rank, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
int sy__log_get_rank(void) { return log_rank; }

const char *sy_last_error(void) { return last_error; }
void sy__last_error_clear(void) { last_error[0] = '\0'; }
void sy__api_enter(int rank) {
  log_rank = rank;
  last_error[0] = '\0';
}

/* The launcher's rank of this process, or -1 (the variables of boot/launch.c, in its order). */
static int launcher_rank(void) {
  static const char *names[] = {"SY_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const char *v = getenv(names[i]);
    if (!v || !*v) continue;
    char *end;
    const long r = strtol(v, &end, 10);
    return *end == '\0' && r >= 0 && r <= 1 << 30 ? (int)r : -1;
  }
  return -1;
}

static void expand_path(const char *pattern, int rank, char *out, size_t out_bytes) {
  size_t n = 0;
  for (const char *p = pattern; *p && n + 1 < out_bytes; p++) {
    if (p[0] == '%' && p[1]) {
      char piece[256] = "";
      p++;
      if (*p == 'h') gethostname(piece, sizeof piece - 1);
      else if (*p == 'p') snprintf(piece, sizeof piece, "%d", (int)getpid());
      else if (*p == 'r') snprintf(piece, sizeof piece, "%d", rank);
      else snprintf(piece, sizeof piece, "%%%c", *p);
      size_t len = strlen(piece);
      if (n + len >= out_bytes) break;
      memcpy(out + n, piece, len);
      n += len;
    } else {
      out[n++] = *p;
    }
  }
  out[n] = '\0';
}

/* Whether a destination names the rank (%r, not the literal "%%r"). */
static int has_rank(const char *pattern) {
  for (const char *p = pattern; *p; p++)
    if (p[0] == '%' && p[1]) {
      if (p[1] == 'r') return 1;
      p++;
    }
  return 0;
}

/* Called with log_lock held. */
static void log_init_locked(void) {
  const char *level = getenv("SY_DEBUG");
  int new_level = SY_LOG_WARN;
  if (level && *level) {
    if (!strcasecmp(level, "NONE")) new_level = SY_LOG_NONE;
    else if (!strcasecmp(level, "WARN")) new_level = SY_LOG_WARN;
    else if (!strcasecmp(level, "INFO")) new_level = SY_LOG_INFO;
    else if (!strcasecmp(level, "TRACE")) new_level = SY_LOG_TRACE;
    else fprintf(stderr, "sy warn: SY_DEBUG=%s is not NONE, WARN, INFO or TRACE; using WARN\n", level);
  }
  const char *file = getenv("SY_DEBUG_FILE");
  if (log_file && log_file != stderr) fclose(log_file);
  for (int i = 0; i < rank_file_count; i++)
    if (rank_files[i].f != stderr) fclose(rank_files[i].f);
  free(rank_files);
  rank_files = NULL, rank_file_count = 0;
  free(log_pattern);
  log_pattern = NULL;
  log_file = stderr;
  if (file && *file && has_rank(file) && (log_pattern = strdup(file)) != NULL) {
    log_file = NULL; /* a file per rank, at its first line */
  } else if (file && *file) {
    char path[1024];
    expand_path(file, log_rank, path, sizeof path);
    FILE *f = fopen(path, "a");
    if (f) {
      setvbuf(f, NULL, _IOLBF, 0);
      log_file = f;
    } else {
      fprintf(stderr, "sy warn: cannot open SY_DEBUG_FILE=%s; logging to stderr\n", path);
    }
  }
  __atomic_store_n(&log_level, new_level, __ATOMIC_RELEASE); /* last: the file is ready when the level shows */
}

void sy__log_reset(void) {
  pthread_mutex_lock(&log_lock);
  log_init_locked();
  pthread_mutex_unlock(&log_lock);
}

int sy__log_enabled(sy_log_level_t level) {
  int current = __atomic_load_n(&log_level, __ATOMIC_ACQUIRE);
  if (current < 0) { /* first use: one thread reads the environment, under the lock */
    pthread_mutex_lock(&log_lock);
    if (log_level < 0) log_init_locked();
    current = log_level;
    pthread_mutex_unlock(&log_lock);
  }
  return level != SY_LOG_NONE && (int)level <= current;
}

/* Called with log_lock held: where a line of `rank` goes (per-rank destinations; stderr where a file cannot be
 * opened or remembered). */
static FILE *rank_file_locked(int rank) {
  if (rank < 0) rank = launcher_rank();
  if (rank < 0) rank = __atomic_load_n(&first_rank, __ATOMIC_RELAXED);
  for (int i = 0; i < rank_file_count; i++)
    if (rank_files[i].rank == rank) return rank_files[i].f;
  char path[1024];
  expand_path(log_pattern, rank, path, sizeof path);
  FILE *f = fopen(path, "a");
  if (f) setvbuf(f, NULL, _IOLBF, 0);
  else fprintf(stderr, "sy warn: cannot open SY_DEBUG_FILE=%s; logging to stderr\n", path);
  struct rank_file *grown = realloc(rank_files, (size_t)(rank_file_count + 1) * sizeof *grown);
  if (!grown) {
    if (f) fclose(f);
    return stderr;
  }
  rank_files = grown;
  rank_files[rank_file_count++] = (struct rank_file){rank, f ? f : stderr};
  return f ? f : stderr;
}

static void log_line(sy_log_level_t level, sy_record_t record, const char *file, int line, const char *fmt,
                     va_list ap) {
  const int enabled = sy__log_enabled(level);
  if (!enabled && record == SY_RECORD_NONE) return;
  static const char *names[] = {"none", "warn", "info", "trace"};
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  if (record == SY_RECORD_REPLACE || (record == SY_RECORD_FIRST && !last_error[0]))
    snprintf(last_error, sizeof last_error, "%s", msg);
  if (!enabled) return;
  char prefix[32] = "";
  if (log_rank >= 0) snprintf(prefix, sizeof prefix, "[rank %d] ", log_rank);
  pthread_mutex_lock(&log_lock);
  FILE *out = log_file ? log_file : rank_file_locked(log_rank);
  if (level == SY_LOG_TRACE) {
    const char *base = strrchr(file, '/');
    fprintf(out, "%ssy %s: %s (%s:%d)\n", prefix, names[level], msg, base ? base + 1 : file, line);
  } else {
    fprintf(out, "%ssy %s: %s\n", prefix, names[level], msg);
  }
  fflush(out);
  pthread_mutex_unlock(&log_lock);
}

void sy__log(sy_log_level_t level, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_line(level, level == SY_LOG_WARN ? SY_RECORD_FIRST : SY_RECORD_NONE, file, line, fmt, ap);
  va_end(ap);
}

void sy__log_as(sy_log_level_t level, sy_record_t record, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_line(level, record, file, line, fmt, ap);
  va_end(ap);
}
