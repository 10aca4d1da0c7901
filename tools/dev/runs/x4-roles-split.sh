#!/usr/bin/env bash
# x4-roles-split.sh — the split of a block's 16 warps with SY_HT_ROLES=1, after x4-roles.sh (run 39: S=6 best for
# the dispatch kernel of 4 / 6 / 8, E=8 for the combine kernel of 8 / 10 / 12). moe-ht BF16, 4,096 tokens, 16 SMs at
# world n (4 best): (S, E) = (5, 5), (6, 6), (7, 7), (6, 8), two passes in rotating order (S sets the dispatch and
# combine_bwd, E the combine and dispatch_bwd); then world 2 by warps and by blocks. $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, bench_tree, dev_start
dev_start summary.txt
build_tree /tmp/xN . ""
RE="dispatch|combine|combine_bwd|dispatch_bwd"
A=(--tokens 4096 --wire bf16 --num-sms 16)
for pass in 1 2; do
  if [ $pass = 1 ]; then order="55 66 77 68"; else order="68 77 66 55"; fi
  for v in $order; do
    (export SY_HT_ROLES=1 SY_HT_SEND_WARPS=${v:0:1} SY_HT_EXPERT_WARPS=${v:1:1}
      bench_tree /tmp/xN "world $n by warps S=${v:0:1} E=${v:1:1} (pass $pass)" $n "$RE" "${A[@]}")
  done
done
if [ "$n" -ge 4 ]; then
  for r in 1 0 0 1; do
    (export SY_HT_ROLES=$r SY_HT_SEND_WARPS=6 SY_HT_EXPERT_WARPS=8
      bench_tree /tmp/xN "world 2 SY_HT_ROLES=$r (S=6 E=8)" 2 "$RE" "${A[@]}")
  done
fi
cat $s
