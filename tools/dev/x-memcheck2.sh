#!/usr/bin/env bash
# x-memcheck2.sh — compute-sanitizer memcheck on test_gpu_moe_ht with 2 ranks (on 2 GPUs, or sharing GPU 0 where
# only one is present), every rank under the tool, no print limit: the dispatch's in-place path (inbox and row stores
# between ranks) and the arena passes, which the world-1 sanitizer steps of gpu-check never reach.
# $OUT/summary.txt (tools/dev/sanitizer-summary.py's line) and $OUT/memcheck.txt.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
g="" && [ "$n" -lt 2 ] && g="--gpus 0,0"
[ -x build/tests/gpu/test_gpu_moe_ht ] || { cmake -S . -B build >/dev/null && cmake --build build -j 16 \
  --target syrun test_gpu_moe_ht >/tmp/build.log 2>&1; }
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
SY_TEST_SEED=20261128 SY_MOE_GRAPH_REPLAYS=20 timeout 170 build/bin/syrun -n 2 $g --timeout 160 $cs --tool memcheck \
  --print-limit 0 build/tests/gpu/test_gpu_moe_ht >/tmp/mc.txt 2>&1
echo "== memcheck test_gpu_moe_ht at 2 ranks $g rc=$? ($(grep -c ' ok ' /tmp/mc.txt) cases ok)" >>$s
python3 tools/dev/sanitizer-summary.py /tmp/mc.txt >>$s 2>&1
grep -E "WRONG|failed" /tmp/mc.txt | head -5 >>$s
cp /tmp/mc.txt $OUT/memcheck.txt
cat $s
