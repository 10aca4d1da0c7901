#!/usr/bin/env bash
# x4-sms.sh — moe-ht at world n (4 best) by the SM budget, after run 40 (the lean roles): BF16, 4,096 tokens, the
# four calls at 16, 24, 32, 48 and 64 SMs, each the way auto takes (by warps to 32 SMs, by blocks above) and the
# other way (SY_HT_ROLES=0 / 1); the FP8 dispatch the auto way; then the layer at 24 and 32 SMs (16 is gpu-check's).
# One pass each, no NCCL (run 40 measured it beside 16 SMs). The question: from what budget the roles by warps stop
# paying, and what the budget DeepEP V1 took (24 SMs) gives here. $OUT/summary.txt, $OUT/layer_<sms>.txt.
. tools/dev/variant.sh # build_tree, bench_tree, dev_start
dev_start summary.txt
build_tree /tmp/xS . ""
cmake --build /tmp/xS -j 10 --target sy-bench >/dev/null 2>&1
RE="dispatch|combine|combine_bwd|dispatch_bwd"
for sms in 16 24 32 48 64; do
  other=0
  [ $sms -gt 32 ] && other=1
  bench_tree /tmp/xS "world $n, $sms SMs, BF16, auto" $n "$RE" --tokens 4096 --wire bf16 --num-sms $sms
  (export SY_HT_ROLES=$other
    bench_tree /tmp/xS "world $n, $sms SMs, BF16, SY_HT_ROLES=$other" $n "$RE" --tokens 4096 --wire bf16 --num-sms $sms)
  bench_tree /tmp/xS "world $n, $sms SMs, FP8, auto" $n "dispatch" --tokens 4096 --wire fp8 --num-sms $sms
done
for sms in 24 32; do
  timeout 90 /tmp/xS/bin/syrun -n $n /tmp/xS/bin/sy-bench --no-nccl --tokens 4096 --num-sms $sms layer \
    >$OUT/layer_$sms.txt 2>&1
  echo "== layer, world $n, $sms SMs rc=$?" >>$s
  grep -E "^(\[rank 0\] )? *(prefill|backward) " $OUT/layer_$sms.txt | sed 's/\[rank 0\]//' >>$s
done
cat $s
