#!/usr/bin/env bash
# x2-pipe.sh — one device call (2 GPUs best; with 1 the world-2 parts are skipped): the combine's pipe, leaner
# (pipe.cuh: one flat piece sequence, 32-bit offsets, HT_PIPE_VEC 16-byte vectors a lane a piece; reduce_rows: this
# rank's rows in its place in the table). A = ab/base (the code before: `tools/dev/ab.sh tree HEAD base` here, carry
# ab/base), B = this tree with -DSY_HT_PIPE_VEC=1, C = this tree as it is (VEC 2). test_gpu_moe_ht with C at 2 GPUs
# (direct stores and puts), 1 rank and 3 sharing GPU 0, and with B at 2 and 1; then moe-ht kernel times (--no-nccl,
# BF16, 4,096 tokens): world 2 at 16 SMs (A B C C B A), world 1 at 16 and 132 SMs (A B C C B A). $OUT/pipe.txt.
. tools/dev/variant.sh # build_tree, bench_ws, test_ht, dev_start
dev_start pipe.txt
t0=$(date +%s)
build_tree /tmp/vA ab/base "" &
build_tree /tmp/vB . -DSY_HT_PIPE_VEC=1 &
build_tree /tmp/vC . "" &
wait
echo "builds $(($(date +%s) - t0)) s" >>$s
declare -A dir=([A]=/tmp/vA [B]=/tmp/vB [C]=/tmp/vC)
t() { # VARIANT LABEL RANKS GPUS-ARG ENV...
  local v=$1 l=$2 r=$3 g=$4
  shift 4
  env "$@" timeout 150 ${dir[$v]}/bin/syrun -n $r $g ${dir[$v]}/tests/gpu/test_gpu_moe_ht >/tmp/t_$v$l.txt 2>&1
  echo "test_gpu_moe_ht ($v, $l) n=$r $g rc=$?" >>$s
}
if [ "$n" -ge 2 ]; then
  t C w2 2 "" X=1
  t C w2put 2 "" SY_FORCE_PUT=1
  t B w2put 2 "" SY_FORCE_PUT=1
  t B w2 2 "" X=1
fi
t C w1 1 "" X=1
t B w1 1 "" X=1
t C s3 3 "--gpus 0,0,0" X=1
if [ "$n" -ge 2 ]; then
  p=1; for v in A B C C B A; do bench_ws $v 2 16 $p "combine|dispatch_bwd"; [ $v = C ] && p=2; done
fi
for sms in 16 132; do p=1; for v in A B C C B A; do bench_ws $v 1 $sms $p "combine|dispatch_bwd"; [ $v = C ] && p=2; done; done
if [ "$n" -ge 2 ]; then
  for v in B C; do
    rm -rf /tmp/p_$v && mkdir -p /tmp/p_$v
    SY_HT_PROBE=/tmp/p_$v/probe.%r.txt timeout 90 ${dir[$v]}/bin/syrun -n 2 ${dir[$v]}/bin/sy-bench --no-nccl \
      --tokens 4096 --wire bf16 moe-ht >/dev/null 2>&1
    echo "== probe ($v), world 2, 4,096 tokens, BF16" >>$s
    python3 tools/dev/ht-probe.py /tmp/p_$v/probe.*.txt | grep -E "kernel|combine|dispatch_bwd" >>$s 2>&1
  done
fi
tar czf $OUT/logs.tar.gz -C /tmp $(cd /tmp && ls t_*.txt build_v*.log 2>/dev/null) 2>/dev/null
cat $s
