"""errors.py — the exceptions: one class per sy_status_t, all under switchyard.Error.

Every error carries the status (`status`, its number; `name`, e.g. "SY_ERR_TIMEOUT", from sy_status_name), the
C call or Python argument it concerns (`call`), and what else is known (`detail`): for errors the package finds
itself, the argument and its value; for SY_ERR_TIMEOUT / SY_ERR_MISMATCH / SY_ERR_ABORTED the communicator's
one-line description (sy_comm_async_error). The C API has no hook for its last log line, so an
SY_ERR_INVALID_ARG that only the library sees says which call refused, and the log line naming the argument
goes to stderr (SY_DEBUG, SY_DEBUG_FILE).
"""

from __future__ import annotations

import builtins
import ctypes

from ._lib import lib


class Error(RuntimeError):
    """A switchyard call failed. `status` (int), `name` ("SY_ERR_..."), `call`, `detail`."""

    status: int = -12
    name: str = "SY_ERR_INTERNAL"

    def __init__(self, call: str, detail: str = "", status: int | None = None):
        if status is not None:
            self.status = status
            self.name = status_name(status)
        self.call, self.detail = call, detail
        text = f"{call}: {self.name} ({status_string(self.status)})"
        super().__init__(f"{text}: {detail}" if detail else text)


class InvalidArgError(Error, ValueError):
    status, name = -1, "SY_ERR_INVALID_ARG"


class NoMemoryError(Error, MemoryError):
    status, name = -2, "SY_ERR_NO_MEMORY"


class CudaError(Error):
    status, name = -3, "SY_ERR_CUDA"


class NvshmemError(Error):
    status, name = -4, "SY_ERR_NVSHMEM"


class TimeoutError(Error, builtins.TimeoutError):
    status, name = -5, "SY_ERR_TIMEOUT"


class BootstrapError(Error):
    status, name = -6, "SY_ERR_BOOTSTRAP"


class SystemCallError(Error, OSError):
    status, name = -7, "SY_ERR_SYSTEM"


class UnsupportedError(Error):
    status, name = -8, "SY_ERR_UNSUPPORTED"


class NoDeviceError(Error):
    status, name = -9, "SY_ERR_NO_DEVICE"


class AbortedError(Error):
    status, name = -10, "SY_ERR_ABORTED"


class MismatchError(Error):
    status, name = -11, "SY_ERR_MISMATCH"


class InternalError(Error):
    status, name = -12, "SY_ERR_INTERNAL"


_BY_STATUS = {
    cls.status: cls
    for cls in (
        InvalidArgError,
        NoMemoryError,
        CudaError,
        NvshmemError,
        TimeoutError,
        BootstrapError,
        SystemCallError,
        UnsupportedError,
        NoDeviceError,
        AbortedError,
        MismatchError,
        InternalError,
    )
}
# the library's list must be ours: a status the library has and this list lacks still raises, as Error
for _status, _cls in _BY_STATUS.items():
    assert lib.sy_status_name(_status).decode() == _cls.name, (_status, _cls.name)

_ASYNC = (-5, -10, -11)  # timeout, aborted, mismatch: the communicator holds a description


def status_name(status: int) -> str:
    """sy_status_name: "SY_ERR_TIMEOUT" for -5."""
    return lib.sy_status_name(status).decode()


def status_string(status: int) -> str:
    """sy_status_string: "timed out waiting for a peer" for -5."""
    return lib.sy_status_string(status).decode()


def async_detail(comm_handle: int | None) -> tuple[int, str]:
    """(status, description) of the communicator's first asynchronous error (0, "" when none)."""
    if not comm_handle:
        return 0, ""
    status = ctypes.c_int(0)
    detail = ctypes.create_string_buffer(512)
    if lib.sy_comm_async_error(comm_handle, ctypes.byref(status), detail, len(detail)) != 0:
        return 0, ""
    return status.value, detail.value.decode(errors="replace")


def raise_status(status: int, call: str, comm_handle: int | None = None) -> None:
    """Raises the exception of a non-zero status returned by `call`."""
    detail = ""
    if status in _ASYNC:
        seen, detail = async_detail(comm_handle)
        if seen and seen != status:
            detail = f"first error {status_name(seen)}: {detail}"
    elif status == -1:
        detail = "the library's log line (stderr, or SY_DEBUG_FILE) names the argument"
    cls = _BY_STATUS.get(status, Error)
    raise cls(call, detail, status=status if cls is Error else None)


def check(status: int, call: str, comm_handle: int | None = None) -> None:
    """Raises unless status is SY_SUCCESS (0)."""
    if status:
        raise_status(status, call, comm_handle)


def invalid(argument: str, why: str, call: str = "") -> InvalidArgError:
    """An InvalidArgError for an argument the package checks itself (raise the result)."""
    return InvalidArgError(call or argument, f"{argument}: {why}")
