#!/usr/bin/env bash
# x4-ring-inplace.sh — run 42 call 3: rings of 64 (A, today), 128 (B) and 256 (D) slots with the first copy in place
# (SY_MOE_HT_RING_SLOTS, C and CUDA). Calls 1-2: the senders wait 419-436 us for ring room (8,192 tokens, BF16) while
# the receivers either write own rows (540 us) or, with those capped (SY_HT_RECV_IDLE_OWN 256), wait 468 us for
# messages: the ring couples the two (a batch of up to 32 messages a ring, rounds of up to 32 a peer given back a
# round later, 64 slots). With the payload in the row a slot carries only the header, the entries and the FP8
# scales, so a deeper ring costs no ring bytes moved. Run 38 measured 128 slots without the in-place path: the
# dispatch unchanged, combine_bwd -3.5%, the combine and dispatch_bwd +7%. BF16 A B D D B A, FP8 A B D, 4,096 tokens,
# 16 SMs, recv in the arena; test_gpu_moe_ht with B at n; the probe of B at 8,192 tokens BF16. $OUT/summary.txt.
. tools/dev/variant.sh # test_ht, bench_tree, probe_tree, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=6G
declare -A dir=([A]=/tmp/xA [B]=/tmp/xB [D]=/tmp/xD) flags=([A]="" [B]="-DSY_MOE_HT_RING_SLOTS=128"
  [D]="-DSY_MOE_HT_RING_SLOTS=256")
for v in A B D; do
  (cmake -S . -B ${dir[$v]} -DCMAKE_C_FLAGS="${flags[$v]}" -DCMAKE_CUDA_FLAGS="${flags[$v]}" >/dev/null &&
    cmake --build ${dir[$v]} -j 20 --target sy-bench syrun test_gpu_moe_ht >/tmp/build_x$v.log 2>&1 ||
    { echo "build $v failed" >>$s; tail -20 /tmp/build_x$v.log >>$s; }) &
done
wait
for v in A B D D B A; do
  bench_tree ${dir[$v]} "world $n, 16 SMs, BF16, A ($v)" $n "dispatch|combine|combine_bwd|dispatch_bwd" --tokens 4096 \
    --wire bf16 --num-sms 16 --recv arena
done
for v in A B D; do
  bench_tree ${dir[$v]} "world $n, 16 SMs, FP8, A ($v)" $n "dispatch" --tokens 4096 --wire fp8 --num-sms 16 \
    --recv arena
done
probe_tree /tmp/xB "(B: 128 slots, arena) 8,192 tokens BF16, 16 SMs" $n --tokens 8192 --wire bf16 --num-sms 16 \
  --recv arena
test_ht /tmp/xB ring128 $n "" SY_TEST_SEED=20261128
grep -q "WRONG\|FAIL" /tmp/t_ring128.txt && cp /tmp/t_ring128.txt $OUT/
cat $s
