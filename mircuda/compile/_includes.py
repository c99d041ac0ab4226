"""The files a CUDA C compile can read from its include roots, and a fingerprint of their contents.

NVRTC 13.0 has no dependency output (``-M``, ``-MD``, ``--dependency-output`` are refused as unknown
options), so mircuda finds the dependencies itself with a conservative scan of ``#include`` and
``__has_include`` directives that follows NVRTC's search rule, measured on NVRTC 13.0:

- ``#include "p"`` in file F: the directory of F first (for the main source: the directory of the
  program name, which for a name without one, e.g. an inline source, is the working directory),
  then each include root in order. There is no search of the includers' directories further up.
- ``#include <p>``: each include root in order.
- Then the toolkit header directories (cudart's and CCCL's, which mircuda always passes to NVRTC
  after the user's roots), searched and fingerprinted like the roots; what is found nowhere comes
  from NVRTC's built-in headers, which the NVRTC version covers. The toolkit's wheels are versioned
  apart from NVRTC (``nvidia-cuda-cccl`` 13.0.85 with ``nvidia-cuda-nvrtc`` 13.0.88), so a source
  with any include directive also gets :func:`toolkit_fingerprint` in its digest.

Every candidate path is recorded: those that exist are read, hashed (SHA-256) and scanned in turn;
for those that do not, the signature of the nearest existing ancestor directory is recorded (its
mtime changes when an entry is created in it), so creating a candidate — which would shadow a later
one — is noticed, at one check per directory rather than per absent name. The scan over-approximates:
it ignores ``#if`` and takes every existing candidate, not only the first, so it may depend on more
files than the compile reads, never fewer. An include it cannot resolve statically
(``#include MACRO``) makes it fall back to every file under every include root and under a
file-backed source's own directory (recursively; names starting with ``.`` and ``__pycache__`` are
skipped; an inline source's working directory is not walked), plus those directories' own metadata so
an added file is noticed; the toolkit directories are never walked (1,700+ files), their
fingerprint stands for what the scan cannot follow (e.g. Thrust's computed includes). File names
are the bytes the directive holds (a name that is not UTF-8 is the same path for ``os.stat``); a
name holding NUL names no file and is skipped (NVRTC rejects that line). Not seen: a directive split
by a backslash-newline or spelled with the ``%:`` digraph.

Revalidation: :meth:`IncludeDependencies.unchanged` stats every recorded path and compares
``(mtime_ns, ctime_ns, size, inode, device)`` with what was recorded: about 0.5-1 µs per path (measured
on a 2-core VM: 6.7 µs for 6 paths). A typical source needs one path per header read plus about one
per include root: a source including two headers of one root and ``<cuda_fp16.h>``, with two roots,
needs 4. Contents are re-hashed only for files whose signature changed, and changes that alter no
content (``touch``, an editor's swap file appearing in a root) cost only that rescan: the key is made
of contents, not signatures. A file modified less than :data:`RACY_SECONDS` before it was hashed is
"racy" (a second write within the file system's timestamp granularity would keep its signature), so it
is re-read on every lookup until it is older.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import stat
import threading
import time
from dataclasses import dataclass

__all__ = ["RACY_SECONDS", "TOOLKIT_DISTRIBUTIONS", "IncludeDependencies", "ToolkitFingerprint", "combine_dependencies",
           "scan_dependencies",
           "toolkit_fingerprint"]

RACY_SECONDS = 2.0
"""Files changed less than this long before they were hashed are re-hashed on every lookup. Two
seconds covers the timestamp granularity of common file systems (1 ns-10 ms; FAT: 2 s)."""

_RACY_NS = int(RACY_SECONDS * 1e9)

# A directive, optionally after block comments (NVRTC accepts `/* c */ #include "x"`): the regex
# finds `#include`, _LINE_PREFIX checks what precedes it on its line. (One regex anchored at every
# line start, `^[ \t]*(?:/\*.*?\*/[ \t]*)*#...` with re.M, finds the same directives but took 26 ms
# for the 1.6 MB that <cuda_fp16.h> and <cuda_bf16.h> read, against 2 ms for this.)
_INCLUDE = re.compile(rb'#[ \t]*include(_next)?[ \t]*(?:"([^"\n]*)"|<([^>\n]*)>|([^\s]))')
_LINE_PREFIX = re.compile(rb'[ \t]*(?:/\*.*?\*/[ \t]*)*')
_HAS_INCLUDE = re.compile(rb'__has_include(_next)?[ \t]*\([ \t]*(?:"([^"\n]*)"|<([^>\n]*)>|([^\s)]))')

Signature = tuple[int, int, int, int, int]
"""``(st_mtime_ns, st_ctime_ns, st_size, st_ino, st_dev)`` of a path."""


def _signature(st: os.stat_result) -> Signature:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_dev)


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


@dataclass(frozen=True)
class _Directive:
    kind: str  # "quote", "angle", "next" (include_next: any root), "opaque" (computed: #include MACRO)
    name: str


@dataclass(frozen=True)
class _FileInfo:
    signature: Signature
    digest: str
    directives: tuple[_Directive, ...]


_file_cache: dict[str, _FileInfo] = {}
_file_cache_lock = threading.Lock()


def _directives(data: bytes) -> tuple[_Directive, ...]:
    out: list[_Directive] = []
    for regex in (_INCLUDE, _HAS_INCLUDE):
        for m in regex.finditer(data):
            if regex is _INCLUDE:
                start = m.start()
                if not _LINE_PREFIX.fullmatch(data, data.rfind(b"\n", 0, start) + 1, start):
                    continue
            nxt, quoted, angled, other = m.groups()
            if other is not None:
                out.append(_Directive("opaque", ""))
            elif nxt:
                out.append(_Directive("next", _name(quoted if quoted is not None else angled)))
            elif quoted is not None:
                out.append(_Directive("quote", _name(quoted)))
            else:
                out.append(_Directive("angle", _name(angled)))
    return tuple(out)


def _name(raw: bytes) -> str:
    """A directive's file name as the path NVRTC opens: the bytes as written (``surrogateescape``
    keeps a name that is not UTF-8 the same path for ``os.stat``). A name holding NUL names no file
    (NVRTC rejects the line: "invalid character in input line"), so it is dropped."""
    return "" if b"\0" in raw else raw.decode("utf-8", "surrogateescape")


def _read_file(path: str, st: os.stat_result) -> tuple[_FileInfo, bool]:
    """The digest and directives of a regular file, from the cache while its signature holds.

    Returns ``(info, racy)``; a racy file's info is not cached.
    """
    sig = _signature(st)
    cached = _file_cache.get(path)
    if cached is not None and cached.signature == sig:
        return cached, False
    now = time.time_ns()
    # O_NONBLOCK and the fstat check: a FIFO swapped in after the caller's stat must not block the scan.
    with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as f:
        after = os.fstat(f.fileno())
        if not stat.S_ISREG(after.st_mode):
            raise OSError(f"{path} is no longer a regular file")
        data = f.read()
        after = os.fstat(f.fileno())
    info = _FileInfo(_signature(after), hashlib.sha256(data).hexdigest(), _directives(data))
    racy = now - max(after.st_mtime_ns, after.st_ctime_ns) < _RACY_NS or info.signature != sig
    if not racy:
        with _file_cache_lock:
            _file_cache[path] = info
    return info, racy


@dataclass(frozen=True)
class IncludeDependencies:
    """What one CUDA C source can read from its include roots.

    Attributes:
        digest: SHA-256 (hex) over every dependency's path and content hash, in discovery order;
            part of the cache key.
        files: the files read (absolute, or relative to the working directory for an inline
            source's quoted includes), in discovery order.
        checks: ``(path, signature)`` for every path whose change may change the key: the files
            read and the directories where absent candidates would appear (None: nothing exists
            there up to the file system root).
        racy: some file changed too recently for its signature to be trusted (see module doc).
        opaque: a computed include made the scan fall back to every file under the roots.
        special: include candidates that exist but are neither regular files nor directories
            (a FIFO, socket or device): NVRTC would block opening them, so compiling refuses them.
    """

    digest: str
    files: tuple[str, ...]
    checks: tuple[tuple[str, Signature | None], ...]
    racy: bool
    opaque: bool
    special: tuple[str, ...] = ()

    @property
    def needs_revalidation(self) -> bool:
        """False when nothing can change the key (no recorded path, nothing racy)."""
        return bool(self.checks) or self.racy

    def unchanged(self) -> bool:
        """Whether every recorded path still has its recorded signature (one ``stat`` each, ~1 µs),
        and no file was racy: then :attr:`digest` is still the fingerprint of the current files."""
        if self.racy:
            return False
        signature = _signature
        for path, sig in self.checks:
            try:
                st = os.stat(path)
            except OSError:
                if sig is not None:
                    return False
                continue
            if sig != signature(st):
                return False
        return True


class _Scan:
    def __init__(self, roots: tuple[str, ...]) -> None:
        self.roots = roots
        self.checks: dict[str, Signature | None] = {}
        self.seen: set[str] = set()
        self.files: list[str] = []
        self.special: list[str] = []
        self.hasher = hashlib.sha256()
        self.racy = False
        self.opaque = False
        self.directed = False  # some directive was seen: the include roots can matter

    def candidates(self, directive: _Directive, includer_dir: str) -> list[str]:
        name = directive.name
        if not name:
            return []
        if os.path.isabs(name):
            return [os.path.normpath(name)]
        dirs = ([includer_dir] if directive.kind in ("quote", "next") else []) + list(self.roots)
        return [os.path.normpath(os.path.join(d, name)) if d else os.path.normpath(name) for d in dirs]

    def visit(self, path: str) -> None:
        """Record ``path``; if it is a regular file not seen before, hash and scan it."""
        if path in self.seen:
            return
        self.seen.add(path)
        st = _stat(path)
        if st is None:
            self.absent(path)
            return
        self.checks[path] = _signature(st)
        if not stat.S_ISREG(st.st_mode):
            if not stat.S_ISDIR(st.st_mode):
                self.special.append(path)
            return
        try:
            info, racy = _read_file(path, st)
        except OSError:  # unreadable now; a change of its permissions changes its ctime
            self.hasher.update(f"{path}\0unreadable\n".encode("utf-8", "surrogateescape"))
            return
        self.checks[path] = info.signature
        self.racy |= racy
        self.files.append(path)
        self.hasher.update(f"{path}\0{info.digest}\n".encode("utf-8", "surrogateescape"))
        self.follow(info.directives, os.path.dirname(path))

    def absent(self, path: str) -> None:
        """Record an absent candidate by its nearest existing ancestor directory, whose mtime changes
        when the candidate (or a directory on the way to it) is created: one check for all the
        absent candidates of a directory."""
        d = os.path.dirname(path)
        while True:
            key = d or "."
            if key in self.checks:
                return
            st = _stat(key)
            if st is not None or not d or os.path.dirname(d) == d:
                self.checks[key] = None if st is None else _signature(st)
                return
            d = os.path.dirname(d)

    def follow(self, directives: tuple[_Directive, ...], includer_dir: str) -> None:
        self.directed |= bool(directives)
        for d in directives:
            if d.kind == "opaque":
                self.opaque = True
                continue
            for candidate in self.candidates(d, includer_dir):
                self.visit(candidate)

    def walk(self, top: str) -> None:
        """Record every file and directory under ``top`` (after a computed include)."""
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(n for n in dirnames if not n.startswith(".") and n != "__pycache__")
            st = _stat(dirpath)
            self.checks[dirpath] = None if st is None else _signature(st)
            for n in sorted(filenames):
                if not n.startswith("."):
                    self.visit(os.path.join(dirpath, n))


def scan_dependencies(text: str, name: str, roots: tuple[str, ...],
                      toolkit_roots: tuple[str, ...] = ()) -> IncludeDependencies:
    """Find and fingerprint what a CUDA C source named ``name`` can include from ``roots`` and the
    toolkit's header directories.

    Args:
        text: the source text.
        name: the NVRTC program name; its directory is searched first for quoted includes (the
            working directory when it has none).
        roots: the include roots, absolute, in search order.
        toolkit_roots: the toolkit header directories NVRTC searches after ``roots`` (cudart, CCCL).
            Headers found there are fingerprinted like any other; a source with any include
            directive also gets :func:`toolkit_fingerprint` of these roots (their paths, the versions
            of the wheels that ship them, a listing of each root). A computed include never walks
            them (thousands of files): the fingerprint stands for what the scan cannot follow.

    Returns:
        The dependencies; costs one read and SHA-256 per file whose signature changed since the
        last scan in this process, plus one ``stat`` per candidate path.
    """
    scan = _Scan(tuple(dict.fromkeys(roots + toolkit_roots)))
    main_dir = os.path.dirname(name)
    scan.follow(_directives(text.encode("utf-8", "surrogateescape")), main_dir)
    if scan.opaque:
        for top in dict.fromkeys(roots + ((main_dir,) if os.path.isabs(main_dir) else ())):
            scan.walk(top)
    if toolkit_roots and scan.directed:
        toolkit = toolkit_fingerprint(toolkit_roots)
        scan.hasher.update(f"toolkit\0{toolkit.digest}\n".encode())
        for path, sig in toolkit.checks:
            scan.checks.setdefault(path, sig)
    return IncludeDependencies(scan.hasher.hexdigest(), tuple(scan.files), tuple(scan.checks.items()),
                               scan.racy, scan.opaque, tuple(scan.special))


def combine_dependencies(scans: list[IncludeDependencies]) -> IncludeDependencies:
    """The dependencies of several translation units linked into one module, as one: the digest
    covers each unit's digest in order; a recorded path is checked once, with its first signature."""
    digest = hashlib.sha256("\0".join(d.digest for d in scans).encode()).hexdigest()
    checks: dict[str, Signature | None] = {}
    for d in scans:
        for path, sig in d.checks:
            checks.setdefault(path, sig)
    return IncludeDependencies(digest, tuple(f for d in scans for f in d.files), tuple(checks.items()),
                               any(d.racy for d in scans), any(d.opaque for d in scans),
                               tuple(p for d in scans for p in d.special))


TOOLKIT_DISTRIBUTIONS = ("cuda-toolkit", "nvidia-cuda-cccl", "nvidia-cuda-runtime", "nvidia-cuda-nvrtc")
"""The wheels that ship the toolkit headers NVRTC sees (CCCL, cudart) and NVRTC's built-in headers;
they are versioned apart from each other, so each version is in the fingerprint."""


@dataclass(frozen=True)
class ToolkitFingerprint:
    """What stands for the toolkit header directories in a cache key.

    Attributes:
        digest: SHA-256 (hex) over the roots' paths, ``name=version`` of each of
            :data:`TOOLKIT_DISTRIBUTIONS` (``absent`` when not installed) and, per root, the sorted
            names of its entries. A header the include scan follows is fingerprinted by content
            besides; one it cannot follow (reached by a computed include) and edited in place
            without a version change is not seen.
        checks: ``(path, signature)`` of the roots and of the directories holding the wheels'
            metadata (installing, upgrading or removing a wheel changes them); while they hold, the
            digest is reused without asking ``importlib.metadata`` again (~3 ms).
    """

    digest: str
    checks: tuple[tuple[str, Signature | None], ...]

    def unchanged(self) -> bool:
        for path, sig in self.checks:
            st = _stat(path)
            if (None if st is None else _signature(st)) != sig:
                return False
        return True


_toolkit_cache: dict[tuple[str, ...], ToolkitFingerprint] = {}


def toolkit_fingerprint(roots: tuple[str, ...]) -> ToolkitFingerprint:
    """The fingerprint of the toolkit header directories ``roots`` (see :class:`ToolkitFingerprint`).

    Cached per ``roots`` while their signatures and those of the wheels' directories hold; costs one
    ``stat`` per recorded path then. Never raises: an unreadable root is fingerprinted as such.
    """
    cached = _toolkit_cache.get(roots)
    if cached is not None and cached.unchanged():
        return cached
    h = hashlib.sha256()
    checks: dict[str, Signature | None] = {}
    for root in roots:
        st = _stat(root)
        checks[root] = None if st is None else _signature(st)
    for dist_name in TOOLKIT_DISTRIBUTIONS:
        try:
            dist = importlib.metadata.distribution(dist_name)
            version = dist.version
            where = str(dist.locate_file(""))
        except Exception:
            h.update(f"{dist_name}=absent\n".encode())
            continue
        h.update(f"{dist_name}={version}\n".encode("utf-8", "surrogateescape"))
        st = _stat(where)
        checks.setdefault(where, None if st is None else _signature(st))
    for root in roots:
        h.update(f"root\0{root}\n".encode("utf-8", "surrogateescape"))
        h.update(_listing(root))
    fingerprint = ToolkitFingerprint(h.hexdigest(), tuple(checks.items()))
    with _file_cache_lock:
        _toolkit_cache[roots] = fingerprint
    return fingerprint


def _listing(root: str) -> bytes:
    """The names directly in ``root`` (``name/`` for directories): what the root's signature
    guards (its mtime changes when a name is added, removed or renamed)."""
    try:
        with os.scandir(root) as it:
            entries = []
            for e in it:
                try:
                    entries.append(f"{e.name}/" if e.is_dir() else e.name)
                except OSError:
                    entries.append(f"{e.name}?")
    except OSError as exc:
        return f"unlisted {exc.errno}\n".encode()
    return "\n".join(sorted(entries)).encode("utf-8", "surrogateescape") + b"\n"
