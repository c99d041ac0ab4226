"""BlockScaledFp4Plan's SM120 engine: one library plan of a block-scaled NVFP4 kernel
(``CutlassLibrary.block_scaled_kernels``: CUTLASS ``OpClassBlockScaledTensorOp``, ``mma.sync ...
kind::mxf4nvf4.block_scale``, sm_120f) with its workspace and a 4-byte device alpha, the kernel
selection and refusals, and the ``@numba.njit`` executor.

The kernels read NVFP4 A ``[M, K/2]`` and B ``[N, K/2]`` (packed E2M1) with UE4M3 scales in the tiled
layout (CUTLASS's SM1xx block-scaled layout, ``_fp4_layout.SCALE_LAYOUTS``), and write BF16 D ``[M, N]``;
the C ABI: ``cutlass_build/include/mircuda_cutlass.h`` (``MIRCUDA_CUTLASS_KIND_BLOCK_SCALED``).
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from .. import _cuda
from ..dtypes import bf16, dtype_info, e4m3, f32, u8, u64
from ..launch import LaunchConfig, Out, cuda_export
from ..memory import DeviceBuffer
from ._dense import _destroy
from ._fp4_reference import scale_bytes
from ._library import CutlassLibrary, KernelInfo
from ._spec import Operand

if TYPE_CHECKING:
    from ..compile import Compiler
    from ..runtime import Context, Stream

__all__ = ["FP4_CUTLASS_FAMILIES", "CutlassFp4", "block_scaled_executor", "cutlass_fp4_operands",
           "cutlass_fp4_refusal", "choose_fp4_kernel"]

FP4_CUTLASS_FAMILIES = ("sm120_nvfp4_cooperative", "sm120_nvfp4_pingpong")


def cutlass_fp4_refusal(kernel: KernelInfo, compute_capability: tuple[int, int], m: int, n: int, k: int,
                        activation: str, layout: str) -> str:
    """Why ``kernel`` cannot run this problem (``""`` when it can): it needs NVFP4 activations, tiled
    scales, a device it was compiled for (sm_120f: every cc 12.x) and its table's multiples (K % 32: TMA's
    16-byte rows of E2M1; N % 8: 16-byte rows of BF16 D)."""
    cc = compute_capability
    if not kernel.runs_on(cc):
        return f"{kernel.name} holds sm_{kernel.archs[0] if kernel.archs else '?'}f code, which cc {cc[0]}.{cc[1]} does not load"
    if activation != "fp4":
        return f"{kernel.name} multiplies NVFP4 by NVFP4; activation={activation!r} has no FP4 tensor-core path"
    if layout != "tiled":
        return (f"{kernel.name} reads the tiled scale layout (CUTLASS's SM1xx block-scaled layout); "
                "scale_layout='linear' would need a conversion per call (quantize with layout='tiled', or "
                "convert with Fp4ScaleConverter)")
    return kernel.refusal(m, n, k)


def choose_fp4_kernel(kernels: tuple[KernelInfo, ...], multiprocessors: int, m: int, n: int) -> tuple[KernelInfo, str]:
    """The kernel among ``kernels`` (the runnable NVFP4 ones, non-empty) for an M x N output and why.

    Ping-pong runs two tiles per CTA at once (one consumer warp group each, one's epilogue under the
    other's MMAs); it pays when there are at least two 128 x 128 tiles per SM. Below that, cooperative
    (both warp groups on one tile) keeps every warp busy. (A rule from the schedules' structure, not
    measured here: the H200 cannot run sm_120f code.)"""
    tiles = -(-m // 128) * -(-n // 128)
    by_family = {k.family: k for k in kernels}
    want = "sm120_nvfp4_pingpong" if tiles >= 2 * multiprocessors else "sm120_nvfp4_cooperative"
    chosen = by_family.get(want) or kernels[0]
    why = (f"{tiles} output tiles of 128 x 128 {'>=' if tiles >= 2 * multiprocessors else '<'} 2 x "
           f"{multiprocessors} SMs: {'ping-pong' if want.endswith('pingpong') else 'cooperative'}")
    if chosen.family != want:
        why += f" wanted, the library has only {chosen.name}"
    return chosen, why


def cutlass_fp4_operands(kernel: KernelInfo, m: int, n: int, k: int) -> tuple[Operand, ...]:
    """The checks of ``a, a_scales, b, b_scales, d`` for a CUTLASS NVFP4 kernel: everything 16-byte
    aligned (TMA boxes of codes and scales, the epilogue's 128-bit stores), scales the tiled layout's
    padded size."""
    tma = f"kernel {kernel.name}: TMA"
    codes, sc, out = dtype_info(u8), dtype_info(e4m3), dtype_info(bf16)
    sa, sb = scale_bytes(m, k, "tiled"), scale_bytes(n, k, "tiled")
    return (Operand("a", codes, m * k // 2, f"[M, K/2] = [{m}, {k // 2}] packed E2M1", 16, tma),
            Operand("a_scales", sc, sa, f"tiled UE4M3 scales of [{m}, {k}]: {sa} bytes (rows padded to 128, K/16 "
                    "to 4)", 16, tma),
            Operand("b", codes, n * k // 2, f"[N, K/2] = [{n}, {k // 2}] packed E2M1", 16, tma),
            Operand("b_scales", sc, sb, f"tiled UE4M3 scales of [{n}, {k}]: {sb} bytes (rows padded to 128, K/16 "
                    "to 4)", 16, tma),
            Operand("d", out, m * n, f"[M, N] = [{m}, {n}] BF16", 16, f"kernel {kernel.name}: 128-bit stores"))


class CutlassFp4:
    """A library plan of ``kernel`` for (M, N, K) on the context's device, its CUTLASS workspace and a
    4-byte FP32 device alpha allocated from the context's default pool on ``stream`` at construction and
    kept until :meth:`close` (freed on ``stream``); ``fp4_alpha_product`` (NVRTC, ``cuda_src/fp4_layout.cu``)
    writes ``alpha * global_a * global_b`` there before the GEMM when a global scale is given.

    Raises:
        ContractError: (M, N, K) break the kernel's multiples (``shape``).
        CutlassError: the library refused the plan (NOT_IMPLEMENTABLE, WRONG_ARCH, ...).
        CompileError: NVRTC rejected fp4_alpha_product (a bug).
    """

    def __init__(self, context: Context, stream: Stream, lib: CutlassLibrary, kernel: KernelInfo, m: int, n: int,
                 k: int, compiler: Compiler) -> None:
        from ._fp4_layout import fp4_layout_source, layout_options

        self.lib, self.kernel, self.stream = lib, kernel, stream
        product = compiler.compile(fp4_layout_source(), layout_options("tiled"))
        self._product = product.kernel(cuda_export("fp4_alpha_product", out=Out[DeviceBuffer[f32]], global_a=u64,
                                                   global_b=u64, alpha=f32))
        self._product_config = LaunchConfig((1,), (1,))
        context._make_current()
        handle = lib.create_block_scaled_plan(kernel, m, n, k)
        pool = context.default_memory_pool()
        buffers: list[DeviceBuffer[Any]] = []
        try:
            nbytes = lib.workspace_bytes(handle)
            workspace = pool.allocate(u8, stream, nbytes) if nbytes else None
            if workspace is not None:
                buffers.append(workspace)
            lib.set_workspace(handle, workspace.handle if workspace is not None else 0, nbytes)
            self.alpha = pool.allocate(f32, stream, 1)
            buffers.append(self.alpha)
        except BaseException:
            lib.destroy(handle)
            for buf in buffers:
                buf.free(stream)
            raise
        self.handle = handle
        self.workspace_bytes = nbytes
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _release, lib, handle, context, workspace, self.alpha, stream)
        self._finalizer.atexit = False

    def execute(self, stream: Stream, a: int, sa: int, b: int, sb: int, d: int, ga: int, gb: int,
                alpha: float) -> None:
        """Enqueue on ``stream`` (addresses already checked by the plan; ``ga``, ``gb`` 0 for none)."""
        alpha_device = 0
        if ga or gb:
            self._product.launch(stream, self._product_config, self.alpha, ga, gb, alpha)
            alpha_device = self.alpha.handle
        with self._lock:  # the library plan holds the kernel parameters of one launch at a time
            self.lib.execute_block_scaled(self.handle, stream._handle, a, b, sa, sb, d, alpha_device, alpha)

    def numba_executor(self, stream: int) -> Any:
        return block_scaled_executor(self.lib.block_scaled_execute_address, self.handle, self._product.handle,
                                     self.alpha.handle, stream=stream)

    def describe(self) -> str:
        k = self.kernel
        return (f"CUTLASS {k.name} (sm_120f, OpClassBlockScaledTensorOp: mma.sync kind::mxf4nvf4.block_scale "
                f"with UE4M3 scales per 16, TMA loads, {k.tile[0]}x{k.tile[1]}x{k.tile[2]} tiles, "
                f"{'ping-pong' if k.family.endswith('pingpong') else 'cooperative'}), workspace {self.workspace_bytes} "
                "bytes; alpha * global_a * global_b read from device memory (fp4_alpha_product when a global "
                "scale is given)")

    def close(self) -> None:
        self.handle = 0
        self._finalizer()


@_cuda.finalizer
def _release(lib: CutlassLibrary, handle: int, context: Any, workspace: Any, alpha: Any, stream: Any) -> None:
    _destroy(lib, handle, context, workspace, stream)  # itself a finalizer: it never raises
    if not context._closed and stream.handle and not alpha.freed:
        alpha.free(stream)


INVALID_ARGUMENT = 1
"""The library's ``MIRCUDA_CUTLASS_INVALID_ARGUMENT``: what the executor returns for another stream."""
MISALIGNED = 2
"""``MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE``: what it returns for a misaligned address."""


def block_scaled_executor(execute_address: int, plan_handle: int, product_function: int, alpha_address: int, *,
                          stream: int, launch_function: Any = None) -> Any:
    """``execute(stream, a, a_scales, b, b_scales, d, global_a, global_b, alpha) -> status``: an
    ``@numba.njit`` function for one plan bound to the stream handle ``stream``. When a global scale is
    given it first launches ``fp4_alpha_product`` (parameters ``(out, global_a, global_b, f32 alpha)`` at
    0, 8, 16, 24) through ``cuLaunchKernel`` (its ``CUresult`` is returned when non-zero), then calls the
    library's ``mircuda_cutlass_block_scaled_plan_execute`` (arguments ``plan, stream, a, b, sfa, sfb, d,
    alpha_device, alpha``) and returns its status. Without calling anything it returns
    :data:`INVALID_ARGUMENT` for another stream and :data:`MISALIGNED` when an operand is not 16-byte
    aligned or a global scale not 4-byte aligned."""
    import ctypes

    import numba
    import numpy as np

    from ..numba_ext import c_function, driver_function

    u64 = ctypes.c_uint64
    fn = c_function(execute_address, ctypes.c_int, u64, u64, u64, u64, u64, u64, u64, u64, ctypes.c_float)
    launch = driver_function("cuLaunchKernel") if launch_function is None else launch_function
    U = numba.uint64
    bound, handle, product, alpha_out = U(stream), U(plan_handle), U(product_function), U(alpha_address)

    @numba.njit(cache=False)
    def execute(stream: int, a: int, a_scales: int, b: int, b_scales: int, d: int, global_a: int, global_b: int,
                alpha: float) -> int:
        if U(stream) != bound:
            return INVALID_ARGUMENT
        pa, psa, pb, psb, pd, pga, pgb = U(a), U(a_scales), U(b), U(b_scales), U(d), U(global_a), U(global_b)
        if (pa | psa | pb | psb | pd) & U(15) or (pga | pgb) & U(3):
            return MISALIGNED
        alpha_device = U(0)
        if pga != U(0) or pgb != U(0):
            values = np.zeros(4, np.uint64)
            values[0], values[1], values[2] = alpha_out, pga, pgb
            values.view(np.float32)[6] = alpha
            base = U(values.ctypes.data)
            pointers = np.empty(4, np.uint64)
            for i in range(4):
                pointers[i] = base + U(8 * i)
            status = launch(product, 1, 1, 1, 1, 1, 1, 0, U(stream), U(pointers.ctypes.data), 0)
            if status != 0:
                return status
            alpha_device = alpha_out
        return fn(handle, U(stream), pa, pb, psa, psb, pd, alpha_device, alpha)

    # The ctypes function object stays with the dispatcher (numba's Dispatcher declares no such attribute).
    execute._mircuda_keepalive = fn  # type: ignore[attr-defined]
    return execute
