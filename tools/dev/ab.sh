#!/usr/bin/env bash
# ab.sh — A/B timing of builds side by side on one GPU machine (bench/NOTES.md: "A/B runs build each variant from
# its own tree and run them in rotating order").
#
#   tools/dev/ab.sh tree REV NAME      here: the source of commit REV into ab/NAME (ab/ is git-ignored; carry it)
#   tools/dev/ab.sh run OUTDIR ROUNDS 'CMD' TREE...
#                                      there: builds every TREE (a source tree: `.` or ab/NAME) into TREE/build-ab,
#                                      then runs CMD ROUNDS times per tree, the trees in rotating order (A B C,
#                                      then C B A, ...) so that no variant always runs first. CMD is run with
#                                      $BIN set to the tree's bin folder, e.g. '$BIN/syrun -n 1 $BIN/sy-bench
#                                      --no-nccl -t 128 -T 1024 attn'. Prints every round's rows, tree by tree,
#                                      and then tools/dev/ab-digest.py's table of kernel times; the logs (build and
#                                      runs) go to OUTDIR/ab-logs.tar.gz (few files: the device tool returns 8).
# AB_TIMEOUT=S caps each run (default 120 s): a hang must not take the device session.
set -uo pipefail
cmd=${1:?usage: tools/dev/ab.sh tree REV NAME | run OUTDIR ROUNDS CMD TREE...}
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
case $cmd in
tree)
  rev=${1:?REV} name=${2:?NAME}
  rm -rf "$root/ab/$name" && mkdir -p "$root/ab/$name"
  git -C "$root" archive "$rev" | tar -x -C "$root/ab/$name"
  echo "ab/$name: $(git -C "$root" rev-parse --short "$rev")"
  ;;
run)
  out=${1:?OUTDIR} rounds=${2:?ROUNDS} run_cmd=${3:?CMD}
  shift 3
  trees=("$@")
  [ ${#trees[@]} -ge 1 ] || { echo "ab.sh: no trees" >&2; exit 2; }
  logs=$out/ab-logs
  mkdir -p "$logs"
  export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
  names=()
  for t in "${trees[@]}"; do
    n=$(basename "$(cd "$t" && pwd)")
    [ "$t" = . ] && n=head
    names+=("$n")
    if ! SY_BUILD_DIR="$(cd "$t" && pwd)/build-ab" SY_WERROR=ON "$t/tools/build.sh" >"$logs/$n.build.log" 2>&1; then
      echo "ab.sh: build of $t failed:"; tail -20 "$logs/$n.build.log"; exit 1
    fi
  done
  for ((r = 1; r <= rounds; r++)); do
    idx=($(seq 0 $((${#trees[@]} - 1))))
    ((r % 2 == 0)) && idx=($(printf '%s\n' "${idx[@]}" | tac))
    for i in "${idx[@]}"; do
      BIN="$(cd "${trees[$i]}" && pwd)/build-ab/bin" timeout "${AB_TIMEOUT:-120}" bash -c "BIN=\$0; $run_cmd" \
        "$(cd "${trees[$i]}" && pwd)/build-ab/bin" >"$logs/${names[$i]}.r$r.log" 2>&1 ||
        echo "ab.sh: ${names[$i]} round $r exited $?"
    done
  done
  for n in "${names[@]}"; do
    echo "== $n"
    for ((r = 1; r <= rounds; r++)); do
      echo "-- round $r"
      grep -E '^\[rank 0\] +[0-9]' "$logs/$n.r$r.log" | sed 's/^\[rank 0\]//'
    done
  done >"$out/ab.txt"
  cat "$out/ab.txt"
  echo
  python3 "$root/tools/dev/ab-digest.py" "$out/ab.txt"
  tar -czf "$out/ab-logs.tar.gz" -C "$out" ab-logs && rm -rf "$logs"
  ;;
*) echo "ab.sh: unknown command $cmd" >&2; exit 2 ;;
esac
