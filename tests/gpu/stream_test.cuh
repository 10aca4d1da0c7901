/*
 * stream_test.cuh — what the orchestration GPU tests share (test_gpu_pool.cu): a spinner kernel that holds a stream
 * until the host releases it (bounded by its own clock), bounded waits for streams, payload patterns, and the probe
 * that kernels of two streams run side by side (compute-sanitizer serialises them).
 */
#ifndef SY_TEST_STREAM_TEST_CUH
#define SY_TEST_STREAM_TEST_CUH

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include "gpu_test.h"

#define SPIN_BOUND_NS 6000000000ull /* a spinner ends itself after 6 s, released or not */
#define STALL_S       4.0           /* what other work may take while a spinner runs (inside its bound) */
#define DONE_S        60.0          /* what finite work may take (generous: compute-sanitizer is slow) */
#define ALARM_S       400           /* the whole test, as a last resort */

typedef struct {
  volatile int *flag, *state; /* pinned and mapped: the host releases the spinner; the spinner says where it is */
  int *flag_dev, *state_dev;
  cudaStream_t stream;
} spinner_t;

typedef struct {
  sy_comm_t comm;
  sy_pool_t pool; /* default config (keeps its memory); shared by checks 1, 2, 4, 6 */
  spinner_t spin;
  uint32_t *host;    /* pinned, 1 MiB: results copied back */
  uint32_t *scratch; /* device, 4 KiB: the concurrency probe's kernel */
} fixture_t;

/* ---- kernels ------------------------------------------------------------------------------------------- */
__device__ static inline uint64_t global_ns(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Word k of the payload for `seed`; never zero, so unwritten (zeroed) memory shows. */
__host__ __device__ static inline uint32_t pattern(uint32_t seed, uint32_t k) {
  uint32_t x = (seed + 1u) * 0x9E3779B1u ^ (k * 0x85EBCA6Bu);
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  return x | 1u;
}

enum { SPIN_IDLE = 0, SPIN_RUNNING = 1, SPIN_RELEASED = 2, SPIN_TIMED_OUT = 3 };

__global__ void spin_kernel(volatile int *flag, volatile int *state, uint64_t bound_ns) {
  const uint64_t t0 = global_ns();
  *state = SPIN_RUNNING;
  __threadfence_system();
  while (*flag == 0) {
    if (global_ns() - t0 > bound_ns) {
      *state = SPIN_TIMED_OUT;
      return;
    }
    __nanosleep(1000);
  }
  *state = SPIN_RELEASED;
}

__global__ void delay_kernel(uint64_t ns) {
  const uint64_t t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
}

/* seed_dev non-NULL: the seed is read on the device at run time (a graph's replays each write a new one). */
__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t seed, const uint32_t *seed_dev = NULL) {
  const uint32_t s = seed_dev ? *seed_dev : seed;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = pattern(s, (uint32_t)i);
}

__global__ void set_seed_kernel(uint32_t *seed, uint32_t value) { *seed = value; }

/* Counts the words of `copied` (wrong[0]) and of the host slot read through its mapped address (wrong[1]) that
 * are not batch `seed`'s payload. */
__global__ void check_batch_kernel(const uint32_t *copied, const uint32_t *slot, size_t n, uint32_t seed,
                                   unsigned long long *wrong) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint32_t want = pattern(seed, (uint32_t)i);
    if (copied[i] != want) atomicAdd(&wrong[0], 1ull);
    if (slot[i] != want) atomicAdd(&wrong[1], 1ull);
  }
}

/* ---- host helpers -------------------------------------------------------------------------------------- */
static void on_alarm(int sig) {
  static const char msg[] = "test_gpu_pool: still running at the alarm: a wait without a deadline hung\n";
  (void)sig;
  if (write(2, msg, sizeof msg - 1) < 0) _exit(2);
  _exit(1);
}

/* Polls until `stream` is done or `seconds` pass: true when done. A CUDA error (not "not ready") ends the test. */
static bool wait_stream(cudaStream_t stream, double seconds) {
  const double deadline = gt_now_s() + seconds;
  for (;;) {
    const cudaError_t err = cudaStreamQuery(stream);
    if (err == cudaSuccess) return true;
    if (err != cudaErrorNotReady) {
      GT_FAIL("cudaStreamQuery: %s", cudaGetErrorString(err));
      exit(1);
    }
    if (gt_now_s() > deadline) return false;
    sched_yield();
  }
}

/* Work that must end: a stream still busy after `seconds` ends the test (later calls could block on it). */
static void finish_stream(cudaStream_t stream, double seconds, const char *what) {
  if (!wait_stream(stream, seconds)) {
    GT_FAIL("%s: the stream is still busy after %.0f s", what, seconds);
    exit(1);
  }
}

static size_t expect_pattern(const char *what, const uint32_t *got, size_t n, uint32_t seed) {
  size_t wrong = 0;
  for (size_t k = 0; k < n; k++) {
    if (got[k] == pattern(seed, (uint32_t)k)) continue;
    if (wrong < 3)
      GT_FAIL("%s: word %zu is 0x%08x, want 0x%08x (seed %u)", what, k, got[k], pattern(seed, (uint32_t)k), seed);
    wrong++;
  }
  if (wrong) GT_FAIL("%s: %zu of %zu words wrong", what, wrong, n);
  return wrong;
}

/* A library call inside a check: a failure is reported and the check goes on. Evaluates to true on success. */
#define EXPECT_OK(what, call) expect_ok_((what), #call, (call))
static bool expect_ok_(const char *what, const char *call, sy_status_t st) {
  if (st != SY_SUCCESS) GT_FAIL("%s: %s returned %s (%s)", what, call, sy_status_name(st), sy_status_string(st));
  return st == SY_SUCCESS;
}

static void expect_refused(const char *what, const char *call, sy_status_t st) {
  if (st != SY_ERR_INVALID_ARG) GT_FAIL("%s: %s returned %s, want SY_ERR_INVALID_ARG", what, call, sy_status_name(st));
}

/* Launches the spinner on `stream` and waits (bounded) until it runs. */
static void spinner_start(spinner_t *sp, cudaStream_t stream, const char *what) {
  *sp->flag = 0;
  *sp->state = SPIN_IDLE;
  sp->stream = stream;
  spin_kernel<<<1, 1, 0, stream>>>(sp->flag_dev, sp->state_dev, SPIN_BOUND_NS);
  GT_CUDA(cudaGetLastError());
  const double deadline = gt_now_s() + DONE_S;
  while (*sp->state == SPIN_IDLE && gt_now_s() < deadline) sched_yield();
  if (*sp->state == SPIN_IDLE) {
    GT_FAIL("%s: the spinner kernel did not start in %.0f s", what, DONE_S);
    exit(1);
  }
}

/* Releases the spinner, waits (bounded) for its stream; the spinner must have been released, not timed out. */
static void spinner_stop(spinner_t *sp, const char *what) {
  *sp->flag = 1;
  finish_stream(sp->stream, DONE_S, what);
  if (*sp->state != SPIN_RELEASED)
    GT_FAIL("%s: the spinner ended by its %.0f s bound (state %d), not released: the host was held up", what,
            SPIN_BOUND_NS * 1e-9, *sp->state);
}

/* Set when kernels_overlap found kernels serialised (compute-sanitizer): the GPU then keeps pace with the host,
 * which may never wait for a staging slot (check 5). */
static bool g_serialised = false;

/* The premise of checks 1 and 2: a plain kernel on `other` runs while a spinner holds `spin_stream`. */
static bool kernels_overlap(fixture_t *f, cudaStream_t spin_stream, cudaStream_t other, const char *what) {
  spinner_start(&f->spin, spin_stream, what);
  fill_kernel<<<1, 32, 0, other>>>(f->scratch, 32, 7);
  GT_CUDA(cudaGetLastError());
  const bool overlap = wait_stream(other, STALL_S) && cudaStreamQuery(spin_stream) == cudaErrorNotReady;
  if (overlap) {
    spinner_stop(&f->spin, what);
  } else { /* serialised: the spinner may well have run into its bound before the probe kernel ran */
    *f->spin.flag = 1;
    finish_stream(spin_stream, DONE_S, what);
  }
  finish_stream(other, DONE_S, what);
  if (!overlap) g_serialised = true;
  if (!overlap)
    printf(
        "[test rank %d] %s: not run: no kernel ran beside a spinning one in %.0f s (serialised: compute-sanitizer?)\n",
        gt_rank, what, STALL_S);
  return overlap;
}

#endif
