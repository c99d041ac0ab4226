"""The grouped NVFP4 CUTLASS engine (CutlassGroupedFp4, sm_120f) on the GPU.

Below cc 12 (the H200): the engine and the C entry point refuse the device by name (the kernels are sm_120f
code). On cc 12.x: random routings with an empty group, an invalid group (flagged, skipped) and poisoned rows
no group covers, one and two operand sets, each grouped kernel, against a float64 product of the dequantized
operands; the same from the ``@numba.njit`` executor."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

import mircuda as mc
from helpers import download, upload
from mircuda.matmul._fp4_grouped_cutlass import CutlassGroupedFp4
from mircuda.matmul._fp4_reference import dequantize, quantize

CUTLASS_ACCUMULATION = 2.0**-11
"""As the single NVFP4 plan's GPU tests: the block-scaled MMA's accumulation width is not documented."""


def grouped_kernels(context: mc.Context, library: Any) -> list[Any]:
    cc = context.device_info().compute_capability
    kernels = [k for k in library.grouped_kernels if k.runs_on(cc)]
    if not kernels:
        pytest.skip(f"needs cc 12.x and a library with the grouped FP4 families (cc {cc[0]}.{cc[1]}, "
                    f"{len(library.grouped_kernels)} grouped kernels)")
    return kernels


@pytest.mark.cutlass
def test_below_cc_12_the_grouped_engine_is_refused_by_name(context, stream, library) -> None:
    cc = context.device_info().compute_capability
    if cc[0] == 12:
        pytest.skip("checks devices below cc 12")
    if not library.grouped_kernels:
        pytest.skip(f"{library.path} has no grouped kernels (ABI {library.abi_version})")
    with pytest.raises(mc.UnsupportedPlatform, match="sm_120f"):
        CutlassGroupedFp4(context, library, n=256, k=256, capacity=64, groups=8, bank_size=8, sets=1, stream=stream)
    with pytest.raises(mc.ContractError) as info:
        CutlassGroupedFp4(context, library, n=256, k=256, capacity=64, groups=8, bank_size=8, sets=3, stream=stream)
    assert info.value.argument == "sets"
    context._make_current()
    out = ctypes.c_void_p()
    status = library._lib.mircuda_cutlass_grouped_plan_create(library.grouped_kernels[0].index, 256, 256, 64, 8,
                                                              8, 1, ctypes.byref(out))
    assert status == 3 and not out.value  # WRONG_ARCH


def _routing(rng: np.random.Generator, rows: int, groups: int, bank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cuts = np.sort(rng.integers(0, rows + 1, groups - 1))
    bounds = np.concatenate(([0], cuts, [rows]))
    counts = np.diff(bounds).astype(np.int32)
    counts[groups - 1] = 0  # an empty group
    return counts, bounds[:-1].astype(np.int32), rng.integers(0, bank, groups).astype(np.int32)


def _bf16_to_f64(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@pytest.mark.cutlass
@pytest.mark.parametrize("sets", [1, 2])
@pytest.mark.parametrize("njit", [False, True])
def test_the_grouped_kernels_match_a_float64_reference(context, stream, pool, library, sets, njit) -> None:
    kernels = grouped_kernels(context, library)
    if njit:
        pytest.importorskip("numba")
    rng = np.random.default_rng(11 + sets)
    n, k, capacity, groups, bank = 264, 320, 300, 6, 4
    counts, offsets, indices = _routing(rng, capacity - 20, groups, bank)  # the last 20 rows: no group
    indices[1] = bank + 3  # invalid: ORs 1 into the flag, skipped
    live = [g for g in range(groups) if g != 1 and counts[g] > 0]
    for kernel in kernels:
        plan = CutlassGroupedFp4(context, library, n=n, k=k, capacity=capacity, groups=groups, bank_size=bank,
                                 sets=sets, stream=stream, kernel=kernel)
        buffers: list[list[mc.DeviceBuffer]] = []
        wants = []
        for _ in range(sets):
            x = rng.standard_normal((capacity, k)).astype(np.float32)
            qa, sa, _ga = quantize(x, None, "linear")
            mats = [quantize(rng.standard_normal((n, k)).astype(np.float32), None, "tiled") for _ in range(bank)]
            alpha = rng.uniform(0.5, 2.0, bank).astype(np.float32)
            xd = dequantize(qa, sa, capacity, k, "linear").astype(np.float64)
            want = np.full((capacity, n), np.nan)
            mag = np.zeros((capacity, n))
            for g in live:
                e, o, m = int(indices[g]), int(offsets[g]), int(counts[g])
                wd = dequantize(mats[e][0], mats[e][1], n, k, "tiled").astype(np.float64)
                want[o:o + m] = alpha[e] * (xd[o:o + m] @ wd.T)
                mag[o:o + m] = alpha[e] * (np.abs(xd[o:o + m]) @ np.abs(wd).T)
            bufs = [upload(context, stream, pool, qa.reshape(-1)), upload(context, stream, pool, sa.reshape(-1)),
                    upload(context, stream, pool, np.concatenate([q.reshape(-1) for q, _, _ in mats])),
                    upload(context, stream, pool, np.concatenate([s.reshape(-1) for _, s, _ in mats])),
                    upload(context, stream, pool, np.full(capacity * n, 0x7FC0, np.uint16)),  # NaN poison
                    upload(context, stream, pool, alpha)]
            buffers.append(bufs)
            wants.append((want, mag))
        routing = [upload(context, stream, pool, v) for v in (counts, offsets, indices)]
        flag = upload(context, stream, pool, np.zeros(1, np.int32))
        operands = [tuple(b.handle for b in bufs) for bufs in buffers]
        if njit:
            execute = plan.numba_executor()
            flat = [a for op in operands for a in op]
            assert execute(stream.handle, routing[0].handle, routing[1].handle, routing[2].handle, flag.handle,
                           *flat) == 0
        else:
            plan.execute(stream, row_counts=routing[0].handle, offsets=routing[1].handle,
                         matrix_indices=routing[2].handle, operands=operands, error_flag=flag.handle)
        stream.synchronize()
        assert int(download(context, stream, flag)[0]) == 1
        for bufs, (want, mag) in zip(buffers, wants):
            got = _bf16_to_f64(download(context, stream, bufs[4])).reshape(capacity, n)
            covered = ~np.isnan(want[:, 0])
            assert np.isnan(got[~covered]).all(), "a row no group covers was written"
            bound = 2 * 2.0**-8 * np.abs(want[covered]) + CUTLASS_ACCUMULATION * mag[covered] + 1e-30
            excess = np.abs(got[covered] - want[covered]) / bound
            assert excess.max() <= 1.0, f"{kernel.name}: {int((excess > 1).sum())} outputs outside the bound"
        for bufs in buffers:
            for b in bufs:
                b.free(stream)
        for b in (*routing, flag):
            b.free(stream)
        plan.close()
