#!/usr/bin/env bash
# x4-settle.sh — one device call (issue 19; four GPUs best; not run yet): where a round's hand-back or publish runs
# (SY_HT_SETTLE_AHEAD, build time, rows.cuh: serve_rounds). A = 0 (the default: after the round, its system-scope
# fence before the next round starts), B = 1 (by the block's last warp during the next round), R = 0 with
# SY_HT_HEAD_ORDER=2 (no fence before the head stores: run 34 measured it 1-2% faster; B should come near it on the
# dispatch and go beyond it on the combine, whose experts' side also fences before each publish: 199 us of 3,585 at
# 8,192 tokens in run 34's probe). Variants built side by side; test_gpu_moe_ht with B at 4 ranks (also the put
# path) and at 1 rank (ranks sharing one GPU: 3 and 1, timings skipped, where fewer than 4 GPUs are present); moe-ht
# at world 4, 4,096 tokens, 16 SMs, both wires, two passes rotating; the probe of A and B (8,192 tokens, BF16: the
# sync column; B's hand-back is not in its sync column but in its work: compare the kernels' times). $OUT/settle.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/settle.txt
nvidia-smi -L | head -1 >>$s
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
. tools/dev/variant.sh # variant DIR FLAGS: a build side by side; rotate3, probe4
variant /tmp/vA "" &
variant /tmp/vB -DSY_HT_SETTLE_AHEAD=1 &
variant /tmp/vR -DSY_HT_HEAD_ORDER=2 &
wait
declare -A dir=([A]=/tmp/vA [B]=/tmp/vB [R]=/tmp/vR)
t() { # LABEL RANKS GPUS-ARG ENV... (ranks sharing one GPU are time-sliced: 200 s)
  local l=$1 r=$2 g=$3 cap=90
  [ -n "$g" ] && cap=200
  shift 3
  env "$@" timeout $cap /tmp/vB/bin/syrun -n $r $g /tmp/vB/tests/gpu/test_gpu_moe_ht >/tmp/t_$l.txt 2>&1
  echo "test_gpu_moe_ht ($l, B) n=$r $g rc=$?" >>$s
}
if [ "$n" -ge 4 ]; then
  t b4 4 "" X=1
  t b4put 4 "" SY_FORCE_PUT=1
else
  t b3 3 "--gpus 0,0,0" X=1
  t b3put 3 "--gpus 0,0,0" SY_FORCE_PUT=1
fi
t b1 1 "" X=1
if [ "$n" -ge 4 ]; then
  rotate3 A B R
  for v in A B; do probe4 $v; done
fi
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_b*.txt build_v*.log 2>/dev/null) 2>/dev/null
cat $s
