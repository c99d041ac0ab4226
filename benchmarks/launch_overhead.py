"""Host cost per launch of an empty kernel: mircuda beside the libraries a user would otherwise use.

One device, one kernel (``empty(float*)``, 1 block of 32 threads); every path launches ``--calls``
times per batch with the stream synchronized between batches; the table gives the median over batches
of µs per launch and the ratio to the C floor (the driver API called from C). Each path runs in a
process of its own, as a user of that library would run it (loading CuPy, Numba and cuda.core into one
process was seen to shift every path's cost by 1-2 µs on the H200 host), and the paths are measured
round-robin over several rounds in one run, so drift on a shared machine hits them alike.

    python benchmarks/launch_overhead.py [--calls 200] [--batches 30] [--rounds 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import mircuda as mc
from mircuda.timing import host_us_per_call

EMPTY = r'extern "C" __global__ void empty(float* p) {}'
HERE = Path(__file__).resolve().parent
WARMUP_BATCHES = 2


PATHS = ["mircuda TypedKernel.launch", "cuda.bindings cuLaunchKernel, void** block",
         "cuda.bindings cuLaunchKernel, (values, types)", "cuda.core launch", "CuPy RawKernel",
         "Numba dispatcher, eager signature"]


def empty_kernel(context: mc.Context) -> tuple[Any, Any, Any, Any, mc.LaunchConfig]:
    """The benchmark's kernel and what launches it: ``(stream, buf, module, kernel, config)``, a non-blocking
    stream, a 1024-float argument buffer from the context's pool, ``empty(float*)`` compiled by NVRTC, its typed
    kernel and 1 block of 32 threads."""
    stream = context.create_stream()
    buf = context.default_memory_pool().allocate(mc.f32, stream, 1024)
    module = mc.Compiler(context).compile(mc.cuda_kernel(EMPTY, "empty.cu"))
    kernel = module.kernel(mc.cuda_export("empty", p=mc.DeviceBuffer[mc.f32]))
    return stream, buf, module, kernel, mc.LaunchConfig(1, 32)


def setup_paths(context: mc.Context, only: str) -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    """Set up the launch path named ``only`` (importing only what it needs)."""
    paths: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {}
    stream, buf, module, k, cfg = empty_kernel(context)
    paths["mircuda TypedKernel.launch"] = (lambda: k.launch(stream, cfg, buf), stream.synchronize)
    keep = [stream, buf, module, k]

    if only.startswith("cuda.bindings"):
        import ctypes

        from cuda.bindings import driver as drv

        fn = module.function_handle("empty")
        cs = drv.CUstream(stream.handle)
        ptr = ctypes.c_uint64(buf.handle)
        params = (ctypes.c_void_p * 1)(ctypes.addressof(ptr))
        addr = ctypes.addressof(params)
        keep += [ptr, params]

        def cb_block() -> None:
            drv.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, cs, addr, 0)

        dp = drv.CUdeviceptr(buf.handle)

        def cb_tuple() -> None:
            drv.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, cs, ((dp,), (None,)), 0)

        paths["cuda.bindings cuLaunchKernel, void** block"] = (cb_block, stream.synchronize)
        paths["cuda.bindings cuLaunchKernel, (values, types)"] = (cb_tuple, stream.synchronize)

    if only == "cuda.core launch":
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch

        dev = Device(0)
        dev.set_current()
        cc = dev.compute_capability
        cstream = dev.create_stream()
        ker = Program(EMPTY, "c++", ProgramOptions(arch=f"sm_{cc.major}{cc.minor}")).compile("cubin").get_kernel("empty")
        cbuf = dev.allocate(4096, stream=cstream)
        ccfg = LaunchConfig(grid=1, block=32)
        keep += [cstream, ker, cbuf]
        paths["cuda.core launch"] = (lambda: launch(cstream, ccfg, ker, cbuf), cstream.sync)

    if only == "CuPy RawKernel":
        import cupy as cp

        ck = cp.RawKernel(EMPTY, "empty")
        cps = cp.cuda.Stream(non_blocking=True)
        carr = cp.zeros(1024, dtype=cp.float32)
        keep += [ck, cps, carr]

        def cupy_launch() -> None:
            with cps:
                ck((1,), (32,), (carr,))

        # Entering the stream context is how CuPy users pick a stream; time it with the launch.
        paths["CuPy RawKernel"] = (cupy_launch, cps.synchronize)

    if only.startswith("Numba"):
        from numba import cuda

        @cuda.jit("void(float32[:])")
        def nb_empty(p):  # type: ignore[no-untyped-def]
            pass

        nbs = cuda.stream()
        darr = cuda.device_array(1024, dtype=np.float32, stream=nbs)
        keep += [nb_empty, nbs, darr]
        paths["Numba dispatcher, eager signature"] = (lambda: nb_empty[1, 32, nbs](darr), nbs.synchronize)

    setup_paths.keep = keep  # type: ignore[attr-defined]
    return {only: paths[only]}


def build_c_floor(tmp: str, cubin: bytes) -> list[str] | None:
    """Compile the C floor program (graph-profile's builder: the one nvcc finder); return its command line
    up to the counts (the 4-argument launch mode), or None where it cannot be built (the reason printed)."""
    from mircuda.cli._graph_floor import FloorUnavailable, build

    try:
        floor = build(Path(tmp), cubin, "empty", 0, HERE / "c" / "launch_floor.c")
    except FloorUnavailable as exc:
        print(f"C floor unavailable: {exc}", file=sys.stderr)
        return None
    return [str(floor.executable), str(floor.cubin), floor.symbol]


def c_floor(cmd: list[str] | None, calls: int, batches: int) -> float | None:
    if cmd is None:
        return None
    out = subprocess.run(cmd + [str(calls), str(batches)], check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def measure_one(name: str, calls: int, batches: int) -> list[float]:
    """Child-process mode: set up one path, time it, return the per-batch µs per launch."""
    driver = mc.Driver.initialize()
    context = driver.create_context(driver.devices()[0])
    ((launch, sync),) = setup_paths(context, name).values()
    return host_us_per_call(launch, sync, calls, batches, warmup=WARMUP_BATCHES)


def run_child(name: str, calls: int, batches: int, script: str = __file__) -> list[float] | str:
    """Run ``script --child name`` and return its per-batch µs, or the last line of its error."""
    cmd = [sys.executable, script, "--child", name, "--calls", str(calls), "--batches", str(batches)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return (out.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(out.stdout.strip().splitlines()[-1])


def round_ratios(floors: list[float | None], rounds: list[list[float]]) -> list[float]:
    """Each round's ratio of a path to the C floor measured in the same round: the median of the path's
    batches over that round's floor (rounds without either are skipped). The host's speed drifts between
    rounds (on a shared H200 host the floor measured 3.54 and 4.42 µs a minute apart, 2026-12-01), and a
    ratio within one round sees the drift on both sides."""
    return [statistics.median(r) / f for f, r in zip(floors, rounds) if f and r]


def round_robin(script: str, names: list[str], cubin: bytes, calls: int, batches: int,
                rounds: int) -> tuple[list[tuple[str, float]], float | None, dict[str, str], dict[str, list[float]]]:
    """Measure the C floor (with ``cubin``'s ``empty`` kernel) and each path of ``script`` in a child
    process, round-robin over ``rounds``; return ``(rows of (name, median µs), floor µs, unavailable,
    per-round ratios to the floor by name)``."""
    per_round: dict[str, list[list[float]]] = {name: [] for name in names}
    unavailable: dict[str, str] = {}
    floors: list[float | None] = []
    with tempfile.TemporaryDirectory() as tmp:
        floor_cmd = build_c_floor(tmp, cubin)
        for _ in range(rounds):
            floors.append(c_floor(floor_cmd, calls, batches))
            for name in names:
                if name in unavailable:
                    per_round[name].append([])
                    continue
                got = run_child(name, calls, batches, script)
                if isinstance(got, str):
                    unavailable[name] = got
                    per_round[name].append([])
                else:
                    per_round[name].append(got)
    measured = [f for f in floors if f is not None]
    floor = statistics.median(measured) if measured else None
    rows = [("C, driver API cuLaunchKernel (the floor)", floor)] if floor is not None else []
    rows += [(name, statistics.median([x for r in v for x in r])) for name, v in per_round.items() if any(v)]
    ratios = {name: round_ratios(floors, v) for name, v in per_round.items() if any(v)}
    return rows, floor, unavailable, ratios


def run_benchmark(script: str, doc: str, benchmark: str, paths: list[str],
                  measure: Callable[[str, int, int], list[float]], title: str,
                  goals: dict[str, float] | None = None) -> int:
    """The command line shared by the launch benchmarks: child mode (``--child NAME`` runs
    ``measure(NAME, calls, batches)`` and prints its samples), else the round-robin run of every path
    beside the C floor, a table (with each path's goal as a ratio to the floor, where given) and the
    results JSON ``benchmarks/results/<benchmark>.json``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=str(HERE / "results" / f"{benchmark}.json"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.calls, args.batches)))
        return 0

    try:
        driver = mc.Driver.initialize()
    except mc.MircudaError as exc:
        print(f"{benchmark} needs a CUDA GPU: {exc}", file=sys.stderr)
        return 2
    context = driver.create_context(driver.devices()[0])
    info = context.device_info()
    cubin = mc.compile_program(mc.cuda_kernel(EMPTY, "empty.cu"), info.arch).image
    rows, floor, unavailable, by_round = round_robin(script, paths, cubin, args.calls, args.batches, args.rounds)
    goals = goals or {}
    width = max(48, *(len(n) + 1 for n in paths))
    print(f"{title}; {info.name}; each path in its own process; "
          f"{args.rounds} rounds x {args.batches} batches x {args.calls} calls; median µs per launch")
    print(f"{'path':<{width}} {'µs':>8} {'× C floor':>10} {'per round: median [min-max]':>28}"
          + (f" {'goal':>6}" if goals else ""))
    for name, us in rows:
        ratio = f"{us / floor:10.2f}" if floor else f"{'n/a':>10}"
        r = by_round.get(name, [])
        spread = f"{statistics.median(r):.2f} [{min(r):.2f}-{max(r):.2f}]" if r else ""
        goal = f" {goals[name]:6.2f}" if name in goals else ""
        print(f"{name:<{width}} {us:8.2f} {ratio} {spread:>28}{goal}")
    for name, why in unavailable.items():
        print(f"{name:<{width}} unavailable: {why}")
    ratios = {n: (u / floor if floor else None) for n, u in rows}
    result = {
        "benchmark": benchmark, "device": info.name, "date": time.strftime("%Y-%m-%d"),
        "calls_per_batch": args.calls, "batches": args.batches, "rounds": args.rounds,
        "us_per_launch": dict(rows), "ratio_to_c_floor": ratios, "unavailable": unavailable,
        "ratio_to_c_floor_by_round": by_round,
        "ratio_to_c_floor_round_median": {n: statistics.median(r) for n, r in by_round.items() if r},
    }
    if goals:
        result["goals_ratio_to_c_floor"] = goals
        result["goals_met"] = {n: (got := ratios.get(n)) is not None and got <= g for n, g in goals.items()}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


def main() -> int:
    return run_benchmark(__file__, __doc__ or "", "launch_overhead", PATHS, measure_one,
                         "Launch host cost, empty kernel, 1x32 threads, one pointer")


if __name__ == "__main__":
    sys.exit(main())
