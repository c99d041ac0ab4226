"""mircuda.parallel without nccl4py (the ``[nccl]`` extra): the package and its host-only shard helpers
import and work; making a layer raises NcclNotFound naming the extra. Run in a child process where
``nccl`` cannot be imported, so it holds whether or not nccl4py is installed here."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_shard_helpers_import_without_nccl4py_and_layers_raise_nccl_not_found() -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["nccl"] = None  # what an absent package looks like to the import system
        sys.modules["nccl.bindings"] = None
        import numpy as np
        import mircuda as mc
        from mircuda.errors import NcclNotFound
        from mircuda.parallel import (ColumnParallelLinear, RowParallelLinear, capture_each,
                                      column_parallel_shards, row_parallel_shards)

        w = np.arange(32.0).reshape(4, 8)
        assert [p.shape for p in row_parallel_shards(w, 2)] == [(4, 4)] * 2
        assert [p.shape for p in column_parallel_shards(w, 2)] == [(2, 8)] * 2
        assert "mircuda.nccl" not in sys.modules
        for layer in (ColumnParallelLinear, RowParallelLinear):
            try:
                layer([object()], [object()], mc.DenseMatmulSpec(1, 8, 8))
            except NcclNotFound as exc:
                assert "mircuda[nccl]" in str(exc), exc
            else:
                raise SystemExit(f"{layer.__name__} was made without nccl4py")
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr + out.stdout
