"""The dense plans as Numba-callable functions: ``@numba.njit`` code can run loops of plan executions
without the interpreter.

Each executor is an ``@njit`` function ``execute(stream, a, b, c, alpha, beta) -> int`` over raw
integers (``Stream.handle``, ``DeviceBuffer.handle``) returning a status (0: enqueued):

- ``DenseMatmulPlan``: calls the library's C entry point ``mircuda_cutlass_plan_execute`` through
  its address (a ctypes function type, which Numba calls natively); the status is the library's.
- ``DenseVectorPlan``: writes the kernel's arguments into a parameter block the plan keeps and calls
  the driver's ``cuLaunchKernel`` (the entry point mircuda resolved with ``cuGetProcAddress``); the
  status is a ``CUresult``.

The njit path checks alignment only (lengths, types and contexts are the caller's, as in any C API),
and the plan's context must be current in the calling thread (it is after any mircuda call on that
thread). One thread at a time per plan. This is a small facility of the matrix plans; a general one
(``mircuda/numba_ext``) may replace it.
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["address_as_pointer", "matmul_executor", "vector_executor", "INVALID_VALUE", "MISALIGNED"]

INVALID_VALUE = 1
"""``CUDA_ERROR_INVALID_VALUE``: what the vector executor returns for a misaligned pointer."""
MISALIGNED = 2
"""``MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE``: what the matrix executor returns for a misaligned pointer."""

_intrinsic: Any = None


def address_as_pointer() -> Any:
    """The Numba intrinsic ``address_as_pointer(address, numba.uint64) -> CPointer(uint64)``."""
    global _intrinsic
    if _intrinsic is None:
        from numba import types
        from numba.extending import intrinsic

        @intrinsic
        def _address_as_pointer(typingctx: Any, address: Any, dtype_ref: Any) -> Any:
            elem = dtype_ref.instance_type
            sig = types.CPointer(elem)(address, dtype_ref)

            def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
                return builder.inttoptr(args[0], context.get_value_type(types.CPointer(elem)))
            return sig, codegen

        _intrinsic = _address_as_pointer
    return _intrinsic


_EXECUTE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
                            ctypes.c_uint64, ctypes.c_float, ctypes.c_float)
_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                           ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint64, ctypes.c_uint64,
                           ctypes.c_uint64)


def matmul_executor(execute_address: int, plan_handle: int, alignment: int) -> Any:
    """``execute(stream, a, b, c, alpha, beta) -> status`` for one library plan (an njit function)."""
    import numba

    fn = _EXECUTE(execute_address)
    mask = max(alignment, 1) - 1
    handle = plan_handle

    u64 = numba.uint64
    umask = numba.uint64(mask)

    @numba.njit(cache=False)
    def execute(stream: int, a: int, b: int, c: int, alpha: float, beta: float) -> int:
        pa, pb, pc = u64(a), u64(b), u64(c)
        if (pa | pb | pc) & umask:
            return MISALIGNED
        return fn(handle, u64(stream), pa, pb, pc, alpha, beta)

    execute._mircuda_keepalive = fn  # the ctypes function object owns nothing, but keep it with the dispatcher
    return execute


class ParameterBlock:
    """The vector kernel's parameters (y, w, x: pointers; alpha, beta: f32; n, k: i32) at C ABI offsets
    0, 8, 16, 24, 28, 32, 36, and the ``void*`` array pointing at each, for ``cuLaunchKernel``."""

    OFFSETS = (0, 8, 16, 24, 28, 32, 36)

    def __init__(self) -> None:
        self.storage = (ctypes.c_uint64 * 5)()
        base = ctypes.addressof(self.storage)
        self.pointers = (ctypes.c_uint64 * 7)(*[base + o for o in self.OFFSETS])
        self.address = base
        self.pointers_address = ctypes.addressof(self.pointers)

    def packed_bytes(self) -> bytes:
        return bytes(self.storage)[:40]


def vector_executor(launch_address: int, function: int, grid: int, block: int, n: int, k: int,
                    vector_loads: bool) -> tuple[Any, ParameterBlock]:
    """``execute(stream, x, w, y, alpha, beta) -> CUresult`` launching one vector kernel (an njit
    function), and the parameter block it writes (the caller keeps it alive with the function)."""
    import numba

    launch = _LAUNCH(launch_address)
    params = ParameterBlock()
    base, pointers = params.address, params.pointers_address
    umask = numba.uint64(15 if vector_loads else 1)
    as_pointer = address_as_pointer()
    u64, f32, i32 = numba.uint64, numba.float32, numba.int32

    @numba.njit(cache=False)
    def execute(stream: int, x: int, w: int, y: int, alpha: float, beta: float) -> int:
        px, pw, py = u64(x), u64(w), u64(y)
        if (px | pw) & umask or py & u64(1):
            return INVALID_VALUE
        slots = numba.carray(as_pointer(base, u64), 3)
        slots[0] = py
        slots[1] = pw
        slots[2] = px
        scalars = numba.carray(as_pointer(base + 24, f32), 2)
        scalars[0] = alpha
        scalars[1] = beta
        sizes = numba.carray(as_pointer(base + 32, i32), 2)
        sizes[0] = n
        sizes[1] = k
        return launch(function, grid, 1, 1, block, 1, 1, 0, u64(stream), pointers, 0)

    execute._mircuda_keepalive = (launch, params)
    return execute, params
