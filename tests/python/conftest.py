"""conftest.py — how the Python tests run their ranks, on either backend.

Each test's check is a function of (comm, ...) that regenerates every rank's seeded inputs (any rank can
compute any rank's), calls the package on its own and asserts on its own outputs. The host tests run it on N
ranks as threads (switchyard.host_ranks). The GPU tests run it once per process on the communicator of the
launcher's environment, so on the GPU machine

    syrun -n 1 python -m pytest tests/python
    syrun -n 3 --gpus 0,0,0 python -m pytest tests/python

run them at world size 1 and 3 (every rank runs the same tests in the same order, so the collectives pair up);
without a GPU, a build without the cuda backend, or SY_BACKEND=host, they skip, saying which.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import switchyard as sy

try:
    import torch
except ImportError:  # the host backend needs no torch; tests that do say so
    torch = None

TIMEOUT_MS = 60000  # generous: a loaded 2-core CI machine computing references must not trip it


def _gpu_skip_reason() -> str | None:
    from switchyard import _lib

    if torch is None:
        return "torch is not installed"
    if not getattr(_lib._build_info, "CUDA_KERNELS", False):
        return "the package was built without the cuda backend (SY_CUDA_KERNELS=OFF)"
    if not torch.cuda.is_available():
        return "no GPU (torch.cuda.is_available() is False)"
    if os.environ.get("SY_BACKEND") == "host":
        return "SY_BACKEND=host"
    return None


GPU_SKIP = _gpu_skip_reason()
gpu = pytest.mark.skipif(GPU_SKIP is not None, reason=f"GPU test: {GPU_SKIP}")


@pytest.fixture(scope="session")
def gpu_comm() -> Any:
    """This process's rank of the cuda backend, from the launcher's environment (syrun; one rank without one)."""
    comm = sy.Comm.from_env(backend="cuda", timeout_ms=TIMEOUT_MS)
    torch.cuda.set_device(comm.device)
    yield comm
    torch.cuda.synchronize()
    comm.close()


def on_host(world: int, fn: Any, *args: Any) -> list[Any]:
    """fn(comm, *args) on `world` host-backend ranks (threads); results in rank order."""
    return sy.host_ranks(world, fn, *args, timeout_ms=TIMEOUT_MS)


_groups = iter(range(1 << 20, 1 << 21))


def on_this_thread(fn: Any, *args: Any) -> Any:
    """fn(comm, *args) on one host-backend rank in the calling thread (for torch machinery that wants the main
    thread: fake tensors, torch.compile)."""
    with sy.Comm(backend="host", rank=0, world_size=1, host_group=next(_groups), timeout_ms=TIMEOUT_MS) as comm:
        return fn(comm, *args)


# ---- arrays between numpy (the references) and what a test passes (numpy, or torch on the comm's device) ------


def to_dev(comm: Any, a: np.ndarray, flavour: str, kind: str = "") -> Any:
    """numpy -> the flavour ("numpy" or "torch") on comm's device; kind "bf16"/"e4m3" reinterprets the bits."""
    if flavour == "numpy":
        return a
    t = torch.from_numpy(np.ascontiguousarray(a))
    if kind == "bf16":
        t = t.view(torch.int16).view(torch.bfloat16)
    elif kind == "e4m3":
        t = t.view(torch.float8_e4m3fn)
    if comm.backend == "cuda":
        t = t.to(f"cuda:{comm.device}")
    return t


def to_np(x: Any) -> np.ndarray:
    """A result as numpy (bf16 as uint16 bits, E4M3 as uint8)."""
    if isinstance(x, np.ndarray):
        return x
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).cpu().numpy().view(np.uint16)
    if x.dtype == torch.float8_e4m3fn:
        return x.view(torch.uint8).cpu().numpy()
    return x.detach().cpu().numpy()


def flavours() -> list[str]:
    """The array libraries the host tests run with: numpy always, torch when installed."""
    return ["numpy", "torch"] if torch is not None else ["numpy"]


def needs_torch() -> Any:
    return pytest.mark.skipif(torch is None, reason="needs torch")
