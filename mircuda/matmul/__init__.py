"""Dense matrix plans: ``DenseVectorPlan`` (M = 1, an NVRTC kernel) and ``DenseMatmulPlan`` (NVRTC
kernels for M <= 16: the dense vector kernel at M = 1, the batched GEMV above; CUTLASS for larger M).

``DenseMatmulPlan`` with M > 16 (or a forced CUTLASS kernel) needs ``libmircuda_cutlass.so``:
``python -m mircuda build-cutlass`` builds it (or ``MIRCUDA_CUTLASS_LIBRARY`` points at one); importing
this package never loads it.
"""

from ._build import CutlassNotFound
from ._dense import DenseMatmulPlan, available_kernels
from ._library import CutlassError, CutlassLibrary, KernelInfo, load_library
from ._spec import DenseMatmulSpec, DenseVectorSpec
from ._vector import DenseVectorPlan

__all__ = ["CutlassError", "CutlassLibrary", "CutlassNotFound", "DenseMatmulPlan", "DenseMatmulSpec", "DenseVectorPlan",
           "DenseVectorSpec", "KernelInfo", "available_kernels", "load_library"]

from ._fp4 import BlockScaledFp4Plan, BlockScaledFp4VectorPlan
from ._fp4_layout import Fp4Quantizer, Fp4ScaleConverter

__all__ += ["BlockScaledFp4Plan", "BlockScaledFp4VectorPlan", "Fp4Quantizer", "Fp4ScaleConverter"]
