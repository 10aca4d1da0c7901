#!/usr/bin/env bash
# x4-roles.sh — a channel's two roles on one block's warps (SY_HT_ROLES=1: C = SMs channels, S warps of 16 on role
# 0) against two blocks a channel (0) and against the commit before (ab/base: `tools/dev/ab.sh tree REV base` here,
# carry ab/base). With n GPUs (4 best): test_gpu_moe_ht with roles at n (stores, then puts), by blocks at n, with
# roles at 1 rank (forced) and with 3 ranks on GPU 0; then moe-ht BF16, 4,096 tokens, 16 SMs at world n: base, by
# blocks, and by warps with the dispatch kernel's sending warps SY_HT_SEND_WARPS 4 / 6 / 8 and the combine's
# experts' side SY_HT_EXPERT_WARPS 8 / 10 / 12, two passes in rotating order; the FP8 dispatch by warps and by
# blocks; a probe by warps at 8,192 tokens. The prediction (bench/NOTES.md, run 38's probes): -13 to -17% for the
# dispatch, the combine and combine_bwd at the best split. $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, test_ht, bench_tree, probe_tree, dev_start
dev_start summary.txt
build_tree /tmp/xN . "" &
build_tree /tmp/xO ab/base "" &
wait
[ "$n" -ge 2 ] && test_ht /tmp/xN roles$n $n "" SY_HT_ROLES=1
[ "$n" -ge 2 ] && test_ht /tmp/xN rolesput$n $n "" SY_HT_ROLES=1 SY_FORCE_PUT=1
[ "$n" -ge 2 ] && test_ht /tmp/xN blocks$n $n "" SY_HT_ROLES=0
test_ht /tmp/xN roles1 1 "" SY_HT_ROLES=1
test_ht /tmp/xN roles_share3 3 "--gpus 0,0,0" SY_HT_ROLES=1 SY_HT_SEND_WARPS=4 SY_HT_EXPERT_WARPS=12
RE="dispatch|combine|combine_bwd|dispatch_bwd"
A=(--tokens 4096 --wire bf16 --num-sms 16)
one() { # LABEL ENV...
  local label=$1
  shift
  (export "$@"; bench_tree /tmp/xN "$label" $n "$RE" "${A[@]}")
}
for pass in 1 2; do
  if [ $pass = 1 ]; then order="base blocks r6 r4 r8"; else order="r8 r4 r6 blocks base"; fi
  for v in $order; do
    case $v in
    base) bench_tree /tmp/xO "world $n base (pass $pass)" $n "$RE" "${A[@]}" ;;
    blocks) one "world $n by blocks (pass $pass)" SY_HT_ROLES=0 ;;
    r6) one "world $n by warps S=6 E=10 (pass $pass)" SY_HT_ROLES=1 SY_HT_SEND_WARPS=6 SY_HT_EXPERT_WARPS=10 ;;
    r4) one "world $n by warps S=4 E=12 (pass $pass)" SY_HT_ROLES=1 SY_HT_SEND_WARPS=4 SY_HT_EXPERT_WARPS=12 ;;
    r8) one "world $n by warps S=8 E=8 (pass $pass)" SY_HT_ROLES=1 SY_HT_SEND_WARPS=8 SY_HT_EXPERT_WARPS=8 ;;
    esac
  done
done
(export SY_HT_ROLES=1; bench_tree /tmp/xN "world $n FP8 by warps" $n "dispatch" --tokens 4096 --wire fp8 --num-sms 16)
(export SY_HT_ROLES=0; bench_tree /tmp/xN "world $n FP8 by blocks" $n "dispatch" --tokens 4096 --wire fp8 --num-sms 16)
(export SY_HT_ROLES=1; probe_tree /tmp/xN "by warps S=6 E=10, 8,192 tokens BF16" $n --tokens 8192 --wire bf16 --num-sms 16)
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_*.txt build_x*.log 2>/dev/null) 2>/dev/null
cat $s
