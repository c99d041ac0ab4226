"""``python -m mircuda multi-gpu-profile``: two devices of one host, mircuda beside torch in one run.

(a) Peer copies GPU 0 -> GPU 1 (``Stream.copy_peer``, peer and pool access enabled both ways), GB/s,
    beside torch's ``Tensor.copy_`` between devices: the copy engines (``engine='copy'``) and, where the
    devices have a peer path, the SM copy kernel (``engine='sm'``) pushing (on GPU 0) and pulling (on GPU 1);
    each SM direction's bytes are checked once (an odd size at odd offsets).
(b) NCCL all-reduce and all-gather of bf16, 8 KiB-1 GiB: mircuda's communicators (``init_all``, one
    thread, one NCCL group per call pair) beside torch.distributed (NCCL backend, two spawned processes,
    a ``file://`` store), both timed as an eager user runs them: ``calls`` back-to-back calls between
    device events (host cost included), median of repeats. Bus bandwidth by NCCL's formulas
    (nccl-tests' PERFORMANCE.md): all-reduce ``busbw = S / t * 2 (n - 1) / n`` with S the buffer's
    bytes; all-gather ``busbw = S / t * (n - 1) / n`` with S the gathered (output) bytes. Then small
    all-reduces (8-64 KiB, the tensor-parallel decode case) inside one CUDA graph per device
    (``capture_each``; 16 per graph), device µs each; then the same with the buffers in NCCL symmetric
    windows ("in graphs, symmetric": ``Communicator.allocate_symmetric``, ``ncclMemAlloc`` memory
    registered with ``NCCL_WIN_COLL_SYMMETRIC``, for NCCL's symmetric NVLink load/store kernels; NVLS
    stays off). A size that fails there is recorded by name and the other sizes are measured.
(c) The four projections of a Llama-3-8B decoder layer (bf16: QKV 6144x4096, O 4096x4096, gate+up
    28672x4096, down 4096x14336) at each M: one device (the four DenseMatmulPlans in one graph) vs
    tensor parallel over both (column-parallel QKV and gate+up, row-parallel O and down with their
    all-reduces; one graph per device), device µs per layer and the ratio. The TP result of each
    projection is checked against the one-device result. At M <= 16 two more kinds of rows: the TP
    layer again with communicators created under NCCL variables (``--tp-nccl``, default NCCL_PROTO=LL
    and NCCL_PROTO=LL128: the protocol of the two small all-reduces), and the per-device graphs without
    their all-reduces ("GEMVs only": the floor; the TP row minus it is what the all-reduces cost), and
    "2 devices TP symmetric": the row-parallel layers made with ``symmetric=True`` (their outputs in
    NCCL symmetric windows, all-reduced in place). A failing row is recorded by name, the others are
    measured.

Ratios are reported, never asserted. NVLink multicast stays off (``NCCL_NVLS_ENABLE=0`` and torch's
and NVSHMEM's switches, set unless already set, in this process and the spawned ones)."""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..timing import Column, ResultTable
from ._errors import RESULTS_HELP
from ._values import positive_seconds, positive_int
from ._multi_gpu_torch import MULTICAST_OFF

__all__ = ["DEFAULT_TP_NCCL", "LLAMA_PROJECTIONS", "Row", "TP_NCCL_SETTINGS", "bus_bandwidth", "multi_gpu_profile",
           "register", "sizes_for", "table", "tp_nccl_variant", "tp_nccl_variants"]

LLAMA_PROJECTIONS = (("qkv", 6144, 4096, "column"), ("o", 4096, 4096, "row"),
                     ("gate_up", 28672, 4096, "column"), ("down", 4096, 14336, "row"))
"""(name, N, K, split) of the Llama-3-8B layer's projections (hidden 4096, 32 query and 8 KV heads of 128:
QKV 4096 + 2 * 1024 = 6144; MLP 14336, gate and up fused: 28672)."""

FULL_SIZES = tuple(8 << (10 + 2 * i) for i in range(10))  # 8 KiB, 32 KiB ... 512 MiB, then 1 GiB below
QUICK_SIZES = (8 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20)
GRAPH_SIZES = (8 << 10, 16 << 10, 32 << 10, 64 << 10)
COPY_SIZES = (64 << 20, 1 << 30)
GRAPH_OPS = 16
CHECK_LIMIT = 2e-2

TP_NCCL_SETTINGS: dict[str, tuple[str, ...]] = {"NCCL_PROTO": ("LL", "LL128", "Simple"), "NCCL_ALGO": ("Ring", "Tree")}
"""The NCCL environment variables a ``--tp-nccl`` variant may set (NCCL's documented environment
variables, docs.nvidia.com/deeplearning/nccl, "Environment Variables") and their allowed values (a
comma-separated list of them). Only these two: NCCL reads them (``ncclGetEnv``) each time a communicator
is created and again when it chooses an algorithm for a call, so a variant's value applies to its own
communicators and calls; the ``NCCL_PARAM`` variables (NCCL_MAX_CTAS, NCCL_GRAPH_MIXING_SUPPORT, ...) are
read once per process and would silently keep the first value. NVLS and CollNet are not among the
values: NVLink multicast stays off."""
DEFAULT_TP_NCCL = ("NCCL_PROTO=LL", "NCCL_PROTO=LL128")


def tp_nccl_variant(text: str) -> tuple[tuple[str, str], ...]:
    """One ``--tp-nccl`` value: ``"NAME=VALUE [NAME=VALUE]"`` (space-separated settings of
    :data:`TP_NCCL_SETTINGS`) as ((name, value), ...); ``"none"`` gives () (no variant). Part c then
    measures the tensor-parallel layer again (M <= 16), as a separate row, with communicators created,
    connected and captured under these variables (set in this process's environment for that row only).

    Raises:
        argparse.ArgumentTypeError: an empty variant, a setting without ``=``, a variable not in
            TP_NCCL_SETTINGS (NVLS and the multicast switches are not), a value not allowed, or a
            variable set twice; the message names the setting.
    """
    import argparse

    if text.strip() == "none":
        return ()
    settings: list[tuple[str, str]] = []
    for item in text.split():
        name, eq, value = item.partition("=")
        if not eq or not value:
            raise argparse.ArgumentTypeError(f"expected NAME=VALUE settings separated by spaces, received {item!r}")
        if name not in TP_NCCL_SETTINGS:
            raise argparse.ArgumentTypeError(f"expected a variable among {', '.join(TP_NCCL_SETTINGS)} (NVLS stays "
                                             f"off), received {name!r}")
        allowed = TP_NCCL_SETTINGS[name]
        if any(v not in allowed for v in value.split(",")):
            raise argparse.ArgumentTypeError(f"expected {name}=<a comma-separated list of {', '.join(allowed)}>, "
                                             f"received {item!r}")
        if any(name == n for n, _ in settings):
            raise argparse.ArgumentTypeError(f"expected each variable once per variant, received {text!r}")
        settings.append((name, value))
    if not settings:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE settings or 'none', received {text!r}")
    return tuple(settings)


def tp_nccl_variants(values: list[tuple[tuple[str, str], ...]] | None) -> list[tuple[tuple[str, str], ...]]:
    """The variants of part c: :data:`DEFAULT_TP_NCCL` without ``--tp-nccl``, else the given ones less
    ``none`` (and less repeats)."""
    chosen = [tp_nccl_variant(v) for v in DEFAULT_TP_NCCL] if values is None else values
    out: list[tuple[tuple[str, str], ...]] = []
    for v in chosen:
        if v and v not in out:
            out.append(v)
    return out


class _NcclEnvironment:
    """Sets a variant's NCCL variables in this process's environment for the ``with`` block (NCCL reads
    them when a communicator is created and connected), then restores what was there."""

    def __init__(self, settings: tuple[tuple[str, str], ...]) -> None:
        self.settings = settings
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for name, value in self.settings:
            self.saved[name] = os.environ.get(name)
            os.environ[name] = value

    def __exit__(self, *exc: object) -> None:
        for name, old in self.saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


def sizes_for(quick: bool) -> tuple[int, ...]:
    """The message sizes in bytes: 8 KiB x 4^i up to 512 MiB and 1 GiB, or the quick sweep."""
    return QUICK_SIZES if quick else tuple(s for s in FULL_SIZES if s < (1 << 30)) + (1 << 30,)


def bus_bandwidth(op: str, nbytes: int, us: float, ranks: int) -> float:
    """NCCL's bus bandwidth in GB/s (nccl-tests, PERFORMANCE.md): ``algbw = nbytes / t``; all_reduce
    ``busbw = algbw * 2 (n - 1) / n``; all_gather ``busbw = algbw * (n - 1) / n`` (``nbytes``: the
    gathered output)."""
    algbw = nbytes / (us * 1e-6) / 1e9
    factor = 2 * (ranks - 1) / ranks if op == "all_reduce" else (ranks - 1) / ranks
    return algbw * factor


@dataclass
class Row:
    """One measurement: what, how big, µs, the rate (GB/s: bus bandwidth or copy rate), and the ratio
    torch µs / mircuda µs where both ran (> 1: mircuda faster)."""

    part: str
    path: str
    op: str
    bytes: int
    m: int
    us: float
    gbps: float | None
    ratio: float | None = None
    note: str = ""


def _size(nbytes: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


COLUMNS = (Column("part", "", 2, "<"), Column("path", "path", 26, "<"), Column("op", "op", 14, "<"),
           Column("size", "size", 9), Column("m", "M", 5), Column("us", "µs", 10, format="{:.2f}"),
           Column("gbps", "GB/s", 7, format="{:.1f}"), Column("ratio", "ratio", 6, format="{:.2f}"),
           Column("note", "", 0, "<", sep="  "))


def table(rows: list[Row], title: str = "") -> ResultTable:
    """The rows as multi-gpu-profile prints them (``size`` added; ``M`` blank outside part c)."""
    return ResultTable(COLUMNS, [{**asdict(r), "size": _size(r.bytes) if r.bytes else None,
                                  "m": r.m or None} for r in rows], title=title, indent="  ")


class DeviceTimer:
    """Device µs per call of work enqueued on several streams (one per device), the slowest device's:
    events around ``calls`` back-to-back ``enqueue(i)`` on every stream, median over repeats. With
    ``spin`` a spin kernel first holds each stream while the host enqueues (device time, the method of
    :mod:`mircuda.timing`); without, the host's enqueue cost is part of the time (an eager user's view)."""

    def __init__(self, contexts: list[Any], streams: list[Any]) -> None:
        from ..matmul._vector import shared_compiler
        from ..timing import spin_kernel

        self.streams = streams
        self.spins = [spin_kernel(shared_compiler(c)) for c in contexts]
        self.starts = [c.create_event(timing=True) for c in contexts]
        self.ends = [c.create_event(timing=True) for c in contexts]
        self.spin_ns = 2_000_000

    def median(self, enqueue: Callable[[int], object], calls: int, repeats: int, spin: bool = True) -> float:
        import mircuda as mc

        samples: list[float] = []
        one = mc.LaunchConfig(1, 32)
        for r in range(repeats + 1):
            if spin:
                for k, s in zip(self.spins, self.streams):
                    k.launch(s, one, self.spin_ns)
            for e, s in zip(self.starts, self.streams):
                e.record(s)
            t0 = time.perf_counter()
            for i in range(calls):
                enqueue(i)
            host_ns = (time.perf_counter() - t0) * 1e9
            for e, s in zip(self.ends, self.streams):
                e.record(s)
            for e in self.ends:
                e.synchronize()
            self.spin_ns = int(min(max(2_000_000, 2 * host_ns), 1_000_000_000))
            if r:
                samples.append(max(mc.Event.elapsed_ms(a, b) for a, b in zip(self.starts, self.ends)) * 1e3 / calls)
        return statistics.median(samples)

    def close(self) -> None:
        for e in self.starts + self.ends:
            e.close()


def _torch_side(sizes: tuple[int, ...], copy_sizes: tuple[int, ...], plan: dict[str, int],
                timeout_s: float) -> tuple[dict[str, Any] | None, str]:
    """torch.distributed's measurements from two spawned processes, or (None, why not)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return None, "torch is not installed: no torch rows"
    import multiprocessing

    from ._multi_gpu_torch import torch_worker

    # The standard library's spawn (what torch.multiprocessing wraps): torch is imported only by the two
    # processes, never by this one, whose NCCL is nccl4py's.
    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()
    with tempfile.TemporaryDirectory(prefix="mircuda-dist-") as tmpdir:
        init = "file://" + os.path.join(tmpdir, "store")
        procs = [spawn.Process(target=torch_worker, args=(r, 2, init, list(sizes), list(copy_sizes), plan, queue))
                 for r in range(2)]
        for p in procs:
            p.start()
        result: dict[str, Any] | None = None
        why = ""
        try:
            result = queue.get(timeout=timeout_s)
        except Exception as exc:  # queue.Empty: a hang or a crash
            why = f"torch.distributed gave no result within {timeout_s:.0f} s ({type(exc).__name__})"
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
                    p.join()
    if result is not None and "error" in result:
        return None, f"torch.distributed failed: {result['error']}"
    return result, why


def multi_gpu_profile(args: Any) -> int:
    """Parts a, b and c of the module documentation; the table, the goals and the JSON."""
    for k, v in MULTICAST_OFF.items():
        os.environ.setdefault(k, v)
    import mircuda as mc

    from ._errors import check_results_file
    from ._matmul_bench import _write_json

    check_results_file(args.json, getattr(args, "json_default", None))
    for name in ("calls", "repeats"):
        if getattr(args, name) < 1:
            raise mc.ContractError(f"--{name}", "a positive integer", str(getattr(args, name)))
    driver = mc.Driver.initialize()
    if len(driver.devices()) < 2:
        raise mc.UnsupportedPlatform(f"multi-gpu-profile needs 2 CUDA devices; this host has {len(driver.devices())}")
    import mircuda.nccl as nccl  # NcclNotFound (naming the [nccl] extra) without nccl4py

    sizes = sizes_for(args.quick)
    ms = list(args.m)
    tp_nccl = tp_nccl_variants(getattr(args, "tp_nccl", None))
    plan = {"calls": args.calls, "big_calls": max(1, args.calls // 4), "copy_calls": max(1, args.calls // 4),
            "repeats": args.repeats}
    rows: list[Row] = []
    notes: list[str] = []
    failures: list[str] = []
    torch_result: dict[str, Any] | None = None
    if not args.no_torch:
        print("torch.distributed (2 processes) ...", flush=True)
        torch_result, why = _torch_side(sizes, COPY_SIZES, plan, timeout_s=args.torch_timeout)
        if why:
            notes.append(why)
        if torch_result is not None:
            notes.append(f"torch {torch_result['version']}")
            if torch_result.get("check") != 2.0:
                failures.append(f"torch.distributed all_reduce of ones over 2 ranks gave {torch_result.get('check')}")
    else:
        notes.append("--no-torch: no torch rows")
    contexts = [driver.create_context(d) for d in driver.devices()[:2]]
    try:
        streams = [c.create_stream() for c in contexts]
        pools = [c.default_memory_pool() for c in contexts]
        info = contexts[0].device_info()
        timer = DeviceTimer(contexts, streams)
        print("peer copies ...", flush=True)
        _part("a: peer copies", failures, lambda: _peer_copies(contexts, streams, pools, timer, plan, rows, notes,
                                                               failures, torch_result))
        comms = nccl.Communicator.init_all(contexts)
        try:
            print("collectives ...", flush=True)
            _part("b: collectives", failures, lambda: _collectives(nccl, comms, streams, pools, timer, sizes, plan, rows,
                                                                   failures, torch_result))
            _part("b: collectives in graphs", failures,
                  lambda: _graph_collectives(comms, streams, pools, timer, plan, rows, failures))
            _part("b: collectives in graphs, symmetric", failures,
                  lambda: _graph_collectives(comms, streams, pools, timer, plan, rows, failures, symmetric=True))
            print("tensor-parallel Llama-3-8B projections ...", flush=True)
            _part("c: tensor-parallel projections", failures,
                  lambda: _llama(mc, contexts, streams, pools, comms, timer, ms, plan, rows, notes, failures,
                                 tp_nccl))
        finally:
            for s in streams:
                s.synchronize()
            nccl.close_all(comms)
        timer.close()
    finally:
        for c in contexts:
            c.close()
    goals = _goals(rows)
    print(f"multi-gpu-profile on 2 x {info.name} ({info.arch}); NCCL {'.'.join(map(str, nccl.nccl_version()))}; "
          f"ratio = torch µs / mircuda µs (b), one device µs / two devices µs (c)")
    print(table(rows))
    for line in [f"goal: {g}" for g in goals] + [f"note: {n}" for n in notes]:
        print(f"  {line}")
    _write_json(args.json, {
        "benchmark": "multi-gpu-profile", "device": info.name, "arch": info.arch, "devices": 2,
        "nccl": ".".join(map(str, nccl.nccl_version())),
        "environment": {k: os.environ.get(k) for k in MULTICAST_OFF},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "method": ("a, b: calls back to back between device events, no spin kernel (host cost included), median of "
                   "repeats, on both sides; b in graphs and c: device time behind a spin kernel on both devices, the "
                   "slower device's; busbw by nccl-tests' formulas"),
        "notes": notes, "goals": goals, "failures": failures, "rows": [asdict(r) for r in rows]})
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    print("multi-gpu-profile: " + ("FAILED" if failures else "all checks passed"))
    return 1 if failures else 0


def _part(name: str, failures: list[str], run: Callable[[], None]) -> None:
    """Run one part of the profile; a mircuda error ends that part only (recorded as a failure, so the
    other parts' figures are still measured and written)."""
    from ..errors import MircudaError
    from ._errors import debug

    try:
        run()
    except MircudaError as exc:
        if debug():
            import traceback

            traceback.print_exc()
        failures.append(f"{name}: {type(exc).__name__}: {exc}"[:600])
        print(f"  {name} stopped: {type(exc).__name__}: {exc}"[:300], file=sys.stderr, flush=True)


def _peer_copies(contexts: list[Any], streams: list[Any], pools: list[Any], timer: DeviceTimer, plan: dict[str, int],
                 rows: list[Row], notes: list[str], failures: list[str], torch_result: dict[str, Any] | None) -> None:
    import mircuda as mc

    peers = contexts[0].can_access_peer(contexts[1]) and contexts[1].can_access_peer(contexts[0])
    if peers:
        contexts[0].enable_peer_access(contexts[1])
        contexts[1].enable_peer_access(contexts[0])
        pools[0].set_access(contexts[1])
        pools[1].set_access(contexts[0])
    else:
        notes.append("no peer-to-peer path between the devices: copies are staged by the driver")
    torch_us = {b: us for b, us in (torch_result or {}).get("peer_copy", [])}
    for nbytes in COPY_SIZES:
        src = pools[0].allocate(mc.u8, streams[0], nbytes)
        dst = pools[1].allocate(mc.u8, streams[1], nbytes)
        streams[1].synchronize()
        def copy(i: int, src: Any = src, dst: Any = dst) -> None:
            streams[0].copy_peer(src, dst)

        us = timer.median(copy, plan["copy_calls"], plan["repeats"], spin=False)
        rows.append(Row("a", "mircuda Stream.copy_peer", "GPU0->GPU1", nbytes, 0, us, nbytes / (us * 1e-6) / 1e9,
                        note="engine='copy' (cuMemcpyPeerAsync)"))
        t = torch_us.get(nbytes)
        if t is not None:
            rows[-1].ratio = t / us
        half = nbytes // 2

        def split(i: int, src: Any = src, dst: Any = dst, half: int = half, nbytes: int = nbytes) -> None:
            # Two copy engines at once: GPU 0's pushes the first half, GPU 1's pulls the second.
            streams[0].copy_peer(src, dst, half)
            streams[1].copy_peer(src, dst, nbytes - half, src_offset=half, dst_offset=half)

        us = timer.median(split, plan["copy_calls"], plan["repeats"], spin=False)
        rows.append(Row("a", "mircuda copy_peer x2 engines", "GPU0->GPU1", nbytes, 0, us,
                        nbytes / (us * 1e-6) / 1e9, ratio=t / us if t is not None else None,
                        note="engine='copy': half on a GPU0 stream (push), half on a GPU1 stream (pull)"))
        if peers:
            # engine='sm': push (GPU 0's SMs write GPU 1's memory) and pull (GPU 1's SMs read GPU 0's).
            for stream, path, how in ((streams[0], "mircuda copy_peer sm push", "kernel on GPU0 writes GPU1"),
                                      (streams[1], "mircuda copy_peer sm pull", "kernel on GPU1 reads GPU0")):
                check = _check_sm_copy(streams, pools, stream, (1 << 20) + 5) if nbytes == COPY_SIZES[0] else ""
                if check:
                    failures.append(f"copy_peer engine='sm' ({how}): {check}")
                def sm(i: int, src: Any = src, dst: Any = dst, stream: Any = stream) -> None:
                    stream.copy_peer(src, dst, engine="sm")

                us = timer.median(sm, plan["copy_calls"], plan["repeats"], spin=False)
                rows.append(Row("a", path, "GPU0->GPU1", nbytes, 0, us, nbytes / (us * 1e-6) / 1e9,
                                ratio=t / us if t is not None else None, note=f"engine='sm': {how}"))
        if t is not None:
            rows.append(Row("a", "torch Tensor.copy_", "GPU0->GPU1", nbytes, 0, t, nbytes / (t * 1e-6) / 1e9))
        streams[0].synchronize()
        src.free(streams[0])
        dst.free(streams[1])
        for s in streams:
            s.synchronize()


def _check_sm_copy(streams: list[Any], pools: list[Any], stream: Any, nbytes: int) -> str:
    """``engine='sm'`` copies of random bytes on ``stream``, an odd size at offsets that agree modulo 16
    (the 16-byte path, with head and tail bytes) and at offsets that do not (the byte path), each
    checked whole; '' when exact, else what was wrong."""
    wrong = []
    for src_offset, dst_offset in ((5, 5), (3, 1)):
        host = np.random.default_rng().integers(0, 256, nbytes + src_offset, dtype=np.uint8)
        src = streams[0].upload(pools[0], host)
        dst = streams[1].upload(pools[1], np.zeros(nbytes + dst_offset, np.uint8))
        stream.copy_peer(src, dst, nbytes, src_offset=src_offset, dst_offset=dst_offset, engine="sm")
        stream.synchronize()
        got = streams[1].download(dst)
        bad = int(np.count_nonzero(got[dst_offset:] != host[src_offset:])) + int(np.count_nonzero(got[:dst_offset]))
        if bad:
            wrong.append(f"{bad} of {nbytes} bytes wrong (offsets {src_offset}, {dst_offset})")
        src.free(streams[0])
        dst.free(streams[1])
        for s in streams:
            s.synchronize()
    return "; ".join(wrong)


def _collectives(nccl: Any, comms: list[Any], streams: list[Any], pools: list[Any], timer: DeviceTimer,
                 sizes: tuple[int, ...], plan: dict[str, int], rows: list[Row], failures: list[str],
                 torch_result: dict[str, Any] | None) -> None:
    import mircuda as mc

    torch_us = {(op, b): us for op, b, us in (torch_result or {}).get("collectives", [])}
    # Values first: one all-reduce and one all-gather of known small integers, checked on both devices.
    n = 4096
    a = [streams[r].upload(pools[r], np.full(n, r + 1, mc.bf16)) for r in range(2)]
    g = [streams[r].upload(pools[r], np.zeros(2 * n, mc.bf16)) for r in range(2)]
    with nccl.group():
        for r in range(2):
            comms[r].all_gather(streams[r], a[r], g[r])
    with nccl.group():
        for r in range(2):
            comms[r].all_reduce(streams[r], a[r], a[r])
    for r in range(2):
        if not (np.all(streams[r].download(a[r]) == 3) and
                np.array_equal(streams[r].download(g[r]), np.repeat(np.array([1, 2], mc.bf16), n))):
            failures.append(f"all_reduce/all_gather values wrong on device {r}")
    for nbytes in sizes:
        count = nbytes // 2
        calls = plan["calls"] if nbytes <= (8 << 20) else plan["big_calls"]
        x = [pools[r].allocate(mc.bf16, streams[r], count) for r in range(2)]
        y = [pools[r].allocate(mc.bf16, streams[r], count) for r in range(2)]
        part = [pools[r].allocate(mc.bf16, streams[r], count // 2) for r in range(2)]  # each rank's share
        for r in range(2):
            streams[r].memset(x[r], 0)
            streams[r].memset(part[r], 0)

        def all_reduce(i: int, x: list[Any] = x, y: list[Any] = y) -> None:
            with nccl.group():
                comms[0].all_reduce(streams[0], x[0], y[0])
                comms[1].all_reduce(streams[1], x[1], y[1])

        def all_gather(i: int, part: list[Any] = part, y: list[Any] = y) -> None:
            with nccl.group():
                comms[0].all_gather(streams[0], part[0], y[0])
                comms[1].all_gather(streams[1], part[1], y[1])

        for op, run in (("all_reduce", all_reduce), ("all_gather", all_gather)):
            us = timer.median(run, calls, plan["repeats"], spin=False)
            rows.append(Row("b", "mircuda.nccl", op, nbytes, 0, us, bus_bandwidth(op, nbytes, us, 2)))
            t = torch_us.get((op, nbytes))
            if t is not None:
                rows[-1].ratio = t / us
                rows.append(Row("b", "torch.distributed", op, nbytes, 0, t, bus_bandwidth(op, nbytes, t, 2)))
        for r in range(2):
            streams[r].synchronize()
            x[r].free(streams[r])
            y[r].free(streams[r])
            part[r].free(streams[r])


def _graph_collectives(comms: list[Any], streams: list[Any], pools: list[Any], timer: DeviceTimer,
                       plan: dict[str, int], rows: list[Row], failures: list[str], symmetric: bool = False) -> None:
    """All-reduces of 8-64 KiB in one graph per device. With ``symmetric`` the buffers are NCCL
    symmetric windows (``Communicator.allocate_symmetric``: NCCL's symmetric LSA kernels, NVLink
    multicast off); a failing size is recorded by name and the other sizes are still measured."""
    import mircuda as mc

    path = "mircuda.nccl in graphs, symmetric" if symmetric else "mircuda.nccl in graphs"
    for nbytes in GRAPH_SIZES:
        if not symmetric:
            _graph_all_reduce(comms, streams, pools, timer, plan, rows, failures, nbytes, path, symmetric)
            continue
        try:
            _graph_all_reduce(comms, streams, pools, timer, plan, rows, failures, nbytes, path, symmetric)
        except mc.MircudaError as exc:  # this size's row is missing; the other sizes are measured
            failures.append(f"b: {path} {_size(nbytes)}: {type(exc).__name__}: {exc}"[:600])


def _graph_all_reduce(comms: list[Any], streams: list[Any], pools: list[Any], timer: DeviceTimer,
                      plan: dict[str, int], rows: list[Row], failures: list[str], nbytes: int, path: str,
                      symmetric: bool) -> None:
    import mircuda as mc
    import mircuda.nccl as nccl
    from mircuda.parallel import capture_each

    count = nbytes // 2
    bufs: list[list[Any]] = [[], []]
    try:
        if symmetric:
            pairs = [nccl.allocate_symmetric_all(comms, mc.bf16, streams, count) for _ in range(2)]
            for r in range(2):
                bufs[r] = [pairs[0][r], pairs[1][r]]
                init = streams[r].upload(pools[r], np.full(count, r + 1, mc.bf16))
                for b in bufs[r]:
                    streams[r].copy_device_range(init, 0, b, 0, count)
                init.free(streams[r])
            with nccl.group():  # eager once: NCCL connects the windows outside the capture
                for r in range(2):
                    comms[r].all_reduce(streams[r], bufs[r][0], bufs[r][1])
        else:
            bufs = [[streams[r].upload(pools[r], np.full(count, r + 1, mc.bf16)) for _ in range(2)] for r in range(2)]

        def enqueue(r: int, res: Any) -> None:
            src, dst = res[r]
            for _ in range(GRAPH_OPS):
                comms[r].all_reduce(streams[r], src, dst)

        graphs = capture_each(streams, bufs, enqueue)
        try:
            for r in range(2):
                streams[r].memset(bufs[r][1], 0)
                graphs[r].launch(streams[r])
            for r in range(2):
                if not np.all(streams[r].download(bufs[r][1]) == 3):
                    failures.append(f"all_reduce in a graph ({path}, {_size(nbytes)}): wrong values on device {r}")

            def replay(i: int, graphs: list[Any] = graphs) -> None:
                graphs[0].launch(streams[0])
                graphs[1].launch(streams[1])

            us = timer.median(replay, max(1, plan["calls"] // 4), plan["repeats"]) / GRAPH_OPS
            note = f"{GRAPH_OPS} per graph, one graph per device; goal <= 10 µs"
            if symmetric:
                windows = all(b.registered for pair in bufs for b in pair)
                note += ("; ncclMemAlloc buffers in NCCL_WIN_COLL_SYMMETRIC windows, NVLS off" if windows else
                         "; NCCL registered no symmetric window (no symmetric support): the ordinary kernels ran")
            rows.append(Row("b", path, "all_reduce", nbytes, 0, us, bus_bandwidth("all_reduce", nbytes, us, 2),
                            note=note))
        finally:
            for gr in graphs:
                gr.close()
    finally:
        for r in range(2):
            streams[r].synchronize()
            for b in bufs[r]:
                if not b.freed:
                    b.free(streams[r])


def _llama(mc: Any, contexts: list[Any], streams: list[Any], pools: list[Any], comms: list[Any], timer: DeviceTimer,
           ms: list[int], plan: dict[str, int], rows: list[Row], notes: list[str], failures: list[str],
           tp_nccl: list[tuple[tuple[str, str], ...]]) -> None:
    import mircuda.nccl as nccl

    variants: list[tuple[tuple[tuple[str, str], ...], list[Any]]] = []
    try:
        if any(m <= 16 for m in ms):
            for settings in tp_nccl:  # each variant's communicators, created under its NCCL variables
                try:
                    with _NcclEnvironment(settings):
                        variants.append((settings, nccl.Communicator.init_all(contexts)))
                except mc.MircudaError as exc:  # that variant's rows are missing; the others are measured
                    failures.append(f"c: NCCL variant {settings}: {type(exc).__name__}: {exc}"[:600])
        _llama_rows(mc, contexts, streams, pools, comms, timer, ms, plan, rows, notes, failures, variants)
    finally:
        for s in streams:
            s.synchronize()
        for _, vcomms in variants:
            nccl.close_all(vcomms)


def _llama_rows(mc: Any, contexts: list[Any], streams: list[Any], pools: list[Any], comms: list[Any],
                timer: DeviceTimer, ms: list[int], plan: dict[str, int], rows: list[Row], notes: list[str],
                failures: list[str], variants: list[tuple[tuple[tuple[str, str], ...], list[Any]]]) -> None:
    from mircuda.parallel import column_parallel_shards, row_parallel_shards

    rng = np.random.default_rng()
    lib = None
    if max(ms) > 16:
        try:
            lib = mc.matmul.load_library()
        except mc.CutlassNotFound as exc:
            notes.append(f"no CUTLASS library: M > 16 not measured ({exc})"[:300])
            ms = [m for m in ms if m <= 16]
    s0, p0 = streams[0], pools[0]
    weights = {}
    for name, n, k, split in LLAMA_PROJECTIONS:
        host = (rng.standard_normal((n, k), dtype=np.float32) / np.sqrt(k)).astype(mc.bf16)
        shards = column_parallel_shards(host, 2) if split == "column" else row_parallel_shards(host, 2)
        weights[name] = (s0.upload(p0, host), [streams[r].upload(pools[r], shards[r]) for r in range(2)])
        del host, shards
    for m in ms:
        x_host = rng.standard_normal((m, 4096), dtype=np.float32).astype(mc.bf16)
        # One device: the four projections in one graph. The O and down inputs are their own buffers
        # (attention and the SiLU product are not part of this measurement).
        inputs = {"qkv": x_host, "o": rng.standard_normal((m, 4096), dtype=np.float32).astype(mc.bf16),
                  "gate_up": x_host, "down": rng.standard_normal((m, 14336), dtype=np.float32).astype(mc.bf16)}
        single: dict[str, Any] = {}
        plans = []
        for name, n, k, _ in LLAMA_PROJECTIONS:
            xb = s0.upload(p0, inputs[name])
            yb = p0.allocate(mc.bf16, s0, m * n)
            plans.append(mc.DenseMatmulPlan(contexts[0], s0, mc.DenseMatmulSpec(m, n, k), library=lib))
            single[name] = (xb, yb)
        res1 = [(single[name][0], weights[name][0], single[name][1]) for name, *_ in LLAMA_PROJECTIONS]

        def sequence(res: Any, plans: list[Any] = plans) -> None:
            for p, (x, w, y) in zip(plans, res):
                p.execute(s0, x, w, y)

        graph1 = s0.capture(res1, sequence)
        graph1.launch(s0)
        want = {name: s0.download(single[name][1]).astype(np.float64).reshape(m, -1)
                for name, *_ in LLAMA_PROJECTIONS}

        def replay1(i: int, graph1: Any = graph1) -> None:
            graph1.launch(s0)

        us1 = timer.median(replay1, plan["calls"], plan["repeats"])
        weight_bytes = 2 * sum(n * k for _, n, k, _ in LLAMA_PROJECTIONS)
        rows.append(Row("c", "one device (1 graph)", "llama3-8b 4 proj", weight_bytes, m, us1,
                        weight_bytes / (us1 * 1e-6) / 1e9, note=", ".join(p.kernel_name for p in plans)))
        # Two devices: column-parallel QKV and gate+up, row-parallel O and down (+ all-reduce); then the
        # NCCL variants (M <= 16) and the GEMVs alone (the floor: what the all-reduces add is the rest).
        runs: list[tuple[str, Any, tuple[tuple[str, str], ...], bool, bool]] = [
            ("2 devices TP (graph/device)", comms, (), True, False)]
        if m <= 16:
            runs.append(("2 devices TP symmetric", comms, (), True, True))
            runs += [("2 devices TP " + " ".join(f"{k}={v}" for k, v in settings), vcomms, settings, True, False)
                     for settings, vcomms in variants]
            runs.append(("2 devices GEMVs only", comms, (), False, False))
        for path, run_comms, settings, reduce, symmetric in runs:
            try:
                with _NcclEnvironment(settings):
                    us2, errors, described = _tp_layer(mc, run_comms, streams, pools, lib, m, inputs, weights, want,
                                                       timer, plan, reduce, symmetric)
            except mc.MircudaError as exc:  # this row is missing; the other rows (and M values) are measured
                failures.append(f"c: {path} M={m}: {type(exc).__name__}: {exc}"[:600])
                continue
            if not reduce:  # which kernel each device runs for its shard: where the floor comes from
                notes.append(f"M={m}, device 0's shard plans: " + " | ".join(described))
            for name, err in errors.items():
                failures.append(f"tensor-parallel {name} M={m} ({path}): relative error {err:.2e} against one device")
            note = ("row O, down: outputs in NCCL symmetric windows (ncclMemAlloc, NCCL_WIN_COLL_SYMMETRIC; NVLS "
                    "off), all-reduced in place" if symmetric
                    else "column QKV, gate+up; row O, down + all-reduce; goal >= 1.6x at M <= 16" if not settings and reduce
                    else "NCCL variables set while its communicators were created and connected" if reduce
                    else "the TP graphs without their 2 all-reduces: the floor of the TP rows")
            rows.append(Row("c", path, "llama3-8b 4 proj", weight_bytes, m, us2, weight_bytes / (us2 * 1e-6) / 1e9,
                            ratio=us1 / us2, note=note))
        graph1.close()
        for p in plans:
            p.close()
        for s in streams:
            s.synchronize()


def _tp_layer(mc: Any, comms: list[Any], streams: list[Any], pools: list[Any], lib: Any, m: int,
              inputs: dict[str, Any], weights: dict[str, Any], want: dict[str, Any], timer: DeviceTimer,
              plan: dict[str, int], reduce: bool, symmetric: bool = False) -> tuple[float, dict[str, float], list[str]]:
    """The four projections over both devices, one graph per device: µs per layer, and the relative
    error of each projection against one device where it exceeds CHECK_LIMIT. Without ``reduce`` the
    graphs hold the per-device GEMVs only (row-parallel outputs are then partial sums: not checked).
    With ``symmetric`` the row-parallel layers keep their outputs in NCCL symmetric windows
    (``RowParallelLinear(symmetric=True)``).
    Also each projection's device-0 plan, described."""
    from mircuda.parallel import ColumnParallelLinear, RowParallelLinear, capture_each, row_parallel_shards

    layers: dict[str, Any] = {}
    tp_bufs: dict[str, Any] = {}
    try:
        for name, n, k, split in LLAMA_PROJECTIONS:
            spec = mc.DenseMatmulSpec(m, n, k)
            if split == "column":
                layers[name] = ColumnParallelLinear(comms, streams, spec, library=lib)
                xs = [streams[r].upload(pools[r], inputs[name]) for r in range(2)]
                ys = [pools[r].allocate(mc.bf16, streams[r], m * n // 2) for r in range(2)]
            else:
                layers[name] = RowParallelLinear(comms, streams, spec, library=lib, symmetric=symmetric)
                parts = row_parallel_shards(inputs[name], 2)
                xs = [streams[r].upload(pools[r], parts[r]) for r in range(2)]
                ys = (layers[name].outputs if symmetric else
                      [pools[r].allocate(mc.bf16, streams[r], m * n) for r in range(2)])
            tp_bufs[name] = (xs, ys)
        if reduce:
            for name, *_ in LLAMA_PROJECTIONS:  # eager once: NCCL connects outside the capture
                xs, ys = tp_bufs[name]
                layers[name].execute(xs, weights[name][1], ys)
        for s in streams:
            s.synchronize()

        def enqueue(r: int, res: Any) -> None:
            for name, *_ in LLAMA_PROJECTIONS:
                xs, ws, ys = res[name]
                if reduce:
                    layers[name].enqueue_rank(r, xs, ws, ys)
                else:
                    layers[name].plans[r].execute(streams[r], xs[r], ws[r], ys[r])

        res2 = {name: (tp_bufs[name][0], weights[name][1], tp_bufs[name][1]) for name, *_ in LLAMA_PROJECTIONS}
        graphs = capture_each(streams, res2, enqueue)
        try:
            for r in range(2):
                graphs[r].launch(streams[r])
            errors: dict[str, float] = {}
            for name, n, _, split in LLAMA_PROJECTIONS:
                ys = tp_bufs[name][1]
                if split == "column":
                    got = np.concatenate([streams[r].download(ys[r]).astype(np.float64).reshape(m, n // 2)
                                          for r in range(2)], axis=1)
                elif reduce:
                    got = streams[0].download(ys[0]).astype(np.float64).reshape(m, n)
                else:
                    continue
                err = float(np.linalg.norm(got - want[name]) / max(np.linalg.norm(want[name]), 1e-300))
                if not err <= CHECK_LIMIT:
                    errors[name] = err

            def replay(i: int) -> None:
                graphs[0].launch(streams[0])
                graphs[1].launch(streams[1])

            us = timer.median(replay, plan["calls"], plan["repeats"])
            described = [f"{name} {layers[name].plans[0].describe()}" for name, *_ in LLAMA_PROJECTIONS]
        finally:
            for gr in graphs:
                gr.close()
    finally:
        for layer in layers.values():
            layer.close()
        for s in streams:
            s.synchronize()
    return us, errors, described


def _goals(rows: list[Row]) -> list[str]:
    """Issue 19's goals, as measured (reported, never asserted)."""
    out = []
    copies = [r for r in rows if r.part == "a" and r.path.startswith("mircuda") and r.bytes == 1 << 30
              and r.gbps is not None]
    if copies:
        best = max(copies, key=lambda r: r.gbps or 0.0)
        gbps = best.gbps or 0.0
        out.append(f"peer copy 1 GiB: {gbps:.0f} GB/s ({best.path}), goal >= 400: {'met' if gbps >= 400 else 'NOT met'}"
                   + "".join(f"; {r.path} {r.gbps:.0f}" for r in copies if r is not best))
    vs = [r for r in rows if r.part == "b" and r.path == "mircuda.nccl" and r.ratio is not None]
    if vs:
        worst = min(vs, key=lambda r: r.ratio or 0.0)
        met = sum((r.ratio or 0.0) >= 1.0 for r in vs)
        out.append(f"collectives vs torch.distributed busbw: {met}/{len(vs)} >= 1.0x; worst {worst.ratio:.2f}x "
                   f"({worst.op} {_size(worst.bytes)})")
    for path, label in (("mircuda.nccl in graphs", ""), ("mircuda.nccl in graphs, symmetric", ", symmetric")):
        graphs = [r for r in rows if r.path == path]
        if graphs:
            out.append(f"all-reduce in graphs{label} 8-64 KiB: "
                       + ", ".join(f"{_size(r.bytes)} {r.us:.1f} µs" for r in graphs)
                       + f"; goal <= 10 µs: {sum(r.us <= 10 for r in graphs)}/{len(graphs)} met")
    for r in rows:
        if r.part == "c" and r.ratio is not None and r.path.startswith("2 devices TP"):
            variant = r.path.removeprefix("2 devices TP").strip()
            variant = "" if variant == "(graph/device)" else f" ({variant})"
            goal = f", goal >= 1.6x: {'met' if r.ratio >= 1.6 else 'NOT met'}" if r.m <= 16 else ""
            out.append(f"Llama-3-8B projections M={r.m}{variant}: {r.ratio:.2f}x one device{goal}")
        elif r.part == "c" and r.path == "2 devices GEMVs only":
            out.append(f"Llama-3-8B projections M={r.m}, GEMVs only (no all-reduce): {r.us:.1f} µs, {r.ratio:.2f}x "
                       "one device (the floor of the TP rows)")
    return out


def register(sub: Any) -> None:
    """Add ``multi-gpu-profile`` to the CLI's subparsers."""
    from ._matmul_profile import dense_m_values

    p = sub.add_parser("multi-gpu-profile",
                       help="two GPUs: peer copies, NCCL all-reduce/all-gather beside torch.distributed, NCCL in "
                            "graphs, tensor-parallel Llama-3-8B projections vs one GPU (needs 2 GPUs and nccl4py)")
    p.add_argument("--m", type=dense_m_values, default="1,16,2048", help="M values of part c (default 1,16,2048)")
    p.add_argument("--quick", action="store_true", help="five message sizes (8 KiB, 64 KiB, 1 MiB, 16 MiB, 256 MiB)")
    p.add_argument("--calls", type=positive_int, default=40, help="back-to-back calls per timed repeat (large messages: 1/4)")
    p.add_argument("--repeats", type=positive_int, default=5, help="timed repeats (the median is reported)")
    p.add_argument("--tp-nccl", action="append", type=tp_nccl_variant, default=None, metavar="'NAME=VALUE ...'",
                   help="an NCCL variant of part c (M <= 16), measured as its own row with communicators created "
                        f"under these variables: {', '.join(TP_NCCL_SETTINGS)}; repeat for several (default: "
                        f"{' and '.join(DEFAULT_TP_NCCL)}; --tp-nccl none: no variant)")
    p.add_argument("--no-torch", action="store_true", help="measure mircuda only")
    p.add_argument("--torch-timeout", type=positive_seconds, default=240.0,
                   help="seconds to wait for the torch processes, above 0 and up to 86400 (default 240)")
    p.add_argument("--json", default="benchmarks/results/multi_gpu_profile.json", help=RESULTS_HELP)
    p.set_defaults(func=multi_gpu_profile, json_default=p.get_default("json"),
                   flags={"calls": "--calls", "repeats": "--repeats"})
    _ = argparse  # the parser type comes from the caller's subparsers
