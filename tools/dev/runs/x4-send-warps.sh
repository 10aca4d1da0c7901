#!/usr/bin/env bash
# x4-send-warps.sh — run 42: the dispatch kernel's sending warps (SY_HT_SEND_WARPS, 6 since run 39) with the first
# copy in place, where the receivers are busy the whole kernel and the senders wait ~420 us (8,192 tokens): 5 and 7
# against 6, BF16, 4,096 tokens, 16 SMs, recv in the arena, one pass each (6 5 7 6). Needs /tmp/xT (x4-inplace.sh or
# x4-own.sh on the same warm machine), else builds it. $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, bench_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=6G
[ -x /tmp/xT/bin/sy-bench ] || build_tree /tmp/xT . ""
for w in 6 5 7 6; do
  (export SY_HT_SEND_WARPS=$w; bench_tree /tmp/xT "world $n, 16 SMs, BF16, A, send warps $w" $n \
    "dispatch|combine_bwd" --tokens 4096 --wire bf16 --num-sms 16 --recv arena)
done
