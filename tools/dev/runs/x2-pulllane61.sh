#!/usr/bin/env bash
# x2-pulllane61.sh — two GPUs (~4 minutes): the last suspects for pull.cu's slow bulk stores (call 5: not the rows'
# alignment either). Default now: no proxy fence before a BF16 reload (the lanes read a stage only for FP8 scales);
# -DSY_HT_PULL_FENCE_ALWAYS=1 the fence as before; -DSY_HT_PULL_LANE0=1 the BF16 pipeline on lane 0 alone (pullx's
# loop). The tests at 2 GPUs with the default; BF16 dispatch at 16 SMs, a b c d d c b a.
# (Run once, run 61 call 6; both knobs were removed after it — neither changed the time: bench/NOTES.md run 61.)
. tools/dev/variant.sh
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_main
(build_tree /tmp/l0 . "-DSY_HT_PULL_LANE0=1"; build_tree /tmp/fa . "-DSY_HT_PULL_FENCE_ALWAYS=1";
 echo "variants built at $SECONDS s" >>$s) &
bp=$!
test_ht build w$n.pull $n "" SY_HT_PULL=1
wait $bp
P() { # LABEL DIR PULL
  ( export SY_HT_PULL=$3; bench_tree $2 "$1" $n "dispatch" --tokens 4096 --wire bf16 --num-sms 16 --recv arena )
}
for v in new l0 fa push push fa l0 new; do
  case $v in
    new) P "pull, no fence (BF16)" build 1 ;;
    l0) P "pull, lane 0 alone" /tmp/l0 1 ;;
    fa) P "pull, fence always" /tmp/fa 1 ;;
    push) P "push" build 0 ;;
  esac
done
echo "end at $SECONDS s" >>$s
cat $s
