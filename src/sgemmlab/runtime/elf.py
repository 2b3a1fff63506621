"""The few facts of a cubin's ELF container the runtime reads: its sections, by name.

Used by runtime/compiler.py (registers and shared memory from .nv.info and .nv.shared) and
runtime/sassedit.py (the kernel's .text, which the operand-order pass rewrites in place).
"""

from __future__ import annotations

import struct


def section_heads(elf: bytes) -> dict[str, tuple[int, int, int]]:
    """Section name -> (file offset, size, type) of an ELF64 little-endian file (a cubin)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not an ELF64 little-endian file")
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQ", elf, shoff + i * entsize) for i in range(count)]
    names_at = heads[names_index][4]

    def name(offset: int) -> str:
        start = names_at + offset
        return elf[start:elf.index(b"\0", start)].decode()

    return {name(h[0]): (h[4], h[5], h[1]) for h in heads}


def sections(elf: bytes) -> dict[str, tuple[bytes, int]]:
    """Section name -> (contents, size) of a cubin; a NOBITS section (shared memory) has a
    size and no contents."""
    return {name: (b"" if kind == 8 else elf[at:at + size], size)
            for name, (at, size, kind) in section_heads(elf).items()}


def section(elf: bytes, name: str) -> tuple[int, bytes]:
    """(file offset, contents) of one section of a cubin; KeyError when it has none."""
    at, size, kind = section_heads(elf)[name]
    return at, b"" if kind == 8 else elf[at:at + size]
