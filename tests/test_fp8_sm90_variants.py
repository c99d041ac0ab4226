"""``benchmarks/fp8_sm90_variants.py`` (every SM90 blockwise FP8 kernel forced by name beside torch's
``_scaled_mm``) without a GPU: flags it cannot measure are refused before the driver, ``--kernels`` names only
sm90_ blockwise kernels of the library, and the summary ranks a kernel that failed its check last whatever its
speed. (The measurement itself is the GPU's.)"""

from __future__ import annotations

import pytest

from mircuda.cli._fp8_profile import fp8_row, ratios
from tests.benchmark_script import help_options, load_benchmark, run_benchmark
from tests.test_matmul_fp8_select import COOP, EXPERIMENTAL, TABLE


@pytest.mark.parametrize("args, said", [
    (("--m", "16"), "argument --m: expected comma-separated ints of at least 17"),  # the NVRTC kernels' M
    (("--m", "2048,2048"), "argument --m: expected each value once"),
    (("--m", "2_048"), "argument --m: expected comma-separated ints of at least 17"),
    (("--m", "2048,,8192"), "argument --m: expected comma-separated M values without an empty item"),
    (("--m", "2048,"), "argument --m: expected comma-separated M values without an empty item"),  # "int of at least 17s"
    # beyond the plans' 32-bit dimensions: accepted, then the driver set up and the operands allocated
    (("--m", "99999999999999999999"), "--m/--shapes: 99999999999999999999x4096x4096: argument 'm': expected a dimension"),
    (("--shapes", "4096x2147483648"), "--m/--shapes: 2048x4096x2147483648: argument 'k': expected a dimension"),
    (("--check", "2147483648x4096x4096"), "--check: 2147483648x4096x4096: argument 'm': expected a dimension"),
    (("--shapes", "4096x4100"), "argument --shapes: expected NxK pairs with K a multiple of 16"),
    (("--check", "2048x4096"), "argument --check: expected MxNxK of positive ints"),
    (("--check", "2048x4100x4096"), "argument --check: expected M >= 17, N a multiple of 8 and K of 16"),
    (("--check", "16x4096x4096"), "argument --check: expected M >= 17"),
    (("--kernels", "a,a"), "argument --kernels: expected each value once"),
    (("--calls", "0"), "argument --calls"),
    (("--repeats", "1_0"), "argument --repeats"),
    (("--json", "/nonexistent-dir/v.json"), "'/nonexistent-dir' is not a directory"),
])
def test_a_flag_it_cannot_measure_is_refused_before_the_gpu(args, said) -> None:
    out = run_benchmark("fp8_sm90_variants", *args)
    assert out.returncode == 2 and said in out.stderr, out.stderr[-300:]
    assert "Traceback" not in out.stderr


def test_help_gives_each_options_meaning_and_default() -> None:
    out = run_benchmark("fp8_sm90_variants", "--help")
    options = help_options(out.stdout)
    assert list(options) == ["--m", "--shapes", "--kernels", "--check", "--calls", "--repeats", "--json"]
    assert not [flag for flag, text in options.items() if "(default: " not in text]
    assert "(default: 2048,8192)" in options["--m"] and "(default: 2048x4096x4096)" in options["--check"]


class _Library:
    def __init__(self, kernels: tuple) -> None:
        self.scaled_kernels = kernels


def test_kernels_are_the_librarys_sm90_blockwise_ones() -> None:
    script = load_benchmark("fp8_sm90_variants")
    library = _Library(TABLE + EXPERIMENTAL)
    # default: every sm90_ blockwise kernel (not the sm120 one), in the library's order
    assert [k.name for k in script.pick_kernels(library, None)] == [k.name for k in TABLE[1:] + EXPERIMENTAL]
    wanted = [EXPERIMENTAL[2].name, COOP]
    assert [k.name for k in script.pick_kernels(library, wanted)] == wanted
    with pytest.raises(ValueError, match="received sm120_blockwise_128x128x128_e4m3_bf16, nope"):
        script.pick_kernels(library, [COOP, TABLE[0].name, "nope"])


def test_the_summary_ranks_a_failed_kernel_last_and_counts_the_goals() -> None:
    script = load_benchmark("fp8_sm90_variants")
    rows = []
    for m, n in ((2048, 4096), (8192, 4096)):
        rows += [fp8_row("torch rowwise (_scaled_mm)", m, n, 4096, 100.0),
                 fp8_row("torch blockwise (_scaled_mm)", m, n, 4096, 104.0),
                 fp8_row("slow", m, n, 4096, 110.0), fp8_row("fast but wrong", m, n, 4096, 50.0),
                 fp8_row("meets", m, n, 4096, 104.0 if m == 2048 else 105.0)]
    rows.append(fp8_row("slow", 512, 4096, 4096, 1.0))  # M < 2048: not the goal's
    ratios(rows)
    summary = script.summarize(rows, {"fast but wrong"})
    assert [r["kernel"] for r in summary] == ["meets", "slow", "fast but wrong"]
    meets, slow = summary[0], summary[1]
    assert meets["points"] == 2 and meets["goals_met"] == 1 and meets["worst_vs_blockwise"] == pytest.approx(104 / 105)
    assert slow["points"] == 2 and slow["goals_met"] == 0 and slow["geomean_vs_rowwise"] == pytest.approx(100 / 110)
    assert not summary[2]["correct"] and summary[0]["correct"]
