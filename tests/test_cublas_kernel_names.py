"""``benchmarks/cublas_kernel_names.py`` (which cuBLAS / cuBLASLt kernels torch runs per cell) without a GPU: every
flag is checked while the command line is parsed, in one line, before torch is imported or a cell is profiled; an
unknown type pair is refused rather than run as BF16 under its own label. (The profiling itself is the GPU's.)"""

from __future__ import annotations

import pytest

from tests.benchmark_script import load_benchmark, run_benchmark


@pytest.mark.parametrize("args, said", [
    (("--m", "abc"), "argument --m: expected comma-separated positive ints"),
    (("--m", "96,,192"), "argument --m: expected comma-separated positive ints without an empty item"),
    (("--m", "0"), "argument --m: expected comma-separated positive ints"),
    (("--m", "96,96"), "argument --m: expected each value once"),
    (("--shapes", "4096"), "argument --shapes: expected comma-separated NxK pairs"),
    (("--shapes", "4096x"), "argument --shapes: expected comma-separated NxK pairs"),
    (("--dtypes", "e5m2"), "argument --dtypes: expected comma-separated items of"),
    (("--dtypes", "E4M3-rowwise"), "argument --dtypes: expected comma-separated items of"),
    (("--dtypes", "f16->bf16"), "argument --dtypes: expected comma-separated items of"),
    (("--dtypes", ""), "argument --dtypes: expected at least one type pair"),
    (("--json", "/nonexistent-dir/names.json"), "'/nonexistent-dir' is not a directory"),
])
def test_a_bad_flag_is_refused_before_torch(args, said) -> None:
    out = run_benchmark("cublas_kernel_names", *args)
    assert out.returncode == 2 and said in out.stderr, out.stderr[-300:]
    assert "Traceback" not in out.stderr


def test_the_fp8_pairs_are_known_and_parsed_in_order() -> None:
    script = load_benchmark("cublas_kernel_names")
    assert script.type_values("e4m3-rowwise,e4m3-blockwise,f16->f32") == ["e4m3-rowwise", "e4m3-blockwise", "f16->f32"]
    assert set(script.FP8_TYPES) <= set(script.KNOWN_TYPES) and set(script.TYPES) <= set(script.KNOWN_TYPES)
