#!/usr/bin/env bash
# x4-prequant.sh — one device call (issue 19): the FP8 wires quantised by a kernel of their own before the dispatch
# (SY_HT_PREQUANT=1; since, the default from world 2) against by each sending block as it sends (0). test_gpu_moe_ht at 4 ranks and
# 1 with both (gpu-check: .inkernel), then moe-ht FP8 at world 4 (16 SMs) and world 1 (16 and 132 SMs), 4,096
# tokens, the two alternating twice. $OUT/prequant.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/prequant.txt
GPU_CHECK_ONLY='^test_gpu_moe_ht' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=120 timeout 200 tools/gpu-check.sh /tmp/g ${PQ_COUNTS:-4 1} >/dev/null 2>&1
cat /tmp/g/summary.txt >>$s
b=build/bin
bench() { # N SMS PQ PASS
  SY_HT_PREQUANT=$3 timeout 60 $b/syrun -n $1 $b/sy-bench --no-nccl --tokens 4096 --wire fp8 --num-sms $2 moe-ht >/tmp/r.txt 2>&1
  echo "== world $1, $2 SMs, SY_HT_PREQUANT=$3, pass $4 rc=$?" >>$s
  grep -E " (dispatch|combine) " /tmp/r.txt >>$s
}
for pass in 1 2; do
  for pq in 0 1; do bench ${PQ_WORLD:-4} 16 $pq $pass; done
  for pq in 0 1; do bench 1 16 $pq $pass; done
  for pq in 0 1; do bench 1 132 $pq $pass; done
done
cat $s
