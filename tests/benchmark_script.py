"""A script of ``benchmarks/`` imported as a module, for tests of its parsing and pieces without running it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` executed as a fresh module named ``name`` (its ``main`` is not called)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_benchmark(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/<name>.py args...`` in a child process, its output captured as text (2 minutes at most)."""
    return subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), *args], capture_output=True, text=True,
                          timeout=120)


def help_options(help_text: str) -> dict[str, str]:
    """A script's ``--help`` output: each option's help, whitespace collapsed, by its flag (``-h`` left out)."""
    parts = re.split(r"\n  (?=--)", help_text.split("options:")[1])[1:]
    return {p.split()[0]: " ".join(p.split()[2:]) for p in parts}
