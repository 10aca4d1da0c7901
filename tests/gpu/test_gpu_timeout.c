/*
 * test_gpu_timeout.c — the never-hang path: every rank waits on a signal nobody raises, with a 500 ms
 * bound. The wait must end within its bound (plus launch and polling slack), the communicator must report
 * SY_ERR_TIMEOUT through sy_comm_async_error with a description, later calls must return it, and destroy
 * must succeed so the process exits cleanly.
 */
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

  double t0 = gt_now_s();
  GT_OK(sy_signal_wait(comm, signal, 1, stream)); /* enqueued fine; fails on the device */
  GT_CUDA(cudaStreamSynchronize(stream));
  double waited = gt_now_s() - t0;
  GT_CHECK(waited >= 0.45);
  if (waited > 3.0) GT_FAIL("the 500 ms wait took %.2f s", waited);

  sy_status_t async = SY_SUCCESS;
  char detail[256] = "";
  GT_OK(sy_comm_async_error(comm, &async, detail, sizeof detail));
  if (async != SY_ERR_TIMEOUT) GT_FAIL("async error is %s, want SY_ERR_TIMEOUT", sy_status_name(async));
  GT_CHECK(strstr(detail, "signal_wait") != NULL);
  printf("[test rank %d] wait ended after %.3f s: %s: %s\n", rank, waited, sy_status_name(async), detail);

  /* after an error only destroy is accepted */
  GT_CHECK(sy_comm_barrier(comm, stream) == SY_ERR_TIMEOUT);
  GT_CHECK(sy_signal_wait(comm, signal, 1, stream) == SY_ERR_TIMEOUT);
  GT_CUDA(cudaStreamSynchronize(stream));
  GT_CUDA(cudaStreamDestroy(stream));
  GT_OK(sy_comm_destroy(comm));
  return gt_finish("test_gpu_timeout");
}
