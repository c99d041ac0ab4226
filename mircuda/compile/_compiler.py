"""The compilers: a two-level module cache (memory, then a validated cache directory) over NVRTC.

:class:`Compiler` compiles for one context's device and loads modules into that context;
:class:`OfflineCompiler` compiles for any NVRTC target and returns the images (no GPU needed). Both
share one cache implementation, :class:`_CachingCompiler`.

The cache key (SHA-256, hex) covers: the source digest (for a CUDA C source: its name and text; any
other :class:`ModuleSource` makes its digest cover its own toolchain), the normalized options, the
target architecture and the NVRTC version, and for CUDA C sources also the include roots and the
fingerprint of every header the source can include from them, from its own directory or from the
toolkit header directories (cudart, CCCL), plus, for a source with any include directive, the
toolkit's paths, wheel versions and listings (see :mod:`mircuda.compile._includes`). A linked source
(:func:`~mircuda.compile.cuda_link`) covers each of its CUDA C units' include fingerprints and the
nvJitLink version.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import weakref
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import _cuda
from ..errors import ContractError, CudaError, UnsupportedPlatform
from ._config import CompileCacheStats, CompilerConfig
from ._includes import IncludeDependencies, combine_dependencies, scan_dependencies
from ._link import LinkedSource, link_program, nvjitlink_version
from ._nvrtc import CompiledProgram, nvrtc_version, validate_arch
from ._options import CompileOptions
from ._persistent import EntryExpectation, PersistentCache
from ._source import CudaSource, ModuleSource, compile_program
from ._toolkit import toolkit_include_dirs

if TYPE_CHECKING:
    from ..launch import KernelContract, TypedKernel
    from ..runtime import Context

__all__ = ["CompileCacheStats", "Compiler", "CompilerConfig", "Module", "OfflineCompiler"]

log = logging.getLogger("mircuda.compile")

KEY_FORMAT = "mircuda-compile-key/2"
"""Mixed into every key: bump it when what a key covers changes."""

class Module:
    """A module loaded into a context (``cuModuleLoadData``). Obtain from :meth:`Compiler.compile`.

    ``kernel(contract)`` binds one of its ``extern "C"`` kernels, or a kernel named by one of the
    source's name expressions (``"fill<float>"``), to a contract. The module is
    unloaded when the last reference to it (including its kernels') is gone.
    """
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER

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
        from ..launch import is_name_expression

        self._context._make_current()
        symbols = dict(self._program.symbols)
        image_symbol = symbols.get(symbol)
        if image_symbol is None:
            if is_name_expression(symbol):
                listed = [s for s in symbols if is_name_expression(s)]
                raise ContractError("symbol", "a name expression the source lists in name_expressions "
                                    f"({', '.join(map(repr, listed)) or 'it lists none'})", repr(symbol),
                                    "pass it to mc.cuda_kernel(..., name_expressions=[...]) so that NVRTC "
                                    "instantiates it and gives its lowered name")
            image_symbol = symbol
        try:
            return _cuda.call("cuModuleGetFunction", self._cu, image_symbol.encode())
        except CudaError as exc:
            if exc.name == "CUDA_ERROR_NOT_FOUND":
                raise ContractError("symbol", "a kernel defined in the module", repr(symbol),
                                    'kernels are found by their unmangled name: declare them extern "C", or '
                                    "bind a template by a name expression (cuda_kernel(..., name_expressions="
                                    "[...]))") from None
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


@_cuda.finalizer
def _unload(cu: Any, context: Context) -> None:
    if not context._closed:
        _cuda.make_current(context._handle)
        _cuda.call_status("cuModuleUnload", cu)




T = TypeVar("T")


class _CachingCompiler(Generic[T]):
    """The module cache shared by :class:`Compiler` (values: loaded modules) and
    :class:`OfflineCompiler` (values: compiled programs).

    Lookup order: the memory cache, the cache directory, then a build. A memory hit costs a dict
    lookup for sources that include nothing from files (~0.2 µs on a 2-core VM), plus one ``stat``
    per recorded include path (0.5-1 µs each; see :mod:`mircuda.compile._includes`) for sources
    that do, because a header edited in place must change the key.
    """

    def __init__(self, arch: str, config: CompilerConfig | None) -> None:
        if config is None:
            config = CompilerConfig()
        if not isinstance(config, CompilerConfig):
            raise ContractError("config", "a CompilerConfig", type(config).__name__)
        self._arch = arch
        self._config = config
        # Part of every key; loading NVRTC here (~5-10 ms) keeps it out of the first compile call.
        self._nvrtc = nvrtc_version()
        self._persistent = PersistentCache(config.cache_directory) if config.cache_directory else None
        # (source digest, options key) -> (value, include dependencies to revalidate or None)
        self._recent: dict[tuple[str, str], tuple[T, IncludeDependencies | None]] = {}
        self._by_key: dict[str, T] = {}
        self._lock = threading.RLock()
        self._memory_hits = 0
        self._persistent_hits = 0
        self._compilations = 0
        self._persistent_failures = 0

    @property
    def arch(self) -> str:
        """The NVRTC target, e.g. ``"sm_90"``."""
        return self._arch

    @property
    def config(self) -> CompilerConfig:
        return self._config

    @property
    def nvrtc_version(self) -> tuple[int, int]:
        """``(major, minor)`` of the NVRTC this compiler builds with (part of every key)."""
        return self._nvrtc

    def cache_stats(self) -> CompileCacheStats:
        """Counts of memory hits, persistent hits, compilations and persistent-cache failures."""
        return CompileCacheStats(self._memory_hits, self._persistent_hits, self._compilations,
                                 self._persistent_failures)

    def cache_key(self, source: ModuleSource, options: CompileOptions | None = None) -> str:
        """The cache key (hex SHA-256) ``source`` compiled with ``options`` has now: it changes when
        the source, the options, the target, the NVRTC version, the include roots, the contents
        of a header the source can include (from the roots, its own directory or the toolkit's
        header directories) or, for a source with includes, the toolkit's paths and wheel versions
        change. The cache directory names entries by it.

        Raises:
            ContractError: ``source`` or ``options`` has the wrong type.
        """
        options = _DEFAULT_OPTIONS if options is None else options
        self._check_types(source, options)
        return self._key(source, options)[0]

    def _compile(self, source: ModuleSource, options: CompileOptions | None) -> T:
        if options is None:
            options = _DEFAULT_OPTIONS
        try:
            recent = self._recent.get((source.digest, options.key))
        except (AttributeError, TypeError):
            recent = None
        if recent is not None:
            value, deps = recent
            if deps is None or deps.unchanged():
                self._memory_hits += 1
                return value
        self._check_types(source, options)
        with self._lock:
            key, deps = self._key(source, options)
            cached = self._by_key.get(key)
            if cached is None:
                value = self._load_or_build(key, source, options)
                self._by_key[key] = value
            else:
                value = cached
                self._memory_hits += 1
            track = deps if deps is not None and deps.needs_revalidation else None
            self._recent[(source.digest, options.key)] = (value, track)
        return value

    @staticmethod
    def _check_types(source: object, options: object) -> None:
        if not isinstance(source, ModuleSource):
            raise ContractError("source", "a CudaSource (mc.cuda_kernel(...), mc.cuda_kernel_file(...)) or "
                                "another ModuleSource", type(source).__name__)
        if not isinstance(options, CompileOptions):
            raise ContractError("options", "a CompileOptions", type(options).__name__)

    def _key(self, source: ModuleSource, options: CompileOptions) -> tuple[str, IncludeDependencies | None]:
        parts = [KEY_FORMAT, source.digest, options.key, self._arch, f"{self._nvrtc[0]}.{self._nvrtc[1]}"]
        deps = None
        units = [source] if isinstance(source, CudaSource) else []
        if isinstance(source, LinkedSource):
            units = list(source.sources)
            major, minor = nvjitlink_version()  # UnsupportedPlatform without nvJitLink, before any build
            parts += ["nvjitlink", f"{major}.{minor}"]
        if units:
            roots = self._config.include_paths
            scans = [scan_dependencies(u.text, u.name, roots, toolkit_include_dirs()) for u in units]
            deps = scans[0] if len(scans) == 1 else combine_dependencies(scans)
            if deps.special:  # NVRTC's open of a FIFO blocks for ever
                raise ContractError("source", "includes that resolve to regular files",
                                    f"{deps.special[0]!r} (not a regular file: a FIFO, socket or device)")
            parts += ["roots", *roots, "includes", deps.digest]
        return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest(), deps

    def _build(self, source: ModuleSource, options: CompileOptions) -> CompiledProgram:
        if isinstance(source, CudaSource):
            return compile_program(source, self._arch, options, include_paths=self._config.include_paths)
        if isinstance(source, LinkedSource):
            return link_program(source, self._arch, options, include_paths=self._config.include_paths)
        return source.build(self._arch, options)

    def _before_build(self, options: CompileOptions) -> None:
        """Checks that must fail before a cached or fresh image is used."""

    def _expectation(self, source: ModuleSource, options: CompileOptions) -> EntryExpectation:
        """What a cached program for this request must be (an entry that says otherwise is a miss)."""
        if isinstance(source, (CudaSource, LinkedSource)):
            report = options.ptxas_verbose and options.output == "cubin"
            if source.name_expressions:  # NVRTC's lowered names are known only after compiling
                return EntryExpectation(options.output, "c", self._nvrtc,
                                        symbol_names=frozenset(source.name_expressions), ptxas_report=report)
            return EntryExpectation(options.output, "c", self._nvrtc, (), ptxas_report=report)
        abi = getattr(source, "abi", None)
        return EntryExpectation(options.output, abi if isinstance(abi, str) else None)

    def _load(self, program: CompiledProgram) -> T:
        raise NotImplementedError

    def _load_or_build(self, key: str, source: ModuleSource, options: CompileOptions) -> T:
        self._before_build(options)
        cache = self._persistent
        if cache is not None:
            found = cache.load(key, self._arch, self._nvrtc, self._expectation(source, options))
            if found.failure is not None:
                self._persistent_failures += 1
            if found.program is not None:
                try:
                    value = self._load(found.program)
                except CudaError as exc:  # the driver refused the cached image: drop it, rebuild
                    log.debug("persistent cache: the driver rejected %s: %s", cache.path(key), exc)
                    cache.discard(key, found.token)
                    self._persistent_failures += 1
                else:
                    self._persistent_hits += 1
                    return value
        program = self._build(source, options)
        self._compilations += 1
        value = self._load(program)
        if cache is not None and cache.store(key, self._arch, self._nvrtc, program) is not None:
            self._persistent_failures += 1
        return value


class Compiler(_CachingCompiler[Module]):
    """Compiles for one context's device and loads the results into that context.

    Targets the device's exact compute capability (``sm_90`` on an H200) and produces CUBIN unless
    ``CompileOptions(output="ptx")`` asks for PTX. Modules are cached in memory and, with
    ``CompilerConfig(cache_directory=...)``, on disk across processes; see :meth:`cache_key` for
    what the key covers. ``Compiler(context)`` has no include roots and no cache directory.

    A cached image that the driver refuses to load is removed, rebuilt and rewritten.

    ``arch`` picks a target other than the device's plain one that still loads on it: the arch-specific
    ``sm_XYa`` of its compute capability X.Y (from 9.0), or a family-specific ``sm_XZf`` of its major
    with Z <= Y (from 10.0; e.g. ``sm_120f`` on cc 12.0 and 12.1): code that needs the family's
    instructions (``cvt.rn.f16x2.e2m1x2`` on SM12x) compiles only for these.

    Raises:
        ContractError: ``context`` is not a Context, ``config`` not a CompilerConfig, or ``arch`` not a
            target of this NVRTC that loads on the context's device.
    """
    _graph_opaque = True  # see graph._resources.OPAQUE_MARKER

    def __init__(self, context: Context, config: CompilerConfig | None = None, *, arch: str | None = None) -> None:
        from ..runtime import Context

        if not isinstance(context, Context):
            raise ContractError("context", "a mircuda Context", type(context).__name__)
        self._context = context
        plain = context.device_info().arch
        if arch is not None and arch != plain:
            arch = _device_variant(arch, plain)
        super().__init__(plain if arch is None else arch, config)

    @classmethod
    def with_config(cls, context: Context, config: CompilerConfig) -> Compiler:
        """A compiler for ``context`` with ``config``'s include roots and cache directory."""
        if not isinstance(config, CompilerConfig):
            raise ContractError("config", "a CompilerConfig", type(config).__name__)
        return cls(context, config)

    @classmethod
    def with_include_paths(cls, context: Context, paths: Any) -> Compiler:
        """A compiler for ``context`` whose CUDA C sources see the include roots ``paths`` (in order).

        Raises:
            ContractError: ``paths`` is not a sequence of existing directories.
        """
        return cls(context, CompilerConfig(include_paths=paths))

    @property
    def context(self) -> Context:
        return self._context

    def compile(self, source: ModuleSource, options: CompileOptions | None = None) -> Module:
        """Compile ``source`` (or take it from a cache) and return the loaded module.

        Raises:
            ContractError: ``source`` or ``options`` has the wrong type.
            CompileError: NVRTC rejected the source (the NVRTC log is in the error).
            UnsupportedPlatform: PTX was asked for but NVRTC is newer than the driver.
            CudaError: the driver could not load a freshly compiled image.
        """
        return self._compile(source, options)

    def _before_build(self, options: CompileOptions) -> None:
        if options.output == "ptx":
            self._check_ptx_loadable()

    def _load(self, program: CompiledProgram) -> Module:
        return Module(self._context, program)

    def _check_ptx_loadable(self) -> None:
        drv_version = self._context._driver.version
        if self._nvrtc > drv_version:
            n = ".".join(map(str, self._nvrtc))
            d = ".".join(map(str, drv_version))
            raise UnsupportedPlatform(
                f"PTX from NVRTC {n} cannot be loaded by this CUDA {d} driver: use CompileOptions(output='cubin') "
                f"(the default), or install an NVRTC no newer than the driver (pip install 'nvidia-cuda-nvrtc=={d}.*')")


def _device_variant(arch: str, plain: str) -> str:
    """``arch`` when it is an ``sm_*a``/``sm_*f`` target that loads on the device whose plain target is
    ``plain`` (see :class:`Compiler`).

    Raises:
        ContractError: naming ``arch``.
    """
    cc = int(plain.removeprefix("sm_"))
    expected = (f"sm_{cc}a" + (f" or a family target sm_{cc // 10}Zf with Z <= {cc % 10}" if cc >= 100 else "")
                + f" (a variant of this device's {plain} that loads on it)")
    checked = validate_arch(arch, "cubin")
    number, suffix = int(checked[3:-1] or 0) if checked[-1] in "af" else 0, checked[-1]
    if (suffix == "a" and number == cc) or (suffix == "f" and number // 10 == cc // 10 and number <= cc):
        return checked
    raise ContractError("arch", expected, repr(arch))


class OfflineCompiler(_CachingCompiler[CompiledProgram]):
    """Compiles for any NVRTC target (present or not) and returns the images; needs no GPU.

    For inspection and for shipping: ``OfflineCompiler("sm_120f").compile(source).image`` is a CUBIN
    for the SM12x family; with ``CompileOptions(output="ptx")`` and a ``compute_*`` or ``sm_*``
    target, NUL-terminated PTX. Same caches, keys and statistics as :class:`Compiler`.

    Raises:
        ContractError: ``arch`` is not a target of this NVRTC, or ``config`` not a CompilerConfig.
    """

    def __init__(self, arch: str, config: CompilerConfig | None = None) -> None:
        super().__init__(validate_arch(arch, "ptx"), config)

    def compile(self, source: ModuleSource, options: CompileOptions | None = None) -> CompiledProgram:
        """Compile ``source`` for :attr:`arch` (or take it from a cache).

        Raises:
            ContractError: bad ``source`` or ``options``, or ``compute_*`` with CUBIN output.
            CompileError: NVRTC rejected the source.
        """
        return self._compile(source, options)

    def _load(self, program: CompiledProgram) -> CompiledProgram:
        return program


_DEFAULT_OPTIONS = CompileOptions()
