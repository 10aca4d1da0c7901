#!/usr/bin/env bash
# x-memcheck2.sh [TOOL] — compute-sanitizer TOOL (memcheck by default; racecheck, synccheck) on test_gpu_moe_ht with 2 ranks (on 2 GPUs, or sharing GPU 0 where
# only one is present), every rank under the tool, no print limit: the dispatch's in-place path (inbox and row stores
# between ranks) and the arena passes, which the world-1 sanitizer steps of gpu-check never reach.
# $OUT/summary.txt (tools/dev/sanitizer-summary.py's line) and $OUT/TOOL.txt.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
tool=${1:-memcheck}
g="" && [ "$n" -lt 2 ] && g="--gpus 0,0"
[ -x build/tests/gpu/test_gpu_moe_ht ] || { cmake -S . -B build >/dev/null && cmake --build build -j 16 \
  --target syrun test_gpu_moe_ht >/tmp/build.log 2>&1; }
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
SY_TEST_SEED=20261128 SY_MOE_GRAPH_REPLAYS=20 timeout ${X_TIMEOUT:-170} build/bin/syrun -n 2 $g --timeout $((${X_TIMEOUT:-170} - 10)) $cs --tool $tool \
  --print-limit 0 build/tests/gpu/test_gpu_moe_ht >/tmp/$tool.txt 2>&1
echo "== $tool test_gpu_moe_ht at 2 ranks $g rc=$? ($(grep -c ' ok ' /tmp/$tool.txt) cases ok)" >>$s
python3 tools/dev/sanitizer-summary.py /tmp/$tool.txt >>$s 2>&1
grep -E "WRONG|failed" /tmp/$tool.txt | head -5 >>$s
cp /tmp/$tool.txt $OUT/$tool.txt
[ -n "${X_NO_CAT:-}" ] || cat $s
