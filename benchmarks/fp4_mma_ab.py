"""BlockScaledFp4Plan's decode kernels with extra NVRTC macros, A/B in one process: each variant is a plan built
with a compiler that adds the variant's ``-D`` macros to every compile (the plans have no knob for them), timed
alternately with the others and beside the BF16 DenseMatmulPlan, on cold weights (banks >= 8x L2). Random E2M1
codes and UE4M3 scales (0x30..0x3f); each variant's output is compared with the first variant's (the macros
here change loads or launch shape, not arithmetic order, unless rows or warps change: the largest relative
difference is recorded, and one above 2e-2 fails the script). Needs a GPU.

    python benchmarks/fp4_mma_ab.py [--variants diet|l2|occupancy|regs|split] [--m 4,8,16] [--shapes 14336x4096,...]
        [--json PATH]

``--m`` 1 and 2 only with ``regs``: the other sets run the plan's default kernel, ``fp4_matvec_bf16`` there (M = 1, and
M = 2 on sm_80/sm_90), which reads none of their macros.

``split``: ``fp4_mma_bf16``'s default against clusters of S blocks splitting each 32-row block's K (``split_k``, cc >=
9.0) with W warps per block (``sSwW``), and ``s1``: ``split_k=1``, one block per row block with the one-wave warps rule,
the default before :func:`~mircuda.matmul._fp4.default_split_k` (``benchmarks/results/fp4_mma_split.json``'s
``default``; where that rule splits, ``default`` is now its ``s2w4``).

``occupancy``: ``fp4_mma_bf16``'s default against warps per block 2, 3, 4, 6, 8 (``wW``, 32 rows), 16-row blocks with
4, 6, 8 warps (``r16wW``); ``benchmarks/results/fp4_mma_occupancy_diet.json``'s ``acc2``, two accumulator sets, came
from a kernel macro removed after it measured no gain. ``diet``: the plans'
defaults, without the 16-bit scale-pair loads (``no_pairs``: ``-D MIRCUDA_FP4_SCALE_PAIRS=0``)
and without those and the unpredicated full steps (``before``: the kernel as it was before both). ``l2``: the
plans' defaults, and the same with ``-D MIRCUDA_FP4_L2_128B=0`` (the ``.L2::128B`` hint of
``fp4_mma_bf16``'s weight loads off; ``benchmarks/results/fp4_l2_hint.json`` is the run that adopted it, when the
hint was off by default: its ``def`` is this script's ``hint_off``). ``regs``: ``fp4_mma_bf16``'s default and six
other rows x stages x warps (``rRsSwW``), the register variants of
``benchmarks/results/fp4_mma_occupancy_experiment.json`` (its ``reg`` is ``default`` here; measured before the L2
hint was adopted). That run's 128-register cap (``r32s3w4mb2``, ``__launch_bounds__(256, 2)``) and shared-memory
ring are not variants here: they came from kernel sources that were not committed, and the committed kernel has
no macro for either."""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

import numpy as np

import mircuda as mc
from mircuda.cli._matmul_bench import add_results_argument, check_results_argument, finish_script, session
from mircuda.cli._values import distinct_ints, shape_values
from mircuda.compile import CompileOptions, Compiler
from mircuda.dtypes import bf16
from mircuda.matmul._fp4 import DP4A_DEFAULT_MAX_M, FP4_MMA_SYMBOL, FP4_SYMBOL, fp4_target
from mircuda.timing import bank_count

SHAPES = ((14336, 4096), (4096, 14336), (4096, 4096), (6144, 4096))
TOLERANCE = 2e-2
VARIANTS: dict[str, dict[str, tuple[dict[str, Any], dict[str, int]]]] = {
    "diet": {"default": ({}, {}), "no_pairs": ({}, {"MIRCUDA_FP4_SCALE_PAIRS": 0}),
             "before": ({}, {"MIRCUDA_FP4_SCALE_PAIRS": 0, "MIRCUDA_FP4_FULL_STEPS": 0})},
    "l2": {"default": ({}, {}), "hint_off": ({}, {"MIRCUDA_FP4_L2_128B": 0})},
    "occupancy": {
        "default": ({}, {}),
        **{f"w{w}": ({"kernel": "fp4_mma_bf16", "warps": w}, {}) for w in (2, 3, 4, 6, 8)},
        **{f"r16w{w}": ({"kernel": "fp4_mma_bf16", "rows": 16, "warps": w}, {}) for w in (4, 6, 8)},
    },
    "regs": {
        "default": ({"kernel": "fp4_mma_bf16"}, {}),
        "r32s2w4": ({"kernel": "fp4_mma_bf16", "warps": 4, "stages": 2}, {}),
        "r32s2w2": ({"kernel": "fp4_mma_bf16", "warps": 2, "stages": 2}, {}),
        "r16s3w2": ({"kernel": "fp4_mma_bf16", "rows": 16, "warps": 2, "stages": 3}, {}),
        "r16s3w4": ({"kernel": "fp4_mma_bf16", "rows": 16, "warps": 4, "stages": 3}, {}),
        "r16s4w2": ({"kernel": "fp4_mma_bf16", "rows": 16, "warps": 2, "stages": 4}, {}),
        "r16s2w4": ({"kernel": "fp4_mma_bf16", "rows": 16, "warps": 4, "stages": 2}, {}),
    },
    "split": {
        "default": ({}, {}),
        "s1": ({"kernel": "fp4_mma_bf16", "split_k": 1}, {}),
        **{f"s{sk}w{w}": ({"kernel": "fp4_mma_bf16", "split_k": sk, "warps": w}, {})
           for sk, w in ((2, 2), (2, 3), (2, 4), (2, 8), (3, 2), (3, 4), (4, 1), (4, 2))},
    },
}
"""Variant set -> name -> (the plan's keyword arguments, extra NVRTC macros)."""


def ran_text(description: str, extra: dict[str, int]) -> str:
    """What a result row's ``ran`` records for one variant: the start of the plan's describe() (its own ``-D``
    options) and the variant's extra macros, which win over the plan's (describe() shows the plan's only: the
    diet set's ``before`` read ``-D MIRCUDA_FP4_FULL_STEPS=1`` there while it ran with 0)."""
    return description[:200] + ("; extra: " + " ".join(f"-D {k}={v}" for k, v in extra.items()) if extra else "")


class DefinesCompiler(Compiler):
    """A Compiler that merges ``extra`` into the macros of every compile (the extra ones win), for the target the
    FP4 plans' default compiler takes on ``context``'s device (:func:`fp4_target`: ``sm_12Yf`` on cc 12.x, where
    E2M1 pairs decode with ``cvt.rn.f16x2.e2m1x2``; the plain target elsewhere): a plain-target compiler would
    give the plans the software decode on cc 12.x, not their defaults."""

    def __init__(self, context: mc.Context, extra: dict[str, int]) -> None:
        super().__init__(context, arch=fp4_target(context.device_info().compute_capability))
        self.extra = dict(extra)

    def compile(self, source: Any, options: CompileOptions | None = None) -> Any:
        options = options or CompileOptions()
        merged = {**dict(options.defines), **self.extra}
        return super().compile(source, dataclasses.replace(options, defines=merged))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", choices=sorted(VARIANTS), default="l2",
                   help="diet: the defaults against the former byte scale loads and load predicates; l2: the "
                        "defaults against the L2 hint off; occupancy: fp4_mma_bf16's warps and 16-row "
                        "blocks; regs: fp4_mma_bf16's rows, stages and warps; split: clusters splitting K "
                        "(default: %(default)s)")
    p.add_argument("--m", type=lambda t: distinct_ints(t, range(1, 17), "M values in 1..16"), default=[4, 8, 16],
                   help="comma-separated activation rows, each in 1..16; 1 and 2 with --variants regs only, whose "
                        "variants all force fp4_mma_bf16 (default: 4,8,16)")
    p.add_argument("--shapes", type=shape_values, default=SHAPES,
                   help="comma-separated NxK weight shapes, each K a multiple of 32 (default: "
                        + ",".join(f"{n}x{k}" for n, k in SHAPES) + ")")
    add_results_argument(p, "fp4_mma_ab.json")
    args = p.parse_args()
    check_results_argument(p, args.json)
    low = [m for m in args.m if m <= DP4A_DEFAULT_MAX_M]
    if low and any("kernel" not in knobs for knobs, _ in VARIANTS[args.variants].values()):
        p.error(f"--m: expected M values of {DP4A_DEFAULT_MAX_M + 1}..16 with --variants {args.variants} (some of its "
                f"variants run the plan's default kernel, {FP4_SYMBOL} at M = 1 and on sm_80/sm_90 at M = 2, where the "
                f"{FP4_MMA_SYMBOL} macros of the set change nothing; --variants regs forces {FP4_MMA_SYMBOL} at any "
                f"M), received {','.join(map(str, low))}")
    for n, k in args.shapes:
        try:  # the plans' own dimension limits, here rather than as a traceback after the GPU is set up
            mc.DenseMatmulSpec(max(args.m), n, k)
        except mc.ContractError as exc:
            p.error(f"--shapes: {n}x{k}: {exc}")
        if k % 32:
            p.error(f"--shapes: expected K a multiple of 32 (16-byte code loads), received {n}x{k}")
    out: list[dict[str, Any]] = []
    failures: list[str] = []
    t0 = time.time()
    with session(mc.Driver.initialize(), 0) as s:
        ctx, stream, pool, timer, info = s.context, s.stream, s.pool, s.timer, s.info
        rng = np.random.default_rng(0)
        compilers = {name: DefinesCompiler(ctx, extra) for name, (_, extra) in VARIANTS[args.variants].items()}
        for n, k in args.shapes:
            banks = bank_count(n * k // 2 + n * k // 16, info.l2_cache_bytes)
            codes = [stream.upload(pool, rng.integers(0, 256, n * k // 2, dtype=np.uint8)) for _ in range(banks)]
            scales = [stream.upload(pool, rng.integers(0x30, 0x40, n * k // 16, dtype=np.uint8).view(mc.e4m3))
                      for _ in range(banks)]
            w16 = stream.upload(pool, (rng.standard_normal(n * k, dtype=np.float32) * 0.05).astype(bf16))
            bf_banks = bank_count(2 * n * k, info.l2_cache_bytes)
            w16s = [w16] + [pool.allocate(bf16, stream, n * k) for _ in range(bf_banks - 1)]
            for b in w16s[1:]:
                stream.copy_device_range(w16, 0, b, 0, n * k)
            for m in args.m:
                a = stream.upload(pool, rng.integers(0, 256, m * k // 2, dtype=np.uint8))
                sa = stream.upload(pool, rng.integers(0x30, 0x40, m * k // 16, dtype=np.uint8).view(mc.e4m3))
                x16 = stream.upload(pool, rng.standard_normal(m * k, dtype=np.float32).astype(bf16))
                y16 = pool.allocate(bf16, stream, m * n)
                dense: Any = mc.DenseMatmulPlan(ctx, stream, mc.DenseMatmulSpec(m, n, k), input=bf16)
                runs: dict[str, Any] = {"bf16": lambda i, p=dense, x=x16, w=w16s, y=y16: p.execute(stream, x, w[i % len(w)], y)}
                diffs: dict[str, float] = {}
                ran: dict[str, str] = {}
                first: np.ndarray | None = None
                for name, (knobs, extra) in VARIANTS[args.variants].items():
                    plan = mc.BlockScaledFp4Plan(ctx, stream, mc.DenseMatmulSpec(m, n, k), compiler=compilers[name],
                                                 **knobs)
                    d = pool.allocate(bf16, stream, m * n)
                    plan.execute(stream, a, sa, codes[0], scales[0], d)
                    got = stream.download(d).astype(np.float64)
                    first = got if first is None else first
                    diffs[name] = float(np.abs(got - first).max() / max(float(np.abs(first).max()), 1e-30))
                    if diffs[name] > TOLERANCE:
                        failures.append(f"{name} M={m} {n}x{k}: {diffs[name]:.1e} from the first variant")
                        continue
                    ran[name] = ran_text(str(plan.describe()), extra)
                    runs[name] = (lambda i, p=plan, d=d, a=a, sa=sa, c=codes, sc=scales:
                                  p.execute(stream, a, sa, c[i % len(c)], sc[i % len(sc)], d))
                times: dict[str, list[float]] = {key: [] for key in runs}
                for _ in range(3):  # alternated rounds: a drift of the device's clocks reaches every variant alike
                    for key, run in runs.items():
                        times[key].append(timer.median(run, 20, 7))
                us = {key: float(np.median(v)) for key, v in times.items()}
                out.append({"m": m, "n": n, "k": k, "us": us, "max_rel_diff_to_first": diffs, "ran": ran})
                print(f"M={m:2d} {n}x{k} " + " ".join(f"{key}={v:6.2f}" for key, v in us.items())
                      + f"  t={time.time() - t0:.0f}s", flush=True)
        device = info.name
    finish_script(args.json, device, out, failures, "variant(s) differed from the first")


if __name__ == "__main__":
    main()
