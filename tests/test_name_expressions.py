"""Name expressions: templated kernels instantiated and lowered by NVRTC, bound by their C++ name
(NVRTC runs here, no GPU needed)."""

from __future__ import annotations

import pytest

import mircuda as mc
from mircuda.compile._nvrtc import nvrtc_compile, unresolved_name_expressions
from mircuda.compile._persistent import decode_entry, encode_entry

TEMPLATE = r'''
#include <cuda_bf16.h>
template <typename T> __global__ void fill(T* out, T value, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
namespace ns { template <int N> __global__ void scale(float* p) { p[threadIdx.x] *= N; } }
'''
EXPRESSIONS = ["fill<float>", "fill<double>", "fill<__nv_bfloat16>", "ns::scale<3>"]
# The Itanium C++ ABI manglings of the instantiations above (what nvcc and g++ give them).
LOWERED = {"fill<float>": "_Z4fillIfEvPT_S0_j", "fill<double>": "_Z4fillIdEvPT_S0_j",
           "fill<__nv_bfloat16>": "_Z4fillI13__nv_bfloat16EvPT_S1_j", "ns::scale<3>": "_ZN2ns5scaleILi3EEEvPf"}


def test_the_program_maps_each_expression_to_its_lowered_name_in_order() -> None:
    source = mc.cuda_kernel(TEMPLATE, "fill.cu", name_expressions=EXPRESSIONS)
    program = mc.compile_program(source, "sm_90")
    assert program.symbols == tuple((e, LOWERED[e]) for e in EXPRESSIONS)
    for lowered in LOWERED.values():  # each instantiation is in the CUBIN's symbol table
        assert lowered.encode() + b"\0" in program.image


def test_the_one_nvrtc_entry_returns_the_lowered_names() -> None:
    result = nvrtc_compile(TEMPLATE, "fill.cu", "compute_90", mc.CompileOptions(output="ptx"), output="ptx",
                           name_expressions=["ns::scale<3>"])
    assert result.lowered_names == (("ns::scale<3>", LOWERED["ns::scale<3>"]),)
    assert b".entry " + LOWERED["ns::scale<3>"].encode() in result.image
    assert nvrtc_compile(TEMPLATE, "fill.cu", "compute_90", mc.CompileOptions(output="ptx"),
                         output="ptx").lowered_names == ()


def test_unknown_expressions_are_a_compile_error_naming_only_them() -> None:
    source = mc.cuda_kernel(TEMPLATE, "fill.cu", name_expressions=["fill<float>", "nope<int>", "fill<notatype>"])
    with pytest.raises(mc.CompileError) as info:
        mc.compile_program(source, "sm_90")
    message = str(info.value).splitlines()[0]
    assert "'nope<int>'" in message and "'fill<notatype>'" in message
    assert "'fill<float>'" not in message
    assert unresolved_name_expressions(info.value.log, ["fill<float>", "nope<int>", "fill<notatype>"]) == [
        "nope<int>", "fill<notatype>"]


def test_a_compile_error_elsewhere_names_no_expression() -> None:
    source = mc.cuda_kernel(TEMPLATE + "\nint broken = ;\n", "fill.cu", name_expressions=["fill<float>"])
    with pytest.raises(mc.CompileError) as info:
        mc.compile_program(source, "sm_90")
    assert "name expressions" not in str(info.value).splitlines()[0]


def test_expressions_are_part_of_the_digest_and_the_cache_key() -> None:
    plain = mc.cuda_kernel(TEMPLATE, "fill.cu")
    a = mc.cuda_kernel(TEMPLATE, "fill.cu", name_expressions=["fill<float>"])
    b = mc.cuda_kernel(TEMPLATE, "fill.cu", name_expressions=["fill<double>"])
    assert len({plain.digest, a.digest, b.digest}) == 3
    # A source without expressions keeps the digest it always had: SHA-256 of name, NUL, text.
    import hashlib
    assert plain.digest == hashlib.sha256(b"fill.cu\0" + TEMPLATE.encode()).hexdigest()
    compiler = mc.OfflineCompiler("sm_90")
    assert compiler.cache_key(a) != compiler.cache_key(b)
    assert compiler.compile(a).symbols == (("fill<float>", LOWERED["fill<float>"]),)
    assert compiler.compile(b).symbols == (("fill<double>", LOWERED["fill<double>"]),)


def test_the_persistent_cache_keeps_the_lowered_names(tmp_path) -> None:
    source = mc.cuda_kernel(TEMPLATE, "fill.cu", name_expressions=EXPRESSIONS)
    config = mc.CompilerConfig(cache_directory=str(tmp_path))
    first = mc.OfflineCompiler("sm_90", config).compile(source)
    again = mc.OfflineCompiler("sm_90", config)
    second = again.compile(source)
    assert again.cache_stats().persistent_hits == 1
    assert second.symbols == first.symbols == tuple((e, LOWERED[e]) for e in EXPRESSIONS)
    key = "ab" * 32
    assert decode_entry(encode_entry(key, "sm_90", first.nvrtc_version, first), key, "sm_90",
                        first.nvrtc_version).symbols == first.symbols


def test_files_and_fragments_take_name_expressions(tmp_path) -> None:
    (tmp_path / "common.cuh").write_text("#include <cuda_bf16.h>\n")
    (tmp_path / "fill.cu").write_text(TEMPLATE)
    one = mc.cuda_kernel_file("fill.cu", relative_to=tmp_path, name_expressions=["fill<double>"])
    two = mc.cuda_kernel_files("common.cuh", "fill.cu", relative_to=tmp_path, name_expressions=("ns::scale<3>",))
    assert one.name_expressions == ("fill<double>",)
    assert mc.compile_program(one, "sm_90").symbols == (("fill<double>", LOWERED["fill<double>"]),)
    assert mc.compile_program(two, "sm_90").symbols == (("ns::scale<3>", LOWERED["ns::scale<3>"]),)


@pytest.mark.parametrize("bad, argument", [
    ("fill<float>", "name_expressions"),          # a single str, not a sequence
    ([""], "name_expressions[0]"),
    (["fill<float>", 3], "name_expressions[1]"),
    (["fill<float>", "fill<float>"], "name_expressions[1]"),
    (["fill<float>", " fill<float> "], "name_expressions[1]"),  # the same after stripping blanks
    (["fill<\nfloat>"], "name_expressions[0]"),
    (["fill<float>\0"], "name_expressions[0]"),
])
def test_bad_expressions_are_refused_where_they_are_given(bad, argument, tmp_path) -> None:
    with pytest.raises(mc.ContractError) as info:
        mc.cuda_kernel(TEMPLATE, "fill.cu", name_expressions=bad)
    assert info.value.argument == argument
    (tmp_path / "fill.cu").write_text(TEMPLATE)
    with pytest.raises(mc.ContractError):
        mc.cuda_kernel_file("fill.cu", relative_to=tmp_path, name_expressions=bad)
    with pytest.raises(mc.ContractError):
        mc.cuda_kernel_files("fill.cu", relative_to=tmp_path, name_expressions=bad)


def test_a_contract_takes_a_name_expression_as_its_symbol() -> None:
    contract = mc.cuda_export(" ns::scale<3> ", p=mc.DeviceBuffer[mc.f32])
    assert contract.symbol == "ns::scale<3>"
    assert mc.cuda_export("fill<float, 4>", out=mc.DeviceBuffer[mc.f32]).symbol == "fill<float, 4>"
    for bad in ("", "<float>", "fill<\nfloat>", "3fill", "a b", "fill<float"):
        with pytest.raises(mc.ContractError) as info:
            mc.cuda_export(bad)
        assert info.value.argument == "symbol"


def test_a_cached_entry_whose_symbol_map_names_other_expressions_is_a_miss(tmp_path) -> None:
    """A checksummed entry must map exactly the source's name expressions; one that maps others (an
    entry crafted or written by another source) is a counted miss, rebuilt, never loaded."""
    from test_compile_persistent import crafted

    source = mc.cuda_kernel(TEMPLATE, "fill.cu", name_expressions=EXPRESSIONS)
    config = mc.CompilerConfig(cache_directory=str(tmp_path))
    first = mc.OfflineCompiler("sm_90", config).compile(source)
    (entry,) = [p for p in tmp_path.iterdir() if p.suffix == ".mcm"]
    entry.write_bytes(crafted(entry.read_bytes(), symbols=[["fill<short>", "_Z4fillIsEvPT_S0_"]]))
    again = mc.OfflineCompiler("sm_90", config)
    assert again.compile(source).symbols == first.symbols
    stats = again.cache_stats()
    assert (stats.persistent_hits, stats.persistent_failures, stats.compilations) == (0, 1, 1)
