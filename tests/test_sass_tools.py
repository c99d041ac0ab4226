"""Finding ``cuobjdump`` for the SASS checks without a GPU: ``PATH`` first, then beside the toolkit's ``nvcc``,
then the ``nvidia-cuda-cuobjdump`` wheel (the ``test`` extra installs it, so CI runs the SASS checks)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from mircuda.errors import CutlassNotFound
from mircuda.matmul import _build, _sass


def fake_wheels(root: Path, majors: dict[str, bool]) -> Path:
    """``root/nvidia/cu<major>/bin/cuobjdump`` for each major, executable or not."""
    for major, executable in majors.items():
        tool = root / "nvidia" / f"cu{major}" / "bin" / "cuobjdump"
        tool.parent.mkdir(parents=True)
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755 if executable else 0o644)
    return root / "nvidia"


def test_the_wheel_tool_is_the_newest_cuda_majors_executable(tmp_path, monkeypatch) -> None:
    namespace = fake_wheels(tmp_path, {"12": True, "13": True, "14": False, "x": True})
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: SimpleNamespace(submodule_search_locations=[str(namespace)]))
    assert _sass.wheel_tool("cuobjdump") == str(namespace / "cu13" / "bin" / "cuobjdump")  # cu14 is not executable
    assert _sass.wheel_tool("nvdisasm") is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # no nvidia package installed
    assert _sass.wheel_tool("cuobjdump") is None


def test_find_cuobjdump_takes_path_then_the_toolkit_then_the_wheel(tmp_path, monkeypatch) -> None:
    namespace = fake_wheels(tmp_path / "site", {"13": True})
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: SimpleNamespace(submodule_search_locations=[str(namespace)]))
    wheel = str(namespace / "cu13" / "bin" / "cuobjdump")
    toolkit = tmp_path / "cuda" / "bin"
    toolkit.mkdir(parents=True)
    (toolkit / "nvcc").write_text("")
    monkeypatch.setattr(_sass.shutil, "which", lambda name: None)
    monkeypatch.setattr(_build, "_find_nvcc", lambda: toolkit / "nvcc")
    assert _sass.find_cuobjdump() == wheel  # a toolkit without cuobjdump (this CI's nvcc-only one)
    (toolkit / "cuobjdump").write_text("")
    assert _sass.find_cuobjdump() == str(toolkit / "cuobjdump")

    def no_toolkit() -> Path:
        raise CutlassNotFound("no nvcc")

    monkeypatch.setattr(_build, "_find_nvcc", no_toolkit)
    assert _sass.find_cuobjdump() == wheel
    monkeypatch.setattr(_sass.shutil, "which", lambda name: "/opt/cuda/bin/cuobjdump")
    assert _sass.find_cuobjdump() == "/opt/cuda/bin/cuobjdump"


@pytest.mark.skipif(_sass.wheel_tool("cuobjdump") is None, reason="the nvidia-cuda-cuobjdump wheel is not installed")
def test_the_installed_wheels_tool_has_nvdisasm_beside_it() -> None:
    """cuobjdump -sass runs nvdisasm from PATH; the SASS tests put the tool's own folder first."""
    tool = Path(_sass.wheel_tool("cuobjdump") or "")
    assert (tool.parent / "nvdisasm").is_file()
