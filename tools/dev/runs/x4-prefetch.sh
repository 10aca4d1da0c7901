#!/usr/bin/env bash
# x4-prefetch.sh — SY_HT_PREFETCH (run 43): L2 bulk prefetches in the dispatch kernel ahead of the warps' loads — 1
# the first rows a receiving round copies from (in place), 2 an own-token chunk's tokens, 4 a sending batch's tokens.
# Run 43's probe in bins (x4-call43.sh) found no convoy: at world 4 the receivers never wait and take own rows in every
# bin while the senders wait for room in every bin; the receivers' warps copy at ~2.9 GB/s each, as if bound by the
# latency of their loads (2 KiB a warp in flight, sources in HBM). Predicted: the BF16 dispatch at world 4, 4,096
# tokens, arena, 16 SMs from ~870 to 720-780 us with 7. Builds base (ab/base: HEAD before) and new side by side;
# test_gpu_moe_ht at n ranks with SY_HT_PREFETCH=7 (stores, then puts); moe-ht at world n (both wires, arena) base,
# new with 0 / 1 / 3 / 7, in two passes of rotating order; world 1, 132 SMs: base, 0, 2; the probe with 0 and 7.
. tools/dev/variant.sh # build_tree, bench_tree, probe_tree, test_ht, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=6G
build_tree /tmp/xB ab/base "" &
build_tree /tmp/xN . ""
wait
test_ht /tmp/xN pf7 $n "" SY_TEST_SEED=20261128 SY_HT_PREFETCH=7
grep -q "WRONG\|FAIL" /tmp/t_pf7.txt && cp /tmp/t_pf7.txt $OUT/
run4() { # VARIANT PASS
  local d=/tmp/xN pf=${1#N}
  [ "$1" = base ] && d=/tmp/xB pf=0
  (export SY_HT_PREFETCH=$pf; bench_tree $d "world $n, 16 SMs, 4096 tokens, arena ($1, pass $2)" $n \
    "dispatch|combine|combine_bwd|dispatch_bwd" --tokens 4096 --num-sms 16 --recv arena)
}
for v in base N0 N1 N3 N7; do run4 $v 1; done
for v in N7 N3 N1 N0 base; do run4 $v 2; done
for v in base N0 N2 N2 N0 base; do
  d=/tmp/xN pf=${v#N} && [ $v = base ] && d=/tmp/xB pf=0
  (export SY_HT_PREFETCH=$pf; bench_tree $d "world 1, 132 SMs, 4096 tokens ($v)" 1 "dispatch" --tokens 4096 \
    --num-sms 132)
done
for pf in 0 7; do
  (export SY_HT_PREFETCH=$pf; probe_tree /tmp/xN "($pf) 4,096 tokens BF16, 16 SMs, arena" $n --tokens 4096 \
    --wire bf16 --num-sms 16 --recv arena)
done
test_ht /tmp/xN pf7puts $n "" SY_TEST_SEED=20261128 SY_HT_PREFETCH=7 SY_FORCE_PUT=1
grep -q "WRONG\|FAIL" /tmp/t_pf7puts.txt && cp /tmp/t_pf7puts.txt $OUT/
cat $s
