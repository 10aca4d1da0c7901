#!/usr/bin/env bash
# x1-combine.sh — one device call on an H100 (issue 19's one-GPU targets are set on one): the leaner combine pipe
# (f9005d7) at world 1, 132 SMs, 4,096 tokens. A = ab/base (the code before; `tools/dev/ab.sh tree 22b494a base`
# here, carry ab/base), C = this tree. test_gpu_moe_ht with C at 1 rank; the whole moe-ht table with C (--json
# $OUT/ht_w1.json; NCCL's local copy and the copy ceiling beside); then the combine A C C A (BF16, --no-nccl).
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/x1.txt
nvidia-smi -L | head -1 >>$s
. tools/dev/variant.sh # build_tree DIR SRC [FLAGS]
build_tree /tmp/vA ab/base &
build_tree /tmp/vC . &
wait
timeout 120 /tmp/vC/bin/syrun -n 1 /tmp/vC/tests/gpu/test_gpu_moe_ht >/tmp/t1.txt 2>&1
echo "test_gpu_moe_ht (C) n=1 rc=$?" >>$s
timeout 120 /tmp/vC/bin/syrun -n 1 /tmp/vC/bin/sy-bench --tokens 4096 --num-sms 132 --json $OUT/ht_w1.json moe-ht \
  >/tmp/full.txt 2>&1
echo "== C, world 1, 132 SMs, full rc=$?" >>$s
grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) |target|ceiling" /tmp/full.txt | sed 's/\[rank 0\]//' >>$s
p=1
for v in A C C A; do
  timeout 90 /tmp/v$v/bin/syrun -n 1 /tmp/v$v/bin/sy-bench --no-nccl --tokens 4096 --num-sms 132 --wire bf16 moe-ht \
    >/tmp/r.txt 2>&1
  echo "== world 1, 132 SMs ($v, pass $p) rc=$?" >>$s
  grep -E " (combine|dispatch_bwd) " /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
  [ $v = C ] && p=2
done
cat $s
