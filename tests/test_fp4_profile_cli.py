"""``python -m mircuda fp4-profile`` without a GPU: its flags and refusals, the host operands (bit for bit
against the NVFP4 / FP8 references), the rows' arithmetic and goals, and the table and JSON of a run
with a stand-in for the GPU measurements."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from gpu_probe import gpu_unavailable_reason

import mircuda as mc
from mircuda.cli import _fp4_profile as fp
from mircuda.cli import _parser, main
from mircuda.errors import ContractError
from mircuda.matmul import fp4_dequantize_reference


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return _parser().parse_args(["fp4-profile", *argv])


def test_the_command_is_listed_and_its_defaults_are_the_issue_grid(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0 and "    fp4-profile " in capsys.readouterr().out
    args = parse()
    assert args.func is fp.fp4_profile and args.activation == "fp4"
    assert args.json == "benchmarks/results/fp4_profile.json"
    assert fp.grid(args) == ((1, 2, 4, 8, 16, 32, 128, 512, 2048, 8192),
                             ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)), 20, 7)


def test_quick_is_a_smaller_grid_and_each_flag_still_wins() -> None:
    assert fp.grid(parse("--quick")) == ((1, 16, 2048), ((4096, 4096), (14336, 4096)), 10, 5)
    assert fp.grid(parse("--quick", "--m", "1,8", "--repeats", "3")) == ((1, 8), ((4096, 4096), (14336, 4096)), 10, 3)
    assert fp.grid(parse("--shapes", "256x512", "--calls", "4")) == (fp.FP4_M, ((256, 512),), 4, 7)
    assert parse("--activation", "bf16").activation == "bf16"


@pytest.mark.parametrize("flags, head", [
    (["--shapes", "4096x4104"], "--shapes: expected NxK pairs with K a multiple of 16 (one UE4M3 scale per 16 "
                                "K-elements), received 4096x4104"),
    # at or above the plans' dimension limit (2**31 - 2**16), checked while parsing as fp8-profile's
    (["--shapes", "99999999999999999999x4096"], "--shapes: expected NxK pairs of dimensions below 2147418112"),
    (["--shapes", "4096x2147483648"], "--shapes: expected NxK pairs of dimensions below 2147418112 (the kernels index "
                                      "with 32-bit ints), received 4096x2147483648"),
    (["--m", "8,2147418112"], "--m: expected a dimension below 2147418112"),
])
def test_bad_values_are_refused_by_flag_while_parsing(flags, head, capsys) -> None:
    """They were refused after parsing, in another form, with the library's argument name ('m', 'n') inside."""
    with pytest.raises(SystemExit) as info:
        main(["fp4-profile", *flags])
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"error: python -m mircuda fp4-profile: argument {head}"), err
    assert "argument 'm'" not in err and "argument 'n'" not in err


def test_grid_refuses_shapes_and_m_given_without_the_parser() -> None:
    args = parse()
    args.shapes, args.m = ((4096, 4104),), (1,)
    with pytest.raises(ContractError, match="K a multiple of 16"):
        fp.grid(args)
    args.shapes, args.m = ((4096, 4096),), (2147418112,)
    with pytest.raises(ContractError) as info:
        fp.grid(args)
    assert info.value.argument == "--m" and info.value.expected.startswith("M values the plans take (a dimension")


@pytest.mark.parametrize("flag", ["--calls", "--repeats"])
def test_grid_refuses_counts_below_one_given_without_the_parser(flag) -> None:
    args = parse()
    setattr(args, flag[2:], 0)
    with pytest.raises(ContractError, match=f"'{flag}': expected a positive integer, received 0"):
        fp.grid(args)


@pytest.mark.parametrize("argv", [["--m", "0"], ["--shapes", "4096"], ["--m", "x"], ["--activation", "fp8"],
                                  # int() would take the last two: ten and a full-width two
                                  ["--calls", "0"], ["--repeats", "-2"], ["--calls", "1_0"], ["--repeats", "\uff12"]])
def test_bad_flags_exit_2_with_one_line(argv, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["fp4-profile", *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "usage" not in err
    assert err.startswith("error: python -m mircuda fp4-profile: argument --") and len(err.splitlines()) == 1


def test_json_in_a_missing_directory_is_refused_first(tmp_path: Path, capsys) -> None:
    target = tmp_path / "missing" / "x.json"
    assert main(["fp4-profile", "--json", str(target)]) == 2
    assert capsys.readouterr().err.startswith("error: ContractError: --json: expected a file path")


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a usable driver")
def test_without_a_gpu_it_fails_cleanly() -> None:
    out = subprocess.run([sys.executable, "-m", "mircuda", "fp4-profile", "--m", "1", "--shapes", "256x256"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "error:" in out.stderr and "Traceback" not in out.stderr


# -- host operands --------------------------------------------------------------------------------------
def test_the_bf16_decode_is_the_nvfp4_reference_for_every_code_and_scale_byte() -> None:
    packed = np.arange(256, dtype=np.uint8).repeat(8).reshape(256, 8)  # every code pair under...
    scales = np.arange(256, dtype=np.uint8).reshape(256, 1)  # ...every scale byte (NaN at 0x7F/0xFF)
    got = fp.bf16_to_f64(fp.dequantize_bf16(packed, scales))
    np.testing.assert_array_equal(got, fp4_dequantize_reference(packed, scales, 256, 16))


def test_random_fp4_operands_decode_like_the_reference() -> None:
    rng = np.random.default_rng(5)
    packed, scales = fp.random_fp4(rng, 37, 1040)
    assert packed.shape == (37, 520) and scales.shape == (37, 65)
    assert scales.min() >= fp.SCALE_BYTES[0] and scales.max() < fp.SCALE_BYTES[1]
    values = fp.dequantize_bf16(packed, scales)
    assert values.dtype == mc.bf16 and values.shape == (37, 1040)
    np.testing.assert_array_equal(values.astype(np.float64), fp4_dequantize_reference(packed, scales, 37, 1040))


def test_random_fp8_operands_and_their_values() -> None:
    rng = np.random.default_rng(6)
    codes, scales = fp.random_fp8(rng, 130, 300, 128)
    assert codes.dtype == mc.e4m3 and codes.shape == (130, 300) and scales.shape == (2, 3)
    c = codes.astype(np.float64)
    assert np.isfinite(c).all() and np.abs(c).max() <= 1.875
    values = fp.fp8_values(codes, scales, 128)
    assert values[129, 299] == c[129, 299] * float(scales[1, 2])
    assert values[5, 130] == c[5, 130] * float(scales[0, 1])
    a, sa = fp.random_fp8(rng, 3, 300, 1)
    assert sa.shape == (3, 3)
    assert fp.fp8_values(a, sa, 1)[2, 257] == float(a[2, 257]) * float(sa[2, 2])


# -- rows, goals, table -----------------------------------------------------------------------------------
def test_rates_ratios_and_the_m1_goal() -> None:
    r = fp.fp4_row(1, 14336, 4096, fp4_us=10.0, fp4_path="vector", bf16_us=28.0)
    assert fp.weight_bytes(14336, 4096) == 14336 * 2048 + 14336 * 256
    assert r.fp4_tbps == pytest.approx(fp.weight_bytes(14336, 4096) / 10e-6 / 1e12)
    assert r.time_ratio == pytest.approx(10 / 28) and r.tflops_ratio == pytest.approx(2.8)
    assert (r.vector_goal, r.vector_met) == ("<= 10.5 µs", True)
    assert (r.ratio_goal, r.ratio_met) == ("fp4/bf16 <= 0.5", True)
    slow = fp.fp4_row(1, 4096, 4096, fp4_us=5.5, bf16_us=10.0)
    assert (slow.vector_goal, slow.vector_met, slow.ratio_met) == ("<= 5 µs", False, False)
    assert fp.fp4_row(1, 6144, 4096, fp4_us=5.0).vector_goal is None  # the issue sets no limit there


def test_the_prefill_goal_is_the_portable_paths_only() -> None:
    portable = fp.fp4_row(2048, 4096, 4096, fp4_us=120.0, fp4_path="decode+dense", bf16_us=90.0)
    assert portable.fp4_tflops == pytest.approx(2 * 2048 * 4096 * 4096 / 120e-6 / 1e12)
    assert portable.tflops_ratio == pytest.approx(0.75)
    assert (portable.ratio_goal, portable.ratio_met) == ("TFLOP/s >= 0.8x", False)
    assert fp.fp4_row(2048, 4096, 4096, fp4_us=80.0, fp4_path="cutlass", bf16_us=90.0).ratio_goal is None
    assert fp.fp4_row(512, 4096, 4096, fp4_us=30.0, fp4_path="decode+dense", bf16_us=25.0).ratio_goal is None
    assert fp.fp4_row(16, 4096, 4096, fp4_us=8.0, fp4_path="gemv").ratio_goal is None  # no BF16 time


def test_goals_name_the_worst_case() -> None:
    rows = [fp.fp4_row(1, 4096, 4096, fp4_us=4.0, bf16_us=10.0), fp.fp4_row(8, 4096, 4096, fp4_us=6.0, bf16_us=10.0),
            fp.fp4_row(2048, 4096, 4096, fp4_us=100.0, fp4_path="decode+dense", bf16_us=90.0),
            fp.fp4_row(8192, 4096, 4096, fp4_us=400.0, fp4_path="decode+dense", bf16_us=360.0)]
    lines = fp.goals(rows)
    assert lines[0].startswith("M = 1 4096x4096: 4.00 µs") and lines[0].endswith("goal <= 5 µs: met")
    assert lines[1] == "M <= 16 FP4/BF16 time: worst 0.60 (M=8 4096x4096); 1/2 <= 0.5"
    assert lines[2] == "M >= 2048 portable FP4/BF16 TFLOP/s: worst 0.90 (M=2048 4096x4096); 2/2 >= 0.8"



def test_goals_under_static_weights_name_the_promise() -> None:
    # fp4-profile --static-weights: a goal met only with the promise must not read like the default's
    rows = [fp.fp4_row(1, 4096, 4096, fp4_us=4.0, bf16_us=10.0), fp.fp4_row(8, 4096, 4096, fp4_us=6.0, bf16_us=10.0)]
    plain, promised = fp.goals(rows), fp.goals(rows, static_weights=True)
    assert promised == [f"{line} (static_weights=True)" for line in plain]
    assert promised[0].endswith("goal <= 5 µs: met (static_weights=True)")


class _FakeBench:
    """A stand-in for the GPU bench of one shape: made-up times, and a record of what was asked."""

    made: ClassVar[list[tuple[int, int]]] = []
    closed: ClassVar[list[tuple[int, int]]] = []

    def __init__(self, n: int, k: int) -> None:
        self.n, self.k = n, k
        _FakeBench.made.append((n, k))

    def __call__(self, m: int) -> fp.Fp4Row:
        path = "vector" if m == 1 else "gemv" if m <= 16 else "decode+dense"
        return fp.fp4_row(m, self.n, self.k, fp4_us=1.0 + m / 10, fp4_path=path, bf16_us=2.0 + m / 20,
                          cublas_us=2.0 + m / 20, fp8_us=None if m > 16 else 1.5)

    def close(self) -> None:
        _FakeBench.closed.append((self.n, self.k))


def test_a_run_gives_one_row_per_shape_and_m_and_closes_each_shape() -> None:
    _FakeBench.made, _FakeBench.closed = [], []
    shapes, ms = ((4096, 4096), (14336, 4096)), (1, 16, 2048)
    rows = fp.collect(shapes, ms, _FakeBench)
    assert [(r.n, r.k, r.m) for r in rows] == [(n, k, m) for n, k in shapes for m in ms]
    assert _FakeBench.made == _FakeBench.closed == list(shapes)
    t = fp.table(rows, "title")
    assert len(t) == 6 and [c.header for c in t.columns][:9] == ["N", "K", "M", "FP4 µs", "BF16 µs", "cuBLAS µs",
                                                                  "FP8 µs", "dense f32", "FP4 rate"]
    text = str(t).splitlines()
    assert text[0] == "title" and len(text) == 8
    assert t.column("rate")[0].endswith("TB/s") and t.column("rate")[2].endswith("TFLOP/s")
    assert t.column("vector")[0] == "<= 5 µs: pass" and t.column("vector")[1] is None
    assert t.column("ratio")[1] == "fp4/bf16 <= 0.5: miss"  # 2.6 / 2.8
    assert t.column("ratio")[2].startswith("TFLOP/s >= 0.8x: ")
    assert t.column("fp8_us")[2] is None and text[4].split()[6] == "-"  # not measured: shown as "-"
    json.dumps([dataclasses.asdict(r) for r in rows])  # the JSON rows are plain values


def test_a_shape_that_fails_is_still_closed() -> None:
    class Broken(_FakeBench):
        def __call__(self, m: int) -> fp.Fp4Row:
            raise ContractError("m", "a good M", str(m))

    _FakeBench.made, _FakeBench.closed = [], []
    with pytest.raises(ContractError):
        fp.collect(((256, 512),), (1,), Broken)
    assert _FakeBench.closed == [(256, 512)]


# -- the GPU bench's wiring, on numpy stand-ins of the session and the plans ---------------------------------
class _Buffer:
    def __init__(self, data: np.ndarray) -> None:
        self.data, self.freed = data, False

    @property
    def scalar_type(self):  # type: ignore[no-untyped-def]
        return self.data.dtype

    def __len__(self) -> int:
        return len(self.data)

    def free(self, stream) -> None:  # type: ignore[no-untyped-def]
        assert not self.freed, "freed twice"
        self.freed = True


class _Stream:
    def upload(self, pool, host):  # type: ignore[no-untyped-def]
        return pool.keep(_Buffer(np.ascontiguousarray(host).ravel().copy()))

    def memset(self, buf, byte) -> None:  # type: ignore[no-untyped-def]
        buf.data.view(np.uint8)[:] = byte

    def copy_device_range(self, src, so, dst, do, count) -> None:  # type: ignore[no-untyped-def]
        dst.data[do:do + count] = src.data[so:so + count]

    def download(self, buf):  # type: ignore[no-untyped-def]
        return buf.data.copy()


class _Pool:
    def __init__(self) -> None:
        self.buffers: list[_Buffer] = []

    def keep(self, buf: _Buffer) -> _Buffer:
        self.buffers.append(buf)
        return buf

    def allocate(self, dtype, stream, count):  # type: ignore[no-untyped-def]
        return self.keep(_Buffer(np.zeros(count, dtype)))


class _Session:
    def __init__(self) -> None:
        from types import SimpleNamespace

        self.stream, self.pool, self.context, self.torch_ = _Stream(), _Pool(), None, None
        self.info = SimpleNamespace(l2_cache_bytes=1 << 16)  # two banks or a few
        self.rng = np.random.default_rng(11)
        self.timer = SimpleNamespace(median=self.median)
        self.banks_seen: set[int] = set()

    def median(self, enqueue, calls, repeats) -> float:  # type: ignore[no-untyped-def]
        for i in range(3):
            enqueue(i)
        return 10.0

    def release(self, buffers) -> None:  # type: ignore[no-untyped-def]
        for b in buffers:
            b.free(self.stream)


def _nvfp4(codes: _Buffer, scales: _Buffer, rows: int, k: int) -> np.ndarray:
    return fp4_dequantize_reference(codes.data, scales.data.view(np.uint8), rows, k)


def _fp4_plan(wrong_global: bool = False):  # type: ignore[no-untyped-def]
    """A numpy BlockScaledFp4Plan / BlockScaledFp4VectorPlan (the keyword names of each)."""

    class Plan:
        def __init__(self, context, stream, spec, *, activation="fp4", library=None,  # type: ignore[no-untyped-def]
                     static_weights=False) -> None:
            PROMISES.append((type(self).__name__, static_weights))
            self.m, self.n, self.k = getattr(spec, "m", 1), spec.n, spec.k
            self.activation = activation
            self.path = "gemv" if self.m <= 16 else "decode+dense"
            self.epilogue = "folded" if self.path == "decode+dense" else None

        def run(self, a, sa, b, sb, d, ga, gb, alpha) -> None:  # type: ignore[no-untyped-def]
            m, n, k = self.m, self.n, self.k
            if self.activation == "fp4":
                av = _nvfp4(a, sa, m, k)
            else:
                assert sa is None and ga is None
                av = a.data.astype(np.float64).reshape(m, k)
            scale = alpha * (1.0 if ga is None else float(ga.data[0])) * (1.0 if gb is None or wrong_global
                                                                           else float(gb.data[0]))
            d.data[:m * n] = (scale * av @ _nvfp4(b, sb, n, k).T).astype(mc.bf16).ravel()

    class Matrix(Plan):
        def execute(self, stream, a, a_scales, b, b_scales, d, *, global_a=None, global_b=None, alpha=1.0) -> None:  # type: ignore[no-untyped-def]
            self.run(a, a_scales, b, b_scales, d, global_a, global_b, alpha)

    class Vector(Plan):
        def execute(self, stream, x, x_scales, w, w_scales, y, *, global_x=None, global_w=None, alpha=1.0) -> None:  # type: ignore[no-untyped-def]
            self.run(x, x_scales, w, w_scales, y, global_x, global_w, alpha)

    return Vector, Matrix


PROMISES: list[tuple[str, bool]] = []  # (plan class, static_weights) of every fake plan made


class _Dense:
    def __init__(self, context, stream, spec, input=mc.bf16, output=None, *, library=None,  # type: ignore[no-untyped-def]
                 static_weights=False) -> None:
        PROMISES.append(("Dense", static_weights))
        self.m, self.n, self.k = getattr(spec, "m", 1), spec.n, spec.k
        self.output = output or input
        self.kernel_name = "numpy"

    def execute(self, stream, a, b, c, alpha=1.0, beta=0.0) -> None:  # type: ignore[no-untyped-def]
        m, n, k = self.m, self.n, self.k
        got = a.data.astype(np.float64).reshape(m, k) @ b.data.astype(np.float64).reshape(n, k).T
        c.data[:m * n] = got.astype(self.output).ravel()


class _Fp8:
    def __init__(self, context, stream, spec, *, library=None) -> None:  # type: ignore[no-untyped-def]
        self.m, self.n, self.k = getattr(spec, "m", 1), spec.n, spec.k

    def execute(self, stream, a, sa, b, sb, d) -> None:  # type: ignore[no-untyped-def]
        from mircuda.cli._fp8_profile import _dequantize

        m, n, k = self.m, self.n, self.k
        kb = -(-k // 128)
        av = _dequantize(a.data.reshape(m, k), sa.data.reshape(m, kb), 1)
        bv = _dequantize(b.data.reshape(n, k), sb.data.reshape(-(-n // 128), kb), 128)
        d.data[:m * n] = (av @ bv.T).astype(mc.bf16).ravel()


@pytest.mark.parametrize("activation", ["fp4", "bf16"])
@pytest.mark.parametrize("wrong", [False, True])
def test_the_bench_wires_every_plan_to_its_operands_and_reference(monkeypatch, activation, wrong) -> None:
    vector, matrix = _fp4_plan(wrong_global=wrong)
    for name, value in (("BlockScaledFp4VectorPlan", vector), ("BlockScaledFp4Plan", matrix),
                        ("DenseVectorPlan", _Dense), ("DenseMatmulPlan", _Dense), ("BlockwiseFp8VectorPlan", _Fp8),
                        ("BlockwiseFp8Plan", _Fp8)):
        monkeypatch.setattr(mc, name, value)
    s = _Session()
    notes: list[str] = []
    failures: list[str] = []
    shapes, ms = ((200, 1040), (256, 512)), (1, 4, 20)
    rows = fp.collect(shapes, ms, lambda n, k: fp._ShapeBench(s, n, k, activation, "library", 1, 1, True, notes,
                                                               failures))
    assert [(r.n, r.k, r.m) for r in rows] == [(n, k, m) for n, k in shapes for m in ms]
    assert notes == [] and all(b.freed for b in s.pool.buffers)  # every buffer freed once
    for r in rows:
        assert r.fp4_us == r.bf16_us == r.fp8_us == 10.0 and r.cublas_us is None and r.activation == activation
        assert r.fp4_path == ("vector" if r.m == 1 else "gemv" if r.m <= 16 else "decode+dense")
        assert (r.dense_f32_us is not None) == (r.m > 16)
        assert ("decode+dense (epilogue=folded)" in r.note) is (r.m > 16)  # the portable path's scaling named
    if wrong:  # a product without global_b is caught on every FP4 row, and only there
        assert len(failures) == len(rows) and all(f.startswith("FP4 ") for f in failures)
    else:
        assert failures == []


@pytest.mark.parametrize("static", [False, True])
def test_static_weights_reaches_the_fp4_and_bf16_plans(monkeypatch, static) -> None:
    # --static-weights: every FP4 and BF16 plan the bench makes gets the promise (the FP8 plans take no such
    # argument); without it none does
    vector, matrix = _fp4_plan()
    for name, value in (("BlockScaledFp4VectorPlan", vector), ("BlockScaledFp4Plan", matrix),
                        ("DenseVectorPlan", _Dense), ("DenseMatmulPlan", _Dense), ("BlockwiseFp8VectorPlan", _Fp8),
                        ("BlockwiseFp8Plan", _Fp8)):
        monkeypatch.setattr(mc, name, value)
    PROMISES.clear()
    failures: list[str] = []
    fp.collect(((256, 512),), (1, 4, 20), lambda n, k: fp._ShapeBench(_Session(), n, k, "fp4", "library", 1, 1, True,
                                                                      [], failures, static_weights=static))
    assert failures == []
    made = {name for name, _ in PROMISES}
    assert {"Vector", "Matrix", "Dense"} <= made  # each kind was made
    assert all(promise is static for _, promise in PROMISES)


def test_the_static_weights_flag_parses() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    fp.register(parser.add_subparsers())
    assert parser.parse_args(["fp4-profile"]).static_weights is False
    assert parser.parse_args(["fp4-profile", "--static-weights"]).static_weights is True


def test_a_path_that_raises_is_a_failure_and_the_others_are_still_measured(monkeypatch) -> None:
    vector, matrix = _fp4_plan()

    class Refusing(matrix):  # type: ignore[misc, valid-type]
        def __init__(self, context, stream, spec, **kw) -> None:  # type: ignore[no-untyped-def]
            raise ContractError("spec", "something else", "this")

    for name, value in (("BlockScaledFp4VectorPlan", vector), ("BlockScaledFp4Plan", Refusing),
                        ("DenseVectorPlan", _Dense), ("DenseMatmulPlan", _Dense), ("BlockwiseFp8VectorPlan", _Fp8),
                        ("BlockwiseFp8Plan", _Fp8)):
        monkeypatch.setattr(mc, name, value)
    s = _Session()
    failures: list[str] = []
    rows = fp.collect(((256, 512),), (1, 4), lambda n, k: fp._ShapeBench(s, n, k, "fp4", None, 1, 1, True, [],
                                                                          failures))
    assert rows[0].fp4_us == 10.0 and rows[1].fp4_us is None and rows[1].bf16_us == rows[1].fp8_us == 10.0
    assert failures == ["fp4_us M=4 256x512: ContractError: argument 'spec': expected something else, received this"]
    assert all(b.freed for b in s.pool.buffers)


# -- --sweep ------------------------------------------------------------------------------------------------
def test_sweep_candidates_parse_with_their_knobs() -> None:
    got = fp.sweep_values("vector, vector:decode=e4m3:rows=4:warps=8:sum=fp32:stages=3,mma:decode=table:rows=32:warps=2,"
                          "mma")
    assert got == (fp.Fp4Candidate("vector"), fp.Fp4Candidate("vector", "e4m3", 4, 8, "fp32", 3),
                   fp.Fp4Candidate("mma", "table", 32, 2), fp.Fp4Candidate("mma"))
    assert [c.label for c in got] == ["vector", "vector:decode=e4m3:rows=4:warps=8:sum=fp32:stages=3",
                                      "mma:decode=table:rows=32:warps=2", "mma"]
    assert got[1].knobs() == {"kernel": "fp4_matvec_bf16", "decode": "e4m3", "rows": 4, "warps": 8,
                              "block_sum": "fp32", "stages": 3}
    assert got[3].knobs() == {"kernel": "fp4_mma_bf16", "decode": None, "rows": None, "warps": None,
                              "block_sum": None, "stages": None}
    assert parse("--sweep", "mma:decode=pairs").sweep == (fp.Fp4Candidate("mma", "pairs"),)
    assert parse().sweep is None


def test_the_prefetch_knob_is_a_vector_candidate_field() -> None:
    on, off = fp.sweep_values("vector:decode=e4m3:prefetch=1,vector:decode=e4m3:prefetch=0")
    assert (on.prefetch, off.prefetch) == (True, None)  # prefetch=0 is the default: left out
    assert off == fp.sweep_values("vector:decode=e4m3")[0]
    assert on.label == "vector:decode=e4m3:prefetch=1" and on.knobs()["prefetch"] is True
    assert "prefetch" not in fp.sweep_values("mma")[0].knobs()
    both = fp.sweep_values("vector:stages=2:prefetch=1:persistent=1")[0]
    assert both.label == "vector:stages=2:prefetch=1:persistent=1"
    assert (both.knobs()["prefetch"], both.knobs()["persistent"]) == (True, True)


def test_sweep_all_is_every_decoder_with_each_kernel_s_knobs() -> None:
    from mircuda.matmul._fp4 import DECODES

    assert fp.sweep_values("all") == fp.SWEEP_ALL and len(fp.SWEEP_ALL) == 32 == len(set(fp.SWEEP_ALL))
    assert {c.stages for c in fp.SWEEP_ALL} == {None, 3, 4}
    assert fp.SWEEP_DECODES == DECODES
    assert {c.decode for c in fp.SWEEP_ALL} == set(DECODES) and {c.kernel for c in fp.SWEEP_ALL} == {"vector", "mma"}
    assert all(c.rows in (16, 32) and c.block_sum is None for c in fp.SWEEP_ALL if c.kernel == "mma")
    assert all(c.rows in (4, 8) for c in fp.SWEEP_ALL if c.kernel == "vector")


@pytest.mark.parametrize("text, named", [("gemv", "'gemv'"), ("mma:rows=8", "'8'"), ("mma:sum=fp16", "'sum=fp16'"),
                                         ("vector:decode=nibbles", "'nibbles'"), ("vector:rows=16", "'16'"),
                                         ("vector:warps=3", "'3'"), ("mma:stages=5", "'5'"), ("vector:rows=4:rows=8", "'rows=8'"),
                                         ("mma,mma", "twice"), ("vector,,mma", "candidate"),
                                         ("vector:prefetch=2", "'2'"), ("mma:prefetch=1", "'prefetch=1'"),
                                         ("mma:persistent=1", "'persistent=1'"), ("vector:persistent=on", "'on'"),
                                         ("vector:prefetch=0,vector", "twice"), ("vector:rows=\u0664", "'\u0664'"),
                                         ("vector:prefetch=\uff11", "'\uff11'"), ("vector:rows=\u00b2", "'\u00b2'"),
                                         ("vector:warps=08", "'08'"), ("vector:rows=" + "9" * 5000, "received '999")])
def test_bad_sweep_candidates_are_refused_by_name(text, named) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError) as info:
        fp.sweep_values(text)
    assert named in str(info.value)


def test_bad_sweep_flag_exits_2_with_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["fp4-profile", "--sweep", "vector:decode=x"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.startswith("error: python -m mircuda fp4-profile: argument --sweep")


def test_sweep_rows_compare_with_the_default_plan_and_name_the_fastest() -> None:
    rows = [fp.sweep_row(1, 4096, 4096, "vector:decode=e4m3", 4.0, None),
            fp.sweep_row(1, 4096, 4096, "mma:decode=pairs", 5.0, None),
            fp.sweep_row(8, 4096, 4096, "mma", 9.0, None)]
    default = [fp.fp4_row(1, 4096, 4096, fp4_us=8.0), fp.fp4_row(8, 4096, 4096, fp4_us=None)]
    got = fp.sweep_rows(rows, default)
    assert got[0].default_us == 8.0 and got[0].vs_default == 0.5 and got[2].vs_default is None
    assert got[0].tbps == pytest.approx(fp.weight_bytes(4096, 4096) / 4e-6 / 1e12)
    assert fp.sweep_best(got) == [
        f"fastest M=1 4096x4096: vector:decode=e4m3 4.00 µs ({got[0].tbps:.2f} TB/s); default plan: 8.00 µs",
        f"fastest M=8 4096x4096: mma 9.00 µs ({got[2].tbps:.2f} TB/s); default plan: not measured"]
    t = fp.sweep_table(got, "title")
    assert len(t) == 3 and str(t).splitlines()[0] == "title"
    json.dumps([dataclasses.asdict(r) for r in got])


@pytest.mark.parametrize("activation", ["fp4", "bf16"])
@pytest.mark.parametrize("wrong", [False, True])
def test_the_sweep_measures_each_candidate_at_m_up_to_16_on_the_same_operands(monkeypatch, activation,
                                                                              wrong) -> None:
    vector, matrix = _fp4_plan()
    bad_vector, bad_matrix = _fp4_plan(wrong_global=True)
    seen: list[tuple[int, dict]] = []

    def knobbed(base, broken):  # type: ignore[no-untyped-def]
        class Knobbed(base):  # type: ignore[misc, valid-type]
            """Takes the sweep's knobs; refuses the tensor-core kernel with BF16 activations, as the plans do;
            with ``wrong``, the e4m3 decoder forgets global_b."""

            def __init__(self, context, stream, spec, *, activation="fp4", library=None,  # type: ignore[no-untyped-def]
                         static_weights=False, **knobs) -> None:
                if knobs.get("kernel") == "fp4_mma_bf16" and activation == "bf16":
                    raise ContractError("kernel", "fp4_matvec_bf16 with BF16 activations", "fp4_mma_bf16")
                super().__init__(context, stream, spec, activation=activation, library=library,
                                 static_weights=static_weights)
                self.knobs = knobs
                if knobs:
                    seen.append((self.m, knobs))

            def run(self, *args) -> None:  # type: ignore[no-untyped-def]
                (broken if wrong and self.knobs.get("decode") == "e4m3" else base).run(self, *args)

        return Knobbed

    for name, value in (("BlockScaledFp4VectorPlan", knobbed(vector, bad_vector)),
                        ("BlockScaledFp4Plan", knobbed(matrix, bad_matrix)),
                        ("DenseVectorPlan", _Dense), ("DenseMatmulPlan", _Dense), ("BlockwiseFp8VectorPlan", _Fp8),
                        ("BlockwiseFp8Plan", _Fp8)):
        monkeypatch.setattr(mc, name, value)
    s = _Session()
    notes: list[str] = []
    failures: list[str] = []
    swept: list[fp.SweepRow] = []
    sweep = fp.sweep_values("vector:decode=e4m3,mma:decode=pairs:warps=4")
    rows = fp.collect(((256, 512),), (1, 4, 20), lambda n, k: fp._ShapeBench(
        s, n, k, activation, "library", 1, 1, True, notes, failures, sweep, swept))
    assert len(rows) == 3 and all(b.freed for b in s.pool.buffers)
    measured = [(r.m, r.candidate) for r in swept]
    if activation == "fp4":
        assert measured == [(1, "vector:decode=e4m3"), (1, "mma:decode=pairs:warps=4"), (4, "vector:decode=e4m3"),
                            (4, "mma:decode=pairs:warps=4")]  # not at M = 20
        assert notes == []
    else:  # the tensor-core kernel is refused with BF16 activations: noted, not a failure
        assert measured == [(1, "vector:decode=e4m3"), (4, "vector:decode=e4m3")]
        assert len(notes) == 2 and all("mma:decode=pairs:warps=4" in n and "left out" in n for n in notes)
    assert all(r.us == 10.0 for r in swept)
    assert seen[0] == (1, {"kernel": "fp4_matvec_bf16", "decode": "e4m3", "rows": None, "warps": None,
                           "block_sum": None, "stages": None})
    if wrong:  # the broken candidate is caught on each M it ran, and only it
        assert failures and all(f.startswith("sweep vector:decode=e4m3 M=") for f in failures)
        assert len(failures) == 2
    else:
        assert failures == []


def test_mma_sweep_candidates_take_every_warp_count_the_plans_take() -> None:
    """fp4_mma_bf16 takes any warps 1..8 (MMA_WARPS, the plans' check), but --sweep kept 1, 2, 4, 8 for both kernels:
    ``mma:warps=3`` was refused as "expected warps one of 1, 2, 4, 8 for mma". The vector kernel keeps its four."""
    import argparse

    from mircuda.matmul._fp4 import MMA_WARPS

    assert fp.SWEEP_KNOBS["mma"]["warps"] == MMA_WARPS and fp.SWEEP_KNOBS["vector"]["warps"] == (1, 2, 4, 8)
    got = fp.sweep_values("mma:warps=3,mma:rows=16:warps=5,mma:warps=7")
    assert [(c.kernel, c.warps) for c in got] == [("mma", 3), ("mma", 5), ("mma", 7)]
    assert got[0].knobs()["warps"] == 3 and got[0].knobs()["kernel"] == "fp4_mma_bf16"
    for bad in ("mma:warps=9", "mma:warps=0", "vector:warps=6"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected warps one of"):
            fp.sweep_values(bad)
