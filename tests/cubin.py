"""Reading the target SM out of a CUBIN's ELF header, so tests check what NVRTC built rather than
echo the requested ``arch``."""

from __future__ import annotations

import struct

EM_CUDA = 190
"""``e_machine`` of NVIDIA CUDA ELF images (the ELF machine registry; LLVM's ``ELF.h``)."""


def cubin_sm(image: bytes) -> int:
    """The SM number (``90`` for sm_90/sm_90a, ``120`` for sm_120f) a CUBIN was built for, from its ELF
    header's ``e_flags``.

    Layout by ``EI_ABIVERSION`` (byte 8): version 8 (NVRTC/nvcc 13) keeps the SM in bits 8-15
    (observed: ``0x6005a04`` for sm_90, ``0x6007802`` for sm_120f, ``0x6007902`` for sm_121); earlier
    versions keep it in bits 0-7 (LLVM's ``EF_CUDA_SM*`` values, e.g. ``0x5a`` for sm_90).
    """
    assert image[:4] == b"\x7fELF", "not an ELF image"
    assert image[4] == 2 and image[5] == 1, "not a 64-bit little-endian ELF image"
    (machine,) = struct.unpack_from("<H", image, 18)
    assert machine == EM_CUDA, f"e_machine {machine} is not EM_CUDA"
    (flags,) = struct.unpack_from("<I", image, 48)
    return (flags >> 8) & 0xFF if image[8] >= 8 else flags & 0xFF


def arch_sm(arch: str) -> int:
    """``"sm_90a"`` -> ``90``, ``"sm_120f"`` -> ``120``."""
    return int(arch.removeprefix("sm_").rstrip("af"))


def elf_sections(image: bytes) -> list[str]:
    """The section names of a 64-bit little-endian ELF image (a CUBIN's SASS sits in ``.text.<kernel>``)."""
    (shoff,) = struct.unpack_from("<Q", image, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 58)
    headers = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    return [_c_string(image, names_offset + h[0]) for h in headers]


def elf_symbols(image: bytes) -> dict[str, tuple[int, bool]]:
    """``.symtab`` of a 64-bit little-endian ELF image: name -> (``STT_*`` type, defined), where 2 is
    ``STT_FUNC`` and defined means a section index other than ``SHN_UNDEF``."""
    (shoff,) = struct.unpack_from("<Q", image, 40)
    shentsize, shnum = struct.unpack_from("<HH", image, 58)
    headers = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    out: dict[str, tuple[int, bool]] = {}
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in headers:
        if kind != 2:  # SHT_SYMTAB
            continue
        strings = headers[link][4]
        for at in range(offset, offset + size, entsize or 24):
            st_name, st_info, _other, shndx = struct.unpack_from("<IBBH", image, at)
            if st_name:
                out[_c_string(image, strings + st_name)] = (st_info & 0xF, shndx != 0)
    return out


def _c_string(image: bytes, at: int) -> str:
    return image[at:image.index(b"\0", at)].decode()
