#!/usr/bin/env bash
# x4-recv-early.sh — one device call (issue 19): the dispatch's receiving warps' per-message round trips. Variants
# (build time): A = SY_HT_RECV_EARLY=0 (the header, then entries, then scales: the code before), B = the default
# (header, entries and FP8 scales in one round trip), C / D = B with SY_HT_RECV_UNROLL=8 / 16 (a receiving lane's
# 16-byte loads in flight). test_gpu_moe_ht at 4 ranks with each, moe-ht at world 4 (4,096 tokens, 16 SMs, both
# wires) twice alternating, and A / B at world 1 with 132 SMs. $OUT/early.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
# the variants' build-time knobs left the code once measured (83d0ee3): they come back with the patch
git apply --check tools/dev/patches/ht-run32-knobs.patch 2>/dev/null && git apply tools/dev/patches/ht-run32-knobs.patch
s=$OUT/early.txt
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
. tools/dev/variant.sh # variant DIR FLAGS: a build side by side
variant /tmp/vA -DSY_HT_RECV_EARLY=0 &
variant /tmp/vC -DSY_HT_RECV_UNROLL=8 &
variant /tmp/vD -DSY_HT_RECV_UNROLL=16 &
wait
declare -A dir=([A]=/tmp/vA [B]=build [C]=/tmp/vC [D]=/tmp/vD)
for v in A B C D; do
  b=${dir[$v]}
  timeout 60 $b/bin/syrun -n 4 $b/tests/gpu/test_gpu_moe_ht >/tmp/t.txt 2>&1
  echo "test_gpu_moe_ht n=4 ($v) rc=$?" >>$s
done
timeout 60 build/bin/syrun -n 1 build/tests/gpu/test_gpu_moe_ht >/tmp/t.txt 2>&1
echo "test_gpu_moe_ht n=1 (B) rc=$?" >>$s
for pass in 1 2; do for v in A B C D; do bench4 $v $pass " (dispatch|combine_bwd) "; done; done
for v in A B; do
  b=${dir[$v]}
  timeout 60 $b/bin/syrun -n 1 $b/bin/sy-bench --no-nccl --tokens 4096 --num-sms 132 moe-ht >/tmp/r.txt 2>&1
  echo "== world 1, 132 SMs ($v) rc=$?" >>$s
  grep -E " (dispatch|combine_bwd) " /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
done
cat $s
