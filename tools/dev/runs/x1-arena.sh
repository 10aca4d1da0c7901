#!/usr/bin/env bash
# x1-arena.sh — the receive arena's frees in stream order (run 43): builds everything, then test_gpu_pool (its check
# 9) at 1 rank and at 3 sharing GPU 0; test_gpu_moe_ht at 1 rank and at 2 sharing GPU 0 (every arena case frees its
# recv on the test's stream now); the Python package's MoE HT tests (free_recv / alloc_recv with a stream); the
# layer example; compute-sanitizer memcheck on test_gpu_pool at 1 rank (run 44). $OUT/summary.txt; the logs of
# failures to $OUT.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
SY_WERROR=ON timeout 400 tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
B=build/bin
t() { # NAME CMD...
  local name=$1
  shift
  timeout 150 "$@" >/tmp/$name.txt 2>&1
  local rc=$?
  echo "$name rc=$rc: $(grep -E 'check 9|cases ok|passed|failed|FAIL' /tmp/$name.txt | tail -3 | tr '\n' ' ')" >>$s
  [ $rc -ne 0 ] && cp /tmp/$name.txt $OUT/
}
t pool1 $B/syrun -n 1 build/tests/gpu/test_gpu_pool
t pool3 $B/syrun -n 3 --gpus 0,0,0 build/tests/gpu/test_gpu_pool
t ht1 $B/syrun -n 1 build/tests/gpu/test_gpu_moe_ht
t ht2 $B/syrun -n 2 --gpus 0,0 build/tests/gpu/test_gpu_moe_ht
t py1 $B/syrun -n 1 env PYTHONPATH=build/python python3 -m pytest tests/python/test_moe_ht.py -q -p no:cacheprovider
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t mcpool $B/syrun -n 1 $cs --tool memcheck --print-limit 0 build/tests/gpu/test_gpu_pool
python3 tools/dev/sanitizer-summary.py /tmp/mcpool.txt >>$s 2>&1
grep -h "check 9" /tmp/pool1.txt /tmp/pool3.txt | head -4 >>$s
cat $s
