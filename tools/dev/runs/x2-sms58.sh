#!/usr/bin/env bash
# x2-sms58.sh — run 58, call 7 (two GPUs, ~4 minutes, what this session's device time left): moe-ht at world 2 by SM
# budget (8, 24, 32, 64; call 1 measured 16: BF16 dispatch kernel 695.0 / 695.2 us, FP8 677.2 / 677.2), 4,096 tokens, recv by
# the caller, no NCCL: how the dispatch scales with SMs across a link (never measured at world 2). The first part of
# x2-sweep59.sh.
. tools/dev/variant.sh # dev_start, bench_tree
dev_start summary.txt
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
for m in 8 32 64 24; do
  [ $SECONDS -lt 230 ] || break
  bench_tree build "world 2, $m SMs, bf16" 2 "dispatch|combine" --tokens 4096 --wire bf16 --num-sms $m
  bench_tree build "world 2, $m SMs, fp8" 2 "dispatch" --tokens 4096 --wire fp8 --num-sms $m
done
echo "end at $SECONDS s" >>$s
cat $s
