/*
 * kspan.h — a call's kernel time from its kernels' device timestamps (ktime.c gathers them from CUPTI; a pure
 * function, so tests/unit/test_bench_kspan.c checks it without a GPU).
 */
#ifndef SY_BENCH_KSPAN_H
#define SY_BENCH_KSPAN_H

#include <stdint.h>

/* Calls 0..calls-1 ran back to back on one stream; first[i] and last[i] are the earliest start and the latest
 * end of call i's kernels (ns; first[i] == 0: none seen). us[i] = last[i] - max(first[i], last[i - 1]), in µs:
 * the device time call i held alone — a kernel launched early by programmatic dependent launch (resident,
 * waiting for the previous call) is not charged for the wait, an idle gap between calls counts for neither,
 * and the calls' times add up to the busy span. Returns 0, or 1 if some call had no kernel (us[i] then 0). */
static inline int bench_kernel_spans(int calls, const uint64_t *first, const uint64_t *last, double *us) {
  int missing = 0;
  for (int i = 0; i < calls; i++) {
    if (!first[i]) {
      us[i] = 0.0;
      missing = 1;
      continue;
    }
    const uint64_t from = i > 0 && last[i - 1] > first[i] ? last[i - 1] : first[i];
    us[i] = last[i] > from ? (double)(last[i] - from) * 1e-3 : 0.0;
  }
  return missing;
}

#endif
