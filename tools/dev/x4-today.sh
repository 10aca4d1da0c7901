#!/usr/bin/env bash
# x4-today.sh PART — four-GPU calls of 2026-11-26/27, each under 600 s on one warm nvidia-h100-x4:
#   a  gpu-check of the Python package (tests, both examples) and test_gpu_moe_ht with its variants (recv pipe
#      included) at 1 and 4 ranks; then moe-ht at world 4 with SY_HT_RECV_PIPE 0 and 1, alternating, twice
# $OUT/summary.txt, JSON, a few logs.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt B=build/bin
part=${1:?usage: x4-today.sh a}
if [ "$part" = a ]; then
  GPU_CHECK_ONLY='python|moe_ht' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 timeout 330 \
    tools/gpu-check.sh /tmp/g 1 4 >/tmp/gc.txt 2>&1
  echo "== gpu-check rc=$?" >>$s
  cat /tmp/g/summary.txt >>$s
  for pass in 1 2; do
    for p in 0 1; do
      SY_HT_RECV_PIPE=$p timeout 70 $B/syrun -n 4 $B/sy-bench --tokens 4096 --json $OUT/w4_p${p}_$pass.json moe-ht \
        >/tmp/w4_${p}_$pass.txt 2>&1
      echo "== world 4, pipe $p, pass $pass rc=$?" >>$s
      grep -E " (dispatch|combine|dispatch_bwd|combine_bwd) " /tmp/w4_${p}_$pass.txt >>$s
    done
  done
  tar czf $OUT/logs.tar.gz -C /tmp g/logs gc.txt w4_0_1.txt w4_1_1.txt 2>/dev/null
fi
cat $s
