#!/usr/bin/env bash
# x2-pullprobe61.sh — two GPUs (~7 minutes): why the pulled dispatch (pull.cu, SY_HT_PULL=1) runs at 1,076 us against
# 653 pushed at world 2, 16 SMs, BF16 (this session's call 1), while pullx's ceiling (the same 3-stage bulk-copy
# pipelines) ran as fast as local memory at world 4. Here: the tests once more (items now alternate sources); the
# pull's probe (per block: scans, pipelines over own / peers' copies, warp 0's stage waits); recv in the arena or in
# device memory, push and pull; build-time variants of the pipelines (SY_HT_PULL_STAGES 2: 7 pipes for BF16; 5: 3 pipes;
# 3 stages on 4 pipes like pullx).
. tools/dev/variant.sh
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_main
(build_tree /tmp/s2 . "-DSY_HT_PULL_STAGES=2" ; build_tree /tmp/s5 . "-DSY_HT_PULL_STAGES=5";
 build_tree /tmp/p4 . "-DSY_HT_PULL_PIPES=4"; echo "variants built at $SECONDS s" >>$s) &
bp=$!
SY_HT_PULL=1 test_ht build w$n.pull $n "" SY_HT_PULL=1
wait $bp
P() { # LABEL DIR ENV... : pull/push, 16 SMs, 4,096 tokens, BF16 dispatch rows
  local label=$1 d=$2; shift 2
  ( export "$@"; bench_tree $d "$label" $n "dispatch" --tokens 4096 --wire bf16 --num-sms 16 --recv arena )
}
for pass in 1 2; do
  P "pull, arena ($pass)" build SY_HT_PULL=1
  P "push, arena ($pass)" build SY_HT_PULL=0
  P "pull S2 (7 pipes) ($pass)" /tmp/s2 SY_HT_PULL=1
  P "pull S5 (3 pipes) ($pass)" /tmp/s5 SY_HT_PULL=1
  P "pull P4 (4 pipes) ($pass)" /tmp/p4 SY_HT_PULL=1
done
( export SY_HT_PULL=1; bench_tree build "pull, recv in device memory" $n "dispatch" --tokens 4096 --wire bf16 --num-sms 16 --recv device )
( export SY_HT_PULL=0; bench_tree build "push, recv in device memory" $n "dispatch" --tokens 4096 --wire bf16 --num-sms 16 --recv device )
rm -rf /tmp/probe_t && mkdir -p /tmp/probe_t
SY_HT_PULL=1 SY_HT_PROBE=/tmp/probe_t/probe.%r.txt timeout 120 build/bin/syrun -n $n build/bin/sy-bench --no-nccl \
  --tokens 4096 --wire bf16 --num-sms 16 --recv arena moe-ht >/dev/null 2>&1
echo "== probe pull, 16 SMs, 4,096 tokens BF16 rc=$?" >>$s
python3 tools/dev/ht-probe.py --blocks --kernel dispatch /tmp/probe_t/probe.0.txt >>$s 2>&1
cp /tmp/probe_t/probe.0.txt $OUT/probe_pull.0.txt
echo "end at $SECONDS s" >>$s
cat $s
