#!/usr/bin/env bash
# x-next.sh — the first device call after run 33 (not run yet; any kind, 1 or 4 GPUs, H200s best): the run-time
# SY_HT_SCALE_HINT (run 33 measured the same stores under a build-time knob) — test_gpu_moe_ht (every variant, the
# new .hint among them) at the GPUs present and at 1 rank, ranks sharing the GPU where only one is present;
# compute-sanitizer memcheck on it at 1 rank (default, .prequant, .hint); then moe-ht FP8 at world 1 with the
# default (-1: the policy at 132 SMs, none at 16) against 0 at 132 SMs and against 1 at 16, two passes; then, with 4
# GPUs, the issue-19 table at world 4 (4,096 and 8,192 tokens, 16 SMs, both wires, forward and backward, NCCL
# beside: $OUT/ht_w4.json). $OUT/summary.txt. The second call, with four GPUs: tools/dev/x4-head.sh.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt b=build/bin
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
nvidia-smi -L | head -1 >>$s
if [ "$n" -ge 4 ]; then counts="4 1"; shared=0; else counts="3 1"; shared=1; fi
GPU_CHECK_SHARED=$shared GPU_CHECK_ONLY='moe_ht' GPU_CHECK_SANITIZE="memcheck" GPU_CHECK_TIMEOUT=120 \
  timeout 330 tools/gpu-check.sh /tmp/g $counts >/dev/null 2>&1
grep -v "^cpu tests" /tmp/g/summary.txt >>$s
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
