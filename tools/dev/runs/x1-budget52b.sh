#!/usr/bin/env bash
# x1-budget52b.sh — run 52, call 5 (one GPU). At world 1 a call below config.num_sms now cuts the tokens into its own
# channels (data_channels in launch.cu) instead of serving the object's in turn: test_gpu_moe_ht at 1 rank (the
# budget cases), then the layer as in call 4 (1,6,6,1, 4,096 tokens; ends at 16 SMs on an object of 16, then
# --end-sms 132 on an object of 132 whose other calls take 16), none, 132, 132, none, 20 passes a way, and 132
# checked (ways a, b, c).
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
export SY_HEAP_SIZE=24G
build_tree /tmp/h . ""
echo "build done at $SECONDS s" >>$s
test_ht /tmp/h w1 1 "" SY_HT_OWN_QUEUE=-1
grep -E "wrong|FAIL|differ|budgets |rror" /tmp/t_w1.txt | head -6 >>$s
lay() { # lay LABEL ARGS...
  local label=$1 t0=$SECONDS
  shift
  timeout 100 /tmp/h/bin/syrun -n 1 /tmp/h/bin/sy-bench --no-nccl --recv arena --tokens 4096 --split experts "$@" \
    layer >/tmp/layer.txt 2>&1
  echo "== layer $label rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|target|correct|wrong|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' |
    head -20 >>$s
}
T="-n 20 -w 2 -c 0 --ways comm,compute,b,c,b,c"
for e in 0 132 132 0; do
  [ $SECONDS -lt 330 ] || break
  if [ $e = 0 ]; then lay "1,6,6,1, ends at 16 SMs" --micro-batches 1,6,6,1 $T
  else lay "1,6,6,1, --end-sms $e" --micro-batches 1,6,6,1 --end-sms $e $T; fi
done
[ $SECONDS -lt 380 ] && lay "1,6,6,1 --end-sms 132 checked" --micro-batches 1,6,6,1 --end-sms 132 -n 3 -w 2 --ways a,b,c
cat $s
