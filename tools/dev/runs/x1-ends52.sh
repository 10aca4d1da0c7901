#!/usr/bin/env bash
# x1-ends52.sh — run 52, call 3 (one GPU). Issue 21 at world 1: the step's ends (the first group's layout and
# dispatch, the last group's combine: nothing beside them) on an object of their own with more SMs (sy-bench layer
# --end-sms N), 1,6,6,1 expert groups, 4,096 tokens, one layer, unchecked (-c 0; call 2 checked 132): none, 132, 64,
# then 64, 132, none, each with ways comm, compute, b, c, b, c at 20 passes a way. Then a CUPTI timeline of way b
# with --end-sms 132 ($OUT/tl_ends.txt) for the head and the tail.
. tools/dev/variant.sh # build_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=24G
build_tree /tmp/h . ""
echo "build done at $SECONDS s" >>$s
lay() { # lay LABEL ARGS...
  local label=$1 t0=$SECONDS
  shift
  timeout 100 /tmp/h/bin/syrun -n 1 /tmp/h/bin/sy-bench --no-nccl --recv arena --tokens 4096 -n 20 -w 2 -c 0 \
    --split experts --micro-batches 1,6,6,1 --ways comm,compute,b,c,b,c "$@" layer >/tmp/layer.txt 2>&1
  echo "== layer $label rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|target|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -20 >>$s
}
for e in 0 132 64 64 132 0; do
  [ $SECONDS -lt 500 ] || break
  if [ $e = 0 ]; then lay "ends on the layer's object (16 SMs)"; else lay "--end-sms $e" --end-sms $e; fi
done
if [ $SECONDS -lt 560 ]; then
  SY_BENCH_TIMELINE=$OUT/tl_ends.txt timeout 40 /tmp/h/bin/syrun -n 1 /tmp/h/bin/sy-bench --no-nccl --recv arena \
    --tokens 4096 -n 3 -w 2 -c 0 --split experts --micro-batches 1,6,6,1 --end-sms 132 --ways b layer >/dev/null 2>&1
  echo "== timeline 1,6,6,1 --end-sms 132 rc=$? at $SECONDS s" >>$s
fi
cat $s
