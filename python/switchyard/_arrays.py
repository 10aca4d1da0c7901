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


def torch_module():
    """torch if it was imported (the package never imports it for numpy callers)."""
    return sys.modules.get("torch")


def _torch_dtypes() -> dict[str, Any]:
    if not _TORCH:
        torch = torch_module()
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


def is_torch(x: Any) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def dtype_of(x: Any) -> Any:
    return x.dtype


def matches(x: Any, kind: str) -> bool:
    """Whether x's dtype is the C API's `kind` ("bf16", "i32", ...)."""
    if is_torch(x):
        return x.dtype == _torch_dtypes()[kind]
    return x.dtype == _NUMPY[kind]


def kind_of(x: Any, kinds: Sequence[str]) -> str | None:
    for k in kinds:
        if matches(x, k):
            return k
    return None


def ptr(x: Any) -> int:
    """The first byte's address (0 for None)."""
    if x is None:
        return 0
    if is_torch(x):
        return x.data_ptr()
    return x.ctypes.data


def nbytes(x: Any) -> int:
    if is_torch(x):
        return x.numel() * x.element_size()
    return x.nbytes


def device_of(x: Any) -> tuple[str, int]:
    """("cpu", -1) or ("cuda", index)."""
    if is_torch(x):
        d = x.device
        return d.type, (d.index if d.index is not None else -1)
    return "cpu", -1


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
    and returns it; raises InvalidArgError naming it otherwise."""
    if x is None:
        if allow_none:
            return None
        raise invalid(name, "required (got None)", call)
    if not (is_torch(x) or isinstance(x, np.ndarray)):
        raise invalid(name, f"a torch.Tensor or numpy.ndarray is required, got {type(x).__name__}", call)
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    if kind_of(x, kinds) is None:
        want = " or ".join(str(_torch_dtypes()[k] if is_torch(x) else _NUMPY[k]) for k in kinds)
        raise invalid(name, f"dtype {x.dtype}, want {want}", call)
    if shape is not None:
        got = tuple(x.shape)
        if len(got) != len(shape) or any(s is not None and s != g for s, g in zip(shape, got)):
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise invalid(name, f"shape {list(got)}, want {want}", call)
    contiguous = x.is_contiguous() if is_torch(x) else x.flags["C_CONTIGUOUS"]
    if not contiguous:
        raise invalid(name, "must be contiguous", call)
    if device is not None and device_of(x) != device:
        where = "cpu" if device[0] == "cpu" else f"cuda:{device[1]}"
        got = device_of(x)
        raise invalid(name, f"on {got[0] if got[0] == 'cpu' else f'cuda:{got[1]}'}, want {where}", call)
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
