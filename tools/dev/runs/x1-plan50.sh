#!/usr/bin/env bash
# x1-plan50.sh — run 50, call 5: the combine's owners planning a batch by lanes (a token's ranks as bits, the
# messages' indices a pass per rank) against ab/head (4485e6b: thread 0 gave every index in turn). Call 2's probe put
# the owners' planning at ~7 µs a batch at world 1 (111 of a 184-µs combine at 7% of the rows). moe-ht, world 1, 4,096
# tokens, BF16, 16 SMs, arena, keep 1 / 0.25 / 0.0704, head new new head; the probe of the new build at keep 0.0704;
# the layer at world 1 (4 expert groups, 1,4,4,1), each build; tests at 1 rank and 3 sharing the GPU.
. tools/dev/variant.sh # build_tree, dev_start, probe_tree, test_ht
dev_start summary.txt
export SY_HEAP_SIZE=16G
build_tree /tmp/h ab/head "" &
build_tree /tmp/x . ""
wait
declare -A dir=([head]=/tmp/h [new]=/tmp/x)
ht() { # ht V LABEL ARGS...
  local d=${dir[$1]} label=$2
  shift 2
  timeout 60 $d/bin/syrun -n 1 $d/bin/sy-bench --no-nccl -c 0 --tokens 4096 --recv arena "$@" moe-ht >/tmp/r.txt 2>&1
  echo "== $label ($v) rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]+ +(bf16|fp8) +(combine|dispatch_bwd) |rror" /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
}
for v in head new new head; do
  for k in 1 0.25 0.0704; do ht $v "keep $k" --wire bf16 --keep-experts $k; done
done
probe_tree /tmp/x "new, keep 0.0704" 1 --tokens 4096 --wire bf16 --recv arena --keep-experts 0.0704
test_ht /tmp/x w1 1 ""
test_ht /tmp/x w1.lockstep 1 "" SY_HT_OWNER_AHEAD=0
test_ht /tmp/x w3 3 "--gpus 0,0,0"
test_ht /tmp/x w3.blocks 3 "--gpus 0,0,0" SY_HT_ROLES=0
lay() { # lay V LABEL ARGS...
  local d=${dir[$1]} label=$2 t0=$SECONDS
  shift 2
  timeout 120 $d/bin/syrun -n 1 $d/bin/sy-bench --no-nccl --recv arena --tokens 4096 -n 20 -w 3 "$@" layer \
    >/tmp/layer.txt 2>&1
  echo "== layer $label ($v): rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|correct|wrong|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -30 >>$s
}
for v in new head; do lay $v "4 groups" -c 0 --split experts --micro-batches 4; done
for v in new head; do lay $v "1,4,4,1" -c 0 --split experts --micro-batches 1,4,4,1; done
cat $s
