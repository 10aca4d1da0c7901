#!/usr/bin/env bash
# x4-table.sh — issue 19's table at n GPUs (4 best; the target's machine is 4 x H200) on the current code, after
# tools/dev/runs/x4-inplace.sh on the same warm machine (its build /tmp/xT, else built here): `sy-bench moe-ht` with NCCL
# beside (4,096 and 8,192 tokens, FP8 and BF16, the five calls) with recv in the receive arena (A: the dispatch's
# first copy in place) and in device memory (D); the prefill layer A then D (16 SMs, no NCCL); the world-1 table at
# 132 SMs (the one-GPU targets). X4_TABLES (default "A D") picks the tables. JSON to $OUT, rows to
# $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=8G # the arena of one worst-case recv: 1.9 GB at 4,096 tokens, 3.8 GB at 8,192 (world 4)
[ -x /tmp/xT/bin/sy-bench ] || build_tree /tmp/xT . ""
B=/tmp/xT/bin
for v in ${X4_TABLES:-A D}; do
  r=device && [ $v = A ] && r=arena
  timeout 240 $B/syrun -n $n $B/sy-bench --recv $r --json $OUT/ht_w${n}_$v.json moe-ht >/tmp/tab_$v.txt 2>&1
  echo "== moe-ht world $n, 16 SMs, NCCL beside, recv $r ($v) rc=$?" >>$s
  grep -E " (layout|dispatch|combine|combine_bwd|dispatch_bwd) " /tmp/tab_$v.txt | sed 's/\[rank 0\]//' >>$s
done
for v in A D; do
  r=device && [ $v = A ] && r=arena
  timeout 100 $B/syrun -n $n $B/sy-bench --no-nccl --tokens 4096 --recv $r layer >/tmp/layer_$v.txt 2>&1
  echo "== layer world $n, 16 SMs, recv $r ($v) rc=$?" >>$s
  grep -E "^(\[rank 0\] )? *(prefill|backward) |correct|target" /tmp/layer_$v.txt | sed 's/\[rank 0\]//' >>$s
done
timeout 120 $B/syrun -n 1 $B/sy-bench --tokens 4096 --num-sms 132 --json $OUT/ht_w1.json moe-ht >/tmp/w1.txt 2>&1
echo "== moe-ht world 1, 132 SMs, NCCL beside rc=$?" >>$s
grep -E " (layout|dispatch|combine|combine_bwd|dispatch_bwd) " /tmp/w1.txt | sed 's/\[rank 0\]//' >>$s
cp /tmp/tab_A.txt $OUT/moe-ht_A.txt 2>/dev/null
cat $s
