"""ops.py — the calls as torch custom ops (torch.library.custom_op, torch >= 2.4), so that torch.compile keeps
them opaque: switchyard::alltoall, switchyard::moe_dispatch, switchyard::moe_combine.

A custom op's arguments are tensors and plain values, so the communicator and the MoE object travel as a string,
the key `register` gives them (a compiled graph holds that constant; a string, unlike an int, never becomes a
dynamic symbol when the compiler recompiles). The ops allocate their outputs (they are
functional: no argument is mutated), run on the current stream, and have fake (meta) implementations giving
the outputs' shapes, which the compiler needs. Imported by `import switchyard` when torch is importable.
"""

from typing import Any, Dict, Optional, Tuple  # no `from __future__ import annotations`: torch 2.4 reads the
# annotations of a custom op as objects

import torch

from .alltoall import alltoall as _alltoall
from .errors import invalid

_registry: Dict[str, Any] = {}


def register(obj: Any) -> str:
    """The key of a Comm or MoE object that the ops take in its place (the same object keeps its key)."""
    key = f"{type(obj).__name__}@{id(obj):x}"
    _registry[key] = obj
    return key


def _get(key: str, cls_name: str, call: str) -> Any:
    obj = _registry.get(key)
    if obj is None or type(obj).__name__ != cls_name:
        raise invalid("key", f"{key!r} is not a registered {cls_name} (switchyard.ops.register)", call)
    return obj


@torch.library.custom_op("switchyard::alltoall", mutates_args=())
def alltoall(send: torch.Tensor, comm_key: str) -> torch.Tensor:
    """switchyard.alltoall as an op: a new tensor like send."""
    return _alltoall(_get(comm_key, "Comm", "switchyard::alltoall"), send)


@alltoall.register_fake
def _(send: torch.Tensor, comm_key: str) -> torch.Tensor:
    return torch.empty_like(send)


@torch.library.custom_op("switchyard::moe_dispatch", mutates_args=())
def moe_dispatch(
    tokens: torch.Tensor, expert_ids: torch.Tensor, weights: Optional[torch.Tensor], moe_key: str
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """MoE.dispatch as an op: (tokens, scales, src, expert_counts, rank_counts) of new buffers; scales is an
    empty f32 tensor on the BF16 wire."""
    moe = _get(moe_key, "MoE", "switchyard::moe_dispatch")
    recv = moe.dispatch(tokens, expert_ids, weights)
    scales = recv.scales if recv.scales is not None else tokens.new_empty((0,), dtype=torch.float32)
    return recv.tokens, scales, recv.src, recv.expert_counts, recv.rank_counts


@moe_dispatch.register_fake
def _(tokens: torch.Tensor, expert_ids: torch.Tensor, weights: Optional[torch.Tensor], moe_key: str) -> Any:
    moe = _get(moe_key, "MoE", "switchyard::moe_dispatch")
    L, S, H, W = moe.local_experts, moe.slots, moe.hidden, moe.comm.world_size
    fp8 = moe.wire != "bf16"
    new = tokens.new_empty
    return (
        new((L, S, H), dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16),
        new((L, H // 128, S) if fp8 else (0,), dtype=torch.float32),
        new((L, S, 2), dtype=torch.int32),
        new((L,), dtype=torch.int32),
        new((L, W), dtype=torch.int32),
    )


@torch.library.custom_op("switchyard::moe_combine", mutates_args=())
def moe_combine(
    expert_out: torch.Tensor, expert_ids: torch.Tensor, weights: Optional[torch.Tensor], moe_key: str
) -> torch.Tensor:
    """MoE.combine as an op: bf16 [T, hidden]."""
    return _get(moe_key, "MoE", "switchyard::moe_combine").combine(expert_out, expert_ids, weights)


@moe_combine.register_fake
def _(expert_out: torch.Tensor, expert_ids: torch.Tensor, weights: Optional[torch.Tensor], moe_key: str) -> Any:
    moe = _get(moe_key, "MoE", "switchyard::moe_combine")
    return expert_out.new_empty((expert_ids.shape[0], moe.hidden), dtype=torch.bfloat16)
