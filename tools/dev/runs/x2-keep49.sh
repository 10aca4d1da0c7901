#!/usr/bin/env bash
# x2-keep49.sh — run 49, call 7: the per-call floor of the high-throughput dispatch and combine. Call 4's timeline put
# a group's dispatch far above its share of the rows (world 1: 182 µs for 7% of them, 299 for 25%). Here moe-ht
# (4,096 tokens, BF16, 16 SMs, recv in the arena, kernel time) with only each rank's first share of experts kept
# (--keep-experts, new: one group of the layer's --split experts): 1, 0.5, 0.25 and 0.0704 (18 of 256) at world 1,
# 1 and 0.5 at world 2. Output: $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
keep() { # keep RANKS SHARE
  local t0=$SECONDS
  timeout 60 /tmp/x/bin/syrun -n $1 /tmp/x/bin/sy-bench --no-nccl -c 0 --tokens 4096 --wire bf16 --recv arena \
    --keep-experts $2 moe-ht >/tmp/r.txt 2>&1
  echo "== world $1, keep $2 rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +4096|exact layout|rror" /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
}
for share in 1 0.0704 0.25 0.5; do keep 1 $share; done
[ "$n" -ge 2 ] && for share in 1 0.5; do keep 2 $share; done
cat $s
