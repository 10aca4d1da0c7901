#!/usr/bin/env bash
# x2-tl49.sh — run 49, call 4: where an expert-grouped step loses its time. Call 3 found groups small at both ends
# (1,6,6,1 at world 1; 1,6,1 and 1,3,3,1 at world 2) no faster than even ones, so the first dispatch and the last
# combine are not the main loss; here every kernel of the last timed call (SY_BENCH_TIMELINE, CUPTI) of way compute
# and way b: world 1, 4,096 tokens, 1 layer, 4 even groups and 1,6,6,1; world 2, 2 groups (rank 0 and 1).
# Output: $OUT/summary.txt, $OUT/tl_*.txt.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
tl() { # tl NAME RANKS ARGS..
  local name=$1 r=$2 t0=$SECONDS
  shift 2
  SY_BENCH_TIMELINE=$OUT/tl_$name.%r.txt timeout 200 /tmp/x/bin/syrun -n $r /tmp/x/bin/sy-bench --no-nccl \
    --recv arena --tokens 4096 -n 5 -w 2 -c 0 --split experts "$@" layer >/tmp/layer.txt 2>&1
  echo "== tl $name: $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' >>$s
}
tl w1_g4 1 --micro-batches 4 --ways compute,b
tl w1_1661 1 --micro-batches 1,6,6,1 --ways compute,b
tl w2_g2 2 --micro-batches 2 --ways compute,b
ls -la $OUT >>$s
cat $s
