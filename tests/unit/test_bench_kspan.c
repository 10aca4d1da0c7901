/*
 * test_bench_kspan.c — sy-bench's kernel time per call (tools/sy-bench/kspan.h) from kernel timestamps:
 * calls one after another, a call launched early by programmatic dependent launch (overlapping the previous
 * one), a call wholly inside the previous one, idle gaps between calls, and a call with no kernel.
 */
#include "check.h"

#include "../../tools/sy-bench/kspan.h"

#define NEAR(a, b) ((a) - (b) < 1e-9 && (b) - (a) < 1e-9)

int main(void) {
  double us[4];
  { /* back to back, no overlap, an idle gap before call 2 that belongs to no one */
    const uint64_t first[3] = {1000, 3000, 9000}, last[3] = {3000, 4500, 10000};
    CHECK_EQ_INT(bench_kernel_spans(3, first, last, us), 0);
    CHECK(NEAR(us[0], 2.0) && NEAR(us[1], 1.5) && NEAR(us[2], 1.0));
  }
  { /* call 1 resident early (PDL), waiting until call 0 ends at 3000: charged from 3000 only */
    const uint64_t first[2] = {1000, 2000}, last[2] = {3000, 3700};
    CHECK_EQ_INT(bench_kernel_spans(2, first, last, us), 0);
    CHECK(NEAR(us[0], 2.0) && NEAR(us[1], 0.7));
  }
  { /* call 1 ends before call 0 does: it held nothing alone; call 2 counts from call 1's end */
    const uint64_t first[3] = {1000, 1500, 2200}, last[3] = {3000, 2500, 2600};
    CHECK_EQ_INT(bench_kernel_spans(3, first, last, us), 0);
    CHECK(NEAR(us[0], 2.0) && NEAR(us[1], 0.0) && NEAR(us[2], 0.1));
  }
  { /* the sum of the calls' times is the busy span (PDL overlaps included) */
    const uint64_t first[4] = {100, 900, 1700, 2600}, last[4] = {1000, 1800, 2500, 3000};
    CHECK_EQ_INT(bench_kernel_spans(4, first, last, us), 0);
    CHECK(NEAR(us[0] + us[1] + us[2] + us[3], (3000 - 100) * 1e-3 - (2600 - 2500) * 1e-3));
  }
  { /* a call with no kernel seen: no figure for it, and the whole pass says so */
    const uint64_t first[2] = {1000, 0}, last[2] = {2000, 0};
    CHECK_EQ_INT(bench_kernel_spans(2, first, last, us), 1);
    CHECK(NEAR(us[0], 1.0) && NEAR(us[1], 0.0));
  }
  return check_report();
}
