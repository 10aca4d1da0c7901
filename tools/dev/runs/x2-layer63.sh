#!/usr/bin/env bash
# x2-layer63.sh — run 63, call 2 (two GPUs, ~5 minutes). The dispatch now pulls by default from world 2 (call 1: every
# moe-ht test, the faults, the examples and the Python package passed on it). Here: the layer at world 2 (issue 21;
# 4,096 tokens, 2 expert groups, the ends on 132 SMs, 16 SMs beside the GEMMs, recv in the arena) pulled (default)
# against pushed (SY_HT_PULL=0), then a checked pass pulled, then the pull's probe at world 2 (4,096 tokens, BF16,
# 16 SMs: where its 560 us go against pullx's 514).
. tools/dev/variant.sh
dev_start summary.txt
export SY_HEAP_SIZE=24G # (the layer's objects at 132 SMs: run 59 call 3 failed on the default 1 GiB, as did call 2 here)
build_main
B=build/bin R=2 G=""
[ "$n" -lt 2 ] && G="--gpus 0,0"
lay() { # LABEL ENV... -- ARGS...
  local label=$1 t0=$SECONDS; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 150 $B/syrun -n $R $G $B/sy-bench --no-nccl --recv arena --tokens 4096 --split experts \
    --micro-batches 2 --end-sms 132 -n 20 -w 2 "$@" layer >/tmp/layer.txt 2>&1
  echo "== layer $label rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|against way s|target|correct|wrong|rror|ERR|heap" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -24 >>$s
}
lay "16 SMs, pulled (default)" X=0 -- --num-sms 16 -c 0 --ways comm,compute,s,b,c,s,b,c
lay "16 SMs, pushed (SY_HT_PULL=0)" SY_HT_PULL=0 -- --num-sms 16 -c 0 --ways comm,compute,s,b,c,s,b,c
lay "16 SMs, pulled, checked" X=0 -- --num-sms 16 -n 3 --ways a,s,b,c
echo "end at $SECONDS s" >>$s
cat $s
