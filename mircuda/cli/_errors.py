"""How a command's failure reaches the terminal: one line naming the flag, exit status 2.

The library names its arguments as Python does (``include_paths[0]``, ``CompileOptions(output='ptx')``);
a command registers, with ``set_defaults(flags=..., phrases=...)``, which flag each of those names is,
and the message is rewritten in the command line's terms. Set ``MIRCUDA_DEBUG=1`` to get the
traceback as well.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from ..errors import ContractError, LinkError

RESULTS_HELP = ("where to write the results (default: %(default)s; a relative path is relative to the working "
                "directory, so run from a checkout's root this is its benchmarks/results/; the default's "
                "missing directories are made)")
"""The ``--json`` help of the profile commands."""

__all__ = ["RESULTS_HELP", "cli_message", "contract_text", "make_writable_directory", "check_output_file", "check_results_file", "debug"]


def debug() -> bool:
    """``MIRCUDA_DEBUG`` is set to something other than ``""`` or ``"0"``: print tracebacks too."""
    return os.environ.get("MIRCUDA_DEBUG", "") not in ("", "0")


def cli_message(exc: BaseException, flags: Mapping[str, str] = {}, phrases: Mapping[str, str] = {}) -> str:
    """One line for ``exc``: ``error: <Kind>: <message>`` with the library's argument names (``flags``:
    Python name, without a ``[i]`` index, -> flag) and phrases (``phrases``: text -> text) replaced; a
    ContractError's hint follows its received value after a semicolon (:func:`contract_text`)."""
    if isinstance(exc, ContractError):
        flag = flags.get(exc.argument) or flags.get(re.sub(r"\[\d+\]$", "", exc.argument))
        if flag is None and (exc.argument.startswith("-") or exc.argument.isupper()):
            flag = exc.argument  # already a flag (-o) or an environment variable (MIRCUDA_CACHE_DIR)
        head = f"argument {exc.argument!r}: expected {exc.expected}, received {exc.received}"
        text = contract_text(exc)
        if flag is not None and text.startswith(head):
            text = f"{flag}: expected {exc.expected}, received {exc.received}{text[len(head):]}"
    elif isinstance(exc, LinkError):
        # str(exc) carries nvJitLink's whole log on the following lines: the traceback MIRCUDA_DEBUG=1
        # prints shows it; the line names the inputs (flags["sources"]) and the symbols.
        inputs = f"{flags['sources']} {exc.source_name}" if "sources" in flags else exc.source_name
        log = "; MIRCUDA_DEBUG=1 prints nvJitLink's log" if exc.log and not debug() else ""
        text = f"{inputs}: {exc.message} (arch {exc.arch}{log})"
    elif isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror + (f": {exc.filename!r}" if exc.filename else "")
    else:
        text = str(exc)
    for python, flag_text in phrases.items():
        text = text.replace(python, flag_text)
    return f"error: {type(exc).__name__}: {text}"


def contract_text(exc: ContractError) -> str:
    """``str(exc)`` with its hint after a semicolon (``received '/tmp'; it is a directory``): a hint goes on in
    lower case, so no full stop comes before it on a command line."""
    text = str(exc)
    if exc.hint and text.endswith(f". {exc.hint}"):
        text = f"{text[:-len(exc.hint) - 2]}; {exc.hint}"
    return text


def _file_in_the_way(path: Path) -> Path:
    """The first of ``path`` and its parents, outermost first, that exists and is not a directory (``path`` itself
    if none is found: the file appeared and went)."""
    for part in reversed((path, *path.parents)):
        if part.exists() and not part.is_dir():
            return part
    return path


def make_writable_directory(path: Path, flag: str) -> None:
    """Make ``path`` (``mkdir -p``) and check this process can write into it; a cache directory that
    cannot be made is said before any work starts.

    Raises:
        ContractError: naming ``flag``, with the operating system's reason.
    """
    expected = "a writable directory (or a path where one can be made)"
    if "\0" in str(path):
        raise ContractError(flag, expected, repr(str(path)), "it holds a NUL character")
    if str(path) != str(path).strip():  # ' ' would make an invisible directory here
        raise ContractError(flag, "a directory path without white space around it", repr(str(path)))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:  # errno's "File exists" for a file where a directory goes
        blocker = _file_in_the_way(path)
        raise ContractError(flag, expected, repr(str(path)), f"{str(blocker)!r} is a file, not a directory") from exc
    except OSError as exc:
        where = f" ({exc.filename!r})" if exc.filename and str(exc.filename) != str(path) else ""
        raise ContractError(flag, expected, repr(str(path)), f"{exc.strerror or exc}{where}") from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise ContractError(flag, expected, repr(str(path)), "it is not writable")


def _check_file_path_text(path: str, flag: str) -> None:
    """Refuse a path whose text cannot be meant as a new file's name: ``os.path.abspath`` drops a trailing
    separator (``out/`` would become a file ``out``, or fail only when the results are written), and white space
    around a name (``' '``) is a quoting slip that would create an invisible file in the working directory."""
    if path != path.strip():
        raise ContractError(flag, "a file path without white space around it", repr(path))
    if path == "-":  # compile -o - is standard output, checked before this; elsewhere it would be a file named '-'
        raise ContractError(flag, "a file path", repr(path), "standard output is not written here")
    if path.endswith((os.sep, "/")) or os.path.basename(path) in (".", ".."):
        raise ContractError(flag, "a file path", repr(path), "it names a directory")


def check_output_file(path: str, flag: str) -> None:
    """``path`` can be opened for writing: an existing writable file (or device), or a new file in an
    existing writable directory (nothing is created here). A write can still fail (``/dev/full``, a
    full disk): the caller turns that OSError into its one-line message.

    Raises:
        ContractError: naming ``flag``, otherwise.
    """
    out = os.path.abspath(path) if path else ""
    if not path:
        raise ContractError(flag, "a file path in an existing directory", repr(path))
    _check_file_path_text(path, flag)
    typed = os.path.dirname(path)
    if typed and not os.path.isdir(typed):  # abspath folds 'nodir/..' away; the kernel resolves it and fails
        raise ContractError(flag, "a file path in an existing directory", repr(path), f"{typed!r} is not a directory")
    if os.path.isdir(out):
        raise ContractError(flag, "a file path in an existing directory", repr(path), "it is a directory")
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise ContractError(flag, "a file path in an existing directory", repr(path), f"{parent!r} is not a directory")
    if os.path.exists(out):
        if not os.access(out, os.W_OK):
            raise ContractError(flag, "a writable file", repr(path), "it is not writable")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise ContractError(flag, "a file path in a writable directory", repr(path), f"{parent!r} is not writable")


def check_results_file(path: str, default: str | None, flag: str = "--json") -> None:
    """A profile's results path, checked before any work starts. A path the user gives must be a file
    in an existing directory (:func:`check_output_file`); for the ``default`` path the missing
    directories may be made (the command makes them, ``mkdir -p``, only when it writes; nothing is
    created here). A relative path is relative to the working directory.

    Raises:
        ContractError: naming ``flag``, with the reason.
    """
    if not path or "\0" in path:
        raise ContractError(flag, "a file path", repr(path))
    if path == "-":  # compile -o - means standard output; a profile prints its table there already
        raise ContractError(flag, "a file path", repr(path), "the table is printed on standard output already")
    _check_file_path_text(path, flag)
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(parent) or path != default:
        check_output_file(path, flag)
        return
    ancestor = parent
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise ContractError(flag, "a file path whose directories can be made", repr(path),
                            f"{ancestor!r} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ContractError(flag, "a file path whose directories can be made", repr(path),
                            f"{ancestor!r} is not writable")
    if os.path.isdir(os.path.abspath(path)):
        raise ContractError(flag, "a file path", repr(path), "it is a directory")
