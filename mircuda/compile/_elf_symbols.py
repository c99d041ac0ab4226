"""The global symbols a relocatable CUBIN (ELF64) defines: read from its symbol table so that a link
can refuse a symbol two units define before nvJitLink sees it (nvJitLink 13.x links such objects,
returns success and writes its "Multiple definition" error to the process's stderr only)."""

from __future__ import annotations

import struct

__all__ = ["global_definitions"]

_ELF_MAGIC = b"\x7fELF"
_SHT_SYMTAB = 2
_STB_GLOBAL = 1
_SHN_UNDEF = 0
_SHN_LORESERVE = 0xFF00  # SHN_ABS, SHN_COMMON ...: not a definition in a section of this object


def global_definitions(image: bytes) -> tuple[str, ...]:
    """Names of the STB_GLOBAL symbols ``image`` defines (in a section of its own), in table order.

    Weak symbols (C++ inline functions, template instantiations) are left out: a link may hold
    several. Anything that is not a little-endian ELF64 image (PTX, LTO-IR) gives ``()``, as does a
    truncated table (the linker reports that itself).
    """
    if len(image) < 64 or image[:4] != _ELF_MAGIC or image[4] != 2 or image[5] != 1:
        return ()
    try:
        shoff, = struct.unpack_from("<Q", image, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
        names: list[str] = []
        for i in range(shnum):
            _, sh_type, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", image, shoff + i * shentsize)
            if sh_type != _SHT_SYMTAB or entsize < 24:
                continue
            _, _, _, _, str_offset, str_size, _, _, _, _ = struct.unpack_from(
                "<IIQQQQIIQQ", image, shoff + link * shentsize)
            strings = image[str_offset:str_offset + str_size]
            for at in range(offset, offset + size - entsize + 1, entsize):
                name, info, _, shndx = struct.unpack_from("<IBBH", image, at)
                if info >> 4 == _STB_GLOBAL and _SHN_UNDEF < shndx < _SHN_LORESERVE:
                    end = strings.find(b"\0", name)
                    names.append(strings[name:end if end >= 0 else None].decode(errors="replace"))
        return tuple(names)
    except struct.error:
        return ()
