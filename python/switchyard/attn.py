"""attn.py — the context-parallel attention dispatch (sy_attn_*): placement, plans, and the four directions.

Semantics are switchyard.h's ("Context-parallel attention dispatch"): every rank builds the plan for itself from
the same global description (each rank's sequence lengths, where each sequence's queries go, and its KV replicas'
ranks); at a destination rows arrive in the attention layout ordered by source rank, then sequence, then replica.
The library's destinations are symmetric memory sized by the plan's max_* fields (the same on every rank), so a
result is received into the object's symmetric buffer and copied into a fresh tensor, or received in place when
`out` is a symmetric tensor of the communicator (Comm.empty). Growing that buffer is a collective allocation: the
first call of a size must not be inside a CUDA graph capture.
"""

from __future__ import annotations

import bisect
import ctypes
import itertools
from ctypes import POINTER, c_double, c_int, c_int64, c_size_t, c_uint, c_uint64, c_void_p
from typing import Any, NamedTuple, Sequence

from . import _arrays
from ._lib import lib
from .comm import Comm, CommObject
from .errors import check, invalid


class PlanDesc(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("world_size", c_int), ("max_replicas", c_int), ("num_seqs", c_void_p),
                ("num_tokens", c_void_p), ("seq_lens", c_void_p), ("q_dst", c_void_p), ("kv_dst", c_void_p)]  # fmt: skip


class PlanInfo(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("num_tokens", c_int64), ("q_recv_rows", c_int64), ("kv_recv_rows", c_int64),
                ("q_recv_from", POINTER(c_int64)), ("kv_recv_from", POINTER(c_int64)), ("q_send_to", POINTER(c_int64)),
                ("kv_send_to", POINTER(c_int64)), ("max_num_tokens", c_int64), ("max_q_recv_rows", c_int64),
                ("max_kv_recv_rows", c_int64), ("fingerprint", c_uint64)]  # fmt: skip


class SeqPlace(ctypes.Structure):
    _fields_ = [("src_rank", c_int), ("seq", c_int), ("replica", c_int), ("dst_rank", c_int), ("src_row", c_int64),
                ("dst_row", c_int64), ("rows", c_int64)]  # fmt: skip


class PlanSeqs(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("num_seqs", c_int), ("max_replicas", c_int), ("q_recv_count", c_int64),
                ("kv_recv_count", c_int64), ("q_send", POINTER(SeqPlace)), ("kv_send", POINTER(SeqPlace)),
                ("q_recv", POINTER(SeqPlace)), ("kv_recv", POINTER(SeqPlace))]  # fmt: skip


class AttnConfig(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("max_tokens", c_int64), ("max_replicas", c_int), ("max_kv_grad_row_bytes", c_size_t)]


class PlaceDesc(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("world_size", c_int), ("num_docs", c_void_p), ("doc_lens", c_void_p),
                ("tolerance", c_double), ("max_shards_per_doc", c_int), ("q_row_bytes", c_size_t),
                ("kv_row_bytes", c_size_t)]  # fmt: skip


class PlaceStats(ctypes.Structure):
    _fields_ = [("max_over_mean", c_double), ("work_max", c_double), ("work_mean", c_double),
                ("q_rows_moved", c_int64), ("kv_rows_moved", c_int64), ("shards", c_int), ("balanced", c_int),
                ("min_over_mean", c_double), ("work_min", c_double)]  # fmt: skip


STRUCTS = {"sy_attn_plan_desc_t": PlanDesc, "sy_attn_plan_info_t": PlanInfo, "sy_attn_seq_place_t": SeqPlace,
           "sy_attn_plan_seqs_t": PlanSeqs, "sy_attn_config_t": AttnConfig, "sy_attn_place_desc_t": PlaceDesc,
           "sy_attn_place_stats_t": PlaceStats}  # fmt: skip

_P = c_void_p
for _name, _args in {
    "sy_attn_plan_create": [_P, _P, POINTER(c_void_p)],
    "sy_attn_plan_info": [_P, _P],
    "sy_attn_plan_seqs": [_P, _P],
    "sy_attn_plan_destroy": [_P],
    "sy_attn_plan_create_async": [_P, _P, _P, _P, _P, POINTER(c_void_p)],
    "sy_attn_plan_destroy_async": [_P, _P],
    "sy_attn_workspace_size": [_P, _P, POINTER(c_size_t)],
    "sy_attn_create": [_P, _P, POINTER(c_void_p)],
    "sy_attn_destroy": [_P],
    "sy_attn_q_forward": [_P, _P, _P, c_size_t, _P, _P],
    "sy_attn_qkv_forward": [_P, _P, _P, c_size_t, _P, _P, c_size_t, _P, _P],
    "sy_attn_q_reverse": [_P, _P, _P, c_size_t, _P, _P],
    "sy_attn_kv_backward": [_P, _P, _P, c_size_t, c_int, c_uint, _P, _P],
    "sy_attn_place": [_P, POINTER(c_void_p)],
    "sy_attn_placement_desc": [_P, _P],
    "sy_attn_placement_stats": [_P, _P],
    "sy_attn_placement_destroy": [_P],
}.items():
    getattr(lib, _name).argtypes = _args
    getattr(lib, _name).restype = c_int

_DTYPES = {"bf16": 0, "f16": 1, "f32": 2}  # sy_dtype_t
_ANY = ("bf16", "f16", "f32", "f64", "i32", "i64", "u8", "e4m3")


class Seq(NamedTuple):
    """One sequence (or KV replica) as the plan moves it forward (sy_attn_seq_place_t)."""

    src_rank: int
    seq: int
    replica: int
    dst_rank: int
    src_row: int
    dst_row: int
    rows: int


class Description(NamedTuple):
    """Every rank's sequences (sy_attn_plan_desc_t): seq_lens[r][i] tokens, q_dst[r][i] a rank or -1, and
    kv_dst[r][i] up to max_replicas ranks (-1 padding), or None without KV."""

    seq_lens: list[list[int]]
    q_dst: list[list[int]]
    kv_dst: list[list[list[int]]] | None
    max_replicas: int


def _int_array(ctype, values):
    return (ctype * max(1, len(values)))(*values)


def _pointers(arrays):
    return (c_void_p * max(1, len(arrays)))(*[ctypes.cast(a, c_void_p).value for a in arrays])


def _describe(d: Description, call: str) -> tuple[PlanDesc, list]:
    """The C description and the arrays it points at (keep them alive while it is used)."""
    W = len(d.seq_lens)
    if W < 1 or len(d.q_dst) != W or (d.kv_dst is not None and len(d.kv_dst) != W):
        raise invalid("description", "seq_lens, q_dst (and kv_dst) need one list per rank", call)
    C = d.max_replicas
    lens = [_int_array(c_int64, [int(x) for x in r]) for r in d.seq_lens]
    qd = [_int_array(c_int, [int(x) for x in r]) for r in d.q_dst]
    for r in range(W):
        if len(d.q_dst[r]) != len(d.seq_lens[r]):
            raise invalid("q_dst", f"rank {r}: {len(d.q_dst[r])} entries for {len(d.seq_lens[r])} sequences", call)
    kd = None
    if d.kv_dst is not None:
        flat = []
        for r in range(W):
            if len(d.kv_dst[r]) != len(d.seq_lens[r]) or any(len(x) != C for x in d.kv_dst[r]):
                raise invalid("kv_dst", f"rank {r}: want {len(d.seq_lens[r])} lists of max_replicas={C} ranks", call)
            flat.append(_int_array(c_int, [int(x) for s in d.kv_dst[r] for x in s]))
        kd = flat
    num_seqs = _int_array(c_int, [len(r) for r in d.seq_lens])
    num_tokens = _int_array(c_int64, [sum(int(x) for x in r) for r in d.seq_lens])
    keep = [lens, qd, kd, num_seqs, num_tokens, _pointers(lens), _pointers(qd), _pointers(kd) if kd else None]
    desc = PlanDesc(ctypes.sizeof(PlanDesc), W, C, ctypes.cast(num_seqs, c_void_p), ctypes.cast(num_tokens, c_void_p),
                    ctypes.cast(keep[5], c_void_p), ctypes.cast(keep[6], c_void_p),
                    ctypes.cast(keep[7], c_void_p) if kd else None)  # fmt: skip
    return desc, keep


class Windows(NamedTuple):
    """AttnPlan.windows: what attention needs of the query shards that arrived here, in arrival order (shards of 0
    rows left out). cu_seqlens_q is flash-attention's varlen argument for q_recv; shard i's keys and values are
    kv_recv rows kv_start[i] .. kv_start[i] + kv_len[i] (its document's from the first row to the shard's last:
    windows of one document overlap, so they come as starts and lengths, not as cu_seqlens_k); causal within the
    document, query j of shard i sits at key position kv_len[i] - q_len[i] + j of its window (bottom-right)."""

    cu_seqlens_q: list[int]  # [n + 1]
    q_len: list[int]
    kv_start: list[int]
    kv_len: list[int]
    max_seqlen_q: int
    max_seqlen_k: int


class Placement(NamedTuple):
    """sy_attn_place's result: the shards as a plan description, and the balance it reached."""

    description: Description
    stats: dict


def place(doc_lens: Sequence[Sequence[int]], *, tolerance: float = 0.0, max_shards_per_doc: int = 0,
          q_row_bytes: int = 0, kv_row_bytes: int = 0) -> Placement:  # fmt: skip
    """Pure CPU (sy_attn_place): splits every rank's documents (doc_lens[r], tokens) into shards and places them
    so that every rank's causal attention work is within tolerance (0: 0.10) of the mean. Returns the plan
    description for AttnPlan and the stats (max_over_mean, balanced, q_rows_moved, ...)."""
    W = len(doc_lens)
    lens = [_int_array(c_int64, [int(x) for x in r]) for r in doc_lens]
    num_docs = _int_array(c_int, [len(r) for r in doc_lens])
    ptrs = _pointers(lens)
    desc = PlaceDesc(ctypes.sizeof(PlaceDesc), W, ctypes.cast(num_docs, c_void_p), ctypes.cast(ptrs, c_void_p),
                     tolerance, max_shards_per_doc, q_row_bytes, kv_row_bytes)  # fmt: skip
    handle = c_void_p()
    check(lib.sy_attn_place(ctypes.byref(desc), ctypes.byref(handle)), "sy_attn_place")
    try:
        out = PlanDesc(ctypes.sizeof(PlanDesc))
        check(lib.sy_attn_placement_desc(handle, ctypes.byref(out)), "sy_attn_placement_desc")
        C = out.max_replicas
        num_seqs = ctypes.cast(out.num_seqs, POINTER(c_int))
        seq_lens_p = ctypes.cast(out.seq_lens, POINTER(POINTER(c_int64)))
        q_dst_p = ctypes.cast(out.q_dst, POINTER(POINTER(c_int)))
        kv_dst_p = ctypes.cast(out.kv_dst, POINTER(POINTER(c_int))) if out.kv_dst else None
        seq_lens, q_dst, kv_dst = [], [], []
        for r in range(out.world_size):
            n = num_seqs[r]
            seq_lens.append([seq_lens_p[r][i] for i in range(n)])
            q_dst.append([q_dst_p[r][i] for i in range(n)])
            kv_dst.append([[kv_dst_p[r][i * C + c] for c in range(C)] for i in range(n)] if kv_dst_p else [])
        stats = PlaceStats()
        check(lib.sy_attn_placement_stats(handle, ctypes.byref(stats)), "sy_attn_placement_stats")
    finally:
        lib.sy_attn_placement_destroy(handle)
    return Placement(Description(seq_lens, q_dst, kv_dst if C else None, C),
                     {name: getattr(stats, name) for name, _ in PlaceStats._fields_})  # fmt: skip


class AttnPlan(CommObject):
    """This rank's plan (sy_attn_plan_create; not collective) from the global description. Attributes from
    sy_attn_plan_info (num_tokens, q_recv_rows, kv_recv_rows, max_num_tokens, max_q_recv_rows, max_kv_recv_rows,
    fingerprint, and the per-rank lists q_recv_from, kv_recv_from, q_send_to, kv_send_to) and sy_attn_plan_seqs
    (q_send, kv_send, q_recv, kv_recv: lists of Seq).

    ordered=True uploads the plan's device copy in stream order (sy_attn_plan_create_async): from `pool` (a Pool)
    through `staging` (a HostPool's pinned slots; None: the communicator's own) on `stream` (torch's current
    stream when None), without waiting for the GPU; calls on that stream (or ordered after it) may use the plan.
    Not inside a CUDA graph capture. On the host backend both forms are the same."""

    _destroy = "sy_attn_plan_destroy"

    def __init__(self, comm: Comm, description: Description, *, ordered: bool = False, pool: Any = None,
                 staging: Any = None, stream: Any = None):  # fmt: skip
        call = "AttnPlan"
        if not isinstance(description, Description):
            raise invalid("description", f"a Description is required, got {type(description).__name__}", call)
        if not ordered and (pool is not None or staging is not None or stream is not None):
            raise invalid("ordered", "pool, staging and stream are for the stream-ordered upload (ordered=True)", call)
        self.description = description
        desc, keep = _describe(description, call)
        if ordered:
            pool_handle, staging_handle = _handle_of(pool, "pool", call), _handle_of(staging, "staging", call)
            stream_handle, join = comm._stream(stream)
            self._create(comm, "sy_attn_plan_create_async", ctypes.byref(desc), pool_handle, staging_handle,
                         stream_handle)  # fmt: skip
            comm._join(join)
        else:
            self._create(comm, "sy_attn_plan_create", ctypes.byref(desc))
        del keep
        info = PlanInfo(ctypes.sizeof(PlanInfo))
        check(lib.sy_attn_plan_info(self._handle, ctypes.byref(info)), "sy_attn_plan_info")
        W = comm.world_size
        for name in ("num_tokens", "q_recv_rows", "kv_recv_rows", "max_num_tokens", "max_q_recv_rows",
                     "max_kv_recv_rows", "fingerprint"):  # fmt: skip
            setattr(self, name, getattr(info, name))
        for name in ("q_recv_from", "kv_recv_from", "q_send_to", "kv_send_to"):
            p = getattr(info, name)
            setattr(self, name, [p[r] for r in range(W)] if p else [0] * W)
        seqs = PlanSeqs(ctypes.sizeof(PlanSeqs))
        check(lib.sy_attn_plan_seqs(self._handle, ctypes.byref(seqs)), "sy_attn_plan_seqs")
        C = seqs.max_replicas

        def places(p, n):
            return [Seq(*(getattr(p[i], f) for f, _ in SeqPlace._fields_)) for i in range(n)] if p else []

        self.q_send = places(seqs.q_send, seqs.num_seqs)
        self.kv_send = places(seqs.kv_send, seqs.num_seqs * C)
        self.q_recv = places(seqs.q_recv, seqs.q_recv_count)
        self.kv_recv = places(seqs.kv_recv, seqs.kv_recv_count)

    def windows(self, doc_lens: Sequence[Sequence[int]]) -> Windows:
        """Pure Python, from the arrival lists: each query shard here, its rows in q_recv and its keys' window in
        kv_recv, given every rank's document lengths (doc_lens[r]: rank r's documents, tokens, back to back in its
        rows, as given to sy.place). For placements whose shards stay inside documents and send every shard's keys
        and values to each rank holding a later shard of its document (sy.place's); anything else is refused."""
        call = "AttnPlan.windows"
        W = self.comm.world_size
        if not isinstance(doc_lens, Sequence) or len(doc_lens) != W:
            got = f"{len(doc_lens)} ranks' lengths" if isinstance(doc_lens, Sequence) else type(doc_lens).__name__
            raise invalid("doc_lens", f"{got} for a world of {W}: a list of token counts per rank is required", call)
        for r, lens in enumerate(doc_lens):
            if not isinstance(lens, Sequence) or any(isinstance(x, bool) or int(x) != x or x < 0 for x in lens):
                raise invalid("doc_lens", f"rank {r}: {lens!r} is not a list of token counts (integers >= 0)", call)
        me = self.comm.rank
        if sum(int(x) for x in doc_lens[me]) != self.num_tokens:
            raise invalid("doc_lens", f"rank {me}'s documents hold {sum(int(x) for x in doc_lens[me])} tokens, its "
                          f"plan {self.num_tokens}", call)  # fmt: skip
        starts = [[0, *itertools.accumulate(int(x) for x in r)] for r in doc_lens]
        cu, q_len, kv_start, kv_len = [0], [], [], []
        for shard in self.q_recv:
            if shard.rows == 0:
                continue
            s = starts[shard.src_rank]
            d = bisect.bisect_right(s, shard.src_row) - 1  # the document holding the shard's first row
            end = shard.src_row + shard.rows
            if d >= len(s) - 1 or end > s[d + 1]:
                raise invalid("doc_lens", f"rank {shard.src_rank}'s rows {shard.src_row}..{end - 1} (sequence "
                              f"{shard.seq}) are not inside one of its documents", call)  # fmt: skip
            first, last = self._kv_here(shard.src_rank, s[d], call), self._kv_here(shard.src_rank, end - 1, call)
            if last + 1 - first != end - s[d]:
                raise invalid("plan", f"the keys of rank {shard.src_rank}'s rows {s[d]}..{end - 1} are not back to "
                              "back here (a description not made by sy.place?)", call)  # fmt: skip
            cu.append(cu[-1] + shard.rows)
            q_len.append(shard.rows)
            kv_start.append(first)
            kv_len.append(last + 1 - first)
        return Windows(cu, q_len, kv_start, kv_len, max(q_len, default=0), max(kv_len, default=0))

    def _kv_here(self, src_rank: int, src_row: int, call: str) -> int:
        """The kv_recv row here holding row src_row of rank src_rank's keys and values."""
        for kv in self.kv_recv:
            if kv.src_rank == src_rank and kv.src_row <= src_row < kv.src_row + kv.rows:
                return kv.dst_row + src_row - kv.src_row
        raise invalid("plan", f"row {src_row} of rank {src_rank}'s keys does not arrive here, where a query shard "
                      "after it does (a description not made by sy.place?)", call)  # fmt: skip

    def close(self, stream: Any = None) -> None:
        """Not collective. sy_attn_plan_destroy (its device copy freed after the device is done with it); with
        `stream`, sy_attn_plan_destroy_async: given back to its pool on that stream, after the work enqueued there
        before (which must include the plan's last use). Idempotent; Comm.close() calls it too."""
        if stream is None:
            return super().close()
        if self._handle:
            handle, self._handle = self._handle, None
            if self in self.comm._objects:
                self.comm._objects.remove(self)
            stream_handle, join = self.comm._stream(stream)
            check(lib.sy_attn_plan_destroy_async(handle, stream_handle), "sy_attn_plan_destroy_async")
            self.comm._join(join)


def _handle_of(obj: Any, name: str, call: str) -> int | None:
    """The C handle of an optional CommObject argument (None: NULL)."""
    if obj is None:
        return None
    if not isinstance(obj, CommObject):
        raise invalid(name, f"a switchyard object is required, got {type(obj).__name__}", call)
    return obj.handle


class Attn(CommObject):
    """The attention dispatch's object (sy_attn_create, collective; so is close): max_tokens, the most rows any
    rank owns in any plan used with it; max_replicas, the most KV replicas of a sequence; max_kv_grad_row_bytes,
    the KV backward's largest gradient row (0: no KV backward)."""

    _destroy = "sy_attn_destroy"

    def __init__(self, comm: Comm, *, max_tokens: int, max_replicas: int = 1, max_kv_grad_row_bytes: int = 0):
        self._create_config(comm, "sy_attn_create", lambda: AttnConfig(ctypes.sizeof(AttnConfig), max_tokens,
                                                                        max_replicas, max_kv_grad_row_bytes))
        self.max_kv_grad_row_bytes = max_kv_grad_row_bytes

    # ---- helpers ------------------------------------------------------------------------------------------
    def _rows(self, x: Any, name: str, rows: int, call: str) -> tuple[str, int]:
        """Checks a source or destination of `rows` rows; returns (kind, bytes per row)."""
        _arrays.check(x, name, call, _ANY, device=self.comm._where)
        if len(x.shape) < 1 or x.shape[0] != rows:
            raise invalid(name, f"shape {list(x.shape)}: want {rows} rows", call)
        kind = _arrays.kind_of(x, _ANY)
        per_row = _arrays._NUMPY[kind].itemsize
        for d in x.shape[1:]:
            per_row *= int(d)
        return kind, per_row

    def _destination(self, name: str, out: Any, rows: int, max_rows: int, tail: tuple, kind: str, like: Any,
                     call: str, zero: bool = False, stream: Any = None) -> tuple[int, Any, bool]:  # fmt: skip
        """(address the library writes, the result, whether the result is that memory)."""
        shape = (rows,) + tail
        if out is not None:
            _arrays.check(out, "out", call, kind, device=self.comm._where)
            if len(out.shape) < 1 or tuple(out.shape[1:]) != tail or out.shape[0] < rows:
                raise invalid("out", f"shape {list(out.shape)}: want at least {rows} rows of {list(tail)}", call)
            if not self.comm.is_symmetric(out):
                raise invalid("out", "must be a symmetric tensor of the communicator (Comm.empty)", call)
            return _arrays.ptr(out), out[:rows], True  # the rows received, as without out (out may hold more)
        per_row = _arrays._NUMPY[kind].itemsize
        for d in tail:
            per_row *= int(d)
        address = self.comm.scratch(f"attn.{name}", max(1, max_rows * per_row))
        if zero and rows:  # the rows the call leaves as they were read zero in the result
            view = _arrays.wrap(address, rows * per_row, shape, kind, self.comm._where, _arrays.is_torch(like))
            with self.comm._on(stream):
                view[...] = 0
        return address, _arrays.empty(shape, kind, like), False

    def _finish(self, address: int, result: Any, direct: bool, like: Any, stream: Any) -> Any:
        if not direct and result.shape[0]:
            nbytes = _arrays.nbytes(result)
            kind = _arrays.kind_of(result, _ANY)
            view = _arrays.wrap(address, nbytes, result.shape, kind, self.comm._where, _arrays.is_torch(like))
            with self.comm._on(stream):
                _arrays.copy_into(result, view)
        return result

    # ---- the four directions ------------------------------------------------------------------------------
    def q_forward(self, plan: AttnPlan, q: Any, *, out: Any = None, stream: Any = None) -> Any:
        """Collective (sy_attn_q_forward): this rank's MLP rows q ([plan.num_tokens, ...]) to the attention
        layout; returns [plan.q_recv_rows, ...] (out: a symmetric tensor of at least max_q_recv_rows rows)."""
        call = "Attn.q_forward"
        kind, row_bytes = self._rows(q, "q", plan.num_tokens, call)
        address, result, direct = self._destination("q_recv", out, plan.q_recv_rows, plan.max_q_recv_rows,
                                                     tuple(q.shape[1:]), kind, q, call)  # fmt: skip
        handle, join = self.comm._stream(stream)
        check(lib.sy_attn_q_forward(self.handle, plan.handle, _arrays.ptr(q), row_bytes, address, handle),
              "sy_attn_q_forward", self.comm._handle)  # fmt: skip
        self.comm._used(handle, stream, (q, out), (result,) if out is None else ())
        self.comm._join(join)
        return self._finish(address, result, direct, q, stream)

    def qkv_forward(self, plan: AttnPlan, q: Any, kv: Any, *, q_out: Any = None, kv_out: Any = None,
                    stream: Any = None) -> tuple[Any, Any]:  # fmt: skip
        """Collective (sy_attn_qkv_forward): q as q_forward, and each sequence's kv rows ([plan.num_tokens, ...]) to
        every replica rank; returns (q_recv, kv_recv [plan.kv_recv_rows, ...])."""
        call = "Attn.qkv_forward"
        qk, q_bytes = self._rows(q, "q", plan.num_tokens, call)
        kk, kv_bytes = self._rows(kv, "kv", plan.num_tokens, call)
        qa, qr, qd = self._destination("q_recv", q_out, plan.q_recv_rows, plan.max_q_recv_rows, tuple(q.shape[1:]),
                                       qk, q, call)  # fmt: skip
        ka, kr, kd = self._destination("kv_recv", kv_out, plan.kv_recv_rows, plan.max_kv_recv_rows,
                                       tuple(kv.shape[1:]), kk, kv, call)  # fmt: skip
        handle, join = self.comm._stream(stream)
        status = lib.sy_attn_qkv_forward(self.handle, plan.handle, _arrays.ptr(q), q_bytes, qa, _arrays.ptr(kv),
                                         kv_bytes, ka, handle)  # fmt: skip
        check(status, "sy_attn_qkv_forward", self.comm._handle)
        self.comm._used(handle, stream, (q, kv, q_out, kv_out), (qr if q_out is None else None,
                        kr if kv_out is None else None))  # fmt: skip
        self.comm._join(join)
        return self._finish(qa, qr, qd, q, stream), self._finish(ka, kr, kd, kv, stream)

    def q_reverse(self, plan: AttnPlan, attn_rows: Any, *, out: Any = None, stream: Any = None) -> Any:
        """Collective (sy_attn_q_reverse): attention-layout rows ([plan.q_recv_rows, ...], e.g. the attention
        output) back to their owners' rows; returns [plan.num_tokens, ...], where rows of sequences that were not
        sent are zero (with out, a symmetric tensor: left as they were)."""
        call = "Attn.q_reverse"
        kind, row_bytes = self._rows(attn_rows, "attn_rows", plan.q_recv_rows, call)
        address, result, direct = self._destination("out", out, plan.num_tokens, plan.max_num_tokens,
                                                    tuple(attn_rows.shape[1:]), kind, attn_rows, call,
                                                    zero=True, stream=stream)  # fmt: skip
        handle, join = self.comm._stream(stream)
        check(lib.sy_attn_q_reverse(self.handle, plan.handle, _arrays.ptr(attn_rows), row_bytes, address, handle),
              "sy_attn_q_reverse", self.comm._handle)  # fmt: skip
        self.comm._used(handle, stream, (attn_rows, out), (result,) if out is None else ())
        self.comm._join(join)
        return self._finish(address, result, direct, attn_rows, stream)

    def kv_backward(self, plan: AttnPlan, grad_rows: Any, *, unsummed: bool = False, out: Any = None,
                    stream: Any = None) -> Any:  # fmt: skip
        """Collective (sy_attn_kv_backward): every replica's KV gradient ([plan.kv_recv_rows, ...] of bf16, f16 or
        f32) back to its owner: returns [plan.num_tokens, ...], each the fp32 sum over the sequence's replicas in
        replica order rounded once (zero without replicas); unsummed: [max_replicas * num_tokens, ...], replica c
        of token t at row c * num_tokens + t. out: any memory of this rank's device."""
        call = "Attn.kv_backward"
        _arrays.check(grad_rows, "grad_rows", call, tuple(_DTYPES), device=self.comm._where)
        kind, row_bytes = self._rows(grad_rows, "grad_rows", plan.kv_recv_rows, call)
        rows = plan.num_tokens * (plan.description.max_replicas if unsummed else 1)
        shape = (rows,) + tuple(grad_rows.shape[1:])
        given_out = out
        if out is None:
            out = _arrays.empty(shape, kind, grad_rows)
        else:
            _arrays.check(out, "out", call, kind, shape=shape, device=self.comm._where)
        handle, join = self.comm._stream(stream)
        status = lib.sy_attn_kv_backward(self.handle, plan.handle, _arrays.ptr(grad_rows), row_bytes, _DTYPES[kind],
                                         1 if unsummed else 0, _arrays.ptr(out), handle)  # fmt: skip
        check(status, "sy_attn_kv_backward", self.comm._handle)
        self.comm._used(handle, stream, (grad_rows, given_out), (out,))
        self.comm._join(join)
        return out
