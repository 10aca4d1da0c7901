#!/usr/bin/env bash
# x4-own50.sh — run 50, call 3 (4 GPUs): the own-token queue a ticket a token with each warp draining it on its own
# (4485e6b) against the base (ab/base, 1467ea9), where the own rows share the SMs with the rings. (1) moe-ht at world
# $n, 4,096 tokens, 16 SMs, arena, BF16 and FP8, base new new base (kernel µs); (2) the new build's issue-19 table with
# NCCL beside (4,096 and 8,192 tokens, arena); (3) world 1 at 132 SMs, base new new base (the one-GPU targets); (4) the
# layer at world $n, 4,096 tokens, 2 expert groups, ways comm,compute,a,c, new then base; (5) tests at $n ranks.
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_tree /tmp/b ab/base "" &
build_tree /tmp/x . ""
wait
declare -A dir=([base]=/tmp/b [new]=/tmp/x)
ht() { # ht V RANKS LABEL ARGS...
  local d=${dir[$1]} r=$2 label=$3
  shift 3
  timeout 90 $d/bin/syrun -n $r $d/bin/sy-bench --no-nccl -c 0 --tokens 4096 --recv arena "$@" moe-ht >/tmp/r.txt 2>&1
  echo "== $label ($v) rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]+ +(bf16|fp8)|rror" /tmp/r.txt | grep -v layout | sed 's/\[rank 0\]//' >>$s
}
for v in base new new base; do ht $v $n "world $n, 16 SMs"; done
test_ht /tmp/x w$n $n ""
test_ht /tmp/x w$n.queue $n "" SY_HT_OWN_QUEUE=1
timeout 200 /tmp/x/bin/syrun -n $n /tmp/x/bin/sy-bench --recv arena --json $OUT/ht_w$n.json moe-ht >/tmp/tab.txt 2>&1
echo "== moe-ht world $n, 16 SMs, NCCL beside, arena (new) rc=$?" >>$s
grep -E " (layout|dispatch|combine|combine_bwd|dispatch_bwd) " /tmp/tab.txt | sed 's/\[rank 0\]//' >>$s
for v in base new new base; do ht $v 1 "world 1, 132 SMs" --num-sms 132; done
lay() { # lay V ARGS...
  local d=${dir[$1]} t0=$SECONDS
  shift
  timeout 150 $d/bin/syrun -n $n $d/bin/sy-bench --no-nccl --recv arena --tokens 4096 -n 10 -w 2 "$@" layer \
    >/tmp/layer.txt 2>&1
  echo "== layer world $n ($v): $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -20 >>$s
}
for v in new base; do lay $v -c 0 --layers 4 --split experts --micro-batches 2 --ways comm,compute,a,c; done
cat $s
