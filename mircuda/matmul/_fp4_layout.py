"""NVFP4 on the device: the BF16 -> NVFP4 quantizer (NVIDIA ModelOpt's recipe) and the converters
between the linear and the tiled scale layouts, as NVRTC kernels (``cuda_src/fp4_quantize.cu``,
``cuda_src/fp4_layout.cu``); :mod:`mircuda.matmul._fp4_reference` is their numpy reference.

Buffers: packed codes are ``DeviceBuffer[u8]`` (``[rows, K/2]``: element 2i in the low nibble), scales
``DeviceBuffer[e4m3]`` (UE4M3: sign clear), global scales ``DeviceBuffer[f32]`` of one element.
"""

from __future__ import annotations

import functools
import weakref
from typing import TYPE_CHECKING, Any

from .. import _cuda
from ..compile import Compiler, CompileOptions, CudaSource
from ..dtypes import bf16, dtype_info, e4m3, f32, i32, i64, u8, u32, u64
from ..errors import ContractError
from ..launch import In, InOut, LaunchConfig, Out, cuda_export
from ..memory import DeviceBuffer
from ._fp4_reference import BLOCK, scale_bytes
from ._spec import Operand, PlanBase, check_operand, plan_stream
from ._vector import package_source, plan_compiler

if TYPE_CHECKING:
    from ..launch import TypedKernel
    from ..runtime import Context, Stream

__all__ = ["Fp4Quantizer", "Fp4ScaleConverter", "SCALE_LAYOUTS", "TILED_DECODE_MAX_K", "check_layout", "check_fp4_k",
           "check_tiled_decode_k", "layout_options", "fp4_quantize_source", "fp4_layout_source", "address"]

SCALE_LAYOUTS = ("linear", "tiled")
"""``"linear"``: ``[rows, K/16]`` row-major UE4M3 bytes. ``"tiled"``: CUTLASS's SM1xx block-scaled /
cuBLASLt ``VEC16_UE4M3`` layout: 512-byte atoms of 128 rows x 4 K-blocks, rows padded to 128 and K/16 to 4
(``cutlass/detail/sm100_blockscaled_layout.hpp``; see :func:`~mircuda.matmul._fp4_reference.tiled_offsets`)."""
THREADS = 256


@functools.lru_cache(maxsize=1)
def fp4_quantize_source() -> CudaSource:
    return package_source("fp4_quantize.cu")


@functools.lru_cache(maxsize=1)
def fp4_layout_source() -> CudaSource:
    return package_source("fp4_layout.cu")


def layout_options(layout: str) -> CompileOptions:
    return CompileOptions(defines={"MIRCUDA_FP4_TILED": int(layout == "tiled")})


def check_layout(name: str, value: Any) -> str:
    """``value`` must be ``"linear"`` or ``"tiled"``.

    Raises:
        ContractError: naming ``name``.
    """
    if not isinstance(value, str) or value not in SCALE_LAYOUTS:
        raise ContractError(name, "'linear' or 'tiled' (the scale layout)", repr(value))
    return value


def check_fp4_k(k: int, name: str = "k") -> None:
    """NVFP4 needs K to be a whole number of 16-element scale blocks.

    Raises:
        ContractError: naming ``name``.
    """
    if k % BLOCK:
        raise ContractError(name, f"a multiple of {BLOCK} (one UE4M3 scale per 16 K-elements, NVFP4)", repr(k))


TILED_DECODE_MAX_K = 2**28
"""Largest K that the NVRTC decode kernels (``fp4_matvec_bf16``, ``fp4_mma_bf16``, the grouped plans'
``"vector"`` variant) take with tiled scales: each step adds the K-block's part of a scale's byte offset,
``fp4::scale_col_offset`` (``cuda_src/fp4_common.cuh``: ``(kb / 4) * 512 + kb % 4``, about ``8 K`` at the
last block), to its rows' scale pointers in 32-bit unsigned arithmetic; it stays below 2^31 up to
K = 2^28 and wraps above K = 2^29 (the linear layout's part, ``kb``, stays below 2^27 for any K)."""


def check_tiled_decode_k(k: int, layout: str) -> None:
    """Refuse a K above :data:`TILED_DECODE_MAX_K` with ``layout`` ``"tiled"`` for the NVRTC decode kernels.

    Raises:
        ContractError: naming ``spec`` (K is the spec's), before anything is compiled or allocated.
    """
    if layout == "tiled" and k > TILED_DECODE_MAX_K:
        raise ContractError("spec", f"K <= {TILED_DECODE_MAX_K} (2^28) with scale_layout='tiled' (the decode kernels "
                                    "add a 32-bit column offset into the tiled scales; the linear layout has no "
                                    "such bound)", f"K = {k}")


def address(name: str, buf: Any, context: Context) -> int:
    """A nullable f32 scalar operand (a global scale): None -> 0, else a live ``DeviceBuffer[f32]`` of
    ``context`` with at least one element, 4-byte aligned; returns its address.

    Raises:
        ContractError, UseAfterFree, ClosedResourceError: naming ``name``.
    """
    if buf is None:
        return 0
    return check_operand(Operand(name, dtype_info(f32), 1, "[1] (a global scale)", 4, "an FP32 load"), buf, context)


def _dims(rows: Any, k: Any) -> tuple[int, int]:
    from ._spec import _dim

    r, kk = _dim("rows", rows), _dim("k", k)
    check_fp4_k(kk)
    return r, kk


class Fp4Quantizer(PlanBase):
    """BF16 ``x[rows, K]`` -> NVFP4 (packed E2M1 codes, UE4M3 block scales, FP32 global scale) on the
    device, by NVIDIA ModelOpt's recipe (``modelopt/torch/quantization/qtensor/nvfp4_tensor.py``):
    ``global = amax(|x|) / (6 * 448)`` (or a given one), ``block scale = amax(block of 16) / (6 * global)``
    rounded to E4M3 (RNE, satfinite), ``q = RNE E2M1 of x / (block scale * global)``. FP32 arithmetic with
    IEEE division: the numpy reference :func:`mircuda.matmul._fp4_reference.quantize` matches bit for bit.

    An all-zero block stores scale 1.0 (ModelOpt replaces zero block scales by 1) and zero codes; a block
    whose scale rounds to E4M3 zero stores zero codes; an all-zero tensor's computed global scale is 1.0.

    Args:
        context, stream: the quantizer's context and the stream it is bound to (its 4-byte amax
            workspace is allocated there at construction and freed by :meth:`close`).
        rows, k: the shape of ``x`` (K a multiple of 16).
        layout: ``"linear"`` or ``"tiled"`` (:data:`SCALE_LAYOUTS`): the layout the scales are written in
            (tiled padding written as zeros).

    Raises:
        ContractError: bad context, stream, shape or layout.
        CompileError: NVRTC rejected the kernels (a bug).
    """

    def __init__(self, context: Context, stream: Stream, rows: int, k: int, layout: str = "linear", *,
                 compiler: Compiler | None = None) -> None:
        plan_stream(stream, context)
        self._rows, self._k = _dims(rows, k)
        self._layout = check_layout("layout", layout)
        compiler = plan_compiler(compiler, context)
        module = compiler.compile(fp4_quantize_source(), layout_options(layout))
        self._reset = module.kernel(cuda_export("fp4_amax_reset", amax=Out[DeviceBuffer[u32]]))
        self._amax = module.kernel(cuda_export("fp4_amax_bf16", amax=InOut[DeviceBuffer[u32]],
                                               x=In[DeviceBuffer[bf16]], count=i64))
        self._quantize = module.kernel(cuda_export(
            "fp4_quantize_bf16", q=Out[DeviceBuffer[u8]], scales=Out[DeviceBuffer[e4m3]], global_out=u64,
            x=In[DeviceBuffer[bf16]], global_in=u64, amax=In[DeviceBuffer[u32]], rows=i32, k=i32))
        self._context, self._stream = context, stream
        self._spec = (self._rows, self._k)
        self._in, self._out = dtype_info(bf16), dtype_info(u8)
        r, kk = self._rows, self._k
        self._scale_bytes = scale_bytes(r, kk, layout)
        self._operands = (
            Operand("x", dtype_info(bf16), r * kk, f"[rows, K] = [{r}, {kk}]", 16, "fp4_quantize_bf16: 16-byte loads"),
            Operand("q", dtype_info(u8), r * kk // 2, f"[rows, K/2] = [{r}, {kk // 2}]", 8,
                    "fp4_quantize_bf16: 8-byte stores of 16 codes"),
            Operand("scales", dtype_info(e4m3), self._scale_bytes, f"{layout} scales of [{r}, {kk}] "
                    f"({self._scale_bytes} bytes)", 1, "byte stores"))
        count = r * kk
        self._amax_config = LaunchConfig((min(-(-count // THREADS), 4096),), (THREADS,))
        grid_items = self._scale_bytes if layout == "tiled" else r * (kk // BLOCK)
        self._quantize_config = LaunchConfig.for_elements(grid_items, THREADS)
        self._reset_config = LaunchConfig((1,), (1,))
        self._workspace: DeviceBuffer[Any] = context.default_memory_pool().allocate(u32, stream, 1)
        self._closed = False
        self._finalizer = weakref.finalize(self, _free, self._workspace, context, stream)
        self._finalizer.atexit = False

    @property
    def layout(self) -> str:
        return self._layout

    @property
    def scale_bytes(self) -> int:
        """Bytes of the scale tensor this quantizer writes (tiled: padding included)."""
        return self._scale_bytes

    def describe(self) -> str:
        r, k = self._rows, self._k
        return (f"Fp4Quantizer bf16 [{r}, {k}] -> NVFP4 (ModelOpt recipe), {self._layout} UE4M3 scales "
                f"({self._scale_bytes} bytes): fp4_quantize_bf16 (NVRTC, one thread per 16-element block, "
                f"{self._quantize_config.grid[0]} blocks of {THREADS}); a computed global scale adds "
                "fp4_amax_reset and fp4_amax_bf16 (a device amax reduction, atomicMax on the float bits)")

    def execute(self, stream: Stream, x: DeviceBuffer[Any], q: DeviceBuffer[Any], scales: DeviceBuffer[Any],
                global_out: DeviceBuffer[Any] | None = None, global_in: DeviceBuffer[Any] | None = None) -> None:
        """Enqueue the quantization of ``x`` on ``stream``; allocates and synchronizes nothing.

        Args:
            x: ``[rows, K]`` BF16, 16-byte aligned. q: ``[rows, K/2]`` u8 (packed codes). scales:
                e4m3 (UE4M3) bytes in the quantizer's layout.
            global_out: ``DeviceBuffer[f32]`` receiving the global scale used (optional).
            global_in: ``DeviceBuffer[f32]`` holding the global scale to use, read on the device; None
                computes ``amax / (6 * 448)`` from ``x`` (two more kernels).

        Raises:
            ContractError: another stream, a bad buffer (type, dtype, context, length, alignment);
                nothing is enqueued then. UseAfterFree, ClosedResourceError: as the plans.
        """
        if self._closed:
            from ..errors import ClosedResourceError

            raise ClosedResourceError("the Fp4Quantizer was closed")
        self._check_stream(stream)
        ctx = self._context
        ox, oq, os_ = self._operands
        check_operand(ox, x, ctx)
        check_operand(oq, q, ctx)
        check_operand(os_, scales, ctx)
        pout = address("global_out", global_out, ctx)
        pin = address("global_in", global_in, ctx)
        amax = self._workspace
        if global_in is None:
            self._reset.launch(stream, self._reset_config, amax)
            self._amax.launch(stream, self._amax_config, amax, x, self._rows * self._k)
        self._quantize.launch(stream, self._quantize_config, q, scales, pout, x, pin, amax, self._rows, self._k)

    def close(self) -> None:
        """Free the amax workspace (on the quantizer's stream). Idempotent."""
        self._closed = True
        self._finalizer()

    def __repr__(self) -> str:
        return f"Fp4Quantizer(rows={self._rows}, k={self._k}, layout={self._layout!r})"


class Fp4ScaleConverter(PlanBase):
    """UE4M3 scales of a ``[rows, K]`` NVFP4 operand between the linear layout (``[rows, K/16]``) and the
    tiled one (:data:`SCALE_LAYOUTS`), on the device (``cuda_src/fp4_layout.cu``); the numpy references are
    :func:`~mircuda.matmul._fp4_reference.scales_to_tiled` / ``scales_to_linear``. ``to_tiled`` writes the
    padding as zeros. Both buffers are ``DeviceBuffer[e4m3]``; nothing is allocated.

    Raises:
        ContractError: bad context, stream or shape.
    """

    def __init__(self, context: Context, stream: Stream, rows: int, k: int, *, compiler: Compiler | None = None) -> None:
        plan_stream(stream, context)
        self._rows, self._k = _dims(rows, k)
        compiler = plan_compiler(compiler, context)
        module = compiler.compile(fp4_layout_source(), layout_options("linear"))
        self._to_tiled: TypedKernel = module.kernel(cuda_export(
            "fp4_scales_linear_to_tiled", tiled=Out[DeviceBuffer[e4m3]], linear=In[DeviceBuffer[e4m3]], rows=i32,
            kblocks=i32))
        self._to_linear: TypedKernel = module.kernel(cuda_export(
            "fp4_scales_tiled_to_linear", linear=Out[DeviceBuffer[e4m3]], tiled=In[DeviceBuffer[e4m3]], rows=i32,
            kblocks=i32))
        self._context, self._stream = context, stream
        self._spec = (self._rows, self._k)
        self._in = self._out = dtype_info(e4m3)
        r, kk = self._rows, self._k
        lin, til = scale_bytes(r, kk, "linear"), scale_bytes(r, kk, "tiled")
        info = dtype_info(e4m3)
        self._linear = Operand("linear", info, lin, f"[rows, K/16] = [{r}, {kk // BLOCK}]", 1, "byte accesses")
        self._tiled = Operand("tiled", info, til, f"tiled scales of [{r}, {kk}] ({til} bytes)", 1, "byte accesses")
        self._operands = (self._linear, self._tiled)
        self._tiled_config = LaunchConfig.for_elements(til, THREADS)
        self._linear_config = LaunchConfig.for_elements(lin, THREADS)

    def to_tiled(self, stream: Stream, linear: DeviceBuffer[Any], tiled: DeviceBuffer[Any]) -> None:
        """Enqueue linear -> tiled (padding zeroed). Raises ContractError as the plans do."""
        self._check_stream(stream)
        check_operand(self._linear, linear, self._context)
        check_operand(self._tiled, tiled, self._context)
        self._to_tiled.launch(stream, self._tiled_config, tiled, linear, self._rows, self._k // BLOCK)

    def to_linear(self, stream: Stream, tiled: DeviceBuffer[Any], linear: DeviceBuffer[Any]) -> None:
        """Enqueue tiled -> linear (padding ignored). Raises ContractError as the plans do."""
        self._check_stream(stream)
        check_operand(self._tiled, tiled, self._context)
        check_operand(self._linear, linear, self._context)
        self._to_linear.launch(stream, self._linear_config, linear, tiled, self._rows, self._k // BLOCK)

    def describe(self) -> str:
        return (f"Fp4ScaleConverter [{self._rows}, {self._k}]: fp4_scales_linear_to_tiled "
                f"({self._tiled_config.grid[0]} blocks) / fp4_scales_tiled_to_linear ({self._linear_config.grid[0]} "
                f"blocks), {THREADS} threads, one per scale byte (NVRTC)")


@_cuda.finalizer
def _free(buffer: Any, context: Any, stream: Any) -> None:
    if not context._closed and stream.handle and not buffer.freed:
        buffer.free(stream)
