#!/usr/bin/env bash
# x1-ahead.sh — run 37: world 1, 132 SMs, the combine (BF16, 4,096 tokens) of B (ab/base: 2b98189, before the owners
# ahead), N (this tree; its default at world 1 is the lockstep instance, the same SASS as B's kernel, but 10% slower
# in call 6), A (N with the pipes at a 1,024-byte aligned shared address: -DSY_HT_PIPE_ALIGN=1024) and A1 (A with
# SY_HT_OWNER_AHEAD=1), two passes; then world 2, 16 SMs, B N A. Carry ab/base. $OUT/summary.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt; . tools/dev/variant.sh
nvidia-smi -L | head -1 >>$s
declare -A dir=([B]=/tmp/xB [N]=/tmp/xN [A]=/tmp/xA)
build_tree /tmp/xB ab/base & build_tree /tmp/xN . & build_tree /tmp/xA . -DSY_HT_PIPE_ALIGN=1024 & wait
bw() { local l=$1 v=$2 w=$3 sms=$4; shift 4; env "$@" timeout 60 ${dir[$v]}/bin/syrun -n $w ${dir[$v]}/bin/sy-bench --no-nccl \
  --tokens 4096 --wire bf16 --num-sms $sms moe-ht >/tmp/r.txt 2>&1
  echo "== $l w$w $sms: $(grep -E ' (combine|dispatch_bwd) ' /tmp/r.txt | sed 's/\[rank 0\]//' | awk '{print $3, $5}' | tr '\n' ' ')" >>$s; }
for p in 1 2; do bw B B 1 132 X=1; bw N N 1 132 X=1; bw A A 1 132 X=1; bw A1 A 1 132 SY_HT_OWNER_AHEAD=1; done
n=$(nvidia-smi -L | grep -c '^GPU')
if [ "$n" -ge 2 ]; then for v in B N A A N B; do bw $v $v 2 16 X=1; done; fi
timeout 100 /tmp/xA/bin/syrun -n 3 --gpus 0,0,0 /tmp/xA/tests/gpu/test_gpu_moe_ht >/tmp/t.txt 2>&1; echo "test A 3 sharing rc=$?" >>$s
timeout 100 /tmp/xA/bin/syrun -n 1 /tmp/xA/tests/gpu/test_gpu_moe_ht >/tmp/t.txt 2>&1; echo "test A 1 rank rc=$?" >>$s
cat $s
