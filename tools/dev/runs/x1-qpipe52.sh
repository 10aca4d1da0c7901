#!/usr/bin/env bash
# x1-qpipe52.sh — run 52, call 2 (one GPU). The FP8 quantisation pipelined (warp_quantise's PIPE: the next pass's
# loads in flight across this pass's stores) as landed (h: PIPE 1 in the kernels with one role a block and in the
# quantise-ahead kernel) and with PIPE 2 (h2: -DSY_HT_QPIPE=2), against the base (ab/base52, 2682cd3): FP8 dispatch at
# world 1, 132 and 16 SMs; quantised ahead (SY_HT_PREQUANT=1: the form every rank takes from world 2) at 16 SMs; h's
# row-major scales at 132 SMs. Then the layer's ends on their own object (--end-sms 132), checked against the CPU
# reference (ways a, b, c), 1,6,6,1 groups.
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
export SY_HEAP_SIZE=24G
build_tree /tmp/b ab/base52 "" &
build_tree /tmp/h . "" &
build_tree /tmp/h2 . "-DSY_HT_QPIPE=2" &
wait
echo "builds done at $SECONDS s" >>$s
ht() { # ht V LABEL ARGS...
  local v=$1 label=$2
  shift 2
  timeout 60 /tmp/$v/bin/syrun -n 1 /tmp/$v/bin/sy-bench --no-nccl --tokens 4096 --wire fp8 "$@" moe-ht >/tmp/r.txt 2>&1
  echo "== $label ($v) rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]+ +fp8 +dispatch |rror" /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
}
for v in b h h2 h b; do ht $v "FP8 world 1, 132 SMs" --num-sms 132; done
for v in b h h2 h b; do ht $v "FP8 world 1, 16 SMs"; done
for v in b h h2 h b; do SY_HT_PREQUANT=1 ht $v "FP8 world 1, 16 SMs, quantised ahead"; done
ht h "FP8 world 1, 132 SMs, row-major scales" --num-sms 132 --scales row
ht b "FP8 world 1, 132 SMs, row-major scales" --num-sms 132 --scales row
echo "A/B done at $SECONDS s" >>$s
test_ht /tmp/h2 w1q2 1 "" SY_HT_OWN_QUEUE=-1
grep -E "wrong|FAIL|differ" /tmp/t_w1q2.txt | head -5 >>$s
t0=$SECONDS
timeout 150 /tmp/h/bin/syrun -n 1 /tmp/h/bin/sy-bench --no-nccl --recv arena --tokens 4096 -n 3 -w 2 --split experts \
  --micro-batches 1,6,6,1 --end-sms 132 --ways a,b,c layer >/tmp/layer.txt 2>&1
echo "== layer 1,6,6,1 --end-sms 132 checked rc=$? ($((SECONDS - t0)) s)" >>$s
grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|rror|end-sms" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -20 >>$s
cat $s
