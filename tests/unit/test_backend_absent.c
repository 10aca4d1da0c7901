/*
 * test_backend_absent.c — a build without the cuda backend (cmake -DSY_CUDA_KERNELS=OFF, the sanitizer builds
 * CI makes; src/cuda/absent.c): the backend is never available, so SY_BACKEND=auto runs the host backend, and
 * asking for cuda by name (config or environment) fails at sy_comm_init with SY_ERR_UNSUPPORTED and a log line
 * that says why, leaving no communicator. A build with the cuda backend has nothing to check here.
 */
#include "check.h"
#include "core/internal.h"
#include "switchyard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if SY_TEST_CUDA_KERNELS
int main(void) {
  printf("built with the cuda backend: nothing to check\n");
  return 0;
}
#else

static sy_comm_config_t config_for(sy_backend_t backend) {
  sy_comm_config_t config = SY_COMM_CONFIG_INIT;
  config.backend = backend;
  config.rank = 0;
  config.world_size = 1;
  config.heap_bytes = 1 << 20;
  return config;
}

static void test_absent(void) {
  char reason[256] = "";
  CHECK_EQ_INT(sy__cuda_available(reason, sizeof reason), 0);
  CHECK(strstr(reason, "SY_CUDA_KERNELS=OFF") != NULL);

  /* cuda by name: refused, nothing created, the log says why. */
  sy_comm_t comm = (sy_comm_t)&comm; /* not NULL: the call must clear it */
  sy_comm_config_t config = config_for(SY_BACKEND_CUDA);
  CHECK_STATUS(sy_comm_init(&comm, &config), SY_ERR_UNSUPPORTED);
  CHECK(comm == NULL);
  CHECK(check_log_has("this build has no cuda backend (configured with SY_CUDA_KERNELS=OFF)", __LINE__));
  setenv("SY_BACKEND", "cuda", 1);
  config = config_for(SY_BACKEND_AUTO);
  CHECK_STATUS(sy_comm_init(&comm, &config), SY_ERR_UNSUPPORTED);
  CHECK(comm == NULL);

  /* auto: the host backend runs. */
  setenv("SY_BACKEND", "auto", 1);
  CHECK_OK(sy_comm_init(&comm, &config));
  sy_backend_t backend = SY_BACKEND_CUDA;
  if (comm) {
    CHECK_OK(sy_comm_backend(comm, &backend));
    CHECK_OK(sy_comm_destroy(comm));
  }
  CHECK_EQ_INT(backend, SY_BACKEND_HOST);
}

int main(void) {
  char dir[] = "/tmp/sy_test_backend_absent_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(check_log_path, sizeof check_log_path, "%s/log.txt", dir);
  setenv("SY_DEBUG_FILE", check_log_path, 1);
  setenv("SY_DEBUG", "WARN", 1);
  sy__log_reset();

  test_absent();

  unsetenv("SY_DEBUG_FILE");
  sy__log_reset();
  unlink(check_log_path);
  CHECK_EQ_INT(rmdir(dir), 0);
  return check_report();
}
#endif
