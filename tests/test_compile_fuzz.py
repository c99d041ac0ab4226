"""Property tests (hypothesis) for the compile layer's inputs (issue 12, "Fuzzing in CI"):
``CompileOptions``, the include scanner and the persistent-cache reader fed random, truncated,
bit-flipped and crafted-but-checksummed entries.

Only documented mircuda errors may escape (ContractError, EntryError from the reader, CompileError
from NVRTC), and no wrong value may pass: options keep distinct compiles apart, the scan misses no
file NVRTC can read, a decoded entry is exactly what was written and agrees with its header.
Sized for CI on 2 cores: modest ``max_examples``, no deadline (a cold NVRTC call takes ~70 ms).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from functools import lru_cache
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import mircuda as mc
from mircuda.compile import _includes, _options, _persistent

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ARCH = "sm_90"
NVRTC = (13, 0)
KEY = hashlib.sha256(b"fuzz").hexdigest()

# ---------------------------------------------------------------------------------------------
# CompileOptions

ANY = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                st.text(max_size=8), st.binary(max_size=4), st.lists(st.integers(), max_size=2))
# Characters that have broken flag joining, lines or encodings before.
TRICKY = st.text(alphabet=st.sampled_from(["a", "1", "=", " ", "-", "D", "\x1f", "\0", "\n", "\r", '"', ",",
                                           "\udcff", "\u00e9", "\\"]), max_size=8)
MACRO_NAMES = st.one_of(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True), TRICKY)
DEFINE_VALUES = st.one_of(st.none(), st.integers(-2**70, 2**70), TRICKY, ANY)
DEFINES = st.one_of(st.dictionaries(MACRO_NAMES, DEFINE_VALUES, max_size=4),
                    st.lists(st.tuples(MACRO_NAMES, DEFINE_VALUES), max_size=4).map(tuple), ANY)
FLAGS = st.lists(st.one_of(st.sampled_from(_options.ALLOWED_EXTRA_FLAGS), TRICKY,
                           st.just("--gpu-architecture=sm_80"), st.just("-I/tmp")), max_size=3)
OPTIONS = st.fixed_dictionaries({}, optional={
    "std": st.one_of(st.sampled_from(_options._STANDARDS), TRICKY, ANY),
    "defines": DEFINES,
    "fast_math": st.one_of(st.booleans(), ANY),
    "line_info": st.one_of(st.booleans(), ANY),
    "max_registers": st.one_of(st.none(), st.integers(0, 300), ANY),
    "extra_flags": st.one_of(FLAGS, FLAGS.map(tuple), ANY),
    "output": st.one_of(st.sampled_from(["cubin", "ptx"]), ANY),
})


def make_options(fields: dict) -> mc.CompileOptions | None:
    """The options, or None after a ContractError; anything else escapes and fails the test."""
    try:
        return mc.CompileOptions(**fields)
    except mc.ContractError as exc:
        assert exc.argument and exc.expected, exc
        return None


def defines_of(flags: list[str]) -> list[tuple[str, str | None]]:
    out = []
    for f in flags:
        if f.startswith("-D"):
            name, eq, value = f[2:].partition("=")
            out.append((name, value if eq else None))
    return out


@FUZZ
@example({"defines": {"A": "\udcff"}})  # was accepted, then NVRTC's flag encoding raised UnicodeEncodeError
@example({"defines": {"A": 10**5000}})  # was a bare ValueError from str()
@example({"defines": {"A": "a\rb"}})
@given(OPTIONS)
def test_options_are_valid_or_refused_by_name(fields) -> None:
    options = make_options(fields)
    if options is None:
        return
    flags = options.flags("sm_90")
    for flag in flags:  # what reaches NVRTC: one line of UTF-8 each
        assert isinstance(flag, str) and flag.encode() and not any(c in flag for c in "\0\n\r")
    assert defines_of(flags) == list(options.defines)
    names = [n for n, _ in options.defines]
    assert names == sorted(set(names))
    assert set(options.extra_flags) <= set(_options.ALLOWED_EXTRA_FLAGS)
    again = mc.CompileOptions(std=options.std, defines=options.defines, fast_math=options.fast_math,
                              line_info=options.line_info, max_registers=options.max_registers,
                              extra_flags=options.extra_flags, output=options.output)
    assert again == options and again.key == options.key and hash(again) == hash(options)


SAFE_TEXT = st.text(alphabet=st.sampled_from(["a", "1", "=", " ", "-", "D", "\x1f", '"', ",", "\u00e9", "\\"]),
                    max_size=6)
VALID_OPTIONS = st.builds(
    mc.CompileOptions,
    std=st.sampled_from(_options._STANDARDS),
    defines=st.dictionaries(st.from_regex(r"[A-C]{1,2}", fullmatch=True),
                            st.one_of(st.none(), st.integers(-3, 3), SAFE_TEXT), max_size=3),
    fast_math=st.booleans(), line_info=st.booleans(),
    max_registers=st.one_of(st.none(), st.integers(16, 18)),
    extra_flags=st.lists(st.sampled_from(_options.ALLOWED_EXTRA_FLAGS[:3]), max_size=2).map(tuple),
    output=st.sampled_from(["cubin", "ptx"]))


@FUZZ
@given(VALID_OPTIONS, VALID_OPTIONS)
def test_options_share_a_cache_key_only_when_they_compile_the_same(a, b) -> None:
    assert (a.key == b.key) == (a.flags("x") == b.flags("x") and a.output == b.output)
    assert (a.key == b.key) == (a == b)


@FUZZ
@example({"A": "x\x1f-DB=y"}, {"A": "x", "B": "y"})  # forged a key by the old "\x1f"-joined flags
@given(st.dictionaries(st.sampled_from("ABD"), SAFE_TEXT, min_size=1, max_size=3),
       st.dictionaries(st.sampled_from("ABD"), SAFE_TEXT, min_size=1, max_size=3))
def test_define_values_cannot_forge_another_options_key(a_defines, b_defines) -> None:
    a, b = mc.CompileOptions(defines=a_defines), mc.CompileOptions(defines=b_defines)
    assert (a.key == b.key) == (a.defines == b.defines)


# ---------------------------------------------------------------------------------------------
# The include scanner

# "\udcff.h" is the file name b"\xff.h" (not UTF-8), as os.fsdecode spells it on POSIX.
HEADER_NAMES = ["a.h", "b.h", "sub/c.h", "sub/../a.h", "missing.h", "\udcff.h", "a\0b.h", "", "sub", "/nonexistent/x.h"]
DIRECTIVE = st.tuples(st.sampled_from(["quote", "angle", "has_quote", "has_angle", "next", "junk"]),
                      st.sampled_from(HEADER_NAMES))
LOCATIONS = ["main", "root0", "root1"]
FILES = st.dictionaries(st.tuples(st.sampled_from(LOCATIONS), st.sampled_from(["a.h", "b.h", "sub/c.h", "\udcff.h"])),
                        st.lists(DIRECTIVE, max_size=4), max_size=8)


def render(directives: list[tuple[str, str]]) -> bytes:
    lines = []
    for kind, name in directives:
        raw = name.encode("utf-8", "surrogateescape")
        lines.append({
            "quote": b'#include "' + raw + b'"',
            "angle": b"#include <" + raw + b">",
            "has_quote": b'#if __has_include("' + raw + b'")\n#endif',
            "has_angle": b"#if __has_include(<" + raw + b">)\n#endif",
            "next": b'  /* c */ # include_next "' + raw + b'"',
            "junk": b"int x = 1; // #include \x00\xfe " + raw,
        }[kind])
    return b"\n".join(lines) + b"\n"


def model_reachable(top: Path, files: dict, source_directives: list) -> set[str]:
    """The files NVRTC can read, by the documented rule, computed independently of the scanner:
    quoted names search the includer's directory, then the roots; angled names the roots only.
    Every directive counts (no #if evaluation), every existing candidate is a dependency."""
    roots = [top / "root0", top / "root1"]
    reachable: set[str] = set()
    todo = [(top / "main", source_directives)]
    while todo:
        includer_dir, directives = todo.pop()
        for kind, name in directives:
            if kind == "junk" or not name or "\0" in name:
                continue
            dirs = ([includer_dir] if kind in ("quote", "has_quote", "next") else []) + roots
            for d in dirs:
                path = os.path.normpath(os.path.join(str(d), name))
                if os.path.isfile(path) and path not in reachable:
                    reachable.add(path)
                    todo.append((Path(os.path.dirname(path)), _read_directives(path)))
    return reachable


def _read_directives(path: str) -> list[tuple[str, str]]:
    return [(d.kind if d.kind != "next" else "quote", d.name) for d in _includes._directives(Path(path).read_bytes())
            if d.kind != "opaque"]


@settings(max_examples=40, deadline=None)
@example({("root0", "\udcff.h"): []}, [("quote", "\udcff.h")], None)  # was decoded with "replace": missed
@example({("root0", "a.h"): [("quote", "a\0b.h")]}, [("angle", "a.h")], None)  # was a bare ValueError
@given(FILES, st.lists(DIRECTIVE, min_size=1, max_size=4), st.data())
def test_the_scan_never_misses_a_file_nvrtc_can_read(files, source_directives, data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        top = Path(tmp)
        for loc in LOCATIONS:
            (top / loc / "sub").mkdir(parents=True)
        for (loc, name), directives in files.items():
            (top / loc / name).write_bytes(render(directives))
        roots = (str(top / "root0"), str(top / "root1"))
        text = render(source_directives).decode("utf-8", "surrogateescape")
        name = str(top / "main" / "k.cu")
        deps = _includes.scan_dependencies(text, name, roots)
        expected = model_reachable(top, files, source_directives)
        assert expected <= set(deps.files)
        assert _includes.scan_dependencies(text, name, roots).digest == deps.digest
        if expected:  # a reachable file edited (different content) must change the digest
            victim = min(expected) if data is None else data.draw(st.sampled_from(sorted(expected)))
            with open(victim, "ab") as f:
                f.write(b"// edited\n")
            _includes._file_cache.clear()
            assert _includes.scan_dependencies(text, name, roots).digest != deps.digest


@FUZZ
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200), st.binary(max_size=200))
def test_the_scan_takes_any_source_and_any_header_bytes(text, header) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "h.cuh").write_bytes(header)
        source = text + '\n#include "h.cuh"\n#include <h.cuh>\n'
        deps = _includes.scan_dependencies(source, os.path.join(tmp, "k.cu"), (tmp,))
        assert os.path.join(tmp, "h.cuh") in deps.files and deps.unchanged() in (True, False)


# ---------------------------------------------------------------------------------------------
# The persistent-cache reader

@lru_cache(maxsize=1)
def real_program() -> mc.CompiledProgram:
    source = mc.cuda_kernel('extern "C" __global__ void k(int* o) { o[0] = 1; }\n', "fuzz.cu")
    return mc.compile_program(source, ARCH)


def frame(meta: bytes, image: bytes, arch: str = ARCH, nvrtc: tuple[int, int] = NVRTC, key: str = KEY) -> bytes:
    payload = struct.pack("<I", len(meta)) + meta + image
    header = struct.pack("<8sIII16s32sQ", _persistent.MAGIC, _persistent.FORMAT_VERSION, nvrtc[0], nvrtc[1],
                         arch.encode(), bytes.fromhex(key), len(payload))
    return header + hashlib.sha256(header + payload).digest() + payload


def decode(data: bytes, expect: _persistent.EntryExpectation | None = None) -> mc.CompiledProgram | None:
    """The program, or None after an EntryError; anything else escapes and fails the test."""
    try:
        return _persistent.decode_entry(data, KEY, ARCH, NVRTC, expect)
    except _persistent.EntryError:
        return None


def valid_entry(program: mc.CompiledProgram | None = None) -> bytes:
    return _persistent.encode_entry(KEY, ARCH, NVRTC, program or real_program())


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_are_rejected(data) -> None:
    assert decode(data) is None
    assert decode(valid_entry()[:108] + data) is None or data == valid_entry()[108:]


@FUZZ
@given(st.data())
def test_truncated_and_bit_flipped_entries_are_rejected(data) -> None:
    entry = valid_entry()
    assert decode(entry) is not None
    cut = data.draw(st.integers(0, len(entry) - 1))
    assert decode(entry[:cut]) is None
    bit = data.draw(st.integers(0, len(entry) * 8 - 1))
    flipped = bytearray(entry)
    flipped[bit // 8] ^= 1 << (bit % 8)
    assert decode(bytes(flipped)) is None


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
                    | st.text(max_size=6), lambda kids: st.lists(kids, max_size=3)
                    | st.dictionaries(st.text(max_size=4), kids, max_size=3), max_leaves=8)
META = st.fixed_dictionaries(
    {},
    optional={
        "arch": st.one_of(st.sampled_from([ARCH, "sm_80", "", "sm_90\0"]), JSON),
        "output": st.one_of(st.sampled_from(["cubin", "ptx", "", "fatbin"]), JSON),
        "log": st.one_of(st.text(max_size=10), JSON),
        "nvrtc_version": st.one_of(st.just(list(NVRTC)), st.lists(st.integers(-2, 2**32), max_size=3), JSON),
        "abi": st.one_of(st.sampled_from(["c", "numba", "", "c\0"]), JSON),
        "symbols": st.one_of(st.just([]), st.lists(st.lists(st.sampled_from(["k", "_Z1kv", "", "k\0"]), max_size=3),
                                                  max_size=2), JSON),
        "extra": JSON,
    })
IMAGES = st.one_of(st.just(b"\x7fELF" + bytes(60)), st.just(b".version 9.0\n\0"), st.binary(max_size=40),
                   st.binary(max_size=20).map(lambda b: b"\x7fELF" + b), st.binary(max_size=20).map(lambda b: b + b"\0"))


@settings(max_examples=150, deadline=None)
@given(META, IMAGES, st.sampled_from(["json", "deep", "not an object"]))
def test_crafted_checksummed_entries_decode_only_to_what_they_say(meta, image, shape) -> None:
    if shape == "json":
        raw = json.dumps(meta).encode()
    elif shape == "deep":
        raw = b'{"log": ' + b"[" * 20_000 + b"]" * 20_000 + b"}"
    else:
        raw = json.dumps([meta]).encode()
    cuda_c = _persistent.EntryExpectation("cubin", "c", NVRTC, ())
    for expect in (None, cuda_c):
        program = decode(frame(raw, image), expect)
        if program is None:
            continue
        # It passed: it must be exactly what was written, and agree with the header and the request.
        assert shape == "json" and set(meta) == {"arch", "output", "log", "nvrtc_version", "abi", "symbols"}
        assert program.arch == meta["arch"] == ARCH and program.output == meta["output"] in ("cubin", "ptx")
        assert program.log == meta["log"] and program.abi == meta["abi"] and program.abi and "\0" not in program.abi
        assert list(program.nvrtc_version) == meta["nvrtc_version"]
        assert [list(s) for s in program.symbols] == meta["symbols"] and program.image == image
        assert image.startswith(b"\x7fELF") if program.output == "cubin" else image.index(b"\0") == len(image) - 1
        if expect is cuda_c:
            assert (program.output, program.abi, program.nvrtc_version, program.symbols) == ("cubin", "c", NVRTC, ())


@settings(max_examples=30, deadline=None)
@given(st.one_of(st.binary(max_size=200), META.map(lambda m: frame(json.dumps(m).encode(), b"\x7fELF" + bytes(8)))))
def test_a_cache_directory_entry_is_a_hit_or_a_counted_miss_never_an_error(data) -> None:
    program = real_program()
    source = mc.cuda_kernel('extern "C" __global__ void k(int* o) { o[0] = 1; }\n', "fuzz.cu")
    with tempfile.TemporaryDirectory() as tmp:
        compiler = mc.OfflineCompiler(ARCH, mc.CompilerConfig(cache_directory=tmp))
        key = compiler.cache_key(source)
        path = Path(tmp, key + _persistent.SUFFIX)
        path.write_bytes(data)
        assert compiler.compile(source) == program  # a hit can only be the same program
        s = compiler.cache_stats()
        assert (s.persistent_hits, s.compilations, s.persistent_failures) == (0, 1, 1)
        assert _persistent.decode_entry(path.read_bytes(), key, ARCH, mc.nvrtc_version()) == program


# ---------------------------------------------------------------------------------------------
# Source names, file paths and include roots

PATHISH = st.text(alphabet=st.sampled_from(["a", ".", "/", "\0", "\n", "\r", "\udcff", "\u00e9", " ", '"', "\\"]),
                  max_size=10)


@FUZZ
@example("k.cu", "/tmp\0x")  # relative_to with NUL was a bare ValueError from open()
@example("\udcff.cu", None)
@given(PATHISH, st.one_of(st.none(), PATHISH))
def test_file_sources_take_any_path_text_or_refuse_it_by_name(path, relative_to) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "a").write_text("// a kernel\n")
        try:
            source = mc.cuda_kernel_file(path, relative_to=tmp if relative_to is None else os.path.join(tmp, relative_to))
        except mc.ContractError as exc:
            assert exc.argument in ("path", "relative_to")
            return
        assert source.name.encode() and os.path.isfile(source.name) and source.text == "// a kernel\n"


@FUZZ
@given(PATHISH)
def test_program_names_and_include_roots_are_checked_by_name(text) -> None:
    try:
        source = mc.cuda_kernel('extern "C" __global__ void k() {}\n', text)
    except mc.ContractError as exc:
        assert exc.argument == "name"
    else:
        assert source.name.encode() and "\0" not in source.name
    try:
        config = mc.CompilerConfig(include_paths=(text,))
    except mc.ContractError as exc:
        assert exc.argument == "include_paths[0]"
    else:
        assert all(os.path.isdir(r) and r.encode() for r in config.include_paths)
