"""Compiler configuration and cache statistics."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from .. import _repr
from ..errors import ContractError

__all__ = ["CompileCacheStats", "CompilerConfig"]


@dataclass(frozen=True)
class CompilerConfig:
    """How a compiler finds headers and where it keeps compiled modules across processes.

    Attributes:
        include_paths: include roots for CUDA C sources, searched in order (NVRTC ``--include-path``)
            before the toolkit's headers. Each must be an existing directory; stored as absolute
            paths (relative ones are resolved against the working directory when the config is
            made). Only these roots are searched — never environment variables. They and the
            contents of every header a source can include from them are part of the cache key.
        cache_directory: where to persist compiled modules (created at the first write); None keeps
            them in memory only. Entries are validated on read and written atomically, so many
            processes may share one directory; see ``mircuda.compile._persistent`` for the format.

    Raises:
        ContractError: an include path is empty or not an existing directory, ``include_paths`` is a single
            string instead of a sequence, or ``cache_directory`` names something that is not a
            directory.
    """

    include_paths: tuple[str, ...] = ()
    cache_directory: str | None = None

    def __post_init__(self) -> None:
        paths = self.include_paths
        if isinstance(paths, (str, bytes, os.PathLike)) or not isinstance(paths, Sequence):
            raise ContractError("include_paths", "a sequence of directories", repr(paths),
                                "wrap a single directory in a tuple: include_paths=(path,)")
        roots: list[str] = []
        for i, p in enumerate(paths):
            if not isinstance(p, (str, os.PathLike)):
                raise ContractError(f"include_paths[{i}]", "a str or os.PathLike", type(p).__name__)
            if not os.fspath(p):  # abspath("") is the working directory: a root the caller never named
                raise ContractError(f"include_paths[{i}]", "a non-empty directory path", repr(p),
                                    "write '.' for the working directory")
            resolved = os.path.abspath(os.fspath(p))
            if isinstance(resolved, str) and "\0" not in resolved and not _encodable(resolved):
                raise ContractError(f"include_paths[{i}]", "a directory path encodable as UTF-8 (NVRTC's "
                                    "--include-path is UTF-8 text)", repr(resolved))
            if not os.path.isdir(resolved):
                raise ContractError(f"include_paths[{i}]", "an existing directory", repr(resolved))
            if resolved not in roots:
                roots.append(resolved)
        object.__setattr__(self, "include_paths", tuple(roots))
        if self.cache_directory is not None:
            if not isinstance(self.cache_directory, (str, os.PathLike)):
                raise ContractError("cache_directory", "None, a str or an os.PathLike",
                                    type(self.cache_directory).__name__)
            given = os.fspath(self.cache_directory)
            if isinstance(given, bytes) or not given or "\0" in given:
                raise ContractError("cache_directory", "a non-empty directory path (str) without NUL characters",
                                    repr(self.cache_directory))
            directory = os.path.abspath(os.path.expanduser(given))
            if os.path.exists(directory) and not os.path.isdir(directory):
                raise ContractError("cache_directory", "a directory (or a path where one can be made)",
                                    repr(directory), "it exists and is not a directory")
            # A path below a regular file can never be made: say so now, not as silent cache misses.
            parent = os.path.dirname(directory)
            while parent and not os.path.exists(parent) and parent != os.path.dirname(parent):
                parent = os.path.dirname(parent)
            if os.path.exists(parent) and not os.path.isdir(parent):
                raise ContractError("cache_directory", "a directory (or a path where one can be made)",
                                    repr(directory), f"{parent!r} is a file")
            object.__setattr__(self, "cache_directory", directory)


def _encodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class CompileCacheStats:
    """What a compiler's caches did since it was created.

    Attributes:
        memory_hits: compiles answered by a module (or program) already in this compiler's memory.
        persistent_hits: compiles answered by a valid entry of the cache directory.
        compilations: NVRTC (or Numba) compilations actually run.
        persistent_failures: cache-directory reads or writes that failed, entries rejected as
            corrupt or foreign, and entries whose image the driver refused; each was worked around
            (by rebuilding, or by not persisting) and none failed a compile.
    """

    memory_hits: int = 0
    persistent_hits: int = 0
    compilations: int = 0
    persistent_failures: int = 0

    _repr_html_ = _repr.dataclass_html  # a table in notebooks

    def __repr__(self) -> str:
        return (f"CompileCacheStats(memory_hits={self.memory_hits}, persistent_hits={self.persistent_hits}, "
                f"compilations={self.compilations}, persistent_failures={self.persistent_failures})")
