/*
 * log.h — the library's one log and its error trail: SY_WARN/SY_INFO/SY_TRACE lines (SY_DEBUG, SY_DEBUG_FILE),
 * SY_CHECK (propagate a failure, leaving a one-line trail at INFO), SY_ARG_CHECK (reject bad input at the API
 * boundary, naming the function, the argument and its value), and what of them each thread keeps for
 * sy_last_error. Implemented in log.c and status.c.
 */
#ifndef SY_CORE_LOG_H
#define SY_CORE_LOG_H

#include "switchyard.h"

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------ */
/* Logging: SY_DEBUG=NONE|WARN|INFO|TRACE, SY_DEBUG_FILE (%h host, %p pid, %r rank). Lines look like  */
/* "[rank 3] sy warn: alltoallv: recv_offsets[2]=4096 ..." — lowercase, one event per line.           */
/* ------------------------------------------------------------------------------------------------ */
typedef enum sy_log_level { SY_LOG_NONE = 0, SY_LOG_WARN = 1, SY_LOG_INFO = 2, SY_LOG_TRACE = 3 } sy_log_level_t;

void sy__log(sy_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int sy__log_enabled(sy_log_level_t level);
/* The rank printed in this thread's log lines (threads of the host backend each have their own). */
void sy__log_set_rank(int rank);
int sy__log_get_rank(void);
/* Re-reads SY_DEBUG / SY_DEBUG_FILE (tests change them). */
void sy__log_reset(void);

/* sy_last_error, the calling thread's message of its last failure (switchyard.h). A call clears it as it opens
 * (sy__api_enter); then the first report of the failure fills it, whatever the log level: the first WARN line (a
 * later line is a consequence: "init failed" after the timeout that caused it), else the first SY_CHECK trail (a
 * failure that logged nothing still says where it came from). An argument error always replaces it: it is the
 * cause, found at the boundary before anything else could be. */
typedef enum sy_record { SY_RECORD_NONE, SY_RECORD_FIRST, SY_RECORD_REPLACE } sy_record_t;
void sy__log_as(sy_log_level_t level, sy_record_t record, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The opening of a public call on this thread: the log's rank, and sy_last_error cleared. */
void sy__api_enter(int rank);
/* sy_last_error cleared (a call that has no rank yet, or never logs one). */
void sy__last_error_clear(void);

#define SY_WARN(...)  sy__log(SY_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define SY_INFO(...)  sy__log(SY_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define SY_TRACE(...) sy__log(SY_LOG_TRACE, __FILE__, __LINE__, __VA_ARGS__)

/* Propagate a failure with a one-line trail (at INFO, so a failing call prints its path when asked; the first
 * trail of a call that reported nothing else is its sy_last_error). */
#define SY_TRAIL(expr_text, status) \
  sy__log_as(SY_LOG_INFO, SY_RECORD_FIRST, __FILE__, __LINE__, "%s -> %s", expr_text, sy_status_name(status))

#define SY_CHECK(expr)                     \
  do {                                     \
    sy_status_t sy_check_status_ = (expr); \
    if (sy_check_status_ != SY_SUCCESS) {  \
      SY_TRAIL(#expr, sy_check_status_);   \
      return sy_check_status_;             \
    }                                      \
  } while (0)

#define SY_CHECK_GOTO(expr, status_var, label) \
  do {                                         \
    (status_var) = (expr);                     \
    if ((status_var) != SY_SUCCESS) {          \
      SY_TRAIL(#expr, status_var);             \
      goto label;                              \
    }                                          \
  } while (0)

/* Reject bad input at the API boundary, naming the function, the argument and its value. */
#define SY_ARG_CHECK(cond, func, ...)   \
  do {                                  \
    if (!(cond)) {                      \
      sy__arg_error(func, __VA_ARGS__); \
      return SY_ERR_INVALID_ARG;        \
    }                                   \
  } while (0)
void sy__arg_error(const char *func, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
