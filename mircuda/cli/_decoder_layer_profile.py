"""``python -m mircuda decoder-layer-profile``: the four weight projections of one Llama-3-8B decoder layer
as one CUDA graph, replayed on cold weights, beside cuBLAS doing the same four in a torch CUDA graph.

The layer (``LAYER``; Llama-3-8B: hidden 4096, 32 query and 8 key/value heads of 128, MLP 14336):
QKV ``6144 x 4096``, O ``4096 x 4096``, gate+up ``28672 x 4096``, down ``4096 x 14336`` (N x K, weights
``[N, K]`` row-major), 218,103,808 weights = 436.2 MB in BF16. For each M (1, 8, 16 by default) mircuda
runs one :class:`~mircuda.DenseMatmulPlan` per projection (the selector's kernel: the dense vector
kernel at M = 1, the batched GEMV for M <= 16, CUTLASS above), enqueued in order on one stream with
programmatic dependent launch where the plan's kernel launches with it (the NVRTC kernels on cc >= 9.0),
captured by ``Stream.capture`` into ONE graph per weight set. cuBLAS runs the same four products
(``torch.nn.functional.linear``) captured into one ``torch.cuda.CUDAGraph`` per weight set.

Cold weights: ``--sets`` full weight sets (default: enough for 8x the L2, at least 2: 2 on an H200,
872 MB), one graph per set, replays rotating over the sets, so that no replay finds its weights in L2
(each set is about 8.7x the H200's 50 MiB L2 on its own). Device time: a spin kernel holds the stream
while ``--calls`` replays are enqueued back to back, events around them (:class:`mircuda.timing.StreamTimer`),
the median over ``--repeats``; "single" rows time one replay alone between the events (its launch
latency included); the "layers chained" row captures every set's layer into one graph, one after another
(programmatic dependent launch between the layers, as a graph of a whole model would; each layer writes and is
checked on its own outputs), and gives the µs per layer: what ending each layer's graph costs the back-to-back
rows (not the goal's measure); the "static_weights=True" row is the back-to-back graph of plans made with that
promise (their decode kernels load the first step of weights before ``griddepcontrol.wait``; an opt-in, not the
goal's measure). Effective TB/s = weight bytes / device µs (activations and outputs are < 0.4 %
of the bytes and not counted). Goal (issue 16): >= 4.0 TB/s, i.e. <= 109.1 µs per layer, at M = 1, 8, 16;
cuBLAS measured on an H200 on 2026-11-30: 117.4 µs at M = 1, 121.9 µs at M = 16.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..timing import Column, ResultTable
from ._errors import RESULTS_HELP, check_results_file
from ._values import add_device_argument, is_decimal, positive_int

__all__ = ["CHAINED_PATH", "GOAL_TBPS", "LAYER", "MAX_SETS", "LayerRow", "decoder_layer_profile", "goal_lines", "layer_bytes",
           "register", "set_count", "table"]

LAYER = (("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336))
"""(name, N, K) of Llama-3-8B's four projections, in the order a layer runs them (meta-llama/Meta-Llama-3-8B
``config.json``: hidden_size 4096, intermediate_size 14336, 32 attention heads, 8 key/value heads, head
dim 128; QKV fused to (32 + 2 x 8) x 128 = 6144 rows, gate and up fused to 2 x 14336)."""

GOAL_TBPS = 4.0
"""Issue 16's goal: effective TB/s (weight bytes / device time) of the layer's replay; the 1 GiB read
ceiling measured 4.43 TB/s on the H200."""

DEFAULT_M = (1, 8, 16)


MAX_SETS = 1024
"""``--sets`` limit: 1024 BF16 sets of the layer's weights are 447 GB, more than a GPU holds."""
SETS_RULE = f"an integer in [2, {MAX_SETS}] (weight sets rotated so that replays read cold weights)"


def set_count(text: str) -> int:
    """``--sets``: ASCII digits (:func:`~mircuda.cli._values.is_decimal`), an int in [2, :data:`MAX_SETS`].

    Raises:
        argparse.ArgumentTypeError: another character, or a value outside the range.
    """
    import argparse

    if not is_decimal(text) or not 2 <= int(text) <= MAX_SETS:
        raise argparse.ArgumentTypeError(f"expected {SETS_RULE}, received {text[:40]!r}")
    return int(text)


def layer_bytes(element_size: int = 2) -> int:
    """Bytes of one set of the layer's weights (436,207,616 in BF16)."""
    return sum(n * k for _, n, k in LAYER) * element_size


@dataclass
class LayerRow:
    """One measured way of running the layer at one M: device µs per replay and the rate it implies."""

    path: str
    dtype: str
    m: int
    us: float
    tbps: float
    goal_us: float
    goal: str
    ratio_to_cublas: float | None = None
    note: str = ""


def layer_row(path: str, dtype: str, m: int, us: float, weight_bytes: int, note: str = "") -> LayerRow:
    """A row with its TB/s (``weight_bytes / us``) and the goal's µs (``weight_bytes`` at ``GOAL_TBPS``)."""
    tbps = weight_bytes / (us * 1e-6) / 1e12
    goal_us = weight_bytes / (GOAL_TBPS * 1e12) * 1e6
    return LayerRow(path, dtype, m, us, tbps, goal_us, "met" if us <= goal_us else "NOT met", None, note)


def ratios(rows: list[LayerRow]) -> None:
    """``ratio_to_cublas`` = cuBLAS µs / this row's µs (> 1: faster), against the cuBLAS row of the same
    M, dtype and timing ("single" rows against cuBLAS's "single" row)."""
    def kind(r: LayerRow) -> str:
        return "single" if "single" in r.path else "back-to-back"

    ref = {(r.dtype, r.m, kind(r)): r.us for r in rows if r.path.startswith("cuBLAS")}
    for r in rows:
        base = ref.get((r.dtype, r.m, kind(r)))
        # whole layers, one per graph, only (the chained row's graph holds several layers; cuBLAS's hold one)
        if (base is not None and not r.path.startswith("cuBLAS") and not r.path.endswith(" alone")
                and r.path != CHAINED_PATH):
            r.ratio_to_cublas = base / r.us


def goal_lines(rows: list[LayerRow]) -> list[str]:
    """One line per M for the mircuda graph (back to back): µs, TB/s, the goal and the ratio to cuBLAS."""
    out = []
    for r in rows:
        if r.path == GRAPH_PATH:
            vs = f", cuBLAS/x {r.ratio_to_cublas:.2f}" if r.ratio_to_cublas is not None else ""
            out.append(f"M = {r.m} {r.dtype}: {r.us:.1f} µs = {r.tbps:.2f} TB/s (goal >= {GOAL_TBPS:.1f} TB/s = "
                       f"<= {r.goal_us:.1f} µs: {r.goal}){vs}")
    return out


GRAPH_PATH = "mircuda graph (4 plans, PDL)"
CHAINED_PATH = "mircuda graph, layers chained, per layer"
STATIC_PATH = "mircuda graph, static_weights=True"
DIRECT_PATH = "mircuda direct (4 executes)"
CUBLAS_GRAPH_PATH = "cuBLAS torch CUDAGraph (F.linear)"
ALONE_SUM_PATH = "mircuda, the four alone, summed"

COLUMNS = (Column("path", "path", 40, "<"), Column("dtype", "dtype", 5, "<"), Column("m", "M", 3),
           Column("us", "µs", 8, format="{:.2f}"), Column("tbps", "TB/s", 6, format="{:.2f}"),
           Column("goal_us", "goal µs", 8, format="<={:.1f}"), Column("goal", "goal", 8, "<", sep="  "),
           Column("ratio_to_cublas", "cuBLAS/x", 8, format="{:.2f}"), Column("note", "", 0, "<", sep="  "))


def table(title: str, rows: list[LayerRow]) -> ResultTable:
    """The rows as ``decoder-layer-profile`` prints them."""
    return ResultTable(COLUMNS, [asdict(r) for r in rows], title=title, indent="  ")


def check_arguments(args: Any) -> None:
    """Every flag before the driver is touched (bad flags are said without a GPU too).

    Raises:
        ContractError: naming the flag.
    """
    from ..errors import ContractError

    if args.dtype not in ("bf16", "f16"):
        raise ContractError("--dtype", "bf16 or f16", repr(args.dtype))
    for name, least in (("calls", 1), ("repeats", 1)):
        if getattr(args, name) < least:
            raise ContractError(f"--{name}", f"an integer >= {least}", str(getattr(args, name)))
    if args.sets is not None and not 2 <= args.sets <= MAX_SETS:
        raise ContractError("--sets", SETS_RULE, str(args.sets))
    check_results_file(args.json, getattr(args, "json_default", None))


@dataclass
class _Layer:
    """One M's operands: per projection its input [M, K] and output [M, N], and the weight sets."""

    xs: list[Any]
    ys: list[Any]
    weights: list[list[Any]]  # weights[set][projection]


def decoder_layer_profile(args: Any) -> int:
    """The layer as one mircuda graph vs cuBLAS in a torch graph, cold weights (see the module docstring)."""
    import mircuda as mc

    from ..matmul._gemv import RULE_MAX_M
    from ..matmul._vector import shared_compiler
    from ..timing import StreamTimer, bank_count
    from ._matmul_bench import relative_error

    check_arguments(args)
    driver = mc.Driver.initialize()
    ms = list(args.m)
    lib = None
    if max(ms) > RULE_MAX_M:
        from ..matmul import load_library

        lib = load_library()  # the NVRTC kernels (M <= 16) need no CUTLASS
    in_t = getattr(mc, args.dtype)
    isz = np.dtype(in_t).itemsize
    nbytes = layer_bytes(isz)
    rows: list[LayerRow] = []
    failures: list[str] = []
    notes: list[str] = []
    rng = np.random.default_rng()
    with driver.create_context(driver.device(args.device)) as context:
        info = context.device_info()
        stream = context.create_stream()
        pool = context.default_memory_pool()
        sets = args.sets if args.sets is not None else bank_count(nbytes, info.l2_cache_bytes)
        timer = StreamTimer(context, stream, shared_compiler(context))
        torch_, why = _torch_or_reason(stream.handle)
        if why:
            notes.append(why)
        try:
            # One host copy of the weights (for the references), uploaded once, copied on the device into
            # the other sets: the values do not change the timing.
            host_w = [rng.standard_normal(n * k, dtype=np.float32).astype(in_t) for _, n, k in LAYER]
            weights = [[stream.upload(pool, w) for w in host_w]]
            # The references' weights in float32 (exact for bf16/f16 values): float32 BLAS of rows of K <= 14336
            # products is off by ~1e-5 relative, far below the 2e-2 the outputs are checked to.
            host_w = [w.astype(np.float32).reshape(n, k) for w, (_, n, k) in zip(host_w, LAYER)]
            for _ in range(sets - 1):
                copies = []
                for (_, n, k), first in zip(LAYER, weights[0]):
                    b = pool.allocate(in_t, stream, n * k)
                    stream.copy_device_range(first, 0, b, 0, n * k)
                    copies.append(b)
                weights.append(copies)
            tw = None
            if torch_ is not None:
                try:
                    tw = torch_.weights(args.dtype, sets)
                except Exception as exc:  # cuBLAS is the reference beside ours: without it the table says why
                    notes.append(f"cuBLAS not measured: torch weights failed ({type(exc).__name__}: {exc})"[:300])
            for m in ms:
                rows.extend(_measure_m(context, stream, pool, timer, lib, in_t, args, m, weights, host_w, rng,
                                       nbytes, failures, relative_error, torch_ if tw is not None else None, tw,
                                       notes))
            for s in weights:
                for b in s:
                    b.free(stream)
            stream.synchronize()
        finally:
            timer.close()
            if torch_ is not None:
                torch_.release()
    ratios(rows)
    title = (f"decoder-layer-profile on {info.name} ({info.arch}, {info.multiprocessor_count} SMs, L2 "
             f"{info.l2_cache_bytes >> 20} MiB): Llama-3-8B layer QKV {LAYER[0][1]}x{LAYER[0][2]}, O "
             f"{LAYER[1][1]}x{LAYER[1][2]}, gate+up {LAYER[2][1]}x{LAYER[2][2]}, down {LAYER[3][1]}x{LAYER[3][2]} "
             f"= {nbytes / 1e6:.1f} MB of {args.dtype} weights; cold: {sets} weight sets rotated, one graph each; "
             f"device µs per replay: median of {args.repeats} x {args.calls} back-to-back replays behind a spin "
             "kernel (single: one replay between the events; layers chained: every set's layer in one graph, µs "
             "per layer); TB/s = weight bytes / µs")
    print(table(title, rows))
    lines = goal_lines(rows)
    for g in lines:
        print(f"  goal: {g}")
    for note in notes:
        print(f"  note: {note}")
    payload = {"benchmark": "decoder-layer-profile", "device": info.name, "arch": info.arch,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "layer": [{"name": name, "n": n, "k": k} for name, n, k in LAYER], "weight_bytes": nbytes,
               "weight_sets": sets, "l2_bytes": info.l2_cache_bytes,
               "method": ("one graph per weight set (the four projections in order on one stream), replays "
                          f"rotating over {sets} sets; events around --calls back-to-back replays behind a spin "
                          "kernel, median of --repeats; single: one replay between the events; layers chained: "
                          "every set's layer in one graph (each layer its own outputs, all checked), µs per replay "
                          "/ sets; static_weights=True: the back-to-back graph of plans made with that promise "
                          "(opt-in, not the goal's row)"),
               "goals": lines, "notes": notes, "failures": failures, "rows": [asdict(r) for r in rows]}
    from ._matmul_bench import _write_json

    _write_json(args.json, payload)
    for f in failures:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failures else 0


def _measure_m(context: Any, stream: Any, pool: Any, timer: Any, lib: Any, in_t: Any, args: Any, m: int,
               weights: list[list[Any]], host_w: list[np.ndarray], rng: np.random.Generator, nbytes: int,
               failures: list[str], relative_error: Callable[[np.ndarray, np.ndarray], float], torch_: Any,
               tw: Any, notes: list[str]) -> list[LayerRow]:
    """The rows of one M: mircuda's graph (back to back and single), its direct executes, cuBLAS's graph."""
    import mircuda as mc

    label = args.dtype
    x_host = [rng.standard_normal((m, k), dtype=np.float32).astype(in_t) for _, _, k in LAYER]
    xs = [stream.upload(pool, x) for x in x_host]
    ys = [pool.allocate(in_t, stream, m * n) for _, n, _ in LAYER]
    plans: list[mc.DenseMatmulPlan[Any, Any]] = [
        mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k), input=in_t, library=lib) for _, n, k in LAYER]
    pdl = ["programmatic dependent launch" in str(p.describe()) for p in plans]
    kernels = ", ".join(f"{name}: {p.kernel_name}" + (f" splits={p.splits}" if p.splits > 1 else "")
                        for (name, _, _), p in zip(LAYER, plans))
    pdl_note = f"PDL on {sum(pdl)}/{len(pdl)} launches"
    out: list[LayerRow] = []
    layer = _Layer(xs, ys, weights)

    def run(s: int, ps: list[Any] = plans) -> Callable[[_Layer], None]:
        def enqueue(r: _Layer) -> None:
            for p, x, w, y in zip(ps, r.xs, r.weights[s], r.ys):
                p.execute(stream, x, w, y)
        return enqueue

    picked = sorted({0, m - 1})
    wants = [x[picked].astype(np.float32) @ w.T for x, w in zip(x_host, host_w)]

    def checked_graphs(ps: list[Any], what: str) -> list[Any]:
        graphs = [stream.capture(layer, run(s, ps)) for s in range(len(weights))]
        for s, g in enumerate(graphs):  # every graph checked: a fast wrong answer is a failure
            _poison(stream, ys, in_t)
            g.launch(stream)
            for (name, n, k), y, want in zip(LAYER, ys, wants):
                err = _check(stream, y, want.astype(np.float64), m, n, relative_error)
                if not err <= 2e-2:  # NaN (a poisoned output left unwritten) fails too
                    failures.append(f"{what} of set {s}, M={m} {name} {n}x{k}: relative error {err:.2e}")
        return graphs

    graphs = checked_graphs(plans, "graph")
    try:
        sets = len(graphs)
        us = timer.median(lambda i: graphs[i % sets].launch(stream), args.calls, args.repeats)
        out.append(layer_row(GRAPH_PATH, label, m, us, nbytes, f"{pdl_note}; {kernels}"))
        us = timer.median(lambda i: graphs[i % sets].launch(stream), 1, args.repeats)
        out.append(layer_row(GRAPH_PATH + ", single", label, m, us, nbytes))
    finally:
        for g in graphs:
            g.close()
    # The same layer with static_weights=True (the caller's promise that no running kernel writes the weights;
    # see DenseVectorPlan): the decode kernels load their first step of weights before griddepcontrol.wait.
    static: list[mc.DenseMatmulPlan[Any, Any]] = [
        mc.DenseMatmulPlan(context, stream, mc.DenseMatmulSpec(m, n, k), input=in_t, library=lib, static_weights=True)
        for _, n, k in LAYER]
    try:
        graphs = checked_graphs(static, "static_weights graph")
        try:
            us = timer.median(lambda i: graphs[i % sets].launch(stream), args.calls, args.repeats)
            row = layer_row(STATIC_PATH, label, m, us, nbytes, "opt-in; the goal's row is the default graph's")
            out.append(dataclasses.replace(row, goal="-"))  # the goal is the default graph's
        finally:
            for g in graphs:
                g.close()
    finally:
        for p in static:
            p.close()
    # Every set's layer in one graph, one after another (PDL between layers, as in a graph of a whole model):
    # what a graph boundary costs the back-to-back rows above, which end every layer's graph there. Each layer
    # writes its own outputs (as a model's layers do), so every layer is checked: with one set of outputs the
    # last layer's would overwrite a skipped or wrong layer's before the check.
    chain = [layer] + [_Layer(xs, [pool.allocate(in_t, stream, m * n) for _, n, _ in LAYER], weights)
                       for _ in range(len(weights) - 1)]
    try:
        chained = stream.capture(chain, lambda c: [run(s)(c[s]) for s in range(len(c))])
        try:
            for c in chain:
                _poison(stream, c.ys, in_t)
            chained.launch(stream)
            for s, c in enumerate(chain):  # every set holds the same weights
                for (name, n, k), y, want in zip(LAYER, c.ys, wants):
                    err = _check(stream, y, want.astype(np.float64), m, n, relative_error)
                    if not err <= 2e-2:
                        failures.append(f"chained graph, layer {s} (weight set {s}), M={m} {name} {n}x{k}: "
                                        f"relative error {err:.2e}")
            us = timer.median(lambda i: chained.launch(stream), args.calls, args.repeats) / len(chain)
            row = layer_row(CHAINED_PATH, label, m, us, nbytes, f"{len(chain)} layers (one per weight set) per "
                            "replay, µs per layer; not the goal's measure (one layer per graph)")
            out.append(dataclasses.replace(row, goal="-"))  # the goal is the one-layer graph's
        finally:
            chained.close()
    finally:
        for c in chain[1:]:
            for b in c.ys:
                b.free(stream)
    us = timer.median(lambda i: run(i % len(weights))(layer), args.calls, args.repeats)
    out.append(layer_row(DIRECT_PATH, label, m, us, nbytes, "the same plans launched one by one, no graph"))
    out.extend(_alone_rows(stream, pool, timer, plans, xs, ys, weights, in_t, label, m, args))
    if torch_ is not None:
        try:
            replays = torch_.graphs(m, tw)
            us = timer.median(lambda i: torch_.replay(replays, i), args.calls, args.repeats)
            out.append(layer_row(CUBLAS_GRAPH_PATH, label, m, us, nbytes, torch_.note))
            us = timer.median(lambda i: torch_.replay(replays, i), 1, args.repeats)
            out.append(layer_row(CUBLAS_GRAPH_PATH + ", single", label, m, us, nbytes))
            del replays
        except Exception as exc:  # torch's capture or replay failed: mircuda's rows stand, the notes say why
            notes.append(f"cuBLAS graph at M = {m} not measured ({type(exc).__name__}: {exc})"[:300])
        torch_.release_graphs()
    for p in plans:
        p.close()
    for b in xs + ys:
        b.free(stream)
    return out


def _alone_rows(stream: Any, pool: Any, timer: Any, plans: list[Any], xs: list[Any], ys: list[Any],
                weights: list[list[Any]], in_t: Any, label: str, m: int, args: Any) -> list[LayerRow]:
    """Each projection's plan timed alone (back to back, cold: its weights rotated over banks of at least
    8x the L2, the layer's sets plus temporary device copies), and their sum: where the layer's time goes,
    and what the graph's programmatic dependent launch saves over four separate kernels."""
    from ..timing import bank_count

    l2 = stream.context.device_info().l2_cache_bytes
    isz = np.dtype(in_t).itemsize
    out = []
    total = 0.0
    for (name, n, k), plan, x, y, p in zip(LAYER, plans, xs, ys, range(len(LAYER))):
        banks = [s[p] for s in weights]
        extra = []
        for _ in range(bank_count(n * k * isz, l2) - len(banks)):
            b = pool.allocate(in_t, stream, n * k)
            stream.copy_device_range(banks[0], 0, b, 0, n * k)
            extra.append(b)
        banks += extra
        us = timer.median(lambda i: plan.execute(stream, x, banks[i % len(banks)], y), args.calls,  # noqa: B023
                          args.repeats)
        total += us
        out.append(layer_row(f"  {name} {n}x{k} alone", label, m, us, n * k * isz,
                             f"{plan.kernel_name}, {len(banks)} weight banks"))
        for b in extra:
            b.free(stream)
    out.append(layer_row(ALONE_SUM_PATH, label, m, total, layer_bytes(isz), "sum of the four rows above"))
    return out


def _poison(stream: Any, ys: list[Any], in_t: Any) -> None:
    """NaN into every output, so a projection the graph skipped shows as a failure."""
    for y in ys:
        host = stream.context.allocate_pinned(in_t, len(y))
        host.write_prefix(np.full(len(y), np.nan, dtype=np.float32).astype(in_t))
        stream.copy_to_device(host, y)
        stream.synchronize()  # the copy has read the pinned buffer before it is closed
        host.close()


def _check(stream: Any, y: Any, want: np.ndarray, m: int, n: int,
           relative_error: Callable[[np.ndarray, np.ndarray], float]) -> float:
    """Relative error of rows 0 and M - 1 of one output ([M, N]) against ``want`` (those two rows)."""
    got = stream.download(y).reshape(m, n)
    return relative_error(got[sorted({0, m - 1})], want)


class _TorchLayer:
    """cuBLAS through ``torch.nn.functional.linear``: the layer's four products captured into one
    ``torch.cuda.CUDAGraph`` per weight set, replayed on mircuda's stream (an external stream)."""

    def __init__(self, stream_handle: int) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        self.torch = torch
        self.stream = torch.cuda.ExternalStream(stream_handle)
        self.note = f"torch {torch.__version__}"
        self._held: list[Any] = []

    def weights(self, dtype: str, sets: int) -> list[list[Any]]:
        t = self.torch
        dt = {"bf16": t.bfloat16, "f16": t.float16}[dtype]
        with t.cuda.stream(self.stream):
            out = [[t.randn(n, k, device="cuda", dtype=t.float32).to(dt) for _, n, k in LAYER] for _ in range(sets)]
        self.stream.synchronize()
        return out

    def graphs(self, m: int, tw: list[list[Any]]) -> list[Any]:
        """One graph per weight set (capture after a warm-up on a side stream, as torch's docs ask)."""
        t = self.torch
        F = t.nn.functional
        dt = tw[0][0].dtype
        xs = [t.randn(m, k, device="cuda", dtype=t.float32).to(dt) for _, _, k in LAYER]
        side = t.cuda.Stream()
        side.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(side):
            for _ in range(2):
                for x, w in zip(xs, tw[0]):
                    F.linear(x, w)
        t.cuda.current_stream().wait_stream(side)
        t.cuda.synchronize()
        out = []
        for ws in tw:
            g = t.cuda.CUDAGraph()
            with t.cuda.graph(g):
                ys = [F.linear(x, w) for x, w in zip(xs, ws)]
            out.append(g)
            self._held.append(ys)
        self._held.append(xs)
        t.cuda.synchronize()
        return out

    def replay(self, graphs: list[Any], i: int) -> None:
        with self.torch.cuda.stream(self.stream):
            graphs[i % len(graphs)].replay()

    def release_graphs(self) -> None:
        self.stream.synchronize()
        self._held.clear()

    def release(self) -> None:
        self.stream.synchronize()
        self._held.clear()
        self.torch.cuda.empty_cache()


def _torch_or_reason(stream_handle: int) -> tuple[_TorchLayer | None, str]:
    try:
        return _TorchLayer(stream_handle), ""
    except Exception as exc:  # torch missing or without CUDA: the table says so
        return None, f"cuBLAS not measured: torch unavailable ({type(exc).__name__}: {exc})"[:200]


def register(sub: Any) -> None:
    """Add ``decoder-layer-profile`` to the CLI's subparsers."""
    from ._matmul_profile import dense_m_values

    summary = ("a Llama-3-8B layer's four projections as one graph on cold weights vs cuBLAS in a torch CUDA graph "
               "(GPU)")
    p = sub.add_parser("decoder-layer-profile", help=summary, description=(
        f"{summary[0].upper()}{summary[1:]}. Rows per M: the graph of the four DenseMatmulPlans (the goal's row: "
        f">= {GOAL_TBPS:.1f} TB/s), the same replayed alone (single), the same layer from plans made with "
        "static_weights=True (the promise that no running kernel writes the weights; opt-in, not the goal's row), "
        "every set's layer chained in one graph, the four executes without a graph, each projection alone, and "
        "cuBLAS (torch; without torch a note says why). Every graph's outputs are checked (relative error <= "
        "2e-2): a wrong one is a failure (exit status 1). M above 16 needs the CUTLASS library (python -m mircuda "
        "build-cutlass)."))
    add_device_argument(p)
    p.add_argument("--dtype", default="bf16", help="weights and activations: bf16 or f16 (default bf16)")
    p.add_argument("--m", type=dense_m_values, default=",".join(map(str, DEFAULT_M)),
                   help="comma-separated M values (tokens; default 1,8,16)")
    p.add_argument("--sets", type=set_count, default=None,
                   help=f"weight sets rotated, one graph each (2 to {MAX_SETS}; default: enough for 8x the L2, at "
                        "least 2)")
    p.add_argument("--calls", type=positive_int, default=20, help="back-to-back replays per timed repeat (default 20)")
    p.add_argument("--repeats", type=positive_int, default=15, help="timed repeats (the median is reported; default 15)")
    p.add_argument("--json", default="benchmarks/results/decoder_layer_profile.json", help=RESULTS_HELP)
    p.set_defaults(func=decoder_layer_profile, json_default=p.get_default("json"))
