#!/usr/bin/env bash
# x1-bc47.sh — run 47, call 3 (world 1, one GPU): why way c (the graph) stays above way b (two streams). The GPU's SM
# clock and power every 50 ms ($OUT/smi.txt) beside each way's wall-clock span ($OUT/marks.txt; tools/dev/power-ways.py
# SMI MARKS): 4,096 tokens with shared weights (-n 200) and 16,384 with each expert's weights (-n 60), one layer; then
# the CUPTI timeline of each way's last timed step at 4,096 tokens ($OUT/tl.tar.gz: start, end, stream, grid, block,
# shared memory, name of every kernel); then moe-ht at 132 SMs (issue 19's one-GPU shape, not run since the long
# kernels' pdl_wait), with NCCL beside.
. tools/dev/variant.sh # build_tree, dev_start, smi_start, smi_digest, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
smi_start /tmp/smi.txt
mkdir -p /tmp/j
layer_marked shared4096 --tokens 4096 --expert-weights shared -n 200 -w 10
layer_marked distinct16384 --tokens 16384 -n 60 -w 5
smi_digest /tmp/smi.txt /tmp/marks.txt
mkdir -p /tmp/tl
SY_BENCH_TIMELINE=/tmp/tl/tl.%r.txt timeout 200 /tmp/x/bin/syrun -n 1 /tmp/x/bin/sy-bench --no-nccl --recv arena \
  --tokens 4096 --expert-weights shared -n 5 -w 2 layer >/tmp/layer_tl.txt 2>&1
echo "== timeline 4096 shared rc=$?" >>$s
grep -E "^\[rank 0\] +(prefill|backward)" /tmp/layer_tl.txt | sed 's/\[rank 0\]//' >>$s
timeout 150 /tmp/x/bin/syrun -n 1 /tmp/x/bin/sy-bench --tokens 4096 --num-sms 132 --json /tmp/j/ht_w1.json moe-ht \
  >/tmp/ht.txt 2>&1
echo "== moe-ht world 1, 132 SMs rc=$?" >>$s
grep -vE "^\s*$" /tmp/ht.txt | grep -E "fp8|bf16|Ceiling|eiling|launch floor" | tail -16 >>$s
cp /tmp/smi.txt /tmp/marks.txt /tmp/tl/
tar czf $OUT/tl.tar.gz -C /tmp/tl .
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
