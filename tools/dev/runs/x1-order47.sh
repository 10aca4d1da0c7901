#!/usr/bin/env bash
# x1-order47.sh — run 47, call 4 (world 1, one GPU): is way c (the graph) slower than way b (two streams) because it is
# a graph, or because it is timed after b? sy-bench layer --ways (new) times c before b and again after:
# comm,compute,c,b,c,b at 4,096 tokens with shared weights (-n 100) and 16,384 with each expert's weights (-n 30), one
# layer, the GPU's SM clock and power every 50 ms beside each timing ($OUT/tl.tar.gz: smi.txt, marks.txt;
# tools/dev/power-ways.py); then the CUPTI timeline of c, b, c, b at 4,096 tokens (tl.0.txt).
. tools/dev/variant.sh # build_tree, dev_start, smi_start, smi_digest, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
smi_start /tmp/smi.txt
mkdir -p /tmp/j /tmp/tl
layer_marked shared4096 --tokens 4096 --expert-weights shared -n 100 -w 10 --ways comm,compute,c,b,c,b
layer_marked distinct16384 --tokens 16384 -n 30 -w 5 --ways comm,compute,c,b,c,b
smi_digest /tmp/smi.txt /tmp/marks.txt
SY_BENCH_TIMELINE=/tmp/tl/tl.%r.txt timeout 200 /tmp/x/bin/syrun -n 1 /tmp/x/bin/sy-bench --no-nccl --recv arena \
  --tokens 4096 --expert-weights shared -n 5 -w 2 --ways c,b,c,b layer >/tmp/layer_tl.txt 2>&1
echo "== timeline 4096 shared c,b,c,b rc=$?" >>$s
grep -E "^\[rank 0\] +(prefill|backward)" /tmp/layer_tl.txt | sed 's/\[rank 0\]//' >>$s
cp /tmp/smi.txt /tmp/marks.txt /tmp/tl/
tar czf $OUT/tl.tar.gz -C /tmp/tl .
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
