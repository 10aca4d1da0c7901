#!/usr/bin/env bash
# x2-ahead.sh — the combine's owners a batch ahead (SY_HT_OWNER_AHEAD, run 37), beside the code before it (B = ab/base,
# `tools/dev/ab.sh tree 2b98189 base`; carry ab/base). On n GPUs (2 best): test_gpu_moe_ht with the default, with
# the owners forced ahead and forced in lockstep, at n, at 1 rank and with 3 ranks sharing GPU 0, racecheck and
# synccheck of it ahead at 1 rank; then kernel µs of the combine and dispatch_bwd (BF16, 4,096 tokens): world n at
# 16 and 132 SMs, B, N (this tree, default), N lockstep (SY_HT_OWNER_AHEAD=0) and N ahead (=1), then reversed;
# world 1 the same. $OUT/summary.txt.
. tools/dev/variant.sh # build_tree, bench_ws, test_ht, dev_start
dev_start summary.txt
declare -A dir=([B]=/tmp/xB [N]=/tmp/xN)
build_tree /tmp/xB ab/base &
build_tree /tmp/xN . &
wait
T=/tmp/xN/tests/gpu/test_gpu_moe_ht
t() { test_ht /tmp/xN "$@"; } # NAME RANKS GPUS-ARG ENV...
t default$n $n "" X=1
t put$n $n "" SY_FORCE_PUT=1
t lock$n $n "" SY_HT_OWNER_AHEAD=0
t default1 1 "" X=1
t ahead1 1 "" SY_HT_OWNER_AHEAD=1
t share3 3 "--gpus 0,0,0" X=1
t share3lock 3 "--gpus 0,0,0" SY_HT_OWNER_AHEAD=0
# bench_ws with an env
bw() { # LABEL V RANKS SMS ENV...
  local l=$1 v=$2 r=$3 sms=$4 b=${dir[$2]}
  shift 4
  env "$@" timeout 120 "$b/bin/syrun" -n $r "$b/bin/sy-bench" --no-nccl --tokens 4096 --wire bf16 --num-sms $sms moe-ht \
    >/tmp/r.txt 2>&1
  echo "== world $r, $sms SMs ($l) rc=$?" >>$s
  grep -E " (combine|dispatch_bwd) " /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
}
for w in $n 1; do for sms in 16 132; do
  for l in B N L A A L N B; do
    case $l in B) bw B B $w $sms X=1 ;; N) bw N N $w $sms X=1 ;; L) bw L N $w $sms SY_HT_OWNER_AHEAD=0 ;;
      A) bw A N $w $sms SY_HT_OWNER_AHEAD=1 ;; esac
  done
done; done
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck synccheck; do
  SY_TEST_SHARED_GPU=0 SY_HT_OWNER_AHEAD=1 timeout 140 /tmp/xN/bin/syrun -n 1 --timeout 130 $san --tool $tool \
    --print-limit 0 $T >/tmp/t_$tool.txt 2>&1
  echo "$tool ahead, 1 rank rc=$? $(python3 tools/dev/sanitizer-summary.py --total /tmp/t_$tool.txt)" >>$s
done
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_*.txt build_x*.log 2>/dev/null) 2>/dev/null
cat $s
