"""The SM-driven copy behind ``Stream.copy_peer(..., engine="sm")``: ``cuda_src/peer_copy.cu`` compiled by
NVRTC once per context, launched with enough blocks to fill the device's SMs."""

from __future__ import annotations

import functools
import weakref
from importlib import resources
from typing import TYPE_CHECKING, Any

from ..dtypes import u64
from ..launch import LaunchConfig, cuda_export
from ._compiler import Compiler
from ._source import CudaSource

if TYPE_CHECKING:
    from ..launch import TypedKernel
    from ..runtime import Context, Stream

__all__ = ["PEER_COPY_THREADS", "PeerCopy", "peer_copy_kernel", "sm_copy"]

PeerCopy = cuda_export("mircuda_peer_copy", dst=u64, src=u64, nbytes=u64)
"""The kernel's contract: device addresses of the destination and source, and the bytes to copy."""

PEER_COPY_THREADS = 512
"""Threads per block; the grid is as many blocks as are resident at once (``cuOccupancyMaxActiveBlocksPerMultiprocessor``
x the SM count: 4 per SM by the kernel's launch bounds, 2048 threads, a full SM on sm_80-sm_90), so every
block strides over the bytes in one wave. Each thread keeps 64 bytes in flight: about 128 KiB of
outstanding accesses per SM, to cover NVLink's latency."""

_KERNELS: weakref.WeakKeyDictionary[Any, tuple[TypedKernel, LaunchConfig]] = weakref.WeakKeyDictionary()


@functools.lru_cache(maxsize=1)
def peer_copy_source() -> CudaSource:
    """``mircuda/cuda_src/peer_copy.cu`` (from the installed package) as a :class:`CudaSource`."""
    text = resources.files("mircuda").joinpath("cuda_src").joinpath("peer_copy.cu").read_text()
    return CudaSource(text, "peer_copy.cu")


def peer_copy_kernel(context: Context) -> tuple[TypedKernel, LaunchConfig]:
    """The kernel loaded in ``context`` and its launch configuration (compiled on first use, then kept
    for the context's life). The grid is the resident blocks of ``PEER_COPY_THREADS`` threads on every
    SM (one wave); the kernel strides over the bytes, so the grid does not depend on the size.

    Raises:
        CompileError: NVRTC rejected the kernel (a bug; the log is attached).
    """
    found = _KERNELS.get(context)
    if found is None:
        kernel = Compiler(context).compile(peer_copy_source()).kernel(PeerCopy)
        sms = context.device_info().multiprocessor_count
        resident = kernel.max_active_blocks_per_sm(PEER_COPY_THREADS)
        found = _KERNELS.setdefault(context, (kernel, LaunchConfig((max(1, resident) * sms,),
                                                                   (PEER_COPY_THREADS,))))
    return found


def sm_copy(stream: Stream, dst: int, src: int, nbytes: int) -> None:
    """Enqueue the copy of ``nbytes`` bytes from address ``src`` to ``dst`` on ``stream`` (its SMs do the
    work). The caller has checked both addresses: the stream's device must be able to reach both."""
    kernel, config = peer_copy_kernel(stream.context)
    kernel.launch(stream, config, dst, src, nbytes)
