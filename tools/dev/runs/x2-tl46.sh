#!/usr/bin/env bash
# x2-tl46.sh — run 46, call 5: where a 4-layer step's time goes at world $n (16,384 tokens, two micro-batches, each
# expert's own weights, --gemm-beside 1): each timed pass's kernels from CUPTI (SY_BENCH_TIMELINE, every rank:
# $OUT/tl.R.txt) — do the communication's kernels wait for SMs, and the GEMMs for the communication?
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
SY_BENCH_TIMELINE=$OUT/tl.%r.txt timeout 200 /tmp/x/bin/syrun -n $n /tmp/x/bin/sy-bench --no-nccl --recv arena -n 3 -w 2 \
  --tokens 16384 --layers 4 layer >/tmp/layer.txt 2>&1
echo "== timeline rc=$?" >>$s
grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong" /tmp/layer.txt >>$s
gzip $OUT/tl.*.txt
cat $s
