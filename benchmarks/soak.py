"""Soak under load: many launches, replays, allocations and captures, every result checked.

Four phases, each checked on the device and followed by a reading of device memory (``cuMemGetInfo``)
and host memory (resident set size):

1. ``--threads`` threads x ``--launches`` typed launches, each thread on its own stream, each launch
   adding a distinct value to the thread's buffer (so a launch that used another thread's arguments
   shows in the sum);
2. ``--replays`` replays of a captured graph whose node is updated before every replay with a new
   value (checked by the running sum);
3. ``--allocations`` stream-ordered pool allocate/free cycles of random sizes (1 B to 16 MiB), some
   buffers kept across cycles, a checked fill of every 64th buffer;
4. ``--captures`` stream captures, every other one made to fail (the captured function raises, or
   synchronizes the stream, which invalidates the capture), the stream checked usable after each.

Growth of device memory beyond the pool's release threshold, growth of host RSS beyond
``--rss-slack-mib``, or any wrong value or unexpected error makes the script exit 1. The device is
the first one (or ``--device``). Results go to ``benchmarks/results/soak.json``.

    python benchmarks/soak.py [--threads 8 --launches 100000 --replays 100000 --allocations 100000
                              --captures 1000 --json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

import mircuda as mc

HERE = Path(__file__).resolve().parent
N = 1024  # elements per buffer: 4 blocks of 256 threads

ADD = mc.cuda_kernel(r'''
extern "C" __global__ void add(long long* out, long long value, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += value + i;
}''', "soak_add.cu")
Add = mc.cuda_export("add", out=mc.InOut[mc.DeviceBuffer[mc.i64]], value=mc.i64, n=mc.u32)


def rss_bytes() -> int:
    """Resident set size now (``/proc/self/statm``), bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def device_used_bytes() -> int:
    from cuda.bindings import driver as cu  # the peer binding: a benchmark may read the driver directly
    err, free, total = cu.cuMemGetInfo()
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuMemGetInfo: {err}")
    return int(total) - int(free)


def read_back(context: mc.Context, stream: mc.Stream, buf: mc.DeviceBuffer[Any], count: int) -> np.ndarray:
    host = context.allocate_pinned(buf.dtype, count)
    stream.copy_to_host(buf, host, count)
    out = host.to_numpy().copy()  # to_numpy waits for the copy
    host.close()
    return out


def expected(total_value: int, launches: int) -> np.ndarray:
    return total_value + launches * np.arange(N, dtype=np.int64)


def phase_threads(context: mc.Context, add: mc.TypedKernel, threads: int, launches: int) -> dict[str, Any]:
    pool = context.default_memory_pool()
    config = mc.LaunchConfig.for_elements(N, 256)
    errors: list[str] = []
    barrier = threading.Barrier(threads)

    def work(t: int) -> None:
        try:
            stream = context.create_stream()
            buf = pool.allocate_zeroed(mc.i64, stream, N)
            barrier.wait()
            base = (t + 1) * 1_000_003
            for j in range(launches):
                add.launch(stream, config, buf, base + j, N)
            got = read_back(context, stream, buf, N)
            want = expected(base * launches + launches * (launches - 1) // 2, launches)
            if not np.array_equal(got, want):
                bad = int(np.count_nonzero(got != want))
                errors.append(f"thread {t}: {bad} of {N} elements wrong (first {got[0]} != {want[0]})")
            buf.free(stream)
            stream.synchronize()
            stream.close()
        except Exception as exc:
            errors.append(f"thread {t}: {type(exc).__name__}: {exc}")

    t0 = time.perf_counter()
    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - t0
    return {"threads": threads, "launches_per_thread": launches, "seconds": round(seconds, 2),
            "launches_per_second": round(threads * launches / seconds), "errors": errors}


def phase_replays(context: mc.Context, add: mc.TypedKernel, replays: int) -> dict[str, Any]:
    stream = context.create_stream()
    pool = context.default_memory_pool()
    config = mc.LaunchConfig.for_elements(N, 256)
    errors: list[str] = []
    nodes: list[Any] = []
    buf = pool.allocate_zeroed(mc.i64, stream, N)
    graph = stream.capture({"out": buf}, lambda r: nodes.append(add.launch_captured(stream, config, r["out"], 0, N)))
    total = 0
    t0 = time.perf_counter()
    for j in range(replays):
        value = (j * 7919) % 100_003 + 1
        graph.update_kernel(nodes[0], lambda r, v=value: (r["out"], v, N))
        graph.launch(stream)
        total += value
        if (j + 1) % (replays // 4 or 1) == 0:  # check along the way, not only at the end
            got = read_back(context, stream, buf, N)
            want = expected(total, j + 1)
            if not np.array_equal(got, want):
                errors.append(f"after {j + 1} replays: {int(np.count_nonzero(got != want))} elements wrong")
    seconds = time.perf_counter() - t0
    resources = graph.into_resources()
    resources["out"].free(stream)
    stream.synchronize()
    stream.close()
    return {"replays": replays, "seconds": round(seconds, 2),
            "us_per_update_and_replay": round(seconds / replays * 1e6, 2), "errors": errors}


def phase_allocations(context: mc.Context, allocations: int, seed: int) -> dict[str, Any]:
    stream = context.create_stream()
    pool = context.default_memory_pool()
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(0, np.log(16 << 20), allocations)).astype(np.int64) + 1
    kept: list[mc.DeviceBuffer[Any]] = []
    errors: list[str] = []
    peak_reserved = 0
    t0 = time.perf_counter()
    for j, size in enumerate(sizes):
        buf = pool.allocate(mc.u8, stream, int(size))
        if j % 64 == 0:
            byte = j % 251
            stream.memset(buf, byte)
            probe = min(int(size), 4096)
            got = read_back(context, stream, buf, probe)
            if not np.all(got == byte):
                errors.append(f"allocation {j} ({size} B): memset value not read back")
        if rng.random() < 0.01:
            kept.append(buf)  # some buffers live across many cycles
        else:
            buf.free(stream)
        if len(kept) > 32:
            kept.pop(0).free(stream)
        if j % 1024 == 0:
            peak_reserved = max(peak_reserved, pool.reserved_bytes)
    for buf in kept:
        buf.free(stream)
    stream.synchronize()
    seconds = time.perf_counter() - t0
    stream.close()
    return {"allocations": allocations, "seconds": round(seconds, 2),
            "us_per_cycle": round(seconds / allocations * 1e6, 2), "peak_reserved_bytes": int(peak_reserved),
            "errors": errors}


class Injected(Exception):
    """The failure a soak capture raises on purpose."""


def phase_captures(context: mc.Context, add: mc.TypedKernel, captures: int) -> dict[str, Any]:
    stream = context.create_stream()
    pool = context.default_memory_pool()
    config = mc.LaunchConfig.for_elements(N, 256)
    buf = pool.allocate_zeroed(mc.i64, stream, N)
    errors: list[str] = []
    refused = {"raised": 0, "synchronized": 0}
    total = launches = 0
    t0 = time.perf_counter()
    for j in range(captures):
        kind = ("ok", "raised", "ok", "synchronized")[j % 4]

        def body(r: dict[str, Any], kind: str = kind) -> None:
            add.launch_captured(stream, config, r["out"], 1, N)
            if kind == "raised":
                raise Injected("injected")
            if kind == "synchronized":
                stream.synchronize()  # illegal while capturing: invalidates the capture

        try:
            graph = stream.capture({"out": buf}, body)
        except (mc.CaptureError, Injected, mc.MircudaError) as exc:
            if kind == "ok":
                errors.append(f"capture {j} (should succeed): {type(exc).__name__}: {exc}")
            else:
                refused[kind] += 1
        else:
            if kind != "ok":
                errors.append(f"capture {j} ({kind}) was not refused")
            graph.launch(stream)
            total += 1
            launches += 1
            graph.into_resources()
        # the stream stays usable after every refused capture: a direct launch must work
        add.launch(stream, config, buf, 2, N)
        total += 2
        launches += 1
    got = read_back(context, stream, buf, N)
    want = expected(total, launches)
    if not np.array_equal(got, want):
        errors.append(f"captures: {int(np.count_nonzero(got != want))} elements wrong after {captures} captures")
    seconds = time.perf_counter() - t0
    buf.free(stream)
    stream.synchronize()
    stream.close()
    return {"captures": captures, "refused": refused, "seconds": round(seconds, 2), "errors": errors}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--launches", type=int, default=100_000)
    p.add_argument("--replays", type=int, default=100_000)
    p.add_argument("--allocations", type=int, default=100_000)
    p.add_argument("--captures", type=int, default=1000)
    p.add_argument("--rss-slack-mib", type=float, default=64.0)
    p.add_argument("--seed", type=int, default=20261130)
    p.add_argument("--json", type=Path, default=HERE / "results" / "soak.json")
    args = p.parse_args(argv)

    driver = mc.Driver.initialize()
    context = driver.create_context(driver.devices()[args.device])
    pool = context.default_memory_pool()
    add = mc.Compiler(context).compile(ADD).kernel(Add)
    # Warm up each phase's one-time costs before the first reading: the driver keeps a few MiB per
    # concurrently used stream/thread (seen on the H200: +4 MiB at the first 8-thread phase, never again),
    # which is not growth under load.
    warm_up = [phase_threads(context, add, args.threads, 16), phase_replays(context, add, 16),
               phase_allocations(context, 64, args.seed), phase_captures(context, add, 8)]
    if any(w["errors"] for w in warm_up):
        print("FAIL warm-up:", [w["errors"] for w in warm_up], file=sys.stderr)
        return 1

    report: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": context.device_info().name,
        "host": platform.node(), "python": platform.python_version(), "mircuda": mc.__version__,
        "pool_release_threshold_bytes": pool.release_threshold, "phases": {}}
    failures: list[str] = []
    phases = [("threads", lambda: phase_threads(context, add, args.threads, args.launches)),
              ("replays", lambda: phase_replays(context, add, args.replays)),
              ("allocations", lambda: phase_allocations(context, args.allocations, args.seed)),
              ("captures", lambda: phase_captures(context, add, args.captures))]
    for name, run in phases:
        context.synchronize()
        dev0, rss0 = device_used_bytes(), rss_bytes()
        result = run()
        context.synchronize()
        dev1, rss1 = device_used_bytes(), rss_bytes()
        result.update(device_used_before=dev0, device_used_after=dev1, device_growth=dev1 - dev0,
                      rss_before=rss0, rss_after=rss1, rss_growth=rss1 - rss0)
        limit = max(pool.release_threshold, 0)
        if dev1 - dev0 > limit + (2 << 20):  # the driver's own bookkeeping moves by a page or two
            result["errors"].append(f"device memory grew by {dev1 - dev0} B (release threshold {limit} B)")
        if rss1 - rss0 > args.rss_slack_mib * 2**20:
            result["errors"].append(f"host RSS grew by {(rss1 - rss0) / 2**20:.1f} MiB")
        failures += [f"{name}: {e}" for e in result["errors"]]
        report["phases"][name] = result
        print(f"{name:12s} {result['seconds']:8.2f} s  device +{(dev1 - dev0) / 2**20:7.2f} MiB  "
              f"RSS +{(rss1 - rss0) / 2**20:7.2f} MiB  errors {len(result['errors'])}", flush=True)
    report["errors"] = failures
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    for f in failures:
        print("FAIL", f, file=sys.stderr)
    print(f"{'all phases passed' if not failures else f'{len(failures)} failures'}; wrote {args.json}")
    context.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
