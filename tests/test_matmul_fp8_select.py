"""BlockwiseFp8Plan's kernel selection and its CUTLASS path without a GPU: which kernel runs which shape
on which architecture (the pure rule over stand-in tables and, when it loads, the real library's
table), the refusals by name, and the plan's construction, checks, workspace, describe, execute and
numba_execute against a stand-in library."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import mircuda as mc
from mircuda.matmul import _fp8, _library
from mircuda.matmul._fp8_cutlass import MISALIGNED, WRONG_STREAM, scaled_executor
from mircuda.matmul._library import KernelInfo
from mircuda.matmul._select import (
    FP8_GEMV_NAME,
    FP8_M1_MEASUREMENT,
    FP8_MMA_NAME,
    FP8_SM90_RULE_MEASURED,
    fp8_m1_choice,
    select_fp8_kernel,
)

COOP = "sm90_blockwise_coop_128x128x128_c1x2_e4m3_bf16"
PINGPONG = "sm90_blockwise_pingpong_64x128x128_e4m3_bf16"
SM120 = "sm120_blockwise_128x128x128_e4m3_bf16"


def scaled(index: int, name: str, family: str, tile: tuple[int, int, int], cluster: tuple[int, int],
           archs: tuple[int, ...], multiples: tuple[int, int, int]) -> KernelInfo:
    return KernelInfo(index, name, family, "e4m3", "bf16", tile, cluster, 0, 16, False, archs, "cutlass",
                      "blockwise_scaled", multiples, "f32", (1, 128, 128), ("k", "k"))


TABLE = (scaled(4, SM120, "sm120_blockwise", (128, 128, 128), (1, 1), (120,), (1, 128, 128)),
         scaled(17, COOP, "sm90_blockwise_cooperative", (128, 128, 128), (1, 2), (90,), (1, 8, 16)),
         scaled(18, PINGPONG, "sm90_blockwise_pingpong", (64, 128, 128), (1, 1), (90,), (1, 8, 16)))
"""The blockwise kernels as the FP8 build lists them (``CutlassLibrary.scaled_kernels``)."""


def real_table() -> tuple[KernelInfo, ...] | None:
    env = os.environ.get("MIRCUDA_CUTLASS_LIBRARY")
    local = Path(__file__).resolve().parents[1] / ".fp8lib" / "libmircuda_cutlass.so"
    try:
        lib = _library.load_library(env if env else local)
    except (mc.CutlassNotFound, OSError):
        return None
    return lib.scaled_kernels or None


def tables() -> list[Any]:
    real = real_table()
    return [pytest.param(TABLE, id="stand-in")] + ([pytest.param(real, id="library")] if real else [])


def spec(m: int, n: int = 4096, k: int = 4096) -> mc.DenseMatmulSpec:
    return mc.DenseMatmulSpec(m, n, k)


# -- the rule ------------------------------------------------------------------------------------
@pytest.mark.parametrize("table", tables())
@pytest.mark.parametrize("m, cc, name", [
    (1, (9, 0), FP8_MMA_NAME), (1, (8, 9), FP8_GEMV_NAME), (1, (12, 0), FP8_GEMV_NAME), (2, (9, 0), FP8_MMA_NAME), (16, (9, 0), FP8_MMA_NAME),
    (16, (12, 0), FP8_MMA_NAME), (8, (8, 9), FP8_MMA_NAME), (3, (10, 0), FP8_MMA_NAME),
    (17, (9, 0), PINGPONG), (64, (9, 0), PINGPONG), (256, (9, 0), PINGPONG),  # N = 4096: 32 N tiles
    (257, (9, 0), COOP), (2048, (9, 0), COOP), (8192, (9, 0), COOP),
    (17, (12, 0), SM120), (2048, (12, 0), SM120), (300, (12, 1), SM120),
])
def test_each_shape_and_arch_gets_its_kernel(table, m, cc, name) -> None:
    family = {info.name: info.family for info in TABLE}.get(name)
    if table is not TABLE and family is not None and not any(info.name == name for info in table):
        # a library built for other targets (build-cutlass --arch 90a holds no sm_120f kernel): the family it lacks
        # is refused by name, with the command that builds it
        from mircuda.matmul._fp8 import BlockwiseFp8Unavailable

        with pytest.raises(BlockwiseFp8Unavailable) as info:
            select_fp8_kernel(table, spec(m), cc)
        assert family in str(info.value) and "build-cutlass" in str(info.value)
        return
    selection = select_fp8_kernel(table, spec(m), cc)
    assert selection.kernel.name == name and selection.splits == 1 and str(m) in selection.reason


# (N, K) -> (kernel, rows) at M = 1 on cc 9.x: the four shapes of the H200 sweep the rule follows, odd N,
# K one 16-column step past 4096, K = 8192 and both sides of N = 8192.
M1_RULE = [((4096, 4096), FP8_MMA_NAME, 16), ((14336, 4096), FP8_MMA_NAME, 32), ((4096, 14336), FP8_GEMV_NAME, 8),
           ((6144, 4096), FP8_MMA_NAME, 16), ((1000, 4096 + 16), FP8_GEMV_NAME, 8), ((1000, 4096), FP8_MMA_NAME, 16),
           ((1000, 8192), FP8_GEMV_NAME, 8), ((8192, 8192), FP8_GEMV_NAME, 8), ((8192, 4096), FP8_MMA_NAME, 32),
           ((8191, 4096), FP8_MMA_NAME, 16), ((37, 304), FP8_MMA_NAME, 16), ((1, 16), FP8_MMA_NAME, 16)]


@pytest.mark.parametrize("cc", [(9, 0), (9, 1)])
@pytest.mark.parametrize("shape, name, rows", M1_RULE, ids=str)
def test_the_m_1_rule_by_shape_on_sm90(shape, name, rows, cc) -> None:
    n, k = shape
    choice = fp8_m1_choice(n, k, cc)
    assert (choice.kernel, choice.rows) == (name, rows)
    assert f"M = 1 on cc {cc[0]}.{cc[1]}, K = {k}" in choice.reason and FP8_M1_MEASUREMENT in choice.reason
    assert ("tensor cores" in choice.reason) is (name == FP8_MMA_NAME)
    # select_fp8_kernel's M = 1 branch returns the same kernel's entry and the same reason
    selection = select_fp8_kernel(TABLE, spec(1, n, k), cc)
    assert selection.kernel.name == name and selection.kernel.origin == "nvrtc" and selection.reason == choice.reason


def test_the_rules_measurement_is_the_h200_sweep() -> None:
    # the numbers the rule follows, as fp8_m1_choice's docstring tabulates them
    for text in ("H200", "2026-12-01", "fp8-profile --m 1 --sweep", "cold weights", "4096x4096 gemv 7.59",
                 "mma rows=16 6.72", "14336x4096 gemv 16.71 / 16.93 / 16.16", "4096x14336 gemv 16.28 / 16.63 / 17.38",
                 "6144x4096 gemv 9.15 / 9.05 / 9.63"):
        assert text in FP8_M1_MEASUREMENT
    assert "FP8_M1_MEASUREMENT" in (fp8_m1_choice.__doc__ or "") and "7.59" in (fp8_m1_choice.__doc__ or "")


def test_the_m_1_cuda_core_rows_are_the_kernels_own_default() -> None:
    assert fp8_m1_choice(4096, 14336, (9, 0)).rows == _fp8.fp8_gemv_rows(1) == 8


@pytest.mark.parametrize("cc", [(8, 9), (10, 0), (12, 0), (12, 1)])
@pytest.mark.parametrize("shape", [(4096, 4096), (14336, 4096), (4096, 14336), (1000, 1040)], ids=str)
def test_off_sm90_the_m_1_rule_keeps_the_cuda_core_kernel(shape, cc) -> None:
    choice = fp8_m1_choice(*shape, cc)
    assert (choice.kernel, choice.rows) == (FP8_GEMV_NAME, 8)
    assert f"M = 1 on cc {cc[0]}.{cc[1]}" in choice.reason and "measured on the H200 only" in choice.reason
    assert select_fp8_kernel((), spec(1, *shape), cc).kernel.name == FP8_GEMV_NAME


@pytest.mark.parametrize("m, n, k, name", [(1, 1000, 1040, FP8_MMA_NAME), (1, 1000, 4112, FP8_GEMV_NAME),
                                           (3, 1000, 1040, FP8_MMA_NAME)])
def test_the_nvrtc_kernels_need_no_library(m, n, k, name) -> None:
    chosen = select_fp8_kernel((), spec(m, n, k), (9, 0)).kernel
    assert chosen.origin == "nvrtc" and chosen.name == name and chosen.kind == "blockwise_scaled"


def test_the_sm90_kernels_take_partial_blocks_of_n_and_k() -> None:
    assert select_fp8_kernel(TABLE, spec(64, 1032, 1040), (9, 0)).kernel.name == PINGPONG
    assert select_fp8_kernel(TABLE, spec(2048, 136, 272), (9, 0)).kernel.name == PINGPONG  # 32 x 2 tiles: one wave
    assert select_fp8_kernel(TABLE, spec(2048, 1032, 272), (9, 0)).kernel.name == COOP


# (M, N) -> the SM90 family on 132 SMs: the measured points of FP8_SM90_RULE_MEASURED where the rule is right, and
# the four where it is not (the faster kernel in the comment).
SM90_RULE = [(32, 14336, PINGPONG), (64, 14336, PINGPONG), (96, 14336, COOP), (128, 14336, COOP),
             (256, 14336, COOP), (512, 14336, COOP), (2048, 14336, COOP), (256, 4096, PINGPONG), (384, 4096, COOP),
             (512, 4096, COOP), (128, 6144, PINGPONG), (192, 6144, COOP), (256, 6144, COOP), (1024, 6144, COOP),
             (192, 14336, COOP),  # ping-pong measured faster: 32.2 against 38.1 µs
             (384, 14336, COOP),  # ping-pong 57.5 against 66.4
             (384, 6144, COOP), (512, 6144, COOP)]  # ping-pong 31.1 against 34.7, 31.4 against 32.4


@pytest.mark.parametrize("m, n, name", SM90_RULE, ids=str)
def test_sm90_takes_ping_pong_where_its_tiles_fit_one_wave(m, n, name) -> None:
    from mircuda.matmul._select import sm90_fp8_family

    family = {info.name: info.family for info in TABLE}[name]
    got, reason = sm90_fp8_family(m, n, 132)
    assert got == family and f"M = {m}" in reason and "132 SMs" in reason
    selection = select_fp8_kernel(TABLE, spec(m, n, 4096), (9, 0), multiprocessors=132)
    assert selection.kernel.name == name and "FP8_SM90_RULE_MEASURED" in selection.reason
    # the wave follows the device: fewer SMs, fewer ping-pong tiles fit
    tiles = -(-m // 64) * -(-n // 128)
    assert sm90_fp8_family(m, n, tiles)[0] == "sm90_blockwise_pingpong"
    assert sm90_fp8_family(m, n, tiles - 1)[0] == "sm90_blockwise_cooperative"
    assert "14336x4096 M = 256: 34.5 against 40.8" in FP8_SM90_RULE_MEASURED


@pytest.mark.parametrize("n, k, dim", [(1000, 4096, "N = 1000"), (4096, 1040, "K = 1040"), (136, 272, "N = 136")])
def test_the_sm120_kernel_refuses_partial_blocks_by_name(n, k, dim) -> None:
    with pytest.raises(mc.BlockwiseFp8Unavailable, match=SM120) as info:
        select_fp8_kernel(TABLE, spec(64, n, k), (12, 0))
    assert dim in str(info.value) and "128" in str(info.value)


def test_sm90_refuses_n_not_a_multiple_of_8_by_name() -> None:
    with pytest.raises(mc.BlockwiseFp8Unavailable, match="N = 777 is not a multiple of 8"):
        select_fp8_kernel(TABLE, spec(64, 777, 1024), (9, 0))


@pytest.mark.parametrize("cc", [(8, 9), (10, 0), (11, 0)])
def test_other_archs_are_refused_by_name_for_m_above_16(cc) -> None:
    with pytest.raises(mc.BlockwiseFp8Unavailable, match=f"compute capability {cc[0]}.{cc[1]}"):
        select_fp8_kernel(TABLE, spec(17), cc)
    assert select_fp8_kernel(TABLE, spec(16), cc).kernel.name == FP8_MMA_NAME


@pytest.mark.parametrize("cc, family", [((9, 0), "sm90_blockwise_pingpong"), ((12, 0), "sm120_blockwise")])
def test_a_library_without_the_arch_kernels_says_to_build_them(cc, family) -> None:
    with pytest.raises(mc.BlockwiseFp8Unavailable, match=f"{family}.*build-cutlass"):
        select_fp8_kernel((), spec(64), cc)


def test_forcing_a_kernel() -> None:
    assert select_fp8_kernel(TABLE, spec(8), (9, 0), COOP).kernel.name == COOP  # CUTLASS for decode
    assert select_fp8_kernel(TABLE, spec(4096), (9, 0), PINGPONG).reason == "forced by the caller"
    assert select_fp8_kernel(TABLE, spec(16), (9, 0), FP8_GEMV_NAME).kernel.origin == "nvrtc"
    assert select_fp8_kernel(TABLE, spec(1), (9, 0), FP8_MMA_NAME).kernel.name == FP8_MMA_NAME
    # forcing the CUDA-core kernel where the M = 1 rule names the tensor-core one (K = 4096)
    forced = select_fp8_kernel(TABLE, spec(1), (9, 0), FP8_GEMV_NAME)
    assert forced.kernel.name == FP8_GEMV_NAME and forced.reason == "forced by the caller"
    for name, m, cc, text in [(FP8_GEMV_NAME, 17, (9, 0), "M <= 16"), (FP8_MMA_NAME, 17, (9, 0), "M <= 16"),
                              (SM120, 64, (9, 0), "one of"),
                              (COOP, 64, (12, 0), "one of"), ("nope", 64, (9, 0), FP8_GEMV_NAME)]:
        with pytest.raises(mc.ContractError, match=text) as info:
            select_fp8_kernel(TABLE, spec(m), cc, name)
        assert info.value.argument == "kernel"
    with pytest.raises(mc.ContractError, match="N = 777") as info:
        select_fp8_kernel(TABLE, spec(64, 777, 1024), (9, 0), COOP)
    assert info.value.argument == "kernel"


EXPERIMENTAL = tuple(scaled(i, name, "sm90_blockwise_experimental", tile, cluster, (90,), (1, 8, 16)) for i, (name, tile, cluster)
                     in enumerate([("sm90_blockwise_coop_128x128x128_c1x1_e4m3_bf16", (128, 128, 128), (1, 1)),
                                   ("sm90_blockwise_coop_128x128x128_c1x2_noc_e4m3_bf16", (128, 128, 128), (1, 2)),
                                   ("sm90_blockwise_coop_128x128x128_c1x2_s8_e4m3_bf16", (128, 128, 128), (1, 2)),
                                   ("sm90_blockwise_coop_128x128x128_c2x1_e4m3_bf16", (128, 128, 128), (2, 1)),
                                   ("sm90_blockwise_coop_128x128x128_c1x2_epi64_e4m3_bf16", (128, 128, 128), (1, 2))]))
"""Experimental variants of the cooperative kernel (``MIRCUDA_FAMILIES=FP8_EXP``), listed before the default
kernels as the library's name order puts some of them (``..._c1x1_...`` < ``..._c1x2_e4m3_...``)."""


@pytest.mark.parametrize("m, n", [(17, 4096), (2048, 4096), (8192, 14336), (300, 1024)])
def test_experimental_variants_are_run_by_name_only(m, n) -> None:
    # a library built with the experimental families chooses as one without them: the variants' family is never the
    # rule's, wherever the library lists them; forcing one by name runs it
    table = EXPERIMENTAL + TABLE
    assert _library.FAMILIES[14] == "sm90_blockwise_experimental"
    chosen = select_fp8_kernel(table, spec(m, n), (9, 0))
    assert chosen.kernel == select_fp8_kernel(TABLE, spec(m, n), (9, 0)).kernel
    assert chosen.kernel.family != "sm90_blockwise_experimental"
    for info in EXPERIMENTAL:
        forced = select_fp8_kernel(table, spec(m, n), (9, 0), info.name)
        assert forced.kernel is info and forced.reason == "forced by the caller"
    with pytest.raises(mc.BlockwiseFp8Unavailable, match="sm90_blockwise_"):  # variants alone: no default kernel
        select_fp8_kernel(EXPERIMENTAL, spec(m, n), (9, 0))


def test_dense_kernels_are_never_chosen() -> None:
    dense = KernelInfo(0, "sm90_coop_128x256x64_c2x1_bf16_bf16", "sm90_cooperative", "bf16", "bf16", (128, 256, 64),
                       (2, 1), 0, 16, False, (90,))
    with pytest.raises(mc.BlockwiseFp8Unavailable):
        select_fp8_kernel((dense,), spec(64), (9, 0))


# -- the plan on a stand-in library ---------------------------------------------------------------
class FakeLibrary(_library.CutlassLibrary):
    """The library's plan entry points, recorded (no GPU)."""

    def __init__(self, workspace: int = 4096, fail_set_workspace: bool = False, pdl: bool | int = True) -> None:
        # no dlopen. pdl: what set_pdl(plan, True) answers (whether the kernel was built to wait), or the status it
        # raises
        self.path = Path("fake.so")
        self._pdl = pdl
        self.kernels = ()
        self.scaled_kernels = TABLE
        self.calls: list[tuple[Any, ...]] = []
        self._workspace = workspace
        self._fail = fail_set_workspace
        self.scaled_execute_address = 0

    def create_scaled_plan(self, kernel: KernelInfo, m: int, n: int, k: int) -> int:
        self.calls.append(("create", kernel.name, m, n, k))
        return 0xF00

    def workspace_bytes(self, plan: int) -> int:
        return self._workspace

    def set_workspace(self, plan: int, address: int, nbytes: int) -> None:
        self.calls.append(("set_workspace", plan, address, nbytes))
        if self._fail:
            raise mc.CutlassError("set_workspace failed", call="set_workspace", status=4, name="CUDA_ERROR")

    def set_pdl(self, plan: int, on: bool) -> bool:
        self.calls.append(("set_pdl", plan, on))
        if not isinstance(self._pdl, bool):
            raise mc.CutlassError("plan_set_pdl failed", call="plan_set_pdl", status=self._pdl,
                                  name=_library.STATUS[self._pdl])
        return self._pdl and on

    def execute_scaled(self, *args: Any) -> None:
        self.calls.append(("execute", *args))

    def destroy(self, plan: int) -> int:
        self.calls.append(("destroy", plan))
        return 0


class FakeBuffer:
    def __init__(self, handle: int, nbytes: int) -> None:
        self.handle, self.nbytes, self.freed, self.free_calls = handle, nbytes, False, 0

    def free(self, stream: Any) -> None:
        self.freed = True
        self.free_calls += 1


class FakePool:
    def __init__(self) -> None:
        self.allocated: list[FakeBuffer] = []

    def allocate(self, dtype: Any, stream: Any, count: int) -> FakeBuffer:
        buf = FakeBuffer(0x9000, count)
        self.allocated.append(buf)
        return buf


def stand_ins(monkeypatch: pytest.MonkeyPatch, cc: tuple[int, int] = (9, 0)) -> tuple[Any, Any, FakePool]:
    from test_matmul_fp8 import stand_ins as base

    from mircuda.runtime import Context

    context, stream = base(monkeypatch, cc)
    pool = FakePool()
    monkeypatch.setattr(Context, "default_memory_pool", lambda self: pool)
    return context, stream, pool


def cutlass_operands(context: Any, m: int, n: int, k: int) -> dict[str, Any]:
    from test_matmul_fp8 import buffer

    kb, nb = -(-k // 128), -(-n // 128)
    # 256 MiB apart: disjoint whatever the shape (an output overlapping an input is refused)
    return {"a": buffer(context, mc.e4m3, m * k, 0x1000_0000), "sa": buffer(context, mc.f32, m * kb, 0x2000_0004),
            "b": buffer(context, mc.e4m3, n * k, 0x3000_0000), "sb": buffer(context, mc.f32, nb * kb, 0x4000_0004),
            "d": buffer(context, mc.bf16, m * n, 0x5000_0000)}


def test_a_cutlass_plan_keeps_its_workspace_and_enqueues_the_library_call(monkeypatch) -> None:
    context, stream, pool = stand_ins(monkeypatch)
    lib = FakeLibrary()
    plan = mc.BlockwiseFp8Plan(context, stream, spec(64, 1032, 1040), library=lib)
    # cc 9.0: the kernel is asked to launch with programmatic dependent launch once its workspace is set
    assert lib.calls == [("create", PINGPONG, 64, 1032, 1040), ("set_workspace", 0xF00, 0x9000, 4096),
                         ("set_pdl", 0xF00, True)]
    assert plan.kernel_name == PINGPONG and plan.workspace_bytes == 4096 and plan.handle == 0xF00
    assert [b.nbytes for b in pool.allocated] == [4096] and plan.sa_shape == (64, 9) and plan.sb_shape == (9, 9)
    text = plan.describe()
    assert PINGPONG in text and "64x128x128" in text and "workspace 4096 B" in text and "FP8_SM90_RULE_MEASURED" in text
    assert plan.programmatic_launch is True and "programmatic dependent launch" in text
    ops = cutlass_operands(context, 64, 1032, 1040)
    plan.execute(stream, ops["a"], ops["sa"], ops["b"], ops["sb"], ops["d"], 0.5, 0.25)
    # (plan, stream, a, b, sfa, sfb, c, d, alpha, beta); c = 0: the library reads C from d.
    assert lib.calls[-1] == ("execute", 0xF00, 0x50, 0x1000_0000, 0x3000_0000, 0x2000_0004, 0x4000_0004, 0, 0x5000_0000, 0.5, 0.25)
    from test_matmul_fp8 import buffer

    c = buffer(context, mc.bf16, 64 * 1032, 0x6000_0000)
    plan.execute(stream, ops["a"], ops["sa"], ops["b"], ops["sb"], ops["d"], c=c)
    assert lib.calls[-1][7:9] == (0x6000_0000, 0x5000_0000)
    plan.close()
    plan.close()
    assert lib.calls[-1] == ("destroy", 0xF00) and sum(x[0] == "destroy" for x in lib.calls) == 1
    assert pool.allocated[0].free_calls == 1 and plan.handle == 0
    with pytest.raises(mc.ClosedResourceError):
        plan.execute(stream, ops["a"], ops["sa"], ops["b"], ops["sb"], ops["d"])


def test_a_cutlass_kernel_built_without_grid_dependency_control_launches_plainly(monkeypatch) -> None:
    # The library answers NOT_IMPLEMENTABLE (set_pdl -> False) for a kernel that does not wait for the previous one:
    # the plan says so and launches as before.
    context, stream, _ = stand_ins(monkeypatch)
    lib = FakeLibrary(pdl=False)
    plan = mc.BlockwiseFp8Plan(context, stream, spec(64, 1032, 1040), library=lib)
    assert lib.calls[-1] == ("set_pdl", 0xF00, True)
    assert plan.programmatic_launch is False and "programmatic dependent launch" not in plan.describe()
    plan.close()


def test_a_library_whose_set_pdl_takes_only_dense_plans_still_makes_the_plan(monkeypatch) -> None:
    # A library built between the dense kernels' PDL and the blockwise kernels' (2026-12-03) exports set_pdl but
    # answers INVALID_ARGUMENT for a blockwise plan: its kernels do not wait, so the plan launches without.
    context, stream, pool = stand_ins(monkeypatch)
    lib = FakeLibrary(pdl=_library.INVALID_ARGUMENT)
    plan = mc.BlockwiseFp8Plan(context, stream, spec(64, 1032, 1040), library=lib)
    assert lib.calls[-1] == ("set_pdl", 0xF00, True) and plan.programmatic_launch is False
    plan.close()
    # any other failure still raises, and the library plan made for it is destroyed, its workspace freed
    lib = FakeLibrary(pdl=4)  # CUDA_ERROR
    with pytest.raises(mc.CutlassError, match="plan_set_pdl") as info:
        mc.BlockwiseFp8Plan(context, stream, spec(64, 1032, 1040), library=lib)
    assert info.value.status == 4 and lib.calls[-1] == ("destroy", 0xF00) and pool.allocated[-1].free_calls == 1


@pytest.mark.parametrize("name, value, argument", [
    ("a", ("address", 0x1000_0008), "a"), ("b", ("address", 0x3000_0004), "b"), ("d", ("address", 0x5000_0002), "d"),
    ("c", ("address", 0x6000_0008), "c"), ("sa", ("address", 0x2000_0002), "sa"), ("sb", ("count", 1), "sb"),
    ("a", ("dtype", mc.u8), "a"), ("d", ("count", 64 * 1032 - 1), "d"), ("c", ("dtype", mc.f16), "c"),
])
def test_the_cutlass_path_checks_operands_before_the_library_is_called(monkeypatch, name, value, argument) -> None:
    from test_matmul_fp8 import buffer

    context, stream, _ = stand_ins(monkeypatch)
    lib = FakeLibrary()
    plan = mc.BlockwiseFp8Plan(context, stream, spec(64, 1032, 1040), library=lib)
    ops = cutlass_operands(context, 64, 1032, 1040)
    ops["c"] = buffer(context, mc.bf16, 64 * 1032, 0x6000_0000)
    field, v = value
    old = ops[name]
    ops[name] = buffer(context, v if field == "dtype" else old._scalar, v if field == "count" else old._count,
                       v if field == "address" else old._ptr)
    before = len(lib.calls)
    with pytest.raises(mc.ContractError) as info:
        plan.execute(stream, ops["a"], ops["sa"], ops["b"], ops["sb"], ops["d"], c=ops["c"])
    assert info.value.argument == argument and len(lib.calls) == before
    if field == "address":
        assert "16 bytes" in str(info.value) or "4 bytes" in str(info.value)


def test_the_cutlass_path_refuses_another_stream_and_bad_scalars(monkeypatch) -> None:
    from mircuda.runtime import Stream

    context, stream, _ = stand_ins(monkeypatch)
    lib = FakeLibrary()
    plan = mc.BlockwiseFp8Plan(context, stream, spec(2048), library=lib)
    assert plan.kernel_name == COOP
    ops = list(cutlass_operands(context, 2048, 4096, 4096).values())
    other = object.__new__(Stream)
    other._context, other._handle = context, 0x60
    with pytest.raises(mc.ContractError) as info:
        plan.execute(other, *ops)
    assert info.value.argument == "stream"
    with pytest.raises(mc.ContractError) as info:
        plan.execute(stream, *ops, "2", 0.0)
    assert info.value.argument == "alpha"
    assert not any(x[0] == "execute" for x in lib.calls)


@pytest.mark.parametrize("m", [64, 2048])  # the ping-pong and the cooperative kernel
def test_the_cutlass_path_refuses_an_output_over_an_input_or_a_shifted_c(monkeypatch, m) -> None:
    # the same refusals as the NVRTC kernel's (test_matmul_fp8.py): the CUTLASS epilogue writes D while
    # the mainloop still reads A, B and the scales of other tiles
    from test_matmul_fp8 import buffer

    context, stream, _ = stand_ins(monkeypatch)
    lib = FakeLibrary()
    plan = mc.BlockwiseFp8Plan(context, stream, spec(m, 1032, 1040), library=lib)
    assert plan.kernel_info.origin == "cutlass"
    ops = cutlass_operands(context, m, 1032, 1040)
    args = [ops[x] for x in ("a", "sa", "b", "sb")]
    for name in ("a", "sa", "b", "sb"):
        d = buffer(context, mc.bf16, m * 1032, (ops[name].handle + 16) & ~15)  # inside it, 16-byte aligned
        with pytest.raises(mc.ContractError) as info:
            plan.execute(stream, *args, d)
        assert info.value.argument == "d" and f"overlapping {name} at" in info.value.received
    shifted = buffer(context, mc.bf16, m * 1032, ops["d"].handle + 16)  # c 8 elements off d: a race
    with pytest.raises(mc.ContractError) as info:
        plan.execute(stream, *args, ops["d"], 1.0, 1.0, c=shifted)
    assert info.value.argument == "d" and "overlapping c at" in info.value.received
    assert not any(x[0] == "execute" for x in lib.calls)
    plan.execute(stream, *args, ops["d"], 1.0, 1.0, c=ops["d"])  # c is d: accumulate in place
    plan.execute(stream, *args, ops["d"], 1.0, 1.0)  # c None: the library reads C from d
    assert [x[7:9] for x in lib.calls if x[0] == "execute"] == [(0x5000_0000, 0x5000_0000), (0, 0x5000_0000)]


def test_nvrtc_only_attributes_are_refused_on_a_cutlass_plan(monkeypatch) -> None:
    context, stream, _ = stand_ins(monkeypatch)
    plan = mc.BlockwiseFp8Plan(context, stream, spec(64), library=FakeLibrary(workspace=0))
    assert plan.workspace_bytes == 0 and "workspace" not in plan.describe()
    for attribute in ("kernel", "launch_config", "rows", "warps"):
        with pytest.raises(mc.ContractError, match="kernel_info"):
            getattr(plan, attribute)
    assert plan.kernel_info.family == "sm90_blockwise_pingpong" and PINGPONG in repr(plan)


def test_construction_arguments_of_the_cutlass_path_are_checked(monkeypatch) -> None:
    context, stream, pool = stand_ins(monkeypatch)
    lib = FakeLibrary()
    for kwargs, argument in (({"warps": 2}, "warps"), ({"kernel": 3}, "kernel"), ({"library": "x"}, "library"),
                             ({"kernel": SM120}, "kernel"), ({"kernel": FP8_GEMV_NAME}, "kernel"),
                             ({"kernel": FP8_MMA_NAME}, "kernel"), ({"rows": 16}, "rows"),
                             ({"pdl_trigger": "early"}, "pdl_trigger"), ({"decode": "integer"}, "decode")):
        with pytest.raises(mc.ContractError) as info:
            mc.BlockwiseFp8Plan(context, stream, spec(64), **{"library": lib, **kwargs})
        assert info.value.argument == argument
    assert not pool.allocated and not any(x[0] == "create" for x in lib.calls)


def test_a_failed_workspace_setup_destroys_the_library_plan_and_frees_the_workspace(monkeypatch) -> None:
    context, stream, pool = stand_ins(monkeypatch)
    lib = FakeLibrary(fail_set_workspace=True)
    with pytest.raises(mc.CutlassError):
        mc.BlockwiseFp8Plan(context, stream, spec(64), library=lib)
    assert lib.calls[-1] == ("destroy", 0xF00) and pool.allocated[0].free_calls == 1


def test_sm120_shapes_outside_its_multiples_are_unavailable_before_the_library_is_called(monkeypatch) -> None:
    context, stream, pool = stand_ins(monkeypatch, cc=(12, 0))
    lib = FakeLibrary()
    with pytest.raises(mc.BlockwiseFp8Unavailable, match="N = 1032"):
        mc.BlockwiseFp8Plan(context, stream, spec(64, 1032, 1024), library=lib)
    assert lib.calls == [] and not pool.allocated
    plan = mc.BlockwiseFp8Plan(context, stream, spec(64, 1024, 1024), library=lib)
    assert plan.kernel_name == SM120


def test_a_forced_cutlass_kernel_runs_decode_and_the_gemv_needs_no_library(monkeypatch) -> None:
    context, stream, _ = stand_ins(monkeypatch)
    plan = mc.BlockwiseFp8Plan(context, stream, spec(4), kernel=COOP, library=FakeLibrary())
    assert plan.kernel_name == COOP and plan.kernel_info.origin == "cutlass"
    monkeypatch.setattr(_library, "load_library", lambda: pytest.fail("the library was loaded"))
    gemv = mc.BlockwiseFp8Plan(context, stream, spec(4), kernel=FP8_GEMV_NAME)
    assert gemv.kernel_info.origin == "nvrtc" and gemv.workspace_bytes == 0 and gemv.handle == 0


def test_the_scaled_executor_calls_the_entry_point_from_njit() -> None:
    import numba

    seen = []
    proto = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_uint64] * 8, ctypes.c_float, ctypes.c_float)
    entry = proto(lambda *args: seen.append(args) or 0)
    execute = scaled_executor(ctypes.cast(entry, ctypes.c_void_p).value, 0xABC0, 16, stream=0x77)

    @numba.njit
    def loop(count, stream, a, sa, b, sb, d):  # type: ignore[no-untyped-def]
        status = 0
        for i in range(count):
            status |= execute(stream, a, sa, b + 256 * i, sb, d, d, 2.0, 0.5)
        return status

    assert loop(2, np.uint64(0x77), 0x1000, 0x2004, 0x3000, 0x4008, 0x5000) == 0
    # (plan, stream, a, b, sfa, sfb, c, d, alpha, beta)
    assert seen == [(0xABC0, 0x77, 0x1000, 0x3000 + 256 * i, 0x2004, 0x4008, 0x5000, 0x5000, 2.0, 0.5)
                    for i in range(2)]
    assert loop(1, 0x78, 0x1000, 0x2004, 0x3000, 0x4008, 0x5000) == WRONG_STREAM
    for bad in ((0x1008, 0x2004, 0x3000, 0x4008, 0x5000), (0x1000, 0x2002, 0x3000, 0x4008, 0x5000),
                (0x1000, 0x2004, 0x3000, 0x4008, 0x5002)):
        assert loop(1, 0x77, *bad) == MISALIGNED
    assert len(seen) == 2


def test_the_plan_uses_the_library_numba_entry_point(monkeypatch) -> None:
    import mircuda.matmul._fp8_cutlass as fc

    context, stream, _ = stand_ins(monkeypatch)
    lib = FakeLibrary()
    lib.scaled_execute_address = 0x1234
    made: list[Any] = []
    monkeypatch.setattr(fc, "scaled_executor", lambda *a, **kw: made.append((a, kw)) or SimpleNamespace())
    plan = mc.BlockwiseFp8Plan(context, stream, spec(64), library=lib)
    assert plan.numba_execute is plan.numba_execute
    assert made == [((0x1234, 0xF00, 16), {"stream": 0x50})]


def test_the_plan_module_exports_the_selection_name() -> None:
    assert _fp8.BlockwiseFp8Unavailable.__mro__[1] is mc.UnsupportedPlatform


# -- odd input to the SM90 rule and the selection (review of 2026-12-02) ---------------------------
NOT_AN_SM_COUNT = [0, -1, -132, True, False, 132.0, 132.5, np.float64(132), "132", None, np.bool_(True)]
"""Each once picked a kernel silently (0, negatives and False: always the cooperative one; True: one SM; a float
compared as a count) or failed with a TypeError: now a ContractError naming ``multiprocessors``."""


@pytest.mark.parametrize("multiprocessors", NOT_AN_SM_COUNT, ids=repr)
def test_an_sm_count_that_is_not_a_positive_int_is_refused_by_name(multiprocessors) -> None:
    from mircuda.matmul._select import select_kernel, sm90_fp8_family

    with pytest.raises(mc.ContractError) as info:
        sm90_fp8_family(64, 4096, multiprocessors)
    assert info.value.argument == "multiprocessors" and repr(multiprocessors) in str(info.value)
    with pytest.raises(mc.ContractError) as info:
        select_fp8_kernel(TABLE, spec(64), (9, 0), multiprocessors=multiprocessors)
    assert info.value.argument == "multiprocessors"
    with pytest.raises(mc.ContractError) as info:  # the dense plans' rule takes the same count
        select_kernel((), spec(64), "bf16", "bf16", (9, 0), multiprocessors)
    assert info.value.argument == "multiprocessors"


@pytest.mark.parametrize("count", [np.int64(112), np.int32(112), np.uint16(112), 112])
def test_a_numpy_sm_count_is_the_int(count) -> None:
    from mircuda.matmul._select import sm90_fp8_family

    # 14336x4096 at M = 64: 112 ping-pong tiles, exactly one wave of 112 SMs; one SM fewer and they do not fit
    assert sm90_fp8_family(64, 14336, count) == sm90_fp8_family(64, 14336, 112)
    assert sm90_fp8_family(64, 14336, count)[0] == "sm90_blockwise_pingpong" and "112 SMs" in \
        sm90_fp8_family(64, 14336, count)[1]
    assert select_fp8_kernel(TABLE, spec(64, 14336), (9, 0), multiprocessors=count).kernel.name == PINGPONG
    assert select_fp8_kernel(TABLE, spec(64, 14336), (9, 0), multiprocessors=count - 1).kernel.name == COOP


@pytest.mark.parametrize("m, n, sms, name", [
    (17, 4104, 33, PINGPONG), (17, 4104, 32, COOP),  # N = 4104: 33 N tiles, the last one partial
    (1088, 1024, 136, PINGPONG), (1089, 1024, 136, COOP),  # 17 x 8 tiles exactly fill 136 SMs; 18 x 8 do not
    (17, 1032, 9, PINGPONG), (17, 1032, 8, COOP), (64, 8, 1, PINGPONG), (65, 8, 1, COOP),
    (64, 4096, 10**12, PINGPONG),  # a huge count is a count: every tile fits
])
def test_the_wave_boundary_at_the_edges(m, n, sms, name) -> None:
    assert select_fp8_kernel(TABLE, spec(m, n, 1024), (9, 0), multiprocessors=sms).kernel.name == name


@pytest.mark.parametrize("m, n, argument", [(16, 4096, "m"), (1, 4096, "m"), (0, 4096, "m"), (-64, 4096, "m"),
                                            (True, 4096, "m"), (64.0, 4096, "m"), (64, 0, "n"), (64, -128, "n"),
                                            (64, 4096.0, "n"), (64, None, "n")])
def test_the_sm90_rule_refuses_a_shape_it_does_not_cover_by_name(m, n, argument) -> None:
    from mircuda.matmul._select import sm90_fp8_family

    # formerly "M = 0 > 16: the 0 ... tiles fit" and the ping-pong kernel
    with pytest.raises(mc.ContractError) as info:
        sm90_fp8_family(m, n, 132)
    assert info.value.argument == argument


@pytest.mark.parametrize("kwargs, argument", [
    ({"kernels": None}, "kernels"), ({"kernels": "sm90"}, "kernels"), ({"kernels": (None,)}, "kernels"),
    ({"spec": (64, 4096, 4096)}, "spec"), ({"compute_capability": "9.0"}, "compute_capability"),
    ({"compute_capability": (9,)}, "compute_capability"), ({"compute_capability": (9.0, 0)}, "compute_capability"),
    ({"compute_capability": (True, 0)}, "compute_capability"), ({"compute_capability": None}, "compute_capability"),
])
def test_select_fp8_kernel_names_a_nonsense_argument(kwargs, argument) -> None:
    # formerly a TypeError or AttributeError from inside the rule
    args = {"kernels": TABLE, "spec": spec(64), "compute_capability": (9, 0), **kwargs}
    with pytest.raises(mc.ContractError) as info:
        select_fp8_kernel(**args)
    assert info.value.argument == argument


def test_a_compute_capability_list_or_numpy_pair_is_the_tuple() -> None:
    for cc in ([9, 0], (np.int64(9), np.int64(0))):
        assert select_fp8_kernel(TABLE, spec(64), cc).kernel.name == PINGPONG
        with pytest.raises(mc.ContractError, match="cc 9.0"):
            select_fp8_kernel(TABLE, spec(64), cc, SM120)


def test_the_ping_pong_reason_says_what_the_cooperative_tiles_would_do() -> None:
    from mircuda.matmul._select import sm90_fp8_family

    # M <= 64: one row of tiles either way, as many cooperative tiles as ping-pong ones: none would be idler
    for m in (17, 64):
        reason = sm90_fp8_family(m, 4096, 132)[1]
        assert "32 64x128x128 ping-pong tiles" in reason and "idle" not in reason and "pad M" in reason
    reason = sm90_fp8_family(65, 4096, 132)[1]  # 64 ping-pong tiles against 32 cooperative ones
    assert "64 64x128x128" in reason and "the 32 128-row cooperative tiles would leave more SMs idle" in reason


@pytest.mark.parametrize("count, name", [(112, PINGPONG), (111, COOP)])
def test_the_plan_follows_the_devices_sm_count(monkeypatch, count, name) -> None:
    from mircuda.runtime import Context

    context, stream, _ = stand_ins(monkeypatch)
    monkeypatch.setattr(Context, "device_info", lambda self: SimpleNamespace(
        compute_capability=(9, 0), name="stand-in", arch="sm_90", multiprocessor_count=count,
        supports_programmatic_launch=True))
    plan = mc.BlockwiseFp8Plan(context, stream, spec(64, 14336), library=FakeLibrary())
    assert plan.kernel_name == name and f"{count} SMs" in plan.describe()


@pytest.mark.parametrize("count", [0, -1, None])
def test_a_device_without_an_sm_count_builds_no_plan(monkeypatch, count) -> None:
    from mircuda.runtime import Context

    context, stream, pool = stand_ins(monkeypatch)
    monkeypatch.setattr(Context, "device_info", lambda self: SimpleNamespace(
        compute_capability=(9, 0), name="stand-in", arch="sm_90", multiprocessor_count=count,
        supports_programmatic_launch=True))
    lib = FakeLibrary()
    with pytest.raises(mc.ContractError) as info:
        mc.BlockwiseFp8Plan(context, stream, spec(64), library=lib)
    assert info.value.argument == "multiprocessors" and lib.calls == [] and not pool.allocated


@pytest.mark.parametrize("kernels, spec_, cc, argument", [
    ("sm90", spec(64), (9, 0), "kernels"), ([None], spec(64), (9, 0), "kernels"), (5, spec(64), (9, 0), "kernels"),
    ((), (64, 4096, 4096), (9, 0), "spec"), ((), None, (9, 0), "spec"),
    ((), spec(64), 9, "compute_capability"), ((), spec(64), (9,), "compute_capability"),
    ((), spec(64), ("9", "0"), "compute_capability"), ((), spec(64), (9, -1), "compute_capability")], ids=str)
def test_the_dense_selection_names_odd_arguments_as_the_fp8_one_does(kernels, spec_, cc, argument) -> None:
    """select_kernel (the dense plans' rule) raised an AttributeError or TypeError for a spec, kernel table or
    compute capability that is none; it now checks them as select_fp8_kernel does, by name, before choosing."""
    from mircuda.matmul._select import select_kernel

    with pytest.raises(mc.ContractError) as info:
        select_kernel(kernels, spec_, "bf16", "bf16", cc, 132)
    assert info.value.argument == argument
    with pytest.raises(mc.ContractError) as info:
        select_fp8_kernel(kernels, spec_, cc)
    assert info.value.argument == argument
    # a list and numpy integers are the pair of ints (M = 8: the batched GEMV, no library needed)
    from mircuda.matmul._gemv import gemv_kernels

    table = tuple(gemv_kernels())
    assert select_kernel(table, spec(8), "bf16", "bf16", [np.int64(9), 0], 132).kernel.name == \
        select_kernel(table, spec(8), "bf16", "bf16", (9, 0), 132).kernel.name
