"""The Hopper FP8 decode kernel (``cuda_src/fp8_wgmma_gemv.cu``, ``blockwise_fp8_wgmma``: native E4M3 wgmma,
weights streamed by cp.async into a shared-memory ring) beside what BlockwiseFp8Plan / BlockwiseFp8VectorPlan
run today and torch's rowwise ``_scaled_mm`` (cuBLASLt), in one run: M = 1..16 on the four profile shapes,
cold weights (banks >= 8x L2), each configuration first checked against float64 on sampled rows (relative
error at most 2e-2, the profile's limit; a failure is reported, not timed, and the script exits 1). A
correctness pass first runs odd shapes (N not a multiple of the rows per block, K not a multiple of 128 and
shorter than the four-stage ring, M = 12 between the 8- and 16-row activation tiles, beta != 0 with C) against
float64 on every output. Needs an sm_90a device (H100/H200) and torch. Bad flags are refused before the GPU.

The kernel is experimental (no plan runs it). H200, 2026-12-02: every configuration correct;
``benchmarks/results/fp8_wgmma_probe_swizzle.json`` (the default 128-byte swizzle): as fast as the plans' kernel only
at M = 16 on 14336x4096 (20.14 µs against 20.69), slower elsewhere (14336x4096 M = 1: 19.58 against 16.28;
4096x14336 M = 16: 33.94 against 20.36); ``fp8_wgmma_probe.json`` and ``fp8_wgmma_probe_sync.json`` hold the
earlier, unswizzled sweeps (rows, stages, the ways of waiting for a stage, activations through L1 or not).

    python benchmarks/fp8_wgmma_probe.py [--m 1,2,4,8,16] [--rows 8,16,32] [--stages 4,6,8] [--variants Y2,W0] [--json PATH]
"""

from __future__ import annotations

import argparse
import itertools
import types

import numpy as np

import mircuda as mc
from mircuda.cli._fp8_profile import (CHECK_LIMIT, _dequantize, _operands, _relative, _torch_rows, _TorchFp8, row_operands,
                                     shape_weights)
from mircuda.cli._values import distinct_ints
from mircuda.cli._matmul_bench import add_results_argument, check_results_argument, finish_script, session, upload
from mircuda.compile import CompileOptions, Compiler
from mircuda.dtypes import bf16, e4m3, f32, i32
from mircuda.launch import In, InOut, LaunchConfig, cuda_export
from mircuda.matmul._vector import package_source
from mircuda.memory import DeviceBuffer

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)]
# (N, K) checked on every output: N % 8, 16, 32 != 0 (rows past N), K % 128 != 0 (a partial last K-block), and
# 1004x272: three K-blocks, fewer than the ring's four stages (the correctness pass's ring)
ODD = [(516, 2064), (4104, 1040), (40, 4096), (1004, 272)]
ODD_M = [1, 5, 12, 16]
SYMBOL = "blockwise_fp8_wgmma"
SHARED_LIMIT = 48 * 1024
"""Bytes of static shared memory a block may declare: the kernel's ring must fit (its static_assert)."""


def ring_bytes(rows: int, stages: int, swizzle: int = 1) -> int:
    """The kernel's static shared memory for ``rows`` weight rows per block and ``stages`` 128-K stages.
    Unswizzled (``swizzle`` 0): each stage holds rows x 128 weight bytes, 16 x 128 activation bytes and 128 bytes
    of scales, and 1024 bytes of slack follow (the A descriptor's rows 16-63 read into it). Swizzled (1, the
    default): each stage holds the activation and weight bytes, the slack reaches 8 KiB past a stage's start,
    and the scales take 128 bytes per stage in their own array."""
    if not swizzle:
        return stages * (rows * 128 + 16 * 128 + 128) + 1024
    stage = rows * 128 + 16 * 128
    return stages * stage + max(0, 64 * 128 - stage) + stages * 128


def rows_of_a(text: str) -> list[int]:
    """``--m``: rows of A, each in 1..16 (``MIRCUDA_FP8_M``)."""
    return distinct_ints(text, range(1, 17), "M values in 1..16 (the kernel's MIRCUDA_FP8_M)")


def weight_rows(text: str) -> list[int]:
    """``--rows``: weight rows per block, each 8, 16 or 32 (``MIRCUDA_FP8_WG_ROWS``, the wgmma's N)."""
    return distinct_ints(text, (8, 16, 32), "weight rows of 8, 16 or 32 (the kernel's MIRCUDA_FP8_WG_ROWS)")


MAX_STAGES = max(s for s in range(2, 64) for w in (0, 1) if ring_bytes(8, s, w) <= SHARED_LIMIT)
"""The most stages any ring holds (at 8 weight rows, unswizzled: 15)."""


def stage_counts(text: str) -> list[int]:
    """``--stages``: ring depths, each in 2..MAX_STAGES (``MIRCUDA_FP8_WG_STAGES``); a depth whose ring does not
    fit at some ``--rows`` is skipped there (``main`` refuses one that fits at none)."""
    return distinct_ints(text, range(2, MAX_STAGES + 1), f"stage counts in 2..{MAX_STAGES} (the kernel's MIRCUDA_FP8_WG_STAGES: "
                f"at most {SHARED_LIMIT // 1024} KiB of ring)")


FIELDS = {"Y": "MIRCUDA_FP8_WG_SYNC", "L": "MIRCUDA_FP8_WG_ACT_L1", "R": "MIRCUDA_FP8_WG_ROTATE", "W": "MIRCUDA_FP8_WG_SWIZZLE"}
VALUES = {"Y": (0, 1, 2), "L": (0, 1), "R": (0, 1), "W": (0, 1)}
DEFAULTS = {"MIRCUDA_FP8_WG_SYNC": 2, "MIRCUDA_FP8_WG_ACT_L1": 1, "MIRCUDA_FP8_WG_ROTATE": 0, "MIRCUDA_FP8_WG_SWIZZLE": 1}
"""The kernel's values of the fields a variant leaves out."""


def variants(text: str) -> list[str]:
    """``--variants``: comma-separated variants, each fields YN (N 0, 1, 2), LN, RN and WN (N 0 or 1) joined by ':',
    each field at most once and each variant's kernel once (``Y2`` and ``Y2:L1:R0:W1`` are one kernel)."""
    out = text.split(",")
    kernels = []
    for v in out:
        fields = v.split(":")
        if not all(f[:1] in FIELDS and f[1:].isdecimal() for f in fields):  # "²".isdigit(), int("²") fails
            raise argparse.ArgumentTypeError(f"expected fields YN, LN, RN, WN joined by ':', received {v!r}")
        if len({f[0] for f in fields}) != len(fields) or not all(int(f[1:]) in VALUES[f[0]] for f in fields):
            raise argparse.ArgumentTypeError(f"expected each of Y (0, 1, 2), L (0, 1), R (0, 1), W (0, 1) at most "
                                             f"once, received {v!r}")
        kernels.append({**DEFAULTS, **defines_of(v)})
    if any(kernels[i] in kernels[:i] for i in range(len(kernels))):
        raise argparse.ArgumentTypeError(f"expected each variant once (fields left out take the kernel's defaults, "
                                         f"Y2:L1:R0:W1), received {text!r}")
    return out


def defines_of(variant: str) -> dict[str, int]:
    return {FIELDS[f[0]]: int(f[1:]) for f in variant.split(":")}


def swizzle_of(variant: str) -> int:
    """The variant's ``MIRCUDA_FP8_WG_SWIZZLE`` (the kernel's default where it leaves W out)."""
    return {**DEFAULTS, **defines_of(variant)}["MIRCUDA_FP8_WG_SWIZZLE"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=rows_of_a, default="1,2,4,8,16",
                   help="comma-separated M (rows of A), each in 1..16 (default: %(default)s)")
    p.add_argument("--rows", type=weight_rows, default="8,16,32",
                   help="comma-separated weight rows per block (the wgmma's N), each 8, 16 or 32 (default: "
                        "%(default)s)")
    p.add_argument("--stages", type=stage_counts, default="4,6,8",
                   help=f"comma-separated ring depths (128-K stages in shared memory), each in 2..{MAX_STAGES}; one "
                        f"whose ring exceeds {SHARED_LIMIT // 1024} KiB at some --rows is skipped there (default: "
                        "%(default)s; the correctness pass always runs 4)")
    p.add_argument("--variants", type=variants, default="Y2:L1:R0:W1",
                   help="comma-separated variants, each of fields joined by ':' (e.g. Y1:W0), each field at most once: "
                        "Y (MIRCUDA_FP8_WG_SYNC, how a stage's arrival is awaited: 0 cp.async.wait_group, proxy fence "
                        "and block barrier; 1 the same without the fence; 2 an mbarrier per stage), "
                        "L (MIRCUDA_FP8_WG_ACT_L1: activations copied past L1, 0, or through it, 1), "
                        "R (MIRCUDA_FP8_WG_ROTATE: each block starts its K walk at K-block 0, 0, or at blockIdx.x "
                        "mod the K-blocks, 1), W (MIRCUDA_FP8_WG_SWIZZLE: the ring unswizzled, 0, or with the "
                        "128-byte swizzle, 1); a field left out takes the kernel's default (default: %(default)s, "
                        "the kernel's defaults)")
    add_results_argument(p, "fp8_wgmma_probe.json")
    args = p.parse_args()
    check_results_argument(p, args.json)
    unfit = [st for st in args.stages
             if not any(ring_bytes(r, st, swizzle_of(v)) <= SHARED_LIMIT for r in args.rows for v in args.variants)]
    if unfit:
        p.error(f"argument --stages: expected a ring of at most {SHARED_LIMIT // 1024} KiB at some --rows "
                f"({','.join(map(str, args.rows))}), received {','.join(map(str, unfit))}")
    contract = cuda_export(SYMBOL, d=InOut[DeviceBuffer[bf16]], c=In[DeviceBuffer[bf16]], a=In[DeviceBuffer[e4m3]],
                           sa=In[DeviceBuffer[f32]], b=In[DeviceBuffer[e4m3]], sb=In[DeviceBuffer[f32]], alpha=f32,
                           beta=f32, n=i32, k=i32)
    source = package_source("fp8_wgmma_gemv.cu")
    out: list[dict] = []
    failures: list[str] = []
    with session(mc.Driver.initialize(), 0) as s:
        context, stream, pool, timer, info = s.context, s.stream, s.pool, s.timer, s.info
        compiler = Compiler(context, arch="sm_90a")
        kernels: dict[tuple[int, int, int, str], object] = {}

        def kernel(m: int, r: int, st: int, y: str):  # type: ignore[no-untyped-def]
            if (m, r, st, y) not in kernels:
                options = CompileOptions(defines={"MIRCUDA_FP8_M": m, "MIRCUDA_FP8_WG_ROWS": r, "MIRCUDA_FP8_WG_STAGES": st,
                                                  **defines_of(y)})
                kern = compiler.compile(source, options).kernel(contract)
                attrs = kern.attributes
                print(f"compiled M={m} R={r} S={st} {y}: {attrs.registers} regs, {attrs.local_bytes} B local", flush=True)
                kernels[m, r, st, y] = kern
            return kernels[m, r, st, y]

        def config(n: int, r: int) -> LaunchConfig:
            return LaunchConfig((-(-n // r),), (128,), programmatic_stream_serialization=True)

        # correctness on odd shapes, every output, beta != 0
        for (n, k), m, r, y in itertools.product(ODD, ODD_M, args.rows, args.variants):
            a, sa = _operands(s.rng, m, k, m)
            b, sb = _operands(s.rng, n, k, -(-n // 128))
            c0 = s.rng.standard_normal(m * n).astype(np.float32).astype(bf16)
            want = 0.75 * (_dequantize(a, sa, 1) @ _dequantize(b, sb, 128).T) + 0.5 * c0.astype(np.float64).reshape(m, n)
            bufs = [upload(context, stream, pool, x.ravel()) for x in (a, sa, b, sb, c0)]
            da, dsa, db, dsb, dc = bufs
            kern = kernel(m, r, 4, y)
            kern.launch(stream, config(n, r), dc, dc, da, dsa, db, dsb, 0.75, 0.5, n, k)
            got = stream.download(dc).astype(np.float64).reshape(m, n)
            err = _relative(got, want)
            ok = err <= CHECK_LIMIT
            print(f"{'ok  ' if ok else 'FAIL'} odd M={m} {n}x{k} R={r} {y}: rel err {err:.2e}", flush=True)
            if not ok:
                failures.append(f"odd M={m} {n}x{k} R={r} {y}: relative error {err:.2e}")
            for buf in bufs:
                buf.free(stream)

        torch_ = _TorchFp8(s.torch_.torch, s.torch_.stream) if s.torch_ is not None else None
        targs = types.SimpleNamespace(calls=20, repeats=7)
        for n, k in SHAPES:
            b, _, b_deq, wb, wsb, tw, tsb = shape_weights(s, torch_, n, k)
            banks = len(wb)
            for m in args.m:
                a, sa, sample, want, da, dsa, d = row_operands(s, m, n, k, b_deq)

                def check() -> float:
                    return _relative(stream.download(d).astype(np.float64).reshape(m, n)[sample], want)  # noqa: B023

                plan = (mc.BlockwiseFp8VectorPlan(context, stream, mc.DenseVectorSpec(n, k)) if m == 1 else
                        mc.BlockwiseFp8Plan(context, stream, mc.DenseMatmulSpec(m, n, k)))
                plan.execute(stream, da, dsa, wb[0], wsb[0], d)
                err = check()
                us = timer.median(lambda i: plan.execute(stream, da, dsa, wb[i % banks], wsb[i % banks], d),  # noqa: B023
                                  20, 7)
                out.append(dict(n=n, k=k, m=m, path="plan", us=us, err=err))
                print(f"M={m:2d} {n}x{k} plan {us:7.2f} µs (rel err {err:.1e})", flush=True)
                for r, st, y in itertools.product(args.rows, args.stages, args.variants):
                    if ring_bytes(r, st, swizzle_of(y)) > SHARED_LIMIT:  # the kernel's static_assert would refuse it
                        continue
                    kern = kernel(m, r, st, y)
                    cfg = config(n, r)
                    kern.launch(stream, cfg, d, d, da, dsa, wb[0], wsb[0], 1.0, 0.0, n, k)
                    err = check()
                    if not err <= CHECK_LIMIT:
                        failures.append(f"wgmma M={m} {n}x{k} R={r} S={st} {y}: relative error {err:.2e}")
                        print(f"FAILED {failures[-1]}", flush=True)
                        continue
                    us = timer.median(lambda i: kern.launch(stream, cfg, d, d, da, dsa, wb[i % banks],  # noqa: B023
                                                            wsb[i % banks], 1.0, 0.0, n, k), 20, 7)  # noqa: B023
                    out.append(dict(n=n, k=k, m=m, path=f"wgmma R={r} S={st} {y}", us=us, err=err))
                    print(f"M={m:2d} {n}x{k} wgmma R={r:2d} S={st} {y}: {us:7.2f} µs (rel err {err:.1e})", flush=True)
                if torch_ is not None:
                    rows: list = []
                    _torch_rows(torch_, timer, targs, a, sa, b.astype(np.float64), want, sample, tw, tsb, m, n, k,
                                rows, failures, [])
                    for row in rows:
                        out.append(dict(n=n, k=k, m=m, path=row.path, us=row.us))
                        print(f"M={m:2d} {n}x{k} {row.path}: {row.us:7.2f} µs", flush=True)
                for buf in (da, dsa, d):
                    buf.free(stream)
            del tw, tsb
            s.release(wb + wsb)
        device = info.name
    finish_script(args.json, device, out, failures, "failure(s)")


if __name__ == "__main__":
    main()
