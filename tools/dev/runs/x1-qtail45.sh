#!/usr/bin/env bash
# x1-qtail45.sh — run 45, call 8: warp_quantise's passes past a token's end skipped (rows.cuh, SY_HT_QUANT_TAIL=1:
# at hidden 7168 the last of four rounds of 4 x 512 elements had two empty passes, quantised as zeros) against the
# build with them (SY_HT_QUANT_TAIL=0). test_gpu_moe_ht with the change at 1 rank and 3 sharing the GPU; then the FP8
# dispatch at world 1 (4,096 tokens) at 132 and 16 SMs, in the kernel (the default at world 1) and quantised ahead
# (SY_HT_PREQUANT=1: sy_ht_quantise, what world >= 2 runs), in the order old new new old. $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, dev_start, bench_tree, test_ht
dev_start summary.txt
declare -A dir=([old]=/tmp/q0 [new]=/tmp/q1)
build_tree /tmp/q0 . "-DSY_HT_QUANT_TAIL=0" &
build_tree /tmp/q1 . ""
wait
test_ht /tmp/q1 one 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/q1 shared3 3 "--gpus 0,0,0" SY_HT_PREQUANT=-1
test_ht /tmp/q1 shared3pq 3 "--gpus 0,0,0" SY_HT_PREQUANT=1
for sms in 132 16; do
  for pq in -1 1; do
    for v in old new new old; do
      (export SY_HT_PREQUANT=$pq; bench_tree "${dir[$v]}" "world 1, $sms SMs, FP8, prequant $pq ($v)" 1 "dispatch" \
        --tokens 4096 --wire fp8 --num-sms $sms)
    done
  done
done
cat $s
