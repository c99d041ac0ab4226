"""Launch ABIs: how a contract's arguments become a kernel's parameter block, and the launch function
mircuda generates for each typed kernel.

How one launch goes
-------------------
At bind time (``Module.kernel(contract)``) the kernel's :class:`LaunchAbi` (``"c"`` for NVRTC kernels,
``"numba..."`` for Numba kernels, see ``LAUNCH_ABIS``) first compares the contract with the compiled
function's parameter list (``cuFuncGetParamInfo``), then lays out the parameter block: one ctypes
buffer holding every ABI value at its C ABI offset plus the ``void*`` array pointing into it
(:class:`~mircuda.launch.ArgumentBlock`), built once. Then :func:`generate_launch` writes the
launch function for this contract as Python source, straight-line code with one branch per argument,
and compiles it (:func:`compile_function`). ``TypedKernel.launch_source()`` returns that source.

Each call of the generated function then

1. refuses extra or unknown arguments (:func:`arity_error`);
2. checks the stream by identity (a :class:`~mircuda.Stream`, open, of the kernel's context);
3. checks each argument and takes its C ABI value: a fast test (exact class, dtype and context by
   identity, a live address; for scalars, the exact Python type within range) gives the address or
   the value as it is, else a slow path (:func:`buffer_argument`, :func:`scalar_argument`,
   :func:`struct_argument`) converts the value or raises :class:`~mircuda.ContractError` naming the
   parameter (:func:`emit_c_values`);
4. calls the *bound launcher* ``_L(config, stream handle, value, ...)`` (:func:`mircuda._cuda.bind_launch`,
   one per config, parameter block and thread). It answers a call from another thread than the
   block's owner (the call is handed to that thread's own launch function: every thread writes its
   own block, generated on its first launch, so concurrent launches never mix arguments) and a config
   other than the one it was bound to (a new :class:`~mircuda.LaunchConfig` is checked against the
   device's and the function's limits once, then bound; an equal config object takes the launcher
   made for the first one) without writing anything. Otherwise it converts every value (refusing,
   never truncating, one that does not fit its slot), writes them into the block at their C ABI
   offsets and calls ``cuLaunchKernel`` (``cuLaunchKernelEx`` for programmatic stream serialization,
   cooperative or cluster launches, with the attribute array bound) with the function handle,
   dimensions, stream and the block's ``void**``. Nothing is enqueued before every argument is
   written. The entry point is the one ``cuGetProcAddress`` returned; the launcher is the
   stable-ABI C extension ``mircuda._hotpath``'s (one C call per launch,
   benchmarks/launch_python_cost.py measures each piece), or where the extension was not built a
   Python function that does the same through a ctypes wrapper (about 2 us more per launch on an
   H200 host). See ``mircuda._cuda``. The driver copies the parameters during the call, so the block
   is free for the next launch at once;
5. turns a non-zero ``CUresult`` into :class:`~mircuda.CudaError` naming the entry point called; an
   ``CUDA_ERROR_INVALID_CONTEXT`` (201) first makes the kernel's context current and tries once more
   (a refused launch enqueued nothing).

A launch ABI without ``emit_values`` (Numba's) writes the slots in the launch function itself, one
ctypes store each (``emit_writes``), after testing the thread and binding a new config first (so a
refused config writes nothing); it calls the bound launcher with no values.

Another compiler's kernels get their own ABI: register a :class:`LaunchAbi` in ``LAUNCH_ABIS`` whose
``emit_writes`` writes that compiler's parameter layout; the public helpers here (``emit_c_writes``
for C-ABI scalars, ``buffer_argument``, ``parameter_sizes``, ``compile_function``...) are the pieces
it reuses (``mircuda.numba_ext`` registers Numba's this way).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _cuda
from ..errors import ContractError
from ..memory import DeviceBuffer, check_device_buffer
from ..runtime import Stream
from ._config import LaunchConfig
from ._contract import KernelContract, Param
from ._pack import SCALAR_CTYPES, ArgumentBlock, SlotCType, scalar_converter
from ._struct import struct_converter

__all__ = [
    "LAUNCH_ABIS", "MISSING", "LaunchAbi", "ArgumentPacker", "arity_error", "buffer_argument", "c_slots",
    "compile_function", "emit_c_values", "emit_c_writes", "generate_launch", "parameter_sizes", "scalar_argument",
    "parameter_layout", "struct_argument", "value_slots", "verify_c_parameters",
]


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""The default of every parameter of a generated function: the argument was not passed."""


def compile_function(name: str, signature: str, body: list[str], ns: dict[str, Any]) -> Any:
    """Compile ``def name(signature):`` with the lines ``body`` (each indented by four spaces) in the
    namespace ``ns`` and return the function; its source is kept as ``fn.__mircuda_source__``."""
    src = f"def {name}({signature}):\n" + "\n".join(body) + "\n"
    exec(compile(src, f"<mircuda {name}>", "exec"), ns)
    fn = ns[name]
    fn.__mircuda_source__ = src
    return fn


def arity_error(contract: KernelContract) -> Callable[[tuple[Any, ...], dict[str, Any]], None]:
    """The function a generated launch calls with its ``*extra`` and ``**unknown`` arguments when
    either is non-empty: it raises :class:`ContractError` naming what was declared."""
    def raise_arity(extra: tuple[Any, ...], unknown: dict[str, Any]) -> None:
        declared = f"{len(contract.params)} arguments ({', '.join(contract.names)})"
        if extra:
            raise ContractError("arguments", declared, f"{len(extra)} more positional argument(s)")
        name = next(iter(unknown))
        raise ContractError(name, f"one of the declared parameters {', '.join(contract.names) or '(none)'}",
                            f"an unknown keyword argument {name!r}")
    return raise_arity


def _missing(p: Param) -> ContractError:
    return ContractError(p.name, p.describe(), "nothing (the argument is missing)")


def scalar_argument(p: Param) -> Callable[[Any], Any]:
    """The slow path of scalar parameter ``p``: its slot value (C ABI) from any accepted argument.

    Raises (from the returned function):
        ContractError: the argument is missing, of a refused type or out of range (see
            :func:`~mircuda.launch._pack.scalar_converter`).
    """
    conv = scalar_converter(p)

    def checked(v: Any) -> Any:
        if v is MISSING:
            raise _missing(p)
        return conv(v)
    return checked


def buffer_argument(p: Param, context: Any) -> Callable[[Any], int]:
    """The slow path of buffer parameter ``p``: the device address of a live ``DeviceBuffer`` of the
    parameter's dtype in ``context`` (0 for an empty buffer: a valid, never dereferenced argument).

    Raises (from the returned function):
        ContractError: the argument is missing, not a DeviceBuffer (host arrays get a staging hint), of
            another dtype or of another context.
        UseAfterFree: the buffer was freed.
    """
    def slow(v: Any) -> int:
        if v is MISSING:
            raise _missing(p)
        return check_device_buffer(p.name, v, context, p.info)._ptr
    return slow


def struct_argument(p: Param, context: Any) -> Callable[[Any], bytes]:
    """The conversion of struct parameter ``p``'s argument to its bytes (C layout).

    Raises (from the returned function):
        ContractError: the argument is missing or does not fit the struct (the field is named);
            UseAfterFree for a freed buffer in it.
    """
    conv = struct_converter(p.name, p.struct, context)

    def checked(v: Any) -> bytes:
        if v is MISSING:
            raise _missing(p)
        return conv(v)
    return checked


def c_slots(contract: KernelContract) -> list[tuple[str, SlotCType]]:
    """The C ABI's ``(label, ctype)`` slots of a contract: a 64-bit address per buffer, each scalar in
    its own C type (:data:`~mircuda.launch.SCALAR_CTYPES`), each struct or vector type as its bytes
    at its alignment."""
    return [(p.name, ctypes.c_uint64 if p.kind == "buffer" else p.struct.ctype() if p.kind == "struct"
             else SCALAR_CTYPES[p.info.name]) for p in contract.params]


_FAST_SCALAR = {
    # A Python float within f32's finite range packs exactly as C's double-to-float conversion rounds;
    # others (inf, nan, overflow) take the slow path, which refuses finite overflow.
    "f32": "{a}.__class__ is float and -3.4028234663852886e38 <= {a} <= 3.4028234663852886e38",
    "f64": "{a}.__class__ is float",
    "bool": "{a}.__class__ is bool",
}


def _int_bounds(p: Param) -> tuple[int, int]:
    ii = np.iinfo(p.info.dtype)
    return int(ii.min), int(ii.max)


def emit_c_writes(contract: KernelContract, ns: dict[str, Any], context: Any, block: Any) -> list[str]:
    """Source lines that check each argument of ``contract`` and write it into ``block.slots`` as the C
    ABI lays it out (one slot per parameter, in order); the names they use are added to ``ns``.

    The checks are :func:`emit_c_values`'s (one source of the fast-path tests): a buffer takes the fast
    path when it is exactly a ``DeviceBuffer`` of the declared dtype and of ``context`` with a non-zero
    address; a scalar when it is exactly the Python type its slot takes, within range. Anything else goes
    through :func:`buffer_argument` / :func:`scalar_argument`. Each value is then stored into its slot's
    ctypes view (a struct's bytes into ``.raw``).
    """
    lines, values = emit_c_values(contract, ns, context, block)
    for i, (p, value) in enumerate(zip(contract.params, values)):
        ns[f"_s{i}"] = block.slots[i].view
        lines.append(f"    _s{i}.{'raw' if p.kind == 'struct' else 'value'} = {value}")
    return lines


def emit_c_values(contract: KernelContract, ns: dict[str, Any], context: Any,
                  block: Any) -> tuple[list[str], list[str]]:
    """Source lines that check each argument of ``contract`` and leave its C ABI value in the local
    ``_a<i>``, and the list of those locals, one per slot of ``block`` in order: the bound launcher
    (:func:`mircuda._cuda.bind_launch`) writes them into the block. The tests are
    :func:`emit_c_writes`'s (a buffer's address, a scalar as it is when its exact type is within range,
    else the slow path's value; a struct's bytes); the names they use are added to ``ns``."""
    ns["_DB"] = DeviceBuffer
    ns["_ctx"] = context
    lines: list[str] = []
    for i, p in enumerate(contract.params):
        a = p.name
        if p.kind == "struct":
            ns[f"_v{i}"] = struct_argument(p, context)
            lines.append(f"    _a{i} = _v{i}({a})")
            continue
        if p.kind == "buffer":
            ns[f"_t{i}"] = p.info.scalar_type
            ns[f"_b{i}"] = buffer_argument(p, context)
            cond, fast, slow = (f"{a}.__class__ is _DB and {a}._scalar is _t{i} and {a}._context is _ctx and {a}._ptr",
                                f"{a}._ptr", f"_b{i}({a})")
        else:
            ns[f"_v{i}"] = scalar_argument(p)
            cond, fast, slow = _scalar_fast_test(p), a, f"_v{i}({a})"
        lines += [f"    if {cond}:", f"        _a{i} = {fast}", "    else:", f"        _a{i} = {slow}"]
    return lines, [f"_a{i}" for i in range(len(contract.params))]


def _scalar_fast_test(p: Param) -> str:
    if p.info.name in _FAST_SCALAR:
        return _FAST_SCALAR[p.info.name].format(a=p.name)
    if p.info.kind in ("int", "uint"):
        lo, hi = _int_bounds(p)
        return f"{p.name}.__class__ is int and {lo} <= {p.name} <= {hi}"
    return "False"


_VALUE_KINDS = {"b": _cuda.VALUE_INT, "h": _cuda.VALUE_INT, "i": _cuda.VALUE_INT, "l": _cuda.VALUE_INT,
                "q": _cuda.VALUE_INT, "B": _cuda.VALUE_UINT, "H": _cuda.VALUE_UINT, "I": _cuda.VALUE_UINT,
                "L": _cuda.VALUE_UINT, "Q": _cuda.VALUE_UINT, "f": _cuda.VALUE_F32, "d": _cuda.VALUE_F64}


def value_slots(block: ArgumentBlock) -> tuple[tuple[int, int, int], ...]:
    """The ``(offset, kind, size)`` of each slot of ``block`` as :func:`mircuda._cuda.bind_launch` takes
    them: ctypes integers by sign and size, ``c_float``/``c_double``, and byte arrays (structs) as bytes.

    Raises:
        ContractError: a slot of another ctypes type (no ABI registered here makes one)."""
    out = []
    for slot in block.slots:
        code = getattr(type(slot.view), "_type_", None)
        if isinstance(code, str) and code in _VALUE_KINDS:
            out.append((slot.offset, _VALUE_KINDS[code], slot.size))
        elif isinstance(slot.view, ctypes.Array) and code is ctypes.c_char:
            out.append((slot.offset, _cuda.VALUE_BYTES, slot.size))
        else:
            raise ContractError(slot.label, "a slot of a ctypes integer, float, double or char array",
                                type(slot.view).__name__)
    return tuple(out)


def parameter_sizes(cu_function: Any) -> list[int] | None:
    """The compiled kernel's parameter sizes in bytes, in order (``cuFuncGetParamInfo``, CUDA 12.4+);
    None where the driver cannot say."""
    layout = parameter_layout(cu_function)
    return None if layout is None else [size for _, size in layout]


def parameter_layout(cu_function: Any) -> list[tuple[int, int]] | None:
    """The compiled kernel's ``(offset, size)`` of each parameter in bytes, in order
    (``cuFuncGetParamInfo``, CUDA 12.4+); None where the driver cannot say."""
    drv = _cuda.driver()
    if not hasattr(drv, "cuFuncGetParamInfo"):
        return None
    layout: list[tuple[int, int]] = []
    while len(layout) < 4096:  # the driver answers CUDA_ERROR_INVALID_VALUE past the last parameter
        code, out = _cuda.call_status("cuFuncGetParamInfo", cu_function, len(layout))
        if code:
            if not layout and code == 801:  # CUDA_ERROR_NOT_SUPPORTED
                return None
            break
        layout.append((int(out[0]), int(out[1])))
    return layout


def verify_c_parameters(contract: KernelContract, cu_function: Any) -> None:
    """Compare the contract with the compiled kernel's parameter list (``cuFuncGetParamInfo``).

    Catches a contract with too many or too few parameters, or one whose sizes differ from the
    kernel's (e.g. ``f64`` declared for a ``float``), at bind time instead of as garbage at run time.

    Raises:
        ContractError: naming the first parameter that does not match.
    """
    block = ArgumentBlock(c_slots(contract))
    layout = parameter_layout(cu_function)
    if layout is None:
        return
    if len(layout) != len(block.slots):
        raise ContractError("contract", f"{len(layout)} parameters, as kernel {contract.symbol!r} has",
                            f"{len(block.slots)} parameters ({', '.join(contract.names)})")
    for p, slot, (offset, size) in zip(contract.params, block.slots, layout):
        if slot.size != size:
            raise ContractError(p.name, f"a parameter of {size} bytes (kernel {contract.symbol!r})",
                                f"{p.describe()} of {slot.size} bytes")
        if slot.offset != offset:  # same sizes, another alignment: e.g. a struct declared without __align__
            raise ContractError(p.name, f"a parameter at offset {offset} (kernel {contract.symbol!r})",
                                f"{p.describe()} at offset {slot.offset}",
                                "the contract's alignment differs from the kernel's: check the struct's alignment")


@dataclass(frozen=True)
class LaunchAbi:
    """How one family of compiled kernels takes its parameters.

    Attributes:
        name: ``"c"`` for NVRTC kernels; other compilers register their own (e.g. ``"numba"``).
        slots: ``slots(contract)``, the ``(label, ctype)`` list of ABI values for a contract, in order.
        emit_writes: ``emit_writes(contract, ns, context, block)``, the checking and slot-writing
            source lines of the launch function (as :func:`emit_c_writes`); argument packers use it.
        verify: ``verify(contract, cu_function)``, checks a contract against the loaded function at
            bind time (raises ContractError).
        emit_values: optional, ``emit_values(contract, ns, context, block) -> (lines, values)`` as
            :func:`emit_c_values`: checking lines that leave one value per slot of the block in a
            local, for the bound launcher to write. Without it the launch function writes the slots
            itself with ``emit_writes`` (one ctypes store each) after its own thread test.
    """

    name: str
    slots: Any
    emit_writes: Any
    verify: Any
    emit_values: Any = None


LAUNCH_ABIS: dict[str, LaunchAbi] = {"c": LaunchAbi("c", c_slots, emit_c_writes, verify_c_parameters, emit_c_values)}
"""Registered launch ABIs by name; add an entry to launch kernels of another compiler."""


def _launcher_for(config: Any) -> Any:
    """The hot-path entry point of ``config``: ``cuLaunchKernel``; ``cuLaunchKernelEx`` with
    programmatic stream serialization; or, for a cooperative or cluster launch, ``cuLaunchKernelEx``
    with the config's attribute list bound (:func:`~mircuda.launch._kinds.attribute_launcher`). All
    take the same ten arguments."""
    if config.cooperative or config.cluster is not None:
        from ._kinds import attribute_launcher

        return attribute_launcher(config)
    return _cuda.launch_kernel_programmatic if config.programmatic_stream_serialization else _cuda.launch_kernel


def generate_launch(abi: LaunchAbi, contract: KernelContract, context: Any, function: int, owner: int, *,
                    config_dims: Callable[[Any], tuple[int, ...]],
                    bad_stream: Callable[[Any], None], raise_launch: Callable[[int, Any], None],
                    other_thread: Callable[..., None]) -> Any:
    """Generate the launch function of one typed kernel for the thread ``owner`` (steps 1-6 of the
    module documentation), with its own parameter block (``fn.__mircuda_block__``).

    Args:
        abi: the kernel's launch ABI.
        contract: its contract; the function takes ``(stream, config, *params)`` by position or name.
        context: the kernel's :class:`~mircuda.Context`.
        function: the ``CUfunction`` as an int.
        owner: the thread (``threading.get_ident()``) this function and its block belong to.
        config_dims: checks a new config and returns ``(gx, gy, gz, bx, by, bz, shared_bytes)``.
        bad_stream: raises the error for a stream that missed the identity test.
        raise_launch: ``raise_launch(CUresult, config)`` raises the driver's refusal.
        other_thread: called with ``(stream, config, *params)`` from any thread but ``owner``.
    """
    block = ArgumentBlock(abi.slots(contract))
    names = [p.name for p in contract.params]
    values: list[str] = []
    writes: list[str] = []
    ns: dict[str, Any] = {
        "_M": MISSING, "_Stream": Stream, "_ch": context.handle, "_mk": _cuda.make_current, "_raise": raise_launch,
        "_bad_stream": bad_stream, "_ident": threading.get_ident, "_owner": owner, "_other": other_thread,
        "_OTHER_THREAD": _cuda.BOUND_OTHER_THREAD, "_NEW_CONFIG": _cuda.BOUND_NEW_CONFIG,
    }
    if abi.emit_values is not None and len(block.slots) <= _cuda.BOUND_MAX_VALUES:
        writes, values = abi.emit_values(contract, ns, context, block)
    else:
        writes = abi.emit_writes(contract, ns, context, block)
    slots = value_slots(block) if values else ()
    bound: dict[LaunchConfig, tuple[Any, Any]] = {}

    def bind(config: Any) -> Any:
        # The launcher of (function, config, block, owner): a config equal to one seen before takes that
        # config's launcher, rebound to this object; a new one is checked first (LaunchConfigError).
        seen = bound.get(config) if config.__class__ is LaunchConfig else None
        if seen is not None:
            seen[1](config)
            return seen[0]
        dims = config_dims(config)
        launcher = _cuda.bind_launch(_launcher_for(config), config, function, dims, block.storage,
                                     block.params_address, owner, slots, keep=block)
        if len(bound) >= _BOUND_CONFIGS:  # a kernel launched with ever new shapes keeps the last few hundred
            bound.clear()
        bound[config] = (launcher, _cuda.rebinder(launcher))
        return launcher

    ns["_bind"] = bind
    ns["_L"] = _unbound(owner)
    sig = ", ".join(["stream", "config"] + [f"{n}=_M" for n in names] + ["*_extra", "**_unknown"])
    call_args = ", ".join(["stream", "config"] + names)
    ns["_arity"] = arity_error(contract)
    body = [
        "    global _L" + ("" if values or not writes else ", _last"),
        "    if _extra or _unknown:",
        "        _arity(_extra, _unknown)",
    ]
    if not values:  # the function writes the block itself: only its owner thread may
        body += [
            "    if _ident() != _owner:",
            f"        return _other({call_args})",
        ]
    body.append("    if stream.__class__ is not _Stream or stream._context is not _ctx or not stream._handle:")
    body.append("        _bad_stream(stream)")
    if not values and writes:
        # The config is bound before the writes, so that a refused config leaves the block as it was
        # (the launcher's own config test cannot: it runs after the writes). A kernel without
        # parameters writes nothing: its launcher alone tests the config.
        ns["_last"] = None
        body += [
            "    if config is not _last:",
            "        _L = _bind(config)",
            "        _last = config",
        ]
    body += writes
    # One C call per launch: the bound launcher _L tests the thread and the config by identity, writes
    # the values into this thread's block and calls the driver (benchmarks/launch_python_cost.py
    # measures what each piece costs). The config is checked once, when _L is bound to it.
    # No per-launch cuCtxSetCurrent: cuLaunchKernel runs a CUfunction in its module's context
    # whatever context is current (seen on the H200 host, driver 580: from a thread with no
    # current context and with another context current). Should a driver answer
    # CUDA_ERROR_INVALID_CONTEXT, the context is made current and the launch tried once more:
    # a refused launch enqueued nothing.
    # Every local of the function starts with '_' (the result too): parameter names never do, so no
    # argument is shadowed before the hand-over to another thread passes them on.
    hot = "_L(" + ", ".join(["config", "stream._handle"] + values) + ")"
    body += [
        f"    _r = {hot}",
        "    if _r:",
        "        if _r == _OTHER_THREAD:",
        f"            return _other({call_args})",
        "        if _r == _NEW_CONFIG:",
        "            _L = _bind(config)",
        f"            _r = {hot}",
        "        if _r == 201:",
        "            _mk(_ch)",
        f"            _r = {hot}",
        "        if _r:",
        "            _raise(_r, config)",
    ]
    fn = compile_function("launch", sig, body, ns)
    fn.__doc__ = f"Launch {contract!r} on a stream (see TypedKernel)."
    fn.__mircuda_block__ = block
    return fn


_BOUND_CONFIGS = 256
"""The most configs whose launchers one launch function keeps for reuse."""


def _unbound(owner: int) -> Callable[..., int]:
    """The launcher of a function before its first config: asks for one (or for the owner thread)."""
    def unbound(config: Any, stream: Any, *values: Any) -> int:
        return _cuda.BOUND_OTHER_THREAD if threading.get_ident() != owner else _cuda.BOUND_NEW_CONFIG
    return unbound


class ArgumentPacker:
    """Checks arguments against a contract and writes them into a parameter block, without launching.

    ``pack(*args)`` returns the packed bytes, exactly as a launch would hand them to the driver
    (``block.params_address`` is the matching ``void**``); graph-node updates use it, and tools and
    tests that inspect launches. ``abi`` names the registered launch ABI (``LAUNCH_ABIS``). One packer
    owns one block: it is not meant to be shared between threads (a launch gives each thread its own).

    Raises (from the constructor):
        ContractError: ``contract`` is not a KernelContract, or ``abi`` is not registered.
    """

    def __init__(self, contract: KernelContract, context: Any, abi: str = "c") -> None:
        if not isinstance(contract, KernelContract):
            raise ContractError("contract", "a KernelContract from mc.cuda_export(...)", type(contract).__name__)
        if abi not in LAUNCH_ABIS:
            raise ContractError("abi", f"one of {', '.join(LAUNCH_ABIS)}", repr(abi))
        impl = LAUNCH_ABIS[abi]
        self.contract = contract
        self.block = ArgumentBlock(impl.slots(contract))
        ns: dict[str, Any] = {}
        sig = ", ".join([f"{p.name}=_M" for p in contract.params] + ["*_extra", "**_unknown"])
        ns["_M"] = MISSING
        ns["_arity"] = arity_error(contract)
        body = ["    if _extra or _unknown:", "        _arity(_extra, _unknown)"]
        body += impl.emit_writes(contract, ns, context, self.block) + ["    return _blk.packed_bytes()"]
        ns["_blk"] = self.block
        # The generated pack function replaces the documented method on each instance.
        self.pack = compile_function("pack", sig, body, ns)  # type: ignore[method-assign]

    def pack(self, *args: Any, **kwargs: Any) -> bytes:  # pragma: no cover - replaced per instance
        """Check the arguments as a launch would and return the packed parameter block (bytes)."""
        raise NotImplementedError
