"""Kernel selection of DenseMatmulPlan: which kernel (by the rules NVRTC for M <= 16, else CUTLASS; the
measured table may also name the batched GEMV up to M = 32) runs a shape on a device, and why.

Pure functions over the library's kernel table, so the policy is testable without a GPU.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..dtypes import is_integer_value
from ..errors import ContractError, UnsupportedPlatform
from ._gemv import GEMV_FAMILY, MAX_M as BATCHED_GEMV_MAX_M, RULE_MAX_M as BATCHED_GEMV_RULE_MAX_M
from ._vector import VECTOR_FAMILY
from ._library import KernelInfo
from ._spec import DenseMatmulSpec
from ._tuned import MAX_SPLITS, TunedTable, lookup

__all__ = ["FP8_SM90_RULE_MEASURED", "MAX_SPLITS", "Fp8M1Choice", "Selection", "fp8_gemv_entry", "fp8_m1_choice", "fp8_mma_entry",
           "select_fp8_kernel", "select_kernel", "sm90_fp8_family", "split_k_slices",
           "tensor_core_aligned", "SIZES", "BATCHED_GEMV_MAX_M", "BATCHED_GEMV_RULE_MAX_M"]

SIZES = {"bf16": 2, "f16": 2, "f32": 4}
"""Bytes per element."""

SWAPPED_MAX_M = 64
"""SM90: M up to this runs the swapped (C^T = B A^T) split-K kernel: weights stream through the
128-row WGMMA tile while the few tokens fill the 32-wide N tile."""
PINGPONG_MAX_M = 1024
"""SM90: 64 < M < this runs the 64x128 ping-pong kernel (enough tiles for every SM), from here the
128x256 cooperative kernel with a 2x1 cluster."""
DECODE_MAX_M = 32
"""SM120: M up to this runs the 32x128 decode tile when N gives every SM a tile, else 64x64x64."""


@dataclass(frozen=True)
class Selection:
    """The chosen kernel, its split-K slices and the reason, in words."""

    kernel: KernelInfo
    splits: int
    reason: str


def tensor_core_aligned(spec: DenseMatmulSpec, input: str, output: str) -> bool:
    """The tensor-core kernels read and write 16-byte vectors (TMA boxes, cp.async): K rows of A and B
    and N rows of C must be whole multiples of 16 bytes."""
    return spec.k * SIZES[input] % 16 == 0 and spec.n * SIZES[output] % 16 == 0


def _check_multiprocessors(multiprocessors: Any) -> int:
    """The device's SM count as the selection rules take it (``DeviceInfo.multiprocessor_count``): a positive int, a
    numpy integer kept as the int. Zero, a negative count, a bool or a float would make the wave rules pick a kernel
    for no device at all, silently.

    Raises:
        ContractError: naming ``multiprocessors``.
    """
    if not is_integer_value(multiprocessors) or multiprocessors < 1:
        raise ContractError("multiprocessors", "a positive int (the device's SM count, "
                            "DeviceInfo.multiprocessor_count)", repr(multiprocessors))
    return int(multiprocessors)


def _check_selection(kernels: Any, spec: Any, compute_capability: Any, table: str) -> tuple[int, int]:
    """The selection rules' common arguments: ``kernels`` a sequence of :class:`KernelInfo` (``table``, or ()
    without a library), ``spec`` a :class:`DenseMatmulSpec`, ``compute_capability`` a (major, minor) pair of
    non-negative ints (numpy integers and a list taken); returns the pair as ints.

    Raises:
        ContractError: naming ``kernels``, ``spec`` or ``compute_capability``.
    """
    if (not isinstance(kernels, Sequence) or isinstance(kernels, str)
            or not all(isinstance(x, KernelInfo) for x in kernels)):
        raise ContractError("kernels", f"a sequence of KernelInfo ({table}, or () without a library)",
                            repr(kernels))
    if not isinstance(spec, DenseMatmulSpec):
        raise ContractError("spec", "a DenseMatmulSpec(m, n, k)", repr(spec))
    if (not isinstance(compute_capability, (tuple, list)) or len(compute_capability) != 2
            or not all(is_integer_value(x) and x >= 0 for x in compute_capability)):
        raise ContractError("compute_capability", "a (major, minor) pair of non-negative ints, e.g. (9, 0)",
                            repr(compute_capability))
    return int(compute_capability[0]), int(compute_capability[1])


def split_k_slices(spec: DenseMatmulSpec, kernel: KernelInfo, multiprocessors: int) -> int:
    """K slices for a split-K kernel: enough work units for every SM (tiles x slices <= SMs), each
    slice at least two K tiles, at most 16 slices. The tile is of the swapped problem (N x M)."""
    tm, tn, tk = kernel.tile
    tiles = -(-spec.n // tm) * -(-spec.m // tn)
    k_tiles = -(-spec.k // tk)
    return max(1, min(multiprocessors // max(tiles, 1), k_tiles // 2, 16))


def _named(kernels: Sequence[KernelInfo], family: str, tile: tuple[int, int, int] | None = None) -> KernelInfo | None:
    for k in kernels:
        if k.family == family and (tile is None or k.tile == tile):
            return k
    return None


def _tuned_choice(usable: Sequence[KernelInfo], spec: DenseMatmulSpec, input: str, output: str,
                  multiprocessors: int, tuned: TunedTable) -> Selection | None:
    """The measured table's kernel for ``spec`` when it has one that runs here and takes the shape."""
    e = lookup(tuned.entries, spec.m, spec.n, spec.k, input, output)
    if e is None:
        return None
    match = next((x for x in usable if x.name == e.kernel), None)
    if match is None:
        return None
    if (match.family == VECTOR_FAMILY and spec.m != 1) or (match.family == GEMV_FAMILY and spec.m > BATCHED_GEMV_MAX_M):
        return None
    if match.origin != "nvrtc" and match.family != "simt" and not tensor_core_aligned(spec, input, output):
        return None
    # measured slices hold for the measured configuration only: another M changes the tiles per slice
    exact = (e.n, e.k, e.m) == (spec.n, spec.k, spec.m) and multiprocessors == tuned.multiprocessors
    if match.split_k and e.splits > -(-spec.k // match.tile[2]):  # a table of another build may name more slices
        exact = False                                               # than this K has tiles
    splits = (e.splits if exact else split_k_slices(spec, match, multiprocessors)) if match.split_k else 1
    at = "this shape" if (e.n, e.k) == (spec.n, spec.k) else f"the nearest measured shape {e.n}x{e.k}"
    versus = f", cuBLAS {e.cublas_us:.2f} µs" if e.cublas_us is not None else ""
    reason = (f"measured fastest on {tuned.device} ({tuned.date[:10]}) at M = {e.m} on {at}: {e.us:.2f} µs{versus} "
              f"({tuned.source or 'the measured table'}; `matmul-profile --sweep --table` regenerates it)")
    if match.split_k:
        reason += f"; {splits} K slice(s)" + ("" if exact else " by the split-K rule")
    return Selection(match, splits, reason)


_SLICES_SUFFIX = re.compile(r"; \d+ K slice\(s\)[^;]*$")
"""The K-slice clause a reason ends with (the rules' or the table's), replaced when the caller gives ``splits``."""


def _check_splits(selection: Selection, spec: DenseMatmulSpec, splits: Any) -> Selection:
    # the one integer rule (is_integer_value): a bool, a float such as 2.0, a numpy bool or a string
    # is no count of slices, and a numpy integer is kept as the Python int the library takes
    if not is_integer_value(splits):
        raise ContractError("splits", "None or a positive int (K slices of a split-K kernel)", repr(splits))
    k = selection.kernel
    if not k.split_k:
        raise ContractError("splits", f"None: {k.name} does not split K", repr(splits))
    k_tiles = -(-spec.k // k.tile[2])
    if not 1 <= splits <= min(k_tiles, MAX_SPLITS):
        raise ContractError("splits", f"1 to {min(k_tiles, MAX_SPLITS)} K slices ({k_tiles} K tiles of {k.tile[2]} for "
                                      f"K = {spec.k})", repr(splits))
    given = int(splits)
    return Selection(k, given, _SLICES_SUFFIX.sub("", selection.reason) + f"; {given} K slice(s) given by the caller")


def select_kernel(kernels: Sequence[KernelInfo], spec: DenseMatmulSpec, input: str, output: str,
                  compute_capability: tuple[int, int], multiprocessors: int, forced: str | None = None,
                  *, tuned: TunedTable | None = None, splits: int | None = None) -> Selection:
    """Choose the kernel for ``spec`` among ``kernels`` (the library's table, plus the NVRTC kernels'
    entries of :func:`~mircuda.matmul._vector.vector_kernels` and
    :func:`~mircuda.matmul._gemv.gemv_kernels` when the caller offers them), then its split-K slices
    (``splits``, checked, when given; else the measured table's or :func:`split_k_slices`).

    ``tuned``, the measured table of a device (:mod:`mircuda.matmul._tuned`), is consulted first when
    its compute capability is the device's: its entry's kernel runs when the table holds one for
    these types near this shape that runs here and takes the shape; otherwise the rules below decide.

    M = 1 runs the dense vector kernel and 2 <= M <= ``BATCHED_GEMV_RULE_MAX_M`` (decode) the batched
    GEMV on every device they are offered for: the weights dominate the bytes, and both read each once at
    streaming bandwidth (any N and K). Larger M runs a CUTLASS kernel by architecture and shape. The
    measured table may also name the batched GEMV (either row tiling) up to ``BATCHED_GEMV_MAX_M``.

    Raises:
        ContractError: ``forced`` names no kernel of these types that runs on the device (or the
            batched GEMV for M > 32, the dense vector kernel for M > 1); ``splits`` is not an integer
            (a bool, a float, a string; a numpy integer is taken as an int), is given for a kernel that
            does not split K, or is outside 1 to min(K tiles, :data:`MAX_SPLITS`); ``multiprocessors`` is
            not a positive int; ``kernels``, ``spec`` or ``compute_capability`` is not what it says (each named).
        UnsupportedPlatform: the library has no kernel of these types for the device.
    """
    compute_capability = _check_selection(kernels, spec, compute_capability, "CutlassLibrary.kernels")
    multiprocessors = _check_multiprocessors(multiprocessors)
    chosen = _select(kernels, spec, input, output, compute_capability, multiprocessors, forced, tuned)
    return chosen if splits is None else _check_splits(chosen, spec, splits)


def _select(kernels: Sequence[KernelInfo], spec: DenseMatmulSpec, input: str, output: str,
            compute_capability: tuple[int, int], multiprocessors: int, forced: str | None,
            tuned: TunedTable | None) -> Selection:
    usable = [k for k in kernels if k.input == input and k.output == output and k.runs_on(compute_capability)]
    cc = f"{compute_capability[0]}.{compute_capability[1]}"
    if forced is not None:
        match = next((k for k in usable if k.name == forced), None)
        if match is None:
            names = ", ".join(k.name for k in usable) or "none"
            raise ContractError("kernel", f"one of the {input}->{output} kernels for cc {cc} ({names})", repr(forced))
        if match.family == GEMV_FAMILY and spec.m > BATCHED_GEMV_MAX_M:
            raise ContractError("kernel", f"a CUTLASS kernel: {forced} takes M <= {BATCHED_GEMV_MAX_M}", repr(forced))
        if match.family == VECTOR_FAMILY and spec.m != 1:
            raise ContractError("kernel", f"a kernel for M = {spec.m}: {forced} takes M = 1", repr(forced))
        splits = split_k_slices(spec, match, multiprocessors) if match.split_k else 1
        return Selection(match, splits, "forced by the caller")
    if not usable:
        raise UnsupportedPlatform(f"the CUTLASS library has no {input}->{output} kernel for compute capability {cc} "
                                  f"(it is built for sm_90a and sm_120f: rebuild with MIRCUDA_CUDA_ARCH)")
    if tuned is not None and tuned.compute_capability == tuple(compute_capability):
        measured = _tuned_choice(usable, spec, input, output, multiprocessors, tuned)
        if measured is not None:
            return measured
    loads = ("16-byte loads" if spec.k % 8 == 0 else f"element loads (K = {spec.k} is not a multiple of 8)")
    vector = _named(usable, VECTOR_FAMILY)
    if vector is not None and spec.m == 1:
        return Selection(vector, 1, f"M = 1: a matrix-vector product; the dense vector kernel (DenseVectorPlan's) "
                                    f"streams each of the {spec.n}x{spec.k} weights once with {loads}, 8 or 16 "
                                    "rows per warp sharing each input pair, FP32 FMA on the CUDA cores (measured "
                                    "faster than the batched GEMV at M = 1 on every H200 shape tried)")
    gemv = _named(usable, GEMV_FAMILY)
    if gemv is not None and spec.m <= BATCHED_GEMV_RULE_MAX_M:
        return Selection(gemv, 1, f"M = {spec.m} <= {BATCHED_GEMV_RULE_MAX_M}: decode, the {spec.n}x{spec.k} weights are "
                                  f"{spec.n * spec.k / max(spec.m * (spec.k + spec.n), 1):.0f}x the activation and "
                                  "output elements; the batched GEMV streams each weight once with "
                                  f"{loads} and multiplies it by all {spec.m} row(s) of A on the tensor cores "
                                  "(mma.sync m16n8k16)")
    simt = _named(usable, "simt")
    if not tensor_core_aligned(spec, input, output):
        if simt is None:
            raise UnsupportedPlatform(f"no SIMT kernel for {input}->{output} on cc {cc}")
        return Selection(simt, 1, f"K * {SIZES[input]} B = {spec.k * SIZES[input]} or N * {SIZES[output]} B = "
                                  f"{spec.n * SIZES[output]} is not a multiple of 16 bytes, which the tensor-core "
                                  "kernels' 16-byte vector accesses need")
    m, n = spec.m, spec.n
    choice: KernelInfo | None = None
    reason = ""
    if compute_capability[0] == 9:
        if m <= SWAPPED_MAX_M:
            choice = _named(usable, "sm90_swapped", (128, 32, 128))
            reason = (f"M = {m} <= {SWAPPED_MAX_M}: decode; computing C^T = B A^T puts N = {n} in the 128-row WGMMA "
                      "tile and M in the 32-wide N tile, K split so that every SM streams weights")
        elif m < PINGPONG_MAX_M:
            choice = _named(usable, "sm90_pingpong", (64, 128, 64))
            reason = (f"{SWAPPED_MAX_M} < M = {m} < {PINGPONG_MAX_M}: 64x128 ping-pong tiles give "
                      f"{-(-m // 64) * -(-n // 128)} tiles for {multiprocessors} SMs; one warp group's epilogue "
                      "overlaps the other's MMA")
        else:
            choice = _named(usable, "sm90_cooperative", (128, 256, 64))
            reason = (f"M = {m} >= {PINGPONG_MAX_M}: compute-bound; 128x256 cooperative tiles, weights multicast "
                      "to a 2x1 cluster")
    elif compute_capability[0] == 12:
        bulk = _named(usable, "sm80_tensorop", (128, 128, 32))
        wide = _named(usable, "sm80_tensorop", (64, 64, 64))
        decode = _named(usable, "sm80_tensorop", (32, 128, 64))
        if m <= DECODE_MAX_M and -(-n // 128) >= multiprocessors:
            choice, reason = decode, (f"M = {m} <= {DECODE_MAX_M} and N = {n} gives each of the {multiprocessors} "
                                      "SMs a 32x128 tile: the short-M decode tile")
        elif m <= 64 or -(-m // 128) * -(-n // 128) < multiprocessors:
            choice, reason = wide, (f"M = {m}, N = {n}: too few 128x128 tiles for {multiprocessors} SMs; 64x64x64 "
                                    "five-stage tiles (80 KB of shared memory) double the tiles")
        else:
            choice, reason = bulk, f"M = {m}, N = {n}: enough 128x128x32 tiles for {multiprocessors} SMs"
    if choice is None:
        if simt is None:
            raise UnsupportedPlatform(f"the CUTLASS library has no tensor-core or SIMT {input}->{output} kernel for "
                                      f"cc {cc}")
        return Selection(simt, 1, f"no tensor-core {input}->{output} kernel for cc {cc} in the library")
    splits = split_k_slices(spec, choice, multiprocessors) if choice.split_k else 1
    if choice.split_k:
        reason += f"; {splits} K slice(s)"
    return Selection(choice, splits, reason)


# -- blockwise FP8 (BlockwiseFp8Plan) ----------------------------------------------------------
FP8_GEMV_NAME = "blockwise_fp8_gemv"
"""The CUDA-core NVRTC kernel's name in BlockwiseFp8Plan's table (``cuda_src/fp8_vector.cu``, M <= 16;
chosen for M = 1 with K > 4096 on cc 9.x and for M = 1 elsewhere: :func:`fp8_m1_choice`)."""
FP8_MMA_NAME = "blockwise_fp8_mma"
"""The tensor-core NVRTC kernel's name (``cuda_src/fp8_mma_gemv.cu``, M <= 16; chosen for 2 <= M <= 16,
and for M = 1 with K <= 4096 on cc 9.x: :func:`fp8_m1_choice`)."""
FP8_NVRTC_MAX_M = 16
"""M up to this runs an NVRTC kernel (``MIRCUDA_FP8_M`` of both kernels takes 1..16)."""
FP8_M1_MMA_MAX_K = 4096
"""M = 1 on cc 9.x: K up to this runs the tensor-core kernel, larger K the CUDA-core one (see
:func:`fp8_m1_choice`)."""
FP8_M1_MMA_WIDE_N = 8192
"""M = 1 on cc 9.x with K <= :data:`FP8_M1_MMA_MAX_K`: N from this runs the tensor-core kernel with 32
weight rows per block (two 16-row tiles), smaller N with 16 (see :func:`fp8_m1_choice`)."""
FP8_M1_MEASUREMENT = ("NVIDIA H200, 2026-12-01, `python -m mircuda fp8-profile --m 1 --sweep ...`, cold weights, "
                      "median µs: 4096x4096 gemv 7.59 / mma rows=16 6.72 / mma rows=32 7.02; 14336x4096 gemv "
                      "16.71 / 16.93 / 16.16; 4096x14336 gemv 16.28 / 16.63 / 17.38; 6144x4096 gemv 9.15 / 9.05 / "
                      "9.63 (gemv: blockwise_fp8_gemv, rows=8; noise about +-0.3 µs; the 2026-11-30 sweep agreed "
                      "on K = 4096; gemv:trigger=early's 6.69 on 4096x4096 was seen once only)")
"""The measurement :func:`fp8_m1_choice` follows, as the selection's reason quotes it."""


@dataclass(frozen=True)
class Fp8M1Choice:
    """The M = 1 kernel of both FP8 plans for a shape: the NVRTC kernel's name
    (:data:`FP8_GEMV_NAME` or :data:`FP8_MMA_NAME`), its weight rows per block and the reason, in words."""

    kernel: str
    rows: int
    reason: str


def fp8_m1_choice(n: int, k: int, compute_capability: tuple[int, int]) -> Fp8M1Choice:
    """The default M = 1 kernel of ``BlockwiseFp8VectorPlan`` and ``BlockwiseFp8Plan`` for weights
    ``[N, K]`` on a device of ``compute_capability``.

    Rule (measured on the H200, :data:`FP8_M1_MEASUREMENT`: ``python -m mircuda fp8-profile --m 1 --sweep
    gemv,mma,mma:rows=32,...`` on 2026-12-01, cold weights):

    ============================  =====================  ===========  ===========
    N x K (µs)                    gemv (rows=8)          mma rows=16  mma rows=32
    ============================  =====================  ===========  ===========
    4096 x 4096                   7.59                   **6.72**     7.02
    14336 x 4096                  16.71                  16.93        **16.16**
    4096 x 14336                  **16.28**              16.63        17.38
    6144 x 4096                   9.15                   **9.05**     9.63
    ============================  =====================  ===========  ===========

    On cc 9.x, K <= :data:`FP8_M1_MMA_MAX_K` runs ``blockwise_fp8_mma`` (tensor cores) with 32 weight
    rows per block (two 16-row tiles) when N >= :data:`FP8_M1_MMA_WIDE_N`, else 16; larger K runs
    ``blockwise_fp8_gemv`` (CUDA cores) with its own default of :func:`~mircuda.matmul._fp8.fp8_gemv_rows`
    (8) rows: the fastest configuration of each measured shape (bold). Other shapes follow the same
    thresholds, unmeasured; the gaps are 0.1-0.9 µs against noise of about +-0.3 µs, and the K = 4096
    wins of the tensor-core kernel repeated in the 2026-11-30 sweep (``gemv:trigger=early``'s 6.69 µs on
    4096 x 4096 was seen once only, and it lost on the other shapes: 17.51, 16.94, 10.31 µs). Other
    architectures run ``blockwise_fp8_gemv``: the rule is measured on the H200 only, and off cc 9.x the
    tensor-core kernel's FP8 ``mma.sync`` (QMMA) accumulates each 32-K step with a precision NVIDIA does
    not document, while the CUDA-core kernel's FMAs are FP32.

    No argument is checked here (the plans check N, K and the device first).
    """
    cc = f"{compute_capability[0]}.{compute_capability[1]}"
    if compute_capability[0] != 9:
        return Fp8M1Choice(FP8_GEMV_NAME, 8, f"M = 1 on cc {cc}: decode, bound by the {n}x{k} weight bytes, each "
                                             "read once; CUDA cores with FP32 FMAs, 8 weight rows per block (the "
                                             "tensor-core rule for M = 1 is measured on the H200 only, and off "
                                             "cc 9.x its FP8 mma.sync accumulates with an undocumented precision)")
    if k <= FP8_M1_MMA_MAX_K:
        rows = 32 if n >= FP8_M1_MMA_WIDE_N else 16
        return Fp8M1Choice(FP8_MMA_NAME, rows, (
            f"M = 1 on cc {cc}, K = {k} <= {FP8_M1_MMA_MAX_K} and N = {n} "
            f"{'>=' if rows == 32 else '<'} {FP8_M1_MMA_WIDE_N}: decode, bound by the {n}x{k} weight bytes, each "
            f"read once; tensor cores (mma.sync m16n8k32 E4M3) with {rows} weight rows per block: fp8_m1_choice's "
            f"rule, the fastest configuration measured at K = 4096 ({FP8_M1_MEASUREMENT})"))
    return Fp8M1Choice(FP8_GEMV_NAME, 8, (
        f"M = 1 on cc {cc}, K = {k} > {FP8_M1_MMA_MAX_K}: decode, bound by the {n}x{k} weight bytes, each read "
        "once; CUDA cores (FP32 FMAs) with 8 weight rows per block: fp8_m1_choice's rule, the fastest "
        f"configuration measured at K = 14336 ({FP8_M1_MEASUREMENT})"))


FP8_SM90_RULE_MEASURED = (
    "H200, 2026-12-02 (benchmarks/fp8_sm90_kernels.py: both kernels forced, cold weights, median of 7 x 20 "
    "back-to-back calls; benchmarks/results/fp8_sm90_cutlass_pingpong_vs_coop.json): the ping-pong kernel was the faster at every point "
    "where its 64x128 tiles fit in one wave (4096x4096 M = 32..256 by 15-22 %, 6144x4096 M <= 128, 14336x4096 "
    "M <= 64); where they do not, the cooperative one at 22 of 26 points (14336x4096 M = 256: 34.5 against 40.8 µs, "
    "6144x4096 M = 256: 18.3 against 22.8, M >= 1024 everywhere by 25-68 %), but not at 14336x4096 M = 192 (38.1 "
    "against 32.2) and 384 (66.4 against 57.5) or 6144x4096 M = 384 (34.7 against 31.1) and 512 (32.4 against 31.4)")
"""The measurement behind :func:`sm90_fp8_family` (N x K; M > 16)."""


def sm90_fp8_family(m: int, n: int, multiprocessors: int) -> tuple[str, str]:
    """SM90's blockwise FP8 CUTLASS family for M > 16 and why: ``"sm90_blockwise_pingpong"`` (64x128x128 tiles,
    two warp groups alternating tiles) when its ``ceil(M / 64) * ceil(N / 128)`` output tiles fit in one wave
    (at most ``multiprocessors``), else ``"sm90_blockwise_cooperative"`` (128x128x128 tiles, both warp groups on
    one tile, A multicast to a 1x2 cluster). Measured: :data:`FP8_SM90_RULE_MEASURED` (both kernels launched
    without programmatic dependent launch then; they launch with it since, which made both faster at M = 64 and
    256: ``benchmarks/results/fp8_pdl_ab.json``; the rule was not re-measured).

    Raises:
        ContractError: ``m`` is not an int above :data:`FP8_NVRTC_MAX_M` (smaller M runs the NVRTC kernels), ``n``
            not a positive int, ``multiprocessors`` not a positive int (a numpy integer is taken as an int).
    """
    if not is_integer_value(m) or m <= FP8_NVRTC_MAX_M:
        raise ContractError("m", f"an int above {FP8_NVRTC_MAX_M} (M <= {FP8_NVRTC_MAX_M} runs the NVRTC kernels)",
                            repr(m))
    if not is_integer_value(n) or n < 1:
        raise ContractError("n", "a positive int", repr(n))
    m, n, multiprocessors = int(m), int(n), _check_multiprocessors(multiprocessors)
    pingpong_tiles = -(-m // 64) * -(-n // 128)
    if pingpong_tiles <= multiprocessors:
        # M <= 64: as many cooperative tiles as ping-pong ones (one row of tiles either way), so no SM is left idle
        # by them; above, the 128-row tiles are fewer
        versus = (f"as many 128-row cooperative tiles would pad M = {m} to 128 rows" if m <= 64 else
                  f"the {-(-m // 128) * -(-n // 128)} 128-row cooperative tiles would leave more SMs idle")
        return "sm90_blockwise_pingpong", (
            f"M = {m} > {FP8_NVRTC_MAX_M}: the {pingpong_tiles} 64x128x128 ping-pong tiles fit in one wave of the "
            f"{multiprocessors} SMs ({versus})")
    return "sm90_blockwise_cooperative", (
        f"M = {m} > {FP8_NVRTC_MAX_M}: {pingpong_tiles} 64x128 tiles exceed one wave of the {multiprocessors} SMs; "
        "128x128x128 cooperative tiles, A multicast to a 1x2 cluster")


def fp8_gemv_entry() -> KernelInfo:
    """The CUDA-core NVRTC FP8 kernel as a table entry (M <= 16, any device of cc >= 8.9, any N, K a
    multiple of 16)."""
    return KernelInfo(-1, FP8_GEMV_NAME, "fp8_gemv", "e4m3", "bf16", (FP8_NVRTC_MAX_M, 1, 128), (1, 1), 0, 16,
                      False, (), "nvrtc", "blockwise_scaled", (1, 1, 16), "f32", (1, 128, 128), ("k", "k"))


def fp8_mma_entry() -> KernelInfo:
    """The tensor-core NVRTC FP8 kernel as a table entry (M <= 16, cc >= 8.9, any N, K a multiple of 16;
    tile: 16 activation rows x 16 weight rows x one 128-K block)."""
    return KernelInfo(-1, FP8_MMA_NAME, "fp8_mma", "e4m3", "bf16", (FP8_NVRTC_MAX_M, 16, 128), (1, 1), 0, 16,
                      False, (), "nvrtc", "blockwise_scaled", (1, 1, 16), "f32", (1, 128, 128), ("k", "k"))


def select_fp8_kernel(kernels: Sequence[KernelInfo], spec: DenseMatmulSpec, compute_capability: tuple[int, int],
                      forced: str | None = None, multiprocessors: int = 132) -> Selection:
    """Choose BlockwiseFp8Plan's kernel for ``spec`` among ``kernels`` (the library's
    ``scaled_kernels``, empty when no library is loaded) and the NVRTC kernels (:func:`fp8_gemv_entry`,
    :func:`fp8_mma_entry`).

    Rule: M <= 16 runs an NVRTC kernel (decode: bound by the weight bytes, each read once): M = 1 the
    one :func:`fp8_m1_choice` names for N, K and the architecture (on cc 9.x the tensor-core one for
    K <= 4096, the CUDA-core one above; the CUDA-core one elsewhere), 2 <= M <= 16 the tensor-core one
    (the CUDA-core kernel's E4M3 decoding and FMAs grow with M; one mma.sync m16n8k32 covers 16 weight
    rows x 8 activation rows x 32 K). Larger M
    runs CUTLASS by architecture: cc 9.x :func:`sm90_fp8_family` (the ping-pong kernel where its tiles fit in one
    wave of the device's ``multiprocessors``, the H200's 132 by default, else the cooperative one); cc 12.x the
    sm120 kernel; other devices have none. ``forced`` names any
    kernel of the table that runs on the device and takes the shape (the NVRTC ones for M <= 16 only).
    Unsplit: split-K is not offered by the blockwise kernels.

    Raises:
        ContractError: ``forced`` names no kernel that runs on the device, or one whose table
            constraints (``KernelInfo.refusal``) or M range exclude the shape (named ``kernel``); ``kernels``
            is not a sequence of ``KernelInfo``, ``spec`` not a ``DenseMatmulSpec``, ``compute_capability``
            not a (major, minor) pair of ints, ``multiprocessors`` not a positive int (each named).
        BlockwiseFp8Unavailable: no kernel runs the shape on the device (the library has none for its
            architecture, or the shape breaks the chosen kernel's multiples: the message names them).
    """
    from ._fp8 import BlockwiseFp8Unavailable

    compute_capability = _check_selection(kernels, spec, compute_capability, "CutlassLibrary.scaled_kernels")
    multiprocessors = _check_multiprocessors(multiprocessors)
    m, n, k = spec.m, spec.n, spec.k
    cc = f"{compute_capability[0]}.{compute_capability[1]}"
    gemv, mma = fp8_gemv_entry(), fp8_mma_entry()
    usable = [x for x in kernels if x.kind == "blockwise_scaled" and x.runs_on(compute_capability)]
    if forced is not None:
        nvrtc = next((x for x in (gemv, mma) if x.name == forced), None)
        if nvrtc is not None:
            if m > FP8_NVRTC_MAX_M:
                raise ContractError("kernel", f"a CUTLASS kernel: {forced} takes M <= {FP8_NVRTC_MAX_M}", repr(forced))
            return Selection(nvrtc, 1, "forced by the caller")
        match = next((x for x in usable if x.name == forced), None)
        if match is None:
            names = ", ".join([gemv.name, mma.name, *(x.name for x in usable)])
            raise ContractError("kernel", f"one of the blockwise FP8 kernels for cc {cc} ({names})", repr(forced))
        why = match.refusal(m, n, k)
        if why:
            raise ContractError("kernel", f"a kernel that takes M={m} N={n} K={k}", repr(forced), why)
        return Selection(match, 1, "forced by the caller")
    if m == 1:
        rule = fp8_m1_choice(n, k, compute_capability)
        return Selection(mma if rule.kernel == mma.name else gemv, 1, rule.reason)
    if m <= FP8_NVRTC_MAX_M:
        return Selection(mma, 1, f"2 <= M = {m} <= {FP8_NVRTC_MAX_M}: decode, bound by the {n}x{k} weight bytes, "
                                 f"each read once; tensor cores (mma.sync m16n8k32 E4M3) take all {m} rows of A in "
                                 "one instruction per 16 weight rows x 32 K")
    if compute_capability[0] == 9:
        family, reason = sm90_fp8_family(m, n, multiprocessors)
        reason += " (measured on the H200: FP8_SM90_RULE_MEASURED)"
    elif compute_capability[0] == 12:
        family = "sm120_blockwise"
        reason = f"M = {m} > {FP8_NVRTC_MAX_M} on SM12x: the sm_120f blockwise kernel (TMA + FP8 mma.sync)"
    else:
        raise BlockwiseFp8Unavailable(
            f"BlockwiseFp8Plan for M = {m} > {FP8_NVRTC_MAX_M} needs a CUTLASS blockwise FP8 kernel, and there is "
            f"none for compute capability {cc} (they are built for sm_90a and sm_120f); M <= {FP8_NVRTC_MAX_M} "
            "runs the NVRTC kernel on any device of cc >= 8.9")
    choice = next((x for x in usable if x.family == family), None)
    if choice is None:
        raise BlockwiseFp8Unavailable(
            f"BlockwiseFp8Plan for M = {m} on cc {cc} needs the CUTLASS kernel family {family}, which the library "
            "does not hold (build it with the FP8 family: python -m mircuda build-cutlass)")
    why = choice.refusal(m, n, k)
    if why:
        raise BlockwiseFp8Unavailable(f"BlockwiseFp8Plan for M={m} N={n} K={k} on cc {cc}: {choice.name} cannot take "
                                      f"the shape ({why}; its M, N, K multiples are {choice.multiples})")
    return Selection(choice, 1, reason)
