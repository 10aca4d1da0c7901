#!/usr/bin/env bash
# x1-fp8pipe52.sh — run 52, call 1 (one GPU). Issue 19's FP8 dispatch at world 1 (~63% of the copy's HBM rate
# against >= 70%): where it stands on this H200 — the expansion's ceiling (tools/dev/expand-ceiling.cu: FP8 rows
# alone and with their scales, 16 and 132 SMs, the dispatch's expert order), Nsight Compute's full set on the FP8
# dispatch at 132 SMs ($OUT/ncu_fp8.txt) — and SY_HT_QPIPE=1 (the quantisation's next pass loaded before this
# pass is stored) against the head, h q q h at 132 and 16 SMs. Then the new tests: test_gpu_moe_ht's top-31 cases
# (the add's full pipe table) at 1 rank and 3 sharing the GPU, and the Python package's MoE HT tests (combine with
# add=True) at 1 and 2 ranks.
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/h . "" &
build_tree /tmp/q . "-DSY_HT_QPIPE=1" &
nvcc -O2 -arch=sm_90 -std=c++17 -Itools/dev -o /tmp/ec tools/dev/expand-ceiling.cu >/tmp/ec_build.txt 2>&1 &
wait
cmake --build /tmp/h -j 10 --target switchyard >/tmp/build_lib.txt 2>&1 || echo "lib build failed" >>$s
echo "builds done at $SECONDS s" >>$s
ht() { # ht V LABEL ARGS...
  local v=$1 label=$2
  shift 2
  timeout 60 /tmp/$v/bin/syrun -n 1 /tmp/$v/bin/sy-bench --no-nccl --tokens 4096 --wire fp8 "$@" moe-ht >/tmp/r.txt 2>&1
  echo "== $label ($v) rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]+ +fp8 +dispatch |[Cc]eiling|rror" /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
}
for v in h q q h; do
  ht $v "FP8 world 1, 132 SMs" --num-sms 132
  ht $v "FP8 world 1, 16 SMs"
done
echo "A/B done at $SECONDS s" >>$s
echo "== ceiling, FP8 rows (7,168 B) and scales, expert order" >>$s
EC_SCALES=1 EC_EXPERTS=256 timeout 90 /tmp/ec 4096 7168 8 >>$s 2>&1
echo "ceiling done at $SECONDS s" >>$s
test_ht /tmp/h w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/h w3 3 "--gpus 0,0,0" SY_HT_OWN_QUEUE=-1
test_ht /tmp/q w1q 1 "" SY_HT_OWN_QUEUE=-1
grep -E "wrong|FAIL|differ|top-31" /tmp/t_w1.txt /tmp/t_w3.txt /tmp/t_w1q.txt | head -12 >>$s
for r in 1 2; do
  g=""; [ $r = 2 ] && g="--gpus 0,0"
  PYTHONPATH=/tmp/h/python timeout 150 /tmp/h/bin/syrun -n $r $g python3 -m pytest tests/python/test_moe_ht.py -q \
    -p no:cacheprovider >/tmp/py$r.txt 2>&1
  echo "== pytest test_moe_ht.py n=$r rc=$?: $(tail -1 /tmp/py$r.txt)" >>$s
done
echo "tests done at $SECONDS s" >>$s
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$ncu" ] && [ $SECONDS -lt 480 ]; then
  timeout 100 /tmp/h/bin/syrun -n 1 "$ncu" --set full --cache-control none --clock-control none \
    -k "regex:^sy_ht_dispatch" -s 8 -c 1 -f -o /tmp/fp8 /tmp/h/bin/sy-bench --no-nccl -n 3 -w 5 --tokens 4096 \
    --num-sms 132 --wire fp8 moe-ht >/tmp/ncu.log 2>&1
  echo "== ncu rc=$? at $SECONDS s" >>$s
  "$ncu" -i /tmp/fp8.ncu-rep --page details >$OUT/ncu_fp8.txt 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|Warp Cycles Per Issued|Registers Per|Stall|stall" \
    $OUT/ncu_fp8.txt | head -30 >>$s
fi
cat $s
