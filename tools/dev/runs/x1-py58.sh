#!/usr/bin/env bash
# x1-py58.sh — run 58, call 4 (one GPU, ~7 minutes): the reviews' fixes on the GPU and the decode step's host time.
# 1. gpu-check's Python, MoE, pool and example steps at world 1 and at 2 ranks sharing the GPU: the Python package's
#    fixes (the autograd dispatch's receive buffers freed, a failed scratch grow, out= rows, closed objects) and the
#    core's (a failed create or allocation's output NULL; a workspace past the heap refused at the create's exchange);
# 2. the decode step's host time replayed (way c, 128 tokens, world 1) before and after those steps: call 3 read 2.53 us
#    first and 19.48 us after its gpu-check, while the eager ways' host times stayed (a 24.27 -> 27.50, compute 17.92 ->
#    18.09): after the steps, what else runs (processes, GPU contexts, /dev/shm), then the step again, pinned to
#    another CPU (taskset -c 15), and again.
. tools/dev/variant.sh # dev_start
dev_start summary.txt
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
B=build/bin
state() {
  echo "-- at $SECONDS s: load $(cut -d' ' -f1-3 /proc/loadavg); /dev/shm entries $(ls /dev/shm | wc -l); GPU apps: $(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | tr '\n' ' ')" >>$s
  ps -eo pid,pcpu,stat,comm --sort=-pcpu | head -6 | tr '\n' ';' >>$s; echo >>$s
}
decode() {
  $1 timeout 35 $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 128 --settle 0 layer >/tmp/d.txt 2>&1
  echo "== layer decode, world 1 ($2) rc=$? at $SECONDS s" >>$s
  grep -E "^\[rank 0\] +decode +128 +(a|c|compute) " /tmp/d.txt | sed 's/\[rank 0\]//' >>$s
}
state
decode "" first
GPU_CHECK_SHARED=1 GPU_CHECK_ONLY='^test_(python|gpu_moe$|gpu_moe_ht$|gpu_pool$|example)' GPU_CHECK_SANITIZE="" \
  GPU_CHECK_TIMEOUT=150 timeout $((470 - SECONDS)) tools/gpu-check.sh /tmp/g 1 2 >/tmp/gc.txt 2>&1
echo "== gpu-check Python, MoE, pool, examples at 1 and 2 sharing rc=$? at $SECONDS s" >>$s
grep -vE "^build |^cpu tests" /tmp/g/summary.txt >>$s
grep -hE "passed|failed" /tmp/g/logs/test_python.n*.log | tail -4 >>$s
tar czf $OUT/logs.tar.gz -C /tmp/g logs 2>/dev/null
state
decode "" "after the steps"
decode "taskset -c 15" "after, pinned to CPU 15"
decode "" "after, again"
state
echo "end at $SECONDS s" >>$s
cat $s
