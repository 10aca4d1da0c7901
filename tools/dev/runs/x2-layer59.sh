#!/usr/bin/env bash
# x2-layer59.sh — run 59, call 3 (two GPUs, ~6 minutes). Call 2 (x2-roles59.sh) found the roles by warps faster at
# world 2 up to 48 SMs; auto now takes them there (SY_HT_ROLES_AUTO_SMS_W2 = 48). Here:
# (1) test_gpu_moe_ht at 2 GPUs with the new auto; moe-ht at 32 SMs with auto (should read as by warps);
# (2) the layer at world 2 (4,096 tokens, 2 expert groups, the ends on 132 SMs): an object of 132 SMs runs its
#     roles by blocks, so the calls beside the GEMMs (16 SMs) ran by blocks too, 13% slower than by warps at 16 (run
#     59 call 2). SY_HT_ROLES=1 (by warps at every budget) against auto at --num-sms 16, and by warps at 32: does the
#     overlap (b, c) then reach way s?
# (3) GPU 0, world 1: the decode step's host time, node priorities on (default) and off (SY_GRAPH_NODE_PRIORITY=0),
#     alternating over 6 processes, every sample (SY_BENCH_ENQUEUE_FILE).
. tools/dev/variant.sh # dev_start, bench_tree
dev_start summary.txt
[ -x build/bin/sy-bench ] || SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
B=build/bin
timeout 90 $B/syrun -n 2 build/tests/gpu/test_gpu_moe_ht >/tmp/t.txt 2>&1
echo "== test_gpu_moe_ht n=2 rc=$? ($(grep -ciE 'pass|ok' /tmp/t.txt) ok lines)" >>$s
tail -3 /tmp/t.txt >>$s
bench_tree build "world 2, 32 SMs, auto" 2 "dispatch|combine" --tokens 4096 --wire bf16 --num-sms 32
lay() { # LABEL ENV... -- ARGS...
  local label=$1 t0=$SECONDS; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 150 $B/syrun -n 2 $B/sy-bench --no-nccl --recv arena --tokens 4096 --split experts \
    --micro-batches 2 --end-sms 132 -n 20 -w 2 "$@" layer >/tmp/layer.txt 2>&1
  echo "== layer $label rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|against way s|target|correct|wrong|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -24 >>$s
}
lay "16 SMs, auto (object by blocks)" X=0 -- --num-sms 16 -c 0 --ways comm,compute,s,b,c,s,b,c
lay "16 SMs, SY_HT_ROLES=1" SY_HT_ROLES=1 -- --num-sms 16 -c 0 --ways comm,compute,s,b,c,s,b,c
lay "32 SMs, SY_HT_ROLES=1" SY_HT_ROLES=1 -- --num-sms 32 -c 0 --ways comm,compute,s,b,c,s,b,c
lay "16 SMs, SY_HT_ROLES=1, checked" SY_HT_ROLES=1 -- --num-sms 16 -n 3 --ways a,s,b,c
echo "layers done at $SECONDS s" >>$s
rm -f /tmp/enq.txt
for i in 1 2 3 4 5 6; do
  p=$((i % 2)); echo "== process $i priority $p" >>/tmp/enq.txt
  SY_GRAPH_NODE_PRIORITY=$p SY_BENCH_ENQUEUE_FILE=/tmp/enq.txt CUDA_VISIBLE_DEVICES=0 timeout 40 $B/syrun -n 1 \
    $B/sy-bench --no-nccl --tokens 128 --settle 0 --ways c,a layer >/tmp/d.txt 2>&1
  echo "process $i node priority $p: $(grep -E '^\[rank 0\] +decode +128 +c ' /tmp/d.txt | awk '{print "c step " $6 " host " $7}')" >>$s
done
cat /tmp/enq.txt >>$s
cp /tmp/enq.txt $OUT/ 2>/dev/null
echo "end at $SECONDS s" >>$s
cat $s
