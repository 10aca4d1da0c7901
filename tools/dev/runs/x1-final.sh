#!/usr/bin/env bash
# x1-final.sh — one device call on one GPU after the own-token queue: every GPU test at 1 rank and 3 ranks sharing
# the GPU (put and ticket variants included, no sanitizers), moe-ht at world 1 (4,096 and 8,192 tokens; 16 SMs:
# the queue with its strided order, in token order (a variant tree, SY_HT_OWN_STRIDE=0) and off; 132 SMs). With the
# Python package's run it took more than a call's 600 s (history run 27, call 8): that is tools/dev/runs/x1-python.sh now.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt
tools/build.sh >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
(cmake -S . -B /tmp/b-ns -DCMAKE_CUDA_FLAGS=-DSY_HT_OWN_STRIDE=0 >/dev/null &&
  cmake --build /tmp/b-ns -j 8 --target sy-bench syrun >$OUT/build_ns.log 2>&1) &
GPU_CHECK_SHARED=1 GPU_CHECK_ONLY='^test_' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 tools/gpu-check.sh /tmp/g 1 3 \
  >$OUT/gc.txt 2>&1
echo "== gpu-check 1 3 (shared) rc=$?" >>$s
grep -E "FAIL|fail|pass" /tmp/g/summary.txt | grep -v "^ *$" | tail -60 >>$s
wait
ht() { # NAME BUILD SMS ENV...
  local name=$1 b=$2 sms=$3
  shift 3
  env "$@" timeout 150 $b/bin/syrun -n 1 $b/bin/sy-bench --tokens 4096,8192 --num-sms $sms --json $OUT/ht_$name.json \
    moe-ht >/tmp/ht_$name.txt 2>&1
  echo "== moe-ht $name: world 1, $sms SMs, $b $* rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) |[Cc]eiling" /tmp/ht_$name.txt >>$s
}
ht q16 build 16 X=1
ht ns16 /tmp/b-ns 16 X=1
ht off16 build 16 SY_HT_OWN_QUEUE=0
ht q132 build 132 X=1
ht off132 build 132 SY_HT_OWN_QUEUE=0
tar czf $OUT/logs.tar.gz -C /tmp g/summary.txt g/logs.tar.gz $(cd /tmp && ls ht_*.txt) 2>/dev/null
cat $s
