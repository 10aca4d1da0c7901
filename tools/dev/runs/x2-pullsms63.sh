#!/usr/bin/env bash
# x2-pullsms63.sh — run 63, call 3 (two GPUs, ~3 minutes). Call 2: in the layer at world 2 (whose first dispatch runs
# on 132 SMs) the communication took 1,688 us pulled against 1,635 pushed. Here the dispatch pulled (default) against
# pushed (SY_HT_PULL=0) by SM budget at world 2: 48, 64, 132 SMs, BF16 and FP8, 4,096 tokens, recv in the arena,
# a b b a at 132.
. tools/dev/variant.sh
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_main
R=2 G=""
[ "$n" -lt 2 ] && G="--gpus 0,0"
P() { # LABEL PULL ARGS...
  local label=$1 p=$2; shift 2
  SY_HT_PULL=$p timeout 100 build/bin/syrun -n $R $G build/bin/sy-bench --no-nccl --tokens 4096 --recv arena "$@" \
    moe-ht >/tmp/r.txt 2>&1
  echo "== $label rc=$?" >>$s
  grep -E " dispatch |rror|ERR" /tmp/r.txt | sed 's/\[rank 0\]//' | grep -v "^\[rank" >>$s
}
for m in 132 48 64; do
  P "pull, $m SMs" -1 --num-sms $m
  P "push, $m SMs" 0 --num-sms $m
done
P "push, 132 SMs" 0 --num-sms 132
P "pull, 132 SMs" -1 --num-sms 132
echo "end at $SECONDS s" >>$s
cat $s
