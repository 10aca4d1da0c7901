#!/usr/bin/env bash
# x4-roles-check.sh — after the roles by warps landed (run 39): with X1=1 first world 1 (where SY_HT_ROLES auto keeps
# the roles by blocks) against the commit before (ab/base, carry it): moe-ht BF16 and FP8, 4,096 tokens, at 132 and
# 16 SMs, base new new base (run 39's call 4, ~5 minutes with the builds); then every GPU test at n GPUs (4 best) and
# the moe-ht and layer benchmarks beside NCCL (results.md), no sanitizers: the issue-19 table on the roles by warps
# (run 39 ran out of device time before it). $OUT/summary.txt, $OUT/results.md.
. tools/dev/variant.sh # build_tree, bench_tree, dev_start
dev_start summary.txt
if [ "${X1:-0}" = 1 ]; then
build_tree /tmp/xN . "" &
build_tree /tmp/xO ab/base "" &
wait
RE="dispatch|combine|combine_bwd|dispatch_bwd"
for sms in 132 16; do
  for v in O N N O; do
    bench_tree /tmp/x$v "world 1, $sms SMs, BF16 ($v)" 1 "$RE" --tokens 4096 --wire bf16 --num-sms $sms
    bench_tree /tmp/x$v "world 1, $sms SMs, FP8 ($v)" 1 "dispatch" --tokens 4096 --wire fp8 --num-sms $sms
  done
done
fi
GPU_CHECK_REV=${GPU_CHECK_REV:-} GPU_CHECK_ONLY='^test_|^bench_(moe-ht|layer)$' GPU_CHECK_SANITIZE="" \
  GPU_CHECK_TIMEOUT=150 tools/gpu-check.sh /tmp/g $n >$OUT/gc.txt 2>&1
echo "== gpu-check rc=$?" >>$s
cat /tmp/g/summary.txt >>$s 2>/dev/null
cp /tmp/g/results.md $OUT/ 2>/dev/null
(cd /tmp/g && tar czf $OUT/json.tar.gz *.json 2>/dev/null)
cp /tmp/g/logs.tar.gz $OUT/ 2>/dev/null
cat $s
