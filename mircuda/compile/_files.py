"""CUDA C sources read from files next to the Python module that uses them."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Sequence

from ..errors import ContractError
from ._source import CudaSource, check_name_expressions

__all__ = ["cuda_kernel_file", "cuda_kernel_files"]


def _base_directory(relative_to: str | os.PathLike[str] | None, depth: int) -> tuple[str, str]:
    """The directory relative paths are resolved against, and a phrase saying where it came from."""
    if relative_to is not None:
        if not isinstance(relative_to, (str, os.PathLike)):
            raise ContractError("relative_to", "None, a str or an os.PathLike", type(relative_to).__name__)
        given = os.fspath(relative_to)
        if isinstance(given, bytes) or not _is_path_text(given):
            raise ContractError("relative_to", "a directory path (str) without NUL, encodable as UTF-8",
                                repr(relative_to))
        base = os.path.abspath(given)
        return base, f"{base!r} (relative_to)"
    caller = sys._getframe(depth + 1).f_code.co_filename
    if os.path.isfile(caller):
        caller = os.path.abspath(caller)
        return os.path.dirname(caller), f"{os.path.dirname(caller)!r}, the directory of the calling file {caller}"
    # An interactive session or a notebook cell has no file of its own.
    cwd = os.getcwd()
    return cwd, f"the working directory {cwd!r} (the caller {caller!r} is not a file)"


def _resolve(path: object, argument: str, base: str) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise ContractError(argument, "a path (str or os.PathLike)", type(path).__name__)
    text = os.fspath(path)
    if isinstance(text, bytes) or not text or any(c in text for c in "\n\r") or not _is_path_text(text):
        raise ContractError(argument, "a non-empty file path without NUL or line breaks, encodable as UTF-8",
                            repr(path), "the path names the NVRTC program, which NVRTC takes as UTF-8 text")
    resolved = os.path.normpath(os.path.join(base, text))
    if not _is_path_text(resolved):  # the base directory's own name is not UTF-8
        raise ContractError(argument, "a file whose absolute path is encodable as UTF-8", repr(resolved),
                            "the path names the NVRTC program, which NVRTC takes as UTF-8 text")
    return resolved


def _is_path_text(text: str) -> bool:
    """No NUL (no OS path holds one) and encodable as UTF-8 (a name that is not, e.g. b"\\xff"
    decoded by os.fsdecode, cannot become an NVRTC program name)."""
    if "\0" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _read_regular(path: str) -> str:
    """The file's text; O_NONBLOCK so that a FIFO swapped in after a stat cannot block the open, and
    the fstat of the opened file refuses anything but a regular file before a read could block."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(fd, encoding="utf-8", closefd=True) as f:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(mode):
            raise _NotRegular(_kind(mode))
        return f.read()


class _NotRegular(Exception):
    pass


def _read(path: str, argument: str, given: object, origin: str) -> str:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            raise _NotRegular(_kind(st.st_mode))
        return _read_regular(path)
    except _NotRegular as exc:
        reason = f"{exc}, not a regular file"
    except FileNotFoundError:
        reason = "no such file"
    except IsADirectoryError:
        reason = "a directory"
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    given_path = os.fspath(given)  # type: ignore[call-overload]
    hint = "" if os.path.isabs(given_path) else f"{given_path!r} was resolved against {origin}"
    raise ContractError(argument, "a readable regular UTF-8 CUDA C file", f"{path!r} ({reason})", hint)


def cuda_kernel_file(path: str | os.PathLike[str], *,
                     relative_to: str | os.PathLike[str] | None = None,
                     name_expressions: Sequence[str] = ()) -> CudaSource:
    """Embed a CUDA C file as a source, read now (at module import when called at module level).

    A relative ``path`` is resolved against the directory of the Python file that calls this
    function — not the working directory — so a package can ship ``kernels/fill.cu`` beside its
    modules; in an interactive session (no caller file) against the working directory. The source's
    name is the resolved absolute path: NVRTC diagnostics name it, and NVRTC searches its directory
    first for quoted ``#include "..."`` (those headers are part of the cache key, see
    :class:`Compiler`).

    Args:
        path: the ``.cu`` file, absolute or relative as above.
        relative_to: resolve against this directory instead (for helpers that load files on behalf
            of their callers).
        name_expressions: C++ names of templated kernels to instantiate and bind by that name (see
            :func:`~mircuda.compile.cuda_kernel`).

    Raises:
        ContractError: the resolved file is missing, unreadable or not UTF-8; the message gives the
            resolved path and what it was resolved against. A bad name expression.
    """
    expressions = check_name_expressions(name_expressions)
    base, origin = _base_directory(relative_to, 1)
    resolved = _resolve(path, "path", base)
    return CudaSource(_read(resolved, "path", path, origin), resolved, expressions)


def cuda_kernel_files(*paths: str | os.PathLike[str],
                      relative_to: str | os.PathLike[str] | None = None,
                      name_expressions: Sequence[str] = ()) -> CudaSource:
    """Embed ordered fragments as one self-contained translation unit, read now.

    ``cuda_kernel_files("common.cuh", "gemv.cu")`` is the text of each file in order, each preceded
    by ``#line 1 "<its absolute path>"``, so NVRTC diagnostics name the original file and line.
    Fragments need no include path to find each other. Paths resolve as in
    :func:`cuda_kernel_file`; the source's name is the first fragment's resolved path, and the
    composed text (with the markers) is what the cache key covers. ``name_expressions`` as for
    :func:`cuda_kernel_file`.

    Raises:
        ContractError: no path given, or a fragment is missing, unreadable or not UTF-8 (named by
            its position, e.g. ``paths[1]``, with its resolved path). A bad name expression.
    """
    expressions = check_name_expressions(name_expressions)
    if not paths:
        raise ContractError("paths", "at least one CUDA C file", "none")
    base, origin = _base_directory(relative_to, 1)
    parts: list[str] = []
    resolved_paths: list[str] = []
    for i, p in enumerate(paths):
        resolved = _resolve(p, f"paths[{i}]", base)
        text = _read(resolved, f"paths[{i}]", p, origin)
        escaped = resolved.replace("\\", "\\\\").replace('"', '\\"')
        parts.append(f'#line 1 "{escaped}"\n')
        parts.append(text if text.endswith("\n") or not text else text + "\n")
        resolved_paths.append(resolved)
    return CudaSource("".join(parts), resolved_paths[0], expressions)
