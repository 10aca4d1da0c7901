# variant.sh — sourced by the device scripts (tools/dev/runs/) that build the library side by side with build-time
# knobs, time it and run its tests; each function is described at its definition.
#   variant DIR FLAGS   configures DIR with CMAKE_CUDA_FLAGS=FLAGS and builds sy-bench, syrun and test_gpu_moe_ht
#                       there (log: /tmp/build_<basename DIR>.log); on failure appends "build DIR failed" to $s.
variant() {
  build_tree "$1" . "$2"
}
#   build_tree DIR SRC [FLAGS]  the same from the source tree SRC (`.` or ab/NAME: tools/dev/ab.sh tree), the build
#                       log's last lines appended to $s on failure.
build_tree() {
  cmake -S "$2" -B "$1" -DCMAKE_CUDA_FLAGS="${3:-}" >/dev/null &&
    cmake --build "$1" -j 10 --target sy-bench syrun test_gpu_moe_ht >"/tmp/build_$(basename "$1").log" 2>&1 ||
    { echo "build $1 failed" >>"$s"; tail -20 "/tmp/build_$(basename "$1").log" >>"$s"; }
}
#   bench_ws V RANKS SMS PASS CALLS  moe-ht (4,096 tokens, BF16, no NCCL) with variant V's build at world RANKS on
#                        SMS SMs, its rows of the calls CALLS (a regex alternation, e.g. "combine|dispatch_bwd")
#                        appended to $s under "== world RANKS, SMS SMs (V, pass PASS)".
bench_ws() {
  local b=${dir[$1]}
  timeout 120 "$b/bin/syrun" -n "$2" "$b/bin/sy-bench" --no-nccl --tokens 4096 --wire bf16 --num-sms "$3" moe-ht \
    >/tmp/r.txt 2>&1
  echo "== world $2, $3 SMs ($1, pass $4) rc=$?" >>"$s"
  grep -E " ($5) " /tmp/r.txt | sed 's/\[rank 0\]//' >>"$s"
}
#   bench_tree DIR LABEL RANKS REGEX ARGS...  DIR's `sy-bench --no-nccl ARGS moe-ht` at RANKS ranks (the caller's
#                        environment: run it in a subshell that exports a variant's variables), its rows of the calls
#                        REGEX appended to $s under "== LABEL rc=...".
bench_tree() {
  local d=$1 label=$2 r=$3 re=$4
  shift 4
  timeout 120 "$d/bin/syrun" -n "$r" "$d/bin/sy-bench" --no-nccl "$@" moe-ht >/tmp/r.txt 2>&1
  echo "== $label rc=$?" >>"$s"
  grep -E " ($re) " /tmp/r.txt | sed 's/\[rank 0\]//' >>"$s"
}
#   ab_arena TOKENS WIRE V...  bench_tree of each variant V in turn (its build ${dir[V]}: the caller's `declare -A
#                        dir`) at world $n, 16 SMs, TOKENS tokens, recv in the arena, WIRE bf16 / fp8 / both; the
#                        dispatch's and combine_bwd's rows (x4-plan.sh, x4-stream.sh, x4-ahead44.sh).
ab_arena() {
  local t=$1 w=$2 v
  shift 2
  local wa=() lw=""
  [ "$w" = both ] || wa=(--wire "$w") lw=" ${w^^}"
  for v in "$@"; do
    bench_tree "${dir[$v]}" "world $n, 16 SMs, $t tokens$lw, arena ($v)" "$n" "dispatch|combine_bwd" \
      --tokens "$t" "${wa[@]}" --num-sms 16 --recv arena
  done
}
#   probe_tree DIR LABEL RANKS ARGS...  SY_HT_PROBE with DIR's `sy-bench --no-nccl ARGS moe-ht` at RANKS ranks: rank 0's
#                        table (tools/dev/ht-probe.py) appended to $s under "== probe LABEL".
probe_tree() {
  local d=$1 label=$2 r=$3
  shift 3
  rm -rf /tmp/probe_t && mkdir -p /tmp/probe_t
  SY_HT_PROBE=/tmp/probe_t/probe.%r.txt timeout 120 "$d/bin/syrun" -n "$r" "$d/bin/sy-bench" --no-nccl "$@" moe-ht \
    >/dev/null 2>&1
  echo "== probe $label" >>"$s"
  python3 tools/dev/ht-probe.py /tmp/probe_t/probe.0.txt >>"$s" 2>&1
}
#   bench4 V PASS REGEX  moe-ht at world 4 (4,096 tokens, 16 SMs, no NCCL) with variant V's build (${dir[V]}),
#                        its rows matching REGEX appended to $s under a "== world 4, 16 SMs (V, pass PASS)" line.
bench4() {
  local b=${dir[$1]}
  timeout 90 "$b/bin/syrun" -n 4 "$b/bin/sy-bench" --no-nccl --tokens 4096 moe-ht >/tmp/r.txt 2>&1
  echo "== world 4, 16 SMs ($1, pass $2) rc=$?" >>"$s"
  grep -E "$3" /tmp/r.txt | sed 's/\[rank 0\]//' >>"$s"
}
#   rotate3 A B C        bench4 of three variants' builds, two passes (A B C, then C B A), the four calls' rows.
rotate3() {
  local order=("$1" "$2" "$3" "$3" "$2" "$1") pass i
  for pass in 1 2; do for i in 0 1 2; do
    bench4 "${order[$(((pass - 1) * 3 + i))]}" $pass " (dispatch|combine|combine_bwd|dispatch_bwd) "
  done; done
}
#   probe4 V             SY_HT_PROBE with variant V's build (world 4, 8,192 tokens, BF16, no NCCL): rank 0's
#                        table (tools/dev/ht-probe.py) appended to $s under "== probe (V), 8,192 tokens, BF16".
probe4() {
  local b=${dir[$1]}
  rm -rf "/tmp/p_$1" && mkdir -p "/tmp/p_$1"
  SY_HT_PROBE="/tmp/p_$1/probe.%r.txt" timeout 90 "$b/bin/syrun" -n 4 "$b/bin/sy-bench" --no-nccl --tokens 8192 \
    --wire bf16 moe-ht >/dev/null 2>&1
  echo "== probe ($1), 8,192 tokens, BF16" >>"$s"
  python3 tools/dev/ht-probe.py "/tmp/p_$1/probe.0.txt" >>"$s" 2>&1
}
#   test_ht DIR NAME RANKS GPUS-ARG ENV...  DIR's test_gpu_moe_ht at RANKS (GPUS-ARG "" or e.g. "--gpus 0,0,0") with
#                        ENV (at least one VAR=VALUE); its log /tmp/t_NAME.txt, its exit code and its cases' "ok" count
#                        appended to $s.
test_ht() {
  local d=$1 name=$2 r=$3 g=$4
  shift 4
  env "$@" timeout 150 "$d/bin/syrun" -n "$r" $g "$d/tests/gpu/test_gpu_moe_ht" >"/tmp/t_$name.txt" 2>&1
  echo "test_gpu_moe_ht $name: n=$r $g $* rc=$? ($(grep -c ' ok ' "/tmp/t_$name.txt") cases ok)" >>"$s"
}
#   sanitize_ht DIR TOOL CAP NAME [ENV...]  compute-sanitizer's TOOL over DIR's test_gpu_moe_ht at world 1 with ENV (any
#                        VAR=VALUE, e.g. SY_TEST_CASE=9), capped at CAP s; its log $OUT/san_NAME.log, and
#                        a line with its exit code, tools/dev/sanitizer-summary.py's total and the cases' "ok" count,
#                        appended to $s (as tools/gpu-check.sh's sanitize steps; x1-check55*.sh).
sanitize_ht() {
  local d=$1 tool=$2 cap=$3 name=$4 t0=$SECONDS
  shift 4
  env SY_TEST_SHARED_GPU=0 "$@" timeout "$cap" "$d/bin/syrun" -n 1 --timeout $((cap - 5)) \
    /usr/local/cuda/bin/compute-sanitizer --tool "$tool" --print-limit 0 "$d/tests/gpu/test_gpu_moe_ht" \
    >"$OUT/san_$name.log" 2>&1
  echo "== $tool $name $* rc=$? ($((SECONDS - t0)) s): $(python3 tools/dev/sanitizer-summary.py --total \
    "$OUT/san_$name.log"), $(grep -c ' ok ' "$OUT/san_$name.log") cases ok" >>"$s"
}
#   build_main           the tree's build (SY_WERROR=ON tools/build.sh, log /tmp/build.log), "build done at N s" in $s;
#                        on failure the log's tail in $s, $s printed and the script ended.
build_main() {
  SY_WERROR=ON tools/build.sh >/tmp/build.log 2>&1 ||
    { echo "build failed" >>"$s"; tail -30 /tmp/build.log >>"$s"; cat "$s"; exit 1; }
  echo "build done at $SECONDS s" >>"$s"
}
#   two_ranks            R=2 and G, syrun's placement for two ranks: empty on two GPUs, "--gpus 0,0" (sharing GPU 0) on
#                        one; call after dev_start.
two_ranks() {
  R=2 G=""
  [ "$n" -lt 2 ] && G="--gpus 0,0"
}
#   dev_start NAME       a device script's start: NVLink multicast off, $s = $OUT/NAME (the summary), the GPU's name as
#                        its first line, n = the GPUs (at most 4).
dev_start() {
  export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
  s=$OUT/$1
  nvidia-smi -L | head -1 >>"$s"
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "$n" -gt 4 ] && n=4
}
#   gpu_check_only REGEX TIMEOUT  tools/gpu-check.sh at $n GPUs, only its steps matching REGEX, no sanitizers, within
#                        TIMEOUT s: its summary appended to $s under "== gpu-check REGEX", its logs to $OUT/logs.tar.gz.
gpu_check_only() {
  GPU_CHECK_ONLY="$1" GPU_CHECK_SANITIZE="" GPU_CHECK_TIMEOUT=150 timeout "$2" tools/gpu-check.sh /tmp/g "$n" \
    >/tmp/gc.txt 2>&1
  echo "== gpu-check $1 at $n rc=$?" >>"$s"
  cat /tmp/g/summary.txt >>"$s" 2>/dev/null
  tar czf "$OUT/logs.tar.gz" -C /tmp/g logs 2>/dev/null
}
#   layer_mb TOKENS MB NAME [ARGS...]  /tmp/x's `sy-bench --no-nccl --recv arena ARGS --tokens TOKENS --micro-batches
#                        MB layer` at world $n ($OUT/layer_NAME.json), its rank-0 rows and notes appended to $s under
#                        "== layer TOKENS tokens, micro-batches MB rc=... (seconds)" (x4-mb45*.sh).
layer_mb() {
  local t=$1 mb=$2 name=$3 t0=$SECONDS
  shift 3
  timeout 200 /tmp/x/bin/syrun -n $n /tmp/x/bin/sy-bench --no-nccl --recv arena "$@" --tokens $t \
    --micro-batches $mb --json $OUT/layer_$name.json layer >/tmp/layer.txt 2>&1
  echo "== layer $t tokens, micro-batches $mb rc=$? ($((SECONDS - t0)) s)" >>$s
  grep -vE "^\s*$" /tmp/layer.txt | sed 's/\[rank 0\]//' | grep -vE "^\[rank [1-9]" |
    grep -E "prefill|backward|target|of which|micro|wrong|correct|rror" >>$s
}
#   smi_start FILE       every GPU's SM clock, power, temperature and clock-event reasons every 50 ms appended to FILE,
#                        each line after its wall-clock time (the lines tools/dev/power-ways.py reads), in the background.
smi_start() {
  (nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader \
    -lms 50 | while IFS= read -r l; do echo "$EPOCHREALTIME, $l"; done >"$1" 2>&1 &)
}
#   smi_digest SMI MARKS smi_start's sampler stopped; tools/dev/power-ways.py's table of SMI against MARKS (sy-bench's
#                        SY_BENCH_LAYER_MARKS) appended to $s.
smi_digest() {
  pkill -f "nvidia-smi --query-gpu"
  python3 tools/dev/power-ways.py "$1" "$2" >>"$s" 2>&1
}
#   layer_marked LABEL ARGS...  /tmp/x's `sy-bench --no-nccl --recv arena ARGS layer` at world LAYER_RANKS (default 1)
#                        with each timing's wall-clock span in /tmp/marks.txt (under "== LABEL", for smi_digest)
#                        and its JSON in /tmp/j/layer_LABEL.json; rank 0's rows and notes appended to $s.
layer_marked() {
  local label=$1 t0=$SECONDS
  shift
  mkdir -p /tmp/j
  echo "== $label" >>/tmp/marks.txt
  SY_BENCH_LAYER_MARKS=/tmp/marks.txt timeout 280 /tmp/x/bin/syrun -n "${LAYER_RANKS:-1}" /tmp/x/bin/sy-bench --no-nccl \
    --recv arena "$@" --json "/tmp/j/layer_$label.json" layer >/tmp/layer.txt 2>&1
  echo "== layer $label: $* rc=$? ($((SECONDS - t0)) s)" >>"$s"
  grep -E "^\[rank 0\] +(prefill|backward)|settle|correct|wrong|target|of which|GPU slowdowns|WARN|rror" /tmp/layer.txt |
    sed 's/\[rank 0\]//' | head -40 >>"$s"
}
#   layer_at RANKS LABEL ARGS...  /tmp/h's `sy-bench --no-nccl --recv arena --tokens 4096 --split experts ARGS layer` at
#                        world RANKS (timeout LAYER_TIMEOUT, default 150 s): its rank-0 rows, target lines and checks
#                        appended to $s under "== layer LABEL rc=... (seconds)" (x1-endweights53.sh, x2-budget53.sh).
layer_at() {
  local r=$1 label=$2 t0=$SECONDS
  shift 2
  timeout "${LAYER_TIMEOUT:-150}" /tmp/h/bin/syrun -n "$r" /tmp/h/bin/sy-bench --no-nccl --recv arena --tokens 4096 \
    --split experts "$@" layer >/tmp/layer.txt 2>&1
  echo "== layer $label rc=$? ($((SECONDS - t0)) s)" >>"$s"
  grep -E "^\[rank 0\] +(prefill|backward)|target|correct|wrong|rror" /tmp/layer.txt | sed 's/\[rank 0\]//' |
    head -20 >>"$s"
}
