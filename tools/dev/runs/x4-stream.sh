#!/usr/bin/env bash
# x4-stream.sh — the dispatch kernel's receivers as a stream (SY_HT_RECV_STREAM, run 44): run 44's first probe (world
# 4, BF16, 4,096 tokens, arena, 16 SMs) put the receivers' rounds at 17 with messages and ~150 us of the 784 outside
# the items (sync 67.5, rest 81.7: four barriers a round, thread 0's plan, the rounds of own chunks), besides each
# round's tail. Now the role's last warp lists rounds ahead while the other warps take items by ticket. Predicted:
# BF16 dispatch 800 -> 720-760 us; combine_bwd (the same receivers writing gradients: 14 rounds, 205 us "sync") 1,745
# -> 1,600-1,700; FP8 alike to BF16; world 1 unchanged (no receiving there).
# Builds old (-DSY_HT_RECV_STREAM=0) and new; test_gpu_moe_ht at n ranks (stores) first; moe-ht world n arena old /
# new, two passes rotating (both wires, 4,096 tokens), 8,192 tokens BF16 new / old; the probe of new; then
# test_gpu_moe_ht with puts, with the roles by blocks and with 3 ranks sharing GPU 0.
. tools/dev/variant.sh # build_tree, ab_arena, probe_tree, test_ht, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_tree /tmp/xO . "-DSY_HT_RECV_STREAM=0" &
build_tree /tmp/xN . ""
wait
test_ht /tmp/xN stores $n "" SY_TEST_SEED=20261128
grep -q "WRONG\|FAIL\|rc=[1-9]" /tmp/t_stores.txt && cp /tmp/t_stores.txt $OUT/
tail -3 /tmp/t_stores.txt >>$s
declare -A dir=([old]=/tmp/xO [new]=/tmp/xN)
ab_arena 4096 both old new new old
ab_arena 8192 bf16 new old
probe_tree /tmp/xN "(new) 4,096 tokens BF16, 16 SMs, arena" $n --tokens 4096 --wire bf16 --num-sms 16 --recv arena
test_ht /tmp/xN puts $n "" SY_TEST_SEED=20261129 SY_FORCE_PUT=1
test_ht /tmp/xN blocks $n "" SY_TEST_SEED=20261130 SY_HT_ROLES=0
test_ht /tmp/xN shared3 3 "--gpus 0,0,0" SY_TEST_SEED=20261131
for t in puts blocks shared3; do grep -q "WRONG\|FAIL" /tmp/t_$t.txt && cp /tmp/t_$t.txt $OUT/; done
cat $s
