"""DenseMatmulPlan: C = alpha A B^T + beta C over the CUTLASS library (``libmircuda_cutlass.so``)."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import _cuda
from ..dtypes import bf16
from ..errors import ContractError
from ._library import NOT_IMPLEMENTABLE, CutlassError, CutlassLibrary, KernelInfo, load_library
from ._select import Selection, select_kernel
from ._spec import DenseMatmulSpec, PlanBase, check_operand, check_scalar, check_stream, plan_stream, resolve_dtypes

if TYPE_CHECKING:
    from ..memory import DeviceBuffer
    from ..runtime import Context, Stream

__all__ = ["DenseMatmulPlan", "available_kernels"]

In = TypeVar("In")
Out = TypeVar("Out")


class DenseMatmulPlan(PlanBase, Generic[In, Out]):
    """``C[M, N] = alpha * A[M, K] . B[N, K]^T + beta * C[M, N]`` with FP32 accumulation, by a CUTLASS
    kernel chosen for the shape and the device at construction (see :meth:`describe`).

    A is row-major (activations), B is ``[N, K]`` row-major (weights), C is row-major. Kernel
    families: on SM90 TMA + WGMMA warp-specialized kernels (a swapped split-K kernel for M <= 64, a
    ping-pong kernel for medium M, a cooperative kernel for large M); on SM120 the SM80-style TensorOp
    GemmUniversal (decode, wide and bulk tiles); anywhere a SIMT kernel for shapes whose K or N is not
    a multiple of 16 bytes.

    Args:
        context, stream: the plan's context; its workspace is allocated from the context's default
            pool on ``stream`` and kept until :meth:`close` (freed on ``stream``).
        spec: ``DenseMatmulSpec(m, n, k)``.
        input: ``mc.bf16`` or ``mc.f16`` (A and B); output: ``None`` (the input type) or ``mc.f32``.
        kernel: force a kernel by name (``plan.describe()`` and ``available_kernels`` list them).
        library: a loaded :class:`CutlassLibrary` (default: :func:`load_library`).

    Raises:
        ContractError: bad context, stream, spec, dtypes or ``kernel``.
        CutlassNotFound: the library is not built (the message gives the build command).
        UnsupportedPlatform: the library has no kernel for this device.
        CutlassError: the library refused the plan.
    """

    def __init__(self, context: Context, stream: Stream, spec: DenseMatmulSpec, input: Any = bf16,
                 output: Any = None, *, kernel: str | None = None, library: CutlassLibrary | None = None) -> None:
        plan_stream(stream, context)
        if not isinstance(spec, DenseMatmulSpec):
            raise ContractError("spec", "a DenseMatmulSpec(m, n, k)", repr(spec))
        if kernel is not None and not isinstance(kernel, str):
            raise ContractError("kernel", "None or a kernel name", repr(kernel))
        self._in, self._out = resolve_dtypes(input, output)
        lib = load_library() if library is None else library
        info = context.device_info()
        selection = select_kernel(lib.kernels, spec, self._in.name, self._out.name, info.compute_capability,
                                  info.multiprocessor_count, kernel)
        context._make_current()
        handle, selection = _create(lib, spec, selection, lib.kernels, kernel is not None)
        self._lib = lib
        self._context = context
        self._spec = spec
        self._selection = selection
        self._handle = handle
        self._lock = threading.Lock()
        self._workspace: DeviceBuffer[Any] | None = None
        self._numba: Any = None
        try:
            nbytes = lib.workspace_bytes(handle)
            if nbytes:
                from ..dtypes import u8

                self._workspace = context.default_memory_pool().allocate(u8, stream, nbytes)
            lib.set_workspace(handle, self._workspace.handle if self._workspace else 0, nbytes)
        except BaseException:
            lib.destroy(handle)
            raise
        self._workspace_bytes = nbytes
        self._finalizer = weakref.finalize(self, _destroy, lib, handle, context, self._workspace, stream)
        self._finalizer.atexit = False

    # -- properties ---------------------------------------------------------------------------
    @property
    def kernel(self) -> KernelInfo:
        """The chosen kernel's table entry (family, tile, alignment, architectures)."""
        return self._selection.kernel

    @property
    def kernel_name(self) -> str:
        return self._selection.kernel.name

    @property
    def splits(self) -> int:
        """K slices (split-K kernels; 1 otherwise)."""
        return self._selection.splits

    @property
    def workspace_bytes(self) -> int:
        return self._workspace_bytes

    @property
    def handle(self) -> int:
        """The library's plan handle (``mircuda_cutlass_plan*``) as an int; 0 after :meth:`close`."""
        return self._handle

    @property
    def library(self) -> CutlassLibrary:
        return self._lib

    def describe(self) -> str:
        """The kernel, its tile and why it was chosen."""
        k = self._selection.kernel
        s = self._spec
        tile = "x".join(map(str, k.tile))
        extra = f", cluster {k.cluster[0]}x{k.cluster[1]}" if k.cluster != (1, 1) else ""
        stages = f", {k.stages} stages" if k.stages else ""
        split = f", {self._selection.splits} K slices" if k.split_k else ""
        ws = f", workspace {self._workspace_bytes} B" if self._workspace_bytes else ""
        return (f"DenseMatmulPlan {self._in.name} -> {self._out.name}, M={s.m} N={s.n} K={s.k} on "
                f"{self._context.device_info().arch}: kernel {k.name} ({k.family}, tile {tile}{extra}{stages}"
                f"{split}{ws}). Why: {self._selection.reason}.")

    # -- the hot path -------------------------------------------------------------------------
    def execute(self, stream: Stream, a: DeviceBuffer[In], b: DeviceBuffer[In], c: DeviceBuffer[Out],
                alpha: float = 1.0, beta: float = 0.0) -> None:
        """Enqueue ``C = alpha A B^T + beta C`` on ``stream``; allocates and synchronizes nothing.

        Args:
            a: ``[M, K]`` row-major, input type. b: ``[N, K]`` row-major, input type.
            c: ``[M, N]`` row-major, output type; read only when ``beta != 0``.

        Raises:
            ContractError: a bad stream, buffer (type, dtype, context, length, alignment) or scalar,
                named; nothing is enqueued then.
            UseAfterFree: a buffer was freed. ClosedResourceError: the plan was closed.
            CutlassError: the library failed to enqueue.
        """
        from ..errors import ClosedResourceError

        if not self._handle:
            raise ClosedResourceError("the DenseMatmulPlan was closed")
        s = self._spec
        ctx = self._context
        check_stream(stream, ctx)
        pa = check_operand("a", a, self._in, s.m * s.k, ctx, f"[M, K] = [{s.m}, {s.k}]")
        pb = check_operand("b", b, self._in, s.n * s.k, ctx, f"[N, K] = [{s.n}, {s.k}]")
        pc = check_operand("c", c, self._out, s.m * s.n, ctx, f"[M, N] = [{s.m}, {s.n}]")
        align = self._selection.kernel.alignment_bytes
        for name, ptr in (("a", pa), ("b", pb), ("c", pc)):
            if ptr % align:
                raise ContractError(name, f"an address aligned to {align} bytes (kernel {self.kernel_name})",
                                    hex(ptr))
        fa, fb = check_scalar("alpha", alpha), check_scalar("beta", beta)
        with self._lock:  # the plan holds the kernel parameters of one launch at a time
            self._lib.execute(self._handle, stream._handle, pa, pb, pc, fa, fb)

    @property
    def numba_execute(self) -> Any:
        """An ``@numba.njit`` function ``execute(stream, a, b, c, alpha, beta) -> int`` over raw
        handles (``Stream.handle``, ``DeviceBuffer.handle``) that calls the library's C entry point:
        njit code can loop over plan executions without the interpreter. Returns the library's status
        (0: enqueued; 2: a misaligned address). Lengths are not checked on this path. Keep the plan
        alive (and open) while the function is used."""
        if self._numba is None:
            from ._numba import matmul_executor

            self._numba = matmul_executor(self._lib.execute_address, self._handle, self.kernel.alignment_bytes)
        return self._numba

    def close(self) -> None:
        """Destroy the library plan and free the workspace (stream-ordered on the construction
        stream). Idempotent."""
        self._handle = 0
        self._finalizer()

    def __enter__(self) -> DenseMatmulPlan[In, Out]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        s = self._spec
        return f"DenseMatmulPlan[{self._in.name}, {self._out.name}](m={s.m}, n={s.n}, k={s.k}, {self.kernel_name})"


def available_kernels(input: Any = bf16, output: Any = None, library: CutlassLibrary | None = None) -> list[str]:
    """Names of the library's kernels for these element types (for ``DenseMatmulPlan(kernel=...)``)."""
    i, o = resolve_dtypes(input, output)
    lib = load_library() if library is None else library
    return [k.name for k in lib.kernels if k.input == i.name and k.output == o.name]


def _create(lib: CutlassLibrary, spec: DenseMatmulSpec, selection: Selection, kernels: Any,
            forced: bool) -> tuple[int, Selection]:
    """Create the library plan; when the chosen tensor-core kernel cannot implement the shape (and
    it was not forced), fall back to the SIMT kernel of the same types."""
    try:
        return lib.create_plan(selection.kernel, spec.m, spec.n, spec.k, selection.splits), selection
    except CutlassError as exc:
        k = selection.kernel
        if forced or exc.status != NOT_IMPLEMENTABLE or k.family == "simt":
            raise
        simt = next((x for x in kernels if x.family == "simt" and x.input == k.input and x.output == k.output
                     and set(x.archs) & set(k.archs)), None)
        if simt is None:
            raise
        fallback = Selection(simt, 1, f"{k.name} cannot implement M={spec.m} N={spec.n} K={spec.k} (CUTLASS "
                                      "can_implement), so the SIMT kernel runs it")
        return lib.create_plan(simt, spec.m, spec.n, spec.k, 1), fallback


@_cuda.finalizer
def _destroy(lib: CutlassLibrary, handle: int, context: Any, workspace: Any, stream: Any) -> None:
    try:
        if not context._closed:
            context._make_current()
            lib.destroy(handle)
            if workspace is not None and not workspace.freed and stream.handle:
                workspace.free(stream)
    except Exception:  # finalizers never raise
        pass

