"""``python -m mircuda compile``: offline NVRTC compilation of a file to CUBIN, PTX or a fatbin of
several targets, or of several files as relocatable device code linked by nvJitLink (``-rdc``); no GPU
needed."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Any, TextIO

from ..errors import CompileWarning, ContractError
from ._errors import check_output_file
from ._values import is_decimal

__all__ = ["cmd_compile", "register"]


def _define(text: str) -> tuple[str, str | None]:
    name, sep, value = text.partition("=")
    return name, (value if sep else None)


def _diagnostics(text: str) -> list[int]:
    """``--diag-suppress``: comma-separated diagnostic numbers (ASCII digits, :func:`is_decimal`).

    Raises:
        argparse.ArgumentTypeError: an empty item, another character or a number outside [1, 99999].
    """
    from ..compile._options import DIAGNOSTIC_MAX

    items = [n.strip() for n in text.split(",")]
    if not all(is_decimal(n) and 1 <= int(n) <= DIAGNOSTIC_MAX for n in items):
        raise argparse.ArgumentTypeError(f"expected diagnostic numbers in [1, {DIAGNOSTIC_MAX}] such as 177 or 177,550, "
                                         f"received {text[:80]!r}")
    return [int(n) for n in items]


def _arch(text: str) -> str:
    """``--arch``: one NVRTC target per flag (the library checks which); a comma list, which build-cutlass's
    ``--arch`` takes, is refused here with how to ask for several targets.

    Raises:
        argparse.ArgumentTypeError: ``text`` holds a comma.
    """
    if "," in text:
        raise argparse.ArgumentTypeError(f"expected one NVRTC target per --arch (repeat the flag for a fatbin: "
                                         f"--arch sm_90 --arch sm_120f), received {text!r}")
    return text


def _include_path(text: str) -> str:
    """``-I``: a directory path (whether it exists is CompilerConfig's to say); ``''`` is refused: it would be
    the working directory, a root the user never named.

    Raises:
        argparse.ArgumentTypeError: ``text`` is empty.
    """
    if not text:
        raise argparse.ArgumentTypeError(f"expected a directory path (. for the working directory), received {text!r}")
    return text


MAX_REGISTERS = (16, 255)
"""``--maxrregcount``'s range (NVRTC's ``--maxrregcount``, as CompileOptions.max_registers takes it)."""


def _max_registers(text: str) -> int:
    """``--maxrregcount``: ASCII digits, an int in :data:`MAX_REGISTERS`.

    Raises:
        argparse.ArgumentTypeError: another character or a value outside the range.
    """
    low, high = MAX_REGISTERS
    if not is_decimal(text) or not low <= int(text) <= high:
        raise argparse.ArgumentTypeError(f"expected registers per thread, an integer in [{low}, {high}], "
                                         f"received {text[:40]!r}")
    return int(text)


class _Version(argparse.Action):
    """``--version``: mircuda's and NVRTC's versions (NVRTC is loaded only when asked)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print mircuda's and NVRTC's versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from .. import __version__
        from ..compile import nvrtc_version, supported_archs

        print(f"mircuda {__version__}, NVRTC {'.'.join(map(str, nvrtc_version()))} "
              f"(targets {', '.join(f'sm_{a}' for a in supported_archs())})")
        parser.exit(0)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``compile`` to the CLI's subparsers."""
    p = sub.add_parser(
        "compile", help="compile a CUDA C file with NVRTC for any target (no GPU needed) and write CUBIN, PTX "
                        "or a fatbin",
        description="Compile FILE with NVRTC for --arch, which need not be present on this machine, and write "
                    "the CUBIN (default) or PTX to -o (- for standard output). Several --arch make one fatbin "
                    "(with nvFatbin: pip install nvidia-nvfatbin). With -rdc, each FILE is compiled as relocatable "
                    "device code and nvJitLink (the nvidia-nvjitlink wheel, a dependency) links them into one CUBIN. Quoted "
                    "includes search FILE's directory, then each -I root in order; nothing is taken from "
                    "environment variables.")
    p.add_argument("file", nargs="+", metavar="FILE",
                   help="the CUDA C translation unit (.cu); several with -rdc")
    p.add_argument("-rdc", "--relocatable-device-code", dest="rdc", action="store_true",
                   help="compile each FILE as relocatable device code and link them all into one CUBIN with "
                        "nvJitLink (extern __device__ functions and variables resolved across files)")
    p.add_argument("-dlto", "--link-time-optimization", dest="lto", action="store_true",
                   help="with -rdc: compile each FILE to LTO-IR and optimize the link as one program (a kernel "
                        "can inline another file's device functions)")
    p.add_argument("--arch", required=True, action="append", type=_arch, metavar="ARCH",
                   help="NVRTC target: sm_90, sm_90a, sm_120f, ...; compute_* with --ptx (repeatable, one target "
                        "per flag: a fatbin)")
    p.add_argument("-I", "--include-path", dest="include_paths", action="append", default=[], type=_include_path,
                   metavar="DIR",
                   help="an include root (repeatable, searched in order)")
    p.add_argument("-D", "--define", dest="defines", action="append", default=[], metavar="NAME[=VALUE]",
                   help="a macro (repeatable)")
    p.add_argument("--std", default="c++17", help="C++ standard (default c++17)")
    p.add_argument("--use_fast_math", "--fast-math", dest="fast_math", action="store_true",
                   help="fast, less precise math (--use_fast_math)")
    p.add_argument("-lineinfo", "--generate-line-info", "--line-info", dest="line_info", action="store_true",
                   help="source line information for profilers")
    p.add_argument("-G", "--device-debug", dest="device_debug", action="store_true",
                   help="device debug information, no optimization")
    p.add_argument("--maxrregcount", dest="max_registers", type=_max_registers, metavar="N",
                   help="at most N registers per thread (16-255)")
    p.add_argument("--diag-suppress", dest="diag_suppress", type=_diagnostics, action="append", default=[],
                   metavar="N[,N...]",
                   help="silence NVRTC diagnostics by number, 1 to 99999 (repeatable; NVRTC refuses a number it does "
                        "not know when it compiles)")
    p.add_argument("--ptxas-options", dest="ptxas_options", metavar="OPTS",
                   help="written --ptxas-options=-v (with '='; a lone -v reads as a flag): print each kernel's "
                        "registers, shared memory, stack and spills (ptxas' report)")
    p.add_argument("--name-expression", dest="name_expressions", action="append", default=[], metavar="EXPR",
                   help="a C++ kernel name to instantiate and print the lowered name of, e.g. 'fill<float>' "
                        "(repeatable)")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--cubin", dest="output", action="store_const", const="cubin", help="write CUBIN (default)")
    kind.add_argument("--ptx", dest="output", action="store_const", const="ptx", help="write PTX text")
    p.add_argument("-o", "--output-file", dest="out", required=True, metavar="OUT",
                   help="where to write the result; - writes it to standard output (messages go to stderr)")
    p.add_argument("--version", action=_Version)
    p.set_defaults(func=cmd_compile, output="cubin", flags=FLAGS, phrases=PHRASES)


# The library's names for what this command's flags set (cli._errors rewrites messages with them).
FLAGS = {"arch": "--arch", "include_paths": "-I/--include-path", "defines": "-D/--define", "std": "--std",
         "output": "--cubin/--ptx", "source": "FILE", "path": "FILE", "max_registers": "--maxrregcount",
         "diag_suppress": "--diag-suppress", "name_expressions": "--name-expression",
         "ptxas_verbose": "--ptxas-options=-v", "sources": "FILE"}
PHRASES = {"CompileOptions(output='ptx')": "--ptx", "CompileOptions(output='cubin')": "--cubin",
           'CompileOptions(output="ptx")': "--ptx", 'CompileOptions(output="cubin")': "--cubin",
           "expected False with PTX output (ptxas runs only for a CUBIN), received True":
               "expected it left out with --ptx (ptxas runs only for a CUBIN), received both",
           "(relative_to)": "(the working directory)"}


def _check_output(path: str, source: str) -> None:
    out = os.path.abspath(path) if path else ""
    if not path or os.path.isdir(out) or not os.path.isdir(os.path.dirname(out)):
        raise ContractError("-o", "a file path in an existing directory, or - for standard output", repr(path))
    if os.path.exists(out) and os.path.exists(source) and os.path.samefile(out, source):
        raise ContractError("-o", "a file other than the source", repr(path), "it would overwrite FILE")


def _report_warnings(caught: list[warnings.WarningMessage]) -> None:
    """NVRTC's warnings as the command's own lines on stderr (``warning: ...``, one per log line): the
    warnings module would place them at the caller, which for ``python -m`` is ``<frozen runpy>``."""
    for w in caught:
        if not isinstance(w.message, CompileWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
            continue
        for line in str(w.message).splitlines():
            if line.strip():
                print(f"warning: {line}", file=sys.stderr)


def cmd_compile(args: argparse.Namespace) -> int:
    from ..compile import CompileOptions, CompilerConfig, OfflineCompiler, cuda_kernel_file, cuda_link
    from ..compile._fatbin import build_fatbin, nvfatbin_module
    from ..compile._link import nvjitlink_module

    files: list[str] = args.file
    if args.lto and not args.rdc:
        raise ContractError("-dlto", "-rdc as well (link-time optimization links relocatable device code)",
                            "-dlto alone")
    if len(files) > 1 and not args.rdc:
        raise ContractError("FILE", "one file, or several with -rdc (relocatable device code linked into one "
                            "CUBIN)", f"{len(files)} files")
    if args.rdc and args.output == "ptx":
        raise ContractError("-rdc", "CUBIN output (nvJitLink links relocatable CUBINs)", "--ptx")
    if len(files) > 1 and args.name_expressions:
        raise ContractError("--name-expression", "one FILE (an expression is resolved in one translation unit)",
                            f"{len(files)} files")
    to_stdout = args.out == "-"
    if not to_stdout:  # checked before compiling: a compile may take minutes
        check_output_file(args.out, "-o")
        for file in files:
            _check_output(args.out, file)
    if args.ptxas_options is not None and args.ptxas_options != "-v":
        raise ContractError("--ptxas-options", "-v (the only ptxas option the compile command passes)",
                            repr(args.ptxas_options))
    archs: list[str] = list(dict.fromkeys(args.arch))  # a target named twice is compiled once
    if len(archs) > 1:
        nvfatbin_module()  # refuse before compiling anything when nvFatbin is missing
    source: Any
    if args.rdc:
        nvjitlink_module()  # refuse before compiling anything when nvJitLink is missing
        units = [cuda_kernel_file(f, relative_to=os.getcwd(), name_expressions=args.name_expressions) for f in files]
        source = cuda_link(units, " + ".join(u.name for u in units), lto=args.lto)
    else:
        source = cuda_kernel_file(files[0], relative_to=os.getcwd(), name_expressions=args.name_expressions)
    options = CompileOptions(
        std=args.std, defines=tuple(_define(d) for d in args.defines), output=args.output, fast_math=args.fast_math,
        line_info=args.line_info, device_debug=args.device_debug, max_registers=args.max_registers,
        diag_suppress=tuple(n for group in args.diag_suppress for n in group),
        ptxas_verbose=args.ptxas_options == "-v")
    config = CompilerConfig(include_paths=tuple(args.include_paths))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CompileWarning)
        programs = [OfflineCompiler(arch, config).compile(source, options) for arch in archs]
    _report_warnings(caught)
    if len(programs) == 1:
        # The cache keeps PTX NUL-terminated for the driver; a .ptx file is plain text.
        program = programs[0]
        image = program.image.rstrip(b"\0") if program.output == "ptx" else program.image
        kind = program.output.upper() + (f" (linked by nvJitLink{', LTO' if args.lto else ''})" if args.rdc else "")
    else:
        image = build_fatbin(programs, source.name)
        kind = f"fatbin ({program_kinds(programs)})"
    if to_stdout:
        sys.stdout.buffer.write(image)
        sys.stdout.buffer.flush()
    else:
        try:
            with open(args.out, "wb") as f:
                f.write(image)
        except OSError as exc:  # a full device (/dev/full), a quota: said in one line by cli.main
            raise ContractError("-o", "a path the result can be written to", repr(args.out),
                                f"writing {len(image)} bytes failed: {exc.strerror or exc}") from exc
    info: TextIO = sys.stderr if to_stdout else sys.stdout
    nvrtc = ".".join(map(str, programs[0].nvrtc_version))
    print(f"{source.name} -> {'standard output' if to_stdout else args.out}: {kind} for {', '.join(archs)}, "
          f"{len(image)} bytes, NVRTC {nvrtc}", file=info)
    for expression, lowered in programs[0].symbols:
        print(f"  {expression} = {lowered}", file=info)
    if options.ptxas_verbose:
        for program in programs:
            for name, r in program.resource_usage().items():
                print(f"  {program.arch} {name}: {r.registers} registers, {r.shared_bytes} bytes smem, "
                      f"{r.stack_frame_bytes} bytes stack frame, {r.spill_store_bytes} bytes spill stores, "
                      f"{r.spill_load_bytes} bytes spill loads, {r.barriers} barriers", file=info)
    return 0


def program_kinds(programs: list[Any]) -> str:
    return ", ".join(f"{p.output.upper()} {p.arch}" for p in programs)
