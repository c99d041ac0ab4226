"""benchmarks/fp4_mma_ab.py without a GPU: its help, its refusal, before the GPU is touched, of an M the decode
kernels do not take, of a shape whose K the 16-byte code loads cannot read or whose N or K is above the plans'
dimension limit and of a --json it could not write, and that its variant sets are the ones its results name."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from benchmark_script import help_options, load_benchmark, run_benchmark

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_benchmark("fp4_mma_ab", *args)


def test_help_says_what_it_compares() -> None:
    out = _run("--help")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "A/B in one process" in text and "{diet,l2,occupancy,regs,split}" in text


def test_help_gives_each_options_default() -> None:
    options = help_options(_run("--help").stdout)
    assert list(options) == ["--variants", "--m", "--shapes", "--json"]
    assert not [flag for flag, text in options.items() if "(default: " not in text]
    assert "each K a multiple of 32 (default: 14336x4096,4096x14336,4096x4096,6144x4096)" in options["--shapes"]


@pytest.mark.parametrize("args, named", [(("--m", "0"), "argument --m"), (("--m", "17"), "argument --m"),
                                         (("--m", "4,4"), "argument --m"), (("--shapes", "4096x4112"), "--shapes"),
                                         (("--shapes", "99999999999999999999x4096"), "--shapes"),
                                         (("--shapes", "4096x4096,4096x2147483648"), "--shapes"),
                                         (("--variants", "ring"), "argument --variants"),
                                         (("--json", "/nonexistent/dir/x.json"), "--json")])
def test_bad_arguments_are_refused_before_the_gpu(args, named) -> None:
    out = _run(*args)
    assert out.returncode == 2 and named in out.stderr and "Traceback" not in out.stderr


def test_the_diet_set_turns_off_the_scale_pairs_then_also_the_full_steps() -> None:
    """``before`` is the kernel as it was before both (byte scale loads, predicated loads on every K); the macros
    it sets are the kernel's, so a rename there fails here."""
    module = load_benchmark("fp4_mma_ab")
    diet = module.VARIANTS["diet"]
    assert list(diet) == ["default", "no_pairs", "before"]
    assert all(knobs == {} for knobs, _ in diet.values())
    assert diet["before"][1] == {"MIRCUDA_FP4_SCALE_PAIRS": 0, "MIRCUDA_FP4_FULL_STEPS": 0}
    source = (ROOT / "mircuda" / "cuda_src" / "fp4_mma_gemv.cu").read_text()
    assert all(f"#ifndef {name}" in source for name in diet["before"][1])


def test_the_occupancy_set_names_each_variants_knobs() -> None:
    module = load_benchmark("fp4_mma_ab")
    occ = module.VARIANTS["occupancy"]
    assert occ["default"] == ({}, {}) and "acc2" not in occ  # the recorded acc2's macro is gone (no gain)
    for name, (knobs, defines) in occ.items():
        if name.startswith(("w", "r16")):
            assert defines == {} and knobs["kernel"] == "fp4_mma_bf16"
            assert name.endswith(f"w{knobs['warps']}") and (knobs.get("rows") == 16) == name.startswith("r16")


def test_the_l2_set_turns_the_adopted_hint_off_and_the_recorded_repeat_used_it() -> None:
    module = load_benchmark("fp4_mma_ab")
    assert module.VARIANTS["l2"] == {"default": ({}, {}), "hint_off": ({}, {"MIRCUDA_FP4_L2_128B": 0})}
    repeat = json.loads((ROOT / "benchmarks" / "results" / "fp4_l2_hint.json").read_text())["repeat"]
    assert all(set(r["us"]) == {"bf16", *module.VARIANTS["l2"]} for r in repeat["rows"])
    assert all(r["us"]["default"] < r["us"]["hint_off"] for r in repeat["rows"])  # as recorded, not re-measured


@pytest.mark.parametrize("capability, arch", [((12, 0), "sm_120f"), ((9, 0), None), ((8, 0), None)])
def test_the_variants_compile_for_the_target_of_the_plans_default_compiler(monkeypatch, capability, arch) -> None:
    # a plain-target compiler would give the plans the software decode on cc 12.x instead of their default
    module = load_benchmark("fp4_mma_ab")
    seen: list[object] = []
    monkeypatch.setattr(module.Compiler, "__init__", lambda self, context, config=None, *, arch=None: seen.append(arch))
    context = SimpleNamespace(device_info=lambda: SimpleNamespace(compute_capability=capability))
    compiler = module.DefinesCompiler(context, {"MIRCUDA_FP4_L2_128B": 0})
    assert seen == [arch] and compiler.extra == {"MIRCUDA_FP4_L2_128B": 0}


def test_the_regs_set_is_the_recorded_register_variants_without_the_uncommitted_cap() -> None:
    module = load_benchmark("fp4_mma_ab")
    regs = module.VARIANTS["regs"]
    recorded = json.loads((ROOT / "benchmarks" / "results" / "fp4_mma_occupancy_experiment.json").read_text())
    names = {name for row in recorded["register_variants"]["rows"] for name in row["us"]}
    assert {"default" if n == "reg" else n for n in names} - {"bf16", "r32s3w4mb2"} == set(regs)
    for name, (knobs, defines) in regs.items():  # each name says its rows, stages and warps
        assert knobs["kernel"] == "fp4_mma_bf16" and defines == {}
        if name != "default":
            rows, stages, warps = map(int, re.fullmatch(r"r(\d+)s(\d)w(\d)", name).groups())
            assert (knobs.get("rows", 32), knobs["stages"], knobs["warps"]) == (rows, stages, warps)
    kernel = (ROOT / "mircuda" / "cuda_src" / "fp4_mma_gemv.cu").read_text()
    assert "MIN_BLOCKS" not in kernel and "SMEM_RING" not in kernel  # the docstring's reason they are not variants


def test_the_usage_names_every_variant_set_and_a_row_records_the_extra_macros() -> None:
    """The module's usage line said ``--variants l2|regs`` after diet and occupancy were added; a result row's
    ``ran`` was the plan's describe(), whose -D options are the plan's, not the ones the variant's compiler
    merged over them (the diet record's ``before`` reads MIRCUDA_FP4_FULL_STEPS=1 though it ran with 0)."""
    module = load_benchmark("fp4_mma_ab")
    usage = " ".join((module.__doc__ or "").split())
    assert f"[--variants {'|'.join(sorted(module.VARIANTS))}]" in usage
    text = module.ran_text("kernel fp4_mma_bf16 (NVRTC, -D MIRCUDA_FP4_FULL_STEPS=1 ...)" * 10,
                           module.VARIANTS["diet"]["before"][1])
    assert text.endswith("; extra: -D MIRCUDA_FP4_SCALE_PAIRS=0 -D MIRCUDA_FP4_FULL_STEPS=0") and len(text) < 300
    assert module.ran_text("plain", {}) == "plain"


@pytest.mark.parametrize("variants", ["diet", "l2", "occupancy", "split"])
def test_m_1_and_2_are_refused_for_the_sets_that_run_the_plans_default_kernel(variants, tmp_path) -> None:
    """At M = 1 (and M = 2 on the H200) BlockScaledFp4Plan's default kernel is fp4_matvec_bf16, which reads none of
    the diet/l2/occupancy sets' fp4_mma_bf16 macros: ``--m 2 --variants diet`` timed identical kernels under different
    names and recorded the macros as if they had run. Refused before the GPU; every ``regs`` variant forces
    fp4_mma_bf16, so that set keeps M 1..16 (not run here: on a GPU machine it would measure)."""
    out = _run("--m", "2,4", "--variants", variants, "--json", str(tmp_path / "x.json"))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"--m: expected M values of 3..16 with --variants {variants}" in out.stderr
    assert "received 2" in out.stderr
    assert all("kernel" in knobs for knobs, _ in load_benchmark("fp4_mma_ab").VARIANTS["regs"].values())


def test_the_split_set_names_each_variants_cluster_and_warps() -> None:
    split = load_benchmark("fp4_mma_ab").VARIANTS["split"]
    assert split["default"] == ({}, {})
    assert split["s1"] == ({"kernel": "fp4_mma_bf16", "split_k": 1}, {})  # the unsplit baseline: see below
    for name, (knobs, defines) in split.items():
        if name not in ("default", "s1"):
            assert name == f"s{knobs['split_k']}w{knobs['warps']}" and knobs["kernel"] == "fp4_mma_bf16" and not defines

