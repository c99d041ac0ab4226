"""The CUDA toolkit header directories every NVRTC compile sees, after the caller's include roots."""

from __future__ import annotations

import functools

__all__ = ["toolkit_include_dirs"]


@functools.cache
def toolkit_include_dirs() -> tuple[str, ...]:
    """The CUDA toolkit header directories NVRTC should see: cudart's (``cuda_fp16.h``, ``cuda_bf16.h``,
    ``cuda_fp8.h``, ``cuda_fp4.h``) and CCCL's (``<cuda/std/...>``, ``<cub/...>``), from the toolkit
    wheels or ``CUDA_HOME`` as ``cuda.pathfinder`` finds them; empty when there are none (then only
    NVRTC's built-in headers exist). Looked up once per process."""
    found: list[str] = []
    try:
        from cuda.pathfinder import find_nvidia_header_directory
    except Exception:  # an old cuda-bindings without cuda.pathfinder: NVRTC's built-in headers only
        return ()
    for lib in ("cudart", "cccl"):
        try:
            d = find_nvidia_header_directory(lib)
        except Exception:  # a lookup error means "not installed" here, as for None
            d = None
        if d and d not in found:
            found.append(d)
    return tuple(found)
