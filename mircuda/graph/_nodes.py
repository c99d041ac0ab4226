"""Reading a native graph: its nodes, their types, kernel-node parameters, allocation pairs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import _cuda

__all__ = ["NativeNodes", "graph_nodes", "inspect_graph", "kernel_function", "node_type"]

# CUgraphNodeType values (cuda.h, stable since CUDA 11.4).
KERNEL = 0
MEM_ALLOC = 10
MEM_FREE = 11


def graph_nodes(graph_cu: Any) -> list[Any]:
    """The ``CUgraphNode`` objects of a graph, in the driver's order (``cuGraphGetNodes``)."""
    _, count = _cuda.call("cuGraphGetNodes", graph_cu, 0)
    count = int(count)
    if not count:
        return []
    nodes, count = _cuda.call("cuGraphGetNodes", graph_cu, count)
    return list(nodes)[: int(count)]


def node_type(node: Any) -> int:
    """The node's ``CUgraphNodeType`` as an int (``cuGraphNodeGetType``)."""
    return int(_cuda.call("cuGraphNodeGetType", node))


def kernel_params(node: Any) -> Any:
    """A kernel node's ``CUDA_KERNEL_NODE_PARAMS`` (``cuGraphKernelNodeGetParams``)."""
    return _cuda.call("cuGraphKernelNodeGetParams", node)


def kernel_function(node: Any) -> int:
    """The ``CUfunction`` handle of a kernel node, as an int."""
    return int(kernel_params(node).func)


@dataclass
class NativeNodes:
    """What :func:`inspect_graph` found.

    Attributes:
        kernels: ``(node, CUDA_KERNEL_NODE_PARAMS)`` for each kernel node.
        allocations: device address -> bytes, for each memory-allocation node.
        frees: device addresses of the memory-free nodes.
    """

    kernels: list[tuple[Any, Any]] = field(default_factory=list)
    allocations: dict[int, int] = field(default_factory=dict)
    frees: list[int] = field(default_factory=list)

    def unpaired(self) -> tuple[list[int], list[int]]:
        """``(allocated but never freed, freed but not allocated)`` device addresses within the graph."""
        freed = set(self.frees)
        return ([a for a in self.allocations if a not in freed],
                [f for f in self.frees if f not in self.allocations])


def inspect_graph(graph_cu: Any) -> NativeNodes:
    """Kernel nodes and stream-ordered allocation/free nodes of a graph (one pass over its nodes)."""
    found = NativeNodes()
    for node in graph_nodes(graph_cu):
        kind = node_type(node)
        if kind == KERNEL:
            found.kernels.append((node, kernel_params(node)))
        elif kind == MEM_ALLOC:
            p = _cuda.call("cuGraphMemAllocNodeGetParams", node)
            found.allocations[int(p.dptr)] = int(p.bytesize)
        elif kind == MEM_FREE:
            found.frees.append(int(_cuda.call("cuGraphMemFreeNodeGetParams", node)))
    return found
