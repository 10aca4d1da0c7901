/*
 * test_gpu_timeout.c — the never-hang path: every rank waits on a signal nobody raises, with a 500 ms
 * bound. The wait must end within its bound (plus launch and polling slack), the communicator must report
 * SY_ERR_TIMEOUT through sy_comm_async_error with a description, later calls must return it, and destroy
 * must succeed so the process exits cleanly.
 *
 * From world 2 the ranks enter the wait 300 ms apart (rank r after r x 300 ms): rank 0's wait times out first and
 * tells the others (device.cuh: report_error_ctx_at), so rank 1 (in its wait since 0.3 s) and rank 2 (entering at
 * 0.6 s, after the timeout) must end well before their own bound, each reporting rank 0's timeout as its own
 * error, as the host backend's ranks adopt the group's first timeout.
 */
#include <unistd.h>

#include "gpu_test.h"

int main(void) {
  gt_require_gpu("test_gpu_timeout");
  sy_comm_config_t cfg = SY_COMM_CONFIG_INIT;
  cfg.timeout_ms = 500;
  sy_comm_t comm = NULL;
  GT_OK(sy_comm_init(&comm, &cfg));
  int rank;
  GT_OK(sy_comm_rank(comm, &rank));
  gt_rank = rank;
  uint64_t *signal = NULL;
  GT_OK(sy_mem_alloc(comm, 64, (void **)&signal));
  GT_CUDA(cudaMemset(signal, 0, 64));
  GT_CUDA(cudaDeviceSynchronize());
  cudaStream_t stream;
  GT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  GT_OK(sy_comm_barrier(comm, stream)); /* the ranks leave it within a few ms of each other */
  GT_CUDA(cudaStreamSynchronize(stream));
  usleep((useconds_t)rank * 300000u);

  double t0 = gt_now_s();
  GT_OK(sy_signal_wait(comm, signal, 1, stream)); /* enqueued fine; fails on the device */
  GT_CUDA(cudaStreamSynchronize(stream));
  double waited = gt_now_s() - t0;
  if (waited > 3.0) GT_FAIL("the 500 ms wait took %.2f s", waited);

  sy_status_t async = SY_SUCCESS;
  char detail[256] = "";
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  if (async != SY_ERR_TIMEOUT) GT_FAIL("async error is %s, want SY_ERR_TIMEOUT", sy_status_name(async));
  GT_CHECK(strstr(detail, "signal_wait") != NULL);
  const char *at = strstr(detail, ": rank ");
  const int origin = at ? atoi(at + 7) : -1; /* the rank whose wait timed out */
  if (rank == 0) {
    GT_CHECK(waited >= 0.45);
    if (origin != 0) GT_FAIL("rank 0's detail names rank %d, want its own timeout: %s", origin, detail);
  } else {
    /* Its own bound would end it at 0.5 s or later; rank 0's timeout reaches it ~0.2 s into its wait (rank 1) or
     * at once (rank 2 and later: they enter after it). */
    if (origin != 0) GT_FAIL("detail names rank %d, want rank 0's timeout told to this rank: %s", origin, detail);
    if (waited >= 0.45) GT_FAIL("ended after %.3f s: rank 0's timeout did not cut its own 0.5 s bound short", waited);
  }
  printf("[test rank %d] wait ended after %.3f s: %s: %s%s\n", rank, waited, sy_status_name(async), detail,
         rank ? " (rank 0's timeout, told to this rank)" : "");

  /* after an error only destroy is accepted */
  GT_CHECK(sy_comm_barrier(comm, stream) == SY_ERR_TIMEOUT);
  GT_CHECK(sy_signal_wait(comm, signal, 1, stream) == SY_ERR_TIMEOUT);
  GT_CUDA(cudaStreamSynchronize(stream));
  GT_CUDA(cudaStreamDestroy(stream));
  GT_OK(sy_comm_destroy(comm));
  return gt_finish("test_gpu_timeout");
}
