#!/usr/bin/env bash
# Not run in run 51 (2 × H200 not lent that session): ready for a session with two GPUs.
# x2-add51.sh — run 51, call 4 (2 × H200): sy_moe_ht_combine_add across a link. test_gpu_moe_ht (head) at 2 ranks on
# two GPUs (the add bit for bit against the host backend, partials from a peer's ring); moe-ht world 2, 4,096
# tokens, arena, BF16 combine and dispatch_bwd, base (ab/base, 626f929) head head base; the layer at world 2 by two
# expert groups (one layer, -c 0), --group-sum add against kernel (add kernel kernel add), ways comm,compute,b,c.
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/b ab/base "" &
build_tree /tmp/h . ""
wait
echo "builds done at $SECONDS s" >>$s
test_ht /tmp/h w2 2 "" SY_HT_OWN_QUEUE=-1
grep -E "wrong|FAIL|differ" /tmp/t_w2.txt | head -5 >>$s
for v in b h h b; do
  timeout 60 /tmp/$v/bin/syrun -n 2 /tmp/$v/bin/sy-bench --no-nccl -c 0 --tokens 4096 --recv arena --wire bf16 moe-ht \
    >/tmp/r.txt 2>&1
  echo "== world 2, 16 SMs ($v) rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]+ +bf16 +(combine|dispatch_bwd) |rror" /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
done
echo "A/B done at $SECONDS s" >>$s
for gs in add kernel kernel add; do
  [ $SECONDS -lt 500 ] || break
  t0=$SECONDS
  timeout 100 /tmp/h/bin/syrun -n 2 /tmp/h/bin/sy-bench --no-nccl --recv arena --tokens 4096 -n 10 -w 2 -c 0 \
    --split experts --micro-batches 2 --group-sum $gs --ways comm,compute,b,c layer >/tmp/layer.txt 2>&1
  echo "== layer world 2, 2 groups, $gs rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' >>$s
done
cat $s
