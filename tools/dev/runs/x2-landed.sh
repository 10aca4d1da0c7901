#!/usr/bin/env bash
# x2-landed.sh — run 37 call 4: every GPU test at 2 GPUs on this tree (be7e0db: the owners ahead from world 2), then
# the combine and dispatch_bwd (BF16, 4,096 tokens) of B (ab/base, 2b98189) and N (this tree) at world 2, 16 SMs and
# world 1, 132 SMs, B N N B. Carry ab/base. $OUT/summary.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt; . tools/dev/variant.sh
declare -A dir=([B]=/tmp/xB [N]=$PWD/build)
build_tree /tmp/xB ab/base >/dev/null 2>&1 &
GPU_CHECK_ONLY='^test_' GPU_CHECK_TIMEOUT=150 timeout 420 tools/gpu-check.sh /tmp/g 2 > /tmp/gc.txt 2>&1; echo "gpu-check rc=$?" >>$s
grep -E 'FAIL|ok|not run|skip' /tmp/gc.txt | tail -60 >>$s
wait
for w in 2 1; do sms=16; [ $w = 1 ] && sms=132; for v in B N N B; do bench_ws $v $w $sms x "combine|dispatch_bwd"; done; done
tar czf $OUT/g.tar.gz -C /tmp g 2>/dev/null
cat $s
