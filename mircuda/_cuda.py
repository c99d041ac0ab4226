"""The only module that touches ``cuda.bindings`` and ``libcuda`` directly.

Every driver and NVRTC call goes through :func:`call` / :func:`nvrtc_call`, which check the result and
raise :class:`~mircuda.errors.CudaError` / :class:`~mircuda.errors.NvrtcError` with the result's name.
The launch hot path uses ``libcuda`` through ``ctypes`` (see :func:`launch_kernel`): the generated
``cuda.bindings`` wrapper costs about 2 µs per call on an H200 host, ctypes with fixed argument types
costs a fraction of that.

Nothing here runs at import: ``import mircuda`` must work on a machine without a driver.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from .errors import CudaError, NvrtcError, UnsupportedPlatform

_lock = threading.Lock()
_driver: Any = None
_nvrtc: Any = None
_libcuda: ctypes.CDLL | None = None
_tls = threading.local()

# Driver result codes mircuda interprets itself (cuda.h).
CUDA_SUCCESS = 0
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901


def driver() -> Any:
    """Return ``cuda.bindings.driver`` after ``cuInit(0)``; raise UnsupportedPlatform without a driver."""
    global _driver, _libcuda
    if _driver is not None:
        return _driver
    with _lock:
        if _driver is not None:
            return _driver
        try:
            from cuda.bindings import driver as drv
        except ImportError as exc:  # pragma: no cover - a dependency, always installed
            raise UnsupportedPlatform(f"cuda.bindings is not importable: {exc}") from exc
        try:
            (err,) = drv.cuInit(0)
        except Exception as exc:  # cuda-pathfinder raises its own error when libcuda is absent
            raise UnsupportedPlatform(
                f"no CUDA driver library (libcuda.so.1) could be loaded: {exc}"
            ) from exc
        if int(err) != CUDA_SUCCESS:
            raise CudaError(int(err), _result_name(drv, int(err)), "cuInit")
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise UnsupportedPlatform(f"libcuda.so.1 could not be opened with ctypes: {exc}") from exc
        _bind_hot_path(lib)
        _libcuda = lib
        _driver = drv
        return drv


def nvrtc() -> Any:
    """Return ``cuda.bindings.nvrtc`` (needs no GPU and no driver)."""
    global _nvrtc
    if _nvrtc is None:
        from cuda.bindings import nvrtc as mod

        _nvrtc = mod
    return _nvrtc


def _result_name(drv: Any, code: int) -> str:
    try:
        return str(drv.CUresult(code).name)
    except ValueError:
        return f"CUresult({code})"


def result_name(code: int) -> str:
    """The driver's name for a ``CUresult`` code, e.g. ``CUDA_ERROR_INVALID_VALUE``."""
    return _result_name(driver(), code)


def call(name: str, *args: Any) -> Any:
    """Call ``cuda.bindings.driver.<name>(*args)``; return its outputs (None, one value or a tuple).

    Raises:
        CudaError: the call returned anything but ``CUDA_SUCCESS``.
    """
    drv = driver()
    result = getattr(drv, name)(*args)
    err = int(result[0])
    if err != CUDA_SUCCESS:
        raise CudaError(err, _result_name(drv, err), name)
    if len(result) == 1:
        return None
    if len(result) == 2:
        return result[1]
    return result[1:]


def call_status(name: str, *args: Any) -> tuple[int, Any]:
    """Like :func:`call` but return ``(CUresult, outputs)`` without raising (for queries and finalizers)."""
    result = getattr(driver(), name)(*args)
    outs = result[1:]
    return int(result[0]), (outs[0] if len(outs) == 1 else (outs or None))


def nvrtc_call(name: str, *args: Any) -> Any:
    """Call ``cuda.bindings.nvrtc.<name>(*args)`` and check its ``nvrtcResult``."""
    mod = nvrtc()
    result = getattr(mod, name)(*args)
    err = int(result[0])
    if err != 0:
        raise NvrtcError(err, mod.nvrtcResult(err).name, name)
    if len(result) == 1:
        return None
    if len(result) == 2:
        return result[1]
    return result[1:]


def raise_result(code: int, call_name: str, detail: str = "") -> None:
    """Raise the CudaError for a non-zero ``CUresult`` returned by a ctypes hot-path call."""
    raise CudaError(code, result_name(code), call_name, detail)


# ---------------------------------------------------------------------------------------------
# Current context, per thread. The driver's current context is thread-local state; mircuda objects
# may be used from any thread, so each call that needs a context makes it current first. The
# thread-local cache avoids a cuCtxSetCurrent per launch; anything that changes the current context
# behind mircuda's back in this thread (another library) must go through `forget_current()`.


def make_current(handle: int) -> None:
    """Make the context with this handle current in the calling thread (cached per thread)."""
    if getattr(_tls, "ctx", None) != handle:
        call("cuCtxSetCurrent", driver().CUcontext(handle))
        _tls.ctx = handle


def forget_current() -> None:
    """Drop the calling thread's cached current context, so the next call sets it again."""
    _tls.ctx = None


def current_cache() -> threading.local:
    """The thread-local object whose ``ctx`` attribute caches the current context handle."""
    return _tls


# ---------------------------------------------------------------------------------------------
# ctypes entry points for the hot paths.

launch_kernel: Any = None
"""``cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared_bytes, stream, void** params, void** extra)``."""
graph_launch: Any = None
"""``cuGraphLaunch(CUgraphExec, CUstream)``."""
event_record: Any = None
"""``cuEventRecord(CUevent, CUstream)``."""


def _bind_hot_path(lib: ctypes.CDLL) -> None:
    global launch_kernel, graph_launch, event_record
    u, vp = ctypes.c_uint, ctypes.c_void_p
    fn = lib.cuLaunchKernel
    fn.argtypes = [vp, u, u, u, u, u, u, u, vp, vp, vp]
    fn.restype = ctypes.c_int
    launch_kernel = fn
    g = lib.cuGraphLaunch
    g.argtypes = [vp, vp]
    g.restype = ctypes.c_int
    graph_launch = g
    e = lib.cuEventRecord
    e.argtypes = [vp, vp]
    e.restype = ctypes.c_int
    event_record = e


_toolkit_include: str | None = None


def toolkit_include_dir() -> str | None:
    """The CUDA toolkit header directory NVRTC should see (``cuda_fp16.h``, ``cuda_bf16.h``,
    ``cuda_fp8.h``, ``cuda_fp4.h``): the ``nvidia-cuda-runtime`` wheel's, else ``CUDA_HOME``'s, as
    ``cuda.pathfinder`` finds it; None when there is none (then only NVRTC's built-in headers exist)."""
    global _toolkit_include
    if _toolkit_include is None:
        try:
            from cuda.pathfinder import find_nvidia_header_directory

            _toolkit_include = find_nvidia_header_directory("cudart") or ""
        except Exception:
            _toolkit_include = ""
    return _toolkit_include or None
