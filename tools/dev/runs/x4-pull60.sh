#!/usr/bin/env bash
# x4-pull60.sh — run 60, call 1 (four GPUs, ~9 minutes). The first world-4 run since run 50 (4485e6b/fa73f2d):
# (1) tools/dev/expand-ceiling.cu's `pullx`: every GPU pulling its messages (a source's token with >= 1 of its experts
#     here) from the sources' memory over NVLink and storing its rows, against the same from its own memory: do an
#     SM's NVLink loads overlap its local stores (the pull design's open question, bench/NOTES.md run 40)?
# (2) issue 19's table at world 4 with NCCL beside (4,096 and 8,192 tokens, 16 SMs, recv in the arena);
# (3) the roles by warps (SY_HT_ROLES=1) against by blocks (0) at world 4 at 16, 24, 32 and 48 SMs (auto: warps to
#     16 from world 3, measured on 4 x H100 in run 40; world 2 found warps faster to 48 in run 59);
# (4) every GPU test at world 4 but the faults, in the time left.
. tools/dev/variant.sh # dev_start, bench_tree
dev_start summary.txt
export SY_HEAP_SIZE=8G
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
nvcc -O2 -arch=sm_90 -std=c++17 -Itools/dev -o /tmp/ec tools/dev/expand-ceiling.cu >/tmp/ec_build.txt 2>&1 ||
  { echo "ec build failed" >>$s; tail -5 /tmp/ec_build.txt >>$s; }
echo "== pullx" >>$s
timeout 120 /tmp/ec pullx >>$s 2>&1
echo "pullx done at $SECONDS s (rc=$?)" >>$s
timeout 200 build/bin/syrun -n $n build/bin/sy-bench --recv arena --json $OUT/ht_w$n.json moe-ht >/tmp/r.txt 2>&1
echo "== world $n, 16 SMs, arena, NCCL beside rc=$?" >>$s
grep -E " (layout|dispatch|combine|combine_bwd|dispatch_bwd) |nccl|NCCL|rror" /tmp/r.txt | sed 's/\[rank 0\]//' | grep -v "^\[rank" | head -30 >>$s
echo "table done at $SECONDS s" >>$s
one() { SY_HT_ROLES=$2 bench_tree build "world $n, $1 SMs, roles $2" $n "dispatch|combine|combine_bwd|dispatch_bwd" \
  --tokens 4096 --recv arena --num-sms $1; }
one 16 0
one 24 1; one 24 0
one 32 0; one 32 1
one 48 1; one 48 0
echo "roles done at $SECONDS s" >>$s
left=$((570 - SECONDS))
GPU_CHECK_ONLY='^test_(gpu_([a-eg-z]|fp8)|example|python)' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 timeout $left \
  tools/gpu-check.sh /tmp/g $n >/tmp/gc.txt 2>&1
echo "== gpu-check tests (not faults) at world $n rc=$? at $SECONDS s" >>$s
grep -vE "^build " /tmp/g/summary.txt >>$s
tar czf $OUT/logs.tar.gz -C /tmp/g logs 2>/dev/null
echo "end at $SECONDS s" >>$s
cat $s
