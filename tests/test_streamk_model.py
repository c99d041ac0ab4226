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
    d = variant.decompose(m, n, k)
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


def test_128x144_at_m384_on_6144_is_one_wave_with_swizzle_1_and_two_with_4() -> None:
    # 3x43 = 129 tiles of 64 K tiles on 132 SMs; 4 rounds them up to 4x44 = 176 (issue 16: cuBLAS 28.4 µs,
    # our best 35.2 on the H200, 2026-12-01)
    one = model.decompose(384, 6144, 4096, (128, 144, 64), 132, 1, "dp")
    four = model.decompose(384, 6144, 4096, (128, 144, 64), 132, 4, "dp")
    assert (one.tiles_m, one.tiles_n, one.output_tiles, one.phantom_tiles) == (3, 43, 129, 0)
    assert (four.padded_m, four.padded_n, four.output_tiles) == (4, 44, 176)
    assert model.predict(one).max_k_tiles == 64 and model.predict(four).max_k_tiles == 128
    assert model.predict(one).us == pytest.approx(model.T0_US + 64 * model.C_K_US[(128, 144)])
    # 129 tiles fill more than half the wave: the stream-K entry stays data-parallel there
    assert model.decompose(384, 6144, 4096, (128, 144, 64), 132, 1, "heuristic").mode == "data-parallel"
    sk = model.decompose(512, 6144, 4096, (128, 144, 64), 132, 1, "heuristic")  # 172 tiles, 1.3 waves
    assert (sk.mode, sk.sk_tiles, sk.dp_tiles) == ("stream-K", 172, 0)


def test_unmeasured_tiles_cost_their_area_at_the_measured_tiles_cost_per_element() -> None:
    per_128 = model.C_K_MEASURED_US[(128, 128)] / (128 * 128)
    per_192 = model.C_K_MEASURED_US[(128, 192)] / (128 * 192)
    assert model.C_K_US[(128, 144)] == pytest.approx((0.75 * per_128 + 0.25 * per_192) * 128 * 144)
    assert model.C_K_US[(128, 160)] == pytest.approx((0.5 * per_128 + 0.5 * per_192) * 128 * 160)
    assert model.C_K_US[(128, 128)] < model.C_K_US[(128, 144)] < model.C_K_US[(128, 160)] < model.C_K_US[(128, 192)]
    for tile in [(128, 128), (128, 192), (64, 144), (128, 256)]:
        with pytest.raises(ValueError, match="area scaling"):
            model.area_scaled_c_k(*tile)


def test_the_2x1_cluster_rounds_m_tiles_to_the_cluster_then_to_the_swizzle() -> None:
    # M = 96 on 4096x4096: 1 M tile, 2 with the cluster, 4 with swizzle 4 (4x the work); 2 with swizzle 1
    four = model.decompose(96, 4096, 4096, (128, 256, 64), 132, 4, "dp", cluster_m=2)
    one = model.decompose(96, 4096, 4096, (128, 256, 64), 132, 1, "dp", cluster_m=2)
    assert (four.tiles_m, four.padded_m, four.padded_n, four.phantom_tiles) == (1, 4, 16, 48)
    assert (one.tiles_m, one.padded_m, one.padded_n, one.phantom_tiles) == (1, 2, 16, 16)
    # M = 768 (6 M tiles) on 14336x4096 (56 N tiles): 8x56 = 448 tiles (4 waves) with 4, 6x56 = 336 (3) with 1.
    # The sweep of 2026-12-01 measured the swizzle-4 kernel at M = 384 there: 187.8 µs (model: 179.3).
    four = model.decompose(768, 14336, 4096, (128, 256, 64), 132, 4, "dp", cluster_m=2)
    one = model.decompose(768, 14336, 4096, (128, 256, 64), 132, 1, "dp", cluster_m=2)
    assert (four.output_tiles, one.output_tiles) == (448, 336)
    assert (model.predict(four).max_k_tiles, model.predict(one).max_k_tiles) == (4 * 64, 3 * 64)
    # without the cluster, 6 tiles stay 6 with swizzle 1 and the 2x1 cluster pads 3 to 4
    assert model.decompose(384, 4096, 4096, (128, 256, 64), 132, 1, "dp", cluster_m=2).padded_m == 4
    assert model.decompose(384, 4096, 4096, (128, 256, 64), 132, 1, "dp").padded_m == 3


@pytest.mark.parametrize("m, n", [(96, 4096), (384, 14336), (768, 4096), (1536, 6144), (200, 2816), (4096, 1024)])
@pytest.mark.parametrize("swizzle", [1, 4])
def test_the_ctas_of_a_cluster_take_neighbouring_m_tiles_of_one_n_tile(m, n, swizzle) -> None:
    d = model.decompose(m, n, 4096, (128, 256, 64), 132, swizzle, "dp", cluster_m=2)
    tiles = [model._tile_mn(d, t) for t in range(d.output_tiles)]
    assert sorted(tiles) == [(i, j) for i in range(d.padded_m) for j in range(d.padded_n)]
    for t in range(0, d.output_tiles, 2):  # CTA 2c and 2c + 1 are one cluster (the grid is even)
        (m0, n0), (m1, n1) = tiles[t], tiles[t + 1]
        assert (n0 == n1, m0 % 2, m1) == (True, 0, m0 + 1), (t, tiles[t], tiles[t + 1])
    phantom = sum(model._phantom(d, t) for t in range(d.output_tiles))
    assert phantom == d.phantom_tiles


@pytest.mark.parametrize("swizzle", [1, 2, 4, 8])
def test_a_1x1_cluster_maps_tiles_as_before(swizzle) -> None:
    # the swizzle groups of CUTLASS's get_work_idx_m_and_n without a cluster: `swizzle` consecutive linear
    # tiles share the major index and take consecutive minor ones
    for m, n in [(1536, 4096), (4096, 1024), (768, 6144)]:
        d = model.decompose(m, n, 4096, (128, 128, 64), 132, swizzle, "dp")
        tiles = [model._tile_mn(d, t) for t in range(d.output_tiles)]
        assert sorted(tiles) == [(i, j) for i in range(d.padded_m) for j in range(d.padded_n)]
        major, minor = (1, 0) if d.raster == "N" else (0, 1)
        for t in range(0, d.output_tiles, d.swizzle):
            group = tiles[t:t + d.swizzle]
            assert len({x[major] for x in group}) == 1
            assert [x[minor] for x in group] == list(range(group[0][minor], group[0][minor] + d.swizzle))


def test_clusters_are_modelled_with_the_data_parallel_scheduler_only() -> None:
    for mode in ("heuristic", "streamk", "splitk"):
        with pytest.raises(ValueError, match="cluster_m=2"):
            model.decompose(384, 4096, 4096, (128, 256, 64), 132, 1, mode, cluster_m=2)
    with pytest.raises(ValueError, match="cluster_m=3"):
        model.decompose(384, 4096, 4096, (128, 256, 64), 132, 1, "dp", cluster_m=3)


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


@pytest.mark.parametrize("text", ["²", "1,²", "0", "1,,2", "96,96"])
def test_the_probe_refuses_a_bad_m_with_the_rule(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    # its own parse_ms (a near-copy of m_values) let '²' through isdigit() to int(): argparse said only
    # "invalid parse_ms value"; a repeated M was timed twice
    probe = load_benchmark("streamk_probe")
    with pytest.raises(SystemExit) as info:
        probe.main(["--m", text])
    err = capsys.readouterr().err
    assert info.value.code == 2 and ("expected comma-separated positive ints" in err or "expected each value once"
                                     in err or "without an empty item" in err), err


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


VARIANT_OF = [("sm90_coop_128x256x64_c2x1", ("sm90_coop_128x256x64_c2x1_swz1",)),
              ("sm90_coop_128x192x64", ("sm90_coop_128x192x64_swz1",)),
              ("sm90_coop_128x128x64_streamk", ("sm90_coop_128x128x64_streamk_swz1",
                                                "sm90_coop_128x128x64_streamk_forced_swz1",
                                                "sm90_coop_128x128x64_streamk_nd_swz1")),
              ("sm90_coop_128x192x64_streamk_swz1", ("sm90_coop_128x192x64_streamk_forced_swz1",)),
              ("sm90_pingpong_64x128x64", ("sm90_pingpong_64x128x64_nopdl",))]
"""A kernel's registry name -> the scheduler variants its translation unit registers with it."""


@pytest.mark.cutlass
def test_scheduler_variants_are_registered_with_their_kernel() -> None:
    # one TU registers the kernel and its variants (instance.cuh): a library with the kernel has them all,
    # with the kernel's tile, cluster and types
    from mircuda.matmul import _library

    lib = _library.CutlassLibrary(_build.find_library())
    by_name = {k.name: k for k in lib.kernels}
    checked = 0
    for base, variants in VARIANT_OF:
        for types in ("bf16_bf16", "bf16_f32", "f16_f16", "f16_f32"):
            kernel = by_name.get(f"{base}_{types}")
            if kernel is None:
                continue
            for variant in variants:
                v = by_name.get(f"{variant}_{types}")
                assert v is not None, (f"{variant}_{types} missing beside {kernel.name} in {lib.path}: a library "
                                      f"built before the variant (build-cutlass from this tree)")
                assert (v.family, v.tile, v.cluster, v.input, v.output, v.archs) == (
                    kernel.family, kernel.tile, kernel.cluster, kernel.input, kernel.output, kernel.archs)
                checked += 1
    for k in lib.kernels:  # the cooperative 128x144 kernels (SM90_PINGPONG128X144 is another family)
        if k.name.startswith("sm90_coop_128x144x64_"):
            assert (k.family, k.tile, k.cluster) == ("sm90_cooperative", (128, 144, 64), (1, 1)), k.name
    if not checked:
        pytest.skip(f"{lib.path} has none of the SM90 cooperative kernels with scheduler variants")
