"""mircuda.nccl without a device: the import's refusal without nccl4py, NVLink multicast off, the dtype
map, every argument check (naming the argument and the NCCL call) and the group's deferred issue,
with nccl4py's bindings replaced by a recorder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import weakref
from types import SimpleNamespace
from typing import Any

import pytest

import mircuda as mc
from mircuda import _cuda
from mircuda.dtypes import dtype_info
from mircuda.memory import _pool

try:
    import mircuda.nccl as nccl
except ImportError as exc:  # NcclNotFound: nccl4py (the [nccl] extra) is not installed
    pytest.skip(str(exc), allow_module_level=True)
from mircuda.nccl import _communicator, _symmetric


def test_import_without_nccl4py_names_the_extra() -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["nccl"] = None  # what an absent package looks like to the import system
        sys.modules["nccl.bindings"] = None
        try:
            import mircuda.nccl
        except ImportError as exc:
            import mircuda
            assert isinstance(exc, mircuda.MircudaError), type(exc)
            print(type(exc).__name__, exc)
        else:
            raise SystemExit("imported")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("NcclNotFound") and "mircuda[nccl]" in out.stdout


def _import_in_a_child(prelude: str) -> subprocess.CompletedProcess[str]:
    """Import mircuda.nccl in a fresh process after ``prelude``; prints the error's kind and text (or
    raises SystemExit("imported")) and then NCCL_NVLS_ENABLE as the failed import left it."""
    code = textwrap.dedent(prelude) + textwrap.dedent("""
        import os
        os.environ.pop("NCCL_NVLS_ENABLE", None)
        try:
            import mircuda.nccl
        except ImportError as exc:
            import mircuda
            assert isinstance(exc, mircuda.MircudaError), type(exc)
            print(type(exc).__name__, exc)
        else:
            raise SystemExit("imported")
        print("NCCL_NVLS_ENABLE", os.environ.get("NCCL_NVLS_ENABLE"))
    """)
    env = {k: v for k, v in os.environ.items() if k != "NCCL_NVLS_ENABLE"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_import_without_the_nccl_library_names_the_wheel() -> None:
    # nccl4py present, libnccl.so.2 absent: cuda.pathfinder (nccl4py's loader) finds nothing.
    out = _import_in_a_child("""
        from cuda import pathfinder

        def load_nvidia_dynamic_lib(name):
            raise pathfinder.DynamicLibNotFoundError(f"Failure finding lib{name}.so")

        pathfinder.load_nvidia_dynamic_lib = load_nvidia_dynamic_lib
    """)
    assert out.returncode == 0, out.stderr + out.stdout
    first, last = out.stdout.splitlines()
    assert first.startswith("NcclNotFound") and "nvidia-nccl-cu13" in first and "mircuda[nccl]" in first
    assert "DynamicLibNotFoundError" in first  # pathfinder's reason is kept in the message
    assert last == "NCCL_NVLS_ENABLE None"  # a failed import leaves the environment alone


def test_a_failed_import_leaves_the_environment_alone() -> None:
    out = _import_in_a_child("""
        import sys
        sys.modules["nccl"] = None
        sys.modules["nccl.bindings"] = None
    """)
    assert out.returncode == 0, out.stderr + out.stdout
    assert out.stdout.startswith("NcclNotFound") and out.stdout.splitlines()[-1] == "NCCL_NVLS_ENABLE None"


def test_import_keeps_nvlink_multicast_off_unless_set() -> None:
    code = "import os; os.environ.pop('NCCL_NVLS_ENABLE', None); import mircuda.nccl; print(os.environ['NCCL_NVLS_ENABLE'])"
    env = {k: v for k, v in os.environ.items() if k != "NCCL_NVLS_ENABLE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.strip() == "0", out.stderr
    assert os.environ.get("NCCL_NVLS_ENABLE", "0") == "0"  # this process too, unless set before


def test_unique_id_is_128_bytes_and_fresh() -> None:
    a, b = nccl.unique_id(), nccl.unique_id()
    assert isinstance(a, bytes) and len(a) == 128 and a != b
    assert nccl.nccl_version() >= (2, 24, 0)  # ncclFloat8e4m3


def test_dtypes_map_to_nccl_types_or_bytes() -> None:
    assert nccl.nccl_type(dtype_info(mc.bf16), True) == (9, 1)
    assert nccl.nccl_type(dtype_info(mc.f16), True) == (6, 1)
    assert nccl.nccl_type(dtype_info(mc.f32), True) == (7, 1)
    assert nccl.nccl_type(dtype_info(mc.e4m3), True) == (10, 1)
    assert nccl.nccl_type(dtype_info(mc.e4m3), False) == (1, 1)  # moved as bytes: no FP8 check before sm_90
    assert nccl.nccl_type(dtype_info(mc.i16), False) == (1, 2)  # as bytes where NCCL has no type
    with pytest.raises(mc.ContractError, match="argument 'dtype'.*a type NCCL reduces.*received i16"):
        nccl.nccl_type(dtype_info(mc.i16), True)


# -- a communicator over stand-ins ------------------------------------------------------------

class Recorder:
    """Stands in for nccl4py's bindings: records each call by name."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        for name in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv", "group_start",
                     "group_end", "comm_finalize", "comm_destroy", "comm_abort"):
            setattr(self, name, self._record(name))

    def _record(self, name: str) -> Any:
        return lambda *args: self.calls.append((name, *args))


def fake_context(ordinal: int, handle: int, cc: tuple[int, int] = (9, 0)) -> mc.Context:
    ctx = object.__new__(mc.Context)
    ctx._device = mc.Device(ordinal, ordinal)
    ctx._device._info = SimpleNamespace(compute_capability=cc, arch=f"sm_{cc[0]}{cc[1]}")  # type: ignore[assignment]
    ctx._handle = ctx._cu = handle
    ctx._closed, ctx._peers, ctx._pool = False, set(), None
    ctx._pool = mc.MemoryPool._wrap(ctx, 0x9000 + ordinal)
    return ctx


def fake_stream(ctx: mc.Context, handle: int = 0x50) -> mc.Stream:
    stream = object.__new__(mc.Stream)
    stream._context, stream._handle, stream._cu = ctx, handle, handle
    return stream


def fake_buffer(ctx: mc.Context, dtype: Any = mc.bf16, count: int = 64, ptr: int = 0x1000) -> mc.DeviceBuffer:
    buf = mc.DeviceBuffer._adopt(ctx, None, dtype_info(dtype), count, ptr)  # type: ignore[arg-type]
    if buf._finalizer is not None:
        buf._finalizer.detach()
    return buf


def fake_comm(ctx: mc.Context, rank: int = 0, size: int = 2) -> Any:
    comm = object.__new__(nccl.Communicator)
    comm._setup(ctx, SimpleNamespace(handle=0xC0), rank, size)
    comm._finalizer.detach()
    return comm


@pytest.fixture()
def rec(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(_communicator, "bindings", recorder)
    monkeypatch.setattr(_cuda, "make_current", lambda handle, force=False: None)
    monkeypatch.setattr(_cuda, "forget_current", lambda: None)
    monkeypatch.setattr(_pool, "_ACCESS", {})  # the stand-in pools' grants stay within each test
    return recorder


def test_collectives_pass_pointers_counts_and_types(rec: Recorder) -> None:
    ctx = fake_context(0, 0x100)
    comm, s = fake_comm(ctx), fake_stream(ctx)
    a, b = fake_buffer(ctx, ptr=0x1000), fake_buffer(ctx, count=128, ptr=0x2000)
    comm.all_reduce(s, a, b)
    comm.all_reduce(s, a, a, count=8, op="max")
    comm.all_gather(s, a, b)
    comm.reduce_scatter(s, b, a)
    comm.broadcast(s, a, b, 0, count=64)
    comm.send(s, a, 1)
    comm.recv(s, b, 1, count=10)
    c = comm._comm
    assert rec.calls == [
        ("all_reduce", 0x1000, 0x2000, 64, 9, 0, c, 0x50),
        ("all_reduce", 0x1000, 0x1000, 8, 9, 2, c, 0x50),
        ("all_gather", 0x1000, 0x2000, 64, 9, c, 0x50),
        ("reduce_scatter", 0x2000, 0x1000, 64, 9, 0, c, 0x50),
        ("broadcast", 0x1000, 0x2000, 64, 9, 0, c, 0x50),
        ("send", 0x1000, 64, 9, 1, c, 0x50),
        ("recv", 0x2000, 10, 9, 1, c, 0x50),
    ]


def test_types_without_an_nccl_type_move_as_bytes(rec: Recorder) -> None:
    ctx = fake_context(0, 0x100)
    comm, s = fake_comm(ctx), fake_stream(ctx)
    a, b = fake_buffer(ctx, mc.i16, 16), fake_buffer(ctx, mc.i16, 32, 0x2000)
    comm.all_gather(s, a, b)
    comm.send(s, a, 1, count=3)
    assert rec.calls[0][:5] == ("all_gather", 0x1000, 0x2000, 32, 1)
    assert rec.calls[1][:4] == ("send", 0x1000, 6, 1)
    with pytest.raises(mc.ContractError, match="argument 'send'.*i16.*ncclAllReduce"):
        comm.all_reduce(s, a, a)


REFUSALS: dict[str, tuple[Any, str]] = {
    "recv too short": (lambda c, s, a, b: c.all_reduce(s, a, fake_buffer(c.context, count=63)),
                       r"argument 'recv': expected at least 64 elements.*ncclAllReduce"),
    "gather recv shorter than size * count": (lambda c, s, a, b: c.all_gather(s, a, a),
                                              r"argument 'recv'.*at least 128 elements.*size \* count.*ncclAllGather"),
    "scatter send shorter": (lambda c, s, a, b: c.reduce_scatter(s, a, a),
                             r"argument 'send'.*at least 128.*ncclReduceScatter"),
    "dtypes differ": (lambda c, s, a, b: c.all_reduce(s, a, fake_buffer(c.context, mc.f32)),
                      r"argument 'recv'.*DeviceBuffer\[bf16\].*DeviceBuffer\[f32\].*ncclAllReduce"),
    "count beyond send": (lambda c, s, a, b: c.all_reduce(s, a, b, count=65), r"argument 'send'.*at least 65"),
    "negative count": (lambda c, s, a, b: c.all_reduce(s, a, b, count=-1), r"argument 'count'.*ncclAllReduce"),
    "bad op": (lambda c, s, a, b: c.all_reduce(s, a, b, op="mean"), r"argument 'op'.*sum, prod, max, min, avg"),
    "a host array": (lambda c, s, a, b: c.all_reduce(s, [1.0], b), r"argument 'send'.*DeviceBuffer.*list"),
    "not a stream": (lambda c, s, a, b: c.all_reduce(0, a, b), r"argument 'stream'.*a mircuda Stream.*ncclAllReduce"),
    "another context's stream": (lambda c, s, a, b: c.all_reduce(fake_stream(fake_context(1, 0x200)), a, b),
                                 r"argument 'stream'"),
    "gather into send itself": (lambda c, s, a, b: c.all_gather(s, b, b, count=64),
                                r"argument 'recv'.*a buffer other than send.*ncclAllGather"),
    "scatter into send itself": (lambda c, s, a, b: c.reduce_scatter(s, b, b, count=64),
                                 r"argument 'recv'.*a buffer other than send.*ncclReduceScatter"),
    "peer out of range": (lambda c, s, a, b: c.send(s, a, 2), r"argument 'peer'.*\[0, 1\].*ncclSend"),
    "root out of range": (lambda c, s, a, b: c.broadcast(s, a, b, -1), r"argument 'root'.*ncclBroadcast"),
    "no send on the root": (lambda c, s, a, b: c.broadcast(s, None, b, 0), r"argument 'send'.*the root.*None"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_bad_arguments_are_refused_before_anything_is_enqueued(rec: Recorder, case: str) -> None:
    ctx = fake_context(0, 0x100)
    comm, s = fake_comm(ctx), fake_stream(ctx)
    a, b = fake_buffer(ctx), fake_buffer(ctx, count=128, ptr=0x2000)
    make, message = REFUSALS[case]
    with pytest.raises(mc.ContractError, match=message):
        make(comm, s, a, b)
    assert rec.calls == []


def test_an_fp8_reduction_needs_compute_capability_9(rec: Recorder) -> None:
    ctx = fake_context(0, 0x100, (8, 9))
    comm, s = fake_comm(ctx), fake_stream(ctx)
    a = fake_buffer(ctx, mc.e4m3)
    with pytest.raises(mc.ContractError, match=r"argument 'send'.*compute capability >= 9.0.*sm_89.*ncclAllReduce"):
        comm.all_reduce(s, a, a)
    comm.all_gather(s, a, fake_buffer(ctx, mc.e4m3, 128, 0x2000))  # moving FP8 is fine anywhere: as bytes
    assert rec.calls[0][:5] == ("all_gather", 0x1000, 0x2000, 64, 1)


def test_a_buffer_of_another_device_is_refused_even_with_peer_access(rec: Recorder) -> None:
    gpu0, gpu1 = fake_context(0, 0x100), fake_context(1, 0x200)
    comm, s = fake_comm(gpu1), fake_stream(gpu1)
    peer = fake_buffer(gpu0)
    gpu0._pool._access.add(1)  # granted: a kernel could read it, NCCL may not
    with pytest.raises(mc.ContractError, match=r"argument 'send'.*the communicator's device.*Device\(0\).*ncclAllReduce"):
        comm.all_reduce(s, peer, fake_buffer(gpu1))
    assert rec.calls == []


def test_a_group_issues_its_calls_in_order_at_the_end_and_drops_them_on_error(rec: Recorder) -> None:
    gpu0, gpu1 = fake_context(0, 0x100), fake_context(1, 0x200)
    c0, c1 = fake_comm(gpu0, 0), fake_comm(gpu1, 1)
    s0, s1 = fake_stream(gpu0), fake_stream(gpu1, 0x60)
    a0, a1 = fake_buffer(gpu0), fake_buffer(gpu1, ptr=0x3000)
    with nccl.group():
        c0.all_reduce(s0, a0, a0)
        with nccl.group():  # nested: the outer group issues
            c1.all_reduce(s1, a1, a1)
        assert rec.calls == []  # nothing before the end of the outermost group
    assert [c[0] for c in rec.calls] == ["group_start", "all_reduce", "all_reduce", "group_end"]
    assert rec.calls[1][1] == 0x1000 and rec.calls[2][1] == 0x3000
    rec.calls.clear()
    with pytest.raises(mc.ContractError, match="argument 'recv'"), nccl.group():
        c0.all_reduce(s0, a0, a0)
        c1.all_reduce(s1, a1, fake_buffer(gpu1, count=1))
    assert rec.calls == []  # the first call was dropped with the group
    with nccl.group():
        pass
    assert rec.calls == []  # an empty group calls nothing
    with nccl.group():
        c0.all_reduce(s0, a0, a0)
        try:
            with nccl.group():
                c1.all_reduce(s1, a1, a1)
                raise RuntimeError("inside the inner block")
        except RuntimeError:
            pass
    assert [c[0] for c in rec.calls] == ["group_start", "all_reduce", "group_end"]  # the inner call was dropped
    assert rec.calls[1][1] == 0x1000


def test_close_all_finalizes_in_one_group_then_destroys(rec: Recorder) -> None:
    gpu0, gpu1 = fake_context(0, 0x100), fake_context(1, 0x200)
    c0, c1 = fake_comm(gpu0, 0), fake_comm(gpu1, 1)
    nccl.close_all([c0, c1])
    assert [c[0] for c in rec.calls] == ["group_start", "comm_finalize", "comm_finalize", "group_end",
                                         "comm_destroy", "comm_destroy"]
    assert c0.closed and c1.closed and c0.handle == 0
    nccl.close_all([c0, c1])  # idempotent
    assert len(rec.calls) == 6
    with pytest.raises(mc.ClosedResourceError, match="ncclAllReduce"):
        c0.all_reduce(fake_stream(gpu0), fake_buffer(gpu0), fake_buffer(gpu0))
    with pytest.raises(mc.ContractError, match=r"argument 'communicators\[0\]'"):
        nccl.close_all(["comm"])  # type: ignore[list-item]


def test_constructor_and_init_all_refuse_bad_arguments() -> None:
    ctx = fake_context(0, 0x100)
    uid = bytes(128)
    for kwargs, message in (
        (dict(rank=0, size=0, unique_id=uid, context=ctx), "argument 'size'"),
        (dict(rank=2, size=2, unique_id=uid, context=ctx), r"argument 'rank'.*\[0, 1\].*received 2"),
        (dict(rank=0, size=2, unique_id=b"x" * 127, context=ctx), "argument 'unique_id'.*128 bytes.*received 127 bytes"),
        (dict(rank=0, size=2, unique_id="id", context=ctx), "argument 'unique_id'"),
        (dict(rank=0, size=2, unique_id=uid, context="gpu0"), "argument 'context'.*a mircuda Context"),
    ):
        with pytest.raises(mc.ContractError, match=message):
            nccl.Communicator(**kwargs)
    with pytest.raises(mc.ContractError, match="argument 'contexts'"):
        nccl.Communicator.init_all([])
    with pytest.raises(mc.ContractError, match=r"argument 'contexts\[1\]'.*a second context of Device\(0\)"):
        other = fake_context(0, 0x100)
        other._device = ctx._device
        nccl.Communicator.init_all([ctx, other])
    with pytest.raises(mc.ContractError, match=r"argument 'contexts\[0\]'"):
        nccl.Communicator.init_all([0])  # type: ignore[list-item]


# -- symmetric memory (ncclMemAlloc + NCCL_WIN_COLL_SYMMETRIC windows) ---------------------------

class SymmetricRecorder(Recorder):
    """Also stands in for ncclMemAlloc (returns 0x10000, 0x20000, ...), ncclMemFree and the window calls."""

    def __init__(self) -> None:
        super().__init__()
        self.next_ptr = 0x10000
        self.mem_free = self._record("mem_free")
        self.comm_window_deregister = self._record("comm_window_deregister")

    def mem_alloc(self, nbytes: int) -> int:
        ptr, self.next_ptr = self.next_ptr, self.next_ptr + 0x10000
        self.calls.append(("mem_alloc", nbytes))
        return ptr

    def comm_window_register(self, comm: Any, ptr: int, nbytes: int, flags: int) -> str:
        self.calls.append(("comm_window_register", comm, ptr, nbytes, flags))
        return f"window@{ptr:#x}"  # truthy, like a filled ncclWindow_t


@pytest.fixture()
def srec(monkeypatch: pytest.MonkeyPatch) -> SymmetricRecorder:
    recorder = SymmetricRecorder()
    monkeypatch.setattr(_communicator, "bindings", recorder)
    monkeypatch.setattr(_symmetric, "bindings", recorder)
    monkeypatch.setattr(_cuda, "make_current", lambda handle, force=False: None)
    monkeypatch.setattr(_cuda, "forget_current", lambda: None)
    real_call = _cuda.call

    def call(name: str, *args: Any) -> Any:
        if name == "cuCtxSynchronize":
            recorder.calls.append(("cuCtxSynchronize",))
            return None
        return real_call(name, *args)  # pragma: no cover - nothing else reaches the driver here

    monkeypatch.setattr(_cuda, "call", call)
    monkeypatch.setattr(_pool, "_ACCESS", {})
    return recorder


def test_allocate_registers_a_symmetric_window_and_free_releases_it_in_order(srec: SymmetricRecorder) -> None:
    ctx = fake_context(0, 0x100)
    comm, s = fake_comm(ctx), fake_stream(ctx)
    buf = comm.allocate_symmetric(mc.bf16, s, 4096)
    assert isinstance(buf, nccl.SymmetricBuffer) and isinstance(buf, mc.DeviceBuffer)
    assert (len(buf), buf.nbytes, buf.handle, buf.dtype.name) == (4096, 8192, 0x10000, "bfloat16")
    assert buf.context is ctx and buf.stream is s and buf.communicator is comm and buf.registered
    assert srec.calls == [("mem_alloc", 8192), ("comm_window_register", comm._comm, 0x10000, 8192, 1)]
    srec.calls.clear()
    comm.all_reduce(s, buf, buf)  # taken like any buffer
    assert srec.calls == [("all_reduce", 0x10000, 0x10000, 4096, 9, 0, comm._comm, 0x50)]
    srec.calls.clear()
    buf.free(s)
    assert srec.calls == [("cuCtxSynchronize",), ("comm_window_deregister", comm._comm, "window@0x10000"),
                         ("mem_free", 0x10000)]
    assert buf.freed and comm._symmetric == {}
    with pytest.raises(mc.UseAfterFree):
        buf.free(s)
    with pytest.raises(mc.UseAfterFree):
        comm.all_reduce(s, buf, buf)


def test_registrations_of_one_process_are_issued_at_the_end_of_one_group(srec: SymmetricRecorder) -> None:
    gpu0, gpu1 = fake_context(0, 0x100), fake_context(1, 0x200)
    c0, c1 = fake_comm(gpu0, 0), fake_comm(gpu1, 1)
    s0, s1 = fake_stream(gpu0), fake_stream(gpu1, 0x60)
    b0, b1 = nccl.allocate_symmetric_all([c0, c1], mc.f32, [s0, s1], 16)
    assert [c[0] for c in srec.calls] == ["mem_alloc", "mem_alloc", "group_start", "comm_window_register",
                                         "comm_window_register", "group_end"]
    assert srec.calls[3][1:] == (c0._comm, 0x10000, 64, 1) and srec.calls[4][1:] == (c1._comm, 0x20000, 64, 1)
    assert b0.context is gpu0 and b1.context is gpu1
    srec.calls.clear()
    kept: list[Any] = []
    with pytest.raises(mc.ContractError, match="argument 'recv'"), nccl.group():
        kept.append(c0.allocate_symmetric(mc.f32, s0, 16))
        c0.all_reduce(s0, b0, fake_buffer(gpu0, mc.f32, 1))
    assert [c[0] for c in srec.calls] == ["mem_alloc"]  # the block's registration was dropped with it
    assert not kept[0].registered
    kept[0].free(s0)  # not a window: only the memory to free
    assert [c[0] for c in srec.calls] == ["mem_alloc", "cuCtxSynchronize", "mem_free"]


def test_close_all_releases_windows_before_the_communicators(srec: SymmetricRecorder) -> None:
    gpu0, gpu1 = fake_context(0, 0x100), fake_context(1, 0x200)
    c0, c1 = fake_comm(gpu0, 0), fake_comm(gpu1, 1)
    b0, b1 = nccl.allocate_symmetric_all([c0, c1], mc.bf16, [fake_stream(gpu0), fake_stream(gpu1)], 8)
    srec.calls.clear()
    nccl.close_all([c0, c1])
    names = [c[0] for c in srec.calls]
    assert names == ["cuCtxSynchronize", "comm_window_deregister", "mem_free",
                     "cuCtxSynchronize", "comm_window_deregister", "mem_free",
                     "group_start", "comm_finalize", "comm_finalize", "group_end", "comm_destroy", "comm_destroy"]
    assert b0.freed and b1.freed


def test_abort_frees_the_memory_without_deregistering(srec: SymmetricRecorder) -> None:
    ctx = fake_context(0, 0x100)
    comm = fake_comm(ctx)
    comm._finalizer = weakref.finalize(comm, srec._record("comm_abort"), comm._comm)
    buf = comm.allocate_symmetric(mc.f16, fake_stream(ctx), 2)
    srec.calls.clear()
    comm.abort()
    assert [c[0] for c in srec.calls] == ["comm_abort", "cuCtxSynchronize", "mem_free"]
    assert buf.freed


def test_bad_arguments_are_refused_before_anything_is_allocated(srec: SymmetricRecorder) -> None:
    ctx = fake_context(0, 0x100)
    comm, s = fake_comm(ctx), fake_stream(ctx)
    for count in (0, -1, 2.0, "8", True):
        with pytest.raises(mc.ContractError, match=r"argument 'count'.*a positive int.*ncclMemAlloc"):
            comm.allocate_symmetric(mc.bf16, s, count)
    with pytest.raises(mc.ContractError, match=r"argument 'stream'.*a mircuda Stream"):
        comm.allocate_symmetric(mc.bf16, None, 8)
    with pytest.raises(mc.ContractError, match=r"argument 'stream'"):
        comm.allocate_symmetric(mc.bf16, fake_stream(fake_context(1, 0x200)), 8)
    with pytest.raises(mc.ContractError):
        comm.allocate_symmetric("not a dtype", s, 8)
    with pytest.raises(mc.ContractError, match=r"argument 'streams'.*2 Streams"):
        nccl.allocate_symmetric_all([comm, comm], mc.bf16, [s], 8)
    with pytest.raises(mc.ContractError, match=r"argument 'communicators\[0\]'"):
        nccl.allocate_symmetric_all(["comm"], mc.bf16, [s], 8)  # type: ignore[list-item]
    comm._closed = True
    with pytest.raises(mc.ClosedResourceError, match="allocate_symmetric"):
        comm.allocate_symmetric(mc.bf16, s, 8)
    assert srec.calls == []


def test_free_refuses_another_contexts_stream_and_a_buffer_held_by_a_graph(srec: SymmetricRecorder) -> None:
    ctx = fake_context(0, 0x100)
    comm, s = fake_comm(ctx), fake_stream(ctx)
    buf = comm.allocate_symmetric(mc.bf16, s, 8)
    srec.calls.clear()
    with pytest.raises(mc.ContractError, match="argument 'stream'"):
        buf.free(fake_stream(fake_context(1, 0x200)))
    buf._holds = 1
    with pytest.raises(mc.ContractError, match="held by 1 live graph"):
        buf.free(s)
    assert srec.calls == [] and not buf.freed
    buf._holds = 0
    buf.free(s)
    assert [c[0] for c in srec.calls] == ["cuCtxSynchronize", "comm_window_deregister", "mem_free"]
