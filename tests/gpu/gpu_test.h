/*
 * gpu_test.h — what the GPU tests share: skip cleanly (exit 77, with the reason) where no GPU is visible,
 * check helpers that name the rank, and the CPU oracle — the host backend of the same library, run in this
 * process on threads, fed the same inputs — that GPU results are compared with bit for bit. Seeded inputs
 * come from tests/workload (workload.h): the payload every test uses is wl_payload_byte (never zero: each
 * byte encodes seed, source, destination and position), the random numbers wl_rand. GPU tests link the
 * shared library and sy_workload and use only the public API, as a user would.
 */
#ifndef SY_GPU_TEST_H
#define SY_GPU_TEST_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "switchyard.h"
#include "workload.h"

static int gt_rank = -1;
static int gt_failures;

#define GT_FAIL(...)                                                        \
  do {                                                                      \
    fprintf(stderr, "[test rank %d] %s:%d: ", gt_rank, __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                           \
    fprintf(stderr, "\n");                                                  \
    __atomic_fetch_add(&gt_failures, 1, __ATOMIC_RELAXED);                  \
  } while (0)

#define GT_CHECK(cond)                               \
  do {                                               \
    if (!(cond)) GT_FAIL("check failed: %s", #cond); \
  } while (0)

/* A call that must succeed; a failure ends the test (later steps would only cascade). */
#define GT_OK(call)                                                                            \
  do {                                                                                         \
    sy_status_t gt_st_ = (call);                                                               \
    if (gt_st_ != SY_SUCCESS) {                                                                \
      GT_FAIL("%s returned %s (%s)", #call, sy_status_name(gt_st_), sy_status_string(gt_st_)); \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

#define GT_CUDA(call)                                        \
  do {                                                       \
    cudaError_t gt_err_ = (call);                            \
    if (gt_err_ != cudaSuccess) {                            \
      GT_FAIL("%s: %s", #call, cudaGetErrorString(gt_err_)); \
      exit(1);                                               \
    }                                                        \
  } while (0)

/* Exit 77 (CTest: skipped) with the reason when no GPU can be used here. */
static inline void gt_require_gpu(const char *test) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    printf("SKIP: %s needs a CUDA GPU: %s\n", test, err != cudaSuccess ? cudaGetErrorString(err) : "none visible");
    exit(77);
  }
}

/* The opening of most GPU tests: skip without a GPU, a default communicator (rank and world from the
 * launcher), the rank for the failure messages. */
static inline sy_comm_t gt_init(const char *test, int *rank, int *world) {
  gt_require_gpu(test);
  sy_comm_t comm = NULL;
  GT_OK(sy_comm_init(&comm, NULL));
  GT_OK(sy_comm_rank(comm, rank));
  GT_OK(sy_comm_size(comm, world));
  gt_rank = *rank;
  return comm;
}

static inline int gt_finish(const char *test) {
  if (gt_failures) {
    fprintf(stderr, "[test rank %d] FAILED: %s: %d failures\n", gt_rank, test, gt_failures);
    return 1;
  }
  printf("[test rank %d] passed: %s\n", gt_rank, test);
  return 0;
}

static inline double gt_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the CPU oracle: run fn(rank, comm, arg) on `world` threads over the host backend ---------------- */
typedef void (*gt_host_fn)(int rank, sy_comm_t comm, void *arg);
typedef struct {
  int rank, world, group;
  gt_host_fn fn;
  void *arg;
  sy_status_t status;
} gt_host_thread_t;

static void *gt_host_thread(void *p) {
  gt_host_thread_t *t = (gt_host_thread_t *)p;
  sy_comm_config_t cfg = SY_COMM_CONFIG_INIT;
  cfg.backend = SY_BACKEND_HOST;
  cfg.rank = t->rank;
  cfg.world_size = t->world;
  cfg.host_group = t->group;
  sy_comm_t comm = NULL;
  t->status = sy_comm_init(&comm, &cfg);
  if (t->status == SY_SUCCESS) {
    t->fn(t->rank, comm, t->arg);
    t->status = sy_comm_destroy(comm);
  }
  return NULL;
}

static inline void gt_run_host(int world, gt_host_fn fn, void *arg) {
  static int group = 1000;
  gt_host_thread_t *t = (gt_host_thread_t *)calloc((size_t)world, sizeof *t);
  pthread_t *tid = (pthread_t *)calloc((size_t)world, sizeof *tid);
  group++;
  for (int r = 0; r < world; r++) {
    t[r].rank = r;
    t[r].world = world;
    t[r].group = group;
    t[r].fn = fn;
    t[r].arg = arg;
    pthread_create(&tid[r], NULL, gt_host_thread, &t[r]);
  }
  for (int r = 0; r < world; r++) {
    pthread_join(tid[r], NULL);
    if (t[r].status != SY_SUCCESS) GT_FAIL("host oracle rank %d: %s", r, sy_status_name(t[r].status));
  }
  free(t);
  free(tid);
}

/* Compare a GPU result with the oracle's, reporting the first few differing bytes. Returns #wrong bytes. */
static inline size_t gt_compare(const char *what, const uint8_t *got, const uint8_t *want, size_t bytes) {
  size_t wrong = 0;
  for (size_t i = 0; i < bytes; i++) {
    if (got[i] != want[i]) {
      if (wrong < 5) GT_FAIL("%s: byte %zu is 0x%02x, want 0x%02x", what, i, got[i], want[i]);
      wrong++;
    }
  }
  if (wrong) GT_FAIL("%s: %zu of %zu bytes wrong", what, wrong, bytes);
  return wrong;
}

#endif
