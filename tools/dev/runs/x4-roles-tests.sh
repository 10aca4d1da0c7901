#!/usr/bin/env bash
# x4-roles-tests.sh — the roles by warps (the default from world 2, run 39) under the high-throughput knobs the full
# gpu-check varies, at n GPUs (4 best): test_gpu_moe_ht with SY_HT_OWN_QUEUE 0 / 1, SY_HT_PREQUANT 0, SY_HT_SCALE_HINT
# 1, SY_HT_OWNER_AHEAD 0; the layer example; then `sy-bench layer` at world n (no NCCL). $OUT/summary.txt.
. tools/dev/variant.sh # test_ht, dev_start
dev_start summary.txt
cmake -S . -B /tmp/xT >/dev/null && cmake --build /tmp/xT -j 16 --target sy-bench syrun test_gpu_moe_ht sy-example-layer \
  >/tmp/build_xT.log 2>&1 || { echo "build failed" >>$s; tail -20 /tmp/build_xT.log >>$s; }
for e in SY_HT_OWN_QUEUE=0 SY_HT_OWN_QUEUE=1 SY_HT_PREQUANT=0 SY_HT_SCALE_HINT=1 SY_HT_OWNER_AHEAD=0; do
  test_ht /tmp/xT "${e}_$n" $n "" $e
done
timeout 60 /tmp/xT/bin/syrun -n $n /tmp/xT/bin/sy-example-layer >/tmp/t_layer_example.txt 2>&1
echo "sy-example-layer n=$n rc=$?" >>$s
tail -3 /tmp/t_layer_example.txt >>$s
timeout 120 /tmp/xT/bin/syrun -n $n /tmp/xT/bin/sy-bench --no-nccl layer >/tmp/layer.txt 2>&1
echo "== layer world $n rc=$?" >>$s
grep -E "^\[rank 0\]" /tmp/layer.txt | grep -vE "^\[rank 0\] +#" >>$s
cat $s
