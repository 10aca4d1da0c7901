"""orchestration.py — the library's orchestration from Python: a stream-ordered device pool (sy_pool_*), pinned
staging slots (sy_host_pool_*) and a CUDA graph per shape bucket over a Python step (sy_graph_cache_*).

Where it sits: beside the operations, none of which needs it; each object is one rank's own (nothing here is
collective). A Pool and a HostPool are what AttnPlan(..., ordered=True) uploads a plan through, and a Pool hands
out scratch in stream order outside torch's caching allocator; a GraphCache replays a step of the caller's per
bucket of sizes (vLLM's buckets by default). Streams: torch's current stream unless one is given, as elsewhere in
the package. Semantics are switchyard.h's ("Orchestration"); on the host backend a pool is host memory given back
at once, a slot comes back at once, and a graph cache runs its step every time.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_int, c_size_t, c_uint64, c_void_p
from typing import Any, Callable, NamedTuple, Sequence

from . import _arrays
from ._lib import lib
from .comm import Comm, CommObject
from .errors import Error, callback_failed, check, invalid, take_callback_error

_SIZE_MAX = ctypes.c_size_t(-1).value


class PoolConfig(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("release_threshold", c_size_t)]


class PoolStatsStruct(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("reserved", c_size_t), ("used", c_size_t), ("reserved_high", c_size_t),
                ("used_high", c_size_t), ("allocs", c_uint64), ("frees", c_uint64), ("live", c_uint64)]  # fmt: skip


class HostPoolConfig(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("slot_bytes", c_size_t), ("slots", c_int)]


class HostPoolStatsStruct(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("slots", c_int), ("free_slots", c_int), ("acquires", c_uint64),
                ("waits", c_uint64), ("wait_ns", c_uint64)]  # fmt: skip


class GraphCacheConfig(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("buckets", c_void_p), ("num_buckets", c_int), ("max_bucket", c_int),
                ("warmup", c_int)]  # fmt: skip


class GraphCacheStatsStruct(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("eager_runs", c_uint64), ("captures", c_uint64), ("updates", c_uint64),
                ("instantiations", c_uint64), ("replays", c_uint64), ("graphs", c_int)]  # fmt: skip


STRUCTS = {"sy_pool_config_t": PoolConfig, "sy_pool_stats_t": PoolStatsStruct, "sy_host_pool_config_t": HostPoolConfig,
           "sy_host_pool_stats_t": HostPoolStatsStruct, "sy_graph_cache_config_t": GraphCacheConfig,
           "sy_graph_cache_stats_t": GraphCacheStatsStruct}  # fmt: skip

# sy_graph_step_fn: sy_status_t (*)(void *user, int bucket, cudaStream_t stream)
STEP_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int, c_void_p)

_P = c_void_p
for _name, _args in {
    "sy_pool_create": [_P, _P, POINTER(c_void_p)],
    "sy_pool_destroy": [_P],
    "sy_pool_alloc": [_P, c_size_t, POINTER(c_void_p), _P],
    "sy_pool_free": [_P, _P, _P],
    "sy_pool_trim": [_P, c_size_t],
    "sy_pool_stats": [_P, _P],
    "sy_host_pool_create": [_P, _P, POINTER(c_void_p)],
    "sy_host_pool_destroy": [_P],
    "sy_host_pool_acquire": [_P, POINTER(c_void_p)],
    "sy_host_pool_release": [_P, _P, _P],
    "sy_host_pool_stats": [_P, _P],
    "sy_graph_cache_create": [_P, _P, STEP_FN, _P, POINTER(c_void_p)],
    "sy_graph_cache_destroy": [_P],
    "sy_graph_cache_bucket": [_P, c_int, POINTER(c_int)],
    "sy_graph_cache_run": [_P, c_int, _P],
    "sy_graph_cache_refresh": [_P, c_int],
    "sy_graph_cache_stats": [_P, _P],
}.items():
    getattr(lib, _name).argtypes = _args
    getattr(lib, _name).restype = c_int


def _stats(obj: CommObject, function: str, struct_type: type, result_type: type) -> Any:
    """A *_stats call: the struct (its size set) read into a NamedTuple of its [out] fields."""
    struct = struct_type(ctypes.sizeof(struct_type))
    check(getattr(lib, function)(obj.handle, ctypes.byref(struct)), function)
    return result_type(*(getattr(struct, f) for f in result_type._fields))


def _count(value: Any, name: str, call: str, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise invalid(name, f"{value!r}: an int >= {low} is required", call)
    return value


# ---- the stream-ordered pool --------------------------------------------------------------------------------


class PoolStats(NamedTuple):
    """sy_pool_stats_t: bytes the pool holds and has handed out now and at most, and its call counts."""

    reserved: int
    used: int
    reserved_high: int
    used_high: int
    allocs: int
    frees: int
    live: int


class Pool(CommObject):
    """Device memory allocated and freed in stream order (sy_pool_*; not collective): a cudaMemPool of the
    communicator's device (host memory on the host backend). An allocation may be used by work on its stream after
    the call; a free takes effect when the stream gets there; neither stalls another stream or the host. Both are
    capturable in torch.cuda.graph (the graph owns what it allocates and must free it). release_threshold: bytes
    kept when a stream or the device synchronises (None: everything, so a steady loop never asks the device again;
    0: nothing unused)."""

    _destroy = "sy_pool_destroy"

    def __init__(self, comm: Comm, *, release_threshold: int | None = None):
        threshold = _SIZE_MAX
        if release_threshold is not None:
            threshold = _count(release_threshold, "release_threshold", "Pool", 0)
        config = PoolConfig(ctypes.sizeof(PoolConfig), threshold)
        self._create(comm, "sy_pool_create", ctypes.byref(config))

    def alloc(self, shape: Sequence[int] | int, dtype: str = "u8", *, stream: Any = None,
              torch: bool | None = None) -> Any:  # fmt: skip
        """sy_pool_alloc on `stream` (torch's current stream when None): an uninitialised tensor of `shape` and
        `dtype` ("bf16", "f32", ... as Comm.empty; 256-byte aligned) over the pool's memory (a CUDA tensor of the
        communicator's device; on the host backend a CPU tensor, or numpy when torch is False or not imported). The
        tensor does not own its memory: give it back with `free` and do not use it after."""
        call = "Pool.alloc"
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if dtype not in _arrays._NUMPY:
            raise invalid("dtype", f"{dtype!r}, want one of {sorted(_arrays._NUMPY)}", call)
        count = 1
        for s in shape:
            count *= _count(s, "shape", call, 0)
        size = count * _arrays._NUMPY[dtype].itemsize
        if size == 0:
            raise invalid("shape", f"{shape}: an allocation needs at least one byte", call)
        use_torch = _arrays.torch_module() is not None if torch is None else torch
        if use_torch and _arrays.torch_module() is None:
            raise invalid("torch", "True, but torch is not imported", call)
        comm = self.comm
        address = c_void_p()
        handle, join = comm._stream(stream)
        check(lib.sy_pool_alloc(self.handle, size, ctypes.byref(address), handle), "sy_pool_alloc", comm._handle)
        comm._join(join)
        return _arrays.wrap(address.value, size, shape, dtype, comm._where, use_torch)

    def free(self, tensor: Any, *, stream: Any = None) -> None:
        """sy_pool_free on `stream` (torch's current stream when None): gives back what `alloc` returned (its
        first byte must be the allocation's; anything else is refused and nothing is freed)."""
        if not (_arrays.is_torch(tensor) or hasattr(tensor, "ctypes")):
            raise invalid("tensor", f"what Pool.alloc returned is required, got {type(tensor).__name__}", "Pool.free")
        handle, join = self.comm._stream(stream)
        check(lib.sy_pool_free(self.handle, _arrays.ptr(tensor), handle), "sy_pool_free")
        self.comm._join(join)

    def trim(self, keep_bytes: int = 0) -> None:
        """sy_pool_trim: gives unused memory back to the device until the pool holds about keep_bytes (never less
        than its live allocations' chunks). Host-side; synchronises nothing."""
        check(lib.sy_pool_trim(self.handle, _count(keep_bytes, "keep_bytes", "Pool.trim", 0)), "sy_pool_trim")

    def stats(self) -> PoolStats:
        """sy_pool_stats (host-side; answers after an error)."""
        return _stats(self, "sy_pool_stats", PoolStatsStruct, PoolStats)


# ---- pinned staging slots ------------------------------------------------------------------------------------


class HostPoolStats(NamedTuple):
    """sy_host_pool_stats_t: slots in all and free now, acquires, those that waited and their wait in ns."""

    slots: int
    free_slots: int
    acquires: int
    waits: int
    wait_ns: int


class HostPool(CommObject):
    """A ring of pinned host slots of slot_bytes for host-to-device staging (sy_host_pool_*; not collective): a
    slot is acquired, filled, read by work on a stream (a copy with non_blocking=True), and given back when that
    stream gets there, with no polling and no synchronisation; the host waits only when every slot is still in
    use (bounded by the communicator's timeout). slots: 1 to 1024."""

    _destroy = "sy_host_pool_destroy"

    def __init__(self, comm: Comm, *, slot_bytes: int, slots: int = 4):
        call = "HostPool"
        config = HostPoolConfig(ctypes.sizeof(HostPoolConfig), _count(slot_bytes, "slot_bytes", call, 1),
                                _count(slots, "slots", call, 1))  # fmt: skip
        self._create(comm, "sy_host_pool_create", ctypes.byref(config))
        self.slot_bytes = slot_bytes

    def acquire(self, *, torch: bool | None = None) -> Any:
        """sy_host_pool_acquire: a free slot as uint8 [slot_bytes] over its pinned memory (a CPU tensor, or numpy
        when torch is False or not imported). Waits, bounded, while every slot is in use; never calls CUDA."""
        use_torch = _arrays.torch_module() is not None if torch is None else torch
        if use_torch and _arrays.torch_module() is None:
            raise invalid("torch", "True, but torch is not imported", "HostPool.acquire")
        address = c_void_p()
        check(lib.sy_host_pool_acquire(self.handle, ctypes.byref(address)), "sy_host_pool_acquire", self.comm._handle)
        return _arrays.wrap(address.value, self.slot_bytes, (self.slot_bytes,), "u8", ("cpu", -1), use_torch)

    def release(self, slot: Any, *, stream: Any = None, now: bool = False) -> None:
        """sy_host_pool_release: gives the slot `acquire` returned back once `stream` (torch's current stream when
        None) reaches this point, after everything enqueued there before; now=True: at once (no GPU work reads it).
        Not inside a CUDA graph capture (the slot would come back at every replay)."""
        if now and stream is not None:
            raise invalid("now", "True with a stream: a slot comes back at once or after a stream, not both",
                          "HostPool.release")  # fmt: skip
        handle, join = (None, None) if now else self.comm._stream(stream)
        check(lib.sy_host_pool_release(self.handle, _arrays.ptr(slot), handle), "sy_host_pool_release")
        self.comm._join(join)

    def stats(self) -> HostPoolStats:
        """sy_host_pool_stats."""
        return _stats(self, "sy_host_pool_stats", HostPoolStatsStruct, HostPoolStats)


# ---- a graph per bucket --------------------------------------------------------------------------------------


class GraphStats(NamedTuple):
    """sy_graph_cache_stats_t: eager runs (warm-ups; every run on the host backend), captures, graphs updated in
    place, instantiations, replays, and the buckets holding a graph."""

    eager_runs: int
    captures: int
    updates: int
    instantiations: int
    replays: int
    graphs: int


class GraphCache(CommObject):
    """A CUDA graph per shape bucket over a Python step (sy_graph_cache_*; not collective, one thread at a time).

    step(bucket, stream) enqueues one step for `bucket` (the caller's unit: tokens, sequences): torch's current
    stream is `stream` while it runs (a torch.cuda.ExternalStream; None on the host backend), so torch's
    operations and the package's calls inside it go there. run(n) takes the smallest bucket >= n: at its first use
    the step runs `warmup` times, is captured and its graph launched; later runs replay the graph, with no Python
    on the way. refresh(n) makes a bucket capture again at its next run (after the step's tensors or scalars
    changed; the graph is updated in place where CUDA allows).

    A captured step must be capturable and must not synchronise, and it must not allocate torch memory while
    captured (the capture is the library's, which torch's caching allocator does not know of: write into tensors
    made before, with out= arguments and the package's out/recv buffers). The package checks the last rule at each
    capture and fails the run naming it. A step that allocates belongs in torch.cuda.graph. Host backend: every run
    calls the step. An exception in the step ends the run and comes back from run() as it was raised.
    buckets: ascending ints > 0 (1 to 4096 of them); None: 1, 2, 4, then steps of 8 to 256, then of 16 to
    max_bucket (256 to 65536), and max_bucket."""

    _destroy = "sy_graph_cache_destroy"

    def __init__(self, comm: Comm, step: Callable[[int, Any], None], *, buckets: Sequence[int] | None = None,
                 max_bucket: int = 512, warmup: int = 1):  # fmt: skip
        call = "GraphCache"
        if not callable(step):
            raise invalid("step", f"{type(step).__name__} is not callable", call)
        self.step = step
        self._step_fn = STEP_FN(self._run_step)  # kept alive as long as the cache
        config = GraphCacheConfig(ctypes.sizeof(GraphCacheConfig), None, 0, _count(max_bucket, "max_bucket", call, 1),
                                  _count(warmup, "warmup", call, 0))  # fmt: skip
        keep = None
        if buckets is not None:
            values = [_count(b, "buckets", call, 1) for b in buckets]
            keep = (c_int * max(1, len(values)))(*values)  # the library copies them
            config.buckets, config.num_buckets = ctypes.cast(keep, c_void_p), len(values)
        self._create(comm, "sy_graph_cache_create", ctypes.byref(config), self._step_fn, None)
        del keep

    def _run_step(self, user: int | None, bucket: int, stream: int | None) -> int:
        """The sy_graph_step_fn: the Python step on the library's stream. Python exceptions stay on this thread
        for run() (callback_failed); the library sees a non-success status and stops the run."""
        try:
            if stream is None or self.comm.backend != "cuda":
                self.step(bucket, None)
                return 0
            torch = _arrays.torch_module()
            ext = torch.cuda.ExternalStream(stream, device=self.comm.device)
            with torch.cuda.stream(ext):
                capturing = torch.cuda.is_current_stream_capturing()
                before = _allocations(self.comm.device) if capturing else 0
                self.step(bucket, ext)
                if capturing and _allocations(self.comm.device) != before:
                    raise invalid("step", f"allocated torch memory while captured (bucket {bucket}): the library's "
                                  "capture is not torch's, so that memory could be handed out again while the graph "
                                  "still writes it; write into tensors made before (or use torch.cuda.graph)",
                                  "GraphCache.run")  # fmt: skip
            return 0
        except BaseException as e:  # noqa: BLE001 - raised again by run()
            callback_failed(e)
            return e.status if isinstance(e, Error) and e.status < 0 else -12  # SY_ERR_INTERNAL

    def run(self, n: int, *, stream: Any = None) -> None:
        """sy_graph_cache_run: one step for n (1 to the largest bucket) on `stream` (torch's current stream when
        None; not a capturing one): its bucket's graph, made first if needed."""
        handle, join = self.comm._stream(stream)
        status = lib.sy_graph_cache_run(self.handle, n, handle)
        if status:
            raised = take_callback_error()
            if raised is not None:
                if hasattr(raised, "add_note"):  # Python >= 3.11
                    raised.add_note(f"switchyard: raised by the step inside GraphCache.run({n})")
                raise raised
            check(status, "sy_graph_cache_run", self.comm._handle)
        self.comm._join(join)

    def bucket(self, n: int) -> int:
        """sy_graph_cache_bucket: the bucket that runs n (the smallest >= n)."""
        out = c_int()
        check(lib.sy_graph_cache_bucket(self.handle, n, ctypes.byref(out)), "sy_graph_cache_bucket")
        return out.value

    def refresh(self, n: int = 0) -> None:
        """sy_graph_cache_refresh: n's bucket (0: every bucket) captures again at its next run."""
        check(lib.sy_graph_cache_refresh(self.handle, n), "sy_graph_cache_refresh")

    def stats(self) -> GraphStats:
        """sy_graph_cache_stats."""
        return _stats(self, "sy_graph_cache_stats", GraphCacheStatsStruct, GraphStats)


def _allocations(device: int) -> int:
    """How many allocations torch's caching allocator has handed out on the device so far."""
    return int(_arrays.torch_module().cuda.memory_stats(device).get("allocation.all.allocated", 0))
