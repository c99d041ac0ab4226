"""The grouped NVFP4 plans' SM120 engine: one library plan of a grouped block-scaled NVFP4 kernel
(``CutlassLibrary.grouped_kernels``: CUTLASS's pointer-array grouped ``OpClassBlockScaledTensorOp`` kernel
with device-only problem shapes, sm_120f) with its kept workspace, the argument checks and the
``@numba.njit`` executor.

Operands (the shared contract of the grouped plans, ``/work/tasks/moe_interface.md``; the C ABI:
``cutlass_build/include/mircuda_cutlass.h``, ``MIRCUDA_CUTLASS_KIND_GROUPED_BLOCK_SCALED``), per operand set:
A packed E2M1 ``[capacity, K/2]`` uint8 with LINEAR UE4M3 scales ``[capacity, K/16]``; a bank of
``bank_size`` matrices ``[bank_size, N, K/2]`` uint8 with TILED scales per matrix (rows padded to 128, K/16 to
4; matrix e's at byte ``e * ceil(N/128)*128 * ceil(K/64)*4``); D BF16 ``[capacity, N]``; ``alpha_per_matrix``
FP32 ``[bank_size]`` on the device. Routing, device int32 ``[groups]``: ``row_counts``, ``offsets``,
``matrix_indices``; group g computes rows ``[offsets[g], offsets[g] + row_counts[g])`` of D from the same
rows of A and matrix ``matrix_indices[g]``. An invalid group is skipped and ORs 1 (matrix index out of range)
or 2 (rows out of range) into the device int32 ``error_flag``; rows no group covers are never written.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import _cuda
from ..dtypes import u8
from ..errors import ClosedResourceError, ContractError, UnsupportedPlatform
from ..memory import DeviceBuffer
from ._dense import _destroy
from ._library import (GROUPED_OPERAND_ALIGNMENT, GROUPED_OPERAND_FIELDS, CutlassLibrary, KernelInfo, pick_family,
                       positive_size)
from ._spec import plan_stream

if TYPE_CHECKING:
    from ..runtime import Context, Stream

__all__ = ["CutlassGroupedFp4", "choose_grouped_kernel", "grouped_executor", "grouped_workspace_rows",
           "INVALID_ARGUMENT", "MISALIGNED"]

INVALID_ARGUMENT = 1
"""The library's ``MIRCUDA_CUTLASS_INVALID_ARGUMENT``: what the executor returns for another stream or a null
address."""
MISALIGNED = 2
"""``MIRCUDA_CUTLASS_NOT_IMPLEMENTABLE``: what the executor (and the library) return for a misaligned address."""


def grouped_workspace_rows(capacity: int, groups: int) -> int:
    """Rows of one operand set's repacked activation scales in the plan's workspace: ``ceil(capacity/128) *
    128 + 128 * min(groups, capacity)`` (each group's scales start at a multiple of 128 rows in the tiled
    layout; enough for any routing whose groups' row ranges do not overlap). Times ``ceil(K/64) * 4`` bytes
    per row and the number of sets, it is most of :attr:`CutlassGroupedFp4.workspace_bytes` (the rest:
    CUTLASS's tensor maps and the per-group tables)."""
    return (-(-capacity // 128) + min(groups, capacity)) * 128


def choose_grouped_kernel(kernels: Sequence[KernelInfo], multiprocessors: int, capacity: int,
                          n: int) -> tuple[KernelInfo, str]:
    """The kernel among ``kernels`` (the runnable grouped ones, non-empty) and why: ping-pong when the most
    output tiles a step can have (``ceil(capacity/128) * ceil(N/128)``) reach two per SM (two tiles per CTA
    at once, one's epilogue under the other's MMAs), else cooperative (both warp groups on one tile). A rule
    from the schedules' structure, as for the single NVFP4 plan; not measured (no SM120 GPU here)."""
    tiles = -(-capacity // 128) * -(-n // 128)
    want = "sm120_nvfp4_grouped_pingpong" if tiles >= 2 * multiprocessors else "sm120_nvfp4_grouped_cooperative"
    chosen, missing = pick_family(kernels, want)
    why = (f"up to {tiles} output tiles of 128 x 128 {'>=' if tiles >= 2 * multiprocessors else '<'} 2 x "
           f"{multiprocessors} SMs: {'ping-pong' if want.endswith('pingpong') else 'cooperative'}")
    return chosen, why + missing



class CutlassGroupedFp4:
    """A library plan of a grouped block-scaled NVFP4 kernel on the context's device (cc 12.x: the kernels
    are sm_120f code) for N, K, a row ``capacity``, ``groups`` groups, a bank of ``bank_size`` matrices and
    ``sets`` operand sets (1; 2 for the paired plan: two operand sets sharing the routing, one grouped launch
    over ``2 * groups`` problems), bound to ``stream``. Its workspace (:attr:`workspace_bytes`: CUTLASS's
    tensor maps, the per-group tables and the activation scales repacked per group, see
    :func:`grouped_workspace_rows`) is allocated from the context's default pool on ``stream`` at
    construction and kept until :meth:`close` (freed on ``stream``); execute allocates nothing.

    Args:
        context: the plan's context. library: a loaded :class:`CutlassLibrary` with grouped kernels.
        n, k: each matrix of the bank is ``[N, K]`` (N % 8 == 0: 16-byte rows of BF16 D; K % 32 == 0: 16-byte
            rows of E2M1, so that every group's A, B and D start 16-byte aligned for TMA).
        capacity: rows of A and D (fixed). groups: G (fixed). bank_size: E, matrices in the bank.
        sets: 1 or 2. stream: the only stream :meth:`execute` takes.
        kernel: one of ``library.grouped_kernels`` to force; None chooses (:func:`choose_grouped_kernel`).

    Raises:
        ContractError: a bad argument (names it: a size not a positive int, ``sets`` not 1 or 2, N or K
            breaking the multiples, a library without grouped kernels, a kernel not among them).
        UnsupportedPlatform: the device is not cc 12.x (sm_120f code does not load on it).
        CutlassError: the library refused the plan (NOT_IMPLEMENTABLE: CUTLASS's can-implement or a scale
            workspace past 2^31 rows; WRONG_ARCH, ...).
        CudaError: the workspace allocation failed (nothing is kept).
    """

    def __init__(self, context: Context, library: CutlassLibrary, *, n: int, k: int, capacity: int, groups: int,
                 bank_size: int, sets: int, stream: Stream, kernel: KernelInfo | None = None) -> None:
        plan_stream(stream, context)
        if not isinstance(library, CutlassLibrary):
            raise ContractError("library", "a mircuda CutlassLibrary (mircuda.matmul.load_library())",
                                type(library).__name__)
        sizes = {name: positive_size(name, value) for name, value in
                 (("n", n), ("k", k), ("capacity", capacity), ("groups", groups), ("bank_size", bank_size))}
        if type(sets) is not int or sets not in (1, 2):
            raise ContractError("sets", "1 or 2 operand sets", repr(sets))
        table = library.grouped_kernels
        if not table:
            raise ContractError("library", "a library with the grouped NVFP4 kernels (ABI 3, built for 120f)",
                                f"{library.path} (ABI {library.abi_version}, no grouped kernels)",
                                "rebuild it: python -m mircuda build-cutlass --arch 120f")
        if kernel is not None and kernel not in table:
            raise ContractError("kernel", f"None or one of {', '.join(x.name for x in table)}", repr(kernel))
        if n % 8 or k % 32:
            raise ContractError("shape", "N % 8 == 0 and K % 32 == 0 (16-byte rows of BF16 D and E2M1 codes)",
                                f"N = {n}, K = {k}")
        info = context.device_info()
        cc = tuple(info.compute_capability)
        runnable = [x for x in table if x.runs_on((cc[0], cc[1]))]
        if not runnable:
            raise UnsupportedPlatform(f"the grouped NVFP4 kernels are sm_120f code, which loads on cc 12.x only; "
                                      f"{info.name} has {cc[0]}.{cc[1]}")
        if kernel is None:
            kernel, self.why = choose_grouped_kernel(runnable, info.multiprocessor_count, capacity, n)
        else:
            self.why = f"kernel {kernel.name} was asked for"
        self.library, self.kernel, self.stream, self.context = library, kernel, stream, context
        self.n, self.k, self.capacity, self.groups, self.bank_size = (sizes["n"], sizes["k"], sizes["capacity"],
                                                                      sizes["groups"], sizes["bank_size"])
        self.sets = sets
        context._make_current()
        handle = library.create_grouped_plan(kernel, n, k, capacity, groups, bank_size, sets)
        workspace: DeviceBuffer[Any] | None = None
        try:
            nbytes = library.workspace_bytes(handle)
            workspace = context.default_memory_pool().allocate(u8, stream, nbytes) if nbytes else None
            library.set_workspace(handle, workspace.handle if workspace is not None else 0, nbytes)
        except BaseException:
            library.destroy(handle)
            if workspace is not None:
                workspace.free(stream)
            raise
        self.handle = handle
        self._workspace = workspace
        self._workspace_bytes = nbytes
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _release, library, handle, context, workspace, stream)
        self._finalizer.atexit = False

    @property
    def workspace_bytes(self) -> int:
        """Bytes of the kept device workspace (CUTLASS's tensor maps per SM, the per-group tables of
        ``sets * groups`` problems, ``sets * grouped_workspace_rows(capacity, groups) * ceil(K/64) * 4``
        bytes of repacked activation scales)."""
        return self._workspace_bytes

    def _check(self, stream: Any, row_counts: Any, offsets: Any, matrix_indices: Any, operands: Any,
               error_flag: Any) -> list[tuple[int, ...]]:
        if not self.handle:
            raise ClosedResourceError("the grouped CUTLASS plan was closed")
        if stream is not self.stream:
            raise ContractError("stream", "the stream the plan is bound to", repr(stream))
        for name, value in (("row_counts", row_counts), ("offsets", offsets), ("matrix_indices", matrix_indices),
                            ("error_flag", error_flag)):
            if type(value) is not int or value <= 0 or value & 3:
                raise ContractError(name, "the device address of int32 data (a positive int, 4-byte aligned)",
                                    repr(value))
        if isinstance(operands, (str, bytes)) or not isinstance(operands, Sequence) or len(operands) != self.sets:
            raise ContractError("operands", f"a sequence of {self.sets} operand set(s) "
                                f"({', '.join(GROUPED_OPERAND_FIELDS)})", repr(operands))
        checked = []
        for i, entry in enumerate(operands):
            if not isinstance(entry, Sequence) or len(entry) != len(GROUPED_OPERAND_FIELDS):
                raise ContractError(f"operands[{i}]", f"a tuple ({', '.join(GROUPED_OPERAND_FIELDS)}) of device "
                                    "addresses", repr(entry))
            for name, value, align in zip(GROUPED_OPERAND_FIELDS, entry, GROUPED_OPERAND_ALIGNMENT):
                if type(value) is not int or value <= 0 or value % align:
                    raise ContractError(f"operands[{i}].{name}", f"a device address (a positive int) aligned to "
                                        f"{align} bytes", repr(value),
                                        f"kernel {self.kernel.name}: TMA reads 16-byte granules" if align == 16 else "")
            checked.append(tuple(entry))
        return checked

    def execute(self, stream: Stream, *, row_counts: int, offsets: int, matrix_indices: int,
                operands: Sequence[tuple[int, int, int, int, int, int]], error_flag: int) -> None:
        """Enqueue on ``stream`` (the plan's): the setup kernels (routing checks ORing ``error_flag``,
        per-group tables, the activation scales repacked per group), then the grouped GEMM over
        ``sets * groups`` problems. Reads no routing on the host, allocates and synchronizes nothing: a
        captured graph follows routing and ``alpha_per_matrix`` rewritten on the device between replays.

        Args:
            row_counts, offsets, matrix_indices: device addresses of int32 ``[groups]``.
            operands: ``sets`` tuples ``(a, sfa, b_bank, sfb_bank, d, alpha_per_matrix)`` of device addresses
                (the module's shapes; a, b_bank, sfb_bank, d 16-byte aligned, alpha 4-byte).
            error_flag: device address of an int32 the setup kernel ORs 1 / 2 into (never cleared here).

        Raises:
            ContractError: another stream, a non-int, null or misaligned address, the wrong number of sets.
            ClosedResourceError: the plan was closed.
            CutlassError: the library failed to enqueue (CUDA_ERROR, ...).
        """
        checked = self._check(stream, row_counts, offsets, matrix_indices, operands, error_flag)
        with self._lock:  # the library plan holds the kernel parameters of one launch at a time
            self.library.execute_grouped(self.handle, stream._handle, row_counts, offsets, matrix_indices, checked,
                                         error_flag)

    def numba_executor(self) -> Any:
        """An ``@numba.njit`` function for this plan (bound to its stream), see :func:`grouped_executor`."""
        if not self.handle:
            raise ClosedResourceError("the grouped CUTLASS plan was closed")
        return grouped_executor(self.library.grouped_execute_address, self.handle, self.sets,
                                stream=self.stream.handle)

    def describe(self) -> str:
        k = self.kernel
        return (f"CUTLASS {k.name} (sm_120f, pointer-array grouped OpClassBlockScaledTensorOp: mma.sync "
                "kind::mxf4nvf4.block_scale with UE4M3 scales per 16, TMA descriptors rewritten per group on the "
                f"device, {k.tile[0]}x{k.tile[1]}x{k.tile[2]} tiles, "
                f"{'ping-pong' if k.family.endswith('pingpong') else 'cooperative'}; {self.why}), "
                f"{self.sets} x {self.groups} groups, capacity {self.capacity}, workspace {self._workspace_bytes} "
                "bytes; routing checked and tables built on the device each execute")

    def close(self) -> None:
        """Destroy the library plan and free the workspace on the plan's stream (idempotent)."""
        self.handle = 0
        self._finalizer()


@_cuda.finalizer
def _release(lib: CutlassLibrary, handle: int, context: Any, workspace: Any, stream: Any) -> None:
    _destroy(lib, handle, context, workspace, stream)  # itself a finalizer: it never raises


def grouped_executor(execute_address: int, plan_handle: int, sets: int, *, stream: int) -> Any:
    """An ``@numba.njit`` function calling ``mircuda_cutlass_grouped_plan_execute`` for one plan bound to
    the stream handle ``stream``:

    - ``sets == 1``: ``execute(stream, row_counts, offsets, matrix_indices, error_flag, a, sfa, b_bank,
      sfb_bank, d, alpha) -> status``;
    - ``sets == 2``: the same with a second set ``a2, sfa2, b_bank2, sfb_bank2, d2, alpha2`` appended.

    It builds the operand array (6 addresses per set) in a fresh NumPy array each call and returns the
    library's status (0: enqueued). Without calling the library it returns :data:`INVALID_ARGUMENT` for
    another stream or a null address and :data:`MISALIGNED` for a misaligned one (as
    :meth:`CutlassGroupedFp4.execute` checks them).

    Raises:
        ContractError: ``sets`` is not 1 or 2, or ``execute_address`` is not a C function address.
    """
    import ctypes

    import numba
    import numpy as np

    from ..numba_ext import c_function

    if type(sets) is not int or sets not in (1, 2):
        raise ContractError("sets", "1 or 2 operand sets", repr(sets))
    u64 = ctypes.c_uint64
    fn = c_function(execute_address, ctypes.c_int, u64, u64, u64, u64, u64, u64, u64)
    U = numba.uint64
    bound, handle = U(stream), U(plan_handle)

    @numba.njit(cache=False)
    def _call(stream: int, row_counts: int, offsets: int, matrix_indices: int, error_flag: int,
              values: Any) -> int:
        if U(stream) != bound:
            return INVALID_ARGUMENT
        pr, po, pm, pe = U(row_counts), U(offsets), U(matrix_indices), U(error_flag)
        if pr == U(0) or po == U(0) or pm == U(0) or pe == U(0):
            return INVALID_ARGUMENT
        if (pr | po | pm | pe) & U(3):
            return MISALIGNED
        for i in range(values.size):
            if values[i] == U(0):
                return INVALID_ARGUMENT
            field = i % 6
            mask = U(0) if field == 1 else (U(3) if field == 5 else U(15))
            if values[i] & mask:
                return MISALIGNED
        return fn(handle, U(stream), pr, po, pm, U(values.ctypes.data), pe)

    @numba.njit(cache=False)
    def execute_one(stream: int, row_counts: int, offsets: int, matrix_indices: int, error_flag: int, a: int,
                    sfa: int, b_bank: int, sfb_bank: int, d: int, alpha: int) -> int:
        values = np.empty(6, np.uint64)
        values[0], values[1], values[2], values[3], values[4], values[5] = (
            U(a), U(sfa), U(b_bank), U(sfb_bank), U(d), U(alpha))
        return _call(stream, row_counts, offsets, matrix_indices, error_flag, values)

    @numba.njit(cache=False)
    def execute_two(stream: int, row_counts: int, offsets: int, matrix_indices: int, error_flag: int, a: int,
                    sfa: int, b_bank: int, sfb_bank: int, d: int, alpha: int, a2: int, sfa2: int, b_bank2: int,
                    sfb_bank2: int, d2: int, alpha2: int) -> int:
        values = np.empty(12, np.uint64)
        values[0], values[1], values[2], values[3], values[4], values[5] = (
            U(a), U(sfa), U(b_bank), U(sfb_bank), U(d), U(alpha))
        values[6], values[7], values[8], values[9], values[10], values[11] = (
            U(a2), U(sfa2), U(b_bank2), U(sfb_bank2), U(d2), U(alpha2))
        return _call(stream, row_counts, offsets, matrix_indices, error_flag, values)

    execute: Any = execute_one if sets == 1 else execute_two

    # The ctypes function object stays with the dispatcher (numba's Dispatcher declares no such attribute).
    execute._mircuda_keepalive = fn
    return execute
