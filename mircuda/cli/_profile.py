"""``python -m mircuda profile``: compile, cache, allocate, launch, time and check the sample kernel on the GPU."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from ..timing import Column, ResultTable, host_us_per_call
from ._errors import check_results_file
from ._values import add_device_argument, count_up_to, positive_int
from ._inspect import SAMPLE_SOURCE

__all__ = ["MAX_ELEMENTS", "cmd_profile", "register", "table"]

MAX_ELEMENTS = 1 << 30
"""``--elements`` limit: 4 GiB per float32 vector; the profile holds two on the device and two pinned on the host."""


def table(rows: list[tuple[str, Any]]) -> ResultTable:
    """``profile``'s (check, result) pairs as it prints them: no header, the checks' column as wide as the
    longest."""
    return ResultTable((Column("check", "check", None, "<"), Column("result", "result", 0, "<", sep="  ")),
                       [{"check": k, "result": v} for k, v in rows], indent="  ", header=False)


def _nothing() -> None:
    """The ``sync`` of host loops that enqueue nothing on a stream."""


def cmd_profile(args: argparse.Namespace) -> int:
    import numpy as np

    import mircuda as mc

    for name in ("elements", "launches", "batches"):
        if getattr(args, name) < 1:
            raise mc.ContractError(f"--{name}", "a positive integer", str(getattr(args, name)))
    if args.json is not None:  # checked now, not after the whole run, and nothing is created ('' is refused)
        check_results_file(args.json, None)
    n = args.elements
    launches = args.launches
    driver = mc.Driver.initialize()
    device = driver.device(args.device)
    rows: list[tuple[str, str]] = []
    failures: list[str] = []
    with driver.create_context(device) as context:
        info = context.device_info()
        stream = context.create_stream()
        compiler = mc.Compiler(context)
        source = mc.cuda_kernel(SAMPLE_SOURCE, "axpby.cu")
        Axpby = mc.cuda_export("axpby", y=mc.InOut[mc.DeviceBuffer[mc.f32]], x=mc.In[mc.DeviceBuffer[mc.f32]],
                               a=mc.f32, b=mc.f32, n=mc.u32)
        t0 = time.perf_counter()
        module = compiler.compile(source)
        cold_ms = (time.perf_counter() - t0) * 1e3
        again: list[Any] = [None]

        def hit() -> None:
            again[0] = compiler.compile(source)

        hits = host_us_per_call(hit, _nothing, 1, 1000, warmup=0)
        if again[0] is not module:
            failures.append("the second compile did not return the cached module")
        stats = compiler.cache_stats()
        rows.append(("NVRTC compile + load (cold)", f"{cold_ms:.1f} ms"))
        rows.append(("module cache lookup (hit)", f"{statistics.median(hits):.2f} µs  {stats!r}"))

        kernel = module.kernel(Axpby)
        pool = context.default_memory_pool()
        rng = np.random.default_rng()
        x_host = rng.standard_normal(n).astype(np.float32)
        y_host = rng.standard_normal(n).astype(np.float32)
        a, b = float(rng.uniform(0.5, 2.0)), float(rng.uniform(-1.0, 1.0))
        x = pool.allocate(mc.f32, stream, n)
        y = pool.allocate(mc.f32, stream, n)
        # Steady state: the pool already holds the memory.
        cycles = host_us_per_call(lambda: pool.allocate(mc.f32, stream, n).free(stream), _nothing, 1, 200, warmup=0)
        rows.append(("pool allocate + free (stream-ordered, warm)", f"{statistics.median(cycles):.1f} µs per pair"))
        staging = context.allocate_pinned(mc.f32, n)
        staging.write_prefix(x_host)
        stream.copy_to_device(staging, x)
        staging.write_prefix(y_host)  # waits for the upload of x before overwriting the staging buffer
        stream.copy_to_device(staging, y)
        config = mc.LaunchConfig.for_elements(n, 256)

        # Correctness of one launch, from a known state, against a float64 reference.
        kernel.launch(stream, config, y, x, a, b, n)
        stream.copy_to_host(y, staging)
        got = staging.to_numpy()
        want = a * x_host.astype(np.float64) + b * y_host.astype(np.float64)
        err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        rows.append(("one launch vs float64 numpy", f"relative error {err:.2e}"))
        if not err < 1e-6:
            failures.append(f"axpby relative error {err:.3e} exceeds 1e-6")

        # Host cost: batches of launches, stream synchronized between batches.
        start, end = context.create_event(timing=True), context.create_event(timing=True)
        device_ms: list[float] = []

        def end_batch() -> None:
            end.record(stream)
            end.synchronize()
            device_ms.append(mc.Event.elapsed_ms(start, end) / launches)

        host = host_us_per_call(lambda: kernel.launch(stream, config, y, x, a, 1.0, n), stream.synchronize,
                                launches, args.batches, warmup=0, before=lambda: start.record(stream),
                                after=end_batch)
        rows.append((f"typed launch, host cost ({launches} per batch)",
                     f"{statistics.median(host):.2f} µs per launch"))
        gbps = 3 * 4 * n / (statistics.median(device_ms) * 1e-3) / 1e9
        rows.append(("axpby device time", f"{statistics.median(device_ms) * 1e3:.2f} µs per launch ({gbps:.0f} GB/s)"))

        # The repeated launches added a*x each time: check the final state too.
        stream.copy_to_host(y, staging)
        final = staging.to_numpy().astype(np.float64)
        total = launches * args.batches
        want_final = want + total * a * x_host.astype(np.float64)
        err2 = float(np.linalg.norm(final - want_final) / np.linalg.norm(want_final))
        rows.append((f"after {total} more launches vs float64", f"relative error {err2:.2e}"))
        if not err2 < 1e-3:
            failures.append(f"state after repeated launches: relative error {err2:.3e} exceeds 1e-3")

        # Round trip through pinned memory, with a poisoned destination.
        back = context.allocate_pinned(mc.f32, n)
        back.write_prefix(np.full(n, np.nan, dtype=np.float32))
        stream.copy_device_range(x, 0, y, 0, n)
        stream.copy_to_host(y, back)
        if not np.array_equal(back.to_numpy(), x_host):
            failures.append("device round trip through pinned memory changed the data")
        rows.append(("round trip host→device→device→host", "exact" if not failures else "MISMATCH"))
        x.free(stream)
        y.free(stream)
        stream.synchronize()

        print(f"mircuda profile on {info.name} ({info.arch}, {info.multiprocessor_count} SMs), n = {n}")
        print(table(rows))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"device": info.name, "rows": dict(rows), "failures": failures}, f, indent=2)
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    print("profile: " + ("FAILED" if failures else "all checks passed"))
    return 1 if failures else 0


def register(sub: Any) -> None:
    """Add ``profile`` to the CLI's subparsers."""
    p = sub.add_parser("profile", help="compile, cache, allocate, launch, time and check a kernel on the GPU")
    add_device_argument(p)
    p.add_argument("--elements", type=count_up_to(MAX_ELEMENTS, "4 GiB per float32 vector"), default=1 << 20,
                   help="vector length of the axpby kernel (default 2^20, at most 2^30)")
    p.add_argument("--launches", type=positive_int, default=200, help="launches per timed batch (default 200)")
    p.add_argument("--batches", type=positive_int, default=50, help="timed batches; medians are over batches (default 50)")
    p.add_argument("--json", help="also write the table as JSON to this file, in an existing directory (default: none)")
    p.set_defaults(func=cmd_profile)
