#!/usr/bin/env bash
# x4-pull60c.sh — run 60, call 3 (four GPUs, ~7 minutes). Call 2: SY_HT_PULL correct (test_gpu_moe_ht at 4 GPUs
# and 3 sharing a GPU, both forms) but slower: BF16 dispatch 747 us pushed, 979-985 pulled by loads, 1,218 by bulk
# copies (pullx's ceiling: 546). Here:
# (1) where the time goes: SY_HT_PROBE at world 4 (4,096 tokens, BF16, 16 SMs), push / pull 1 / pull 2;
# (2) rings of 256 slots (a round takes up to 128 messages from a peer: fewer rounds, each waiting for its slowest
#     pull): push and pull 2;
# (3) the layer at world 4 (issue 21's four-GPU target: 4,096 tokens, 2 expert groups, the ends on 132 SMs), ways
#     comm, compute, s, b, c;
# (4) GPU 0, world 1: the decode step's replayed host time with NVSHMEM's proxy thread (default) and without it
#     (NVSHMEM_DISABLE_LOCAL_ONLY_PROXY=1, NVSHMEM_REMOTE_TRANSPORT=none), alternating over 6 processes.
# Measured slower (bench/NOTES.md, run 60) and dropped after this call: to rerun, apply
# tools/dev/patches/ht-pull.patch (against 328274f).
. tools/dev/variant.sh # dev_start, bench_tree, probe_tree, build_tree
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_tree /tmp/r256 . "-DSY_MOE_HT_RING_SLOTS=256" &
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
wait
echo "build done at $SECONDS s" >>$s
for p in 0 1 2; do
  SY_HT_PULL=$p probe_tree build "world $n, 4,096 tokens BF16, 16 SMs, pull $p" $n --tokens 4096 --wire bf16 --recv arena
done
echo "probes done at $SECONDS s" >>$s
for p in 0 2; do
  SY_HT_PULL=$p bench_tree /tmp/r256 "world $n, 16 SMs, rings of 256, pull $p" $n "dispatch" --tokens 4096 --wire bf16 \
    --recv arena
done
echo "rings done at $SECONDS s" >>$s
t0=$SECONDS
SY_HEAP_SIZE=24G timeout 170 build/bin/syrun -n $n build/bin/sy-bench --no-nccl --recv arena --tokens 4096 --split experts \
  --micro-batches 2 --end-sms 132 -n 20 -w 2 --num-sms 16 -c 0 --ways comm,compute,s,b,c --json $OUT/layer_w$n.json \
  layer >/tmp/layer.txt 2>&1
echo "== layer world $n, 4,096 tokens, 2 groups, 16 SMs, ends on 132 rc=$? ($((SECONDS - t0)) s)" >>$s
grep -E "^\[rank 0\] +(prefill|backward)|against way s|target|correct|wrong|rror|heap" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -24 >>$s
echo "layer done at $SECONDS s" >>$s
NOPROXY="NVSHMEM_DISABLE_LOCAL_ONLY_PROXY=1 NVSHMEM_REMOTE_TRANSPORT=none"
for i in 1 2 3 4 5 6; do
  [ $SECONDS -gt 470 ] && break
  if [ $((i % 2)) = 1 ]; then how=default; e=X=0; else how="no proxy"; e=$NOPROXY; fi
  env $e CUDA_VISIBLE_DEVICES=0 timeout 40 build/bin/syrun -n 1 build/bin/sy-bench --no-nccl --tokens 128 --settle 0 \
    --ways c,a layer >/tmp/d.txt 2>&1
  echo "decode $i ($how) rc=$?: $(grep -E '^\[rank 0\] +decode +128 +[ca] ' /tmp/d.txt | awk '{printf "%s step %s host %s; ", $5, $6, $7}')" >>$s
done
echo "end at $SECONDS s" >>$s
cat $s
