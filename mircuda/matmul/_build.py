"""Building and finding ``libmircuda_cutlass.so`` (the CMake + Ninja project ``mircuda/cutlass_build/``).

The project is package data: an installed wheel carries it, and :func:`project_dir` finds it with
:mod:`importlib.resources`, so ``python -m mircuda build-cutlass [--arch 90a,120f] [--jobs N]`` works
from a source checkout and from ``pip install mircuda[cutlass]`` alike. It configures and builds the
library into a cache directory keyed by the project's sources, the CUTLASS version, the nvcc version and
the architecture list; :func:`find_library` finds it there again (or takes ``MIRCUDA_CUTLASS_LIBRARY``).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# CutlassNotFound is re-exported here, where it was defined before it moved to mircuda.errors.
from ..errors import ContractError, CutlassError, CutlassNotFound

__all__ = ["LIBRARY_NAME", "BUILD_COMMAND", "CutlassNotFound", "parse_archs", "default_archs", "Toolchain",
           "find_toolchain", "project_dir", "source_digest", "cache_key", "cache_root", "build", "find_library",
           "FAMILIES", "FAMILY_GROUPS", "check_families_build", "family_archs", "parse_families"]

LIBRARY_NAME = "libmircuda_cutlass.so"
BUILD_COMMAND = "python -m mircuda build-cutlass"
CUTLASS_REQUIREMENT = "nvidia-cutlass==4.2.0.0"
SUPPORTED_ARCHS = ("90a", "120f")
"""SASS targets of the library: sm_90a (Hopper: TMA, WGMMA) and sm_120f (the SM12x family: RTX 50,
GB10 at cc 12.1, which an sm_120a binary does not load on)."""
STUB_ARCHS = ("90", "120", "121")
"""Targets that build but turn CUTLASS 3.x kernel bodies into a printf stub ('Arch conditional MMA
instruction used without targeting appropriate compute capability')."""


FAMILIES = ("SM90_COOP", "SM90_PINGPONG", "SM90_SWAP", "SM90_SWAP64", "SM90_SWAP128", "SM90_COOP128_STREAMK",
            "SM90_PINGPONG128", "SM90_COOP192", "SM90_COOP192_STREAMK", "SM90_COOP144", "SM90_COOP144_STREAMK",
            "SM90_SWAP96", "SM90_SWAP64X96", "SM90_COOP176",
            "SM90_SWAP192", "SM90_SWAP64X32", "SM90_SWAP64X48", "SM90_SWAP64X64", "SM90_PINGPONG64X96",
            "SM90_PINGPONG128X96", "SM90_PINGPONG128X112", "SM90_SWAP64X32_C4X1",
            "SM90_PINGPONG128X144", "SM90_PINGPONG128X176",
            "SM80_DECODE", "SM80_WIDE", "SM80_BULK", "SIMT",
            "SM90_FP8_COOP", "SM90_FP8_PINGPONG", "SM120_FP8", "SM120_NVFP4_COOP", "SM120_NVFP4_PINGPONG",
            "SM120_NVFP4_GROUPED_COOP", "SM120_NVFP4_GROUPED_PINGPONG", "SM90_GROUPED_COOP", "SM90_GROUPED_PINGPONG",
            "SM90_FP8_EXP_C2X1", "SM90_FP8_EXP_C1X1", "SM90_FP8_EXP_SCHED", "SM90_FP8_EXP_EPI64", "SM90_FP8_EXP_NOC",
            "SM90_FP8_EXP_NOC_EPI64", "SM90_FP8_EXP_SWAP128", "SM90_FP8_EXP_SWAP160", "SM90_FP8_EXP_SWAP192",
            "SM90_FP8_EXP_PINGPONG_SFAMN")
"""The CMake project's kernel families (``MIRCUDA_FAMILIES``): one translation unit per family and element
type pair, or one per family for the blockwise FP8 ones (E4M3 -> BF16; SM90_* for 90a, SM120_FP8 for
120f) and the block-scaled NVFP4 ones (NVFP4 x NVFP4 -> BF16, single and grouped, 120f only); the others
for every arch of the build."""
FAMILY_GROUPS = {"FP8": ("SM90_FP8_COOP", "SM90_FP8_PINGPONG", "SM120_FP8"),
                 "FP4": ("SM120_NVFP4_COOP", "SM120_NVFP4_PINGPONG"),
                 "FP4_GROUPED": ("SM120_NVFP4_GROUPED_COOP", "SM120_NVFP4_GROUPED_PINGPONG"),
                 "GROUPED_DENSE": ("SM90_GROUPED_COOP", "SM90_GROUPED_PINGPONG"),
                 "FP8_EXP": ("SM90_FP8_EXP_C2X1", "SM90_FP8_EXP_C1X1", "SM90_FP8_EXP_SCHED", "SM90_FP8_EXP_EPI64",
                             "SM90_FP8_EXP_NOC", "SM90_FP8_EXP_NOC_EPI64", "SM90_FP8_EXP_SWAP128",
                             "SM90_FP8_EXP_SWAP160", "SM90_FP8_EXP_SWAP192", "SM90_FP8_EXP_PINGPONG_SFAMN")}
"""Names that stand for several families: ``FP8`` is the blockwise FP8 families of the build's archs,
``FP4`` the block-scaled NVFP4 families (sm_120f), ``FP4_GROUPED`` the grouped block-scaled NVFP4 ones
(sm_120f), ``GROUPED_DENSE`` the grouped BF16 ones (SM90_GROUPED_*, sm_90a: the MoE decode+grouped path),
``FP8_EXP`` the experimental variants of the cooperative FP8 kernel and its swapped forms (SM90_FP8_EXP_*,
sm_90a: family ``sm90_blockwise_experimental``, measured by name, never chosen by a plan; not in a default
build)."""


def parse_families(text: str) -> tuple[str, ...]:
    """Parse a family list such as ``"FP8"`` or ``"sm90_fp8_coop,SIMT"`` (case-insensitive).

    Raises:
        ContractError: a name is none of :data:`FAMILIES` or :data:`FAMILY_GROUPS`.
    """
    out: list[str] = []
    for raw in re.split(r"[,;\s]+", text.strip()) if isinstance(text, str) else [repr(text)]:
        if not raw:
            continue
        name = raw.upper()
        if name not in FAMILIES and name not in FAMILY_GROUPS:
            raise ContractError("families", f"names among {', '.join(FAMILIES + tuple(FAMILY_GROUPS))}", repr(raw))
        if name not in out:
            out.append(name)
    return tuple(out)


def family_archs(family: str) -> tuple[str, ...] | None:
    """The SASS targets a family of :data:`FAMILIES` is compiled for (CMakeLists.txt's rule): SM90_* only for
    ``90a``, SM120_* only for ``120f``; None for the others (every arch of the build)."""
    return ("90a",) if family.startswith("SM90_") else ("120f",) if family.startswith("SM120_") else None


def check_families_build(families: tuple[str, ...], archs: tuple[str, ...]) -> None:
    """Refuse a family selection (parsed, :func:`parse_families`) that would build no kernel for ``archs``: a
    group whose members all belong to other archs (``FP4`` for 90a, ``FP8_EXP`` for 120f) configures and links
    a library without kernels. A single family named without its arch is CMake's to refuse (it names both).

    Raises:
        ContractError: naming ``families``.
    """
    members = [m for f in families for m in FAMILY_GROUPS.get(f, (f,))]
    if members and not any(family_archs(m) is None or set(family_archs(m) or ()) & set(archs) for m in members):
        raise ContractError("families", f"at least one family compiled for {', '.join(archs)} (SM90_* and the "
                                        "FP8_EXP, GROUPED_DENSE groups are 90a only; SM120_*, FP4 and FP4_GROUPED "
                                        "120f only)", ", ".join(families))


PROJECT = "cutlass_build"
"""The CMake project's directory inside the ``mircuda`` package (package data)."""


def project_dir() -> Path:
    """The library's CMake project, ``mircuda/cutlass_build/`` of the installed package (or of the
    source checkout mircuda runs from), found with :func:`importlib.resources.files`.

    Raises:
        CutlassNotFound: this installation does not carry the project as files on disk (a zipped
            package, or a wheel built without its package data).
    """
    root = importlib.resources.files("mircuda").joinpath(PROJECT)
    # CMake needs a real directory: a zip-imported package has only a Traversable.
    if not isinstance(root, Path) or not (root / "CMakeLists.txt").is_file():
        raise CutlassNotFound(f"this mircuda installation has no CMake project of the CUTLASS library "
                              f"({root}/CMakeLists.txt is missing): reinstall mircuda from a wheel or sdist "
                              f"that carries its package data (pip install 'mircuda[cutlass]'), or set "
                              f"MIRCUDA_CUTLASS_LIBRARY to a prebuilt {LIBRARY_NAME}")
    return root


def parse_archs(text: str) -> tuple[str, ...]:
    """Parse an architecture list such as ``"90a,120f"`` or ``"sm_90a; sm_120f"``.

    Raises:
        ContractError: an entry is a stub-producing plain target (``sm_90``, ``sm_120``), is not one of
            :data:`SUPPORTED_ARCHS`, or the list is empty.
    """
    if not isinstance(text, str):
        raise ContractError("arch", "a comma-separated list such as '90a,120f'", repr(text))
    out: list[str] = []
    for raw in re.split(r"[,;\s]+", text.strip()):
        if not raw:
            continue
        arch = raw.lower().removeprefix("sm_").removeprefix("compute_")
        if arch in STUB_ARCHS:
            raise ContractError("arch", f"one of {', '.join(SUPPORTED_ARCHS)}", repr(raw),
                                f"plain sm_{arch} compiles CUTLASS 3.x kernels to a printf stub (their bodies need "
                                f"the arch-specific target): use {'90a' if arch == '90' else '120f'}")
        if arch not in SUPPORTED_ARCHS:
            raise ContractError("arch", f"one of {', '.join(SUPPORTED_ARCHS)}", repr(raw))
        if arch not in out:
            out.append(arch)
    if not out:
        raise ContractError("arch", "at least one of 90a, 120f", repr(text))
    return tuple(out)


def default_archs() -> tuple[str, ...]:
    """``MIRCUDA_CUDA_ARCH`` when set, else ``("90a", "120f")``.

    Raises:
        ContractError: naming ``MIRCUDA_CUDA_ARCH`` when its value is not an architecture list.
    """
    env = os.environ.get("MIRCUDA_CUDA_ARCH")
    if not env:
        return SUPPORTED_ARCHS
    try:
        return parse_archs(env)
    except ContractError as exc:
        head = f"argument {exc.argument!r}: expected {exc.expected}, received {exc.received}"
        hint = str(exc)[len(head) + 2:] if str(exc).startswith(head + ". ") else ""
        raise ContractError("MIRCUDA_CUDA_ARCH", exc.expected, exc.received, hint) from None


@dataclass(frozen=True)
class Toolchain:
    """What a build needs: CUTLASS's header directories and version, nvcc, cmake and ninja."""

    cutlass_include: Path
    cutlass_util_include: Path
    cutlass_version: str
    nvcc: Path
    nvcc_version: str
    cmake: Path | None
    ninja: Path | None


def _cutlass_headers() -> tuple[Path, Path, str]:
    env = os.environ.get("MIRCUDA_CUTLASS_INCLUDE")
    if env:
        include = Path(env)
        util = Path(os.environ.get("MIRCUDA_CUTLASS_UTIL_INCLUDE", include.parent / "tools" / "util" / "include"))
    else:
        spec = importlib.util.find_spec("cutlass_library")
        if spec is None or not spec.submodule_search_locations:
            raise CutlassNotFound(f"the CUTLASS headers are not installed: pip install '{CUTLASS_REQUIREMENT}' "
                                  "(or set MIRCUDA_CUTLASS_INCLUDE to CUTLASS's include directory)")
        root = Path(next(iter(spec.submodule_search_locations))) / "source"
        include, util = root / "include", root / "tools" / "util" / "include"
    version_h = include / "cutlass" / "version.h"
    if not version_h.is_file():
        where = f"MIRCUDA_CUTLASS_INCLUDE={env}: " if env else ""
        raise CutlassNotFound(f"{where}{include} holds no cutlass/version.h: pip install '{CUTLASS_REQUIREMENT}'"
                              + (" or point MIRCUDA_CUTLASS_INCLUDE at CUTLASS's include directory" if env else ""))
    text = version_h.read_text()
    parts = [re.search(rf"#define CUTLASS_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    version = ".".join(m.group(1) if m else "?" for m in parts)
    return include, util, version


def _find_nvcc() -> Path:
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if found:
        candidates.append(Path(found))
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        candidates += sorted(Path(base).glob("cu*/bin/nvcc")) + [Path(base) / "cuda_nvcc" / "bin" / "nvcc"]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise CutlassNotFound("nvcc was not found: install the CUDA toolkit (set CUDA_HOME) or "
                          "pip install 'nvidia-cuda-nvcc'")


def _nvcc_version(nvcc: Path) -> str:
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"release [\d.]+, V([\d.]+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"


def _tool(name: str) -> Path | None:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    return Path(found) if found else None


def find_toolchain() -> Toolchain:
    """Locate CUTLASS's headers, nvcc, cmake and ninja.

    Raises:
        CutlassNotFound: the headers or nvcc are missing (cmake and ninja are checked by :func:`build`).
    """
    include, util, version = _cutlass_headers()
    nvcc = _find_nvcc()
    return Toolchain(include, util, version, nvcc, _nvcc_version(nvcc), _tool("cmake"), _tool("ninja"))


def source_digest(project: Path | None = None) -> str:
    """SHA-256 of the build project's files (CMakeLists.txt, include/, src/), their paths relative to the
    project and their contents; part of the library's cache key.

    Raises:
        CutlassNotFound: ``project`` is None and :func:`project_dir` finds no project.
    """
    project = project or project_dir()
    h = hashlib.sha256()
    files = sorted(p for p in project.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for p in files:
        h.update(str(p.relative_to(project)).encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()


def cache_key(digest: str, cutlass_version: str, nvcc_version: str, archs: tuple[str, ...],
              families: tuple[str, ...] = ()) -> str:
    """The cache directory name of one build: a hash of everything that changes the library."""
    text = json.dumps({"sources": digest, "cutlass": cutlass_version, "nvcc": nvcc_version, "archs": list(archs),
                       "families": list(families)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def cache_root() -> Path:
    """``$MIRCUDA_CACHE_DIR/cutlass``, else ``$XDG_CACHE_HOME/mircuda/cutlass`` (``~/.cache``)."""
    if os.environ.get("MIRCUDA_CACHE_DIR"):
        return Path(os.environ["MIRCUDA_CACHE_DIR"]) / "cutlass"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "mircuda" / "cutlass"


def configure_command(toolchain: Toolchain, build_dir: Path, archs: tuple[str, ...],
                      families: tuple[str, ...] = (), project: Path | None = None) -> list[str]:
    """The ``cmake`` configure command line of a build."""
    cmake = str(toolchain.cmake or "cmake")
    cmd = [cmake, "-S", str(project or project_dir()), "-B", str(build_dir), "-G", "Ninja",
           "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_CUDA_COMPILER={toolchain.nvcc}",
           f"-DMIRCUDA_CUTLASS_INCLUDE={toolchain.cutlass_include}",
           f"-DMIRCUDA_CUTLASS_UTIL_INCLUDE={toolchain.cutlass_util_include}",
           f"-DMIRCUDA_ARCHS={';'.join(archs)}"]
    if toolchain.ninja:
        cmd.append(f"-DCMAKE_MAKE_PROGRAM={toolchain.ninja}")
    if families:
        cmd.append(f"-DMIRCUDA_FAMILIES={';'.join(families)}")
    return cmd


def _progress(done: int, total: int, started: float, label: str) -> None:
    width = 30
    filled = width * done // max(total, 1)
    elapsed = time.monotonic() - started
    line = f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {elapsed:6.0f} s {label[:60]:<60}"
    sys.stderr.write(line)
    sys.stderr.flush()


def build(archs: tuple[str, ...] | None = None, jobs: int | None = None, root: Path | None = None,
          families: tuple[str, ...] = (), progress: bool = True) -> Path:
    """Configure and build the library (or find it already built); return the path of the ``.so``.

    Raises:
        CutlassNotFound: headers, nvcc, cmake, ninja or the CMake project are missing.
        CutlassError: configuring or building failed (``.log`` and the message end with CMake's or the
            compiler's output).
    """
    archs = default_archs() if archs is None else archs
    families = parse_families(",".join(families)) if families else ()
    check_families_build(families, archs)
    tc = find_toolchain()
    if tc.cmake is None or tc.ninja is None:
        raise CutlassNotFound("building the CUTLASS library needs cmake and ninja: pip install cmake ninja")
    project = project_dir()
    digest = source_digest(project)
    key = cache_key(digest, tc.cutlass_version, tc.nvcc_version, archs, families)
    out_dir = (root or cache_root()) / key
    library = out_dir / LIBRARY_NAME
    if library.is_file():
        if progress:
            print(f"up to date: {library}")
        return library
    build_dir = out_dir / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    cfg = subprocess.run(configure_command(tc, build_dir, archs, families, project), capture_output=True, text=True)
    if cfg.returncode:
        raise CutlassError("configuring the CUTLASS library failed:", call="cmake configure",
                           log=f"{cfg.stdout[-4000:]}\n{cfg.stderr[-4000:]}")
    cmd = [str(tc.cmake), "--build", str(build_dir)] + (["-j", str(jobs)] if jobs else [])
    started = time.monotonic()
    log: list[str] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert proc.stdout is not None
    for line in proc.stdout:
        log.append(line)
        m = re.match(r"\[(\d+)/(\d+)\]\s*(.*)", line)
        if m and progress:
            _progress(int(m.group(1)), int(m.group(2)), started, m.group(3).split("/")[-1])
    code = proc.wait()
    if progress:
        sys.stderr.write("\n")
    if code:
        raise CutlassError("building the CUTLASS library failed:", call="cmake --build", log="".join(log)[-8000:])
    built = build_dir / LIBRARY_NAME
    shutil.copy2(built, library)
    (out_dir / "build-info.json").write_text(json.dumps({
        "archs": list(archs), "families": list(families), "cutlass": tc.cutlass_version, "nvcc": tc.nvcc_version,
        "sources": digest, "seconds": round(time.monotonic() - started, 1)}, indent=2))
    if progress:
        print(f"built {library} in {time.monotonic() - started:.0f} s")
    return library


def expected_library(archs: tuple[str, ...] | None = None, root: Path | None = None) -> Path:
    """Where :func:`build` puts the library for these archs with the toolchain found now."""
    archs = default_archs() if archs is None else archs
    tc = find_toolchain()
    return (root or cache_root()) / cache_key(source_digest(), tc.cutlass_version, tc.nvcc_version, archs) / LIBRARY_NAME


def find_library() -> Path:
    """``MIRCUDA_CUTLASS_LIBRARY`` when set, else the cached build for the default archs.

    Raises:
        CutlassNotFound: with the command that builds it.
    """
    env = os.environ.get("MIRCUDA_CUTLASS_LIBRARY")
    if env:
        path = Path(env)
        if not path.is_file():
            raise CutlassNotFound(f"MIRCUDA_CUTLASS_LIBRARY={env} is not a file")
        return path
    try:
        path = expected_library()
    except CutlassNotFound as exc:
        raise CutlassNotFound(f"the CUTLASS library is not built and cannot be: {exc}. Or point "
                              f"MIRCUDA_CUTLASS_LIBRARY at a prebuilt {LIBRARY_NAME}") from None
    if not path.is_file():
        raise CutlassNotFound(f"the CUTLASS library is not built (looked for {path}): run `{BUILD_COMMAND}` "
                              f"(or set MIRCUDA_CUTLASS_LIBRARY to a prebuilt {LIBRARY_NAME})")
    return path
