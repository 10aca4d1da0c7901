#!/usr/bin/env bash
# x4-probe-sms.sh — run 40's open question: by warps the combine kernel hardly speeds up from 16 to 32 SMs (902-926
# -> 897-935 -> 833-838 us) while by blocks it scales (991-1,001 -> 805 -> 745). SY_HT_PROBE at world n (4 best),
# BF16, 8,192 tokens: by warps (SY_HT_ROLES=1) and by blocks (0) at 16, 24 and 32 SMs; rank 0's tables (what each
# role's warps spend moving, waiting, on own rows) to $OUT/summary.txt. Then, to set the probe's cost aside, the
# plain kernel times of the same six (4,096 tokens, combine and dispatch_bwd).
. tools/dev/variant.sh # build_tree, bench_tree, probe_tree, dev_start
dev_start summary.txt
build_tree /tmp/xP . ""
for sms in 16 24 32; do
  for r in 1 0; do
    (export SY_HT_ROLES=$r
      probe_tree /tmp/xP "SY_HT_ROLES=$r, $sms SMs, 8,192 tokens BF16" $n --tokens 8192 --wire bf16 --num-sms $sms
      bench_tree /tmp/xP "world $n, $sms SMs, SY_HT_ROLES=$r" $n "combine|dispatch_bwd" --tokens 4096 --wire bf16 \
        --num-sms $sms)
  done
done
cat $s
