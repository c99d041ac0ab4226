"""The README's "Several GPUs" snippet, executed as written on two devices, its results checked."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import mircuda as mc

try:
    import mircuda.nccl
except ImportError as exc:  # NcclNotFound: nccl4py (the [nccl] extra) is not installed
    pytest.skip(str(exc), allow_module_level=True)

README = Path(__file__).resolve().parents[2] / "README.md"


def snippet() -> str:
    text = README.read_text()
    section = text.split("## Several GPUs", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def test_the_snippet_is_found() -> None:
    code = snippet()
    assert "Communicator.init_all" in code and "RowParallelLinear" in code


def test_the_readme_several_gpus_snippet_runs_as_written(driver: mc.Driver, capsys: pytest.CaptureFixture[str]) -> None:
    if len(driver.devices()) < 2:
        pytest.skip(f"needs 2 CUDA devices; this host has {len(driver.devices())}")
    ns: dict = {}
    exec(compile(snippet(), "README.md (Several GPUs)", "exec"), ns)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[0. 2. 4. 6.]"
    np.testing.assert_array_equal(ns["s0"].download(ns["x0"]), 2 * np.arange(1024, dtype=np.float32))
    want = ns["x"].astype(np.float64) @ ns["w"].astype(np.float64).T
    got = ns["s1"].download(ns["ys"][1]).astype(np.float64)
    assert np.linalg.norm(got - want.ravel()) / np.linalg.norm(want) < 1e-2
    for c in (ns["gpu0"], ns["gpu1"]):
        c.close()
