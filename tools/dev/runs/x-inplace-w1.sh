#!/usr/bin/env bash
# x-inplace-w1.sh — after the first copy in place (21d81c9): (1) world 1, where it is off (no peers), the dispatch
# kernel against the commit before (ab/base = b4ef24b; tools/dev/ab.sh tree b4ef24b base, carried): BF16 and FP8 at
# 16 SMs and BF16 at 132, B T T B; (2) at n GPUs the BF16 dispatch with recv in device memory (D) and in the arena
# (A) at 24 and 32 SMs; (3) test_gpu_moe_ht with 3 ranks on GPU 0 (the in-place stores between ranks sharing a GPU).
# $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, bench_tree, test_ht, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=6G
build_tree /tmp/xB ab/base "" &
build_tree /tmp/xT . "" &
wait
for v in B T T B; do
  bench_tree /tmp/x$v "world 1, 16 SMs, BF16 ($v)" 1 "dispatch" --tokens 4096 --wire bf16 --num-sms 16
  bench_tree /tmp/x$v "world 1, 16 SMs, FP8 ($v)" 1 "dispatch" --tokens 4096 --wire fp8 --num-sms 16
done
for v in B T T B; do
  bench_tree /tmp/x$v "world 1, 132 SMs, BF16 ($v)" 1 "dispatch" --tokens 4096 --wire bf16 --num-sms 132
done
for sms in 24 32; do
  for v in D A; do
    r=device && [ $v = A ] && r=arena
    bench_tree /tmp/xT "world $n, $sms SMs, 4096 tokens, BF16 ($v)" $n "dispatch" --tokens 4096 --wire bf16 \
      --num-sms $sms --recv $r
  done
done
test_ht /tmp/xT shared3 3 "--gpus 0,0,0" SY_TEST_SEED=20261127
grep -E "WRONG|failed" /tmp/t_shared3.txt | head >>$s
cat $s
