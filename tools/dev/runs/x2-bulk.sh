#!/usr/bin/env bash
# x2-bulk.sh — one device call on two GPUs: moe-ht at world 2 (BF16, 4,096 tokens, NCCL beside) with the dispatch's
# bulk copies on and off, test_gpu_moe_ht at 2 with them on, and sy-bench layer's variants at world 2.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
B=build/bin T=build/tests/gpu
tools/build.sh >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
s=$OUT/summary.txt
timeout 120 $B/syrun -n 2 $T/test_gpu_moe_ht >$OUT/test_ht.txt 2>&1; echo "test_gpu_moe_ht n=2 rc=$?" >>$s
SY_FORCE_PUT=1 timeout 120 $B/syrun -n 2 $T/test_gpu_moe_ht >>$OUT/test_ht.txt 2>&1; echo "test_gpu_moe_ht.put n=2 rc=$?" >>$s
for bulk in 1 0; do
  SY_HT_BULK=$bulk timeout 150 $B/syrun -n 2 $B/sy-bench --tokens 4096 --wire bf16 moe-ht >$OUT/ht_b$bulk.txt 2>&1
  echo "== moe-ht world 2 bulk $bulk rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) " $OUT/ht_b$bulk.txt >>$s
done
for v in "" "--micro-batches 4" "--num-sms 24" "--num-sms 32"; do
  timeout 120 $B/syrun -n 2 $B/sy-bench --no-nccl --tokens 4096 $v layer >$OUT/layer.txt 2>&1
  echo "== layer world 2 $v rc=$?" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|target|busiest" $OUT/layer.txt >>$s
done
cat $s
