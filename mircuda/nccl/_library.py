"""The one door to NCCL: nccl4py's low-level bindings (``nccl.bindings.nccl``), imported here, and the
checked call that turns an NCCL failure into :class:`~mircuda.errors.NcclError`.

mircuda calls the bindings' raw-pointer entry points (``all_reduce(sendbuff, recvbuff, count, datatype,
op, comm, stream)`` ...) rather than nccl4py's ``Communicator`` methods, which resolve every buffer
through DLPack / the CUDA Array Interface on each call: mircuda has already checked its own buffers.

nccl4py loads ``libnccl.so.2`` lazily, at the first call, through ``cuda.pathfinder``; this module loads it
the same way at import, so that nccl4py installed without the NCCL library (``nvidia-nccl-cu13``) is an
import-time :class:`~mircuda.errors.NcclNotFound` rather than pathfinder's error at the first call.

NVLink multicast (NVLS) is kept off: ``NCCL_NVLS_ENABLE`` defaults to ``0`` once the import succeeded,
before NCCL reads its environment (at its first call; no communicator exists before the import ends).
On the shared H200 hosts mircuda is tested on, multicast objects (``cuMulticastCreate``, which NVLS
builds on) have left GPUs out of service for a day or more; NCCL's ring and tree algorithms over
NVLink do not need it. A value the caller set is kept.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .. import _cuda
from ..errors import NcclError, NcclNotFound

_INSTALL = ("install the extra, pip install 'mircuda[nccl]' (nccl4py, with nvidia-nccl-cu13), or nccl4py and "
            "nvidia-nccl-cu13 from a wheelhouse")

try:
    from nccl.bindings import nccl as bindings  # nccl4py (the [nccl] extra)
except ImportError as exc:
    raise NcclNotFound(f"mircuda.nccl needs nccl4py and the NCCL library: {_INSTALL} ({exc})") from exc


def _load_nccl() -> None:
    """Load ``libnccl.so.2`` as nccl4py does at its first call (``cuda.pathfinder``, which caches the
    handle, so nccl4py then finds it loaded).

    Raises:
        NcclNotFound: pathfinder found no NCCL library (or could not load it), naming the extra.
    """
    from cuda.pathfinder import (DynamicLibNotAvailableError, DynamicLibNotFoundError, DynamicLibUnknownError,
                                 load_nvidia_dynamic_lib)

    try:
        load_nvidia_dynamic_lib("nccl")
    except (DynamicLibNotFoundError, DynamicLibNotAvailableError, DynamicLibUnknownError, OSError) as exc:
        raise NcclNotFound(f"mircuda.nccl found nccl4py but not the NCCL library (libnccl.so.2): {_INSTALL} "
                           f"({type(exc).__name__}: {exc})") from exc


_load_nccl()
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # only once the import can succeed: see the module's text

__all__ = ["UNIQUE_ID_BYTES", "bindings", "checked", "nccl_version", "unique_id"]

UNIQUE_ID_BYTES = 128
"""``sizeof(ncclUniqueId)`` (``NCCL_UNIQUE_ID_BYTES`` in nccl.h)."""


def _result_name(code: int) -> str:
    try:
        return str(bindings.Result(code).name)
    except ValueError:
        return f"ncclResult({code})"


def checked(call: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call a binding and return its result; an NCCL failure becomes :class:`NcclError` naming
    ``call`` (the C function, e.g. ``"ncclAllReduce"``).

    NCCL selects devices through the CUDA runtime (``cudaSetDevice``), which changes the calling
    thread's current context behind mircuda's per-thread cache: the cache is dropped after every call,
    so mircuda's next call sets its own context again.
    """
    try:
        return fn(*args)
    except bindings.NCCLError as exc:
        code = int(getattr(exc, "status", -1))
        raise NcclError(code, _result_name(code), call, str(exc)) from exc
    finally:
        _cuda.forget_current()


def unique_id() -> bytes:
    """A new NCCL unique id (``ncclGetUniqueId``): 128 bytes that rank 0 creates and every rank of
    the communicator passes to :class:`~mircuda.nccl.Communicator` (send them to the other processes
    by any means: a pipe, a file, a socket, ``torch.multiprocessing``'s arguments).

    Raises:
        NcclError: NCCL could not create one (e.g. no usable network interface for its bootstrap).
    """
    return bytes(checked("ncclGetUniqueId", bindings.get_unique_id))


def nccl_version() -> tuple[int, int, int]:
    """The NCCL library's version, e.g. ``(2, 28, 9)`` (``ncclGetVersion``: major*10000 + minor*100 + patch)."""
    code = int(checked("ncclGetVersion", bindings.get_version))
    return code // 10000, (code % 10000) // 100, code % 100
