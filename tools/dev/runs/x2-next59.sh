#!/usr/bin/env bash
# x2-next59.sh — ready for two GPUs (not run yet, ~9 minutes). Run 58 measured moe-ht at world 2 by SM budget (call
# 7): the BF16 dispatch's SM-us flat from 8 to 16 SMs and rising above (x1.58 from 16 to 32), where the roles change
# form (a channel's two roles on one block's warps at <= 16 SMs from world 2, on blocks of their own above). Here:
# (1) at 32 SMs, the roles by warps (SY_HT_ROLES=1) against the default (blocks), twice each (a b b a), BF16 dispatch
#     and combine, FP8 dispatch: is it the form?
# (2) 8,192 tokens at 16 SMs with NCCL beside (the second size, not yet at world 2);
# (3) every GPU test at world 2 after run 58's fixes (the reviews', the named detail fields), the faults excepted.
. tools/dev/variant.sh # dev_start, bench_tree
dev_start summary.txt
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
for r in auto 1 1 auto; do
  roles=""; [ $r = 1 ] && roles=1 # SY_HT_ROLES unset: auto (blocks above 16 SMs)
  SY_HT_ROLES=$roles bench_tree build "world 2, 32 SMs, bf16, roles $r" 2 "dispatch|combine" --tokens 4096 --wire bf16 \
    --num-sms 32
  SY_HT_ROLES=$roles bench_tree build "world 2, 32 SMs, fp8, roles $r" 2 "dispatch" --tokens 4096 --wire fp8 --num-sms 32
done
echo "roles done at $SECONDS s" >>$s
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
