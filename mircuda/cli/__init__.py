"""``python -m mircuda``: inspect the machine, profile the launch path and CUDA graphs, compile offline.

The command line sits on top of every layer of the library: one module per command, each with a
``register(subparsers)``; nothing in the library imports this package. The profiles' peer adapters
(torch, CuPy, raw ``cuda.bindings``) live with them here, and their timing comes from
:mod:`mircuda.timing`.
"""

from __future__ import annotations

import argparse
import re
import sys
import traceback
from typing import Any, NoReturn

from ..errors import MircudaError
from ._errors import cli_message, debug

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """argparse's own value errors in the same one-line form as mircuda's (``--help`` is unchanged);
    ``add_subparsers`` makes every command's parser of this class too."""

    def error(self, message: str) -> NoReturn:
        found = re.fullmatch(r"argument (\S+): expected one argument", message)
        if found:  # argparse reads a value that starts with '-' (-v, ->f32) as the next flag
            flag = found.group(1).split("/")[-1]
            message += f" (none was given, or it starts with '-': write {flag}=<value>)"
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


class _CommandParser(_Parser):
    """A command's parser: an argument it does not know is refused under its own prog (argparse's
    subparsers action hands the leftovers up to the top parser, whose message would name
    ``python -m mircuda`` instead of the command)."""

    def parse_known_args(  # type: ignore[override]  # typeshed overloads on the namespace type
            self, args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def _parser() -> argparse.ArgumentParser:
    from . import (_build_cutlass, _compile, _cutlass_check, _decoder_layer_profile, _dense_vector_profile,
                   _fp4_profile, _fp8_profile, _graph_profile, _inspect, _matmul_profile, _moe_profile,
                   _multi_gpu_profile, _profile)

    from .. import __version__

    # the module docstring's first line, without its reST quotes (``--help`` prints it as it is)
    parser = _Parser(prog="python -m mircuda", description=__doc__.splitlines()[0].replace("``", ""))
    parser.add_argument("--version", action="version", version=f"mircuda {__version__}",
                        help="print mircuda's version and exit (compile --version adds NVRTC's)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_CommandParser)
    # The order of `--help`'s command list.
    for command in (_inspect, _profile, _graph_profile, _compile, _dense_vector_profile, _matmul_profile,
                    _decoder_layer_profile, _fp8_profile, _fp4_profile, _moe_profile, _multi_gpu_profile, _build_cutlass,
                    _cutlass_check):
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns its exit status (2 on a usage error, a mircuda error, an OSError or a host
    allocation that failed: one line on stderr that names the flag, never a traceback unless
    ``MIRCUDA_DEBUG=1``)."""
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (MircudaError, OSError) as exc:
        if debug():
            traceback.print_exc()
        print(cli_message(exc, getattr(args, "flags", {}), getattr(args, "phrases", {})), file=sys.stderr)
        return 2
    except (MemoryError, ValueError) as exc:
        # Sizes are bounded per dimension while parsing; their product can still exceed the host's memory, which
        # numpy says with MemoryError, or with this ValueError past its largest array. Any other ValueError is a fault.
        if isinstance(exc, ValueError) and not str(exc).startswith("array is too big"):
            raise
        if debug():
            traceback.print_exc()
        print(f"error: MemoryError: the host could not allocate what this run asked for ({str(exc) or 'out of memory'}); "
              "ask for smaller sizes", file=sys.stderr)
        return 2
