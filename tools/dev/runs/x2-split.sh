#!/usr/bin/env bash
# x2-split.sh — one device call on two GPUs: test_gpu_moe_ht (and its put variant) at 2, then moe-ht at world 2
# (4,096 tokens, NCCL beside) with the dispatch's own-row split auto, 512 (half: the old split) and 0.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
B=build/bin T=build/tests/gpu
tools/build.sh >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
s=$OUT/summary.txt
timeout 120 $B/syrun -n 2 $T/test_gpu_moe_ht >$OUT/test_ht.txt 2>&1; echo "test_gpu_moe_ht n=2 rc=$?" >>$s
SY_FORCE_PUT=1 timeout 120 $B/syrun -n 2 $T/test_gpu_moe_ht >>$OUT/test_ht.txt 2>&1; echo "test_gpu_moe_ht.put n=2 rc=$?" >>$s
for own in -1 512 0; do
  SY_HT_RECV_OWN=$own timeout 150 $B/syrun -n 2 $B/sy-bench --tokens 4096 --json $OUT/ht_own$own.json moe-ht >$OUT/ht_own$own.txt 2>&1
  echo "== moe-ht world 2 SY_HT_RECV_OWN=$own rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) " $OUT/ht_own$own.txt >>$s
done
timeout 120 $B/syrun -n 2 $B/sy-bench --no-nccl --tokens 4096 --json $OUT/layer2.json layer >$OUT/layer2.txt 2>&1
echo "== layer world 2 rc=$?" >>$s
grep -E "^\[rank 0\] +(prefill|backward)|target|busiest" $OUT/layer2.txt >>$s
cat $s
