"""What the compile cache key covers beyond the user's include roots: the toolkit's headers (issue 12,
item 3) and include names NVRTC cannot open as written (issue 12, item 5). NVRTC on the CPU.

A fake toolkit directory in tmp stands for cudart/CCCL: every ``toolkit_include_dirs`` mircuda's
modules hold (the key's and NVRTC's) is patched to return it, so the compiled PTX shows which
header NVRTC really read.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

import mircuda as mc
from mircuda.compile import _includes
from mircuda.compile._toolkit import toolkit_include_dirs

PTX = mc.CompileOptions(output="ptx")
SOURCE = mc.cuda_kernel('#include <fake_toolkit.h>\nextern "C" __global__ void k(int* o) { o[0] = VALUE; }\n',
                        "k.cu")


def constant(program: mc.CompiledProgram) -> int:
    values = re.findall(rb"mov\.[bu]32\s+%r\d+, (\d+);", program.image)
    assert len(values) == 1, program.image.decode()
    return int(values[0])


@pytest.fixture(autouse=True)
def trusted_signatures(monkeypatch) -> None:
    """No 'racy' window: each test shows that the stat signatures alone reveal its change."""
    monkeypatch.setattr(_includes, "_RACY_NS", 0)


@pytest.fixture()
def toolkit(tmp_path: Path, monkeypatch) -> list[Path]:
    """A fake toolkit header directory; set ``toolkit[:] = [...]`` to move the toolkit."""
    root = tmp_path / "toolkit" / "include"
    root.mkdir(parents=True)
    (root / "fake_toolkit.h").write_text("#define VALUE 7\n")
    roots = [root]
    patch_toolkit(monkeypatch, lambda: tuple(str(r) for r in roots))
    return roots


def patch_toolkit(monkeypatch, fake) -> None:
    """Replace the toolkit directory lookup in every mircuda module that holds it by name."""
    patched = 0
    for name, module in list(sys.modules.items()):
        if (name == "mircuda" or name.startswith("mircuda.")) and hasattr(module, "toolkit_include_dirs"):
            monkeypatch.setattr(module, "toolkit_include_dirs", fake)
            patched += 1
    assert patched


def compiler() -> mc.OfflineCompiler:
    return mc.OfflineCompiler("compute_90")


def test_a_toolkit_header_edited_in_place_changes_the_key_and_the_module(toolkit) -> None:
    c = compiler()
    header = toolkit[0] / "fake_toolkit.h"
    first = c.compile(SOURCE, PTX)
    assert constant(first) == 7 and c.compile(SOURCE, PTX) is first
    key = c.cache_key(SOURCE, PTX)
    st = header.stat()
    header.write_text("#define VALUE 8\n")  # same size and mtime: only the content (and ctime) differ
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert c.cache_key(SOURCE, PTX) != key
    assert constant(c.compile(SOURCE, PTX)) == 8
    assert c.cache_stats() == mc.CompileCacheStats(memory_hits=1, compilations=2)


def test_another_toolkit_directory_changes_the_key(toolkit, tmp_path) -> None:
    c = compiler()
    key = c.cache_key(SOURCE, PTX)
    assert constant(c.compile(SOURCE, PTX)) == 7
    other = tmp_path / "other-toolkit"
    other.mkdir()
    (other / "fake_toolkit.h").write_text("#define VALUE 9\n")
    toolkit[:] = [other]
    fresh = compiler()
    assert fresh.cache_key(SOURCE, PTX) != key
    assert constant(fresh.compile(SOURCE, PTX)) == 9
    # The same contents at another path is still another toolkit: the path is in the key.
    (other / "fake_toolkit.h").write_text("#define VALUE 7\n")
    assert compiler().cache_key(SOURCE, PTX) != key


def test_the_toolkit_root_listing_is_in_the_key(toolkit) -> None:
    """A header the scan cannot follow (e.g. reached through a computed include) changes the
    listing of its root when it is added or removed."""
    c = compiler()
    key = c.cache_key(SOURCE, PTX)
    added = toolkit[0] / "reached_by_a_macro.h"
    added.write_text("#define X 1\n")
    key2 = c.cache_key(SOURCE, PTX)
    assert key2 != key
    added.unlink()
    assert c.cache_key(SOURCE, PTX) == key


def make_wheel_metadata(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_the_toolkit_wheel_versions_are_in_the_key(toolkit, tmp_path, monkeypatch) -> None:
    """An upgrade of the CCCL wheel (versioned apart from NVRTC) changes the key even when no header
    the scan followed changed: the dist-info directory is renamed, its directory's signature changes."""
    site = tmp_path / "site"
    site.mkdir()
    make_wheel_metadata(site, "nvidia-cuda-cccl", "13.0.85")
    monkeypatch.syspath_prepend(str(site))
    c = compiler()
    key = c.cache_key(SOURCE, PTX)
    assert c.cache_key(SOURCE, PTX) == key
    (site / "nvidia_cuda_cccl-13.0.85.dist-info").rename(site / "nvidia_cuda_cccl-13.1.0.dist-info")
    (site / "nvidia_cuda_cccl-13.1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nvidia-cuda-cccl\nVersion: 13.1.0\n")
    assert c.cache_key(SOURCE, PTX) != key
    fingerprint = _includes.toolkit_fingerprint(tuple(str(r) for r in toolkit))
    assert fingerprint.unchanged()


def test_the_fingerprint_names_every_header_wheel_version(toolkit, monkeypatch) -> None:
    versions = {"cuda-toolkit": "13.0.3.0", "nvidia-cuda-cccl": "13.0.85", "nvidia-cuda-runtime": "13.0.96",
                "nvidia-cuda-nvrtc": "13.0.88"}
    assert set(versions) == set(_includes.TOOLKIT_DISTRIBUTIONS)
    roots = tuple(str(r) for r in toolkit)

    class Dist:
        def __init__(self, version: str) -> None:
            self.version = version

        def locate_file(self, path: str) -> str:
            return str(toolkit[0])

    def fingerprint() -> str:
        _includes._toolkit_cache.clear()
        monkeypatch.setattr(_includes.importlib.metadata, "distribution", lambda name: Dist(versions[name]))
        return _includes.toolkit_fingerprint(roots).digest

    base = fingerprint()
    for name in list(versions):
        saved = versions[name]
        versions[name] = saved + ".post1"
        assert fingerprint() != base, name
        versions[name] = saved
    assert fingerprint() == base


def test_a_source_without_includes_does_not_depend_on_the_toolkit(toolkit, tmp_path) -> None:
    plain = mc.cuda_kernel('extern "C" __global__ void k(int* o) { o[0] = 3; }\n', "plain.cu")
    key = compiler().cache_key(plain, PTX)
    other = tmp_path / "other"
    other.mkdir()
    toolkit[:] = [other]
    assert compiler().cache_key(plain, PTX) == key
    deps = _includes.scan_dependencies(plain.text, plain.name, (), (str(other),))
    assert not deps.needs_revalidation  # memory hits of such sources cost no stat


def test_the_real_toolkit_headers_are_fingerprinted() -> None:
    roots = toolkit_include_dirs()
    if not roots:
        pytest.skip("no toolkit header directory installed")
    deps = _includes.scan_dependencies("#include <cuda_fp16.h>\n", "k.cu", (), roots)
    assert any(f.endswith(os.sep + "cuda_fp16.h") for f in deps.files)
    assert any(f.endswith(os.sep + "cuda_fp16.hpp") for f in deps.files)  # included by cuda_fp16.h
    # CCCL: followed statically; its computed includes do not make the scan walk the toolkit.
    cccl = _includes.scan_dependencies("#include <cuda/std/cstdint>\n", "k.cu", (), roots)
    assert any("cstdint" in f for f in cccl.files) and len(cccl.files) < 200


# --- include names NVRTC cannot open as written (issue 12, item 5) ---

def test_a_nul_in_an_include_name_is_nvrtcs_compile_error_naming_the_header(tmp_path) -> None:
    (tmp_path / "h.cuh").write_bytes(b'#include "a\0b.h"\n#define V 1\n')
    (tmp_path / "a").write_text("#define V 2\n")
    source = mc.cuda_kernel('#include "h.cuh"\nextern "C" __global__ void k(int* o) { o[0] = V; }\n',
                            str(tmp_path / "k.cu"))
    c = compiler()
    key = c.cache_key(source, PTX)  # the scan names no file for it: no ValueError
    with pytest.raises(mc.CompileError, match=r"h\.cuh\(1\): error: invalid character") as info:
        c.compile(source, PTX)
    assert info.value.source_name == str(tmp_path / "k.cu")
    assert c.cache_key(source, PTX) == key


@pytest.mark.skipif(sys.platform != "linux", reason="byte file names")
def test_an_include_name_that_is_not_utf8_is_tracked_as_the_bytes_nvrtc_opens(tmp_path) -> None:
    if os.path.supports_unicode_filenames:
        pytest.skip("file names are not bytes here")
    raw = os.fsencode(str(tmp_path)) + b"/\xff.cuh"
    with open(raw, "wb") as f:
        f.write(b"#define V 5\n")
    (tmp_path / "h.cuh").write_bytes(b'#include "\xff.cuh"\n')
    source = mc.cuda_kernel('#include "h.cuh"\nextern "C" __global__ void k(int* o) { o[0] = V; }\n',
                            str(tmp_path / "k.cu"))
    c = compiler()
    assert constant(c.compile(source, PTX)) == 5
    st = os.stat(raw)
    with open(raw, "wb") as f:
        f.write(b"#define V 6\n")
    os.utime(raw, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert constant(c.compile(source, PTX)) == 6


def test_a_numba_declare_device_digest_covers_the_toolkit_headers(toolkit) -> None:
    pytest.importorskip("numba.cuda")
    from mircuda.numba_ext import declare_device

    helper = mc.cuda_kernel('#include <fake_toolkit.h>\nextern "C" __device__ int helper(int x) { return x + VALUE; }\n',
                            "helper.cu")
    before = declare_device("helper", "int32(int32)", helper)._mircuda_digest
    header = toolkit[0] / "fake_toolkit.h"
    st = header.stat()
    header.write_text("#define VALUE 8\n")
    os.utime(header, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert declare_device("helper", "int32(int32)", helper)._mircuda_digest != before


# --- paths and names that cannot reach NVRTC: named ContractErrors, not ValueError/UnicodeEncodeError ---

def test_a_nul_in_relative_to_is_a_contract_error() -> None:
    with pytest.raises(mc.ContractError, match="relative_to"):
        mc.cuda_kernel_file("k.cu", relative_to="/tmp\0x")


@pytest.mark.skipif(sys.platform != "linux", reason="byte file names")
def test_paths_that_are_not_utf8_are_refused_by_name(tmp_path) -> None:
    odd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/\xffdir")
    os.mkdir(odd)
    with open(os.path.join(odd, "k.cu"), "w") as f:
        f.write('extern "C" __global__ void k() {}\n')
    with pytest.raises(mc.ContractError, match="include_paths\\[0\\]"):
        mc.CompilerConfig(include_paths=[odd])  # was accepted; NVRTC's flag then raised UnicodeEncodeError
    with pytest.raises(mc.ContractError, match="'path'"):
        mc.cuda_kernel_file(os.path.join(odd, "k.cu"))
    with pytest.raises(mc.ContractError, match="relative_to"):
        mc.cuda_kernel_file("k.cu", relative_to=odd)
