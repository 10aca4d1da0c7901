#!/usr/bin/env bash
# ht-bulk-check.sh — one device call on one GPU for the dispatch's bulk copies (SY_HT_BULK): test_gpu_moe_ht and its
# put variant at 1 and 3 ranks sharing GPU 0, memcheck on it at world 1, then moe-ht at world 1 (16 and 132 SMs)
# with SY_HT_BULK=1 and 0 in the same call. Writes to $OUT.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
B=build/bin T=build/tests/gpu
GPU_CHECK_ONLY='test_gpu_moe_ht|test_example_layer' GPU_CHECK_SANITIZE="" GPU_CHECK_SHARED=1 GPU_CHECK_GPUS=1 \
  GPU_CHECK_TIMEOUT=200 tools/gpu-check.sh /tmp/g 1 3 >$OUT/gc.txt 2>&1
cp /tmp/g/summary.txt $OUT/
if ! grep -q FAIL /tmp/g/summary.txt; then
  timeout 200 compute-sanitizer --tool memcheck $B/syrun -n 1 $T/test_gpu_moe_ht >$OUT/memcheck.txt 2>&1
  echo "memcheck rc=$? $(grep -c 'Invalid\|ERROR SUMMARY' $OUT/memcheck.txt) $(grep 'ERROR SUMMARY' $OUT/memcheck.txt | head -2)" >>$OUT/summary.txt
  for bulk in 1 0; do
    for sms in 16 132; do
      SY_HT_BULK=$bulk timeout 120 $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 4096 --num-sms $sms moe-ht \
        >$OUT/ht_b${bulk}_s$sms.txt 2>&1
      echo "== bulk $bulk sms $sms rc=$?" >>$OUT/summary.txt
      grep -E "dispatch|combine" $OUT/ht_b${bulk}_s$sms.txt | grep -v "^#" | head -12 >>$OUT/summary.txt
    done
  done
fi
cp /tmp/g/logs.tar.gz $OUT/ 2>/dev/null
cat $OUT/summary.txt
