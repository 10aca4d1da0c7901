#!/usr/bin/env bash
# x-next.sh — the first device call after run 36 (four GPUs best: the four-GPU kinds were offered again just after
# run 36's device time was spent). Run 36 made the combine's pipe leaner (f9005d7: −31–32% at 16 SMs on 1 and 2
# GPUs) and measured a faster combine_bwd loop that gained at world 2 and lost at world 1
# (tools/dev/patches/ht-grad-fast.patch); neither is measured at world 4. e313e23 changed the cuda backend's start
# (rank 0's NVSHMEM unique id allgathered with a flag) after run 36's device time: every run here exercises it first.
# Before the call, here:
#   tools/dev/ab.sh tree 22b494a pre                     # the code before the leaner pipe
#   tools/dev/ab.sh tree HEAD grad && (cd ab/grad && patch -p1 <../../tools/dev/patches/ht-grad-fast.patch)
#   tools/dev/ab.sh tree HEAD gradi && (cd ab/gradi && patch -p1 <../../tools/dev/patches/ht-grad-fast-inline.patch)
#   tools/dev/ab.sh tree HEAD owner && (cd ab/owner && patch -p1 <../../tools/dev/patches/ht-owner-ahead.patch)
# and carry ab/pre, ab/grad, ab/gradi and ab/owner (O: the combine's owners plan and wait a batch ahead). With n >= 4 GPUs: test_gpu_moe_ht (direct, puts) with this tree and both
# patches at 4; moe-ht at world 4, 16 SMs, BF16, 4,096 tokens, --no-nccl, P C G I O O I G C P (P = pre, C = this
# tree, G = ht-grad-fast.patch: the loop in a call, I = ht-grad-fast-inline.patch: inline, a piece at a time, O =
# ht-owner-ahead.patch);
# then the probe of this tree (8,192 tokens: where the blocks' time goes now) and the issue-19 table with it (NCCL
# beside, $OUT/ht_w4.json). With fewer GPUs: the same at world n (at 1:
# the tests with 3 ranks sharing GPU 0 too). Every other GPU test: the next call, `GPU_CHECK_ONLY='^test_'
# tools/gpu-check.sh /tmp/g 4`. $OUT/summary.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt
nvidia-smi -L | head -1 >>$s
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
w=$n
[ "$w" -gt 4 ] && w=4
. tools/dev/variant.sh # build_tree DIR SRC [FLAGS]
build_tree /tmp/xP ab/pre &
build_tree /tmp/xC . &
build_tree /tmp/xG ab/grad &
build_tree /tmp/xI ab/gradi &
build_tree /tmp/xO ab/owner &
wait
declare -A dir=([P]=/tmp/xP [C]=/tmp/xC [G]=/tmp/xG [I]=/tmp/xI [O]=/tmp/xO)
t() { # VARIANT RANKS GPUS-ARG ENV...
  local v=$1 r=$2 g=$3
  shift 3
  env "$@" timeout 150 ${dir[$v]}/bin/syrun -n $r $g ${dir[$v]}/tests/gpu/test_gpu_moe_ht >/tmp/t_$v$r.txt 2>&1
  echo "test_gpu_moe_ht ($v) n=$r $g $* rc=$?" >>$s
}
for v in C G I O; do
  t $v $w "" X=1
  [ "$w" -ge 2 ] && t $v $w "" SY_FORCE_PUT=1
  [ "$w" -eq 1 ] && t $v 3 "--gpus 0,0,0" X=1
done
p=1
for v in P C G I O O I G C P; do
  timeout 90 ${dir[$v]}/bin/syrun -n $w ${dir[$v]}/bin/sy-bench --no-nccl --tokens 4096 --wire bf16 moe-ht \
    >/tmp/r.txt 2>&1
  echo "== world $w, 16 SMs ($v, pass $p) rc=$?" >>$s
  grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) " /tmp/r.txt | sed 's/\[rank 0\]//' >>$s
  [ $v = O ] && p=2
done
rm -rf /tmp/pC && mkdir -p /tmp/pC
SY_HT_PROBE=/tmp/pC/probe.%r.txt timeout 120 /tmp/xC/bin/syrun -n $w /tmp/xC/bin/sy-bench --no-nccl --tokens 8192 \
  --wire bf16 moe-ht >/dev/null 2>&1
echo "== probe (C), world $w, 8,192 tokens, BF16, rank 0" >>$s
python3 tools/dev/ht-probe.py /tmp/pC/probe.0.txt >>$s 2>&1
timeout 200 /tmp/xC/bin/syrun -n $w /tmp/xC/bin/sy-bench --json $OUT/ht_w$w.json moe-ht >/tmp/ht.txt 2>&1
echo "== moe-ht world $w, 16 SMs, NCCL beside rc=$?" >>$s
grep -E " (dispatch|combine|combine_bwd|dispatch_bwd) |target" /tmp/ht.txt | sed 's/\[rank 0\]//' >>$s
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_*.txt build_x*.log 2>/dev/null) 2>/dev/null
cat $s
