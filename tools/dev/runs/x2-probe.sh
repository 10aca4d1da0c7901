#!/usr/bin/env bash
# x2-probe.sh — one device call on two GPUs: where the high-throughput kernels' blocks spend their time
# (SY_HT_PROBE, tools/dev/ht-probe.py) at world 2 with 16 and 32 SMs and at world 1 with 16, BF16 wire, 4,096
# tokens; test_gpu_moe_ht at 2 first. Prints a summary (also $OUT/summary.txt).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
B=build/bin T=build/tests/gpu
tools/build.sh >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
s=$OUT/summary.txt
timeout 120 $B/syrun -n 2 $T/test_gpu_moe_ht >$OUT/test_ht.txt 2>&1; echo "test_gpu_moe_ht n=2 rc=$?" >>$s
run() { # NAME RANKS SMS
  local name=$1 n=$2 sms=$3
  mkdir -p $OUT/p_$name
  SY_HT_PROBE=$OUT/p_$name/probe.%r.txt timeout 150 $B/syrun -n $n $B/sy-bench --tokens 4096 --wire bf16 --num-sms $sms \
    --json $OUT/p_$name/ht.json moe-ht >$OUT/p_$name/ht.txt 2>&1
  echo "== $name: moe-ht world $n, $sms SMs, rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) " $OUT/p_$name/ht.txt >>$s
  python3 tools/dev/ht-probe.py $OUT/p_$name/probe.*.txt >>$s 2>&1
}
run w2s16 2 16
run w2s32 2 32
run w1s16 1 16
tar czf $OUT/probes.tar.gz -C $OUT $(cd $OUT && ls -d p_*) 2>/dev/null
rm -rf $OUT/p_*
cat $s
