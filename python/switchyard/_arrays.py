"""_arrays.py — tensors and arrays as the C API sees them: a pointer, bytes, a dtype, a device.

The package takes torch tensors (CPU or CUDA) and, for the host backend without torch, numpy arrays, and
returns what it was given: torch in, torch out. numpy has no bfloat16 or float8: there bf16 values travel as
uint16 bit patterns and E4M3 bytes as uint8. Every check names the argument (STYLE.md: errors name it).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, Sequence

import numpy as np

from .errors import invalid

# dtype names of the C API -> numpy dtype (bf16 and e4m3 as their bits)
_NUMPY = {
    "bf16": np.dtype(np.uint16),
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "e4m3": np.dtype(np.uint8),
}
_TORCH: dict[str, Any] = {}
_torch = sys.modules.get("torch")  # _lib imported torch first when it is installed
_Tensor: Any = _torch.Tensor if _torch is not None else ()  # isinstance(x, ()) is False


def torch_module():
    """torch if it is installed (the package never needs it for numpy callers)."""
    return _torch


def _torch_dtypes() -> dict[str, Any]:
    if not _TORCH:
        torch = _torch
        _TORCH.update(
            bf16=torch.bfloat16,
            f16=torch.float16,
            f32=torch.float32,
            f64=torch.float64,
            i32=torch.int32,
            i64=torch.int64,
            u8=torch.uint8,
            e4m3=torch.float8_e4m3fn,
        )
    return _TORCH


_ACCEPTED: dict[tuple, frozenset] = {}  # (kinds, is torch) -> the dtypes they accept


def _accepted(kinds: tuple, torch_side: bool) -> frozenset:
    key = (kinds, torch_side)
    found = _ACCEPTED.get(key)
    if found is None:
        table = _torch_dtypes() if torch_side else _NUMPY
        found = _ACCEPTED[key] = frozenset(table[k] for k in kinds)
    return found


_TensorClass: Any = _torch.Tensor if _torch is not None else None  # exactly torch.Tensor (the fast path)
_KIND_SETS: dict[Any, tuple[frozenset, frozenset]] = {}  # kinds -> (torch dtypes, numpy dtypes)


def _kind_sets(kinds: Any) -> tuple[frozenset, frozenset]:
    key = kinds
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    sets = (_accepted(kinds, True) if _torch is not None else frozenset(), _accepted(kinds, False))
    _KIND_SETS[key] = sets
    return sets


def is_torch(x: Any) -> bool:
    return isinstance(x, _Tensor)


def matches(x: Any, kind: str) -> bool:
    """Whether x's dtype is the C API's `kind` ("bf16", "i32", ...)."""
    if isinstance(x, _Tensor):
        return x.dtype == _torch_dtypes()[kind]
    return x.dtype == _NUMPY[kind]


_KIND_BY_DTYPE: dict[Any, str] = {}  # dtype -> the C API's kind (numpy's uint16 and uint8: "bf16", "u8")


def kind_of(x: Any, kinds: Sequence[str]) -> str | None:
    """x's kind among `kinds` (None if not there)."""
    if not _KIND_BY_DTYPE:
        if _torch is not None:
            _KIND_BY_DTYPE.update({v: k for k, v in _torch_dtypes().items()})
        _KIND_BY_DTYPE.update({v: k for k, v in _NUMPY.items() if k != "e4m3"})
    kind = _KIND_BY_DTYPE.get(x.dtype)
    if kind in kinds:
        return kind
    if kind == "u8" and "e4m3" in kinds and not isinstance(x, _Tensor):
        return "e4m3"
    return None


def ptr(x: Any) -> int:
    """The first byte's address (0 for None)."""
    if x is None:
        return 0
    if isinstance(x, _Tensor):
        return x.data_ptr()
    return x.ctypes.data


def nbytes(x: Any) -> int:
    if isinstance(x, _Tensor):
        return x.numel() * x.element_size()
    return x.nbytes


def device_of(x: Any) -> tuple[str, int]:
    """("cpu", -1) or ("cuda", index)."""
    if isinstance(x, _Tensor):
        d = x.device
        return d.type, (d.index if d.index is not None else -1)
    return "cpu", -1


def _where(device: tuple[str, int]) -> str:
    return "cpu" if device[0] == "cpu" else f"cuda:{device[1]}"


def check(
    x: Any,
    name: str,
    call: str,
    kinds: Sequence[str] | str,
    shape: Sequence[int | None] | None = None,
    device: tuple[str, int] | None = None,
    allow_none: bool = False,
) -> Any:
    """Checks an argument (an array of one of `kinds`, C-contiguous, of `shape` where not None, on `device`)
    and returns it; raises InvalidArgError naming it otherwise. On every call's path: a plain tensor or array
    that passes takes one expression; anything else the detailed checks below."""
    sets = _KIND_SETS.get(kinds)
    if sets is None:
        sets = _kind_sets(kinds)
    cls = x.__class__
    if cls is _TensorClass:
        if (x.dtype in sets[0] and (shape is None or x.shape == shape) and x.is_contiguous()
                and (device is None or (x.get_device() == device[1] if device[0] == "cuda" else x.is_cpu))):  # fmt: skip
            return x
    elif cls is np.ndarray:
        if (x.dtype in sets[1] and (shape is None or x.shape == shape) and x.flags.c_contiguous
                and (device is None or device[0] == "cpu")):  # fmt: skip
            return x
    if x is None:
        if allow_none:
            return None
        raise invalid(name, "required (got None)", call)
    torch_side = isinstance(x, _Tensor)
    if not torch_side and not isinstance(x, np.ndarray):
        raise invalid(name, f"a torch.Tensor or numpy.ndarray is required, got {type(x).__name__}", call)
    if kinds.__class__ is not tuple:
        kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    if x.dtype not in _accepted(kinds, torch_side):
        want = " or ".join(str(_torch_dtypes()[k] if torch_side else _NUMPY[k]) for k in kinds)
        raise invalid(name, f"dtype {x.dtype}, want {want}", call)
    if shape is not None and x.shape != shape:  # equal: the common case, one comparison in C
        got = x.shape
        bad = len(got) != len(shape)
        if not bad:
            for want_dim, dim in zip(shape, got):
                if want_dim is not None and want_dim != dim:
                    bad = True
                    break
        if bad:
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise invalid(name, f"shape {list(got)}, want {want}", call)
    if not (x.is_contiguous() if torch_side else x.flags.c_contiguous):
        raise invalid(name, "must be contiguous", call)
    if device is not None:
        if not torch_side:
            ok = device[0] == "cpu"
        elif device[0] == "cpu":
            ok = x.is_cpu
        else:  # get_device: no torch.device object made
            ok = x.is_cuda and (device[1] < 0 or x.get_device() == device[1])
        if not ok:
            raise invalid(name, f"on {_where(device_of(x))}, want {_where(device)}", call)
    return x


def empty(shape: Sequence[int], kind: str, like: Any) -> Any:
    """An uninitialised array of `kind` of the same library and device as `like` (numpy when like is None)."""
    if like is not None and is_torch(like):
        return torch_module().empty(tuple(shape), dtype=_torch_dtypes()[kind], device=like.device)
    return np.empty(tuple(shape), dtype=_NUMPY[kind])


def zeros(shape: Sequence[int], kind: str, like: Any) -> Any:
    if like is not None and is_torch(like):
        return torch_module().zeros(tuple(shape), dtype=_torch_dtypes()[kind], device=like.device)
    return np.zeros(tuple(shape), dtype=_NUMPY[kind])


class _CudaMemory:
    """Device memory the library owns, seen by torch through __cuda_array_interface__ (no copy)."""

    def __init__(self, address: int, size: int):
        self.__cuda_array_interface__ = {
            "shape": (size,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 3,
            "strides": None,
        }


def wrap(address: int, size: int, shape: Sequence[int], kind: str, device: tuple[str, int], use_torch: bool) -> Any:
    """An array over memory the library owns (symmetric allocations): no copy, no ownership."""
    if device[0] == "cuda":
        torch = torch_module()
        raw = torch.as_tensor(_CudaMemory(address, size), device=f"cuda:{device[1]}")
        return raw.view(_torch_dtypes()[kind]).view(tuple(shape))
    buf = (ctypes.c_uint8 * size).from_address(address)
    if use_torch:
        torch = torch_module()
        return torch.frombuffer(buf, dtype=torch.uint8).view(_torch_dtypes()[kind]).view(tuple(shape))
    return np.frombuffer(buf, dtype=np.uint8).view(_NUMPY[kind]).reshape(tuple(shape))


def copy_into(dst: Any, src: Any) -> None:
    """dst[...] = src, on the current stream for CUDA tensors."""
    if is_torch(dst):
        dst.copy_(src)
    else:
        np.copyto(dst, src)
