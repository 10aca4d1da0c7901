#!/usr/bin/env bash
# x4-inplace.sh — the dispatch's first copy in place (config.recv_arena_bytes; dispatch.cu), at n GPUs (4 best):
# test_gpu_moe_ht at n ranks (every case with recv in device memory, then in the arena: the senders' stores), the
# BF16 and FP8 dispatch at 16 SMs with recv in device memory (D) and in the arena (A), D A A D at 4,096 tokens and
# D A at 8,192; a probe of A at 8,192 tokens BF16; last test_gpu_moe_ht with SY_FORCE_PUT=1 (the puts into the
# rows). The proxy (x4-inplace-proxy.sh, run 41 call 1) measured -13.7% BF16 and -7.6% FP8 for the receivers'
# share; run 41 call 2 (21d81c9) measured A against D -9.3% BF16, -1.9% FP8. Next run (f21f04d on): the receivers'
# n > 1 guard, predicted 889 -> 850-870 us BF16 at 4,096 tokens (bench/NOTES.md), and test_gpu_moe_ht's third pass
# (the arena on some ranks only); then the FP8 probe with the arena. $OUT/summary.txt; failing tests' logs to $OUT.
. tools/dev/variant.sh # build_tree, bench_tree, probe_tree, test_ht, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=6G # the arena of one worst-case recv: 1.9 GB at 4,096 tokens, 3.8 GB at 8,192 (world 4)
build_tree /tmp/xT . ""
test_ht /tmp/xT stores $n "" SY_TEST_SEED=20261127
grep -q "WRONG\|FAIL" /tmp/t_stores.txt && cp /tmp/t_stores.txt $OUT/
grep -E "arena|WRONG" /tmp/t_stores.txt | head -30 >>$s
for v in D A A D; do
  r=device && [ $v = A ] && r=arena
  bench_tree /tmp/xT "world $n, 16 SMs, 4096 tokens, BF16 ($v)" $n "dispatch|combine" --tokens 4096 --wire bf16 \
    --num-sms 16 --recv $r
  bench_tree /tmp/xT "world $n, 16 SMs, 4096 tokens, FP8 ($v)" $n "dispatch" --tokens 4096 --wire fp8 --num-sms 16 \
    --recv $r
done
for v in D A; do
  r=device && [ $v = A ] && r=arena
  bench_tree /tmp/xT "world $n, 16 SMs, 8192 tokens, BF16 ($v)" $n "dispatch" --tokens 8192 --wire bf16 \
    --num-sms 16 --recv $r
done
probe_tree /tmp/xT "(A) 8,192 tokens BF16, 16 SMs" $n --tokens 8192 --wire bf16 --num-sms 16 --recv arena
probe_tree /tmp/xT "(A) 8,192 tokens FP8, 16 SMs" $n --tokens 8192 --wire fp8 --num-sms 16 --recv arena
test_ht /tmp/xT puts $n "" SY_TEST_SEED=20261127 SY_FORCE_PUT=1
grep -q "WRONG\|FAIL" /tmp/t_puts.txt && cp /tmp/t_puts.txt $OUT/
grep -E "WRONG|failed" /tmp/t_puts.txt | head -10 >>$s
cat $s
