#!/usr/bin/env bash
# x4-tl45.sh — run 45, call 4: where way b's time goes at world 4 (16,384 tokens, micro-batches 1,3,3,1): each timed
# pass's kernels from CUPTI (SY_BENCH_TIMELINE, every rank: $OUT/tl.R.txt) — how long the dispatches, combines and
# GEMMs take beside each other against alone.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
nvidia-smi --query-gpu=index,clocks.sm,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >>$s 2>&1
build_tree /tmp/x . ""
SY_BENCH_TIMELINE=$OUT/tl.%r.txt timeout 200 /tmp/x/bin/syrun -n $n /tmp/x/bin/sy-bench --no-nccl --recv arena -n 3 -w 2 \
  --tokens 16384 --micro-batches 1,3,3,1 layer >/tmp/layer.txt 2>&1
echo "== timeline rc=$?" >>$s
grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong" /tmp/layer.txt >>$s
nvidia-smi --query-gpu=index,clocks.sm,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >>$s 2>&1
cat $s
