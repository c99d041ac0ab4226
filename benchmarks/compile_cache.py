"""Compile and module-cache costs: mircuda beside CuPy's RawModule cache and cuda.core's program cache.

For each library, in one run on one device, with each library's on-disk cache in its own empty
temporary directory (CuPy's through ``CUPY_CACHE_DIR``):

- cold: NVRTC compile + load of a source never seen before (a unique comment per sample), writing
  the on-disk entry;
- memory hit: asking again for the same source in the same process (mircuda: ``Compiler.compile``;
  CuPy: ``RawModule(code=...).get_function``, served by its memo; cuda.core:
  ``Program(...).compile(cache=InMemoryProgramCache)`` + ``get_kernel``);
- persistent hit, warm process: the on-disk entry read, validated and loaded by a process that has
  already compiled (mircuda: a new ``Compiler`` per sample; CuPy: after ``cupy.clear_memo()``;
  cuda.core: ``FileStreamProgramCache``);
- persistent hit, fresh process: the first compile call of a new process whose driver context already
  exists (each sample one process); mircuda's ``Compiler`` construction, which loads NVRTC for the
  key (~5-10 ms), is reported on its own row (cuda.core's ``FileStreamProgramCache`` construction
  likewise; CuPy has no such object).

Medians; ratios are peer / mircuda (above 1: mircuda is faster). Goals: memory hit <= 10 µs,
persistent hit <= 5 ms.

    python benchmarks/compile_cache.py [--samples 15] [--fresh 7] [--json PATH]
    python benchmarks/compile_cache.py --offline sm_90   # no GPU: mircuda's OfflineCompiler only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from mircuda.timing import host_us_per_call

HERE = Path(__file__).resolve().parent
# No toolkit header: cuda.core's Program has no include path by default.
KERNEL = r'''
extern "C" __global__ void axpby(float* __restrict__ y, const float* __restrict__ x, float a, float b, unsigned n) {
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = a * x[i] + b * y[i];
}
'''
NAME = "axpby"


def unique(i: int) -> str:
    return KERNEL + f"// sample {i} {time.time_ns()}\n"


def _nothing() -> None:
    pass


def median_ms(fn: Callable[[], object], samples: int) -> float:
    return statistics.median(host_us_per_call(fn, _nothing, 1, samples, warmup=0)) / 1e3


def median_us_batched(fn: Callable[[], object], calls: int = 1000, batches: int = 20) -> float:
    fn()
    return statistics.median(host_us_per_call(fn, _nothing, calls, batches, warmup=0))


# ---------------------------------------------------------------------------------------------
# Fresh-process children: print {"setup_ms", "first_ms", "hit"} for one library.

CHILD = r'''
import json, os, sys, time
lib, directory, arch, offline = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
source, name = sys.argv[5], sys.argv[6]
if lib == "mircuda":
    import mircuda as mc
    config = mc.CompilerConfig(cache_directory=directory)
    if offline:
        t0 = time.perf_counter(); compiler = mc.OfflineCompiler(arch, config)
    else:
        driver = mc.Driver.initialize()
        context = driver.create_context(driver.devices()[0])
        t0 = time.perf_counter(); compiler = mc.Compiler.with_config(context, config)
    t1 = time.perf_counter()
    result = compiler.compile(mc.cuda_kernel(source, "axpby.cu"))
    t2 = time.perf_counter()
    hit = compiler.cache_stats().persistent_hits == 1
elif lib == "cupy":
    import cupy
    cupy.empty(1); cupy.cuda.Device(0).synchronize()
    before = set(os.listdir(directory))
    t0 = t1 = time.perf_counter()
    cupy.RawModule(code=source).get_function(name)
    t2 = time.perf_counter()
    hit = set(os.listdir(directory)) == before
else:
    from cuda.core import Device, Program, ProgramOptions
    from cuda.core.utils import FileStreamProgramCache
    dev = Device(0); dev.set_current()
    t0 = time.perf_counter(); cache = FileStreamProgramCache(directory); t1 = time.perf_counter()
    before = len(os.listdir(os.path.join(directory, "entries")))
    Program(source, "c++", ProgramOptions(arch=arch)).compile("cubin", cache=cache).get_kernel(name)
    t2 = time.perf_counter()
    hit = len(os.listdir(os.path.join(directory, "entries"))) == before
print(json.dumps({"setup_ms": (t1 - t0) * 1e3, "first_ms": (t2 - t1) * 1e3, "hit": hit}))
'''


def fresh(lib: str, directory: str, arch: str, offline: bool, n: int, env: dict[str, str]) -> dict[str, float] | None:
    setups, firsts, misses = [], [], 0
    for _ in range(n):
        out = subprocess.run([sys.executable, "-c", CHILD, lib, directory, arch, "1" if offline else "0", KERNEL,
                              NAME], capture_output=True, text=True, env=env, timeout=600)
        if out.returncode != 0:
            print(f"{lib} fresh-process child failed:\n{out.stderr[-2000:]}", file=sys.stderr)
            return None
        r = json.loads(out.stdout.strip().splitlines()[-1])
        setups.append(r["setup_ms"])
        firsts.append(r["first_ms"])
        misses += not r["hit"]
    if misses:
        print(f"warning: {lib}: {misses} of {n} fresh processes did not hit the on-disk cache", file=sys.stderr)
    return {"setup_ms": statistics.median(setups), "first_ms": statistics.median(firsts), "misses": misses}


# ---------------------------------------------------------------------------------------------
# In-process measurements per library: {"cold_ms", "memory_hit_us", "warm_persistent_ms"}.

def measure_mircuda(directory: str, samples: int, offline_arch: str | None) -> tuple[dict[str, float], str, str]:
    import mircuda as mc

    config = mc.CompilerConfig(cache_directory=directory)
    if offline_arch:
        arch, device = offline_arch, "no device (OfflineCompiler)"
        make = lambda: mc.OfflineCompiler(arch, config)  # noqa: E731
    else:
        driver = mc.Driver.initialize()
        context = driver.create_context(driver.devices()[0])
        info = context.device_info()
        arch, device = info.arch, info.name
        make = lambda: mc.Compiler.with_config(context, config)  # noqa: E731
    compiler = make()
    counter = iter(range(10**9))
    cold = median_ms(lambda: compiler.compile(mc.cuda_kernel(unique(next(counter)), "axpby.cu")), samples)
    source = mc.cuda_kernel(KERNEL, "axpby.cu")
    compiler.compile(source)
    memory = median_us_batched(lambda: compiler.compile(source))
    fresh_compilers = iter([make() for _ in range(samples * 4)])  # constructed outside the timing
    warm = median_ms(lambda: next(fresh_compilers).compile(source), samples * 4)
    setup = median_ms(make, samples * 4)
    stats = compiler.cache_stats()
    assert stats.persistent_failures == 0, stats
    return {"cold_ms": cold, "memory_hit_us": memory, "warm_persistent_ms": warm,
            "setup_warm_ms": setup}, arch, device


def measure_cupy(samples: int) -> dict[str, float]:
    import cupy

    counter = iter(range(10**9))
    cold = median_ms(lambda: cupy.RawModule(code=unique(next(counter))).get_function(NAME), samples)
    memory = median_us_batched(lambda: cupy.RawModule(code=KERNEL).get_function(NAME), calls=200)

    def from_disk() -> None:
        cupy.clear_memo()
        cupy.RawModule(code=KERNEL).get_function(NAME)

    warm = median_ms(from_disk, samples * 4)
    return {"cold_ms": cold, "memory_hit_us": memory, "warm_persistent_ms": warm}


def measure_cuda_core(directory: str, arch: str, samples: int) -> dict[str, float]:
    from cuda.core import Device, Program, ProgramOptions
    from cuda.core.utils import FileStreamProgramCache, InMemoryProgramCache

    Device(0).set_current()
    options = ProgramOptions(arch=arch)
    disk = FileStreamProgramCache(directory)
    memory_cache = InMemoryProgramCache()
    counter = iter(range(10**9))

    def compile_with(cache, code: str = KERNEL) -> None:  # type: ignore[no-untyped-def]
        Program(code, "c++", options).compile("cubin", cache=cache).get_kernel(NAME)

    cold = median_ms(lambda: compile_with(disk, unique(next(counter))), samples)
    memory = median_us_batched(lambda: compile_with(memory_cache), calls=100, batches=10)
    compile_with(disk)
    warm = median_ms(lambda: compile_with(disk), samples * 4)
    return {"cold_ms": cold, "memory_hit_us": memory, "warm_persistent_ms": warm}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=15, help="cold compiles per library")
    ap.add_argument("--fresh", type=int, default=7, help="fresh processes per library")
    ap.add_argument("--offline", metavar="ARCH", help="no GPU: measure mircuda's OfflineCompiler for ARCH only")
    ap.add_argument("--json", default=str(HERE / "results" / "compile_cache.json"))
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="mircuda-compile-cache-bench-")
    dirs = {lib: os.path.join(tmp.name, lib) for lib in ("mircuda", "cupy", "cuda.core")}
    for d in dirs.values():
        os.makedirs(d)
    os.environ["CUPY_CACHE_DIR"] = dirs["cupy"]  # before CuPy is imported, here and in the children
    env = dict(os.environ)

    results: dict[str, dict[str, float]] = {}
    mine, arch, device = measure_mircuda(dirs["mircuda"], args.samples, args.offline)
    results["mircuda"] = mine
    peers: list[tuple[str, Callable[[], dict[str, float]]]] = [] if args.offline else [
        ("CuPy RawModule", lambda: measure_cupy(args.samples)),
        ("cuda.core Program", lambda: measure_cuda_core(dirs["cuda.core"], arch, args.samples)),
    ]
    for name, measure in peers:
        try:
            results[name] = measure()
        except Exception as exc:  # a peer that is missing or too old is reported, not fatal
            print(f"{name} unavailable: {exc!r}", file=sys.stderr)
    children = {"mircuda": "mircuda", "CuPy RawModule": "cupy", "cuda.core Program": "cuda.core"}
    for name in list(results):
        r = fresh(children[name], dirs[children[name]], arch, bool(args.offline), args.fresh, env)
        if r is not None:
            results[name]["fresh_persistent_ms"] = r["first_ms"]
            results[name]["fresh_setup_ms"] = r["setup_ms"]
            results[name]["fresh_misses"] = r["misses"]

    rows = [("cold: NVRTC compile + load + write entry", "cold_ms", "ms"),
            ("memory hit", "memory_hit_us", "µs"),
            ("persistent hit, warm process", "warm_persistent_ms", "ms"),
            ("persistent hit, fresh process: first call", "fresh_persistent_ms", "ms"),
            ("  compiler/cache object setup, fresh process", "fresh_setup_ms", "ms")]
    libs = list(results)
    print(f"Compile cache, {NAME} kernel, {arch} on {device}; medians; "
          f"ratio = peer / mircuda")
    header = f"{'':46}" + "".join(f"{lib:>20}" for lib in libs) + "".join(f"{'ratio ' + lib[:8]:>16}" for lib in libs[1:])
    print(header)
    for label, key, unit in rows:
        base = results["mircuda"].get(key)
        cells = "".join(f"{results[name][key]:>16.3f} {unit:<3}" if key in results[name] else f"{'n/a':>20}" for name in libs)
        ratios = "".join(f"{results[name][key] / base:>16.2f}" if key in results[name] and base else f"{'n/a':>16}"
                         for name in libs[1:])
        print(f"{label:46}{cells}{ratios}")
    goals = {"memory hit <= 10 µs": mine["memory_hit_us"] <= 10.0,
             "persistent hit (fresh process, first call) <= 5 ms": results["mircuda"].get("fresh_persistent_ms",
                                                                                          1e9) <= 5.0}
    for goal, met in goals.items():
        print(f"goal {goal}: {'met' if met else 'NOT met'}")
    out = {"benchmark": "compile_cache", "device": device, "arch": arch, "date": time.strftime("%Y-%m-%d"),
           "samples": args.samples, "fresh_processes": args.fresh, "results": results,
           "ratios_peer_over_mircuda": {name: {k: results[name][k] / results["mircuda"][k] for _, k, _ in rows
                                            if results[name].get(k) and results["mircuda"].get(k)}
                                        for name in libs[1:]},
           "goals": goals}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.json}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
