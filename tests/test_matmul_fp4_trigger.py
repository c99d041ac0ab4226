"""The FP4 decode kernels' programmatic-dependent-launch trigger (``pdl_trigger``, ``MIRCUDA_PDL_TRIGGER_LATE``)
without a GPU: by default (and with ``"late"``) each kernel lets the next one start after its last streamed load,
with ``"early"`` before ``griddepcontrol.wait``; the knob adds its define only when given, is refused by name, and
``fp4-profile --sweep`` takes it for both kernels. The GPU checks are in ``tests/gpu/test_matmul_fp4_dp4a_gpu.py``."""

from __future__ import annotations

import argparse

import pytest

import mircuda as mc
from mircuda.cli._fp4_profile import Fp4Candidate, sweep_values
from mircuda.matmul._fp4 import fp4_gemv_options, fp4_mma_options, fp4_mma_source, fp4_vector_source
from mircuda.matmul._spec import PDL_TRIGGERS, check_pdl_trigger

STREAMED = "ld.global.nc.L1::no_allocate"

# (source, options for a trigger) of each FP4 decode kernel configuration that takes the knob
KERNELS = {
    "dp4a": (fp4_vector_source, lambda t: fp4_gemv_options(1, 4, "linear", True, "fp4", "dp4a", "int32", 2,
                                                            pdl_trigger=t)),
    "dp4a-row-warps": (fp4_vector_source, lambda t: fp4_gemv_options(1, 8, "tiled", True, "fp4", "dp4a", "int32", 2,
                                                                      row_warps=4, pdl_trigger=t)),
    "e4m3": (fp4_vector_source, lambda t: fp4_gemv_options(2, 4, "linear", True, "fp4", "e4m3", "fp16", 3,
                                                            pdl_trigger=t)),
    "persistent": (fp4_vector_source, lambda t: fp4_gemv_options(1, 4, "linear", True, "bf16", "e4m3", "fp32", 2,
                                                                  persistent=True, pdl_trigger=t)),
    "mma": (fp4_mma_source, lambda t: fp4_mma_options(8, "linear", True, "e4m3", 32, 3, pdl_trigger=t)),
}


def ptx(kernel: str, trigger: str | None) -> str:
    source, options = KERNELS[kernel]
    opts = options(trigger)
    return mc.compile_program(source(), "compute_90", mc.CompileOptions(defines=dict(opts.defines),
                                                                        output="ptx")).image.decode()


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_the_trigger_is_late_by_default_and_early_when_asked(kernel) -> None:
    default, late, early = ptx(kernel, None), ptx(kernel, "late"), ptx(kernel, "early")
    assert default == late  # "late" is the kernel's default
    for body in (late, early):
        assert body.count("griddepcontrol.launch_dependents") == 1 and "griddepcontrol.wait" in body
    assert late.index("griddepcontrol.launch_dependents") > late.rindex(STREAMED)
    assert early.index("griddepcontrol.launch_dependents") < early.index("griddepcontrol.wait") < early.index(STREAMED)


def test_the_trigger_adds_its_define_only_when_given() -> None:
    assert "MIRCUDA_PDL_TRIGGER_LATE" not in dict(fp4_gemv_options(1, 4, "linear", True, "fp4", "dp4a").defines)
    assert "MIRCUDA_PDL_TRIGGER_LATE" not in dict(fp4_mma_options(4, "linear", True).defines)
    for trigger, value in (("early", "0"), ("late", "1")):
        assert dict(fp4_gemv_options(1, 4, "linear", True, "fp4", "dp4a", pdl_trigger=trigger).defines)[
            "MIRCUDA_PDL_TRIGGER_LATE"] == value
        assert dict(fp4_mma_options(4, "linear", True, pdl_trigger=trigger).defines)["MIRCUDA_PDL_TRIGGER_LATE"] == value


def test_a_bad_trigger_is_refused_by_name() -> None:
    assert PDL_TRIGGERS == ("early", "late")
    check_pdl_trigger(None)
    for bad in ("EARLY", "", 0, 1, True, b"early"):
        with pytest.raises(mc.ContractError) as info:
            check_pdl_trigger(bad)
        assert info.value.argument == "pdl_trigger"


def test_the_sweep_takes_the_trigger_for_both_kernels() -> None:
    got = sweep_values("vector:decode=dp4a:trigger=early,mma:rows=32:trigger=late")
    assert got == (Fp4Candidate("vector", "dp4a", pdl_trigger="early"), Fp4Candidate("mma", rows=32, pdl_trigger="late"))
    assert got[0].label == "vector:decode=dp4a:trigger=early" and got[0].knobs()["pdl_trigger"] == "early"
    assert "pdl_trigger" not in Fp4Candidate("vector").knobs()  # the plan's default
    for text in ("vector:trigger=soon", "mma:trigger=0", "vector:trigger=early:trigger=late"):
        with pytest.raises(argparse.ArgumentTypeError):
            sweep_values(text)
