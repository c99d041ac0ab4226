"""Branch midm's SM90 entries, made after the kernels cuBLAS runs at middle M on the H200 (issue 16): each
family is known to the build (CMake, ``_build.FAMILIES``, ``instance.cuh``), and a built library registers
each entry with its family, tile, cluster and split-K flag, the stages CUTLASS's collective builder fitted,
and SASS whose HGMMA is as wide as the tile's N (the 48-, 112-, 144- and 176-wide tiles need CuTe's extended shapes)."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest

import mircuda as mc
from mircuda.matmul import _build, _library, _sass

MIDM = [
    # (family, registry prefix, library family, tile, cluster, split_k)
    ("SM90_SWAP96", "sm90_swap_128x96x64_c4x1_splitk", "sm90_swapped", (128, 96, 64), (4, 1), True),
    ("SM90_SWAP64X96", "sm90_swap_pingpong_64x96x64_c4x1", "sm90_swapped", (64, 96, 64), (4, 1), False),
    ("SM90_COOP176", "sm90_coop_128x176x64_c1x2_swz1", "sm90_cooperative", (128, 176, 64), (1, 2), False),
    ("SM90_SWAP192", "sm90_swap_128x192x64_c4x1_splitk", "sm90_swapped", (128, 192, 64), (4, 1), True),
    ("SM90_SWAP64X32", "sm90_swap_pingpong_64x32x64_c1x2", "sm90_swapped", (64, 32, 64), (1, 2), False),
    ("SM90_SWAP64X48", "sm90_swap_pingpong_64x48x64_c2x1", "sm90_swapped", (64, 48, 64), (2, 1), False),
    ("SM90_SWAP64X64", "sm90_swap_pingpong_64x64x64_c2x1", "sm90_swapped", (64, 64, 64), (2, 1), False),
    ("SM90_PINGPONG64X96", "sm90_pingpong_64x96x64_c2x1", "sm90_pingpong", (64, 96, 64), (2, 1), False),
    ("SM90_PINGPONG128X96", "sm90_pingpong_128x96x64_c1x2", "sm90_pingpong", (128, 96, 64), (1, 2), False),
    ("SM90_PINGPONG128X112", "sm90_pingpong_128x112x64_c1x2", "sm90_pingpong", (128, 112, 64), (1, 2), False),
    ("SM90_SWAP64X32_C4X1", "sm90_swap_pingpong_64x32x64_c4x1", "sm90_swapped", (64, 32, 64), (4, 1), False),
    ("SM90_PINGPONG128X144", "sm90_pingpong_128x144x64_c1x2", "sm90_pingpong", (128, 144, 64), (1, 2), False),
    ("SM90_PINGPONG128X176", "sm90_pingpong_128x176x64_c1x2", "sm90_pingpong", (128, 176, 64), (1, 2), False),
]
TYPES = ("bf16_bf16", "bf16_f32", "f16_f16", "f16_f32")
SRC = Path(mc.__file__).parent / "cutlass_build"


def _family_blocks() -> dict[str, str]:
    """instance.cuh's kernel block of each family: the text from its ``#elif defined(MIRCUDA_<family>)``
    to the next ``#elif``."""
    text = (SRC / "src" / "instance.cuh").read_text()
    parts = re.split(r"^#(?:el)?if defined\(MIRCUDA_(\w+)\)\s*$", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


@pytest.mark.parametrize("family, prefix, kind, tile, cluster, split_k", MIDM, ids=[f[0] for f in MIDM])
def test_each_family_is_known_to_the_build_with_its_prefix_tile_and_cluster(family, prefix, kind, tile, cluster,
                                                                             split_k) -> None:
    assert family in _build.FAMILIES and _build.parse_families(family.lower()) == (family,)
    cmake = (SRC / "CMakeLists.txt").read_text()
    sm90 = re.search(r'if\("90a" IN_LIST MIRCUDA_ARCHS\)\s*list\(APPEND _families ([^)]*)\)', cmake)
    assert sm90 is not None and family in sm90.group(1).split()
    block = _family_blocks()[family]
    assert f'#define MIRCUDA_PREFIX "{prefix}_"' in block
    assert f"kTile[3] = {{{tile[0]}, {tile[1]}, {tile[2]}}}, kCluster[2] = {{{cluster[0]}, {cluster[1]}}}" in block
    assert f"Shape<_{tile[0]}, _{tile[1]}, _{tile[2]}>, Shape<_{cluster[0]}, _{cluster[1]}, _1>" in block
    assert f"kSplitK = {int(split_k)};" in block
    # the stages the library reports are the collective builder's, not a literal
    assert "kStages = KernelConfig::kBuilderStages" in block
    # the static_assert on the WGMMA width covers every new tile
    assert f"#define MIRCUDA_WGMMA_N {tile[1]}" in block
    # swapped kernels take the weights as CUTLASS's A (Config's Swapped flag); the others the tokens
    swapped = re.search(r"Scheduler,\s*(true|false)>;", block)
    assert swapped is not None and swapped.group(1) == ("true" if kind == "sm90_swapped" else "false")


def test_prefixes_are_unique() -> None:
    text = (SRC / "src" / "instance.cuh").read_text()
    prefixes = re.findall(r'#define MIRCUDA_PREFIX\w* "([a-z0-9_]+)_"', text)
    assert len(prefixes) == len(set(prefixes)), [p for p, c in collections.Counter(prefixes).items() if c > 1]
    assert {p for _, p, *_ in MIDM} <= set(prefixes)


def _midm_kernels() -> tuple[_library.CutlassLibrary, list[tuple[tuple, _library.KernelInfo]]]:
    lib = _library.CutlassLibrary(_build.find_library())
    by_name = {k.name: k for k in lib.kernels}
    found = [(row, by_name[f"{row[1]}_{t}"]) for row in MIDM for t in TYPES if f"{row[1]}_{t}" in by_name]
    if not found:
        pytest.skip(f"{lib.path} has none of branch midm's entries")
    return lib, found


@pytest.mark.cutlass
def test_a_library_registers_each_entry_with_its_geometry_and_the_builders_stages() -> None:
    _, found = _midm_kernels()
    for (_, _, kind, tile, cluster, split_k), k in found:
        assert (k.family, k.tile, k.cluster, k.split_k, k.archs) == (kind, tile, cluster, split_k, (90,)), k.name
        # StageCountAutoCarveout: whatever shared memory the epilogue leaves, at least two stages (CUTLASS's
        # own minimum); the count is what describe() reports
        assert k.stages >= 2, k.name


SASS_HGMMA = re.compile(r"\bHGMMA\.64x(\d+)x16\b")


@pytest.mark.cutlass
def test_every_hgmma_is_as_wide_as_its_tile() -> None:
    # A CTA tile of N = 144 or 176 without CuTe's extended shapes is tiled with 64x16x16 HGMMAs:
    # every SM90 kernel's SASS must hold a single HGMMA width, and the entries' widths must all be there
    lib, found = _midm_kernels()
    if _sass.find_cuobjdump() is None:
        pytest.skip("needs cuobjdump (the CUDA toolkit or the nvidia-cuda-cuobjdump wheel)")
    sass, error = _sass.disassemble(lib.path, "sm_90a")
    assert not error, error
    widths = collections.Counter()
    for name, body in _sass.sass_functions(sass):
        shapes = set(SASS_HGMMA.findall(body))
        if shapes:
            assert len(shapes) == 1, (name[:160], shapes)
            widths[int(shapes.pop())] += 1
    assert {k.tile[1] for _, k in found} <= set(widths), widths
