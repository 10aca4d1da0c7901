#!/usr/bin/env bash
# x4-run50.sh — run 50, call 4: the own-token queue's tokens a ticket (SY_HT_OWN_RUN at build time: 1, 2, 4) against
# the base (ab/base, 1467ea9). Call 3: a token a ticket took the world-4 BF16 dispatch 786 -> 753 µs but the world-1
# FP8 dispatch at 132 SMs 116.9 -> 120.5 (4,096 tickets on one counter from 132 blocks). moe-ht, 4,096 tokens, arena,
# kernel µs: world 1 at 132 SMs (both wires), world 1 at 16 SMs (BF16, keep 1 and 0.0704), world $n at 16 SMs (both
# wires); variants in the order base r1 r2 r4, then back. Measured worse at 2 and 4 (bench/NOTES.md, run 50); the
# macro was dropped after this call (a token a ticket kept): to rerun, apply
# tools/dev/patches/ht-own-run.patch (against 4485e6b).
. tools/dev/variant.sh # build_tree, dev_start, test_ht
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_tree /tmp/b ab/base "" &
build_tree /tmp/r1 . "" &
build_tree /tmp/r2 . "-DSY_HT_OWN_RUN=2" &
build_tree /tmp/r4 . "-DSY_HT_OWN_RUN=4"
wait
ht() { # ht V RANKS LABEL ARGS...
  local d=/tmp/$1 r=$2 label=$3
  shift 3
  timeout 90 $d/bin/syrun -n $r $d/bin/sy-bench --no-nccl -c 0 --tokens 4096 --recv arena "$@" moe-ht >/tmp/r.txt 2>&1
  echo "== $label ($v) rc=$?" >>$s
  grep -E "^\[rank 0\] +[0-9]+ +(bf16|fp8) +dispatch |rror" /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
}
for v in b r1 r2 r4 r4 r2 r1 b; do
  ht $v 1 "world 1, 132 SMs" --num-sms 132
  ht $v 1 "world 1, 16 SMs" --wire bf16
  ht $v 1 "world 1, 16 SMs, keep 0.0704" --wire bf16 --keep-experts 0.0704
  [ "$n" -ge 2 ] && ht $v $n "world $n, 16 SMs"
done
test_ht /tmp/r2 w1.r2 1 ""
[ "$n" -ge 2 ] && test_ht /tmp/r2 w$n.r2 $n ""
cat $s
