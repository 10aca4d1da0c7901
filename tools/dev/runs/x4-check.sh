#!/usr/bin/env bash
# x4-check.sh PART — the four-GPU runs (issue 23) in two device calls of under ten minutes each, on one warm machine:
#   tests   every GPU test at 2 and 4 GPUs (no sanitizers), then the README's example;
#   bench   every benchmark at 4 GPUs with NCCL beside it (results.md), then sy-bench layer's variants at 4
#           (the GEMMs on every SM; four micro-batches).
# Writes to $OUT: summary.txt, results.md, the JSON, the logs (logs.tar.gz).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
part=${1:?usage: x4-check.sh tests|bench}
B=build/bin
mkdir -p /tmp/g/var
if [ "$part" = tests ]; then
  GPU_CHECK_ONLY='^test_' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 tools/gpu-check.sh /tmp/g 2 4 >$OUT/gc.txt 2>&1
else
  GPU_CHECK_ONLY='^bench_' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 tools/gpu-check.sh /tmp/g 4 >$OUT/gc.txt 2>&1
  for v in "--gemm-sms 0" "--micro-batches 4"; do
    echo "== layer $v" >>/tmp/g/summary.txt
    timeout 150 $B/syrun -n 4 $B/sy-bench --no-nccl --tokens 4096 $v layer >/tmp/g/var/layer_variant.log 2>&1
    echo "rc=$?" >>/tmp/g/summary.txt
    grep -E "^\[rank 0\] +(prefill|backward)|target|busiest" /tmp/g/var/layer_variant.log >>/tmp/g/summary.txt
    cp /tmp/g/var/layer_variant.log "/tmp/g/var/layer_variant${v// /_}.log"
  done
  cp /tmp/g/results.md $OUT/ 2>/dev/null; (cd /tmp/g && tar czf $OUT/json.tar.gz *.json)
fi
cp /tmp/g/summary.txt $OUT/
tar czf $OUT/logs.tar.gz -C /tmp/g logs.tar.gz var
cat /tmp/g/summary.txt
