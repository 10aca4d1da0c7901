#!/usr/bin/env bash
# x4-ring.sh — run 38's third call (4 GPUs): is the world-4 dispatch bound by its rings' messages rather than their
# bytes? Run 38's first calls measured the FP8 dispatch (half the bytes) as slow as the BF16 one at world 4 (1,151 /
# 1,218 against 1,167 us), so the number of messages, not their size, may set its pace: a sender's batch of 32 tokens
# needs room for up to 32 messages a ring of 64 slots (two batches in flight). A = this tree, B = rings of 128 slots
# (SY_MOE_HT_RING_SLOTS, C and CUDA; the rounds take half a ring a peer, so the combine's rounds grow with it).
# test_gpu_moe_ht with B at n; moe-ht at world n, 16 SMs, 4,096 tokens, both wires, A B B A; the probe of A's FP8
# dispatch (8,192 tokens); then with A: moe-ht at 16,384 tokens a rank with NCCL beside (issue 19: at least 16,384;
# $OUT/ht_w${n}_16k.json) and the layer (issue 21, $OUT/layer_w$n.json). $OUT/summary.txt.
. tools/dev/variant.sh # test_ht, bench_tree, probe_tree, dev_start
dev_start summary.txt
declare -A dir=([A]=/tmp/xA [B]=/tmp/xB) flags=([A]="" [B]="-DSY_MOE_HT_RING_SLOTS=128")
for v in A B; do
  (cmake -S . -B ${dir[$v]} -DCMAKE_C_FLAGS="${flags[$v]}" -DCMAKE_CUDA_FLAGS="${flags[$v]}" >/dev/null &&
    cmake --build ${dir[$v]} -j 24 --target sy-bench syrun test_gpu_moe_ht >/tmp/build_x$v.log 2>&1 ||
    { echo "build $v failed" >>$s; tail -20 /tmp/build_x$v.log >>$s; }) &
done
wait
test_ht /tmp/xB ring128 $n "" X=1
for v in A B B A; do
  bench_tree ${dir[$v]} "world $n, 16 SMs ($v)" $n "dispatch|combine|combine_bwd|dispatch_bwd" --tokens 4096
done
probe_tree /tmp/xA "(A), world $n, 8,192 tokens, FP8, rank 0" $n --tokens 8192 --wire fp8
timeout 200 /tmp/xA/bin/syrun -n $n /tmp/xA/bin/sy-bench --tokens 16384 --json $OUT/ht_w${n}_16k.json moe-ht \
  >/tmp/ht16k.txt 2>&1
echo "== moe-ht world $n, 16,384 tokens, NCCL beside rc=$?" >>$s
grep -E " (layout|dispatch|combine|combine_bwd|dispatch_bwd) |wrong|rror" /tmp/ht16k.txt | sed 's/\[rank 0\]//' |
  head -30 >>$s
timeout 200 /tmp/xA/bin/syrun -n $n /tmp/xA/bin/sy-bench --no-nccl --json $OUT/layer_w$n.json layer >/tmp/layer.txt 2>&1
echo "== layer world $n rc=$?" >>$s
grep -vE "^\s*$" /tmp/layer.txt | sed 's/\[rank 0\]//' | grep -E "decode|prefill|backward|exposed|target" | head -40 >>$s
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_*.txt build_x*.log ht16k.txt layer.txt 2>/dev/null) 2>/dev/null
cat $s
