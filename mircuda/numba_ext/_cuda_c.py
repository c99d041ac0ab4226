"""CUDA C device functions inside Numba kernels: declarations, relocatable compilation, prototype checks.

A CUDA C function becomes callable from a Numba kernel through numba-cuda's ``declare_device`` with
the C ABI (arguments and result by value). mircuda compiles the CUDA C with its own NVRTC, as
relocatable device code for the kernel's exact target, with the kernel's :class:`CompileOptions`
(standard, macros, fast math), and links it into the kernel with nvJitLink. Before linking it compares
each declaration's PTX prototype with the definition NVRTC produced, so a declaration whose types do
not match the C function is an error at compile time rather than garbage at run time.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import threading
from pathlib import Path
from collections.abc import Sequence
from typing import Any

from ..compile import CompileOptions, CudaSource
from ..compile._includes import scan_dependencies
from ..compile._nvrtc import nvrtc_compile, validate_arch
from ..compile._toolkit import toolkit_include_dirs
from ..errors import CompileError, ContractError
from . import _compat

__all__ = ["CudaLinkSource", "declare_device", "compile_relocatable", "check_prototypes", "read_source_file"]


class CudaLinkSource(_compat.CUSource):
    """CUDA C linked into Numba kernels (a numba-cuda ``CUSource`` that carries mircuda's source).

    mircuda compiles it with its own NVRTC when it builds a kernel; numba-cuda's dispatcher, when the
    same kernel is launched the classic way, compiles ``data`` with numba-cuda's NVRTC.

    Attributes:
        source: the :class:`CudaSource` (text, name, digest).
        include_dirs: directories searched by ``#include "..."`` (the source file's own directory).
    """

    def __init__(self, source: CudaSource, include_dirs: tuple[str, ...] = ()) -> None:
        super().__init__(source.text, name=source.name)
        self.source = source
        self.include_dirs = include_dirs

    def checked_source(self, checks: list[tuple[str, str, tuple[str, ...]]]) -> CudaSource:
        """The source with compile-time checks appended: each ``(name, result type, parameter types)``
        declaration (Numba's spelling) must match the C function's types (``static_assert``).
        Appending keeps every user line number; the checks emit no code."""
        lines = []
        for name, ret, params in sorted(set(checks)):
            fp = f"decltype(&{name})"
            lines.append(f"static_assert(mircuda_check::fn<{fp}>::arity == {len(params)}, \"mircuda: "
                         f"declare_device('{name}'): the C function does not take {len(params)} parameter(s)\");")
            for what, numba_type, expr in [("result", ret, f"mircuda_check::fn<{fp}>::ret")] + [
                    (f"parameter {i + 1}", t, f"mircuda_check::arg<{i}, {fp}>::type") for i, t in enumerate(params)]:
                test = _c_type_test(numba_type, expr)
                if test:
                    lines.append(f"static_assert({test}, \"mircuda: declare_device('{name}'): the C {what} type "
                                 f"is not the C type of Numba's {numba_type}\");")
        if not lines:
            return self.source
        return CudaSource(self.source.text + _CHECK_PRELUDE + "\n".join(lines) + "\n", self.source.name)


_CHECK_PRELUDE = r"""
// ---- appended by mircuda: declare_device signature checks ----
namespace mircuda_check {
template <class A, class B> struct same { enum { value = 0 }; };
template <class A> struct same<A, A> { enum { value = 1 }; };
template <class F> struct fn;
template <class R, class... A> struct fn<R (*)(A...)> { typedef R ret; enum { arity = sizeof...(A) }; };
template <int I, class F> struct arg;
template <class R, class H, class... T> struct arg<0, R (*)(H, T...)> { typedef H type; };
template <int I, class R, class H, class... T> struct arg<I, R (*)(H, T...)> {
  typedef typename arg<I - 1, R (*)(T...)>::type type; };
}
"""

# Numba type -> the C types a C function may use for it (16-bit floats: any 2-byte type, since the
# C side may use __half/__nv_bfloat16 or their bits as unsigned short).
_C_TYPES: dict[str, tuple[str, ...]] = {
    "float32": ("float",), "float64": ("double",), "int8": ("signed char", "char"), "uint8": ("unsigned char",),
    "int16": ("short",), "uint16": ("unsigned short",), "int32": ("int",), "uint32": ("unsigned int",),
    "int64": ("long long", "long"), "uint64": ("unsigned long long", "unsigned long"), "bool": ("bool",),
    "boolean": ("bool",), "none": ("void",),
}


def _c_type_test(numba_type: str, expr: str) -> str | None:
    if numba_type in ("float16", "bfloat16"):
        return f"sizeof({expr}) == 2"
    options = _C_TYPES.get(numba_type)
    if options is None:
        return None  # a type mircuda does not map (pointers, records): the PTX prototype check remains
    return " || ".join(f"mircuda_check::same<{expr}, {c}>::value" for c in options)


_link_sources: dict[tuple[str, tuple[str, ...]], CudaLinkSource] = {}
_link_lock = threading.Lock()


def link_source(source: CudaSource, include_dirs: tuple[str, ...] = ()) -> CudaLinkSource:
    """The one linkable object for this source (declarations sharing it link its code once)."""
    key = (source.digest, include_dirs)
    with _link_lock:
        obj = _link_sources.get(key)
        if obj is None:
            obj = _link_sources[key] = CudaLinkSource(source, include_dirs)
    return obj


def read_source_file(path: str | os.PathLike[str], depth: int) -> tuple[CudaSource, tuple[str, ...]]:
    """Read a CUDA C file; a relative ``path`` is relative to the directory of the file whose code
    called the public function ``depth`` frames up (as ``cuda_kernel_file`` reads sources).

    Raises:
        ContractError: ``path`` is not a path, or the file cannot be read as UTF-8 text.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ContractError("source", "a CudaSource or the path of a CUDA C file", type(path).__name__)
    p = Path(path)
    if not p.is_absolute():
        caller = sys._getframe(depth + 1).f_code.co_filename
        base = Path(caller).resolve().parent if os.path.exists(caller) else Path.cwd()
        p = base / p
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ContractError("source", "a readable UTF-8 CUDA C file", f"{str(p)!r} ({exc})") from None
    return CudaSource(text, p.name), (str(p.parent),)


def declare_device(name: str, signature: Any, source: CudaSource | str | os.PathLike[str],
                   *, _depth: int = 1) -> Any:
    """Declare the ``extern "C" __device__`` function ``name`` of a CUDA C source for Numba kernels.

    Args:
        name: the C function's name (``extern "C"``, so unmangled).
        signature: its Numba signature with a return type, e.g. ``"float32(float32, uint8)"``. The
            C function takes and returns by value; 16-bit floats may be declared ``float16`` /
            ``bfloat16`` and defined as ``unsigned short`` (same PTX type).
        source: a :class:`CudaSource` (``mc.cuda_kernel(...)``) or the path of a ``.cu`` file,
            relative to the calling file's directory; its ``#include "..."`` search that directory.

    Returns:
        The object a Numba kernel calls (``numba.cuda.declare_device``'s descriptor).

    Raises:
        ContractError: ``name`` is not a C identifier, ``signature`` has no return type, or ``source``
            cannot be read.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ContractError("name", "the C identifier of an extern \"C\" __device__ function", repr(name))
    dirs: tuple[str, ...]
    if isinstance(source, CudaSource):
        src, dirs = source, ()
    else:
        src, dirs = read_source_file(source, _depth)
    try:
        args, restype = _compat.normalize_signature(signature)
    except Exception as exc:
        raise ContractError("signature", "a Numba signature such as 'float32(float32)'", repr(signature),
                            str(exc)) from None
    if restype is None:
        raise ContractError("signature", "a signature with a return type, e.g. 'float32(float32)' or "
                            "'void(float32)'", repr(signature))
    linked = link_source(src, dirs)
    from numba import cuda

    fn = cuda.declare_device(name, restype(*args), link=[linked], abi="c")
    # The headers the source includes are part of its identity: read now, like the source itself.
    headers = scan_dependencies(src.text, src.name, dirs, toolkit_include_dirs()).digest
    fn._mircuda_digest = hashlib.sha256(f"{name}\0{restype(*args)}\0{src.digest}\0{headers}".encode()).hexdigest()
    fn._mircuda_source = linked
    fn._mircuda_declaration = (name, str(restype), tuple(str(a) for a in args))
    return fn


def compile_relocatable(link: CudaLinkSource, arch: str, options: CompileOptions, *, lto: bool,
                        checks: Sequence[tuple[str, str, tuple[str, ...]]] = ()) -> tuple[bytes, str]:
    """Compile ``link`` with NVRTC as relocatable device code for ``arch``: ``(PTX text, or LTO-IR when
    lto, NVRTC's log)``. ``options`` supplies the standard, macros, fast math and extra flags.

    Raises:
        ContractError: a declared function is not defined in the source, or its declaration does not
            match the C definition.
        CompileError: NVRTC rejected the source (its log is in the error).
    """
    validate_arch(arch, "ptx")
    source = link.checked_source(list(checks))
    try:
        image, log, _ = nvrtc_compile(source.text, source.name, arch, options, output="ltoir" if lto else "ptx",
                                      include_paths=link.include_dirs, relocatable=True)
    except CompileError as exc:
        declared = {c[0] for c in checks}
        for missing in re.findall(r'error: identifier "(\w+)" is undefined', exc.log):
            if missing in declared:  # the checks appended for it name it; nothing defines it
                raise ContractError(missing, f"an extern \"C\" __device__ function defined in {source.name} "
                                    "(or a header it includes)", "no function of that name in it",
                                    "check the name given to declare_device and the source it names") from None
        mismatch = re.search(r"mircuda: declare_device\('(\w+)'\): ([^\"]*)", exc.log)
        if mismatch:
            raise ContractError(mismatch.group(1), f"a declare_device signature matching the C definition in "
                                f"{source.name}", mismatch.group(2),
                                "fix the Numba signature given to declare_device (or the C function)") from None
        raise
    return (image if lto else image.rstrip(b"\0")), log


_EXTERN = re.compile(r"\.extern\s+\.func\s*(\([^)]*\))?\s*([A-Za-z_$][\w$]*)\s*\(([^)]*)\)\s*;")
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")
_DEFINED = re.compile(r"\.(?:visible|weak)\s+\.func\s*(\([^)]*\))?\s*([A-Za-z_$][\w$]*)\s*\(([^)]*)\)")


def _prototype(ret: str | None, params: str) -> str:
    def norm(decls: str) -> list[str]:
        out = []
        for d in decls.split(","):
            words = d.split()
            if not words:
                continue
            # `.param .align 4 .b8 name[8]` -> `.param .align 4 .b8 [8]`: the name is not part of the type.
            last = words[-1]
            words[-1] = last[last.index("["):] if "[" in last else ""
            out.append(" ".join(w for w in words if w))
        return out

    r = norm(ret.strip("()")) if ret else []
    return f"({', '.join(r)}) ({', '.join(norm(params))})"


def check_prototypes(kernel_ptx: str, helper_ptx: str, helper_name: str) -> None:
    """Compare the kernel's ``.extern .func`` declarations with the helper's definitions.

    Raises:
        ContractError: a function the helper defines is declared with another PTX prototype (the Numba
            signature given to ``declare_device`` does not match the C function).
    """
    defined = {m.group(2): _prototype(m.group(1), m.group(3)) for m in _DEFINED.finditer(helper_ptx)}
    entries = set(_ENTRY.findall(helper_ptx))
    for m in _EXTERN.finditer(kernel_ptx):
        name = m.group(2)
        if name in entries:
            raise ContractError(name, f"an extern \"C\" __device__ function in {helper_name}",
                                "a __global__ kernel of that name", "a kernel cannot be called as a device function")
        if name in defined:
            declared = _prototype(m.group(1), m.group(3))
            if declared != defined[name]:
                raise ContractError(name, f"a declaration matching the C definition in {helper_name}: "
                                    f"{defined[name]}", f"the Numba signature's PTX prototype {declared}",
                                    "check the argument and result types given to declare_device")
