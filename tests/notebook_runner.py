"""Execute the notebooks under ``notebooks/`` with nbclient (shared by the CPU and the GPU notebook tests).

Mechanism: a code cell whose metadata ``tags`` include ``"cpu"`` needs no GPU (imports, kernel sources,
contracts, offline compiles, shape checks); the CPU test runs only those cells, in order, in a fresh
kernel; the GPU test runs every cell. Any cell error fails the test (nbclient's ``CellExecutionError``
carries the cell's traceback). The kernel imports this checkout's mircuda: the test puts the repository
first on ``PYTHONPATH`` and a first cell checks where ``mircuda`` came from.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
CPU_TAG = "cpu"
CELL_TIMEOUT_S = 900  # a cold NVRTC / Numba / CUTLASS-plan compile per cell, on a shared machine


def cpu_cells(path: Path) -> list[int]:
    """Indices of the code cells of ``path`` tagged ``cpu``."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and CPU_TAG in c.metadata.get("tags", [])]


def run_notebook(path: Path, only_cpu: bool) -> list[str]:
    """Execute ``path`` (only its ``cpu`` cells when ``only_cpu``) in a fresh python3 kernel whose cwd is
    the notebook's folder; returns the text printed by each executed cell.

    Raises:
        nbclient.exceptions.CellExecutionError: a cell raised (the first one that did).
    """
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    if only_cpu:
        keep = set(cpu_cells(path))
        nb.cells = [c for i, c in enumerate(nb.cells) if i in keep]
    else:
        nb.cells = [c for c in nb.cells if c.cell_type == "code"]
    check = nbformat.v4.new_code_cell(
        "import pathlib, mircuda\n"
        f"assert pathlib.Path(mircuda.__file__).resolve().parent == pathlib.Path({str(REPO / 'mircuda')!r}), "
        "mircuda.__file__")
    nb.cells.insert(0, check)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute(env=env)
    out = []
    for cell in nb.cells[1:]:
        out.append("".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream"))
    return out
