/*
 * check.h — the CPU tests' assert helpers: on failure print both values and where, count the failure,
 * and let the test go on so one run shows every broken case. main() ends with `return check_report();`.
 */
#ifndef SY_TEST_CHECK_H
#define SY_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int check_failures_;
static int check_count_;

#define CHECK(cond)                                                                   \
  do {                                                                                \
    __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);                                                                   \
    if (!(cond)) {                                                                    \
      __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);                                                              \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);        \
    }                                                                                 \
  } while (0)

#define CHECK_EQ_INT(a, b)                                                                                   \
  do {                                                                                                       \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);                                          \
    __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);                                                                                          \
    if (check_a_ != check_b_) {                                                                              \
      __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);                                                                                     \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, check_a_, check_b_); \
    }                                                                                                        \
  } while (0)

#define CHECK_EQ_STR(a, b)                                                                                   \
  do {                                                                                                       \
    const char *check_a_ = (a), *check_b_ = (b);                                                             \
    __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);                                                                                          \
    if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_)) {                                              \
      __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);                                                                                     \
      fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #a, #b,             \
              check_a_ ? check_a_ : "(null)", check_b_ ? check_b_ : "(null)");                              \
    }                                                                                                        \
  } while (0)

/* A call returning sy_status_t that must give `want`. */
#define CHECK_STATUS(call, want)                                                                             \
  do {                                                                                                       \
    int check_got_ = (int)(call), check_want_ = (int)(want);                                                 \
    __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);                                                                                          \
    if (check_got_ != check_want_) {                                                                         \
      __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);                                                                                     \
      fprintf(stderr, "%s:%d: %s returned %s, want %s\n", __FILE__, __LINE__, #call,                         \
              sy_status_name((sy_status_t)check_got_), sy_status_name((sy_status_t)check_want_));           \
    }                                                                                                        \
  } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, SY_SUCCESS)

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
