"""``python -m mircuda fp8-profile`` without a GPU: its flags, its table's arithmetic (bytes, rates, ratios
to torch, the issue's goals), that torch is optional, and the error paths."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from gpu_probe import gpu_unavailable_reason

from mircuda.cli import _fp8_profile as fp
from mircuda.cli import main


@pytest.mark.parametrize("text, shapes", [("4096x4096", ((4096, 4096),)), ("14336x4096, 6144X4096", ((14336, 4096),
                                                                                                      (6144, 4096)))])
def test_shapes_parse_as_n_by_k(text, shapes) -> None:
    assert fp.shape_values(text) == shapes


@pytest.mark.parametrize("text", ["", "4096", "4096x", "0x4096", "4096x4096x2", "ax4096", "-1x8", "4096x4096,",
                                  "4096x4096,,4096x4096"])
def test_bad_shapes_are_refused_by_value(text) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="NxK"):
        fp.shape_values(text)


def test_the_command_is_listed_and_its_defaults_are_the_issue_grid(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0 and "    fp8-profile " in capsys.readouterr().out
    from mircuda.cli import _parser

    args = _parser().parse_args(["fp8-profile"])
    assert args.m == (1, 2, 4, 8, 16, 32, 64, 128, 512, 2048, 8192)
    assert args.shapes == ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))
    assert args.json == "benchmarks/results/fp8_profile.json"
    sub = _parser().parse_args(["fp8-profile", "--m", "1,16,2048", "--shapes", "4096x4096"])
    assert sub.m == (1, 16, 2048) and sub.shapes == ((4096, 4096),) and sub.func is fp.fp8_profile


@pytest.mark.parametrize("argv", [["fp8-profile", "--m", "0"], ["fp8-profile", "--shapes", "4096"],
                                  ["fp8-profile", "--m", "x"]])
def test_bad_flags_exit_2_with_one_line(argv, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "usage" not in err
    assert err.startswith("error: python -m mircuda fp8-profile: argument --") and len(err.splitlines()) == 1


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="this machine has a usable driver")
def test_without_a_gpu_it_fails_cleanly() -> None:
    out = subprocess.run([sys.executable, "-m", "mircuda", "fp8-profile", "--m", "1", "--shapes", "256x256"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "error:" in out.stderr and "Traceback" not in out.stderr


def test_torch_is_optional() -> None:
    reason = fp.torch_available()
    try:
        import torch  # noqa: F401
    except ImportError:
        assert reason == "torch is not installed"
    else:
        assert reason == ""


def test_bytes_rates_and_ratios() -> None:
    # 4096 x 4096: weights 16 MiB + 32 x 32 scales; M = 1: 4096 codes + 32 scales + 4096 BF16 outputs.
    assert fp.fp8_bytes(1, 4096, 4096) == 4096 * 4096 + 4096 + 4 * (32 * 32 + 32) + 2 * 4096
    assert fp.fp8_bytes(1, 1000, 1040) == 1000 * 1040 + 1040 + 4 * (8 * 9 + 9) + 2000
    r = fp.fp8_row("BlockwiseFp8Plan", 2048, 4096, 4096, 50.0)
    assert r.tflops == pytest.approx(2 * 2048 * 4096 * 4096 / 50e-6 / 1e12)
    rows = [fp.fp8_row("torch rowwise (_scaled_mm)", 16, 64, 64, 30.0), fp.fp8_row("BlockwiseFp8Plan", 16, 64, 64, 10.0),
            fp.fp8_row("torch blockwise (_scaled_mm)", 2048, 64, 64, 40.0),
            fp.fp8_row("BlockwiseFp8Plan", 2048, 64, 64, 50.0)]
    fp.ratios(rows)
    assert rows[1].vs_rowwise == 3.0 and rows[1].vs_blockwise is None
    assert rows[3].vs_blockwise == 0.8 and rows[3].vs_rowwise is None
    assert rows[0].vs_rowwise is None  # torch rows carry no ratio
    goals = fp._goals(rows)
    assert "M <= 16 vs torch rowwise: worst 3.00 (M=16 64x64); 1/1 >= 1.5" in goals
    assert "M >= 2048 vs torch blockwise: worst 0.80 (M=2048 64x64); 0/1 >= 1.0" in goals


def test_the_m_1_goals_name_the_limit() -> None:
    rows = [fp.fp8_row("BlockwiseFp8VectorPlan", 1, 4096, 4096, 7.0),
            fp.fp8_row("BlockwiseFp8VectorPlan", 1, 14336, 4096, 16.0)]
    goals = fp._goals(rows)
    assert goals[0].startswith("M = 1 4096x4096: 7.00 µs") and goals[0].endswith("goal <= 6.5 µs: NOT met")
    assert goals[1].endswith("goal <= 16.5 µs: met")


def test_the_dequantized_reference_uses_block_scales() -> None:
    import numpy as np

    rng = np.random.default_rng(1)
    codes, scales = fp._operands(rng, 130, 300, 2)
    assert codes.shape == (130, 300) and scales.shape == (2, 3)
    deq = fp._dequantize(codes, scales, 128)
    assert deq[129, 299] == float(codes[129, 299]) * float(scales[1, 2])
    assert deq[5, 130] == float(codes[5, 130]) * float(scales[0, 1])


# -- the torch rows' logic, on a numpy stand-in of _TorchFp8 -----------------------------------------
class _T(__import__("numpy").ndarray):
    """A numpy array with the two tensor methods the layouts use (``t``, ``contiguous``)."""

    def t(self):  # type: ignore[no-untyped-def]
        return self.T

    def contiguous(self):  # type: ignore[no-untyped-def]
        import numpy as np

        return np.ascontiguousarray(self).view(_T)


class _FakeTorch:
    """``_scaled_mm`` in float64: rowwise for [M, 1] scales; blockwise only for the layout ``accept``
    (sa C- or F-ordered, sb [K/128, N/128] C-ordered), reading sb transposed when ``wrong``."""

    def __init__(self, accept_sa_fortran: bool, wrong: bool = False, refuse_rowwise: bool = False) -> None:
        import contextlib
        from types import SimpleNamespace

        import numpy as np

        self.stream = None
        self.accept_sa_fortran, self.wrong, self.refuse_rowwise = accept_sa_fortran, wrong, refuse_rowwise
        self.t = SimpleNamespace(cuda=SimpleNamespace(stream=lambda s: contextlib.nullcontext()), float32=np.float32,
                                 ones=lambda *shape, device, dtype: np.ones(shape).view(_T))

    def tensor(self, host):  # type: ignore[no-untyped-def]
        import numpy as np

        return np.asarray(host).astype(np.float64).view(_T)

    def enqueue(self, a, sa, ws, sbs, transform):  # type: ignore[no-untyped-def]
        import numpy as np

        b = np.asarray(ws[0])
        sb = transform(sbs[0] if isinstance(sbs, list) else sbs)
        if sa.shape[1] == 1:
            if self.refuse_rowwise:
                raise RuntimeError("rowwise refused\nsecond line")
            return (lambda i: None), np.asarray(a) @ b.T
        kb, nb = -(-a.shape[1] // 128), -(-b.shape[0] // 128)
        fortran = not sa.flags["C_CONTIGUOUS"]
        if fortran != self.accept_sa_fortran or sb.shape != (kb, nb) or not sb.flags["C_CONTIGUOUS"]:
            raise RuntimeError(f"layout refused: sa {sa.shape} sb {sb.shape}")
        cols = np.arange(a.shape[1]) // 128
        s = np.asarray(sb).T if not self.wrong else np.asarray(sb).T[::-1]
        a64 = np.asarray(a) * np.asarray(sa)[:, cols]
        b64 = b * s[(np.arange(b.shape[0]) // 128)[:, None], cols[None, :]]
        return (lambda i: None), a64 @ b64.T

    def rows(self, out, rows):  # type: ignore[no-untyped-def]
        return out[rows]


def _torch_case(fake: _FakeTorch) -> tuple[list[fp.Fp8Row], list[str], list[str]]:
    from types import SimpleNamespace

    import numpy as np

    rng = np.random.default_rng(3)
    m, n, k = 5, 256, 384
    a, sa = fp._operands(rng, m, k, m)
    b, sb = fp._operands(rng, n, k, 2)
    sample = fp._sample_rows(m)
    want = fp._dequantize(a[sample], sa[sample], 1) @ fp._dequantize(b, sb, 128).T
    rows: list[fp.Fp8Row] = []
    failures: list[str] = []
    refusals: list[str] = []
    timer = SimpleNamespace(median=lambda call, calls, repeats: 10.0)
    fp._torch_rows(fake, timer, SimpleNamespace(calls=1, repeats=1), a, sa, b.astype(np.float64), want, sample,
                   [fake.tensor(b)], [fake.tensor(sb)], m, n, k, rows, failures, refusals)
    return rows, failures, refusals


def test_torch_rows_measure_rowwise_and_the_first_correct_blockwise_layout() -> None:
    rows, failures, refusals = _torch_case(_FakeTorch(accept_sa_fortran=False))
    assert failures == [] and refusals == []
    assert [r.path for r in rows] == ["torch rowwise (_scaled_mm)", "torch blockwise (_scaled_mm)"]
    assert rows[1].note.startswith(fp.BLOCKWISE_LAYOUTS[1][0])  # the outer-major one was refused


def test_a_layout_torch_accepts_but_computes_wrongly_is_not_measured() -> None:
    rows, failures, refusals = _torch_case(_FakeTorch(accept_sa_fortran=True, wrong=True))
    assert [r.path for r in rows] == ["torch rowwise (_scaled_mm)"] and failures == []
    (refusal,) = refusals
    assert refusal.startswith("torch blockwise M=5 256x384: ") and "relative error" in refusal
    assert "layout refused" in refusal


def test_torch_refusals_are_recorded_not_raised() -> None:
    rows, failures, refusals = _torch_case(_FakeTorch(accept_sa_fortran=True, refuse_rowwise=True))
    assert [r.path for r in rows] == ["torch blockwise (_scaled_mm)"] and failures == []
    assert refusals == ["torch rowwise M=5 256x384: rowwise refused"]


# -- --sweep ----------------------------------------------------------------------------------------
def test_sweep_candidates_parse_with_their_knobs() -> None:
    got = fp.sweep_values("mma, mma:rows=32:warps=4:trigger=early,gemv:rows=4,gemv:trigger=late,mma:decode=integer")
    assert got == (fp.Candidate("mma"), fp.Candidate("mma", 32, 4, "early"), fp.Candidate("gemv", 4),
                   fp.Candidate("gemv", None, None, "late"), fp.Candidate("mma", decode="integer"))
    assert [c.label for c in got] == ["mma", "mma:rows=32:warps=4:trigger=early", "gemv:rows=4", "gemv:trigger=late",
                                      "mma:decode=integer"]
    assert got[1].knobs() == {"kernel": "blockwise_fp8_mma", "rows": 32, "warps": 4, "pdl_trigger": "early",
                              "decode": None}
    assert got[4].knobs()["decode"] == "integer"
    assert got[2].knobs()["kernel"] == "blockwise_fp8_gemv"
    from mircuda.cli import _parser

    args = _parser().parse_args(["fp8-profile", "--sweep", "mma:rows=16,gemv"])
    assert args.sweep == (fp.Candidate("mma", 16), fp.Candidate("gemv"))
    assert _parser().parse_args(["fp8-profile"]).sweep is None


@pytest.mark.parametrize("text, named", [("", "at least one"), ("mma,", "empty item"), ("mma,,gemv", "empty item"),
                                         ("mma:rows=16,mma:rows=16", "distinct"), ("simt", "'simt'"), ("mma:rows=8", "rows one of 16, 32"),
                                         ("gemv:rows=16", "rows one of 1, 2, 4, 8"), ("mma:warps=3", "warps"),
                                         ("mma:trigger=now", "trigger"), ("mma:tiles=2", "'tiles=2'"),
                                         ("mma:rows=16:rows=32", "once each"), ("mma:rows=x", "rows"),
                                         ("gemv:decode=integer", "'decode=integer'"),
                                         ("mma:decode=fast", "decode one of hardware, integer"),
                                         ("mma:persistent=1", "'persistent=1'"),
                                         ("gemv:persistent=2", "persistent one of 0, 1"),
                                         ("gemv:persistent=0,gemv", "distinct"), ("gemv:rows=\u0664", "rows one of"),
                                         ("gemv:rows=\u00b2", "rows one of"), ("gemv:rows=08", "rows one of"),
                                         ("gemv:rows=" + "9" * 5000, "rows one of")])
def test_bad_sweep_candidates_are_refused_by_name(text, named) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        fp.sweep_values(text)
    assert named in str(info.value)


def test_sweep_best_names_the_fastest_configuration_beside_the_default() -> None:
    rows = [fp.fp8_row("BlockwiseFp8VectorPlan", 1, 4096, 4096, 7.5, "blockwise_fp8_gemv rows=8, rel err 1e-3"),
            fp.fp8_row("BlockwiseFp8Plan", 1, 4096, 4096, 7.6, "blockwise_fp8_gemv rows=8, rel err 1e-3"),
            fp.fp8_row("sweep mma", 1, 4096, 4096, 6.1), fp.fp8_row("sweep gemv:rows=4", 1, 4096, 4096, 7.9),
            fp.fp8_row("BlockwiseFp8Plan", 16, 4096, 4096, 9.0, "blockwise_fp8_mma rows=16, rel err 1e-3"),
            fp.fp8_row("sweep mma:rows=32", 16, 4096, 4096, 9.5),
            fp.fp8_row("BlockwiseFp8Plan", 2, 64, 64, 3.0)]  # no sweep rows: no line
    best = fp.sweep_best(rows)
    assert len(best) == 2
    assert best[0].startswith("fastest M=1 4096x4096: sweep mma 6.10 µs")
    assert "BlockwiseFp8VectorPlan 7.50 µs (blockwise_fp8_gemv rows=8)" in best[0]
    assert best[1].startswith("fastest M=16 4096x4096: BlockwiseFp8Plan 9.00 µs")
    # Sweep rows are not the plans' rows: the issue's goals read the defaults only.
    assert all("6.10" not in g for g in fp._goals(rows))


def test_sweep_plans_leave_out_what_a_plan_refuses_and_report_other_errors() -> None:
    from types import SimpleNamespace

    import mircuda as mc

    made: list[tuple[str, dict]] = []

    def plan(kind: str):  # type: ignore[no-untyped-def]
        def make(context, stream, spec, **knobs):  # type: ignore[no-untyped-def]
            if knobs["rows"] == 8 and knobs["kernel"] == "blockwise_fp8_gemv":
                raise mc.ContractError("rows", "rows x M <= 32", "8")
            if knobs["warps"] == 8:
                raise mc.CompileError("nvrtc failed", "log", "sm_90", "fp8_mma_gemv.cu")
            made.append((kind, knobs))
            return object()
        return make

    fake = SimpleNamespace(BlockwiseFp8VectorPlan=plan("vector"), BlockwiseFp8Plan=plan("batched"),
                           DenseVectorSpec=lambda n, k: (n, k), DenseMatmulSpec=lambda m, n, k: (m, n, k),
                           ContractError=mc.ContractError, MircudaError=mc.MircudaError)
    notes: list[str] = []
    failures: list[str] = []
    candidates = fp.sweep_values("mma,gemv:rows=8,mma:warps=8")
    out = fp._sweep_plans(fake, None, None, candidates, 16, 4096, 4096, notes, failures)
    assert [name for name, _ in out] == ["sweep mma"] and made[0][0] == "batched"
    assert len(notes) == 1 and "gemv:rows=8 M=16 4096x4096 left out" in notes[0]
    assert len(failures) == 1 and "mma:warps=8" in failures[0] and "CompileError" in failures[0]
    fp._sweep_plans(fake, None, None, candidates[:1], 1, 4096, 4096, notes, failures)
    assert made[-1][0] == "vector"


def test_the_persistent_grid_is_a_gemv_candidate_field() -> None:
    walk, plain = fp.sweep_values("gemv:rows=8:persistent=1,gemv:rows=8:persistent=0")
    assert (walk.persistent, plain.persistent) == (True, None)  # persistent=0 is the default: left out
    assert plain == fp.sweep_values("gemv:rows=8")[0]
    assert walk.label == "gemv:rows=8:persistent=1" and walk.knobs()["persistent"] is True
    assert "persistent" not in fp.sweep_values("mma")[0].knobs()
