"""NCCL collectives on mircuda streams and device buffers, through NVIDIA's nccl4py (the ``[nccl]`` extra).

Importing this package raises :class:`~mircuda.errors.NcclNotFound` (a MircudaError and an ImportError,
naming the extra) where nccl4py or the NCCL library (``nvidia-nccl-cu13``) cannot be loaded; once it
can, it sets ``NCCL_NVLS_ENABLE=0`` unless the environment already sets it (NVLink multicast stays off:
see :mod:`mircuda.nccl._library`).

- :func:`unique_id` and ``Communicator(rank, size, unique_id, context)``: one rank per process.
- :meth:`Communicator.init_all`: one rank per device of this process; drive them inside :func:`group`.
- ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``, ``send``/``recv`` on a Stream.
- :func:`close_all` closes communicators of one process together.
- :meth:`Communicator.allocate_symmetric` / :func:`allocate_symmetric_all`: :class:`SymmetricBuffer` s
  (``ncclMemAlloc`` memory registered as symmetric windows) for NCCL's low-latency symmetric kernels
  over NVLink load/store (without multicast; see :mod:`mircuda.nccl._symmetric`).
"""

from ..errors import NcclError, NcclNotFound
from ._library import nccl_version, unique_id
from ._communicator import REDUCTIONS, Communicator, allocate_symmetric_all, close_all, group, nccl_type
from ._symmetric import SymmetricBuffer

__all__ = ["Communicator", "NcclError", "NcclNotFound", "REDUCTIONS", "SymmetricBuffer", "allocate_symmetric_all",
           "close_all", "group", "nccl_type", "nccl_version", "unique_id"]
