#!/usr/bin/env bash
# x4-ahead44.sh — the dispatch senders' plans a batch ahead (SY_HT_PLAN_AHEAD, run 44), and the FP8 quantisation in
# the kernel again. Run 44's probe: with the receivers as a stream (tools/dev/patches/ht-recv-stream.patch) the
# receivers waited and the kernel did not move, so the senders set its pace; they plan ~7.5 us a batch (60 of ~795 us)
# while their other warps wait. 1: warp 0 plans batch b + 1 after b's sends start, tokens a warp each in turn; 2: the
# same with the tokens to the first free warp (spills 88-100 bytes in the _roles instances). Predicted: BF16 dispatch
# at world 4, 4,096 tokens, arena, 16 SMs 800 -> 750-780 us (1 less than 2); combine_bwd (the same senders) -1 to -3%.
# FP8: the quantisation ahead costs ~150 us on the 16 SMs before the dispatch kernel (650 us; run 44's probe); with the
# senders' planning now by lanes, SY_HT_PREQUANT=0 (by the senders) again against the default.
# Builds base, a1, a2; test_gpu_moe_ht at n ranks with a1 and a2; moe-ht world n arena base / a1 / a2, two passes
# rotating; base with SY_HT_PREQUANT=0 twice; the probe of a1.
. tools/dev/variant.sh # build_tree, ab_arena, bench_tree, probe_tree, test_ht, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_tree /tmp/xB . "" &
build_tree /tmp/xA1 . "-DSY_HT_PLAN_AHEAD=1" &
build_tree /tmp/xA2 . "-DSY_HT_PLAN_AHEAD=2"
wait
test_ht /tmp/xA1 a1 $n "" SY_TEST_SEED=20261128
test_ht /tmp/xA2 a2 $n "" SY_TEST_SEED=20261129
for t in a1 a2; do grep -q "WRONG\|FAIL" /tmp/t_$t.txt && cp /tmp/t_$t.txt $OUT/; done
declare -A dir=([base]=/tmp/xB [a1]=/tmp/xA1 [a2]=/tmp/xA2)
ab_arena 4096 both base a1 a2 a2 a1 base
for i in 1 2; do
  (export SY_HT_PREQUANT=0; bench_tree /tmp/xB "world $n, 16 SMs, 4096 tokens FP8, arena, SY_HT_PREQUANT=0 (base)" $n \
    "dispatch" --tokens 4096 --wire fp8 --num-sms 16 --recv arena)
done
probe_tree /tmp/xA1 "(a1) 4,096 tokens BF16, 16 SMs, arena" $n --tokens 4096 --wire bf16 --num-sms 16 --recv arena
cat $s
