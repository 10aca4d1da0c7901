#!/usr/bin/env bash
# x1-regress56.sh — run 56, call 3 (one GPU, ~9 minutes): every GPU test but test_gpu_moe_ht's (run today at 1-4
# ranks in call 1), the examples and the Python package, at world 1 and at 3 ranks sharing the GPU, through
# tools/gpu-check.sh (no sanitizers, no benchmarks, no CPU tests): what changed outside the high-throughput MoE since
# the last full run (the graph cache's priorities, pdl_trigger in launch.cuh, the receive arena) checked together.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
GPU_CHECK_SHARED=1 GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 \
  GPU_CHECK_ONLY='^(test_gpu_(alltoall|ring|attn|moe|moe_graph|pool|graph_cache|fp8|init|peer_store|timeout|faults|ring|ht_resident|placement)(\.[a-z]+)?|test_example_[a-z_]+|test_python[a-z_]*)$' \
  bash tools/gpu-check.sh $OUT/gc 1 3 >/tmp/gc.txt 2>&1
echo "== gpu-check rc=$? at $SECONDS s" >>$s
cat $OUT/gc/summary.txt >>$s 2>/dev/null
rm -f $OUT/gc/*.json
cat $s
