#!/usr/bin/env bash
# x2-check57.sh — run 57, call 1 (two GPUs, ~9 minutes): tools/gpu-check.sh at world 2 on two real GPUs, every test
# (test_gpu_moe_ht and its variants, the faults, the placement check, the Python package and the examples) and every
# benchmark with NCCL beside, no sanitizers: the first GPU run of everything after bfd9476 (the shared verdict
# helper, the all-to-all's send/recv apart, the attention calls' busiest-rank check, the creates' frees) and the first
# world-2 benchmark table since run 49.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 timeout 560 tools/gpu-check.sh $OUT/gc 2 >/tmp/gc.txt 2>&1
echo "== gpu-check at 2 rc=$? at $SECONDS s" >>$s
cat $OUT/gc/summary.txt >>$s
cat $s
