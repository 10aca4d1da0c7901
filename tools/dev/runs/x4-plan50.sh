#!/usr/bin/env bash
# x4-plan50.sh — run 50, call 6 (4 GPUs, short: the session's last device minutes): the combine's owners planning by
# lanes (call 5) against ab/head at world $n: moe-ht, 4,096 tokens, BF16, 16 SMs, arena, head new new head (kernel
# µs of the combine and dispatch_bwd, the same kernel), then test_gpu_moe_ht at $n ranks.
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_tree /tmp/h ab/head "" &
build_tree /tmp/x . ""
wait
declare -A dir=([head]=/tmp/h [new]=/tmp/x)
for v in head new new head; do
  timeout 40 ${dir[$v]}/bin/syrun -n $n ${dir[$v]}/bin/sy-bench --no-nccl -c 0 --tokens 4096 --recv arena --wire bf16 \
    moe-ht >/tmp/r.txt 2>&1
  echo "== world $n, 16 SMs ($v) rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]+ +bf16 +(combine|dispatch_bwd|dispatch) |rror" /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
done
test_ht /tmp/x w$n $n ""
cat $s
