"""``python -m mircuda build-cutlass``: build ``libmircuda_cutlass.so`` (CMake + Ninja, nvcc, CUTLASS headers)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ._errors import make_writable_directory
from ._values import positive_int

__all__ = ["cmd_build_cutlass", "register"]


def _cache_dir(text: str) -> str:
    """``--cache-dir``: a directory path; ``''`` is refused (it is not the default cache: leave the flag out), and
    so is white space around the path (``' '`` would make an invisible directory in the working directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a directory path (leave the flag out for the default cache), "
                                         f"received {text!r}")
    if text != text.strip():
        raise argparse.ArgumentTypeError(f"expected a directory path without white space around it, received {text!r}")
    if text.startswith("~"):  # --cache-dir=~/c: the shell expands ~ only at the start of a word
        raise argparse.ArgumentTypeError(f"expected a directory path the shell expanded (~ is not expanded after "
                                         f"'='; write --cache-dir ~/...), received {text!r}")
    return text


def check_cache_variable(name: str) -> None:
    """The environment variable ``name`` that places the cache, refused with white space around it (``'x '`` would
    make a directory whose name ends in a space) or a ``~`` no shell expanded.

    Raises:
        ContractError: naming the variable and its value.
    """
    from ..errors import ContractError

    value = os.environ[name]
    if value != value.strip() or value.startswith("~"):
        raise ContractError(name, "a directory path without white space around it or a leading ~", repr(value))


def cmd_build_cutlass(args: argparse.Namespace) -> int:
    import mircuda as mc
    from mircuda.matmul._build import (build, cache_root, check_families_build, default_archs, parse_archs,
                                       parse_families)

    if args.jobs is not None and args.jobs < 1:
        raise mc.ContractError("--jobs", "a positive number of parallel compile jobs", str(args.jobs))
    if args.arch is not None and not args.arch.strip():
        raise mc.ContractError("--arch", "comma-separated SASS targets among 90a, 120f", repr(args.arch))
    archs = parse_archs(args.arch) if args.arch else default_archs()
    families = parse_families(args.families) if args.families is not None else ()
    if args.families is not None and not families:  # "" or ",": not "every family" by accident
        raise mc.ContractError("--families", "comma-separated family names (leave the flag out for every family)",
                               repr(args.families))
    check_families_build(families, archs)
    # Checked before the toolchain is searched or anything is configured (the cache directory is made here).
    if args.cache_dir is not None:
        make_writable_directory(Path(args.cache_dir), "--cache-dir")
    elif os.environ.get("MIRCUDA_CACHE_DIR"):
        check_cache_variable("MIRCUDA_CACHE_DIR")
        make_writable_directory(cache_root(), "MIRCUDA_CACHE_DIR")
    else:
        if os.environ.get("XDG_CACHE_HOME"):
            check_cache_variable("XDG_CACHE_HOME")
        make_writable_directory(cache_root(), "--cache-dir (default)")
    path = build(archs, args.jobs, Path(args.cache_dir) if args.cache_dir else None, families)
    print(path)
    return 0


def register(sub: Any) -> None:
    """Add ``build-cutlass`` to the CLI's subparsers."""
    p = sub.add_parser("build-cutlass", help="build libmircuda_cutlass.so (CMake + Ninja, nvcc, CUTLASS headers)")
    p.add_argument("--arch", help="comma-separated SASS targets among 90a, 120f (default: MIRCUDA_CUDA_ARCH or both)")
    p.add_argument("--jobs", type=positive_int, help="parallel compile jobs (default: ninja's)")
    p.add_argument("--cache-dir", type=_cache_dir, help="build cache root (default: $MIRCUDA_CACHE_DIR/cutlass, else "
                   "$XDG_CACHE_HOME/mircuda/cutlass, else ~/.cache/mircuda/cutlass)")
    p.add_argument("--families", help="comma-separated subset of the kernel families to build, for a quicker "
                   "build of the ones you need (e.g. FP8, FP4, SM90_COOP192; default: all of the archs' families)")
    p.set_defaults(func=cmd_build_cutlass, flags={"arch": "--arch", "archs": "--arch", "jobs": "--jobs", "root": "--cache-dir",
                                                         "families": "--families"})
