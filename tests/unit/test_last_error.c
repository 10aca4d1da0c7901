/*
 * test_last_error.c — sy_last_error, the message of the calling thread's last failure (switchyard.h):
 *   named argument   a bad argument's message names the function, the argument and its value, with the log
 *                    switched off too (SY_DEBUG=NONE); a call that opens clears it; the status functions leave it
 *   first cause      the first report of a failure is its message, not the trail that carried it out
 *   per thread       another thread's failure does not show here, nor this thread's there
 *   refusal          after a timed-out wait, the refused call's message is the communicator's description
 */
#include "core/log.h"
#include "ranks.h"

#include <stdlib.h>
#include <string.h>

#define CHECK_HAS(text, part)                                                                                          \
  do {                                                                                                                 \
    const char *has_text_ = (text);                                                                                    \
    __atomic_fetch_add(&check_count_, 1, __ATOMIC_RELAXED);                                                            \
    if (!has_text_ || !strstr(has_text_, (part))) {                                                                    \
      __atomic_fetch_add(&check_failures_, 1, __ATOMIC_RELAXED);                                                       \
      fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__, has_text_ ? has_text_ : "(null)", \
              (part));                                                                                                 \
    }                                                                                                                  \
  } while (0)

/* ---- named argument --------------------------------------------------------------------------------------- */

static void named_argument(int rank, sy_comm_t comm, void *arg) {
  (void)rank, (void)arg;
  void *recv = NULL;
  CHECK_OK(sy_mem_alloc(comm, 256, &recv));
  CHECK_EQ_STR(sy_last_error(), "");
  CHECK_STATUS(sy_alltoall(comm, NULL, recv, 64, NULL), SY_ERR_INVALID_ARG);
  CHECK_EQ_STR(sy_last_error(), "sy_alltoall: invalid argument: send is NULL with bytes_per_rank=64");
  /* the status functions leave it; the next call clears it as it opens */
  CHECK_EQ_STR(sy_status_name(SY_ERR_INVALID_ARG), "SY_ERR_INVALID_ARG");
  (void)sy_status_string(SY_ERR_INVALID_ARG), (void)sy_version();
  CHECK_HAS(sy_last_error(), "bytes_per_rank=64");
  CHECK_OK(sy_alltoall(comm, (char *)recv + 128, recv, 64, NULL)); /* send apart from recv: no in-place all-to-all */
  CHECK_EQ_STR(sy_last_error(), "");
  CHECK_STATUS(sy_alltoall(comm, recv, recv, 512, NULL), SY_ERR_INVALID_ARG);
  CHECK_HAS(sy_last_error(), "sy_alltoall: invalid argument: ");
  CHECK_HAS(sy_last_error(), "bytes_per_rank=512");
  CHECK_OK(sy_mem_free(comm, recv));
}

static void test_named_argument(void) {
  const char *fresh = sy_last_error();
  CHECK(fresh != NULL);
  CHECK_EQ_STR(fresh, "");
  run_ranks(1, named_argument, NULL);

  /* no communicator: sy_comm_init's own checks, with the log off */
  setenv("SY_DEBUG", "NONE", 1);
  sy__log_reset();
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  config.backend = SY_BACKEND_HOST;
  config.rank = 0;
  config.world_size = 0;
  sy_comm_t comm = NULL;
  CHECK_STATUS(sy_comm_init(&comm, &config), SY_ERR_INVALID_ARG);
  CHECK_EQ_STR(sy_last_error(), "sy_comm_init: invalid argument: config->world_size=0 must be >= 1");
  CHECK_STATUS(sy_comm_rank(NULL, NULL), SY_ERR_INVALID_ARG);
  CHECK_HAS(sy_last_error(), "sy_comm_rank: invalid argument: comm=");
  unsetenv("SY_DEBUG");
  sy__log_reset();
}

/* ---- first cause -------------------------------------------------------------------------------------------- */

static void test_first_cause(void) {
  /* resolve_backend warns, then sy_comm_init's SY_CHECK leaves its trail: the warning is the message */
  setenv("SY_BACKEND", "gpu", 1);
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  sy_comm_t comm = NULL;
  CHECK_STATUS(sy_comm_init(&comm, &config), SY_ERR_INVALID_ARG);
  CHECK_EQ_STR(sy_last_error(), "environment variable SY_BACKEND=gpu is not auto, cuda or host");
  unsetenv("SY_BACKEND");

  /* a trail alone, where nothing else reported the failure */
  sy__last_error_clear();
  sy__log_as(SY_LOG_INFO, SY_RECORD_FIRST, __FILE__, __LINE__, "%s -> %s", "inner()", "SY_ERR_NO_MEMORY");
  sy__log_as(SY_LOG_INFO, SY_RECORD_FIRST, __FILE__, __LINE__, "%s -> %s", "outer()", "SY_ERR_NO_MEMORY");
  CHECK_EQ_STR(sy_last_error(), "inner() -> SY_ERR_NO_MEMORY");
  sy__api_enter(-1);
  CHECK_EQ_STR(sy_last_error(), "");
}

/* ---- per thread --------------------------------------------------------------------------------------------- */

static void *fail_in_thread(void *arg) {
  char *seen = arg;
  CHECK_EQ_STR(sy_last_error(), ""); /* not the main thread's */
  CHECK_STATUS(sy_comm_size(NULL, NULL), SY_ERR_INVALID_ARG);
  snprintf(seen, 256, "%s", sy_last_error());
  return NULL;
}

static void test_per_thread(void) {
  CHECK_STATUS(sy_comm_backend(NULL, NULL), SY_ERR_INVALID_ARG);
  char seen[256] = "";
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fail_in_thread, seen) == 0);
  pthread_join(t, NULL);
  CHECK_HAS(seen, "sy_comm_size: invalid argument");
  CHECK_HAS(sy_last_error(), "sy_comm_backend: invalid argument");
}

/* ---- refusal after a timeout -------------------------------------------------------------------------------- */

static void refusal(int rank, sy_comm_t comm, void *arg) {
  (void)arg;
  if (rank == 1) {
    struct timespec ts = {0, 600 * 1000000L}; /* never enters the barrier: rank 0's wait ends at the bound */
    nanosleep(&ts, NULL);
    return;
  }
  CHECK_STATUS(sy_comm_barrier(comm, NULL), SY_ERR_TIMEOUT);
  char first[1024];
  snprintf(first, sizeof first, "%s", sy_last_error());
  CHECK(first[0] != '\0');
  sy_status_t again = sy_comm_barrier(comm, NULL);
  CHECK(again == SY_ERR_TIMEOUT || again == SY_ERR_ABORTED);
  CHECK_HAS(sy_last_error(), "sy_comm_barrier: refused: the communicator failed earlier: ");
  CHECK_HAS(sy_last_error(), first); /* the communicator's description is the timeout's line */
}

static void test_refusal(void) { run_ranks_timeout(2, 200, refusal, NULL); }

int main(void) {
  test_named_argument();
  test_first_cause();
  test_per_thread();
  test_refusal();
  return check_report();
}
