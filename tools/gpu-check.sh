#!/usr/bin/env bash
# gpu-check.sh OUTDIR [COUNT ...] — the one script for the GPU machine: builds, runs every GPU test under
# syrun at each GPU count (default 2 4; counts above the GPUs present are reported as not run), runs the
# all-to-all, ring, attention and MoE tests again with SY_FORCE_PUT=1 (the NVSHMEM put path) and the all-to-all
# and attention tests with SY_A2A_BLOCKS=8 (their ticket order on nearly every call), the high-throughput MoE test
# with its own-token queue off and forced on (SY_HT_OWN_QUEUE=0 / 1; the default mixes them) and with the FP8
# wires quantised by the sending blocks and ahead of the dispatch (SY_HT_PREQUANT=0 / 1) and with the rows' FP8
# scales stored under an L2 policy (SY_HT_SCALE_HINT=1) — those on the pushed dispatch (SY_HT_PULL=0), which from
# world 2 is no longer the default — and pushed by warps and by blocks, with one object's dispatches pulling and
# pushing in turn (SY_HT_PULL_SMS=4) and with the pull's copy beside its kernel (SY_HT_PULL_OVERLAP=1), runs the
# fault test
# (test_gpu_faults: a rank SIGKILLed mid-call, the others must time out naming it) and, with 2 GPUs or more, the
# placement check (test_gpu_placement: 3 ranks on GPUs 0,1,0 must be refused at once), runs the Python package's
# tests and examples from the build tree (PYTHONPATH=build/python; where python3 has torch), runs every GPU test at
# world 1 under compute-sanitizer (steps sanitize_<tool>_<test>), runs the CPU tests, runs the benchmarks with the NCCL
# baseline, and prints a short table last. OUTDIR gets summary.txt,
# the benchmark JSON (bench_<entry>.n<N>.json), results.md (the JSON as RESULTS.md tables, via
# tools/dev/results-table.py), trace_<entry>.n<N>.txt (per-phase trace digests at the issues' small sizes, via
# tools/dev/trace-summary.py; a rank without a trace, or a trace without one of the expected phases, fails) and
# logs.tar.gz (every log: build, machine, each test, each benchmark, the instruction-fetch probe).
# GPU_CHECK_ONLY=REGEX runs only the tests and benchmarks whose names match (e.g. 'moe': test_gpu_moe,
# test_gpu_moe_graph, test_gpu_moe.put, bench_moe-ll) and skips the CPU tests — for short device sessions.
# GPU_CHECK_TIMEOUT=S caps every test and benchmark at S seconds (default 600): in a short device session a
# hang must not take the whole budget.
# GPU_CHECK_SHARED=1 runs the tests at counts above the GPUs present with ranks sharing GPUs round-robin over the
# most GPUs that divide the count (syrun --gpus 0,1,0,1; 0,0,0 for 3 on 2; time-sliced, so ~2 ms per cross-rank
# wait): the multi-rank code paths checked bit for bit on a one-GPU machine. Correctness only: there the benchmarks run as smoke tests of their own checks
# (--no-nccl: NCCL refuses two ranks on one GPU), with no JSON.
# GPU_CHECK_GPUS=N uses only GPUs 0..N-1 (e.g. 1 on a two-GPU machine: the ranks share one GPU, as on a one-GPU machine).
# GPU_CHECK_SANITIZE="TOOL ..." picks compute-sanitizer's tools (default "memcheck racecheck synccheck initcheck";
# "" skips them); errors in the library's own code fail the step, NCCL's probes inside NVSHMEM's init are filtered.
# GPU_CHECK_SOAK=SECONDS adds sy-bench's soak mode for that long (soak.n<N>.json; capped at SECONDS + 300).
# GPU_CHECK_REV=REV names the commit in results.md when the checkout's .git does not (a device machine that gets
# a copy of the working tree but an older .git).
# Exit status: non-zero if any test or benchmark check failed.
set -uo pipefail
out=${1:?usage: tools/gpu-check.sh OUTDIR [COUNT ...]}
shift
counts=("$@")
[ ${#counts[@]} -eq 0 ] && counts=(2 4)
root=$(cd "$(dirname "$0")/.." && pwd)
logs=$out/logs
mkdir -p "$logs"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export SY_BENCH_ARGS=${SY_BENCH_ARGS:-}
summary=()
failed=0
# each step's line also goes to OUTDIR/summary.txt as it ends, so a run cut off at its limit still says how far it got
: >"$out/summary.txt"
note() {
  summary+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")")
  printf '%s\n' "${summary[-1]}" >>"$out/summary.txt"
  [ "$2" = FAIL ] && failed=1
  return 0
}

start=$(date +%s)
if SY_WERROR=ON "$root/tools/build.sh" >"$logs/build.log" 2>&1; then note build ok "$(($(date +%s) - start)) s"
else note build FAIL "see build.log"; tail -30 "$logs/build.log"; printf '%s\n' "${summary[@]}"; exit 1; fi
bin=$root/build/bin
gpus=${GPU_CHECK_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
{ nvidia-smi topo -m; "$bin/sy-info" -e; } >"$logs/machine.log" 2>&1

# run NAME N CMD... : one test or benchmark under syrun with N ranks, logged to OUTDIR/NAME.n<N>.log
run() {
  local name=$1 n=$2
  shift 2
  local log="$logs/$name.n$n.log" t0=$(date +%s)
  if [ -n "${GPU_CHECK_ONLY:-}" ] && ! [[ $name =~ $GPU_CHECK_ONLY ]]; then return; fi
  local place=() label="$name n=$n" shared=(SY_TEST_SHARED_GPU=0)
  if [ "$n" -gt "$gpus" ]; then
    if [ "${GPU_CHECK_SHARED:-0}" = 0 ] || [ "$gpus" -eq 0 ] || [[ $name == bench_* && $name != *.smoke ]]; then
      note "$label" "not run" "only $gpus GPUs here"; return
    fi
    # round robin over the most GPUs that divide n, so that every GPU in use holds as many ranks: NVSHMEM's start
    # hangs where some ranks share a GPU and others do not (3 ranks on 2 GPUs go all to GPU 0; src/core/placement.h)
    local list=() r used=$gpus
    while ((n % used)); do used=$((used - 1)); done
    for ((r = 0; r < n; r++)); do list+=($((r % used))); done
    place=(--gpus "$(IFS=,; echo "${list[*]}")")
    label="$name n=$n/${used}gpu"
    shared=(SY_TEST_SHARED_GPU=1 SY_MOE_GRAPH_REPLAYS=200) # a replay costs a few time slices here
  fi
  local cap=${GPU_CHECK_TIMEOUT:-600}
  if env "${shared[@]}" timeout "$cap" "$bin/syrun" -n "$n" "${place[@]}" --timeout $((cap > 20 ? cap - 10 : cap)) "$@" \
    >"$log" 2>&1; then
    note "$label" ok "$(($(date +%s) - t0)) s"
  else
    note "$label" FAIL "exit $? after $(($(date +%s) - t0)) s, see $(basename "$log")"
    tail -15 "$log"
  fi
}

for n in "${counts[@]}"; do
  for t in "$root"/build/tests/gpu/test_*; do
    [ "$(basename "$t")" = test_gpu_faults ] && continue # its own step below: it starts its own ranks
    run "$(basename "$t")" "$n" "$t"
  done
  SY_FORCE_PUT=1 run test_gpu_alltoall.put "$n" "$root/build/tests/gpu/test_gpu_alltoall"
  SY_FORCE_PUT=1 run test_gpu_ring.put "$n" "$root/build/tests/gpu/test_gpu_ring"
  SY_FORCE_PUT=1 run test_gpu_attn.put "$n" "$root/build/tests/gpu/test_gpu_attn"
  SY_FORCE_PUT=1 run test_gpu_moe.put "$n" "$root/build/tests/gpu/test_gpu_moe"
  SY_FORCE_PUT=1 run test_gpu_moe_ht.put "$n" "$root/build/tests/gpu/test_gpu_moe_ht"
  SY_FORCE_PUT=1 SY_MOE_GRAPH_REPLAYS=1000 run test_gpu_moe_graph.put "$n" "$root/build/tests/gpu/test_gpu_moe_graph"
  # eight blocks per call: every call with more than eight pieces takes the ticket order (alltoall, attention)
  SY_A2A_BLOCKS=8 SY_PIECE_ORDER=tickets run test_gpu_alltoall.tickets "$n" "$root/build/tests/gpu/test_gpu_alltoall"
  SY_A2A_BLOCKS=8 SY_PIECE_ORDER=tickets run test_gpu_attn.tickets "$n" "$root/build/tests/gpu/test_gpu_attn"
  SY_MOE_DIRECT=1 run test_gpu_moe.direct "$n" "$root/build/tests/gpu/test_gpu_moe"
  SY_MOE_DIRECT=1 SY_MOE_GRAPH_REPLAYS=1000 run test_gpu_moe_graph.direct "$n" "$root/build/tests/gpu/test_gpu_moe_graph"
  # (the variables of the pushed dispatch alone with SY_HT_PULL=0: from world 2 the dispatch pulls by default)
  SY_HT_PULL=0 SY_HT_OWN_QUEUE=0 run test_gpu_moe_ht.static "$n" "$root/build/tests/gpu/test_gpu_moe_ht"
  SY_HT_PULL=0 SY_HT_OWN_QUEUE=1 run test_gpu_moe_ht.queue "$n" "$root/build/tests/gpu/test_gpu_moe_ht"
  # the FP8 wires quantised as each token is sent (the default at world 1) and ahead of the dispatch (from world 2)
  SY_HT_PULL=0 SY_HT_PREQUANT=0 run test_gpu_moe_ht.inkernel "$n" "$root/build/tests/gpu/test_gpu_moe_ht"
  SY_HT_PULL=0 SY_HT_PREQUANT=1 run test_gpu_moe_ht.prequant "$n" "$root/build/tests/gpu/test_gpu_moe_ht"
  # the FP8 rows' scales under an L2 evict_last policy (by default only where the dispatch holds most SMs)
  SY_HT_PULL=0 SY_HT_SCALE_HINT=1 run test_gpu_moe_ht.hint "$n" "$root/build/tests/gpu/test_gpu_moe_ht"
  # the combine's owners in lockstep (the default plans and waits a batch ahead)
  SY_HT_OWNER_AHEAD=0 run test_gpu_moe_ht.lockstep "$n" "$root/build/tests/gpu/test_gpu_moe_ht"
  # a channel's two roles on two blocks (the default at world 1), and on one block's warps with another split (the
  # default from world 2 is 6 / 8 warps of 16)
  SY_HT_ROLES=0 run test_gpu_moe_ht.blocks "$n" "$root/build/tests/gpu/test_gpu_moe_ht"
  # the dispatch pushed through the rings (pull.cu's pull is the default from world 2), by warps and by blocks
  SY_HT_PULL=0 run test_gpu_moe_ht.push "$n" "$root/build/tests/gpu/test_gpu_moe_ht"
  # by default BF16 dispatches pull up to SY_HT_PULL_SMS SMs and push above: the budget cases' objects in turn
  SY_HT_PULL_SMS=4 run test_gpu_moe_ht.pullsms "$n" "$root/build/tests/gpu/test_gpu_moe_ht"
  # the pulled dispatch's copy of the tokens on a side stream beside its kernel (experimental)
  SY_HT_PULL_OVERLAP=1 run test_gpu_moe_ht.overlap "$n" "$root/build/tests/gpu/test_gpu_moe_ht"
  SY_HT_PULL=0 SY_HT_ROLES=0 run test_gpu_moe_ht.pushblocks "$n" "$root/build/tests/gpu/test_gpu_moe_ht"
  SY_HT_PULL=0 SY_HT_ROLES=1 SY_HT_SEND_WARPS=4 SY_HT_EXPERT_WARPS=12 run test_gpu_moe_ht.warps "$n" \
    "$root/build/tests/gpu/test_gpu_moe_ht"
  run test_example_moe "$n" "$bin/sy-example-moe" # the README's example, as a user runs it
  run test_example_layer "$n" "$bin/sy-example-layer" # examples/moe_layer.c, as a user runs it
  # the Python package from the build tree (this build's library; CMakeLists.txt, build/python), where python3 has
  # torch and pytest: its tests (the GPU ones run at every count) and both examples
  if python3 -c "import torch, pytest" 2>/dev/null; then
    run test_python "$n" env PYTHONPATH="$root/build/python" python3 -m pytest "$root/tests/python" -q -p no:cacheprovider
    run test_python_moe_layer "$n" env PYTHONPATH="$root/build/python" python3 "$root/examples/moe_layer.py"
    run test_python_cp_attention "$n" env PYTHONPATH="$root/build/python" python3 "$root/examples/cp_attention.py"
  else
    note "test_python n=$n" "not run" "python3 has no torch or pytest"
  fi
done

# A rank SIGKILLed in the middle of an all-to-all, an attention call and a MoE round, ranks sharing one GPU: the
# test starts its own jobs (syrun --keep-going) and checks what the survivors and syrun report.
if [ "$gpus" -ge 1 ]; then
  run test_gpu_faults 1 "$root/build/tests/gpu/test_gpu_faults"
fi
# a placement NVSHMEM cannot start with (ranks 0 and 2 sharing GPU 0, rank 1 alone on GPU 1: NVSHMEM 3.4 hangs) is
# refused at once on every rank, naming the ranks (src/core/placement.h)
if [ "$gpus" -ge 2 ] && { [ -z "${GPU_CHECK_ONLY:-}" ] || [[ test_gpu_placement =~ $GPU_CHECK_ONLY ]]; }; then
  t0=$(date +%s) log=$logs/test_gpu_placement.n3.log rc=0
  SY_TEST_SHARED_GPU=1 SY_DEBUG=WARN SY_DEBUG_FILE= timeout 60 "$bin/syrun" -n 3 --gpus 0,1,0 --timeout 50 \
    "$root/build/tests/gpu/test_gpu_init" >"$log" 2>&1 || rc=$?
  if [ $rc -ne 0 ] && [ "$(($(date +%s) - t0))" -lt 45 ] && grep -q "cannot start: ranks 0 and 2 share GPU" "$log"; then
    note "test_gpu_placement n=3/2gpu" ok "refused in $(($(date +%s) - t0)) s"
  else note "test_gpu_placement n=3/2gpu" FAIL "rc $rc after $(($(date +%s) - t0)) s, see $(basename "$log")"; fi
fi

# compute-sanitizer on every GPU test at world 1: steps sanitize_<tool>_<test>, each capped by GPU_CHECK_TIMEOUT
# (one that runs out is reported as "timeout", with what it found until then). sanitizer-summary.py sorts the
# reports: ours (0 expected, else FAIL), third-party (NCCL, NVSHMEM), and NCCL's cudaFuncGetAttributes probes
# inside NVSHMEM's team init, filtered; one line per tool sums them.
sanitizer=""
for c in "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" /usr/local/cuda/bin/compute-sanitizer \
  "$(command -v compute-sanitizer 2>/dev/null)"; do
  if [ -n "$c" ] && [ -x "$c" ]; then sanitizer=$c; break; fi
done
read -ra sanitize_tools <<<"${GPU_CHECK_SANITIZE-memcheck racecheck synccheck initcheck}"
# tests whose checks make CUDA API calls fail on purpose (test_gpu_graph_cache: a refused cudaGraphExecUpdate, a
# capture a failing step invalidates): compute-sanitizer's API-error reports are off for them, its memory and
# hazard reports stay on
api_errors_expected=" test_gpu_graph_cache "
# sanitize TOOL TEST [SUFFIX ENV=VALUE ...]: the step sanitize_<tool>_<test><suffix>, with those variables set
sanitize() {
  local tool=$1 test=$2 suffix=${3:-} name t0 api=()
  local -a extra=("${@:4}")
  name="sanitize_${tool}_$(basename "$test")$suffix"
  [[ $api_errors_expected == *" $(basename "$test") "* ]] && api=(--report-api-errors no)
  if [ -n "${GPU_CHECK_ONLY:-}" ] && ! [[ $name =~ $GPU_CHECK_ONLY ]]; then return; fi
  local log="$logs/$name.log" cap=${GPU_CHECK_TIMEOUT:-600} rc=0
  t0=$(date +%s)
  env SY_TEST_SHARED_GPU=0 SY_MOE_GRAPH_REPLAYS=20 "${extra[@]}" timeout "$cap" "$bin/syrun" -n 1 --timeout $((cap > 20 ? cap - 10 : cap)) \
    "$sanitizer" --tool "$tool" --print-limit 0 "${api[@]}" "$test" >"$log" 2>&1 || rc=$?
  local found ours took="$(($(date +%s) - t0)) s"
  found=$(python3 "$root/tools/dev/sanitizer-summary.py" --total "$log" | sed 's/^[^:]*: //')
  ours=$(grep -o '^[0-9]*' <<<"$found")
  if [ "${ours:-0}" -gt 0 ]; then
    note "$name" FAIL "$found, $took, see $(basename "$log")"
    python3 "$root/tools/dev/sanitizer-summary.py" "$log" | grep '^  ours:'
  elif [ $rc -eq 124 ]; then note "$name" timeout "$found, after $took"
  elif [ $rc -ne 0 ]; then
    note "$name" FAIL "exit $rc after $took: $found"
    tail -15 "$log"
  else note "$name" ok "$found, $took"; fi
}
if [ "$gpus" -ge 1 ] && [ ${#sanitize_tools[@]} -gt 0 ]; then
  if [ -z "$sanitizer" ]; then
    note "compute-sanitizer" "not run" "not found (CUDA_HOME/bin, /usr/local/cuda/bin, PATH)"
  else
    "$sanitizer" --version >>"$logs/machine.log" 2>&1
    for tool in "${sanitize_tools[@]}"; do
      for t in "$root"/build/tests/gpu/test_*; do
        [ "$(basename "$t")" = test_gpu_faults ] || sanitize "$tool" "$t"
      done
      # the FP8 wires' quantisation ahead of the dispatch, off at world 1 by default (SY_HT_PREQUANT)
      sanitize "$tool" "$root/build/tests/gpu/test_gpu_moe_ht" .prequant SY_HT_PREQUANT=1
      sanitize "$tool" "$root/build/tests/gpu/test_gpu_moe_ht" .hint SY_HT_SCALE_HINT=1
      sanitize "$tool" "$root/build/tests/gpu/test_gpu_moe_ht" .lockstep SY_HT_OWNER_AHEAD=0
      # a channel's two roles on one block's warps (named barriers), the default from world 2 only
      sanitize "$tool" "$root/build/tests/gpu/test_gpu_moe_ht" .roles SY_HT_ROLES=1
      tool_logs=()
      for f in "$logs/sanitize_${tool}_"*.log; do [ -e "$f" ] && tool_logs+=("$f"); done
      [ ${#tool_logs[@]} -eq 0 ] && continue
      found=$(python3 "$root/tools/dev/sanitizer-summary.py" --total "${tool_logs[@]}" | sed 's/^[^:]*: //')
      if [ "$(grep -o '^[0-9]*' <<<"$found")" = 0 ]; then note "sanitize_$tool (${#tool_logs[@]} tests)" ok "$found"
      else note "sanitize_$tool (${#tool_logs[@]} tests)" FAIL "$found"; fi
    done
  fi
fi

t0=$(date +%s)
if [ -n "${GPU_CHECK_ONLY:-}" ]; then note "cpu tests (ctest unit/)" "not run" "GPU_CHECK_ONLY=$GPU_CHECK_ONLY"
elif (cd "$root/build" && ctest -R '^unit/' --output-on-failure) >"$logs/unit.log" 2>&1; then note "cpu tests (ctest unit/)" ok "$(($(date +%s) - t0)) s"
else note "cpu tests (ctest unit/)" FAIL "see unit.log"; fi

declare -A entry_args=([alltoall]="" [attn]="-t 128" [moe-ll]="" [moe-ht]="" [layer]="--no-nccl" [pool]="--no-nccl")
declare -A smoke_args=([alltoall]="-e 1M" [attn]="-t 128 -T 4096" [moe-ll]="--tokens 1,128" [moe-ht]="--tokens 256"
  [layer]="--tokens 128,512 --settle 0" [pool]="")
entries=(alltoall attn moe-ll moe-ht layer pool)
for n in "${counts[@]}"; do
  for entry in "${entries[@]}"; do
    if [ "$n" -gt "$gpus" ] && [ "${GPU_CHECK_SHARED:-0}" != 0 ]; then
      # ranks sharing a GPU: the benchmark's own checks only (no NCCL: it refuses two ranks on one GPU);
      # its timings measure time slicing, so they go to the log, not to a JSON file or the table
      run "bench_$entry.smoke" "$n" "$bin/sy-bench" --no-nccl -n 2 -w 1 ${smoke_args[$entry]} "$entry"
    else
      run "bench_$entry" "$n" "$bin/sy-bench" $SY_BENCH_ARGS ${entry_args[$entry]} --json "$out/bench_$entry.n$n.json" "$entry"
    fi
  done
done

# the layer's micro-batches by expert groups (--split experts): its own checks of ways a, b and c (ranks sharing a GPU:
# smaller, as the smoke runs above)
for n in "${counts[@]}"; do
  if [ "$n" -le "$gpus" ]; then
    run bench_layer_experts "$n" "$bin/sy-bench" --no-nccl -n 5 -w 1 --settle 0 --tokens 4096 --split experts layer
    # groups by weight (a quarter, half and a quarter of each rank's experts)
    run bench_layer_experts_weights "$n" "$bin/sy-bench" --no-nccl -n 5 -w 1 --settle 0 --tokens 4096 --split experts \
      --micro-batches 1,2,1 layer
  elif [ "${GPU_CHECK_SHARED:-0}" != 0 ]; then
    run bench_layer_experts.smoke "$n" "$bin/sy-bench" --no-nccl -n 2 -w 1 --settle 0 --tokens 512 --split experts layer
    run bench_layer_experts_weights.smoke "$n" "$bin/sy-bench" --no-nccl -n 2 -w 1 --settle 0 --tokens 512 \
      --split experts --micro-batches 1,2,1 layer
  fi
done

# GPU_CHECK_SOAK=SECONDS: sy-bench's soak mode (every operation with random shapes, every result checked,
# memory watched) at the largest count that runs here, capped at SECONDS + 300; its JSON: soak.n<N>.json.
if [ "${GPU_CHECK_SOAK:-0}" != 0 ]; then
  soak_n=""
  for n in "${counts[@]}"; do
    if [ "$n" -le "$gpus" ] || { [ "${GPU_CHECK_SHARED:-0}" != 0 ] && [ "$gpus" -ge 1 ]; }; then soak_n=$n; fi
  done
  if [ -z "$soak_n" ]; then note soak "not run" "no count of ${counts[*]} runs on $gpus GPUs"
  else
    GPU_CHECK_TIMEOUT=$((GPU_CHECK_SOAK + 300)) run soak "$soak_n" "$bin/sy-bench" --soak "$GPU_CHECK_SOAK" \
      --json "$out/soak.n$soak_n.json"
  fi
fi

# Per-phase device traces at the issues' small sizes (attention 128 tokens per rank; MoE 128 tokens, FP8,
# dedup), digested on the spot by trace-summary.py (the raw traces are tens of MB): where the time goes, on
# real GPUs only. The trace's own atomics inflate phases under ~1 us and skew block starts (NOTES.md).
declare -A trace_args=([attn]="-t 128 -T 128 attn" [moe-ll]="--tokens 128 --wire fp8 --mode dedup moe-ll")
# the phases every rank's trace must hold (Chrome trace JSON, read back by trace-summary.py)
declare -A trace_phases=([attn]="attn post ready|attn wait ready|attn copy|attn wait data|attn kernel"
  [moe-ll]="moe dispatch_send route|moe dispatch_send copy|moe dispatch_send signal|moe dispatch_recv wait data|moe dispatch_recv post-process|moe combine_send copy|moe combine_send signal|moe combine_recv wait data|moe combine_recv reduce")
tdir=$(mktemp -d)
for n in "${counts[@]}"; do
  [ "$n" -gt "$gpus" ] && continue
  for entry in attn moe-ll; do
    rm -f "$tdir"/*.json
    # -w 0 -n 20: calls 2..81 are one-call forms (events, CUPTI, graph, host passes); the halves come after
    SY_TRACE_EVENTS=4194304 SY_TRACE_FILE="$tdir/$entry.%r.json" run "trace_$entry" "$n" "$bin/sy-bench" --no-nccl \
      -w 0 -n 20 ${trace_args[$entry]}
    if [ -n "${GPU_CHECK_ONLY:-}" ] && ! [[ trace_$entry =~ $GPU_CHECK_ONLY ]]; then continue; fi
    files=$(compgen -G "$tdir/$entry.*.json" | wc -l)
    if [ "$files" -ne "$n" ]; then
      note "trace_$entry.json n=$n" FAIL "$files of $n ranks wrote a trace"
      continue
    fi
    digest=$out/trace_$entry.n$n.txt
    python3 "$root/tools/dev/trace-summary.py" --calls 5:80 --block 0 "$tdir/$entry".*.json >"$digest" 2>&1
    missing=()
    IFS='|' read -ra phases <<<"${trace_phases[$entry]}"
    for ph in "${phases[@]}"; do
      [ "$(grep -cE "^  $ph +n=" "$digest")" -ge "$n" ] || missing+=("$ph")
    done
    if [ ${#missing[@]} -eq 0 ]; then note "trace_$entry.json n=$n" ok "${#phases[@]} phases on every rank"
    else note "trace_$entry.json n=$n" FAIL "missing: $(IFS=,; echo "${missing[*]}")"; fi
  done
done
rm -rf "$tdir"

# What a jump over inlined cold code costs (NOTES.md, "Instruction fetch"): one GPU, a few seconds.
if [ "$gpus" -ge 1 ]; then
  run icache_probe 1 "$bin/sy-icache-probe" # its table: logs/icache_probe.n1.log
fi

# The benchmark JSON as RESULTS.md tables, with what a row there must say: device, commit, date, command.
if compgen -G "$out/bench_*.json" >/dev/null; then
  {
    if [ -n "${GPU_CHECK_REV:-}" ]; then rev="$GPU_CHECK_REV (GPU_CHECK_REV)"
    else rev="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"; fi
    echo "<!-- gpu-check $(date -u '+%Y-%m-%d %H:%M UTC'), commit $rev, counts ${counts[*]} -->"
    echo "<!-- $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | sed 's/^ *//' | paste -sd, -) -->"
    echo
    python3 "$root/tools/dev/results-table.py" "$out"/bench_*.json
  } >"$out/results.md" 2>&1
fi

echo
echo "== gpu-check: $gpus GPUs, $(date -u '+%Y-%m-%d %H:%M UTC') =="
for n in "${counts[@]}"; do
  for entry in "${entries[@]}"; do
    [ -f "$logs/bench_$entry.n$n.log" ] && grep -E '^\[rank 0\] (# +(bytes|tokens|shape)|  +[0-9]|   (decode|prefill) |# average|# target|# direct|# launch|# kernel time|#   ceiling)' "$logs/bench_$entry.n$n.log" | sed "s/^\[rank 0\]/[$entry n=$n]/"
  done
done
for f in "$logs"/soak.n*.log; do
  [ -e "$f" ] && grep -E '^\[rank 0\] # soak:' "$f" | sed "s/^\[rank 0\]/[$(basename "$f" .log)]/"
done
printf '%s\n' "${summary[@]}"
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$logs"
exit $failed
