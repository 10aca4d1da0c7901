#!/usr/bin/env bash
# x-table.sh — one device call (issue 19, the FP8 dispatch; run 33 call 3): the scale table, which is not in the
# tree — tools/dev/patches/ht-scale-table.patch, onto 6a0836b (`git checkout 6a0836b && git apply ...`) — measured
# slower at 16 SMs and dropped (bench/NOTES.md). With it, SY_HT_SCALE_TABLE (each token's
# scales written once, then sy_ht_scales writes recv.scales a whole line at a time) against each row's scales straight
# into the group-major recv.scales (0). test_gpu_moe_ht with the table (default), without it, and with the FP8 wires
# quantised ahead and in the kernel, at the GPUs present (ranks sharing one GPU where only one is present) and at 1
# rank; compute-sanitizer memcheck and racecheck at 1 rank with the table; then moe-ht FP8 at world 1 (132 and 16
# SMs) and world 4 (16 SMs, if present), 4,096 tokens, the two alternating twice, and BF16 once (a control).
# $OUT/table.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/table.txt
n=$(nvidia-smi -L | grep -c '^GPU')
nvidia-smi -L | head -1 >>$s
if [ "$n" -ge 4 ]; then counts="4 1"; shared=0; else counts="3 1"; shared=1; fi
GPU_CHECK_SHARED=$shared GPU_CHECK_ONLY='moe_ht' GPU_CHECK_SANITIZE="memcheck racecheck" GPU_CHECK_TIMEOUT=120 \
  timeout 360 tools/gpu-check.sh /tmp/g $counts >/dev/null 2>&1
grep -v "^cpu tests" /tmp/g/summary.txt >>$s
b=build/bin
bench() { # TABLE WORLD SMS WIRE PASS
  SY_HT_SCALE_TABLE=$1 timeout 60 $b/syrun -n $2 $b/sy-bench --no-nccl --tokens 4096 --wire $4 --num-sms $3 moe-ht >/tmp/r.txt 2>&1
  echo "== table=$1 world $2, $3 SMs, $4, pass $5 rc=$?" >>$s
  grep -E " dispatch " /tmp/r.txt | sed 's/\[rank 0\]//' | head -1 >>$s
}
for pass in 1 2; do
  for t in 0 -1; do bench $t 1 132 fp8 $pass; bench $t 1 16 fp8 $pass; done
  [ "$n" -ge 4 ] && for t in 0 -1; do bench $t 4 16 fp8 $pass; done
done
bench -1 1 132 bf16 1
tar czf $OUT/logs.tar.gz -C /tmp/g logs 2>/dev/null
cat $s
