#!/usr/bin/env bash
# orch-check.sh — one device call for the orchestration work (issue 20): the orchestration GPU tests and the
# attention / all-to-all tests at 1 and 3 ranks sharing GPU 0, test_gpu_pool under memcheck, sy-bench pool beside
# PyTorch's caching allocator (tools/dev/torch-alloc-bench.py), and all-to-all / moe-ll with SY_PDL on and off.
# Writes to $OUT (the device tool's folder).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
O=${OUT:-/tmp/out}
GPU_CHECK_ONLY='test_gpu_(pool|graph_cache|attn|alltoall|ring|init|timeout)$|test_gpu_(attn|alltoall|ring)\.' GPU_CHECK_SANITIZE="" GPU_CHECK_SHARED=1 GPU_CHECK_GPUS=1 GPU_CHECK_TIMEOUT=150 tools/gpu-check.sh /tmp/gc 1 3 > $O/gc.txt 2>&1
cp /tmp/gc/summary.txt $O/
B=build/bin; T=build/tests/gpu
timeout 150 compute-sanitizer --tool memcheck $T/test_gpu_pool > $O/memcheck_pool.txt 2>&1; echo "memcheck pool rc=$?" >> $O/summary.txt
timeout 120 $B/syrun -n 1 $B/sy-bench --no-nccl -n 50 --json $O/bench_pool.json pool > $O/pool.txt 2>&1; echo "pool rc=$?" >> $O/summary.txt
timeout 120 python3 tools/dev/torch-alloc-bench.py > $O/torch.txt 2>&1; echo "torch rc=$?" >> $O/summary.txt
for pdl in 1 0; do SY_PDL=$pdl timeout 120 $B/syrun -n 1 $B/sy-bench --no-nccl -n 50 -b 4K -e 1M alltoall > $O/a2a_pdl$pdl.txt 2>&1; SY_PDL=$pdl timeout 120 $B/syrun -n 1 $B/sy-bench --no-nccl -n 50 --tokens 1,128 moe-ll > $O/moell_pdl$pdl.txt 2>&1; done
cp /tmp/gc/logs.tar.gz $O/ 2>/dev/null
