"""Edits of a cubin's machine code, checked against nvdisasm (issue 19).

runtime/sassedit.py reads and writes the fields of sm_90 FFMAs (registers, reuse flags,
control bits) and holds the operand-order pass. This module adds what needs the
disassembler, so it stays in the lab: `verify`, the round trip that reads every FFMA back
through nvdisasm and compares it with what the bits say.
"""

from __future__ import annotations

import re

from ..runtime.sassedit import (  # noqa: F401  (the editing API, for the lab's callers)
    FIELDS,
    REUSE_BIT,
    Ffma,
    get,
    is_ffma,
    put,
    replace,
    text,
)

_FFMA_TEXT = re.compile(r"/\*([0-9a-f]+)\*/\s+FFMA\s+R(\d+),\s*R(\d+)(\.reuse)?,\s*"
                        r"R(\d+)(\.reuse)?,\s*R(\d+)(\.reuse)?\s*;")


def read_back(cubin: bytes) -> dict[int, tuple[int, int, int, int, str]]:
    """Byte address -> (rd, ra, rb, rc, reuse slots) of every FFMA nvdisasm prints with four
    plain registers."""
    from .sass import disassemble

    out = {}
    for m in _FFMA_TEXT.finditer(disassemble(cubin)):
        reuse = "".join(s for s, flag in zip("abc", (m.group(4), m.group(6), m.group(8)))
                        if flag)
        out[int(m.group(1), 16)] = (int(m.group(2)), int(m.group(3)), int(m.group(5)),
                                    int(m.group(7)), reuse)
    return out


def verify(cubin: bytes, kernel: str, indices=None) -> int:
    """Round trip: each FFMA of the kernel's text (or those at `indices`), decoded here from
    its bits, must be what nvdisasm prints at that address. Returns the FFMAs checked;
    raises ValueError on a mismatch. FFMAs nvdisasm prints with operands this module does
    not edit (a negation, RZ, a constant) are skipped unless named in `indices`."""
    t = text(cubin, kernel)
    printed = read_back(cubin)
    wanted = set(indices) if indices is not None else None
    checked = 0
    for index, word in enumerate(t.words):
        if not is_ffma(word) or (wanted is not None and index not in wanted):
            continue
        if wanted is None and 16 * index not in printed:
            continue
        reuse = "".join(s for s, bit in REUSE_BIT.items() if get(word, "reuse") & bit)
        mine = (get(word, "rd"), get(word, "ra"), get(word, "rb"), get(word, "rc"), reuse)
        if printed.get(16 * index) != mine:
            raise ValueError(f"instruction {index}: the bits say FFMA {mine}, nvdisasm "
                             f"prints {printed.get(16 * index)}")
        checked += 1
    if wanted is not None and checked != len(wanted):
        raise ValueError(f"{len(wanted) - checked} of the edited instructions are no FFMA")
    return checked
