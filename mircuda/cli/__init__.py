"""``python -m mircuda``: inspect the machine, profile the launch path and CUDA graphs, compile offline."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from importlib import metadata

__all__ = ["main"]

SAMPLE_SOURCE = r"""
extern "C" __global__ void axpby(float* __restrict__ y, const float* __restrict__ x, float a, float b,
                                 unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b * y[i];
}
"""

OFFLINE_ARCHS = ("sm_90a", "sm_120f")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cmd_inspect(args: argparse.Namespace) -> int:
    import mircuda as mc
    from mircuda.compile import supported_archs

    print(f"mircuda {mc.__version__} on Python {platform.python_version()} ({platform.machine()})")
    for dist in ("cuda-bindings", "nvidia-cuda-nvrtc", "numba", "numba-cuda", "numpy", "ml_dtypes"):
        print(f"  {dist:18} {_version(dist)}")
    try:
        from . import _hotpath  # noqa: F401  (only whether it imports)

        print("launch hot path: C extension mircuda._hotpath")
    except ImportError:
        print("launch hot path: ctypes fallback (the C extension was not built: pip install needs a C compiler)")
    nv = ".".join(map(str, mc.nvrtc_version()))
    print(f"NVRTC {nv}; targets: {', '.join(f'sm_{a}' for a in supported_archs())} "
          f"(with 'a'/'f' variants where the architecture has them)")

    device_archs: list[str] = []
    try:
        driver = mc.Driver.initialize()
    except mc.UnsupportedPlatform as exc:
        print(f"CUDA driver: none present on this machine ({exc})")
    except mc.CudaError as exc:
        print(f"CUDA driver: present but unusable: {exc}")
    else:
        major, minor = driver.version
        devices = driver.devices()
        print(f"CUDA driver: version {major}.{minor}, {len(devices)} device(s)")
        for d in devices:
            i = d.info()
            print(f"  [{d.ordinal}] {i.name}: compute capability {i.compute_capability[0]}.{i.compute_capability[1]}"
                  f" ({i.arch}), {i.multiprocessor_count} SMs, {i.total_memory_bytes / 2**30:.1f} GiB,"
                  f" L2 {i.l2_cache_bytes / 2**20:.0f} MiB, memory pools {'yes' if i.memory_pools_supported else 'no'},"
                  f" integrated {'yes' if i.integrated else 'no'}")
            device_archs.append(i.arch)

    source = mc.cuda_kernel(SAMPLE_SOURCE, "axpby.cu")
    failures = 0
    print("Sample kernel 'axpby' compiled with NVRTC:")
    for arch in dict.fromkeys(OFFLINE_ARCHS + tuple(device_archs)):
        t0 = time.perf_counter()
        try:
            prog = mc.compile_program(source, arch)
        except mc.MircudaError as exc:
            failures += 1
            print(f"  {arch:8} FAILED: {exc}")
            continue
        ms = (time.perf_counter() - t0) * 1e3
        ok = prog.image[:4] == b"\x7fELF"
        failures += not ok
        print(f"  {arch:8} CUBIN {len(prog.image):6d} bytes in {ms:6.1f} ms{'' if ok else '  (not an ELF image!)'}")
    return 1 if failures else 0


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def cmd_profile(args: argparse.Namespace) -> int:
    import numpy as np

    import mircuda as mc

    for name in ("elements", "launches", "batches"):
        if getattr(args, name) < 1:
            raise mc.ContractError(f"--{name}", "a positive integer", str(getattr(args, name)))
    if args.json:
        try:  # fail now, not after the whole run
            open(args.json, "a").close()
        except OSError as exc:
            raise mc.ContractError("--json", "a writable file path", f"{args.json!r} ({exc.strerror})") from None
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
        hits = []
        for _ in range(1000):
            t0 = time.perf_counter()
            again = compiler.compile(source)
            hits.append(time.perf_counter() - t0)
        if again is not module:
            failures.append("the second compile did not return the cached module")
        stats = compiler.cache_stats()
        rows.append(("NVRTC compile + load (cold)", f"{cold_ms:.1f} ms"))
        rows.append(("module cache lookup (hit)", f"{_median_us(hits):.2f} µs  {stats!r}"))

        kernel = module.kernel(Axpby)
        pool = context.default_memory_pool()
        rng = np.random.default_rng()
        x_host = rng.standard_normal(n).astype(np.float32)
        y_host = rng.standard_normal(n).astype(np.float32)
        a, b = float(rng.uniform(0.5, 2.0)), float(rng.uniform(-1.0, 1.0))
        x = pool.allocate(mc.f32, stream, n)
        y = pool.allocate(mc.f32, stream, n)
        cycles = []
        for _ in range(200):  # steady state: the pool already holds the memory
            t0 = time.perf_counter()
            tmp = pool.allocate(mc.f32, stream, n)
            tmp.free(stream)
            cycles.append(time.perf_counter() - t0)
        rows.append(("pool allocate + free (stream-ordered, warm)", f"{_median_us(cycles):.1f} µs per pair"))
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
        host: list[float] = []
        device_ms: list[float] = []
        for _ in range(args.batches):
            stream.synchronize()
            start.record(stream)
            t0 = time.perf_counter()
            for _ in range(launches):
                kernel.launch(stream, config, y, x, a, 1.0, n)
            host.append((time.perf_counter() - t0) / launches)
            end.record(stream)
            end.synchronize()
            device_ms.append(mc.Event.elapsed_ms(start, end) / launches)
        rows.append((f"typed launch, host cost ({launches} per batch)", f"{_median_us(host):.2f} µs per launch"))
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
        width = max(len(r[0]) for r in rows)
        for k, v in rows:
            print(f"  {k:<{width}}  {v}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"device": info.name, "rows": dict(rows), "failures": failures}, f, indent=2)
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    print("profile: " + ("FAILED" if failures else "all checks passed"))
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mircuda", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("inspect", help="list devices, the NVRTC version and targets; compile a sample kernel")
    p.set_defaults(func=cmd_inspect)
    p = sub.add_parser("profile", help="compile, cache, allocate, launch, time and check a kernel on the GPU")
    p.add_argument("--device", type=int, default=0, help="device ordinal (default 0)")
    p.add_argument("--elements", type=int, default=1 << 20, help="vector length of the axpby kernel (default 2^20)")
    p.add_argument("--launches", type=int, default=200, help="launches per timed batch (default 200)")
    p.add_argument("--batches", type=int, default=50, help="timed batches; medians are over batches (default 50)")
    p.add_argument("--json", help="also write the table as JSON to this file")
    p.set_defaults(func=cmd_profile)
    from .graph._profile import add_parser as add_graph_profile

    add_graph_profile(sub)
    from .compile._cli import add_compile_command

    add_compile_command(sub)
    from .matmul._cli import register as register_matmul

    register_matmul(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except Exception as exc:
        from .errors import MircudaError

        if isinstance(exc, MircudaError):
            print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
        raise
