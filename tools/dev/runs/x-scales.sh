#!/usr/bin/env bash
# x-scales.sh — one device call (issue 19, the FP8 dispatch; run 33 calls 2 and 4, then with a build-time knob, now
# SY_HT_SCALE_HINT at run time): what the group-major scale stores cost and whether an L2 evict_last policy on them
# pays. sy-expand-ceiling with EC_SCALES=1 (rows alone; + scales group-major, row-major, group-major under
# evict_last, + rows streaming, row-major then transposed), on a random permutation and on the dispatch's layout
# (EC_EXPERTS=256; NO_EC=1 skips both); test_gpu_moe_ht with SY_HT_SCALE_HINT=1 at the GPUs present (ranks sharing
# one GPU where only one is present) and at 1 rank; then moe-ht FP8 with the policy (1) and without (0) at world 1
# (132 and 16 SMs) and world 4 (16 SMs, if present), 4,096 tokens, two passes alternating, and BF16 once (a
# control). $OUT/scales.txt.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/scales.txt
n=$(nvidia-smi -L | grep -c '^GPU')
nvidia-smi -L | head -1 >>$s
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
if [ -z "$NO_EC" ]; then
  echo "== EC_SCALES, random permutation" >>$s
  EC_SCALES=1 timeout 90 build/bin/sy-expand-ceiling 4096 7168 8 >>$s 2>&1
  echo "== EC_SCALES, EC_EXPERTS=256" >>$s
  EC_EXPERTS=256 EC_SCALES=1 timeout 90 build/bin/sy-expand-ceiling 4096 7168 8 >>$s 2>&1
fi
b=build/bin
if [ "$n" -ge 4 ]; then w=4; g=""; else w=3; g="--gpus 0,0,0"; fi
SY_HT_SCALE_HINT=1 timeout 90 $b/syrun -n $w $g build/tests/gpu/test_gpu_moe_ht >/tmp/t.txt 2>&1
echo "test_gpu_moe_ht n=$w (hint 1) rc=$?" >>$s
SY_HT_SCALE_HINT=1 timeout 60 $b/syrun -n 1 build/tests/gpu/test_gpu_moe_ht >/tmp/t1.txt 2>&1
echo "test_gpu_moe_ht n=1 (hint 1) rc=$?" >>$s
bench() { # HINT WORLD SMS WIRE PASS
  SY_HT_SCALE_HINT=$1 timeout 60 $b/syrun -n $2 $b/sy-bench --no-nccl --tokens 4096 --wire $4 --num-sms $3 moe-ht >/tmp/r.txt 2>&1
  echo "== hint $1 world $2, $3 SMs, $4, pass $5 rc=$?" >>$s
  grep -E " dispatch " /tmp/r.txt | sed 's/\[rank 0\]//' | head -1 >>$s
}
for pass in 1 2; do
  for h in 0 1; do bench $h 1 132 fp8 $pass; bench $h 1 16 fp8 $pass; done
  [ "$n" -ge 4 ] && for h in 0 1; do bench $h 4 16 fp8 $pass; done
done
for h in 0 1; do bench $h 1 132 bf16 1; done
cp /tmp/t.txt $OUT/test_hint.txt
cat $s
