"""Launch: kernel contracts, launch geometry, argument packing, typed kernels, launch ABIs.

The launch ABI pieces (``LaunchAbi``, ``LAUNCH_ABIS`` and the helpers after them) are what another
compiler's kernels need to be launched like NVRTC's: see :mod:`mircuda.launch._abi`.
"""

from ._abi import (LAUNCH_ABIS, MISSING, ArgumentPacker, LaunchAbi, arity_error, buffer_argument, c_slots,
                   compile_function, emit_c_values, emit_c_writes, generate_launch, parameter_layout, parameter_sizes,
                   scalar_argument, struct_argument, value_slots, verify_c_parameters)
from ._config import LaunchConfig
from ._contract import In, InOut, KernelContract, Out, Param, cuda_export, is_name_expression
from ._kernel import FunctionAttributes, TypedKernel, kernels_for_function
from ._occupancy import SuggestedBlockSize
from ._pack import SCALAR_CTYPES, ArgumentBlock, Slot, SlotCType, scalar_converter
from ._struct import VECTOR_TYPES, StructField, StructType, struct

__all__ = ["ArgumentPacker", "FunctionAttributes", "In", "InOut", "KernelContract", "LaunchConfig", "Out", "Param",
           "StructField", "StructType", "SuggestedBlockSize", "TypedKernel", "VECTOR_TYPES", "cuda_export",
           "is_name_expression", "kernels_for_function", "struct",
           # launch ABIs
           "LAUNCH_ABIS", "MISSING", "LaunchAbi", "ArgumentBlock", "SCALAR_CTYPES", "Slot", "SlotCType", "arity_error",
           "buffer_argument", "c_slots", "compile_function", "emit_c_values", "emit_c_writes", "generate_launch", "parameter_layout",
           "parameter_sizes", "scalar_argument", "scalar_converter", "struct_argument", "value_slots",
           "verify_c_parameters"]
