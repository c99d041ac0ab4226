"""Include roots and the rules that change a compile's cache key (NVRTC on the CPU, no GPU needed).

Each test builds with an OfflineCompiler, which shares the cache logic of Compiler, and reads the
constant the kernel stores back from the PTX, so a stale module would show the old value.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import mircuda as mc
from cubin import cubin_sm
from mircuda.compile import _compiler, _includes

PTX = mc.CompileOptions(output="ptx")
KERNEL = 'extern "C" __global__ void k(int* o) { o[0] = VALUE; }\n'


def constant(program: mc.CompiledProgram) -> int:
    values = re.findall(rb"mov\.[bu]32\s+%r\d+, (\d+);", program.image)
    assert len(values) == 1, program.image.decode()
    return int(values[0])


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def offline(*roots: Path, cache: Path | None = None) -> mc.OfflineCompiler:
    return mc.OfflineCompiler("compute_90", mc.CompilerConfig(include_paths=roots, cache_directory=cache))


@pytest.fixture(autouse=True)
def trusted_signatures(monkeypatch) -> None:
    """Trust file signatures at once (no 'racy' window), so each test shows that the stat signature
    alone reveals its change; test_racy_files_are_reread_... covers the window."""
    monkeypatch.setattr(_includes, "_RACY_NS", 0)


@pytest.fixture()
def roots(tmp_path: Path) -> tuple[Path, Path]:
    first, second = tmp_path / "first", tmp_path / "second"
    write(second / "value.cuh", '#include "detail/base.cuh"\n#define VALUE (BASE + 1)\n')
    write(second / "detail" / "base.cuh", "#define BASE 10\n")
    write(second / "unrelated.cuh", "#define UNRELATED 1\n")
    first.mkdir()
    return first, second


SOURCE = mc.cuda_kernel('#include <value.cuh>\n' + KERNEL, "k.cu")


def test_roots_are_searched_in_order_and_are_part_of_the_key(roots) -> None:
    first, second = roots
    write(first / "value.cuh", "#define VALUE 99\n")
    assert constant(offline(second).compile(SOURCE, PTX)) == 11
    assert constant(offline(first, second).compile(SOURCE, PTX)) == 99
    assert constant(offline(second, first).compile(SOURCE, PTX)) == 11
    keys = {offline(*r).cache_key(SOURCE, PTX) for r in [(second,), (first, second), (second, first)]}
    assert len(keys) == 3


def test_a_header_edited_in_place_changes_the_key(roots) -> None:
    _, second = roots
    compiler = offline(second)
    base = second / "detail" / "base.cuh"
    first = compiler.compile(SOURCE, PTX)
    assert compiler.compile(SOURCE, PTX) is first
    key = compiler.cache_key(SOURCE, PTX)
    # Same size, same mtime: only the content (and the ctime the kernel sets) differ.
    st = base.stat()
    base.write_text("#define BASE 20\n")
    os.utime(base, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert base.stat().st_size == st.st_size
    second_program = compiler.compile(SOURCE, PTX)
    assert constant(first) == 11 and constant(second_program) == 21
    assert compiler.cache_key(SOURCE, PTX) != key
    assert compiler.cache_stats() == mc.CompileCacheStats(memory_hits=1, compilations=2)


def test_racy_files_are_reread_until_their_signature_can_be_trusted(roots, monkeypatch) -> None:
    _, second = roots
    # A file system whose timestamps are too coarse to show an edit: every signature looks the same.
    monkeypatch.setattr(_includes, "_signature", lambda st: (0, 0, 0, 0, 0))
    monkeypatch.setattr(_includes, "_RACY_NS", int(_includes.RACY_SECONDS * 1e9))
    compiler = offline(second)
    assert constant(compiler.compile(SOURCE, PTX)) == 11
    (second / "detail" / "base.cuh").write_text("#define BASE 60\n")
    assert constant(compiler.compile(SOURCE, PTX)) == 61


def test_editing_back_returns_the_first_program_from_memory(roots) -> None:
    _, second = roots
    compiler = offline(second)
    base = second / "detail" / "base.cuh"
    first = compiler.compile(SOURCE, PTX)
    base.write_text("#define BASE 30\n")
    assert constant(compiler.compile(SOURCE, PTX)) == 31
    base.write_text("#define BASE 10\n")
    assert compiler.compile(SOURCE, PTX) is first
    assert compiler.cache_stats().compilations == 2 and compiler.cache_stats().memory_hits == 1


def test_a_new_header_in_an_earlier_root_shadows_and_changes_the_key(roots) -> None:
    first_root, second = roots
    compiler = offline(first_root, second)
    original = compiler.compile(SOURCE, PTX)
    write(first_root / "value.cuh", "#define VALUE 7\n")
    assert constant(compiler.compile(SOURCE, PTX)) == 7
    (first_root / "value.cuh").unlink()
    assert compiler.compile(SOURCE, PTX) is original


def test_a_new_header_in_a_missing_subdirectory_is_noticed(roots) -> None:
    first_root, second = roots
    source = mc.cuda_kernel('#include <detail/base.cuh>\n#define VALUE BASE\n' + KERNEL, "k.cu")
    compiler = offline(first_root, second)
    assert constant(compiler.compile(source, PTX)) == 10
    write(first_root / "detail" / "base.cuh", "#define BASE 50\n")  # creates first/detail/ too
    assert constant(compiler.compile(source, PTX)) == 50


def test_files_that_are_not_included_and_touches_do_not_change_the_key(roots) -> None:
    _, second = roots
    compiler = offline(second)
    program = compiler.compile(SOURCE, PTX)
    key = compiler.cache_key(SOURCE, PTX)
    (second / "unrelated.cuh").write_text("#define UNRELATED 2\n")
    write(second / "new.cuh", "#define NEW 1\n")
    os.utime(second / "value.cuh")  # touch: new mtime, same content
    assert compiler.cache_key(SOURCE, PTX) == key
    assert compiler.compile(SOURCE, PTX) is program
    assert compiler.cache_stats().compilations == 1


def test_headers_included_by_headers_and_next_to_file_sources_are_tracked(tmp_path) -> None:
    write(tmp_path / "src" / "k.cu", '#include "local.cuh"\n' + KERNEL)
    write(tmp_path / "src" / "local.cuh", '#include "nested/deep.cuh"\n#define VALUE DEEP\n')
    write(tmp_path / "src" / "nested" / "deep.cuh", "#define DEEP 4\n")
    compiler = offline()
    source = mc.cuda_kernel_file(tmp_path / "src" / "k.cu")
    assert constant(compiler.compile(source, PTX)) == 4
    (tmp_path / "src" / "nested" / "deep.cuh").write_text("#define DEEP 5\n")
    assert constant(compiler.compile(source, PTX)) == 5


def test_has_include_is_tracked(roots) -> None:
    first_root, _second = roots
    source = mc.cuda_kernel('#if __has_include("tuning.cuh")\n#include "tuning.cuh"\n#else\n#define VALUE 1\n#endif\n'
                            + KERNEL, "k.cu")
    compiler = offline(first_root)
    assert constant(compiler.compile(source, PTX)) == 1
    write(first_root / "tuning.cuh", "#define VALUE 2\n")
    assert constant(compiler.compile(source, PTX)) == 2


def test_a_computed_include_falls_back_to_every_file_under_the_roots(roots) -> None:
    _, second = roots
    source = mc.cuda_kernel('#define HEADER <value.cuh>\n#include HEADER\n' + KERNEL, "k.cu")
    compiler = offline(second)
    program = compiler.compile(source, PTX)
    key = compiler.cache_key(source, PTX)
    (second / "unrelated.cuh").write_text("#define UNRELATED 3\n")  # could be what HEADER names
    edited = compiler.cache_key(source, PTX)
    assert edited != key
    assert compiler.compile(source, PTX) is not program
    write(second / "more" / "new.cuh", "\n")  # a new file in a new subdirectory
    assert compiler.cache_key(source, PTX) != edited


def test_inline_sources_search_the_working_directory_like_nvrtc(tmp_path, monkeypatch) -> None:
    write(tmp_path / "a" / "local.cuh", "#define VALUE 1\n")
    write(tmp_path / "b" / "local.cuh", "#define VALUE 2\n")
    source = mc.cuda_kernel('#include "local.cuh"\n' + KERNEL, "k.cu")
    compiler = offline()
    monkeypatch.chdir(tmp_path / "a")
    assert constant(compiler.compile(source, PTX)) == 1
    monkeypatch.chdir(tmp_path / "b")
    assert constant(compiler.compile(source, PTX)) == 2


def test_sources_options_targets_and_nvrtc_are_part_of_the_key(monkeypatch) -> None:
    source = mc.cuda_kernel("#define VALUE 1\n" + KERNEL, "k.cu")
    compiler = offline()
    keys = {compiler.cache_key(source, PTX), compiler.cache_key(source),
            compiler.cache_key(mc.cuda_kernel("#define VALUE 2\n" + KERNEL, "k.cu"), PTX),
            compiler.cache_key(source, mc.CompileOptions(output="ptx", defines={"X": 1})),
            mc.OfflineCompiler("compute_120f").cache_key(source, PTX)}
    monkeypatch.setattr(_compiler, "nvrtc_version", lambda: (99, 0))
    keys.add(offline().cache_key(source, PTX))
    assert len(keys) == 6


def test_memory_hits_return_the_same_program_and_count() -> None:
    source = mc.cuda_kernel("#define VALUE 1\n" + KERNEL, "k.cu")
    compiler = offline()
    program = compiler.compile(source, PTX)
    assert all(compiler.compile(source, PTX) is program for _ in range(3))
    assert repr(compiler.cache_stats()) == ("CompileCacheStats(memory_hits=3, persistent_hits=0, compilations=1, "
                                            "persistent_failures=0)")


def test_offline_compiles_target_absent_architectures() -> None:
    source = mc.cuda_kernel("#define VALUE 1\n" + KERNEL, "k.cu")
    cubin = mc.OfflineCompiler("sm_120f").compile(source)
    assert cubin.image.startswith(b"\x7fELF") and cubin.arch == "sm_120f" and cubin.output == "cubin"
    assert cubin_sm(cubin.image) == 120
    text = mc.OfflineCompiler("sm_120f").compile(source, PTX)
    assert text.image.endswith(b"\0") and b".target sm_120f" in text.image


@pytest.mark.parametrize("make, argument", [
    (lambda t: mc.CompilerConfig(include_paths=str(t)), "include_paths"),
    (lambda t: mc.CompilerConfig(include_paths=(t, t / "missing")), "include_paths[1]"),
    (lambda t: mc.CompilerConfig(include_paths=(3,)), "include_paths[0]"),
    (lambda t: mc.CompilerConfig(include_paths=(t, "")), "include_paths[1]"),  # not the working directory
    (lambda t: mc.CompilerConfig(cache_directory=t / "file.txt"), "cache_directory"),
    (lambda t: mc.OfflineCompiler("sm_90", config={"include_paths": ()}), "config"),
    (lambda t: mc.OfflineCompiler("sm_9"), "arch"),
    (lambda t: mc.OfflineCompiler("sm_90").compile("source text"), "source"),
    (lambda t: mc.OfflineCompiler("sm_90").compile(mc.cuda_kernel(KERNEL, "k.cu"), {"output": "ptx"}), "options"),
])
def test_bad_configuration_names_the_argument(tmp_path, make, argument) -> None:
    (tmp_path / "file.txt").write_text("")
    with pytest.raises(mc.ContractError) as info:
        make(tmp_path)
    assert info.value.argument == argument


def test_config_normalizes_paths(tmp_path, monkeypatch) -> None:
    (tmp_path / "inc").mkdir()
    monkeypatch.chdir(tmp_path)
    config = mc.CompilerConfig(include_paths=["inc", Path("inc")], cache_directory="cache")
    assert config.include_paths == (str(tmp_path / "inc"),)
    assert config.cache_directory == str(tmp_path / "cache") and not (tmp_path / "cache").exists()
