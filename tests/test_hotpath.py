"""The C hot path (``mircuda._hotpath``) against stand-in driver entry points: each launch function
passes its arguments through unchanged, and the programmatic one builds cuLaunchKernelEx's
configuration with the layout of cuda.h (CUDA >= 12)."""

from __future__ import annotations

import ctypes
import sys

import pytest

import mircuda
from hotpath_stand_in import StandInDriver, keep_bindings
from mircuda import _cuda

hotpath = pytest.importorskip("mircuda._hotpath", reason="the C extension was not built")

u, vp = ctypes.c_uint, ctypes.c_void_p
LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, vp, u, u, u, u, u, u, u, vp, vp, vp)
LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_cuda._LaunchConfig), vp, vp, vp)
ARGS = (0x1000, 3, 2, 1, 128, 2, 1, 4096, 0x2000, 0x3000)  # function, grid, block, shared bytes, stream, params


@pytest.fixture
def stand_ins():
    seen: dict[str, tuple] = {}

    def launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # type: ignore[no-untyped-def]
        seen["launch"] = (f, gx, gy, gz, bx, by, bz, smem, stream, params, extra)
        return 0

    def launch_ex(config, f, params, extra):  # type: ignore[no-untyped-def]
        c = config.contents
        attr = c.attrs[0]
        seen["launch_ex"] = (f, *c.dims, c.stream, params, extra, c.num_attrs, attr.id, attr.value)
        return 999

    keep = (LAUNCH(launch), LAUNCH_EX(launch_ex))
    address = [ctypes.cast(k, vp).value for k in keep]
    hotpath.set_entry_points(address[0], 0, 0)
    hotpath.set_launch_ex(address[1])
    yield seen
    real = _cuda.entry_points  # the driver's own, where this process bound them
    hotpath.set_entry_points(real.get("cuLaunchKernel", 0), real.get("cuGraphLaunch", 0), real.get("cuEventRecord", 0))
    hotpath.set_launch_ex(real.get("cuLaunchKernelEx", 0))


def test_launch_kernel_passes_every_argument_through(stand_ins) -> None:
    assert hotpath.launch_kernel(*ARGS) == 0
    assert stand_ins["launch"] == (*ARGS, None)


def test_the_programmatic_launch_sets_one_attribute_with_the_cuda_h_layout(stand_ins) -> None:
    assert hotpath.launch_kernel_programmatic(*ARGS) == 999  # the driver's result comes back unchanged
    assert stand_ins["launch_ex"] == (ARGS[0], *ARGS[1:8], ARGS[8], ARGS[9], None, 1, 6, 1)


def test_the_ctypes_fallback_builds_the_same_configuration(stand_ins) -> None:
    seen = {}

    def record(config, f, params, extra):  # type: ignore[no-untyped-def]
        c = config.contents
        seen["x"] = (f, *c.dims, c.stream, params, c.num_attrs, c.attrs[0].id, c.attrs[0].value)
        return 7

    keep = LAUNCH_EX(record)
    fallback = _cuda._programmatic_ctypes(ctypes.cast(keep, vp).value)
    assert fallback(*ARGS) == 7
    assert seen["x"] == (*ARGS, 1, 6, 1)


@pytest.mark.parametrize("fn", ["launch_kernel", "launch_kernel_programmatic"])
def test_wrong_arity_is_a_type_error(fn) -> None:
    with pytest.raises(TypeError, match="takes 10 arguments"):
        getattr(hotpath, fn)(1, 2)


BAD_ARGUMENTS = [  # (index, value, exception, message)
    (1, 2**32 + 1, OverflowError, "gx = 4294967297 does not fit"),  # was truncated to a grid of 1
    (4, 2**32, OverflowError, "bx = 4294967296 does not fit"),
    (7, -1, OverflowError, "negative"),
    (1, 1.5, TypeError, "integer"),
    (9, None, TypeError, "integer"),
]


@pytest.mark.parametrize("fn", ["launch_kernel", "launch_kernel_programmatic"])
@pytest.mark.parametrize("index, value, error, message", BAD_ARGUMENTS)
def test_a_bad_dimension_or_handle_raises_and_calls_nothing(stand_ins, fn, index, value, error, message) -> None:
    args = list(ARGS)
    args[index] = value
    with pytest.raises(error, match=message):
        getattr(hotpath, fn)(*args)
    assert stand_ins == {}


@pytest.mark.parametrize("index, value", [(1, 2**32 + 1), (3, -1), (7, 2**64)])
def test_the_ctypes_fallbacks_refuse_what_ctypes_would_wrap(monkeypatch, index, value) -> None:
    # ctypes converts c_uint modulo 2**32 without a word; both fallbacks check first, as the C path does.
    calls = []
    keep = (LAUNCH(lambda *a: calls.append(a) or 0), LAUNCH_EX(lambda *a: calls.append(a) or 0))
    address = {"cuLaunchKernel": ctypes.cast(keep[0], vp).value, "cuLaunchKernelEx": ctypes.cast(keep[1], vp).value}

    keep_bindings(monkeypatch)
    monkeypatch.delattr(mircuda, "_hotpath")  # and the import fails: the ctypes path
    monkeypatch.setitem(sys.modules, "mircuda._hotpath", None)
    _cuda._bind_hot_path(StandInDriver(address, 12080))
    assert _cuda.hot_path_kind == "ctypes"
    args = list(ARGS)
    args[index] = value
    for fn in (_cuda.launch_kernel, _cuda.launch_kernel_programmatic):
        with pytest.raises(OverflowError, match="does not fit the driver's 32-bit unsigned int"):
            fn(*args)
    assert calls == []
    assert _cuda.launch_kernel(*ARGS) == 0 and len(calls) == 1  # good arguments still go through
