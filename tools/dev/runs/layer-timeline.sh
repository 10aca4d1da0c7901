#!/usr/bin/env bash
# layer-timeline.sh — one device call: sy-bench layer at world 1 without CUPTI (host times) and again with
# SY_BENCH_TIMELINE (every timed pass's last call's kernels: what ran beside what). Writes to $OUT.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
tools/build.sh >$OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
B=build/bin
r() { n=$1; shift; echo "== $n: $*" >>$OUT/s.txt; timeout 200 "$@" >$OUT/$n.txt 2>&1; echo "rc=$?" >>$OUT/s.txt
  grep -E "^\[rank 0\] +(decode|prefill|backward)|target|busiest|WRONG|wrong|FAIL|error" $OUT/$n.txt >>$OUT/s.txt; }
r l2 $B/syrun -n 1 $B/sy-bench --no-nccl --json $OUT/bench_layer.n1.json layer
SY_BENCH_TIMELINE=$OUT/tl2.txt r t2 $B/syrun -n 1 $B/sy-bench --no-nccl -n 3 -w 2 layer
SY_BENCH_TIMELINE=$OUT/tl4.txt r t4 $B/syrun -n 1 $B/sy-bench --no-nccl -n 3 -w 2 --micro-batches 4 --tokens 4096 layer
cat $OUT/s.txt
