"""The batched GEMV of DenseMatmulPlan (M <= 32) without a GPU: its CUDA C compiles with NVRTC for
Hopper and the SM12x family for one to four n8 tiles of A and one or two 16-row weight tiles, streams
weights with 16-byte loads past L1 into tensor-core mma.sync, and refuses an M outside 1..32 at compile
time."""

from __future__ import annotations

import re

import pytest

import mircuda as mc
from mircuda.matmul._gemv import (
    MAX_M,
    RULE_MAX_M,
    batched_gemv_source,
    choose_gemv,
    choose_launch,
    gemv_kernels,
    gemv_name,
    gemv_options,
    gemv_symbol,
    unroll_candidates,
)

SYMBOLS = [gemv_symbol(i, o, v) for i in ("bf16", "f16") for o in (i, "f32") for v in (True, False)]


@pytest.mark.parametrize("arch", ["sm_90", "sm_120f"])
@pytest.mark.parametrize("m, row_tiles", [(1, 1), (9, 1), (16, 1), (17, 2), (32, 1), (32, 2)])
def test_the_kernel_compiles_for_every_target_and_m(arch, m, row_tiles) -> None:
    prog = mc.compile_program(batched_gemv_source(), arch, gemv_options(m, 2, row_tiles))
    assert prog.image[:4] == b"\x7fELF"
    for symbol in SYMBOLS:
        assert symbol.encode() in prog.image


def entry(ptx: str, symbol: str) -> str:
    body = ptx[ptx.index(f".entry {symbol}"):]
    return body[: body.index("\n}")]


@pytest.mark.parametrize("m, tiles", [(1, 1), (8, 1), (9, 2), (16, 2), (24, 3), (32, 4)])
def test_weights_stream_past_l1_into_one_mma_pair_per_step_and_tile(m, tiles) -> None:
    options = mc.CompileOptions(defines={"MIRCUDA_GEMV_M": m}, output="ptx")
    ptx = mc.compile_program(batched_gemv_source(), "compute_90", options).image.decode()
    bf16 = entry(ptx, "batched_gemv_bf16_bf16_v16")
    # Chunked loop: four 32-column steps x two weight rows; one tail step: two more.
    assert bf16.count("ld.global.nc.L1::no_allocate.L2::128B.v4.u32") >= 4 * 2 * 2 + 2
    # Per step and n8 tile of A: two m16n8k16 (columns 8t..8t+3 and 8t+4..8t+7 of the lane).
    mma = re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32", bf16)
    assert len(mma) >= 2 * 4 * tiles
    assert "f16.f16.f32" in entry(ptx, "batched_gemv_f16_f32_v16")
    assert "mma.sync" in entry(ptx, "batched_gemv_f16_f16_any")


@pytest.mark.parametrize("arch, programmatic", [("compute_80", False), ("compute_90", True), ("compute_120", True)])
@pytest.mark.parametrize("m, late", [(4, True), (16, False)])
def test_on_hopper_and_later_the_kernel_waits_for_the_previous_grid_before_its_first_load(arch, programmatic, m, late) -> None:
    # Programmatic dependent launch: only L2 prefetches may precede griddepcontrol.wait. For M <= 8 the
    # next kernel may start once this block's loads are done, for larger M at once (measured, see the source).
    options = mc.CompileOptions(defines={"MIRCUDA_GEMV_M": m}, output="ptx")
    ptx = mc.compile_program(batched_gemv_source(), arch, options).image.decode()
    for symbol in SYMBOLS:
        body = entry(ptx, symbol)
        assert ("griddepcontrol.wait" in body) is programmatic
        if programmatic:
            wait = body.index("griddepcontrol.wait")
            trigger = body.index("griddepcontrol.launch_dependents")
            assert (trigger < wait) is not late
            if late and symbol.endswith("_v16"):  # after the last streamed weight load, before any store
                assert body.rindex("ld.global.nc.L1::no_allocate") < trigger < body.index("st.global")
            assert all(body.find(op) > wait for op in ("ld.global", "st.global"))
            assert "prefetch.global.L2" in body[:wait] or symbol.endswith("_any")


@pytest.mark.parametrize("m", [0, 33])
def test_an_m_outside_1_to_32_does_not_compile(m) -> None:
    with pytest.raises(mc.CompileError, match="MIRCUDA_GEMV_M"):
        mc.compile_program(batched_gemv_source(), "sm_90", gemv_options(m))


def test_symbols_name_types_and_load_width() -> None:
    assert gemv_symbol("bf16", "f32", True) == "batched_gemv_bf16_f32_v16"
    assert gemv_symbol("f16", "f16", False) == "batched_gemv_f16_f16_any"


@pytest.mark.parametrize("m, unroll", [(16, 2), (9, 2), (16, 1)])
def test_shorter_chunks_keep_one_mma_pair_per_step_and_tile(m, unroll) -> None:
    options = mc.CompileOptions(defines={"MIRCUDA_GEMV_M": m, "MIRCUDA_GEMV_UNROLL": unroll}, output="ptx")
    bf16 = entry(mc.compile_program(batched_gemv_source(), "compute_90", options).image.decode(),
                 "batched_gemv_bf16_bf16_v16")
    assert bf16.count("ld.global.nc.L1::no_allocate.L2::128B.v4.u32") >= unroll * 2 * 2 + 2
    assert len(re.findall(r"mma\.sync\.aligned\.m16n8k16", bf16)) >= 2 * unroll * 2


def test_two_row_tiles_issue_twice_the_weight_loads_and_mmas_per_activation_load() -> None:
    # Each 16-byte activation load (ld.global.nc.v4 without the L1 bypass) serves both 16-row tiles.
    def counts(row_tiles: int) -> tuple[int, int, int]:
        options = mc.CompileOptions(defines={"MIRCUDA_GEMV_M": 32, "MIRCUDA_GEMV_UNROLL": 1,
                                             "MIRCUDA_GEMV_ROW_TILES": row_tiles}, output="ptx")
        bf16 = entry(mc.compile_program(batched_gemv_source(), "compute_90", options).image.decode(),
                     "batched_gemv_bf16_bf16_v16")
        weights = bf16.count("ld.global.nc.L1::no_allocate.L2::128B.v4.u32")
        activations = len(re.findall(r"ld\.global\.nc\.v4\.u32", bf16))
        return weights, activations, len(re.findall(r"mma\.sync\.aligned\.m16n8k16", bf16))
    (w1, a1, m1), (w2, a2, m2) = counts(1), counts(2)
    assert a1 == a2 > 0
    assert w2 == 2 * w1 and m2 == 2 * m1


def test_an_odd_row_tiling_does_not_compile() -> None:
    options = mc.CompileOptions(defines={"MIRCUDA_GEMV_M": 8, "MIRCUDA_GEMV_ROW_TILES": 3})
    with pytest.raises(mc.CompileError, match="MIRCUDA_GEMV_ROW_TILES"):
        mc.compile_program(batched_gemv_source(), "sm_90", options)


def test_the_table_offers_both_row_tilings_up_to_m_32_and_the_rules_take_one_tile_up_to_16() -> None:
    assert (MAX_M, RULE_MAX_M) == (32, 16)
    names = [k.name for k in gemv_kernels()]
    assert names[:4] == [gemv_name(i, o) for i, o in (("bf16", "bf16"), ("bf16", "f32"), ("f16", "f16"), ("f16", "f32"))]
    assert gemv_name("bf16", "f32", 2) == "batched_gemv_rows32_bf16_f32" and gemv_name("bf16", "f32", 2) in names
    assert {k.tile for k in gemv_kernels()} == {(16, 32, 128), (32, 32, 128)}
    assert dict(gemv_options(4).defines) == {"MIRCUDA_GEMV_M": "4", "MIRCUDA_GEMV_UNROLL": "4"}
    assert dict(gemv_options(20, 1, 2).defines)["MIRCUDA_GEMV_ROW_TILES"] == "2"


def test_the_unroll_and_split_of_k_keep_the_most_weight_bytes_in_flight() -> None:
    assert unroll_candidates(1) == unroll_candidates(8) == (4,)
    assert unroll_candidates(9) == unroll_candidates(16) == (4, 2)
    assert unroll_candidates(17) == unroll_candidates(32) == (4, 2, 1)
    assert unroll_candidates(32, row_tiles=2) == unroll_candidates(17, row_tiles=2) == (2, 1)
    assert unroll_candidates(16, row_tiles=2) == unroll_candidates(2, row_tiles=2) == (4, 2, 1)
    # (unroll, warps, one wave) -> a grid resident in one wave, then the most warps x unroll, then the most warps
    # (H200 measurements in the docstring).
    assert choose_gemv([(4, 1, True), (2, 2, True)]) == (2, 2)   # 14336 x 4096
    assert choose_gemv([(4, 4, True), (2, 8, True)]) == (2, 8)   # 4096 x 4096, 4096 x 14336
    assert choose_gemv([(4, 4, True), (2, 4, True)]) == (4, 4)   # 6144 x 4096
    assert choose_gemv([(4, 8, True)]) == (4, 8)
    assert choose_gemv([(4, 1, False), (2, 1, True)]) == (2, 1)   # 28672 x 4096 at M = 16: 1.13 against 0.71 waves
    assert choose_gemv([(4, 1, False), (2, 1, False)]) == (4, 1)  # many waves either way: the bytes in flight
    assert choose_gemv([(4, 1, False), (2, 1, True), (1, 2, True)]) == (1, 2)  # then the bytes in flight, the warps


@pytest.mark.parametrize("arch", ["sm_90", "sm_120f"])
@pytest.mark.parametrize("m, row_tiles, unroll", [(16, 1, 4), (24, 1, 4), (32, 1, 2), (32, 2, 2), (17, 2, 1), (16, 2, 4),
                                                  (12, 2, 4)])
def test_the_sass_holds_bf16_tensor_core_mma_and_the_streamed_kernels_keep_to_registers(tmp_path, arch, m, row_tiles,
                                                                                         unroll) -> None:
    import subprocess

    from mircuda.matmul._sass import sass_functions
    from tests.test_matmul_fp8_mma import cuobjdump

    tool, env = cuobjdump()
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(mc.compile_program(batched_gemv_source(), arch, gemv_options(m, unroll, row_tiles)).image)
    out = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, env=env, check=False)
    if out.returncode or "Function" not in out.stdout:
        pytest.skip(f"cuobjdump -sass failed (nvdisasm missing?): {out.stderr.strip()[:200]}")
    functions = dict(sass_functions(out.stdout))
    v16 = functions["batched_gemv_bf16_bf16_v16"]
    assert "HMMA.16816.F32.BF16" in v16
    assert "HMMA.16816.F32" in functions["batched_gemv_f16_f32_v16"]
    for name, body in functions.items():  # the 16-byte-load kernels never spill (the element-load ones may)
        if name.endswith("_v16"):
            assert not re.search(r"\b(?:STL|LDL)\b", body), f"{name} spills to local memory on {arch}"


def h200_blocks_per_sm(regs: int, shared: int, warps: int) -> int:
    """``cuOccupancyMaxActiveBlocksPerMultiprocessor`` on the H200 (sm_90) for a kernel of ``regs`` registers and
    ``shared`` bytes of static shared memory at ``32 * warps`` threads, as ``cuda_occupancy.h`` computes it: the
    registers live in four sub-partitions of 16384 and are allocated per warp in units of 256 (8 per thread), so an
    SM holds ``4 * (16384 // per_warp)`` warps (not ``65536 // per_warp``: at 98 registers 16, not 19); shared
    memory is allocated in 128-byte units with 1 KiB reserved per block, out of 228 KiB; at most 32 blocks and 64
    warps."""
    per_warp = -(-regs * 32 // 256) * 256
    by_registers = 4 * (16384 // per_warp) // warps
    by_shared = 233472 // (-(-(shared + 1024) // 128) * 128)
    return min(32, 64 // warps, by_registers, by_shared)


def gemv_usage(m: int, row_tiles: int, tmp_path) -> dict[int, tuple[int, int]]:
    """``{unroll: (registers, static shared bytes)}`` of the ``_v16`` bf16 kernel of each unroll's sm_90 CUBIN
    (``cuobjdump -res-usage``)."""
    import subprocess

    from tests.test_matmul_fp8_mma import cuobjdump

    tool, env = cuobjdump()
    usage: dict[int, tuple[int, int]] = {}
    for unroll in unroll_candidates(m, row_tiles):
        cubin = tmp_path / f"m{m}_t{row_tiles}_u{unroll}.cubin"
        cubin.write_bytes(mc.compile_program(batched_gemv_source(), "sm_90", gemv_options(m, unroll, row_tiles)).image)
        out = subprocess.run([tool, "-res-usage", str(cubin)], capture_output=True, text=True, env=env, check=False)
        text = out.stdout.split(f"Function {gemv_symbol('bf16', 'bf16', True)}:", 1)
        found = re.search(r"REG:(\d+).*?SHARED:(\d+)", text[-1]) if len(text) == 2 else None
        if found is None:
            pytest.skip(f"cuobjdump -res-usage gave no usage: {out.stderr.strip()[:200]}")
        usage[unroll] = (int(found.group(1)), int(found.group(2)))
    return usage


def h200_resident(m: int, row_tiles: int, tmp_path) -> object:
    """A model of the occupancy query on the H200 for the ``_v16`` bf16 kernel of each unroll
    (:func:`h200_blocks_per_sm` of its registers and shared memory from its sm_90 CUBIN)."""
    usage = gemv_usage(m, row_tiles, tmp_path)

    def resident(unroll: int, warps: int) -> int:
        return h200_blocks_per_sm(*usage[unroll], warps)

    return resident


def test_the_h200_occupancy_model_is_cuda_occupancy_h(tmp_path) -> None:
    """:func:`h200_blocks_per_sm` against NVIDIA's own calculator (``cuda_occupancy.h``, compiled for the host with
    the H200's device properties) for every batched GEMV kernel of M = 9..32 at 1..8 warps and a sweep of register
    and shared-memory sizes. The first model (``65536 // per_warp``) gave 19 resident blocks at 98 registers
    where the calculator gives 16."""
    import shutil
    import subprocess
    from pathlib import Path

    from tests.test_matmul_fp8_mma import cuobjdump

    tool, _ = cuobjdump()
    header = next((p for p in (Path(tool).parent.parent / "include", Path("/usr/local/cuda/include"))
                   if (p / "cuda_occupancy.h").is_file()), None)
    compiler = shutil.which("c++") or shutil.which("g++")
    if header is None or compiler is None:
        pytest.skip("cuda_occupancy.h or a host C++ compiler not found")
    source = tmp_path / "occ.cpp"
    source.write_text("""#include <cstdio>
#include <cstdlib>
#include "cuda_occupancy.h"
int main(int argc, char **argv) {  // argv: (registers, shared bytes, warps) triples; the H200's properties
    cudaOccDeviceProp p;
    p.computeMajor = 9; p.computeMinor = 0; p.maxThreadsPerBlock = 1024; p.maxThreadsPerMultiprocessor = 2048;
    p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536; p.warpSize = 32; p.sharedMemPerBlock = 49152;
    p.sharedMemPerMultiprocessor = 233472; p.numSms = 132; p.sharedMemPerBlockOptin = 232448;
    p.reservedSharedMemPerBlock = 1024;
    cudaOccDeviceState s;
    for (int i = 1; i + 2 < argc; i += 3) {
        cudaOccFuncAttributes a;
        a.maxThreadsPerBlock = 256; a.numRegs = atoi(argv[i]); a.sharedSizeBytes = atoi(argv[i + 1]);
        a.numBlockBarriers = 1;
        cudaOccResult r;
        if (cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, 32 * atoi(argv[i + 2]), 0) != CUDA_OCC_SUCCESS)
            return 2;
        printf("%d\\n", r.activeBlocksPerMultiprocessor);
    }
    return 0;
}
""")
    binary = tmp_path / "occ"
    subprocess.run([compiler, "-O1", f"-I{header}", str(source), "-o", str(binary)], check=True, capture_output=True)
    usage = {value for m in (9, 12, 16, 24, 32) for value in gemv_usage(m, 1, tmp_path).values()}
    usage |= set(gemv_usage(32, 2, tmp_path).values())
    usage |= {(regs, shared) for regs in range(32, 256, 6) for shared in (0, 100, 5120, 9216, 13312, 17408, 40000)}
    cases = sorted((regs, shared, warps) for regs, shared in usage for warps in (1, 2, 4, 8))
    out = subprocess.run([str(binary), *(str(v) for case in cases for v in case)], capture_output=True, text=True,
                         check=True)
    got = [int(line) for line in out.stdout.split()]
    assert len(got) == len(cases)
    wrong = [(case, want) for case, want in zip(cases, got, strict=True) if h200_blocks_per_sm(*case) != want]
    assert not wrong, wrong[:10]
    assert h200_blocks_per_sm(98, 9216, 1) == 16 and h200_blocks_per_sm(162, 9216, 1) == 12


@pytest.mark.parametrize("m, row_tiles, shapes", [
    # (N, K) -> (unroll, warps): the measured table's shapes keep the bytes-in-flight order (their grids fit in one
    # wave with it); 28672 x 4096 (the decoder layer's gate_up) takes the grid that fits one wave.
    (12, 1, {(4096, 4096): (2, 8), (14336, 4096): (2, 2), (4096, 14336): (2, 8), (6144, 4096): (4, 4),
             (28672, 4096): (2, 1)}),
    (16, 1, {(4096, 4096): (2, 8), (14336, 4096): (2, 2), (4096, 14336): (2, 8), (6144, 4096): (4, 4),
             (28672, 4096): (2, 1), (128256, 4096): (4, 1)}),
    (24, 1, {(4096, 4096): (2, 8), (14336, 4096): (2, 2), (4096, 14336): (2, 8), (6144, 4096): (2, 4),
             (28672, 4096): (1, 2)}),
    (32, 1, {(4096, 4096): (4, 4), (14336, 4096): (4, 1), (4096, 14336): (4, 4), (6144, 4096): (2, 4)}),
    (32, 2, {(4096, 4096): (2, 8), (14336, 4096): (1, 4), (4096, 14336): (2, 8), (6144, 4096): (1, 8)}),
], ids=str)
def test_the_launch_prefers_a_grid_resident_in_one_wave_on_the_h200(tmp_path, m, row_tiles, shapes) -> None:
    resident = h200_resident(m, row_tiles, tmp_path)
    for (n, k), want in shapes.items():
        assert choose_launch(mc.DenseMatmulSpec(m, n, k), row_tiles, 132, resident) == want, (m, n, k)
