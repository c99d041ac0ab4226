"""Typed kernels: a loaded function bound to its contract, with a generated launch path.

For each kernel mircuda generates (once, at bind time) a Python function specialized to its contract:
straight-line checks that each argument has the declared type, dtype and context, writes of each
value into the kernel's pre-built parameter block, and one ``cuLaunchKernel`` through ctypes. Any
argument that misses the fast checks takes a slow path that either converts it (a numpy scalar, an
int for a float) or raises :class:`ContractError` naming the parameter; nothing is enqueued then.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _cuda, _repr
from ..errors import ClosedResourceError, ContractError, LaunchConfigError, UseAfterFree
from ._config import LaunchConfig
from ._contract import KernelContract, Param
from ._pack import SCALAR_CTYPES, ArgumentBlock, scalar_converter

if TYPE_CHECKING:
    from ..compile import Module
    from ..graph import KernelNode
    from ..runtime import Context

__all__ = ["TypedKernel", "FunctionAttributes", "ArgumentPacker"]

_MISSING = object()


@dataclass(frozen=True)
class FunctionAttributes:
    """Compiled resource usage of one kernel (``cuFuncGetAttribute``).

    Attributes:
        registers: registers per thread.
        static_shared_bytes: statically declared shared memory per block, bytes.
        local_bytes: local memory per thread, bytes (spills and local arrays).
        max_threads_per_block: the most threads per block this function can launch with.
        binary_version: the SASS version it was compiled for (``90`` for sm_90).
    """

    registers: int
    static_shared_bytes: int
    local_bytes: int
    max_threads_per_block: int
    binary_version: int

    _repr_html_ = _repr.dataclass_html  # a table in notebooks


def _c_slots(contract: KernelContract) -> list[tuple[str, type]]:
    import ctypes

    return [(p.name, ctypes.c_uint64 if p.kind == "buffer" else SCALAR_CTYPES[p.info.name])
            for p in contract.params]


_FAST_SCALAR = {
    # A Python float within f32's finite range packs exactly as C's double-to-float conversion rounds;
    # others (inf, nan, overflow) take the slow path, which refuses finite overflow.
    "f32": "{a}.__class__ is float and -3.4028234663852886e38 <= {a} <= 3.4028234663852886e38",
    "f64": "{a}.__class__ is float",
    "bool": "{a}.__class__ is bool",
}


def _emit_writes(contract: KernelContract, ns: dict[str, Any], context: Any, block: ArgumentBlock) -> list[str]:
    """Lines that check each argument and write it into its slot (C ABI)."""
    from ..memory import DeviceBuffer

    ns["_DB"] = DeviceBuffer
    ns["_ctx"] = context
    lines: list[str] = []
    for i, p in enumerate(contract.params):
        a = p.name
        ns[f"_s{i}"] = block.slots[i].view
        if p.kind == "buffer":
            ns[f"_t{i}"] = p.info.scalar_type
            ns[f"_b{i}"] = _buffer_slow_path(p, context)
            lines += [
                f"    if {a}.__class__ is _DB and {a}._scalar is _t{i} and {a}._context is _ctx and {a}._ptr:",
                f"        _s{i}.value = {a}._ptr",
                "    else:",
                f"        _s{i}.value = _b{i}({a})",
            ]
        else:
            ns[f"_v{i}"] = _missing_guard(p, scalar_converter(p))
            if p.info.name in _FAST_SCALAR:
                cond = _FAST_SCALAR[p.info.name].format(a=a)
            elif p.info.kind in ("int", "uint"):
                lo, hi = _int_bounds(p)
                cond = f"{a}.__class__ is int and {lo} <= {a} <= {hi}"
            else:
                cond = "False"
            lines += [
                f"    if {cond}:",
                f"        _s{i}.value = {a}",
                "    else:",
                f"        _s{i}.value = _v{i}({a})",
            ]
    return lines


def _int_bounds(p: Param) -> tuple[int, int]:
    import numpy as np

    ii = np.iinfo(p.info.dtype)
    return int(ii.min), int(ii.max)


def _arity_error(contract: KernelContract) -> Any:
    def raise_arity(extra: tuple[Any, ...], unknown: dict[str, Any]) -> None:
        declared = f"{len(contract.params)} arguments ({', '.join(contract.names)})"
        if extra:
            raise ContractError("arguments", declared, f"{len(extra)} more positional argument(s)")
        name = next(iter(unknown))
        raise ContractError(name, f"one of the declared parameters {', '.join(contract.names) or '(none)'}",
                            f"an unknown keyword argument {name!r}")
    return raise_arity


def _missing_guard(p: Param, conv: Any) -> Any:
    def checked(v: Any) -> Any:
        if v is _MISSING:
            raise ContractError(p.name, p.describe(), "nothing (the argument is missing)")
        return conv(v)
    return checked


def _buffer_slow_path(p: Param, context: Any) -> Any:
    from ..memory import DeviceBuffer

    expected = f"a DeviceBuffer[{p.info.name}]"

    def slow(v: Any) -> int:
        if v is _MISSING:
            raise ContractError(p.name, p.describe(), "nothing (the argument is missing)")
        if not isinstance(v, DeviceBuffer):
            hint = ""
            if hasattr(v, "__array_interface__") or hasattr(v, "__array__"):
                hint = "host arrays must be copied to a DeviceBuffer first (Stream.copy_to_device)"
            raise ContractError(p.name, expected, f"{type(v).__name__}", hint)
        if v._freed:
            raise UseAfterFree(f"argument {p.name!r}: {v!r} was freed")
        if v._scalar is not p.info.scalar_type:
            raise ContractError(p.name, expected, f"a DeviceBuffer[{v._info.name}]")
        if v._context is not context:
            raise ContractError(p.name, f"a buffer of {context!r}", f"a buffer of {v._context!r}")
        return v._ptr  # 0 for an empty buffer: a valid (never dereferenced) argument
    return slow


def _launcher_for(config: LaunchConfig) -> Any:
    """The hot-path entry point of ``config``: ``cuLaunchKernel``, or ``cuLaunchKernelEx`` with
    programmatic stream serialization (same arguments)."""
    return _cuda.launch_kernel_programmatic if config.programmatic_stream_serialization else _cuda.launch_kernel


def _compile_function(name: str, signature: str, body: list[str], ns: dict[str, Any]) -> Any:
    src = f"def {name}({signature}):\n" + "\n".join(body) + "\n"
    exec(compile(src, f"<mircuda {name}>", "exec"), ns)
    fn = ns[name]
    fn.__mircuda_source__ = src
    return fn


class ArgumentPacker:
    """Checks arguments against a contract and writes them into a parameter block, without launching.

    ``pack(*args)`` returns the packed bytes, exactly as a launch would hand them to the driver
    (``block.params_address`` is the matching ``void**``); graph-node updates use it, and tools and
    tests that inspect launches. ``abi`` names the registered launch ABI (``LAUNCH_ABIS``). One packer
    owns one block: it is not meant to be shared between threads (a launch gives each thread its own).
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
        ns["_M"] = _MISSING
        ns["_arity"] = _arity_error(contract)
        body = ["    if _extra or _unknown:", "        _arity(_extra, _unknown)"]
        body += impl.emit_writes(contract, ns, context, self.block) + ["    return _blk.packed_bytes()"]
        ns["_blk"] = self.block
        self.pack = _compile_function("pack", sig, body, ns)

    def pack(self, *args: Any, **kwargs: Any) -> bytes:  # pragma: no cover - replaced per instance
        """Check the arguments as a launch would and return the packed parameter block (bytes)."""
        raise NotImplementedError


class TypedKernel:
    """A kernel of a loaded module bound to its :class:`KernelContract`.

    ``launch(stream, config, *args)`` checks every argument against the contract, then enqueues the
    kernel on ``stream`` (asynchronous; nothing synchronizes). Arguments may also be passed by name.

    Raises (from ``launch``):
        ContractError: an argument, the stream or the config is of the wrong type, dtype or context.
        UseAfterFree: a buffer argument was freed.
        ClosedResourceError: the stream (or its context) was closed.
        LaunchConfigError: the config exceeds the device's or the function's limits.
        CudaError: the driver refused the launch.
    """

    def __init__(self, module: Module, contract: KernelContract, cu_function: Any, abi: str = "c") -> None:
        """Internal: obtain typed kernels with ``module.kernel(contract)``."""
        if abi not in LAUNCH_ABIS:
            raise ContractError("abi", f"one of {', '.join(LAUNCH_ABIS)}", repr(abi))
        self._abi = LAUNCH_ABIS[abi]
        self._module = module
        self._contract = contract
        self._context: Context = module.context
        self._cu = cu_function
        self._handle = int(cu_function)
        self._attributes = _read_attributes(cu_function)
        self._dynamic_smem_set = 48 * 1024
        self._checked: dict[LaunchConfig, tuple[int, ...]] = {}
        self._thread_launchers: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._abi.verify(contract, cu_function)
        self._owner = threading.get_ident()
        self.launch = self._generate(self._owner)
        _BY_FUNCTION.setdefault(self._handle, weakref.WeakSet()).add(self)

    def launch_captured(self, stream: Any, config: LaunchConfig, *args: Any, **kwargs: Any) -> KernelNode:
        """Launch like :meth:`launch` on a stream inside :meth:`Stream.capture`'s ``fn`` and return the
        exact :class:`KernelNode` the launch created, for :meth:`Graph.update_kernel`.

        The node is found on the capture's dependency frontier (``cuStreamGetCaptureInfo``) as the
        unique node launching this kernel's function, so one kernel may be captured many times, on
        several forked streams, without any assumption about order. The graph holds every buffer
        argument and this kernel's module.

        Raises:
            CaptureError: ``stream`` is not capturing through ``Stream.capture``, or the node cannot
                be told apart (never guessed).
            ContractError, UseAfterFree, LaunchConfigError, CudaError: as :meth:`launch`.
        """
        from ..graph._capture import launch_captured

        return launch_captured(self, stream, config, args, kwargs)

    def launch(self, stream: Any, config: LaunchConfig, *args: Any, **kwargs: Any) -> None:  # pragma: no cover
        """Check ``args`` against the contract and enqueue the kernel on ``stream`` (asynchronous).

        Arguments bind to the contract's parameters by position or by name. Buffers must be
        ``DeviceBuffer``s of the declared dtype and of this kernel's context, not freed. Scalars: an int
        parameter takes ``int``/numpy integers within its range (not ``bool``, not floats); a float
        parameter takes ``int``, ``float``, numpy and ml_dtypes scalars, rounded to nearest-even;
        finite values outside the type's range are refused, as are NaN/inf where the type has none
        (e4m3, e2m1); ``bool`` takes ``bool``/``numpy.bool_`` only.

        Raises:
            ContractError, UseAfterFree, ClosedResourceError, LaunchConfigError, CudaError: see the class.
        """
        # Replaced per instance, at bind time, by a function generated for the contract.
        raise NotImplementedError

    # -- the generated hot path ----------------------------------------------------------------
    def _generate(self, owner: int) -> Any:
        from ..runtime import Stream

        contract = self._contract
        block = ArgumentBlock(self._abi.slots(contract))
        ns: dict[str, Any] = {
            "_M": _MISSING, "_Stream": Stream, "_L": _cuda.launch_kernel, "_fn": self._handle,
            "_params": block.params_address, "_ch": self._context.handle,
            "_mk": _cuda.make_current, "_raise": self._raise_launch, "_bad_stream": self._bad_stream,
            "_config": self._config_dims, "_last": None, "_dims": None, "_ident": threading.get_ident,
            "_launcher": _launcher_for,
            "_owner": owner, "_other": self._launch_other_thread,
        }
        names = [p.name for p in contract.params]
        sig = ", ".join(["stream", "config"] + [f"{n}=_M" for n in names] + ["*_extra", "**_unknown"])
        call_args = ", ".join(["stream", "config"] + names)
        ns["_arity"] = _arity_error(contract)
        body = [
            "    global _last, _dims, _L",
            "    if _extra or _unknown:",
            "        _arity(_extra, _unknown)",
            "    if _ident() != _owner:",
            f"        return _other({call_args})",
            "    if stream.__class__ is not _Stream or stream._context is not _ctx or not stream._handle:",
            "        _bad_stream(stream)",
            "    if config is not _last:",
            "        _dims = _config(config)",
            "        _L = _launcher(config)",
            "        _last = config",
        ]
        body += self._abi.emit_writes(contract, ns, self._context, block)
        # No per-launch cuCtxSetCurrent: cuLaunchKernel runs a CUfunction in its module's context
        # whatever context is current (seen on the H200 host, driver 580: from a thread with no
        # current context and with another context current). Should a driver answer
        # CUDA_ERROR_INVALID_CONTEXT, the context is made current and the launch tried once more:
        # a refused launch enqueued nothing.
        body += [
            "    r = _L(_fn, *_dims, stream._handle, _params)",
            "    if r:",
            "        if r == 201:",
            "            _mk(_ch)",
            "            r = _L(_fn, *_dims, stream._handle, _params)",
            "        if r:",
            "            _raise(r, config)",
        ]
        fn = _compile_function("launch", sig, body, ns)
        fn.__doc__ = f"Launch {contract!r} on a stream (see TypedKernel)."
        fn.__mircuda_block__ = block
        return fn

    def _launch_other_thread(self, stream: Any, config: Any, *args: Any) -> None:
        # Each thread writes its own parameter block, so concurrent launches never mix arguments.
        ident = threading.get_ident()
        fn = self._thread_launchers.get(ident)
        if fn is None:
            with self._lock:
                fn = self._thread_launchers.setdefault(ident, self._generate(ident))
        fn(stream, config, *args)

    def _bad_stream(self, stream: Any) -> None:
        from ..runtime import Stream

        if not isinstance(stream, Stream):
            raise ContractError("stream", "a mircuda Stream", type(stream).__name__)
        if not stream._handle:
            raise ClosedResourceError("argument 'stream': the stream was closed")
        raise ContractError("stream", f"a stream of {self._context!r}", f"a stream of {stream._context!r}")

    def _config_dims(self, config: Any) -> tuple[int, ...]:
        dims = self._checked.get(config) if isinstance(config, LaunchConfig) else None
        if dims is not None:
            return dims
        if not isinstance(config, LaunchConfig):
            raise LaunchConfigError(f"config: expected a LaunchConfig, received {type(config).__name__}")
        config.check(self._context.device_info(), self._attributes.max_threads_per_block)
        total_smem = config.shared_mem_bytes + self._attributes.static_shared_bytes
        optin = self._context.device_info().max_shared_memory_per_block_optin_bytes
        if total_smem > optin:
            raise LaunchConfigError(
                f"shared_mem_bytes: {config.shared_mem_bytes} dynamic + {self._attributes.static_shared_bytes} "
                f"static bytes exceed the device's opt-in maximum {optin} bytes per block")
        if config.shared_mem_bytes > self._dynamic_smem_set:
            drv = _cuda.driver()
            self._context._make_current()
            _cuda.call("cuFuncSetAttribute", self._cu,
                       drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                       config.shared_mem_bytes)
            self._dynamic_smem_set = config.shared_mem_bytes
        dims = (*config.grid, *config.block, config.shared_mem_bytes)  # type: ignore[misc]
        self._checked[config] = dims
        return dims

    def _raise_launch(self, code: int, config: LaunchConfig | None = None) -> None:
        call = ("cuLaunchKernelEx" if config is not None and config.programmatic_stream_serialization
                else "cuLaunchKernel")
        _cuda.raise_result(code, call, f"kernel {self._contract.symbol!r}")

    # -- introspection ----------------------------------------------------------------------
    @property
    def contract(self) -> KernelContract:
        return self._contract

    @property
    def module(self) -> Module:
        return self._module

    @property
    def handle(self) -> int:
        """The ``CUfunction`` as an int."""
        return self._handle

    @property
    def attributes(self) -> FunctionAttributes:
        return self._attributes

    def packed_arguments(self) -> bytes:
        """The parameter block of the calling thread's last launch (for inspection and tests)."""
        fn = self.launch if threading.get_ident() == self._owner else self._thread_launchers.get(threading.get_ident())
        return fn.__mircuda_block__.packed_bytes() if fn is not None else b""

    def __repr__(self) -> str:
        return f"TypedKernel({self._contract!r})"


def _read_attributes(cu_function: Any) -> FunctionAttributes:
    drv = _cuda.driver()
    a = drv.CUfunction_attribute

    def get(name: str) -> int:
        return int(_cuda.call("cuFuncGetAttribute", getattr(a, name), cu_function))

    return FunctionAttributes(
        registers=get("CU_FUNC_ATTRIBUTE_NUM_REGS"),
        static_shared_bytes=get("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
        local_bytes=get("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"),
        max_threads_per_block=get("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
        binary_version=get("CU_FUNC_ATTRIBUTE_BINARY_VERSION"),
    )


def parameter_sizes(cu_function: Any) -> list[int] | None:
    """The compiled kernel's parameter sizes in bytes, in order (``cuFuncGetParamInfo``, CUDA 12.4+);
    None where the driver cannot say."""
    drv = _cuda.driver()
    if not hasattr(drv, "cuFuncGetParamInfo"):
        return None
    sizes: list[int] = []
    while len(sizes) < 4096:  # the driver answers CUDA_ERROR_INVALID_VALUE past the last parameter
        code, out = _cuda.call_status("cuFuncGetParamInfo", cu_function, len(sizes))
        if code:
            if not sizes and code == 801:  # CUDA_ERROR_NOT_SUPPORTED
                return None
            break
        sizes.append(int(out[1]))
    return sizes


def _verify_parameters(contract: KernelContract, cu_function: Any, slots: Any = None) -> None:
    """Compare the contract with the compiled kernel's parameter list (``cuFuncGetParamInfo``).

    Catches a contract with too many or too few parameters, or one whose sizes differ from the
    kernel's (e.g. ``f64`` declared for a ``float``), at bind time instead of as garbage at run time.
    """
    block = ArgumentBlock((slots or _c_slots)(contract))
    actual = parameter_sizes(cu_function)
    if actual is None:
        return
    expected = [s.size for s in block.slots]
    if len(actual) != len(expected):
        raise ContractError("contract", f"{len(actual)} parameters, as kernel {contract.symbol!r} has",
                            f"{len(expected)} parameters ({', '.join(contract.names)})")
    for p, es, asz in zip(contract.params, expected, actual):
        if es != asz:
            raise ContractError(p.name, f"a parameter of {asz} bytes (kernel {contract.symbol!r})",
                                f"{p.describe()} of {es} bytes")


@dataclass(frozen=True)
class LaunchAbi:
    """How one family of compiled kernels takes its parameters.

    Attributes:
        name: ``"c"`` for NVRTC kernels; other compilers register their own (e.g. ``"numba"``).
        slots: the ``(label, ctype)`` list of ABI values for a contract, in order.
        emit_writes: generates the checking and slot-writing lines of the launch function.
        verify: checks a contract against the loaded function at bind time (raises ContractError).
    """

    name: str
    slots: Any
    emit_writes: Any
    verify: Any


LAUNCH_ABIS: dict[str, LaunchAbi] = {"c": LaunchAbi("c", _c_slots, _emit_writes, _verify_parameters)}
"""Registered launch ABIs by name; add an entry to launch kernels of another compiler."""


_BY_FUNCTION: dict[int, weakref.WeakSet[TypedKernel]] = {}


def kernels_for_function(handle: int) -> list[TypedKernel]:
    """Every live TypedKernel bound to the ``CUfunction`` ``handle`` (several when one kernel was bound
    to several contracts): graphs find the kernels, and so the contracts, of their captured nodes."""
    kernels = _BY_FUNCTION.get(handle)
    return list(kernels) if kernels else []
