#!/usr/bin/env bash
# x4-16k.sh — the largest shapes on today's code (run 44): moe-ht at 16,384 tokens a rank with the receive
# arena and NCCL beside (run 38 measured 16,384 on d716912, before the roles by warps, the first copy in place and the
# senders' planning by lanes), and the layer step (issue 21: prefill shapes 4,096-16,384) at 8,192 and 16,384 tokens
# with the arena — never run above 4,096. $OUT/ht16.json, $OUT/layer.json, $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
timeout 200 /tmp/x/bin/syrun -n $n /tmp/x/bin/sy-bench --recv arena --tokens 16384 --json $OUT/ht16.json moe-ht \
  >/tmp/ht16.txt 2>&1
echo "== moe-ht 16384 arena rc=$?" >>$s
grep -E " (dispatch|combine|combine_bwd|dispatch_bwd|layout) |target|error|Error" /tmp/ht16.txt | sed 's/\[rank 0\]//' >>$s
timeout 240 /tmp/x/bin/syrun -n $n /tmp/x/bin/sy-bench --no-nccl --recv arena --tokens 8192,16384 \
  --json $OUT/layer.json layer >/tmp/layer.txt 2>&1
echo "== layer 8192,16384 arena rc=$?" >>$s
grep -vE "^\s*$" /tmp/layer.txt | sed 's/\[rank 0\]//' | grep -vE "^\[rank [1-9]" | tail -40 >>$s
cat $s
