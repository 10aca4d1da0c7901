/*
 * test_status.c — the status table (names, strings, unknown values), the version strings and the backend
 * names: the small pieces every log line and error report is built from.
 */
#include "check.h"
#include "switchyard.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static void test_status_table(void) {
  int count = 0;
#define CHECK_ONE_(name, value, text)                                                           \
  do {                                                                                          \
    CHECK_EQ_INT((int)name, value);                                                             \
    CHECK_EQ_STR(sy_status_name(name), #name);                                                  \
    CHECK_EQ_STR(sy_status_string(name), text);                                                 \
    const char *s_ = sy_status_string(name);                                                    \
    CHECK(s_ != NULL && s_[0] != '\0');                                                         \
    CHECK(s_ && !isupper((unsigned char)s_[0])); /* lowercase start; acronyms (GPU) may stay */ \
    CHECK(s_ &&s_[strlen(s_) - 1] != '.');                                                      \
    CHECK(strncmp(#name, "SY_", 3) == 0);                                                       \
    count++;                                                                                    \
  } while (0);
  SY_STATUS_LIST(CHECK_ONE_)
#undef CHECK_ONE_
  CHECK_EQ_INT(count, 13);
  CHECK_EQ_INT(SY_SUCCESS, 0);

  /* Values are distinct and every error is negative. */
  static const int values[] = {
#define VALUE_(name, value, text) value,
      SY_STATUS_LIST(VALUE_)
#undef VALUE_
  };
  const int n = (int)(sizeof values / sizeof values[0]);
  for (int i = 0; i < n; i++) {
    if (i > 0) CHECK(values[i] < 0);
    for (int j = i + 1; j < n; j++) CHECK(values[i] != values[j]);
  }

  /* Unknown values. */
  const int unknown[] = {1, 5, -13, -99, 1000};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    CHECK_EQ_STR(sy_status_name((sy_status_t)unknown[i]), "SY_UNKNOWN_STATUS");
    const char *s = sy_status_string((sy_status_t)unknown[i]);
    CHECK(s != NULL && s[0] != '\0');
  }
}

static void test_version(void) {
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", SY_VERSION_MAJOR, SY_VERSION_MINOR, SY_VERSION_PATCH);
  CHECK_EQ_STR(sy_version(), "0.1.0");
  CHECK_EQ_STR(sy_version(), want);
  CHECK_EQ_INT(sy_version_code(), SY_VERSION_CODE);
  CHECK_EQ_INT(SY_VERSION_CODE, SY_VERSION_MAJOR * 10000 + SY_VERSION_MINOR * 100 + SY_VERSION_PATCH);
}

static void test_backend_names(void) {
  CHECK_EQ_STR(sy_backend_name(SY_BACKEND_AUTO), "auto");
  CHECK_EQ_STR(sy_backend_name(SY_BACKEND_CUDA), "cuda");
  CHECK_EQ_STR(sy_backend_name(SY_BACKEND_HOST), "host");
  const char *other = sy_backend_name((sy_backend_t)42);
  CHECK(other != NULL && other[0] != '\0');
  CHECK(strcmp(other, "auto") && strcmp(other, "cuda") && strcmp(other, "host"));
}

int main(void) {
  test_status_table();
  test_version();
  test_backend_names();
  return check_report();
}
