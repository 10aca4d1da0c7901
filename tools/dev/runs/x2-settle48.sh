#!/usr/bin/env bash
# x2-settle48.sh — run 48, call 1 (2 × H200): issue 21 at world 2, each way settled (sy-bench --settle, 3 s by default:
# run 47 found c's lead over b half made by the order of the ways on a GPU at its power limit, measured settled only at
# world 1). 16,384 tokens, 4 layers, each expert's weights, the order comm,compute,gemms,a,b,c,c,b,compute; then the
# communication's SM budget at world 2 (--num-sms 8, 12, 24; world 1's sweep was run 47's call 2): the
# communication beside a micro-batch's GEMMs took ~39% of their time at 16 SMs (run 47 call 1), so fewer SMs may leave
# the GEMMs more than they cost the two ends. Every GPU's clock and power every 50 ms beside each timing ($OUT/tl.tar.gz:
# smi.txt, marks.txt; tools/dev/power-ways.py). Output: $OUT/summary.txt, $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start, smi_start, smi_digest, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G LAYER_RANKS=$n
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
smi_start /tmp/smi.txt
mkdir -p /tmp/j /tmp/tl
layer_marked settled16384 --tokens 16384 --layers 4 -n 10 -w 3 -c 0 --ways comm,compute,gemms,a,b,c,c,b,compute
for m in 8 12 24; do
  layer_marked sms${m} --tokens 16384 --layers 4 -n 10 -w 3 -c 0 --num-sms $m --ways comm,compute,gemms,b,c
done
smi_digest /tmp/smi.txt /tmp/marks.txt
cp /tmp/smi.txt /tmp/marks.txt /tmp/tl/
tar czf $OUT/tl.tar.gz -C /tmp/tl .
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
