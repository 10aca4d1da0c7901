#!/usr/bin/env bash
# layer-tuned.sh — one device call on one GPU: test_gpu_moe_ht, test_gpu_moe and the example layer at 1 rank and at 3
# ranks sharing GPU 0 (the dispatch's own-row split at world 3 is 0), then sy-bench layer at world 1 with the GEMMs
# tuned (JSON) and with cuBLASLt's first pick (SY_BENCH_NO_GEMM_TUNE=1) in the same call.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
B=build/bin
GPU_CHECK_ONLY='test_gpu_moe_ht|test_gpu_moe$|test_example_layer' GPU_CHECK_SANITIZE="" GPU_CHECK_SHARED=1 GPU_CHECK_GPUS=1 \
  GPU_CHECK_TIMEOUT=200 tools/gpu-check.sh /tmp/g 1 3 >$OUT/gc.txt 2>&1
s=$OUT/summary.txt
cp /tmp/g/summary.txt $s
timeout 200 $B/syrun -n 1 $B/sy-bench --no-nccl --json $OUT/bench_layer.n1.json layer >$OUT/layer_tuned.txt 2>&1
echo "== layer tuned rc=$?" >>$s
grep -E "^\[rank 0\] +(decode|prefill|backward)|target|busiest|GEMMs" $OUT/layer_tuned.txt >>$s
SY_BENCH_NO_GEMM_TUNE=1 timeout 200 $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 4096 layer >$OUT/layer_first.txt 2>&1
echo "== layer first pick rc=$?" >>$s
grep -E "^\[rank 0\] +(prefill|backward)|target" $OUT/layer_first.txt >>$s
cp /tmp/g/logs.tar.gz $OUT/ 2>/dev/null
cat $s
