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
    "LinkError",
    "CompileWarning",
    "ContractError",
    "LaunchConfigError",
    "UseAfterFree",
    "ClosedResourceError",
    "CaptureError",
    "GraphStreamError",
    "CutlassNotFound",
    "CutlassError",
    "NcclError",
    "NcclNotFound",
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


class LinkError(CompileError):
    """nvJitLink could not link relocatable device code into one module.

    Attributes:
        log: nvJitLink's error log (as for :class:`CompileError`, the full text).
        arch: the target.
        source_name: the linked program's name.
        unresolved: the symbols the log reports as undefined, in log order, each once (e.g.
            ``("twice",)`` for a ``__device__`` function declared ``extern`` but defined nowhere).
        duplicates: the symbols more than one unit defines, each once (e.g. ``("twice",)`` for a
            ``__device__`` function defined in two files).
        message: the first line of ``str(error)`` without the source and arch (one line, naming the
            symbols first), for a command line's one-line error.
    """

    def __init__(self, message: str, log: str, arch: str, source_name: str,
                 unresolved: tuple[str, ...] = (), duplicates: tuple[str, ...] = ()) -> None:
        self.unresolved = tuple(unresolved)
        self.duplicates = tuple(duplicates)
        self.message = message
        super().__init__(message, log, arch, source_name)


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
        self.hint = hint
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


class CutlassNotFound(MircudaError):
    """The CUTLASS library (``libmircuda_cutlass.so``), its headers, its CMake project or the tools to
    build it are missing; the message says how to get them (``python -m mircuda build-cutlass``, the
    ``cutlass`` extra, or ``MIRCUDA_CUTLASS_LIBRARY``)."""


class CutlassError(MircudaError):
    """The CUTLASS library failed: a call into ``libmircuda_cutlass.so`` returned a failure status, or
    configuring or building the library (``python -m mircuda build-cutlass``) failed.

    Attributes:
        status: the library's status code (``MIRCUDA_CUTLASS_*`` of ``mircuda_cutlass.h``); ``None``
            for a build failure.
        name: the status's name (``"NOT_IMPLEMENTABLE"``, ``"WRONG_ARCH"`` ...), ``"BUILD_FAILED"``
            for a build failure.
        call: the library function (``"mircuda_cutlass_plan_create"`` ...) or the build step
            (``"cmake configure"``, ``"cmake --build"``).
        cuda_error: the ``cudaError_t`` behind a ``CUDA_ERROR`` status (0 otherwise).
        log: the end of the build's output (CMake, nvcc), empty for a library call.
    """

    def __init__(self, message: str, *, call: str, status: int | None = None, name: str = "BUILD_FAILED",
                 cuda_error: int = 0, log: str = "") -> None:
        self.status = status
        self.name = name
        self.call = call
        self.cuda_error = cuda_error
        self.log = log
        super().__init__(f"{message}\n{log}".rstrip() if log else message)


class NcclNotFound(UnsupportedPlatform, ImportError):
    """``mircuda.nccl`` was imported where ``nccl4py`` (the ``[nccl]`` extra) is not installed; the
    message names the extra."""


class NcclError(MircudaError):
    """An NCCL call failed.

    Attributes:
        code: the integer ``ncclResult_t``.
        name: NCCL's name for it, e.g. ``"InvalidArgument"``, ``"UnhandledCudaError"``.
        call: the NCCL function that returned it, e.g. ``"ncclAllReduce"``, ``"ncclGroupEnd"``.
    """

    def __init__(self, code: int, name: str, call: str, detail: str = "") -> None:
        self.code = int(code)
        self.name = name
        self.call = call
        message = f"{call} failed with {name} ({self.code})"
        if detail:
            message += f": {detail}"
        super().__init__(message)
