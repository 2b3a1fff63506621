"""Edit the machine code in a cubin: the register fields and control bits of sm_90 FFMAs.

The operand microbenchmarks (bench/operands.py, issue 19) need SASS whose registers, reuse
flags and stall counts the project chooses, not ptxas. ptxas compiles a plain body of FFMAs;
this module rewrites fields of those instructions in place and checks every edit by a round
trip through nvdisasm (`verify`): the patched cubin is disassembled and each edited
instruction must read back as intended.

An sm_90 instruction is 128 bits, stored little-endian. The fields used here, as nvdisasm's
`-hex` output shows them for FFMA R, R, R, R and as `nvdisasm -b SM90` confirms bit by bit
(tests/test_sasspatch.py flips each one and reads it back):

    bits   0-11  opcode (0x223: FFMA with three register sources)
    bits  12-15  guard predicate (7: PT, always)
    bits  16-23  Rd      bits 24-31  Ra      bits 32-39  Rb      bits 64-71  Rc
    bits 105-108 stall: cycles the scheduler waits before this warp's next instruction
    bit  109     yield
    bits 110-112 write barrier set (7: none)   bits 113-115 read barrier set (7: none)
    bits 116-121 wait mask: the barriers this instruction waits on
    bits 122-125 reuse flags of the source slots a, b, c (and a fourth, unused by FFMA)

The control bits (105-125) are public knowledge from the Volta and Turing microbenchmark
papers and the open assemblers; nvdisasm prints only the reuse flags of them, so the stall
field is checked on the GPU instead (a body with stall 2 must take 2 cycles an FFMA).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FIELDS = {  # name: (first bit, width)
    "opcode": (0, 12), "pred": (12, 4), "rd": (16, 8), "ra": (24, 8), "rb": (32, 8),
    "rc": (64, 8), "stall": (105, 4), "yield": (109, 1), "wbar": (110, 3),
    "rbar": (113, 3), "wait": (116, 6), "reuse": (122, 4),
}
FFMA_RRR = 0x223
REUSE_BIT = {"a": 1, "b": 2, "c": 4}  # within the reuse field
RZ = 255


def get(word: int, name: str) -> int:
    lo, width = FIELDS[name]
    return (word >> lo) & ((1 << width) - 1)


def put(word: int, name: str, value: int) -> int:
    lo, width = FIELDS[name]
    if not 0 <= value < 1 << width:
        raise ValueError(f"{name} = {value} does not fit in {width} bits")
    return (word & ~(((1 << width) - 1) << lo)) | (value << lo)


def is_ffma(word: int) -> bool:
    """FFMA Rd, Ra, Rb, Rc: three register sources, no predicate but PT."""
    return get(word, "opcode") == FFMA_RRR and get(word, "pred") == 7


@dataclass(frozen=True)
class Text:
    """One kernel's code in a cubin: where it starts and its instructions as integers."""

    offset: int
    words: tuple[int, ...]


def text(cubin: bytes, kernel: str) -> Text:
    """The `.text.<kernel>` section of the cubin (pyelftools reads the ELF)."""
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(cubin))
    sec = elf.get_section_by_name(f".text.{kernel}")
    if sec is None:
        raise ValueError(f"no .text.{kernel} section in the cubin")
    data = sec.data()
    if len(data) % 16:
        raise ValueError(f".text.{kernel} is not whole 16-byte instructions")
    words = tuple(int.from_bytes(data[i:i + 16], "little") for i in range(0, len(data), 16))
    return Text(sec["sh_offset"], words)


def replace(cubin: bytes, kernel: str, edits: dict[int, int]) -> bytes:
    """The cubin with instruction index -> new 128-bit word for each edit."""
    t = text(cubin, kernel)
    out = bytearray(cubin)
    for index, word in edits.items():
        if not 0 <= index < len(t.words):
            raise IndexError(f"instruction {index} is outside .text.{kernel}")
        at = t.offset + 16 * index
        out[at:at + 16] = word.to_bytes(16, "little")
    return bytes(out)


@dataclass(frozen=True)
class Ffma:
    """What one FFMA is to become (None: keep what is there)."""

    ra: int | None = None
    rb: int | None = None
    rc: int | None = None  # also Rd: an accumulator updates itself
    reuse: str | None = None  # the slots flagged: "", "a", "ab", "abc", ...
    stall: int | None = None

    def apply(self, word: int) -> int:
        for name, value in (("ra", self.ra), ("rb", self.rb), ("rc", self.rc),
                            ("rd", self.rc), ("stall", self.stall)):
            if value is not None:
                word = put(word, name, value)
        if self.reuse is not None:
            word = put(word, "reuse", sum(REUSE_BIT[s] for s in self.reuse))
        return word


_FFMA_TEXT = re.compile(r"/\*([0-9a-f]+)\*/\s+FFMA\s+R(\d+),\s*R(\d+)(\.reuse)?,\s*"
                        r"R(\d+)(\.reuse)?,\s*R(\d+)(\.reuse)?\s*;")


def read_back(cubin: bytes) -> dict[int, tuple[int, int, int, int, str]]:
    """Byte address -> (rd, ra, rb, rc, reuse slots) of every FFMA nvdisasm prints."""
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
