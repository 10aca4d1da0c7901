#!/usr/bin/env bash
# x4-plan.sh — the senders' batch planning by warp 0's lanes (run 43): run 43's probe in bins found the dispatch's
# senders "waiting" ~26 us a batch in every bin at world 4 while they took no own rows — which they do whenever a ring
# has no room — so the wait is mostly the planning itself (thread 0 giving each (token, destination) its ring index in
# turn, ~87 a batch at world 4, and the rings' heads read one after another). Now a pass per destination over the
# lanes (a ballot each) and the heads read a lane a ring. Predicted: BF16 dispatch at world 4, 4,096 tokens, arena,
# 16 SMs 868 -> 800-840 us; the senders' wait in the probe 210 -> under 100 us.
# Builds base (ab/base) and new; test_gpu_moe_ht at n ranks (stores, puts); moe-ht world n arena base / new / new
# with -DSY_HT_PLAN_SERIAL=1 (serial), two passes rotating; 8,192 tokens BF16 new / base; world 1 at 132 SMs base /
# new; the probe of new.
. tools/dev/variant.sh # build_tree, ab_arena, bench_tree, probe_tree, test_ht, dev_start
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_tree /tmp/xB ab/base "" &
build_tree /tmp/xS . "-DSY_HT_PLAN_SERIAL=1" &
build_tree /tmp/xN . ""
wait
test_ht /tmp/xN stores $n "" SY_TEST_SEED=20261128
grep -q "WRONG\|FAIL" /tmp/t_stores.txt && cp /tmp/t_stores.txt $OUT/
declare -A dir=([base]=/tmp/xB [new]=/tmp/xN [serial]=/tmp/xS)
ab_arena 4096 both base new serial serial new base
ab_arena 8192 bf16 new base
for v in base new; do
  bench_tree ${dir[$v]} "world 1, 132 SMs, 4096 tokens ($v)" 1 "dispatch|combine_bwd" --tokens 4096 --num-sms 132
done
probe_tree /tmp/xN "(new) 4,096 tokens BF16, 16 SMs, arena" $n --tokens 4096 --wire bf16 --num-sms 16 --recv arena
test_ht /tmp/xN puts $n "" SY_TEST_SEED=20261128 SY_FORCE_PUT=1
grep -q "WRONG\|FAIL" /tmp/t_puts.txt && cp /tmp/t_puts.txt $OUT/
cat $s
