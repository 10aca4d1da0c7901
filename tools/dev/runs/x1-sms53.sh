#!/usr/bin/env bash
# x1-sms53.sh — run 53, call 2 (1 GPU). Issue 21 at world 1, groups 1,5,5,3 with the ends on every SM (call 1's best
# weights): what the communication's budget and the GEMMs' SM target do to the step — the base (16 SMs, GEMMs beside
# on the 116 left), the GEMMs beside on every SM (--gemm-sms 0), the budget at 12 and 8 (run 49 measured 16-48 at
# world 1, not below 16), four layers a step (only the first dispatch and the last combine alone), and the
# sequential step with the communication on every SM (--num-sms 132, way a: the step with no overlap at all), then
# the base again (the GPU's drift).
. tools/dev/variant.sh # build_tree, dev_start, layer_at
dev_start summary.txt
export SY_HEAP_SIZE=24G
build_tree /tmp/h . ""
echo "build done at $SECONDS s" >>$s
G="--micro-batches 1,5,5,3"
T="-n 20 -w 2 -c 0 --ways comm,compute,b,c,b,c"
layer_at 1 "base 16, ends 132" --end-sms 132 $G $T
layer_at 1 "gemm-sms 0" --end-sms 132 --gemm-sms 0 $G $T
layer_at 1 "num-sms 12" --num-sms 12 --end-sms 132 $G $T
layer_at 1 "num-sms 8" --num-sms 8 --end-sms 132 $G $T
layer_at 1 "sequential, comm on 132" --num-sms 132 $G -n 20 -w 2 -c 0 --ways comm,compute,a,a
[ $SECONDS -lt 420 ] && layer_at 1 "4 layers" --end-sms 132 $G --layers 4 -n 8 -w 2 -c 0 --ways comm,compute,b,c
[ $SECONDS -lt 520 ] && layer_at 1 "base again" --end-sms 132 $G $T
cat $s
