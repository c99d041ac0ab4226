"""Dense matrix plans: ``DenseVectorPlan`` (M = 1, an NVRTC kernel) and ``DenseMatmulPlan`` (CUTLASS)."""

from ._spec import DenseMatmulSpec, DenseVectorSpec
from ._vector import DenseVectorPlan

__all__ = ["DenseMatmulSpec", "DenseVectorPlan", "DenseVectorSpec"]
