"""The grouped NVFP4 CUTLASS engine (CutlassGroupedFp4, sm_120f) on the GPU.

On every GPU (the H200 included): the grouped plans' device setup alone (``mircuda_cutlass_grouped_setup``,
compiled for every arch of the build) against a numpy model of it -- routing checks and error flag, rows,
pointers, slots (a prefix sum over more than one 1024-thread pass), the activation scales repacked into the
tiled layout with zero padding, two operand sets, overlapping ranges overflowing the slots. Below cc 12 (the
H200): the engine and the C plan entry point refuse the device by name (the GEMM is sm_120f code). On cc
12.x: random routings with an empty group, an invalid group (flagged, skipped) and poisoned rows
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
from mircuda.matmul._fp4_reference import dequantize, quantize, scales_to_tiled

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


def _slot_geometry(capacity: int, groups: int, k: int) -> tuple[int, int]:
    return (-(-capacity // 128) + min(groups, capacity)) * 128, -(-k // 64) * 4


def model_setup(counts: np.ndarray, offsets: np.ndarray, indices: np.ndarray, *, n: int, k: int, capacity: int,
                bank: int, operands: list[tuple[int, ...]], tiled_base: int) -> dict[str, Any]:
    """What mircuda_cutlass_grouped_setup writes (mircuda_cutlass.h), computed on the host."""
    groups, sets = len(counts), len(operands)
    slot_rows, row_bytes = _slot_geometry(capacity, groups, k)
    out: dict[str, Any] = {name: np.zeros(sets * groups, np.int64) for name in ("rows", "a", "b", "sfa", "sfb", "d",
                                                                                  "alpha")}
    out["slot_begin"], out["slot_end"], out["flag"], out["live"] = np.zeros(groups, np.int64), np.zeros(groups, np.int64), 0, []
    carry = 0
    for g in range(groups):
        m, o, e = int(counts[g]), int(offsets[g]), int(indices[g])
        error = (1 if not 0 <= e < bank else 0) | (2 if m < 0 or o < 0 or o + m > capacity else 0)
        if error:
            m = 0
        padded = -(-m // 128) * 128
        begin, end = carry, carry + padded
        carry = end
        if end > slot_rows:
            error |= 2
            m = 0
        out["flag"] |= error
        if error:
            o = e = 0
        out["slot_begin"][g] = min(begin, slot_rows)
        out["slot_end"][g] = end if m > 0 else min(begin, slot_rows)
        if m > 0:
            out["live"].append((g, o, m, begin))
        for s, (a, _sfa, b, sfb, d, alpha) in enumerate(operands):
            i = s * groups + g
            out["rows"][i] = m
            out["a"][i] = a + o * (k // 2)
            out["b"][i] = b + e * n * (k // 2)
            out["sfa"][i] = tiled_base + (s * slot_rows + (begin if m > 0 else 0)) * row_bytes
            out["sfb"][i] = sfb + e * (-(-n // 128) * 128) * row_bytes
            out["d"][i] = d + o * n * 2
            out["alpha"][i] = alpha + 4 * e
    return out


def _run_setup(context, stream, pool, library, counts, offsets, indices, *, n, k, capacity, bank, sets, rng):
    groups = len(counts)
    slot_rows, row_bytes = _slot_geometry(capacity, groups, k)
    linears = [rng.integers(1, 255, (capacity, k // 16), dtype=np.uint8) for _ in range(sets)]
    sfa_bufs = [upload(context, stream, pool, x.reshape(-1)) for x in linears]
    # Never dereferenced by the setup: any 16-byte aligned addresses stand for A, the bank, D and alpha.
    operands = [(0x10_0000 * (s + 1), sfa_bufs[s].handle, 0x4000_0000 * (s + 1), 0x8000_0000 * (s + 1),
                 0xC000_0000 * (s + 1), 0x1_0000_0000 * (s + 1)) for s in range(sets)]
    S = sets * groups
    tables = [upload(context, stream, pool, np.full(S, -7, np.int32))]
    tables += [upload(context, stream, pool, np.zeros(S, np.uint64)) for _ in range(6)]
    tables += [upload(context, stream, pool, np.full(groups, -7, np.int32)) for _ in range(2)]
    tables.append(upload(context, stream, pool, np.full(sets * slot_rows * row_bytes, 0xEE, np.uint8)))
    routing = [upload(context, stream, pool, v.astype(np.int32)) for v in (counts, offsets, indices)]
    flag = upload(context, stream, pool, np.zeros(1, np.int32))
    library.grouped_setup(stream.handle, n, k, capacity, groups, bank, routing[0].handle, routing[1].handle,
                          routing[2].handle, operands, flag.handle, [t.handle for t in tables])
    stream.synchronize()
    got = {name: download(context, stream, t).astype(np.int64) for name, t in
           zip(("rows", "a", "b", "sfa", "sfb", "d", "alpha", "slot_begin", "slot_end"), tables)}
    got["flag"] = int(download(context, stream, flag)[0])
    got["tiled"] = download(context, stream, tables[9]).reshape(sets, slot_rows * row_bytes)
    want = model_setup(counts, offsets, indices, n=n, k=k, capacity=capacity, bank=bank, operands=operands,
                       tiled_base=tables[9].handle)
    for name in ("rows", "a", "b", "sfa", "sfb", "d", "alpha", "slot_begin", "slot_end", "flag"):
        assert np.array_equal(np.asarray(got[name]), np.asarray(want[name])), name
    for s in range(sets):
        for g, o, m, begin in want["live"]:
            region = got["tiled"][s][begin * row_bytes:(begin + -(-m // 128) * 128) * row_bytes]
            assert np.array_equal(region, scales_to_tiled(linears[s][o:o + m])), (s, g)
    for buf in (*sfa_bufs, *tables, *routing, flag):
        buf.free(stream)
    return want


@pytest.mark.cutlass
@pytest.mark.parametrize("sets", [1, 2])
def test_the_grouped_setup_matches_its_model_on_any_gpu(context, stream, pool, library, sets) -> None:
    if not library.has_grouped:
        pytest.skip(f"{library.path} has no grouped entry points (ABI {library.abi_version})")
    rng = np.random.default_rng(5 + sets)
    # K = 96: 6 scales per row, padded to 8 in the tiled layout (zeros written)
    n, k, capacity, groups, bank = 200, 96, 700, 12, 5
    counts, offsets, indices = _routing(rng, 600, groups, bank)
    counts[3] = 0  # empty
    indices[4] = -1  # matrix index out of range: 1
    indices[5] = bank  # 1
    offsets[6], counts[6] = capacity - 3, 5  # rows past capacity: 2
    counts[7] = -2  # 2
    want = _run_setup(context, stream, pool, library, counts, offsets, indices, n=n, k=k, capacity=capacity,
                      bank=bank, sets=sets, rng=rng)
    assert want["flag"] == 3 and len(want["live"]) >= 3


@pytest.mark.cutlass
def test_the_grouped_setup_scans_more_groups_than_one_block_pass(context, stream, pool, library) -> None:
    if not library.has_grouped:
        pytest.skip(f"{library.path} has no grouped entry points (ABI {library.abi_version})")
    rng = np.random.default_rng(3)
    groups, capacity = 2500, 4000  # three 1024-group passes of the one-block prefix sum
    counts, offsets, indices = _routing(rng, capacity, groups, 64)
    want = _run_setup(context, stream, pool, library, counts, offsets, indices, n=64, k=64, capacity=capacity,
                      bank=64, sets=1, rng=rng)
    assert want["flag"] == 0 and want["slot_end"].max() > 1024 * 128 // 2


@pytest.mark.cutlass
def test_overlapping_groups_that_overflow_the_slots_are_skipped_and_flagged(context, stream, pool, library) -> None:
    if not library.has_grouped:
        pytest.skip(f"{library.path} has no grouped entry points (ABI {library.abi_version})")
    rng = np.random.default_rng(4)
    # four groups over the same 200 rows: 4 x 256 slot rows > 256 + 4 x 128: the last is skipped with 2
    counts, offsets, indices = (np.full(4, 200, np.int32), np.zeros(4, np.int32), np.arange(4, dtype=np.int32))
    want = _run_setup(context, stream, pool, library, counts, offsets, indices, n=64, k=64, capacity=200, bank=4,
                      sets=2, rng=rng)
    assert want["flag"] == 2 and [g for g, *_ in want["live"]] == [0, 1, 2]


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
