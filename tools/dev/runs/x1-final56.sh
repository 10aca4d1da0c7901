#!/usr/bin/env bash
# x1-final56.sh — run 56, call 4 (one GPU, ~4 minutes): be42be8 on the GPU. test_gpu_faults twice (its check now
# accepts a survivor that names a survivor which failed on the dead rank in an earlier call: call 3 met that in
# attn-qkv-forward); the MoE creates' joint verdict (core/moe.c, core/moe_ht.c: a rank refusing its arguments still
# makes the exchange) through test_gpu_moe_ht at 1 and 3 ranks sharing the GPU and test_gpu_moe at 3.
. tools/dev/variant.sh # dev_start, test_ht
dev_start summary.txt
cmake -S . -B /tmp/m >/dev/null && cmake --build /tmp/m -j 12 --target sy-bench syrun test_gpu_moe_ht test_gpu_moe \
  test_gpu_faults >/tmp/build_m.log 2>&1 || { echo "build failed" >>$s; tail -20 /tmp/build_m.log >>$s; }
echo "build done at $SECONDS s" >>$s
for i in 1 2; do
  timeout 150 /tmp/m/tests/gpu/test_gpu_faults >/tmp/f$i.txt 2>&1
  echo "== test_gpu_faults ($i) rc=$?" >>$s
  grep -E "^\[faults\]" /tmp/f$i.txt | cut -c1-330 >>$s
done
test_ht /tmp/m w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/m w3 3 "--gpus 0,0,0" SY_HT_OWN_QUEUE=-1
timeout 150 /tmp/m/bin/syrun -n 3 --gpus 0,0,0 /tmp/m/tests/gpu/test_gpu_moe >/tmp/t_moe3.txt 2>&1
echo "test_gpu_moe n=3 rc=$? ($(grep -c 'passed' /tmp/t_moe3.txt) ranks passed)" >>$s
grep -hE "FAIL|rror" /tmp/t_w1.txt /tmp/t_w3.txt /tmp/t_moe3.txt | grep -v "sy warn" | head -6 | cut -c1-250 >>$s
echo "end at $SECONDS s" >>$s
cat $s
