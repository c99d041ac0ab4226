"""DeepSeek-V3 blockwise FP8 operands: the scale layouts, the numpy/ml_dtypes reference quantizers and
the device quantizer (``cuda_src/fp8_quantize.cu``, compiled by NVRTC).

The format (DeepSeek-V3 Technical Report, arXiv:2412.19437, section 3.3.2 "Fine-grained quantization";
the layouts of its inference code ``inference/kernel.py``, ``act_quant`` and ``weight_dequant``):

- activations A: E4M3 codes ``[M, K]`` row-major, one FP32 scale per 1 x 128 block (a row and 128
  consecutive K): ``sa`` FP32 ``[M, ceil(K / 128)]`` row-major (``sa[m, kb]`` at ``m * ceil(K/128) + kb``);
- weights B: E4M3 codes ``[N, K]`` row-major (one row per output feature, as a linear layer stores
  them), one FP32 scale per 128 x 128 block: ``sb`` FP32 ``[ceil(N / 128), ceil(K / 128)]`` row-major;
- value = code * scale. A partial last block (K or N not a multiple of 128) is a block of the elements
  that exist (its scale covers only them).

These are the layouts every kernel of BlockwiseFp8Plan reads, so no converter is needed: the NVRTC
kernels, and the CUTLASS blockwise kernels of ``libmircuda_cutlass.so``, which are instantiated with
K-major scale layouts (``MIRCUDA_CUTLASS_K_MAJOR``, ``KernelInfo.scale_major == ("k", "k")``) where
CUTLASS example 67 (``67_hopper_fp8_warp_specialized_gemm_with_blockwise_scaling``) defaults to an
M-major SFA (the transpose of ``sa``).

Quantization of one block: ``amax = max |x|``; ``scale = amax / 448`` in FP32 (round to nearest even;
448 is E4M3's largest finite value), or 1 when ``amax == 0`` (an all-zero block: scale 1, every code a
zero of its input's sign); ``code = E4M3(x / scale)`` with ``x / scale`` rounded to FP32 and then to
E4M3, both to nearest even (saturated to +-448: the quotient passes 448 only by FP32 rounding). Inputs
are BF16; a NaN in a block makes its scale NaN, an infinity makes it +inf (codes then unspecified).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from ..compile import Compiler, CudaSource
from ..dtypes import bf16, dtype_info, e4m3, f32, i32, is_integer_value
from ..errors import ContractError, UnsupportedPlatform
from ..graph._capture import _records as _captures
from ..launch import In, LaunchConfig, Out, cuda_export
from ..memory import DeviceBuffer
from ._spec import (
    Operand,
    _dim,
    check_capture_origin,
    check_operand,
    plan_stream,
    refuse_stream,
)
from ._vector import package_source, plan_compiler

if TYPE_CHECKING:
    from ..launch import TypedKernel
    from ..runtime import Context, Stream

__all__ = [
    "ACTIVATION_BLOCK",
    "BLOCK",
    "E4M3_MAX",
    "WEIGHT_BLOCK",
    "BlockwiseFp8Quantizer",
    "activation_scale_shape",
    "dequantize_reference",
    "fp8_quantize_source",
    "quantize_activations_reference",
    "quantize_reference",
    "quantize_weights_reference",
    "weight_scale_shape",
]

BLOCK = 128
"""Elements per scale block along K (and along N for the weights): DeepSeek-V3's block size."""
E4M3_MAX = 448.0
"""The largest finite E4M3 value (OCP FP8 E4M3 "fn"): ``scale = amax / E4M3_MAX``."""
ACTIVATION_BLOCK = (1, BLOCK)
"""Rows x columns of an activation scale block."""
WEIGHT_BLOCK = (BLOCK, BLOCK)
"""Rows x columns of a weight scale block."""


def _blocks(n: int) -> int:
    return -(-n // BLOCK)


def activation_scale_shape(m: int, k: int) -> tuple[int, int]:
    """``sa``'s shape, ``(M, ceil(K / 128))``, row-major.

    Raises:
        ContractError: ``m`` or ``k`` is not a positive int (numpy integers count; bool does not).
    """
    return _dim("m", m), _blocks(_dim("k", k))


def weight_scale_shape(n: int, k: int) -> tuple[int, int]:
    """``sb``'s shape, ``(ceil(N / 128), ceil(K / 128))``, row-major.

    Raises:
        ContractError: ``n`` or ``k`` is not a positive int (numpy integers count; bool does not).
    """
    return _blocks(_dim("n", n)), _blocks(_dim("k", k))


_ML_REAL = (np.dtype(bf16), np.dtype(e4m3), np.dtype(ml_dtypes.float8_e5m2), np.dtype(ml_dtypes.float8_e4m3fnuz),
            np.dtype(ml_dtypes.float8_e5m2fnuz), np.dtype(ml_dtypes.float4_e2m1fn))


def _real_array(name: str, value: Any, expected: str) -> np.ndarray:
    """``value`` as an array of a real numeric dtype (ints, floats, ml_dtypes' floats); bool, complex,
    str and object arrays are refused by name rather than converted (numpy would drop an imaginary part)."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ContractError(name, expected, f"{type(value).__name__} ({exc})") from None
    if arr.dtype.kind not in "iuf" and arr.dtype not in _ML_REAL:
        raise ContractError(name, expected, f"dtype {arr.dtype}")
    return arr


def _check_block(block: Any) -> tuple[int, int]:
    # (1.0, 128) and (True, 128) compare equal to (1, 128): the elements must be integers first
    if (not isinstance(block, tuple) or not all(is_integer_value(v) for v in block)
            or block not in (ACTIVATION_BLOCK, WEIGHT_BLOCK)):
        raise ContractError("block", "(1, 128) (activations) or (128, 128) (weights), two ints", repr(block))
    return (int(block[0]), int(block[1]))


def quantize_reference(x: np.ndarray, block: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The numpy/ml_dtypes reference of the device quantizer (bit for bit on finite inputs).

    Args:
        x: ``[R, K]`` real values (an int, float or ml_dtypes float array), converted to BF16 first (the
            device quantizer's input type). A NaN makes its block's scale NaN, an infinity makes it
            +inf (codes then unspecified), as on the device (``cuda_src/fp8_quantize.cu``). A finite
            value that does not round to a finite BF16 (magnitude at or above about 3.3961e38) is refused: the
            device could never receive it.
        block: ``(1, 128)`` or ``(128, 128)``.

    Returns:
        ``(codes, scales)``: E4M3 ``[R, K]`` and FP32 ``[ceil(R / block[0]), ceil(K / 128)]``.

    Raises:
        ContractError: ``x`` is not a real numeric array (bool, complex, str, object), is not
            two-dimensional or is empty, holds a finite value beyond BF16's range; or a bad ``block``.
    """
    rb, cb = _check_block(block)
    expected = "a real numeric [R, K] array (int, float or ml_dtypes float; converted to BF16)"
    x = _real_array("x", x, expected)
    if x.ndim != 2 or x.size == 0:
        raise ContractError("x", "a non-empty [R, K] array", f"shape {x.shape}")
    with np.errstate(over="ignore"):
        xf = x.astype(bf16).astype(np.float32)
    # finiteness of x as given: a long double beyond float64's range is finite, yet inf once made float64
    overflow = ~np.isfinite(xf) & np.isfinite(x)
    if overflow.any():
        at = tuple(int(i) for i in np.argwhere(overflow)[0])
        raise ContractError("x", "finite values that round to a finite BF16 (|x| below about 3.3961e38: BF16's "
                                 "largest, 3.3895e38, plus half a unit in its last place; the device takes BF16)",
                            f"{x[at]!r} at {at}")
    r, k = xf.shape
    nr, nk = -(-r // rb), -(-k // cb)
    padded = np.zeros((nr * rb, nk * cb), np.float32)
    padded[:r, :k] = np.abs(xf)  # |x| of NaN is NaN: np.max propagates it, as the kernel's key order does
    amax = padded.reshape(nr, rb, nk, cb).max(axis=(1, 3))
    with np.errstate(invalid="ignore"):
        scales = np.where(amax == 0, np.float32(1), amax / np.float32(E4M3_MAX)).astype(np.float32)
    full = np.repeat(np.repeat(scales, rb, axis=0), cb, axis=1)[:r, :k]
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.clip(xf / full, np.float32(-E4M3_MAX), np.float32(E4M3_MAX))
    return q.astype(e4m3), scales


def quantize_activations_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """BF16 ``[M, K]`` -> (E4M3 ``[M, K]``, FP32 ``sa [M, ceil(K/128)]``): :func:`quantize_reference`
    with 1 x 128 blocks."""
    return quantize_reference(x, ACTIVATION_BLOCK)


def quantize_weights_reference(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """BF16 ``[N, K]`` -> (E4M3 ``[N, K]``, FP32 ``sb [ceil(N/128), ceil(K/128)]``):
    :func:`quantize_reference` with 128 x 128 blocks."""
    return quantize_reference(w, WEIGHT_BLOCK)


def dequantize_reference(codes: np.ndarray, scales: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    """``code * scale`` in float64, ``[R, K]`` (the operands a float64 reference product uses).

    Args:
        codes: ``[R, K]`` E4M3 codes: an ``ml_dtypes.float8_e4m3fn`` array (what the quantizers return),
            or a ``uint8`` array of E4M3 bit patterns (a ``.view(np.uint8)`` of them, or bytes downloaded
            from the device), which is read as E4M3 bits, never as integers.
        scales: FP32 scales (any real float or int dtype), shape ``[ceil(R / block[0]), ceil(K / 128)]``.
        block: ``(1, 128)`` or ``(128, 128)``.

    Raises:
        ContractError: ``codes`` of any other dtype (float32 values are not codes), ``scales`` not a
            real numeric array, shapes that do not match ``block``, or a bad ``block``.
    """
    rb, cb = _check_block(block)
    expected_codes = "E4M3 codes: an ml_dtypes.float8_e4m3fn array, or uint8 E4M3 bit patterns"
    codes = _real_array("codes", codes, expected_codes)  # a ragged list or a bool/str/object array refused here
    if codes.dtype == np.uint8:
        codes = codes.view(e4m3)
    elif codes.dtype != np.dtype(e4m3):
        raise ContractError("codes", expected_codes, f"dtype {codes.dtype}")
    scales = _real_array("scales", scales, "a real numeric FP32 scale array")
    if codes.ndim != 2:
        raise ContractError("codes", "an [R, K] array", f"shape {codes.shape}")
    r, k = codes.shape
    want = (-(-r // rb), -(-k // cb))
    if scales.shape != want:
        raise ContractError("scales", f"shape {want}", f"shape {scales.shape}")
    full = np.repeat(np.repeat(scales.astype(np.float64), rb, axis=0), cb, axis=1)[:r, :k]
    return codes.astype(np.float64) * full


@functools.lru_cache(maxsize=1)
def fp8_quantize_source() -> CudaSource:
    """``cuda_src/fp8_quantize.cu`` as a :class:`CudaSource`."""
    return package_source("fp8_quantize.cu")


WARPS_PER_BLOCK = 8
"""Threads per block of both quantizer kernels: 8 warps."""
MAX_GRID_X = 2**31 - 1
"""The CUDA limit of grid.x: 1 x 128 blocks of the activation quantizer, 8 per thread block."""
MAX_GRID_Y = 65535
"""The CUDA limit of grid.y: 128-row blocks of the weight quantizer (N up to 8388480)."""


class BlockwiseFp8Quantizer:
    """BF16 ``x [R, K]`` -> E4M3 ``codes [R, K]`` and FP32 ``scales`` on the device, by DeepSeek-V3's
    blockwise rule (see the module docstring; :func:`quantize_reference` is its bit-exact numpy
    reference). ``block=(1, 128)``: activations, ``scales [R, ceil(K/128)]``; ``block=(128, 128)``:
    weights, ``scales [ceil(R/128), ceil(K/128)]``; both row-major, partial blocks included.

    Args:
        context, stream: the quantizer's context and the stream it is bound to (``execute`` takes only it).
        rows, k: R and K (any positive sizes below 2**31; codes and inputs need no alignment).
        block: ``(1, 128)`` or ``(128, 128)``.
        compiler: the Compiler of the kernel (default: one shared per context).

    Raises:
        ContractError: bad context, stream, sizes, ``block`` or ``compiler``.
        UnsupportedPlatform: compute capability below 8.9 (the E4M3 conversion needs sm_89).
        CompileError: NVRTC rejected the kernel (a bug; the log is attached).
    """

    def __init__(self, context: Context, stream: Stream, rows: int, k: int, block: tuple[int, int] = ACTIVATION_BLOCK,
                 *, compiler: Compiler | None = None) -> None:
        plan_stream(stream, context)
        # Python ints from here on: numpy integers (np.int16(300)) would wrap in rows * k, the operands' least
        # lengths, and a short x would pass its check and be read past its end
        rows, k = self.rows, self.k = _dim("rows", rows), _dim("k", k)
        self.block = block = _check_block(block)
        if block == ACTIVATION_BLOCK and -(-(rows * _blocks(k)) // WARPS_PER_BLOCK) > MAX_GRID_X:
            raise ContractError("rows", f"rows * ceil(K / 128) at most {MAX_GRID_X * WARPS_PER_BLOCK} (grid.x limit)",
                                repr(rows))
        if block == WEIGHT_BLOCK and _blocks(rows) > MAX_GRID_Y:
            raise ContractError("rows", f"at most {MAX_GRID_Y * BLOCK} rows (grid.y limit) for 128 x 128 blocks",
                                repr(rows))
        info = context.device_info()
        if info.compute_capability < (8, 9):
            raise UnsupportedPlatform(f"BlockwiseFp8Quantizer needs compute capability >= 8.9 (E4M3 conversions); "
                                      f"{info.name} has {info.compute_capability[0]}.{info.compute_capability[1]}")
        compiler = plan_compiler(compiler, context)
        self.symbol = "quantize_rows_1x128" if block == ACTIVATION_BLOCK else "quantize_blocks_128x128"
        contract = cuda_export(self.symbol, q=Out[DeviceBuffer[e4m3]], s=Out[DeviceBuffer[f32]],
                               x=In[DeviceBuffer[bf16]], rows=i32, k=i32)
        self.kernel: TypedKernel = compiler.compile(fp8_quantize_source()).kernel(contract)
        kb = _blocks(k)
        if block == ACTIVATION_BLOCK:
            self.config = LaunchConfig((-(-(rows * kb) // WARPS_PER_BLOCK),), (32 * WARPS_PER_BLOCK,))
        else:
            self.config = LaunchConfig((kb, _blocks(rows)), (32 * WARPS_PER_BLOCK,))
        self.config.check(info, self.kernel.attributes.max_threads_per_block)
        self.scale_shape = activation_scale_shape(rows, k) if block == ACTIVATION_BLOCK else weight_scale_shape(rows, k)
        self._context, self._stream = context, stream
        self._launch = self.kernel.launch
        shape, count = f"[R, K] = [{rows}, {k}]", rows * k
        self._operands = (Operand("x", dtype_info(bf16), count, shape, 2, f"kernel {self.symbol}: BF16 loads"),
                          Operand("codes", dtype_info(e4m3), count, shape, 1, f"kernel {self.symbol}: byte stores"),
                          Operand("scales", dtype_info(f32), self.scale_shape[0] * self.scale_shape[1],
                                  f"{list(self.scale_shape)}", 4, f"kernel {self.symbol}: FP32 stores"))

    @property
    def context(self) -> Context:
        return self._context

    @property
    def stream(self) -> Stream:
        return self._stream

    def describe(self) -> str:
        r, c = self.block
        work = ("one warp per 1 x 128 block" if self.block == ACTIVATION_BLOCK
                else "one block of 8 warps per 128 x 128 block")
        return (f"BlockwiseFp8Quantizer {r}x{c}, R={self.rows} K={self.k}: kernel {self.symbol} (NVRTC), {work}, "
                f"{self.config.grid} blocks; scales FP32 {list(self.scale_shape)} row-major, scale = amax / 448 "
                "(1 for an all-zero block), codes E4M3 round-to-nearest-even")

    def execute(self, stream: Stream, x: DeviceBuffer[Any], codes: DeviceBuffer[Any], scales: DeviceBuffer[Any]) -> None:
        """Enqueue the quantization of ``x`` on ``stream``; allocates and synchronizes nothing.

        Args:
            stream: the quantizer's stream.
            x: BF16 ``[R, K]`` row-major. codes: E4M3 ``[R, K]``. scales: FP32 ``scale_shape``.

        Raises:
            ContractError: a stream that is not the quantizer's (or it forked into a capture begun on
                another stream), or a buffer of the wrong type, dtype, context, length or alignment
                (named); nothing is enqueued then.
            UseAfterFree: a buffer was freed. ClosedResourceError: the stream was closed.
            CudaError: the driver refused the launch.
        """
        if stream is not self._stream:
            refuse_stream(stream, self._stream, self._context)
        stream._check_usable("stream", self._context)
        if _captures:
            check_capture_origin(stream, self._stream)
        ox, oq, os_ = self._operands
        check_operand(ox, x, self._context)
        check_operand(oq, codes, self._context)
        check_operand(os_, scales, self._context)
        self._launch(stream, self.config, codes, scales, x, self.rows, self.k)

    def __repr__(self) -> str:
        return f"BlockwiseFp8Quantizer(rows={self.rows}, k={self.k}, block={self.block})"
