#!/usr/bin/env bash
# x1-experts48.sh — run 48, call 5 (one GPU; no two-GPU machine was lent by then; x2-experts48.sh is the same at world
# 2): the layer's micro-batches by expert groups (sy-bench --split experts, new) against by tokens, at world 1 (issue
# 21's world-1 target: 4,096 tokens, way b hiding >= 70% of the communication). Call 4 (world 2) found the micro-batches'
# GEMMs lose most where they halve each expert's rows; run 46 at world 1: each token micro-batch re-reads every expert's
# weights (+75%). One layer, each expert's weights, settled; 4,096 tokens (the experts' run checked against the CPU
# reference) and 16,384; then 3 ranks sharing GPU 0 at 512 tokens, checked. Output: $OUT/summary.txt, $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
layer_marked e4096 --tokens 4096 -n 50 -w 3 --split experts --ways comm,compute,gemms,a,b,c,c,b
layer_marked t4096 --tokens 4096 -n 50 -w 3 -c 0 --ways compute,gemms,b,c
layer_marked e16384 --tokens 16384 -n 10 -w 3 -c 0 --split experts --ways comm,compute,gemms,a,b,c
layer_marked t16384 --tokens 16384 -n 10 -w 3 -c 0 --ways compute,gemms,b,c
timeout 200 /tmp/x/bin/syrun -n 3 --gpus 0,0,0 /tmp/x/bin/sy-bench --no-nccl -n 2 -w 1 --settle 0 --tokens 512 \
  --split experts layer >/tmp/l3.txt 2>&1
echo "== 3 ranks on GPU 0, 512 tokens, --split experts rc=$?" >>$s
grep -E "correct|wrong|off the|rror" /tmp/l3.txt | head -8 >>$s
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
