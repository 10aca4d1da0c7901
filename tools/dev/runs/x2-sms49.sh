#!/usr/bin/env bash
# x2-sms49.sh — run 49, call 5 (2 × H200): the expert groups' SM budget. Call 4's timeline (world 1, 4 groups, 16 SMs)
# found each group's dispatch and combine far above its share of the rows (a quarter of the rows: 299 µs alone, ~400
# beside the GEMMs, against ~585 for the whole step's dispatch), and the GEMMs HBM-bound beside them: so more SMs for
# the communication may pay at world 1 and 2 where they did not for token halves (run 47: 12-16 best). World 1,
# 4,096 tokens, 1 layer, 4 groups at 24, 32, 48 SMs and 16 again; world 2, 4 layers, 2 groups at 24, 32 and 8 SMs.
# Output: $OUT/summary.txt, $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G LAYER_RANKS=1
build_tree /tmp/x . ""
w1="--tokens 4096 -n 50 -w 3 -c 0 --split experts --micro-batches 4"
for sms in 24 32 48 16; do layer_marked w1_g4_s$sms $w1 --num-sms $sms --ways comm,compute,b,c; done
export LAYER_RANKS=$n
w2="--tokens 4096 --layers 4 -n 20 -w 3 -c 0 --split experts --micro-batches 2"
for sms in 24 32 8; do layer_marked w2_g2_s$sms $w2 --num-sms $sms --ways comm,compute,b,c; done
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
