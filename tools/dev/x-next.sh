#!/usr/bin/env bash
# x-next.sh — the first device call after run 35 (any kind; 2 GPUs or more best): what run 35 wrote after its device
# time ran out — the cuda backend's placement check before NVSHMEM starts (core/placement.c) and gpu-check's round
# robin over the most GPUs that divide the rank count. With n >= 2 GPUs: test_gpu_placement (3 ranks on GPUs 0,1,0
# must be refused at once, naming ranks 0 and 2) and test_gpu_init / test_gpu_alltoall / test_gpu_moe_ht at n and at
# 3 sharing (3 on 2 GPUs: all on GPU 0); with 1 GPU the same tests at 1 and 3 sharing (the check must accept 0,0,0);
# with 4 GPUs also every GPU test at 4 and the issue-19 table at world 4 (16 SMs, NCCL beside: $OUT/ht_w4.json).
# $OUT/summary.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt b=build/bin
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
nvidia-smi -L | head -1 >>$s
only='^test_gpu_(init|alltoall|moe_ht|placement)$'
[ "$n" -ge 4 ] && only='^test_'
if [ "$n" -ge 2 ]; then counts="$n 3"; else counts="1 3"; fi
GPU_CHECK_SHARED=1 GPU_CHECK_ONLY="$only" GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=120 \
  tools/gpu-check.sh /tmp/g $counts >/dev/null 2>&1
grep -v "^cpu tests" /tmp/g/summary.txt >>$s
tar czf $OUT/logs.tar.gz -C /tmp/g logs.tar.gz 2>/dev/null
if [ "$n" -ge 4 ]; then
  timeout 200 $b/syrun -n 4 $b/sy-bench --json $OUT/ht_w4.json moe-ht >/tmp/ht4.txt 2>&1
  echo "== moe-ht world 4, 16 SMs rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) |target" /tmp/ht4.txt | sed 's/\[rank 0\]//' >>$s
fi
cat $s
