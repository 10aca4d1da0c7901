#!/usr/bin/env bash
# x-grad-once.sh — combine_bwd's gradient rows with g read once for up to SY_HT_GRAD_ROWS rows
# (tools/dev/patches/ht-grad-once.patch: dispatch.cu's grad_write under SY_HT_GRAD_ONCE; written in run 38's session
# after its device time, not run yet). A = this tree (g read again for every row), B = a copy of this tree with the
# patch and -DSY_HT_GRAD_ONCE=1 (2 rows a pass, 4 pieces in flight: 16 bytes of spills), C = B with 4 rows a pass
# (60 bytes of spills). With n GPUs (4 best, at most 4 used): test_gpu_moe_ht with B and C
# at n (direct; B also with puts), at 1 rank and with 3 ranks on GPU 0 (bit for bit against the host backend); then
# moe-ht BF16, 4,096 tokens, A B C C B A at world n with 16 SMs and at world 1 with 16 and 132 SMs (combine_bwd and,
# for the kernel's other modes, dispatch). The prediction (run 38's probe at world 4): the receivers move ~95 KB a
# message of which ~17 KB are g's re-reads, so combine_bwd up to ~15% faster at world 4 if they are bound by their
# bytes; at world 1 (own rows only, 2 rows a token at world 4, 8 at world 1) B reads g 4 times a token instead of 8.
# $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, test_ht, bench_ws, dev_start
dev_start summary.txt
declare -A dir=([A]=/tmp/xA [B]=/tmp/xB [C]=/tmp/xC)
rm -rf /tmp/src_once && mkdir -p /tmp/src_once &&
  tar -c --exclude=./build --exclude=./ab --exclude=./.git . | tar -x -C /tmp/src_once &&
  patch -s -p1 -d /tmp/src_once <tools/dev/patches/ht-grad-once.patch || echo "patch failed" >>$s
build_tree /tmp/xA . &
build_tree /tmp/xB /tmp/src_once "-DSY_HT_GRAD_ONCE=1" &
build_tree /tmp/xC /tmp/src_once "-DSY_HT_GRAD_ONCE=1 -DSY_HT_GRAD_ROWS=4" &
wait
for v in B C; do
  [ "$n" -ge 2 ] && test_ht ${dir[$v]} $v$n $n "" X=1
  test_ht ${dir[$v]} ${v}1 1 "" X=1
  test_ht ${dir[$v]} ${v}share3 3 "--gpus 0,0,0" X=1
done
[ "$n" -ge 2 ] && test_ht /tmp/xB Bput$n $n "" SY_FORCE_PUT=1
for cfg in "$n 16" "1 16" "1 132"; do
  set -- $cfg
  for v in A B C C B A; do bench_ws $v $1 $2 - "dispatch|combine_bwd"; done
done
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_*.txt build_x*.log 2>/dev/null) 2>/dev/null
cat $s
