"""PTX is refused before NVRTC runs when NVRTC is newer than the driver that would load it (a newer
PTX ISA fails to load with CUDA_ERROR_UNSUPPORTED_PTX_VERSION); CUBIN is not. The driver version is
faked: a stand-in Context reports it, so this runs without a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import mircuda as mc
from mircuda.runtime import Context
from test_packing_and_config import H200_LIKE

SOURCE = mc.cuda_kernel('extern "C" __global__ void k(int* o) { o[0] = 1; }', "k.cu")
PTX = mc.CompileOptions(output="ptx")


class StandInContext(Context):
    """A Context whose device is an H200 and whose driver reports ``version``; loading a module is
    never reached (the tests stop before, or catch the load)."""

    def __init__(self, version: tuple[int, int]) -> None:  # no driver, no primary context
        self._driver = SimpleNamespace(version=version)

    def device_info(self) -> mc.DeviceInfo:
        return H200_LIKE


class Loaded(Exception):
    """Raised by the stand-in module load: the build went through."""


@pytest.fixture()
def no_loading(monkeypatch) -> None:
    def load(self, program):  # type: ignore[no-untyped-def]
        raise Loaded(program)

    monkeypatch.setattr(mc.Compiler, "_load", load)


@pytest.mark.parametrize("back", [(1, 0), (1, 9), (0, 1)], ids=["major-1.0", "major-1.9", "minor-1"])
def test_ptx_from_an_nvrtc_newer_than_the_driver_is_refused_before_compiling(no_loading, back) -> None:
    major, minor = mc.nvrtc_version()
    driver = (major - 1, back[1]) if back[0] else (major, minor - 1)
    if driver[1] < 0:
        driver = (major - 1, 9)  # NVRTC x.0: the newest driver of the major before
    compiler = mc.Compiler(StandInContext(driver))
    with pytest.raises(mc.UnsupportedPlatform) as info:
        compiler.compile(SOURCE, PTX)
    d = ".".join(map(str, driver))
    assert f"NVRTC {major}.{minor}" in str(info.value) and f"nvidia-cuda-nvrtc=={d}.*" in str(info.value)
    assert compiler.cache_stats().compilations == 0  # refused before NVRTC ran
    with pytest.raises(Loaded):  # CUBIN from the same NVRTC is loadable: built and handed to the load
        compiler.compile(SOURCE)
    assert compiler.cache_stats().compilations == 1


@pytest.mark.parametrize("newer", [(0, 0), (0, 1), (1, 0)])
def test_ptx_is_built_for_a_driver_as_new_or_newer(no_loading, newer) -> None:
    major, minor = mc.nvrtc_version()
    compiler = mc.Compiler(StandInContext((major + newer[0], minor + newer[1])))
    with pytest.raises(Loaded) as info:
        compiler.compile(SOURCE, PTX)
    assert info.value.args[0].output == "ptx" and info.value.args[0].image.endswith(b"\0")
