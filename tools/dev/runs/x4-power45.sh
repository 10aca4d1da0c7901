#!/usr/bin/env bash
# x4-power45.sh — run 45, call 5: the layer's GEMMs ran 29% longer beside the communication than alone (call 4's
# timeline) and the GPUs sat at their 700 W limit with the SM clock at 1,110-1,980 MHz (call 3's dmon): is way b
# power-bound? Every GPU's SM clock, power and clock event reasons every 50 ms ($OUT/smi.txt, each line after its
# wall-clock time) beside sy-bench layer's ways with their wall-clock start and end (SY_BENCH_LAYER_MARKS:
# $OUT/marks.txt), 60 timed steps a way, 16,384 tokens (T=N: N), micro-batches 2 and 1,3,3,1, on every GPU there
# (call 6: T=4096 on one H100). tools/dev/power-ways.py digests the two files.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
(nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader \
  -lms 50 | while IFS= read -r l; do echo "$EPOCHREALTIME, $l"; done >$OUT/smi.txt 2>&1 &)
for mb in 2 1,3,3,1; do
  echo "== micro-batches $mb" >>$OUT/marks.txt
  SY_BENCH_LAYER_MARKS=$OUT/marks.txt timeout 200 /tmp/x/bin/syrun -n $n /tmp/x/bin/sy-bench --no-nccl --recv arena \
    -n 60 -w 5 --tokens ${T:-16384} --micro-batches $mb --json $OUT/layer_$mb.json layer >/tmp/layer.txt 2>&1
  echo "== layer ${T:-16384} micro-batches $mb rc=$?" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|of which" /tmp/layer.txt | sed 's/\[rank 0\]//' >>$s
done
pkill -f "nvidia-smi --query-gpu"
nvidia-smi -q -d PERFORMANCE | grep -E "SW Power Capping|Thermal Slowdown" >>$s
cat $s
