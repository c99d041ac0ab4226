"""BlockwiseFp8Plan's CUTLASS engine (M > 16, or forced): one library plan of a blockwise-scaled FP8
kernel (``CutlassLibrary.scaled_kernels``) with its workspace, and its ``@numba.njit`` executor.

The kernels take the operands exactly as the quantizers of :mod:`mircuda.matmul._quantize` write them
(scales K-major: ``sa`` ``[M, ceil(K/128)]``, ``sb`` ``[ceil(N/128), ceil(K/128)]``, row-major; the
C ABI: ``cutlass_build/include/mircuda_cutlass.h``). The SM90 cooperative kernel's library plan first copies
``sa`` M-major into its workspace with a second, small kernel on the same stream, which its TMA then reads
(``cutlass_build/src/blockwise.cuh``); so one ``execute`` may enqueue two kernels, and a graph captured from it
holds both."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from ..dtypes import bf16, dtype_info, e4m3, f32, u8
from ..errors import CutlassError
from ._dense import _destroy  # the dense CUTLASS plans' finalizer: the same library calls
from ._library import INVALID_ARGUMENT, NOT_IMPLEMENTABLE, CutlassLibrary, KernelInfo
from ._spec import Operand

if TYPE_CHECKING:
    from ..memory import DeviceBuffer
    from ..runtime import Context, Stream

__all__ = ["MISALIGNED", "WRONG_STREAM", "CutlassFp8", "cutlass_fp8_operands", "scaled_executor"]

MISALIGNED = NOT_IMPLEMENTABLE
"""What the CUTLASS engine's ``numba_execute`` returns for a misaligned address (the library's status 2)."""
WRONG_STREAM = 1
"""What it returns for a stream that is not the plan's (the library's ``MIRCUDA_CUTLASS_INVALID_ARGUMENT``)."""


def cutlass_fp8_operands(kernel: KernelInfo, m: int, n: int, k: int) -> tuple[Operand, ...]:
    """The checks of ``a, sa, b, sb, d, c`` for a CUTLASS blockwise kernel: codes and outputs to the
    kernel's ``alignment_bytes`` (16: TMA boxes and the epilogue's 128-bit accesses, the header's
    "a, b 16-byte aligned ... c, d 16-byte aligned"), scales to 4 (FP32 loads)."""
    kb, nb = -(-k // 128), -(-n // 128)
    align = max(kernel.alignment_bytes, 16)
    tma = f"kernel {kernel.name}: TMA / 128-bit accesses"
    scales = f"kernel {kernel.name}: FP32 scale loads"
    codes, sc, out = dtype_info(e4m3), dtype_info(f32), dtype_info(bf16)
    d_shape = f"BF16 [M, N] = [{m}, {n}]"
    return (Operand("a", codes, m * k, f"E4M3 [M, K] = [{m}, {k}]", align, tma),
            Operand("sa", sc, m * kb, f"FP32 [M, ceil(K/128)] = [{m}, {kb}]", 4, scales),
            Operand("b", codes, n * k, f"E4M3 [N, K] = [{n}, {k}]", align, tma),
            Operand("sb", sc, nb * kb, f"FP32 [ceil(N/128), ceil(K/128)] = [{nb}, {kb}]", 4, scales),
            Operand("d", out, m * n, d_shape, align, tma),
            Operand("c", out, m * n, d_shape, align, tma))


class CutlassFp8:
    """A library plan of ``kernel`` for (M, N, K) on the context's device, its workspace allocated from
    the context's default pool on ``stream`` at construction and kept until :meth:`close` (freed on
    ``stream``). ``execute`` takes addresses already checked by the plan. ``pdl``: whether the kernel launches
    with programmatic dependent launch (set at construction where the device and the kernel allow it).

    Raises:
        ContractError: (M, N, K) break the kernel's multiples (``shape``).
        CutlassError: the library refused the plan (NOT_IMPLEMENTABLE, WRONG_ARCH, ...).
    """

    def __init__(self, context: Context, stream: Stream, lib: CutlassLibrary, kernel: KernelInfo, m: int, n: int,
                 k: int) -> None:
        self.lib, self.kernel, self.stream = lib, kernel, stream
        context._make_current()
        handle = lib.create_scaled_plan(kernel, m, n, k)
        workspace: DeviceBuffer[Any] | None = None
        try:
            nbytes = lib.workspace_bytes(handle)
            if nbytes:
                workspace = context.default_memory_pool().allocate(u8, stream, nbytes)
            lib.set_workspace(handle, workspace.handle if workspace is not None else 0, nbytes)
            # Programmatic dependent launch where the kernel waits for the previous kernel before touching memory
            # (cc 9.0: the SM90 cooperative and ping-pong kernels; the cooperative one's SFA copy too), as
            # DenseMatmulPlan's CUTLASS kernels: its launch and prologue overlap that kernel's tail.
            self.pdl = context.device_info().supports_programmatic_launch and _set_pdl(lib, handle)
        except BaseException:
            lib.destroy(handle)
            if workspace is not None:
                workspace.free(stream)
            raise
        self.handle = handle
        self.workspace_bytes = nbytes
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _destroy, lib, handle, context, workspace, stream)
        self._finalizer.atexit = False

    def execute(self, stream: Stream, a: int, sa: int, b: int, sb: int, d: int, c: int, alpha: float,
                beta: float) -> None:
        """Enqueue on ``stream`` (``c`` = 0: C is ``d``)."""
        with self._lock:  # the library plan holds the kernel parameters of one launch at a time
            self.lib.execute_scaled(self.handle, stream._handle, a, b, sa, sb, c, d, alpha, beta)

    def numba_executor(self, stream: int) -> Any:
        return scaled_executor(self.lib.scaled_execute_address, self.handle, max(self.kernel.alignment_bytes, 16),
                               stream=stream)

    def close(self) -> None:
        self.handle = 0
        self._finalizer()


def _set_pdl(lib: CutlassLibrary, handle: int) -> bool:
    """``lib.set_pdl(handle, True)``, False (launch as before) where a library built between 2026-12-03's dense PDL
    (which added ``mircuda_cutlass_plan_set_pdl``) and its blockwise PDL answers INVALID_ARGUMENT for a blockwise
    plan: that library's kernels do not wait, and the plan must still be made."""
    try:
        return lib.set_pdl(handle, True)
    except CutlassError as exc:
        if exc.status == INVALID_ARGUMENT:
            return False
        raise


def scaled_executor(execute_address: int, plan_handle: int, alignment: int, *, stream: int) -> Any:
    """``execute(stream, a, sa, b, sb, d, c, alpha, beta) -> status``: an ``@numba.njit`` function
    calling the library's ``mircuda_cutlass_scaled_plan_execute`` (a :func:`mircuda.numba_ext.c_function`,
    arguments ``plan, stream, a, b, sfa, sfb, c, d, alpha, beta``) for one plan bound to the stream
    handle ``stream``. Without calling it, it returns :data:`WRONG_STREAM` for another stream and
    :data:`MISALIGNED` when ``a``, ``b``, ``d`` or ``c`` is not a multiple of ``alignment`` or ``sa``,
    ``sb`` of 4. ``c`` = 0 or ``c`` = ``d`` accumulates in place."""
    import ctypes

    import numba

    from ..numba_ext import c_function

    u64 = ctypes.c_uint64
    fn = c_function(execute_address, ctypes.c_int, u64, u64, u64, u64, u64, u64, u64, u64, ctypes.c_float,
                    ctypes.c_float)
    mask = numba.uint64(max(alignment, 1) - 1)
    four = numba.uint64(3)
    bound = numba.uint64(stream)
    handle = plan_handle
    to_u64 = numba.uint64

    @numba.njit(cache=False)
    def execute(stream: int, a: int, sa: int, b: int, sb: int, d: int, c: int, alpha: float, beta: float) -> int:
        if to_u64(stream) != bound:
            return WRONG_STREAM
        pa, psa, pb, psb, pd, pc = to_u64(a), to_u64(sa), to_u64(b), to_u64(sb), to_u64(d), to_u64(c)
        if (pa | pb | pd | pc) & mask or (psa | psb) & four:
            return MISALIGNED
        return fn(handle, to_u64(stream), pa, pb, psa, psb, pc, pd, alpha, beta)

    # The ctypes function object stays with the dispatcher (numba's Dispatcher declares no such attribute).
    execute._mircuda_keepalive = fn  # type: ignore[attr-defined]
    return execute
