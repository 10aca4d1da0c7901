#!/usr/bin/env bash
# x2-pullsms63b.sh — run 63, call 4 (two GPUs, ~5 minutes). Call 3: the BF16 dispatch pulled is slower in event time
# than pushed at 132 SMs (its tokens' copy), faster or level to 64; FP8 pulled faster at every budget. Now by default
# a BF16 / given-FP8 call above SY_HT_PULL_SMS (64) SMs pushes, per call, on an object that pulls. Here:
# (1) test_gpu_moe_ht at 2 ranks: default, SY_HT_PULL_SMS=4 (the budget cases' dispatches pull and push in turn on
#     one object), and at 3 ranks sharing GPU 0 with SY_HT_PULL_SMS=4;
# (2) moe-ht at 132 and 16 SMs by default (BF16 should read as pushed at 132, pulled at 16);
# (3) the layer at world 2 as call 2 (its 132-SM ends now push, its 16-SM calls pull).
. tools/dev/variant.sh
dev_start summary.txt
export SY_HEAP_SIZE=24G
build_main
B=build/bin R=2 G=""
[ "$n" -lt 2 ] && G="--gpus 0,0"
test_ht build w2.default 2 "$G"
test_ht build w2.pullsms4 2 "$G" SY_HT_PULL_SMS=4
test_ht build w3s.pullsms4 3 "--gpus 0,0,0" SY_HT_PULL_SMS=4
for m in 132 16; do
  timeout 100 $B/syrun -n $R $G $B/sy-bench --no-nccl --tokens 4096 --recv arena --num-sms $m moe-ht >/tmp/r.txt 2>&1
  echo "== moe-ht default, $m SMs rc=$?" >>$s
  grep -E "dispatch (pulled|pushed)| dispatch |rror|ERR" /tmp/r.txt | sed 's/\[rank 0\]//' | grep -v "^\[rank" >>$s
done
env timeout 150 $B/syrun -n $R $G $B/sy-bench --no-nccl --recv arena --tokens 4096 --split experts \
  --micro-batches 2 --end-sms 132 -n 20 -w 2 --num-sms 16 -c 0 --ways comm,compute,s,b,c,s,b,c layer >/tmp/layer.txt 2>&1
echo "== layer 16 SMs, default (ends pushed, 16-SM calls pulled) rc=$?" >>$s
grep -E "^\[rank 0\] +(prefill|backward)|against way s|target|correct|wrong|rror|ERR|heap" /tmp/layer.txt |
  sed 's/\[rank 0\]//' | head -24 >>$s
echo "end at $SECONDS s" >>$s
cat $s
