/*
 * check.h — the CPU tests' assert helpers: on failure print both values and where, count the failure,
 * and let the test go on so one run shows every broken case. main() ends with `return check_report();`.
 */
#ifndef SY_TEST_CHECK_H
#define SY_TEST_CHECK_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures_;
static int check_count_;

#define CHECK(cond)                                                            \
  do {                                                                         \
    __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);                    \
    if (!(cond)) {                                                             \
      __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);               \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                                                       \
  do {                                                                                                           \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);                                              \
    __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);                                                      \
    if (check_a_ != check_b_) {                                                                                  \
      __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);                                                 \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, check_a_, check_b_); \
    }                                                                                                            \
  } while (0)

#define CHECK_EQ_STR(a, b)                                                                      \
  do {                                                                                          \
    const char *check_a_ = (a), *check_b_ = (b);                                                \
    __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);                                     \
    if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_)) {                                 \
      __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);                                \
      fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #a, #b, \
              check_a_ ? check_a_ : "(null)", check_b_ ? check_b_ : "(null)");                  \
    }                                                                                           \
  } while (0)

/* A call returning sy_status_t that must give `want`. */
#define CHECK_STATUS(call, want)                                                                  \
  do {                                                                                            \
    int check_got_ = (int)(call), check_want_ = (int)(want);                                      \
    __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);                                       \
    if (check_got_ != check_want_) {                                                              \
      __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);                                  \
      fprintf(stderr, "%s:%d: %s returned %s, want %s\n", __FILE__, __LINE__, #call,              \
              sy_status_name((sy_status_t)check_got_), sy_status_name((sy_status_t)check_want_)); \
    }                                                                                             \
  } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, SY_SUCCESS)

/* The library's log read back, for tests that check a rejection names its argument: point SY_DEBUG_FILE at
 * check_log_path (and call sy__log_reset), then check_log_has tells whether the lines written since its last
 * call contain needle, printing them when they do not. */
static char check_log_path[256];
static long check_log_pos;

static inline int check_log_has(const char *needle, int line) {
  FILE *f = fopen(check_log_path, "rb");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long end = ftell(f);
  long n = end - check_log_pos;
  char *text = (char *)calloc(1, (size_t)(n > 0 ? n : 0) + 1);
  int found = 0;
  if (text) {
    fseek(f, check_log_pos, SEEK_SET);
    size_t got = n > 0 ? fread(text, 1, (size_t)n, f) : 0;
    text[got] = '\0';
    found = strstr(text, needle) != NULL;
    if (!found) fprintf(stderr, "line %d: log lacks \"%s\"; it says:\n%s\n", line, needle, text);
    free(text);
  }
  fclose(f);
  check_log_pos = end;
  return found;
}

/* The call must be rejected as invalid (SY_ERR_INVALID_ARG), with a log line since the last check containing
 * needle (the argument's name). */
#define CHECK_REJECTED(call, needle)        \
  do {                                      \
    CHECK_STATUS(call, SY_ERR_INVALID_ARG); \
    CHECK(check_log_has(needle, __LINE__)); \
  } while (0)

/* A small text file's contents (up to 64 KiB), NUL-terminated; the caller frees it. NULL if unreadable. */
static inline char *check_read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1; /* the whole file (a log may pass 64 KiB) */
  if (n < 0 || fseek(f, 0, SEEK_SET) != 0) n = 0;
  char *text = (char *)calloc(1, (size_t)n + 1);
  if (text && n > 0 && fread(text, 1, (size_t)n, f) != (size_t)n) text[0] = '\0';
  fclose(f);
  return text;
}

/* A float from its bits and back (conversion tests). */
static inline float check_bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint32_t check_float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline int check_report(void) {
  if (check_failures_) {
    fprintf(stderr, "FAILED: %d of %d checks\n", check_failures_, check_count_);
    return 1;
  }
  if (check_count_ == 0) {
    fprintf(stderr, "FAILED: the test made no checks\n");
    return 1;
  }
  printf("passed: %d checks\n", check_count_);
  return 0;
}

#endif
