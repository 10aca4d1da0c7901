#!/usr/bin/env bash
# x4-final.sh — run 42's last call (n GPUs, 4 best): gpu-check of the high-throughput MoE tests with their variants,
# both examples (examples/moe_layer.c now takes recv from the receive arena) and the Python package at n ranks, no
# sanitizers; then compute-sanitizer memcheck on test_gpu_moe_ht at 2 ranks (tools/dev/runs/x-memcheck2.sh).
# $OUT/summary.txt, the gpu-check summary and failing logs.
. tools/dev/variant.sh # dev_start, gpu_check_only
dev_start summary.txt
gpu_check_only 'moe_ht|example|python' 380
bash tools/dev/runs/x-memcheck2.sh >/dev/null # appends its lines to $OUT/summary.txt
cat $s
