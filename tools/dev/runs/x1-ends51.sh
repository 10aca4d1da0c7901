#!/usr/bin/env bash
# x1-ends51.sh — ready for the next session (run 51): the layer's unhidden ends at world 1 now that a small group's
# dispatch and combine cost about their rows (run 50: 7% of the experts, dispatch 83 µs, combine 164). Run 49 measured
# groups by weight no faster while a group's calls had a floor a token; here: 4, 1,4,4,1, 1,6,6,1, 1,8,8,1 and
# 1,3,3,3,3,1 expert groups (4,096 tokens, one layer, ways comm,compute,gemms,b,c, -c 0), then 1,6,6,1 checked, then
# a CUPTI timeline of 1,6,6,1's way b (SY_BENCH_TIMELINE) to read the head (first layout and dispatch) and the tail
# (last combine and the groups' sum). Output: $OUT/summary.txt, $OUT/tl_1661.txt.*.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/x . ""
lay() { # lay LABEL ARGS...
  local label=$1 t0=$SECONDS
  shift
  timeout 120 /tmp/x/bin/syrun -n 1 /tmp/x/bin/sy-bench --no-nccl --recv arena --tokens 4096 -n 20 -w 3 "$@" layer \
    >/tmp/layer.txt 2>&1
  echo "== layer $label: $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -30 >>$s
}
W="--ways comm,compute,gemms,b,c"
for g in 4 1,4,4,1 1,6,6,1 1,8,8,1 1,3,3,3,3,1; do lay "$g" -c 0 --split experts --micro-batches $g $W; done
lay "1,6,6,1 checked" --split experts --micro-batches 1,6,6,1 --ways a,b,c
SY_BENCH_TIMELINE=$OUT/tl_1661.txt timeout 120 /tmp/x/bin/syrun -n 1 /tmp/x/bin/sy-bench --no-nccl --recv arena \
  --tokens 4096 -n 3 -w 2 -c 0 --split experts --micro-batches 1,6,6,1 --ways b layer >/dev/null 2>&1
echo "== timeline 1,6,6,1 rc=$?" >>$s
cat $s
