#!/usr/bin/env bash
# x4-experts49.sh — run 49, call 7 (4 × H200, lent with ~5 minutes of device time left): the layer's micro-batches by
# expert groups at world 4 against token halves (calls 1-3 at world 2: c -12% at 4,096 tokens, -2% at 16,384).
# 4 layers, each expert's weights, settled; 4,096 tokens first (the budget may end the call; $s is written as it goes).
. tools/dev/variant.sh # build_tree, dev_start, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G LAYER_RANKS=$n
build_tree /tmp/x . ""
layer_marked e4096 --tokens 4096 --layers 4 -n 20 -w 3 -c 0 --split experts --ways comm,compute,gemms,a,b,c
layer_marked t4096 --tokens 4096 --layers 4 -n 20 -w 3 -c 0 --ways compute,gemms,b,c
layer_marked e16384 --tokens 16384 --layers 4 -n 5 -w 3 -c 0 --split experts --ways compute,b,c
layer_marked t16384 --tokens 16384 --layers 4 -n 5 -w 3 -c 0 --ways compute,b,c
cat $s
