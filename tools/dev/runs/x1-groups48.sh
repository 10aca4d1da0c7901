#!/usr/bin/env bash
# x1-groups48.sh — run 48, call 6 (one GPU): issue 21's world-1 target (4,096 tokens, way b hiding >= 70% of the
# communication) with the micro-batches by expert groups (--split experts): call 5 found b at the GEMMs plus the two
# ends (the first group's dispatch and the last's combine), so more groups, smaller ends: 2, 4, 8 groups; then 2 token
# micro-batches beside them. `compute` now on written operands (every way's buffers written once before the timed ways:
# call 5's runs without `comm` first timed it on zeros, ~12-20% fast). One layer, each expert's weights, settled.
# Output: $OUT/summary.txt, $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
for g in 2 4 8; do
  layer_marked e4096_g$g --tokens 4096 -n 50 -w 3 -c 0 --split experts --micro-batches $g --ways comm,compute,gemms,a,b,c
done
layer_marked t4096 --tokens 4096 -n 50 -w 3 -c 0 --ways comm,compute,gemms,a,b,c
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
