"""DenseMatmulPlan: C = alpha A B^T + beta C by NVRTC kernels (the dense vector kernel for M = 1, the
batched GEMV for M <= 16, up to 32 where the measured table or ``kernel=`` names it) or the CUTLASS library."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import _cuda
from .._repr import Description
from ..compile import Compiler
from ..dtypes import bf16
from ..errors import ContractError, MircudaError
from ._build import CutlassNotFound
from ._gemv import ROWS_PER_BLOCK, BatchedGemv, gemv_kernels
from ._library import NOT_IMPLEMENTABLE, CutlassError, CutlassLibrary, KernelInfo, load_library
from ._select import Selection, select_kernel
from ._tuned import table_for
from ._vector import VECTOR_FAMILY, VectorKernel, check_static_weights, plan_compiler, vector_kernels
from ._spec import (DenseMatmulSpec, Operand, PlanBase, check_disjoint, check_kernel_name, check_operand, check_scalar,
                    int_knob, plan_stream, resolve_dtypes)

if TYPE_CHECKING:
    from ..memory import DeviceBuffer
    from ..runtime import Context, Stream

__all__ = ["DenseMatmulPlan", "available_kernels"]

In = TypeVar("In")
Out = TypeVar("Out")


class DenseMatmulPlan(PlanBase, Generic[In, Out]):
    """``C[M, N] = alpha * A[M, K] . B[N, K]^T + beta * C[M, N]`` with FP32 accumulation, by a kernel
    chosen for the shape and the device at construction (see :meth:`describe`).

    A is row-major (activations), B is ``[N, K]`` row-major (weights), C is row-major. Kernel
    families: for M <= 16 (decode) on any device of cc >= 8.0 CUDA C kernels that NVRTC compiles
    for the device, streaming each weight once (any N and K; they need no CUTLASS library): for M = 1
    DenseVectorPlan's kernel (``cuda_src/dense_vector.cu``), for 2 <= M <= 16 the batched GEMV
    (``cuda_src/batched_gemv.cu``, one module per M; the measured table also takes it up to M = 32 where it
    was measured fastest); otherwise CUTLASS kernels: on SM90 TMA + WGMMA
    warp-specialized kernels (swapped split-K kernels for small M, ping-pong and stream-K kernels for
    medium M, a cooperative kernel for large M); on SM120 the SM80-style TensorOp GemmUniversal (decode, wide
    and bulk tiles); anywhere a SIMT kernel for shapes whose K or N is not a multiple of 16 bytes.

    Args:
        context, stream: the plan's context and stream; its workspace is allocated from the context's
            default pool on ``stream`` and kept until :meth:`close` (freed on ``stream``). The plan is
            bound to ``stream``: :meth:`execute` and :attr:`numba_execute` take no other.
        spec: ``DenseMatmulSpec(m, n, k)``.
        input: ``mc.bf16`` or ``mc.f16`` (A and B); output: ``None`` (the input type) or ``mc.f32``.
        kernel: force a kernel by name (``plan.describe()`` and ``available_kernels`` list them), e.g. a
            CUTLASS kernel for M <= 16, ``"batched_gemv_bf16_bf16"`` or ``"batched_gemv_rows32_bf16_bf16"``
            (M <= 32) or
            ``"dense_vector_bf16_bf16"`` (M = 1).
        splits: K slices of a split-K kernel (the chosen or forced one must split K: ``plan.kernel.split_k``);
            1 to min(K tiles, 32). Default: the measured table's, else enough work units for every SM.
        library: a loaded :class:`CutlassLibrary` (default: :func:`load_library`, when found).
        compiler: the Compiler of the NVRTC kernels (default: one shared per context).
        static_weights: ``True`` promises that no kernel which may still be running on the plan's stream
            when this plan's kernel starts writes B (see :class:`DenseVectorPlan`'s argument). The NVRTC
            decode kernels (M = 1 and the batched GEMV) then load their first step of weights before
            ``griddepcontrol.wait`` on cc >= 9.0; no effect on the CUTLASS kernels, below cc 9.0, for
            K % 8 != 0 or for K below one step of the kernel (``describe()`` says which). Default
            ``False``; a ``numpy.bool_`` is taken as a bool. Measured on an H200 (2026-12-02, bf16, cold
            weights, back to back, ``benchmarks/results/static_weights_ab.json``): M = 16 14336x4096
            32.16 -> 30.23 µs, 4096x14336 30.71 -> 29.97; M = 8 within 1 %.

    Streams: a plan is bound to the stream it was made with. Its split-K workspace (the partial sums
    and the reduction's semaphores) and the library's launch parameters belong to one execution at a
    time, so two executions on unordered streams would race (a split-K reduction may never finish:
    the device hangs). ``execute`` on another stream is therefore refused with a ContractError naming
    ``stream`` before anything is enqueued, as is the plan's stream while it is forked into a capture
    begun on another stream (that graph would replay on the other stream). Every plan keeps this rule,
    workspace or not. A capture on the plan's own stream records the execution (the graph launches
    only on that stream, in order with the plan's other work). For several streams make one plan per
    stream, or enqueue on the plan's stream and order other streams with events.

    Alignment: every operand address is checked before anything is enqueued (:attr:`operands`): A
    and B to the kernel's loads (16 bytes for the CUTLASS tensor-core kernels, the TMA and 128-bit
    access granularity of ``cutlass_build/src/sm90.cuh``/``sm80.cuh``, and for the NVRTC kernels'
    16-byte variants; the element size for SIMT and the element-load variants), C to the CUTLASS
    epilogue's 128-bit accesses (16 bytes; SIMT: its element size) or, for the NVRTC kernels, to
    its element size. Buffers from the pool pass; a borrowed buffer
    (``numba_ext.as_device_buffer``) at an offset into other memory may not.

    Raises:
        ContractError: bad context, stream, spec, dtypes, ``kernel``, ``splits``, ``library``, ``compiler`` or
            ``static_weights``.
        CutlassNotFound: a CUTLASS kernel is needed and the library is not built (the message gives
            the build command).
        CompileError: NVRTC rejected an NVRTC kernel (a bug; the log is attached).
        UnsupportedPlatform: the library has no kernel for this device.
        CutlassError: the library refused the plan.
    """

    def __init__(self, context: Context, stream: Stream, spec: DenseMatmulSpec, input: Any = bf16,
                 output: Any = None, *, kernel: str | None = None, splits: int | None = None,
                 library: CutlassLibrary | None = None, compiler: Compiler | None = None,
                 static_weights: bool = False) -> None:
        plan_stream(stream, context)
        if not isinstance(spec, DenseMatmulSpec):
            raise ContractError("spec", "a DenseMatmulSpec(m, n, k)", repr(spec))
        self._static_weights = check_static_weights(static_weights)
        check_kernel_name(kernel)
        given, splits = splits, int_knob(splits)
        if splits is not None and (type(splits) is not int or splits < 1):  # the message shows what was given
            raise ContractError("splits", "None or a positive int (K slices of a split-K kernel)", repr(given))
        _check_library(library)
        # Checked even when a CUTLASS kernel runs: a bad argument should not depend on the shape.
        compiler = plan_compiler(compiler, context)
        self._in, self._out = resolve_dtypes(input, output)
        missing: CutlassNotFound | None = None
        lib = library
        if lib is None:
            try:
                lib = load_library()
            except CutlassNotFound as exc:
                missing = exc
        info = context.device_info()
        table = dense_kernels(lib)
        cc = info.compute_capability
        tuned = table_for((cc[0], cc[1]))  # a bad $MIRCUDA_DENSE_TABLE is said, library or not
        try:
            selection = select_kernel(table, spec, self._in.name, self._out.name, info.compute_capability,
                                      info.multiprocessor_count, kernel, tuned=tuned, splits=splits)
        except MircudaError as exc:
            # the caller's to fix whether or not the library exists: a bad splits, or a forced NVRTC
            # kernel refused (another type pair, or an M outside its range): building the library
            # would not make it run
            argument = getattr(exc, "argument", None)
            nvrtc = argument == "kernel" and any(k.name == kernel and k.origin == "nvrtc" for k in table)
            if missing is not None and argument != "splits" and not nvrtc:
                raise missing from None
            raise
        self._lib = lib
        self._context = context
        self._stream = stream
        self._spec = spec
        self._handle = 0
        self._closed = False
        self._lock = threading.Lock()
        self._workspace: DeviceBuffer[Any] | None = None
        self._workspace_bytes = 0
        self._numba: Any = None
        self._pdl = False
        self._nvrtc: BatchedGemv | VectorKernel | None = None
        if selection.kernel.origin == "nvrtc":
            if selection.kernel.family == VECTOR_FAMILY:
                self._nvrtc = VectorKernel(context, spec.n, spec.k, self._in, self._out, compiler,
                                           static_weights=self._static_weights)
            else:
                self._nvrtc = BatchedGemv(context, spec, self._in, self._out, compiler,
                                          row_tiles=selection.kernel.tile[0] // ROWS_PER_BLOCK,
                                          static_weights=self._static_weights)
            self._selection = selection
            self._alignment = self._nvrtc.alignment
            if isinstance(self._nvrtc, VectorKernel):
                self._operands = self._nvrtc.operands("a", "b", "c")
            else:
                self._operands = self._nvrtc.operands()
            self._finalizer: weakref.finalize[..., DenseMatmulPlan[Any, Any]] = weakref.finalize(
                self, _nothing_to_release)  # close() calls it alike
            return
        if lib is None:
            raise missing  # type: ignore[misc]  # lib is None only where load_library() raised it
        context._make_current()
        handle, selection = _create(lib, spec, selection, lib.kernels, kernel is not None or splits is not None)
        self._selection = selection
        self._alignment = max(selection.kernel.alignment_bytes, self._in.itemsize)
        self._operands = cutlass_operands(selection.kernel, spec, self._in, self._out)
        self._handle = handle
        try:
            nbytes = lib.workspace_bytes(handle)
            if nbytes:
                from ..dtypes import u8

                self._workspace = context.default_memory_pool().allocate(u8, stream, nbytes)
            lib.set_workspace(handle, self._workspace.handle if self._workspace else 0, nbytes)
            # Programmatic dependent launch where the kernel waits for the previous kernel before touching memory
            # (cc 9.0 and the SM90 families): its launch and prologue overlap that kernel's
            # tail, as the NVRTC decode kernels' do.
            self._pdl = info.supports_programmatic_launch and lib.set_pdl(handle, True)
        except BaseException:
            lib.destroy(handle)
            raise
        self._workspace_bytes = nbytes
        self._finalizer = weakref.finalize(self, _destroy, lib, handle, context, self._workspace, stream)
        self._finalizer.atexit = False

    # -- properties ---------------------------------------------------------------------------
    @property
    def kernel(self) -> KernelInfo:
        """The chosen kernel's table entry (family, tile, alignment, architectures; ``origin`` says
        whether it is the CUTLASS library's or an NVRTC-compiled kernel)."""
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
    def alignment_bytes(self) -> int:
        """What the addresses of A and B must be multiples of for the chosen kernel (:attr:`operands`
        gives C's too)."""
        return self._alignment

    @property
    def handle(self) -> int:
        """The library's plan handle (``mircuda_cutlass_plan*``) as an int; 0 for the NVRTC kernels and
        after :meth:`close`."""
        return self._handle

    @property
    def programmatic_launch(self) -> bool:
        """Whether the plan's kernel launches with programmatic dependent launch (cc >= 9.0): it may then start
        while the previous kernel of the stream finishes, and waits for it (``griddepcontrol.wait``) before it
        touches global memory. True for the NVRTC kernels where the device supports it (cc >= 9.0; their
        :attr:`numba_execute` launches without), and for the CUTLASS kernels of the SM90
        families on cc 9.0 (sm_90a, built with CUTLASS's grid dependency control, but for the
        ``sm90_pingpong_64x128x64_nopdl_*`` variant, registered to launch without; the split-K and stream-K
        families through mircuda's ``StreamKGdcScheduler``, False with a library whose kernels of theirs lack it; an
        execute of theirs that splits K zeroes its flags first with a kernel launched so too; an older library's, without
        ``zero_stream_k_flags``, with a memset, which no launch overlaps). The value is the
        one set when the plan was made: :meth:`CutlassLibrary.set_pdl` on :attr:`handle` changes the launch
        (as ``benchmarks/cutlass_pdl_ab.py`` does), not this property or :meth:`describe`. H200, 2026-12-03, bf16, cold
        weights, back to back, the same kernel without and with (``benchmarks/results/cutlass_pdl_ab.json``):
        e.g. M = 64 4096x4096 13.57 -> 11.55 µs, M = 384 4096x4096 25.33 -> 23.24, M = 256 6144x4096 26.32 ->
        24.16; of 16 such cells 12 faster by more than 1 %, 2 within 1 %, 2 slower (M = 192 4096x14336 46.86 -> 48.97, M = 128
        14336x4096 36.28 -> 36.72); ``benchmarks/results/cutlass_pdl_ab_all.json`` has the 22 cells with every
        kernel built so. The measured table's rows at M = 24-1536 were swept with programmatic dependent launch and
        ``zero_stream_k_flags`` on 2026-12-03 (``benchmarks/results/matmul_sweep_zeroing.json`` and
        ``matmul_sweep_zeroing_rest.json``); its rows at M <= 16, 2048 and 8192 were not swept again then (but FP32 outputs at M = 2048 and 8192, later
        that day: ``matmul_sweep_epilogue.json`` and ``matmul_sweep_final_tile.json``). A CUTLASS kernel's
        :attr:`numba_execute` calls the same library entry point and launches as :meth:`execute` does."""
        if self._nvrtc is not None:
            return bool(self._nvrtc.config.programmatic_stream_serialization)
        return self._pdl

    @property
    def library(self) -> CutlassLibrary | None:
        """The CUTLASS library (None when it was not found and an NVRTC kernel runs the plan)."""
        return self._lib

    def describe(self) -> Description:
        """The kernel, its tile and why it was chosen (a ``str``; shown as Markdown in notebooks)."""
        k = self._selection.kernel
        s = self._spec
        head = (f"DenseMatmulPlan {self._in.name} -> {self._out.name}, M={s.m} N={s.n} K={s.k} on "
                f"{self._context.device_info().arch}: ")
        if self._nvrtc is not None:  # the table name first: the one kernel= and available_kernels take
            return Description(f"{head}{k.name}: {self._nvrtc.describe()}. Why: {self._selection.reason}.")
        tile = "x".join(map(str, k.tile))
        extra = f", cluster {k.cluster[0]}x{k.cluster[1]}" if k.cluster != (1, 1) else ""
        stages = f", {k.stages} stages" if k.stages else ""
        split = f", {self._selection.splits} K slices" if k.split_k else ""
        ws = f", workspace {self._workspace_bytes} B" if self._workspace_bytes else ""
        static = " static_weights has no effect on CUTLASS kernels." if self._static_weights else ""
        pdl = ", programmatic dependent launch" if self._pdl else ""
        return Description(f"{head}kernel {k.name} ({k.family}, tile {tile}{extra}{stages}{split}{ws}{pdl}). "
                           f"Why: {self._selection.reason}.{static}")

    # -- the hot path -------------------------------------------------------------------------
    def execute(self, stream: Stream, a: DeviceBuffer[In], b: DeviceBuffer[In], c: DeviceBuffer[Out],
                alpha: float = 1.0, beta: float = 0.0) -> None:
        """Enqueue ``C = alpha A B^T + beta C`` on ``stream``; allocates and synchronizes nothing.

        Args:
            a: ``[M, K]`` row-major, input type. b: ``[N, K]`` row-major, input type.
            c: ``[M, N]`` row-major, output type; read only when ``beta != 0``.

        Raises:
            ContractError: a stream that is not the plan's (or the plan's forked into a capture begun on
                another stream), a bad buffer (type, dtype, context, length, alignment: named, with
                the address), C overlapping A or B (named ``c``, with both byte ranges) or a bad scalar;
                nothing is enqueued then.
            UseAfterFree: a buffer was freed. ClosedResourceError: the plan or its stream was closed.
            CutlassError: the library failed to enqueue. CudaError: the driver refused the launch.
        """
        if self._closed:
            from ..errors import ClosedResourceError

            raise ClosedResourceError("the DenseMatmulPlan was closed")
        self._check_stream(stream)
        ctx = self._context
        oa, ob, oc = self._operands
        pa = check_operand(oa, a, ctx)
        pb = check_operand(ob, b, ctx)
        pc = check_operand(oc, c, ctx)
        check_disjoint(oc, pc, ((oa, pa), (ob, pb)))  # C written over A or B would race with their reads
        fa, fb = check_scalar("alpha", alpha), check_scalar("beta", beta)
        if self._nvrtc is not None:
            self._nvrtc.launch(stream, a, b, c, fa, fb)
            return
        with self._lock:  # the plan holds the kernel parameters of one launch at a time
            # Without an NVRTC kernel the plan has its CUTLASS library.
            self._lib.execute(self._handle, stream._handle, pa, pb, pc, fa, fb)  # type: ignore[union-attr]

    @property
    def numba_execute(self) -> Any:
        """An ``@numba.njit`` function ``execute(stream, a, b, c, alpha, beta) -> int`` over raw
        handles (``Stream.handle``, ``DeviceBuffer.handle``): njit code can loop over plan executions
        without the interpreter. Built on :mod:`mircuda.numba_ext`: a CUTLASS kernel's is the
        library's C entry point ``mircuda_cutlass_plan_execute`` as a :func:`~mircuda.numba_ext.c_function`
        bound to this plan (returns the library's status: 0 enqueued, 1 (``WRONG_STREAM``,
        ``INVALID_ARGUMENT``) a stream handle that is not the plan's stream's, 2 (``MISALIGNED``) a
        misaligned address); the NVRTC kernels' launches through
        :func:`~mircuda.numba_ext.driver_function` (returns a ``CUresult``: 0 enqueued, 400
        ``CUDA_ERROR_INVALID_HANDLE`` another stream, 1 ``CUDA_ERROR_INVALID_VALUE`` a misaligned
        address). Nothing is enqueued on a refusal. Lengths, overlaps and captures are not checked on this path.
        Keep the plan and its stream alive (and open) while the function is used."""
        if self._numba is None:
            if self._nvrtc is not None:
                self._numba = self._nvrtc.numba_executor(self._stream.handle)
            else:
                # Without an NVRTC kernel the plan has its CUTLASS library.
                self._numba = matmul_executor(self._lib.execute_address, self._handle,  # type: ignore[union-attr]
                                              self._operands[0].alignment, stream=self._stream.handle,
                                              c_alignment=self._operands[2].alignment)
        return self._numba

    def close(self) -> None:
        """Destroy the library plan and free the workspace (stream-ordered on the construction
        stream). Idempotent."""
        self._closed = True
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
    """Names of the kernels for these element types (for ``DenseMatmulPlan(kernel=...)``): the
    dense vector kernel's and the batched GEMV's, then the library's.

    Raises:
        ContractError: bad ``input``, ``output`` or ``library``.
        CutlassNotFound: no library was given and none is built.
    """
    i, o = resolve_dtypes(input, output)
    _check_library(library)
    lib = load_library() if library is None else library
    return [k.name for k in dense_kernels(lib) if k.input == i.name and k.output == o.name]


def dense_kernels(library: CutlassLibrary | None) -> tuple[KernelInfo, ...]:
    """Every kernel a :class:`DenseMatmulPlan` can choose, in table order: the dense vector kernels and the
    batched GEMVs (NVRTC), then ``library``'s (none without one)."""
    return (*vector_kernels(), *gemv_kernels(), *(library.kernels if library is not None else ()))


def _check_library(library: Any) -> None:
    if library is not None and not isinstance(library, CutlassLibrary):
        raise ContractError("library", "None or a CutlassLibrary (mc.matmul.load_library())", repr(library))


MISALIGNED = NOT_IMPLEMENTABLE
"""What a CUTLASS plan's ``numba_execute`` returns for a misaligned address (the library's status)."""
WRONG_STREAM = 1
"""What a CUTLASS plan's ``numba_execute`` returns for a stream that is not the plan's (the library's
``MIRCUDA_CUTLASS_INVALID_ARGUMENT``)."""


def cutlass_operands(kernel: KernelInfo, spec: DenseMatmulSpec, input: Any, output: Any) -> tuple[Operand, ...]:
    """DenseMatmulPlan's checks of ``a``, ``b`` and ``c`` for a CUTLASS kernel: A and B to the kernel's
    ``alignment_bytes`` (16 for the tensor-core kernels: TMA / 128-bit loads; SIMT: the input's
    element size), C to the epilogue's accesses (the tensor-core kernels' epilogues store 128 bits,
    ``kAlignOut = 128 / sizeof_bits<Out>`` in ``cutlass_build/src/sm90.cuh`` and ``instance.cuh``: 16
    bytes; SIMT one element: its size)."""
    m, n, k = spec.m, spec.n, spec.k
    why = (f"kernel {kernel.name}: one element per access" if kernel.family == "simt"
           else f"kernel {kernel.name}: CUTLASS {kernel.alignment_bytes}-byte (128-bit) accesses")
    ab = max(kernel.alignment_bytes, input.itemsize)
    return (Operand("a", input, m * k, f"[M, K] = [{m}, {k}]", ab, why),
            Operand("b", input, n * k, f"[N, K] = [{n}, {k}]", ab, why),
            Operand("c", output, m * n, f"[M, N] = [{m}, {n}]", max(kernel.alignment_bytes, output.itemsize), why))


def matmul_executor(execute_address: int, plan_handle: int, alignment: int, *, stream: int,
                    c_alignment: int) -> Any:
    """``execute(stream, a, b, c, alpha, beta) -> status``: an ``@numba.njit`` function calling the
    library's ``mircuda_cutlass_plan_execute`` (a :func:`mircuda.numba_ext.c_function`) for one plan
    bound to the stream handle ``stream``. Without calling it, it returns ``WRONG_STREAM`` for another
    stream and ``MISALIGNED`` when ``a`` or ``b`` is not a multiple of ``alignment`` or ``c`` of
    ``c_alignment``."""
    import ctypes

    import numba

    from ..numba_ext import c_function

    u64 = ctypes.c_uint64
    fn = c_function(execute_address, ctypes.c_int, u64, u64, u64, u64, u64, ctypes.c_float, ctypes.c_float)
    umask = numba.uint64(max(alignment, 1) - 1)
    cmask = numba.uint64(max(c_alignment, 1) - 1)
    bound = numba.uint64(stream)
    handle = plan_handle
    to_u64 = numba.uint64

    @numba.njit(cache=False)
    def execute(stream: int, a: int, b: int, c: int, alpha: float, beta: float) -> int:
        if to_u64(stream) != bound:
            return WRONG_STREAM
        pa, pb, pc = to_u64(a), to_u64(b), to_u64(c)
        if (pa | pb) & umask or pc & cmask:
            return MISALIGNED
        return fn(handle, to_u64(stream), pa, pb, pc, alpha, beta)

    # The ctypes function object stays with the dispatcher; numba's stubs declare no such attribute.
    execute._mircuda_keepalive = fn  # type: ignore[attr-defined]
    return execute


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
def _nothing_to_release() -> None:
    """The finalizer of a plan whose kernel is NVRTC's: its module and buffers have their own."""


@_cuda.finalizer
def _destroy(lib: CutlassLibrary, handle: int, context: Any, workspace: Any, stream: Any) -> None:
    if not context._closed:
        context._make_current()
        lib.destroy(handle)
        if workspace is not None and not workspace.freed and stream.handle:
            workspace.free(stream)

