#!/usr/bin/env bash
# x4-head.sh — one device call (issue 19; four GPUs): how a receiver's head store is ordered after its reads of the
# ring slots (SY_HT_HEAD_ORDER, build time, ht.cuh). A = 0 (a release store per peer: MEMBAR.SYS each; the combine's
# owners run three in a row at world 4), F = 1 (one fence.acq_rel.sys, then relaxed stores: the same ordering), R = 2
# (relaxed stores, no fence: DeepEP's receivers). By run 28's probe the combine's owners spend ~186 us of 3,641 in
# their give-back and barrier (8,192 tokens); the dispatch's receivers hand back every round (57 rounds). Variants
# built side by side; test_gpu_moe_ht at 4 ranks with each (and SY_FORCE_PUT=1 with F: the put path keeps its quiet
# and signal); moe-ht at world 4, 4,096 tokens, 16 SMs, BF16 and FP8, two passes rotating; the probe of the last
# pass's A and R runs (8,192 tokens, BF16; its sync column: the rounds' settling, since d44eb1a+1). $OUT/head.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/head.txt
nvidia-smi -L | head -1 >>$s
. tools/dev/variant.sh # variant DIR FLAGS: a build side by side
variant /tmp/vA -DSY_HT_HEAD_ORDER=0 &
variant /tmp/vF -DSY_HT_HEAD_ORDER=1 &
variant /tmp/vR -DSY_HT_HEAD_ORDER=2 &
wait
declare -A dir=([A]=/tmp/vA [F]=/tmp/vF [R]=/tmp/vR)
for v in A F R; do
  b=${dir[$v]}
  timeout 60 $b/bin/syrun -n 4 $b/tests/gpu/test_gpu_moe_ht >/tmp/t_$v.txt 2>&1
  echo "test_gpu_moe_ht n=4 ($v) rc=$?" >>$s
done
SY_FORCE_PUT=1 timeout 60 /tmp/vF/bin/syrun -n 4 /tmp/vF/tests/gpu/test_gpu_moe_ht >/tmp/t_Fput.txt 2>&1
echo "test_gpu_moe_ht.put n=4 (F) rc=$?" >>$s
rotate3 A F R
for v in A R; do probe4 $v; done
tar czf $OUT/logs.tar.gz -C /tmp t_A.txt t_F.txt t_R.txt t_Fput.txt build_vA.log build_vF.log build_vR.log 2>/dev/null
cat $s
