#!/usr/bin/env bash
# x1-ways53.sh — run 53, call 3 (1 GPU). Call 2 timed the sequential step with its communication on 132 SMs (5,028 /
# 5,308 us, forward / backward) under the overlapped b and c on 16 (5,237-5,284 / 5,551-5,674) in separate processes.
# Way s (a with every communication call on --end-sms SMs) times it in the same process as b and c, alternating:
# groups 1,5,5,3 with the ends on 132 SMs, the budget 16 and 12, four layers a step, 16,384 tokens; then s and b
# checked against the CPU reference.
. tools/dev/variant.sh # build_tree, dev_start, layer_at
dev_start summary.txt
export SY_HEAP_SIZE=24G
build_tree /tmp/h . ""
echo "build done at $SECONDS s" >>$s
G="--end-sms 132 --micro-batches 1,5,5,3 -w 2 -c 0"
layer_at 1 "16 vs s" $G -n 20 --ways comm,compute,s,b,c,s,b,c
grep "against way s" /tmp/layer.txt | head -1 >>$s
layer_at 1 "12 vs s" $G --num-sms 12 -n 20 --ways comm,compute,s,b,c,s,b,c
grep "against way s" /tmp/layer.txt | head -1 >>$s
layer_at 1 "4 layers vs s" $G --layers 4 -n 8 --ways comm,compute,s,b,s,b
grep "against way s" /tmp/layer.txt | head -1 >>$s
[ $SECONDS -lt 400 ] && LAYER_TIMEOUT=140 layer_at 1 "16384 tokens vs s" $G --tokens 16384 -n 8 --ways comm,compute,s,b,s,b
grep "against way s" /tmp/layer.txt | head -1 >>$s
[ $SECONDS -lt 500 ] && layer_at 1 "s and b checked" --end-sms 132 --micro-batches 1,5,5,3 -n 3 -w 2 --ways s,b
cat $s
