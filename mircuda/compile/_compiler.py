"""The compiler: NVRTC for a context's device, an in-memory module cache, loaded modules."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _cuda
from ..errors import ContractError, CudaError, UnsupportedPlatform
from ._nvrtc import CompiledProgram, nvrtc_version
from ._options import CompileOptions
from ._source import CudaSource, ModuleSource

if TYPE_CHECKING:
    from ..launch import KernelContract, TypedKernel
    from ..runtime import Context

__all__ = ["Compiler", "Module", "CompileCacheStats"]


@dataclass(frozen=True)
class CompileCacheStats:
    """What a compiler's caches did since it was created.

    Attributes:
        memory_hits: compiles answered by an already-loaded module.
        persistent_hits: compiles answered from the persistent cache directory.
        compilations: NVRTC (or Numba) compilations actually run.
        persistent_failures: persistent-cache reads or writes that failed (and were worked around).
    """

    memory_hits: int = 0
    persistent_hits: int = 0
    compilations: int = 0
    persistent_failures: int = 0

    def __repr__(self) -> str:
        return (f"CompileCacheStats(memory_hits={self.memory_hits}, persistent_hits={self.persistent_hits}, "
                f"compilations={self.compilations}, persistent_failures={self.persistent_failures})")


class Module:
    """A module loaded into a context (``cuModuleLoadData``). Obtain from :meth:`Compiler.compile`.

    ``kernel(contract)`` binds one of its ``extern "C"`` kernels to a contract. The module is
    unloaded when the last reference to it (including its kernels') is gone.
    """

    def __init__(self, context: Context, program: CompiledProgram) -> None:
        context._make_current()
        image = program.image
        cu = _cuda.call("cuModuleLoadData", image)
        self._context = context
        self._program = program
        self._cu = cu
        self._kernels: dict[KernelContract, TypedKernel] = {}
        self._finalizer = weakref.finalize(self, _unload, cu, context)
        self._finalizer.atexit = False

    @property
    def context(self) -> Context:
        return self._context

    @property
    def handle(self) -> int:
        """The ``CUmodule`` as an int."""
        return int(self._cu)

    @property
    def program(self) -> CompiledProgram:
        """The compiled image this module was loaded from (arch, CUBIN or PTX bytes, NVRTC log)."""
        return self._program

    def function_handle(self, symbol: str) -> Any:
        """The ``CUfunction`` of ``symbol`` (a bindings object; ``int()`` gives the handle).

        Raises:
            ContractError: the module has no kernel of that name.
        """
        self._context._make_current()
        image_symbol = dict(self._program.symbols).get(symbol, symbol)
        try:
            return _cuda.call("cuModuleGetFunction", self._cu, image_symbol.encode())
        except CudaError as exc:
            if exc.name == "CUDA_ERROR_NOT_FOUND":
                raise ContractError("symbol", "a kernel defined in the module", repr(symbol),
                                    'kernels are found by their unmangled name: declare them extern "C"') from None
            raise

    def kernel(self, contract: KernelContract) -> TypedKernel:
        """Bind kernel ``contract.symbol`` to ``contract`` (cached per contract).

        The contract's parameter count and sizes are compared with the compiled kernel's.

        Raises:
            ContractError: no such kernel, or the contract does not match the kernel's parameters.
        """
        from ..launch import KernelContract, TypedKernel

        if not isinstance(contract, KernelContract):
            raise ContractError("contract", "a KernelContract from mc.cuda_export(...)", type(contract).__name__)
        k = self._kernels.get(contract)
        if k is None:
            k = TypedKernel(self, contract, self.function_handle(contract.symbol), abi=self._program.abi)
            self._kernels[contract] = k
        return k

    def __repr__(self) -> str:
        return f"Module({self._program.arch}, {self._program.output}, {len(self._program.image)} bytes)"


def _unload(cu: Any, context: Context) -> None:
    try:
        if not context._closed:
            _cuda.make_current(context._handle)
            _cuda.call_status("cuModuleUnload", cu)
    except Exception:
        pass


class Compiler:
    """Compiles CUDA C with NVRTC for one context's device and loads the result into the context.

    Targets the device's exact compute capability (``sm_90`` on an H200) and produces CUBIN unless
    ``CompileOptions(output="ptx")`` asks for PTX. Loaded modules are cached in memory, keyed by the
    source digest, the normalized options, the target and the NVRTC version.
    """

    def __init__(self, context: Context) -> None:
        from ..runtime import Context

        if not isinstance(context, Context):
            raise ContractError("context", "a mircuda Context", type(context).__name__)
        self._context = context
        self._arch = context.device_info().arch
        self._modules: dict[tuple[str, str, str], Module] = {}
        self._lock = threading.Lock()
        self._memory_hits = 0
        self._persistent_hits = 0
        self._compilations = 0
        self._persistent_failures = 0

    @property
    def context(self) -> Context:
        return self._context

    @property
    def arch(self) -> str:
        """The NVRTC target of this compiler's device, e.g. ``"sm_90"``."""
        return self._arch

    @property
    def nvrtc_version(self) -> tuple[int, int]:
        return nvrtc_version()

    def compile(self, source: CudaSource, options: CompileOptions | None = None) -> Module:
        """Compile ``source`` (or take it from the cache) and return the loaded module.

        Raises:
            ContractError: ``source`` or ``options`` has the wrong type.
            CompileError: NVRTC rejected the source (the NVRTC log is in the error).
            UnsupportedPlatform: PTX was asked for but NVRTC is newer than the driver.
            CudaError: the driver could not load the image.
        """
        if options is None:
            options = _DEFAULT_OPTIONS
        try:
            key = (source.digest, options.key, self._arch)
        except AttributeError:
            key = None
        module = self._modules.get(key) if key is not None else None  # type: ignore[arg-type]
        if module is not None:
            self._memory_hits += 1
            return module
        if not isinstance(source, ModuleSource):
            raise ContractError("source", "a CudaSource (mc.cuda_kernel(...)) or another ModuleSource",
                                type(source).__name__)
        if not isinstance(options, CompileOptions):
            raise ContractError("options", "a CompileOptions", type(options).__name__)
        with self._lock:
            module = self._modules.get(key)  # type: ignore[arg-type]
            if module is None:
                if options.output == "ptx":
                    self._check_ptx_loadable()
                program = source.build(self._arch, options)
                self._compilations += 1
                module = Module(self._context, program)
                self._modules[key] = module  # type: ignore[index]
            else:
                self._memory_hits += 1
        return module

    def _check_ptx_loadable(self) -> None:
        drv_version = self._context._driver.version
        if nvrtc_version() > drv_version:
            n = ".".join(map(str, nvrtc_version()))
            d = ".".join(map(str, drv_version))
            raise UnsupportedPlatform(
                f"PTX from NVRTC {n} cannot be loaded by this CUDA {d} driver: use CompileOptions(output='cubin') "
                f"(the default), or install an NVRTC no newer than the driver (pip install 'nvidia-cuda-nvrtc=={d}.*')")

    def cache_stats(self) -> CompileCacheStats:
        """Counts of memory hits, persistent hits, compilations and persistent-cache failures."""
        return CompileCacheStats(self._memory_hits, self._persistent_hits, self._compilations,
                                 self._persistent_failures)


_DEFAULT_OPTIONS = CompileOptions()
