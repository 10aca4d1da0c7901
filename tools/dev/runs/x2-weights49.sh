#!/usr/bin/env bash
# x2-weights49.sh — run 49, call 3 (2 × H200): the layer's expert groups by weight (--split experts --micro-batches
# W,W..: each group its share of each rank's experts, new). Calls 1-2 measured even groups: at world 2 two are best
# (4,096 tokens c 18,545-18,597 µs; four 18,937, eight 23,116); nothing hides the first group's dispatch or the last
# one's combine, so groups small at both ends (1,2,1; 1,6,1; 1,3,3,1) should expose less, at the price of more groups
# (a token crosses a link once a group it has experts in there). World 2, 4 layers, 4,096 and 16,384 tokens; world 1,
# 1 layer, 4,096 tokens (run 48 call 6's shape); one run at each world checked against the CPU reference.
# Output: $OUT/summary.txt, $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G LAYER_RANKS=$n
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
w2="--tokens 4096 --layers 4 -n 20 -w 3 --split experts"
layer_marked w2_g2_4096 $w2 -c 0 --micro-batches 2 --ways compute,b,c
layer_marked w2_161_4096 $w2 --micro-batches 1,6,1 --ways compute,b,c
layer_marked w2_121_4096 $w2 -c 0 --micro-batches 1,2,1 --ways compute,b,c
layer_marked w2_1331_4096 $w2 -c 0 --micro-batches 1,3,3,1 --ways compute,b,c
w2l="--tokens 16384 --layers 4 -n 10 -w 3 -c 0 --split experts"
layer_marked w2_161_16384 $w2l --micro-batches 1,6,1 --ways compute,b,c
layer_marked w2_g2_16384 $w2l --micro-batches 2 --ways compute,b,c
export LAYER_RANKS=1
w1="--tokens 4096 -n 50 -w 3 --split experts"
layer_marked w1_g4_4096 $w1 -c 0 --micro-batches 4 --ways comm,compute,b,c
layer_marked w1_1661_4096 $w1 --micro-batches 1,6,6,1 --ways compute,b,c
layer_marked w1_161_4096 $w1 -c 0 --micro-batches 1,6,1 --ways compute,b,c
layer_marked w1_1441_4096 $w1 -c 0 --micro-batches 1,4,4,1 --ways compute,b,c
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
