#!/usr/bin/env bash
# x1-check55.sh — run 55's third one-GPU call (~8 minutes). Call 2 (x1-layout55.sh): the one-kernel layout passed
# 21 cases at 1 rank and 16 at 3 sharing, then every run crashed (rc 139) in the new "bf16 8208 experts" case: the
# test's result arrays held 1,024 local experts (offsets[1025], counts[1024], host[2049] on the stack), the case
# 8,208 at world 1 and 2,736 at 3 — the host counts read wrong and the stack overrun. The arrays now hold MAX_L =
# 8,208 (a case with more fails by name). Tests (n) at 1, 2, 3 and 4 ranks, the put path at 3, SY_PDL=0 at 1; then
# compute-sanitizer at world 1 (as gpu-check's sanitize steps; the new layout kernel never ran under it): memcheck
# over the whole test, racecheck and synccheck on the cases whose layout tallies in shared memory (9: 300 tokens)
# and in global memory (22: 8,208 experts), initcheck on case 0; each capped. (When it ran, its own copy of
# sanitize_ht printed the cases' ok count on a line of its own.)
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
build_tree /tmp/n . ""
echo "build done at $SECONDS s" >>$s
test_ht /tmp/n w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/n w2 2 "--gpus 0,0"
test_ht /tmp/n w3 3 "--gpus 0,0,0"
test_ht /tmp/n w4 4 "--gpus 0,0,0,0"
test_ht /tmp/n put3 3 "--gpus 0,0,0" SY_FORCE_PUT=1
test_ht /tmp/n pdl0 1 "" SY_PDL=0
grep -E "wrong|WRONG|FAIL|differ|rror|8208|first bad" /tmp/t_*.txt | cut -c1-200 | head -16 >>$s
echo "tests done at $SECONDS s" >>$s
sanitize_ht /tmp/n memcheck 150 memcheck_all
sanitize_ht /tmp/n racecheck 60 racecheck_9 SY_TEST_CASE=9
sanitize_ht /tmp/n racecheck 60 racecheck_22 SY_TEST_CASE=22
[ $SECONDS -lt 420 ] && sanitize_ht /tmp/n synccheck 50 synccheck_22 SY_TEST_CASE=22
[ $SECONDS -lt 470 ] && sanitize_ht /tmp/n initcheck 50 initcheck_0 SY_TEST_CASE=0
cat $s
