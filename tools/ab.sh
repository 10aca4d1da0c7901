#!/usr/bin/env bash
# ab.sh — A/B timing of builds side by side on one GPU machine (bench/NOTES.md: "A/B runs build each variant from
# its own tree and run them in rotating order").
#
#   tools/ab.sh tree REV NAME          here: the source of commit REV into ab/NAME (ab/ is git-ignored; carry it)
#   tools/ab.sh run OUTDIR ROUNDS 'CMD' TREE...
#                                      there: builds every TREE (a source tree: `.` or ab/NAME) into TREE/build-ab,
#                                      then runs CMD ROUNDS times per tree, the trees in rotating order (A B C,
#                                      then C B A, ...) so that no variant always runs first. CMD is run with
#                                      $BIN set to the tree's bin folder, e.g. '$BIN/syrun -n 1 $BIN/sy-bench
#                                      --no-nccl -t 128 -T 1024 attn'. Logs: OUTDIR/<tree>.r<round>.log; the
#                                      rows of every round are printed last, tree by tree.
# AB_TIMEOUT=S caps each run (default 120 s): a hang must not take the device session.
set -uo pipefail
cmd=${1:?usage: tools/ab.sh tree REV NAME | run OUTDIR ROUNDS CMD TREE...}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
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
  mkdir -p "$out"
  export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
  names=()
  for t in "${trees[@]}"; do
    n=$(basename "$(cd "$t" && pwd)")
    [ "$t" = . ] && n=head
    names+=("$n")
    if ! SY_BUILD_DIR="$(cd "$t" && pwd)/build-ab" SY_WERROR=ON "$t/tools/build.sh" >"$out/$n.build.log" 2>&1; then
      echo "ab.sh: build of $t failed:"; tail -20 "$out/$n.build.log"; exit 1
    fi
  done
  for ((r = 1; r <= rounds; r++)); do
    idx=($(seq 0 $((${#trees[@]} - 1))))
    ((r % 2 == 0)) && idx=($(printf '%s\n' "${idx[@]}" | tac))
    for i in "${idx[@]}"; do
      BIN="$(cd "${trees[$i]}" && pwd)/build-ab/bin" timeout "${AB_TIMEOUT:-120}" bash -c "BIN=\$0; $run_cmd" \
        "$(cd "${trees[$i]}" && pwd)/build-ab/bin" >"$out/${names[$i]}.r$r.log" 2>&1 ||
        echo "ab.sh: ${names[$i]} round $r exited $?"
    done
  done
  for n in "${names[@]}"; do
    echo "== $n"
    for ((r = 1; r <= rounds; r++)); do
      echo "-- round $r"
      grep -E '^\[rank 0\] +[0-9]' "$out/$n.r$r.log" | sed 's/^\[rank 0\]//'
    done
  done
  ;;
*) echo "ab.sh: unknown command $cmd" >&2; exit 2 ;;
esac
