#!/usr/bin/env bash
# x2-spread57.sh — run 57, call 3 (two GPUs, ~8 minutes): a timeout told to the peers (device.cuh:
# report_error_ctx_at, adopted in aborted()), never run before:
# 1. test_gpu_timeout (ranks entering the wait 300 ms apart: rank 0's timeout must end the others' waits early and be
#    reported as theirs) at 1, at 2 GPUs (load/store; and SY_FORCE_PUT=1: the puts of values), at 3 ranks sharing GPU 0;
# 2. every GPU test at world 2 (gpu-check's test steps, test_gpu_faults and the placement check included) and
#    test_gpu_faults once more;
# 3. test_gpu_moe_ht, test_gpu_attn and test_gpu_moe at 3 ranks sharing GPU 0 (everything since bfd9476 at 3 ranks);
# 4. moe-ht at world 2 (4,096 tokens, 16 SMs, NCCL beside), against call 1's rows: the waits' abort check now reads
#    one more word every 1,024 polls;
# 5. the decode step's host time replayed (way c, 128 tokens) at world 1 and world 2 on this host: call 1 read 8.40 us
#    at world 2 (run 54: 2.26 at world 1, another host).
. tools/dev/variant.sh # dev_start, test_ht
dev_start summary.txt
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
B=build/bin T=build/tests/gpu
for g in "1 0 -" "2 0,1 -" "2 0,1 SY_FORCE_PUT=1" "3 0,0,0 -"; do
  set -- $g
  e=(); [ "$3" != - ] && e=("$3")
  env "${e[@]}" SY_TEST_SHARED_GPU=$([ "$1" = 3 ] && echo 1 || echo 0) timeout 60 $B/syrun -n $1 --gpus $2 \
    $T/test_gpu_timeout >/tmp/to.txt 2>&1
  echo "test_gpu_timeout n=$1 --gpus $2 $3 rc=$?" >>$s
  grep -E "wait ended|FAIL" /tmp/to.txt | cut -c1-300 >>$s
done
GPU_CHECK_ONLY='^test_gpu' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 timeout 330 tools/gpu-check.sh /tmp/g 2 \
  >/tmp/gc.txt 2>&1
echo "== gpu-check ^test_gpu at 2 rc=$? at $SECONDS s" >>$s
grep -vE "^build " /tmp/g/summary.txt >>$s
tar czf $OUT/logs.tar.gz -C /tmp/g logs 2>/dev/null
grep -hE "^\[faults\]" /tmp/g/logs/test_gpu_faults.n1.log | cut -c1-420 >>$s
if [ $SECONDS -lt 420 ]; then
  timeout 150 $T/test_gpu_faults >/tmp/f2.txt 2>&1
  echo "== test_gpu_faults (again) rc=$?" >>$s
  grep -E "^\[faults\]" /tmp/f2.txt | cut -c1-420 >>$s
fi
for t in test_gpu_moe_ht test_gpu_attn test_gpu_moe; do
  [ $SECONDS -lt 500 ] || break
  SY_TEST_SHARED_GPU=1 timeout 100 $B/syrun -n 3 --gpus 0,0,0 $T/$t >/tmp/t3.txt 2>&1
  echo "$t n=3 --gpus 0,0,0 rc=$? ($(grep -c ' ok ' /tmp/t3.txt) cases ok, $(grep -c 'passed' /tmp/t3.txt) ranks passed)" >>$s
  grep -E "FAIL" /tmp/t3.txt | head -3 | cut -c1-250 >>$s
done
if [ $SECONDS -lt 530 ]; then
  timeout 60 $B/syrun -n 2 $B/sy-bench --tokens 4096 moe-ht >/tmp/r.txt 2>&1
  echo "== moe-ht world 2, 4,096 tokens, 16 SMs, NCCL beside rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) " /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
fi
for w in 1 2; do
  [ $SECONDS -lt 560 ] || break
  timeout 40 $B/syrun -n $w $B/sy-bench --no-nccl --tokens 128 --settle 0 layer >/tmp/d.txt 2>&1
  echo "== layer decode, world $w rc=$?" >>$s
  grep -E "^\[rank 0\] +decode|target" /tmp/d.txt | sed 's/\[rank 0\]//' | head -8 >>$s
done
echo "end at $SECONDS s" >>$s
cat $s
