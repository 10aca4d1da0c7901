#!/usr/bin/env bash
# x2-prio47.sh — run 47, call 1: the graph cache's graphs instantiated with the captured streams' priorities
# (cudaGraphInstantiateFlagUseNodePriority, SY_GRAPH_NODE_PRIORITY=1, the new default) against CUDA's default (0: every
# node at the launch stream's priority), in the layer's way c (b keeps its streams' priorities either way): world $n,
# 16,384 tokens, 4 layers, each expert's weights, in the order 1 0 1; world 1 (GPU 0), 4,096 tokens, shared weights, one
# layer, 1 0. First test_gpu_graph_cache (check h: a replay keeps the priorities). Output: $OUT/summary.txt,
# $OUT/json.tar.gz.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
cmake --build /tmp/x -j 10 --target test_gpu_graph_cache >/tmp/build_g.log 2>&1 || tail -20 /tmp/build_g.log >>$s
timeout 200 /tmp/x/bin/syrun -n 1 /tmp/x/tests/gpu/test_gpu_graph_cache >/tmp/t_graph.txt 2>&1
echo "== test_gpu_graph_cache rc=$?" >>$s
grep -E "check h|FAIL|PASS|passed|failed|target" /tmp/t_graph.txt >>$s
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
mkdir -p /tmp/j
run() { # PRIORITY RANKS TOKENS LAYERS [ARGS...]
  local p=$1 r=$2 t=$3 l=$4 t0=$SECONDS
  shift 4
  SY_GRAPH_NODE_PRIORITY=$p timeout 200 /tmp/x/bin/syrun -n $r /tmp/x/bin/sy-bench --no-nccl --recv arena --tokens $t \
    --layers $l "$@" --json /tmp/j/layer_$((++k))_p${p}_w${r}_${t}_l${l}.json layer >/tmp/layer.txt 2>&1
  echo "== layer SY_GRAPH_NODE_PRIORITY=$p world $r tokens $t layers $l $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|off the|of which|exposed|hides|GPU slowdowns|WARN|rror" \
    /tmp/layer.txt | sed 's/\[rank 0\]//' | head -40 >>$s
}
run 1 $n 16384 4 -n 10 -w 3
run 0 $n 16384 4 -n 10 -w 3
run 1 $n 16384 4 -n 10 -w 3
run 1 1 4096 1 --expert-weights shared
run 0 1 4096 1 --expert-weights shared
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
