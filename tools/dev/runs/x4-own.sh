#!/usr/bin/env bash
# x4-own.sh — who writes the own rows at world n (4 best) with the first copy in place (run 42). Run 42 call 1's probe
# (8,192 tokens, BF16, recv in the arena) had the receivers busy the whole kernel (own rows 540 us, messages 794,
# sync and rest 336) while the senders waited 419 us for ring room: the receivers drain the own-token queue in their
# early rounds without messages, and the senders, whose rings then fill, find it empty. SY_HT_RECV_IDLE_OWN caps the
# receivers' draws in those rounds (1024 = today, 512, 256, 0); SY_HT_OWN_QUEUE=0 SY_HT_RECV_OWN=0 is the static
# split with every own row on the senders. BF16 and FP8, 4,096 tokens, 16 SMs, recv in the arena, one pass each; the
# probe of 8,192 tokens BF16 at 256; test_gpu_moe_ht at n with SY_HT_RECV_IDLE_OWN=0. $OUT/summary.txt.
# Measured in run 42 (every cap slower: bench/NOTES.md) and taken out: the knob is tools/dev/patches/
# ht-recv-idle-own.patch (`git apply` it onto 8246997 to run this again).
. tools/dev/variant.sh # build_tree, bench_tree, probe_tree, test_ht, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=6G
build_tree /tmp/xT . ""
for w in bf16 fp8; do
  for v in 1024 256 0 512 q0; do
    if [ $v = q0 ]; then e="SY_HT_OWN_QUEUE=0 SY_HT_RECV_OWN=0"; else e="SY_HT_RECV_IDLE_OWN=$v"; fi
    (export $e; bench_tree /tmp/xT "world $n, 16 SMs, 4096 tokens, $w, A, $e" $n "dispatch|combine_bwd" \
      --tokens 4096 --wire $w --num-sms 16 --recv arena)
  done
done
(export SY_HT_RECV_IDLE_OWN=256; probe_tree /tmp/xT "(A, idle own 256) 8,192 tokens BF16, 16 SMs" $n --tokens 8192 \
  --wire bf16 --num-sms 16 --recv arena)
test_ht /tmp/xT idle0 $n "" SY_TEST_SEED=20261128 SY_HT_RECV_IDLE_OWN=0
grep -q "WRONG\|FAIL" /tmp/t_idle0.txt && cp /tmp/t_idle0.txt $OUT/
cat $s
