"""Sources that live in files: cuda_kernel_file and cuda_kernel_files (NVRTC runs here, no GPU needed)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import mircuda as mc

KERNEL = 'extern "C" __global__ void k(int* o) { o[0] = VALUE; }\n'


def constant(program: mc.CompiledProgram) -> int:
    """The integer the kernel stores, read back from its PTX."""
    values = re.findall(rb"mov\.[bu]32\s+%r\d+, (\d+);", program.image)
    assert len(values) == 1, program.image.decode()
    return int(values[0])


def ptx(source: mc.CudaSource, include_paths: tuple[str, ...] = ()) -> mc.CompiledProgram:
    return mc.compile_program(source, "compute_90", mc.CompileOptions(output="ptx"), include_paths=include_paths)


def import_module(path: Path):
    """Import ``path`` as a fresh module (what ``import`` does to a package module)."""
    spec = importlib.util.spec_from_file_location(f"kernels_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_file_is_resolved_next_to_the_calling_module_not_the_working_directory(tmp_path, monkeypatch) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "kernels").mkdir(parents=True)
    (pkg / "kernels" / "k.cu").write_text("#define VALUE 41\n" + KERNEL)
    (pkg / "ops.py").write_text("import mircuda as mc\nSOURCE = mc.cuda_kernel_file('kernels/k.cu')\n")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "kernels").mkdir(parents=True)
    (elsewhere / "kernels" / "k.cu").write_text("#define VALUE 0\n" + KERNEL)
    monkeypatch.chdir(elsewhere)

    source = import_module(pkg / "ops.py").SOURCE
    assert source.name == str(pkg / "kernels" / "k.cu")
    assert source.text == (pkg / "kernels" / "k.cu").read_text()
    assert constant(ptx(source)) == 41


def test_the_file_is_read_at_import_not_at_compile(tmp_path) -> None:
    (tmp_path / "k.cu").write_text("#define VALUE 1\n" + KERNEL)
    (tmp_path / "ops.py").write_text("import mircuda as mc\nSOURCE = mc.cuda_kernel_file('k.cu')\n")
    source = import_module(tmp_path / "ops.py").SOURCE
    (tmp_path / "k.cu").write_text("#define VALUE 2\n" + KERNEL)
    assert constant(ptx(source)) == 1


def test_a_missing_file_fails_at_import_naming_the_resolved_path(tmp_path) -> None:
    (tmp_path / "ops.py").write_text("import mircuda as mc\nSOURCE = mc.cuda_kernel_file('kernels/missing.cu')\n")
    with pytest.raises(mc.ContractError) as info:
        import_module(tmp_path / "ops.py")
    message = str(info.value)
    assert str(tmp_path / "kernels" / "missing.cu") in message and "no such file" in message
    assert f"the directory of the calling file {tmp_path / 'ops.py'}" in message
    assert info.value.argument == "path"


def test_relative_to_and_interactive_callers(tmp_path, monkeypatch) -> None:
    (tmp_path / "k.cu").write_text("#define VALUE 5\n" + KERNEL)
    assert mc.cuda_kernel_file("k.cu", relative_to=tmp_path).name == str(tmp_path / "k.cu")
    monkeypatch.chdir(tmp_path)
    # Code typed at a prompt has no file: paths resolve against the working directory.
    namespace: dict = {}
    exec(compile("import mircuda as mc\nS = mc.cuda_kernel_file('k.cu')", "<stdin>", "exec"), namespace)
    assert namespace["S"].name == str(tmp_path / "k.cu")


@pytest.mark.parametrize("make, reason", [
    (lambda p: p.mkdir(), "a directory"),
    (lambda p: p.write_bytes(b"\xff\xfe\x00bad"), "not UTF-8"),
])
def test_unreadable_files_are_refused(tmp_path, make, reason) -> None:
    make(tmp_path / "k.cu")
    with pytest.raises(mc.ContractError, match=reason):
        mc.cuda_kernel_file(tmp_path / "k.cu")
    with pytest.raises(mc.ContractError, match="path"):
        mc.cuda_kernel_file(3)  # type: ignore[arg-type]


def test_headers_next_to_a_file_source_are_found_without_an_include_path(tmp_path, monkeypatch) -> None:
    (tmp_path / "helper.cuh").write_text("#define VALUE 17\n")
    (tmp_path / "k.cu").write_text('#include "helper.cuh"\n' + KERNEL)
    monkeypatch.chdir(tmp_path.parent)
    assert constant(ptx(mc.cuda_kernel_file(tmp_path / "k.cu"))) == 17
    # The same text inline has no directory of its own: NVRTC looks in the working directory.
    with pytest.raises(mc.CompileError, match="helper.cuh"):
        ptx(mc.cuda_kernel((tmp_path / "k.cu").read_text(), "k.cu"))


def test_fragments_form_one_unit_with_line_markers(tmp_path) -> None:
    (tmp_path / "common.cuh").write_text("#pragma once\n__device__ int twice(int v) { return 2 * v; }")  # no final newline
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k(int* o) { o[0] = twice(21); }\n')
    source = mc.cuda_kernel_files("common.cuh", "k.cu", relative_to=tmp_path)
    assert source.name == str(tmp_path / "common.cuh")
    assert source.text == (f'#line 1 "{tmp_path / "common.cuh"}"\n'
                           "#pragma once\n__device__ int twice(int v) { return 2 * v; }\n"
                           f'#line 1 "{tmp_path / "k.cu"}"\n'
                           'extern "C" __global__ void k(int* o) { o[0] = twice(21); }\n')
    assert constant(ptx(source)) == 42


def test_diagnostics_name_the_fragment_and_its_line(tmp_path) -> None:
    (tmp_path / "a.cuh").write_text("// one\n// two\n")
    (tmp_path / "b.cu").write_text('\n\nextern "C" __global__ void k(int* o) { o[0] = undefined_name; }\n')
    with pytest.raises(mc.CompileError) as info:
        ptx(mc.cuda_kernel_files("a.cuh", "b.cu", relative_to=tmp_path))
    assert f"{tmp_path / 'b.cu'}(3): error" in info.value.log


def test_fragments_resolve_next_to_the_caller(tmp_path) -> None:
    (tmp_path / "common.cuh").write_text("#define VALUE 9\n")
    (tmp_path / "k.cu").write_text(KERNEL)
    (tmp_path / "ops.py").write_text("import mircuda as mc\nSOURCE = mc.cuda_kernel_files('common.cuh', 'k.cu')\n")
    assert constant(ptx(import_module(tmp_path / "ops.py").SOURCE)) == 9
    (tmp_path / "bad.py").write_text("import mircuda as mc\nSOURCE = mc.cuda_kernel_files('common.cuh', 'nope.cu')\n")
    with pytest.raises(mc.ContractError) as info:
        import_module(tmp_path / "bad.py")
    assert info.value.argument == "paths[1]" and str(tmp_path / "nope.cu") in str(info.value)
    with pytest.raises(mc.ContractError, match="at least one"):
        mc.cuda_kernel_files()


def test_the_composed_text_is_the_digest(tmp_path) -> None:
    (tmp_path / "a.cuh").write_text("#define VALUE 1\n")
    (tmp_path / "k.cu").write_text(KERNEL)
    first = mc.cuda_kernel_files("a.cuh", "k.cu", relative_to=tmp_path)
    assert first.digest == mc.cuda_kernel_files("a.cuh", "k.cu", relative_to=tmp_path).digest
    (tmp_path / "a.cuh").write_text("#define VALUE 2\n")
    assert first.digest != mc.cuda_kernel_files("a.cuh", "k.cu", relative_to=tmp_path).digest
    # The order of the fragments is part of the unit.
    assert first.digest != mc.cuda_kernel_files("k.cu", "a.cuh", relative_to=tmp_path).digest


def test_quotes_in_paths_are_escaped_in_line_markers(tmp_path) -> None:
    odd = tmp_path / 'we"ird'
    odd.mkdir()
    (odd / "k.cu").write_text("#define VALUE 3\n" + KERNEL)
    source = mc.cuda_kernel_files("k.cu", relative_to=odd)
    assert source.text.startswith(f'#line 1 "{str(odd / "k.cu").replace(chr(34), chr(92) + chr(34))}"\n')
    assert constant(ptx(source)) == 3


def test_a_relative_path_resolves_next_to_this_test_file() -> None:
    with pytest.raises(mc.ContractError) as info:
        mc.cuda_kernel_file("no_such_kernel.cu")
    assert str(Path(__file__).parent / "no_such_kernel.cu") in str(info.value)
