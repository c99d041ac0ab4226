"""The FP4 decode kernels' programmatic-dependent-launch trigger (``pdl_trigger``, ``MIRCUDA_PDL_TRIGGER_LATE``)
without a GPU: by default (and with ``"late"``) each kernel lets the next one start after its last streamed load,
with ``"early"`` before ``griddepcontrol.wait``; the knob adds its define only when given, is refused by name, and
``fp4-profile --sweep`` takes it for both kernels. The GPU checks are in ``tests/gpu/test_matmul_fp4_dp4a_gpu.py``."""

from __future__ import annotations

import argparse
import re

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


# Global memory the previous kernel of the stream may write: any load, store or atomic outside the param, const,
# shared and local state spaces (a generic ld/st may be global); prefetch.global.L2 is a hint and allowed.
GLOBAL_ACCESS = re.compile(r"^\s*(?:@%p\d+\s+)?(?:ld|ldu|st|atom|red|cp\.async)\.(?!param|const|shared|local)\S*",
                           re.MULTILINE)

EARLY_MORE = {  # the other word decoders (the table fills shared memory before the wait), prefetch, BF16 activations
    "bytes-prefetch": (fp4_vector_source, lambda t: fp4_gemv_options(1, 4, "linear", True, "fp4", "bytes", "fp32", 3,
                                                                      prefetch=True, pdl_trigger=t)),
    "table-bf16": (fp4_vector_source, lambda t: fp4_gemv_options(4, 8, "tiled", False, "bf16", "table", "fp32", 2,
                                                                  pdl_trigger=t)),
    "pairs-persistent": (fp4_vector_source, lambda t: fp4_gemv_options(8, 4, "tiled", True, "fp4", "pairs", "fp16", 2,
                                                                        persistent=True, prefetch=True, pdl_trigger=t)),
    "mma-table": (fp4_mma_source, lambda t: fp4_mma_options(16, "tiled", False, "table", 16, 2, pdl_trigger=t)),
}


@pytest.mark.parametrize("kernel", sorted(KERNELS) + sorted(EARLY_MORE))
def test_nothing_touches_global_memory_before_the_wait_with_either_trigger(kernel) -> None:
    """With the early trigger the next kernel may run beside this one from its first instruction on, and with
    either trigger the previous one may still be writing: no global load, store or atomic (the activations, the
    weights, their scales, the global scales ``global_a`` / ``global_b``) comes before ``griddepcontrol.wait``."""
    source, options = {**KERNELS, **EARLY_MORE}[kernel]
    for trigger in ("early", "late"):
        text = mc.compile_program(source(), "compute_90", mc.CompileOptions(defines=dict(options(trigger).defines),
                                                                            output="ptx")).image.decode()
        wait = text.index("griddepcontrol.wait")
        assert text.count("griddepcontrol.launch_dependents") == 1
        assert not GLOBAL_ACCESS.findall(text[:wait]), (kernel, trigger, GLOBAL_ACCESS.findall(text[:wait])[:4])
        assert GLOBAL_ACCESS.findall(text[wait:])  # the pattern sees the kernel's loads
        trig = text.index("griddepcontrol.launch_dependents")
        assert (trig < wait) == (trigger == "early"), (kernel, trigger)


@pytest.mark.parametrize("decode, persistent", [("bytes", False), ("dp4a", False), ("e4m3", True)])
def test_the_grouped_kernel_keeps_the_late_trigger(decode, persistent) -> None:
    """The MoE grouped kernel (fp4_vector.cu with MIRCUDA_FP4_GROUPED) calls the same device functions, whose
    early trigger is compiled out there: its options never carry ``MIRCUDA_PDL_TRIGGER_LATE`` and no
    ``launch_dependents`` precedes its first streamed weight load (the kernel waits before its routing table, so
    the wait alone would not tell)."""
    from mircuda.matmul._moe_kernels import GROUPED_SYMBOL, DecodeTuning, grouped_options

    tuning = DecodeTuning(decode, 2, 0, 1, persistent=persistent) if decode != "bytes" else None
    opts = grouped_options(n=768, k=2048, groups=8, bank_size=8, capacity=8, rows_per_tile=1, fixed_rows=0,
                           tiled=False, sets=1, variant="vector", tuning=tuning)
    assert "MIRCUDA_PDL_TRIGGER_LATE" not in dict(opts.defines)
    module = mc.compile_program(fp4_vector_source(), "compute_90", mc.CompileOptions(defines=dict(opts.defines),
                                                                                     output="ptx")).image.decode()
    text = module[module.index(f".entry {GROUPED_SYMBOL}("):]  # not the setup kernel before it
    assert "griddepcontrol.launch_dependents" in text
    assert text.index("griddepcontrol.wait") < text.index(STREAMED) < text.index("griddepcontrol.launch_dependents")


def describe(pdl: bool, symbol: str, trigger: str | None, stages: int | None = None) -> str:
    """Fp4Gemv.describe() on a fake device (cc 9.0 with programmatic launch, else 8.9) and compiler."""
    from types import SimpleNamespace

    from mircuda.matmul._fp4 import FP4_SYMBOL, Fp4Gemv

    info = SimpleNamespace(multiprocessor_count=132, supports_programmatic_launch=pdl,
                           compute_capability=(9, 0) if pdl else (8, 9), max_threads_per_block=1024,
                           max_block_dims=(1024, 1024, 64), max_grid_dims=(2 ** 31 - 1, 65535, 65535),
                           max_shared_memory_per_block_optin_bytes=232448)
    kernel = SimpleNamespace(attributes=SimpleNamespace(max_threads_per_block=256), launch=None, handle=0)
    compiler = SimpleNamespace(arch="sm_90" if pdl else "sm_89",
                               compile=lambda source, options: SimpleNamespace(kernel=lambda c: kernel))
    context = SimpleNamespace(device_info=lambda: info)
    m = 1 if symbol == FP4_SYMBOL else 8
    return Fp4Gemv(context, m, 1001, 4128, "fp4", "linear", compiler, 1, symbol,  # type: ignore[arg-type]
                   pdl_trigger=trigger, stages=stages).describe()


def test_describe_names_the_trigger_only_where_the_launch_is_programmatic() -> None:
    """Fp4Gemv.describe() on a fake device and compiler: with programmatic dependent launch (cc >= 9.0) it names
    the trigger the kernel was compiled with (late when not given); without (cc 8.x) it claims no trigger and
    no programmatic launch, and the define it was compiled with is still listed."""
    from mircuda.matmul._fp4 import FP4_MMA_SYMBOL, FP4_SYMBOL

    for symbol in (FP4_SYMBOL, FP4_MMA_SYMBOL):
        for trigger in (None, "late", "early"):
            with_pdl, without = describe(True, symbol, trigger), describe(False, symbol, trigger)
            said = "early" if trigger == "early" else "late"
            assert f"programmatic dependent launch ({said} trigger: the next kernel may start" in with_pdl
            assert "programmatic dependent launch" not in without and "trigger" not in without.replace(
                "MIRCUDA_PDL_TRIGGER_LATE", "")
            for text in (with_pdl, without):
                define = re.findall(r"-D MIRCUDA_PDL_TRIGGER_LATE=(\d)", text)
                assert define == ([] if trigger is None else [str(int(trigger == "late"))]), (symbol, trigger, text)


@pytest.mark.parametrize("stages", [None, 2, 3, 4])
def test_describe_counts_the_tensor_core_kernels_steps_in_flight(stages) -> None:
    """fp4_mma_bf16's register ring keeps stages - 1 warp steps of loads in flight (3 stages by default: two), and
    describe() says so beside the define (it once said "the next step's" at every depth)."""
    from mircuda.matmul._fp4 import FP4_MMA_SYMBOL

    text = describe(True, FP4_MMA_SYMBOL, None, stages)
    depth = 3 if stages is None else stages
    assert f"-D MIRCUDA_FP4_STAGES={depth}" in text
    said = "the next step's loads in flight" if depth == 2 else f"the next {depth - 1} steps' loads in flight"
    assert f"(32 E2M1 per lane; L1 bypassed, 128-byte L2 lines), {said}" in text
