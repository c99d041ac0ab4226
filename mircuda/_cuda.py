"""The only module that touches ``cuda.bindings`` and ``libcuda`` directly.

Every driver and NVRTC call goes through :func:`call` / :func:`nvrtc_call`, which check the result and
raise :class:`~mircuda.errors.CudaError` / :class:`~mircuda.errors.NvrtcError` with the result's name.
The launch hot path calls the driver's entry points (from ``cuGetProcAddress``) through the small C
extension ``mircuda._hotpath``: on an H200 host both the generated ``cuda.bindings`` wrapper and a
ctypes call cost 2-3 µs above the C floor of ~3.5 µs per launch; the extension costs a fraction of
a microsecond.

Nothing here runs at import: ``import mircuda`` must work on a machine without a driver.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from typing import Any

from .errors import CudaError, NvrtcError, UnsupportedPlatform

_lock = threading.Lock()
_driver: Any = None
_nvrtc: Any = None
_tls = threading.local()

# Driver result codes mircuda interprets itself (cuda.h).
CUDA_SUCCESS = 0
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901


def driver() -> Any:
    """Return ``cuda.bindings.driver`` after ``cuInit(0)``; raise UnsupportedPlatform without a driver."""
    global _driver
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
        _bind_hot_path(drv)
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
# Finalizers and stream capture. Python runs finalizers at arbitrary points (reference drops, cyclic
# GC), also inside the function a stream capture is running. A finalizer's driver call there (module
# unload, synchronous free, stream or event destroy) is not permitted during a capture and would
# invalidate it at random. So while any mircuda capture is open, finalizers are queued and run when
# the last capture ends.

_active_captures = 0
_deferred: list[tuple[Any, tuple[Any, ...]]] = []
_deferred_lock = threading.Lock()


def finalizer(fn: Any) -> Any:
    """Decorate a finalizer: it never raises, and it waits while a stream capture is open."""

    @functools.wraps(fn)
    def run(*args: Any) -> None:
        with _deferred_lock:
            if _active_captures:
                _deferred.append((fn, args))
                return
        try:
            fn(*args)
        except Exception:
            pass

    run.__mircuda_finalizer__ = True  # type: ignore[attr-defined]  # checked by tests/test_finalizers.py
    return run


def capture_started() -> None:
    """Called by Stream.capture before cuStreamBeginCapture."""
    global _active_captures
    with _deferred_lock:
        _active_captures += 1


def is_capturing(stream: Any) -> bool:
    """True while the ``CUstream`` ``stream`` takes part in a capture (``cuStreamIsCapturing``).

    Answers False without a driver call while no mircuda capture is open, so the copies that ask it
    on every call cost nothing outside captures; a capture begun by another library on a mircuda
    stream is not seen then.
    """
    if not _active_captures:
        return False
    return int(call("cuStreamIsCapturing", stream)) != 0  # CU_STREAM_CAPTURE_STATUS_NONE


def capture_ended() -> None:
    """Called by Stream.capture once the capture is over (ended, discarded or failed to begin)."""
    global _active_captures
    with _deferred_lock:
        _active_captures -= 1
        run = _deferred[:] if not _active_captures else []
        if run:
            _deferred.clear()
    for fn, args in run:
        try:
            fn(*args)
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------
# Current context, per thread. The driver's current context is thread-local state; mircuda objects
# may be used from any thread, so each call that needs a context makes it current first. The
# thread-local cache avoids a cuCtxSetCurrent per launch; anything that changes the current context
# behind mircuda's back in this thread (another library) must go through `forget_current()`.


def make_current(handle: int, force: bool = False) -> None:
    """Make the context with this handle current in the calling thread (cached per thread; ``force``
    calls the driver even when the cache says it is current, for code that must not run without it)."""
    if force or getattr(_tls, "ctx", None) != handle:
        call("cuCtxSetCurrent", driver().CUcontext(handle))
        _tls.ctx = handle


def forget_current() -> None:
    """Drop the calling thread's cached current context, so the next call sets it again."""
    _tls.ctx = None


def current_cache() -> threading.local:
    """The thread-local object whose ``ctx`` attribute caches the current context handle."""
    return _tls


# ---------------------------------------------------------------------------------------------
# Hot-path entry points. The versioned driver functions come from cuGetProcAddress; the C extension
# `mircuda._hotpath` calls them with no Python-level argument conversion. Without the extension (no C
# compiler at install time) ctypes wrappers of the same signature are used instead.

launch_kernel: Any = None
"""``launch_kernel(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params) -> CUresult``."""
launch_kernel_attributes: Any = None
"""``launch_kernel_attributes(attrs, num_attrs, function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params)
-> CUresult``: ``cuLaunchKernelEx`` with the attribute array at address ``attrs`` (see
:func:`launch_attribute_array`), which the caller keeps alive."""
launch_kernel_programmatic: Any = None
"""``launch_kernel_programmatic(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params) -> CUresult``:
``cuLaunchKernelEx`` with ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`` allowed."""
graph_launch: Any = None
"""``graph_launch(graph_exec, stream) -> CUresult``."""
event_record: Any = None
"""``event_record(event, stream) -> CUresult``."""
entry_points: dict[str, int] = {}
"""Driver entry points by name (``cuLaunchKernel``, ``cuLaunchKernelEx``, ``cuGraphLaunch``, ``cuEventRecord``), as
``cuGetProcAddress`` returned them: for code that calls the driver without Python (e.g. ``@njit``)."""
hot_path_kind = "none"
"""``"c-extension"`` or ``"ctypes"``: which implementation the hot path uses."""
bound_hotpath: Any = None
"""The C extension where it makes bound launchers (:func:`bind_launch`), else None (Python launchers)."""


def _proc_address(drv: Any, name: str, version: int) -> int:
    flags = drv.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT
    result = drv.cuGetProcAddress(name.encode(), version, flags)
    err = int(result[0])
    if err != CUDA_SUCCESS or not int(result[1]):
        raise CudaError(err, _result_name(drv, err), "cuGetProcAddress", name)
    return int(result[1])


def _bind_hot_path(drv: Any) -> None:
    global launch_kernel, launch_kernel_programmatic, launch_kernel_attributes, graph_launch, event_record
    global hot_path_kind, bound_hotpath
    _err, version = drv.cuDriverGetVersion()
    version = int(version)
    pfn_launch = _proc_address(drv, "cuLaunchKernel", version)
    pfn_graph = _proc_address(drv, "cuGraphLaunch", version)
    pfn_event = _proc_address(drv, "cuEventRecord", version)
    pfn_launch_ex = _proc_address(drv, "cuLaunchKernelEx", version)
    entry_points.update(cuLaunchKernel=pfn_launch, cuGraphLaunch=pfn_graph, cuEventRecord=pfn_event,
                        cuLaunchKernelEx=pfn_launch_ex)
    launch_kernel_programmatic = _programmatic_ctypes(pfn_launch_ex)
    launch_kernel_attributes = _attributes_ctypes(pfn_launch_ex)
    try:
        from . import _hotpath
    except ImportError:
        _hotpath = None
    if _hotpath is not None:
        _hotpath.set_entry_points(pfn_launch, pfn_graph, pfn_event)
        launch_kernel = _hotpath.launch_kernel
        graph_launch = _hotpath.graph_launch
        event_record = _hotpath.event_record
        if hasattr(_hotpath, "set_launch_ex"):  # an extension built before it had one keeps ctypes
            _hotpath.set_launch_ex(pfn_launch_ex)
            launch_kernel_programmatic = _hotpath.launch_kernel_programmatic
        if hasattr(_hotpath, "launch_kernel_attrs"):  # likewise for the attribute-list entry
            launch_kernel_attributes = _hotpath.launch_kernel_attrs
        bound_hotpath = _hotpath if hasattr(_hotpath, "bind_launch") else None  # likewise
        hot_path_kind = "c-extension"
        return
    u, vp = ctypes.c_uint, ctypes.c_void_p
    # PYFUNCTYPE keeps the GIL: the calls are a few microseconds and never block.
    raw_launch = ctypes.PYFUNCTYPE(ctypes.c_int, vp, u, u, u, u, u, u, u, vp, vp, vp)(pfn_launch)
    two = ctypes.PYFUNCTYPE(ctypes.c_int, vp, vp)

    def launch_ctypes(f: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, smem: int,
                      stream: int, params: int) -> int:
        _check_u32("launch_kernel", gx, gy, gz, bx, by, bz, smem)
        return raw_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, None)

    launch_ctypes.raw = raw_launch  # type: ignore[attr-defined]  # for bound launchers: dims checked once
    launch_kernel = launch_ctypes
    bound_hotpath = None
    graph_launch = two(pfn_graph)
    event_record = two(pfn_event)
    hot_path_kind = "ctypes"


# ---------------------------------------------------------------------------------------------
# Bound launchers: one callable per (function, config, parameter block, thread) that writes the launch's
# values into the block and calls the entry point; see bind_launch.

BOUND_OTHER_THREAD = -1
"""A bound launcher's answer when called from another thread than its block's owner (nothing written)."""
BOUND_NEW_CONFIG = -2
"""A bound launcher's answer when called with another config than the one it was bound to (nothing written)."""
BOUND_MAX_VALUES = 256
"""The most values a bound launcher writes (the C extension converts them on its stack first)."""
VALUE_INT, VALUE_UINT, VALUE_F32, VALUE_F64, VALUE_BYTES = 1, 2, 3, 4, 5
"""Kinds of a bound launcher's value slot: a signed or unsigned integer of 1, 2, 4 or 8 bytes, a C float, a
C double, or bytes copied as they are (a by-value struct)."""

_KIND_PLAIN, _KIND_PROGRAMMATIC, _KIND_ATTRIBUTES = 0, 1, 2


def bind_launch(entry: Any, config: Any, function: int, dims: tuple[int, ...], storage: Any, params_address: int,
                owner: int, slots: tuple[tuple[int, int, int], ...], keep: Any = None) -> Any:
    """A bound launcher: ``bound(config, stream, *values) -> CUresult`` for the entry point ``entry`` (one of
    :data:`launch_kernel`, :data:`launch_kernel_programmatic`, or a ``functools.partial`` of
    :data:`launch_kernel_attributes` binding the attribute array, as ``launch._kinds.attribute_launcher``
    makes), the ``CUfunction`` ``function`` and the seven ``dims`` (grid, block, dynamic shared bytes).

    ``storage`` is the parameter block's ctypes buffer (kept alive by the launcher) and ``params_address``
    its ``void**``; ``keep`` is held as long as the launcher too: the owner of the ``void**`` array (the
    :class:`~mircuda.launch.ArgumentBlock`), so that a launcher outliving its launch function never hands
    the driver freed memory; ``slots`` gives each value's ``(offset, kind, size)`` in the block (kinds
    ``VALUE_INT`` .. ``VALUE_BYTES``). A call from a thread other than ``owner`` returns
    :data:`BOUND_OTHER_THREAD`, a call with another config object than ``config`` :data:`BOUND_NEW_CONFIG`,
    both having written nothing. Otherwise every value is converted first (an int kind takes an int or
    ``__index__`` within the slot's range, never truncated; a float kind a real, f32 refusing a finite value
    that rounds to infinity; bytes exactly the slot's size): any failure raises (OverflowError, TypeError,
    ValueError) with nothing written and nothing launched; then all are written and the entry point
    called.

    Where ``entry`` is the C extension's, the launcher is the extension's (``_hotpath.bind_launch``): one
    C call per launch. Otherwise (no extension, or a stand-in entry point) it is a Python function with
    the same behaviour that calls ``entry(function, *dims, stream, params_address)``.

    Raises:
        OverflowError: a dimension beyond 32 bits; ValueError: more than :data:`BOUND_MAX_VALUES` slots.
    """
    if len(slots) > BOUND_MAX_VALUES:
        raise ValueError(f"bind_launch: at most {BOUND_MAX_VALUES} values, received {len(slots)}")
    hot = bound_hotpath
    if hot is not None:
        kind, attrs, count = _c_kind(hot, entry)
        if kind is not None:  # the extension checks every argument itself
            return hot.bind_launch(kind, function, tuple(dims), params_address, ctypes.addressof(storage), owner,
                                   config, attrs, count, tuple(slots), (storage, entry, keep))
    _check_u32("bind_launch", *dims)
    bound = _python_bound_launch(entry, config, function, tuple(dims), storage, params_address, owner, tuple(slots))
    bound.keep = (storage, keep)  # the slot views' buffer and the void** array's owner live as long as the launcher
    return bound


def rebinder(launcher: Any) -> Any:
    """``rebind(config)`` for a launcher from :func:`bind_launch`: from then on the launcher answers to
    ``config`` (an object equal to the config it was bound to: the dimensions and the launch kind stay)
    instead of its former config object, which it no longer holds."""
    rebind = getattr(launcher, "rebind", None)  # the Python launcher's
    if rebind is not None:
        return rebind
    from . import _hotpath

    hot: Any = _hotpath
    return functools.partial(hot.rebind_config, launcher)


def _c_kind(hot: Any, entry: Any) -> tuple[int | None, int, int]:
    if entry is hot.launch_kernel:
        return _KIND_PLAIN, 0, 0
    if entry is getattr(hot, "launch_kernel_programmatic", None):
        return _KIND_PROGRAMMATIC, 0, 0
    if (isinstance(entry, functools.partial) and entry.func is getattr(hot, "launch_kernel_attrs", None)
            and len(entry.args) == 2 and not entry.keywords):
        return _KIND_ATTRIBUTES, int(entry.args[0]), int(entry.args[1])
    return None, 0, 0


_INT_CTYPES = {(VALUE_INT, 1): ctypes.c_int8, (VALUE_INT, 2): ctypes.c_int16, (VALUE_INT, 4): ctypes.c_int32,
               (VALUE_INT, 8): ctypes.c_int64, (VALUE_UINT, 1): ctypes.c_uint8, (VALUE_UINT, 2): ctypes.c_uint16,
               (VALUE_UINT, 4): ctypes.c_uint32, (VALUE_UINT, 8): ctypes.c_uint64}
_F32_MAX = 3.4028234663852886e38


def _value_overflow(index: int, value: Any, slot: str) -> None:
    raise OverflowError(f"bound launch: value {index} = {value!r} does not fit {slot}")


def _real(index: int, v: Any) -> float:
    # As the C extension's PyFloat_AsDouble: a real number (float, int, __float__), never a string.
    if isinstance(v, (str, bytes, bytearray)):
        raise TypeError(f"bound launch: value {index} must be a real number, not {type(v).__name__}")
    return float(v)


def _f32(index: int, x: float) -> float:
    # A finite value beyond f32's largest may still round to it; one that rounds to infinity is refused
    # (as struct.pack("f") and the C extension refuse it), never stored as inf.
    import struct

    try:
        struct.pack("<f", x)
    except OverflowError:
        _value_overflow(index, x, "a 32-bit float slot")
    return x


def _python_bound_launch(entry: Any, config: Any, function: int, dims: tuple[int, ...], storage: Any,
                         params_address: int, owner: int, slots: tuple[tuple[int, int, int], ...]) -> Any:
    """The bound launcher in Python (see :func:`bind_launch`), generated as straight-line code for its
    slots: each value converted and checked into a local first, then stored through a ctypes view of its
    slot, then the entry point called with the dimensions as constants. The ctypes fallback's entry is
    called raw (its dimensions were checked at bind time)."""
    import operator

    ns: dict[str, Any] = {"_ident": threading.get_ident, "_owner": owner, "_cfg": [config], "_index": operator.index,
                          "_real": _real, "_f32": _f32, "_overflow": _value_overflow, "_params": params_address,
                          "_fn": function, "_entry": entry, "_raw": getattr(entry, "raw", None),
                          "_OTHER": BOUND_OTHER_THREAD, "_NEW": BOUND_NEW_CONFIG}
    names = [f"v{i}" for i in range(len(slots))]
    convert: list[str] = []
    store: list[str] = []
    for i, (offset, kind, size) in enumerate(slots):
        v = names[i]
        if kind in (VALUE_INT, VALUE_UINT):
            ctype: Any = _INT_CTYPES[(kind, size)]
            lo, hi = ((-(1 << (8 * size - 1)), (1 << (8 * size - 1)) - 1) if kind == VALUE_INT
                      else (0, (1 << (8 * size)) - 1))
            convert += [f"    {v} = _index({v})", f"    if not {lo} <= {v} <= {hi}:",
                        f"        _overflow({i}, {v}, 'a {8 * size}-bit {'signed' if kind == VALUE_INT else 'unsigned'} slot')"]
            store.append(f"    _s{i}.value = {v}")
        elif kind in (VALUE_F32, VALUE_F64):
            ctype = ctypes.c_float if kind == VALUE_F32 else ctypes.c_double
            convert.append(f"    {v} = {v} if {v}.__class__ is float else _real({i}, {v})")
            if kind == VALUE_F32:
                convert += [f"    if not -{_F32_MAX!r} <= {v} <= {_F32_MAX!r}:", f"        _f32({i}, {v})"]
            store.append(f"    _s{i}.value = {v}")
        elif kind == VALUE_BYTES:
            ctype = ctypes.c_char * size
            convert += [f"    if {v}.__class__ is not bytes or len({v}) != {size}:",
                        f"        raise ValueError('bound launch: value {i} must be {size} bytes')"]
            store.append(f"    _s{i}.raw = {v}")
        else:
            raise ValueError(f"bind_launch: unknown slot kind {kind}")
        ns[f"_s{i}"] = ctype.from_buffer(storage, offset)
    dim_text = ", ".join(str(int(d)) for d in dims)
    call = (f"_raw(_fn, {dim_text}, stream, _params, None)" if ns["_raw"] is not None
            else f"_entry(_fn, {dim_text}, stream, _params)")
    body = ["    if _ident() != _owner:", "        return _OTHER", "    if config is not _cfg[0]:", "        return _NEW",
            *convert, *store, f"    return {call}"]
    src = f"def bound(config, stream{''.join(', ' + n for n in names)}):\n" + "\n".join(body) + "\n"
    exec(compile(src, "<mircuda bound launcher>", "exec"), ns)
    bound = ns["bound"]

    def rebind(new_config: Any) -> None:
        ns["_cfg"][0] = new_config

    bound.__mircuda_source__ = src
    bound.rebind = rebind
    return bound


_DIM_NAMES = ("gx", "gy", "gz", "bx", "by", "bz", "shared_bytes")


def _check_u32(name: str, *dims: int) -> None:
    # ctypes wraps c_uint silently (-1 -> 4294967295, 2**32 + 1 -> 1); the C extension refuses both.
    for dim_name, d in zip(_DIM_NAMES, dims):
        if isinstance(d, int) and not 0 <= d <= 0xFFFFFFFF:
            raise OverflowError(f"{name}: {dim_name} = {d} does not fit the driver's 32-bit unsigned int")


class _LaunchAttribute(ctypes.Structure):
    # CUlaunchAttribute (cuda.h, CUDA >= 12): a 4-byte id, padding to 8, a 64-byte value union.
    _fields_ = [("id", ctypes.c_uint), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int),
                ("value_rest", ctypes.c_char * 60)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("dims", ctypes.c_uint * 7), ("stream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION


def _programmatic_ctypes(pfn_launch_ex: int) -> Any:
    vp = ctypes.c_void_p
    raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.POINTER(_LaunchConfig), vp, vp, vp)(pfn_launch_ex)

    def launch(f: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, smem: int, stream: int,
               params: int) -> int:
        _check_u32("launch_kernel_programmatic", gx, gy, gz, bx, by, bz, smem)
        attr = _LaunchAttribute(_PROGRAMMATIC_STREAM_SERIALIZATION, b"", 1)
        config = _LaunchConfig((ctypes.c_uint * 7)(gx, gy, gz, bx, by, bz, smem), stream, ctypes.pointer(attr), 1)
        return raw(ctypes.byref(config), f, params, None)

    return launch


LAUNCH_ATTRIBUTE_SIZE = 72
"""``sizeof(CUlaunchAttribute)`` in cuda.h (CUDA >= 12): a 4-byte id, 4 bytes of padding, a 64-byte union."""


def launch_attribute_array(attributes: list[tuple[int, tuple[int, ...]]]) -> Any:
    """A ``CUlaunchAttribute[]`` in cuda.h's layout: for each ``(id, values)``, the id and the values as
    consecutive 32-bit ints at the start of the value union (``cooperative``: one int;
    ``clusterDim``: x, y, z; ``programmaticStreamSerializationAllowed``: one int). Returns the ctypes
    buffer; ``ctypes.addressof`` of it is what :data:`launch_kernel_attributes` takes."""
    import struct

    buffer = (ctypes.c_char * max(LAUNCH_ATTRIBUTE_SIZE * len(attributes), 1))()
    for i, (attribute_id, values) in enumerate(attributes):
        struct.pack_into(f"<I4x{len(values)}I", buffer, i * LAUNCH_ATTRIBUTE_SIZE, attribute_id, *values)
    return buffer


def _attributes_ctypes(pfn_launch_ex: int) -> Any:
    vp = ctypes.c_void_p
    raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.POINTER(_LaunchConfig), vp, vp, vp)(pfn_launch_ex)

    def launch(attrs: int, count: int, f: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, smem: int,
               stream: int, params: int) -> int:
        _check_u32("launch_kernel_attrs", gx, gy, gz, bx, by, bz, smem)
        config = _LaunchConfig((ctypes.c_uint * 7)(gx, gy, gz, bx, by, bz, smem), stream,
                               ctypes.cast(attrs, ctypes.POINTER(_LaunchAttribute)), count)
        return raw(ctypes.byref(config), f, params, None)

    return launch


# ---------------------------------------------------------------------------------------------
# Peer access between devices (several GPUs of one host).

CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704


def can_access_peer(device: Any, peer: Any) -> bool:
    """Whether ``device`` (a ``CUdevice``) may access ``peer``'s memory directly
    (``cuDeviceCanAccessPeer``: NVLink or PCIe peer-to-peer)."""
    return int(call("cuDeviceCanAccessPeer", device, peer)) != 0


def enable_peer_access(peer_context: Any) -> bool:
    """Let the current context access ``peer_context``'s allocations (``cuCtxEnablePeerAccess``, flags
    0). Returns False when it was already enabled (``CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED``), True
    when this call enabled it.

    Raises:
        CudaError: any other refusal (e.g. ``CUDA_ERROR_PEER_ACCESS_UNSUPPORTED``, ``CUDA_ERROR_TOO_MANY_PEERS``).
    """
    code, _ = call_status("cuCtxEnablePeerAccess", peer_context, 0)
    if code == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
        return False
    if code:
        raise_result(code, "cuCtxEnablePeerAccess")
    return True


def pool_set_access(pool: Any, ordinal: int, read_write: bool) -> None:
    """Give device ``ordinal`` read-write access to ``pool``'s allocations (``read_write=False``: take
    it away) through ``cuMemPoolSetAccess`` with one ``CUmemAccessDesc``. Pools take
    ``CU_MEM_ACCESS_FLAGS_PROT_READWRITE`` or ``CU_MEM_ACCESS_FLAGS_PROT_NONE`` (no read-only mode)."""
    drv = driver()
    desc = drv.CUmemAccessDesc()
    desc.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    desc.location.id = int(ordinal)
    desc.flags = (drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE if read_write
                  else drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_NONE)
    call("cuMemPoolSetAccess", pool, [desc], 1)


def pool_get_access(pool: Any, ordinal: int) -> int:
    """The ``CUmemAccess_flags`` of device ``ordinal`` on ``pool`` (``cuMemPoolGetAccess``) as an int:
    0 none, 3 read-write."""
    drv = driver()
    location = drv.CUmemLocation()
    location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    location.id = int(ordinal)
    return int(call("cuMemPoolGetAccess", pool, location))
