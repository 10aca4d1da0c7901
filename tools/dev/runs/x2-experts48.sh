#!/usr/bin/env bash
# x2-experts48.sh — run 48, call 5 (2 × H200): the layer's micro-batches by expert groups (sy-bench --split experts,
# new) against by tokens. Call 4 found the micro-batches' GEMMs lose most where they halve each expert's rows (16,384
# tokens: +32% on every SM, +5% more on 116; 4,096: +54%, +3%); groups of each rank's experts keep every row of an
# expert, at the price of a token crossing a link once a group it has experts in there. World $n, 4 layers, 16,384 and
# 4,096 tokens, each expert's weights, settled; the experts' run at 4,096 checked against the CPU reference. Output:
# $OUT/summary.txt, $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G LAYER_RANKS=$n
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
layer_marked e16384 --tokens 16384 --layers 4 -n 10 -w 3 -c 0 --split experts --ways comm,compute,gemms,a,b,c,c,b
layer_marked t16384 --tokens 16384 --layers 4 -n 10 -w 3 -c 0 --ways compute,gemms,b,c
layer_marked e4096 --tokens 4096 --layers 4 -n 20 -w 3 --split experts --ways comm,compute,gemms,a,b,c
layer_marked t4096 --tokens 4096 --layers 4 -n 20 -w 3 -c 0 --ways compute,gemms,b,c
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
