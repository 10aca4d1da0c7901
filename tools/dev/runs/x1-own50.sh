#!/usr/bin/env bash
# x1-own50.sh — run 50, call 2: the own-token queue a token a ticket, each warp on its own once the ring work is done
# (own_drain), and the combine's owners reading a token's ids together (plan_batch), against the base (ab/base,
# 1467ea9). Call 1 put a layer group's dispatch at 149 µs for 7% of the rows (108 of it 16-token chunks as long as
# their slowest token) and the combine's owners 126 µs planning. (1) moe-ht, world 1, 4,096 tokens, BF16, 16 SMs,
# arena, keep 1 / 0.25 / 0.0704, base new new base, and FP8 at keep 1; (2) the probe of the new build at keep 0.0704
# and 0.25; (3) the layer at world 1, 4,096 tokens, 4 expert groups and 1,4,4,1, each build; (4) tests: the new
# build's test_gpu_moe_ht at 1 rank (default, static, queue) and 3 ranks sharing the GPU, and the layer checked.
. tools/dev/variant.sh # build_tree, dev_start, probe_tree, test_ht, layer_marked
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/b ab/base ""
build_tree /tmp/x . ""
declare -A dir=([base]=/tmp/b [new]=/tmp/x)
ht() { # ht V LABEL ARGS...
  local d=${dir[$1]} label=$2
  shift 2
  timeout 60 $d/bin/syrun -n 1 $d/bin/sy-bench --no-nccl -c 0 --tokens 4096 --recv arena "$@" moe-ht >/tmp/r.txt 2>&1
  echo "== $label ($1) rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]+ +(bf16|fp8)|rror" /tmp/r.txt | grep -v layout | sed 's/\[rank 0\]//' >>$s
}
for v in base new new base; do
  for k in 1 0.25 0.0704; do ht $v "keep $k" --wire bf16 --keep-experts $k; done
  ht $v "keep 1, fp8" --wire fp8
done
probe_tree /tmp/x "new, keep 0.0704" 1 --tokens 4096 --wire bf16 --recv arena --keep-experts 0.0704
probe_tree /tmp/x "new, keep 0.25" 1 --tokens 4096 --wire bf16 --recv arena --keep-experts 0.25
lay() { # lay V LABEL ARGS...
  local d=${dir[$1]} label=$2 t0=$SECONDS
  shift 2
  timeout 200 $d/bin/syrun -n 1 $d/bin/sy-bench --no-nccl --recv arena --tokens 4096 -n 30 -w 3 "$@" layer \
    >/tmp/layer.txt 2>&1
  echo "== layer $label ($1): $* rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -30 >>$s
}
W="--ways comm,compute,gemms,a,b,c"
lay new "4 groups" -c 0 --split experts --micro-batches 4 $W
lay base "4 groups" -c 0 --split experts --micro-batches 4 $W
lay new "1,4,4,1" -c 0 --split experts --micro-batches 1,4,4,1 $W
lay base "1,4,4,1" -c 0 --split experts --micro-batches 1,4,4,1 $W
lay new "4 groups, checked" --split experts --micro-batches 4 --ways a,b,c
test_ht /tmp/x w1 1 ""
test_ht /tmp/x w1.static 1 "" SY_HT_OWN_QUEUE=0
test_ht /tmp/x w1.queue 1 "" SY_HT_OWN_QUEUE=1
test_ht /tmp/x w3 3 "--gpus 0,0,0"
test_ht /tmp/x w3.blocks 3 "--gpus 0,0,0" SY_HT_ROLES=0
cat $s
