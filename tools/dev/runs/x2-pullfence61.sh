#!/usr/bin/env bash
# x2-pullfence61.sh — two GPUs (~7 minutes): call 2 found the pulled dispatch's pipelines barely waiting for their loads
# (warp 0: 17.8 of ~940 us) and own items as slow as peers' — the time per message goes elsewhere. Suspect: the whole
# fence.proxy.async before every reload (orders the generic proxy's global accesses too); now fence.proxy.async.
# shared::cta. Here: the tests; pull (new fence) / pull (-DSY_HT_PULL_FULL_FENCE=1) / push, a b c c b a, both wires;
# the probe (wait now includes warp 0's waits for its stores to have read a stage); pullx's ceiling at world 2.
# (Run once, run 61 call 3; -DSY_HT_PULL_FULL_FENCE was removed after it: bench/NOTES.md run 61.)
. tools/dev/variant.sh
dev_start summary.txt
export SY_HEAP_SIZE=8G
build_main
(build_tree /tmp/ff . "-DSY_HT_PULL_FULL_FENCE=1"; echo "variant built at $SECONDS s" >>$s) &
bp=$!
test_ht build w$n.pull $n "" SY_HT_PULL=1
wait $bp
P() { # LABEL DIR ENV...
  local label=$1 d=$2; shift 2
  ( export "$@"; bench_tree $d "$label" $n "dispatch" --tokens 4096 --num-sms 16 --recv arena )
}
for v in new ff push push ff new; do
  case $v in
    new) P "pull, shared::cta fence" build SY_HT_PULL=1 ;;
    ff) P "pull, full fence" /tmp/ff SY_HT_PULL=1 ;;
    push) P "push" build SY_HT_PULL=0 ;;
  esac
done
rm -rf /tmp/probe_t && mkdir -p /tmp/probe_t
SY_HT_PULL=1 SY_HT_PROBE=/tmp/probe_t/probe.%r.txt timeout 120 build/bin/syrun -n $n build/bin/sy-bench --no-nccl \
  --tokens 4096 --wire bf16 --num-sms 16 --recv arena moe-ht >/dev/null 2>&1
echo "== probe pull, 16 SMs, 4,096 tokens BF16 rc=$?" >>$s
python3 tools/dev/ht-probe.py --kernel dispatch /tmp/probe_t/probe.0.txt >>$s 2>&1
echo "== pullx at $n GPUs ($SECONDS s)" >>$s
timeout 150 build/bin/sy-expand-ceiling pullx >>$s 2>&1
echo "end at $SECONDS s" >>$s
cat $s
