#!/usr/bin/env bash
# x1-add51b.sh — run 51, call 3 (one GPU): sy_moe_ht_combine_add with out's row as one more entry of the pipe's
# table (call 2's extra pipe source cost the plain combine at 16 SMs +5%) against the base (ab/base, 626f929):
# moe-ht world 1, 4,096 tokens, arena, BF16 combine and dispatch_bwd at 16 and 132 SMs, base head head base;
# test_gpu_moe_ht (head) at 1 rank and 3 sharing the GPU; the layer at world 1 by expert groups (4 and 1,6,6,1, one
# layer, -c 0), --group-sum add against kernel in the order add kernel kernel add, ways comm,compute,b,c.
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/b ab/base "" &
build_tree /tmp/h . ""
wait
echo "builds done at $SECONDS s" >>$s
ht() { # ht V LABEL ARGS...
  local d=/tmp/$1 label=$2
  shift 2
  timeout 60 $d/bin/syrun -n 1 $d/bin/sy-bench --no-nccl -c 0 --tokens 4096 --recv arena --wire bf16 "$@" moe-ht \
    >/tmp/r.txt 2>&1
  echo "== $label ($v) rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]+ +(bf16|fp8) +(combine|dispatch_bwd) |rror" /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
}
for v in b h h b; do
  ht $v "world 1, 16 SMs"
  ht $v "world 1, 132 SMs" --num-sms 132
done
echo "A/B done at $SECONDS s" >>$s
test_ht /tmp/h w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/h w3 3 "--gpus 0,0,0" SY_HT_OWN_QUEUE=-1
grep -E "wrong|FAIL|differ" /tmp/t_w1.txt /tmp/t_w3.txt | head -5 >>$s
echo "tests done at $SECONDS s" >>$s
lay() { # lay LABEL ARGS...
  local label=$1 t0=$SECONDS
  shift
  timeout 100 /tmp/h/bin/syrun -n 1 /tmp/h/bin/sy-bench --no-nccl --recv arena --tokens 4096 -n 12 -w 2 "$@" \
    layer >/tmp/layer.txt 2>&1
  echo "== layer $label: $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -30 >>$s
}
W="--ways comm,compute,b,c"
for g in 4 1,6,6,1; do
  for gs in add kernel kernel add; do
    [ $SECONDS -lt 540 ] && lay "$g $gs" -c 0 --split experts --micro-batches $g --group-sum $gs $W
  done
done
cat $s
