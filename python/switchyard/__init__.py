"""switchyard — moves tokens between GPUs (MoE all-to-all, context-parallel attention): a thin layer over the C
library (ctypes; nothing compiled against torch), torch tensors in and out (numpy arrays on the host backend).

    import switchyard as sy
    comm = sy.Comm.from_env()                      # syrun / torchrun environment
    out = sy.alltoall(comm, x)                     # torch's current stream
    moe = sy.MoE(comm, max_tokens=64, hidden=1024, top_k=4, num_experts=8 * comm.world_size, wire="bf16")
    recv = moe.dispatch(tokens, ids, weights)      # per local expert: recv.tokens[e, :recv.expert_counts[e]]
    y = moe.combine(expert_out, ids, weights)

`switchyard.host_ranks(n, fn)` runs fn(comm) on n ranks of the host backend (threads of this process).
`Pool`, `HostPool` and `GraphCache` are the orchestration (stream-ordered scratch, pinned staging, a CUDA graph
per shape bucket). Errors raise switchyard.Error subclasses carrying the status (switchyard.h's sy_status_t) and
the library's message of the failure.
"""

from __future__ import annotations

from ._lib import nvshmem_build_version, version
from .alltoall import alltoall, alltoallv
from .attn import Attn, AttnPlan, Description, Placement, Seq, Windows, place
from .comm import Comm, host_ranks
from .errors import (
    AbortedError,
    BootstrapError,
    CudaError,
    Error,
    InternalError,
    InvalidArgError,
    MismatchError,
    NoDeviceError,
    NoMemoryError,
    NvshmemError,
    SystemCallError,
    TimeoutError,
    UnsupportedError,
    status_name,
    status_string,
)
from .moe import MoE, MoERecv
from .moe_ht import HTRecv, Layout, MoEHT
from .orchestration import GraphCache, GraphStats, HostPool, HostPoolStats, Pool, PoolStats

__version__ = version()

__all__ = [
    "Comm", "host_ranks", "alltoall", "alltoallv", "MoE", "MoERecv", "MoEHT", "HTRecv", "Layout",
    "Attn", "AttnPlan", "Description", "Placement", "Seq", "Windows", "place",
    "Pool", "PoolStats", "HostPool", "HostPoolStats", "GraphCache", "GraphStats",
    "Error", "InvalidArgError", "NoMemoryError", "CudaError", "NvshmemError", "TimeoutError", "BootstrapError",
    "SystemCallError", "UnsupportedError", "NoDeviceError", "AbortedError", "MismatchError", "InternalError",
    "status_name", "status_string", "version", "nvshmem_build_version",
]  # fmt: skip

try:  # the torch-only parts: autograd functions and custom ops
    import torch as _torch  # noqa: F401
except ImportError:  # pragma: no cover - numpy-only environments
    pass
else:
    from . import autograd, ops  # noqa: F401

    __all__ += ["autograd", "ops"]
