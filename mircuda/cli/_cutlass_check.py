"""``python -m mircuda cutlass-check``: find (or build) the CUTLASS library, run every kernel that
runs on this GPU -- the library's dense kernels and DenseMatmulPlan's NVRTC kernels (the dense vector
kernel for M = 1, the batched GEMV for M <= 16) against a float64 numpy reference; every blockwise FP8
kernel (the library's, through BlockwiseFp8Plan with ``kernel=``, and the two NVRTC FP8 decode kernels)
against a float64 product of the dequantized operands -- and check the SASS (``cuobjdump``) of every sm_120f
dense kernel for the tensor-core instructions it is meant to use and of every FP8 kernel (sm_120f and
sm_90a) for the FP8 tensor-core MMA, naming the opcode found; every NVFP4 path of BlockScaledFp4Plan that
runs here (the NVRTC kernel for M <= 16, the portable decode + dense path, and on cc 12.x each of the
library's block-scaled NVFP4 kernels) against a float64 product of the dequantized operands, the SASS of
the library's NVFP4 kernels, single and grouped (``OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X``) and the E2M1
decode of the NVRTC
FP4 kernel compiled offline for sm_120f (``F2FP.F16.E2M1.UNPACK_B``) and sm_90 (software)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..matmul._sass import disassemble, sass_functions
from ._errors import RESULTS_HELP, check_results_file
from ._values import add_device_argument

__all__ = ["SassReport", "classify_function", "cutlass_check", "register", "sass_check"]

STUB_MARKER = b"Arch conditional MMA instruction used without targeting appropriate compute capability"

EXPECTED = {
    # family of a Kernel2<GemmUniversal<...>> function -> SASS it must contain (and must not)
    ("tensorop", "bf16"): (("HMMA.16816.F32.BF16", "LDGSTS", "LDSM"), ()),
    ("tensorop", "f16"): (("HMMA.16816.F32", "LDGSTS", "LDSM"), ("HMMA.16816.F32.BF16",)),
    ("simt", "bf16"): (("FFMA",), ("HMMA",)),
    ("simt", "f16"): (("FFMA",), ("HMMA",)),
}
"""sm_120f SASS per kernel kind: mma.sync m16n8k16 with FP32 accumulation (HMMA.16816.F32[.BF16]),
cp.async global->shared copies (LDGSTS) and ldmatrix (LDSM) for the TensorOp kernels; FP32 FMAs and
no tensor-core instruction for the SIMT fallback."""


@dataclass
class SassFunction:
    name: str
    kind: str
    input: str
    ok: bool
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)


@dataclass
class SassReport:
    arch: str
    functions: list[SassFunction]
    stub_free: bool
    error: str = ""

    @property
    def ok(self) -> bool:
        kinds = {(f.kind, f.input) for f in self.functions}
        return (not self.error and self.stub_free and bool(self.functions) and all(f.ok for f in self.functions)
                and {("tensorop", "bf16"), ("tensorop", "f16")} <= kinds)


def classify_function(mangled: str) -> tuple[str, str] | None:
    """(kind, input type) of a CUTLASS 2.x GemmUniversal kernel from its mangled name, else None."""
    if "GemmUniversal" not in mangled:
        return None
    kind = "tensorop" if "OpClassTensorOp" in mangled else "simt" if "OpClassSimt" in mangled else None
    if kind is None:
        return None
    i_bf16, i_f16 = mangled.find("bfloat16_t"), mangled.find("half_t")
    if i_bf16 < 0 and i_f16 < 0:
        return None
    first = min(i for i in (i_bf16, i_f16) if i >= 0)
    return kind, "bf16" if first == i_bf16 else "f16"


def sass_check(library: Path, arch: str = "sm_120f") -> SassReport:
    """Disassemble the library's ``arch`` code and check each kernel's instructions (see EXPECTED)."""
    stub_free = STUB_MARKER not in library.read_bytes()
    sass, error = disassemble(library, arch)
    if error:
        return SassReport(arch, [], stub_free, error)
    functions: list[SassFunction] = []
    for name, body in sass_functions(sass):
        kind = classify_function(name)
        if kind is None:
            continue
        need, avoid = EXPECTED[kind]
        missing = [op for op in need if op not in body]
        unexpected = [op for op in avoid if op in body]
        functions.append(SassFunction(name[:160], kind[0], kind[1], not missing and not unexpected, missing,
                                      unexpected))
    if not functions:
        return SassReport(arch, [], stub_free, f"no CUTLASS kernels in the {arch} code of {library.name}")
    return SassReport(arch, functions, stub_free)


@dataclass
class NumericsRow:
    kernel: str
    family: str
    m: int
    n: int
    k: int
    alpha: float
    beta: float
    max_excess: float
    ok: bool
    note: str = ""


def _shapes(family: str) -> list[tuple[int, int, int]]:
    return {"dense_vector": [(1, 4096, 4096), (1, 1032, 520), (1, 37, 1003)],
            "batched_gemv": [(1, 4096, 4096), (13, 1032, 520), (16, 37, 1003), (29, 1032, 520)],
            "sm90_swapped": [(1, 4096, 4096), (13, 1032, 520)],
            "sm90_pingpong": [(200, 1032, 776)],
            "sm90_cooperative": [(2048, 1024, 1024), (1029, 264, 136)],
            "sm80_tensorop": [(1, 4096, 512), (300, 520, 1024)],
            "simt": [(33, 100, 30), (64, 256, 512)]}.get(family, [(37, 136, 264)])


def _numerics(context: Any, stream: Any, pool: Any, lib: Any, kernel: Any, shape: tuple[int, int, int],
              rng: np.random.Generator) -> NumericsRow:
    import mircuda as mc

    from ._matmul_bench import upload

    m, n, k = shape
    in_t, out_t = getattr(mc, kernel.input), getattr(mc, kernel.output)
    alpha, beta = float(rng.uniform(0.5, 2.0)), float(rng.choice([0.0, rng.uniform(0.25, 1.0)]))
    a = rng.standard_normal((m, k)).astype(np.float32).astype(in_t)
    b = rng.standard_normal((n, k)).astype(np.float32).astype(in_t)
    c0 = (rng.standard_normal((m, n)).astype(np.float32) if beta else np.full((m, n), np.nan, np.float32)).astype(out_t)
    plan: mc.DenseMatmulPlan[Any, Any] = mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k), input=in_t,
                                                           output=None if out_t is in_t else out_t,
                                                           kernel=kernel.name, library=lib)
    bufs = [upload(context, stream, pool, host) for host in (a, b, c0)]
    plan.execute(stream, bufs[0], bufs[1], bufs[2], alpha, beta)
    back = context.allocate_pinned(out_t, m * n)
    stream.copy_to_host(bufs[2], back)
    got = back.to_numpy().astype(np.float64).reshape(m, n)
    for buf in bufs:
        buf.free(stream)
    plan.close()
    a64, b64, c64 = a.astype(np.float64), b.astype(np.float64), c0.astype(np.float64)
    want = alpha * (a64 @ b64.T) + (beta * c64 if beta else 0)
    mag = alpha * (np.abs(a64) @ np.abs(b64).T) + (beta * np.abs(c64) if beta else 0)
    unit = {"bf16": 2.0**-8, "f16": 2.0**-11, "f32": 2.0**-24}[kernel.output]
    bound = 2 * unit * np.abs(want) + 3e-5 * mag + 1e-30
    excess = float(np.max(np.abs(got - want) / bound)) if np.isfinite(got).all() else float("inf")
    return NumericsRow(kernel.name, kernel.family, m, n, k, alpha, beta, excess, excess <= 1.0)


FP8_ACCUMULATION = 2.0**-11
"""FP8 kernels' error allowed relative to sum |alpha a_k b_k| of the dequantized operands: Hopper's FP8
WGMMA accumulates with fewer than FP32's bits (DeepSeek-V3 technical report, section 3.3.2); the
blockwise mainloops promote each 128-K block's partial sum into FP32."""


def _fp8_shapes(family: str) -> list[tuple[int, int, int]]:
    """Shapes per FP8 kernel family: partial last 128-blocks of N and K where the kernel takes them."""
    return {"fp8_gemv": [(1, 1000, 1040), (16, 37, 304), (5, 4096, 4096)],
            "fp8_mma": [(2, 1000, 1040), (16, 37, 304), (9, 4096, 4096)],
            "sm90_blockwise_pingpong": [(17, 1032, 1040), (256, 4096, 528)],
            "sm90_blockwise_cooperative": [(300, 136, 272), (2048, 1024, 1024)],
            "sm120_blockwise": [(17, 1024, 1024), (300, 256, 4096)]}.get(family, [(64, 1024, 1024)])


def _fp8_numerics(context: Any, stream: Any, pool: Any, lib: Any, kernel: Any, shape: tuple[int, int, int],
                  rng: np.random.Generator) -> NumericsRow:
    """One FP8 kernel through BlockwiseFp8Plan(kernel=...) on quantized random operands (rows of
    magnitudes 2**-8..2**8), a NaN-poisoned D, against float64 of the dequantized operands."""
    import mircuda as mc
    from mircuda.matmul import (
        dequantize_reference,
        quantize_activations_reference,
        quantize_weights_reference,
    )

    from ._matmul_bench import upload

    m, n, k = shape
    alpha, beta = float(rng.uniform(0.5, 2.0)), float(rng.choice([0.0, rng.uniform(0.25, 1.0)]))

    def values(*dims: int) -> np.ndarray:
        x = rng.standard_normal(dims) * np.exp2(rng.integers(-8, 8, size=dims[:-1] + (1,)))
        return x.astype(np.float32).astype(mc.bf16)

    a, sa = quantize_activations_reference(values(m, k))
    b, sb = quantize_weights_reference(values(n, k))
    c0 = values(m, n) if beta else np.full((m, n), np.nan, np.float32).astype(mc.bf16)
    plan = mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k), kernel=kernel.name, library=lib)
    bufs = [upload(context, stream, pool, host.ravel()) for host in (a, sa, b, sb, c0)]
    da, dsa, db, dsb, dd = bufs
    plan.execute(stream, da, dsa, db, dsb, dd, alpha, beta)
    back = context.allocate_pinned(mc.bf16, m * n)
    stream.copy_to_host(dd, back)
    got = back.to_numpy().astype(np.float64).reshape(m, n)
    for buf in bufs:
        buf.free(stream)
    plan.close()
    a64, b64 = dequantize_reference(a, sa, (1, 128)), dequantize_reference(b, sb, (128, 128))
    c64 = c0.astype(np.float64)
    want = alpha * (a64 @ b64.T) + (beta * c64 if beta else 0)
    mag = alpha * (np.abs(a64) @ np.abs(b64).T) + (beta * np.abs(c64) if beta else 0)
    bound = 2 * 2.0**-8 * np.abs(want) + FP8_ACCUMULATION * mag + 1e-30
    excess = float(np.max(np.abs(got - want) / bound)) if np.isfinite(got).all() else float("inf")
    return NumericsRow(kernel.name, kernel.family, m, n, k, alpha, beta, excess, excess <= 1.0)


def _fp8_check(context: Any, stream: Any, pool: Any, lib: Any, rng: np.random.Generator, rows: list[NumericsRow],
               failures: list[str]) -> None:
    """Every FP8 kernel that runs on the device (cc >= 8.9): numerics rows appended, failures named."""
    import mircuda as mc
    from mircuda.matmul._select import fp8_gemv_entry, fp8_mma_entry

    info = context.device_info()
    if info.compute_capability < (8, 9):
        print(f"FP8: none runs on {info.name} (cc < 8.9)")
        return
    kernels = [fp8_gemv_entry(), fp8_mma_entry(),
               *(x for x in lib.scaled_kernels if x.runs_on(info.compute_capability))]
    print(f"FP8 numerics: {len(kernels)} blockwise kernels run here ({', '.join(x.name for x in kernels)}); bound "
          f"|got - want| <= 2u|want| + 2**-11 sum|a b| (dequantized)")
    for kernel in kernels:
        for shape in _fp8_shapes(kernel.family):
            try:
                row = _fp8_numerics(context, stream, pool, lib, kernel, shape, rng)
            except mc.MircudaError as exc:
                row = NumericsRow(kernel.name, kernel.family, *shape, 0, 0, float("inf"), False,
                                  f"{type(exc).__name__}: {exc}"[:200])
            rows.append(row)
            print(f"  {'ok  ' if row.ok else 'FAIL'} {row.kernel:<48} M={row.m:<5} N={row.n:<5} K={row.k:<5} "
                  f"beta={row.beta:.2f} error/bound {row.max_excess:.3f} {row.note}")
            if not row.ok:
                failures.append(f"{row.kernel} {shape}")


def _fp8_sass(lib: Any, failures: list[str]) -> list[dict[str, Any]]:
    """The FP8 SASS check of each arch the library holds FP8 kernels for (sm_120f, sm_90a), with the MMA
    opcodes found."""
    from dataclasses import asdict as as_dict

    from ..matmul._fp8_sass import blockwise_fp8_sass_check

    archs = [arch for arch, code in (("sm_120f", 120), ("sm_90a", 90))
             if any(code in x.archs for x in lib.scaled_kernels)]
    if not archs:
        print("FP8 SASS: the library holds no blockwise FP8 kernels (built without the FP8 family)")
        return []
    out = []
    for arch in archs:
        report = blockwise_fp8_sass_check(Path(lib.path), arch)
        print(f"FP8 SASS of the {arch} kernels:")
        if report.error:
            print(f"  FAIL {report.error}")
        for f in report.functions:
            print(f"  {'ok  ' if f.ok else 'FAIL'} {', '.join(f.opcodes) or 'no FP8 MMA'} x{f.mma_count} "
                  f"missing {f.missing or '-'} unexpected {f.unexpected or '-'}  {f.name[:60]}")
        if not report.ok:
            failures.append(f"FP8 SASS check of {arch}")
        out.append({"arch": arch, "error": report.error, "functions": [as_dict(f) for f in report.functions]})
    return out


FP4_CUTLASS_ACCUMULATION = 2.0**-11
"""The CUTLASS NVFP4 kernels' error allowed relative to sum |alpha a_k b_k| (dequantized): the width of the
block-scaled MMA's internal accumulation is not documented, so FP8's bound; the NVRTC and portable
paths (exact products, FP32 sums) keep the dense bound 3e-5."""
FP4_ACCUMULATION = 3e-5
"""The NVRTC and portable NVFP4 paths' FP32 accumulation error allowed relative to sum |alpha a_k b_k|."""
BF16_ROUNDOFF = 2.0**-8
"""One round-to-nearest to BF16's 8 significant bits, as relative error (the tests' ``UNIT_ROUNDOFF["bf16"]``)."""


def fp4_bound_terms(path: str, epilogue: str | None) -> tuple[float, float]:
    """``(c_want, c_magnitude)`` of the bound ``|got - want| <= c_want |want| + c_magnitude sum_k |alpha a_k b_k|``
    that cutlass-check holds an NVFP4 path's BF16 output to (dequantized operands, float64).

    The output's BF16 rounding (and alpha's FP32 roundings): ``2 u |want|``. The accumulation: CUTLASS's
    undocumented block-scaled MMA width (:data:`FP4_CUTLASS_ACCUMULATION`) or FP32 sums of exact products
    (:data:`FP4_ACCUMULATION`). The portable ``"decode+dense"`` path with ``epilogue="folded"`` (its default)
    rounds one operand to BF16 after folding alpha * global_a * global_b into it, ``x_k (1 + d_k)`` with
    ``|d_k| <= u``: the sum then differs from the exact one by at most ``u * magnitude`` and its products grew
    by at most ``1 + u``, so ``c_magnitude = FP4_ACCUMULATION * (1 + u) + u`` (the bound of
    ``tests/gpu/test_matmul_fp4_gpu.py``'s ``assert_close_plan``)."""
    u = BF16_ROUNDOFF
    if path == "cutlass":
        return 2 * u, FP4_CUTLASS_ACCUMULATION
    if path == "decode+dense" and epilogue == "folded":
        return 2 * u, FP4_ACCUMULATION * (1 + u) + u
    return 2 * u, FP4_ACCUMULATION


def _fp4_cases(lib: Any, cc: tuple[int, int]) -> list[tuple[str, str | None, str, str, tuple[int, int, int]]]:
    """``(label, kernel, activation, layout, (M, N, K))`` of every NVFP4 path that runs on a cc device:
    partial tiles in M, N and K; K a multiple of 16 but not 64 on the NVRTC and portable paths."""
    cases: list[tuple[str, str | None, str, str, tuple[int, int, int]]] = [
        ("fp4_gemv", None, "fp4", "linear", (1, 1000, 1040)), ("fp4_gemv", None, "bf16", "tiled", (13, 37, 304)),
        ("decode+dense", None, "fp4", "linear", (300, 1032, 1040)),
        ("decode+dense", None, "bf16", "tiled", (33, 264, 528))]
    for kernel in getattr(lib, "block_scaled_kernels", ()):
        if kernel.runs_on(cc):
            cases += [(kernel.name, kernel.name, "fp4", "tiled", shape)
                      for shape in ((300, 1032, 1056), (2048, 1024, 1024), (17, 264, 4096))]
    return cases


def _fp4_numerics(context: Any, stream: Any, pool: Any, lib: Any, case: tuple[str, str | None, str, str,
                  tuple[int, int, int]], rng: np.random.Generator) -> NumericsRow:
    """One NVFP4 path through BlockScaledFp4Plan (``kernel=`` for the library's kernels) on operands
    quantized by the numpy reference (ModelOpt's recipe), global scales in device memory, a NaN-poisoned
    D, against float64 of the dequantized operands."""
    import ml_dtypes

    import mircuda as mc
    from mircuda.matmul import fp4_dequantize_reference, fp4_quantize_reference

    from ._matmul_bench import upload

    label, kernel, activation, layout, (m, n, k) = case
    alpha = float(rng.uniform(0.5, 2.0))

    def values(rows: int) -> np.ndarray:
        x = rng.standard_normal((rows, k)) * np.exp2(rng.integers(-4, 4, size=(rows, 1)))
        return x.astype(np.float32).astype(mc.bf16)

    plan = mc.BlockScaledFp4Plan(context, stream, mc.DenseMatmulSpec(m, n, k), activation=activation,
                                 scale_layout=layout, library=lib, kernel=kernel)
    qb, sb, gb = fp4_quantize_reference(values(n), layout=layout)
    bufs = [upload(context, stream, pool, qb.ravel()), upload(context, stream, pool, sb.ravel().view(ml_dtypes.float8_e4m3fn)),
            upload(context, stream, pool, np.array([gb], np.float32))]
    b64 = fp4_dequantize_reference(qb, sb, n, k, layout)
    if activation == "fp4":
        qa, sa, ga = fp4_quantize_reference(values(m), layout=layout)
        bufs += [upload(context, stream, pool, qa.ravel()), upload(context, stream, pool, sa.ravel().view(ml_dtypes.float8_e4m3fn)),
                 upload(context, stream, pool, np.array([ga], np.float32))]
        a64, scale = fp4_dequantize_reference(qa, sa, m, k, layout), alpha * float(ga) * float(gb)
    else:
        a_host = values(m)
        bufs += [upload(context, stream, pool, a_host.ravel())]
        a64, scale = a_host.astype(np.float64), alpha * float(gb)
    d = upload(context, stream, pool, np.full(m * n, np.nan, np.float32).astype(mc.bf16))
    bufs.append(d)
    if activation == "fp4":
        plan.execute(stream, bufs[3], bufs[4], bufs[0], bufs[1], d, global_a=bufs[5], global_b=bufs[2], alpha=alpha)
    else:
        plan.execute(stream, bufs[3], None, bufs[0], bufs[1], d, global_b=bufs[2], alpha=alpha)
    back = context.allocate_pinned(mc.bf16, m * n)
    stream.copy_to_host(d, back)
    stream.synchronize()
    got = back.to_numpy().astype(np.float64).reshape(m, n)
    path, epilogue = plan.path, plan.epilogue
    for buf in bufs:
        buf.free(stream)
    plan.close()
    want, mag = scale * (a64 @ b64.T), abs(scale) * (np.abs(a64) @ np.abs(b64).T)
    c_want, c_mag = fp4_bound_terms(path, epilogue)
    bound = c_want * np.abs(want) + c_mag * mag + 1e-30
    excess = float(np.max(np.abs(got - want) / bound)) if np.isfinite(got).all() else float("inf")
    note = f"{activation} A, {layout} scales" + (f", epilogue={epilogue}" if epilogue else "")
    return NumericsRow(label, path, m, n, k, alpha, 0.0, excess, excess <= 1.0, note)


def _fp4_check(context: Any, stream: Any, pool: Any, lib: Any, rng: np.random.Generator, rows: list[NumericsRow],
               failures: list[str]) -> None:
    """Every NVFP4 path that runs on the device (cc >= 8.0): numerics rows appended, failures named."""
    import mircuda as mc

    info = context.device_info()
    if info.compute_capability < (8, 0):
        print(f"NVFP4: none runs on {info.name} (cc < 8.0)")
        return
    cases = _fp4_cases(lib, info.compute_capability)
    fp4_kernels = [x.name for x in getattr(lib, "block_scaled_kernels", ()) if x.runs_on(info.compute_capability)]
    print(f"NVFP4 numerics: the NVRTC kernel, the portable path{' and ' + ', '.join(fp4_kernels) if fp4_kernels else ''}"
          f" run here; bound |got - want| <= 2u|want| + ({FP4_ACCUMULATION:.0e}, folded portable "
          f"{fp4_bound_terms('decode+dense', 'folded')[1]:.1e}, CUTLASS {FP4_CUTLASS_ACCUMULATION:.1e}) sum|a b| "
          "(dequantized)")
    for case in cases:
        try:
            row = _fp4_numerics(context, stream, pool, lib, case, rng)
        except mc.MircudaError as exc:
            row = NumericsRow(case[0], "?", *case[4], 0, 0, float("inf"), False, f"{type(exc).__name__}: {exc}"[:200])
        rows.append(row)
        print(f"  {'ok  ' if row.ok else 'FAIL'} {row.kernel:<44} {row.family:<12} M={row.m:<5} N={row.n:<5} "
              f"K={row.k:<5} error/bound {row.max_excess:.3f} {row.note}")
        if not row.ok:
            failures.append(f"{row.kernel} {case[4]} ({row.note})")


def _fp4_sass(lib: Any, failures: list[str]) -> dict[str, Any]:
    """The SASS check of the library's NVFP4 kernels, single and grouped (when it holds them), and of the
    NVRTC FP4 kernel's E2M1 decode for sm_120f (cvt) and sm_90 (software), compiled offline."""
    from dataclasses import asdict as as_dict

    from ..matmul._fp4_sass import block_scaled_fp4_sass_check, nvrtc_decode_check

    out: dict[str, Any] = {"library": None, "grouped": _fp4_grouped_sass(lib, failures), "nvrtc": []}
    if getattr(lib, "block_scaled_kernels", ()):
        report = block_scaled_fp4_sass_check(Path(lib.path))
        print("NVFP4 SASS of the sm_120f kernels:")
        if report.error:
            print(f"  FAIL {report.error}")
        for f in report.functions:
            print(f"  {'ok  ' if f.ok else 'FAIL'} {', '.join(f.opcodes) or 'no block-scaled MMA'} x{f.mma_count} "
                  f"missing {f.missing or '-'} unexpected {f.unexpected or '-'}  {f.name[:60]}")
        if not report.ok:
            failures.append("NVFP4 SASS check of sm_120f")
        out["library"] = {"arch": report.arch, "error": report.error, "functions": [as_dict(f) for f in report.functions]}
    else:
        print("NVFP4 SASS: the library holds no block-scaled NVFP4 kernels (built without 120f or before them)")
    print("NVFP4 NVRTC decode (fp4_vector.cu compiled offline):")
    for arch in ("sm_120f", "sm_90"):
        r = nvrtc_decode_check(arch)
        sass = "no cuobjdump" if r.sass_cvt is None else f"SASS F2FP.F16.E2M1.UNPACK_B {r.sass_cvt}"
        print(f"  {'ok  ' if r.ok else 'FAIL'} {arch:<8} PTX cvt.rn.f16x2.e2m1x2 {r.ptx_cvt}, {sass} "
              f"(expected {r.expected}) {r.error}")
        if not r.ok:
            failures.append(f"NVFP4 NVRTC decode of {arch}")
        out["nvrtc"].append(as_dict(r))
    return out


def _fp4_grouped_sass(lib: Any, failures: list[str]) -> dict[str, Any] | None:
    """The SASS check of the library's grouped NVFP4 kernels (None when it holds none)."""
    from dataclasses import asdict as as_dict

    from ..matmul._fp4_sass import grouped_block_scaled_fp4_sass_check

    if not getattr(lib, "grouped_kernels", ()):
        print("NVFP4 grouped SASS: the library holds no grouped NVFP4 kernels (built without 120f or before them)")
        return None
    report = grouped_block_scaled_fp4_sass_check(Path(lib.path))
    print("NVFP4 grouped SASS of the sm_120f kernels:")
    if report.error:
        print(f"  FAIL {report.error}")
    for f in report.functions:
        print(f"  {'ok  ' if f.ok else 'FAIL'} {', '.join(f.opcodes) or 'no block-scaled MMA'} x{f.mma_count} "
              f"missing {f.missing or '-'} unexpected {f.unexpected or '-'}  {f.name[:60]}")
    if report.ok and len(report.functions) != len(lib.grouped_kernels):
        print(f"  FAIL {len(report.functions)} grouped GEMM functions for {len(lib.grouped_kernels)} grouped kernels")
        failures.append("NVFP4 grouped SASS check of sm_120f")
    elif not report.ok:
        failures.append("NVFP4 grouped SASS check of sm_120f")
    return {"arch": report.arch, "error": report.error, "functions": [as_dict(f) for f in report.functions]}


def cutlass_check(args: Any) -> int:
    import mircuda as mc

    from ..matmul._build import build, find_library
    from ..matmul._library import load_library

    if args.json:
        check_results_file(args.json, getattr(args, "json_default", None))

    driver = mc.Driver.initialize()  # no GPU: say so before a many-minute build
    driver.device(args.device)
    try:
        path = find_library()
    except mc.CutlassNotFound:
        print("the CUTLASS library is not built: building it (python -m mircuda build-cutlass)")
        path = build()
    lib = load_library(path)
    print(f"{lib}")
    failures: list[str] = []
    rows: list[NumericsRow] = []
    driver = mc.Driver.initialize()
    with driver.create_context(driver.device(args.device)) as context:
        info = context.device_info()
        stream = context.create_stream()
        pool = context.default_memory_pool()
        rng = np.random.default_rng()
        from ..matmul._dense import dense_kernels

        table = dense_kernels(lib)
        runnable = [k for k in table if k.runs_on(info.compute_capability)]
        print(f"numerics on {info.name} ({info.arch}): {len(runnable)} of {len(table)} kernels run here (the "
              "library's and the NVRTC kernels); bound |got - want| <= 2u|want| + 3e-5 sum|a b|")
        for kernel in runnable:
            for shape in _shapes(kernel.family):
                try:
                    row = _numerics(context, stream, pool, lib, kernel, shape, rng)
                except mc.MircudaError as exc:
                    row = NumericsRow(kernel.name, kernel.family, *shape, 0, 0, float("inf"), False,
                                      f"{type(exc).__name__}: {exc}"[:200])
                rows.append(row)
                mark = "ok  " if row.ok else "FAIL"
                print(f"  {mark} {row.kernel:<44} M={row.m:<5} N={row.n:<5} K={row.k:<5} beta={row.beta:.2f} "
                      f"error/bound {row.max_excess:.3f} {row.note}")
                if not row.ok:
                    failures.append(f"{row.kernel} {shape}")
        _fp8_check(context, stream, pool, lib, rng, rows, failures)
        _fp4_check(context, stream, pool, lib, rng, rows, failures)
        stream.synchronize()
    report = sass_check(Path(lib.path))
    print(f"SASS of the {report.arch} kernels ({'no' if report.stub_free else 'SOME'} printf stubs in the library):")
    if report.error:
        print(f"  FAIL {report.error}")
    for f in report.functions:
        print(f"  {'ok  ' if f.ok else 'FAIL'} {f.kind:<8} {f.input:<4} missing {f.missing or '-'} "
              f"unexpected {f.unexpected or '-'}  {f.name[:60]}")
    counts: dict[str, int] = {}
    for f in report.functions:
        counts[f"{f.kind}/{f.input}"] = counts.get(f"{f.kind}/{f.input}", 0) + 1
    print(f"  {len(report.functions)} kernels checked: {counts}")
    if not report.ok:
        failures.append(f"SASS check of {report.arch}")
    fp8_sass = _fp8_sass(lib, failures)
    fp4_sass = _fp4_sass(lib, failures)
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"library": str(lib.path), "cutlass": lib.cutlass_version, "device": info.name,
                       "numerics": [asdict(r) for r in rows],
                       "sass": {"arch": report.arch, "stub_free": report.stub_free, "error": report.error,
                                "functions": [asdict(f) for f in report.functions]},
                       "fp8_sass": fp8_sass,
                       "fp4_sass": fp4_sass,
                       "failures": failures}, fh, indent=2)
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    print("cutlass-check: " + ("FAILED" if failures else "all checks passed"))
    return 1 if failures else 0


def register(sub: Any) -> None:
    """Add ``cutlass-check`` to the CLI's subparsers."""
    p = sub.add_parser("cutlass-check", help="every CUTLASS, FP8 and NVFP4 plan vs float64 numpy on the GPU; SASS of the sm_120f "
                       "(and FP8 sm_90a) kernels")
    add_device_argument(p)
    p.add_argument("--json", default="benchmarks/results/cutlass_check.json",
                   help=RESULTS_HELP + " ('' writes none)")
    p.set_defaults(func=cutlass_check, json_default=p.get_default("json"))
