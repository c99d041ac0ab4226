"""mircuda's typed launch against the C floor in one process, batch by batch (GPU, nvcc).

``launch_overhead.py`` runs each path and the C floor program in processes of their own, round-robin; on a
shared host whose speed drifts by 20 % within a minute (the floor measured 3.54 and 4.42 µs a minute apart
on the H200 host, 2026-12-01) its per-round ratios for mircuda ranged 0.97-1.57 in one run. Here both sides
share one process, one context, one stream, one kernel (``empty(float*)``, 1 block of 32 threads) and one
argument buffer, and alternate batch by batch (C first in even pairs, mircuda first in odd ones): the C
side is ``benchmarks/c/launch_batch.c`` (``nvcc -O2 -shared``, loaded with ctypes; each batch is one
ctypes call, its loop of ``cuLaunchKernel`` timed in C), the mircuda side ``TypedKernel.launch`` in a
Python loop under ``time.perf_counter``. Each pair gives a ratio (mircuda µs per launch / C µs per launch,
the stream synchronized before each batch, untimed); the result is the median of the pairs' ratios, beside
each side's median µs. The issue-16 goal is a ratio <= 1.15.

    python benchmarks/launch_paired.py [--calls 200] [--pairs 200] [--json PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # launch_overhead beside it; this checkout's mircuda

import mircuda as mc  # noqa: E402
from launch_overhead import empty_kernel  # noqa: E402

SOURCE = HERE / "c" / "launch_batch.c"
WARMUP_PAIRS = 5
GOAL = 1.15


def build_floor(directory: Path) -> Any:
    """Compile launch_batch.c into a shared library with the nvcc mircuda finds; return the ctypes function."""
    from mircuda.matmul._build import _find_nvcc

    lib = directory / "liblaunch_batch.so"
    done = subprocess.run([str(_find_nvcc()), "-O2", "-shared", "-Xcompiler", "-fPIC", "-o", str(lib), str(SOURCE),
                           "-lcuda"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"nvcc failed with status {done.returncode}: {(done.stderr or done.stdout)[-400:]}")
    fn = ctypes.CDLL(str(lib)).mircuda_launch_batch_us
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int]
    fn.restype = ctypes.c_double
    return fn


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive int, received {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--calls", type=positive, default=200, help="launches per batch (default 200)")
    p.add_argument("--pairs", type=positive, default=200, help="timed pairs of batches (default 200)")
    p.add_argument("--json", default="benchmarks/results/launch_paired.json", help="results JSON ('' for none)")
    args = p.parse_args(argv)
    if args.json and not Path(args.json).resolve().parent.is_dir():
        p.error(f"--json: expected a file path in an existing directory, received {args.json!r}")
    try:
        return measure(args)
    except mc.MircudaError as exc:  # no GPU, no driver, no nvcc...: one line, as the CLI's profiles say it
        print(f"launch_paired: {exc}", file=sys.stderr)
        return 1


def measure(args: argparse.Namespace) -> int:
    """Build the C side, alternate the batches and print (and write) the result."""
    driver = mc.Driver.initialize()
    context = driver.create_context(driver.devices()[0])
    stream, buf, module, kernel, config = empty_kernel(context)
    fn_handle = int(module.function_handle("empty"))

    def mircuda_batch() -> float:
        stream.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            kernel.launch(stream, config, buf)
        return (time.perf_counter() - t0) / args.calls * 1e6

    with tempfile.TemporaryDirectory() as tmp:
        c_batch = build_floor(Path(tmp))

        def floor_batch() -> float:
            us = float(c_batch(fn_handle, stream.handle, buf.handle, args.calls))
            if us < 0:
                raise SystemExit(f"cuLaunchKernel or cuStreamSynchronize failed in C: CUresult {int(-us)}")
            return us

        c_us: list[float] = []
        ours_us: list[float] = []
        for i in range(WARMUP_PAIRS + args.pairs):
            if i % 2 == 0:
                c, ours = floor_batch(), mircuda_batch()
            else:
                ours, c = mircuda_batch(), floor_batch()
            if i >= WARMUP_PAIRS:
                c_us.append(c)
                ours_us.append(ours)
        stream.synchronize()
    ratios = [o / c for o, c in zip(ours_us, c_us)]
    ratio = statistics.median(ratios)
    quart = statistics.quantiles(ratios, n=4)
    info = context.device_info()
    print(f"launch_paired on {info.name}: {args.pairs} pairs x {args.calls} launches, one process")
    print(f"  C cuLaunchKernel (the floor)   {statistics.median(c_us):6.3f} µs per launch (median batch)")
    print(f"  mircuda TypedKernel.launch     {statistics.median(ours_us):6.3f} µs per launch (median batch)")
    print(f"  ratio, median of pairs         {ratio:6.3f} (quartiles {quart[0]:.3f}-{quart[2]:.3f}); "
          f"goal <= {GOAL}: {'met' if ratio <= GOAL else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "benchmark": "launch_paired", "device": info.name, "date": time.strftime("%Y-%m-%d"),
            "method": (__doc__ or "").split("\n\n")[1].replace("\n", " "),
            "calls_per_batch": args.calls, "pairs": args.pairs,
            "us_per_launch_median": {"C cuLaunchKernel (the floor)": statistics.median(c_us),
                                     "mircuda TypedKernel.launch": statistics.median(ours_us)},
            "ratio_median_of_pairs": ratio, "ratio_quartiles": [quart[0], quart[2]],
            "goal": {"ratio_max": GOAL, "met": ratio <= GOAL}}, indent=1) + "\n")
    buf.free(stream)
    stream.synchronize()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
