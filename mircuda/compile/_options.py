"""Compile options: a validated, normalized, hashable description of one NVRTC invocation."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..dtypes import is_integer_value
from ..errors import ContractError

__all__ = ["CompileOptions", "ALLOWED_EXTRA_FLAGS", "DIAGNOSTIC_MAX", "NO_NVRTC_CACHE_FLAG", "RELOCATABLE_FLAG"]

DIAGNOSTIC_MAX = 99999
"""The largest number ``diag_suppress`` takes, a bound on the syntax (``warning #177-D``) rather than NVRTC's list:
NVRTC itself refuses a number it does not know when the program compiles (13.0 knows none above 3794)."""

RELOCATABLE_FLAG = "--relocatable-device-code=true"
"""NVRTC's flag for relocatable device code (``-rdc``)."""

NO_NVRTC_CACHE_FLAG = "--no-cache"
"""NVRTC 13's flag that keeps a compile out of the CUDA driver's compute cache (passed with
``ptxas_verbose``: a cached CUBIN has no ptxas report)."""

_Define = tuple[str, str | int | None]  # one macro as the constructor takes it

_STANDARDS = ("c++03", "c++11", "c++14", "c++17", "c++20")
_MACRO = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

ALLOWED_EXTRA_FLAGS: tuple[str, ...] = (
    "--ftz=true", "--ftz=false", "--prec-div=true", "--prec-div=false",
    "--prec-sqrt=true", "--prec-sqrt=false", "--fmad=true", "--fmad=false",
    "--restrict", "--extra-device-vectorization", "--device-as-default-execution-space",
    "--disable-warnings", "--dopt=on", "--dopt=off", "--device-int128",
)
"""NVRTC flags ``CompileOptions.extra_flags`` accepts. Flags that change the target, the include
search path or the output kind are refused: they have fields of their own or are set by mircuda."""


@dataclass(frozen=True)
class CompileOptions:
    """Options of one compilation.

    Attributes:
        std: C++ standard, one of ``c++03``..``c++20`` (NVRTC ``--std``).
        defines: macros: give ``{"NAME": value}`` (value a str, an int or ``None``, which defines
            the name without a value) or ``(name, value)`` pairs; the field holds them as a tuple of
            ``(name, text or None)`` pairs sorted by name (``{"N": 4}`` becomes ``(("N", "4"),)``).
        fast_math: ``--use_fast_math``.
        line_info: ``--generate-line-info`` (for Nsight Compute source views).
        max_registers: ``--maxrregcount``; ``None`` lets the compiler choose.
        extra_flags: further flags from :data:`ALLOWED_EXTRA_FLAGS`.
        output: ``"cubin"`` (the default: loads on any driver of the same major version) or ``"ptx"``
            (JIT-compiled by the driver at load; needs a driver at least as new as NVRTC).
        device_debug: ``--device-debug`` (``-G``): debug information and no device optimization (for
            cuda-gdb and compute-sanitizer source lines; much slower code).
        diag_suppress: NVRTC diagnostic numbers to silence (``--diag-suppress=177,550``; the number
            is the one after ``#`` in a warning such as ``warning #177-D``); sorted, each once.
        ptxas_verbose: ``--ptxas-options=-v``: ptxas reports each kernel's registers, shared memory,
            stack and spills into the program log, parsed by ``CompiledProgram.resource_usage()``
            (CUBIN output only; the report is not issued as a warning). Also passes ``--no-cache``:
            NVRTC 13 would otherwise take a CUBIN another process compiled from the CUDA driver's
            compute cache, without running ptxas, and the log would have no report.
        relocatable_device_code: ``--relocatable-device-code=true`` (``-rdc``): the output is a
            relocatable object whose ``extern __device__`` functions and variables may be defined
            in other translation units, to be linked by nvJitLink (``mc.cuda_link``); a module with
            unresolved references cannot be loaded on its own. (``mc.cuda_link`` compiles its CUDA C
            inputs this way whatever this field says.)

    Raises:
        ContractError: a field has an invalid value (named in the error).
    """

    std: str = "c++17"
    defines: tuple[tuple[str, str | None], ...] = ()
    fast_math: bool = False
    line_info: bool = False
    max_registers: int | None = None
    extra_flags: tuple[str, ...] = ()
    output: Literal["cubin", "ptx"] = "cubin"
    device_debug: bool = False
    diag_suppress: tuple[int, ...] = ()
    ptxas_verbose: bool = False
    relocatable_device_code: bool = False
    key: str = field(init=False, repr=False, compare=False)

    if TYPE_CHECKING:
        # What the constructor accepts; __post_init__ normalizes ``defines`` to sorted (name, value)
        # pairs, the type the field holds afterwards (the dataclass's own __init__ runs at run time).
        def __init__(self, std: str = "c++17",
                     defines: Mapping[str, str | int | None] | tuple[_Define, ...] | list[_Define] = (),
                     fast_math: bool = False, line_info: bool = False, max_registers: int | None = None,
                     extra_flags: tuple[str, ...] | list[str] = (), output: Literal["cubin", "ptx"] = "cubin",
                     device_debug: bool = False, diag_suppress: tuple[int, ...] | list[int] = (),
                     ptxas_verbose: bool = False, relocatable_device_code: bool = False) -> None: ...

    def __post_init__(self) -> None:
        if not isinstance(self.std, str) or self.std not in _STANDARDS:  # str first: an array's `in` is ambiguous
            raise ContractError("std", f"one of {', '.join(_STANDARDS)}", repr(self.std))
        if not isinstance(self.defines, (Mapping, tuple, list)):
            raise ContractError("defines", "a mapping of macro name to value", repr(self.defines))
        items = self.defines.items() if isinstance(self.defines, Mapping) else self.defines
        norm: list[tuple[str, str | None]] = []
        for entry in items:
            if not (isinstance(entry, tuple) and len(entry) == 2):
                raise ContractError("defines", "a mapping of macro name to value", repr(self.defines))
            name, value = entry
            if not isinstance(name, str) or not _MACRO.fullmatch(name):
                raise ContractError("defines", "macro names that are C identifiers", repr(name))
            if is_integer_value(value):
                value = int(value)
            elif value is not None and not isinstance(value, str):
                raise ContractError(f"defines[{name!r}]", "a str, an int or None", repr(value))
            text = None if value is None else _define_text(name, value)
            norm.append((name, text))
        names = [n for n, _ in norm]
        if len(set(names)) != len(names):
            raise ContractError("defines", "each macro once", repr(names))
        object.__setattr__(self, "defines", tuple(sorted(norm)))
        for attr in ("fast_math", "line_info", "device_debug", "ptxas_verbose", "relocatable_device_code"):
            if type(getattr(self, attr)) is not bool:
                raise ContractError(attr, "a bool", repr(getattr(self, attr)))
        if self.max_registers is not None:
            # a numpy integer is taken as the int it holds (the key and the flags print it as one)
            if not is_integer_value(self.max_registers) or not 16 <= self.max_registers <= 255:
                raise ContractError("max_registers", "None or an int in [16, 255]", repr(self.max_registers))
            object.__setattr__(self, "max_registers", int(self.max_registers))
        if isinstance(self.diag_suppress, (str, bytes)) or not isinstance(self.diag_suppress, (tuple, list, set,
                                                                                               frozenset)):
            raise ContractError("diag_suppress", "a sequence of diagnostic numbers such as (177, 550)",
                                repr(self.diag_suppress))
        for number in self.diag_suppress:
            if not is_integer_value(number) or not 0 < number <= DIAGNOSTIC_MAX:
                raise ContractError("diag_suppress", f"diagnostic numbers, ints in [1, {DIAGNOSTIC_MAX}] (e.g. 177 "
                                    "for 'warning #177-D')", repr(number))
        object.__setattr__(self, "diag_suppress", tuple(sorted({int(n) for n in self.diag_suppress})))
        if isinstance(self.extra_flags, str) or not isinstance(self.extra_flags, (tuple, list)):
            raise ContractError("extra_flags", "a tuple of flags", repr(self.extra_flags))
        for flag in self.extra_flags:
            if not isinstance(flag, str) or flag not in ALLOWED_EXTRA_FLAGS:
                raise ContractError("extra_flags", f"flags from {', '.join(ALLOWED_EXTRA_FLAGS)}", repr(flag),
                                    "the target, include paths and output kind have their own settings")
        object.__setattr__(self, "extra_flags", tuple(self.extra_flags))
        if not isinstance(self.output, str) or self.output not in ("cubin", "ptx"):
            raise ContractError("output", "'cubin' or 'ptx'", repr(self.output))
        if self.ptxas_verbose and self.output != "cubin":
            raise ContractError("ptxas_verbose", "False with PTX output (ptxas runs only for a CUBIN)", "True")
        # JSON keeps the flags apart whatever a define's value holds (a joined string would let
        # {"A": "x<sep>-DB=y"} and {"A": "x", "B": "y"} share a key, and so a cached module).
        object.__setattr__(self, "key", json.dumps(self.flags("<arch>") + [f"output={self.output}"]))

    def flags(self, arch: str) -> list[str]:
        """The NVRTC command line for ``arch`` (e.g. ``sm_90a``), in a canonical order."""
        out = [f"--gpu-architecture={arch}", f"--std={self.std}"]
        out += [f"-D{n}" if v is None else f"-D{n}={v}" for n, v in self.defines]
        if self.fast_math:
            out.append("--use_fast_math")
        if self.line_info:
            out.append("--generate-line-info")
        if self.max_registers is not None:
            out.append(f"--maxrregcount={self.max_registers}")
        if self.device_debug:
            out.append("--device-debug")
        if self.diag_suppress:
            out.append("--diag-suppress=" + ",".join(map(str, self.diag_suppress)))
        if self.ptxas_verbose:
            # NVRTC 13 answers a compile from the CUDA driver's compute cache (CUDA_CACHE_PATH, shared by
            # every process of the user and kept across runs) whenever libcuda can be loaded, and a
            # CUBIN from that cache comes without ptxas' report: the log would depend on what other
            # processes compiled before. --no-cache makes ptxas run, so the report is always there.
            out += ["--ptxas-options=-v", NO_NVRTC_CACHE_FLAG]
        if self.relocatable_device_code:
            out.append(RELOCATABLE_FLAG)
        out += list(self.extra_flags)
        return out


def _define_text(name: str, value: str | int) -> str:
    """A define's value as NVRTC receives it: one line of UTF-8 text."""
    try:
        text = str(value)  # an int of more than sys.get_int_max_str_digits() digits raises ValueError
        text.encode()
    except UnicodeEncodeError:
        raise ContractError(f"defines[{name!r}]", "text encodable as UTF-8", repr(value)[:80]) from None
    except ValueError:
        raise ContractError(f"defines[{name!r}]", "an int Python can write in decimal",
                            f"an int of about {int(int(value).bit_length() * 0.30103)} digits") from None
    if any(c in text for c in "\n\r\0"):
        raise ContractError(f"defines[{name!r}]", "a single-line value without NUL", repr(value))
    return text
