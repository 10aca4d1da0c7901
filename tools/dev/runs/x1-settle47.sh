#!/usr/bin/env bash
# x1-settle47.sh — run 47, call 5 (world 1, one GPU): the layer's ways each timed after 3 s of its own untimed calls
# (sy-bench --settle, new; default 3 s on a GPU): call 4 found the step ~10% slower late in a run than early, and a way
# timed after the CPU's check of the one before (up to 13 s idle) on a cooler, faster-clocked GPU. Order
# comm,compute,gemms,a,b,c,c,b,compute: is the step flat now, and where do b and c stand? 4,096 tokens with shared
# weights (checked), 16,384 with each expert's weights (-c 0: the check's 13 s a way left out); clock, power and
# temperature every 50 ms beside each timing ($OUT/tl.tar.gz: smi.txt, marks.txt; tools/dev/power-ways.py).
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
nvidia-smi --query-gpu=index,temperature.gpu,power.draw,clocks.sm --format=csv,noheader >>$s
(nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader \
  -lms 50 | while IFS= read -r l; do echo "$EPOCHREALTIME, $l"; done >/tmp/smi.txt 2>&1 &)
mkdir -p /tmp/j /tmp/tl
run() { # LABEL ARGS...
  local label=$1 t0=$SECONDS
  shift
  echo "== $label" >>/tmp/marks.txt
  SY_BENCH_LAYER_MARKS=/tmp/marks.txt timeout 280 /tmp/x/bin/syrun -n 1 /tmp/x/bin/sy-bench --no-nccl --recv arena "$@" \
    --ways comm,compute,gemms,a,b,c,c,b,compute --json /tmp/j/layer_$label.json layer >/tmp/layer.txt 2>&1
  echo "== layer $label: $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|settle|correct|wrong|target|of which|GPU slowdowns|WARN|rror" /tmp/layer.txt |
    sed 's/\[rank 0\]//' | head -40 >>$s
}
run shared4096 --tokens 4096 --expert-weights shared -n 50 -w 5
run distinct16384 --tokens 16384 -n 20 -w 3 -c 0
pkill -f "nvidia-smi --query-gpu"
python3 tools/dev/power-ways.py /tmp/smi.txt /tmp/marks.txt >>$s 2>&1
cp /tmp/smi.txt /tmp/marks.txt /tmp/tl/
tar czf $OUT/tl.tar.gz -C /tmp/tl .
tar czf $OUT/json.tar.gz -C /tmp/j .
cat $s
