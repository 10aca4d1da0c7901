#!/usr/bin/env bash
# x1-queue.sh — one device call on one GPU: test_gpu_moe_ht at 1 rank and 3 ranks sharing the GPU (own-token queue
# on, and off with SY_HT_OWN_QUEUE=0), then moe-ht at world 1 (4,096 tokens) with 16 and 132 SMs, queue on and
# off, SY_HT_PROBE digested (tools/dev/ht-probe.py). Summary in $OUT/summary.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
B=build/bin T=build/tests/gpu
tools/build.sh >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
s=$OUT/summary.txt
for q in 1 0; do
  SY_HT_OWN_QUEUE=$q timeout 150 $B/syrun -n 1 $T/test_gpu_moe_ht >>$OUT/test_ht.txt 2>&1; echo "test_gpu_moe_ht n=1 queue=$q rc=$?" >>$s
  SY_HT_OWN_QUEUE=$q timeout 200 $B/syrun -n 3 --gpus 0,0,0 $T/test_gpu_moe_ht >>$OUT/test_ht.txt 2>&1; echo "test_gpu_moe_ht n=3 shared queue=$q rc=$?" >>$s
done
tail -5 $OUT/test_ht.txt >>$s
for sms in 16 132; do
  for q in 1 0; do
    d=$OUT/p_w1s${sms}q$q; mkdir -p $d
    SY_HT_OWN_QUEUE=$q SY_HT_PROBE=$d/probe.%r.txt timeout 150 $B/syrun -n 1 $B/sy-bench --tokens 4096 --num-sms $sms \
      --json $d/ht.json moe-ht >$d/ht.txt 2>&1
    echo "== moe-ht world 1, $sms SMs, queue $q, rc=$?" >>$s
    grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) |target" $d/ht.txt >>$s
    python3 tools/dev/ht-probe.py $d/probe.*.txt | grep -E "kernel|dispatch|combine_bwd" >>$s 2>&1
  done
done
tar czf $OUT/probes.tar.gz -C $OUT $(cd $OUT && ls -d p_*) 2>/dev/null
rm -rf $OUT/p_*
cat $s
