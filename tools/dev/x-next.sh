#!/usr/bin/env bash
# x-next.sh — the first device call after run 32 (not run yet; any kind, 1 or 4 GPUs): what run 32 left unrun —
# test_gpu_moe_ht (every variant, its new UE8M0 hidden-8320 case) at the GPUs present and at 1 rank, with ranks
# sharing the GPU where only one is present; compute-sanitizer memcheck and racecheck on it at 1 rank, also with
# SY_HT_PREQUANT=1; test_example_layer; then the FP8 rows' scale stores (EC_SCALES=1 sy-expand-ceiling 4096 7168 8:
# rows alone, + group-major scales, + row-major, at 16 and 132 SMs) and the layer's header line. $OUT/summary.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$n" -ge 4 ]; then counts="4 1"; shared=0; else counts="3 1"; shared=1; fi
GPU_CHECK_SHARED=$shared GPU_CHECK_ONLY='moe_ht|example_layer' GPU_CHECK_SANITIZE="memcheck racecheck" \
  GPU_CHECK_TIMEOUT=150 timeout 420 tools/gpu-check.sh /tmp/g $counts >/dev/null 2>&1
cat /tmp/g/summary.txt >>$s
EC_SCALES=1 timeout 60 build/bin/sy-expand-ceiling 4096 7168 8 >>$s 2>&1
timeout 60 build/bin/syrun -n 1 build/bin/sy-bench --no-nccl --tokens 4096 --num-sms 132 -n 1 -w 1 layer 2>&1 |
  grep 'GEMMs on' | head -1 >>$s
cat $s
