#!/usr/bin/env bash
# x4-final43.sh — run 43's last call: issue 19's table with the batch planning by lanes (x4-table.sh, arena only:
# NCCL beside, both token counts; the prefill layer with and without the arena; world 1 at 132 SMs), then the sending
# warps again now that the senders plan faster (SY_HT_SEND_WARPS 5 and 7 against 6, 4,096 tokens, arena).
. tools/dev/variant.sh # bench_tree, dev_start
X4_TABLES=A bash tools/dev/runs/x4-table.sh >/dev/null 2>&1
s=$OUT/summary.txt
export SY_HEAP_SIZE=8G NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$n" -gt 4 ] && n=4
for w in 5 7 6; do
  (export SY_HT_SEND_WARPS=$w; bench_tree /tmp/xT "world $n, 16 SMs, 4096 tokens, arena, SY_HT_SEND_WARPS=$w" $n \
    "dispatch|combine_bwd" --tokens 4096 --num-sms 16 --recv arena)
done
cat $s
