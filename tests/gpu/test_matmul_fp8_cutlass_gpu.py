"""The CUTLASS blockwise FP8 kernels (DeepSeek-V3 format: E4M3 A [M, K] with 1 x 128 FP32 scales,
E4M3 B [N, K] with 128 x 128 FP32 scales, BF16 D) through CutlassLibrary.create_scaled_plan /
execute_scaled, against a float64 reference of the dequantized operands: odd-but-allowed shapes
(M any, N a multiple of 8 with a partial last 128-block, K a multiple of 16 with a partial last
128-block), alpha/beta with a separate C and in place, poisoned outputs with a guard band on both
sides, and the refusals of shapes the table's constraints exclude.

The library: ``MIRCUDA_CUTLASS_LIBRARY``, else ``.fp8lib/libmircuda_cutlass.so`` of the repository,
else the cached build (``python -m mircuda build-cutlass``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from helpers import download, upload
from matmul_helpers import UNIT_ROUNDOFF

import mircuda as mc

pytestmark = [pytest.mark.gpu, pytest.mark.cutlass]

E4M3 = ml_dtypes.float8_e4m3fn
BLOCK = 128
GUARD = 64
"""BF16 elements of poison before and after D (128 bytes: keeps D 16-byte aligned)."""
FP8_ACCUMULATION = 2.0**-11
"""Error allowed relative to sum |alpha a_k b_k| (dequantized): E4M3 products are exact in FP32, but
Hopper's FP8 WGMMA accumulates with fewer than FP32's bits (DeepSeek-V3 technical report, section
3.3.2, measured about 14); CUTLASS's blockwise mainloop promotes each 128-K block's partial sum into an
FP32 total, so the loss is that of 128 terms (about 2**-14 * a few). A wrong scale index gives errors
of the order of the magnitude itself."""


@pytest.fixture(scope="module")
def library() -> mc.matmul.CutlassLibrary:
    env = os.environ.get("MIRCUDA_CUTLASS_LIBRARY")
    local = Path(__file__).resolve().parents[2] / ".fp8lib" / "libmircuda_cutlass.so"
    try:
        lib = mc.matmul.load_library(None if env or not local.is_file() else local)
    except mc.CutlassNotFound as exc:
        pytest.skip(str(exc))
    if not lib.scaled_kernels:
        pytest.skip(f"{lib.path} holds no blockwise FP8 kernels (build with --families FP8)")
    return lib


def _kernels_of_device(library, context) -> list:  # type: ignore[no-untyped-def]
    cc = context.device_info().compute_capability
    return [k for k in library.scaled_kernels if k.runs_on(cc)]


def _operands(rng: np.random.Generator, m: int, n: int, k: int):  # type: ignore[no-untyped-def]
    """E4M3 A, B (random normal, scaled into E4M3's range and rounded), FP32 scales in [2**-6, 2**-2]
    with one all-zero A row block (a zero scale must give zero, not NaN), K-major."""
    kb, nb = -(-k // BLOCK), -(-n // BLOCK)
    a = (rng.standard_normal((m, k)) * 64).clip(-448, 448).astype(E4M3)
    b = (rng.standard_normal((n, k)) * 64).clip(-448, 448).astype(E4M3)
    sa = (2.0 ** rng.uniform(-6, -2, (m, kb))).astype(np.float32)
    sb = (2.0 ** rng.uniform(-6, -2, (nb, kb))).astype(np.float32)
    a[m // 2, :BLOCK] = 0
    sa[m // 2, 0] = 0.0
    return a, b, sa, sb


def _reference(a, b, sa, sb, c, alpha: float, beta: float):  # type: ignore[no-untyped-def]
    k = a.shape[1]
    n = b.shape[0]
    cols = np.arange(k) // BLOCK
    a64 = a.astype(np.float64) * sa.astype(np.float64)[:, cols]
    b64 = b.astype(np.float64) * sb.astype(np.float64)[np.arange(n)[:, None] // BLOCK, cols[None, :]]
    want = alpha * (a64 @ b64.T)
    magnitude = abs(alpha) * (np.abs(a64) @ np.abs(b64).T)
    if beta:
        want = want + beta * c.astype(np.float64)
        magnitude = magnitude + abs(beta) * np.abs(c.astype(np.float64))
    return want, magnitude


def _poison_bits() -> np.uint16:
    return np.array([np.nan], np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)[0]


class _Plan:
    """One scaled plan with its workspace; freed by close()."""

    def __init__(self, context, stream, pool, library, kernel, m: int, n: int, k: int) -> None:  # type: ignore[no-untyped-def]
        context._make_current()
        self.library, self.stream = library, stream
        self.handle = library.create_scaled_plan(kernel, m, n, k)
        self.workspace = None
        nbytes = library.workspace_bytes(self.handle)
        if nbytes:
            self.workspace = pool.allocate(mc.u8, stream, nbytes)
        library.set_workspace(self.handle, self.workspace.handle if self.workspace else 0, nbytes)

    def close(self) -> None:
        self.stream.synchronize()
        assert self.library.destroy(self.handle) == 0
        if self.workspace is not None:
            self.workspace.free(self.stream)


def _run(context, stream, pool, rng, library, kernel, m, n, k, alpha, beta, in_place):  # type: ignore[no-untyped-def]
    a, b, sa, sb = _operands(rng, m, n, k)
    c = rng.standard_normal((m, n)).astype(np.float32).astype(ml_dtypes.bfloat16) if beta else None
    poison = np.full(m * n + 2 * GUARD, _poison_bits(), np.uint16)
    if in_place and c is not None:
        poison[GUARD:GUARD + m * n] = c.view(np.uint16).ravel()
    bufs = {"a": upload(context, stream, pool, a.view(np.uint8).ravel()),
            "b": upload(context, stream, pool, b.view(np.uint8).ravel()),
            "sa": upload(context, stream, pool, sa.ravel()), "sb": upload(context, stream, pool, sb.ravel()),
            "d": upload(context, stream, pool, poison)}
    if c is not None and not in_place:
        bufs["c"] = upload(context, stream, pool, c.view(np.uint16).ravel())
    plan = _Plan(context, stream, pool, library, kernel, m, n, k)
    try:
        d_address = bufs["d"].handle + 2 * GUARD
        c_address = bufs["c"].handle if "c" in bufs else 0  # 0: C is D (in place), read only when beta != 0
        library.execute_scaled(plan.handle, stream.handle, bufs["a"].handle, bufs["b"].handle, bufs["sa"].handle,
                               bufs["sb"].handle, c_address, d_address, alpha, beta)
        raw = download(context, stream, bufs["d"])
    finally:
        plan.close()
        for buf in bufs.values():
            buf.free(stream)
    bits = _poison_bits()
    assert (raw[:GUARD] == bits).all() and (raw[GUARD + m * n:] == bits).all(), "wrote outside D"
    got = raw[GUARD:GUARD + m * n].view(ml_dtypes.bfloat16).astype(np.float64).reshape(m, n)
    want, magnitude = _reference(a, b, sa, sb, c, alpha, beta)
    assert np.isfinite(got).all(), "non-finite outputs (poison read or not overwritten)"
    bound = 2 * UNIT_ROUNDOFF["bf16"] * np.abs(want) + FP8_ACCUMULATION * magnitude + 1e-30
    excess = np.abs(got - want) / bound
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    assert excess.max() <= 1.0, (f"{kernel.name} M={m} N={n} K={k}: {int((excess > 1).sum())} of {excess.size} "
                                 f"outside the bound; worst at {worst}: got {got[worst]!r}, want {want[worst]!r}")


SHAPES = [  # (M, N, K): N, K partial last 128-blocks where the kernel allows them
    (1, 256, 256), (17, 136, 272), (64, 1024, 512), (300, 1032, 1040), (129, 4096, 528), (2048, 1024, 1024),
]
SCALARS = [(1.0, 0.0, False), (0.75, 0.5, False), (1.25, -1.0, True)]


@pytest.mark.parametrize("m, n, k", SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("alpha, beta, in_place", SCALARS, ids=["plain", "alpha-beta", "in-place"])
def test_each_blockwise_kernel_matches_float64(context, stream, pool, rng, library, m, n, k, alpha, beta,
                                               in_place) -> None:
    kernels = _kernels_of_device(library, context)
    if not kernels:
        pytest.skip("no blockwise FP8 kernel of the library runs on this device")
    ran = 0
    for kernel in kernels:
        if kernel.refusal(m, n, k):
            continue
        _run(context, stream, pool, rng, library, kernel, m, n, k, alpha, beta, in_place)
        ran += 1
    assert ran or all(kn.refusal(m, n, k) for kn in kernels)


def test_the_sm90_kernels_are_present_on_hopper(context, library) -> None:
    if context.device_info().compute_capability != (9, 0):
        pytest.skip("an SM90 device")
    families = {k.family for k in _kernels_of_device(library, context)}
    assert {"sm90_blockwise_cooperative", "sm90_blockwise_pingpong"} <= families


def test_shapes_outside_the_constraints_are_refused_by_name(context, stream, library) -> None:
    kernels = _kernels_of_device(library, context)
    if not kernels:
        pytest.skip("no blockwise FP8 kernel of the library runs on this device")
    context._make_current()
    for kernel in kernels:
        for m, n, k, dim in [(64, 260, 256, "N = 260"), (64, 256, 200, "K = 200")]:
            with pytest.raises(mc.ContractError) as info:
                library.create_scaled_plan(kernel, m, n, k)
            assert info.value.argument == "shape" and dim in str(info.value)


def test_dense_and_scaled_entry_points_do_not_mix(context, stream, library) -> None:
    context._make_current()
    kernel = _kernels_of_device(library, context)[0] if _kernels_of_device(library, context) else None
    if kernel is None:
        pytest.skip("no blockwise FP8 kernel of the library runs on this device")
    with pytest.raises(mc.ContractError, match="blockwise-scaled"):
        library.create_scaled_plan(dataclasses.replace(kernel, kind="dense"), 64, 256, 256)
    handle = library.create_scaled_plan(kernel, 64, 256, 256)
    try:
        with pytest.raises(mc.CutlassError) as info:  # a scaled plan through the dense execute
            library.execute(handle, stream.handle, 1 << 20, 1 << 20, 1 << 20, 1.0, 0.0)
        assert info.value.name == "INVALID_ARGUMENT"
        with pytest.raises(mc.CutlassError) as info:  # a null scale pointer
            library.execute_scaled(handle, stream.handle, 1 << 20, 1 << 20, 0, 1 << 20, 0, 1 << 20, 1.0, 0.0)
        assert info.value.name == "INVALID_ARGUMENT"
    finally:
        assert library.destroy(handle) == 0


def test_the_sm120_kernel_says_wrong_arch_off_sm12x(context, library) -> None:
    if context.device_info().compute_capability[0] == 12:
        pytest.skip("an SM12x device runs it")
    sm120 = [k for k in library.scaled_kernels if k.family == "sm120_blockwise"]
    if not sm120:
        pytest.skip("the library was built without 120f")
    context._make_current()
    with pytest.raises(mc.CutlassError) as info:
        library.create_scaled_plan(sm120[0], 256, 256, 256)
    assert info.value.name == "WRONG_ARCH"
