#!/usr/bin/env bash
# x4-next44.sh — what run 43 left unrun (n GPUs, 4 best; on one GPU the probe is skipped): (1) gpu-check of test_gpu_pool
# (its check 9: the receive arena's frees in stream order, in 400787d's form: src/mem/arena.c), the MoE HT tests with
# their variants, both examples and the Python package (its arena test now holds a torch stream busy with
# torch.cuda._sleep and checks that stream's allocation takes the freed block at once) at n ranks, no sanitizers; (2)
# the dispatch's probe at world n with the planning in a slot of its own (PR_PLAN: the senders' 72 us of "wait" in
# run 43's probe — ring waits, or the planning still?), BF16 and FP8, 4,096 tokens, arena, 16 SMs.
# $OUT/summary.txt, the gpu-check summary and failing logs.
. tools/dev/variant.sh # dev_start, gpu_check_only, probe_tree
dev_start summary.txt
gpu_check_only 'pool|moe_ht|example|python' 420
if [ "$n" -ge 2 ]; then
  export SY_HEAP_SIZE=6G
  for w in bf16 fp8; do
    probe_tree build "(PR_PLAN) 4,096 tokens $w, 16 SMs, arena" $n --tokens 4096 --wire $w --num-sms 16 --recv arena
  done
fi
cat $s
