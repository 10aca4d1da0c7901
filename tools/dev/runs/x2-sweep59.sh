#!/usr/bin/env bash
# x2-sweep59.sh — run 59, call 2 (two GPUs, ~9 minutes): (1) moe-ht at world 2 by SM budget (8, 16, 24, 32, 64; 4,096
# tokens; BF16 dispatch and combine, FP8 dispatch; recv by the caller) — never measured at world 2 (run 44's count put
# the dispatch at 16 SMs at ~84% of what its SMs can move at world 4; FP8 no faster than BF16 there and at world 2);
# 8,192 tokens at 16 SMs with NCCL beside (the second size, not yet at world 2); (2) every GPU test at world 2
# on two real GPUs after the timeout spread's review fixes (55b82ae, 0377b3f), the faults left out (call 1 ran them).
. tools/dev/variant.sh # dev_start, build_tree, bench_tree
dev_start summary.txt
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
for m in 8 24 32 64 16; do
  bench_tree build "world 2, $m SMs, bf16" 2 "dispatch|combine" --tokens 4096 --wire bf16 --num-sms $m
  bench_tree build "world 2, $m SMs, fp8" 2 "dispatch" --tokens 4096 --wire fp8 --num-sms $m
done
echo "sweep done at $SECONDS s" >>$s
timeout 150 build/bin/syrun -n 2 build/bin/sy-bench --tokens 8192 moe-ht >/tmp/r8.txt 2>&1
echo "== world 2, 16 SMs, 8,192 tokens, NCCL beside rc=$?" >>$s
grep -E " (layout|dispatch|combine|combine_bwd|dispatch_bwd) |nccl|NCCL" /tmp/r8.txt | sed 's/\[rank 0\]//' | head -20 >>$s
echo "8192 done at $SECONDS s" >>$s
left=$((575 - SECONDS))
GPU_CHECK_ONLY='^test_(gpu_([a-eg-z]|fp8)|example|python)' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 timeout $left \
  tools/gpu-check.sh /tmp/g 2 >/tmp/gc.txt 2>&1
echo "== gpu-check tests (not faults) at world 2 rc=$? at $SECONDS s" >>$s
grep -vE "^build " /tmp/g/summary.txt >>$s
tar czf $OUT/logs.tar.gz -C /tmp/g logs 2>/dev/null
echo "end at $SECONDS s" >>$s
cat $s
