"""Where the host time of one typed launch and one graph replay goes, piece by piece.

The typed launch is ``TypedKernel.launch``, a function mircuda generates per contract (see
``mircuda.launch._abi``). This script takes that function's own source, splits its body into its
top-level statements (the arity test, the thread test, the stream test, the config test, one
argument write per parameter, the driver call and its result test) and compiles every prefix of it
in the function's own namespace: prefix k runs the first k statements. Each prefix is timed in a
loop of ``--calls`` calls per batch (``--batches`` batches, the best batch kept: differences of
bests are steadier than of medians on a shared host); a statement's cost is its prefix's time less
the previous one's, and the first row is the call of the function itself, less the empty loop.
``Graph.launch`` is split the same way by hand (the bound method call, its three checks, the entry
point). The entry points are also timed alone.

Two modes:

- ``--stand-in`` (any machine, no GPU): the C extension's driver entry points are pointed at a
  native function that ignores its arguments and returns 0 (CPython's ``PyErr_Occurred``), and the
  kernel, stream, buffers and graph are stand-ins built without a driver. Everything but the
  driver's own work is measured: what mircuda can change.
- default (a CUDA GPU): a real empty kernel ``empty(float*)``, a 7-parameter kernel shaped like the
  dense vector kernel's ``(y, w, x, alpha, beta, n, k)``, and a graph of 100 launches of the empty
  kernel; the stream is synchronized between batches. The last rows give the driver's share:
  the full launch less every Python piece.

    python benchmarks/launch_breakdown.py [--stand-in] [--calls N] [--batches N] [--json PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout this script belongs to, not another installed mircuda

import mircuda as mc  # noqa: E402
from mircuda import _cuda  # noqa: E402
from mircuda.cli._matmul_bench import _write_json as write_json  # noqa: E402
EMPTY = r'extern "C" __global__ void empty(float* p) {}'
SEVEN = (r'extern "C" __global__ void seven(float* y, const float* w, const float* x, float alpha, float beta, '
         r'int n, int k) {}')
Empty = mc.cuda_export("empty", p=mc.DeviceBuffer[mc.f32])
Seven = mc.cuda_export("seven", y=mc.Out[mc.DeviceBuffer[mc.f32]], w=mc.In[mc.DeviceBuffer[mc.f32]],
                       x=mc.In[mc.DeviceBuffer[mc.f32]], alpha=mc.f32, beta=mc.f32, n=mc.i32, k=mc.i32)
GRAPH_NODES = 100


def best_us(run: Callable[[int], object], calls: int, batches: int, sync: Callable[[], object]) -> tuple[float, float]:
    """(best, median) µs per call of ``run(calls)`` over ``batches`` batches (one warm-up batch)."""
    samples = []
    for b in range(batches + 1):
        sync()
        t0 = time.perf_counter()
        run(calls)
        t1 = time.perf_counter()
        if b:
            samples.append((t1 - t0) / calls * 1e6)
    sync()
    return min(samples), statistics.median(samples)


def looper(fn: Callable[..., object], args: tuple[Any, ...]) -> Callable[[int], None]:
    """``run(n)`` calling ``fn(*args)`` n times with the arguments spelled out (no star call in the loop)."""
    names = [f"a{i}" for i in range(len(args))]
    ns: dict[str, Any] = {"fn": fn, **dict(zip(names, args))}
    src = f"def run(n):\n    for _ in range(n):\n        fn({', '.join(names)})\n"
    exec(compile(src, "<looper>", "exec"), ns)
    run: Callable[[int], None] = ns["run"]
    return run


def empty_loop(n: int) -> None:
    for _ in range(n):
        pass


def statement_groups(source: str) -> tuple[str, list[list[str]]]:
    """The ``def`` line of a generated function and its body's top-level statements (lines each)."""
    lines = source.splitlines()
    groups: list[list[str]] = []
    for line in lines[1:]:
        rest = line[4:]
        if line.startswith("    ") and not rest.startswith(" ") and not rest.startswith(("else", "elif")):
            groups.append([line])
        else:
            groups[-1].append(line)
    return lines[0], groups


def prefixes(fn: Any) -> list[tuple[str, Any]]:
    """(label, function) for every prefix of the generated launch function ``fn``: the empty body, then
    one more top-level statement each, ending with the whole function (compiled in copies of its
    namespace, so the prefixes' cached config does not leak into the real function)."""
    header, groups = statement_groups(fn.__mircuda_source__)
    out = []
    for k in range(len(groups) + 1):
        ns = dict(fn.__globals__)
        body = [line for g in groups[:k] for line in g] + ["    pass"]
        exec(compile(header + "\n" + "\n".join(body) + "\n", "<prefix>", "exec"), ns)
        label = "Python call: signature, defaults, *_extra, **_unknown" if k == 0 else _label(groups[k - 1])
        out.append((label, ns["launch"]))
    return out


def _label(group: list[str]) -> str:
    first = group[0].strip()
    if first.startswith("global"):
        return "global statement (no cost: a compiler directive)"
    if first.startswith("if _extra"):
        return "arity test (*_extra, **_unknown empty)"
    if first.startswith("if _ident()"):
        return "owner-thread test (threading.get_ident)"
    if first.startswith("if stream"):
        return "stream test (class, context, open)"
    if first.startswith("if config"):
        return "config test (identity with the last config)"
    if first.startswith("_r = _L(config"):
        return "entry point call (bound launcher: thread, config, slot writes, driver): _L"
    if first.startswith("_r = "):
        return "entry point call (C extension + driver): " + first[5:].split("(")[0]
    if first == "if _r:":
        return "result test"
    # The launch function writes the slot itself (ctypes store), or leaves the value for the bound launcher.
    what = "slot write" if any(".value =" in line or ".raw =" in line for line in group) else "value"
    if "._ptr" in first or "_DB" in first:
        name = first[3:].split(".")[0]
        return f"buffer argument {name}: identity tests + {what}"
    name = first[3:].split(".")[0]
    return f"scalar argument {name}: type/range test + {what}"


def breakdown(fn: Any, args: tuple[Any, ...], calls: int, batches: int, sync: Callable[[], object]) -> list[dict[str, Any]]:
    """Rows (piece, µs) of one generated launch function called with ``args``."""
    loop, _ = best_us(empty_loop, calls, batches, lambda: None)
    fn(*args)  # binds the config's launcher first: the prefixes run in copies of the function's namespace
    sync()
    rows = []
    previous = loop
    for label, prefix in prefixes(fn):
        best, median = best_us(looper(prefix, args), calls, batches, sync)
        rows.append({"piece": label, "us": best - previous, "cumulative_us": best - loop, "median_total_us": median - loop})
        previous = best
    return rows


class _GraphProbe:
    """Graph.launch's body step by step (bound method call, checks, entry point), on the same slots."""

    __slots__ = ("_stream", "_exec_handle", "_graph_launch", "_ctx_handle")

    def call_only(self, stream: Any) -> None:
        pass

    def checks(self, stream: Any) -> None:
        if stream is not self._stream or not self._exec_handle or not stream._handle:
            raise RuntimeError("refused")


def graph_breakdown(graph: Any, stream: Any, calls: int, batches: int, sync: Callable[[], object]) -> list[dict[str, Any]]:
    probe = _GraphProbe()
    probe._stream, probe._exec_handle, probe._graph_launch = stream, graph._exec_handle, graph._graph_launch
    loop, _ = best_us(empty_loop, calls, batches, lambda: None)
    call, _ = best_us(looper(probe.call_only, (stream,)), calls, batches, lambda: None)
    checks, _ = best_us(looper(probe.checks, (stream,)), calls, batches, lambda: None)
    entry, _ = best_us(looper(graph._graph_launch, (graph._exec_handle, stream._handle)), calls, batches, sync)
    full, median = best_us(looper(graph.launch, (stream,)), calls, batches, sync)
    return [{"piece": "bound method call (Graph.launch)", "us": call - loop},
            {"piece": "checks (stream identity, open graph, open stream)", "us": checks - call},
            {"piece": "entry point alone: graph_launch(exec, stream) (C extension + driver)", "us": entry - loop},
            {"piece": "rest: attribute loads, result test", "us": full - checks - (entry - loop)},
            {"piece": "Graph.launch in all", "us": full - loop, "median_total_us": median - loop}]


def stand_ins() -> dict[str, Any]:
    """Point the C extension's entry points at a native no-op and build a kernel, stream, buffers and a
    graph without a driver (as the CPU tests do)."""
    from mircuda import _hotpath  # type: ignore[attr-defined]
    from mircuda.graph import Graph
    from mircuda.launch import LAUNCH_ABIS
    from mircuda.launch._kernel import TypedKernel
    from mircuda.memory import DeviceBuffer
    from mircuda.runtime import Stream

    noop = ctypes.cast(ctypes.pythonapi.PyErr_Occurred, ctypes.c_void_p).value  # returns NULL: "success"
    _hotpath.set_entry_points(noop, noop, noop)
    _hotpath.set_launch_ex(noop)
    _cuda.launch_kernel, _cuda.graph_launch = _hotpath.launch_kernel, _hotpath.graph_launch
    _cuda.launch_kernel_programmatic = _hotpath.launch_kernel_programmatic
    _cuda.bound_hotpath = _hotpath if hasattr(_hotpath, "bind_launch") else None
    _cuda.hot_path_kind = "c-extension, stand-in entry points"

    class Context:
        _closed, _handle, handle = True, 1, 1

    context = Context()

    def kernel(contract: Any) -> Any:
        k = object.__new__(TypedKernel)
        k._contract, k._abi, k._handle, k._context = contract, LAUNCH_ABIS["c"], 0x40, context
        k._config_dims = lambda c: (*c.grid, *c.block, c.shared_mem_bytes)  # type: ignore[method-assign]
        k._owner = threading.get_ident()
        k._thread_launchers = {}
        k.launch = k._generate(k._owner)  # type: ignore[method-assign]
        return k

    stream = object.__new__(Stream)
    stream._context, stream._handle = context, 0x50

    def buffer() -> Any:
        b = object.__new__(DeviceBuffer)
        b._scalar, b._context, b._ptr = Empty.params[0].info.scalar_type, context, 0x1000
        return b

    graph = object.__new__(Graph)
    graph._stream, graph._exec_handle, graph._graph_launch, graph._ctx_handle = stream, 0x60, _cuda.graph_launch, 1
    return {"empty": kernel(Empty), "seven": kernel(Seven), "stream": stream, "buffer": buffer, "graph": graph,
            "sync": lambda: None, "device": "stand-in entry points (no GPU)"}


def real() -> dict[str, Any]:
    driver = mc.Driver.initialize()
    context = driver.create_context(driver.devices()[0])
    stream = context.create_stream()
    pool = context.default_memory_pool()
    compiler = mc.Compiler(context)
    empty = compiler.compile(mc.cuda_kernel(EMPTY, "empty.cu")).kernel(Empty)
    seven = compiler.compile(mc.cuda_kernel(SEVEN, "seven.cu")).kernel(Seven)
    buffers: list[Any] = []

    def buffer() -> Any:
        buffers.append(pool.allocate(mc.f32, stream, 1024))
        return buffers[-1]

    one = mc.LaunchConfig(1, 32)
    target = buffer()
    graph = stream.capture(target, lambda b: [empty.launch(stream, one, b) for _ in range(GRAPH_NODES)])
    return {"empty": empty, "seven": seven, "stream": stream, "buffer": buffer, "graph": graph,
            "sync": stream.synchronize, "device": context.device_info().name, "keep": (context, buffers, graph)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stand-in", action="store_true", help="no GPU: native no-op entry points, stand-in objects")
    ap.add_argument("--calls", type=int, default=None, help="calls per batch (default 200 on a GPU, 5000 stand-in)")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--json", default=None, help="results file (default benchmarks/results/launch_breakdown[_stand_in].json)")
    args = ap.parse_args(argv)
    if args.calls is None:
        args.calls = 5000 if args.stand_in else 200
    if args.calls < 1 or args.batches < 1:
        print("error: --calls and --batches must be positive integers", file=sys.stderr)
        return 2
    try:
        env = stand_ins() if args.stand_in else real()
    except mc.MircudaError as exc:
        print(f"launch_breakdown needs a CUDA GPU without --stand-in: {exc}", file=sys.stderr)
        return 2
    stream, sync, buffer = env["stream"], env["sync"], env["buffer"]
    one = mc.LaunchConfig(1, 32)
    y, w, x = buffer(), buffer(), buffer()
    result: dict[str, Any] = {"benchmark": "launch_breakdown", "device": env["device"], "date": time.strftime("%Y-%m-%d"),
                              "python": sys.version.split()[0], "hot_path": _cuda.hot_path_kind,
                              "mircuda": str(Path(mc.__file__).parent),
                              "calls_per_batch": args.calls, "batches": args.batches, "sections": {}}
    sections = {
        "typed launch, empty(float*)": breakdown(env["empty"].launch, (stream, one, y), args.calls, args.batches, sync),
        "typed launch, seven(y, w, x, alpha, beta, n, k)": breakdown(
            env["seven"].launch, (stream, one, y, w, x, 1.0, 0.0, 4096, 4096), args.calls, args.batches, sync),
        f"Graph.launch ({GRAPH_NODES if not args.stand_in else 'stand-in'} nodes)": graph_breakdown(
            env["graph"], stream, args.calls, args.batches, sync),
    }
    block = env["empty"].launch.__mircuda_block__
    dims = (1, 1, 1, 32, 1, 1, 0)
    entry, _ = best_us(looper(_cuda.launch_kernel, (env["empty"].handle, *dims, stream._handle, block.params_address)),
                       args.calls, args.batches, sync)
    loop, _ = best_us(empty_loop, args.calls, args.batches, lambda: None)
    sections["entry points alone"] = [{"piece": "launch_kernel(fn, 7 dims, stream, params)", "us": entry - loop}]
    print(f"launch_breakdown of {result['mircuda']} on {env['device']} (Python {result['python']}, hot path "
          f"{result['hot_path']}): best of "
          f"{args.batches} batches x {args.calls} calls, µs per call; a piece = its prefix less the previous one")
    for title, rows in sections.items():
        print(f"\n  {title}")
        for r in rows:
            extra = f"   (cumulative {r['cumulative_us']:.3f})" if "cumulative_us" in r else ""
            print(f"    {r['piece']:<72} {r['us']:7.3f}{extra}")
        if rows and "cumulative_us" in rows[-1]:
            print(f"    {'in all (median of batches)':<72} {rows[-1]['median_total_us']:7.3f}")
    result["sections"] = sections
    path = Path(args.json or HERE / "results" / ("launch_breakdown_stand_in.json" if args.stand_in else "launch_breakdown.json"))
    write_json(str(path), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
