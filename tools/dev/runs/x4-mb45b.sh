#!/usr/bin/env bash
# x4-mb45b.sh — run 45, call 2: x4-mb45.sh's layer rows varied 4x between ways and runs (the whole step's GEMMs alone
# 11,789 then 45,967 us at 16,384 tokens); the same runs again with the default iterations while nvidia-smi dmon
# samples each GPU's power, clocks, temperature and throttle reasons every second ($OUT/dmon.txt), and the
# throttle reasons before and after ($OUT/perf_*.txt). $OUT/layer_*.json, $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, dev_start, layer_mb
dev_start summary.txt
export SY_HEAP_SIZE=16G
nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER >$OUT/perf_before.txt 2>&1
nvidia-smi --query-gpu=index,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active --format=csv >>$s 2>&1
(nvidia-smi dmon -s puct -d 1 >$OUT/dmon.txt 2>&1 &) 
build_tree /tmp/x . ""
layer() { layer_mb "$@"; }
layer 16384 2 16k_2
layer 16384 1,3,3,1 16k_1331
nvidia-smi --query-gpu=index,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active --format=csv >>$s 2>&1
nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER >$OUT/perf_after.txt 2>&1
pkill -f "nvidia-smi dmon"
cat $s
