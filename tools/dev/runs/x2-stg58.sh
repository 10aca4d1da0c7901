#!/usr/bin/env bash
# x2-stg58.sh — ready for two GPUs (not run yet, ~6 minutes): 5fea6b8's per-kernel sink stores timed. The kernels with
# both roles in a block and the quantisation ahead now use generic stores (SY_HT_STG_ROLES=0), the plain kernels
# st.global; run 57 timed the whole build both ways at world 2 (BF16 dispatch 705.5 -> 696.4 us, FP8 690.7 -> 677.4 with
# generic stores). Here: the default (d) against -DSY_HT_STG_ROLES=1 (r: the roles kernels as before 5fea6b8), d r r d,
# moe-ht at world 2, 16 SMs, 4,096 tokens, BF16 and FP8; test_gpu_moe_ht at 2 GPUs with the default; and the timeout
# spread's tests (x1-spread57.sh's first two steps) on real GPUs.
. tools/dev/variant.sh # dev_start, build_tree, bench_tree, test_ht
dev_start summary.txt
build_tree /tmp/d . ""
build_tree /tmp/r . "-DSY_HT_STG_ROLES=1"
cmake --build /tmp/d -j 16 --target test_gpu_timeout test_gpu_faults >/tmp/build_t.log 2>&1 || echo "test build failed" >>$s
echo "builds done at $SECONDS s" >>$s
test_ht /tmp/d w2 2 "" SY_HT_OWN_QUEUE=-1
for v in d r r d; do
  bench_tree /tmp/$v "world 2, 16 SMs, bf16 ($v)" 2 "dispatch|combine" --tokens 4096 --wire bf16
  bench_tree /tmp/$v "world 2, 16 SMs, fp8 ($v)" 2 "dispatch" --tokens 4096 --wire fp8
done
for e in "" SY_FORCE_PUT=1; do
  env $e timeout 60 /tmp/d/bin/syrun -n 2 /tmp/d/tests/gpu/test_gpu_timeout >/tmp/to.txt 2>&1
  echo "test_gpu_timeout n=2 $e rc=$?" >>$s
  grep -E "wait ended|FAIL" /tmp/to.txt | cut -c1-300 >>$s
done
timeout 150 /tmp/d/tests/gpu/test_gpu_faults >/tmp/f.txt 2>&1
echo "== test_gpu_faults rc=$?" >>$s
grep -E "^\[faults\]" /tmp/f.txt | cut -c1-420 >>$s
echo "end at $SECONDS s" >>$s
cat $s
