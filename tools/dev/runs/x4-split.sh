#!/usr/bin/env bash
# x4-split.sh — one device call (issue 19; four GPUs): the SM budget split unevenly between the token side (the
# dispatch's senders, the combine's owners) and the expert side (the dispatch's receivers, the combine's experts'
# side), SY_HT_TOKEN_BLOCKS at run time. By the probe of run 34 (8,192 tokens, world 4) the expert side is busy
# throughout (the dispatch's receivers wait 0 of 2,376 us; the combine's experts' side works 2,866 of 3,585) while
# the token side waits (the senders 824 us for ring room, the owners 1,063 for partials). Base = the code before
# (tools/dev/patches/ht-token-blocks.patch reversed, SY_HT_HEAD_ORDER=1 as since efa707d); new = this tree (S = C = 8 by
# default, then S = 6, 5, 4 of 16: C = 10, 11, 12). test_gpu_moe_ht (every variant, the new .tok ones) at 4 GPUs
# and at 1 rank; moe-ht at world 4, 4,096 tokens, 16 SMs, both wires, two passes rotating; the probe with S = 5 at
# 8,192 tokens. $OUT/split.txt. Run 34 measured it (2026-11-27, 4 x H100) and the split was dropped: the code comes
# back with the patch (onto efa707d), which the script applies first.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
git apply --check tools/dev/patches/ht-token-blocks.patch 2>/dev/null && git apply tools/dev/patches/ht-token-blocks.patch
s=$OUT/split.txt
nvidia-smi -L | head -1 >>$s
. tools/dev/variant.sh
rm -rf /tmp/basesrc && mkdir -p /tmp/basesrc && tar c --exclude=./build . | tar x -C /tmp/basesrc
(cd /tmp/basesrc && patch -R -s -p1 <tools/dev/patches/ht-token-blocks.patch && variant /tmp/vbase -DSY_HT_HEAD_ORDER=1) &
GPU_CHECK_ONLY='^test_gpu_moe_ht' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=90 tools/gpu-check.sh /tmp/g 4 >/dev/null 2>&1
grep -v "^cpu tests" /tmp/g/summary.txt >>$s
GPU_CHECK_ONLY='^test_gpu_moe_ht(\.tok.*)?$' GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=90 tools/gpu-check.sh /tmp/g1 1 >/dev/null 2>&1
grep -E "^test_" /tmp/g1/summary.txt >>$s
wait
ls /tmp/vbase/bin/sy-bench >/dev/null 2>&1 || echo "base build missing" >>$s
b4() { # LABEL BINDIR TOKEN_BLOCKS PASS
  SY_HT_TOKEN_BLOCKS=$3 timeout 90 "$2/syrun" -n 4 "$2/sy-bench" --no-nccl --tokens 4096 moe-ht >/tmp/r.txt 2>&1
  echo "== world 4, 16 SMs ($1, S=$3, pass $4) rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) " /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
}
for pass in 1 2; do
  if [ $pass = 1 ]; then order="base:0 new:0 new:6 new:5 new:4"; else order="new:4 new:5 new:6 new:0 base:0"; fi
  for v in $order; do
    l=${v%%:*} t=${v##*:}
    if [ $l = base ]; then b4 base /tmp/vbase/bin $t $pass; else b4 new build/bin $t $pass; fi
  done
done
rm -rf /tmp/p && mkdir -p /tmp/p
SY_HT_TOKEN_BLOCKS=5 SY_HT_PROBE=/tmp/p/probe.%r.txt timeout 90 build/bin/syrun -n 4 build/bin/sy-bench --no-nccl --tokens 8192 --wire bf16 moe-ht >/dev/null 2>&1
echo "== probe (S=5), 8,192 tokens, BF16" >>$s
python3 tools/dev/ht-probe.py /tmp/p/probe.0.txt >>$s 2>&1
tar czf $OUT/logs.tar.gz -C /tmp g/logs.tar.gz build_vbase.log 2>/dev/null
cat $s
