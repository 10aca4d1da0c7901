#!/usr/bin/env bash
# x2-tl46b.sh — run 46, call 7: after the fix of call 6 (pdl_wait, the layout within the SM budget), why way c (the
# graph) is still slower than way b (eager) at 4 layers: each timed pass's kernels (SY_BENCH_TIMELINE, rank 0 and 1:
# $OUT/tl.R.txt.gz); the same step with SY_PDL=0; then the layer at world 1 (GPU 0), 4,096 tokens, both weights.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
SY_BENCH_TIMELINE=$OUT/tl.%r.txt timeout 200 /tmp/x/bin/syrun -n $n /tmp/x/bin/sy-bench --no-nccl --recv arena -n 3 -w 2 \
  --tokens 16384 --layers 4 layer >/tmp/layer.txt 2>&1
echo "== timeline rc=$?" >>$s
grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong" /tmp/layer.txt >>$s
gzip $OUT/tl.*.txt
run() { # RANKS TOKENS [ARGS...]
  local r=$1 t=$2 t0=$SECONDS
  shift 2
  timeout 200 /tmp/x/bin/syrun -n $r /tmp/x/bin/sy-bench --no-nccl --recv arena --tokens $t "$@" layer >/tmp/layer.txt 2>&1
  echo "== layer $t world $r $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|off the|of which|exposed|hides|WARN|rror" \
    /tmp/layer.txt | sed 's/\[rank 0\]//' | head -40 >>$s
}
SY_PDL=0 run $n 16384 --layers 4 -n 10 -w 3
run 1 4096
run 1 4096 --expert-weights shared
cat $s
