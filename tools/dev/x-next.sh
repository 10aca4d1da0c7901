#!/usr/bin/env bash
# x-next.sh — the first device call after run 33 (run 34, call 1; any kind, 1 or 4 GPUs): SY_HT_SCALE_HINT
# as it landed (two instances of the dispatch kernel; run 33 measured each as a build) — test_gpu_moe_ht (every variant, the
# new .hint among them) at the GPUs present and at 1 rank, ranks sharing the GPU where only one is present;
# compute-sanitizer memcheck on its .hint step at 1 rank; then moe-ht FP8 at world 1 with the
# default (-1: the policy at 132 SMs, none at 16) against 0 at 132 SMs and against 1 at 16, two passes; then, with 4
# GPUs, the issue-19 table at world 4 (4,096 and 8,192 tokens, 16 SMs, both wires, forward and backward, NCCL
# beside: $OUT/ht_w4.json). $OUT/summary.txt. The second call, with four GPUs: tools/dev/x4-head.sh.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt b=build/bin
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
nvidia-smi -L | head -1 >>$s
if [ "$n" -ge 4 ]; then counts="4 1"; shared=0; else counts="3 1"; shared=1; fi
# the tests (each under gpu-check's own 90 s cap), then memcheck on the policy's kernel alone: an outer timeout
# cannot stop a test gpu-check has started (its own process group), so the caps, not it, bound this call
GPU_CHECK_SHARED=$shared GPU_CHECK_ONLY='^test_gpu_moe_ht' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=90 \
  tools/gpu-check.sh /tmp/g $counts >/dev/null 2>&1
grep -v "^cpu tests" /tmp/g/summary.txt >>$s
GPU_CHECK_ONLY='^sanitize_memcheck_test_gpu_moe_ht.hint$' GPU_CHECK_SANITIZE="memcheck" GPU_CHECK_TIMEOUT=120 \
  tools/gpu-check.sh /tmp/g2 1 >/dev/null 2>&1
grep sanitize /tmp/g2/summary.txt >>$s
bench() { # HINT SMS PASS
  SY_HT_SCALE_HINT=$1 timeout 60 $b/syrun -n 1 $b/sy-bench --no-nccl --tokens 4096 --wire fp8 --num-sms $2 moe-ht >/tmp/r.txt 2>&1
  echo "== hint $1, world 1, $2 SMs, pass $3 rc=$?" >>$s
  grep -E " dispatch " /tmp/r.txt | sed 's/\[rank 0\]//' | head -1 >>$s
}
for pass in 1 2; do bench -1 132 $pass; bench 0 132 $pass; bench -1 16 $pass; bench 1 16 $pass; done
if [ "$n" -ge 4 ]; then
  timeout 200 $b/syrun -n 4 $b/sy-bench --json $OUT/ht_w4.json moe-ht >/tmp/ht4.txt 2>&1
  echo "== moe-ht world 4, 16 SMs rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) |target" /tmp/ht4.txt | sed 's/\[rank 0\]//' >>$s
fi
cat $s
