#!/usr/bin/env bash
# x4-pull64.sh — ready for a session with four GPUs (~9 minutes; works at two): the dispatch pulls by default from world
# 2 since run 63 (measured at world 2 only; the design's ceiling at world 4: 546 us at 16 SMs against the push's 743,
# run 60). Here, stopping at the first failure:
# (1) test_gpu_moe_ht at $n GPUs by default (pulled), SY_HT_PULL=0, SY_HT_PULL_SMS=4 (one object's dispatches pulling
#     and pushing in turn), SY_HT_ROLES=0;
# (2) moe-ht at world $n, 16 SMs, 4,096 tokens, recv in the arena, no NCCL: pulled (default) / pushed (SY_HT_PULL=0)
#     a b b a; then 24, 32, 64 and 132 SMs both ways (BF16 above 64 SMs pushes by default: SY_HT_PULL=1 forces the
#     pull there, to see where the rule should sit at world $n);
# (3) issue 19's table at world $n with NCCL beside (the default), its JSON to $OUT;
# (4) the layer at world $n (4,096 tokens, 2 expert groups, 16 SMs, the ends on 132), default against SY_HT_PULL=0.
. tools/dev/variant.sh
dev_start summary.txt
export SY_HEAP_SIZE=24G
build_main
B=build/bin
ok=1
for v in "" SY_HT_PULL=0 SY_HT_PULL_SMS=4 SY_HT_ROLES=0; do
  [ $ok = 1 ] || break
  test_ht build "w$n.${v:-default}" $n "" $v
  grep -q "rc=0" <(tail -1 $s) || ok=0
done
P() { # LABEL PULL ARGS...
  local label=$1 p=$2; shift 2
  SY_HT_PULL=$p timeout 120 $B/syrun -n $n $B/sy-bench --no-nccl --tokens 4096 --recv arena "$@" moe-ht >/tmp/r.txt 2>&1
  echo "== $label rc=$?" >>$s
  grep -E "dispatch (pulled|pushed)| dispatch |rror|ERR" /tmp/r.txt | sed 's/\[rank 0\]//' | grep -v "^\[rank" >>$s
}
if [ $ok = 1 ]; then
  P "pulled, 16 SMs" -1 --num-sms 16; P "pushed, 16 SMs" 0 --num-sms 16
  P "pushed, 16 SMs" 0 --num-sms 16; P "pulled, 16 SMs" -1 --num-sms 16
  for m in 24 32 64 132; do P "pulled, $m SMs" 1 --num-sms $m; P "pushed, $m SMs" 0 --num-sms $m; done
  timeout 200 $B/syrun -n $n $B/sy-bench --recv arena --json $OUT/ht_w${n}.json moe-ht >/tmp/r.txt 2>&1
  echo "== world $n, 16 SMs, arena, NCCL beside, default rc=$?" >>$s
  grep -E "dispatch (pulled|pushed)| (layout|dispatch|combine|combine_bwd|dispatch_bwd) |rror|ERR" /tmp/r.txt |
    sed 's/\[rank 0\]//' | grep -v "^\[rank" | head -26 >>$s
  for p in -1 0; do
    SY_HT_PULL=$p timeout 150 $B/syrun -n $n $B/sy-bench --no-nccl --recv arena --tokens 4096 --split experts \
      --micro-batches 2 --end-sms 132 -n 20 -w 2 --num-sms 16 -c 0 --ways comm,compute,s,b,c,s,b,c layer \
      >/tmp/layer.txt 2>&1
    echo "== layer world $n, 16 SMs, SY_HT_PULL=$p rc=$?" >>$s
    grep -E "^\[rank 0\] +(prefill|backward)|against way s|target|correct|wrong|rror|ERR|heap" /tmp/layer.txt |
      sed 's/\[rank 0\]//' | head -24 >>$s
  done
fi
echo "end at $SECONDS s" >>$s
cat $s
