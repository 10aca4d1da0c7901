#!/usr/bin/env bash
# x4-mb45c.sh — run 45, call 3: x4-mb45b.sh found GPU 0 of that host thermally throttled (67 C idle against 31 for the
# others, 84-89 C under the GEMMs, SM clock 345-675 MHz, nvidia-smi's SW thermal slowdown 179 s): every world-4 row
# there was that GPU's. On a fresh host, first the GPUs' idle temperatures and clock event reasons (stop when one is
# at 55 C or more idle), then the layer's micro-batch runs with nvidia-smi dmon beside ($OUT/dmon.txt).
. tools/dev/variant.sh # build_tree, dev_start, layer_mb
dev_start summary.txt
export SY_HEAP_SIZE=16G
q="index,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
nvidia-smi --query-gpu=$q --format=csv >>$s 2>&1
hot=$(nvidia-smi --query-gpu=temperature.gpu --format=csv,noheader | awk '$1 >= 55' | wc -l)
if [ "$hot" -gt 0 ]; then echo "== $hot GPU(s) at 55 C or more idle: stopped" >>$s; cat $s; exit 3; fi
(nvidia-smi dmon -s puct -d 1 >$OUT/dmon.txt 2>&1 &)
build_tree /tmp/x . ""
layer() { layer_mb "$@";
  nvidia-smi --query-gpu=$q --format=csv,noheader >>$s 2>&1
}
layer 16384 2 16k_2
layer 16384 1,3,3,1 16k_1331
layer 16384 4 16k_4
layer 16384 8 16k_8
layer 16384 1,2,2,2,2,1 16k_122221
layer 8192 1,3,3,1 8k_1331
nvidia-smi -q -d PERFORMANCE >$OUT/perf_after.txt 2>&1
pkill -f "nvidia-smi dmon"
cat $s
