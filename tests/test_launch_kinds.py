"""Cooperative and cluster launches without a GPU: the configuration, the cuLaunchKernelEx attribute
array in cuda.h's layout (checked against cuda.bindings' own CUlaunchAttribute), and the C and ctypes
entry points against a stand-in cuLaunchKernelEx."""

from __future__ import annotations

import ctypes
import dataclasses

import pytest

import mircuda as mc
from mircuda import _cuda
from mircuda.launch import _abi

u, vp = ctypes.c_uint, ctypes.c_void_p
LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_cuda._LaunchConfig), vp, vp, vp)
ARGS = (0x1000, 4, 2, 1, 128, 1, 1, 1024, 0x2000, 0x3000)  # function, grid, block, shared bytes, stream, params


def test_the_config_validates_and_lists_its_attributes() -> None:
    c = mc.LaunchConfig((4, 2), 128, cooperative=True, cluster=(2, 1))
    assert c.cluster == (2, 1, 1) and c.launch_attributes == [(2, (1,)), (4, (2, 1, 1))]
    assert mc.LaunchConfig(2, 32, cluster=2, programmatic_stream_serialization=True).launch_attributes == [
        (4, (2, 1, 1)), (6, (1,))]
    assert mc.LaunchConfig(1, 1).launch_attributes == []
    assert hash(c) == hash(mc.LaunchConfig((4, 2, 1), (128, 1, 1), cooperative=True, cluster=(2, 1, 1)))
    with pytest.raises(mc.LaunchConfigError, match="cooperative: expected a bool"):
        mc.LaunchConfig(1, 1, cooperative=1)
    with pytest.raises(mc.LaunchConfigError, match=r"grid\[0\]: 3 is not a multiple of cluster\[0\] = 2"):
        mc.LaunchConfig(3, 32, cluster=2)
    for bad in (0, (2, 0), "2", (1, 1, 1, 1)):
        with pytest.raises(mc.LaunchConfigError, match="cluster"):
            mc.LaunchConfig(4, 32, cluster=bad)


def test_clusters_need_compute_capability_9() -> None:
    from test_packing_and_config import H200_LIKE

    config = mc.LaunchConfig(4, 32, cluster=2)
    config.check(H200_LIKE)
    with pytest.raises(mc.LaunchConfigError, match="compute capability >= 9.0, the device has 8.0"):
        config.check(dataclasses.replace(H200_LIKE, compute_capability=(8, 0)))


def test_the_attribute_array_has_cuda_h_layout() -> None:
    from cuda.bindings import driver as drv

    ours = _cuda.launch_attribute_array([(2, (1,)), (4, (2, 3, 1)), (6, (1,))])
    theirs = []
    for attribute_id, fill in ((drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE, "cooperative"),
                               (drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, "cluster"),
                               (drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, "pss")):
        a = drv.CUlaunchAttribute()
        a.id = attribute_id
        if fill == "cooperative":
            a.value.cooperative = 1
        elif fill == "cluster":
            a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = 2, 3, 1
        else:
            a.value.programmaticStreamSerializationAllowed = 1
        raw = ctypes.string_at(a.getPtr(), _cuda.LAUNCH_ATTRIBUTE_SIZE)
        theirs.append(raw[:4] + bytes(4) + raw[8:])  # the padding after the id is not part of any value
    assert ctypes.sizeof(ours) == 3 * _cuda.LAUNCH_ATTRIBUTE_SIZE
    assert bytes(ours) == b"".join(theirs)


def _recording_launch_ex(seen: dict) -> object:
    def launch_ex(config, f, params, extra):  # type: ignore[no-untyped-def]
        c = config.contents
        attrs = ctypes.string_at(ctypes.cast(c.attrs, vp).value, c.num_attrs * _cuda.LAUNCH_ATTRIBUTE_SIZE)
        seen["call"] = (f, *c.dims, c.stream, params, extra, c.num_attrs, attrs)
        return 77
    return LAUNCH_EX(launch_ex)


def test_the_c_entry_passes_the_attribute_array_through() -> None:
    hotpath = pytest.importorskip("mircuda._hotpath", reason="the C extension was not built")
    if not hasattr(hotpath, "launch_kernel_attrs"):
        pytest.skip("the C extension predates launch_kernel_attrs (rebuild: python setup.py build_ext --inplace)")
    seen: dict = {}
    keep = _recording_launch_ex(seen)
    hotpath.set_launch_ex(ctypes.cast(keep, vp).value)
    try:
        attrs = _cuda.launch_attribute_array([(2, (1,)), (4, (2, 1, 1))])
        assert hotpath.launch_kernel_attrs(ctypes.addressof(attrs), 2, *ARGS) == 77
        assert seen["call"] == (*ARGS, None, 2, bytes(attrs))
        with pytest.raises(TypeError, match="12 arguments"):
            hotpath.launch_kernel_attrs(ctypes.addressof(attrs), 2, *ARGS[:-1])
        with pytest.raises(OverflowError):
            hotpath.launch_kernel_attrs(ctypes.addressof(attrs), 2, ARGS[0], 2**32, *ARGS[2:])
        with pytest.raises(ValueError, match="at most 64"):
            hotpath.launch_kernel_attrs(ctypes.addressof(attrs), 65, *ARGS)
    finally:
        hotpath.set_launch_ex(_cuda.entry_points.get("cuLaunchKernelEx", 0))


def test_the_ctypes_entry_builds_the_same_configuration() -> None:
    seen: dict = {}
    keep = _recording_launch_ex(seen)
    launch = _cuda._attributes_ctypes(ctypes.cast(keep, vp).value)
    attrs = _cuda.launch_attribute_array([(4, (4, 1, 1))])
    assert launch(ctypes.addressof(attrs), 1, *ARGS) == 77
    assert seen["call"] == (*ARGS, None, 1, bytes(attrs))
    with pytest.raises(OverflowError):
        launch(ctypes.addressof(attrs), 1, ARGS[0], -1, *ARGS[2:])


def test_the_generated_launch_picks_the_attribute_entry_for_these_configs(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(_cuda, "launch_kernel_attributes", lambda *a: calls.append(a) or 0)
    monkeypatch.setattr(_cuda, "launch_kernel", "plain")
    monkeypatch.setattr(_cuda, "launch_kernel_programmatic", "programmatic")
    assert _abi._launcher_for(mc.LaunchConfig(1, 1)) == "plain"
    assert _abi._launcher_for(mc.LaunchConfig(1, 1, programmatic_stream_serialization=True)) == "programmatic"
    launcher = _abi._launcher_for(mc.LaunchConfig(2, 64, cooperative=True, cluster=2))
    assert launcher(*ARGS) == 0
    (call,) = calls
    assert call[1] == 2 and call[2:] == ARGS
    assert ctypes.string_at(call[0], 2 * _cuda.LAUNCH_ATTRIBUTE_SIZE) == bytes(launcher.attribute_array)
