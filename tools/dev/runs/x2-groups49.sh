#!/usr/bin/env bash
# x2-groups49.sh — run 49, call 2 (2 × H200): the layer's micro-batches by expert groups at world 2, how many groups.
# Call 1 (x2-experts48.sh) measured 2 groups against token halves: 4,096 tokens c 18,597 against 21,154 µs, below the
# sequential step (19,970). Here 2, 4 and 8 groups on one host, settled, 4 layers, 4,096 and 16,384 tokens; the
# 4-group run at 4,096 checked against the CPU reference. Output: $OUT/summary.txt, $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G LAYER_RANKS=$n
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
layer_marked g4_4096 --tokens 4096 --layers 4 -n 20 -w 3 --split experts --micro-batches 4 --ways compute,gemms,a,b,c
layer_marked g2_4096 --tokens 4096 --layers 4 -n 20 -w 3 -c 0 --split experts --micro-batches 2 --ways compute,b,c
layer_marked g8_4096 --tokens 4096 --layers 4 -n 20 -w 3 -c 0 --split experts --micro-batches 8 --ways compute,b,c
layer_marked g4_16384 --tokens 16384 --layers 4 -n 10 -w 3 -c 0 --split experts --micro-batches 4 --ways compute,gemms,a,b,c
layer_marked g2_16384 --tokens 16384 --layers 4 -n 10 -w 3 -c 0 --split experts --micro-batches 2 --ways compute,b,c
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
