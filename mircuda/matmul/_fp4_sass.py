"""The SASS checks of the NVFP4 kernels.

- The library's block-scaled NVFP4 kernels (sm_120f): each must issue the SM12x block-scaled MMA, PTX
  ``mma.sync.aligned.kind::mxf4nvf4.block_scale.scale_vec::4X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue4m3``,
  which ``cuobjdump -sass`` (nvdisasm 13.2) prints ``OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X`` for the CUDA
  13.0 build, and load its tiles with TMA (``UTMALDG``); no 16-bit ``HMMA`` (the operands are never
  widened).
- The library's grouped block-scaled NVFP4 kernels (sm_120f, CUTLASS's pointer-array grouped mainloop
  ``MainloopSm120ArrayTmaWarpSpecializedBlockScaled``): the same MMA opcode, TMA loads and no ``HMMA``.
- The NVRTC FP4 kernels (``cuda_src/fp4_vector.cu``): compiled for a family-specific SM12x target
  (``sm_120f``) they decode E2M1 pairs with ``cvt.rn.f16x2.e2m1x2`` (SASS ``F2FP.F16.E2M1.UNPACK_B``);
  for any other target (``sm_90``, plain ``sm_120``) with the software decode (no such instruction).

``cutlass-check`` reports all three beside the dense and FP8 kernels' checks.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ._sass import SassFunction, SassReport, check_functions, find_cuobjdump

__all__ = ["FP4_SASS", "FP4_SASS_AVOID", "FP4_CVT_PTX", "FP4_CVT_SASS", "Fp4SassFunction", "Fp4SassReport",
           "block_scaled_fp4_sass_check", "is_block_scaled_fp4_function", "omma_opcodes",
           "grouped_block_scaled_fp4_sass_check", "is_grouped_block_scaled_fp4_function", "nvrtc_decode_check",
           "NvrtcDecodeReport"]

FP4_SASS = ("OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X", "UTMALDG")
"""What each block-scaled NVFP4 kernel's sm_120f code must contain, the MMA first (see the module)."""
FP4_SASS_AVOID = ("HMMA",)
"""A 16-bit MMA would mean the FP4 operands were converted before the tensor cores."""
FP4_CVT_PTX = "cvt.rn.f16x2.e2m1x2"
FP4_CVT_SASS = "F2FP.F16.E2M1.UNPACK_B"
"""``cvt.rn.f16x2.e2m1x2`` as nvdisasm 13.2 prints it in sm_120f code (NVRTC 13.0)."""

OMMA_OPCODE = re.compile(r"\bOMMA(?:\.\w+)+")
"""A block-scaled (FP4/FP6/FP8 with scale factors) tensor-core MMA opcode as nvdisasm prints it."""


def omma_opcodes(body: str) -> list[str]:
    """The distinct block-scaled MMA opcodes of one function's SASS, sorted."""
    return sorted(set(OMMA_OPCODE.findall(body)))


def is_block_scaled_fp4_function(mangled: str) -> bool:
    """Whether a mangled kernel name is a CUTLASS 3.x SM120 block-scaled E2M1 GEMM: its mainloop policy is
    ``MainloopSm120TmaWarpSpecializedBlockScaled`` and its element type ``float_e2m1_t``."""
    return ("GemmUniversal" in mangled and "MainloopSm120TmaWarpSpecializedBlockScaled" in mangled
            and "float_e2m1_t" in mangled)


def is_grouped_block_scaled_fp4_function(mangled: str) -> bool:
    """Whether a mangled kernel name is a CUTLASS 3.x SM120 grouped (pointer-array) block-scaled E2M1 GEMM:
    its mainloop policy is ``MainloopSm120ArrayTmaWarpSpecializedBlockScaled``, its problem shape a
    ``GroupProblemShape`` and its element type ``float_e2m1_t``."""
    return ("GemmUniversal" in mangled and "MainloopSm120ArrayTmaWarpSpecializedBlockScaled" in mangled
            and "GroupProblemShape" in mangled and "float_e2m1_t" in mangled)


Fp4SassFunction = SassFunction
"""One block-scaled NVFP4 kernel's verdict (:class:`~mircuda.matmul._sass.SassFunction`; ``opcodes``:
:func:`omma_opcodes`)."""
Fp4SassReport = SassReport


def block_scaled_fp4_sass_check(library: Path) -> Fp4SassReport:
    """Disassemble ``library``'s sm_120f code with ``cuobjdump -sass`` and check every block-scaled NVFP4
    kernel for :data:`FP4_SASS` (and none of :data:`FP4_SASS_AVOID`). The report's ``error`` says when
    cuobjdump is missing, fails, or finds no such kernel."""
    return _sass_check(library, is_block_scaled_fp4_function, "block-scaled NVFP4 kernels")


def grouped_block_scaled_fp4_sass_check(library: Path) -> Fp4SassReport:
    """As :func:`block_scaled_fp4_sass_check` for the grouped block-scaled NVFP4 kernels
    (:func:`is_grouped_block_scaled_fp4_function`): each must hold :data:`FP4_SASS` and none of
    :data:`FP4_SASS_AVOID`; ``error`` when the library has none of them (built without the
    ``SM120_NVFP4_GROUPED_*`` families, or before them)."""
    return _sass_check(library, is_grouped_block_scaled_fp4_function, "grouped block-scaled NVFP4 kernels")


def _sass_check(library: Path, wanted: Callable[[str], bool], what: str) -> Fp4SassReport:
    return check_functions(library, "sm_120f", wanted, FP4_SASS, FP4_SASS_AVOID, omma_opcodes, what)


@dataclass
class NvrtcDecodeReport:
    """What the FP4 vector kernel compiled offline for ``arch`` holds: whether its PTX has
    :data:`FP4_CVT_PTX`, whether its SASS has :data:`FP4_CVT_SASS` (None when cuobjdump is missing),
    and whether that is what :func:`~mircuda.matmul._fp4.has_e2m1_cvt` says the target should hold."""

    arch: str
    ptx_cvt: bool
    sass_cvt: bool | None
    expected: bool
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.ptx_cvt == self.expected and self.sass_cvt in (None, self.expected)


def nvrtc_decode_check(arch: str) -> NvrtcDecodeReport:
    """Compile ``cuda_src/fp4_vector.cu`` (M = 1, 16-byte loads, NVFP4 activations) offline with NVRTC for
    ``arch`` as PTX and as CUBIN, and look for the hardware E2M1 decode in both (no GPU needed).

    Raises:
        ContractError: ``arch`` is not an NVRTC target.
        CompileError: NVRTC rejected the kernel (a bug).
    """
    import dataclasses

    from ..compile import OfflineCompiler
    from ._fp4 import fp4_gemv_options, fp4_vector_source, has_e2m1_cvt

    compiler = OfflineCompiler(arch)
    options = fp4_gemv_options(1, 8, "linear", True, "fp4")
    ptx = bytes(compiler.compile(fp4_vector_source(), dataclasses.replace(options, output="ptx")).image)
    ptx_cvt = FP4_CVT_PTX.encode() in ptx
    expected = has_e2m1_cvt(arch)
    tool = find_cuobjdump()
    if tool is None:
        return NvrtcDecodeReport(arch, ptx_cvt, None, expected)
    cubin = bytes(compiler.compile(fp4_vector_source(), options).image)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fp4_vector.cubin"
        path.write_bytes(cubin)
        out = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True, check=False)
    if out.returncode:
        return NvrtcDecodeReport(arch, ptx_cvt, None, expected, f"cuobjdump failed: {out.stderr.strip()[:300]}")
    return NvrtcDecodeReport(arch, ptx_cvt, FP4_CVT_SASS in out.stdout, expected)
