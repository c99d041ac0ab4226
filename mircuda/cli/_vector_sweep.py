"""``dense-vector-profile --sweep``: every tuning knob of the dense vector kernel (``cuda_src/dense_vector.cu``)
timed on cold weights, so that one GPU run says which configuration is fastest per shape.

The knobs, and where each lives:

- ``rows``: output rows per block and warp, 8 or 16 (``DENSE_VECTOR_ROWS``; ``DenseVectorPlan(rows=)``).
  16 rows share each load of x over twice the weight rows and keep twice the loads in flight per lane.
- ``warps``: warps per block splitting K, 1, 2, 4 or 8 (the block size; ``DenseVectorPlan(warps=)``).
- ``unroll``: 256-column chunks per pipeline step, 1 or 2 (``DENSE_VECTOR_UNROLL``, compile-time only):
  2 doubles the 16-byte loads each lane keeps in flight.
- ``trigger``: where programmatic dependent launch lets the next kernel start, ``early`` (block start)
  or ``late`` (after the loads) (``MIRCUDA_PDL_TRIGGER_LATE``, compile-time only; default late for 8
  rows, early for 16).
- ``min_blocks``: the ``__launch_bounds__`` minimum of resident blocks, which caps the registers
  (``DENSE_VECTOR_MIN_BLOCKS``, compile-time only; default 2 for 8 rows, 1 for 16). 8 rows with
  unroll 2 spill at 2 (128 registers) and fit at 1 (254 registers on sm_90, no spills).

Each configuration is compiled by NVRTC (one module per (rows, unroll, trigger, min_blocks), cached),
checked against the float64 reference, and timed like the profile's other rows (back to back, weight
banks >= 8x L2, programmatic dependent launch on cc >= 9.0 as the plan launches it). Nothing here
changes what the plan selects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Knobs", "knob_grid", "sweep_rows"]


@dataclass(frozen=True)
class Knobs:
    """One configuration of the dense vector kernel (see the module docstring)."""

    rows: int
    warps: int
    unroll: int
    trigger: str
    min_blocks: int

    def defines(self) -> dict[str, int]:
        """The NVRTC macros of this configuration's module."""
        return {"DENSE_VECTOR_ROWS": self.rows, "DENSE_VECTOR_UNROLL": self.unroll,
                "MIRCUDA_PDL_TRIGGER_LATE": int(self.trigger == "late"), "DENSE_VECTOR_MIN_BLOCKS": self.min_blocks}

    @property
    def label(self) -> str:
        return (f"dense_vector r{self.rows} w{self.warps} u{self.unroll} {self.trigger} "
                f"mb{self.min_blocks}")

    def is_default_for(self, rows: int, warps: int, unroll: int = 1) -> bool:
        """Whether this is what DenseVectorPlan launches when it picks ``rows`` x ``warps`` in the form of
        ``unroll`` chunks per step (1, or 2: the two-chunk form of ``takes_two_chunks``): the macros of
        ``vector_options``, the source's defaults for the others (unroll 1, trigger late for 8 rows and early
        for 16, min blocks 2 for 8 rows and 1 for 16)."""
        from ..matmul._vector import vector_options

        plan = {"DENSE_VECTOR_ROWS": str(rows), "DENSE_VECTOR_UNROLL": "1",
                "MIRCUDA_PDL_TRIGGER_LATE": str(int(rows == 8)), "DENSE_VECTOR_MIN_BLOCKS": "2" if rows == 8 else "1"}
        plan.update((name, str(value)) for name, value in vector_options(rows, unroll=unroll).defines)
        return self.warps == warps and {name: str(value) for name, value in self.defines().items()} == plan


def knob_grid() -> list[Knobs]:
    """Every configuration the sweep times: 8 rows x 4 splits x unroll 1, 2 x both triggers x min
    blocks 1, 2 (32), and 16 rows x 4 x 2 x 2 at min blocks 1 (16; 2 would halve the registers of a
    kernel that needs 238): 48 configurations in 12 modules."""
    out = []
    for rows in (8, 16):
        for min_blocks in ((2, 1) if rows == 8 else (1,)):
            for unroll in (1, 2):
                for trigger in ("late", "early"):
                    for warps in (1, 2, 4, 8):
                        out.append(Knobs(rows, warps, unroll, trigger, min_blocks))
    return out


def sweep_rows(context: Any, stream: Any, timer: Any, x: Any, y: Any, ws: list[Any], in_t: Any, out_t: Any,
               n: int, k: int, calls: int, repeats: int, plan_choice: tuple[int, int, int],
               check: Callable[[], float], make_row: Callable[[str, float, str], Any],
               failures: list[str]) -> list[Any]:
    """One row per configuration of :func:`knob_grid` for ``y = W x`` (N x K), timed over the weight
    banks ``ws``; ``check()`` reads ``y`` back and returns its relative error against the reference;
    ``make_row(path, us, note)`` builds the table's row. ``plan_choice`` is DenseVectorPlan's
    (rows, warps, unroll) for the shape, marked in the notes."""
    from ..dtypes import dtype_info
    from ..matmul._vector import kernel_symbol, shared_compiler, vector_contract

    info = context.device_info()
    i_info, o_info = dtype_info(in_t), dtype_info(out_t)
    contract = vector_contract(kernel_symbol(i_info.name, o_info.name, k % 8 == 0), o_info, i_info, ("y", "w", "x"))
    compiler = shared_compiler(context)
    banks = len(ws)
    rows_out = []
    # NaN into y before each configuration's checked launch: a kernel that wrote nothing would otherwise pass
    # on the previous configuration's result.
    poison = context.allocate_pinned(out_t, len(y))
    poison.write_prefix(np.full(len(y), np.nan, dtype=np.float32).astype(out_t))
    try:
        for knobs in knob_grid():
            row = _sweep_one(knobs, context, stream, timer, x, y, ws, banks, n, k, calls, repeats, plan_choice, contract,
                             compiler, info, poison, check, make_row, failures)
            if row is not None:
                rows_out.append(row)
    finally:
        stream.synchronize()  # the last copy from the pinned buffer is done before it is closed
        poison.close()
    return rows_out


def _sweep_one(knobs: Knobs, context: Any, stream: Any, timer: Any, x: Any, y: Any, ws: list[Any], banks: int, n: int,
               k: int, calls: int, repeats: int, plan_choice: tuple[int, int, int], contract: Any, compiler: Any, info: Any,
               poison: Any, check: Callable[[], float], make_row: Callable[[str, float, str], Any],
               failures: list[str]) -> Any:
    """One configuration's row (None when it cannot launch at its block size)."""
    from ..compile import CompileOptions
    from ..launch import LaunchConfig
    from ..matmul._vector import blocks_per_sm, dense_vector_source

    kernel = compiler.compile(dense_vector_source(), CompileOptions(defines=knobs.defines())).kernel(contract)
    resident = blocks_per_sm(context, kernel, knobs.warps)
    if resident < 1:
        return None  # cannot launch at this block size (registers): nothing to time
    attrs = kernel.attributes
    config = LaunchConfig((-(-n // knobs.rows),), (32 * knobs.warps,),
                          programmatic_stream_serialization=info.supports_programmatic_launch)
    stream.copy_to_device(poison, y)
    kernel.launch(stream, config, y, ws[0], x, 1.0, 0.0, n, k)
    err = check()
    if not err <= 1e-2:  # NaN fails too
        failures.append(f"{knobs.label} {n}x{k}: relative error {err:.2e}")
    us = timer.median(lambda i: kernel.launch(stream, config, y, ws[i % banks], x, 1.0, 0.0, n, k), calls, repeats)
    mark = " (DenseVectorPlan's choice)" if knobs.is_default_for(*plan_choice) else ""
    return make_row(knobs.label, us, f"{config.grid[0]} blocks, {resident} blocks/SM, {attrs.registers} regs, "
                                     f"{attrs.local_bytes} B local{mark}, rel err {err:.1e}")
