"""The mircuda exception hierarchy.

Every error mircuda raises derives from :class:`MircudaError`. Errors about the caller's input name
the argument, the expected value and the received value; errors from CUDA keep the driver's (or
NVRTC's) own result name so they can be looked up in NVIDIA's documentation.
"""

from __future__ import annotations

__all__ = [
    "MircudaError",
    "UnsupportedPlatform",
    "CudaError",
    "NvrtcError",
    "CompileError",
    "CompileWarning",
    "ContractError",
    "LaunchConfigError",
    "UseAfterFree",
    "ClosedResourceError",
    "CaptureError",
    "GraphStreamError",
]


class MircudaError(Exception):
    """Base class of every exception mircuda raises."""


class UnsupportedPlatform(MircudaError):
    """The machine cannot run what was asked: no CUDA driver library, or a feature the device lacks."""


class CudaError(MircudaError):
    """A CUDA driver call failed.

    Attributes:
        code: the integer ``CUresult``.
        name: the driver's name for it, e.g. ``"CUDA_ERROR_OUT_OF_MEMORY"``.
        call: the driver function that returned it, e.g. ``"cuMemAllocFromPoolAsync"``.
    """

    def __init__(self, code: int, name: str, call: str, detail: str = "") -> None:
        self.code = int(code)
        self.name = name
        self.call = call
        self.detail = detail
        message = f"{call} failed with {name} ({self.code})"
        if detail:
            message += f": {detail}"
        super().__init__(message)


class NvrtcError(MircudaError):
    """An NVRTC call other than compilation itself failed (e.g. out of memory, bad program handle)."""

    def __init__(self, code: int, name: str, call: str) -> None:
        self.code = int(code)
        self.name = name
        self.call = call
        super().__init__(f"{call} failed with {name} ({self.code})")


class CompileError(MircudaError):
    """NVRTC rejected the source. ``log`` holds NVRTC's full program log, ``arch`` the target."""

    def __init__(self, message: str, log: str, arch: str, source_name: str) -> None:
        self.log = log
        self.arch = arch
        self.source_name = source_name
        super().__init__(f"{message} (source {source_name!r}, arch {arch})\n{log}".rstrip())


class CompileWarning(UserWarning):
    """NVRTC compiled the source but reported warnings (the log is in the message)."""


class ContractError(MircudaError, TypeError):
    """An argument does not satisfy a declared contract (kernel parameter, buffer dtype, length, range).

    Raised before anything is enqueued. ``argument`` names the offending argument.
    """

    def __init__(self, argument: str, expected: str, received: str, hint: str = "") -> None:
        self.argument = argument
        self.expected = expected
        self.received = received
        message = f"argument {argument!r}: expected {expected}, received {received}"
        if hint:
            message += f". {hint}"
        super().__init__(message)


class LaunchConfigError(MircudaError, ValueError):
    """A launch configuration exceeds the device's limits or is malformed."""


class UseAfterFree(MircudaError):
    """A buffer was used after ``free()``."""


class ClosedResourceError(MircudaError):
    """A context, stream, event or module was used after ``close()``."""


class CaptureError(MircudaError):
    """A stream capture failed or was invalidated; the capture was discarded."""


class GraphStreamError(MircudaError):
    """A graph was launched on a stream other than the one it was captured on."""
