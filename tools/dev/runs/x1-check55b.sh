#!/usr/bin/env bash
# x1-check55b.sh — run 55's fourth one-GPU call (~4 minutes). Call 3 (x1-check55.sh) passed every test and memcheck
# over the whole test, but its racecheck and synccheck "case 22" ran nothing: the cases were 0-21 and the test let an
# index past the end pass (it now fails naming it). New since: case 22, "fp8 one SM" (config.num_sms 1: the layout
# kernel a single block, its exchange after prefix and pos on that block; exact mode). Tests at 1, 3 sharing (the
# whole test), case 22 at 2 and 4 sharing; SY_TEST_CASE=99 must fail; racecheck and synccheck on case 9 (tallies in
# shared memory), 21 (8,208 experts: tallies in global memory) and 22 (one block).
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
build_tree /tmp/n . ""
echo "build done at $SECONDS s" >>$s
test_ht /tmp/n w1 1 "" SY_HT_OWN_QUEUE=-1
test_ht /tmp/n w3 3 "--gpus 0,0,0"
test_ht /tmp/n one2 2 "--gpus 0,0" SY_TEST_CASE=22
test_ht /tmp/n one4 4 "--gpus 0,0,0,0" SY_TEST_CASE=22
test_ht /tmp/n none 1 "" SY_TEST_CASE=99
grep -E "wrong|WRONG|FAIL|differ|rror|one SM|such case" /tmp/t_*.txt | cut -c1-200 | head -16 >>$s
echo "tests done at $SECONDS s" >>$s
for c in 21 22 9; do sanitize_ht /tmp/n racecheck 60 racecheck_$c SY_TEST_CASE=$c; done
for c in 21 22 9; do [ $SECONDS -lt 450 ] && sanitize_ht /tmp/n synccheck 50 synccheck_$c SY_TEST_CASE=$c; done
cat $s
