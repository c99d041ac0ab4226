"""The Hopper FP8 decode kernel (``cuda_src/fp8_wgmma_gemv.cu``, ``blockwise_fp8_wgmma``: native E4M3 wgmma,
weights streamed by cp.async into a shared-memory ring) beside what BlockwiseFp8Plan / BlockwiseFp8VectorPlan
run today and torch's rowwise ``_scaled_mm`` (cuBLASLt), in one run: M = 1..16 on the four profile shapes,
cold weights (banks >= 8x L2), each configuration first checked against float64 on sampled rows (relative
error at most 2e-2, the profile's limit; a failure is reported, not timed, and the script exits 1). A
correctness pass first runs odd shapes (N not a multiple of the rows per block, K not a multiple of 128,
beta != 0 with C) against float64 on every output. Needs an sm_90a device (H100/H200) and torch.

The kernel is experimental (no plan runs it). H200, 2026-12-02: every configuration correct;
``benchmarks/results/fp8_wgmma_probe_swizzle.json`` (the default 128-byte swizzle): as fast as the plans' kernel only
at M = 16 on 14336x4096 (20.14 µs against 20.69), slower elsewhere (14336x4096 M = 1: 19.58 against 16.28;
4096x14336 M = 16: 33.94 against 20.36); ``fp8_wgmma_probe.json`` and ``fp8_wgmma_probe_sync.json`` hold the
earlier, unswizzled sweeps (rows, stages, the ways of waiting for a stage, activations through L1 or not).

    python benchmarks/fp8_wgmma_probe.py [--m 1,2,4,8,16] [--rows 8,16,32] [--stages 4,6,8] [--variants Y2,Y2:L0:R0] [--json PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json
import types

import numpy as np

import mircuda as mc
from mircuda.cli._fp8_profile import (CHECK_LIMIT, _dequantize, _operands, _relative, _sample_rows, _torch_rows, _TorchFp8,
                                     weight_banks)
from mircuda.cli._matmul_bench import session, upload
from mircuda.compile import CompileOptions, Compiler
from mircuda.dtypes import bf16, e4m3, f32, i32
from mircuda.launch import In, InOut, LaunchConfig, cuda_export
from mircuda.matmul._vector import package_source
from mircuda.memory import DeviceBuffer
from mircuda.timing import bank_count

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)]
ODD = [(520, 2064), (4104, 1040), (40, 4096)]
SYMBOL = "blockwise_fp8_wgmma"


def ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, received {text!r}") from None


FIELDS = {"Y": "MIRCUDA_FP8_WG_SYNC", "L": "MIRCUDA_FP8_WG_ACT_L1", "R": "MIRCUDA_FP8_WG_ROTATE", "W": "MIRCUDA_FP8_WG_SWIZZLE"}


def variants(text: str) -> list[str]:
    out = text.split(",")
    for v in out:
        if not all(f[:1] in FIELDS and f[1:].isdigit() for f in v.split(":")):
            raise argparse.ArgumentTypeError(f"expected fields YN, LN, RN, WN joined by ':', received {v!r}")
    return out


def defines_of(variant: str) -> dict[str, int]:
    return {FIELDS[f[0]]: int(f[1:]) for f in variant.split(":")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--m", type=ints, default="1,2,4,8,16")
    p.add_argument("--rows", type=ints, default="8,16,32")
    p.add_argument("--stages", type=ints, default="4,6,8")
    p.add_argument("--variants", type=variants, default="Y2:L1:R0:W1",
                   help="comma-separated variants, each colon-separated fields YN (MIRCUDA_FP8_WG_SYNC), LN "
                        "(MIRCUDA_FP8_WG_ACT_L1), RN (MIRCUDA_FP8_WG_ROTATE), WN (MIRCUDA_FP8_WG_SWIZZLE); default "
                        "Y2:L1:R0:W1, the kernel's defaults")
    p.add_argument("--json", default="fp8_wgmma_probe.json")
    args = p.parse_args()
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
                try:
                    kern = compiler.compile(source, options).kernel(contract)
                except mc.CompileError as exc:  # a ring over the kernel's 48 KiB of static shared memory
                    print(f"not compiled M={m} R={r} S={st} {y}: {str(exc).splitlines()[0][:160]}", flush=True)
                    kernels[m, r, st, y] = None
                    return None
                attrs = kern.attributes
                print(f"compiled M={m} R={r} S={st} {y}: {attrs.registers} regs, {attrs.local_bytes} B local", flush=True)
                kernels[m, r, st, y] = kern
            return kernels[m, r, st, y]

        def config(n: int, r: int) -> LaunchConfig:
            return LaunchConfig((-(-n // r),), (128,), programmatic_stream_serialization=True)

        # correctness on odd shapes, every output, beta != 0
        for (n, k), m, r, y in itertools.product(ODD, [1, 5, 16], args.rows, args.variants):
            a, sa = _operands(s.rng, m, k, m)
            b, sb = _operands(s.rng, n, k, -(-n // 128))
            c0 = s.rng.standard_normal(m * n).astype(np.float32).astype(bf16)
            want = 0.75 * (_dequantize(a, sa, 1) @ _dequantize(b, sb, 128).T) + 0.5 * c0.astype(np.float64).reshape(m, n)
            bufs = [upload(context, stream, pool, x.ravel()) for x in (a, sa, b, sb, c0)]
            da, dsa, db, dsb, dc = bufs
            kern = kernel(m, r, 4, y)
            if kern is None:
                failures.append(f"odd M={m} {n}x{k} R={r} {y}: not compiled")
                continue
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
            nb, kb = -(-n // 128), -(-k // 128)
            banks = bank_count(n * k + 4 * nb * kb, info.l2_cache_bytes)
            b, sb = _operands(s.rng, n, k, nb)
            b_deq = _dequantize(b, sb, 128)
            wb, wsb = weight_banks(context, stream, pool, b, sb, banks)
            tw, tsb = torch_.banks(b, sb, banks) if torch_ is not None else ([], [])
            for m in args.m:
                a, sa = _operands(s.rng, m, k, m)
                sample = _sample_rows(m)
                want = _dequantize(a[sample], sa[sample], 1) @ b_deq.T
                da, dsa = upload(context, stream, pool, a.ravel()), upload(context, stream, pool, sa.ravel())
                d = pool.allocate(mc.bf16, stream, m * n)

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
                    kern = kernel(m, r, st, y)
                    if kern is None:
                        continue
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
    with open(args.json, "w") as f:
        json.dump({"device": device, "rows": out, "failures": failures}, f, indent=1)
    if failures:
        raise SystemExit(f"{len(failures)} failure(s): " + "; ".join(failures))


if __name__ == "__main__":
    main()
