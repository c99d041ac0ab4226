"""Launch: kernel contracts, launch geometry, argument packing, typed kernels."""

from ._config import LaunchConfig
from ._contract import In, InOut, KernelContract, Out, Param, cuda_export
from ._kernel import LAUNCH_ABIS, ArgumentPacker, FunctionAttributes, LaunchAbi, TypedKernel

__all__ = ["LAUNCH_ABIS", "ArgumentPacker", "LaunchAbi", "FunctionAttributes", "In", "InOut", "KernelContract", "LaunchConfig", "Out",
           "Param", "TypedKernel", "cuda_export"]
