"""benchmarks/streamk_model.py (the host port of CUTLASS 4.2's SM90 stream-K scheduler) and the pieces of
benchmarks/streamk_probe.py that run without a GPU; and, on a built library, that no CUTLASS kernel is
instantiated in two translation units (the failure of the first nondeterministic-reduction entries)."""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mircuda as mc
from benchmark_script import BENCHMARKS, load_benchmark
from mircuda.matmul import _build

if str(BENCHMARKS) not in sys.path:  # the model's dataclasses need their module in sys.modules
    sys.path.insert(0, str(BENCHMARKS))
import streamk_model as model

ODD = [(37, 136, 264), (129, 1032, 1000), (300, 520, 1024), (1029, 264, 136), (96, 4096, 4096), (200, 2816, 4096)]
MIDDLE = [(m, n, k) for n, k in model.SHAPES for m in model.MIDDLE_M]


def coverage(d) -> dict[int, list[tuple[int, int]]]:  # type: ignore[no-untyped-def]
    """Output tile -> the (first K tile, count) pieces computed for it, over every CTA."""
    out: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for segs in d.units:
        for s in segs:
            out[s.tile].append((s.k_idx, s.count))
    return out


@pytest.mark.parametrize("variant", model.VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("m, n, k", ODD + MIDDLE, ids=lambda v: str(v))
def test_every_k_tile_of_every_output_tile_is_computed_once(variant, m, n, k) -> None:
    d = model.decompose(m, n, k, variant.tile, 132, variant.max_swizzle, variant.mode, variant.splits)
    cov = coverage(d)
    assert sorted(cov) == list(range(d.output_tiles))
    for tile, pieces in cov.items():
        pos = 0
        for start, count in sorted(pieces):
            assert start == pos and count > 0, (tile, sorted(pieces))
            pos += count
        assert pos == d.k_tiles, (tile, sorted(pieces))
    p = model.predict(d, nondeterministic=variant.nondeterministic)
    assert not p.deadlock and p.us > 0
    if d.mode == "stream-K":  # CUTLASS never leaves a split of fewer than 8 K tiles
        assert all(c >= model.MIN_ITERS_PER_SK_UNIT for ps in cov.values() if len(ps) > 1 for _, c in ps)


def test_m384_on_6144_with_swizzle_4_is_192_stream_k_tiles_as_ncu_measured() -> None:
    # ncu on the H200 (2026-12-01, sm90_coop_128x128x64_streamk_bf16_bf16 at M = 384, N = 6144, K = 4096):
    # grid 132, workspace 12.58 MB. 144 tiles would need 9.44 MB; the swizzle rounds 3x48 up to 4x48.
    d = model.decompose(384, 6144, 4096, (128, 128, 64), 132, 4, "heuristic")
    assert (d.padded_m, d.padded_n, d.output_tiles, d.phantom_tiles) == (4, 48, 192, 48)
    assert (d.mode, d.sk_tiles, d.sk_units, d.dp_tiles, d.groups, d.k_tiles_per_sk_unit) == ("stream-K", 192, 132, 0,
                                                                                               4, 93)
    assert d.workspace_bytes == 192 * 128 * 128 * 4 + 192 * 2 * 4 == 12_584_448
    assert model.predict(d).groups_share == "A"  # the four groups start on four weight tiles
    one = model.decompose(384, 6144, 4096, (128, 128, 64), 132, 1, "heuristic")
    assert (one.output_tiles, one.phantom_tiles, one.groups, one.k_tiles_per_sk_unit) == (144, 0, 3, 69)
    assert one.workspace_bytes == 144 * 128 * 128 * 4 + 144 * 2 * 4
    assert model.predict(one).groups_share == "B"
    assert model.predict(one).max_k_tiles < model.predict(d).max_k_tiles


def test_128x192_at_m768_on_4096_is_two_waves_with_swizzle_4_and_one_without() -> None:
    # measured on the H200 (2026-12-01, sweep): sm90_coop_128x192x64 at M = 768 on 4096x4096 71.8 µs,
    # at M = 384 35.2 µs: 6x22 = 132 tiles, rounded to 8x24 = 192 (two waves of 132 SMs)
    four = model.decompose(768, 4096, 4096, (128, 192, 64), 132, 4, "dp")
    one = model.decompose(768, 4096, 4096, (128, 192, 64), 132, 1, "dp")
    assert (four.output_tiles, one.output_tiles) == (192, 132)
    assert model.predict(four).max_k_tiles == 128 and model.predict(one).max_k_tiles == 64


def test_the_heuristic_keeps_a_more_than_half_full_last_wave_data_parallel() -> None:
    heuristic = model.decompose(384, 4096, 4096, (128, 128, 64), 132, 1, "heuristic")  # 96 tiles
    forced = model.decompose(384, 4096, 4096, (128, 128, 64), 132, 1, "streamk")
    assert heuristic.mode == "data-parallel" and forced.mode == "stream-K" and forced.sk_tiles == 96
    # two waves and more: the tiles of the first full waves stay data-parallel
    big = model.decompose(768, 14336, 4096, (128, 128, 64), 132, 1, "heuristic")  # 672 tiles, 5.09 waves
    assert (big.mode, big.dp_tiles, big.sk_tiles) == ("stream-K", 4 * 132, 672 - 4 * 132)


def test_the_heuristic_turns_split_k_when_units_divide_evenly_over_tiles() -> None:
    d = model.decompose(256, 2816, 4096, (128, 128, 64), 132, 1, "heuristic")  # 2x22 = 44 tiles, 132 units
    assert (d.mode, d.splits) == ("split-K", 3)


def test_a_nondeterministic_reduction_never_waits_longer() -> None:
    for m, n, k in ODD + MIDDLE:
        d = model.decompose(m, n, k, (128, 128, 64), 132, 1, "heuristic")
        assert model.predict(d, nondeterministic=True).us <= model.predict(d).us + 1e-9


def test_the_model_runs_from_the_command_line(capsys, tmp_path) -> None:
    out = tmp_path / "m.json"
    assert model.main(["--m", "384", "--json", str(out)]) == 0
    assert "sk128/1" in capsys.readouterr().out and out.is_file()
    assert model.main(["--m", "384", "--detail"]) == 0
    assert "stream-K" in capsys.readouterr().out


def _prefixes() -> set[str]:
    text = (Path(mc.__file__).parent / "cutlass_build" / "src" / "instance.cuh").read_text()
    return set(re.findall(r'#define MIRCUDA_PREFIX\w* "([a-z0-9_]+)_"', text))


def test_the_probe_times_kernels_the_build_makes() -> None:
    probe = load_benchmark("streamk_probe")
    assert set(probe.default_kernels()) <= _prefixes()
    assert {v.name for v in model.VARIANTS if v.built} <= _prefixes()
    assert probe.sample_rows(300) == [0, 127, 128, 150, 255, 256, 299]
    assert probe.sample_rows(1) == [0]


def _local_kernel_stubs(path: Path) -> list[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run([nm, str(path)], capture_output=True, text=True, check=True).stdout
    return [f[2] for f in (line.split() for line in out.splitlines())
            if len(f) == 3 and f[1] == "t" and "device_kernel" in f[2] and not f[2].endswith(".cold")
            and "__tmp" not in f[2] and "__handle" not in f[2]]


@pytest.mark.cutlass
def test_no_kernel_is_instantiated_in_two_translation_units() -> None:
    # Two TUs with one kernel type give two static host stubs and one merged kernel_launch: a runner
    # then raises the shared-memory limit of one copy and launches the other (sm90.cuh, Schedule).
    stubs = _local_kernel_stubs(_build.find_library())
    assert stubs, "no CUTLASS kernel host stubs found"
    twice = [s for s, c in collections.Counter(stubs).items() if c > 1]
    assert not twice, f"{len(twice)} kernels with two host stubs, e.g. {twice[0][-120:]}"
