#!/usr/bin/env bash
# x1-attn56.sh — run 56, call 5 (one GPU, ~3 minutes): sy_attn_create's verdict exchange (core/attn.c: a rank that
# refuses its arguments still meets the others) on the cuda backend: test_gpu_attn at 1 and 3 ranks sharing the GPU.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
cmake -S . -B /tmp/m >/dev/null && cmake --build /tmp/m -j 12 --target syrun test_gpu_attn >/tmp/build_m.log 2>&1 ||
  { echo "build failed" >>$s; tail -20 /tmp/build_m.log >>$s; }
echo "build done at $SECONDS s" >>$s
for g in "1 0" "3 0,0,0"; do
  set -- $g
  timeout 120 /tmp/m/bin/syrun -n $1 --gpus $2 /tmp/m/tests/gpu/test_gpu_attn >/tmp/a$1.txt 2>&1
  echo "test_gpu_attn n=$1 rc=$? ($(grep -c 'passed' /tmp/a$1.txt) ranks passed)" >>$s
  grep -E "FAIL" /tmp/a$1.txt | head -3 | cut -c1-250 >>$s
done
echo "end at $SECONDS s" >>$s
cat $s
