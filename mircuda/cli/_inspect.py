"""``python -m mircuda inspect``: versions, devices, NVRTC targets, and a sample kernel compiled for
sm_90a, sm_120f and every device present (no GPU needed)."""

from __future__ import annotations

import argparse
import platform
import time
from importlib import metadata
from typing import Any

__all__ = ["OFFLINE_ARCHS", "SAMPLE_SOURCE", "cmd_inspect", "register"]

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
        from .. import _hotpath  # noqa: F401  (only whether it imports)

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


def register(sub: Any) -> None:
    """Add ``inspect`` to the CLI's subparsers."""
    p = sub.add_parser("inspect", help="list devices, the NVRTC version and targets; compile a sample kernel")
    p.set_defaults(func=cmd_inspect)
