"""The notebooks' cells tagged ``cpu`` run without a GPU (see ``notebook_runner.py``); CI runs them."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("nbclient", reason="nbclient is in the [test] and [notebooks] extras: pip install -e '.[test]'")
pytest.importorskip("ipykernel", reason="ipykernel is in the [test] and [notebooks] extras")

from notebook_runner import NOTEBOOKS, cpu_cells, run_notebook


def test_there_are_notebooks() -> None:
    assert {p.name for p in NOTEBOOKS} >= {"graphs.ipynb", "matmul_plans.ipynb", "mixing_numba_and_cuda_c.ipynb"}


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_cpu_cells_run_without_a_gpu(path: Path) -> None:
    assert cpu_cells(path), f"{path.name} has no cell tagged 'cpu'"
    outputs = run_notebook(path, only_cpu=True)
    assert len(outputs) == len(cpu_cells(path))
