"""comm.py — the communicator (sy_comm_*), its symmetric memory (sy_mem_*) and its streams.

A Comm is one rank's sy_comm_t. Made from the launcher's environment (syrun, torchrun, srun, mpirun: rank -1),
from a torch.distributed process group (any group: the library's host-side exchanges then go through the group,
sy_comm_config_t.allgather), or, on the host backend, by `host_ranks`, which runs N ranks as threads of this
process (their communicators share a host_group).

Streams: the cuda backend's calls take torch's current stream unless a stream is given. The library refuses
the legacy default stream (switchyard.h: it would serialise against every other stream), which is where torch
runs unless told otherwise; there the package runs the call on a side stream of its own, ordered after the
current stream and before what follows on it (two event waits), so eager code on the default stream works.
Inside torch.cuda.graph capture, the current stream is the capture stream and is passed as it is.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import threading
import time
from typing import Any, Callable, Sequence, TypeVar

from . import _arrays, _lib
from ._lib import ALLGATHER_FN, BACKEND_NAMES, BACKENDS, CommConfig, lib
from .errors import AbortedError, Error, InvalidArgError, TimeoutError, callback_failed, check, invalid

T = TypeVar("T")
_groups = itertools.count(1 << 24)  # host groups of host_ranks (a value a caller is unlikely to pick)


class Comm:
    """One rank's communicator. Collective calls (marked so) must be made by every rank in the same order.

    Prefer the constructors: `Comm.from_env()`, `Comm.from_process_group()`, `switchyard.host_ranks()`.
    `close()` (collective) frees everything, symmetric tensors included; a Comm is also a context manager.
    """

    def __init__(
        self,
        *,
        backend: str = "auto",
        rank: int = -1,
        world_size: int = -1,
        device: int = -1,
        heap_bytes: int = 0,
        timeout_ms: int = 0,
        host_group: int = 0,
        allgather: Callable[[bytes], Sequence[bytes]] | None = None,
    ):
        """Collective: sy_comm_init. rank/world_size -1: from the launcher's environment; backend "auto",
        "cuda" or "host"; device -1: SY_DEVICE, else the local rank (on the cuda backend it becomes torch's
        current device); heap_bytes 0: SY_HEAP_SIZE; timeout_ms 0: SY_TIMEOUT_MS; host_group: host backend,
        threads passing the same value form one communicator. allgather (cuda backend; rank and world_size
        given): how the ranks meet instead of the launcher's rendezvous, a function taking this rank's bytes and
        returning every rank's, in rank order (mpi4py's comm.allgather is one; from_process_group makes one of
        a group); the library calls it collectively, on the calling thread, until close()."""
        if backend not in BACKENDS:
            raise invalid("backend", f"{backend!r}, want one of {sorted(BACKENDS)}", "Comm")
        for name, value in (("rank", rank), ("world_size", world_size), ("device", device)):
            if not isinstance(value, int):
                raise invalid(name, f"an int is required, got {type(value).__name__}", "Comm")
        if allgather is not None and not callable(allgather):
            raise invalid("allgather", f"{type(allgather).__name__} is not callable", "Comm")
        config = CommConfig(ctypes.sizeof(CommConfig), BACKENDS[backend], rank, world_size, device, heap_bytes,
                            timeout_ms, host_group)  # fmt: skip
        self._bootstrap = _Allgather(allgather, world_size) if allgather is not None else None
        if self._bootstrap is not None:
            config.allgather = self._bootstrap.fn
        handle = ctypes.c_void_p()
        check(lib.sy_comm_init(ctypes.byref(handle), ctypes.byref(config)), "sy_comm_init")
        self._handle: int | None = handle.value
        value = ctypes.c_int()
        check(lib.sy_comm_rank(self._handle, ctypes.byref(value)), "sy_comm_rank", self._handle)
        self.rank: int = value.value
        check(lib.sy_comm_size(self._handle, ctypes.byref(value)), "sy_comm_size", self._handle)
        self.world_size: int = value.value
        check(lib.sy_comm_backend(self._handle, ctypes.byref(value)), "sy_comm_backend", self._handle)
        self.backend: str = BACKEND_NAMES[value.value]
        check(lib.sy_comm_device(self._handle, ctypes.byref(value)), "sy_comm_device", self._handle)
        self.device: int = value.value
        self._where = ("cuda", self.device) if self.backend == "cuda" else ("cpu", -1)
        if self.backend == "cuda" and _arrays.torch_module() is not None:
            _arrays.torch_module().cuda.set_device(self.device)  # "cuda" in torch means this rank's GPU
        self._symmetric: dict[int, int] = {}  # address -> bytes, of sy_mem_alloc
        self._scratch: dict[str, tuple[int, int]] = {}  # the package's own symmetric buffers: name -> (address, bytes)
        self._side_stream: Any = None
        self._streams: dict[int, Any] = {}  # _used: torch.cuda.ExternalStream of each raw stream handle
        # _used's marks, unless SWITCHYARD_STREAM_MARKS=0 (a program that keeps every tensor alive until the calls
        # on other streams are done, as with TORCH_NCCL_AVOID_RECORD_STREAMS)
        self._marks = os.environ.get("SWITCHYARD_STREAM_MARKS", "1") != "0"
        self._objects: list[CommObject] = []  # objects made on it, to destroy before it

    # ---- constructors -------------------------------------------------------------------------------------
    @classmethod
    def from_env(cls, *, backend: str = "auto", **kwargs: Any) -> "Comm":
        """Collective: rank and world size from the launcher's environment (syrun sets SY_RANK, SY_WORLD_SIZE,
        SY_LOCAL_RANK, SY_DEVICE; torchrun RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/MASTER_PORT). With no
        launcher: one rank. The host backend's ranks are threads of one process, so there it is one rank (use
        host_ranks for more)."""
        if _resolves_to_host(backend):
            world = _launcher_world()
            if world > 1:
                raise invalid("backend", f"the host backend runs ranks as threads of one process, but the launcher "
                              f"started {world} processes (use the cuda backend, or host_ranks)", "Comm.from_env")  # fmt: skip
            return cls(backend="host", rank=0, world_size=1, **kwargs)
        return cls(backend=backend, rank=-1, world_size=-1, **kwargs)

    @classmethod
    def from_process_group(cls, group: Any = None, *, backend: str = "auto", **kwargs: Any) -> "Comm":
        """Collective over the group: the ranks of a torch.distributed process group (None: the default group),
        numbered as the group numbers them (dist.get_rank(group), dist.get_world_size(group)). The cuda backend
        meets the group's ranks through the group itself (sy_comm_config_t.allgather over
        dist.all_gather_object: NVSHMEM's unique id from the group's first rank, then the library's other
        host-side exchanges), so any group works; the default group of a launcher whose world is the group's
        (torchrun, syrun, srun, mpirun) meets through the launcher's rendezvous as from_env does. NVSHMEM is one
        per process, so a process has one cuda communicator at a time. The device is torch.cuda.current_device()
        unless given. The host backend's ranks are threads of one process: there the group must be this process
        alone (host_ranks runs more)."""
        import torch.distributed as dist

        call = "Comm.from_process_group"
        if not dist.is_initialized():
            raise invalid("group", "torch.distributed is not initialised", call)
        world = dist.group.WORLD
        group = world if group is None else group
        rank = dist.get_rank(group)
        if rank < 0:
            raise invalid("group", f"this process (global rank {dist.get_rank()}) is not a member of the group", call)
        size = dist.get_world_size(group)
        if _resolves_to_host(backend):
            if size > 1:
                raise invalid("backend", f"the host backend runs ranks as threads of one process, but the group "
                              f"has {size} processes (use the cuda backend, or host_ranks)", call)  # fmt: skip
            return cls(backend="host", rank=0, world_size=1, **kwargs)
        if "device" not in kwargs:
            import torch

            kwargs["device"] = torch.cuda.current_device() if torch.cuda.is_available() else -1
        if group is not world or _launcher_world() != size:
            kwargs["allgather"] = group_allgather(group)
        return cls(backend=backend, rank=rank, world_size=size, **kwargs)

    # ---- queries and lifetime -----------------------------------------------------------------------------
    @property
    def handle(self) -> int:
        """The sy_comm_t (for ctypes callers); raises once closed."""
        if not self._handle:
            raise InvalidArgError("Comm", "the communicator is closed")
        return self._handle

    def async_error(self) -> tuple[str | None, str]:
        """(status name, description) of the first asynchronous error (a timed-out wait on the device, peers
        that disagree), or (None, "") when there is none. Does not synchronise."""
        status, detail = ctypes.c_int(0), ctypes.create_string_buffer(512)
        check(lib.sy_comm_async_error(self.handle, ctypes.byref(status), detail, len(detail)), "sy_comm_async_error")
        if status.value == 0:
            return None, ""
        return lib.sy_status_name(status.value).decode(), detail.value.decode(errors="replace")

    def close(self) -> None:
        """Collective: destroys the objects made on this communicator (attention and MoE objects, plans, pools,
        graph caches), then the communicator (its symmetric memory too: tensors over it must not be used after).
        Idempotent."""
        if not self._handle:
            return
        for obj in reversed(self._objects):
            obj.close()
        self._objects.clear()
        handle, self._handle = self._handle, None
        self._symmetric.clear()
        self._scratch.clear()
        check(lib.sy_comm_destroy(handle), "sy_comm_destroy")

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "" if self._handle else ", closed"
        return f"Comm(rank={self.rank}, world_size={self.world_size}, backend={self.backend!r}, device={self.device}{state})"

    # ---- streams ------------------------------------------------------------------------------------------
    def _stream(self, stream: Any) -> tuple[int | None, int | None]:
        """(the cudaStream_t to pass, the legacy stream to order after it, or None). Host backend: (None, None)."""
        if self.backend != "cuda":
            return None, None
        if stream is not None:
            return (stream if isinstance(stream, int) else stream.cuda_stream), None
        raw = _current_raw_stream(self.device)
        if raw not in (0, 1):  # not the legacy default stream (torch's default: 0)
            return raw, None
        if self._side_stream is None:  # a stream of torch's (kept) and two events, by the CUDA runtime's calls
            torch = _arrays.torch_module()
            self._side_stream = torch.cuda.Stream(self.device)
            self._fork_events = (_lib.cuda_event(), _lib.cuda_event())
        side, fork = self._side_stream.cuda_stream, self._fork_events[0]
        cudart = _lib.cudart()
        cudart.cudaEventRecord(fork, raw)
        cudart.cudaStreamWaitEvent(side, fork, 0)
        return side, raw

    def _join(self, legacy: int | None) -> None:
        """Orders the legacy stream after the side stream's call (see _stream)."""
        if legacy is not None:
            cudart = _lib.cudart()
            cudart.cudaEventRecord(self._fork_events[1], self._side_stream.cuda_stream)
            cudart.cudaStreamWaitEvent(legacy, self._fork_events[1], 0)

    def _used(self, stream: int | None, explicit: Any, given: tuple, made: tuple = ()) -> None:
        """Marks the torch tensors a call read or wrote as in use by the call's stream (Tensor.record_stream), as
        torch.distributed's collectives do: torch's caching allocator hands a dead tensor's memory to new tensors of
        the stream that allocated it at once, so a tensor made on one stream and given to a call on another (an
        FFN's output combined on the communication stream, a saved tensor freed by autograd) could be overwritten
        while the call still reads it. With the mark its memory waits for the call. `given`: the caller's tensors;
        `made`: the package's new ones, made on torch's current stream, so marked only when the call runs on an
        `explicit` stream (on the legacy default stream's side stream, _stream, they need none: the legacy stream
        waits for the call, and so does any reuse of their memory). A mark costs about a microsecond of host
        time; numpy arrays and None pass."""
        if stream is None or not self._marks:
            return
        torch_stream = None
        for x in given + made if explicit is not None else given:
            if x is None or not _arrays.is_torch(x) or not x.is_cuda:
                continue
            if torch_stream is None:
                torch_stream = self._streams.get(stream)
                if torch_stream is None:
                    torch_stream = _arrays.torch_module().cuda.ExternalStream(stream, device=self.device)
                    if len(self._streams) < 64:  # the streams a program uses are few; a bound all the same
                        self._streams[stream] = torch_stream
            x.record_stream(torch_stream)

    def _on(self, stream: Any) -> Any:
        """A context in which torch's work (copies, allocations) follows a call made on `stream`."""
        if self.backend != "cuda" or stream is None:
            return contextlib.nullcontext()
        torch = _arrays.torch_module()
        if isinstance(stream, int):
            stream = torch.cuda.ExternalStream(stream, device=self.device)
        return torch.cuda.stream(stream)

    # ---- host-side and stream-ordered collectives ------------------------------------------------------------
    def barrier(self, stream: Any = None) -> None:
        """Collective, stream-ordered (sy_comm_barrier): every rank's earlier stores visible to every rank."""
        handle, join = self._stream(stream)
        check(lib.sy_comm_barrier(self.handle, handle), "sy_comm_barrier", self._handle)
        self._join(join)

    def allgather_host(self, data: bytes) -> list[bytes]:
        """Collective, blocking, host-side (sy_comm_allgather_host, over the bootstrap): every rank gives
        len(data) bytes (the same on every rank) and gets every rank's, in rank order. For small things."""
        if not isinstance(data, (bytes, bytearray)):
            raise invalid("data", f"bytes required, got {type(data).__name__}", "Comm.allgather_host")
        n = len(data)
        out = ctypes.create_string_buffer(max(1, n * self.world_size))
        check(lib.sy_comm_allgather_host(self.handle, bytes(data), out, n), "sy_comm_allgather_host", self._handle)
        raw = out.raw
        return [raw[r * n : (r + 1) * n] for r in range(self.world_size)]

    # ---- symmetric memory -------------------------------------------------------------------------------------
    def _alloc(self, size: int) -> int:
        address = ctypes.c_void_p()
        check(lib.sy_mem_alloc(self.handle, size, ctypes.byref(address)), "sy_mem_alloc", self._handle)
        self._symmetric[address.value] = size
        return address.value

    def empty(self, shape: Sequence[int] | int, dtype: str = "u8", *, torch: bool | None = None) -> Any:
        """Collective (sy_mem_alloc, same shape and dtype on every rank): an uninitialised symmetric tensor
        (CUDA tensor of this rank's device; on the host backend a CPU tensor, or a numpy array when torch is
        False or not imported). dtype: "bf16", "f16", "f32", "f64", "i32", "i64", "u8", "e4m3". It lives until
        `free` (collective) or `close`; it is what `alltoall(out=...)` writes without a copy."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if dtype not in _arrays._NUMPY:
            raise invalid("dtype", f"{dtype!r}, want one of {sorted(_arrays._NUMPY)}", "Comm.empty")
        count = 1
        for s in shape:
            if not isinstance(s, int) or s < 0:
                raise invalid("shape", f"{shape}: sizes must be ints >= 0", "Comm.empty")
            count *= s
        size = count * _arrays._NUMPY[dtype].itemsize
        if size == 0:
            raise invalid("shape", f"{shape}: a symmetric allocation needs at least one byte", "Comm.empty")
        use_torch = _arrays.torch_module() is not None if torch is None else torch
        if use_torch and _arrays.torch_module() is None:
            raise invalid("torch", "True, but torch is not imported", "Comm.empty")
        return _arrays.wrap(self._alloc(size), size, shape, dtype, self._where, use_torch)

    def free(self, tensor: Any) -> None:
        """Collective (sy_mem_free): frees a tensor `empty` returned (its first byte must be the allocation's)."""
        address = _arrays.ptr(tensor)
        if address not in self._symmetric:
            raise invalid("tensor", f"0x{address:x} is not a symmetric allocation of this communicator", "Comm.free")
        check(lib.sy_mem_free(self.handle, address), "sy_mem_free", self._handle)
        del self._symmetric[address]

    def is_symmetric(self, tensor: Any) -> bool:
        """Whether tensor starts at, and lies inside, one of this communicator's symmetric allocations."""
        address = _arrays.ptr(tensor)
        size = self._symmetric.get(address)
        return size is not None and _arrays.nbytes(tensor) <= size

    def scratch(self, name: str, size: int) -> int:
        """The package's symmetric buffer `name` of at least size bytes (collective when it grows: every rank
        must ask for the same size; not inside a CUDA graph capture, as sy_mem_alloc synchronises)."""
        held = self._scratch.get(name)
        if held is not None and held[1] >= size:
            return held[0]
        if held is not None:
            # forgotten before it is freed: when the free or the new allocation fails, no later call may be handed
            # the freed address (which the heap may give out again); the next call of the name allocates afresh
            del self._scratch[name], self._symmetric[held[0]]
            check(lib.sy_mem_free(self.handle, held[0]), "sy_mem_free", self._handle)
        address = self._alloc(size)
        self._scratch[name] = (address, size)
        return address


class CommObject:
    """An object made on a communicator (an attention plan, a MoE object, a pool, a graph cache): its C handle,
    which `handle` gives (raising once closed), and `close()`, which destroys it (idempotent). The communicator
    closes the objects still open before itself, the last made first."""

    comm: Comm
    _handle: int | None = None
    _destroy = ""  # the C destroy function

    def _create(self, comm: Comm, create: str, *args: Any) -> None:
        """Makes the object: `create`(comm, *args, &handle), e.g. sy_moe_create(comm, &config, &moe)."""
        self.comm = comm
        handle = ctypes.c_void_p()
        check(getattr(lib, create)(comm.handle, *args, ctypes.byref(handle)), create, comm._handle)
        self._handle = handle.value
        comm._objects.append(self)

    def _create_config(self, comm: Comm, create: str, build: Callable[[], Any]) -> None:
        """_create for the creates whose first exchange carries every rank's verdict on its own arguments
        (sy_attn_create, sy_moe_create, sy_moe_ht_create; switchyard.h's conventions): build() makes the C config.
        Where it refuses this rank's arguments (raises), the rank still makes the create's exchange, with a NULL
        config the library refuses, so that every rank's create fails at once and the communicator stays usable
        (the others would otherwise wait for this rank in the exchange); then build's error is raised."""
        try:
            config = build()
        except Exception:
            if isinstance(comm, Comm) and comm._handle and comm.world_size > 1:  # (its log line: "config is NULL")
                getattr(lib, create)(comm._handle, None, ctypes.byref(ctypes.c_void_p()))
            raise
        self._create(comm, create, ctypes.byref(config))

    @property
    def handle(self) -> int:
        """The C handle (for ctypes callers); raises once closed."""
        if not self._handle:
            raise InvalidArgError(type(self).__name__, "the object is closed")
        return self._handle

    def close(self) -> None:
        """Destroys the object (collective where its C destroy is: the class says). Idempotent; Comm.close()
        calls it too."""
        if self._handle:
            handle, self._handle = self._handle, None
            if self in self.comm._objects:
                self.comm._objects.remove(self)
            check(getattr(lib, self._destroy)(handle), self._destroy)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def group_allgather(group: Any) -> Callable[[bytes], list[bytes]]:
    """An allgather of bytes over a torch.distributed group (dist.all_gather_object: any backend, gloo or NCCL),
    in the group's rank order: Comm's `allgather` for the group's ranks."""
    import torch.distributed as dist

    size = dist.get_world_size(group)

    def allgather(data: bytes) -> list[bytes]:
        gathered: list[Any] = [None] * size
        dist.all_gather_object(gathered, bytes(data), group=group)
        return gathered

    return allgather


class _Allgather:
    """A Python allgather as the library's sy_allgather_fn (the ctypes function is kept here, alive as long as
    the Comm). An exception inside it cannot cross C: it fails the library's call (SY_ERR_BOOTSTRAP) and becomes
    that error's __cause__."""

    def __init__(self, allgather: Callable[[bytes], Sequence[bytes]], world_size: int):
        self.allgather, self.world_size = allgather, world_size
        self.fn = ALLGATHER_FN(self._call)

    def _call(self, user: int | None, send: int | None, recv: int | None, nbytes: int) -> int:
        try:
            gathered = self.allgather(ctypes.string_at(send, nbytes) if nbytes else b"")
            if len(gathered) != self.world_size:
                raise ValueError(f"allgather returned {len(gathered)} items for a world of {self.world_size}")
            for r, data in enumerate(gathered):
                if not isinstance(data, (bytes, bytearray)) or len(data) != nbytes:
                    got = f"{len(data)} bytes" if isinstance(data, (bytes, bytearray)) else type(data).__name__
                    raise ValueError(f"allgather: rank {r} gave {got} where this rank gave {nbytes} bytes")
                if nbytes:
                    ctypes.memmove(recv + r * nbytes, bytes(data), nbytes)
            return 0
        except BaseException as e:  # noqa: BLE001 - handed to the library call's error
            callback_failed(e)
            return 1


def _public_raw_stream(device: int) -> int:
    return _arrays.torch_module().cuda.current_stream(device).cuda_stream


# torch's current stream on a device as a cudaStream_t: the private call inductor uses (a tenth of the cost of
# torch.cuda.current_stream()), or the public one where it is missing
_current_raw_stream = getattr(getattr(_arrays.torch_module(), "_C", None), "_cuda_getCurrentRawStream", _public_raw_stream)


def _resolves_to_host(backend: str) -> bool:
    """Whether sy_comm_init would pick the host backend (switchyard.h: auto is SY_BACKEND, else cuda when a GPU
    is visible; a build without the cuda backend has only the host one)."""
    if backend != "auto":
        return backend == "host"
    chosen = os.environ.get("SY_BACKEND", "") or "auto"
    if chosen != "auto":
        return chosen == "host"
    return not (getattr(_lib._build_info, "CUDA_KERNELS", False) and _lib.cuda_device_count() > 0)


def _launcher_world() -> int:
    """The world size the launcher's environment gives (1 when there is none)."""
    for name in ("SY_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        value = os.environ.get(name, "")
        if value.strip().isdigit():
            return int(value)
    return 1


# ---- host ranks as threads -----------------------------------------------------------------------------------


def host_ranks(
    world_size: int,
    fn: Callable[..., T],
    *args: Any,
    timeout_ms: int = 0,
    heap_bytes: int = 1 << 30,
) -> list[T]:
    """Runs fn(comm, *args) on `world_size` ranks of the host backend, each a thread of this process with its own
    Comm (one host group), closes the communicators, and returns the results in rank order. If a rank raises,
    the others' waits end (bounded by timeout_ms, 0: SY_TIMEOUT_MS) and the first failure is raised again (a
    rank's own error before the timeouts it caused in its peers)."""
    if not isinstance(world_size, int) or world_size < 1:
        raise invalid("world_size", f"{world_size!r}: an int >= 1 is required", "host_ranks")
    if not callable(fn):
        raise invalid("fn", f"{type(fn).__name__} is not callable", "host_ranks")
    group = next(_groups)
    results: list[Any] = [None] * world_size
    failures: list[tuple[float, int, BaseException]] = []

    def rank_main(rank: int) -> None:
        comm = None
        try:
            comm = Comm(backend="host", rank=rank, world_size=world_size, host_group=group,
                        timeout_ms=timeout_ms, heap_bytes=heap_bytes)  # fmt: skip
            results[rank] = fn(comm, *args)
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            failures.append((time.monotonic(), rank, e))
        finally:
            if comm is not None:
                try:
                    comm.close()
                except Error as e:
                    failures.append((time.monotonic(), rank, e))

    threads = [threading.Thread(target=rank_main, args=(r,), name=f"switchyard-rank-{r}") for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        failures.sort(key=lambda f: (isinstance(f[2], (TimeoutError, AbortedError)), f[0]))
        _, rank, first = failures[0]
        if hasattr(first, "add_note"):  # Python >= 3.11
            first.add_note(f"switchyard.host_ranks: raised by rank {rank} of {world_size}")
        raise first
    return results
