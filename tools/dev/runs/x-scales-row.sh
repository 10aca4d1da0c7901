#!/usr/bin/env bash
# x-scales-row.sh — SY_MOE_HT_SCALES_ROW_MAJOR's first GPU run (written 2026-11-27, run 37's session, after its device
# time): test_gpu_moe_ht (three row-major cases beside the group-major ones) at n GPUs (at most 4; direct and puts),
# at 1 rank and with 3 ranks on GPU 0, memcheck at 1 rank; then the FP8 dispatch (4,096 tokens) with the scales
# group-major (G, the default) and row-major (R), G R R G, at world n with 16 SMs and at world 1 with 16 and 132
# SMs (NOTES "MoE high throughput: the FP8 rows' scales (run 33)": the ceiling measured +117 against +13-16 µs at
# 16 SMs and +40-52 against +5 at 132 for the two layouts). $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, bench_ws, test_ht, dev_start
dev_start summary.txt
build_tree /tmp/xC .
T=/tmp/xC/tests/gpu/test_gpu_moe_ht
t() { test_ht /tmp/xC "$@"; } # NAME RANKS GPUS-ARG ENV...
[ "$n" -ge 2 ] && t default$n $n "" X=1 && t put$n $n "" SY_FORCE_PUT=1
t default1 1 "" X=1
t hint1 1 "" SY_HT_SCALE_HINT=1
t share3 3 "--gpus 0,0,0" X=1
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
SY_TEST_SHARED_GPU=0 timeout 200 /tmp/xC/bin/syrun -n 1 --timeout 190 $san --tool memcheck --print-limit 0 $T \
  >/tmp/t_memcheck.txt 2>&1
echo "memcheck, 1 rank rc=$? $(python3 tools/dev/sanitizer-summary.py --total /tmp/t_memcheck.txt)" >>$s
bw() { # LABEL RANKS SMS SCALES
  timeout 120 /tmp/xC/bin/syrun -n $2 /tmp/xC/bin/sy-bench --no-nccl --tokens 4096 --wire fp8 --num-sms $3 \
    --scales $4 moe-ht >/tmp/r.txt 2>&1
  echo "== world $2, $3 SMs ($1) rc=$?" >>$s
  grep -E " (dispatch|combine) " /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
}
for cfg in "$n 16" "1 16" "1 132"; do
  set -- $cfg
  for v in G R R G; do bw $v $1 $2 $([ $v = R ] && echo row || echo group); done
done
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_*.txt build_x*.log 2>/dev/null) 2>/dev/null
cat $s
