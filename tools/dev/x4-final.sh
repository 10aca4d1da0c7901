#!/usr/bin/env bash
# x4-final.sh — run 42's last call (n GPUs, 4 best): gpu-check of the high-throughput MoE tests with their variants,
# both examples (examples/moe_layer.c now takes recv from the receive arena) and the Python package at n ranks, no
# sanitizers; then compute-sanitizer memcheck on test_gpu_moe_ht at 2 ranks (tools/dev/x-memcheck2.sh).
# $OUT/summary.txt, the gpu-check summary and failing logs.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
GPU_CHECK_ONLY='moe_ht|example|python' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 timeout 380 \
  tools/gpu-check.sh /tmp/g $n >/tmp/gc.txt 2>&1
echo "== gpu-check moe_ht|example|python at $n rc=$?" >>$s
cat /tmp/g/summary.txt >>$s 2>/dev/null
tar czf $OUT/logs.tar.gz -C /tmp/g logs 2>/dev/null
bash tools/dev/x-memcheck2.sh >/dev/null # appends its lines to $OUT/summary.txt
cat $s
