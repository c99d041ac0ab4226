"""Fat binaries: one image holding a CUBIN (or PTX) per target, built with nvFatbin.

``cuModuleLoadData`` takes a fatbin and picks the image for the device, so one file serves several
GPU generations. NVRTC compiles one target per program, so each target is compiled on its own (each
through the NVRTC entry point and the caches) and the images are combined here. nvFatbin ships as
the ``nvidia-nvfatbin`` wheel (``cuda.bindings.nvfatbin`` loads ``libnvfatbin.so``); without it,
:func:`build_fatbin` refuses with the install command.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..errors import ContractError, UnsupportedPlatform
from ._nvrtc import CompiledProgram

__all__ = ["build_fatbin", "nvfatbin_module"]


def nvfatbin_module() -> Any:
    """``cuda.bindings.nvfatbin`` with its library loaded.

    Raises:
        UnsupportedPlatform: the bindings or ``libnvfatbin`` cannot be loaded (the message says why
            and how to install it).
    """
    try:
        from cuda.bindings import nvfatbin

        nvfatbin.version()  # loads libnvfatbin: a missing library fails here, not in the middle of a build
    except Exception as exc:
        raise UnsupportedPlatform(
            f"several targets make a fatbin, which needs nvFatbin: {type(exc).__name__}: {str(exc).splitlines()[0]} "
            "(install it with: pip install nvidia-nvfatbin; or compile one --arch at a time)") from None
    return nvfatbin


def _target_number(arch: str) -> str:
    # nvFatbin takes the number after sm_/compute_ with its a/f suffix ("90", "90a", "120f").
    return arch.split("_", 1)[1]


def build_fatbin(programs: Sequence[CompiledProgram], identifier: str) -> bytes:
    """Combine CUBIN and PTX programs of distinct targets into one fatbin (nvFatbin).

    Args:
        programs: one compiled program per target (``CompiledProgram.arch`` all different).
        identifier: a name for the images inside (shown by ``cuobjdump``), e.g. the source's file name.

    Raises:
        ContractError: fewer than two programs, or two of the same target and output kind.
        UnsupportedPlatform: nvFatbin is not installed.
        CudaError-like ``nvFatbinError``: nvFatbin rejected an image (re-raised as ContractError
            naming the target).
    """
    seen = [(p.arch, p.output) for p in programs]
    if len(programs) < 2 or len(set(seen)) != len(seen):
        raise ContractError("arch", "two or more distinct targets for a fatbin", ", ".join(a for a, _ in seen))
    nvfatbin = nvfatbin_module()
    name = os.path.basename(identifier) or "mircuda"
    handle = nvfatbin.create([], 0)
    try:
        for program in programs:
            number = _target_number(program.arch)
            try:
                if program.output == "cubin":
                    nvfatbin.add_cubin(handle, program.image, len(program.image), number, name)
                else:
                    nvfatbin.add_ptx(handle, program.image, len(program.image), number, name, "")
            except nvfatbin.nvFatbinError as exc:
                raise ContractError("arch", "a target nvFatbin accepts", program.arch, str(exc)) from None
        size = nvfatbin.size(handle)
        buffer = bytearray(size)
        nvfatbin.get(handle, buffer)
        return bytes(buffer)
    finally:
        nvfatbin.destroy(handle)
