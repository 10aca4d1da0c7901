#!/usr/bin/env bash
# x4-layer-sms.sh — one device call on 4 GPUs (issue 21's four-GPU target): the layer at world 4, 4,096 tokens a rank,
# with the communication on 16, 24 and 32 SMs (`--num-sms`; the GEMMs beside it on the rest): does a larger
# communication budget shrink the exposed share of way c (t_c - t_compute) / t_c, given that the GEMMs lose more
# than the SMs they give up (run 31, NOTES "The GEMMs beside the communication")? $OUT/summary.txt, JSON in
# $OUT/layer_sms.tgz. LAYER_SMS="64 132" picks other budgets.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
s=$OUT/summary.txt B=build/bin
SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
mkdir -p /tmp/ls
for sms in ${LAYER_SMS:-24 16 32}; do
  timeout 120 $B/syrun -n 4 $B/sy-bench --no-nccl --tokens 4096 --num-sms $sms --json /tmp/ls/layer_w4_s$sms.json \
    layer >/tmp/l.txt 2>&1
  echo "== layer world 4, communication on $sms SMs rc=$?" >>$s
  grep -E "^\[rank 0\]" /tmp/l.txt | grep -vE "^\[rank 0\] # *$" | tail -20 >>$s
done
tar czf $OUT/layer_sms.tgz -C /tmp/ls .
cat $s
