"""Host cost per launch of an empty Numba kernel: Numba's dispatcher beside mircuda's typed launch (Python)
and a compiled ``@numba.njit`` loop calling ``cuLaunchKernel`` with a launch record, with CUDA C through
mircuda and the C floor for reference.

One device; the kernel takes one float32 array (Numba: ``void(float32[:])``, 7 ABI values; CUDA C:
``empty(float*)``), 1 block of 32 threads. Each path runs ``--calls`` launches per batch with the stream
synchronized between batches; the table gives the median over batches of µs per launch and the ratio
to the C floor (``benchmarks/c/launch_floor.c``: the driver API called from C, as in
``launch_overhead.py``). Each path runs in a process of its own (loading several CUDA libraries into one
process shifted launch costs on the H200 host), round-robin over ``--rounds`` rounds.
Goals (issue 4): a Numba kernel through mircuda <= 1.25x the C floor from Python, <= 1.1x from @njit.

    python benchmarks/numba_launch.py [--calls 200] [--batches 30] [--rounds 5] [--json PATH]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import mircuda as mc  # noqa: E402
from launch_overhead import EMPTY, WARMUP_BATCHES, run_benchmark  # noqa: E402
from mircuda.timing import host_us_per_call  # noqa: E402

PATHS = [
    "Numba dispatcher, eager signature",
    "Numba dispatcher, mircuda buffer on a mircuda stream",
    "Numba kernel, mircuda TypedKernel.launch",
    "CUDA C kernel, mircuda TypedKernel.launch",
    "Numba kernel, @njit loop + LaunchRecord",
    "CUDA C kernel, @njit loop + LaunchRecord",
]
GOALS = {"Numba kernel, mircuda TypedKernel.launch": 1.25, "Numba kernel, @njit loop + LaunchRecord": 1.1}


def empty(p):  # type: ignore[no-untyped-def]
    pass


def time_njit_batches(run: Callable[[int], int], sync: Callable[[], None], calls: int, batches: int) -> list[float]:
    """µs per launch of each batch, with the ``calls`` launches of a batch inside one compiled call."""
    def batch() -> None:
        err = run(calls)
        if err:
            raise mc.CudaError(err, f"CUresult({err})", "cuLaunchKernel", "in the compiled loop")

    return [us / calls for us in host_us_per_call(batch, sync, 1, batches, warmup=WARMUP_BATCHES)]


def measure(name: str, calls: int, batches: int) -> list[float]:
    """Child-process mode: set up path ``name`` (importing only what it needs) and time it."""
    import numpy as np

    driver = mc.Driver.initialize()
    context = driver.create_context(driver.devices()[0])
    stream = context.create_stream()
    pool = context.default_memory_pool()
    buf = pool.allocate(mc.f32, stream, 1024)
    cfg = mc.LaunchConfig(1, 32)
    compiler = mc.Compiler(context)
    contract = mc.cuda_export("empty", p=mc.DeviceBuffer[mc.f32])

    if name == "Numba dispatcher, eager signature":
        from numba import cuda

        kernel = cuda.jit("void(float32[:])")(empty)
        nbs = cuda.stream()
        arr = cuda.device_array(1024, dtype=np.float32, stream=nbs)
        return host_us_per_call(lambda: kernel[1, 32, nbs](arr), nbs.synchronize, calls, batches,
                                WARMUP_BATCHES)
    if name == "Numba dispatcher, mircuda buffer on a mircuda stream":
        from numba import cuda

        import mircuda.numba_ext as mn

        kernel = cuda.jit("void(float32[:])")(empty)
        nbs, arr = mn.numba_stream(stream), mn.as_numba_array(buf, stream)
        return host_us_per_call(lambda: kernel[1, 32, nbs](arr), stream.synchronize, calls, batches,
                                WARMUP_BATCHES)

    if name.startswith("Numba kernel"):
        import mircuda.numba_ext as mn

        k = compiler.compile(mn.numba_kernel(empty, "void(float32[:])")).kernel(contract)
    else:
        k = compiler.compile(mc.cuda_kernel(EMPTY, "empty.cu")).kernel(contract)
    if name.endswith("TypedKernel.launch"):
        return host_us_per_call(lambda: k.launch(stream, cfg, buf), stream.synchronize, calls, batches,
                                WARMUP_BATCHES)

    import numba

    import mircuda.numba_ext as mn

    record = mn.LaunchRecord(k, stream, cfg, buf)
    launch = mn.record_launcher()

    @numba.njit
    def loop(values, n):  # type: ignore[no-untyped-def]
        for _ in range(n):
            err = launch(values)
            if err:
                return err
        return 0

    values = record.values
    loop(values, 1)  # compile outside the timing
    return time_njit_batches(lambda n: loop(values, n), stream.synchronize, calls, batches)


def main() -> int:
    return run_benchmark(__file__, __doc__ or "", "numba_launch", PATHS, measure,
                         "Launch host cost, empty kernel with one float32 array, 1x32 threads", GOALS)


if __name__ == "__main__":
    sys.exit(main())
