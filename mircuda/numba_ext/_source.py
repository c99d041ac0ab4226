"""Numba kernels as module sources for mircuda's compiler."""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from ..compile import CompiledProgram, CompileOptions, CudaSource, nvrtc_version
from ..compile._nvrtc import validate_arch
from ..errors import CompileError, ContractError, UnsupportedPlatform
from . import _compat
from ._abi import register_signature
from ._cuda_c import CudaLinkSource, check_prototypes, compile_relocatable
from ._digest import digest_and_declarations

__all__ = ["NumbaKernelSource", "numba_kernel"]

_ARCH = re.compile(r"sm_([1-9][0-9]*)([0-9])([af]?)")
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")
_RELEASE = re.compile(r"Cuda compilation tools, release (\d+)\.(\d+)")
_OPTIONS = ("fastmath", "lineinfo", "opt", "max_registers", "launch_bounds", "lto")


@dataclass(frozen=True)
class NumbaKernelSource:
    """A Python function compiled by numba-cuda as a kernel with one explicit signature.

    Obtain with :func:`numba_kernel`; hand to :meth:`mircuda.Compiler.compile`.

    Attributes:
        function: the Python function (a ``numba.cuda.jit`` dispatcher's ``py_func`` when given one).
        signature: the Numba argument types.
        options: Numba options (``fastmath``, ``lineinfo``, ``opt``, ``max_registers``,
            ``launch_bounds``, ``lto``), normalized.
        name: ``module.qualname(argument types)``, for diagnostics.
        symbol: the name contracts use for the kernel: the function's ``__name__``.
        abi: the launch ABI registered for this signature (``"numba:<argument types>"``).
        digest: SHA-256 over the function's code, constants, referenced globals, the attributes it
            can read from modules (``cfg.SCALE``), Enum members and namedtuple fields, and its closure
            (recursively through the device functions and declared CUDA C it calls), its source
            text, the signature, the options and the numba and numba-cuda versions.
    """

    function: Any
    signature: tuple[Any, ...]
    options: tuple[tuple[str, Any], ...]
    name: str = field(init=False)
    symbol: str = field(init=False)
    abi: str = field(init=False)
    digest: str = field(init=False, repr=False, compare=False)
    # The CUDA C device functions the kernel calls (declare_device descriptors), found with the digest.
    _declared: tuple[Any, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fn = self.function
        set_ = object.__setattr__
        set_(self, "symbol", fn.__name__)
        set_(self, "name", f"{fn.__module__}.{fn.__qualname__}({', '.join(map(str, self.signature))})")
        set_(self, "abi", register_signature(self.signature))
        h = hashlib.sha256()
        fn_digest, declared = digest_and_declarations(fn)
        set_(self, "_declared", tuple(declared))
        for part in ("numba-kernel", fn_digest, self.abi, repr(self.options), *_compat.numba_versions()):
            h.update(part.encode() + b"\0")
        set_(self, "digest", h.hexdigest())

    def build(self, arch: str, options: CompileOptions) -> CompiledProgram:
        """Compile for ``arch`` (``sm_90``, ``sm_90a``, ``sm_120f``...); works without a GPU.

        The kernel is compiled by numba-cuda for that exact target; CUDA C its declared devices link
        is compiled by mircuda's NVRTC with ``options`` (standard, macros, fast math) and linked by
        nvJitLink. ``options.fast_math``, ``line_info`` and ``max_registers`` apply to the Numba code
        too (alongside the kernel's own options). ``output="cubin"`` (the default) links a CUBIN;
        ``"ptx"`` gives the kernel's PTX, only for kernels that link nothing.

        Raises:
            ContractError: ``arch`` is not an ``sm_*`` target, or a declared device's Numba signature
                does not match its C definition.
            CompileError: Numba, NVRTC or the linker rejected the code (their message and log).
            UnsupportedPlatform: the kernel needs what a plain launch cannot give (a cooperative
                launch, Numba's runtime, module globals set up by Numba), or PTX from an NVVM newer
                than the initialized driver was asked for.
        """
        m = _ARCH.fullmatch(arch) if isinstance(arch, str) else None
        if m is None:
            raise ContractError("arch", "an sm_* target such as 'sm_90', 'sm_90a' or 'sm_120f'", repr(arch))
        if not isinstance(options, CompileOptions):
            raise ContractError("options", "a CompileOptions", type(options).__name__)
        validate_arch(arch, "cubin")  # NVRTC's targets, 'a'/'f' suffix rules: the same errors as CUDA C
        if (int(m.group(1)), int(m.group(2))) < _MIN_CC:
            raise ContractError("arch", f"a target numba-cuda supports (sm_{_MIN_CC[0]}{_MIN_CC[1]} or newer)", repr(arch))
        cc: tuple[Any, ...] = (int(m.group(1)), int(m.group(2))) + ((m.group(3),) if m.group(3) else ())
        o = dict(self.options)
        lineinfo = o["lineinfo"] or options.line_info
        max_registers = o["max_registers"] if o["max_registers"] is not None else options.max_registers
        lto = o["lto"]
        try:
            lib = _compat.compile_kernel_library(
                self.function, self.signature, cc, fastmath=o["fastmath"] or options.fast_math, lineinfo=lineinfo,
                opt=o["opt"], lto=lto, launch_bounds=o["launch_bounds"])
        except (ContractError, UnsupportedPlatform):
            raise
        except Exception as exc:
            raise CompileError(f"Numba could not compile the kernel ({type(exc).__name__})", str(exc), arch,
                               self.name) from exc
        self._check_plain_launch(lib)
        entry = lib.entry
        kernel_ptx = ""
        if not lto:
            kernel_ptx = lib.ptx(cc)
            entries = _ENTRY.findall(kernel_ptx)
            if entries != [entry]:
                raise CompileError("the kernel's PTX does not define exactly the expected entry",
                                   f"expected {entry!r}, found {entries!r}", arch, self.name)
        links = list(lib.links)
        if options.output == "ptx":
            if links or lib.needs_cudadevrt or lto:
                raise ContractError("options", "CompileOptions(output='cubin') for a kernel that links code",
                                    "output='ptx'", "linked CUDA C, libcudadevrt and LTO need nvJitLink's CUBIN")
            release = self._check_ptx_loadable(kernel_ptx)
            return CompiledProgram(arch, "ptx", kernel_ptx.encode() + b"\0", "", release, abi=self.abi,
                                   symbols=((self.symbol, entry),))
        image, log = self._link(lib, cc, arch, options, kernel_ptx, links, max_registers, lineinfo, lto)
        if entry.encode() + b"\0" not in image:
            raise CompileError("the linked CUBIN has no symbol for the kernel's entry", entry, arch, self.name)
        release = _release(kernel_ptx) or nvrtc_version()
        return CompiledProgram(arch, "cubin", image, log, release, abi=self.abi, symbols=((self.symbol, entry),))

    def _check_plain_launch(self, lib: _compat.KernelLibrary) -> None:
        if lib.cooperative:
            raise UnsupportedPlatform(f"{self.name} uses grid synchronization (a cooperative launch); "
                                      "launch it with numba.cuda instead")
        setup = [f for f in lib.setup if not _compat.is_lto_warning(f)]
        for f in lib.setup:
            if _compat.is_lto_warning(f):
                f(None)  # numba-cuda's float16/bfloat16 shims: warns when nvJitLink is missing
        if setup or lib.teardown or lib.referenced:
            raise UnsupportedPlatform(f"{self.name} needs module setup by Numba (its runtime, or device arrays "
                                      "captured from globals); pass arrays as arguments instead")

    def _link(self, lib: _compat.KernelLibrary, cc: tuple[Any, ...], arch: str, options: CompileOptions,
              kernel_ptx: str, links: list[Any], max_registers: int | None, lineinfo: bool,
              lto: bool) -> tuple[bytes, str]:
        logs = []
        try:
            linker = _compat.new_linker(cc, max_registers=max_registers, lineinfo=lineinfo, lto=lto)
            if lto:
                linker.add_ltoir(lib.ltoir(cc), name=f"{self.symbol}.ltoir")
            else:
                linker.add_ptx(kernel_ptx.encode(), name=f"{self.symbol}.ptx")
            for item in sorted(links, key=lambda x: getattr(x, "name", str(x))):
                if isinstance(item, _compat.CUSource) and not isinstance(item, CudaLinkSource):
                    item = _numba_shim(item)  # numba-cuda's own CUDA C (float16/bfloat16 operations)
                if isinstance(item, CudaLinkSource):
                    checks = [d._mircuda_declaration for d in self._declared
                              if getattr(d, "_mircuda_source", None) is item]
                    code, log = compile_relocatable(item, arch, options, lto=lto, checks=checks)
                    if log:
                        logs.append(f"{item.name}: {log}")
                    # The PTX prototypes are checked in LTO builds too (one more NVRTC run there).
                    ptx = code if not lto else compile_relocatable(item, arch, options, lto=False, checks=checks)[0]
                    check_prototypes(kernel_ptx, ptx.decode(errors="replace"), item.name)
                    if lto:
                        linker.add_ltoir(code, name=item.name)
                    else:
                        linker.add_ptx(code, name=item.name)
                else:  # files and code objects declared with numba.cuda.declare_device directly
                    linker.add_file_guess_ext(item)
            if lib.needs_cudadevrt:
                linker.add_file_guess_ext(_compat.cudadevrt_path())
            result = linker.complete()
        except (ContractError, CompileError):
            raise
        except Exception as exc:
            raise CompileError(f"linking the kernel failed ({type(exc).__name__})", str(exc), arch, self.name) from exc
        try:
            logs.append(linker.info_log or "")
        except Exception:
            pass
        return bytes(result.code), "\n".join(x.replace("\0", "") for x in logs if x).strip()

    def _check_ptx_loadable(self, ptx: str) -> tuple[int, int]:
        # Same rule as NVRTC PTX (Compiler): a driver JIT-compiles PTX only from a toolkit no newer
        # than itself. The PTX header names the CUDA release of the NVVM that wrote it.
        from ..runtime import Driver

        release = _release(ptx) or nvrtc_version()
        driver = Driver._instance
        if driver is not None and release > driver.version:
            r, d = ".".join(map(str, release)), ".".join(map(str, driver.version))
            raise UnsupportedPlatform(f"PTX from NVVM {r} (numba-cuda) cannot be loaded by this CUDA {d} driver: "
                                      "use CompileOptions(output='cubin') (the default)")
        return release

    def __repr__(self) -> str:
        return f"numba_kernel({self.name})"


def _numba_shim(item: Any) -> CudaLinkSource:
    # Compiled by mircuda's NVRTC (no driver needed), with numba-cuda's header copies first on the
    # include path as numba-cuda's own NVRTC would have them.
    data = item.data.decode() if isinstance(item.data, bytes) else str(item.data)
    include = _compat.numba_include_dir(nvrtc_version()[0])
    return CudaLinkSource(CudaSource(data, item.name.strip("<>") or "numba_shim.cu"), (include,))


def _release(ptx: str) -> tuple[int, int] | None:
    m = _RELEASE.search(ptx)
    return (int(m.group(1)), int(m.group(2))) if m else None


_MIN_CC = (7, 5)  # the oldest target of the NVRTC/NVVM 13 toolchain


def _jit_options(fn: Any) -> dict[str, Any]:
    """Options given to ``numba.cuda.jit`` that mircuda's compile would otherwise silently ignore."""
    opts = getattr(fn, "targetoptions", None)
    if not isinstance(opts, dict):
        return {}
    defaults = _jit_defaults()
    missing = object()
    return {k: v for k, v in opts.items() if k not in ("device", "link") and defaults.get(k, missing) != v}


@functools.lru_cache(maxsize=1)
def _jit_defaults() -> dict[str, Any]:
    from numba import cuda

    def _plain() -> None:  # pragma: no cover - never compiled: only the dispatcher's options are read
        pass

    return dict(cuda.jit(_plain).targetoptions)


def numba_kernel(fn: Any, signature: Any, **options: Any) -> NumbaKernelSource:
    """A Numba kernel as a module source: ``compiler.compile(numba_kernel(fn, sig))``.

    Args:
        fn: the kernel's Python function (as for ``numba.cuda.jit``), or a ``numba.cuda.jit``
            dispatcher (its Python function is used).
        signature: the Numba signature, ``"void(float32[:], float32)"`` or ``(float32[:], float32)``
            types; the return type, if given, is ``void``.
        **options: ``fastmath`` (False), ``lineinfo`` (False), ``opt`` (True), ``max_registers``
            (None), ``launch_bounds`` (None; as ``numba.cuda.jit``) and ``lto`` (False: link-time
            optimization of the kernel with the CUDA C it calls, through nvJitLink).

    The kernel is bound like a CUDA C kernel: ``module.kernel(mc.cuda_export(fn.__name__, ...))``
    with one contract parameter per Numba parameter (``DeviceBuffer[T]`` for arrays, scalar types
    for scalars), checked against the signature at bind time.

    Raises:
        ContractError: ``fn`` is not a Python function, the signature cannot be parsed, has a
            non-void return type or a parameter type mircuda cannot pass, or an option is unknown.
    """
    py = getattr(fn, "py_func", fn)
    dropped = _jit_options(fn)
    if dropped:
        raise ContractError("fn", "a plain Python function, or a numba.cuda.jit dispatcher without options",
                            f"a dispatcher with options {dropped}",
                            "pass them to numba_kernel instead (fastmath=, lineinfo=, max_registers=, ...): "
                            "mircuda compiles the Python function itself")
    if not callable(py) or not hasattr(py, "__code__"):
        raise ContractError("fn", "a Python function (or a numba.cuda.jit dispatcher)", type(fn).__name__)
    try:
        args, restype = _compat.normalize_signature(signature)
    except Exception as exc:
        raise ContractError("signature", "a Numba signature such as 'void(float32[:], float32)'", repr(signature),
                            str(exc)) from None
    if restype not in (None, _compat.types.void, _compat.types.none):
        raise ContractError("signature", "a kernel signature returning void", str(restype))
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ContractError(unknown[0], f"one of the options {', '.join(_OPTIONS)}", repr(options[unknown[0]]))
    norm = {"fastmath": False, "lineinfo": False, "opt": True, "max_registers": None, "launch_bounds": None,
            "lto": False}
    norm.update(options)
    for flag in ("fastmath", "lineinfo", "opt", "lto"):
        if type(norm[flag]) is not bool:
            raise ContractError(flag, "a bool", repr(norm[flag]))
    mr = norm["max_registers"]
    if mr is not None and (type(mr) is not int or not 16 <= mr <= 255):
        raise ContractError("max_registers", "None or an int in [16, 255]", repr(mr))
    lb = norm["launch_bounds"]
    if lb is not None and not ((type(lb) is int and lb > 0) or (isinstance(lb, tuple) and 1 <= len(lb) <= 3
                               and all(type(x) is int and x > 0 for x in lb))):
        raise ContractError("launch_bounds", "None, a positive int or a tuple of 1-3 positive ints", repr(lb))
    return NumbaKernelSource(py, tuple(args), tuple(sorted(norm.items())))
