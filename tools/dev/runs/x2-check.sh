#!/usr/bin/env bash
# x2-check.sh — one device call on two GPUs: every GPU test at 2 GPUs (no sanitizers), moe-ht and layer at world 2
# with NCCL beside moe-ht (results.md), and layer's variants at world 2 (4 micro-batches; 24 communication SMs).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
B=build/bin
mkdir -p /tmp/g/var
GPU_CHECK_ONLY='^test_|^bench_(moe-ht|layer)$' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 tools/gpu-check.sh /tmp/g 2 \
  >$OUT/gc.txt 2>&1
for v in "--micro-batches 4" "--num-sms 24"; do
  echo "== layer $v" >>/tmp/g/summary.txt
  timeout 120 $B/syrun -n 2 $B/sy-bench --no-nccl --tokens 4096 $v layer >/tmp/g/var/layer_variant.log 2>&1
  echo "rc=$?" >>/tmp/g/summary.txt
  grep -E "^\[rank 0\] +(prefill|backward)|target|busiest" /tmp/g/var/layer_variant.log >>/tmp/g/summary.txt
  cp /tmp/g/var/layer_variant.log "/tmp/g/var/layer_variant${v// /_}.log"
done
cp /tmp/g/summary.txt /tmp/g/results.md $OUT/ 2>/dev/null
(cd /tmp/g && tar czf $OUT/json.tar.gz *.json)
tar czf $OUT/logs.tar.gz -C /tmp/g logs.tar.gz var
cat /tmp/g/summary.txt
