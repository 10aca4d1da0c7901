#!/usr/bin/env bash
# x-grad-once.sh — combine_bwd's gradient rows with g read once for up to SY_HT_GRAD_ROWS rows (dispatch.cu:
# grad_write, SY_HT_GRAD_ONCE=1, the default since run 38, measured then at world 1 only: 1 x H100, BF16, 4,096
# tokens, 1,186 -> 1,120 us at 16 SMs, 500 -> 439-443 at 132). A = -DSY_HT_GRAD_ONCE=0 (g read again for every row),
# B = this tree (2 rows a pass, 4 pieces in flight: 16 bytes of spills), C = -DSY_HT_GRAD_ROWS=4 (60 bytes of
# spills, 68 in the hint instance: over the ptxas_spills test's 64, so C is for measuring only). With n GPUs (4
# best, at most 4 used): test_gpu_moe_ht with B and C at n (direct; B also with puts), at 1 rank and with 3 ranks on
# GPU 0 (bit for bit against the host backend); then moe-ht BF16, 4,096 tokens, A B C C B A at world n with 16 SMs
# and at world 1 with 16 and 132 SMs (combine_bwd and, for the kernel's other mode, the dispatch). The prediction
# (run 38's probe at world 4, 8,192 tokens): the receivers work 4,236 of the kernel's 4,545 us and move ~95 KB a
# message, of which ~17 KB were g's re-reads, so combine_bwd up to ~15% faster at world 4 if they are bound by
# their bytes. Then (n >= 2) the FP8 dispatch with the tokens quantised ahead or by the senders. $OUT/summary.txt.
. tools/dev/variant.sh # variant, test_ht, bench_ws, bench_tree, dev_start
dev_start summary.txt
declare -A dir=([A]=/tmp/xA [B]=/tmp/xB [C]=/tmp/xC)
variant /tmp/xA "-DSY_HT_GRAD_ONCE=0" &
variant /tmp/xB "" &
variant /tmp/xC "-DSY_HT_GRAD_ROWS=4" &
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
# with the FP8 quotients by the reciprocal (run 38) the sending blocks' own quantisation is cheaper too: which FP8
# path is faster now from world 2, the tokens quantised ahead (SY_HT_PREQUANT=1, the default there; run 32: 1,251
# against 1,486 us at world 4) or by the senders (0)?
if [ "$n" -ge 2 ]; then
  for q in 1 0 0 1; do
    (export SY_HT_PREQUANT=$q
      bench_tree /tmp/xB "world $n, 16 SMs, FP8 (B, SY_HT_PREQUANT=$q)" $n "dispatch" --tokens 4096 --wire fp8)
  done
fi
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_*.txt build_x*.log 2>/dev/null) 2>/dev/null
cat $s
