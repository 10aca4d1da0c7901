#!/usr/bin/env bash
# x1-nvml45.sh — run 45, call 7: sy-bench's GPU slowdown line (gpu_state.c: NVML's power and thermal violation
# counters before and after an entry) on a GPU, and in the JSON through results-table.py.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
build_tree /tmp/x . ""
timeout 120 /tmp/x/bin/syrun -n 1 /tmp/x/bin/sy-bench --no-nccl --tokens 4096 --json $OUT/ht.json moe-ht >/tmp/ht.txt 2>&1
echo "== moe-ht world 1 rc=$?" >>$s
grep -E "slowdown|WARNING| (dispatch|combine) |correct|wrong" /tmp/ht.txt >>$s
python3 tools/dev/results-table.py $OUT/ht.json | tail -3 >>$s
timeout 120 /tmp/x/bin/syrun -n 2 --gpus 0,0 /tmp/x/bin/sy-bench --no-nccl -n 2 -w 1 --tokens 128,512 layer >/tmp/l.txt 2>&1
echo "== layer 2 sharing rc=$?" >>$s
grep -E "slowdown|WARNING|correct|wrong" /tmp/l.txt >>$s
cat $s
