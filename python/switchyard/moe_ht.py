"""moe_ht.py — the MoE high-throughput mode (sy_moe_ht_*): a layout per step, kept in a handle, drives the
dispatch, the combine and both backward calls.

Semantics are switchyard.h's ("MoE high throughput"): local expert e's rows are contiguous (padded to
expert_alignment) or at e * expert_stride (the masked layout), ordered by source rank, then source token. Every
call is collective and every rank makes the same sequence of calls on the object. The autograd functions over
these calls are in autograd.py.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

from . import _arrays
from ._lib import INDEX_TYPES, SCALES_ROW_MAJOR, WIRES, MoeHtConfig, MoeHtRecv, MoeHtSizes, lib
from .comm import Comm, CommObject
from .errors import check, invalid

_IDS = ("i32", "i64")


@dataclass
class Layout:
    """One step's layout (sy_moe_ht_layout): the handle (device memory the later calls read; keep the Layout
    until the step's last backward call) and, in exact mode, this rank's counts."""

    handle: Any  # u8 [handle_bytes]
    num_tokens: int
    expert_ids: Any  # kept alive with the handle
    counts: list[int] | None = None  # exact mode: rows of each local expert
    offsets: list[int] | None = None  # exact mode: each local expert's first row (contiguous layout)
    rows_needed: int | None = None  # exact mode: rows the contiguous layout needs


@dataclass(frozen=True)
class HTRecv:
    """What a dispatch writes on the experts' rank (sy_moe_ht_recv_t), in the caller's memory. Frozen: its
    buffers are checked and their addresses taken once."""

    tokens: Any  # [rows, hidden]: bf16, or E4M3 on the FP8 wires
    scales: Any  # FP8 wires: f32 [hidden / 128, rows] (group-major), or [rows, hidden / 128] (row-major); BF16: None
    src: Any  # i32 [rows, 2]: {source rank, source token}; padding {-1, -1}
    weights: Any  # f32 [rows]: the routing weight of the row's (token, expert); padding 0
    expert_offsets: Any  # i32 [L + 1]: first row of each local expert; [L]: rows used, padding included
    expert_counts: Any  # i32 [L]: rows of each local expert, padding excluded
    rows: int
    expert_stride: int = 0  # 0: contiguous layout; > 0: expert e starts at row e * expert_stride
    arena: bool = False  # in the object's receive arena (MoEHT.alloc_recv(arena=True)); give back with free_recv
    _struct: MoeHtRecv = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    _checked: Any = field(default=None, repr=False, compare=False)  # (MoEHT, written) of the checks it passed

    def arrays(self) -> tuple:
        """Its buffers (for Comm._used)."""
        return (self.tokens, self.scales, self.src, self.weights, self.expert_offsets, self.expert_counts)

    def struct(self) -> MoeHtRecv:
        """The sy_moe_ht_recv_t of these buffers (made once)."""
        if self._struct is None:
            p = _arrays.ptr
            struct = MoeHtRecv(p(self.tokens), p(self.scales), p(self.src), p(self.weights), p(self.expert_offsets),
                               p(self.expert_counts), self.rows, self.expert_stride)  # fmt: skip
            object.__setattr__(self, "_struct", struct)
        return self._struct


class MoEHT(CommObject):
    """A high-throughput MoE object (sy_moe_ht_create, collective; so is close). wire: "bf16" (default), "fp8",
    "fp8_ue8m0" or "fp8_given" (the caller passes E4M3 tokens and their scales); expert_alignment: each local
    expert's rows padded to a multiple of it; num_sms: SMs the communication kernels may hold (0: 16);
    scales_row_major (FP8 wires): recv.scales [rows, hidden / 128] instead of [hidden / 128, rows]
    (SY_MOE_HT_SCALES_ROW_MAJOR); recv_arena_bytes: symmetric memory for receive buffers, the same on every rank
    (config.recv_arena_bytes; alloc_recv(arena=True) takes from it, recv_arena_need sizes it): a dispatch into such a
    recv receives each arriving token's first row in place."""

    _destroy = "sy_moe_ht_destroy"

    def __init__(
        self,
        comm: Comm,
        *,
        max_tokens: int,
        hidden: int,
        top_k: int,
        num_experts: int,
        wire: str = "bf16",
        expert_alignment: int = 1,
        num_sms: int = 0,
        scales_row_major: bool = False,
        recv_arena_bytes: int = 0,
    ):
        def build() -> MoeHtConfig:  # a refusal here still meets the other ranks' creates (_create_config)
            if wire not in WIRES:
                raise invalid("wire", f"{wire!r}, want one of {sorted(WIRES)}", "MoEHT")
            if scales_row_major and wire == "bf16":
                raise invalid("scales_row_major", "True with the 'bf16' wire, which has no scales", "MoEHT")
            if not isinstance(recv_arena_bytes, int) or not 0 <= recv_arena_bytes < 2**64:
                raise invalid("recv_arena_bytes", f"{recv_arena_bytes!r}, want an int in [0, 2**64)", "MoEHT")
            return MoeHtConfig(ctypes.sizeof(MoeHtConfig), max_tokens, hidden, top_k, num_experts, WIRES[wire],
                               expert_alignment, num_sms, SCALES_ROW_MAJOR if scales_row_major else 0,
                               recv_arena_bytes)  # fmt: skip

        self.max_tokens, self.hidden, self.top_k, self.num_experts = max_tokens, hidden, top_k, num_experts
        self.wire = wire
        self.scales_row_major = bool(scales_row_major)
        self.recv_arena_bytes = recv_arena_bytes
        self._create_config(comm, "sy_moe_ht_create", build)
        sizes = MoeHtSizes(ctypes.sizeof(MoeHtSizes))
        check(lib.sy_moe_ht_sizes(self._handle, ctypes.byref(sizes)), "sy_moe_ht_sizes", comm._handle)
        self.local_experts: int = sizes.local_experts
        self.max_rows: int = sizes.max_rows
        self.handle_bytes: int = sizes.handle_bytes
        # the cuda backend's dispatch (SY_HT_PULL as the ranks resolved it; sy_moe_ht_sizes_t.dispatch_pulled): 0
        # pushed (and on the host backend), 1 pulled at every call, 2 pulled but for BF16 / given-FP8 calls above
        # SY_HT_PULL_SMS SMs
        self.dispatch_pulled: int = sizes.dispatch_pulled

    # ---- layout -------------------------------------------------------------------------------------------
    def set_num_sms(self, num_sms: int) -> None:
        """The SM budget of the calls enqueued from now on (sy_moe_ht_set_num_sms): 2 .. num_sms of the object, 0
        for the object's. E.g. a step's first dispatch and last combine, with no expert GEMM beside them, on every SM
        and the calls beside the GEMMs on few. Every rank sets the same before the same call."""
        if isinstance(num_sms, bool) or not isinstance(num_sms, int) or not -2**31 <= num_sms < 2**31:
            raise invalid("num_sms", f"{num_sms!r}, want an int (2 .. the object's num_sms, or 0)", "MoEHT.set_num_sms")
        check(lib.sy_moe_ht_set_num_sms(self.handle, num_sms), "sy_moe_ht_set_num_sms", self.comm._handle)

    def layout(self, expert_ids: Any, *, exact: bool = True, stream: Any = None) -> Layout:
        """Collective (sy_moe_ht_layout). expert_ids: int32/int64 [T, top_k] (-1: none; T <= max_tokens).
        exact: wait on the host for this rank's counts (Layout.counts, offsets, rows_needed; not capturable);
        else the counts stay on the device and every later call of the step is capturable."""
        call = "MoEHT.layout"
        ids = _arrays.check(expert_ids, "expert_ids", call, _IDS, shape=(None, self.top_k), device=self.comm._where)
        n = int(ids.shape[0])
        if n > self.max_tokens:
            raise invalid("expert_ids", f"{n} tokens > max_tokens={self.max_tokens}", call)
        handle = _arrays.empty((self.handle_bytes,), "u8", ids)
        L = self.local_experts
        host = (ctypes.c_int32 * (2 * L + 1))() if exact else None
        stream_handle, join = self.comm._stream(stream)
        status = lib.sy_moe_ht_layout(self.handle, _arrays.ptr(ids), INDEX_TYPES["int64" if _arrays.matches(ids, "i64") else "int32"],
                                      n, _arrays.ptr(handle), host, stream_handle)  # fmt: skip
        check(status, "sy_moe_ht_layout", self.comm._handle)
        self.comm._used(stream_handle, stream, (ids,), (handle,))
        self.comm._join(join)
        layout = Layout(handle=handle, num_tokens=n, expert_ids=ids)
        if host is not None:
            layout.counts, layout.offsets, layout.rows_needed = list(host[:L]), list(host[L : 2 * L]), host[2 * L]
        return layout

    # ---- buffers ------------------------------------------------------------------------------------------
    @staticmethod
    def recv_arena_need(comm: Comm, rows: int = -1, *, max_tokens: int, hidden: int, top_k: int, num_experts: int,
                        wire: str = "bf16", expert_alignment: int = 1) -> int:  # fmt: skip
        """Receive-arena bytes one recv of `rows` rows takes (-1: max_rows, the worst case) for this configuration on
        comm's world size (sy_moe_ht_recv_bytes): add them up for recv_arena_bytes."""
        if wire not in WIRES:
            raise invalid("wire", f"{wire!r}, want one of {sorted(WIRES)}", "MoEHT.recv_arena_need")
        config = MoeHtConfig(ctypes.sizeof(MoeHtConfig), max_tokens, hidden, top_k, num_experts, WIRES[wire],
                             expert_alignment, 0, 0, 0)  # fmt: skip
        got = ctypes.c_size_t()
        check(lib.sy_moe_ht_recv_bytes(comm.handle, ctypes.byref(config), rows, ctypes.byref(got)),
              "sy_moe_ht_recv_bytes", comm._handle)  # fmt: skip
        return got.value

    def alloc_recv(self, layout: Layout | None = None, *, rows: int | None = None, expert_stride: int = 0,
                   like: Any = None, arena: bool = False, stream: Any = None) -> HTRecv:  # fmt: skip
        """Buffers for a dispatch: `rows` rows (default: an exact layout's rows_needed, else max_rows; with
        expert_stride, L * expert_stride), of the library and device of `like` (default: the layout's handle).
        arena: from the object's receive arena instead (sy_moe_ht_recv_alloc with pool NULL; the arrays view the
        arena's memory, which free_recv gives back and close frees: use none of them after either); `stream` (a
        torch.cuda.Stream or a cudaStream_t as an int) the stream it is for: blocks free_recv gave back on that
        stream serve it at once (not while the stream captures a graph, whose replays may run on any stream), those
        of other streams once they have reached their frees."""
        L, H = self.local_experts, self.hidden
        if rows is None:
            if expert_stride:
                rows = L * expert_stride
            elif layout is not None and layout.rows_needed is not None:
                rows = layout.rows_needed
            else:
                rows = self.max_rows
        like = like if like is not None else (layout.handle if layout is not None else None)
        fp8 = self.wire != "bf16"
        if arena:
            return self._arena_recv(rows, expert_stride, like, stream)
        e = _arrays.empty
        return HTRecv(
            tokens=e((rows, H), "e4m3" if fp8 else "bf16", like),
            scales=e(self._scales_shape(rows), "f32", like) if fp8 else None,
            src=e((rows, 2), "i32", like),
            weights=e((rows,), "f32", like),
            expert_offsets=e((L + 1,), "i32", like),
            expert_counts=e((L,), "i32", like),
            rows=rows,
            expert_stride=expert_stride,
        )

    def _raw_stream(self, stream: Any) -> int | None:
        """The cudaStream_t of a torch.cuda.Stream or an int; None (NULL: at once) for None or on the host backend.
        torch's default stream (0) is the legacy default stream: cudaStreamLegacy (1), so its order holds."""
        if stream is not None and not isinstance(stream, int) and not hasattr(stream, "cuda_stream"):
            raise invalid("stream", f"{stream!r}, want a torch.cuda.Stream, a cudaStream_t as an int, or None", "MoEHT")
        if stream is None or self.comm.backend != "cuda":
            return None
        raw = stream if isinstance(stream, int) else stream.cuda_stream
        return 1 if raw == 0 else raw

    def _arena_recv(self, rows: int, expert_stride: int, like: Any, stream: Any = None) -> HTRecv:
        call = "MoEHT.alloc_recv"
        if not isinstance(rows, int) or rows < 0:
            raise invalid("rows", f"{rows!r}, want an int >= 0", call)
        struct = MoeHtRecv()
        status = lib.sy_moe_ht_recv_alloc(self.handle, None, rows, expert_stride, ctypes.byref(struct),
                                          self._raw_stream(stream))  # fmt: skip
        check(status, "sy_moe_ht_recv_alloc", self.comm._handle)
        L, H, fp8 = self.local_experts, self.hidden, self.wire != "bf16"
        use_torch = like is not None and _arrays.is_torch(like) or self.comm._where[0] == "cuda"

        def view(address: Any, shape: tuple, kind: str, elem: int) -> Any:
            n = 1
            for d in shape:
                n *= d
            if not address or n == 0:
                return _arrays.empty(shape, kind, like)
            return _arrays.wrap(address, n * elem, shape, kind, self.comm._where, use_torch)

        return HTRecv(
            tokens=view(struct.tokens, (rows, H), "e4m3" if fp8 else "bf16", 1 if fp8 else 2),
            scales=view(struct.scales, self._scales_shape(rows), "f32", 4) if fp8 else None,
            src=view(struct.src, (rows, 2), "i32", 4),
            weights=view(struct.weights, (rows,), "f32", 4),
            expert_offsets=view(struct.expert_offsets, (L + 1,), "i32", 4),
            expert_counts=view(struct.expert_counts, (L,), "i32", 4),
            rows=rows,
            expert_stride=expert_stride,
            arena=True,
            _struct=struct,
        )

    def free_recv(self, recv: HTRecv, stream: Any = None) -> None:
        """Gives an arena recv (alloc_recv(arena=True)) back to the arena (sy_moe_ht_recv_free): with `stream` (a
        torch.cuda.Stream or a cudaStream_t as an int; cuda backend) when that stream gets there, after the work
        enqueued on it so far; without, at once (call it once nothing enqueued still reads or writes the recv). Its
        arrays must not be used after."""
        if not isinstance(recv, HTRecv) or not recv.arena:
            raise invalid("recv", "an HTRecv of alloc_recv(arena=True) is required", "MoEHT.free_recv")
        status = lib.sy_moe_ht_recv_free(self.handle, None, ctypes.byref(recv._struct), self._raw_stream(stream))
        check(status, "sy_moe_ht_recv_free", self.comm._handle)
        object.__setattr__(recv, "_checked", None)  # its struct is zeroed now: a later call is refused by the library

    def _scales_shape(self, rows: int) -> tuple:
        G = self.hidden // 128
        return (rows, G) if self.scales_row_major else (G, rows)

    def _check_layout(self, layout: Layout, call: str) -> int:
        if not isinstance(layout, Layout):
            raise invalid("layout", f"a Layout (MoEHT.layout) is required, got {type(layout).__name__}", call)
        return layout.num_tokens

    def _check_recv(self, recv: HTRecv, call: str, written: bool) -> None:
        if not isinstance(recv, HTRecv):
            raise invalid("recv", f"an HTRecv (MoEHT.alloc_recv) is required, got {type(recv).__name__}", call)
        if recv._checked is not None and recv._checked[0] is self and recv._checked[1] >= written:
            return
        R, H, L, where = recv.rows, self.hidden, self.local_experts, self.comm._where
        if written:
            fp8 = self.wire != "bf16"
            _arrays.check(recv.tokens, "recv.tokens", call, "e4m3" if fp8 else "bf16", shape=(R, H), device=where,
                          allow_none=R == 0)  # fmt: skip
            if fp8:
                _arrays.check(recv.scales, "recv.scales", call, "f32", shape=self._scales_shape(R), device=where)
            _arrays.check(recv.weights, "recv.weights", call, "f32", shape=(R,), device=where)
        _arrays.check(recv.src, "recv.src", call, "i32", shape=(R, 2), device=where)
        _arrays.check(recv.expert_offsets, "recv.expert_offsets", call, "i32", shape=(L + 1,), device=where)
        _arrays.check(recv.expert_counts, "recv.expert_counts", call, "i32", shape=(L,), device=where)
        object.__setattr__(recv, "_checked", (self, written))

    # ---- calls --------------------------------------------------------------------------------------------
    def dispatch(self, layout: Layout, tokens: Any, weights: Any = None, *, token_scales: Any = None,
                 recv: HTRecv | None = None, expert_stride: int = 0, stream: Any = None) -> HTRecv:  # fmt: skip
        """Collective (sy_moe_ht_dispatch). tokens: bf16 [T, hidden] (E4M3 with wire "fp8_given", then
        token_scales f32 [T, hidden / 128]); weights: f32 [T, top_k] or None (rows get 0). T: the layout's.
        recv: buffers to reuse (their expert_stride; a different expert_stride here is refused), else
        alloc_recv(layout, expert_stride=...), whose buffers are not cleared: the rows past the layout's
        (recv.expert_offsets[L] on; with expert_stride, each expert's rows past its count) hold whatever the memory
        held, src included. Returns recv."""
        call = "MoEHT.dispatch"
        if recv is not None and expert_stride not in (0, recv.expert_stride):
            raise invalid("expert_stride", f"{expert_stride}, but recv was made with expert_stride "
                                           f"{recv.expert_stride} (leave it out with recv)", call)  # fmt: skip
        n, where = self._check_layout(layout, call), self.comm._where
        given = self.wire == "fp8_given"
        _arrays.check(tokens, "tokens", call, "e4m3" if given else "bf16", shape=(n, self.hidden), device=where,
                      allow_none=n == 0)  # fmt: skip
        if given:
            _arrays.check(token_scales, "token_scales", call, "f32", shape=(n, self.hidden // 128), device=where,
                          allow_none=n == 0)  # fmt: skip
        elif token_scales is not None:
            raise invalid("token_scales", f"only with wire 'fp8_given' (this object's wire: {self.wire!r})", call)
        _arrays.check(weights, "weights", call, "f32", shape=(n, self.top_k), device=where, allow_none=True)
        given, made = (tokens, token_scales, weights, layout.handle), ()
        if recv is None:
            recv = self.alloc_recv(layout, expert_stride=expert_stride)
            made = recv.arrays()
        else:
            self._check_recv(recv, call, written=True)
            given += recv.arrays()
        handle, join = self.comm._stream(stream)
        status = lib.sy_moe_ht_dispatch(self.handle, _arrays.ptr(layout.handle), n, _arrays.ptr(tokens),
                                        _arrays.ptr(token_scales), _arrays.ptr(weights), ctypes.byref(recv.struct()),
                                        handle)  # fmt: skip
        check(status, "sy_moe_ht_dispatch", self.comm._handle)
        self.comm._used(handle, stream, given, made)
        self.comm._join(join)
        return recv

    def combine(self, layout: Layout, rows_in: Any, recv: HTRecv, *, row_weights: Any = None,
                row_values: Any = None, out: Any = None, token_values: Any = None, add: bool = False,
                stream: Any = None) -> Any:  # fmt: skip
        """Collective (sy_moe_ht_combine): per token, the sum over its rows of w_r * rows_in[r] (w_r =
        row_weights[r], or 1 with None) in the header's order, bf16 [T, hidden]. rows_in: bf16 [recv.rows,
        hidden] in the layout of the dispatch that wrote recv. row_values (f32 [recv.rows]): carried back to each
        row's (token, k); then returns (out, token_values f32 [T, top_k]), else out. Also the dispatch's
        backward: rows_in = the rows' gradient, row_weights None.
        add=True (sy_moe_ht_combine_add; out required, the object's top_k <= 31): out[t] = bf16(S + out[t]),
        S the fp32 sum above, rounded once; a token with no expert in this layout is left as it is. Layouts over
        disjoint groups of experts, the first combined and the others added, give each token its sum without
        partial outputs."""
        call = "MoEHT.combine"
        if add and out is None:
            raise invalid("out", "add=True adds into out: pass the bf16 [T, hidden] array to add into", call)
        n, where = self._check_layout(layout, call), self.comm._where
        self._check_recv(recv, call, written=False)
        R = recv.rows
        _arrays.check(rows_in, "rows_in", call, "bf16", shape=(R, self.hidden), device=where, allow_none=R == 0)
        _arrays.check(row_weights, "row_weights", call, "f32", shape=(R,), device=where, allow_none=True)
        _arrays.check(row_values, "row_values", call, "f32", shape=(R,), device=where, allow_none=True)
        like = layout.handle
        given = (layout.handle, rows_in, row_weights, row_values, out, token_values, recv.src, recv.expert_offsets,
                 recv.expert_counts)  # the header: the combine may read recv's buffers
        if out is None:
            out = _arrays.empty((n, self.hidden), "bf16", like)
        else:
            _arrays.check(out, "out", call, "bf16", shape=(n, self.hidden), device=where)
        want_values = row_values is not None or token_values is not None
        if want_values:
            if token_values is None:
                token_values = _arrays.empty((n, self.top_k), "f32", like)
            else:
                _arrays.check(token_values, "token_values", call, "f32", shape=(n, self.top_k), device=where)
        handle, join = self.comm._stream(stream)
        p = _arrays.ptr
        fn, name = (lib.sy_moe_ht_combine_add, "sy_moe_ht_combine_add") if add else (lib.sy_moe_ht_combine,
                                                                                     "sy_moe_ht_combine")
        status = fn(self.handle, p(layout.handle), n, p(rows_in), ctypes.byref(recv.struct()), p(row_weights),
                    p(row_values), p(out), p(token_values), handle)  # fmt: skip
        check(status, name, self.comm._handle)
        self.comm._used(handle, stream, given, (out, token_values))
        self.comm._join(join)
        return (out, token_values) if want_values else out

    def combine_backward(self, layout: Layout, grad_out: Any, recv: HTRecv, *, row_weights: Any = None,
                         rows_in: Any = None, grad_rows: Any = None, weights_grad: bool = False,
                         stream: Any = None) -> Any:  # fmt: skip
        """Collective (sy_moe_ht_combine_backward). grad_out: bf16 [T, hidden]. Returns grad_rows (bf16
        [recv.rows, hidden], row r = bf16(w_r * grad_out[t]); new buffers start at zero, so padding rows read 0)
        and, with weights_grad (needs rows_in, the combine's input), (grad_rows, grad_row_weights f32
        [recv.rows]): the dot product of grad_out[t] and rows_in[r] in the header's order."""
        call = "MoEHT.combine_backward"
        n, where = self._check_layout(layout, call), self.comm._where
        self._check_recv(recv, call, written=False)
        R = recv.rows
        _arrays.check(grad_out, "grad_out", call, "bf16", shape=(n, self.hidden), device=where, allow_none=n == 0)
        _arrays.check(row_weights, "row_weights", call, "f32", shape=(R,), device=where, allow_none=True)
        if weights_grad:
            _arrays.check(rows_in, "rows_in", call, "bf16", shape=(R, self.hidden), device=where, allow_none=R == 0)
        like = layout.handle
        given = (layout.handle, grad_out, row_weights, rows_in if weights_grad else None, grad_rows, recv.src,
                 recv.expert_offsets, recv.expert_counts)
        with self.comm._on(stream):  # the zero fills go to the call's stream, ahead of the kernel
            if grad_rows is None:
                grad_rows = _arrays.zeros((R, self.hidden), "bf16", like)
            else:
                _arrays.check(grad_rows, "grad_rows", call, "bf16", shape=(R, self.hidden), device=where)
            grad_w = _arrays.zeros((R,), "f32", like) if weights_grad else None
        handle, join = self.comm._stream(stream)
        p = _arrays.ptr
        status = lib.sy_moe_ht_combine_backward(self.handle, p(layout.handle), n, p(grad_out),
                                                ctypes.byref(recv.struct()), p(row_weights),
                                                p(rows_in) if weights_grad else 0, p(grad_rows), p(grad_w),
                                                handle)  # fmt: skip
        check(status, "sy_moe_ht_combine_backward", self.comm._handle)
        self.comm._used(handle, stream, given, (grad_rows, grad_w))
        self.comm._join(join)
        return (grad_rows, grad_w) if weights_grad else grad_rows
