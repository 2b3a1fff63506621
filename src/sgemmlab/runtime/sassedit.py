"""The machine code of a cubin, edited: sm_90 FFMA fields, and the operand-order pass.

The operand probe measured how Hopper feeds FFMA its operands (bench/probes/operands.py,
docs/operands-h200.md):
the register file has two banks, even and odd register numbers, each giving one 32-bit
operand a cycle to a scheduler; a register an instruction reads twice is read once; an
operand the previous FFMA flagged `.reuse` in the same slot comes from the reuse cache and
costs no read. An FFMA that reads three registers therefore needs two cycles of one bank,
and a run of them cannot issue every cycle. `reorder` is the lever that table points to: a
pass over the compiled cubin that reorders each run of independent FFMAs so each reads as
few registers per bank as the run allows, then sets the reuse flags to match.

An sm_90 instruction is 128 bits, little-endian. The fields used here, as nvdisasm's `-hex`
output shows them for FFMA R, R, R, R and `nvdisasm -b SM90` confirms bit by bit
(tests/test_sassedit.py flips each and reads it back):

    bits   0-11  opcode (0x223: FFMA with three register sources)
    bits  12-15  guard predicate (7: PT, always)
    bits  16-23  Rd      bits 24-31  Ra      bits 32-39  Rb      bits 64-71  Rc
    bits 105-108 stall: cycles before this warp's next instruction may issue
    bit  109     yield
    bits 110-112 write barrier set (7: none)   bits 113-115 read barrier set (7: none)
    bits 116-121 wait mask: the barriers this instruction waits on
    bits 122-125 reuse flags of the source slots a, b, c (and a fourth FFMA leaves clear)

The control bits (105-125) are public knowledge from the Volta and Turing microbenchmark
papers and the open assemblers; nvdisasm prints only the reuse flags of them, so the stall
field was checked on the GPU (a body whose FFMAs say stall 2 takes 2.05 cycles an FFMA).
"""

from __future__ import annotations

from dataclasses import dataclass

FIELDS = {  # name: (first bit, width)
    "opcode": (0, 12), "pred": (12, 4), "rd": (16, 8), "ra": (24, 8), "rb": (32, 8),
    "rc": (64, 8), "stall": (105, 4), "yield": (109, 1), "wbar": (110, 3),
    "rbar": (113, 3), "wait": (116, 6), "reuse": (122, 4),
}
FFMA_RRR = 0x223
REUSE_BIT = {"a": 1, "b": 2, "c": 4}  # within the reuse field
SLOTS = (("a", "ra"), ("b", "rb"), ("c", "rc"))
RZ = 255
BANKS = 2  # register number mod 2 (measured: classes mod 4 of one parity behave alike)
NEAR = 12  # instructions either side of a run checked for a fixed-latency neighbour


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


def plain(word: int) -> bool:
    """An FFMA whose control bits ask for nothing: stall 1, no barrier set or waited on."""
    return (is_ffma(word) and get(word, "stall") == 1 and get(word, "wbar") == 7
            and get(word, "rbar") == 7 and get(word, "wait") == 0)


@dataclass(frozen=True)
class Text:
    """One kernel's code in a cubin: where it starts and its instructions as integers."""

    offset: int
    words: tuple[int, ...]


def text(cubin: bytes, kernel: str) -> Text:
    """The `.text.<kernel>` section of the cubin."""
    from .elf import section

    try:
        offset, data = section(cubin, f".text.{kernel}")
    except KeyError:
        raise ValueError(f"no .text.{kernel} section in the cubin") from None
    if len(data) % 16:
        raise ValueError(f".text.{kernel} is not whole 16-byte instructions")
    words = tuple(int.from_bytes(data[i:i + 16], "little") for i in range(0, len(data), 16))
    return Text(offset, words)


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


def reads(word: int, prev: int | None) -> set[int]:
    """The registers an FFMA takes from the register file after `prev` (the instruction
    before it): its sources, less RZ, less what prev's reuse flags cached in the slot."""
    out = set()
    for slot, name in SLOTS:
        reg = get(word, name)
        if reg == RZ:
            continue
        if prev is not None and is_ffma(prev) and get(prev, name) == reg and \
                get(prev, "reuse") & REUSE_BIT[slot]:
            continue
        out.add(reg)
    return out


def bank_reads(regs: set[int]) -> tuple[int, int]:
    """(even, odd): reads from each bank."""
    odd = sum(r % BANKS for r in regs)
    return len(regs) - odd, odd


def with_reuse(words: list[int]) -> list[int]:
    """The FFMAs' reuse flags set exactly where the next instruction is an FFMA reading the
    same register in the same slot, and the first does not write that register."""
    out = list(words)
    for i, w in enumerate(out):
        if not is_ffma(w):
            continue
        nxt = out[i + 1] if i + 1 < len(out) else None
        flags = 0
        if nxt is not None and is_ffma(nxt):
            for slot, name in SLOTS:
                reg = get(w, name)
                if reg != RZ and get(nxt, name) == reg and get(w, "rd") != reg:
                    flags |= REUSE_BIT[slot]
        out[i] = put(w, "reuse", flags)
    return out


def _fields(word: int) -> set[int]:
    """Every byte that could name a register in any instruction (a superset: a false hit
    only makes the pass keep an instruction where ptxas put it)."""
    return {get(word, n) for n in ("rd", "ra", "rb", "rc")}


def runs(words: list[int]) -> list[tuple[int, int]]:
    """(first, last) of each run: an FFMA followed by plain FFMAs, at least three long."""
    out, i = [], 0
    while i < len(words):
        if not is_ffma(words[i]):
            i += 1
            continue
        j = i
        while j + 1 < len(words) and plain(words[j + 1]):
            j += 1
        if j - i >= 2:
            out.append((i, j))
        i = j + 1
    return out


def _sources(word: int) -> set[int]:
    return {get(word, n) for n in ("ra", "rb", "rc")} - {RZ}


def _pinned(words: list[int], lo: int, hi: int) -> set[int]:
    """Indices of the run that keep their place: the first (it may wait on a load), and
    any FFMA a neighbour within NEAR may rely on by distance: one reading a register an
    instruction just before the run writes, or writing one an instruction just after it
    touches (a new place could bring the two closer than ptxas's stall counts allow)."""
    before = {get(w, "rd") for w in words[max(0, lo - NEAR):lo]}
    after = set().union(*(_fields(w) for w in words[hi + 1:hi + 1 + NEAR]))
    return {lo} | {i for i in range(lo + 1, hi + 1)
                   if _sources(words[i]) & before or get(words[i], "rd") in after}


def _depends(words: list[int], lo: int, hi: int) -> dict[int, list[tuple[int, int]]]:
    """For each FFMA of the run, the earlier ones it must follow and by how many places
    at least: a read of an earlier result keeps ptxas's distance; a write over what an
    earlier one reads or writes only has to come after it."""
    deps: dict[int, list[tuple[int, int]]] = {i: [] for i in range(lo, hi + 1)}
    for j in range(lo + 1, hi + 1):
        wj = words[j]
        for i in range(lo, j):
            wi = words[i]
            if get(wi, "rd") in _sources(wj):
                deps[j].append((i, j - i))  # read after write: the distance holds
            elif get(wj, "rd") in _sources(wi) | {get(wi, "rd")}:
                deps[j].append((i, 1))  # write after read or write: order only
    return deps


def _order(words: list[int], lo: int, hi: int) -> list[int] | None:
    """A new order of the run, list-scheduled: pinned FFMAs keep their places; each free
    place takes, of the FFMAs whose predecessors are placed far enough back, the one that
    costs the fewest cycles of the busier bank after the FFMA before it, then the fewest
    reads, then the earliest in ptxas's order. None when no FFMA fits a place."""
    pinned = _pinned(words, lo, hi)
    deps = _depends(words, lo, hi)
    at: dict[int, int] = {}  # original index -> new place
    free = [i for i in range(lo, hi + 1) if i not in pinned]
    order: list[int] = []
    for place in range(lo, hi + 1):
        if place in pinned:
            pick = place
        else:
            prev = words[order[-1]] if order else None
            ready = [i for i in free
                     if all(d in at and place - at[d] >= gap for d, gap in deps[i])]
            if not ready:
                return None
            pick = min(ready, key=lambda i: (
                *(_cost(words[i], prev) if prev is not None else (0, 0)), i))
            free.remove(pick)
        if not all(d in at and place - at[d] >= gap for d, gap in deps[pick]):
            return None  # a pinned FFMA whose predecessor has not come far enough back
        at[pick] = place
        order.append(pick)
    return order


def _cost(word: int, prev: int) -> tuple[int, int]:
    """(cycles of the busier bank, reads) for `word` right after `prev`, with prev's reuse
    flags as `with_reuse` will set them for that pair."""
    regs = reads(word, with_reuse([prev, word])[0])
    return max(bank_reads(regs)), len(regs)


def reorder(words: list[int]) -> list[int]:
    """The operand-order pass over a kernel's instructions: each run of FFMAs reordered
    (`_order`), the control bits staying with their places (inside a run all but the
    first are plain; the first keeps its place), then every FFMA's reuse flags set to
    match (`with_reuse`)."""
    out = list(words)
    mask = (1 << 105) - 1
    for lo, hi in runs(out):
        order = _order(out, lo, hi)
        if order is None:
            continue
        ctrl = [w & ~mask for w in out[lo:hi + 1]]
        out[lo:hi + 1] = [(out[i] & mask) | c for i, c in zip(order, ctrl)]
    return with_reuse(out)


def read_ahead(need: list[int], free: list[int]) -> tuple[int, list[int]]:
    """One instruction as the H200 reads its registers (docs/operands-h200.md, rule 5):
    `need` its reads per bank, `free` the slots per bank the instruction before it left
    free in its last cycle, which it may use for all but one of a bank's reads. Returns
    (its cycles, the slots it leaves free for the next one)."""
    own = [max(0, k - min(f, max(k - 1, 0))) for k, f in zip(need, free)]
    cycles = max(1, *own)
    return cycles, [1 if cycles - k >= 1 else 0 for k in own]


def operand_cycles(words: list[int]) -> dict:
    """The measured model applied to a body: per FFMA, the reads from each bank (after
    reuse), and the cycles they need three ways: one instruction at a time
    (`per_instruction`), pooled over the body (`pooled`: a lower bound), and as the H200
    does it (`lookahead`: `read_ahead`, instruction by instruction). Instructions other
    than FFMA are counted as reading nothing (an optimistic guess)."""
    even = odd = per = n = look = 0
    free = [1, 1]
    prev = None
    for w in words:
        need = list(bank_reads(reads(w, prev))) if is_ffma(w) else [0, 0]
        if is_ffma(w):
            even, odd, per, n = even + need[0], odd + need[1], per + max(*need, 1), n + 1
        cycles, free = read_ahead(need, free)
        look += cycles
        prev = w
    return {"ffma": n, "instructions": len(words), "even": even, "odd": odd,
            "per_instruction": per + len(words) - n, "pooled": max(even, odd, len(words)),
            "lookahead": look}


def order_cubin(cubin: bytes, kernel: str) -> bytes:
    """The cubin with `reorder` applied to `kernel`'s text (what rungs 22 and 23 run)."""
    words = list(text(cubin, kernel).words)
    new = reorder(words)
    return replace(cubin, kernel, {i: w for i, (v, w) in enumerate(zip(words, new)) if v != w})
