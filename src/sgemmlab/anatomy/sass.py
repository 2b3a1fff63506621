"""The machine code: disassemble a cubin, find its hot loop, count what it issues.

nvdisasm (pip install nvidia-cuda-nvdisasm, or a CUDA toolkit) turns the cubin into SASS.
The hot loop is the region between a backward branch and its target that holds the most
FFMAs (the smallest such region when several tie: the innermost), narrowed to the innermost
loop inside it that still holds at least half of them (a persistent kernel's k loop inside
its loop over tiles). Its instructions are
sorted into FFMA, shared loads and stores, global loads and stores, local memory (spills),
barriers, and overhead: integer, address and branch work that feeds no lane with a
multiply-add. Overhead per FFMA is the seed's 0.170 -> 0.075 metric (cuBLAS: 0.131).
bank_conflicts() counts the FFMAs whose operands share a register bank (a model: see there).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

_INSN = re.compile(r"/\*([0-9a-f]+)\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")
BRANCHES = ("BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "WARPSYNC")


class NoDisassembler(RuntimeError):
    """Neither nvdisasm nor cuobjdump was found."""


def find_nvdisasm() -> str | None:
    """nvdisasm from the pip wheel beside this Python, PATH, or /usr/local/cuda/bin."""
    candidates = [Path(sys.prefix) / "bin" / "nvdisasm"]
    try:
        import nvidia

        candidates += [Path(p) / sub / "bin" / "nvdisasm" for p in nvidia.__path__
                       for sub in ("cu13", "cuda_nvdisasm", "cu12")]
    except ImportError:
        pass
    candidates += [Path(p) for p in filter(None, [shutil.which("nvdisasm")])]
    candidates.append(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvdisasm")
    return next((str(p) for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


def disassemble(cubin: bytes) -> str:
    tool = find_nvdisasm()
    if tool is None:
        raise NoDisassembler("nvdisasm not found (pip install nvidia-cuda-nvdisasm): "
                             "SASS section skipped")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool, "-c", f.name], check=True, capture_output=True,
                              text=True, timeout=60).stdout


@dataclass(frozen=True)
class Insn:
    addr: int
    opcode: str  # with its modifiers: LDS.128, LDG.E.128.CONSTANT
    operands: str
    target: str | None  # branch label


def parse(text: str) -> tuple[list[Insn], dict[str, int]]:
    """Instructions in order, and label -> address of the instruction after it."""
    insns: list[Insn] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    for line in text.splitlines():
        if m := _LABEL.match(line):
            pending.append(m.group(1))
            continue
        if m := _INSN.search(line):
            addr = int(m.group(1), 16)
            for lab in pending:
                labels[lab] = addr
            pending = []
            t = _TARGET.search(m.group(4))
            insns.append(Insn(addr, m.group(3), m.group(4).strip(), t.group(1) if t else None))
    return insns, labels


def category(opcode: str) -> str:
    base = opcode.split(".")[0]
    if base in ("FFMA", "FFMA2"):
        return "FFMA"
    if base == "LDS":
        return "LDS"
    if base == "STS":
        return "STS"
    if base == "LDGSTS":
        return "LDGSTS"
    if base in ("LDG", "LD"):
        return "LDG"
    if base in ("STG", "ST"):
        return "STG"
    if base in ("LDL", "STL"):
        return "local"
    if base in ("BAR", "DEPBAR", "MEMBAR"):
        return "barrier"
    if base in ("NOP",):
        return "nop"
    if base in BRANCHES:
        return "branch"
    if base in ("FMUL", "FADD", "FMNMX", "FSEL", "FSETP", "HFMA2", "MUFU") and \
            ".MMA" not in opcode:
        return "float"
    return "integer/address"


OVERHEAD = ("integer/address", "branch", "float")


_REG = re.compile(r"^[-|!]*R(\d+)(\.reuse)?")


def _bank_reads(body: list[Insn], banks: int) -> list[list[int]]:
    """Per FFMA of `body`, the banks of the registers it takes from the register file."""
    cached: dict[int, int] = {}
    out = []
    for insn in body:
        if insn.opcode.split(".")[0] != "FFMA":
            cached = {}  # any other instruction in between: assume the cache is gone
            continue
        regs, keep = set(), {}
        for slot, operand in enumerate(insn.operands.split(",")[1:4]):
            m = _REG.match(operand.strip())
            if not m:
                continue  # an immediate, RZ or a constant-bank operand
            reg = int(m.group(1))
            if cached.get(slot) != reg:
                regs.add(reg)  # a register read twice is read once (measured)
            if m.group(2):
                keep[slot] = reg
        cached = keep
        out.append([r % banks for r in regs])
    return out


def bank_conflicts(body: list[Insn], banks: int = 2) -> int:
    """FFMAs of `body` that read two or three registers from one register bank.

    The rule as `sgemmlab operands` measured it on the H200 (docs/operands-h200.md): the
    register file has two banks, even and odd register numbers, each giving one 32-bit
    operand a cycle; a register an FFMA names twice is read once; an operand the previous
    FFMA flagged `.reuse` in the same slot comes from the reuse cache, not the banks. Such an
    FFMA needs two cycles of one bank (three for three reads); a read may go one
    instruction early, so it costs issue time unless the instruction before it left that
    bank a free slot (`bank_cycles`). Ncu shows the cost as dispatch stalls."""
    return sum(len(b) > len(set(b)) for b in _bank_reads(body, banks))


def bank_cycles(body: list[Insn], banks: int = 2) -> dict[str, int]:
    """The register banks' cycles over `body` under the measured rule: per instruction
    (each FFMA waits for its own reads), pooled (reads free to move anywhere: a lower
    bound), and `lookahead`, what the H200 does (docs/operands-h200.md, the window rows):
    an instruction may make reads in a bank slot the one before it left free, no earlier."""
    reads = _bank_reads(body, banks)
    per = sum(max([b.count(k) for k in range(banks)] + [1]) for b in reads)
    busiest = max(sum(b.count(k) for b in reads) for k in range(banks))
    # as the H200 does it (runtime/sassedit.read_ahead; other instructions read nothing)
    from ..runtime.sassedit import read_ahead

    look, free, it = 0, [1] * banks, iter(reads)
    for insn in body:
        b = next(it) if insn.opcode.split(".")[0] == "FFMA" else []
        cycles, free = read_ahead([b.count(k) for k in range(banks)], free)
        look += cycles
    return {"instructions": len(body), "ffma": len(reads),
            "per_instruction": per + len(body) - len(reads),
            "pooled": max(busiest, len(body)), "lookahead": look}


@dataclass
class LoopMix:
    start: int
    end: int
    counts: Counter = field(default_factory=Counter)  # category -> instructions
    opcodes: Counter = field(default_factory=Counter)  # full opcode -> instructions
    bank_conflicts: int = 0  # FFMAs with two operands in one register bank (a model)
    bank: dict = field(default_factory=dict)  # bank_cycles(): per instruction and pooled
    stalls: int | None = None  # stall_cycles(): the stall counts of the loop's control bits

    @property
    def total(self) -> int:
        return sum(v for k, v in self.counts.items() if k != "nop")

    @property
    def ffma(self) -> int:
        return self.counts["FFMA"]

    @property
    def ffma_share(self) -> float:
        return self.ffma / self.total if self.total else 0.0

    @property
    def overhead(self) -> int:
        return sum(self.counts[k] for k in OVERHEAD)

    @property
    def overhead_per_ffma(self) -> float:
        return self.overhead / self.ffma if self.ffma else float("nan")

    @property
    def instructions_per_ffma(self) -> float:
        return self.total / self.ffma if self.ffma else float("nan")

    def widths(self, cat: str) -> dict[str, int]:
        """For LDS, LDG, ...: instructions per access width in bits (32 when unsuffixed)."""
        out: Counter = Counter()
        for op, n in self.opcodes.items():
            if category(op) == cat:
                bits = next((p for p in op.split(".")[1:] if p in ("64", "128", "U8", "16")),
                            "32")
                out[bits] += n
        return dict(out)

    def to_dict(self) -> dict:
        return {"start": self.start, "end": self.end, "instructions": self.total,
                "ffma": self.ffma, "ffma_share": self.ffma_share,
                "overhead_per_ffma": self.overhead_per_ffma, "categories": dict(self.counts),
                "bank_conflicts": self.bank_conflicts, "bank_cycles": self.bank,
                "stall_cycles": self.stalls,
                "lds_widths": self.widths("LDS"), "ldg_widths": self.widths("LDG"),
                "opcodes": dict(self.opcodes)}


def hot_loop(insns: list[Insn], labels: dict[str, int]) -> LoopMix | None:
    """The loop with the most FFMAs (the smallest on a tie), narrowed to the innermost loop
    inside it that still holds at least a third of them: a persistent kernel (rung 14) wraps
    its k loop in a loop over work that also holds the epilogue's FFMAs, and the hot loop
    is the k loop, not the loop over tiles; rung 24 has two k loops in it, the steady one
    and the last steps', of 1024 FFMAs each, and the steady one is the smaller."""
    regions: list[tuple[int, int, int]] = []  # (FFMAs, first, last instruction index)
    addrs = [i.addr for i in insns]
    for br in insns:
        if br.opcode.split(".")[0] != "BRA" or br.target not in labels:
            continue
        start = labels[br.target]
        if start > br.addr:
            continue
        lo, hi = addrs.index(start), addrs.index(br.addr)
        regions.append((sum(category(i.opcode) == "FFMA" for i in insns[lo:hi + 1]), lo, hi))
    if not regions:
        return None
    most, lo, hi = max(regions, key=lambda r: (r[0], -(r[2] - r[1]), r[1], r[2]))
    if most == 0:
        return None
    inside = [r for r in regions if lo <= r[1] and r[2] <= hi and 3 * r[0] >= most]
    _, lo, hi = min(inside, key=lambda r: (r[2] - r[1], -r[0], r[1]))
    body = insns[lo:hi + 1]
    return LoopMix(body[0].addr, body[-1].addr, Counter(category(i.opcode) for i in body),
                   Counter(i.opcode for i in body), bank_conflicts(body), bank_cycles(body))


def whole_kernel(insns: list[Insn]) -> Counter:
    return Counter(category(i.opcode) for i in insns)


def stall_cycles(cubin: bytes, insns: list[Insn], loop: LoopMix) -> int | None:
    """The stall counts ptxas wrote into the loop's control bits, added up: the cycles one
    warp takes for one pass when nothing else holds it (the fixed latencies and issue
    spacing the compiler planned; scoreboard waits and the register banks come on top).
    None when the cubin's code is not one kernel's (the words cannot be matched)."""
    from ..runtime.elf import section_heads
    from ..runtime.sassedit import get, text

    names = [n for n in section_heads(cubin) if n.startswith(".text.")]
    if len(names) != 1:
        return None
    words = text(cubin, names[0][len(".text."):]).words
    if len(words) != len(insns):
        return None
    lo = next(k for k, i in enumerate(insns) if i.addr == loop.start)
    hi = next(k for k, i in enumerate(insns) if i.addr == loop.end)
    return sum(get(w, "stall") for w in words[lo:hi + 1])


def analyse(cubin: bytes) -> tuple[LoopMix | None, Counter]:
    """(hot loop mix, categories of the whole kernel); NoDisassembler without nvdisasm."""
    insns, labels = parse(disassemble(cubin))
    loop = hot_loop(insns, labels)
    if loop is not None:
        loop.stalls = stall_cycles(cubin, insns, loop)
    return loop, whole_kernel(insns)
