"""info.py — `python -m switchyard.info`: what this installation offers, as sy-info does for the C tools: the
package and library versions, the backend a Comm would take, the GPUs, NVSHMEM (built against and loaded), and
every SY_* environment variable the library reads (src/core/env_list.h, shipped with the package) with its
value here and its default.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys

from . import _lib

_ENV_ENTRY = re.compile(r'SY_ENV_ID_\(\s*(\w+),\s*\w+,\s*"([^"]*)",\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)', re.S)


def env_variables() -> list[tuple[str, str, str]]:
    """(name, default, what it does) of every variable the library reads, from its env_list.h."""
    path = os.path.join(_lib._here, "env_list.h")
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return []
    out = []
    for name, default, doc in _ENV_ENTRY.findall(text):
        doc = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', doc)).replace('\\"', '"')
        out.append((name, default, doc))
    return out


def gpus() -> tuple[list[str], str]:
    """(device names, CUDA runtime version) as the process sees them; names empty when no GPU is usable."""
    try:
        cudart = ctypes.CDLL("libcudart.so.13", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        return [], "not loaded"
    runtime, count = ctypes.c_int(0), ctypes.c_int(0)
    cudart.cudaRuntimeGetVersion(ctypes.byref(runtime))
    version = f"{runtime.value // 1000}.{runtime.value % 1000 // 10}"
    if cudart.cudaGetDeviceCount(ctypes.byref(count)) != 0 or count.value == 0:
        return [], version
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return [torch.cuda.get_device_name(d) for d in range(count.value)], version
    return [f"device {d}" for d in range(count.value)], version


def report() -> str:
    build = _lib._build_info
    lines = [f"switchyard:  {_lib.version()} (library {_lib.lib.sy_version_code()}), {_lib._library_path()}"]
    torch = sys.modules.get("torch")
    lines.append(f"python:      {sys.version.split()[0]}, torch {torch.__version__ if torch else 'not installed'}")
    kernels = getattr(build, "CUDA_KERNELS", None)
    lines.append(f"cuda backend: {'built' if kernels else 'not built (host backend only)'}"
                 f" (toolkit {getattr(build, 'CUDA_TOOLKIT', '?')})")  # fmt: skip
    loaded = _lib.NVSHMEM_LOADED
    lines.append(f"nvshmem:     built against {_lib.nvshmem_build_version()}; loaded "
                 + (f"{loaded[0]} ({loaded[1]})" if loaded else "none"))  # fmt: skip
    names, runtime = gpus()
    lines.append(f"cuda:        runtime {runtime}")
    lines.append(f"gpus:        {len(names)}" + ("" if names else " (none usable: the host backend will run)"))
    lines += [f"  [{d}] {n}" for d, n in enumerate(names)]
    chosen = os.environ.get("SY_BACKEND", "auto") or "auto"
    if chosen == "auto":
        chosen = "cuda" if names and kernels else "host"
    lines.append(f"backend:     {chosen} (SY_BACKEND={os.environ.get('SY_BACKEND', 'auto')})")
    lines.append("environment variables (set here / default):")
    known = set()
    for name, default, doc in env_variables():
        known.add(name)
        value = os.environ.get(name)
        if value is not None and name == "SY_BOOT_SECRET":
            value = "(set, hidden)"  # a secret is never printed
        shown, default = (value if value is not None else "(unset)"), (default or '""')
        lines.append(f"  {name:<20} {shown:<12} default {default:<8} {doc}")
    for name in sorted(k for k in os.environ if k.startswith("SY_") and k not in known):
        lines.append(f"  {name:<20} {os.environ[name]:<12} (not a variable switchyard reads)")
    return "\n".join(lines)


def main() -> int:
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
