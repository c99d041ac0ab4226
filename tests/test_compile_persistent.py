"""The persistent module cache: entry format, validation, every corruption kind, best-effort I/O.

An OfflineCompiler shares the cache logic of Compiler; a fresh compiler over the same directory
stands for a new process (tests/test_compile_multiprocess.py uses real processes).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import struct
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

import mircuda as mc
from mircuda.compile import _persistent

SOURCE = mc.cuda_kernel(r'''
extern "C" __global__ void scale(float* y, const float* x, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}''', "scale.cu")
ARCH = "sm_90"


def cached(directory: Path, arch: str = ARCH) -> mc.OfflineCompiler:
    return mc.OfflineCompiler(arch, mc.CompilerConfig(cache_directory=directory))


def stats(**counts: int) -> mc.CompileCacheStats:
    return mc.CompileCacheStats(**counts)


def entry_files(directory: Path) -> list[Path]:
    return sorted(directory.iterdir())


@pytest.fixture()
def populated(tmp_path: Path) -> tuple[Path, str, mc.CompiledProgram]:
    """A cache directory holding one valid entry for SOURCE; returns (entry path, key, program)."""
    compiler = cached(tmp_path)
    program = compiler.compile(SOURCE)
    key = compiler.cache_key(SOURCE)
    path = tmp_path / f"{key}.mcm"
    assert entry_files(tmp_path) == [path]
    return path, key, program


def test_a_fresh_compiler_hits_the_entry_another_wrote(tmp_path, populated) -> None:
    _, _, program = populated
    again = cached(tmp_path)
    assert again.compile(SOURCE) == program
    assert again.compile(SOURCE) == program
    assert again.cache_stats() == stats(memory_hits=1, persistent_hits=1)


def test_the_entry_describes_itself(populated) -> None:
    path, key, program = populated
    data = path.read_bytes()
    magic, version, major, minor, arch, key_bytes, length = struct.unpack_from("<8sIII16s32sQ", data)
    assert magic == b"MIRCUDA\x1a" and version == 1 and (major, minor) == mc.nvrtc_version()
    assert arch.rstrip(b"\0") == ARCH.encode() and key_bytes.hex() == key and length == len(data) - 108
    assert data[76:108] == hashlib.sha256(data[:76] + data[108:]).digest()
    (meta_len,) = struct.unpack_from("<I", data, 108)
    meta = json.loads(data[112:112 + meta_len])
    assert meta == {"arch": ARCH, "output": "cubin", "log": program.log, "nvrtc_version": list(mc.nvrtc_version()),
                    "abi": "c", "symbols": []}
    assert data[112 + meta_len:] == program.image


@dataclass(frozen=True)
class ForeignSource:
    """A ModuleSource that is not CUDA C (like a Numba kernel): the cache must keep every field."""

    name: str = "foreign"
    digest: str = "f" * 64

    def build(self, arch: str, options: mc.CompileOptions) -> mc.CompiledProgram:
        program = mc.compile_program(SOURCE, arch, options)
        return replace(program, abi="numba", symbols=(("scale", "_Z5scalePfPKffj"),), log="a warning",
                       nvrtc_version=(0, 0))


def test_every_program_field_survives_for_any_module_source(tmp_path) -> None:
    built = cached(tmp_path).compile(ForeignSource())
    assert built.abi == "numba"
    again = cached(tmp_path)
    assert again.compile(ForeignSource()) == built
    assert again.cache_stats() == stats(persistent_hits=1)


def test_ptx_entries_keep_the_terminating_nul(tmp_path) -> None:
    ptx = mc.CompileOptions(output="ptx")
    built = cached(tmp_path, "compute_90").compile(SOURCE, ptx)
    loaded = cached(tmp_path, "compute_90").compile(SOURCE, ptx)
    assert loaded == built and loaded.image.endswith(b"\0")


def reframe(data: bytes, **fields) -> bytes:
    """Rewrite header fields of an entry and recompute its checksum (a well-formed but foreign entry)."""
    names = ("magic", "version", "major", "minor", "arch", "key", "length")
    values = dict(zip(names, struct.unpack_from("<8sIII16s32sQ", data)))
    values.update(fields)
    header = struct.pack("<8sIII16s32sQ", *(values[n] for n in names))
    payload = fields.get("payload", data[108:])
    return header + hashlib.sha256(header + payload).digest() + payload


def other_key_entry(data: bytes) -> bytes:
    return reframe(data, key=bytes(32))


def bad_json(data: bytes) -> bytes:
    meta = b'{"arch": 1}'
    return reframe(data, payload=struct.pack("<I", len(meta)) + meta + b"\x7fELF")


def not_elf(data: bytes) -> bytes:
    (meta_len,) = struct.unpack_from("<I", data, 108)
    payload = data[108:112 + meta_len] + b"garbage that is not an ELF image"
    return reframe(data, payload=payload, length=len(payload))


CORRUPTIONS = {
    "truncated header": lambda d: d[:50],
    "truncated payload": lambda d: d[:-100],
    "empty": lambda d: b"",
    "zeroed": lambda d: bytes(len(d)),
    "byte flipped in the header": lambda d: d[:40] + bytes([d[40] ^ 1]) + d[41:],
    "byte flipped in the payload": lambda d: d[:len(d) // 2] + bytes([d[len(d) // 2] ^ 0x80]) + d[len(d) // 2 + 1:],
    "last byte flipped": lambda d: d[:-1] + bytes([d[-1] ^ 1]),
    "checksum flipped": lambda d: d[:80] + bytes([d[80] ^ 1]) + d[81:],
    "trailing bytes": lambda d: d + b"\0",
    "wrong magic": lambda d: reframe(d, magic=b"CUPYCACH"),
    "another format version": lambda d: reframe(d, version=2),
    "another arch": lambda d: reframe(d, arch=b"sm_80"),
    "another NVRTC version": lambda d: reframe(d, major=12, minor=9),
    "another key": other_key_entry,
    "malformed metadata": bad_json,
    "CUBIN that is not ELF": not_elf,
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_a_bad_entry_is_removed_rebuilt_and_rewritten(tmp_path, populated, corrupt) -> None:
    path, key, program = populated
    path.write_bytes(corrupt(path.read_bytes()))
    with pytest.raises(_persistent.EntryError):
        _persistent.decode_entry(path.read_bytes(), key, ARCH, mc.nvrtc_version())
    rebuilding = cached(tmp_path)
    assert rebuilding.compile(SOURCE) == program
    assert rebuilding.cache_stats() == stats(compilations=1, persistent_failures=1)
    assert _persistent.decode_entry(path.read_bytes(), key, ARCH, mc.nvrtc_version()) == program
    assert entry_files(tmp_path) == [path]
    assert cached(tmp_path).compile(SOURCE) == program


def test_an_entry_is_only_discarded_if_it_is_still_the_file_that_was_read(tmp_path, populated) -> None:
    path, key, program = populated
    cache = _persistent.PersistentCache(str(tmp_path))
    found = cache.load(key, ARCH, mc.nvrtc_version())
    assert found.program == program and found.failure is None
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)  # another process rewrote it meanwhile: a new file
    assert not cache.discard(key, found.token) and path.exists()
    assert cache.discard(key, cache.load(key, ARCH, mc.nvrtc_version()).token) and not path.exists()


def test_an_unusable_directory_never_fails_a_compile(tmp_path) -> None:
    compiler = cached(tmp_path / "cache")
    (tmp_path / "cache").write_text("")  # made unusable after configuration: a file took its place
    program = compiler.compile(SOURCE)
    assert program.image.startswith(b"\x7fELF")
    assert compiler.cache_stats() == stats(compilations=1, persistent_failures=2)  # the read and the write
    other = mc.cuda_kernel(SOURCE.text + "\n", "scale.cu")
    compiler.compile(other)
    assert compiler.cache_stats() == stats(compilations=2, persistent_failures=4)


def test_an_unreadable_entry_is_a_counted_miss(tmp_path, populated) -> None:
    path, _, program = populated
    path.unlink()
    path.mkdir()  # reading it fails with IsADirectoryError, and it cannot be replaced by a file
    compiler = cached(tmp_path)
    assert compiler.compile(SOURCE) == program
    assert compiler.cache_stats() == stats(compilations=1, persistent_failures=2)  # the read and the write


@pytest.mark.parametrize("failing", ["fsync", "replace", "write"])
def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch, failing) -> None:
    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if failing == "write":
        real_fdopen = os.fdopen

        class Full:
            def __init__(self, f):
                self.f = f

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

            write = staticmethod(disk_full)

        monkeypatch.setattr(_persistent.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    else:
        monkeypatch.setattr(_persistent.os, failing, disk_full)
    compiler = cached(tmp_path)
    assert compiler.compile(SOURCE).image.startswith(b"\x7fELF")
    assert compiler.cache_stats() == stats(compilations=1, persistent_failures=1)
    assert entry_files(tmp_path) == []


def test_entries_are_written_by_replacing_a_complete_temporary_file(tmp_path, monkeypatch) -> None:
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append((Path(src), Path(dst), Path(src).read_bytes()))
        real_replace(src, dst)

    monkeypatch.setattr(_persistent.os, "replace", spy)
    compiler = cached(tmp_path)
    compiler.compile(SOURCE)
    (src, dst, data), = seen
    assert src.parent == dst.parent == tmp_path and src.name.startswith(".tmp-")
    assert dst.name == compiler.cache_key(SOURCE) + ".mcm" and dst.read_bytes() == data


def test_memory_hits_do_not_touch_the_directory(tmp_path, populated) -> None:
    path, _, program = populated
    compiler = cached(tmp_path)
    compiler.compile(SOURCE)
    path.unlink()
    assert compiler.compile(SOURCE) == program
    assert compiler.cache_stats() == stats(memory_hits=1, persistent_hits=1)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write into a read-only directory")
def test_a_read_only_directory_never_fails_a_compile(tmp_path) -> None:
    directory = tmp_path / "cache"
    directory.mkdir()
    directory.chmod(0o555)
    try:
        compiler = cached(directory)
        assert compiler.compile(SOURCE).image.startswith(b"\x7fELF")
        assert compiler.cache_stats() == stats(compilations=1, persistent_failures=1)
    finally:
        directory.chmod(0o755)


class StrictLoader(mc.OfflineCompiler):
    """Stands for Compiler, whose load (cuModuleLoadData) can refuse an image: this one refuses any
    image that is not a complete ELF file (tests/gpu/test_compile_cache.py uses the real driver)."""

    refuse_everything = False

    def _load(self, program: mc.CompiledProgram) -> mc.CompiledProgram:
        if self.refuse_everything or program.image[4:5] == b"\0":  # ELF class 0: invalid
            raise mc.CudaError(200, "CUDA_ERROR_INVALID_IMAGE", "cuModuleLoadData")
        return program


def test_an_entry_the_loader_refuses_is_removed_rebuilt_and_rewritten(tmp_path, populated) -> None:
    path, key, program = populated
    poisoned = replace(program, image=b"\x7fELF" + bytes(60))
    path.write_bytes(_persistent.encode_entry(key, ARCH, mc.nvrtc_version(), poisoned))
    compiler = StrictLoader(ARCH, mc.CompilerConfig(cache_directory=tmp_path))
    assert compiler.compile(SOURCE) == program
    assert compiler.cache_stats() == stats(compilations=1, persistent_failures=1)
    assert _persistent.decode_entry(path.read_bytes(), key, ARCH, mc.nvrtc_version()) == program


def test_a_fresh_image_the_loader_refuses_raises_and_is_not_persisted(tmp_path) -> None:
    compiler = StrictLoader(ARCH, mc.CompilerConfig(cache_directory=tmp_path))
    compiler.refuse_everything = True
    with pytest.raises(mc.CudaError, match="CUDA_ERROR_INVALID_IMAGE"):
        compiler.compile(SOURCE)
    assert entry_files(tmp_path) == []


def test_temporary_files_of_crashed_writers_are_swept_after_the_first_write(tmp_path) -> None:
    stale, live = tmp_path / ".tmp-crashed.mcm", tmp_path / ".tmp-writing.mcm"
    stale.write_bytes(b"half an entry")
    live.write_bytes(b"being written")
    st = stale.stat()
    os.utime(stale, ns=(st.st_atime_ns, st.st_mtime_ns - 2 * 3600 * 10**9))
    cached(tmp_path).compile(SOURCE)
    assert not stale.exists() and live.exists()


def test_a_cache_directory_that_can_never_exist_is_a_configuration_error(tmp_path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(mc.ContractError, match="is a file"):
        mc.CompilerConfig(cache_directory=str(tmp_path / "file" / "cache"))
    for bad in ("", "a\0b"):
        with pytest.raises(mc.ContractError, match="cache_directory"):
            mc.CompilerConfig(cache_directory=bad)
    home = mc.CompilerConfig(cache_directory="~/mircuda-cache-test").cache_directory
    assert home == os.path.expanduser("~/mircuda-cache-test")


def test_entries_are_readable_by_others_as_the_umask_allows(tmp_path) -> None:
    compiler = cached(tmp_path)
    compiler.compile(SOURCE)
    (entry,) = [p for p in tmp_path.iterdir() if p.suffix == ".mcm"]
    mask = os.umask(0o022)
    os.umask(mask)
    assert entry.stat().st_mode & 0o777 == 0o666 & ~mask


# --- crafted entries: valid checksum, metadata that lies (issue 12, item 5) ---

def crafted(data: bytes, meta_bytes: bytes | None = None, image: bytes | None = None, **meta_changes) -> bytes:
    """Rewrite an entry's metadata and/or image and frame it with a correct checksum and length."""
    (meta_len,) = struct.unpack_from("<I", data, 108)
    meta = json.loads(data[112:112 + meta_len])
    meta.update(meta_changes)
    if meta_bytes is None:
        meta_bytes = json.dumps(meta).encode()
    payload = struct.pack("<I", len(meta_bytes)) + meta_bytes + (data[112 + meta_len:] if image is None else image)
    return reframe(data, payload=payload, length=len(payload))


LYING_ENTRIES = {
    "metadata nested 100000 deep": lambda d: crafted(d, meta_bytes=b"[" * 100_000 + b"]" * 100_000),
    "nested inside a field": lambda d: crafted(d, meta_bytes=(
        b'{"arch": "sm_90", "output": "cubin", "abi": "c", "nvrtc_version": [13, 0], "symbols": [], "log": '
        + b"[" * 50_000 + b"]" * 50_000 + b"}")),
    "metadata arch differs from the header": lambda d: crafted(d, arch="sm_80"),
    "metadata NVRTC differs from the header": lambda d: crafted(d, nvrtc_version=[12, 9]),
    "another ABI for CUDA C": lambda d: crafted(d, abi="numba"),
    "empty ABI": lambda d: crafted(d, abi=""),
    "empty output": lambda d: crafted(d, output=""),
    "PTX output for a CUBIN request": lambda d: crafted(d, output="ptx", image=b".version 9.0\n\0"),
    "empty image": lambda d: crafted(d, image=b""),
    "a symbol map for CUDA C": lambda d: crafted(d, symbols=[["scale", "_Z5scalev"]]),
    "a symbol with NUL": lambda d: crafted(d, symbols=[["scale", "sc\0ale"]]),
    "negative NVRTC version": lambda d: crafted(d, nvrtc_version=[-1, 0]),
    "bool as NVRTC version": lambda d: crafted(d, nvrtc_version=[True, 0]),
    "metadata is a list": lambda d: crafted(d, meta_bytes=b"[1, 2]"),
    "an extra field": lambda d: crafted(d, extra=1),
    "a field missing": lambda d: crafted(d, meta_bytes=b'{"arch": "sm_90"}'),
    "invalid UTF-8 metadata": lambda d: crafted(d, meta_bytes=b'{"arch": "\xff"}'),
}


@pytest.mark.parametrize("lie", LYING_ENTRIES.values(), ids=LYING_ENTRIES.keys())
def test_a_checksummed_entry_whose_metadata_lies_is_a_counted_miss(tmp_path, populated, lie) -> None:
    path, key, program = populated
    path.write_bytes(lie(path.read_bytes()))
    compiler = cached(tmp_path)
    assert compiler.compile(SOURCE) == program  # no RecursionError, no contradicting program
    assert compiler.cache_stats() == stats(compilations=1, persistent_failures=1)
    assert _persistent.decode_entry(path.read_bytes(), key, ARCH, mc.nvrtc_version()) == program


def test_a_ptx_image_with_a_nul_inside_is_refused(tmp_path) -> None:
    ptx = mc.CompileOptions(output="ptx")
    compiler = cached(tmp_path, "compute_90")
    program = compiler.compile(SOURCE, ptx)
    key = compiler.cache_key(SOURCE, ptx)
    path = tmp_path / f"{key}.mcm"
    path.write_bytes(crafted(path.read_bytes(), image=b".version 9.0\0.entry other\n\0"))
    with pytest.raises(_persistent.EntryError, match="exactly one NUL"):
        _persistent.decode_entry(path.read_bytes(), key, "compute_90", mc.nvrtc_version())
    again = cached(tmp_path, "compute_90")
    assert again.compile(SOURCE, ptx) == program
    assert again.cache_stats() == stats(compilations=1, persistent_failures=1)


def test_a_cached_program_must_have_the_requested_output_and_abi(populated) -> None:
    path, key, program = populated
    data = path.read_bytes()
    expect = _persistent.EntryExpectation
    assert _persistent.decode_entry(data, key, ARCH, mc.nvrtc_version(), expect("cubin", "c", mc.nvrtc_version(), ())) \
        == program
    for wrong in (expect(output="ptx"), expect(abi="numba"), expect(nvrtc_version=(1, 0)),
                  expect(symbols=(("a", "b"),))):
        with pytest.raises(_persistent.EntryError, match="expected"):
            _persistent.decode_entry(data, key, ARCH, mc.nvrtc_version(), wrong)


def test_a_reader_bug_is_still_a_miss(tmp_path, populated, monkeypatch) -> None:
    """Whatever the reader raises on an entry, the compile goes on and the entry is dropped."""
    _, _, program = populated

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the reader")

    monkeypatch.setattr(_persistent, "decode_entry", broken)
    compiler = cached(tmp_path)
    assert compiler.compile(SOURCE) == program
    assert compiler.cache_stats().persistent_failures >= 1


def test_a_program_that_cannot_be_read_back_is_not_written(tmp_path) -> None:
    @dataclass(frozen=True)
    class EmptyAbi(ForeignSource):
        def build(self, arch: str, options: mc.CompileOptions) -> mc.CompiledProgram:
            return replace(super().build(arch, options), abi="")

    compiler = cached(tmp_path)
    assert compiler.compile(EmptyAbi()).abi == ""
    assert compiler.cache_stats() == stats(compilations=1, persistent_failures=1)
    assert entry_files(tmp_path) == []
