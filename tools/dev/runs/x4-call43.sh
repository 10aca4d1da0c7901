#!/usr/bin/env bash
# x4-call43.sh — run 43's first call: the dispatch's probe in bins at every rank (x4-probe-bins.sh), then racecheck
# and synccheck on test_gpu_moe_ht at 2 ranks (x-memcheck2.sh TOOL), which world 1's sanitizer steps never reach:
# the in-place path's inbox and the rings between ranks, the roles by warps (named barriers, the default from world 2).
X_NO_CAT=1 bash tools/dev/runs/x4-probe-bins.sh >/dev/null 2>&1
cp $OUT/summary.txt $OUT/probe-summary.txt
X_NO_CAT=1 X_TIMEOUT=220 bash tools/dev/runs/x-memcheck2.sh racecheck >/dev/null 2>&1
X_NO_CAT=1 X_TIMEOUT=110 bash tools/dev/runs/x-memcheck2.sh synccheck >/dev/null 2>&1
cat $OUT/summary.txt
