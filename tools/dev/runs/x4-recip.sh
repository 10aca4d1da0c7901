#!/usr/bin/env bash
# x4-recip.sh — run 38's fourth call (n GPUs, 4 best): the FP8 quantisation's quotients by the scale's reciprocal
# (ref/fp8.h: sy__fp8_div_recip, three operations and a sign an element where an IEEE division is ~8 with its range
# check; the same E4M3 codes on every (bf16 amax, bf16 x) pair). Run 31 measured a guarded form of it inside the
# dispatch kernel at world 1, slower (608.9 -> 652.9 us at 16 SMs); not the kernel that quantises the tokens ahead
# of the dispatch from world 2 (sy_ht_quantise, run 32), where the FP8 dispatch spends ~590 us of 2,417 at 8,192
# tokens on 16 SMs (run 38's probe against its table). A = the code before (ab/head: tools/dev/ab.sh tree HEAD
# head), B = this tree (the reciprocal everywhere: SY_FP8_RECIP=1), C = only in sy_ht_quantise (SY_FP8_RECIP=2).
# Tests with B: test_gpu_fp8 (every pair on the device), test_gpu_moe_ht at n and 1, test_gpu_moe at n. Then FP8
# moe-ht at world n, 16 SMs, A B C C B A; at world 1 with 16 and 132 SMs A B C C B A; moe-ll FP8 at world n, A B B A.
# $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, test_ht, bench_tree, dev_start
dev_start summary.txt
declare -A dir=([A]=/tmp/xA [B]=/tmp/xB [C]=/tmp/xC)
build_tree /tmp/xA ab/head &
build_tree /tmp/xB . &
build_tree /tmp/xC . -DSY_FP8_RECIP=2 &
wait
cmake --build /tmp/xB -j 24 --target test_gpu_fp8 test_gpu_moe >/tmp/build_xB2.log 2>&1 || echo "build B tests failed" >>$s
timeout 120 /tmp/xB/bin/syrun -n 1 /tmp/xB/tests/gpu/test_gpu_fp8 >/tmp/t_fp8.txt 2>&1
echo "test_gpu_fp8 (B) rc=$?" >>$s
grep -E "reciprocal|quantise16|quantize:" /tmp/t_fp8.txt >>$s
test_ht /tmp/xB b$n $n "" X=1
test_ht /tmp/xB b1 1 "" X=1
timeout 150 /tmp/xB/bin/syrun -n $n /tmp/xB/tests/gpu/test_gpu_moe >/tmp/t_moe.txt 2>&1
echo "test_gpu_moe (B) n=$n rc=$?" >>$s
ht() { # V RANKS SMS
  bench_tree ${dir[$1]} "moe-ht FP8 world $2, $3 SMs ($1)" $2 "dispatch|combine" --tokens 4096 --wire fp8 --num-sms $3
}
for v in A B C C B A; do ht $v $n 16; done
for v in A B C C B A; do ht $v 1 16; done
for v in A B C C B A; do ht $v 1 132; done
for v in A B B A; do
  b=${dir[$v]}
  timeout 100 $b/bin/syrun -n $n $b/bin/sy-bench --no-nccl --wire fp8 moe-ll >/tmp/r.txt 2>&1
  echo "== moe-ll FP8 world $n ($v) rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]" /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
done
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_*.txt build_x*.log 2>/dev/null) 2>/dev/null
cat $s
