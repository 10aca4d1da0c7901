#!/usr/bin/env bash
# Builds everything (library, CUDA kernels, tools, tests) into ./build, or $SY_BUILD_DIR, installing what a
# fresh machine lacks: the NVSHMEM wheel (nvidia-nvshmem-cu13, the GPU machine's version) and cmake.
# SY_WERROR=ON makes warnings errors (CI sets it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SY_BUILD_DIR:-$root/build}
export PATH=/usr/local/cuda/bin:$PATH
if ! python3 -c "import nvidia.nvshmem" 2>/dev/null && [ -z "${NVSHMEM_HOME:-}" ]; then
  python3 -m pip install --quiet "nvidia-nvshmem-cu13==3.4.5"
fi
if ! command -v cmake >/dev/null; then
  if command -v apt-get >/dev/null; then apt-get update -qq && apt-get install -y -qq cmake; else python3 -m pip install --quiet cmake; fi
fi
cmake -S "$root" -B "$build" -DSY_WERROR="${SY_WERROR:-OFF}" >/dev/null
cmake --build "$build" -j "$(nproc)"
