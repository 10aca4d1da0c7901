#!/usr/bin/env bash
# x1-next.sh — the first one-GPU call after run 27 (not run yet): the own-token queue's race fix (9b1a993) checked
# — test_gpu_moe_ht at 1 rank and at 3 ranks sharing the GPU with the queue by default, off and forced on, and under
# compute-sanitizer racecheck and synccheck at 1 rank — then moe-ht at world 1 (4,096 tokens, 16 and 132 SMs, both
# wires) for RESULTS.md, and the graph-replay host-time probe (issue 21). Under a call's 600 s; $OUT/summary.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt T=build/tests/gpu/test_gpu_moe_ht
tools/build.sh >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
for q in -1 0 1; do
  SY_HT_OWN_QUEUE=$q timeout 100 build/bin/syrun -n 1 $T >>/tmp/t.txt 2>&1; echo "test_gpu_moe_ht n=1 queue=$q rc=$?" >>$s
  SY_HT_OWN_QUEUE=$q timeout 150 build/bin/syrun -n 3 --gpus 0,0,0 $T >>/tmp/t.txt 2>&1
  echo "test_gpu_moe_ht n=3 shared queue=$q rc=$?" >>$s
done
for tool in racecheck synccheck; do
  SY_HT_OWN_QUEUE=1 timeout 200 build/bin/syrun -n 1 /usr/local/cuda/bin/compute-sanitizer --tool $tool \
    --error-exitcode 9 $T >/tmp/san_$tool.txt 2>&1
  echo "compute-sanitizer $tool test_gpu_moe_ht (queue on) rc=$?" >>$s
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard" /tmp/san_$tool.txt | tail -3 >>$s
done
for sms in 16 132; do
  timeout 120 build/bin/syrun -n 1 build/bin/sy-bench --tokens 4096 --num-sms $sms --json $OUT/ht_w1_s$sms.json \
    moe-ht >/tmp/ht_$sms.txt 2>&1
  echo "== moe-ht world 1, $sms SMs rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) |target|ceiling" /tmp/ht_$sms.txt >>$s
done
nvcc -O2 -arch=sm_90 -std=c++17 -o /tmp/glp tools/dev/graph-launch-probe.cu && timeout 120 /tmp/glp >>$s 2>&1
tar czf $OUT/logs.tar.gz -C /tmp t.txt san_racecheck.txt san_synccheck.txt ht_16.txt ht_132.txt 2>/dev/null
cat $s
