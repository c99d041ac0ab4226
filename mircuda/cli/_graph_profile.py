"""``python -m mircuda graph-profile``: N kernels launched directly vs replayed as one graph.

For each N (1, 10, 100 by default) and each library present (mircuda; torch ``CUDAGraph`` and CuPy
graph capture where importable), one sequence of N ``tick`` kernels (1 block of 32 threads, one
pointer argument; torch: N in-place ``add_`` on a one-element tensor) is measured two ways:

- **host µs**: the time to enqueue it, the median over batches (each batch enqueues ``--calls``
  kernels or replays, the stream synchronized between batches);
- **device µs**: the time between two events around it, the median of ``--samples``; a ``spin``
  kernel enqueued first keeps the device busy while the host enqueues, so the events time the
  device's back-to-back execution, not the host's enqueue rate.

Each library runs in a process of its own (loading torch, CuPy and mircuda into one process was seen
to add about 1 µs to every driver call of mircuda's and cuda.bindings' paths on the H200 host, but
not to CuPy's), round-robin, ``--rounds`` times, so drift on a shared machine hits them alike;
``--in-process`` measures them all in one process instead.
The raw ``cuda.bindings`` ``cuGraphLaunch`` of mircuda's graph is timed beside ``Graph.launch``, and so
is the C floor (row ``C, driver API cuGraphLaunch (the floor)``): ``benchmarks/c/launch_floor.c`` built
with nvcc, capturing N ``tick`` kernels (the same kernel, a CUBIN from NVRTC) as ``Stream.capture`` does
and timing ``cuGraphLaunch`` from C, in a process of its own in every round (in both modes); it gives
host µs only. Every row's graph host µs is also given as a ratio to the floor's for the same N
(``graph_host_ratio_to_c_floor``, the table's last column). Without nvcc, or outside a source
checkout, the floor is listed under ``skipped`` with the reason and the ratios are absent.
Every path (the C floor included) counts its kernels on the device and the counts are checked (exit
status 1 on a mismatch). Results go to ``--json`` (default ``benchmarks/results/graph_profile.json``).
Reference figures (H200, PERFORMANCE.md): ``cuGraphLaunch`` of 100 empty kernels costs the host
1.38 µs from C, 3.25 µs through cuda.bindings, 2.87 µs through CuPy; the goal for
``Graph.launch`` is at most 2.0 µs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from ..timing import Column, ResultTable, host_us_per_call
from ._errors import RESULTS_HELP, check_results_file
from ._values import add_device_argument, comma_items, distinct, is_decimal, positive_int
from ._graph_floor import FLOOR_NAME, CFloor, FloorUnavailable, build, expected_count, note
from ._graph_paths import BindingsPath, CuPyPath, LibraryPath, MircudaPath, TorchPath, spin_on_handle

__all__ = ["COLUMNS", "MAX_KERNELS", "cmd_graph_profile", "kernel_counts", "register", "table"]

GOAL_REPLAY_HOST_US = 2.0
_LIBRARIES = ("mircuda", "torch", "CuPy")


def register(sub: Any) -> None:
    """Add ``graph-profile`` to the CLI's subparsers."""
    p = sub.add_parser("graph-profile", help="N kernels launched directly vs replayed as one CUDA graph: "
                       "host and device µs, beside torch and CuPy graphs")
    add_device_argument(p)
    p.add_argument("--sizes", type=kernel_counts, default="1,10,100",
                   help=f"comma-separated kernel counts N, each once (default 1,10,100; at most {MAX_KERNELS})")
    p.add_argument("--calls", type=positive_int, default=200, help="kernels or replays per host-timed batch")
    p.add_argument("--batches", type=positive_int, default=20, help="host-timed batches per round")
    p.add_argument("--samples", type=positive_int, default=10, help="device-timed samples per round")
    p.add_argument("--rounds", type=positive_int, default=3,
                   help="rounds over the libraries, round-robin (default 3); each figure is a median over rounds x batches")
    p.add_argument("--json", default="benchmarks/results/graph_profile.json", help=RESULTS_HELP)
    p.add_argument("--in-process", action="store_true", help="measure every library in this one process")
    p.add_argument("--only", choices=_LIBRARIES, help=argparse.SUPPRESS)  # child mode of the isolated run
    p.set_defaults(func=cmd_graph_profile, json_default=p.get_default("json"))


MAX_KERNELS = 1_000_000
"""``--sizes`` limit: the C floor's (``benchmarks/c/launch_floor.c`` takes at most this many graph nodes); a graph
of N kernels holds N nodes in host and device memory."""


def kernel_counts(text: str) -> tuple[int, ...]:
    """``--sizes``: comma-separated kernel counts N, ASCII digits in [1, :data:`MAX_KERNELS`], each once, e.g.
    ``1,10,100``.

    Raises:
        argparse.ArgumentTypeError: naming the value that is not such a count, an empty item (``1,,2``) or a
            repeated value (it would be measured and recorded twice).
    """
    values = []
    for v in comma_items(text, "kernel count"):
        if not is_decimal(v) or not 1 <= int(v) <= MAX_KERNELS:
            raise argparse.ArgumentTypeError(f"expected comma-separated kernel counts in [1, {MAX_KERNELS}] (the C "
                                             f"floor's limit), received {v[:40]!r} in {text[:80]!r}")
        values.append(int(v))
    return tuple(distinct(values, text))


def _source_text() -> str:
    return (resources.files("mircuda") / "cuda_src" / "graph_profile.cu").read_text()


def _setup_floor(tmp: str, source: str, arch: str, device: int, skipped: dict[str, str]) -> CFloor | None:
    """Build the C floor with ``source``'s tick kernel for ``arch`` in ``tmp``; None (and the reason in
    ``skipped``) where it cannot be built."""
    import mircuda as mc

    try:
        cubin = mc.compile_program(mc.cuda_kernel(source, "graph_profile.cu"), arch).image
        return build(Path(tmp), cubin, "tick", device)
    except (FloorUnavailable, mc.MircudaError) as exc:
        skipped[FLOOR_NAME] = str(exc)[:200]
        return None


def _floor_round(floor: CFloor | None, sizes: list[int], args: argparse.Namespace,
                 host: dict[tuple[str, int, str], list[float]], skipped: dict[str, str],
                 failures: list[str]) -> CFloor | None:
    """One round of the C floor: one run per N, its median added to ``host``; a count that differs from
    the kernels enqueued goes to ``failures``. A run that fails makes the floor unavailable: its earlier
    samples are dropped, the reason goes to ``skipped`` and None is returned (no later round runs it)."""
    if floor is None:
        return None
    for n in sizes:
        try:
            run = floor.run(n, args.calls, args.batches)
        except FloorUnavailable as exc:
            skipped[FLOOR_NAME] = str(exc)
            for k in sizes:
                host.pop((FLOOR_NAME, k, "graph"), None)
            return None
        want = expected_count(n, args.calls, args.batches)
        if run.counter != want:
            failures.append(f"{FLOOR_NAME}: N = {n}: the device counted {run.counter} kernels, {want} were enqueued")
        host.setdefault((FLOOR_NAME, n, "graph"), []).append(run.host_us)
    return floor


def _device_us(path: LibraryPath, run: Callable[[], None], spin: Callable[[int, int], None], spin_ns: int,
               samples: int) -> list[float]:
    start, end, elapsed = path.events()
    out = []
    for _ in range(samples):
        path.sync()
        spin(path.stream_handle, spin_ns)
        start()
        run()
        end()
        path.sync()
        out.append(elapsed() * 1e3)
    return out


def cmd_graph_profile(args: argparse.Namespace) -> int:
    import mircuda as mc

    sizes = list(args.sizes)  # checked while parsing (kernel_counts)
    for name in ("calls", "batches", "samples", "rounds"):
        if getattr(args, name) < 1:
            raise mc.ContractError(f"--{name}", "a positive integer", str(getattr(args, name)))
    check_results_file(args.json, getattr(args, "json_default", None))
    driver = mc.Driver.initialize()
    driver.device(args.device)
    if not args.in_process and not args.only:
        return _run_isolated(args, sizes)
    context = driver.create_context(driver.device(args.device))
    info = context.device_info()
    source = _source_text()
    compiler = mc.Compiler(context)
    module = compiler.compile(mc.cuda_kernel(source, "graph_profile.cu"))

    spin = spin_on_handle(context, compiler)  # on every library's stream, by handle

    paths: list[LibraryPath] = []
    if args.only in (None, "mircuda"):
        paths += [MircudaPath(mc, context, module), BindingsPath(mc, context, module)]
    skipped: dict[str, str] = {}
    floor_dir = None if args.only else tempfile.TemporaryDirectory()  # the C floor runs in every round
    floor = None if floor_dir is None else _setup_floor(floor_dir.name, source, info.arch, args.device, skipped)
    for name, make in (("torch", TorchPath), ("CuPy", lambda: CuPyPath(source))):
        if args.only not in (None, name):
            continue
        try:
            paths.append(make())
        except Exception as exc:  # not installed, or no usable device for it
            skipped[name] = f"{type(exc).__name__}: {exc}"[:200]

    # Setup (captures) once; then round-robin measurement.
    expected: dict[str, int] = {p.name: 0 for p in paths}
    runs: dict[tuple[str, int], dict[str, Callable[[], None]]] = {}
    for p in paths:
        for n in sizes:
            runs[(p.name, n)] = {"direct": p.direct(n), "graph": p.graph(n)}
    host: dict[tuple[str, int, str], list[float]] = {}
    device: dict[tuple[str, int, str], list[float]] = {}
    failures: list[str] = []
    for _ in range(args.rounds):
        floor = _floor_round(floor, sizes, args, host, skipped, failures)
        for p in paths:
            for n in sizes:
                for mode, run in runs[(p.name, n)].items():
                    if mode == "direct" and isinstance(p, BindingsPath):
                        continue  # the same launches as mircuda's: only its graph launch differs
                    reps = max(1, args.calls // n) if mode == "direct" else args.calls
                    h = host_us_per_call(run, p.sync, reps, args.batches)
                    host.setdefault((p.name, n, mode), []).extend(h)
                    spin_ns = int(20_000 + 4_000 * statistics.median(h))  # 4x the host's enqueue time
                    device.setdefault((p.name, n, mode), []).extend(
                        _device_us(p, run, spin, spin_ns, args.samples))
                    expected[p.name] += n * (reps * (args.batches + 1) + args.samples)

    if floor_dir is not None:
        floor_dir.cleanup()
    counts = {p.name: p.count() for p in paths}
    for name, want in expected.items():
        if counts[name] != want:
            failures.append(f"{name}: the device counted {counts[name]} kernels, {want} were enqueued")

    if args.only:  # child of an isolated run: hand the raw samples to the parent
        Path(args.json).write_text(json.dumps({
            "host": [[list(k), v] for k, v in host.items()], "device": [[list(k), v] for k, v in device.items()],
            "names": [p.name for p in paths], "skipped": skipped, "failures": failures}))
        context.close()
        return 0
    names = ([FLOOR_NAME] if (FLOOR_NAME, sizes[0], "graph") in host else []) + [p.name for p in paths]
    return _report(args, sizes, info.name, info.arch, names, host, device, skipped, failures,
                   "in one process (the C floor in its own)")


def _run_isolated(args: argparse.Namespace, sizes: list[int]) -> int:
    """Run each library in a child process, round-robin, and report the merged samples."""
    import subprocess

    import mircuda as mc

    host: dict[tuple[str, int, str], list[float]] = {}
    device: dict[tuple[str, int, str], list[float]] = {}
    names: list[str] = []
    skipped: dict[str, str] = {}
    failures: list[str] = []
    driver = mc.Driver.initialize()
    info = driver.device(args.device).info()
    with tempfile.TemporaryDirectory() as tmp:
        floor = _setup_floor(tmp, _source_text(), info.arch, args.device, skipped)
        for _ in range(args.rounds):
            floor = _floor_round(floor, sizes, args, host, skipped, failures)
            for lib in _LIBRARIES:
                if lib in skipped:
                    continue
                out_json = str(Path(tmp) / f"{lib}.json")
                cmd = [sys.executable, "-m", "mircuda", "graph-profile", "--only", lib, "--rounds", "1",
                       "--sizes", ",".join(map(str, sizes)), "--calls", str(args.calls), "--batches",
                       str(args.batches), "--samples", str(args.samples), "--device", str(args.device),
                       "--json", out_json]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0 or not Path(out_json).exists():
                    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    failures.append(f"{lib}: the measuring process failed ({tail})")
                    skipped[lib] = tail[:200]
                    continue
                data = json.loads(Path(out_json).read_text())
                skipped.update(data["skipped"])
                failures += data["failures"]
                names += [n for n in data["names"] if n not in names]
                for key, vals in data["host"]:
                    host.setdefault(tuple(key), []).extend(vals)
                for key, vals in data["device"]:
                    device.setdefault(tuple(key), []).extend(vals)
    if (FLOOR_NAME, sizes[0], "graph") in host:
        names.insert(0, FLOOR_NAME)
    if "mircuda" not in names:
        raise mc.MircudaError("graph-profile: mircuda's own measurement failed: " + "; ".join(failures))
    return _report(args, sizes, info.name, info.arch, names, host, device, skipped, failures,
                   "each library in a process of its own")


def _us(key: str, header: str, width: int) -> Column:
    return Column(key, header, width, format="{:.2f}", missing="n/a")


COLUMNS = (Column("library", "library", len(FLOOR_NAME), "<"), Column("kernels", "N", 4),
           _us("direct_host_us", "direct host", 12), _us("direct_device_us", "direct dev", 11), _us("graph_host_us", "graph host", 11),
           _us("graph_device_us", "graph dev", 10), _us("direct_over_graph_host", "host ÷", 7),
           _us("direct_over_graph_device", "dev ÷", 6), _us("graph_host_vs_mircuda", "graph host vs mircuda", 22),
           _us("graph_host_ratio_to_c_floor", "× C floor", 10))
"""The columns of graph-profile's table (keys: those of its JSON rows)."""


def table(rows: list[dict[str, Any]], title: str = "") -> ResultTable:
    """graph-profile's rows as the table it prints (µs and ratios; ``n/a`` where a path has no value);
    the note of the C floor's rows (their ``note``) follows the table's own."""
    notes = ["(µs: direct = the whole sequence of N launches; graph = one replay. ÷ = direct / graph; "
             "× C floor = graph host / the C floor's graph host for the same N.)"]
    notes += list(dict.fromkeys(r["note"] for r in rows if r.get("note")))
    return ResultTable(COLUMNS, rows, title=title, rule=True, notes=notes)


def _report(args: argparse.Namespace, sizes: list[int], device_name: str, arch: str, names: list[str],
            host: dict[tuple[str, int, str], list[float]], device: dict[tuple[str, int, str], list[float]],
            skipped: dict[str, str], failures: list[str], how: str) -> int:
    from .. import _cuda

    rows = []
    for name in names:
        for n in sizes:
            row: dict[str, Any] = {"library": name, "kernels": n}
            for mode in ("direct", "graph"):
                if (name, n, mode) in host:
                    row[f"{mode}_host_us"] = round(statistics.median(host[(name, n, mode)]), 3)
                if (name, n, mode) in device:  # the C floor has host times only
                    row[f"{mode}_device_us"] = round(statistics.median(device[(name, n, mode)]), 3)
            if name == FLOOR_NAME:
                row["note"] = note(arch)
            rows.append(row)
    mircuda_replay = {r["kernels"]: r["graph_host_us"] for r in rows if r["library"] == "mircuda"}
    floor = {r["kernels"]: r["graph_host_us"] for r in rows if r["library"] == FLOOR_NAME}
    for r in rows:
        r["graph_host_vs_mircuda"] = round(r["graph_host_us"] / mircuda_replay[r["kernels"]], 3)
        if floor.get(r["kernels"]):  # a floor of 0.0 µs (below the clock's resolution) gives no ratio
            r["graph_host_ratio_to_c_floor"] = round(r["graph_host_us"] / floor[r["kernels"]], 3)
        if "direct_host_us" in r:
            r["direct_over_graph_host"] = round(r["direct_host_us"] / r["graph_host_us"], 2)
            r["direct_over_graph_device"] = round(r["direct_device_us"] / r["graph_device_us"], 2)

    print(table(rows, f"graph-profile on {device_name} ({arch}); hot path {_cuda.hot_path_kind}; {how}; medians "
                      f"of {args.rounds} rounds x {args.batches} batches (host) / x {args.samples} samples (device)"))
    for name, why in skipped.items():
        print(f"{name}: not measured ({why})")
    worst = max(mircuda_replay.values())
    met = worst <= GOAL_REPLAY_HOST_US
    print(f"Graph.launch host cost: {worst:.2f} µs at most (goal <= {GOAL_REPLAY_HOST_US} µs: "
          f"{'met' if met else 'NOT met'})")
    vs_floor = {r["kernels"]: r["graph_host_ratio_to_c_floor"] for r in rows
                if r["library"] == "mircuda" and "graph_host_ratio_to_c_floor" in r}
    if vs_floor:
        print("Graph.launch ÷ the C floor's cuGraphLaunch: " + ", ".join(f"N = {n}: {v:.2f}" for n, v in vs_floor.items()))

    result = {
        "benchmark": "graph_profile", "device": device_name, "arch": arch, "date": time.strftime("%Y-%m-%d"),
        "method": how,
        "hot_path": _cuda.hot_path_kind, "kernel": "tick(unsigned*), 1 block x 32 threads (torch: add_ on int64[1])",
        "settings": {"sizes": sizes, "calls": args.calls, "batches": args.batches, "samples": args.samples,
                     "rounds": args.rounds},
        "units": "µs; direct = a sequence of N launches, graph = one replay of N kernels",
        "rows": rows, "skipped": skipped,
        "goal": {"graph_launch_host_us_max": GOAL_REPLAY_HOST_US, "worst_mircuda_us": worst, "met": met},
        "graph_launch_ratio_to_c_floor": {str(n): v for n, v in vs_floor.items()},
        "failures": failures,
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failures else 0
