"""``dense-vector-profile --sweep`` and ``--shapes`` without a GPU: the knob grid, that the default knobs compile
to exactly the plan's kernels, that every swept module compiles for sm_90a, and the goal lines."""

from __future__ import annotations

import argparse
import warnings

import pytest

import mircuda as mc
from mircuda.cli import _dense_vector_profile as dv
from mircuda.cli import _parser
from mircuda.cli._matmul_bench import row
from mircuda.cli._vector_sweep import Knobs, knob_grid
from mircuda.matmul._vector import dense_vector_source, vector_options


def test_the_grid_covers_every_knob_once() -> None:
    grid = knob_grid()
    assert len(grid) == 48 and len(set(grid)) == 48
    assert {(g.rows, g.warps) for g in grid} == {(r, w) for r in (8, 16) for w in (1, 2, 4, 8)}
    assert {g.unroll for g in grid} == {1, 2} and {g.trigger for g in grid} == {"early", "late"}
    assert {g.min_blocks for g in grid if g.rows == 8} == {1, 2} and {g.min_blocks for g in grid if g.rows == 16} == {1}
    assert len({tuple(sorted(g.defines().items())) for g in grid}) == 12  # modules to compile
    for rows, warps, unroll in ((8, 1, 1), (16, 4, 1), (8, 4, 2)):  # exactly one configuration is each plan choice
        assert sum(g.is_default_for(rows, warps, unroll) for g in grid) == 1


def test_the_two_chunk_form_is_the_choice_marked_where_the_plan_takes_it() -> None:
    # is_default_for knew only unroll 1: where DenseVectorPlan runs the two-chunk form (takes_two_chunks) the sweep
    # marked 'r8 w4 u1 late mb2' as its choice (dense_vector_two_chunks.json, after_change_sweep) and not the
    # configuration the plan compiles, 'r8 w4 u2 early mb1'
    (two,) = [g for g in knob_grid() if g.is_default_for(8, 4, 2)]
    assert two.label == "dense_vector r8 w4 u2 early mb1"
    assert {name: str(value) for name, value in two.defines().items()} == dict(vector_options(8, unroll=2).defines)
    assert not Knobs(8, 4, 1, "late", 2).is_default_for(8, 4, 2) and Knobs(8, 4, 1, "late", 2).is_default_for(8, 4)
    grid = knob_grid()
    for choice in ((8, 1), (16, 4), (8, 4), (8, 4, 1), (8, 4, 2)):  # exactly one configuration is each plan choice
        assert sum(g.is_default_for(*choice) for g in grid) == 1
    # the two-chunk form (takes_two_chunks) is not the one-chunk 8 x 4 of the same rows and warps
    assert [g.label for g in grid if g.is_default_for(8, 4, 2)] == ["dense_vector r8 w4 u2 early mb1"]
    assert [g.label for g in grid if g.is_default_for(8, 4)] == ["dense_vector r8 w4 u1 late mb2"]


@pytest.mark.slow
@pytest.mark.parametrize("rows, unroll", [(8, 1), (16, 1), (8, 2)])
def test_the_default_knobs_are_the_plans_kernel(rows, unroll) -> None:
    """The macros the sweep adds (unroll 1, the row count's trigger and min blocks; the two-chunk form's own)
    change nothing: the same PTX as the plan's module."""
    (default,) = [g for g in knob_grid() if g.is_default_for(rows, 4, unroll)]
    plan = mc.compile_program(dense_vector_source(), "sm_90a",
                              mc.CompileOptions(defines=vector_options(rows, unroll=unroll).defines, output="ptx")).image
    swept = mc.compile_program(dense_vector_source(), "sm_90a",
                               mc.CompileOptions(defines=default.defines(), output="ptx")).image
    assert swept == plan


@pytest.mark.slow
def test_every_swept_module_compiles_for_sm_90a() -> None:
    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for knobs in knob_grid():
            key = tuple(sorted(knobs.defines().items()))
            if key in seen:
                continue
            seen.add(key)
            image = mc.compile_program(dense_vector_source(), "sm_90a", mc.CompileOptions(defines=knobs.defines(),
                                                                                            output="ptx")).image
            assert b"dense_vector_bf16_bf16_v16" in image, knobs
    assert len(seen) == 12


def test_shapes_and_sweep_flags() -> None:
    args = _parser().parse_args(["dense-vector-profile"])
    assert args.shapes == dv.VECTOR_SHAPES and args.sweep is False
    args = _parser().parse_args(["dense-vector-profile", "--sweep", "--shapes", "4096x4096, 14336X4096"])
    assert args.shapes == ((4096, 4096), (14336, 4096)) and args.sweep is True
    for bad in ("", "4096", "0x4096", "4096x4096x1", "ax1"):
        with pytest.raises(argparse.ArgumentTypeError, match="NxK"):
            dv.shape_values(bad)


def test_goal_lines() -> None:
    rows = [row("DenseVectorPlan", "bf16->bf16", 1, 4096, 4096, 10.27, 2, 2),
            row("dense_vector r16 w4 u2 early mb1", "bf16->bf16", 1, 4096, 4096, 8.9, 2, 2),
            row("dense_vector r8 w4 u1 late mb2", "bf16->bf16", 1, 4096, 4096, 11.0, 2, 2),
            row("DenseVectorPlan", "bf16->bf16", 1, 14336, 4096, 26.5, 2, 2),
            row("DenseVectorPlan", "f16->f16", 1, 4096, 14336, 20.0, 2, 2)]
    assert dv.goal_lines(rows) == [
        "4096x4096 bf16: DenseVectorPlan 10.27 µs (goal <= 9.0: NOT met); fastest swept dense_vector r16 w4 u2 early "
        "mb1: 8.90 µs (met)",
        "14336x4096 bf16: DenseVectorPlan 26.50 µs (goal <= 27.0: met)"]


def test_knob_labels_and_defines() -> None:
    k = Knobs(8, 4, 2, "early", 1)
    assert k.label == "dense_vector r8 w4 u2 early mb1"
    assert k.defines() == {"DENSE_VECTOR_ROWS": 8, "DENSE_VECTOR_UNROLL": 2, "MIRCUDA_PDL_TRIGGER_LATE": 0,
                           "DENSE_VECTOR_MIN_BLOCKS": 1}


# -- sweep_rows on a stand-in device (numpy buffers; the kernel computes W x in numpy) ---------------------------

class _Attrs:
    registers, local_bytes = 121, 0


class _Kernel:
    attributes = _Attrs()

    def __init__(self, defines, broken) -> None:
        self.defines, self.broken = dict(defines), broken

    def launch(self, stream, config, y, w, x, alpha, beta, n, k) -> None:
        import numpy as np

        if self.broken(self.defines):
            return  # writes nothing: the poisoned y must show it
        y.a[:] = (w.a.reshape(n, k).astype(np.float64) @ x.a.astype(np.float64)).astype(y.a.dtype)


def _stand_in_sweep(monkeypatch, broken=lambda defines: False, choice=(8, 2, 1)):  # type: ignore[no-untyped-def]
    import numpy as np

    import mircuda.matmul._vector as vector
    from mircuda.cli._vector_sweep import sweep_rows

    class Buf:
        def __init__(self, a) -> None:
            self.a = a

        def __len__(self) -> int:
            return len(self.a)

        def write_prefix(self, v) -> None:
            self.a[:len(v)] = v

        def close(self) -> None:
            pass

    class Module:
        def __init__(self, defines) -> None:
            self.defines = defines

        def kernel(self, contract):  # type: ignore[no-untyped-def]
            assert contract.symbol == "dense_vector_bf16_bf16_v16"
            return _Kernel(self.defines, broken)

    class Compiler:
        def compile(self, source, options):  # type: ignore[no-untyped-def]
            return Module((name, int(value)) for name, value in options.defines)

    class Info:
        supports_programmatic_launch = True

    class Context:
        def device_info(self):  # type: ignore[no-untyped-def]
            return Info()

        def allocate_pinned(self, dtype, n):  # type: ignore[no-untyped-def]
            return Buf(np.zeros(n, dtype=dtype))

    class Stream:
        def copy_to_device(self, host, dev) -> None:
            dev.a[:] = host.a

        def synchronize(self) -> None:
            pass

    class Timer:
        def median(self, enqueue, calls, repeats) -> float:
            for i in range(calls):
                enqueue(i)
            return 5.0

    monkeypatch.setattr(vector, "shared_compiler", lambda context: Compiler())
    monkeypatch.setattr(vector, "blocks_per_sm", lambda context, kernel, warps: 0 if warps == 8 and
                        kernel.defines["DENSE_VECTOR_ROWS"] == 16 and kernel.defines["DENSE_VECTOR_UNROLL"] == 2 else 1)
    rng = np.random.default_rng(3)
    n, k = 40, 64
    w = rng.standard_normal(n * k).astype(mc.bf16)
    x = rng.standard_normal(k).astype(mc.bf16)
    y = Buf(np.zeros(n, dtype=mc.bf16))
    want = w.reshape(n, k).astype(np.float64) @ x.astype(np.float64)

    def check() -> float:
        return float(np.linalg.norm(y.a.astype(np.float64) - want) / np.linalg.norm(want))

    failures: list[str] = []
    rows = sweep_rows(Context(), Stream(), Timer(), Buf(x), y, [Buf(w), Buf(w)], mc.bf16, mc.bf16, n, k, 3, 1, choice,
                      check, lambda path, us, note: (path, us, note), failures)
    return rows, failures


def test_the_sweep_times_every_configuration_that_fits(monkeypatch) -> None:
    rows, failures = _stand_in_sweep(monkeypatch)
    assert failures == [] and len(rows) == 48 - 2  # 16 rows, unroll 2, 8 warps: no block fits (stand-in)
    marked = [r for r in rows if "(DenseVectorPlan's choice)" in r[2]]
    assert [r[0] for r in marked] == ["dense_vector r8 w2 u1 late mb2"]
    assert rows[0][2].startswith("5 blocks, 1 blocks/SM, 121 regs, 0 B local")


@pytest.mark.parametrize("choice, marked", [((8, 4, 1), "dense_vector r8 w4 u1 late mb2"),
                                             ((8, 4, 2), "dense_vector r8 w4 u2 early mb1"),
                                             ((16, 4, 1), "dense_vector r16 w4 u1 early mb1")])
def test_the_plans_choice_is_marked_in_its_form(monkeypatch, choice, marked) -> None:
    # DenseVectorPlan's two-chunk default (8 rows x 4 warps, unroll 2, early trigger, min blocks 1) was marked on the
    # one-chunk r8 w4 u1 late mb2 row, a different kernel (dense_vector_two_chunks.json: 11.09 against the plan's 9.81 us)
    rows, failures = _stand_in_sweep(monkeypatch, choice=choice)
    assert failures == [] and [r[0] for r in rows if "(DenseVectorPlan's choice)" in r[2]] == [marked]


def test_a_configuration_that_writes_nothing_fails(monkeypatch) -> None:
    rows, failures = _stand_in_sweep(monkeypatch, lambda d: d["DENSE_VECTOR_UNROLL"] == 2 and d["DENSE_VECTOR_ROWS"] == 8
                                     and d["MIRCUDA_PDL_TRIGGER_LATE"] == 0 and d["DENSE_VECTOR_MIN_BLOCKS"] == 1)
    assert len(failures) == 4 and all(f.startswith("dense_vector r8 w") and "u2 early mb1 40x64: relative error nan"
                                      in f for f in failures)
    assert len(rows) == 46  # a wrong configuration is still timed and shown
