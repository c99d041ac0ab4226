"""Every piece of numba-cuda mircuda touches, in one place.

mircuda drives numba-cuda below its dispatcher: it compiles a kernel's code library for an explicit
compute capability, links it with numba-cuda's linker (nvJitLink through cuda.core), and builds Numba
device arrays over memory it owns. Those are numba-cuda internals (checked against numba-cuda 0.30.4,
which ``pyproject.toml`` pins to ``>=0.30,<0.31``); when numba-cuda moves, this module is the one to
change.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numba
import numba_cuda
from numba import cuda
from numba.cuda import compiler as _compiler
from numba.cuda import dispatcher as _dispatcher
from numba.cuda import types as cuda_types
from numba.cuda.core.compiler_lock import global_compiler_lock
from numba.cuda.cudadrv import devicearray as _devicearray
from numba.cuda.cudadrv import driver as _driver
from numba.cuda.cudadrv.linkable_code import CUSource, LinkableCode

__all__ = ["numba_versions", "normalize_signature", "KernelLibrary", "compile_kernel_library", "new_linker", "CUSource",
           "LinkableCode", "types", "bfloat16", "float32x2", "DeviceNDArray", "memory_pointer",
           "external_stream", "set_memory_manager", "current_memory_manager_class", "HostOnlyCUDAMemoryManager",
           "existing_numba_contexts", "cudadevrt_path", "global_compiler_lock"]

types = cuda_types
bfloat16 = cuda_types.bfloat16
"""Numba's bfloat16 scalar type (an ``i16`` in NVVM IR); arrays of ``ml_dtypes.bfloat16`` type as it."""
HostOnlyCUDAMemoryManager = _driver.HostOnlyCUDAMemoryManager
DeviceNDArray = _devicearray.DeviceNDArray


def numba_versions() -> tuple[str, str]:
    """``(numba, numba-cuda)`` versions, part of every Numba kernel's digest."""
    return numba.__version__, numba_cuda.__version__


def normalize_signature(signature: Any) -> tuple[tuple[Any, ...], Any]:
    """``(argument types, return type)`` of a Numba signature (a string such as
    ``"void(float32[:], float32)"``, a ``Signature`` or a tuple of types)."""
    return _compiler.sigutils.normalize_signature(signature)


def float32x2() -> Any:
    """Numba's ``float32x2`` vector type (two floats, 4-byte aligned), as device declarations take it."""
    from numba.cuda.vector_types import vector_types

    return vector_types["float32x2"]


class _TargetDevice:
    """What ``get_current_device()`` returns while mircuda compiles for an explicit target."""

    def __init__(self, cc: tuple[int, int]) -> None:
        self.compute_capability = cc


@contextlib.contextmanager
def _device_functions_for(cc: tuple[int, int]) -> Iterator[None]:
    # numba-cuda 0.30.4 compiles a @cuda.jit(device=True) function called by a kernel for
    # get_current_device().compute_capability (dispatcher.py, CUDADispatcher.compile_device), which
    # needs a GPU. While mircuda compiles for an explicit target (under the compiler lock), the calling
    # thread sees that target instead; other threads see the real device.
    original = _dispatcher.get_current_device
    owner = threading.get_ident()

    def current_device() -> Any:
        if threading.get_ident() == owner:
            return _TargetDevice(cc)
        return original()

    _dispatcher.get_current_device = current_device
    try:
        yield
    finally:
        _dispatcher.get_current_device = original


@dataclass(frozen=True)
class KernelLibrary:
    """What mircuda needs of numba-cuda's code library for one compiled kernel.

    Attributes:
        entry: the kernel's mangled entry name (the LLVM function name, which is the PTX ``.entry``).
        links: code declared devices link (files, ``CUSource`` and other ``LinkableCode`` objects).
        needs_cudadevrt: the kernel uses dynamic parallelism (link ``libcudadevrt``).
        cooperative: the kernel synchronizes its grid (needs a cooperative launch).
        setup, teardown: callbacks numba-cuda runs when it loads / unloads the module.
        referenced: the kernel embeds the addresses of device arrays captured from globals.
    """

    library: Any
    entry: str
    links: tuple[Any, ...]
    needs_cudadevrt: bool
    cooperative: bool
    setup: tuple[Any, ...]
    teardown: tuple[Any, ...]
    referenced: bool

    def ptx(self, cc: tuple[Any, ...]) -> str:
        """The kernel's PTX for ``cc`` (NVVM; not LTO)."""
        return "\n".join(self.library.get_asm_strs(cc=cc))

    def ltoir(self, cc: tuple[Any, ...]) -> bytes:
        """The kernel's LTO-IR for ``cc`` (compiled with ``lto=True``)."""
        return self.library.get_ltoir(cc=cc)


def compile_kernel_library(pyfunc: Any, args: tuple[Any, ...], cc: tuple[Any, ...], *, fastmath: bool,
                           lineinfo: bool, opt: bool, lto: bool, launch_bounds: Any) -> KernelLibrary:
    """Compile ``pyfunc`` as a kernel (Numba ABI) for ``cc``: NVVM IR of the kernel and of the device
    functions it calls, with what it links (numba-cuda's ``_compile_pyfunc_with_fixup``)."""
    with global_compiler_lock, _device_functions_for((int(cc[0]), int(cc[1]))):
        lib, _ = _compiler._compile_pyfunc_with_fixup(
            pyfunc, types.void(*args), debug=False, lineinfo=lineinfo, device=False, fastmath=fastmath,
            cc=cc, opt=opt, abi="numba", launch_bounds=launch_bounds, lto=lto)
    return KernelLibrary(lib, lib._entry_name, tuple(lib._linking_files), bool(lib.needs_cudadevrt),
                         bool(lib.use_cooperative), tuple(lib._setup_functions), tuple(lib._teardown_functions),
                         bool(lib.referenced_objects))


def new_linker(cc: tuple[Any, ...], *, max_registers: int | None, lineinfo: bool, lto: bool) -> Any:
    """numba-cuda's linker (cuda.core's ``Linker``: nvJitLink, or the driver where nvJitLink is absent)."""
    return _driver._Linker(max_registers=max_registers, lineinfo=lineinfo, cc=cc, lto=lto)


def cudadevrt_path() -> str:
    """The static device runtime library (``libcudadevrt.a``) numba-cuda links for dynamic parallelism."""
    from numba.cuda.cudadrv.libs import get_cudalib

    return get_cudalib("cudadevrt", static=True)


def numba_include_dir(nvrtc_major: int) -> str:
    """numba-cuda's own copies of the CUDA fp16/bf16/fp8 headers, which numba-cuda's NVRTC searches
    first when it compiles the CUDA C shims of its float16 and bfloat16 operations."""
    import os

    return os.path.join(os.path.dirname(os.path.abspath(_compiler.__file__)), "include", str(nvrtc_major))


def is_lto_warning(setup_function: Any) -> bool:
    """True for numba-cuda's float16/bfloat16 shim callback, whose only effect is a performance
    warning when nvJitLink is missing (``numba/cuda/_internal/cuda_fp16.py``): safe to run early."""
    return getattr(setup_function, "__name__", "") == "lto_warning_callback" and \
        getattr(setup_function, "__module__", "").startswith("numba.cuda._internal")


def memory_pointer(numba_context: Any, address: int, size: int, *, owner: Any = None,
                   finalizer: Any = None) -> Any:
    """A Numba ``MemoryPointer`` over ``size`` bytes at device ``address``.

    ``owner`` is kept alive as long as the pointer (a view of memory someone else owns);
    ``finalizer`` is called once when the pointer dies (memory the pointer owns).
    """
    import weakref

    ctx = numba_context if isinstance(numba_context, weakref.ProxyTypes) else weakref.proxy(numba_context)
    return _driver.MemoryPointer(ctx, _driver.binding.CUdeviceptr(address), size, owner=owner, finalizer=finalizer)


def current_numba_context() -> Any:
    """Numba's context for the calling thread's current (primary) context."""
    from numba.cuda.cudadrv import devices

    return devices.get_context()


def external_stream(handle: int) -> Any:
    """A Numba stream object for a stream Numba did not create (``numba.cuda.external_stream``)."""
    return cuda.external_stream(handle)


def set_memory_manager(plugin_class: Any) -> None:
    """Make ``plugin_class`` the EMM plugin of Numba contexts created from now on."""
    cuda.set_memory_manager(plugin_class)


def current_memory_manager_class() -> Any:
    """The EMM plugin class new Numba contexts get (None: Numba's default, chosen on first use)."""
    return _driver._memory_manager


def default_memory_manager_class() -> Any:
    """Numba's own device memory manager (``cuMemAlloc``/``cuMemFree``)."""
    return _driver.NumbaCUDAMemoryManager


def restore_memory_manager_class(plugin_class: Any) -> None:
    """Put back a plugin class read with :func:`current_memory_manager_class` (None included)."""
    _driver._memory_manager = plugin_class


def existing_numba_contexts() -> list[Any]:
    """Numba contexts that already exist in this process (one primary context per device used)."""
    try:
        devices = list(_driver.driver.devices.values())
    except Exception:  # no driver: no context either
        return []
    return [d.primary_context for d in devices if getattr(d, "primary_context", None) is not None]
