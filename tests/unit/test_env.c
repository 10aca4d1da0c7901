/*
 * test_env.c — the environment-variable registry and its parsers (src/core/env.c) and the log's level and
 * destination (src/core/log.c): what a user's SY_* setting turns into, and that a typo is an error rather
 * than a silently used default.
 */
#include "check.h"
#include "core/internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_parse_int(void) {
  /* clang-format off */
  static const struct {
    const char *text;
    long long value;
  } good[] = {{"0", 0},    {"42", 42}, {"-7", -7},   {"+3", 3},
              {" 5 ", 5},  {"007", 7}, {"9223372036854775807", LLONG_MAX}, {"-9223372036854775808", LLONG_MIN}};
  /* clang-format on */
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    long long v = 12345;
    CHECK_OK(sy__parse_int(good[i].text, &v));
    CHECK_EQ_INT(v, good[i].value);
  }
  /* clang-format off */
  static const char *bad[] = {"", "   ", "abc", "12x", "1 2", "0x10", "9223372036854775808", "-9223372036854775809",
                              "1.5", "--1", "+"};
  /* clang-format on */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    long long v = 12345;
    sy_status_t st = sy__parse_int(bad[i], &v);
    if (st != SY_ERR_INVALID_ARG) fprintf(stderr, "parse_int accepted \"%s\"\n", bad[i]);
    CHECK_STATUS(st, SY_ERR_INVALID_ARG);
    CHECK_EQ_INT(v, 12345); /* untouched */
  }
  long long v;
  CHECK_STATUS(sy__parse_int(NULL, &v), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__parse_int("1", NULL), SY_ERR_INVALID_ARG);
}

static void test_parse_size(void) {
  /* clang-format off */
  static const struct {
    const char *text;
    uint64_t value;
  } good[] = {{"7", 7},
              {"0", 0},
              {"64K", 64ull << 10},
              {"64k", 64ull << 10},
              {"64KB", 64ull << 10},
              {"64KiB", 64ull << 10},
              {"1G", 1ull << 30},
              {"512MiB", 512ull << 20},
              {"512M", 512ull << 20},
              {"3T", 3ull << 40},
              {"100B", 100},
              {" 8M ", 8ull << 20},
              {"18446744073709551615", UINT64_MAX},
              {"16777215T", 16777215ull << 40}};
  /* clang-format on */
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    size_t v = 12345;
    sy_status_t st = sy__parse_size(good[i].text, &v);
    if (st != SY_SUCCESS) fprintf(stderr, "parse_size rejected \"%s\"\n", good[i].text);
    CHECK_OK(st);
    CHECK(v == good[i].value);
  }
  /* clang-format off */
  static const char *bad[] = {"",   "-1",       "12Q",  "1G junk", "18446744073709551616", "17179869184G",
                              "K",  "1.5G",     " ",    "+5",      "16777216T",            "1 G",
                              "1GG", "0x10",    "1KiBB", "M1"};
  /* clang-format on */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    size_t v = 12345;
    sy_status_t st = sy__parse_size(bad[i], &v);
    if (st != SY_ERR_INVALID_ARG) fprintf(stderr, "parse_size accepted \"%s\"\n", bad[i]);
    CHECK_STATUS(st, SY_ERR_INVALID_ARG);
    CHECK_EQ_INT(v, 12345);
  }
  size_t v;
  CHECK_STATUS(sy__parse_size(NULL, &v), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__parse_size("1", NULL), SY_ERR_INVALID_ARG);
}

static void test_parse_bool(void) {
  /* clang-format off */
  static const struct {
    const char *text;
    int value;
  } good[] = {{"1", 1},   {"0", 0},  {"true", 1}, {"TRUE", 1}, {"false", 0}, {"False", 0},
              {"yes", 1}, {"no", 0}, {"on", 1},   {"OFF", 0}};
  /* clang-format on */
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    int v = 7;
    CHECK_OK(sy__parse_bool(good[i].text, &v));
    CHECK_EQ_INT(v, good[i].value);
  }
  /* clang-format off */
  static const char *bad[] = {"", "2", "maybe", "truee", "y", "-1", " 1"};
  /* clang-format on */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int v = 7;
    sy_status_t st = sy__parse_bool(bad[i], &v);
    if (st != SY_ERR_INVALID_ARG) fprintf(stderr, "parse_bool accepted \"%s\"\n", bad[i]);
    CHECK_STATUS(st, SY_ERR_INVALID_ARG);
    CHECK_EQ_INT(v, 7);
  }
}

static void test_registry(void) {
  const int n = sy__env_count();
  CHECK(n > 0);
  CHECK_EQ_INT(n, (int)SY_ENVID_COUNT_);
  CHECK(sy__env_def((sy_env_id_t)-1) == NULL);
  CHECK(sy__env_def((sy_env_id_t)n) == NULL);
  for (int i = 0; i < n; i++) {
    const sy_env_def_t *d = sy__env_def((sy_env_id_t)i);
    CHECK(d != NULL);
    if (!d) continue;
    CHECK(d->name && strncmp(d->name, "SY_", 3) == 0);
    CHECK(d->doc && d->doc[0] != '\0');
    CHECK(d->default_value != NULL);
    for (int j = 0; j < i; j++) {
      const sy_env_def_t *e = sy__env_def((sy_env_id_t)j);
      if (e && d->name && e->name && !strcmp(d->name, e->name)) {
        fprintf(stderr, "duplicate env name %s\n", d->name);
        CHECK(0);
      }
    }
    if (!d->default_value) continue;
    long long iv;
    size_t sv;
    int bv;
    switch (d->type) {
      case SY_ENV_INT: CHECK_OK(sy__parse_int(d->default_value, &iv)); break;
      case SY_ENV_SIZE: CHECK_OK(sy__parse_size(d->default_value, &sv)); break;
      case SY_ENV_BOOL: CHECK_OK(sy__parse_bool(d->default_value, &bv)); break;
      case SY_ENV_STRING: break;
      default: CHECK(0 && "unknown env type");
    }
  }
  /* The ids name the right entries. */
  CHECK_EQ_STR(sy__env_def(SY_ENVID_SY_TIMEOUT_MS)->name, "SY_TIMEOUT_MS");
  CHECK_EQ_STR(sy__env_def(SY_ENVID_SY_HEAP_SIZE)->name, "SY_HEAP_SIZE");
}

static void test_typed_values(void) {
  long long iv = 0;
  size_t sv = 0;
  int bv = -1;
  /* Unset: the default. */
  unsetenv("SY_TIMEOUT_MS");
  unsetenv("SY_HEAP_SIZE");
  unsetenv("SY_FORCE_PUT");
  CHECK(sy__env_raw(SY_ENVID_SY_TIMEOUT_MS) == NULL);
  CHECK_OK(sy__env_int(SY_ENVID_SY_TIMEOUT_MS, &iv));
  CHECK_EQ_INT(iv, 5000);
  CHECK_OK(sy__env_size(SY_ENVID_SY_HEAP_SIZE, &sv));
  CHECK(sv == (size_t)1 << 30);
  CHECK_OK(sy__env_bool(SY_ENVID_SY_FORCE_PUT, &bv));
  CHECK_EQ_INT(bv, 0);
  CHECK_EQ_STR(sy__env_str(SY_ENVID_SY_BACKEND), getenv("SY_BACKEND") ? getenv("SY_BACKEND") : "auto");

  /* Set and valid. */
  setenv("SY_TIMEOUT_MS", "1234", 1);
  setenv("SY_HEAP_SIZE", "64M", 1);
  setenv("SY_FORCE_PUT", "yes", 1);
  CHECK_EQ_STR(sy__env_raw(SY_ENVID_SY_TIMEOUT_MS), "1234");
  CHECK_OK(sy__env_int(SY_ENVID_SY_TIMEOUT_MS, &iv));
  CHECK_EQ_INT(iv, 1234);
  CHECK_OK(sy__env_size(SY_ENVID_SY_HEAP_SIZE, &sv));
  CHECK(sv == (size_t)64 << 20);
  CHECK_OK(sy__env_bool(SY_ENVID_SY_FORCE_PUT, &bv));
  CHECK_EQ_INT(bv, 1);

  /* Set but empty: treated as unset. */
  setenv("SY_TIMEOUT_MS", "", 1);
  CHECK(sy__env_raw(SY_ENVID_SY_TIMEOUT_MS) == NULL);
  CHECK_OK(sy__env_int(SY_ENVID_SY_TIMEOUT_MS, &iv));
  CHECK_EQ_INT(iv, 5000);

  /* Set and malformed: an error, not the default. */
  setenv("SY_TIMEOUT_MS", "12x", 1);
  setenv("SY_HEAP_SIZE", "1G junk", 1);
  setenv("SY_FORCE_PUT", "maybe", 1);
  iv = 777;
  CHECK_STATUS(sy__env_int(SY_ENVID_SY_TIMEOUT_MS, &iv), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__env_size(SY_ENVID_SY_HEAP_SIZE, &sv), SY_ERR_INVALID_ARG);
  CHECK_STATUS(sy__env_bool(SY_ENVID_SY_FORCE_PUT, &bv), SY_ERR_INVALID_ARG);

  /* ... and it stops sy_comm_init (a typo must not become the default timeout). */
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  config.backend = SY_BACKEND_HOST;
  config.rank = 0;
  config.world_size = 1;
  config.host_group = 4242;
  sy_comm_t comm = (sy_comm_t)&config; /* must come back NULL */
  CHECK_STATUS(sy_comm_init(&comm, &config), SY_ERR_INVALID_ARG);
  CHECK(comm == NULL);
  setenv("SY_TIMEOUT_MS", "0", 1); /* parses, but a bound of 0 is no bound */
  CHECK_STATUS(sy_comm_init(&comm, &config), SY_ERR_INVALID_ARG);
  unsetenv("SY_TIMEOUT_MS");
  CHECK_STATUS(sy_comm_init(&comm, &config), SY_ERR_INVALID_ARG); /* SY_HEAP_SIZE still malformed */
  unsetenv("SY_HEAP_SIZE");
  unsetenv("SY_FORCE_PUT");
  CHECK_OK(sy_comm_init(&comm, &config));
  CHECK_OK(sy_comm_destroy(comm));

  /* A malformed SY_BACKEND stops an auto init too. */
  const char *saved_backend = getenv("SY_BACKEND");
  char saved[64] = "";
  if (saved_backend) snprintf(saved, sizeof saved, "%s", saved_backend);
  setenv("SY_BACKEND", "hots", 1);
  config.backend = SY_BACKEND_AUTO;
  CHECK_STATUS(sy_comm_init(&comm, &config), SY_ERR_INVALID_ARG);
  if (saved_backend) setenv("SY_BACKEND", saved, 1);
  else unsetenv("SY_BACKEND");

  /* Reading a variable as the wrong type is the library's bug, reported as such. */
  CHECK_STATUS(sy__env_int(SY_ENVID_SY_HEAP_SIZE, &iv), SY_ERR_INTERNAL);
}

static void test_log_levels(void) {
  static const struct {
    const char *value;
    int warn, info, trace;
  } cases[] = {{"NONE", 0, 0, 0}, {"WARN", 1, 0, 0},  {"INFO", 1, 1, 0}, {"TRACE", 1, 1, 1},
               {"info", 1, 1, 0}, {"bogus", 1, 0, 0}, {"", 1, 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    setenv("SY_DEBUG", cases[i].value, 1);
    sy__log_reset();
    CHECK_EQ_INT(sy__log_enabled(SY_LOG_WARN), cases[i].warn);
    CHECK_EQ_INT(sy__log_enabled(SY_LOG_INFO), cases[i].info);
    CHECK_EQ_INT(sy__log_enabled(SY_LOG_TRACE), cases[i].trace);
    CHECK_EQ_INT(sy__log_enabled(SY_LOG_NONE), 0);
  }
  unsetenv("SY_DEBUG");
  sy__log_reset();
  CHECK_EQ_INT(sy__log_enabled(SY_LOG_WARN), 1);
  CHECK_EQ_INT(sy__log_enabled(SY_LOG_INFO), 0);
}

static void test_log_file(void) {
  char dir[] = "/tmp/sy_test_env_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char pattern[128], path[160];
  snprintf(pattern, sizeof pattern, "%s/log.%%r.txt", dir);
  snprintf(path, sizeof path, "%s/log.3.txt", dir);

  int saved_rank = sy__log_get_rank();
  sy__log_set_rank(3);
  setenv("SY_DEBUG", "TRACE", 1);
  setenv("SY_DEBUG_FILE", pattern, 1);
  sy__log_reset();
  SY_WARN("test line %d", 7);
  SY_INFO("an info line");
  SY_TRACE("a trace line");
  unsetenv("SY_DEBUG_FILE");
  unsetenv("SY_DEBUG");
  sy__log_reset(); /* closes the file, back to stderr */
  sy__log_set_rank(saved_rank);

  char *text = check_read_file(path);
  CHECK(text != NULL);
  if (text) {
    CHECK(strstr(text, "[rank 3] sy warn: test line 7\n") != NULL);
    CHECK(strstr(text, "[rank 3] sy info: an info line\n") != NULL);
    CHECK(strstr(text, "[rank 3] sy trace: a trace line (test_env.c:") != NULL);
    if (!strstr(text, "[rank 3] sy warn:")) fprintf(stderr, "log file holds:\n%s\n", text);
    free(text);
  }
  CHECK_EQ_INT(unlink(path), 0);
  CHECK_EQ_INT(rmdir(dir), 0);
}

/* A rank as a thread (the host backend's ranks): its lines into its own file. */
static void *log_as_rank(void *arg) {
  const int rank = (int)(intptr_t)arg;
  sy__log_set_rank(rank);
  for (int i = 0; i < 50; i++) SY_WARN("line %d of rank %d", i, rank);
  return NULL;
}

/* %r with ranks as threads: a file per rank, each with its own rank's lines only; a line before any rank is
 * known goes to the launcher's rank's file (a reviewer found every thread's lines in the first one's file, and a
 * line before sy_comm_init set the rank in a file "-1"). */
static void test_log_file_per_rank(void) {
  char dir[] = "/tmp/sy_test_env_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char pattern[128], path[3][160];
  snprintf(pattern, sizeof pattern, "%s/log.%%r.txt", dir);
  for (int r = 0; r < 2; r++) snprintf(path[r], sizeof path[r], "%s/log.%d.txt", dir, r);
  snprintf(path[2], sizeof path[2], "%s/log.5.txt", dir);
  const int saved_rank = sy__log_get_rank();
  setenv("SY_DEBUG", "WARN", 1);
  setenv("SY_DEBUG_FILE", pattern, 1);
  setenv("SY_RANK", "5", 1);
  sy__log_reset();
  sy__log_set_rank(-1);
  SY_WARN("a line before the rank is known");
  pthread_t t[2];
  for (int r = 0; r < 2; r++) CHECK_EQ_INT(pthread_create(&t[r], NULL, log_as_rank, (void *)(intptr_t)r), 0);
  for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
  unsetenv("SY_RANK");
  unsetenv("SY_DEBUG_FILE");
  unsetenv("SY_DEBUG");
  sy__log_reset(); /* closes the files, back to stderr */
  sy__log_set_rank(saved_rank);
  for (int r = 0; r < 2; r++) {
    char *text = check_read_file(path[r]);
    CHECK(text != NULL);
    if (!text) continue;
    char want[64], other[64];
    snprintf(want, sizeof want, "[rank %d] sy warn: line 49 of rank %d\n", r, r);
    snprintf(other, sizeof other, "[rank %d]", 1 - r);
    CHECK(strstr(text, want) != NULL);
    CHECK(strstr(text, other) == NULL);
    CHECK(strstr(text, "before the rank") == NULL);
    free(text);
  }
  char *text = check_read_file(path[2]);
  CHECK(text != NULL && strstr(text, "sy warn: a line before the rank is known\n") != NULL);
  free(text);
  for (int r = 0; r < 3; r++) CHECK_EQ_INT(unlink(path[r]), 0);
  CHECK_EQ_INT(rmdir(dir), 0);
}

int main(void) {
  test_parse_int();
  test_parse_size();
  test_parse_bool();
  test_registry();
  test_typed_values();
  test_log_levels();
  test_log_file();
  test_log_file_per_rank();
  return check_report();
}
