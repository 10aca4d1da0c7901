"""test_info.py — `python -m switchyard.info` runs and reports the versions, NVSHMEM (built against and loaded),
the backend and every SY_* variable with its value, hiding the boot secret and flagging unknown names."""

from __future__ import annotations

import os
import subprocess
import sys

import switchyard as sy
from switchyard import _lib, info


def test_info_runs() -> None:
    env = dict(os.environ, SY_TIMEOUT_MS="1234", SY_BOOT_SECRET="do-not-print", SY_TYPO="1")
    run = subprocess.run([sys.executable, "-m", "switchyard.info"], env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert f"switchyard:  {sy.__version__}" in out
    assert f"built against {sy.nvshmem_build_version()}" in out
    assert "backend:" in out and "gpus:" in out
    assert "SY_TIMEOUT_MS        1234" in out
    assert "(set, hidden)" in out and "do-not-print" not in out
    assert "SY_TYPO" in out and "not a variable switchyard reads" in out


def test_env_list_matches_library() -> None:
    names = [name for name, _, _ in info.env_variables()]
    assert "SY_DEBUG" in names and "SY_HEAP_SIZE" in names and len(names) == len(set(names))
    # every entry, those clang-format broke after the parenthesis (SY_DEBUG_FILE) too
    with open(os.path.join(_lib._here, "env_list.h")) as f:
        assert len(names) == f.read().count("SY_ENV_ID_(")
    assert "SY_DEBUG_FILE" in names


def test_loaded_nvshmem_is_built_one() -> None:
    """The import-time check: a package built with the cuda backend loaded the NVSHMEM it was built against."""
    if sy.nvshmem_build_version() == "none":
        # a host-only build brings no NVSHMEM and checks none: the process may still hold one (torch's CUDA wheels
        # load theirs), of any release
        assert not _lib._build_info.CUDA_KERNELS
        assert _lib.NVSHMEM_LOADED is None or len(_lib.NVSHMEM_LOADED) == 2
    else:
        assert _lib.NVSHMEM_LOADED is not None and _lib.NVSHMEM_LOADED[0] == sy.nvshmem_build_version()
