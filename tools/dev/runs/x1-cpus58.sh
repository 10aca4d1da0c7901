#!/usr/bin/env bash
# x1-cpus58.sh — run 58, call 5 (one GPU, ~3 minutes): the decode step's host time by CPU. Call 4 read 30.87, 2.30,
# 19.84 (pinned to CPU 15) and 2.13 us in four processes one after the other; the eager ways barely moved. Is it the
# CPU the launching thread runs on? The GPU's local CPUs (sysfs local_cpulist, nvidia-smi topo), then the step pinned
# to one CPU at a time.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
B=build/bin
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-F' 'a-f' | sed 's/^0000//')
echo "bus $bus: numa_node $(cat /sys/bus/pci/devices/$bus/numa_node 2>&1), local_cpulist $(cat /sys/bus/pci/devices/$bus/local_cpulist 2>&1)" >>$s
lscpu | grep -E "^(CPU\(s\)|Thread|Core|Socket|NUMA|Model name)" >>$s
nvidia-smi topo -m 2>&1 | head -4 >>$s
for c in 0 15 1 14 4 8 12 0 15; do
  taskset -c $c timeout 35 $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 128 --settle 0 --ways c,a layer >/tmp/d.txt 2>&1
  echo "cpu $c rc=$? at $SECONDS s: $(grep -E '^\[rank 0\] +decode +128 +(c|a) ' /tmp/d.txt | awk '{print $5 ": host " $7}' | tr '\n' ' ')" >>$s
done
echo "end at $SECONDS s" >>$s
cat $s
