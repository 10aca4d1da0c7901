/*
 * status.c — status names and strings (generated from SY_STATUS_LIST), the version, argument errors.
 */
#include "internal.h"

#include <stdio.h>

const char *sy_status_name(sy_status_t status) {
  switch (status) {
#define SY_STATUS_NAME_(name, value, text) \
  case name: return #name;
    SY_STATUS_LIST(SY_STATUS_NAME_)
#undef SY_STATUS_NAME_
  }
  return "SY_UNKNOWN_STATUS";
}

const char *sy_status_string(sy_status_t status) {
  switch (status) {
#define SY_STATUS_TEXT_(name, value, text) \
  case name: return text;
    SY_STATUS_LIST(SY_STATUS_TEXT_)
#undef SY_STATUS_TEXT_
  }
  return "unknown status";
}

#define SY_STR_(x) #x
#define SY_STR(x)  SY_STR_(x)
const char *sy_version(void) {
  return SY_STR(SY_VERSION_MAJOR) "." SY_STR(SY_VERSION_MINOR) "." SY_STR(SY_VERSION_PATCH);
}
int sy_version_code(void) { return SY_VERSION_CODE; }

const char *sy_backend_name(sy_backend_t backend) {
  switch (backend) {
    case SY_BACKEND_AUTO: return "auto";
    case SY_BACKEND_CUDA: return "cuda";
    case SY_BACKEND_HOST: return "host";
  }
  return "unknown";
}

void sy__arg_error(const char *func, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  sy__log_as(SY_LOG_WARN, SY_RECORD_REPLACE, __FILE__, __LINE__, "%s: invalid argument: %s", func, what);
}
