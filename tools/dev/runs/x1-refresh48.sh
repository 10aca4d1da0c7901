#!/usr/bin/env bash
# x1-refresh48.sh — run 48, call 3 (one GPU): test_gpu_graph_cache's check h with its three refreshes (as captured: an
# update in place that must keep the priorities; the probe moved to a low-priority stream; moved back), at 1 rank and
# with 3 ranks sharing GPU 0, SY_DEBUG=INFO so the log names why CUDA refused an update (call 2: both moves were
# instantiated anew). Output: $OUT/summary.txt.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
cmake -S . -B /tmp/x >/dev/null && cmake --build /tmp/x -j 10 --target syrun test_gpu_graph_cache >/tmp/build_g.log 2>&1 ||
  tail -20 /tmp/build_g.log >>$s
for g in "-n 1" "-n 3 --gpus 0,0,0"; do
  SY_DEBUG=INFO timeout 200 /tmp/x/bin/syrun $g /tmp/x/tests/gpu/test_gpu_graph_cache >/tmp/t_graph.txt 2>&1
  echo "== test_gpu_graph_cache ($g) rc=$?" >>$s
  grep -E "check h|update refused|FAIL|passed|failed" /tmp/t_graph.txt | sed 's/^.*\(update refused\)/\1/' | sort |
    uniq -c | head -20 >>$s
done
cat $s
