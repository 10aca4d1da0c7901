#!/usr/bin/env bash
# x2-roles59.sh — run 59, call 2 (two GPUs, ~6 minutes). Call 1 (x2-next59.sh) found the roles by warps faster than
# by blocks at world 2 with 32 SMs (BF16 dispatch 380.8 / 380.4 against 436.1 / 439.5 us, combine 391.0 / 391.3
# against 429.4 / 429.1, FP8 dispatch 368.3 / 368.1 against 417.5 / 418.0), where auto takes blocks above 16 SMs
# (decided at world 4, run 40). Here:
# (1) world 2, 4,096 tokens, every call and both wires, by warps (SY_HT_ROLES=1) and by blocks (0) at 16, 24, 32,
#     48 and 64 SMs, alternating the order: where should auto switch at world 2?
# (2) GPU 0, world 1: the decode step's host time (way c, 128 tokens) in 8 processes, each followed by
#     tools/dev/graph-launch-probe.cu's bare graphs (8 empty kernels on 2 branches, PDL on): does a bare graph's
#     replay go slow in the same processes' minutes as ours (the host), or only ours (the library)?
. tools/dev/variant.sh # dev_start, bench_tree
dev_start summary.txt
[ -x build/bin/sy-bench ] || SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
nvcc -O2 -arch=sm_90 -std=c++17 -Itools/dev -o /tmp/glp tools/dev/graph-launch-probe.cu >/tmp/glp_build.txt 2>&1 ||
  { echo "glp build failed" >>$s; tail -5 /tmp/glp_build.txt >>$s; }
one() { SY_HT_ROLES=$2 bench_tree build "world 2, $1 SMs, roles $2" 2 "dispatch|combine|combine_bwd|dispatch_bwd" \
  --tokens 4096 --num-sms $1; }
one 16 0
one 24 1; one 24 0
one 32 0; one 32 1
one 48 1; one 48 0
one 64 0; one 64 1
echo "roles done at $SECONDS s" >>$s
B=build/bin
for i in 1 2 3 4 5 6 7 8; do
  t0=$(date +%s)
  CUDA_VISIBLE_DEVICES=0 timeout 40 $B/syrun -n 1 $B/sy-bench --no-nccl --tokens 128 --settle 0 --ways c layer >/tmp/d.txt 2>&1
  c=$(grep -E '^\[rank 0\] +decode +128 +c ' /tmp/d.txt | awk '{print $7}')
  g=$(CUDA_VISIBLE_DEVICES=0 timeout 60 /tmp/glp 2>&1 | awk '$1==8 && $2==2 && $3==16 && $4==1 {printf "%s ", $5} $1==8 && $2==1 && $3==16 && $4==0 {printf "1br %s ", $5}')
  echo "process $i at $((t0 % 1000)) s: decode c host $c us; bare 8 kernels: $g" >>$s
done
echo "end at $SECONDS s" >>$s
cat $s
