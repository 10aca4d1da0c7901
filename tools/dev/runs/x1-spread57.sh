#!/usr/bin/env bash
# x1-spread57.sh — run 57, call 3 (one GPU, ~9 minutes; written for two GPUs, which were withdrawn before it ran):
# a timeout told to the peers (device.cuh: report_error_ctx_at, adopted in aborted()), never run before:
# 1. test_gpu_timeout (ranks entering the wait 300 ms apart: rank 0's timeout must end the others' waits early and be
#    reported as theirs) at 1, at 2 ranks sharing the GPU (load/store; and SY_FORCE_PUT=1: the puts of values) and 3;
# 2. test_gpu_faults twice (3 ranks sharing the GPU, a rank SIGKILLed in each operation);
# 3. every GPU test at 2 ranks sharing the GPU (gpu-check's test steps), then test_gpu_moe_ht and test_gpu_attn at 3;
# 4. moe-ht at world 1 on 132 SMs (the plain kernels' waits now read one more word every 1,024 polls; run 56 on
#    another host: FP8 dispatch 111.26-111.94 us, BF16 163.65-164.02);
# 5. the decode step's host time replayed (way c, 128 tokens) at world 1: call 1 read 8.40 us at world 2 (2 x H200;
#    run 54: 2.26 at world 1).
. tools/dev/variant.sh # dev_start
dev_start summary.txt
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
B=build/bin T=build/tests/gpu
for g in "1 0 -" "2 0,0 -" "2 0,0 SY_FORCE_PUT=1" "3 0,0,0 -"; do
  set -- $g
  e=(); [ "$3" != - ] && e=("$3")
  env "${e[@]}" SY_TEST_SHARED_GPU=$([ "$1" = 1 ] && echo 0 || echo 1) timeout 60 $B/syrun -n $1 --gpus $2 \
    $T/test_gpu_timeout >/tmp/to.txt 2>&1
  echo "test_gpu_timeout n=$1 --gpus $2 $3 rc=$?" >>$s
  grep -E "wait ended|FAIL" /tmp/to.txt | cut -c1-300 >>$s
done
for i in 1 2; do
  timeout 150 $T/test_gpu_faults >/tmp/f$i.txt 2>&1
  echo "== test_gpu_faults ($i) rc=$? at $SECONDS s" >>$s
  grep -E "^\[faults\]" /tmp/f$i.txt | cut -c1-420 >>$s
done
GPU_CHECK_SHARED=1 GPU_CHECK_ONLY='^test_gpu_[a-eg-z]' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=120 timeout 280 \
  tools/gpu-check.sh /tmp/g 2 >/tmp/gc.txt 2>&1
echo "== gpu-check ^test_gpu (not faults) at 2 sharing the GPU rc=$? at $SECONDS s" >>$s
grep -vE "^build " /tmp/g/summary.txt >>$s
tar czf $OUT/logs.tar.gz -C /tmp/g logs 2>/dev/null
for t in test_gpu_moe_ht test_gpu_attn; do
  [ $SECONDS -lt 470 ] || break
  SY_TEST_SHARED_GPU=1 timeout 80 $B/syrun -n 3 --gpus 0,0,0 $T/$t >/tmp/t3.txt 2>&1
  echo "$t n=3 --gpus 0,0,0 rc=$? ($(grep -c ' ok ' /tmp/t3.txt) cases ok, $(grep -c 'passed' /tmp/t3.txt) ranks passed)" >>$s
  grep -E "FAIL" /tmp/t3.txt | head -3 | cut -c1-250 >>$s
done
if [ $SECONDS -lt 530 ]; then
  timeout 40 $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 4096 --num-sms 132 moe-ht >/tmp/r.txt 2>&1
  echo "== moe-ht world 1, 4,096 tokens, 132 SMs rc=$?" >>$s
  grep -E " (dispatch|combine) " /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
fi
if [ $SECONDS -lt 560 ]; then
  timeout 35 $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 128 --settle 0 layer >/tmp/d.txt 2>&1
  echo "== layer decode, world 1 rc=$?" >>$s
  grep -E "^\[rank 0\] +decode|target" /tmp/d.txt | sed 's/\[rank 0\]//' | head -8 >>$s
fi
echo "end at $SECONDS s" >>$s
cat $s
