"""graph-profile's C floor: ``cuGraphLaunch`` of a graph of N ``tick`` kernels called from C.

``benchmarks/c/launch_floor.c`` (the C floor of ``benchmarks/launch_overhead.py``) in its graph mode
captures N launches of the kernel into a graph exactly as ``Stream.capture`` does (thread-local capture,
``cuGraphInstantiate`` with flags 0, ``cuGraphUpload``) and times ``cuGraphLaunch`` per call, in a
process of its own. The kernel is graph_profile.cu's ``tick`` itself (one pointer argument), compiled
to a CUBIN for the device's architecture by NVRTC, as launch_overhead.py compiles its empty kernel;
the program is built with nvcc. Without nvcc, or outside a source checkout (the C file is not
package data), the floor is unavailable with the reason and the profile goes on without it.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import MircudaError

__all__ = ["FLOOR_NAME", "SOURCE", "WARMUP_BATCHES", "CFloor", "FloorRun", "FloorUnavailable", "build",
           "expected_count", "note", "parse_output"]

FLOOR_NAME = "C, driver API cuGraphLaunch (the floor)"
"""The library name of the floor's rows in graph-profile's table and JSON."""
SOURCE = Path(__file__).resolve().parents[2] / "benchmarks" / "c" / "launch_floor.c"
"""The C program, where a source checkout has it."""
WARMUP_BATCHES = 3
"""Batches launch_floor.c runs before the timed ones (its own constant): they count on the device too."""


class FloorUnavailable(Exception):
    """The C floor cannot be built or run here; the message is the reason."""


@dataclass(frozen=True)
class FloorRun:
    """One run of the C program."""

    host_us: float
    """Median over the batches of host µs per ``cuGraphLaunch``."""
    counter: int
    """The kernels the device counted (the buffer's first 32-bit word, zeroed before the first batch)."""


def expected_count(nodes: int, calls: int, batches: int) -> int:
    """The counter after a run: every node of every replay of every batch (warm-up ones included),
    modulo 2**32 (the counter is an ``unsigned int``)."""
    return nodes * calls * (batches + WARMUP_BATCHES) % 2**32


def parse_output(text: str) -> FloorRun:
    """Read the program's standard output (``"<µs>\\ncounter <U>\\n"``, its 5- and 6-argument forms).

    Raises:
        FloorUnavailable: the text is not of that form (the message quotes it).
    """
    lines = text.split()
    try:
        if len(lines) != 3 or lines[1] != "counter":
            raise ValueError(text)
        us, counter = float(lines[0]), int(lines[2])
    except ValueError:
        raise FloorUnavailable(f"launch_floor printed {text[:120]!r}, expected '<µs>' and 'counter <N>' lines") from None
    if not us >= 0 or counter < 0:  # `not >=` also refuses nan
        raise FloorUnavailable(f"launch_floor printed {text[:120]!r}: a negative or NaN time or count")
    return FloorRun(us, counter)


@dataclass(frozen=True)
class CFloor:
    """The built C floor, ready to run: the executable, the kernel's CUBIN and symbol, the device ordinal."""

    executable: Path
    cubin: Path
    symbol: str
    device: int

    def command(self, nodes: int, calls: int, batches: int) -> list[str]:
        """The command line of one run (``launch_floor CUBIN SYMBOL CALLS BATCHES NODES DEVICE``)."""
        return [str(self.executable), str(self.cubin), self.symbol, str(calls), str(batches), str(nodes),
                str(self.device)]

    def run(self, nodes: int, calls: int, batches: int) -> FloorRun:
        """Replay a graph of ``nodes`` kernels ``calls`` times per batch, ``batches`` timed batches.

        Raises:
            FloorUnavailable: the program could not start, failed (its last line of standard error,
                e.g. a driver call that failed) or printed something unexpected.
        """
        try:
            done = subprocess.run(self.command(nodes, calls, batches), capture_output=True, text=True)
        except OSError as exc:
            raise FloorUnavailable(f"launch_floor did not start: {exc}") from None
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise FloorUnavailable(f"launch_floor exited with status {done.returncode}: {tail}"[:200])
        return parse_output(done.stdout)


def _nvcc() -> Path:
    from ..matmul._build import _find_nvcc  # the one nvcc finder (CUDA_HOME, PATH, the toolkit, the wheel)

    try:
        return _find_nvcc()
    except MircudaError as exc:
        raise FloorUnavailable(f"no nvcc: {exc}") from None


def build(directory: Path, cubin: bytes, symbol: str, device: int, source: Path = SOURCE) -> CFloor:
    """Build ``source`` with ``nvcc -O2 ... -lcuda`` into ``directory`` and write ``cubin`` beside it.

    Raises:
        FloorUnavailable: the C file is missing (not a source checkout), nvcc is missing, or nvcc
            failed (its last line of output).
    """
    if not source.is_file():
        raise FloorUnavailable(f"{source} is missing: the C floor runs from a source checkout")
    nvcc = _nvcc()
    exe = directory / "launch_floor"
    try:
        done = subprocess.run([str(nvcc), "-O2", "-o", str(exe), str(source), "-lcuda"], capture_output=True,
                              text=True)
    except OSError as exc:
        raise FloorUnavailable(f"{nvcc} did not start: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
        raise FloorUnavailable(f"nvcc failed with status {done.returncode}: {tail}"[:200])
    path = directory / f"{symbol}.cubin"
    path.write_bytes(cubin)
    return CFloor(exe, path, symbol, device)


def note(arch: str) -> str:
    """What the floor's rows measure (the table's note and the rows' ``note``)."""
    return (f"C floor: graph_profile.cu's tick (one pointer argument), CUBIN for {arch} by NVRTC, captured and "
            "replayed from C (benchmarks/c/launch_floor.c, nvcc -O2); host µs only, the median over rounds of "
            f"each run's median over batches ({WARMUP_BATCHES} warm-up batches).")
