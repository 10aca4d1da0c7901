#!/usr/bin/env bash
# x4-layer-arena.sh — the prefill layer at world n (4 best) with every micro-batch's recv in the receive arena (A:
# the dispatch's first copy in place) and in device memory (D), A then D, 4,096 tokens, 16 SMs, no NCCL; its prefill
# and backward rows to $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=4G
build_tree /tmp/xL . ""
for v in A D; do
  r=device && [ $v = A ] && r=arena
  timeout 80 /tmp/xL/bin/syrun -n $n /tmp/xL/bin/sy-bench --no-nccl --tokens 4096 --recv $r layer >/tmp/layer_$v.txt 2>&1
  echo "== layer world $n, 16 SMs, recv $r ($v) rc=$?" >>$s
  grep -E "^(\[rank 0\] )? *(prefill|backward) |correct|target" /tmp/layer_$v.txt | sed 's/\[rank 0\]//' >>$s
done
cat $s
