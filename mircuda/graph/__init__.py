"""Graphs: stream capture into CUDA graphs that own their resources, typed kernel-node updates.

``Stream.capture(resources, fn)`` returns a :class:`Graph`; ``TypedKernel.launch_captured`` returns
the :class:`KernelNode` a captured launch created; ``Graph.update_kernel`` rewrites a node's arguments
through its contract.
"""

from ._graph import Graph, KernelNode
from ._resources import reachable_buffers

__all__ = ["Graph", "KernelNode", "reachable_buffers"]
