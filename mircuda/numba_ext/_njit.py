"""Compiled host loops: C functions callable from ``@numba.njit`` code, and prepared launches.

A ``@numba.njit`` function calls a C function through a ctypes function pointer it sees as a global
(Numba types it as an external function pointer and emits a direct call; a few ns). mircuda uses that
for the driver's own entry points (``cuLaunchKernel`` and friends, as ``cuGetProcAddress`` returned
them at :meth:`Driver.initialize`) and for any other C ABI function -- the CUTLASS plans' execute
functions are registered the same way::

    launch = mn.record_launcher()                       # @njit: launch(record.values) -> CUresult
    record = mn.LaunchRecord(kernel, stream, config, out, 2.0)   # checked and packed once

    @numba.njit
    def run(values, n):
        for _ in range(n):
            err = launch(values)
            if err:
                return err
        return 0

    mn.check(run(record.values, 1000))

Pointers travel as unsigned 64-bit integers (``c_uint64``): in the x86-64 and AArch64 C calling
conventions a pointer and a 64-bit integer are passed alike, and Numba converts Python ints to it.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from .. import _cuda
from ..errors import ContractError, CudaError, LaunchConfigError, MircudaError, UnsupportedPlatform
from ..launch import ArgumentPacker, LaunchConfig, TypedKernel
from ..runtime import Stream

__all__ = ["c_function", "driver_function", "LaunchRecord", "record_launcher", "check", "DRIVER_PROTOTYPES"]

_u64, _u32, _int = ctypes.c_uint64, ctypes.c_uint, ctypes.c_int

DRIVER_PROTOTYPES: dict[str, tuple[Any, tuple[Any, ...]]] = {
    # CUresult cuLaunchKernel(CUfunction f, unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
    #     blockDimZ, unsigned sharedMemBytes, CUstream hStream, void** kernelParams, void** extra)  (cuda.h)
    "cuLaunchKernel": (_int, (_u64, _u32, _u32, _u32, _u32, _u32, _u32, _u32, _u64, _u64, _u64)),
    # CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
    "cuGraphLaunch": (_int, (_u64, _u64)),
    # CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
    "cuEventRecord": (_int, (_u64, _u64)),
}
"""``(restype, argtypes)`` of the driver entry points :func:`driver_function` offers."""

_CTYPE_DTYPES = {ctypes.c_uint64: np.uint64, ctypes.c_int64: np.int64, ctypes.c_uint32: np.uint32,
                 ctypes.c_int32: np.int32, ctypes.c_uint16: np.uint16, ctypes.c_int16: np.int16,
                 ctypes.c_uint8: np.uint8, ctypes.c_int8: np.int8, ctypes.c_float: np.float32,
                 ctypes.c_double: np.float64}


def c_function(address: int, restype: Any, *argtypes: Any) -> Any:
    """The C function at ``address`` with this prototype, callable from ``@numba.njit`` code (as a
    global or closure variable) and from Python.

    Args:
        address: the function's address (e.g. from ``dlsym``, ``cuGetProcAddress`` or a plan's
            ``execute`` entry point).
        restype, argtypes: ctypes types (``ctypes.c_int``, ``ctypes.c_uint64`` for pointers...).

    Raises:
        ContractError: ``address`` is not a positive int, or a type is not a ctypes type.
    """
    if type(address) is not int or address <= 0:
        raise ContractError("address", "the address of a C function (a positive int)", repr(address))
    for i, t in enumerate((restype, *argtypes)):
        if t is not None and not (isinstance(t, type) and issubclass(t, ctypes._SimpleCData)):
            raise ContractError("restype" if i == 0 else f"argtypes[{i - 1}]", "a ctypes scalar type", repr(t))
    return ctypes.CFUNCTYPE(restype, *argtypes)(address)


def driver_function(name: str) -> Any:
    """A driver entry point (``"cuLaunchKernel"``, ``"cuGraphLaunch"``, ``"cuEventRecord"``) as a
    function ``@numba.njit`` code can call; it returns the ``CUresult`` (0 on success).

    Raises:
        ContractError: no such entry point is offered.
        UnsupportedPlatform: the driver was not initialized (``mc.Driver.initialize()``).
    """
    if name not in DRIVER_PROTOTYPES:
        raise ContractError("name", f"one of {', '.join(DRIVER_PROTOTYPES)}", repr(name))
    address = _cuda.entry_points.get(name)
    if not address:
        raise UnsupportedPlatform(f"{name} is not bound: call mircuda.Driver.initialize() first")
    restype, argtypes = DRIVER_PROTOTYPES[name]
    return c_function(address, restype, *argtypes)


def check(code: int, call: str = "cuLaunchKernel") -> None:
    """Raise :class:`~mircuda.CudaError` for a non-zero ``CUresult`` a compiled loop returned.

    Raises:
        CudaError: ``code`` is not 0 (``CUDA_SUCCESS``); its ``name`` is the driver's name for it.
    """
    if code:
        try:
            name = _cuda.result_name(int(code))
        except MircudaError:  # no driver to ask for the name
            name = f"CUresult({int(code)})"
        raise CudaError(int(code), name, call, "returned by a compiled host loop")


class LaunchRecord:
    """One launch of a typed kernel, checked and packed once, for compiled host loops.

    ``values`` is ``(function, grid x, y, z, block x, y, z, shared memory bytes, stream,
    kernel parameters)`` as ints: exactly ``cuLaunchKernel``'s arguments (``extra`` is NULL). The
    parameter block belongs to the record; :meth:`update` re-checks and rewrites it, and
    :meth:`argument` gives a numpy view of one ABI value for a loop to change between launches.

    The record keeps the kernel, stream and arguments alive, but does not stop anyone from freeing
    a buffer or closing the stream: that is the caller's contract while launches may still happen.
    The driver launches in the calling thread's current context: run the loop in the thread that
    made the record, or call :meth:`make_current` first.

    Raises:
        ContractError, LaunchConfigError, UseAfterFree, ClosedResourceError: as ``kernel.launch`` does.
    """

    def __init__(self, kernel: TypedKernel, stream: Stream, config: LaunchConfig, *args: Any, **kwargs: Any) -> None:
        if not isinstance(kernel, TypedKernel):
            raise ContractError("kernel", "a TypedKernel (module.kernel(contract))", type(kernel).__name__)
        if not isinstance(stream, Stream):
            raise ContractError("stream", "a mircuda Stream", type(stream).__name__)
        context = kernel.module.context
        stream._check_usable("stream", context)
        dims = kernel._config_dims(config)
        if config.programmatic_stream_serialization:  # the record's entry point is cuLaunchKernel
            raise LaunchConfigError("config: programmatic_stream_serialization is not supported by @njit launch "
                                    "records (they call cuLaunchKernel); use a LaunchConfig without it")
        self._packer = ArgumentPacker(kernel.contract, context, abi=kernel._abi.name)
        self._packer.pack(*args, **kwargs)
        self._kernel = kernel
        self._stream = stream
        self._config = config
        self._args = (args, kwargs)
        self._views: dict[str, np.ndarray[Any, Any]] = {}
        self.values: tuple[int, ...] = (kernel.handle, *dims, stream.handle, self._packer.block.params_address)

    @property
    def kernel(self) -> TypedKernel:
        return self._kernel

    @property
    def stream(self) -> Stream:
        return self._stream

    @property
    def labels(self) -> tuple[str, ...]:
        """The ABI values of the parameter block, in order (``"out.data"``, ``"value"``...)."""
        return tuple(s.label for s in self._packer.block.slots)

    def packed_arguments(self) -> bytes:
        """The parameter block as the driver will copy it."""
        return self._packer.block.packed_bytes()

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Check new arguments against the contract and rewrite the parameter block (same launch
        geometry and stream). Not while a compiled loop is launching this record in another thread."""
        self._packer.pack(*args, **kwargs)
        self._args = (args, kwargs)

    def argument(self, label: str) -> np.ndarray[Any, Any]:
        """A one-element numpy array viewing ABI value ``label`` of the parameter block; a loop may
        write it between launches (``view[0] = i``). No check applies to values written this way.

        Raises:
            ContractError: no such label (see :attr:`labels`).
        """
        view = self._views.get(label)
        if view is None:
            slot = next((s for s in self._packer.block.slots if s.label == label), None)
            if slot is None:
                raise ContractError("label", f"one of {', '.join(self.labels)}", repr(label))
            raw = (type(slot.view) * 1).from_buffer(self._packer.block.storage, slot.offset)
            view = self._views[label] = np.ctypeslib.as_array(raw).view(_CTYPE_DTYPES[type(slot.view)])
        return view

    def make_current(self) -> None:
        """Make the kernel's context current in the calling thread."""
        self._kernel.module.context._make_current()

    def launch(self) -> None:
        """Launch once from Python (the same call a compiled loop makes; checks the result).

        Raises:
            CudaError: the driver refused the launch.
        """
        self.make_current()
        code = _cuda.launch_kernel(*self.values)
        if code:
            _cuda.raise_result(code, "cuLaunchKernel", f"kernel {self._kernel.contract.symbol!r}")

    def __repr__(self) -> str:
        return f"LaunchRecord({self._kernel.contract.symbol!r}, {self._config!r}, {self._stream!r})"


_launchers: dict[int, Any] = {}
_launchers_lock = threading.Lock()


def record_launcher(launch_function: Any = None) -> Any:
    """An ``@numba.njit`` function ``launch(values) -> int``: ``cuLaunchKernel`` with a
    :attr:`LaunchRecord.values` tuple, returning the ``CUresult``. Call it from njit loops (or Python).

    Args:
        launch_function: the C function to call (default: the driver's ``cuLaunchKernel``, from
            :func:`driver_function`); a function with the same prototype stands in for it in tests.

    Raises:
        UnsupportedPlatform: no function was given and the driver was not initialized.
    """
    import numba

    fn = driver_function("cuLaunchKernel") if launch_function is None else launch_function
    key = ctypes.cast(fn, ctypes.c_void_p).value or 0
    with _launchers_lock:
        launcher = _launchers.get(key)
        if launcher is None:
            @numba.njit(nogil=False)
            def launch(values: tuple[int, ...]) -> int:
                return fn(values[0], values[1], values[2], values[3], values[4], values[5], values[6],
                          values[7], values[8], values[9], 0)

            launcher = _launchers[key] = launch
            # Keeps the ctypes object alive with the launcher; numba's stubs declare no such attribute.
            launcher._mircuda_function = fn  # type: ignore[attr-defined]
    return launcher
