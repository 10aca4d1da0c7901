#!/usr/bin/env bash
# x2-grad.sh — one device call (2 GPUs best; with 1 the world-2 parts are skipped): the combine's backward with
# fewer instructions (tools/dev/patches/ht-grad-fast.patch: grad_write out of line, whole passes through a loop with
# no per-piece test, SY_HT_GRAD_FAST; run 36 call 9: dropped, kept as the patch). A = ab/base (`tools/dev/ab.sh tree
# HEAD base` here, carry ab/base), D = this tree with the patch applied, E = D with -DSY_HT_GRAD_FAST=0 (grad_write
# out of line only). test_gpu_moe_ht with D at 2 GPUs (direct, put), 1 rank
# and 3 on GPU 0; then moe-ht kernel times (--no-nccl, BF16, 4,096 tokens): world 2 at 16 SMs (A D E E D A), world 1
# at 16 and 132 SMs (A D D A). $OUT/grad.txt.
. tools/dev/variant.sh # build_tree, bench_ws, test_ht, dev_start
dev_start grad.txt
t0=$(date +%s)
build_tree /tmp/gA ab/base "" &
build_tree /tmp/gD . "" &
[ "$n" -ge 2 ] && build_tree /tmp/gE . -DSY_HT_GRAD_FAST=0 &
wait
echo "builds $(($(date +%s) - t0)) s" >>$s
declare -A dir=([A]=/tmp/gA [D]=/tmp/gD [E]=/tmp/gE)
t() { # LABEL RANKS GPUS-ARG ENV...
  local l=$1 r=$2 g=$3
  shift 3
  env "$@" timeout 150 /tmp/gD/bin/syrun -n $r $g /tmp/gD/tests/gpu/test_gpu_moe_ht >/tmp/t_$l.txt 2>&1
  echo "test_gpu_moe_ht (D, $l) n=$r $g rc=$?" >>$s
}
if [ "$n" -ge 2 ]; then
  t w2 2 "" X=1
  t w2put 2 "" SY_FORCE_PUT=1
fi
t w1 1 "" X=1
t s3 3 "--gpus 0,0,0" X=1
if [ "$n" -ge 2 ]; then
  p=1; for v in A D E E D A; do bench_ws $v 2 16 $p "dispatch|combine_bwd"; [ $v = E ] && p=2; done
fi
for sms in 16 132; do p=1; for v in A D D A; do bench_ws $v 1 $sms $p "dispatch|combine_bwd"; [ $v = D ] && p=2; done; done
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_*.txt build_g*.log 2>/dev/null) 2>/dev/null
cat $s
