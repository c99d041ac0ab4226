"""``python -m mircuda compile``: offline NVRTC compilation of a file to CUBIN or PTX (no GPU needed)."""

from __future__ import annotations

import argparse
import os

from ..errors import ContractError
from ._errors import check_output_file

__all__ = ["cmd_compile", "register"]


def _define(text: str) -> tuple[str, str | None]:
    name, sep, value = text.partition("=")
    return name, (value if sep else None)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``compile`` to the CLI's subparsers."""
    p = sub.add_parser(
        "compile", help="compile a CUDA C file with NVRTC for any target (no GPU needed) and write CUBIN or PTX",
        description="Compile FILE with NVRTC for --arch, which need not be present on this machine, and write "
                    "the CUBIN (default) or PTX to -o. Quoted includes search FILE's directory, then each -I "
                    "root in order; nothing is taken from environment variables.")
    p.add_argument("file", help="the CUDA C translation unit (.cu)")
    p.add_argument("--arch", required=True, help="NVRTC target: sm_90, sm_90a, sm_120f, ...; compute_* with --ptx")
    p.add_argument("-I", "--include-path", dest="include_paths", action="append", default=[], metavar="DIR",
                   help="an include root (repeatable, searched in order)")
    p.add_argument("-D", "--define", dest="defines", action="append", default=[], metavar="NAME[=VALUE]",
                   help="a macro (repeatable)")
    p.add_argument("--std", default="c++17", help="C++ standard (default c++17)")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--cubin", dest="output", action="store_const", const="cubin", help="write CUBIN (default)")
    kind.add_argument("--ptx", dest="output", action="store_const", const="ptx", help="write PTX text")
    p.add_argument("-o", "--output-file", dest="out", required=True, metavar="OUT", help="where to write the result")
    p.set_defaults(func=cmd_compile, output="cubin", flags=FLAGS, phrases=PHRASES)


# The library's names for what this command's flags set (cli._errors rewrites messages with them).
FLAGS = {"arch": "--arch", "include_paths": "-I/--include-path", "defines": "-D/--define", "std": "--std",
         "output": "--cubin/--ptx", "source": "FILE", "path": "FILE"}
PHRASES = {"CompileOptions(output='ptx')": "--ptx", "CompileOptions(output='cubin')": "--cubin",
           'CompileOptions(output="ptx")': "--ptx", 'CompileOptions(output="cubin")': "--cubin"}


def cmd_compile(args: argparse.Namespace) -> int:
    from ..compile import (
        CompileOptions,
        CompilerConfig,
        OfflineCompiler,
        cuda_kernel_file,
    )

    # The output path is checked before compiling: a compile may take minutes.
    check_output_file(args.out, "-o")
    out = os.path.abspath(args.out)
    if os.path.exists(out) and os.path.exists(args.file) and os.path.samefile(out, args.file):
        raise ContractError("-o", "a file other than the source", repr(args.out), "it would overwrite FILE")
    source = cuda_kernel_file(args.file, relative_to=os.getcwd())
    options = CompileOptions(std=args.std, defines=tuple(_define(d) for d in args.defines), output=args.output)
    compiler = OfflineCompiler(args.arch, CompilerConfig(include_paths=tuple(args.include_paths)))
    program = compiler.compile(source, options)
    # The cache keeps PTX NUL-terminated for the driver; a .ptx file is plain text.
    image = program.image.rstrip(b"\0") if program.output == "ptx" else program.image
    try:
        with open(args.out, "wb") as f:
            f.write(image)
    except OSError as exc:  # a full device (/dev/full), a quota: said in one line by cli.main
        raise ContractError("-o", "a path the result can be written to", repr(args.out),
                            f"writing {len(image)} bytes failed: {exc.strerror or exc}") from exc
    print(f"{source.name} -> {args.out}: {program.output.upper()} for {program.arch}, {len(image)} bytes, "
          f"NVRTC {'.'.join(map(str, program.nvrtc_version))}")
    return 0
