"""The Python side of one typed launch, on any machine (no GPU): mircuda's launch against a no-op driver.

The driver's entry points (``cuLaunchKernel``, ``cuLaunchKernelEx``, ``cuGraphLaunch``,
``cuEventRecord``) are replaced by native functions that return 0 at once, built here with ``cc
-shared`` (a ctypes callback would cost more than the launch it stands for). The hot path is bound to
them exactly as ``mircuda._cuda`` binds the driver's, so every row measures what mircuda adds above the
driver's own work; the C floor is a C loop calling the same no-op through a function pointer. Side by
side, in one process:

- the C floor (a C loop calling the no-op ``cuLaunchKernel``);
- the generated launch of git ``main`` (``--old-ref``): its ``mircuda/launch/_abi.py``, loaded from git,
  generates the function as it did there (a ctypes store per value, then ``_L(_fn, 7 dims, stream,
  params)``);
- the generated launch of this checkout (the bound launcher: ``_L(config, stream, values...)``);
- each for ``empty(float*)`` and for a seven-parameter kernel ``(y, w, x, alpha, beta, n, k)``, and
  with a new (equal) ``LaunchConfig`` object on every launch (the rebinding path);
- cuda.bindings' ``cuLaunchKernel`` cannot be pointed at the no-op (it calls its own libcuda): listed
  as unavailable.

Then where the time goes: every prefix of each generated function (as
``benchmarks/launch_breakdown.py`` splits it: a piece is its prefix less the previous one), and the C
call taken apart (the old ten-argument entry alone; the bound launcher alone; the bound launcher
answering ``BOUND_NEW_CONFIG``, i.e. its call, thread test and config test without the value writes and
the driver call). Best of ``--batches`` batches of ``--calls`` calls, ns per launch. Nothing here is
a test: the figures depend on the machine, and the JSON names its CPU.

    python benchmarks/launch_python_cost.py [--calls 5000] [--batches 40] [--old-ref main] [--json PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # the checkout this script belongs to, not another installed mircuda
sys.path.insert(0, str(HERE))

import mircuda as mc  # noqa: E402
from launch_breakdown import best_us, empty_loop, looper, prefixes  # noqa: E402
from mircuda import _cuda  # noqa: E402
from mircuda.cli._matmul_bench import _write_json as write_json  # noqa: E402

NOOP_DRIVER = r"""
#include <time.h>
typedef int (*launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                        void**);
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned smem, void* stream, void** params, void** extra) { return 0; }
int cuLaunchKernelEx(const void* config, void* f, void** params, void** extra) { return 0; }
int cuGraphLaunch(void* exec, void* stream) { return 0; }
int cuEventRecord(void* event, void* stream) { return 0; }
/* The C floor: n calls of cuLaunchKernel through a pointer the compiler cannot see through; ns per call. */
double floor_loop(long n, void* stream, void** params) {
    launch_t volatile f = cuLaunchKernel;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; ++i) f((void*)0x40, 1, 1, 1, 32, 1, 1, 0, stream, params, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n;
}
"""
EMPTY = mc.cuda_export("empty", p=mc.DeviceBuffer[mc.f32])
SEVEN = mc.cuda_export("seven", y=mc.Out[mc.DeviceBuffer[mc.f32]], w=mc.In[mc.DeviceBuffer[mc.f32]],
                       x=mc.In[mc.DeviceBuffer[mc.f32]], alpha=mc.f32, beta=mc.f32, n=mc.i32, k=mc.i32)

SIGNATURES = {"empty": "empty(p)", "seven": "seven(y, w, x, alpha, beta, n, k)"}


class _StandInDriver:
    """What ``_cuda._bind_hot_path`` asks the driver: its version and each entry point's address."""

    class CUdriverProcAddress_flags:
        CU_GET_PROC_ADDRESS_DEFAULT = 0

    def __init__(self, address: dict[str, int]) -> None:
        self._address = address

    def cuDriverGetVersion(self) -> tuple[int, int]:
        return 0, 13000

    def cuGetProcAddress(self, name: bytes, version: int, flags: int) -> tuple[int, int]:
        return 0, self._address[name.decode()]


def build_noop_driver(directory: Path) -> ctypes.CDLL:
    source, library = directory / "noop_driver.c", directory / "libnoop_driver.so"
    source.write_text(NOOP_DRIVER)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True,
                   capture_output=True, text=True)
    lib = ctypes.CDLL(str(library))
    lib.floor_loop.restype = ctypes.c_double
    lib.floor_loop.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def load_old_abi(ref: str) -> Any:
    """``mircuda/launch/_abi.py`` of git ``ref`` as a module of this package (its relative imports
    resolve here), or None when git cannot show it."""
    done = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:mircuda/launch/_abi.py"], capture_output=True,
                          text=True)
    if done.returncode:
        return None
    spec = importlib.util.spec_from_loader("mircuda.launch._abi_old", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "mircuda.launch"
    sys.modules[spec.name] = module  # dataclasses looks its module up
    exec(compile(done.stdout, f"<{ref}:mircuda/launch/_abi.py>", "exec"), module.__dict__)
    return module


class _Context:
    """Stands in for a Context (compared by identity); closed, so finalizers do nothing."""

    _closed, _handle, handle = True, 1, 1


def stand_in_kernel(contract: Any, context: Any, generate: Any, abi: Any) -> Any:
    """A TypedKernel without a driver, its launch function made by ``generate`` (this checkout's or the
    old ``generate_launch``), as Module.kernel would make it."""
    from mircuda.launch._kernel import TypedKernel

    k = object.__new__(TypedKernel)
    k._contract, k._abi, k._handle, k._context = contract, abi, 0x40, context
    # TypedKernel's own config cache, filled as a first launch on a device would fill it (its check of a
    # new config needs the device): equal configs are found there, as on a GPU.
    k._checked = {mc.LaunchConfig(1, 32): (1, 1, 1, 32, 1, 1, 0)}
    k._owner = threading.get_ident()
    k._thread_launchers = {}
    k.launch = generate(abi, contract, context, 0x40, k._owner, config_dims=k._config_dims,  # type: ignore[method-assign]
                        bad_stream=k._bad_stream, raise_launch=k._raise_launch,
                        other_thread=k._launch_other_thread)
    return k


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--old-ref", default="main", help="the git ref whose generated launch is the 'old' row")
    ap.add_argument("--json", default=str(HERE / "results" / "launch_python_cost.json"))
    args = ap.parse_args(argv)
    if args.calls < 1 or args.batches < 1:
        print("error: --calls and --batches must be positive integers", file=sys.stderr)
        return 2
    from mircuda import _hotpath  # type: ignore[attr-defined]
    from mircuda.launch import _abi
    from mircuda.memory import DeviceBuffer
    from mircuda.runtime import Stream

    tmp = Path(tempfile.mkdtemp(prefix="launch_python_cost_"))
    try:
        lib = build_noop_driver(tmp)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"launch_python_cost needs a C compiler (cc) for its no-op driver: {exc}", file=sys.stderr)
        return 2
    address = {n: ctypes.cast(getattr(lib, n), ctypes.c_void_p).value or 0
               for n in ("cuLaunchKernel", "cuLaunchKernelEx", "cuGraphLaunch", "cuEventRecord")}
    _cuda._bind_hot_path(_StandInDriver(address))
    if _cuda.hot_path_kind != "c-extension" or not hasattr(_hotpath, "bind_launch"):
        print("launch_python_cost needs this checkout's C extension (python setup.py build_ext --inplace)",
              file=sys.stderr)
        return 2

    context = _Context()
    stream = object.__new__(Stream)
    stream._context, stream._handle = context, 0x50  # type: ignore[assignment]

    def buffer() -> Any:
        b = object.__new__(DeviceBuffer)
        b._scalar, b._context, b._ptr = EMPTY.params[0].info.scalar_type, context, 0x1000
        return b

    y, w, x = buffer(), buffer(), buffer()
    one = mc.LaunchConfig(1, 32)
    calls, batches = args.calls, args.batches

    def ns(run: Any, n_args: tuple[Any, ...]) -> float:
        best, _ = best_us(looper(run, n_args), calls, batches, lambda: None)
        return best * 1000.0

    loop_ns = best_us(empty_loop, calls, batches, lambda: None)[0] * 1000.0
    kernels: dict[str, dict[str, Any]] = {"new": {}}
    old_abi = load_old_abi(args.old_ref)
    new_abi = _abi.LAUNCH_ABIS["c"]
    for name, contract in (("empty", EMPTY), ("seven", SEVEN)):
        kernels["new"][name] = stand_in_kernel(contract, context, _abi.generate_launch, new_abi)
        if old_abi is not None:
            kernels.setdefault("old", {})[name] = stand_in_kernel(contract, context, old_abi.generate_launch,
                                                                  old_abi.LAUNCH_ABIS["c"])
    empty_args = (stream, one, y)
    seven_args = (stream, one, y, w, x, 1.0, 0.0, 4096, 4096)

    floor_samples = []
    block = kernels["new"]["empty"].launch.__mircuda_block__
    for _ in range(batches):
        floor_samples.append(lib.floor_loop(calls, stream._handle, block.params_address))
    rows: dict[str, float | None] = {"C floor: a C loop calling the no-op cuLaunchKernel": min(floor_samples)}
    unavailable = {"cuda.bindings cuLaunchKernel, void** block":
                   "calls its own libcuda's entry point; it cannot be pointed at the no-op driver"}
    for version in ("old", "new"):
        label = f"{args.old_ref} (git)" if version == "old" else "this checkout"
        if version not in kernels:
            unavailable[f"{label} generated launch"] = f"git show {args.old_ref}:mircuda/launch/_abi.py failed"
            continue
        empty, seven = kernels[version]["empty"], kernels[version]["seven"]
        rows[f"{label}: TypedKernel.launch, {SIGNATURES['empty']}"] = ns(empty.launch, empty_args) - loop_ns
        rows[f"{label}: TypedKernel.launch, {SIGNATURES['seven']}"] = ns(seven.launch, seven_args) - loop_ns

        fresh = [mc.LaunchConfig(1, 32) for _ in range(calls)]  # built before the timing: only launches are timed

        def run(n: int, launch: Any = empty.launch, configs: list[Any] = fresh) -> None:
            for config in configs[:n]:
                launch(stream, config, y)

        run(calls)  # the first binding of this config shape is not what the row measures
        rows[f"{label}: TypedKernel.launch, empty(p), a new equal LaunchConfig each launch"] = (
            best_us(run, calls, batches, lambda: None)[0] * 1000.0 - loop_ns)

    breakdown: dict[str, list[dict[str, Any]]] = {}
    for version in kernels:
        for name, fargs in (("empty", empty_args), ("seven", seven_args)):
            fn = kernels[version][name].launch
            fn(*fargs)  # bind the config first: the prefixes copy the function's namespace
            previous = loop_ns
            pieces = []
            for label, prefix in prefixes(fn):
                t = ns(prefix, fargs)
                pieces.append({"piece": label, "ns": t - previous, "cumulative_ns": t - loop_ns})
                previous = t
            breakdown[f"{args.old_ref if version == 'old' else 'this checkout'}, {name}"] = pieces

    # What-if rows (not what mircuda runs): the signature's *_extra/**_unknown catch-alls make every call
    # build a keyword dict; without them a wrong argument count or an unknown keyword would be Python's
    # TypeError naming "launch()" instead of a ContractError naming the contract's parameters.
    what_if: list[dict[str, Any]] = []
    for name, fargs in (("empty", empty_args), ("seven", seven_args)):
        fn = kernels["new"][name].launch
        source = fn.__mircuda_source__
        for label, old_text, new_text in (
                ("without **_unknown", ", **_unknown):", "):"),
                ("without *_extra and **_unknown", ", *_extra, **_unknown):", "):")):
            lines = [line.replace(old_text, new_text) for line in source.splitlines()]
            lines = [line for line in lines if "_arity(" not in line and "if _extra" not in line]
            namespace = dict(fn.__globals__)
            exec(compile("\n".join(lines) + "\n", "<what-if>", "exec"), namespace)
            what_if.append({"piece": f"{name}: {label}", "ns": ns(namespace["launch"], fargs) - loop_ns,
                            "as_generated_ns": rows[f"this checkout: TypedKernel.launch, {SIGNATURES[name]}"]})

    new_empty = kernels["new"]["empty"].launch
    bound = new_empty.__globals__["_L"]
    dims = (1, 1, 1, 32, 1, 1, 0)
    entry = ns(_hotpath.launch_kernel, (0x40, *dims, stream._handle, block.params_address)) - loop_ns
    full = ns(bound, (one, stream._handle, y._ptr)) - loop_ns
    early = ns(bound, (None, stream._handle, y._ptr)) - loop_ns
    floor = rows["C floor: a C loop calling the no-op cuLaunchKernel"] or 0.0
    c_call = [
        {"piece": "old entry alone: launch_kernel(fn, 7 dims, stream, params)", "ns": entry},
        {"piece": "bound launcher alone: _L(config, stream, p)", "ns": full},
        {"piece": "  its call, thread test and config test (answers BOUND_NEW_CONFIG)", "ns": early},
        {"piece": "  its value conversion, slot write and driver call (the rest)", "ns": full - early},
        {"piece": "  of which the no-op driver call itself (the C floor)", "ns": floor},
    ]
    # Without the C extension (ctypes entry points, Python bound launchers), old and new side by side.
    import mircuda

    saved = sys.modules.get("mircuda._hotpath")
    sys.modules["mircuda._hotpath"] = None  # type: ignore[assignment]
    delattr(mircuda, "_hotpath")
    try:
        _cuda._bind_hot_path(_StandInDriver(address))
        for version in kernels:
            label = f"{args.old_ref} (git)" if version == "old" else "this checkout"
            generate, abi = ((old_abi.generate_launch, old_abi.LAUNCH_ABIS["c"]) if version == "old"
                             else (_abi.generate_launch, new_abi))
            empty = stand_in_kernel(EMPTY, context, generate, abi)
            seven = stand_in_kernel(SEVEN, context, generate, abi)
            rows[f"{label}, no C extension (ctypes): TypedKernel.launch, empty(p)"] = ns(empty.launch, empty_args) - loop_ns
            rows[f"{label}, no C extension (ctypes): TypedKernel.launch, seven(...)"] = (
                ns(seven.launch, seven_args) - loop_ns)
    finally:
        sys.modules["mircuda._hotpath"] = saved  # type: ignore[assignment]
        mircuda._hotpath = saved  # type: ignore[attr-defined]
        _cuda._bind_hot_path(_StandInDriver(address))

    result = {"benchmark": "launch_python_cost", "cpu": cpu_name(), "machine": platform.machine(),
              "python": sys.version.split()[0], "date": time.strftime("%Y-%m-%d"), "mircuda": str(Path(mc.__file__).parent),
              "old_ref": args.old_ref, "calls_per_batch": calls, "batches": batches,
              "unit": "ns per launch, best batch, the empty Python loop subtracted",
              "ns_per_launch": rows, "unavailable": unavailable, "breakdown": breakdown, "c_call": c_call,
              "what_if": what_if}
    print(f"launch_python_cost on {result['cpu']} (Python {result['python']}): {result['unit']}")
    for label, value in rows.items():
        print(f"  {label:<100} {value:8.1f}")
    for label, why in unavailable.items():
        print(f"  {label:<100} unavailable: {why}")
    for title, pieces in breakdown.items():
        print(f"\n  pieces of the generated launch, {title}")
        for p in pieces:
            print(f"    {p['piece']:<80} {p['ns']:7.1f}   (cumulative {p['cumulative_ns']:.1f})")
    print("\n  the C call")
    for p in c_call:
        print(f"    {p['piece']:<80} {p['ns']:7.1f}")
    print("\n  what if the launch function had no catch-all parameters (not what runs: see the source)")
    for p in what_if:
        print(f"    {p['piece']:<80} {p['ns']:7.1f}   (as generated {p['as_generated_ns']:.1f})")
    path = Path(args.json)
    write_json(str(path), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
