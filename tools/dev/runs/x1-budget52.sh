#!/usr/bin/env bash
# x1-budget52.sh — run 52, call 4 (one GPU). sy_moe_ht_set_num_sms (a call's SM budget below config.num_sms, blocks
# serving several channels in turn): test_gpu_moe_ht at 1 rank and 3 sharing the GPU (three cases with varying
# budgets, the roles kernels at 3 ranks), the Python MoE HT tests; moe-ht at the default budget against the build
# before it (ab/pre, 7642a39), pre head head pre: BF16 at 16 SMs, FP8 at 132. Then the layer (1,6,6,1, 4,096 tokens)
# with the ends on 132 SMs through the API (one object of config.num_sms 132, the other calls at 16): none, 132, 132,
# none, ways comm, compute, b, c, b, c at 20 passes; and 132 checked (ways a, b, c).
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
export SY_HEAP_SIZE=24G
build_tree /tmp/p ab/pre "" &
build_tree /tmp/h . "" &
wait
cmake --build /tmp/h -j 10 --target switchyard >/tmp/build_lib.txt 2>&1 || echo "lib build failed" >>$s
echo "builds done at $SECONDS s" >>$s
test_ht /tmp/h w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/h w3 3 "--gpus 0,0,0" SY_HT_OWN_QUEUE=-1
grep -E "wrong|FAIL|differ|budget|rror" /tmp/t_w1.txt /tmp/t_w3.txt | head -14 >>$s
PYTHONPATH=/tmp/h/python timeout 100 /tmp/h/bin/syrun -n 1 python3 -m pytest tests/python/test_moe_ht.py -q \
  -p no:cacheprovider >/tmp/py1.txt 2>&1
echo "== pytest test_moe_ht.py n=1 rc=$?: $(tail -1 /tmp/py1.txt)" >>$s
echo "tests done at $SECONDS s" >>$s
ht() { # ht V LABEL ARGS...
  local v=$1 label=$2
  shift 2
  timeout 60 /tmp/$v/bin/syrun -n 1 /tmp/$v/bin/sy-bench --no-nccl --tokens 4096 --recv arena "$@" moe-ht >/tmp/r.txt 2>&1
  echo "== $label ($v) rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]+ +(bf16|fp8) +(dispatch|combine|combine_bwd|dispatch_bwd) |rror" /tmp/r.txt |
    sed 's/\[rank 0\]//' >>$s
}
for v in p h h p; do
  ht $v "BF16 world 1, 16 SMs" --wire bf16
  ht $v "FP8 world 1, 132 SMs" --wire fp8 --num-sms 132
done
echo "A/B done at $SECONDS s" >>$s
lay() { # lay LABEL ARGS...
  local label=$1 t0=$SECONDS
  shift
  timeout 100 /tmp/h/bin/syrun -n 1 /tmp/h/bin/sy-bench --no-nccl --recv arena --tokens 4096 --split experts "$@" \
    layer >/tmp/layer.txt 2>&1
  echo "== layer $label rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|target|correct|wrong|rror|end-sms" /tmp/layer.txt | sed 's/\[rank 0\]//' |
    head -20 >>$s
}
T="-n 20 -w 2 -c 0 --ways comm,compute,b,c,b,c"
for e in 0 132 132 0; do
  [ $SECONDS -lt 470 ] || break
  if [ $e = 0 ]; then lay "1,6,6,1, ends at 16 SMs" --micro-batches 1,6,6,1 $T
  else lay "1,6,6,1, --end-sms $e" --micro-batches 1,6,6,1 --end-sms $e $T; fi
done
[ $SECONDS -lt 530 ] && lay "1,6,6,1 --end-sms 132 checked" --micro-batches 1,6,6,1 --end-sms 132 -n 3 -w 2 --ways a,b,c
cat $s
