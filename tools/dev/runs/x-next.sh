#!/usr/bin/env bash
# x-next.sh — the next device call with four GPUs (the four-GPU kinds were not lent in runs 36 and 37). Run 36 made
# the combine's pipe leaner (f9005d7: −31–32% at 16 SMs on 1 and 2 GPUs) and run 37 put the combine's owners a batch
# ahead (SY_HT_OWNER_AHEAD, −21% more at world 2); neither is measured at world 4.
# Before the call, here:
#   tools/dev/ab.sh tree 22b494a pre                     # the code before the leaner pipe
# and carry ab/pre. With n GPUs (4 best; at most 4 used): test_gpu_moe_ht at n (the default, puts, the owners in
# lockstep); moe-ht at world n, 16 SMs, BF16, 4,096 tokens, --no-nccl, P C L L C P (P = pre, C = this tree,
# L = this tree with SY_HT_OWNER_AHEAD=0); then the probe of this tree (8,192 tokens: where the blocks' time goes
# now) and the issue-19 table with it (NCCL beside, $OUT/ht_w$n.json). At 1 GPU: the tests with 3 ranks sharing
# GPU 0 too. Every other GPU test: the next call, `GPU_CHECK_ONLY='^test_' tools/gpu-check.sh /tmp/g 4`.
# $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, test_ht, bench_tree, probe_tree, dev_start
dev_start summary.txt
w=$n
declare -A dir=([P]=/tmp/xP [C]=/tmp/xC [L]=/tmp/xC)
declare -A envs=([P]=X=1 [C]=X=1 [L]=SY_HT_OWNER_AHEAD=0)
build_tree /tmp/xP ab/pre &
build_tree /tmp/xC . &
wait
t() { test_ht /tmp/xC "$@"; } # NAME RANKS GPUS-ARG ENV...
t default $w "" X=1
[ "$w" -ge 2 ] && t put $w "" SY_FORCE_PUT=1
t lockstep $w "" SY_HT_OWNER_AHEAD=0
[ "$w" -eq 1 ] && t share3 3 "--gpus 0,0,0" X=1
for v in P C L L C P; do
  (export ${envs[$v]}
    bench_tree ${dir[$v]} "world $w, 16 SMs ($v)" $w "dispatch|combine|combine_bwd|dispatch_bwd" --tokens 4096 --wire bf16)
done
probe_tree /tmp/xC "(C), world $w, 8,192 tokens, BF16, rank 0" $w --tokens 8192 --wire bf16
timeout 200 /tmp/xC/bin/syrun -n $w /tmp/xC/bin/sy-bench --json $OUT/ht_w$w.json moe-ht >/tmp/ht.txt 2>&1
echo "== moe-ht world $w, 16 SMs, NCCL beside rc=$?" >>$s
grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) |target" /tmp/ht.txt | sed 's/\[rank 0\]//' >>$s
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_*.txt build_x*.log 2>/dev/null) 2>/dev/null
cat $s
