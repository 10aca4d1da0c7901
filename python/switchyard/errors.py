"""errors.py — the exceptions: one class per sy_status_t, all under switchyard.Error.

Every error carries the status (`status`, its number; `name`, e.g. "SY_ERR_TIMEOUT", from sy_status_name), the
C call or Python argument it concerns (`call`), the library's message (`log_line`: sy_last_error, the text of the
log line that reported the failure, read right after the call whatever SY_DEBUG says; "" for errors the package
finds itself) and what is known beyond the status (`detail`): the argument and its value (the library's line, or
the package's own check), and for SY_ERR_TIMEOUT / SY_ERR_MISMATCH / SY_ERR_ABORTED the communicator's one-line
description (sy_comm_async_error) where the line does not already hold it. A Python exception raised inside a
callback the library made (a GraphCache step, a process group's allgather) is the error's __cause__.
"""

from __future__ import annotations

import builtins
import ctypes
import threading

from ._lib import lib

_BY_STATUS: dict[int, type] = {}


class Error(RuntimeError):
    """A switchyard call failed. `status` (int), `name` ("SY_ERR_..."), `call`, `detail`, `log_line`."""

    status: int = -12
    name: str = "SY_ERR_INTERNAL"

    def __init_subclass__(cls, status: int | None = None, **kwargs):
        """`class XError(Error, status=-n)`: the status's class, named by the library (sy_status_name)."""
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status, cls.name = status, lib.sy_status_name(status).decode()
            _BY_STATUS[status] = cls

    def __init__(self, call: str, detail: str = "", status: int | None = None, log_line: str = ""):
        if status is not None:
            self.status = status
            self.name = status_name(status)
        self.call, self.detail, self.log_line = call, detail, log_line
        text = f"{call}: {self.name} ({status_string(self.status)})"
        super().__init__(f"{text}: {detail}" if detail else text)


class InvalidArgError(Error, ValueError, status=-1):
    """SY_ERR_INVALID_ARG: an argument was refused, by the package or the library; nothing changed."""


class NoMemoryError(Error, MemoryError, status=-2):
    """SY_ERR_NO_MEMORY."""


class CudaError(Error, status=-3):
    """SY_ERR_CUDA: a CUDA runtime call failed."""


class NvshmemError(Error, status=-4):
    """SY_ERR_NVSHMEM."""


class TimeoutError(Error, builtins.TimeoutError, status=-5):
    """SY_ERR_TIMEOUT: a wait for a peer ended at its bound; the communicator now only accepts destroy."""


class BootstrapError(Error, status=-6):
    """SY_ERR_BOOTSTRAP: the ranks could not meet (the launcher's rendezvous, or a process group's allgather)."""


class SystemCallError(Error, OSError, status=-7):
    """SY_ERR_SYSTEM."""


class UnsupportedError(Error, status=-8):
    """SY_ERR_UNSUPPORTED: not on this backend or in this build."""


class NoDeviceError(Error, status=-9):
    """SY_ERR_NO_DEVICE."""


class AbortedError(Error, status=-10):
    """SY_ERR_ABORTED: a peer's earlier error ended this call."""


class MismatchError(Error, status=-11):
    """SY_ERR_MISMATCH: the ranks disagree on a collective's arguments."""


class InternalError(Error, status=-12):
    """SY_ERR_INTERNAL."""


# the library's list must be ours (a status the library has and this list lacks would still raise, as Error)
assert all(cls.name != "SY_UNKNOWN_STATUS" for cls in _BY_STATUS.values()), _BY_STATUS
assert lib.sy_status_name(min(_BY_STATUS) - 1) == b"SY_UNKNOWN_STATUS", "the library has statuses this list lacks"

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


def last_error() -> str:
    """sy_last_error: this thread's message of its last failure ("" when none); valid until its next sy_* call."""
    return lib.sy_last_error().decode(errors="replace")


_callback = threading.local()  # an exception raised in a callback the library made on this thread


def callback_failed(exc: BaseException) -> None:
    """Keeps an exception raised inside a ctypes callback (which cannot raise through C) for the error of the
    library call that made the callback (raise_status makes it the __cause__)."""
    _callback.error = exc


def take_callback_error() -> BaseException | None:
    """The exception callback_failed kept on this thread, once (None when none)."""
    exc = getattr(_callback, "error", None)
    _callback.error = None
    return exc


def raise_status(status: int, call: str, comm_handle: int | None = None) -> None:
    """Raises the exception of a non-zero status returned by `call` (call it right after the C call: it reads the
    library's message first, which the next sy_* call clears)."""
    line = last_error()
    detail = line
    for prefix in (f"{call}: ", "invalid argument: "):  # said by the exception's text already
        if detail.startswith(prefix):
            detail = detail[len(prefix) :]
    if status in _ASYNC:
        seen, description = async_detail(comm_handle)
        if seen and seen != status:
            description = f"first error {status_name(seen)}: {description}"
        if description and description not in line:
            detail = f"{detail}; {description}" if detail else description
    cls = _BY_STATUS.get(status, Error)
    error = cls(call, detail, status=status if cls is Error else None, log_line=line)
    cause = take_callback_error()
    if cause is not None:
        raise error from cause
    raise error


def check(status: int, call: str, comm_handle: int | None = None) -> None:
    """Raises unless status is SY_SUCCESS (0)."""
    if status:
        raise_status(status, call, comm_handle)


def invalid(argument: str, why: str, call: str = "") -> InvalidArgError:
    """An InvalidArgError for an argument the package checks itself (raise the result)."""
    return InvalidArgError(call or argument, f"{argument}: {why}")
