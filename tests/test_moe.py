"""The grouped NVFP4 plans without a GPU: specs and their checks, the tile-shape rule, the exports, the
construction checks that need no device, and the portable kernels (``cuda_src/fp4_grouped.cu``) compiled
by NVRTC for sm_80, sm_90 and sm_120f for every m-tile size, both split modes, both bank-scale layouts,
one and two operand sets and the indexed variant; their PTX runs FP16 ``mma.sync.m16n8k16``, streams the
weights past L1, builds the tile list with a self-resetting ticket, and decodes E2M1 through one seam.
Numerics, graphs, the error flag and numba_execute are checked on the GPU (``tests/gpu/test_moe_gpu.py``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import mircuda as mc
from mircuda.matmul import _fp4_reference as fp4_ref
from mircuda.matmul._moe_kernels import (GROUPED_SYMBOL, ROWS_PER_TILE, SETUP_SYMBOL, DecodeTuning,
                                         choose_rows_per_tile, default_rows_per_tile, default_tuning,
                                         grouped_options, grouped_source, tile_shape, workspace_ints)

MMA_PTX = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"


def options(mt: int = 16, *, n: int = 768, k: int = 2048, groups: int = 64, bank: int = 64, capacity: int = 512,
            fixed: int = 0, tiled: bool = True, sets: int = 1, variant: str | None = None,
            tuning: DecodeTuning | None = None) -> mc.CompileOptions:
    return grouped_options(n=n, k=k, groups=groups, bank_size=bank, capacity=capacity, rows_per_tile=mt,
                           fixed_rows=fixed, tiled=tiled, sets=sets, variant=variant, tuning=tuning)


def ptx(arch: str, opts: mc.CompileOptions) -> str:
    return mc.compile_program(grouped_source(), arch, mc.CompileOptions(defines=dict(opts.defines),
                                                                           output="ptx")).image.decode()


def entry(text: str, symbol: str) -> str:
    start = text.index(f".entry {symbol}")
    nxt = text.find(".entry ", start + 1)
    return text[start:] if nxt < 0 else text[start:nxt]


# -- specs -----------------------------------------------------------------------------------------
def test_specs_are_frozen_and_check_their_dimensions() -> None:
    s = mc.VariableGroupedFp4Spec(768, 2048, 4096, 128, 128)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.n = 1  # type: ignore[misc]
    assert s.flops(10) == 2 * 10 * 768 * 2048
    i = mc.IndexedGroupedFp4Spec(256, 512, 4, 20, 6)
    assert (i.capacity, i.groups, i.flops) == (80, 20, 2 * 80 * 256 * 512)
    for bad, name in (((768, 2040, 16, 2, 2), "k"), ((0, 2048, 16, 2, 2), "n"), ((768, 2048, True, 2, 2), "capacity"),
                      ((768, 2048, 16, 0, 2), "groups"), ((768, 2048, 16, 2, 1.5), "bank_size")):
        with pytest.raises(mc.ContractError) as info:
            mc.VariableGroupedFp4Spec(*bad)
        assert info.value.argument == name
    with pytest.raises(mc.ContractError) as info:
        mc.IndexedGroupedFp4Spec(256, 512, 2**16, 2**16, 4)
    assert info.value.argument == "rows"


@pytest.mark.parametrize("integer", [np.int16, np.uint16, np.int32, np.int64], ids=lambda t: t.__name__)
def test_numpy_integer_dimensions_are_stored_as_python_ints_and_flops_counts_exactly(integer) -> None:
    """Every spec field is a Python int, and flops(rows) takes a numpy integer as the int: 2 * np.int16(300) * 768
    * 2048 once wrapped in int16."""
    s = mc.VariableGroupedFp4Spec(integer(768), integer(2048), integer(4096), integer(128), integer(128))
    assert all(type(getattr(s, f)) is int for f in ("n", "k", "capacity", "groups", "bank_size"))
    flops = s.flops(integer(300))
    assert flops == 2 * 300 * 768 * 2048 and type(flops) is int
    assert s.flops(0) == 0
    i = mc.IndexedGroupedFp4Spec(integer(256), integer(512), integer(300), integer(200), integer(6))
    assert all(type(getattr(i, f)) is int for f in ("n", "k", "rows", "products", "bank_size"))
    assert (i.capacity, i.flops) == (60000, 2 * 60000 * 256 * 512) and type(i.flops) is int


@pytest.mark.parametrize("rows", [-1, 1.5, True, np.bool_(True), "10", None], ids=repr)
def test_flops_refuses_a_row_count_that_is_not_a_non_negative_int(rows) -> None:
    with pytest.raises(mc.ContractError) as info:
        mc.VariableGroupedFp4Spec(768, 2048, 4096, 128, 128).flops(rows)
    assert info.value.argument == "rows" and info.value.received == repr(rows)


def test_the_plans_and_specs_are_exported() -> None:
    for name in ("VariableGroupedFp4Plan", "IndexedGroupedFp4Plan", "PairedVariableGroupedFp4Plan",
                 "VariableGroupedFp4Spec", "IndexedGroupedFp4Spec", "GroupedFp4Operands"):
        assert name in mc.__all__ and getattr(mc, name) is getattr(mc.matmul, name)
    assert (mc.matmul.ERROR_MATRIX_INDEX, mc.matmul.ERROR_ROWS) == (1, 2)


@pytest.mark.parametrize("cls", ["VariableGroupedFp4Plan", "IndexedGroupedFp4Plan", "PairedVariableGroupedFp4Plan"])
def test_construction_refuses_a_wrong_spec_or_context_by_name(cls) -> None:
    plan = getattr(mc, cls)
    with pytest.raises(mc.ContractError) as info:
        plan(object(), object(), mc.DenseMatmulSpec(1, 16, 16))
    assert info.value.argument == "spec"
    spec = (mc.IndexedGroupedFp4Spec(16, 16, 1, 2, 2) if cls.startswith("Indexed") else
            mc.VariableGroupedFp4Spec(16, 16, 4, 2, 2))
    with pytest.raises(mc.ContractError) as info:
        plan(object(), object(), spec)
    assert info.value.argument == "context"


# -- tile shape ------------------------------------------------------------------------------------
@pytest.mark.parametrize("rows, want", [(1, 8), (8, 8), (9, 16), (16, 16), (17, 32), (33, 64), (1000, 64)])
def test_the_tile_holds_the_expected_rows_of_a_group(rows, want) -> None:
    assert choose_rows_per_tile(rows) == want


@pytest.mark.parametrize("capacity, groups, fixed, want", [
    (2, 8, 0, 8),          # Mixtral, 1 token top-2: every row fits one tile
    (32, 8, 0, 8),         # Mixtral, 16 tokens: 4 rows per expert on average, room for 8 (split_k tiles: 2x)
    (24, 8, 0, 8),         # 12 tokens: 3 rows on average
    (40, 8, 0, 32),        # 20 tokens: 5 on average; 4x (20) is a staged tile: room for 4x, as before
    (128, 128, 0, 8),      # fine-grained, 16 tokens top-8: 1 row on average
    (2048, 128, 0, 64),    # fine-grained, 256 tokens: the staged variant
    (8192, 8, 0, 64),
    (80, 20, 4, 8), (320, 20, 16, 16), (340, 10, 34, 64)])  # indexed: exactly R rows
def test_the_default_tile_leaves_room_for_uneven_routing(capacity, groups, fixed, want) -> None:
    assert default_rows_per_tile(capacity, groups, fixed) == want


def test_the_default_tile_is_the_docstrings_rule_on_a_grid_of_capacities_and_groups() -> None:
    """default_rows_per_tile's docstring, read independently: the smallest of 8, 16, 32, 64 holding
    min(capacity, 4 mean) (64 above), mean = ceil(capacity / groups), but min(capacity, 2 mean) where the 4x tile
    would be a split_k one (<= 16 rows): a mean of 3 or 4 rows always takes 8-row tiles; the indexed plan's R
    rows take the smallest tile holding R."""
    def smallest(rows: int) -> int:
        return next((t for t in (8, 16, 32, 64) if t >= rows), 64)

    for capacity in range(1, 300):
        for groups in range(1, 40):
            mean = -(-capacity // groups)
            four = smallest(min(capacity, 4 * mean))
            want = smallest(min(capacity, 2 * mean)) if four <= 16 else four
            assert default_rows_per_tile(capacity, groups) == want, (capacity, groups)
            if mean in (3, 4):
                assert want == 8, (capacity, groups)
    for rows in range(1, 100):
        assert default_rows_per_tile(rows * 7, 7, rows) == smallest(rows), rows


def test_the_grid_covers_every_m_tile_of_non_overlapping_groups() -> None:
    # 1 token, top-8 of 128 experts: at most 8 non-empty groups of one row.
    s = tile_shape(n=768, capacity=8, groups=128, rows_per_tile=8, fixed_rows=0, sets=1)
    assert (s.tiles, s.weight_blocks, s.variant) == (8, 48, "split_k")
    # 4096 tokens top-2 of 8: ceil(8192 / 64) + 8 m-tiles at most; staged: 256 weight rows per block.
    s = tile_shape(n=14336, capacity=8192, groups=8, rows_per_tile=64, fixed_rows=0, sets=2)
    assert (s.tiles, s.weight_blocks, s.variant, s.sets) == (136, 56, "staged", 2)
    s = tile_shape(n=14336, capacity=8192, groups=8, rows_per_tile=64, fixed_rows=0, sets=1, variant="split_n")
    assert (s.weight_blocks, s.variant) == (112, "split_n")
    # Indexed: P ceil(R / MT) exactly.
    assert tile_shape(n=100, capacity=200, groups=20, rows_per_tile=8, fixed_rows=10, sets=1).tiles == 40
    assert workspace_ints(5) == 22


def test_each_group_of_counts_fits_the_slots() -> None:
    """Non-overlapping groups within the capacity never need more m-tiles than the grid has slots (the
    bound the grid is built from), for every tile size: exhaustive over small cases."""
    import itertools

    for mt in ROWS_PER_TILE:
        for capacity in (1, 3, 8, 17, 64, 65):
            for groups in (1, 2, 5):
                slots = tile_shape(n=16, capacity=capacity, groups=groups, rows_per_tile=mt, fixed_rows=0,
                                   sets=1).tiles
                for counts in itertools.product(range(0, capacity + 1, max(1, capacity // 4)), repeat=groups):
                    if sum(counts) <= capacity:
                        assert sum(-(-c // mt) for c in counts) <= slots


# -- NVRTC -----------------------------------------------------------------------------------------
CONFIGS = [dict(mt=8), dict(mt=16, tiled=False), dict(mt=32, sets=2), dict(mt=64, k=1040), dict(mt=16, fixed=5),
           dict(mt=64, sets=2, tiled=False, k=96, n=259, groups=3, bank=2, capacity=50),
           dict(mt=64, variant="split_n"), dict(mt=16, variant="staged", k=1040), dict(mt=32, variant="split_k")]


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
def test_the_kernels_compile_for_every_tile_layout_and_target(arch, config) -> None:
    cfg = dict(config)
    prog = mc.compile_program(grouped_source(), arch, options(cfg.pop("mt"), **cfg))
    assert prog.image[:4] == b"\x7fELF"
    assert SETUP_SYMBOL.encode() in prog.image and GROUPED_SYMBOL.encode() in prog.image


@pytest.mark.parametrize("mt, k, variant, tuning", [
    (8, 2048, "split_k", None), (16, 2048, "split_k", None), (32, 1040, "split_n", None), (64, 4096, "split_n", None),
    (32, 1040, "staged", None), (64, 4096, "staged", None), (8, 4096, "split_k", DecodeTuning("e4m3", 3, 8, 1)),
    (16, 4096, "split_k", DecodeTuning("e4m3", 4, 4, 1)), (8, 2048, "split_k", DecodeTuning("pairs", 2, 16, 2)),
    (8, 1040, "split_k", DecodeTuning("e4m3", 3, 8, 2))], ids=str)
def test_the_grouped_kernel_runs_fp16_mma_and_streams_weights_past_l1(mt, k, variant, tuning) -> None:
    body = entry(ptx("compute_90", options(mt, k=k, variant=variant, tuning=tuning)), GROUPED_SYMBOL)
    wide = k % 32 == 0
    stages = 2 if tuning is None else tuning.stages
    frags = 2 if variant == "staged" else 1 if tuning is None else tuning.frags  # 16-row weight fragments
    copies = 1 if variant == "staged" else stages  # the ring's slots are unrolled: one consume per slot
    # per consume E / 4 mmas per n8 tile and fragment
    assert body.count(MMA_PTX) == (8 if wide else 4) * (mt // 8) * frags * copies
    # rows g and g + 8 of each fragment: staged the first step and the next one; the ring its prologue
    # (one load per slot) and one refill per slot
    assert body.count("ld.global.nc.L1::no_allocate." + ("v4.u32" if wide else "v2.u32")) == 2 * frags * 2 * copies
    assert ("bar.sync" in body) == (variant != "split_n")  # split N needs no block-wide synchronization
    if variant == "staged":
        assert "ld.shared.v2.u32" in body and "st.shared.v2.u32" in body
    decode = "bytes" if tuning is None else tuning.decode
    assert (body.count("cvt.rn.f16x2.e4m3x2") > 0) == (decode == "e4m3")


@pytest.mark.parametrize("e", [16, 32])
def test_the_staged_layout_hands_each_lane_its_columns_without_bank_conflicts(e) -> None:
    """The shared-memory layout of the staged variant (fp4_grouped.cu's staged_index and consume_staged):
    every (row, column) of a K step is written by exactly one decode unit, each lane's B fragment reads the
    columns its weight bytes 2 jm, 2 jm + 1 hold (E t + 4 jm .. + 3, fp4_mma_gemv.cu's k order), and the
    16 lanes of each half-warp start their 8-byte loads at 16 distinct even banks."""
    mt = 64
    chunk, chunk_halves = 4 * e, e + 4
    row_halves = 4 * chunk_halves

    def staged_index(m: int, c: int) -> int:
        return m * row_halves + (c // e) * chunk_halves + c % e

    written: dict[int, tuple[int, int]] = {}
    for u in range(mt * chunk // 16):  # stage_activations: unit -> row, 16 columns, 8-byte stores of 4 halves
        m, c0 = u // (chunk // 16), (u % (chunk // 16)) * 16
        base = staged_index(m, c0)
        assert (2 * base) % 8 == 0
        for i in range(16):
            assert base + i not in written
            written[base + i] = (m, c0 + i)
    assert len(written) == mt * chunk
    for j in range(mt // 8):
        for jm in range(e // 4):
            banks = {}
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                start = (8 * j + g) * row_halves + t * chunk_halves + 4 * jm
                assert [written[start + i] for i in range(4)] == [(8 * j + g, e * t + 4 * jm + i) for i in range(4)]
                banks.setdefault(lane // 16, []).append((2 * start // 4) % 32)
            for half in banks.values():
                assert len(set(half)) == 16 and all(b % 2 == 0 for b in half)


def test_the_setup_kernel_builds_the_tile_list_with_a_self_resetting_ticket() -> None:
    body = entry(ptx("compute_90", options(16)), SETUP_SYMBOL)
    assert "atom.global.inc.u32" in body and "atom.global.or.b32" in body and "membar.gl" in body
    assert "ld.global.cg" in body  # the last block reads the others' counts from L2


def test_the_e2m1_decode_goes_through_one_local_seam() -> None:
    text = grouped_source().text
    body = text[text.index("constexpr int kDecode = MIRCUDA_MOE_DECODE;"):]  # the file's own code, headers above
    assert body.count("fp4::decode_half(") == 1  # fp4_common.cuh's decoders, one half2 at a time
    assert "0x1C1C1C1C" not in body and "0x0E000E00" not in body  # no decoder of its own
    assert "decode_pair(" not in body and "ue4m3_to_float" not in body  # scales by bit operations
    assert "cvt.rn.f16x2.e2m1x2" in entry(ptx("compute_120f", options(16)), GROUPED_SYMBOL)
    assert "cvt.rn.f16x2.e2m1x2" not in entry(ptx("compute_90", options(16)), GROUPED_SYMBOL)
    for decode in ("pairs", "e4m3"):
        tuned = entry(ptx("compute_120f", options(16, tuning=DecodeTuning(decode, 3))), GROUPED_SYMBOL)
        assert "cvt.rn.f16x2.e2m1x2" not in tuned and ("cvt.rn.f16x2.e4m3x2" in tuned) == (decode == "e4m3")


def test_the_e4m3_decode_is_refused_below_cc_8_9_by_name() -> None:
    with pytest.raises(mc.CompileError, match="needs compute capability >= 8.9"):
        mc.compile_program(grouped_source(), "sm_80", options(8, tuning=DecodeTuning("e4m3", 3)))
    assert default_tuning("sm_80", "split_k") == DecodeTuning("pairs", 3, 8, 1)
    assert default_tuning("sm_90", "split_k") == DecodeTuning("e4m3", 2, 4, 2)
    assert default_tuning("sm_120f", "split_k") == DecodeTuning("e4m3", 2, 8, 1)
    assert default_tuning("sm_90", "staged") == DecodeTuning("e4m3", 2, 8, 1)


def test_without_its_shape_the_source_refuses_to_compile_by_name() -> None:
    with pytest.raises(mc.CompileError, match="MIRCUDA_MOE_N"):
        mc.compile_program(grouped_source(), "sm_90", mc.CompileOptions(defines={}))
    bad = dict(options(16).defines)
    bad["MIRCUDA_MOE_MT"] = 24
    with pytest.raises(mc.CompileError, match="8, 16, 32 or 64"):
        mc.compile_program(grouped_source(), "sm_90", mc.CompileOptions(defines=bad))


# -- the decoders of fp4_grouped.cu (decode_half, scale_half2), bit for bit in numpy --------------------
def e2m1_value(code: int) -> float:
    return float(fp4_ref.e2m1_decode(np.array([code], np.uint8))[0])


def ue4m3_value(byte: int) -> float:
    return 480.0 if byte & 0x7F == 0x7F else float(fp4_ref.ue4m3_decode(np.array([byte & 0x7F], np.uint8))[0])


def word_element(decode: str, i: int, hi: int) -> int:
    """The element (0..7 of a word) in half2 i's low (hi 0) or high half: fp4_grouped.cu's header."""
    return i + 4 * hi if decode == "pairs" else 4 * (i & 1) + (i >> 1) + 2 * hi if decode == "e4m3" else 2 * i + hi


def decode_half_bits(decode: str, w: int, i: int) -> tuple[int, str]:
    """decode_half(w, i) as integer operations: (32 bits, what they hold: 'f16x2' or 'e4m3x2' in the low 16)."""
    m = 0xFFFFFFFF
    if decode == "pairs":
        mag, sign = ((w << (9 - 4 * i)) & m, (w << (12 - 4 * i)) & m) if i < 3 else (w >> 3, w)
        return (mag & 0x0E000E00) | (sign & 0x80008000), "f16x2"
    if decode == "e4m3":
        v = (((w << 2) & 0x1C1C1C1C) | ((w << 4) & 0x80808080)) if i < 2 else (((w >> 2) & 0x1C1C1C1C) | (w & 0x80808080))
        return (v >> (16 * (i & 1))) & 0xFFFF, "e4m3x2"
    b = (w >> (8 * i)) & 0xFF
    return ((b & 0x8) << 12) | ((b & 0x7) << 9) | ((b & 0x80) << 24) | ((b & 0x70) << 21), "f16x2"


def half2_values(bits: int, kind: str) -> list[float]:
    if kind == "e4m3x2":  # cvt.rn.f16x2.e4m3x2: the low byte to the low half (E4M3 values are FP16 values)
        import ml_dtypes

        return [float(np.array([(bits >> (8 * h)) & 0xFF], np.uint8).view(ml_dtypes.float8_e4m3fn)[0]) for h in (0, 1)]
    return [float(np.array([(bits >> (16 * h)) & 0xFFFF], np.uint16).view(np.float16)[0]) for h in (0, 1)]


@pytest.mark.parametrize("decode, log2", [("bytes", 14), ("pairs", 14), ("e4m3", 6)])
def test_every_decoder_gives_each_byte_at_every_position_exactly_in_its_order(decode, log2) -> None:
    rng = np.random.default_rng(7)
    for pos in range(4):
        for byte in range(256):
            fill = [int(x) for x in rng.integers(0, 256, 4)]
            fill[pos] = byte
            w = sum(b << (8 * j) for j, b in enumerate(fill))
            elements = [(w >> (4 * j)) & 15 for j in range(8)]
            seen = []
            for i in range(4):
                got = half2_values(*decode_half_bits(decode, w, i))
                for hi in (0, 1):
                    el = word_element(decode, i, hi)
                    seen.append(el)
                    want = e2m1_value(elements[el]) / 2.0**log2
                    assert got[hi] == want and np.signbit(got[hi]) == bool(elements[el] & 8), (decode, hex(w), i, hi)
            assert sorted(seen) == list(range(8))  # every element once


@pytest.mark.parametrize("decode", ["bytes", "pairs", "e4m3"])
def test_the_scale_bits_times_every_code_are_exact_fp16_operands(decode) -> None:
    """scale_half2: (u & 0x7f) << 7 read as FP16 is the UE4M3 scale x 2^-8 (sign dropped, subnormals too);
    the e4m3 route multiplies its x 2^-6 codes by it, the others by it x 256 (an exact HMUL2): every
    operand is q s 2^-14, exact in FP16 (numpy's float16 product rounds the exact float32 product once)."""
    for u in range(256):
        bits = ((u & 0x7F) << 7) & 0xFFFF
        s16 = np.array([bits], np.uint16).view(np.float16)[0]
        assert float(s16) == ue4m3_value(u) / 256.0
        factor = s16 if decode == "e4m3" else np.float16(float(s16) * 256.0)
        assert float(factor) == ue4m3_value(u) / (1.0 if decode != "e4m3" else 256.0)
        for code in range(16):
            dec = np.float16(e2m1_value(code) / 2.0 ** (6 if decode == "e4m3" else 14))
            got = float(np.float16(dec * factor))
            assert got == e2m1_value(code) * ue4m3_value(u) / 2.0**14, (decode, u, code)


# -- numpy emulation of the setup and grouped kernels ----------------------------------------------
def emulate_grouped(a, sa, bank, sbank, counts, offsets, indices, *, n: int, k: int, capacity: int, bank_size: int,
                    mt: int, variant: str, layout: str, alphas, decode: str = "bytes",
                    frags: int = 1) -> tuple[np.ndarray, int]:
    """fp4_grouped_setup and fp4_grouped_bf16 lane by lane (exact float64 mma sums, before the BF16
    rounding): the validation and error bits, the tile list (prefix sums, binary search), the persistent
    walk, the weight rows of each variant, the staged shared-memory layout, the stores; asserts every
    read is in bounds and every output is written at most once. Returns (output [capacity, N] with NaN
    where nothing was written, error bits)."""
    from tests.test_matmul_fp4_mma import scale_byte, scaled

    e_cols = 32 if k % 32 == 0 else 16
    chunk, steps, n8 = 4 * e_cols, -(-k // (4 * e_cols)), mt // 8
    per_scale = fp4_ref.scale_bytes(n, k, layout)
    # setup
    bits, table = 0, []
    for c, o, idx in zip(counts, offsets, indices):
        b = (1 if not 0 <= idx < bank_size else 0) | (2 if c < 0 or o < 0 or o + c > capacity else 0)
        bits |= b
        table.append((0, 0, 0) if b else (int(c), int(o), int(idx)))
    prefix = [0]
    for c, _, _ in table:
        prefix.append(prefix[-1] + -(-c // mt))
    tuning = DecodeTuning(decode, 2, 8, frags) if variant == "split_k" else None
    shape = tile_shape(n=n, capacity=capacity, groups=len(counts), rows_per_tile=mt, fixed_rows=0, sets=1,
                       variant=variant, tuning=tuning)
    out = np.full((capacity, n), np.nan)

    def half2(codes, p, s):  # operand(codes, p, scale): half2 p = half p % 4 of word p / 4, decode's order
        if decode == "bytes":
            return scaled(codes, p, s)
        els = [8 * (p >> 2) + word_element(decode, p & 3, hi) for hi in (0, 1)]
        vals = [e2m1_value((int(codes[el // 2]) >> (4 * (el & 1))) & 15) * ue4m3_value(s) / 2.0**14 for el in els]
        half = np.array(vals, np.float16)
        assert [float(h) for h in half] == vals, "inexact FP16 operand"
        return half

    def weight_pair(e, row, col, jm):
        row = min(row, n - 1)
        codes = bank[e].reshape(n, k // 2)[row, col // 2: col // 2 + e_cols // 2]
        s = scale_byte(sbank[e * per_scale:(e + 1) * per_scale], row, col // 16 + jm // 4, k, layout, n)
        return half2(codes, 2 * jm, s), half2(codes, 2 * jm + 1, s)

    def act_pair(row, col, jm):  # half2 2 jm (k 2t, 2t+1 of mma jm) and 2 jm + 1 (k 2t+8, 2t+9)
        assert 0 <= row < capacity
        codes = a[row, col // 2: col // 2 + e_cols // 2]
        s = scale_byte(sa, row, col // 16 + jm // 4, k, "linear", capacity)
        return half2(codes, 2 * jm, s), half2(codes, 2 * jm + 1, s)

    for x in range(shape.tiles):
        for tile in range(x, prefix[-1], shape.tiles):
            g = max(i for i in range(len(table)) if prefix[i] <= tile)  # find_group
            local = tile - prefix[g]
            c, o, e = table[g]
            rows, xrow0 = min(mt, c - local * mt), o + local * mt
            assert rows >= 1
            for y in range(shape.weight_blocks):
                rows16 = ([16 * (y * frags + f) for f in range(frags)] if variant == "split_k" else
                         [(y * 8 + w) * 16 for w in range(8)] if variant == "split_n" else
                         [(y * 8 + w) * 32 + 16 * f for w in range(8) for f in range(2)])
                for nrow0 in rows16:
                    acc = np.zeros((n8, 16, 8))
                    for step in range(steps):
                        for jm in range(e_cols // 4):
                            amat, bmats = np.zeros((16, 16)), np.zeros((n8, 16, 8))
                            for lane in range(32):
                                gg, t = lane >> 2, lane & 3
                                col = step * chunk + e_cols * t
                                if col >= k:
                                    continue
                                for r in range(2):
                                    lo, hi = weight_pair(e, nrow0 + gg + 8 * r, col, jm)
                                    amat[gg + 8 * r, 2 * t: 2 * t + 2], amat[gg + 8 * r, 2 * t + 8: 2 * t + 10] = lo, hi
                                for j in range(n8):
                                    m = gg + 8 * j
                                    if m < rows:
                                        lo, hi = act_pair(xrow0 + m, col, jm)
                                        bmats[j, 2 * t: 2 * t + 2, gg], bmats[j, 2 * t + 8: 2 * t + 10, gg] = lo, hi
                            for j in range(n8):
                                acc[j] += amat @ bmats[j]
                    for lane in range(32):
                        gg, t = lane >> 2, lane & 3
                        for j in range(n8):
                            for el in range(4):
                                m, row = 8 * j + 2 * t + (el & 1), nrow0 + gg + 8 * (el >> 1)
                                if m < rows and row < n:
                                    assert np.isnan(out[xrow0 + m, row]), "an output written twice"
                                    out[xrow0 + m, row] = alphas[e] * 2.0**28 * acc[j, gg + 8 * (el >> 1), 2 * t + (el & 1)]
    return out, bits


@pytest.mark.parametrize("variant, mt, decode, frags", [
    ("split_k", 8, "bytes", 1), ("split_k", 16, "bytes", 1), ("split_n", 8, "bytes", 1), ("staged", 16, "bytes", 1),
    ("split_k", 8, "e4m3", 2), ("split_k", 16, "pairs", 1)])
@pytest.mark.parametrize("n, k, layout", [(24, 80, "tiled"), (19, 96, "linear")])
def test_the_emulated_grouped_kernel_matches_float64_for_valid_and_invalid_groups(variant, mt, decode, frags, n, k,
                                                                                 layout) -> None:
    rng = np.random.default_rng(n * 100 + k + mt)
    bank_size, capacity = 3, 30
    quantized = [fp4_ref.quantize(rng.standard_normal((n, k)).astype(np.float32), layout=layout)
                 for _ in range(bank_size)]
    bank = [q[0] for q in quantized]
    sbank = np.concatenate([q[1].ravel() for q in quantized])
    a, sa, _ = fp4_ref.quantize(rng.standard_normal((capacity, k)).astype(np.float32), layout="linear")
    # groups: 9 rows, empty, 17 rows (two m-tiles of 16, three of 8), a bad index, rows past the capacity
    counts, offsets, indices = [9, 0, 17, 2, 3], [0, 9, 9, 26, 28], [2, 1, 0, 3, 1]
    alphas = [0.5, 2.0, 0.75]
    got, bits = emulate_grouped(a, sa, bank, sbank, counts, offsets, indices, n=n, k=k, capacity=capacity,
                                bank_size=bank_size, mt=mt, variant=variant, layout=layout, alphas=alphas,
                                decode=decode, frags=frags)
    assert bits == 3
    a64 = fp4_ref.dequantize(a, sa, capacity, k, "linear")
    for c, o, e in ((9, 0, 2), (17, 9, 0)):
        want = alphas[e] * a64[o:o + c] @ fp4_ref.dequantize(bank[e], quantized[e][1], n, k, layout).T
        np.testing.assert_allclose(got[o:o + c], want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    assert np.isnan(got[26:]).all()  # the invalid groups' rows are never written


# -- ptxas and SASS --------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
@pytest.mark.parametrize("mt, k, variant", [(8, 2048, "split_k"), (16, 1040, "split_k"), (64, 4096, "split_n"),
                                            (32, 2048, "staged"), (64, 4096, "staged"), (64, 1040, "staged")])
def test_ptxas_keeps_every_variant_in_registers_with_the_shared_memory_it_plans(arch, mt, k, variant) -> None:
    opts = options(mt, k=k, variant=variant)
    prog = mc.compile_program(grouped_source(), arch, mc.CompileOptions(defines=dict(opts.defines), ptxas_verbose=True))
    usage = prog.resource_usage()
    grouped, setup = usage[GROUPED_SYMBOL], usage[SETUP_SYMBOL]
    for kernel in (grouped, setup):
        assert kernel.spill_store_bytes == kernel.spill_load_bytes == kernel.stack_frame_bytes == 0, kernel
    e = 32 if k % 32 == 0 else 16
    want = {"split_k": 7 * (mt // 8) * 4 * 32 * 4, "split_n": 0, "staged": 2 * mt * 4 * (2 * e + 8)}[variant]
    assert grouped.shared_bytes == want
    assert grouped.registers <= 255 and setup.shared_bytes >= 8 * 4


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120f"])
@pytest.mark.parametrize("mt, k, groups", [(8, 4096, 8), (16, 4096, 8), (8, 2048, 128), (16, 2048, 128),
                                           (16, 1040, 300)])
def test_the_default_split_k_fits_128_registers_without_spills(arch, mt, k, groups) -> None:
    """At most 128 registers (__launch_bounds__(256, 2): 16 warps per SM, each with its ring of loads), with
    the ballot scan's prefix registers (G <= 128) or the binary search (G = 300)."""
    tuning = default_tuning(arch, "split_k")
    opts = options(mt, k=k, variant="split_k", tuning=tuning, groups=groups, bank=groups)
    prog = mc.compile_program(grouped_source(), arch, mc.CompileOptions(defines=dict(opts.defines), ptxas_verbose=True))
    grouped = prog.resource_usage()[GROUPED_SYMBOL]
    assert grouped.spill_store_bytes == grouped.spill_load_bytes == grouped.stack_frame_bytes == 0, grouped
    # the block's warps but one hand their partial sums over: (warps - 1) x frags x n8 fragments of 512 bytes
    assert grouped.registers <= 128 and grouped.shared_bytes == (tuning.warps - 1) * tuning.frags * (mt // 8) * 512


@pytest.mark.parametrize("mt", [8, 16])
def test_every_sweep_candidate_compiles_within_its_register_budget(mt) -> None:
    """moe-profile --sweep all on sm_90 (the H200): each candidate within 2048 / (32 warps) / blocks-per-SM
    registers; at 8-row tiles all without spills, at 16-row tiles those of 16-row blocks and <= 3 stages
    (4 stages there spill a few bytes at 128 registers: a sweep candidate, never the default)."""
    from mircuda.cli._moe_profile import parse_candidates

    for cand in parse_candidates("all"):
        tuning = cand.resolve(default_tuning("sm_90", "split_k"))
        opts = options(mt, k=4096, variant="split_k", tuning=tuning)
        prog = mc.compile_program(grouped_source(), "sm_90",
                                  mc.CompileOptions(defines=dict(opts.defines), ptxas_verbose=True))
        grouped = prog.resource_usage()[GROUPED_SYMBOL]
        assert grouped.registers <= 65536 // 512, (cand.text, grouped)
        if mt == 8 or (tuning.frags == 1 and tuning.stages <= 3):
            assert grouped.spill_store_bytes == grouped.stack_frame_bytes == 0, (cand.text, grouped)


@pytest.mark.parametrize("arch", ["sm_90", "sm_120"])
@pytest.mark.parametrize("variant, mt", [("split_k", 16), ("staged", 64)])
def test_the_sass_holds_hmma(tmp_path, arch, variant, mt) -> None:
    import subprocess

    from tests.test_matmul_fp8_mma import cuobjdump

    tool, env = cuobjdump()
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(mc.compile_program(grouped_source(), arch, options(mt, variant=variant)).image)
    out = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, env=env, check=False)
    if out.returncode or "Function" not in out.stdout:
        pytest.skip(f"cuobjdump -sass failed (nvdisasm missing?): {out.stderr.strip()[:200]}")
    assert "HMMA.16816.F32" in out.stdout


@pytest.mark.parametrize("variant, mt", [("split_k", 8), ("split_n", 32), ("staged", 64)])
def test_on_hopper_and_later_both_kernels_wait_for_the_previous_grid_before_touching_memory(variant, mt) -> None:
    text = ptx("compute_90", options(mt, variant=variant))
    for symbol in (SETUP_SYMBOL, GROUPED_SYMBOL):
        body = entry(text, symbol)
        wait = body.index("griddepcontrol.wait")
        assert all(body.find(op) > wait for op in ("ld.global", "st.global", "atom.global") if op in body)
        assert "griddepcontrol.launch_dependents" in body
    assert "griddepcontrol" not in ptx("compute_80", options(mt, variant=variant))


@pytest.mark.parametrize("make, field", [
    (lambda: DecodeTuning("fp8"), "tuning.decode"),
    (lambda: DecodeTuning(""), "tuning.decode"),
    (lambda: DecodeTuning(None), "tuning.decode"),  # type: ignore[arg-type]
    (lambda: DecodeTuning(["e4m3"], 2, 8, 1), "tuning.decode"),  # type: ignore[arg-type]
    (lambda: DecodeTuning("pairs", 5), "tuning.stages"),
    (lambda: DecodeTuning("e4m3", 2.0, 8, 1), "tuning.stages"),  # type: ignore[arg-type]
    (lambda: DecodeTuning("pairs", 2, 6), "tuning.warps"),
    (lambda: DecodeTuning("e4m3", 2, True, 1), "tuning.warps"),
    (lambda: DecodeTuning("pairs", 2, 8, 3), "tuning.frags"),
    (lambda: DecodeTuning("dp4a", max_registers=64), "tuning.max_registers"),
    (lambda: DecodeTuning("dp4a", row_warps=3), "tuning.row_warps"),
    (lambda: DecodeTuning("dp4a", persistent=1), "tuning.persistent"),  # type: ignore[arg-type]
    (lambda: DecodeTuning("dp4a", lean_tiles="yes"), "tuning.lean_tiles")], ids=str)  # type: ignore[arg-type]
def test_a_tuning_outside_every_variants_values_is_refused_when_made(make, field) -> None:
    # no GPU needed: what no variant or target takes is refused by the constructor
    with pytest.raises(mc.ContractError) as info:
        make()
    assert info.value.argument == field


@pytest.mark.parametrize("tuning, variant, arch, field", [
    (DecodeTuning("e4m3"), "split_k", "sm_80", "tuning.decode"),
    (DecodeTuning("dp4a"), "split_k", "sm_90", "tuning.decode"),
    (DecodeTuning("pairs", 2, 4), "staged", "sm_90", "tuning.warps"),
    (DecodeTuning("pairs", 2, 8, 2), "split_n", "sm_90", "tuning.frags"),
    (DecodeTuning("pairs", 3, 8, 1), "staged", "sm_90", "tuning.stages"),
    (DecodeTuning("pairs", 2, 1, 1), "split_k", "sm_90", "tuning.warps"),
    ("e4m3", "split_k", "sm_90", "tuning")], ids=str)
def test_a_tuning_the_plans_variant_or_target_cannot_take_is_refused_by_field(tuning, variant, arch, field) -> None:
    from mircuda.matmul._moe_kernels import check_tuning

    with pytest.raises(mc.ContractError) as info:
        check_tuning(tuning, variant, arch)
    assert info.value.argument == field
    assert check_tuning(DecodeTuning("pairs", 4, 16, 2), "split_k", "sm_80") == DecodeTuning("pairs", 4, 16, 2)


def test_the_tuned_grid_covers_n_with_16_or_32_row_blocks_of_4_to_16_warps() -> None:
    for frags, warps in ((1, 4), (2, 16)):
        shape = tile_shape(n=300, capacity=40, groups=8, rows_per_tile=8, fixed_rows=0, sets=1, variant="split_k",
                           tuning=DecodeTuning("e4m3", 3, warps, frags))
        assert shape.weight_blocks == -(-300 // (16 * frags)) and shape.warps == warps


@pytest.mark.parametrize("groups, ballots", [(8, True), (128, True), (129, False)])
def test_the_tile_group_comes_from_ballots_over_registers_up_to_128_groups(groups, ballots) -> None:
    body = entry(ptx("compute_90", options(8, groups=groups, bank=groups)), GROUPED_SYMBOL)
    assert ("vote.sync.ballot.b32" in body) == ballots


def test_a_tuning_takes_numpy_integers_and_its_none_fields_come_from_the_targets_default() -> None:
    import numpy as np

    from mircuda.matmul._moe_kernels import check_tuning, resolve_tuning

    got = check_tuning(DecodeTuning("e4m3", np.int64(3), np.int32(16), np.uint8(2), np.False_), "split_k", "sm_90")
    assert got == DecodeTuning("e4m3", 3, 16, 2, False)
    assert all(type(v) is int for v in (got.stages, got.warps, got.frags)) and type(got.persistent) is bool
    assert resolve_tuning(None, "split_k", "sm_90") == default_tuning("sm_90", "split_k")
    assert resolve_tuning(DecodeTuning("pairs"), "split_k", "sm_90") == DecodeTuning("pairs", 2, 4, 2)
    assert resolve_tuning(DecodeTuning("pairs", warps=16), "split_k", "sm_80") == DecodeTuning("pairs", 3, 16, 1)
    # the vector variant's own defaults: the occupancy rule's warps (0), 4-row blocks, 2 stages
    assert resolve_tuning(DecodeTuning("e4m3", persistent=True), "vector", "sm_90") == DecodeTuning("e4m3", 2, 0, 1, True)
    with pytest.raises(mc.ContractError) as info:
        resolve_tuning("e4m3", "split_k", "sm_90")
    assert info.value.argument == "tuning"
