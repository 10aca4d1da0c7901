#!/usr/bin/env bash
# x1-settle47.sh — run 47, call 5 (world 1, one GPU): the layer's ways each timed after 3 s of its own untimed calls
# (sy-bench --settle, new; default 3 s on a GPU): call 4 found the step ~10% slower late in a run than early, and a way
# timed after the CPU's check of the one before (up to 13 s idle) on a cooler, faster-clocked GPU. Order
# comm,compute,gemms,a,b,c,c,b,compute: is the step flat now, and where do b and c stand? 4,096 tokens with shared
# weights (checked), 16,384 with each expert's weights (-c 0: the check's 13 s a way left out); clock, power and
# temperature every 50 ms beside each timing ($OUT/tl.tar.gz: smi.txt, marks.txt; tools/dev/power-ways.py).
. tools/dev/variant.sh # build_tree, dev_start, smi_start, smi_digest, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
smi_start /tmp/smi.txt
mkdir -p /tmp/j /tmp/tl
layer_marked shared4096 --tokens 4096 --expert-weights shared -n 50 -w 5 --ways comm,compute,gemms,a,b,c,c,b,compute
layer_marked distinct16384 --tokens 16384 -n 20 -w 3 -c 0 --ways comm,compute,gemms,a,b,c,c,b,compute
smi_digest /tmp/smi.txt /tmp/marks.txt
cp /tmp/smi.txt /tmp/marks.txt /tmp/tl/
tar czf $OUT/tl.tar.gz -C /tmp/tl .
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
