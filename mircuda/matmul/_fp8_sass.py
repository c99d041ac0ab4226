"""The SASS check of the blockwise FP8 kernels of ``libmircuda_cutlass.so``: in the sm_120f code each
must issue the SM12x FP8 tensor-core MMA (``mma.sync`` ``m16n8k32`` E4M3 x E4M3 with FP32
accumulation, ``QMMA.16832.F32.E4M3.E4M3`` in SASS); in the sm_90a code the FP8 warpgroup MMA
(``wgmma`` E4M3, ``QGMMA.64xNx32.F32.E4M3.E4M3``); both load their tiles with TMA (``UTMALDG``).
``cutlass-check`` reports it beside the dense kernels' check."""

from __future__ import annotations

import re
from pathlib import Path

from ._sass import SassFunction, SassReport, check_functions

__all__ = ["FP8_SASS", "Fp8SassFunction", "Fp8SassReport", "blockwise_fp8_sass_check", "is_blockwise_fp8_function",
           "mma_opcodes"]

FP8_SASS = {"sm_120f": ("QMMA.16832.F32.E4M3.E4M3", "UTMALDG"), "sm_90a": (".F32.E4M3.E4M3", "QGMMA.64x", "UTMALDG")}
"""What each blockwise FP8 kernel of an arch must contain, the MMA first: the FP8 tensor-core MMA with
FP32 accumulation (sm_120f: ``mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32``; sm_90a: ``wgmma``
with E4M3 operands, ``QGMMA.64x128x32.F32.E4M3.E4M3`` for the 128-wide tiles) and TMA tile loads, as
``cuobjdump -sass`` (CUDA 13.2, nvdisasm) prints them for the CUDA 13.0 build."""
FP8_SASS_AVOID = ("HMMA",)
"""A 16-bit MMA would mean the operands were converted before the tensor cores."""


Fp8SassFunction = SassFunction
"""One blockwise FP8 kernel's verdict (:class:`~mircuda.matmul._sass.SassFunction`; ``opcodes``: :func:`mma_opcodes`)."""
Fp8SassReport = SassReport


def is_blockwise_fp8_function(mangled: str) -> bool:
    """Whether a mangled kernel name is a CUTLASS 3.x blockwise-scaled E4M3 GEMM: its mainloop policy
    names the blockwise scaling (``MainloopSm120TmaWarpSpecializedBlockwiseScaling``,
    ``MainloopSm90TmaGmmaWarpSpecializedBlockwiseFP8``) and its element type is ``float_e4m3_t``."""
    return "GemmUniversal" in mangled and "float_e4m3_t" in mangled and "Blockwise" in mangled


MMA_OPCODE = re.compile(r"\bQG?MMA(?:\.\w+)+")
"""An FP8 tensor-core MMA opcode as nvdisasm prints it (``QMMA.16832.F32.E4M3.E4M3``,
``QGMMA.64x128x32.F32.E4M3.E4M3``)."""


def mma_opcodes(body: str) -> list[str]:
    """The distinct FP8 MMA opcodes of one function's SASS, sorted."""
    return sorted(set(MMA_OPCODE.findall(body)))


def blockwise_fp8_sass_check(library: Path, arch: str = "sm_120f") -> Fp8SassReport:
    """Disassemble ``library``'s ``arch`` code (``"sm_120f"`` or ``"sm_90a"``) with ``cuobjdump -sass``
    and check every blockwise FP8 kernel for ``FP8_SASS[arch]`` (and none of :data:`FP8_SASS_AVOID`).
    The report's ``error`` says when cuobjdump is missing, fails, or finds no such kernel.

    Raises:
        ContractError: ``arch`` is not a key of :data:`FP8_SASS`.
    """
    if arch not in FP8_SASS:
        from ..errors import ContractError

        raise ContractError("arch", f"one of {', '.join(FP8_SASS)}", repr(arch))
    return check_functions(library, arch, is_blockwise_fp8_function, FP8_SASS[arch], FP8_SASS_AVOID, mma_opcodes,
                           "blockwise FP8 kernels")
