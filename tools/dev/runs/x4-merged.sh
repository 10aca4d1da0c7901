#!/usr/bin/env bash
# x4-merged.sh — ran once, on d238f4f (SY_HT_MERGED was reverted after it; the code is on the branch try/ht-merged,
# bench/NOTES.md): one short device call on 4 GPUs, SY_HT_MERGED=1 (every block sends and receives) checked by
# test_gpu_moe_ht at 4 ranks and 1 rank, then moe-ht at world 4, 4,096 tokens, 16 SMs, merged and split on the same
# machine (NCCL beside each). $OUT/summary.txt is written as it goes.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt B=build/bin T=build/tests/gpu/test_gpu_moe_ht
t0=$(date +%s)
tools/build.sh >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
echo "build $(($(date +%s) - t0)) s" >>$s
SY_HT_MERGED=1 timeout 45 $B/syrun -n 4 --timeout 40 $T >/tmp/t4.txt 2>&1; r4=$?
echo "test_gpu_moe_ht merged n=4 rc=$r4" >>$s; tail -3 /tmp/t4.txt >>$s
SY_HT_MERGED=1 timeout 30 $B/syrun -n 1 --timeout 25 $T >/tmp/t1.txt 2>&1; r1=$?
echo "test_gpu_moe_ht merged n=1 rc=$r1" >>$s; tail -3 /tmp/t1.txt >>$s
if [ $r4 = 0 ]; then
  for m in 1 0; do
    SY_HT_MERGED=$m timeout 60 $B/syrun -n 4 $B/sy-bench --tokens 4096 --json $OUT/merged${m}_w4.json moe-ht \
      >/tmp/b$m.txt 2>&1
    echo "== moe-ht world 4 merged $m rc=$?" >>$s
    grep -E " (layout|dispatch|combine|combine_bwd|dispatch_bwd) |target" /tmp/b$m.txt >>$s
  done
fi
cp /tmp/t4.txt /tmp/t1.txt $OUT/ 2>/dev/null
cat $s
