#!/usr/bin/env bash
# x1-share51.sh — run 51, call 1 (one GPU): the own-token queue's tickets shared by a block's warps (ticket_share,
# SY_HT_OWN_SHARE tickets a run: 16 here, 8 in /tmp/s8) against the base (ab/base, 626f929: a warp draws each ticket
# from the queue's one counter). Run 50: a ticket a warp from one counter took the world-1 FP8 dispatch at 132 SMs
# 116.9 -> 120.5 µs. moe-ht, 4,096 tokens, arena, dispatch rows: world 1 at 132 SMs (both wires), at 16 SMs (BF16,
# keep 1 and 0.0704); variants b s16 s8, then back. Then test_gpu_moe_ht (s16) at 1 rank and 3 sharing the GPU; then
# the layer at world 1 by expert groups (4, 1,6,6,1; one layer, -c 0) and a CUPTI timeline of 1,6,6,1's way b
# (SY_BENCH_TIMELINE, $OUT/tl_1661.txt). Each step after the A/B only while the call has time left.
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/b ab/base "" &
build_tree /tmp/s16 . "" &
build_tree /tmp/s8 . "-DSY_HT_OWN_SHARE=8"
wait
echo "builds done at $SECONDS s" >>$s
ht() { # ht V LABEL ARGS...
  local d=/tmp/$1 label=$2
  shift 2
  timeout 60 $d/bin/syrun -n 1 $d/bin/sy-bench --no-nccl -c 0 --tokens 4096 --recv arena "$@" moe-ht >/tmp/r.txt 2>&1
  echo "== $label ($v) rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]+ +(bf16|fp8) +dispatch |rror" /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
}
for v in b s16 s8 s8 s16 b; do
  ht $v "world 1, 132 SMs" --num-sms 132
  ht $v "world 1, 16 SMs" --wire bf16
  ht $v "world 1, 16 SMs, keep 0.0704" --wire bf16 --keep-experts 0.0704
done
echo "A/B done at $SECONDS s" >>$s
test_ht /tmp/s16 w1 1 "" SY_HT_OWN_QUEUE=1
test_ht /tmp/s16 w3 3 "--gpus 0,0,0" SY_HT_OWN_QUEUE=1
echo "tests done at $SECONDS s" >>$s
lay() { # lay LABEL ARGS...
  local label=$1 t0=$SECONDS
  shift
  timeout 100 /tmp/s16/bin/syrun -n 1 /tmp/s16/bin/sy-bench --no-nccl --recv arena --tokens 4096 -n 10 -w 2 "$@" \
    layer >/tmp/layer.txt 2>&1
  echo "== layer $label: $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -30 >>$s
}
W="--ways comm,compute,gemms,b,c"
for g in 4 1,6,6,1; do [ $SECONDS -lt 470 ] && lay "$g" -c 0 --split experts --micro-batches $g $W; done
if [ $SECONDS -lt 530 ]; then
  SY_BENCH_TIMELINE=$OUT/tl_1661.txt timeout 60 /tmp/s16/bin/syrun -n 1 /tmp/s16/bin/sy-bench --no-nccl --recv arena \
    --tokens 4096 -n 3 -w 2 -c 0 --split experts --micro-batches 1,6,6,1 --ways b layer >/dev/null 2>&1
  echo "== timeline 1,6,6,1 rc=$? at $SECONDS s" >>$s
fi
cat $s
