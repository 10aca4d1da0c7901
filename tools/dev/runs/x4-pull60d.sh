#!/usr/bin/env bash
# x4-pull60d.sh — run 60, call 4 (four GPUs, ~3.5 minutes; the session's last device minutes). Calls 2-3 found the pull
# inside the ring kernel slower (a warp's load, then its stores, a message at a time, rounds apart). pull.cu (new,
# SY_HT_PULL=1): its own kernel, no ring: each block scans its items' tokens for the messages here, then pipelines of 3
# stages stream them by bulk copies, as pullx did (545.8 us at 16 SMs). Here:
# (1) test_gpu_moe_ht at 4 GPUs with SY_HT_PULL=1 (and by blocks), at 3 ranks sharing GPU 0;
# (2) moe-ht world 4, 4,096 tokens, 16 SMs, arena: push / pull, a b b a (dispatch rows); 8,192 tokens pulled.
. tools/dev/variant.sh # dev_start, bench_tree
dev_start summary.txt
export SY_HEAP_SIZE=8G
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { echo "build failed" >>$s; tail -30 /tmp/build.log >>$s; cat $s; exit 1; }
echo "build done at $SECONDS s" >>$s
t() { # NAME RANKS GPUS ENV...
  local name=$1 r=$2 g=$3; shift 3
  env "$@" timeout 60 build/bin/syrun -n $r $g build/tests/gpu/test_gpu_moe_ht >/tmp/t_$name.txt 2>&1
  echo "test_gpu_moe_ht $name: n=$r $g $* rc=$? ($(grep -c ' ok ' /tmp/t_$name.txt) cases ok)" >>$s
}
t w4.pull $n "" SY_HT_PULL=1
grep -iE "fail|mismatch|wrong|timeout" /tmp/t_w4.pull.txt | grep -v "communicator failed: SY_ERR_INVALID_ARG: moe_ht layout" | head -8 >>$s
cp /tmp/t_w4.pull.txt $OUT/ 2>/dev/null
one() { SY_HT_PULL=$2 bench_tree build "world $n, $1 SMs, $3 tokens, pull $2" $n "dispatch" --tokens $3 --recv arena \
  --num-sms $1; }
if grep -q "test_gpu_moe_ht w4.pull: .* rc=0" $s; then
  for p in 0 1 1 0; do one 16 $p 4096; done
  one 16 1 8192
  echo "bench done at $SECONDS s" >>$s
fi
[ $SECONDS -lt 200 ] && t w4.pullb $n "" SY_HT_PULL=1 SY_HT_ROLES=0
[ $SECONDS -lt 230 ] && t w3s.pull 3 "--gpus 0,0,0" SY_HT_PULL=1
tail -4 /tmp/t_w4.pull.txt >>$s
echo "end at $SECONDS s" >>$s
cat $s
