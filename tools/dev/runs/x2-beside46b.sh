#!/usr/bin/env bash
# x2-beside46b.sh — run 46, call 8: with call 6's fix, --gemm-beside 0.55 (the part beside the communication about as
# long as the two kernels beside it: a combine and a dispatch, ~3,900 us, of ~7,400 us of a micro-batch's GEMMs at world
# 2) against 1, 4 layers, 16,384 tokens, world $n.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
for f in 0.55 1; do
  t0=$SECONDS
  timeout 200 /tmp/x/bin/syrun -n $n /tmp/x/bin/sy-bench --no-nccl --recv arena --tokens 16384 --layers 4 -n 10 -w 3 \
    --gemm-beside $f layer >/tmp/layer.txt 2>&1
  echo "== layer 16384 world $n layers 4 beside $f rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward) .* (compute|gemms|b|c) |correct|wrong|off the|exposed|rror" \
    /tmp/layer.txt | sed 's/\[rank 0\]//' | head -20 >>$s
done
cat $s
