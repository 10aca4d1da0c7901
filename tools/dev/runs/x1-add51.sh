#!/usr/bin/env bash
# x1-add51.sh — run 51, call 2 (one GPU): sy_moe_ht_combine_add (the combine adding into out; pipe_gather's one more
# source) against the base (ab/base, 626f929). moe-ht world 1, 4,096 tokens, arena, the combine's and dispatch_bwd's
# rows at 16 and 132 SMs (BF16), base head head base: the plain combine must not lose. test_gpu_moe_ht (head) at 1
# rank and 3 sharing the GPU (combine_add against the host backend, bit for bit). The layer at world 1 by expert
# groups (4 and 1,6,6,1; one layer, -c 0): --group-sum add (each group's combine after the first adds into the output)
# against kernel (partial outputs and a sum kernel after the last), then add checked (ways a, b, c against the CPU
# reference) and a CUPTI timeline of 1,6,6,1's way b with add ($OUT/tl_add.txt).
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
  timeout 100 /tmp/h/bin/syrun -n 1 /tmp/h/bin/sy-bench --no-nccl --recv arena --tokens 4096 -n 10 -w 2 "$@" \
    layer >/tmp/layer.txt 2>&1
  echo "== layer $label: $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -30 >>$s
}
W="--ways comm,compute,gemms,b,c"
for g in 4 1,6,6,1; do
  for gs in add kernel; do [ $SECONDS -lt 480 ] && lay "$g $gs" -c 0 --split experts --micro-batches $g --group-sum $gs $W; done
done
[ $SECONDS -lt 520 ] && lay "4 add checked" --split experts --micro-batches 4 --group-sum add --ways a,b,c
if [ $SECONDS -lt 560 ]; then
  SY_BENCH_TIMELINE=$OUT/tl_add.txt timeout 40 /tmp/h/bin/syrun -n 1 /tmp/h/bin/sy-bench --no-nccl --recv arena \
    --tokens 4096 -n 3 -w 2 -c 0 --split experts --micro-batches 1,6,6,1 --ways b layer >/dev/null 2>&1
  echo "== timeline 1,6,6,1 add rc=$? at $SECONDS s" >>$s
fi
cat $s
