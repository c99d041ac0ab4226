"""Typed kernels: a loaded function bound to its contract, launched through a generated function.

How a launch goes (the generated function, the parameter blocks, the C extension and its ctypes
fallback) is told in :mod:`mircuda.launch._abi`; ``TypedKernel.launch_source()`` shows the function.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _cuda, _repr
from ..errors import ClosedResourceError, ContractError, LaunchConfigError
from ._abi import _BOUND_CONFIGS, LAUNCH_ABIS, generate_launch
from ._config import LaunchConfig
from ._contract import KernelContract
from ._kinds import check_launch_kind
from ._occupancy import SuggestedBlockSize, max_active_blocks_per_sm, max_active_clusters, suggested_block_size

if TYPE_CHECKING:
    from ..compile import Module
    from ..graph import KernelNode
    from ..runtime import Context

__all__ = ["TypedKernel", "FunctionAttributes", "kernels_for_function"]


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
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER

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
        self._shared_opt_in = _shared_opt_in(module, self._handle, cu_function)
        self._checked: dict[LaunchConfig, tuple[int, ...]] = {}
        self._thread_launchers: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._abi.verify(contract, cu_function)
        self._owner = threading.get_ident()
        # The generated launch function replaces the documented method on each instance.
        self.launch = self._generate(self._owner)  # type: ignore[method-assign]
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
        return generate_launch(self._abi, self._contract, self._context, self._handle, owner,
                               config_dims=self._config_dims, bad_stream=self._bad_stream,
                               raise_launch=self._raise_launch, other_thread=self._launch_other_thread)

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
        if config.cooperative or config.cluster is not None:
            check_launch_kind(self, config)
        dynamic, static = config.shared_mem_bytes, self._attributes.static_shared_bytes
        optin = self._context.device_info().max_shared_memory_per_block_optin_bytes
        if dynamic + static > optin:
            raise LaunchConfigError(
                f"shared_mem_bytes: expected at most {max(optin - static, 0)} bytes of dynamic shared memory "
                f"(the device's opt-in maximum {optin} bytes per block less kernel {self._contract.symbol!r}'s "
                f"{static} static bytes), received {dynamic}")
        if dynamic:
            self._shared_opt_in.ensure(dynamic, self._context)
        dims = (*config.grid, *config.block, config.shared_mem_bytes)
        if len(self._checked) >= _BOUND_CONFIGS:  # as the launchers: ever new shapes keep the last few hundred
            self._checked.clear()
        self._checked[config] = dims
        return dims

    def _raise_launch(self, code: int, config: LaunchConfig | None = None) -> None:
        call = ("cuLaunchKernelEx" if config is not None and config.launch_attributes else "cuLaunchKernel")
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

    # -- occupancy (launch/_occupancy.py) -------------------------------------------------------
    def max_active_blocks_per_sm(self, block: int | tuple[int, ...], shared_mem_bytes: int = 0) -> int:
        """Blocks of ``block`` threads (int or dim3) with ``shared_mem_bytes`` of dynamic shared memory
        that can be resident on one SM at once (``cuOccupancyMaxActiveBlocksPerMultiprocessor``).

        Raises:
            LaunchConfigError: bad dims, more threads than the function allows, or negative bytes.
        """
        return max_active_blocks_per_sm(self._context, self._cu, self._attributes.max_threads_per_block, block,
                                        shared_mem_bytes)

    def suggested_block_size(self, shared_mem_bytes: int = 0, block_limit: int = 0) -> SuggestedBlockSize:
        """``(min_grid_size, block_size)`` reaching the most resident warps per SM, for a constant
        ``shared_mem_bytes`` of dynamic shared memory per block and blocks of at most ``block_limit``
        threads (0: the function's limit); ``cuOccupancyMaxPotentialBlockSize``.

        Raises:
            LaunchConfigError: a negative or non-int argument.
        """
        return suggested_block_size(self._context, self._cu, shared_mem_bytes, block_limit)

    def max_active_clusters(self, cluster: int | tuple[int, ...], block: int | tuple[int, ...],
                            shared_mem_bytes: int = 0) -> int:
        """Clusters of ``cluster`` blocks (dim3) of ``block`` threads that can be resident on the device
        at once (``cuOccupancyMaxActiveClusters``; compute capability >= 9.0).

        Raises:
            LaunchConfigError: bad dims or bytes, or a device older than compute capability 9.0.
            CudaError: the driver refused the cluster shape for this function.
        """
        return max_active_clusters(self._context, self._cu, cluster, block, shared_mem_bytes)

    def launch_source(self) -> str:
        """The Python source of this kernel's generated launch function, for a reader.

        ``launch`` is this function, compiled once when the kernel was bound (steps 1-5 of
        :mod:`mircuda.launch._abi`). Names it uses: ``_a<i>`` parameter ``i``'s C ABI value (an address,
        a scalar, a struct's bytes), ``_t<i>`` its element type, ``_b<i>``/``_v<i>`` its slow path
        (convert or raise), ``_DB`` ``DeviceBuffer``, ``_ctx`` the kernel's context, ``_L`` the bound
        launcher of the last config (``mircuda._cuda.bind_launch``: it tests the thread and the
        config, writes the values into the parameter block and calls the driver entry point; the C
        extension's, or a Python one), ``_bind`` what checks a new config and binds its launcher,
        ``_other`` the hand-over to another thread's launch function. (A launch ABI without
        ``emit_values`` writes ``_s<i>``, the ctypes view of each slot, itself.) Another thread runs a
        copy of the same source over its own parameter block.
        """
        source: str = self.launch.__mircuda_source__  # type: ignore[attr-defined]
        return source

    def packed_arguments(self) -> bytes:
        """The parameter block of the calling thread's last launch (for inspection and tests)."""
        # Any: the generated launch function carries its parameter block as an attribute.
        fn: Any = self.launch if threading.get_ident() == self._owner else self._thread_launchers.get(threading.get_ident())
        return fn.__mircuda_block__.packed_bytes() if fn is not None else b""

    def __repr__(self) -> str:
        return f"TypedKernel({self._contract!r})"


class _SharedMemoryOptIn:
    """The dynamic shared memory a ``CUfunction`` may launch with
    (``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``).

    The attribute belongs to the function, not to a binding: every TypedKernel of the function (one per
    contract) and every thread shares this one record. Its default is 48 KiB less the function's static
    shared memory (CUDA Programming Guide, "Shared Memory" of compute capability 7.x and later), so a
    kernel with static shared memory needs the opt-in below 48 KiB of dynamic memory too; the value is
    read from the driver once rather than assumed, and only ever raised, under the lock, so a
    concurrent smaller request never lowers what another binding relies on.
    """

    __slots__ = ("_cu", "_granted", "_lock", "__weakref__")

    def __init__(self, cu_function: Any) -> None:
        self._cu = cu_function
        self._granted: int | None = None  # read lazily: binding a kernel makes no driver call for it
        self._lock = threading.Lock()

    def ensure(self, dynamic_bytes: int, context: Context) -> None:
        """Raise the function's limit to at least ``dynamic_bytes`` (checked against the device's
        opt-in maximum by the caller). Raises CudaError where the driver refuses."""
        if self._granted is not None and dynamic_bytes <= self._granted:
            return
        with self._lock:
            attribute = _cuda.driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            context._make_current()
            if self._granted is None:
                self._granted = int(_cuda.call("cuFuncGetAttribute", attribute, self._cu))
            if dynamic_bytes > self._granted:
                _cuda.call("cuFuncSetAttribute", self._cu, attribute, dynamic_bytes)
                self._granted = dynamic_bytes

    @property
    def granted(self) -> int | None:
        """The limit this record has read or set, bytes; None before the first request."""
        return self._granted


# One record per function: keyed by the handle and the module object holding it (a handle may be
# reused after its module is unloaded; the module object lives as long as any of its kernels).
_OPT_INS: weakref.WeakValueDictionary[tuple[int, int], _SharedMemoryOptIn] = weakref.WeakValueDictionary()
_OPT_INS_LOCK = threading.Lock()


def _shared_opt_in(module: Any, handle: int, cu_function: Any) -> _SharedMemoryOptIn:
    with _OPT_INS_LOCK:
        record = _OPT_INS.get((handle, id(module)))
        if record is None:
            record = _OPT_INS[(handle, id(module))] = _SharedMemoryOptIn(cu_function)
        return record


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


_BY_FUNCTION: dict[int, weakref.WeakSet[TypedKernel]] = {}


def kernels_for_function(handle: int) -> list[TypedKernel]:
    """Every live TypedKernel bound to the ``CUfunction`` ``handle`` (several when one kernel was bound
    to several contracts): graphs find the kernels, and so the contracts, of their captured nodes."""
    kernels = _BY_FUNCTION.get(handle)
    return list(kernels) if kernels else []
