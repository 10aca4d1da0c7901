#!/usr/bin/env bash
# format.sh [--check] — lays out every C, CUDA and C++ file git tracks with clang-format 14 and the checked-in
# .clang-format; --check changes nothing, lists the files that differ and exits 1 if any do (CI runs it). The
# layout depends on clang-format's version, so a machine whose clang-format is not 14 gets the pinned wheel
# (clang-format==14.0.6) into build/clang-format.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cf=clang-format
if ! { command -v clang-format >/dev/null && clang-format --version | grep -q 'version 14\.'; }; then
  cf=$root/build/clang-format/bin/clang-format
  if ! [ -x "$cf" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --target "$root/build/clang-format" "clang-format==14.0.6"
  fi
fi
cd "$root"
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = --check ]; then
  bad=()
  for f in "${files[@]}"; do
    "$cf" --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format.sh: not laid out as .clang-format says (run tools/format.sh): ${bad[*]}" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files laid out as .clang-format says"
else
  "$cf" -i "${files[@]}"
fi
