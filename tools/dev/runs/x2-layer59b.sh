#!/usr/bin/env bash
# x2-layer59b.sh — run 59, call 4 (two GPUs, ~5 minutes): x2-layer59.sh's layer part again, which failed in 3 s a
# run (no SY_HEAP_SIZE: the layer at world 2 with recv in the arena needs more than the default heap). The layer at
# world 2 (4,096 tokens, 2 expert groups, the ends on 132 SMs): the object of 132 SMs runs its roles by blocks, so the
# calls beside the GEMMs ran by blocks too. SY_HT_ROLES=1 against auto at --num-sms 16, by warps at 32. Then the
# decode step's host time at world 1 under syrun and without it, alternating (call 3: a slow process is slow in every
# sample, eager way a too; node priorities not it).
. tools/dev/variant.sh # dev_start
dev_start summary.txt
[ -x build/bin/sy-bench ] || SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
B=build/bin
lay() { # LABEL ENV... -- ARGS...
  local label=$1 t0=$SECONDS; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env SY_HEAP_SIZE=24G "${envs[@]}" timeout 150 $B/syrun -n 2 $B/sy-bench --no-nccl --recv arena --tokens 4096 \
    --split experts --micro-batches 2 --end-sms 132 -n 20 -w 2 "$@" layer >/tmp/layer.txt 2>&1
  local rc=$?
  echo "== layer $label rc=$rc ($((SECONDS - t0)) s)" >>$s
  [ $rc = 0 ] || tail -6 /tmp/layer.txt >>$s
  grep -E "^\[rank 0\] +(prefill|backward)|against way s|target|correct|wrong|rror|ERR|fail" /tmp/layer.txt | sed 's/\[rank 0\]//' | head -24 >>$s
}
lay "16 SMs, auto (object by blocks)" X=0 -- --num-sms 16 -c 0 --ways comm,compute,s,b,c,s,b,c
lay "16 SMs, SY_HT_ROLES=1" SY_HT_ROLES=1 -- --num-sms 16 -c 0 --ways comm,compute,s,b,c,s,b,c
lay "32 SMs, SY_HT_ROLES=1" SY_HT_ROLES=1 -- --num-sms 32 -c 0 --ways comm,compute,s,b,c,s,b,c
[ $SECONDS -lt 330 ] && lay "16 SMs, SY_HT_ROLES=1, checked" SY_HT_ROLES=1 -- --num-sms 16 -n 3 --ways a,s,b,c
echo "layers done at $SECONDS s" >>$s
for i in 1 2 3 4 5 6; do
  [ $SECONDS -lt 470 ] || break
  if [ $((i % 2)) = 1 ]; then how=syrun; pre="$B/syrun -n 1"; else how=direct; pre=""; fi
  CUDA_VISIBLE_DEVICES=0 timeout 40 $pre $B/sy-bench --no-nccl --tokens 128 --settle 0 --ways c,a layer >/tmp/d.txt 2>&1
  echo "process $i ($how): $(grep -E '^(\[rank 0\])? *decode +128 +[ca] ' /tmp/d.txt | sed 's/\[rank 0\]//' | awk '{printf "%s step %s host %s; ", $3, $4, $5}')" >>$s
done
echo "end at $SECONDS s" >>$s
cat $s
