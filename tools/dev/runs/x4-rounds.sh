#!/usr/bin/env bash
# x4-rounds.sh — one device call (issue 19): a round's messages taken by whichever warp is free first
# (SY_HT_ROUND_DYNAMIC=1, the default) against in turn (0, variant S), in the dispatch's receivers and the
# combine's experts' side. test_gpu_moe_ht (every variant) at 4 ranks and 1 with the default, and at 4 with S;
# moe-ht at world 4 (4,096 tokens, 16 SMs, both wires) twice alternating; then the default at world 4 with NCCL
# beside (4,096 and 8,192 tokens) and at world 1 (132 SMs) for the record. $OUT/rounds.txt, $OUT/*.json.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
# the variants' build-time knobs left the code once measured (83d0ee3): they come back with the patch
git apply --check tools/dev/patches/ht-run32-knobs.patch 2>/dev/null && git apply tools/dev/patches/ht-run32-knobs.patch
s=$OUT/rounds.txt
(cmake -S . -B /tmp/vS -DCMAKE_CUDA_FLAGS=-DSY_HT_ROUND_DYNAMIC=0 >/dev/null &&
  cmake --build /tmp/vS -j 24 --target sy-bench syrun test_gpu_moe_ht >/tmp/build_vS.log 2>&1 || echo "build vS failed" >>$s) &
GPU_CHECK_ONLY='^test_gpu_moe_ht' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=120 timeout 240 tools/gpu-check.sh /tmp/g 4 1 >/dev/null 2>&1
cat /tmp/g/summary.txt >>$s
wait
timeout 60 /tmp/vS/bin/syrun -n 4 /tmp/vS/tests/gpu/test_gpu_moe_ht >/tmp/t.txt 2>&1
echo "test_gpu_moe_ht n=4 (S) rc=$?" >>$s
declare -A dir=([S]=/tmp/vS [D]=build)
for pass in 1 2; do for v in S D; do
  b=${dir[$v]}
  timeout 60 $b/bin/syrun -n 4 $b/bin/sy-bench --no-nccl --tokens 4096 moe-ht >/tmp/r.txt 2>&1
  echo "== world 4, 16 SMs ($v, pass $pass) rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) " /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
done; done
b=build/bin
timeout 120 $b/syrun -n 4 $b/sy-bench --tokens 4096,8192 --json $OUT/moe-ht.n4.json moe-ht >/tmp/r.txt 2>&1
echo "== world 4, 16 SMs, NCCL beside (D) rc=$?" >>$s
grep -v '^\[rank [123]\]' /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
timeout 60 $b/syrun -n 1 $b/sy-bench --tokens 4096 --num-sms 132 --json $OUT/moe-ht.n1.json moe-ht >/tmp/r.txt 2>&1
echo "== world 1, 132 SMs (D) rc=$?" >>$s
grep -v '^\[rank [123]\]' /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
cat $s
