#!/usr/bin/env bash
# x1-bc47.sh — run 47, call 3 (world 1, one GPU): why way c (the graph) stays above way b (two streams). The GPU's SM
# clock and power every 50 ms ($OUT/smi.txt) beside each way's wall-clock span ($OUT/marks.txt; tools/dev/power-ways.py
# SMI MARKS): 4,096 tokens with shared weights (-n 200) and 16,384 with each expert's weights (-n 60), one layer; then
# the CUPTI timeline of each way's last timed step at 4,096 tokens ($OUT/tl.tar.gz: start, end, stream, grid, block,
# shared memory, name of every kernel); then moe-ht at 132 SMs (issue 19's one-GPU shape, not run since the long
# kernels' pdl_wait), with NCCL beside.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
(nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader \
  -lms 50 | while IFS= read -r l; do echo "$EPOCHREALTIME, $l"; done >/tmp/smi.txt 2>&1 &)
mkdir -p /tmp/j
run() { # LABEL ARGS...
  local label=$1 t0=$SECONDS
  shift
  echo "== $label" >>/tmp/marks.txt
  SY_BENCH_LAYER_MARKS=/tmp/marks.txt timeout 200 /tmp/x/bin/syrun -n 1 /tmp/x/bin/sy-bench --no-nccl --recv arena "$@" \
    --json /tmp/j/layer_$label.json layer >/tmp/layer.txt 2>&1
  echo "== layer $label: $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|GPU slowdowns|WARN|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' |
    head -40 >>$s
}
run shared4096 --tokens 4096 --expert-weights shared -n 200 -w 10
run distinct16384 --tokens 16384 -n 60 -w 5
pkill -f "nvidia-smi --query-gpu"
python3 tools/dev/power-ways.py /tmp/smi.txt /tmp/marks.txt >>$s 2>&1
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
