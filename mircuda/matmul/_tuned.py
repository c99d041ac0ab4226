"""DenseMatmulPlan's measured kernel table: for each (input, output, N, K, M) measured on a device, the
kernel (and split-K slices) that ran fastest there.

``python -m mircuda matmul-profile --sweep --table PATH`` writes it: every kernel the device can run
(CUTLASS families and split-K slices, the NVRTC decode kernels) is timed on cold weights beside cuBLAS,
and the fastest per configuration becomes an entry. The package ships ``tuned/sm90_dense.json`` (an
H200's sweep); :func:`select_kernel <mircuda.matmul._select.select_kernel>` consults it before its
rules on a device of the table's compute capability.

Lookup (:func:`lookup`): the entries of the same types whose (N, K) is nearest to the plan's in
log2 distance, both within a factor of 2 (farther shapes fall back to the rules); among them the
entry with the largest measured M <= the plan's M (a kernel that won at M keeps its tile shape's
advantage until the next measured M). The measured split-K slices are kept only for the exact
(N, K, M) on a device with the table's SM count; otherwise the split-K rule recomputes them (another
M changes the tiles each slice count makes).
"""

from __future__ import annotations

import functools
import json
import math
import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from .._caller import warn_at_caller
from ..errors import ContractError
from ._spec import _DIM_LIMIT

__all__ = ["TunedEntry", "TunedTable", "lookup", "merge", "packaged_table", "parse_table", "read_table_file",
           "table_for", "MAX_SPLITS", "TABLE_ENV", "TABLE_FILES"]

TABLE_FILES = {(9, 0): "sm90_dense.json"}
"""Compute capability -> the packaged table (``mircuda/matmul/tuned/``)."""

MAX_SHAPE_RATIO = 2.0
"""An entry serves shapes whose N and K are each within this factor of its own."""


@dataclass(frozen=True)
class TunedEntry:
    """One measured configuration's winner: ``kernel`` (a name of the kernel table) with ``splits``
    K slices ran M x N x K of ``input -> output`` in ``us`` µs (cuBLAS: ``cublas_us``, or None)."""

    input: str
    output: str
    n: int
    k: int
    m: int
    kernel: str
    splits: int
    us: float
    cublas_us: float | None = None


@dataclass(frozen=True)
class TunedTable:
    """The entries of one device's sweep, with where they came from (``source``: the file it was read from, for
    the reasons plans give; not part of its JSON form nor of equality)."""

    device: str
    compute_capability: tuple[int, int]
    multiprocessors: int
    date: str
    command: str
    entries: tuple[TunedEntry, ...]
    source: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "compute_capability": list(self.compute_capability),
                "multiprocessors": self.multiprocessors, "date": self.date, "command": self.command,
                "entries": [[e.input, e.output, e.n, e.k, e.m, e.kernel, e.splits, round(e.us, 3),
                             None if e.cublas_us is None else round(e.cublas_us, 3)] for e in self.entries]}


MAX_SPLITS = 32
"""The most K slices a caller may give a plan (``splits=``; the split-K rule takes at most 16), and so the most an
entry of a measured table may name."""


def _positive(value: Any, what: str, source: str, limit: int = _DIM_LIMIT - 1) -> int:
    if type(value) is not int or not 1 <= value <= limit:
        raise ContractError("table", f"{what} as an int from 1 to {limit} in {source}", repr(value))
    return value


def _micros(value: Any) -> bool:
    """A time in µs: a finite positive number (a JSON true is no time, nor Infinity, nor an int beyond floats)."""
    if type(value) not in (int, float):
        return False
    try:
        return math.isfinite(value) and value > 0
    except OverflowError:
        return False


def parse_table(data: Any, source: str = "the table") -> TunedTable:
    """A :class:`TunedTable` from its JSON form (:meth:`TunedTable.to_json`).

    Raises:
        ContractError: a field is missing or of the wrong type (named ``table``, with ``source``).
    """
    if not isinstance(data, dict):
        raise ContractError("table", f"a JSON object in {source}", type(data).__name__)
    try:
        cc = data["compute_capability"]
        if not (isinstance(cc, list) and len(cc) == 2 and all(type(x) is int for x in cc)):
            raise ContractError("table", f"compute_capability as [major, minor] in {source}", repr(cc))
        entries = []
        if not isinstance(data["entries"], list):
            raise ContractError("table", f"entries as a list in {source}", type(data["entries"]).__name__)
        for raw in data["entries"]:
            if not (isinstance(raw, list) and len(raw) == 9):
                raise ContractError("table", f"entries of 9 fields (input, output, n, k, m, kernel, splits, us, "
                                    f"cublas_us) in {source}", repr(raw))
            input, output, n, k, m, kernel, splits, us, cublas = raw
            if not (isinstance(input, str) and isinstance(output, str) and isinstance(kernel, str)):
                raise ContractError("table", f"input, output and kernel as strings in {source}", repr(raw))
            if not (_micros(us) and (cublas is None or _micros(cublas))):
                raise ContractError("table", f"positive µs figures in {source}", repr(raw))
            entries.append(TunedEntry(input, output, _positive(n, "n", source), _positive(k, "k", source),
                                      _positive(m, "m", source), kernel,
                                      _positive(splits, "splits", source, MAX_SPLITS),
                                      float(us), None if cublas is None else float(cublas)))
        for field in ("device", "date", "command"):
            if not isinstance(data[field], str):
                raise ContractError("table", f"{field} as a string in {source}", repr(data[field]))
        return TunedTable(data["device"], (cc[0], cc[1]), _positive(data["multiprocessors"], "multiprocessors",
                                                                    source, 2**20),
                          data["date"], data["command"], tuple(entries), source)
    except KeyError as exc:
        raise ContractError("table", f"the field {exc.args[0]!r} in {source}", "none") from None


@functools.cache
def packaged_table(compute_capability: tuple[int, int]) -> TunedTable | None:
    """The table shipped for ``compute_capability`` (None when there is none)."""
    name = TABLE_FILES.get(compute_capability)
    if name is None:
        return None
    path = resources.files("mircuda.matmul").joinpath("tuned").joinpath(name)
    if not path.is_file():
        return None
    return parse_table(json.loads(path.read_text()), f"mircuda/matmul/tuned/{name}")


TABLE_ENV = "MIRCUDA_DENSE_TABLE"
"""The environment variable that names a measured table (a ``matmul-profile --sweep --table`` file) for plans
to consult instead of the packaged one, on devices of that table's compute capability. mircuda only reads it."""

MAX_TABLE_BYTES = 16 * 2**20
"""The largest table file read (bytes): the packaged table of 320 entries is about 40 KB."""


RACY_NS = 2 * 10**9
"""A file whose modification or change time is this recent (ns) is read again at every plan: file times tick
coarsely (1-4 ms on many kernels), so a rewrite of the same size within one tick leaves the stamp as it was
(git's "racily clean" files)."""


def read_table_file(path: str, source: str) -> TunedTable:
    """The measured table in the file at ``path`` (``source`` names it in messages): at most
    :data:`MAX_TABLE_BYTES`, UTF-8 JSON, the form :func:`parse_table` reads. Callers name their own argument
    (``--table``, ``$MIRCUDA_DENSE_TABLE``) when they pass the error on.

    Raises:
        ContractError: named ``table``: the file cannot be read, is too large, or is no measured table.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TABLE_BYTES + 1)
    except OSError as exc:
        raise ContractError("table", "a readable measured table (JSON)", f"{path!r}: {exc.strerror}") from None
    if len(raw) > MAX_TABLE_BYTES:
        raise ContractError("table", f"a measured table of at most {MAX_TABLE_BYTES} bytes", f"{path!r}: larger")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, or nested past the parser's depth
        raise ContractError("table", "a measured table (JSON in UTF-8)", f"{path!r}: {exc}"[:300]) from None
    return parse_table(data, source)


@functools.lru_cache(maxsize=4)
def _cached_table(path: str, stamp: tuple[int, ...]) -> TunedTable:
    """The table at ``path`` as it was at ``stamp`` (inode, size, modification and change times in ns): read once
    per version."""
    return _read_table(path)


def _read_table(path: str) -> TunedTable:
    try:
        return read_table_file(path, f"{path} (${TABLE_ENV})")
    except ContractError as exc:  # named by the variable that points at the file
        raise ContractError(TABLE_ENV, exc.expected, exc.received) from None


def table_for(compute_capability: tuple[int, int]) -> TunedTable | None:
    """The measured table plans consult on a device of ``compute_capability``: the one ``$MIRCUDA_DENSE_TABLE``
    names (a path, relative to the working directory when a plan is made; ``~`` is not expanded) when that table
    is of this compute capability, else the packaged one (None when there is none; a ``UserWarning`` says that
    the variable's table was passed over). The file is read again when
    it changes (another inode, size, modification or change time), and at every call while it was changed less
    than :data:`RACY_NS` ago.

    Raises:
        ContractError: ``$MIRCUDA_DENSE_TABLE`` names no regular file, a file that cannot be read, one larger than
            :data:`MAX_TABLE_BYTES`, or one that is no measured table (named ``MIRCUDA_DENSE_TABLE``), whatever
            the device's compute capability.
    """
    path = os.environ.get(TABLE_ENV, "")
    if path:
        expected = "the path of a measured table (`matmul-profile --sweep --table PATH` writes one)"
        try:
            st = os.stat(path)
        except OSError as exc:
            raise ContractError(TABLE_ENV, expected, f"{path!r}: {exc.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            raise ContractError(TABLE_ENV, expected, f"{path!r}: not a regular file")
        full = os.path.abspath(path)
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < RACY_NS:
            table = _read_table(full)
        else:
            table = _cached_table(full, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        if table.compute_capability == tuple(compute_capability):
            return table
        # not an error (one variable serves a host with GPUs of several kinds), but not silent either
        have, want = table.compute_capability, tuple(compute_capability)
        warn_at_caller(UserWarning(f"${TABLE_ENV} names a table of compute capability {have[0]}.{have[1]} "
                                   f"({table.device}, {path}); on this device of compute capability "
                                   f"{want[0]}.{want[1]} plans follow mircuda's own table for it, or the "
                                   "selection rules where there is none"))
    return packaged_table(tuple(compute_capability))


def merge(old: TunedTable, new: TunedTable) -> TunedTable:
    """``new``'s entries, plus ``old``'s for the configurations ``new`` did not measure (a sweep of some
    type pairs or shapes updates a table in place); the command lines are kept, each once, in the order
    they first ran (``command`` joins them with `` ; ``).

    Raises:
        ContractError: the tables are of different devices (name, compute capability or SM count; named ``table``).
    """
    if (old.device, old.compute_capability, old.multiprocessors) != (new.device, new.compute_capability,
                                                                       new.multiprocessors):
        raise ContractError("table", f"a table of {new.device} (cc {new.compute_capability} with {new.multiprocessors} "
                            "SMs) to merge into (its entries are credited to the device it names)",
                            f"{old.device} (cc {old.compute_capability} with {old.multiprocessors} SMs)")

    def key(e: TunedEntry) -> tuple[str, str, int, int, int]:
        return e.input, e.output, e.n, e.k, e.m

    measured = {key(e) for e in new.entries}
    kept = [e for e in old.entries if key(e) not in measured]
    commands = old.command.split(" ; ")
    commands += [c for c in new.command.split(" ; ") if c not in commands]
    command = " ; ".join(commands)
    return TunedTable(new.device, new.compute_capability, new.multiprocessors, new.date, command,
                      tuple(sorted((*kept, *new.entries), key=key)))


def _distance(n: int, k: int, e: TunedEntry) -> float | None:
    dn, dk = abs(math.log2(n / e.n)), abs(math.log2(k / e.k))
    limit = math.log2(MAX_SHAPE_RATIO)
    if dn > limit or dk > limit:
        return None
    return dn + dk


def lookup(entries: Sequence[TunedEntry], m: int, n: int, k: int, input: str, output: str) -> TunedEntry | None:
    """The entry that serves M x N x K of ``input -> output`` (the rule in the module docstring), or None."""
    typed = [e for e in entries if e.input == input and e.output == output]
    best: float | None = None
    shape: tuple[int, int] | None = None
    for e in typed:
        d = _distance(n, k, e)
        if d is not None and (best is None or d < best or (d == best and (e.n, e.k) < (shape or (e.n, e.k)))):
            best, shape = d, (e.n, e.k)
    if shape is None:
        return None
    below = [e for e in typed if (e.n, e.k) == shape and e.m <= m]
    return max(below, key=lambda e: e.m) if below else None
