"""Dense matrix plans: ``DenseVectorPlan`` (M = 1, an NVRTC kernel) and ``DenseMatmulPlan`` (NVRTC
kernels for M <= 16: the dense vector kernel at M = 1, the batched GEMV above; CUTLASS for larger M).

``DenseMatmulPlan`` with M > 16 (or a forced CUTLASS kernel) needs ``libmircuda_cutlass.so``:
``python -m mircuda build-cutlass`` builds it (or ``MIRCUDA_CUTLASS_LIBRARY`` points at one); importing
this package never loads it.

Blockwise FP8 (DeepSeek-V3: E4M3 with FP32 scales per 1 x 128 activation and 128 x 128 weight block,
BF16 out): ``BlockwiseFp8VectorPlan`` (M = 1) and ``BlockwiseFp8Plan`` (M <= 16: NVRTC kernels for
cc >= 8.9; larger M: the library's CUTLASS blockwise kernels on SM90 and SM12x, else
``BlockwiseFp8Unavailable`` naming why); ``BlockwiseFp8Quantizer`` makes the operands on the device,
``quantize_*_reference`` in numpy.

NVFP4 (E2M1 values, a UE4M3 scale per 16 K-elements, an FP32 global scale per tensor; NVIDIA ModelOpt):
``BlockScaledFp4VectorPlan`` (M = 1, NVRTC, any cc >= 8.0) and ``BlockScaledFp4Plan`` (M <= 16 the same
kernels; larger M: on cc 12.x the library's SM120 block-scaled NVFP4 kernels, elsewhere (or for linear
scales, BF16 activations, K % 32 != 0) decode into a kept BF16 workspace and the dense plan); ``Fp4Quantizer`` and
``Fp4ScaleConverter`` (linear <-> CUTLASS's tiled scale layout) on the device; their numpy references
(bit for bit) ``fp4_quantize_reference``, ``fp4_dequantize_reference``, ``fp4_global_scale``,
``fp4_scale_shape``, ``fp4_scales_to_tiled``, ``fp4_scales_to_linear``, ``pack_e2m1``, ``unpack_e2m1``
(the functions of ``_fp4_reference`` under names that say NVFP4).

Grouped NVFP4 for mixture-of-experts (device-resident routing, graph-replayable): ``VariableGroupedFp4Plan``,
``IndexedGroupedFp4Plan``, ``PairedVariableGroupedFp4Plan`` with ``VariableGroupedFp4Spec``,
``IndexedGroupedFp4Spec``, ``GroupedFp4Operands`` and the error flag bits ``ERROR_MATRIX_INDEX``, ``ERROR_ROWS``.
"""

from ._build import CutlassNotFound
from ._dense import DenseMatmulPlan, available_kernels
from ._fp4 import BlockScaledFp4Plan, BlockScaledFp4VectorPlan
from ._fp4_layout import Fp4Quantizer, Fp4ScaleConverter
from ._fp4_reference import dequantize as fp4_dequantize_reference
from ._fp4_reference import global_scale as fp4_global_scale
from ._fp4_reference import pack_e2m1, unpack_e2m1
from ._fp4_reference import quantize as fp4_quantize_reference
from ._fp4_reference import scale_shape as fp4_scale_shape
from ._fp4_reference import scales_to_linear as fp4_scales_to_linear
from ._fp4_reference import scales_to_tiled as fp4_scales_to_tiled
from ._fp8 import BlockwiseFp8Plan, BlockwiseFp8Unavailable, BlockwiseFp8VectorPlan
from ._moe import (ERROR_MATRIX_INDEX, ERROR_ROWS, IndexedGroupedFp4Plan, PairedVariableGroupedFp4Plan,
                   VariableGroupedFp4Plan)
from ._moe_kernels import DecodeTuning
from ._moe_spec import GroupedFp4Operands, IndexedGroupedFp4Spec, VariableGroupedFp4Spec
from ._library import CutlassError, CutlassLibrary, KernelInfo, load_library
from ._quantize import (BlockwiseFp8Quantizer, activation_scale_shape, dequantize_reference,
                        quantize_activations_reference, quantize_reference, quantize_weights_reference,
                        weight_scale_shape)
from ._spec import DenseMatmulSpec, DenseVectorSpec
from ._vector import DenseVectorPlan

__all__ = ["BlockwiseFp8Plan", "BlockwiseFp8Quantizer", "BlockwiseFp8Unavailable", "BlockwiseFp8VectorPlan",
           "activation_scale_shape", "dequantize_reference", "quantize_activations_reference", "quantize_reference",
           "quantize_weights_reference", "weight_scale_shape", "CutlassError", "CutlassLibrary", "CutlassNotFound",
           "DenseMatmulPlan", "DenseMatmulSpec", "DenseVectorPlan", "DenseVectorSpec", "KernelInfo",
           "available_kernels", "load_library"]
__all__ += ["BlockScaledFp4Plan", "BlockScaledFp4VectorPlan", "Fp4Quantizer", "Fp4ScaleConverter",
            "fp4_dequantize_reference", "fp4_global_scale", "fp4_quantize_reference", "fp4_scale_shape",
            "fp4_scales_to_linear", "fp4_scales_to_tiled", "pack_e2m1", "unpack_e2m1"]
__all__ += ["VariableGroupedFp4Plan", "IndexedGroupedFp4Plan", "PairedVariableGroupedFp4Plan", "GroupedFp4Operands",
            "VariableGroupedFp4Spec", "IndexedGroupedFp4Spec", "ERROR_MATRIX_INDEX", "ERROR_ROWS", "DecodeTuning"]
