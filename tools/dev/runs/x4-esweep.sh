#!/usr/bin/env bash
# x4-esweep.sh — run 40's question: by warps the combine kernel (combine, dispatch_bwd) was slower at 24 SMs than at
# 16 (935 against 902-926 us). Is it the experts' side's share of the warps (SY_HT_EXPERT_WARPS, E = 8, chosen at 16
# SMs)? World n (4 best), BF16, 4,096 tokens, SY_HT_ROLES=1, the combine and dispatch_bwd rows: at 24 SMs E = 5, 6,
# 8, 10, 12; at 32 SMs E = 6, 10, 12. One pass each, no NCCL; $OUT/summary.txt written as it goes.
. tools/dev/variant.sh # build_tree, bench_tree, dev_start
dev_start summary.txt
build_tree /tmp/xE . ""
for cfg in "24 8" "24 5" "24 6" "24 10" "24 12" "32 6" "32 10" "32 12"; do
  set -- $cfg
  (export SY_HT_ROLES=1 SY_HT_EXPERT_WARPS=$2
    bench_tree /tmp/xE "world $n, $1 SMs, by warps, E = $2" $n "combine|dispatch_bwd" --tokens 4096 --wire bf16 \
      --num-sms $1)
done
cat $s
