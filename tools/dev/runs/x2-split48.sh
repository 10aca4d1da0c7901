#!/usr/bin/env bash
# x2-split48.sh — run 48, call 4 (2 × H200): what the micro-batches' GEMMs lose, split in two. Way `gemms` (the
# micro-batches' GEMMs in turn, alone) against `compute` (the whole step's, every SM): on the 116 SMs the communication
# leaves (the default) and on every SM (--gemm-sms 0: no SM target), so the share lost to half the rows an expert (the
# tiles, the busiest expert's padding) stands apart from the share lost to the SMs. World $n, 4 layers, 16,384 and
# 4,096 tokens, each expert's weights, settled, in the order 116 / 132 / 116. Output: $OUT/summary.txt,
# $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G LAYER_RANKS=$n
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
for t in 16384 4096; do
  layer_marked t${t}_116a --tokens $t --layers 4 -n 10 -w 3 -c 0 --ways compute,gemms,compute,gemms
  layer_marked t${t}_132 --tokens $t --layers 4 -n 10 -w 3 -c 0 --gemm-sms 0 --ways compute,gemms,compute,gemms
  layer_marked t${t}_116b --tokens $t --layers 4 -n 10 -w 3 -c 0 --ways compute,gemms,compute,gemms
done
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
