"""moe.py — the MoE low-latency mode (sy_moe_*): dispatch and combine, one call each or their halves.

Semantics are switchyard.h's ("Expert-parallel (MoE) low-latency dispatch and combine"): rank p holds experts
p*L .. p*L + L - 1; a dispatch fills, per local expert, S = world_size * max_tokens slots ordered by source rank,
then source token; combine sums the experts' outputs per token in a fixed order. Which call reads the routing
weights depends on the mode: the dispatch in the default (rank-reduced) mode, the combine with per_expert.
Every call is collective; the halves go send, recv, send, recv on one stream.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from . import _arrays
from ._lib import INDEX_TYPES, MOE_PER_EXPERT, WIRES, MoeConfig, MoeRecv, MoeRecvSizes, lib
from .comm import Comm, CommObject
from .errors import check, invalid

_IDS = ("i32", "i64")


@dataclass(frozen=True)
class MoERecv:
    """What a dispatch writes on an experts' rank (L local experts, S slots each). Slots at or beyond
    expert_counts[e] are left as they were. Frozen: its buffers are checked and their addresses taken once."""

    tokens: Any  # [L, S, hidden]: bf16, or E4M3 (torch.float8_e4m3fn; uint8 in numpy) on the FP8 wires
    scales: Any  # FP8 wires: f32 [L, hidden / 128, S] (group-major, slot-minor); BF16: None
    src: Any  # i32 [L, S, 2]: {source rank, source token}
    expert_counts: Any  # i32 [L]: slots filled
    rank_counts: Any  # i32 [L, world_size]: slots filled from each source rank
    _struct: MoeRecv = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    _checked_by: Any = field(default=None, repr=False, compare=False)  # the MoE whose checks it passed

    def arrays(self) -> tuple:
        """Its buffers (for Comm._used)."""
        return (self.tokens, self.scales, self.src, self.expert_counts, self.rank_counts)

    def struct(self) -> MoeRecv:
        """The sy_moe_recv_t of these buffers (made once)."""
        if self._struct is None:
            p = _arrays.ptr
            object.__setattr__(self, "_struct", MoeRecv(p(self.tokens), p(self.scales), p(self.src),
                                                        p(self.expert_counts), p(self.rank_counts)))  # fmt: skip
        return self._struct


def _config(max_tokens: int, hidden: int, top_k: int, num_experts: int, wire: str, per_expert: bool) -> MoeConfig:
    """The sy_moe_config_t of MoE's arguments (the wire checked here, the rest by the library)."""
    if wire not in ("fp8", "fp8_ue8m0", "bf16"):
        raise invalid("wire", f"{wire!r}, want 'fp8', 'fp8_ue8m0' or 'bf16'", "MoE")
    return MoeConfig(ctypes.sizeof(MoeConfig), max_tokens, hidden, top_k, num_experts, WIRES[wire],
                     MOE_PER_EXPERT if per_expert else 0)  # fmt: skip


class MoE(CommObject):
    """A low-latency MoE object (sy_moe_create, collective; so is close). wire: "fp8" (E4M3, per-128 fp32 scales,
    quantised in the dispatch), "fp8_ue8m0" (power-of-two scales) or "bf16"; per_expert: one copy per (token,
    expert) both ways instead of per (token, rank)."""

    _destroy = "sy_moe_destroy"

    def __init__(
        self,
        comm: Comm,
        *,
        max_tokens: int,
        hidden: int,
        top_k: int,
        num_experts: int,
        wire: str = "fp8",
        per_expert: bool = False,
    ):
        self.max_tokens, self.hidden, self.top_k, self.num_experts = max_tokens, hidden, top_k, num_experts
        self.wire, self.per_expert = wire, per_expert
        # a refusal in _config still meets the other ranks' creates (_create_config)
        self._create_config(comm, "sy_moe_create", lambda: _config(max_tokens, hidden, top_k, num_experts, wire,
                                                                   per_expert))  # fmt: skip
        sizes = MoeRecvSizes(ctypes.sizeof(MoeRecvSizes))
        check(lib.sy_moe_recv_sizes(self._handle, ctypes.byref(sizes)), "sy_moe_recv_sizes", comm._handle)
        self.local_experts: int = sizes.local_experts
        self.slots: int = sizes.slots
        self._pending_tokens = -1  # num_tokens of the last dispatch_send (for combine_recv's check)
        self._like: Any = None

    @staticmethod
    def workspace_size(comm: Comm, *, max_tokens: int, hidden: int, top_k: int, num_experts: int, wire: str = "fp8",
                       per_expert: bool = False) -> int:  # fmt: skip
        """Symmetric bytes a configuration reserves (sy_moe_workspace_size), to size SY_HEAP_SIZE."""
        c = _config(max_tokens, hidden, top_k, num_experts, wire, per_expert)
        out = ctypes.c_size_t()
        check(lib.sy_moe_workspace_size(comm.handle, ctypes.byref(c), ctypes.byref(out)), "sy_moe_workspace_size")
        return out.value

    def alloc_recv(self, like: Any = None) -> MoERecv:
        """Buffers for a dispatch's output, of the library and device of `like` (a tensor; None: the
        communicator's device, torch when imported)."""
        like = self._like_for(like)
        L, S, H = self.local_experts, self.slots, self.hidden
        fp8 = self.wire != "bf16"
        e = _arrays.empty
        return MoERecv(
            tokens=e((L, S, H), "e4m3" if fp8 else "bf16", like),
            scales=e((L, H // 128, S), "f32", like) if fp8 else None,
            src=e((L, S, 2), "i32", like),
            expert_counts=e((L,), "i32", like),
            rank_counts=e((L, self.comm.world_size), "i32", like),
        )

    def _like_for(self, like: Any) -> Any:
        if like is not None:
            return like
        torch = _arrays.torch_module()
        if torch is None:
            return None
        device = "cpu" if self.comm.backend != "cuda" else f"cuda:{self.comm.device}"
        return torch.empty(0, device=device)

    # ---- argument checks ----------------------------------------------------------------------------------
    def _check_route(self, call: str, tokens_or_n: Any, expert_ids: Any, weights: Any, weights_read: bool) -> int:
        where = self.comm._where
        rows = getattr(expert_ids, "shape", (None,))  # the exact shape when it can be read: the checks' fast path
        shape = (rows[0] if len(rows) == 2 else None, self.top_k)
        ids = _arrays.check(expert_ids, "expert_ids", call, _IDS, shape=shape, device=where)
        n = int(ids.shape[0])
        if n > self.max_tokens:
            raise invalid("expert_ids", f"{n} tokens > max_tokens={self.max_tokens}", call)
        if tokens_or_n is not None and not isinstance(tokens_or_n, int):
            _arrays.check(tokens_or_n, "tokens", call, "bf16", shape=(n, self.hidden), device=where)
        if weights_read and n > 0 and weights is None:
            mode = "per_expert mode" if self.per_expert else "default (rank-reduced) mode"
            raise invalid("weights", f"required in the {mode} (this call reads the routing weights)", call)
        if weights is not None:
            _arrays.check(weights, "weights", call, "f32", shape=(n, self.top_k), device=where)
        return n

    def _check_recv(self, recv: MoERecv, call: str) -> None:
        if not isinstance(recv, MoERecv):
            raise invalid("recv", f"a MoERecv is required (MoE.alloc_recv), got {type(recv).__name__}", call)
        if recv._checked_by is self:
            return
        L, S, H, where = self.local_experts, self.slots, self.hidden, self.comm._where
        fp8 = self.wire != "bf16"
        _arrays.check(recv.tokens, "recv.tokens", call, "e4m3" if fp8 else "bf16", shape=(L, S, H), device=where)
        if fp8:
            _arrays.check(recv.scales, "recv.scales", call, "f32", shape=(L, H // 128, S), device=where)
        elif recv.scales is not None:
            raise invalid("recv.scales", "must be None on the BF16 wire", call)
        _arrays.check(recv.src, "recv.src", call, "i32", shape=(L, S, 2), device=where)
        _arrays.check(recv.expert_counts, "recv.expert_counts", call, "i32", shape=(L,), device=where)
        _arrays.check(recv.rank_counts, "recv.rank_counts", call, "i32", shape=(L, self.comm.world_size), device=where)
        object.__setattr__(recv, "_checked_by", self)

    # ---- calls --------------------------------------------------------------------------------------------
    def dispatch(self, tokens: Any, expert_ids: Any, weights: Any = None, *, recv: MoERecv | None = None,
                 stream: Any = None) -> MoERecv:  # fmt: skip
        """Collective (sy_moe_dispatch). tokens: bf16 [T, hidden]; expert_ids: int32/int64 [T, top_k] (-1: none);
        weights: f32 [T, top_k] (read here in the default mode). T <= max_tokens, 0 allowed. recv: buffers to
        reuse (alloc_recv), else new ones. Returns recv."""
        call = "MoE.dispatch"
        n = self._check_route(call, tokens, expert_ids, weights, not self.per_expert)
        given, made = (), ()
        if recv is None:
            recv = self.alloc_recv(tokens)
            made = recv.arrays()
        else:
            self._check_recv(recv, call)
            given = recv.arrays()
        handle, join = self.comm._stream(stream)
        status = lib.sy_moe_dispatch(self.handle, _arrays.ptr(tokens), n, _arrays.ptr(expert_ids),
                                     INDEX_TYPES["int64" if _arrays.matches(expert_ids, "i64") else "int32"],
                                     _arrays.ptr(weights), ctypes.byref(recv.struct()), handle)  # fmt: skip
        check(status, "sy_moe_dispatch", self.comm._handle)
        self.comm._used(handle, stream, (tokens, expert_ids, weights) + given, made)
        self.comm._join(join)
        return recv

    def dispatch_send(self, tokens: Any, expert_ids: Any, weights: Any = None, *, stream: Any = None) -> None:
        """The dispatch's send half (sy_moe_dispatch_send); dispatch_recv completes it."""
        call = "MoE.dispatch_send"
        n = self._check_route(call, tokens, expert_ids, weights, not self.per_expert)
        handle, join = self.comm._stream(stream)
        status = lib.sy_moe_dispatch_send(self.handle, _arrays.ptr(tokens), n, _arrays.ptr(expert_ids),
                                          INDEX_TYPES["int64" if _arrays.matches(expert_ids, "i64") else "int32"],
                                          _arrays.ptr(weights), handle)  # fmt: skip
        check(status, "sy_moe_dispatch_send", self.comm._handle)
        self.comm._used(handle, stream, (tokens, expert_ids, weights))
        self.comm._join(join)
        self._like = tokens

    def dispatch_recv(self, recv: MoERecv | None = None, *, stream: Any = None) -> MoERecv:
        """The dispatch's receive half (sy_moe_dispatch_recv). Returns recv (new buffers when None)."""
        given, made = (), ()
        if recv is None:
            recv = self.alloc_recv(self._like)
            made = recv.arrays()
        else:
            self._check_recv(recv, "MoE.dispatch_recv")
            given = recv.arrays()
        handle, join = self.comm._stream(stream)
        check(lib.sy_moe_dispatch_recv(self.handle, ctypes.byref(recv.struct()), handle), "sy_moe_dispatch_recv",
              self.comm._handle)  # fmt: skip
        self.comm._used(handle, stream, given, made)
        self.comm._join(join)
        return recv

    def _check_expert_out(self, expert_out: Any, call: str) -> None:
        shape = (self.local_experts, self.slots, self.hidden)
        _arrays.check(expert_out, "expert_out", call, "bf16", shape=shape, device=self.comm._where)

    def combine(self, expert_out: Any, expert_ids: Any, weights: Any = None, *, out: Any = None,
                stream: Any = None) -> Any:  # fmt: skip
        """Collective (sy_moe_combine). expert_out: bf16 [L, S, hidden], the experts' outputs in the dispatch's
        slots; expert_ids and weights as given to that dispatch (weights read here with per_expert). Returns
        out: bf16 [T, hidden] (a token with no expert gets zeros)."""
        call = "MoE.combine"
        self._check_expert_out(expert_out, call)
        n = self._check_route(call, None, expert_ids, weights, self.per_expert)
        given_out = out
        out = self._out(out, n, expert_out, call)
        handle, join = self.comm._stream(stream)
        status = lib.sy_moe_combine(self.handle, _arrays.ptr(expert_out), _arrays.ptr(expert_ids),
                                    INDEX_TYPES["int64" if _arrays.matches(expert_ids, "i64") else "int32"],
                                    _arrays.ptr(weights), n, _arrays.ptr(out), handle)  # fmt: skip
        check(status, "sy_moe_combine", self.comm._handle)
        made = (out,) if given_out is None else ()
        self.comm._used(handle, stream, (expert_out, expert_ids, weights, given_out), made)
        self.comm._join(join)
        return out

    def combine_send(self, expert_out: Any, *, stream: Any = None) -> None:
        """The combine's send half (sy_moe_combine_send); combine_recv completes it."""
        self._check_expert_out(expert_out, "MoE.combine_send")
        handle, join = self.comm._stream(stream)
        check(lib.sy_moe_combine_send(self.handle, _arrays.ptr(expert_out), handle), "sy_moe_combine_send",
              self.comm._handle)  # fmt: skip
        self.comm._used(handle, stream, (expert_out,))
        self.comm._join(join)
        self._like = expert_out

    def combine_recv(self, expert_ids: Any, weights: Any = None, *, out: Any = None, stream: Any = None) -> Any:
        """The combine's receive half (sy_moe_combine_recv): expert_ids and weights as given to the dispatch.
        Returns out: bf16 [T, hidden]."""
        call = "MoE.combine_recv"
        n = self._check_route(call, None, expert_ids, weights, self.per_expert)
        given_out = out
        out = self._out(out, n, self._like if self._like is not None else expert_ids, call)
        handle, join = self.comm._stream(stream)
        status = lib.sy_moe_combine_recv(self.handle, _arrays.ptr(expert_ids),
                                         INDEX_TYPES["int64" if _arrays.matches(expert_ids, "i64") else "int32"],
                                         _arrays.ptr(weights), n, _arrays.ptr(out), handle)  # fmt: skip
        check(status, "sy_moe_combine_recv", self.comm._handle)
        made = (out,) if given_out is None else ()
        self.comm._used(handle, stream, (expert_ids, weights, given_out), made)
        self.comm._join(join)
        return out

    def _out(self, out: Any, n: int, like: Any, call: str) -> Any:
        if out is None:
            return _arrays.empty((n, self.hidden), "bf16", like)
        return _arrays.check(out, "out", call, "bf16", shape=(n, self.hidden), device=self.comm._where)
