/*
 * test_gpu_pool.cu — the orchestration pools (switchyard.h, "Orchestration": sy_pool_*, sy_host_pool_*) on one
 * GPU, called as a user calls them. Nine checks:
 *   1. no device-wide stall: pool alloc / kernel / free rounds on one stream finish while another stream spins;
 *   2. the legacy default stream is never touched: pool and host-pool calls finish while it spins;
 *   3. the pool's stats: counts exact, reserved memory kept (threshold SIZE_MAX), trimmed, or given back
 *      (threshold 0); bad frees and allocations refused with nothing changed;
 *   4. memory freed on one stream reaches another only in stream order (after an event, and without one);
 *   5. host-pool slots never come back before the stream is done with them (300 batches through 3 slots);
 *   6. alloc / free inside a stream capture, replayed; a host-pool release inside a capture refused;
 *   7. attention plans built and uploaded (sy_attn_plan_create, _create_async) while the legacy stream spins;
 *   8. sy_attn_plan_destroy returns only after the device is done (a kernel on another stream);
 *   9. the MoE receive arena's frees in stream order (check_arena).
 * Nothing may hang: every wait for the GPU polls with a host-side deadline, the spinner kernels end themselves
 * after SPIN_BOUND_NS, and an alarm ends the process as a last resort. Checks 1 and 2 need two kernels of one
 * process to run at once; where they do not (compute-sanitizer runs kernels one at a time) a probe says so and
 * those two are reported as not run. Under syrun with several ranks (sharing a GPU or not) each rank runs the
 * same checks on its own communicator.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include "stream_test.cuh"

/* ---- 1. no device-wide stall --------------------------------------------------------------------------- */
/* 200 rounds of (alloc 1 MiB, a kernel writing it, free) on stream B while a kernel spins on stream A: B must
 * finish while A still spins (cudaMalloc / cudaFree would wait for A). One round's buffer is copied back. */
static void check_no_stall(fixture_t *f) {
  const char *what = "check 1 (no device-wide stall)";
  const size_t bytes = 1 << 20, n = bytes / 4;
  const int rounds = 200, kept = 123;
  cudaStream_t a, b;
  GT_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  GT_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  if (kernels_overlap(f, a, b, what)) {
    memset(f->host, 0, bytes); /* poison: a copy that never happened shows */
    spinner_start(&f->spin, a, what);
    const double t0 = gt_now_s();
    int done = 0;
    double t_first = 0; /* the first round may grow the pool */
    for (int i = 0; i < rounds; i++) {
      void *p = NULL;
      if (!EXPECT_OK(what, sy_pool_alloc(f->pool, bytes, &p, b))) break;
      fill_kernel<<<256, 256, 0, b>>>((uint32_t *)p, n, 1000u + i);
      if (i == kept) GT_CUDA(cudaMemcpyAsync(f->host, p, bytes, cudaMemcpyDeviceToHost, b));
      if (!EXPECT_OK(what, sy_pool_free(f->pool, p, b))) break;
      if (done++ == 0) t_first = gt_now_s() - t0;
    }
    GT_CUDA(cudaGetLastError());
    const double t_calls = gt_now_s() - t0;
    const bool b_done = wait_stream(b, STALL_S);
    const double t_b = gt_now_s() - t0;
    const cudaError_t a_now = cudaStreamQuery(a);
    if (!b_done)
      GT_FAIL("%s: stream B's %d rounds not done after %.1f s (calls %.3f s, the first %.3f s) while stream A spun",
              what, done, t_b, t_calls, t_first);
    else if (a_now != cudaErrorNotReady)
      GT_FAIL(
          "%s: the spinner on stream A was over (%s) when stream B finished after %.3f s (calls %.3f s, the first "
          "%.3f s)",
          what, cudaGetErrorName(a_now), t_b, t_calls, t_first);
    else
      printf("[test rank %d] %s: %d rounds of 1 MiB done in %.2f ms (calls %.2f ms) while another stream spun\n",
             gt_rank, what, done, t_b * 1e3, t_calls * 1e3);
    spinner_stop(&f->spin, what);
    finish_stream(b, DONE_S, what);
    if (done > kept) expect_pattern("check 1: round 123's buffer", f->host, n, 1000u + kept);
  }
  GT_CUDA(cudaStreamDestroy(a));
  GT_CUDA(cudaStreamDestroy(b));
}

/* ---- 2. the legacy default stream is never touched ----------------------------------------------------- */
/* A spinner on the legacy default stream; on a non-blocking stream B every stream-ordered and host-side pool
 * call. A call that synchronised with the legacy stream would not return until the spinner ends; work it put on
 * the legacy stream (a slot's host function) would not run until then. The pools are made before the spinner:
 * creation may call cudaMemPoolCreate / cudaHostAlloc, which may synchronise the device and are not on the
 * stream-ordered path (the device pool is the fixture's, made in main). */
static void check_legacy_untouched(fixture_t *f) {
  const char *what = "check 2 (legacy default stream untouched)";
  const size_t bytes = 4096, n = bytes / 4;
  cudaStream_t b;
  GT_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  sy_host_pool_config_t hc = SY_HOST_POOL_CONFIG_INIT;
  hc.slot_bytes = bytes;
  hc.slots = 2;
  sy_host_pool_t hp = NULL;
  GT_OK(sy_host_pool_create(f->comm, &hc, &hp));
  if (kernels_overlap(f, cudaStreamLegacy, b, what)) {
    memset(f->host, 0, bytes);
    spinner_start(&f->spin, cudaStreamLegacy, what);
    const double t0 = gt_now_s();
    void *p = NULL, *slot = NULL;
    sy_pool_stats_t ps = SY_POOL_STATS_INIT;
    sy_host_pool_stats_t hs = SY_HOST_POOL_STATS_INIT;
    bool copied = false;
    if (EXPECT_OK(what, sy_pool_alloc(f->pool, 64 << 10, &p, b))) {
      if (EXPECT_OK(what, sy_host_pool_acquire(hp, &slot))) {
        for (size_t k = 0; k < n; k++) ((uint32_t *)slot)[k] = pattern(2000, (uint32_t)k);
        GT_CUDA(cudaMemcpyAsync(p, slot, bytes, cudaMemcpyHostToDevice, b));
        EXPECT_OK(what, sy_host_pool_release(hp, slot, b));
        GT_CUDA(cudaMemcpyAsync(f->host, p, bytes, cudaMemcpyDeviceToHost, b));
        copied = true;
      }
      EXPECT_OK(what, sy_pool_free(f->pool, p, b));
    }
    EXPECT_OK(what, sy_pool_stats(f->pool, &ps));
    EXPECT_OK(what, sy_pool_trim(f->pool, 0));
    EXPECT_OK(what, sy_host_pool_stats(hp, &hs));
    const double t_calls = gt_now_s() - t0;
    const bool b_done = wait_stream(b, STALL_S);
    int free_slots = -1; /* the slot's host function runs after stream B gets there */
    for (;;) {
      EXPECT_OK(what, sy_host_pool_stats(hp, &hs));
      if ((free_slots = hs.free_slots) == 2 || gt_now_s() > t0 + STALL_S) break;
      sched_yield();
    }
    const double t_all = gt_now_s() - t0;
    const cudaError_t legacy_now = cudaStreamQuery(cudaStreamLegacy);
    if (!b_done)
      GT_FAIL("%s: stream B was not done %.1f s after the calls began (they took %.3f s)", what, t_all, t_calls);
    if (free_slots != 2)
      GT_FAIL("%s: %d of 2 slots free %.1f s after a release on stream B: the slot's host function waits", what,
              free_slots, t_all);
    if (legacy_now != cudaErrorNotReady)
      GT_FAIL("%s: the legacy stream's spinner was over (%s) after %.3f s (calls took %.3f s): a call waited for it",
              what, cudaGetErrorName(legacy_now), t_all, t_calls);
    spinner_stop(&f->spin, what);
    finish_stream(b, DONE_S, what);
    if (copied) expect_pattern("check 2: the slot copied through a pool buffer", f->host, n, 2000);
  }
  GT_OK(sy_host_pool_destroy(hp));
  GT_CUDA(cudaStreamDestroy(b));
}

/* ---- 3. stats ------------------------------------------------------------------------------------------ */
static sy_pool_stats_t expect_stats(const char *what, sy_pool_t pool, uint64_t allocs, uint64_t frees, uint64_t live) {
  sy_pool_stats_t s = SY_POOL_STATS_INIT;
  GT_OK(sy_pool_stats(pool, &s));
  if (s.allocs != allocs || s.frees != frees || s.live != live)
    GT_FAIL("%s: allocs/frees/live are %llu/%llu/%llu, want %llu/%llu/%llu", what, (unsigned long long)s.allocs,
            (unsigned long long)s.frees, (unsigned long long)s.live, (unsigned long long)allocs,
            (unsigned long long)frees, (unsigned long long)live);
  if (s.used > s.reserved || s.used_high < s.used || s.reserved_high < s.reserved)
    GT_FAIL("%s: inconsistent: reserved %zu, used %zu, reserved_high %zu, used_high %zu", what, s.reserved, s.used,
            s.reserved_high, s.used_high);
  return s;
}

static void check_stats(fixture_t *f) {
  const char *what = "check 3 (stats)";
  const size_t sizes[5] = {1, 1000, 4096, (1 << 20) + 3, 3 << 20};
  size_t sum = 0;
  cudaStream_t s;
  GT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  sy_pool_t keep = NULL, drop = NULL;
  GT_OK(sy_pool_create(f->comm, NULL, &keep));
  void *p[5];
  for (int i = 0; i < 5; i++) {
    GT_OK(sy_pool_alloc(keep, sizes[i], &p[i], s));
    if ((uintptr_t)p[i] % 256)
      GT_FAIL("%s: allocation %d of %zu bytes at %p is not 256-byte aligned", what, i, sizes[i], p[i]);
    GT_CUDA(cudaMemsetAsync(p[i], 0x5a, sizes[i], s));
    sum += sizes[i];
  }
  sy_pool_stats_t st = expect_stats("check 3: after 5 allocations", keep, 5, 0, 5);
  if (st.used < sum) GT_FAIL("%s: used %zu after 5 allocations, less than their %zu bytes", what, st.used, sum);
  GT_OK(sy_pool_free(keep, p[0], s));
  GT_OK(sy_pool_free(keep, p[1], s));
  expect_stats("check 3: after 2 frees", keep, 5, 2, 3);
  /* refused, with nothing changed */
  void *q = NULL;
  expect_refused(what, "sy_pool_free of a pointer freed already", sy_pool_free(keep, p[0], s));
  expect_refused(what, "sy_pool_free of pinned host memory", sy_pool_free(keep, f->host, s));
  expect_refused(what, "sy_pool_free(NULL)", sy_pool_free(keep, NULL, s));
  expect_refused(what, "sy_pool_alloc of 0 bytes", sy_pool_alloc(keep, 0, &q, s));
  expect_refused(what, "sy_pool_alloc on stream NULL", sy_pool_alloc(keep, 64, &q, NULL));
  expect_refused(what, "sy_pool_alloc on cudaStreamLegacy", sy_pool_alloc(keep, 64, &q, cudaStreamLegacy));
  expect_stats("check 3: after the refused calls", keep, 5, 2, 3);
  for (int i = 2; i < 5; i++) GT_OK(sy_pool_free(keep, p[i], s));
  finish_stream(s, DONE_S, what);
  GT_CUDA(cudaStreamSynchronize(s)); /* done already; the release threshold is applied at a synchronisation */
  st = expect_stats("check 3: after every free", keep, 5, 5, 0);
  if (st.used != 0) GT_FAIL("%s: used %zu with nothing live", what, st.used);
  if (st.reserved == 0)
    GT_FAIL("%s: reserved 0 after a synchronisation: release threshold SIZE_MAX must keep it", what);
  if (st.reserved_high < sum || st.used_high < sum)
    GT_FAIL("%s: reserved_high %zu, used_high %zu: below the %zu bytes once live", what, st.reserved_high, st.used_high,
            sum);
  const size_t kept = st.reserved;
  GT_OK(sy_pool_trim(keep, 0));
  st = expect_stats("check 3: after trim(0)", keep, 5, 5, 0);
  if (st.reserved != 0)
    GT_FAIL("%s: reserved %zu after sy_pool_trim(0) with nothing live (was %zu)", what, st.reserved, kept);

  sy_pool_config_t cfg = SY_POOL_CONFIG_INIT;
  cfg.release_threshold = 0;
  GT_OK(sy_pool_create(f->comm, &cfg, &drop));
  GT_OK(sy_pool_alloc(drop, 4 << 20, &q, s));
  GT_CUDA(cudaMemsetAsync(q, 0x33, 4 << 20, s));
  GT_OK(sy_pool_free(drop, q, s));
  finish_stream(s, DONE_S, what);
  GT_CUDA(cudaStreamSynchronize(s));
  st = expect_stats("check 3: threshold 0, after the free", drop, 1, 1, 0);
  if (st.reserved != 0)
    GT_FAIL("%s: release threshold 0: reserved %zu after free and synchronisation", what, st.reserved);
  if (st.reserved_high < (4u << 20))
    GT_FAIL("%s: release threshold 0: reserved_high %zu < 4 MiB", what, st.reserved_high);
  printf("[test rank %d] %s: kept %zu bytes reserved (SIZE_MAX threshold), 0 after trim and with threshold 0\n",
         gt_rank, what, kept);
  GT_OK(sy_pool_destroy(keep));
  GT_OK(sy_pool_destroy(drop));
  GT_CUDA(cudaStreamDestroy(s));
}

/* ---- 4. cross-stream reuse in stream order ------------------------------------------------------------- */
/* X on A: a delay, then payload `seed`, then freed. Y on B, same size: payload seed+1, a longer delay, copied
 * back. Were X handed to Y before A's writes were done, A's late payload would land in Y before B copies it. */
static void reuse_round(fixture_t *f, cudaStream_t a, cudaStream_t b, bool with_event, uint32_t seed) {
  const char *what = with_event ? "check 4 (reuse after an event)" : "check 4 (no event between the streams)";
  const size_t bytes = 1 << 20, n = bytes / 4;
  void *x = NULL, *y = NULL;
  cudaEvent_t e;
  GT_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  memset(f->host, 0, bytes);
  GT_OK(sy_pool_alloc(f->pool, bytes, &x, a));
  delay_kernel<<<1, 1, 0, a>>>(1000000);
  fill_kernel<<<256, 256, 0, a>>>((uint32_t *)x, n, seed);
  GT_OK(sy_pool_free(f->pool, x, a));
  if (with_event) {
    GT_CUDA(cudaEventRecord(e, a));
    GT_CUDA(cudaStreamWaitEvent(b, e, 0));
  }
  GT_OK(sy_pool_alloc(f->pool, bytes, &y, b));
  fill_kernel<<<256, 256, 0, b>>>((uint32_t *)y, n, seed + 1);
  delay_kernel<<<1, 1, 0, b>>>(2000000);
  GT_CUDA(cudaMemcpyAsync(f->host, y, bytes, cudaMemcpyDeviceToHost, b));
  GT_OK(sy_pool_free(f->pool, y, b));
  GT_CUDA(cudaGetLastError());
  finish_stream(b, DONE_S, what);
  finish_stream(a, DONE_S, what);
  expect_pattern(what, f->host, n, seed + 1);
  printf("[test rank %d] %s: Y %s X (informational: the pool may reuse it)\n", gt_rank, what, x == y ? "==" : "!=");
  GT_CUDA(cudaEventDestroy(e));
}

static void check_cross_stream(fixture_t *f) {
  cudaStream_t a, b;
  GT_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  GT_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  reuse_round(f, a, b, true, 401);
  reuse_round(f, a, b, false, 403);
  GT_CUDA(cudaStreamDestroy(a));
  GT_CUDA(cudaStreamDestroy(b));
}

/* ---- 5. host pool: slots never come back early ---------------------------------------------------------- */
/* 300 batches through 3 slots of 64 KiB: the host fills a slot with the batch's payload; the stream waits a
 * little (so the host runs ahead and must wait for slots), copies the slot to a device buffer and checks both
 * the copy and the slot itself (read through its mapped host address), then gives the slot back. A slot given
 * back before the stream was done with it would be refilled by a later batch before the check reads it. */
static void check_host_pool(fixture_t *f) {
  const char *what = "check 5 (host pool)";
  const int batches = 300, slots = 3;
  const size_t bytes = 64 << 10, n = bytes / 4;
  cudaStream_t s;
  GT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  sy_host_pool_config_t hc = SY_HOST_POOL_CONFIG_INIT;
  hc.slot_bytes = bytes;
  hc.slots = slots;
  sy_host_pool_t hp = NULL;
  GT_OK(sy_host_pool_create(f->comm, &hc, &hp));
  uint32_t *ring[slots];
  for (int i = 0; i < slots; i++) GT_CUDA(cudaMalloc((void **)&ring[i], bytes));
  unsigned long long *wrong = NULL;
  GT_CUDA(cudaMalloc((void **)&wrong, 2 * sizeof *wrong));
  GT_CUDA(cudaMemsetAsync(wrong, 0, 2 * sizeof *wrong, s));
  int done = 0;
  for (int batch = 0; batch < batches; batch++) {
    void *slot = NULL;
    if (!EXPECT_OK(what, sy_host_pool_acquire(hp, &slot))) break;
    const uint32_t seed = 5000u + batch;
    for (size_t k = 0; k < n; k++) ((uint32_t *)slot)[k] = pattern(seed, (uint32_t)k);
    uint32_t *dev = ring[batch % slots];
    delay_kernel<<<1, 1, 0, s>>>(50000);
    GT_CUDA(cudaMemcpyAsync(dev, slot, bytes, cudaMemcpyHostToDevice, s));
    check_batch_kernel<<<64, 256, 0, s>>>(dev, (const uint32_t *)slot, n, seed, wrong);
    GT_CUDA(cudaGetLastError());
    if (!EXPECT_OK(what, sy_host_pool_release(hp, slot, s))) break;
    done++;
  }
  unsigned long long *counts = (unsigned long long *)f->host;
  GT_CUDA(cudaMemcpyAsync(counts, wrong, 2 * sizeof *wrong, cudaMemcpyDeviceToHost, s));
  finish_stream(s, DONE_S, what);
  if (counts[0] || counts[1])
    GT_FAIL(
        "%s: %llu words copied from slots and %llu read through the mapped slots were not their batch's payload "
        "(a slot came back before the stream was done with it)",
        what, counts[0], counts[1]);
  sy_host_pool_stats_t hs = SY_HOST_POOL_STATS_INIT;
  const double deadline = gt_now_s() + STALL_S; /* the last host functions run just after the stream's work */
  for (;;) {
    GT_OK(sy_host_pool_stats(hp, &hs));
    if (hs.free_slots == slots || gt_now_s() > deadline) break;
    sched_yield();
  }
  if (done != batches) GT_FAIL("%s: %d of %d batches ran", what, done, batches);
  if (hs.slots != slots || hs.free_slots != slots)
    GT_FAIL("%s: slots %d, free_slots %d %.0f s after the stream was done, want %d and %d", what, hs.slots,
            hs.free_slots, STALL_S, slots, slots);
  if (hs.acquires != (uint64_t)batches)
    GT_FAIL("%s: acquires %llu, want %d", what, (unsigned long long)hs.acquires, batches);
  if (hs.waits == 0 && !g_serialised)
    GT_FAIL("%s: waits 0: the host never waited for a slot, so slot reuse was not exercised", what);
  printf("[test rank %d] %s: %d batches through %d slots, the host waited %llu times (%.2f ms)\n", gt_rank, what, done,
         slots, (unsigned long long)hs.waits, hs.wait_ns * 1e-6);
  /* refused: a pointer that is not a slot, the legacy default stream, a slot released twice (nothing changed) */
  void *slot = NULL;
  GT_OK(sy_host_pool_acquire(hp, &slot));
  expect_refused(what, "sy_host_pool_release of a pointer that is no slot", sy_host_pool_release(hp, f->host, s));
  expect_refused(what, "sy_host_pool_release of a slot plus 4 bytes", sy_host_pool_release(hp, (char *)slot + 4, s));
  expect_refused(what, "sy_host_pool_release on cudaStreamLegacy", sy_host_pool_release(hp, slot, cudaStreamLegacy));
  GT_OK(sy_host_pool_release(hp, slot, NULL)); /* still held after the refusals */
  expect_refused(what, "sy_host_pool_release of a slot released already", sy_host_pool_release(hp, slot, s));
  GT_OK(sy_host_pool_stats(hp, &hs));
  if (hs.free_slots != slots)
    GT_FAIL("%s: free_slots %d after the refused releases, want %d", what, hs.free_slots, slots);
  GT_OK(sy_host_pool_destroy(hp));
  for (int i = 0; i < slots; i++) GT_CUDA(cudaFree(ring[i]));
  GT_CUDA(cudaFree(wrong));
  GT_CUDA(cudaStreamDestroy(s));
}

/* ---- 6. graph capture ---------------------------------------------------------------------------------- */
/* Captured (global mode: any unsafe CUDA call in the process would break the capture): alloc, a kernel writing
 * the scratch with the seed the device holds, a copy to a plain cudaMalloc buffer, free. Replayed 10 times, each
 * with a new seed and the output poisoned first. */
static void check_graph_replays(fixture_t *f, cudaStream_t c) {
  const char *what = "check 6 (alloc and free captured)";
  const size_t bytes = 256 << 10, n = bytes / 4;
  uint32_t *out = NULL, *seed = NULL;
  GT_CUDA(cudaMalloc((void **)&out, bytes));
  GT_CUDA(cudaMalloc((void **)&seed, sizeof *seed));
  sy_pool_stats_t before = SY_POOL_STATS_INIT;
  GT_OK(sy_pool_stats(f->pool, &before));
  cudaGraph_t graph = NULL;
  void *tmp = NULL;
  GT_CUDA(cudaStreamBeginCapture(c, cudaStreamCaptureModeGlobal));
  const sy_status_t st_alloc = sy_pool_alloc(f->pool, bytes, &tmp, c);
  sy_status_t st_free = SY_ERR_INTERNAL;
  if (st_alloc == SY_SUCCESS) {
    fill_kernel<<<64, 256, 0, c>>>((uint32_t *)tmp, n, 0, seed);
    (void)cudaMemcpyAsync(out, tmp, bytes, cudaMemcpyDeviceToDevice, c); /* an error shows at the capture's end */
    st_free = sy_pool_free(f->pool, tmp, c);
  }
  const cudaError_t end = cudaStreamEndCapture(c, &graph);
  expect_ok_(what, "sy_pool_alloc inside the capture", st_alloc);
  if (st_alloc == SY_SUCCESS) expect_ok_(what, "sy_pool_free inside the capture", st_free);
  if (end != cudaSuccess) GT_FAIL("%s: cudaStreamEndCapture: %s", what, cudaGetErrorString(end));
  if (st_alloc == SY_SUCCESS && st_free == SY_SUCCESS && end == cudaSuccess) {
    if ((uintptr_t)tmp % 256) GT_FAIL("%s: the captured allocation %p is not 256-byte aligned", what, tmp);
    expect_stats("check 6: after the capture", f->pool, before.allocs + 1, before.frees + 1, before.live);
    cudaGraphExec_t exec = NULL;
    GT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < 10; r++) {
      GT_CUDA(cudaMemsetAsync(out, 0, bytes, c));
      set_seed_kernel<<<1, 1, 0, c>>>(seed, 6000u + r);
      GT_CUDA(cudaGraphLaunch(exec, c));
      GT_CUDA(cudaMemcpyAsync(f->host, out, bytes, cudaMemcpyDeviceToHost, c));
      finish_stream(c, DONE_S, what);
      char label[64];
      snprintf(label, sizeof label, "check 6: replay %d", r);
      expect_pattern(label, f->host, n, 6000u + r);
    }
    GT_CUDA(cudaGraphExecDestroy(exec));
  }
  if (graph) GT_CUDA(cudaGraphDestroy(graph));
  GT_CUDA(cudaFree(out));
  GT_CUDA(cudaFree(seed));
}

/* A release inside a capture is refused (the slot would come back at every replay), the capture goes on, and the
 * host still holds the slot. */
static void check_release_in_capture(fixture_t *f, cudaStream_t c) {
  const char *what = "check 6 (host-pool release inside a capture)";
  sy_host_pool_config_t hc = SY_HOST_POOL_CONFIG_INIT;
  hc.slot_bytes = 4096;
  hc.slots = 1;
  sy_host_pool_t hp = NULL;
  GT_OK(sy_host_pool_create(f->comm, &hc, &hp));
  void *slot = NULL;
  GT_OK(sy_host_pool_acquire(hp, &slot));
  GT_CUDA(cudaStreamBeginCapture(c, cudaStreamCaptureModeGlobal));
  const sy_status_t st = sy_host_pool_release(hp, slot, c);
  cudaGraph_t graph = NULL;
  const cudaError_t end = cudaStreamEndCapture(c, &graph);
  if (graph) GT_CUDA(cudaGraphDestroy(graph)); /* discarded */
  expect_refused(what, "sy_host_pool_release inside a capture", st);
  if (end != cudaSuccess) GT_FAIL("%s: the refused release broke the capture: %s", what, cudaGetErrorString(end));
  if (st == SY_SUCCESS) return; /* the slot waits for a host function that never runs: leak the pool, not hang */
  sy_host_pool_stats_t hs = SY_HOST_POOL_STATS_INIT;
  GT_OK(sy_host_pool_stats(hp, &hs));
  if (hs.free_slots != 0)
    GT_FAIL("%s: free_slots %d after the refused release, want 0 (still held)", what, hs.free_slots);
  EXPECT_OK(what, sy_host_pool_release(hp, slot, NULL));
  GT_OK(sy_host_pool_destroy(hp));
}

/* ---- 7. attention plans built without a device synchronisation ------------------------------------------ */
/* A spinner on the legacy default stream; meanwhile sy_attn_plan_create (the communicator's own stream, waited for)
 * and sy_attn_plan_create_async on stream B build and upload plans: both must finish while the spinner still runs
 * (the old upload's cudaMalloc / synchronous cudaMemcpy waited for the legacy stream). The communicator's own
 * stream, pool and staging are made at its first plan, before the spinner (creating pinned memory may
 * synchronise). Each rank: 4 sequences of 256 tokens, sequence i to rank (r + i) mod W, no KV. */
static void check_plans(fixture_t *f, int rank, int world, sy_attn_plan_t *late_own, sy_attn_plan_t *late_user) {
  const char *what = "check 7 (attention plans, no device synchronisation)";
  enum { SEQS = 4 };
  int num_seqs[64], q_dst_all[64][SEQS];
  int64_t num_tokens[64], lens_all[64][SEQS];
  const int64_t *lens[64];
  const int *q_dst[64];
  if (world > 64) return;
  for (int r = 0; r < world; r++) {
    num_seqs[r] = SEQS;
    num_tokens[r] = 256 * SEQS;
    for (int i = 0; i < SEQS; i++) lens_all[r][i] = 256, q_dst_all[r][i] = (r + i) % world;
    lens[r] = lens_all[r];
    q_dst[r] = q_dst_all[r];
  }
  sy_attn_plan_desc_t d = SY_ATTN_PLAN_DESC_INIT;
  d.world_size = world;
  d.max_replicas = 0;
  d.num_seqs = num_seqs;
  d.num_tokens = num_tokens;
  d.seq_lens = lens;
  d.q_dst = q_dst;
  sy_attn_plan_t warm = NULL, p1 = NULL, p2 = NULL;
  GT_OK(sy_attn_plan_create(f->comm, &d, &warm)); /* the communicator's own stream, pool and staging */
  GT_OK(sy_attn_plan_destroy(warm));
  cudaStream_t b;
  GT_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  if (kernels_overlap(f, cudaStreamLegacy, b, what)) {
    spinner_start(&f->spin, cudaStreamLegacy, what);
    const double t0 = gt_now_s();
    EXPECT_OK(what, sy_attn_plan_create(f->comm, &d, &p1));
    EXPECT_OK(what, sy_attn_plan_create_async(f->comm, &d, NULL, NULL, b, &p2));
    const bool b_done = wait_stream(b, STALL_S);
    const double t_all = gt_now_s() - t0;
    const cudaError_t legacy_now = cudaStreamQuery(cudaStreamLegacy);
    if (!b_done) GT_FAIL("%s: stream B was not done %.1f s after the plans were built", what, t_all);
    if (legacy_now != cudaErrorNotReady)
      GT_FAIL("%s: the legacy stream's spinner was over (%s) after %.3f s: building a plan waited for it", what,
              cudaGetErrorName(legacy_now), t_all);
    spinner_stop(&f->spin, what);
    printf("[test rank %d] %s: two plans built and uploaded in %.3f ms beside a spinning legacy stream\n", rank, what,
           t_all * 1e3);
    if (p2) EXPECT_OK(what, sy_attn_plan_destroy_async(p2, b));
    finish_stream(b, DONE_S, what);
    if (p1) EXPECT_OK(what, sy_attn_plan_destroy(p1));
  }
  /* check 8: sy_attn_plan_destroy frees the device copy only after the device is done (switchyard.h: a device
   * synchronisation, as cudaFree) — cudaFree itself does not wait for memory from a stream-ordered pool, so a
   * kernel still reading the plan could see it reused. A 300 ms kernel on stream B, then the destroy: when it
   * returns, B must be done. */
  {
    const char *what8 = "check 8 (sy_attn_plan_destroy waits for the device)";
    sy_attn_plan_t p3 = NULL;
    EXPECT_OK(what8, sy_attn_plan_create(f->comm, &d, &p3));
    delay_kernel<<<1, 1, 0, b>>>(300000000ull);
    GT_CUDA(cudaGetLastError());
    const double t0 = gt_now_s();
    if (p3) EXPECT_OK(what8, sy_attn_plan_destroy(p3));
    const double took = gt_now_s() - t0;
    const cudaError_t b_now = cudaStreamQuery(b);
    if (b_now != cudaSuccess)
      GT_FAIL("%s: the destroy returned after %.3f s with stream B still busy (%s)", what8, took,
              cudaGetErrorName(b_now));
    finish_stream(b, DONE_S, what8);
    printf("[test rank %d] %s: returned after %.3f s, the 0.3 s kernel done\n", rank, what8, took);
  }
  /* two plans that outlive what made them (main destroys them after the pools and the communicator) */
  GT_OK(sy_attn_plan_create(f->comm, &d, late_own));
  GT_OK(sy_attn_plan_create_async(f->comm, &d, f->pool, NULL, b, late_user));
  finish_stream(b, DONE_S, what);
  GT_CUDA(cudaStreamDestroy(b));
}

/* ---- 9. the MoE receive arena in stream order ------------------------------------------------------------ */
/* An arena with room for one recv (sy_moe_ht_recv_alloc / _free with pool NULL). A recv freed on a stream the
 * spinner holds: an allocation on that stream takes its block at once (its work comes after the free); one on
 * another stream waits until the held stream reaches the free (a thread releases the spinner after RELEASE_MS), then
 * gets the same block; a free on a capturing stream takes effect at once; no room with nothing on a stream is
 * SY_ERR_NO_MEMORY at once; sy_moe_ht_destroy waits for a free still on its stream. */
#define RELEASE_MS 300

static void *release_later(void *arg) {
  usleep(RELEASE_MS * 1000);
  *((spinner_t *)arg)->flag = 1;
  return NULL;
}

static void check_arena(fixture_t *f, int world) {
  const char *what = "check 9 (receive arena in stream order)";
  sy_moe_ht_config_t cfg = SY_MOE_HT_CONFIG_INIT;
  cfg.max_tokens = 64, cfg.hidden = 256, cfg.top_k = 2, cfg.num_experts = 4 * world, cfg.num_sms = 2;
  const int rows = 256;
  GT_OK(sy_moe_ht_recv_bytes(f->comm, &cfg, rows, &cfg.recv_arena_bytes)); /* room for one recv */
  sy_moe_ht_t moe = NULL;
  GT_OK(sy_moe_ht_create(f->comm, &cfg, &moe));
  cudaStream_t a, b, c;
  GT_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  GT_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  GT_CUDA(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
  sy_moe_ht_recv_t r1, r2, r3;
  /* freed on A while A is held: A's next allocation takes the block */
  spinner_start(&f->spin, a, what);
  GT_OK(sy_moe_ht_recv_alloc(moe, NULL, rows, 0, &r1, a));
  void *const at = r1.tokens;
  GT_OK(sy_moe_ht_recv_free(moe, NULL, &r1, a));
  GT_OK(sy_moe_ht_recv_alloc(moe, NULL, rows, 0, &r2, a));
  if (r2.tokens != at)
    GT_FAIL("%s: the allocation on the freeing stream got %p, want the freed block %p", what, r2.tokens, at);
  /* freed on A again, A still held: B waits for A to reach the free */
  GT_OK(sy_moe_ht_recv_free(moe, NULL, &r2, a));
  pthread_t th;
  GT_CHECK(pthread_create(&th, NULL, release_later, &f->spin) == 0);
  const double t0 = gt_now_s();
  const sy_status_t st = sy_moe_ht_recv_alloc(moe, NULL, rows, 0, &r3, b);
  const double took = gt_now_s() - t0;
  pthread_join(th, NULL);
  spinner_stop(&f->spin, what);
  if (EXPECT_OK(what, st)) {
    if (r3.tokens != at) GT_FAIL("%s: the allocation on B got %p, want the block %p A gave back", what, r3.tokens, at);
    if (took < 0.8 * RELEASE_MS * 1e-3)
      GT_FAIL("%s: the allocation on B returned after %.0f ms, before A reached the free (released at %d ms)", what,
              took * 1e3, RELEASE_MS);
    /* given back at once (NULL); its copy is then no live allocation */
    const sy_moe_ht_recv_t copy = r3;
    GT_OK(sy_moe_ht_recv_free(moe, NULL, &r3, NULL));
    sy_moe_ht_recv_t again = copy;
    expect_refused(what, "sy_moe_ht_recv_free of a recv freed already", sy_moe_ht_recv_free(moe, NULL, &again, b));
  }
  /* no room and nothing on a stream: refused at once */
  GT_OK(sy_moe_ht_recv_alloc(moe, NULL, rows, 0, &r1, b));
  const double t1 = gt_now_s();
  const sy_status_t full = sy_moe_ht_recv_alloc(moe, NULL, rows, 0, &r2, b);
  if (full != SY_ERR_NO_MEMORY || gt_now_s() - t1 > 1.0)
    GT_FAIL("%s: a full arena returned %s after %.0f ms, want SY_ERR_NO_MEMORY at once", what, sy_status_name(full),
            (gt_now_s() - t1) * 1e3);
  /* a free on a capturing stream takes effect at once (the graph's replays do not give it back again) */
  cudaGraph_t g = NULL;
  GT_CUDA(cudaStreamBeginCapture(c, cudaStreamCaptureModeRelaxed));
  delay_kernel<<<1, 1, 0, c>>>(0);
  const sy_status_t in_capture = sy_moe_ht_recv_free(moe, NULL, &r1, c);
  GT_CUDA(cudaStreamEndCapture(c, &g));
  GT_CUDA(cudaGraphDestroy(g));
  if (EXPECT_OK(what, in_capture) && EXPECT_OK(what, sy_moe_ht_recv_alloc(moe, NULL, rows, 0, &r2, b)))
    GT_OK(sy_moe_ht_recv_free(moe, NULL, &r2, NULL));
  /* an allocation on a stream capturing a graph takes no block its stream has not reached (the graph may be launched
   * on any stream): it waits for A to get there like another stream's (run 44's review) */
  spinner_start(&f->spin, a, what);
  GT_OK(sy_moe_ht_recv_alloc(moe, NULL, rows, 0, &r1, a));
  GT_OK(sy_moe_ht_recv_free(moe, NULL, &r1, a));
  GT_CHECK(pthread_create(&th, NULL, release_later, &f->spin) == 0);
  GT_CUDA(cudaStreamBeginCapture(a, cudaStreamCaptureModeRelaxed)); /* A's spinner and free were enqueued before */
  const double t3 = gt_now_s();
  const sy_status_t cap_alloc = sy_moe_ht_recv_alloc(moe, NULL, rows, 0, &r2, a);
  const double cap_took = gt_now_s() - t3;
  g = NULL;
  GT_CUDA(cudaStreamEndCapture(a, &g));
  if (g) GT_CUDA(cudaGraphDestroy(g));
  pthread_join(th, NULL);
  spinner_stop(&f->spin, what);
  if (EXPECT_OK(what, cap_alloc)) {
    if (cap_took < 0.8 * RELEASE_MS * 1e-3)
      GT_FAIL(
          "%s: the allocation on a capturing stream returned after %.0f ms, before the stream reached the free "
          "(released at %d ms)",
          what, cap_took * 1e3, RELEASE_MS);
    GT_OK(sy_moe_ht_recv_free(moe, NULL, &r2, NULL));
  }
  /* destroy waits for a free still on its stream (the backend's own device synchronisation would too: what this
   * checks is that it returns SY_SUCCESS, the host function having run before the object is freed) */
  spinner_start(&f->spin, a, what);
  GT_OK(sy_moe_ht_recv_alloc(moe, NULL, rows, 0, &r1, a));
  GT_OK(sy_moe_ht_recv_free(moe, NULL, &r1, a));
  GT_CHECK(pthread_create(&th, NULL, release_later, &f->spin) == 0);
  const double t2 = gt_now_s();
  GT_OK(sy_moe_ht_destroy(moe));
  const double destroy_took = gt_now_s() - t2;
  pthread_join(th, NULL);
  spinner_stop(&f->spin, what);
  if (destroy_took < 0.8 * RELEASE_MS * 1e-3)
    GT_FAIL("%s: sy_moe_ht_destroy returned after %.0f ms, before the stream reached the free", what,
            destroy_took * 1e3);
  printf("[test rank %d] %s: B waited %.0f ms for A's free, a capture on A %.0f ms, destroy %.0f ms\n", gt_rank, what,
         took * 1e3, cap_took * 1e3, destroy_took * 1e3);
  GT_CUDA(cudaStreamDestroy(a));
  GT_CUDA(cudaStreamDestroy(b));
  GT_CUDA(cudaStreamDestroy(c));
}

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(ALARM_S);
  int rank, world;
  fixture_t f;
  memset(&f, 0, sizeof f);
  f.comm = gt_init("test_gpu_pool", &rank, &world);
  GT_OK(sy_pool_create(f.comm, NULL, &f.pool));
  GT_CUDA(cudaHostAlloc((void **)&f.host, 1 << 20, cudaHostAllocDefault));
  int *words = NULL; /* the spinner's flag and state, a cache line apart */
  GT_CUDA(cudaHostAlloc((void **)&words, 256, cudaHostAllocMapped));
  f.spin.flag = words;
  f.spin.state = words + 32;
  int *words_dev = NULL;
  GT_CUDA(cudaHostGetDevicePointer((void **)&words_dev, words, 0));
  f.spin.flag_dev = words_dev;
  f.spin.state_dev = words_dev + 32;
  GT_CUDA(cudaMalloc((void **)&f.scratch, 4096));

  check_no_stall(&f);
  check_legacy_untouched(&f);
  check_stats(&f);
  check_cross_stream(&f);
  check_host_pool(&f);
  cudaStream_t c; /* check 6 */
  GT_CUDA(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
  check_graph_replays(&f, c);
  check_release_in_capture(&f, c);
  GT_CUDA(cudaStreamDestroy(c));
  sy_attn_plan_t late_own = NULL, late_user = NULL;
  check_plans(&f, rank, world, &late_own, &late_user);
  check_arena(&f, world);

  sy_pool_stats_t end = SY_POOL_STATS_INIT;
  GT_OK(sy_pool_stats(f.pool, &end));
  if (end.live != 1 || end.allocs != end.frees + 1) /* the late plan's copy only */
    GT_FAIL("the shared pool at the end: allocs/frees/live %llu/%llu/%llu, want all freed but the late plan's",
            (unsigned long long)end.allocs, (unsigned long long)end.frees, (unsigned long long)end.live);
  sy_status_t async = SY_ERR_INTERNAL;
  GT_OK(sy_comm_async_error(f.comm, &async, NULL, 0));
  GT_CHECK(async == SY_SUCCESS);
  GT_OK(sy_pool_destroy(f.pool));
  GT_CUDA(cudaFree(f.scratch));
  GT_CUDA(cudaFreeHost(words));
  GT_CUDA(cudaFreeHost(f.host));
  GT_OK(sy_comm_destroy(f.comm));
  /* plans destroyed after their pools and their communicator: each held its pool (the communicator's own, the
   * fixture's) until now */
  cudaStream_t z;
  GT_CUDA(cudaStreamCreateWithFlags(&z, cudaStreamNonBlocking));
  GT_OK(sy_attn_plan_destroy_async(late_user, z));
  GT_OK(sy_attn_plan_destroy(late_own));
  finish_stream(z, DONE_S, "plans after their communicator");
  GT_CUDA(cudaStreamDestroy(z));
  return gt_finish("test_gpu_pool");
}
