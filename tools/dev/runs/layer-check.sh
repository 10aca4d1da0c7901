#!/usr/bin/env bash
# layer-check.sh — one device call for the MoE layer step (issue 21) on one GPU: the orchestration and layer tests at
# 1 and 3 ranks sharing GPU 0 (no sanitizers), test_gpu_pool under memcheck, sy-bench layer at world 1 (JSON) and
# its smoke run at 3 ranks on GPU 0, the example at 2 ranks on GPU 0. Writes to $OUT (the device tool's folder).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}
GPU_CHECK_ONLY=${LAYER_CHECK_ONLY:-'test_gpu_(pool|graph_cache)$|test_example_layer|bench_layer'} GPU_CHECK_SANITIZE="" \
  GPU_CHECK_SHARED=1 GPU_CHECK_GPUS=1 GPU_CHECK_TIMEOUT=200 tools/gpu-check.sh /tmp/gc 1 3 >$O/gc.txt 2>&1
cp /tmp/gc/summary.txt $O/
B=build/bin T=build/tests/gpu
timeout 150 compute-sanitizer --tool memcheck $T/test_gpu_pool >$O/memcheck_pool.txt 2>&1
echo "memcheck pool rc=$?" >>$O/summary.txt
CUDA_VISIBLE_DEVICES=0 timeout 240 $B/syrun -n 1 $B/sy-bench --no-nccl --json $O/bench_layer.n1.json layer >$O/layer1.txt 2>&1
echo "layer n1 rc=$?" >>$O/summary.txt
cp /tmp/gc/logs.tar.gz $O/ 2>/dev/null
