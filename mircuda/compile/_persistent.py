"""The persistent module cache: one self-describing, validated file per compiled program.

Entry layout (little-endian), one file ``<key>.mcm`` per key in the cache directory::

    offset  size  field
         0     8  magic b"MIRCUDA\\x1a"
         8     4  format version (1)
        12     4  NVRTC major of the compiling process
        16     4  NVRTC minor
        20    16  arch, ASCII, NUL-padded (e.g. "sm_90")
        36    32  the full cache key (SHA-256 digest)
        68     8  payload length in bytes
        76    32  SHA-256 of bytes [0, 76) followed by the payload
       108     -  payload: u32 length of a UTF-8 JSON object {arch, output, log, nvrtc_version,
                  abi, symbols}, the JSON, then the image (CUBIN, or PTX with its terminating NUL)

On read every field is checked against what the caller expects (magic, version, key, arch, NVRTC
version, exact length, checksum, JSON fields and types, the image's form) and the metadata against
the header and the request (:class:`EntryExpectation`: the metadata's arch is the header's, its
output the one asked for, a CUDA C entry has the ``"c"`` ABI, no symbol map and the header's NVRTC
version, and a CUBIN asked for with ``ptxas_verbose`` has ptxas' report in its log); an entry
that fails — including any failure of the reader itself, e.g. metadata nested too deeply for the
JSON parser — is a miss and is removed — only if it is still the file that was read — and the
caller rebuilds. Writes go to a temporary file in the same directory, are flushed and fsynced, and are moved into place with
``os.replace``: readers see the old entry or the new one, never a mix, and concurrent writers of
one key each install a complete entry (the last one stays). Temporary files older than an hour
(left by writers that crashed) are removed after a cache object's first write. Nothing here raises
for I/O: failures are returned, so a cache problem never fails a compile. There is no size limit or
eviction: remove the directory (or old entries) to reclaim space.

The checksum detects corruption, not tampering: the cache directory must be as trusted as code.
Payloads carry no pickle; a crafted entry can at worst give the driver a bad image, which the
compiler detects at load and rebuilds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import tempfile
import time
from dataclasses import dataclass

from ._nvrtc import CompiledProgram
from ._resources import has_ptxas_report

__all__ = ["FORMAT_VERSION", "MAGIC", "EntryError", "EntryExpectation", "PersistentCache", "decode_entry",
           "encode_entry"]

log = logging.getLogger("mircuda.compile")

MAGIC = b"MIRCUDA\x1a"
FORMAT_VERSION = 1
SUFFIX = ".mcm"
_HEADER = struct.Struct("<8sIII16s32sQ")  # everything the checksum covers before the payload
_CHECKSUM_SIZE = 32
HEADER_SIZE = _HEADER.size + _CHECKSUM_SIZE
MAX_ENTRY_BYTES = 1 << 30
STALE_TEMPORARY_S = 3600.0
_ELF = b"\x7fELF"


class EntryError(ValueError):
    """A persistent entry is corrupt or belongs to another key, arch or NVRTC version."""


@dataclass(frozen=True)
class EntryExpectation:
    """What the compiler asking for an entry knows the program must be; None: anything valid.

    Attributes:
        output: ``"cubin"`` or ``"ptx"``, from the compile options.
        abi: the launch ABI (``"c"`` for CUDA C sources).
        nvrtc_version: the program's ``(major, minor)`` (the compiler's NVRTC for CUDA C sources;
            other sources, e.g. Numba's, record the PTX release they produced).
        symbols: the symbol map (empty for CUDA C sources without name expressions, whose names are
            unmangled).
        symbol_names: the names the symbol map must map, in any order, when the map itself cannot be
            known before compiling (a CUDA C source's name expressions, lowered by NVRTC).
        ptxas_report: the log must hold ptxas' ``-v`` report (a CUBIN compiled with
            ``ptxas_verbose=True``): an entry without it, e.g. written by a version of mircuda that let
            NVRTC answer from the CUDA driver's compute cache, cannot give ``resource_usage()``.
    """

    output: str | None = None
    abi: str | None = None
    nvrtc_version: tuple[int, int] | None = None
    symbols: tuple[tuple[str, str], ...] | None = None
    symbol_names: frozenset[str] | None = None
    ptxas_report: bool = False


def encode_entry(key: str, arch: str, nvrtc: tuple[int, int], program: CompiledProgram) -> bytes:
    """Frame ``program`` as an entry for ``key`` (hex SHA-256), compiled for ``arch`` by ``nvrtc``.

    Raises:
        EntryError: the program could not be read back from the entry (e.g. an empty image or a
            field of the wrong type); ValueError, TypeError: its metadata is not JSON-serializable.
    """
    meta = json.dumps({"arch": program.arch, "output": program.output, "log": program.log,
                       "nvrtc_version": list(program.nvrtc_version), "abi": program.abi,
                       "symbols": [list(s) for s in program.symbols]}, separators=(",", ":")).encode()
    payload = struct.pack("<I", len(meta)) + meta + program.image
    arch_bytes = arch.encode("ascii")
    if len(arch_bytes) > 16:
        raise EntryError(f"arch {arch!r} is longer than 16 bytes")
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, nvrtc[0], nvrtc[1], arch_bytes, bytes.fromhex(key), len(payload))
    h = hashlib.sha256(header)
    h.update(payload)
    entry = header + h.digest() + payload
    decode_entry(entry, key, arch, nvrtc)  # never write what no reader would accept (EntryError)
    return entry


def decode_entry(data: bytes, key: str, arch: str, nvrtc: tuple[int, int],
                 expect: EntryExpectation | None = None) -> CompiledProgram:
    """Validate an entry against the expected ``key``, ``arch``, ``nvrtc`` and ``expect`` and return
    its program.

    Raises:
        EntryError: naming the first check that failed.
    """
    if len(data) < HEADER_SIZE:
        raise EntryError(f"truncated: {len(data)} bytes, shorter than the {HEADER_SIZE}-byte header")
    magic, version, major, minor, arch_bytes, key_bytes, length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise EntryError(f"not a mircuda entry (magic {magic!r})")
    if version != FORMAT_VERSION:
        raise EntryError(f"format version {version}, expected {FORMAT_VERSION}")
    if key_bytes != bytes.fromhex(key):
        raise EntryError(f"entry of key {key_bytes.hex()}, expected {key}")
    entry_arch = arch_bytes.rstrip(b"\0").decode("ascii", "replace")
    if entry_arch != arch:
        raise EntryError(f"entry for arch {entry_arch}, expected {arch}")
    if (major, minor) != tuple(nvrtc):
        raise EntryError(f"entry from NVRTC {major}.{minor}, expected {nvrtc[0]}.{nvrtc[1]}")
    if len(data) != HEADER_SIZE + length:
        raise EntryError(f"length {len(data)} bytes, the header says {HEADER_SIZE + length}")
    h = hashlib.sha256(memoryview(data)[:_HEADER.size])
    h.update(memoryview(data)[HEADER_SIZE:])
    if h.digest() != data[_HEADER.size:HEADER_SIZE]:
        raise EntryError("checksum mismatch")
    program = _decode_payload(memoryview(data)[HEADER_SIZE:])
    _check_agrees(program, arch, expect or EntryExpectation())
    return program


def _decode_payload(payload: memoryview) -> CompiledProgram:
    if len(payload) < 4:
        raise EntryError("payload shorter than its metadata length")
    (meta_len,) = struct.unpack_from("<I", payload)
    if 4 + meta_len > len(payload):
        raise EntryError("metadata longer than the payload")
    try:
        meta = json.loads(bytes(payload[4:4 + meta_len]))
        if not isinstance(meta, dict) or set(meta) != _META_FIELDS:
            raise EntryError(f"bad metadata: fields {sorted(meta) if isinstance(meta, dict) else type(meta).__name__}"
                             f", expected {sorted(_META_FIELDS)}")
        arch, output, text_log, abi = meta["arch"], meta["output"], meta["log"], meta["abi"]
        major, minor = meta["nvrtc_version"]
        symbols = tuple((a, b) for a, b in meta["symbols"])
    except EntryError:
        raise
    # RecursionError: metadata nested deeper than the parser's stack (a crafted entry).
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise EntryError(f"bad metadata: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not all(isinstance(v, str) for v in (arch, output, text_log, abi)) or not all(
            type(v) is int and 0 <= v < 1 << 31 for v in (major, minor)) or not all(
            isinstance(a, str) and isinstance(b, str) and _is_name(a) and _is_name(b) for a, b in symbols):
        raise EntryError("bad metadata: a field has the wrong type or range")
    if output not in ("cubin", "ptx"):
        raise EntryError(f"bad metadata: output {output!r}, expected 'cubin' or 'ptx'")
    if not _is_name(abi):
        raise EntryError(f"bad metadata: ABI {abi!r}")
    if len({a for a, _ in symbols}) != len(symbols):
        raise EntryError("bad metadata: a symbol mapped twice")
    image = bytes(payload[4 + meta_len:])
    if not image:
        raise EntryError("empty image")
    if output == "cubin" and not image.startswith(_ELF):
        raise EntryError("a CUBIN image that is not an ELF file")
    # The driver reads PTX up to its first NUL: one anywhere else would load a truncated module.
    if output == "ptx" and image.find(b"\0") != len(image) - 1:
        raise EntryError("a PTX image without exactly one NUL, its terminating one")
    return CompiledProgram(arch, output, image, text_log, (major, minor), abi, symbols)


_META_FIELDS = frozenset(("arch", "output", "log", "nvrtc_version", "abi", "symbols"))


def _is_name(text: str) -> bool:
    return bool(text) and "\0" not in text


def _check_agrees(program: CompiledProgram, arch: str, expect: EntryExpectation) -> None:
    """Refuse metadata that contradicts the header or the request."""
    if program.arch != arch:
        raise EntryError(f"metadata arch {program.arch!r}, the header says {arch!r}")
    for name in ("output", "abi", "nvrtc_version", "symbols"):
        wanted = getattr(expect, name)
        if wanted is not None and getattr(program, name) != wanted:
            raise EntryError(f"metadata {name} {getattr(program, name)!r}, expected {wanted!r}")
    if expect.symbol_names is not None and {a for a, _ in program.symbols} != expect.symbol_names:
        raise EntryError(f"metadata symbols map {sorted(a for a, _ in program.symbols)}, expected the name "
                         f"expressions {sorted(expect.symbol_names)}")
    if expect.ptxas_report and program.output == "cubin" and not has_ptxas_report(program.log):
        raise EntryError("a log without the ptxas report that ptxas_verbose=True asks for")


@dataclass(frozen=True)
class LoadResult:
    """What :meth:`PersistentCache.load` found.

    Attributes:
        program: the validated program, or None (miss or rejected entry).
        failure: why the read failed or the entry was rejected; None for a hit or a plain miss.
        token: identifies the file that was read, for :meth:`PersistentCache.discard`.
    """

    program: CompiledProgram | None
    failure: str | None = None
    token: tuple[int, int, int, int] | None = None


def _token(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)


class PersistentCache:
    """A directory of entries, one per key. Created lazily at the first write.

    Thread- and process-safe by construction (atomic replace, no locks); never raises for I/O.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._swept = False

    def path(self, key: str) -> str:
        """The entry file of ``key`` (hex SHA-256)."""
        return os.path.join(self.directory, key + SUFFIX)

    def load(self, key: str, arch: str, nvrtc: tuple[int, int],
             expect: EntryExpectation | None = None) -> LoadResult:
        """Read and validate the entry of ``key``; remove it if it is invalid. Never raises."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read(MAX_ENTRY_BYTES + 1)
        except FileNotFoundError:
            return LoadResult(None)
        except (OSError, ValueError, MemoryError) as exc:
            log.debug("persistent cache: cannot read %s: %s", path, exc)
            return LoadResult(None, f"read failed: {exc}")
        token = _token(st)
        try:
            return LoadResult(decode_entry(data, key, arch, nvrtc, expect), None, token)
        # Anything the reader raises means the entry cannot be trusted: a miss, never a failed
        # compile (EntryError is the expected kind; the rest would be a reader bug on crafted input).
        except Exception as exc:
            log.debug("persistent cache: rejected %s: %s", path, exc)
            self.discard(key, token)
            return LoadResult(None, f"invalid entry: {exc}", token)

    def discard(self, key: str, token: tuple[int, int, int, int] | None) -> bool:
        """Remove the entry of ``key`` if it is still the file identified by ``token`` (so that an
        entry another process has just rewritten survives). Returns whether a file was removed."""
        path = self.path(key)
        try:
            if token is not None and _token(os.stat(path)) != token:
                return False
            os.unlink(path)
            return True
        except OSError:
            return False

    def sweep_temporary_files(self, older_than_s: float = STALE_TEMPORARY_S) -> int:
        """Remove temporary files that writers which crashed left behind (older than
        ``older_than_s``; a live write takes milliseconds). Done once per cache object, after its
        first write. Returns how many were removed."""
        removed = 0
        try:
            names = [n for n in os.listdir(self.directory) if n.startswith(".tmp-")]
        except OSError:
            return 0
        limit = time.time() - older_than_s
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                if os.stat(path).st_mtime < limit:
                    os.unlink(path)
                    removed += 1
            except OSError:
                pass
        return removed

    def store(self, key: str, arch: str, nvrtc: tuple[int, int], program: CompiledProgram) -> str | None:
        """Write the entry of ``key`` atomically. Returns None on success, else why it failed."""
        tmp = None
        try:
            data = encode_entry(key, arch, nvrtc, program)
            os.makedirs(self.directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=self.directory)
            # mkstemp makes the file private (0600); entries are shared like any build output, so
            # give them the permissions the umask allows for a new file.
            os.fchmod(fd, 0o666 & ~_umask())
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path(key))
            tmp = None
            if not self._swept:
                self._swept = True
                self.sweep_temporary_files()
            return None
        # OSError: the directory; EntryError, ValueError, TypeError: a program that cannot be framed
        # (e.g. from a foreign ModuleSource). Whatever it is, the compile has its result: do not fail it.
        except Exception as exc:
            log.debug("persistent cache: cannot write %s: %s", self.path(key), exc)
            return f"write failed: {exc}"
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it: put it back at once
    os.umask(mask)
    return mask
