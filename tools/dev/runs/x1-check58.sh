#!/usr/bin/env bash
# x1-check58.sh — run 58, call 3 (one GPU, ~9.5 minutes): the tree after the timeout spread's review fixes (55b82ae,
# 0377b3f; call 1 ran test_gpu_timeout and test_gpu_faults with them on two GPUs) and the error details' fields named by
# operation (1bbe2e0: a bad id's "token t: k x, id y"; test_gpu_moe and test_gpu_moe_ht check those texts):
# 1. the decode step's host time replayed (way c, 128 tokens) first thing, on an idle host (run 57: 2.78 / 3.02 us
#    alone, 8.40 / 20.13 at the end of longer scripts);
# 2. test_gpu_timeout at 1, 2 (load/store, SY_FORCE_PUT=1) and 3 ranks sharing the GPU;
# 3. every test step of gpu-check at 2 ranks sharing the GPU (test_gpu_faults excepted: call 1), as far as the time
#    allows; then the decode step's host time again.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s (load $(cut -d' ' -f1-3 /proc/loadavg))" >>$s
B=build/bin T=build/tests/gpu
decode() {
  timeout 35 $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 128 --settle 0 layer >/tmp/d.txt 2>&1
  echo "== layer decode, world 1 ($1) rc=$? at $SECONDS s (load $(cut -d' ' -f1-3 /proc/loadavg))" >>$s
  grep -E "^\[rank 0\] +decode|target" /tmp/d.txt | sed 's/\[rank 0\]//' | head -8 >>$s
}
decode first
for g in "1 0 -" "2 0,0 -" "2 0,0 SY_FORCE_PUT=1" "3 0,0,0 -"; do
  set -- $g
  e=(); [ "$3" != - ] && e=("$3")
  env "${e[@]}" SY_TEST_SHARED_GPU=$([ "$1" = 1 ] && echo 0 || echo 1) timeout 60 $B/syrun -n $1 --gpus $2 \
    $T/test_gpu_timeout >/tmp/to.txt 2>&1
  echo "test_gpu_timeout n=$1 --gpus $2 $3 rc=$?" >>$s
  grep -E "wait ended|FAIL" /tmp/to.txt | cut -c1-300 >>$s
done
left=$((545 - SECONDS))
GPU_CHECK_SHARED=1 GPU_CHECK_ONLY='^test_(gpu_([a-eg-z]|fp8)|example|python)' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=120 \
  timeout $left tools/gpu-check.sh /tmp/g 2 >/tmp/gc.txt 2>&1
echo "== gpu-check tests (not faults) at 2 sharing the GPU rc=$? at $SECONDS s" >>$s
grep -vE "^build " /tmp/g/summary.txt >>$s
tar czf $OUT/logs.tar.gz -C /tmp/g logs 2>/dev/null
[ $SECONDS -lt 560 ] && decode last
echo "end at $SECONDS s" >>$s
cat $s
