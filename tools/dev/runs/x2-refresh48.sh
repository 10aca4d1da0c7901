#!/usr/bin/env bash
# x2-refresh48.sh — run 48, call 2: test_gpu_graph_cache's check h with its refreshes (new: does cudaGraphExecUpdate
# follow the priorities of the new capture? the probe moved to a low-priority stream and the bucket refreshed, then
# back), at 1 rank and with 3 ranks sharing GPU 0; then the layer at world $n, settled: the micro-batches by weight
# (1,3,3,1: an eighth of the tokens first and last, the ends smaller; run 45 at world 4 in the old order: within 2.2%)
# and 4 at 16,384 tokens, 4 layers; and 4,096 tokens, 4 layers, every way. Output: $OUT/summary.txt, $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G LAYER_RANKS=$n
build_tree /tmp/x . ""
cmake --build /tmp/x -j 10 --target test_gpu_graph_cache >/tmp/build_g.log 2>&1 || tail -20 /tmp/build_g.log >>$s
timeout 200 /tmp/x/bin/syrun -n 1 /tmp/x/tests/gpu/test_gpu_graph_cache >/tmp/t_graph.txt 2>&1
echo "== test_gpu_graph_cache (1 rank) rc=$?" >>$s
grep -E "check h|FAIL|passed|failed" /tmp/t_graph.txt >>$s
timeout 200 /tmp/x/bin/syrun -n 3 --gpus 0,0,0 /tmp/x/tests/gpu/test_gpu_graph_cache >/tmp/t_graph3.txt 2>&1
echo "== test_gpu_graph_cache (3 ranks on GPU 0) rc=$?" >>$s
grep -E "check h|FAIL|passed|failed" /tmp/t_graph3.txt | head -12 >>$s
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
mkdir -p /tmp/j
layer_marked mb1331 --tokens 16384 --layers 4 -n 10 -w 3 -c 0 --micro-batches 1,3,3,1 --ways compute,gemms,b,c,c,b
layer_marked mb4 --tokens 16384 --layers 4 -n 10 -w 3 -c 0 --micro-batches 4 --ways compute,gemms,b,c,c,b
layer_marked t4096 --tokens 4096 --layers 4 -n 20 -w 3 --ways comm,compute,gemms,a,b,c,c,b,compute
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
