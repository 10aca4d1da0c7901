#!/usr/bin/env bash
# x4-final.sh — run 42's last call (n GPUs, 4 best): gpu-check of the high-throughput MoE tests with their variants,
# both examples (examples/moe_layer.c now takes recv from the receive arena) and the Python package at n ranks, no
# sanitizers; then compute-sanitizer memcheck on test_gpu_moe_ht at 2 ranks (each rank under the tool: the
# in-place path's inbox and row stores between ranks, which the world-1 sanitizer steps never reach), capped.
# $OUT/summary.txt, the gpu-check summary and failing logs.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
GPU_CHECK_ONLY='moe_ht|example|python' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 timeout 380 \
  tools/gpu-check.sh /tmp/g $n >/tmp/gc.txt 2>&1
echo "== gpu-check moe_ht|example|python at $n rc=$?" >>$s
cat /tmp/g/summary.txt >>$s 2>/dev/null
tar czf $OUT/logs.tar.gz -C /tmp/g logs 2>/dev/null
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
SY_TEST_SEED=20261128 SY_MOE_GRAPH_REPLAYS=20 timeout 150 build/bin/syrun -n 2 --timeout 140 $cs --tool memcheck \
  --print-limit 0 build/tests/gpu/test_gpu_moe_ht >/tmp/mc.txt 2>&1
echo "== memcheck test_gpu_moe_ht at 2 ranks rc=$? ($(grep -c ' ok ' /tmp/mc.txt) cases ok)" >>$s
python3 tools/dev/sanitizer-summary.py /tmp/mc.txt >>$s 2>&1
grep -E "WRONG|failed" /tmp/mc.txt | head -5 >>$s
cp /tmp/mc.txt $OUT/memcheck.txt
cat $s
