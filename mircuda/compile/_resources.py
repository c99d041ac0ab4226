"""Offline resource usage of compiled kernels, from ptxas' verbose report (no GPU needed).

NVRTC passes ``--ptxas-options=-v`` (``CompileOptions(ptxas_verbose=True)``) to ptxas, which writes
one block per entry function into the program log (format of ptxas 12.x and 13.x)::

    ptxas info    : Compiling entry function 'big' for 'sm_90'
    ptxas info    : Function properties for big
    ptxas         .     416 bytes stack frame, 532 bytes spill stores, 532 bytes spill loads
    ptxas info    : Used 24 registers, used 1 barriers, 416 bytes cumulative stack size, 1024 bytes smem

:func:`parse_ptxas_report` turns that into one :class:`KernelResources` per kernel; the log is kept
in the compiled program (and its persistent cache entry), so the report survives a cache hit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KernelResources", "has_ptxas_report", "is_ptxas_report_line", "parse_ptxas_report"]

_ENTRY = re.compile(r"^ptxas info\s*: Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"^ptxas info\s*: Function properties for (\S+)")
_FRAME = re.compile(r"^ptxas\s+\.\s+(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"^ptxas info\s*: Used (\d+) registers(.*)$")
_FIELDS = {
    "barriers": re.compile(r"used (\d+) barriers"),
    "cumulative_stack_bytes": re.compile(r"(\d+) bytes cumulative stack size"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
    "constant_bytes": re.compile(r"(\d+) bytes cmem\[0\]"),
}


@dataclass(frozen=True)
class KernelResources:
    """What ptxas allocated for one kernel (entry function), per its ``-v`` report.

    Attributes:
        name: the kernel's name in the image (the lowered name of a C++ kernel).
        arch: the SASS target ptxas compiled it for (``sm_90``).
        registers: registers per thread.
        barriers: named barriers used.
        shared_bytes: static shared memory per block, bytes (0 when ptxas reports none).
        constant_bytes: bytes of constant bank 0 (parameters and driver constants) when ptxas
            reports them (it does not for sm_90 and newer: 0).
        stack_frame_bytes: per-thread stack frame, bytes (local arrays and spills).
        spill_store_bytes, spill_load_bytes: bytes of register spill stores and loads per thread.
        cumulative_stack_bytes: the stack of the kernel and the functions it calls, bytes (0 when
            ptxas does not report it).
    """

    name: str
    arch: str
    registers: int
    barriers: int = 0
    shared_bytes: int = 0
    constant_bytes: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    cumulative_stack_bytes: int = 0


def is_ptxas_report_line(line: str) -> bool:
    """Whether a log line is part of ptxas' informational ``-v`` report (not a warning)."""
    return line.startswith("ptxas info") or bool(re.match(r"ptxas\s+\.", line))


def has_ptxas_report(log: str) -> bool:
    """Whether ``log`` holds ptxas' ``-v`` report (at least one ``ptxas info`` line)."""
    return any(line.startswith("ptxas info") for line in log.splitlines())


def parse_ptxas_report(log: str) -> dict[str, KernelResources]:
    """The kernels of a ptxas ``-v`` report in ``log``, by name in the image, in report order.

    Non-entry (device) functions have properties too; they are not kernels and are left out.
    Returns an empty dict when the log holds no report.
    """
    out: dict[str, KernelResources] = {}
    entry: tuple[str, str] | None = None  # (name, arch) of the entry function being reported
    properties_of: str | None = None
    frame: tuple[int, int, int] = (0, 0, 0)
    for line in log.splitlines():
        if m := _ENTRY.match(line):
            entry, properties_of, frame = (m.group(1), m.group(2)), None, (0, 0, 0)
        elif m := _PROPERTIES.match(line):
            properties_of = m.group(1)
        elif (m := _FRAME.match(line)) and entry is not None and properties_of == entry[0]:
            frame = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _USED.match(line)) and entry is not None:
            rest = m.group(2)
            found = {k: int(f.group(1)) if (f := p.search(rest)) else 0 for k, p in _FIELDS.items()}
            out[entry[0]] = KernelResources(entry[0], entry[1], int(m.group(1)), stack_frame_bytes=frame[0],
                                            spill_store_bytes=frame[1], spill_load_bytes=frame[2], **found)
            entry = None
    return out
