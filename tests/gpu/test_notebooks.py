"""Every notebook under ``notebooks/`` runs top to bottom on the GPU with no cell error (nbclient)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("nbclient", reason="nbclient is in the [test] and [notebooks] extras: pip install -e '.[test]'")
pytest.importorskip("ipykernel", reason="ipykernel is in the [test] and [notebooks] extras")

from notebook_runner import NOTEBOOKS, run_notebook


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_notebook_runs_top_to_bottom(path: Path) -> None:
    outputs = run_notebook(path, only_cpu=False)
    assert outputs and all(isinstance(o, str) for o in outputs)
