#!/usr/bin/env bash
# x1-add51c.sh — run 51, call 4 (one GPU): the layer at world 1 by expert groups (4, 1,6,6,1), --group-sum kernel
# against add (kernel add add kernel), 30 passes a way, ways comm,compute,b,c, -c 0: call 3 with more passes.
. tools/dev/variant.sh
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/h . ""
echo "build done at $SECONDS s" >>$s
for g in 4 1,6,6,1; do
  for gs in kernel add add kernel; do
    [ $SECONDS -lt 540 ] || break
    t0=$SECONDS
    timeout 100 /tmp/h/bin/syrun -n 1 /tmp/h/bin/sy-bench --no-nccl --recv arena --tokens 4096 -n 30 -w 3 -c 0 \
      --split experts --micro-batches $g --group-sum $gs --ways comm,compute,b,c layer >/tmp/layer.txt 2>&1
    echo "== layer $g $gs rc=$? ($((SECONDS - t0)) s)" >>$s
    grep -E "^\[rank 0\] +(prefill|backward) .* (comm|compute|b|c) |rror" /tmp/layer.txt | sed 's/\[rank 0\]//' >>$s
  done
done
cat $s
