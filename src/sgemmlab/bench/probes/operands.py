"""`sgemmlab operands`: how Hopper delivers FFMA operands, measured from SASS we write.

Issue 19's first step. ptxas compiles kernels/micro/ffma_operands.cu into a loop of 256
independent FFMAs (32 accumulators x 8 steps; with LDS=1 also 8 LDS.128 refilling the
operands, as in the GEMM hot loop). Each *variant* rewrites that body in the cubin
(anatomy/sasspatch.py, every edit read back through nvdisasm): which registers each FFMA
reads, in which bank, with which reuse flags, how soon an accumulator comes back, the stall
count. Values are meaningless after the edit; only time is measured: every warp reads the
SM clock before and after its loop, and the record is cycles per FFMA per warp (median over
the warps of all SMs), at 1, 2 and 4 warps per scheduler (one block per SM of 4 W warps).
A scheduler issues at most one instruction a cycle, so 1.00 cycle an FFMA at one warp is
the full rate, and W warps at W cycles an FFMA each are the full rate too.

The groups (what each asks):
    compiled   ptxas's own body, and the same with its reuse flags cleared
    banks      a, b, c each from registers of one class mod 4 (64 triples), no reuse, and
               a register read twice (a = b): which register numbers share a read port
    reuse      a and b held over runs of 8 FFMAs (the GEMM outer product), flags on none,
               a, b or both, and flags on registers that change (does a stale flag cost?)
    distance   an accumulator back after d FFMAs, stall 1: does the hardware wait?
    stall      every FFMA's stall field set to 2 or 4: the encoding and the clock, checked
    slack      every k-th FFMA replaced by a NOP: do a bank's extra reads move into a slot
               that reads nothing?
    window     the busy bank's reads and the free slots in runs of r: how far do reads move?
    lds        the LDS=1 body, compiled and with the banks and reuse patterns above

Building needs NVRTC, nvdisasm and pyelftools (the CPU machine has all three: `--build
DIR` writes the cubins and a manifest); running needs only the GPU (`--from DIR`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

SOURCE, KERNEL = "micro/ffma_operands.cu", "ffma_operands"
SHAPE = {"NOPS": 16, "NACC": 32, "STEPS": 8}
WARPS = (1, 2, 4)  # warps per scheduler (the SM has 4 schedulers)
ITERS = 4000  # loop trips: ~0.5-4 ms a launch
REPEATS = 3  # launches per variant and warp count; the median is kept
RUN = 8  # FFMAs that hold one a (or b) register in the reuse patterns, as an 8-wide tile
NOP = "NOP"  # an edit that puts a NOP (ptxas's own encoding, stall 1) in the FFMA's place


@dataclass
class Body:
    """The compiled loop and what the variants may use of it."""

    lds: int
    cubin: bytes
    ffma: list[int]  # instruction indices of the loop's FFMAs, in order
    accumulators: list[int]  # registers the FFMAs write (each its own c)
    operands: list[int]  # registers they read as a or b (and never write)
    sources: list[int]  # every register they read as a or b
    registers: int  # ptxas's count: sources stay below it
    instructions: int  # in the loop body, the branch included

    def pool(self, kind: str, cls: int) -> list[int]:
        """Registers = cls mod 4 for slot c (the accumulators), or for a and b (the
        operands; where ptxas renamed every register, as in the LDS body, the sources)."""
        regs = self.accumulators if kind == "c" else self.operands or self.sources
        return [r for r in regs if r % 4 == cls]


@dataclass
class Variant:
    name: str
    group: str
    what: str
    lds: int = 0
    edits: list = field(default_factory=list)  # one sasspatch.Ffma per FFMA (or none)
    cubin: bytes = b""
    checked: int = 0  # FFMAs read back through nvdisasm


def compile_body(lds: int) -> Body:
    """ptxas's loop, found as `sgemmlab inspect` finds a rung's hot loop."""
    from ...anatomy import sass, sasspatch
    from ...runtime.compiler import compile_kernel

    compiled = compile_kernel(SOURCE, SHAPE | {"LDS": lds})
    cubin = compiled.cubin
    insns, labels = sass.parse(sass.disassemble(cubin))
    loop = sass.hot_loop(insns, labels)
    if loop is None:
        raise RuntimeError(f"{SOURCE}: no loop found in the SASS")
    t = sasspatch.text(cubin, KERNEL)
    lo, hi = loop.start // 16, loop.end // 16
    ffma = [i for i in range(lo, hi + 1) if sasspatch.is_ffma(t.words[i])]
    want = SHAPE["NACC"] * SHAPE["STEPS"]
    if len(ffma) != want:
        raise RuntimeError(f"{SOURCE}: the loop holds {len(ffma)} FFMA, not {want}")
    get = sasspatch.get
    accs = sorted({get(t.words[i], "rd") for i in ffma})
    srcs = sorted({get(t.words[i], s) for i in ffma for s in ("ra", "rb")})
    return Body(lds, cubin, ffma, accs, sorted(set(srcs) - set(accs)), srcs,
                compiled.resources.registers, hi - lo + 1)


def _pattern(body: Body, ka: int, kb: int, kc: int | None, *, hold: int = 1,
             flags: str = "", stale: bool = False):
    """a, b, c from registers of classes ka, kb, kc mod 4 (kc None: c and d as ptxas left
    them, as in the LDS body, whose registers all change roles). a and b each stay for
    `hold` FFMAs (1: they change every FFMA; RUN: the GEMM outer product) while c changes
    every FFMA; `flags` are set on all but the last FFMA of each hold (ptxas's way: the
    next FFMA reads the cached value), or with `stale` on every FFMA, where the registers
    change and the flags can serve nothing."""
    from ...anatomy.sasspatch import Ffma

    pa, pb = body.pool("ab", ka), body.pool("ab", kb)
    pc = body.pool("c", kc) if kc is not None else None
    out = []
    for i in range(len(body.ffma)):
        run, last = i // hold, i % hold == hold - 1
        ra = pa[run % len(pa)]
        rb = pb[(run + 1) % len(pb)] if ka == kb else pb[run % len(pb)]
        out.append(Ffma(ra=ra, rb=rb, rc=pc[i % len(pc)] if pc else None,
                        reuse=flags if stale or not last else ""))
    return out


def variants(body: Body, lds_body: Body) -> list[Variant]:
    """Every variant, its edits made (not yet patched)."""
    from ...anatomy.sasspatch import Ffma

    n = len(body.ffma)
    out = [Variant("compiled", "compiled", "ptxas's body as it compiled it", 0, [None] * n),
           Variant("compiled-noreuse", "compiled", "ptxas's registers, reuse flags cleared",
                   0, [Ffma(reuse="")] * n)]
    for ka in range(4):
        for kb in range(4):
            for kc in range(4):
                out.append(Variant(f"banks-{ka}{kb}{kc}", "banks",
                                   f"a, b, c from registers = {ka}, {kb}, {kc} mod 4; "
                                   "each changes every FFMA; no reuse", 0,
                                   _pattern(body, ka, kb, kc)))
    for kc in (0, 1):
        pa, pc = body.pool("ab", 0), body.pool("c", kc)
        out.append(Variant(f"same-ab-c{kc}", "banks",
                           f"a = b, one register (= 0 mod 4) read twice; c = {kc} mod 4", 0,
                           [Ffma(ra=pa[i % len(pa)], rb=pa[i % len(pa)],
                                 rc=pc[i % len(pc)], reuse="") for i in range(n)]))
    for label, (ka, kb, kc) in (("one-bank", (0, 0, 0)), ("spread", (0, 1, 2)),
                                ("even", (0, 2, 0))):
        for flags in ("", "a", "b", "ab"):
            out.append(Variant(f"held-{label}-{flags or 'noflag'}", "reuse",
                               f"a, b held {RUN} FFMAs (classes {ka}{kb}{kc} mod 4), reuse "
                               f"flags: {flags or 'none'}", 0,
                               _pattern(body, ka, kb, kc, hold=RUN, flags=flags)))
        out.append(Variant(f"stale-{label}-ab", "reuse",
                           f"registers change every FFMA (classes {ka}{kb}{kc}) but a and b "
                           "carry reuse flags", 0,
                           _pattern(body, ka, kb, kc, flags="ab", stale=True)))
    pa, pb = body.pool("ab", 0), body.pool("ab", 1)
    for d in (1, 2, 3, 4, 6, 8, 32):
        accs = body.accumulators[:d]
        out.append(Variant(f"distance-{d}", "distance",
                           f"an accumulator back after {d} FFMA(s), stall 1, a = 0 and "
                           "b = 1 mod 4", 0,
                           [Ffma(ra=pa[i % len(pa)], rb=pb[i % len(pb)], rc=accs[i % d],
                                 reuse="", stall=1) for i in range(n)]))
    for s in (2, 4):
        out.append(Variant(f"stall-{s}", "stall", f"ptxas's body, every FFMA's stall = {s}",
                           0, [Ffma(stall=s)] * n))
    # slack: every k-th FFMA a NOP (no register read): can the busy bank's extra reads move
    # into that slot? Per instruction, a (2 even, 1 odd) FFMA then a NOP take 3 cycles; if
    # reads pool across instructions, 2
    pe, pc = body.pool("ab", 0), body.pool("c", 0)
    for k in (2, 4, 8):
        for e in (2, 3):
            rb = pb if e == 2 else body.pool("ab", 2)
            out.append(Variant(f"slack-{e}even-1of{k}", "slack",
                               f"every {k}th slot a NOP, the others FFMAs reading {e} even "
                               f"and {3 - e} odd registers", 0,
                               [NOP if i % k == k - 1 else
                                Ffma(ra=pe[i % len(pe)], rb=rb[(i + 1) % len(rb)],
                                     rc=pc[i % len(pc)], reuse="") for i in range(n)]))
    out.append(Variant("nops", "slack", "every slot a NOP: the issue rate alone", 0,
                       [NOP] * n))
    # window: how far apart may the busy bank's reads and the free slots be? Runs of r
    # (2 even, 1 odd) FFMAs, then r NOPs (pooled: 1.00 a slot; one at a time: 1.50); and runs
    # of r (2, 1) then r (1, 2) FFMAs (pooled: 1.50; one at a time: 2.00)
    po = body.pool("c", 1)
    for r in (1, 2, 4, 8, 16, 32):
        out.append(Variant(f"window-nop-{r}", "window",
                           f"runs of {r} FFMAs reading 2 even and 1 odd, then {r} NOPs", 0,
                           [NOP if (i // r) % 2 else
                            Ffma(ra=pe[i % len(pe)], rb=pb[(i + 1) % len(pb)],
                                 rc=pc[i % len(pc)], reuse="") for i in range(n)]))
        out.append(Variant(f"window-swap-{r}", "window",
                           f"runs of {r} FFMAs reading 2 even and 1 odd, then {r} reading 1 "
                           "even and 2 odd", 0,
                           [Ffma(ra=pe[i % len(pe)], rb=pb[(i + 1) % len(pb)],
                                 rc=(po if (i // r) % 2 else pc)[i % len(po if (i // r) % 2
                                                                     else pc)],
                                 reuse="") for i in range(n)]))
    m = len(lds_body.ffma)
    out.append(Variant("lds-compiled", "lds", "LDS=1: ptxas's body", 1, [None] * m))
    out.append(Variant("lds-compiled-noreuse", "lds", "LDS=1: reuse flags cleared", 1,
                       [Ffma(reuse="")] * m))
    # the LDS body: only what FFMAs read is edited (ptxas renamed its registers across the
    # steps, so a register written here may be an LDS address later)
    for ka, kb in ((0, 1), (0, 0), (0, 2), (1, 3)):
        out.append(Variant(f"lds-banks-{ka}{kb}", "lds",
                           f"LDS=1: a, b = {ka}, {kb} mod 4, c as compiled, no reuse", 1,
                           _pattern(lds_body, ka, kb, None)))
    for label, (ka, kb) in (("one-bank", (0, 0)), ("spread", (0, 1))):
        for flags in ("", "ab"):
            out.append(Variant(f"lds-held-{label}-{flags or 'noflag'}", "lds",
                               f"LDS=1: a, b held {RUN} FFMAs ({ka}{kb} mod 4), c as "
                               f"compiled, flags {flags or 'none'}", 1,
                               _pattern(lds_body, ka, kb, None, hold=RUN, flags=flags)))
    return out


def build(out_dir: Path | None = None) -> list[Variant]:
    """Compile both bodies, patch every variant, read each back through nvdisasm; with
    `out_dir`, write the cubins and manifest.json there (each whole or not at all: `--from`
    launches what it reads, and a build stopped midway must not leave a cut cubin)."""
    from ...anatomy import sasspatch
    from ...runtime.files import write_atomic

    bodies = {0: compile_body(0), 1: compile_body(1)}
    made = variants(bodies[0], bodies[1])
    for v in made:
        b = bodies[v.lds]
        words = sasspatch.text(b.cubin, KERNEL).words
        nop = _nop(words)
        edits = {i: nop(words[i]) if e == NOP else e.apply(words[i])
                 for i, e in zip(b.ffma, v.edits) if e is not None}
        v.cubin = sasspatch.replace(b.cubin, KERNEL, edits)
        v.checked = sasspatch.verify(v.cubin, KERNEL, [i for i, e in zip(b.ffma, v.edits)
                                                      if e != NOP])
    if out_dir is not None:
        for v in made:
            write_atomic(out_dir / f"{v.name}.cubin", v.cubin)
        write_atomic(out_dir / "manifest.json", json.dumps(
            {"bodies": {str(k): _body_meta(b) for k, b in bodies.items()},
             "variants": [_meta(v) for v in made]}, indent=1) + "\n")
    return made


def _nop(words):
    """word -> a NOP with that word's control bits: ptxas's NOP (the padding after EXIT)."""
    from ...anatomy import sasspatch

    pad = next(w for w in reversed(words) if sasspatch.get(w, "opcode") == 0x918)
    mask = (1 << 105) - 1
    return lambda w: (pad & mask) | (w & ~mask & ~(0xF << 122))


def _body_meta(b: Body) -> dict:
    return {"lds": b.lds, "ffma": len(b.ffma), "instructions": b.instructions,
            "registers": b.registers, "accumulators": b.accumulators, "operands": b.operands,
            "sources": b.sources}


def _meta(v: Variant) -> dict:
    return {"name": v.name, "group": v.group, "what": v.what, "lds": v.lds,
            "checked": v.checked,
            "edits": [None if e is None else e if e == NOP else
                      {k: x for k, x in asdict(e).items() if x is not None}
                      for e in v.edits]}


def load(dir_: Path) -> tuple[dict, list[tuple[dict, bytes]]]:
    """(the bodies' metadata, [(variant metadata, cubin)]) from a `--build` directory."""
    manifest = json.loads((dir_ / "manifest.json").read_text())
    return manifest["bodies"], [(m, (dir_ / f"{m['name']}.cubin").read_bytes())
                                for m in manifest["variants"]]


#: Blocks of 16 warps (4 per scheduler: warp w runs on scheduler w mod 4) of which only
#: some run: do two warps on a scheduler get more operands when they sit in other slots
#: (they do not: rule 8)? name -> the bit mask of running warps.
SLOTS = {"all 16": 0xFFFF, "0-7": 0x00FF, "8-15": 0xFF00, "0-3 + 8-11": 0x0F0F,
         "0-3 + 12-15": 0xF00F, "0-3": 0x000F}


def measure(gpu, bodies: dict, items: list[tuple[dict, bytes]], iters: int = ITERS,
            slots: bool = False) -> list[dict]:
    """One record per variant and warp count (cycles per FFMA per running warp); with
    `slots`, per variant and SLOTS pattern in blocks of 16 warps instead."""
    import numpy as np
    import torch

    from ...runtime import driver
    from ...runtime.arrays import stream_for
    from ...runtime.device import device
    from ...runtime.packed import Packed

    device(gpu.index)
    stream = stream_for(int(torch.cuda.current_stream().cuda_stream), gpu.index)
    blocks = gpu.sm_count
    most = blocks * 128 * max(WARPS)
    src = torch.rand(64 * 32, device="cuda") + 0.5
    out = torch.empty(most, device="cuda")
    cycles = torch.zeros(2 * (most // 32), dtype=torch.int64, device="cuda")
    records = []
    runs = ([(f"slots {name}", 16, mask, bin(mask).count("1") / 4)
             for name, mask in SLOTS.items()] if slots else
            [(None, 4 * w, (1 << 4 * w) - 1, w) for w in WARPS])
    for meta, cubin in items:
        kernel = driver.load(cubin, KERNEL, gpu.index)
        body = bodies[str(meta["lds"])]
        for label, warps, mask, w in runs:
            threads = 32 * warps
            args = (src.data_ptr(), out.data_ptr(), cycles.data_ptr(), np.int32(iters),
                    np.uint32(mask))
            launch = Packed(kernel, stream, (blocks, 1, 1), (threads, 1, 1), args)
            per, own = [], []
            for _ in range(REPEATS + 1):  # the first warms the clocks and the module
                cycles.zero_()
                launch()
                torch.cuda.synchronize()
                c = cycles[:2 * blocks * warps].cpu().numpy().reshape(blocks, warps, 2)
                ran = c[:, :, 1] > 0  # warps that ran (the mask's)
                span = [c[b, ran[b], 1].max() - c[b, ran[b], 0].min() for b in range(blocks)]
                per.append(float(np.median(span)) / (iters * body["ffma"]))
                own.append(float(np.median((c[:, :, 1] - c[:, :, 0])[ran]))
                           / (iters * body["ffma"]))
            kept = sorted(per[1:])[len(per[1:]) // 2]
            rec = {"variant": meta["name"], "group": meta["group"], "what": meta["what"],
                   "lds": meta["lds"], "warps": w, "cycles_per_ffma": kept,
                   "ffma_per_cycle": w / kept, "samples": per[1:], "iters": iters,
                   "own_cycles_per_ffma": sorted(own[1:])[len(own[1:]) // 2],
                   "metric": "block span"}
            if label:
                rec |= {"slots": label, "mask": mask, "block_warps": warps}
            records.append(rec)
    return records


def summary(records: list[dict]) -> dict:
    """Per variant, cycles per FFMA per warp at each warp count (the table's rows)."""
    rows: dict[str, dict] = {}
    for r in records:
        row = rows.setdefault(r["variant"], {"group": r["group"], "what": r["what"]})
        row[f"w{r['warps']}"] = round(r["cycles_per_ffma"], 3)
    return rows


def table(rows: dict) -> str:
    """The rows as text: variant, group, cycles per FFMA per warp at 1, 2, 4 warps."""
    head = f"{'variant':<24} {'group':<9} " + " ".join(f"{f'W={w}':>6}" for w in WARPS)
    lines = [head, "-" * len(head)]
    for name, row in rows.items():
        cells = " ".join(f"{row.get(f'w{w}', float('nan')):>6.2f}" for w in WARPS)
        lines.append(f"{name:<24} {row['group']:<9} {cells}")
    return "\n".join(lines)


def rules(rows: dict) -> str:
    """What the rows say, each rule with the rows (and their figures) that show it."""
    def w(name: str, warps: int = 1) -> str:
        row = rows.get(name, {})
        return f"{row[f'w{warps}']:.2f}" if f"w{warps}" in row else "(not measured)"

    return f"""\
What the rows say (each rule with the rows that show it):

1. **Two banks, by register parity.** a, b, c from one class mod 4 or from two classes of
   the same parity cost alike (banks-000 {w("banks-000")}, banks-002 {w("banks-002")},
   banks-022 {w("banks-022")}); the classes mod 4 matter only through their parity.
2. **One operand a cycle from each bank.** Three reads from one bank take three cycles
   (banks-000 {w("banks-000")}), two and one take two (banks-001 {w("banks-001")},
   banks-012 {w("banks-012")}): no FFMA that reads three registers issues every cycle.
3. **A register named twice is read once** (same-ab-c1, a = b even and c odd:
   {w("same-ab-c1")}; same-ab-c0, all even: {w("same-ab-c0")}).
4. **The reuse flag saves the read; the flag alone does nothing.** A held a with its flag
   costs nothing (held-spread-a {w("held-spread-a")} against held-spread-noflag
   {w("held-spread-noflag")}); flags on registers that change are free and useless
   (stale-spread-ab {w("stale-spread-ab")}).
5. **Reads go at most one instruction early.** An instruction may make a read in a bank
   slot the instruction before it left free, and no earlier: alternating (2 even, 1 odd) and
   (1 even, 2 odd) FFMAs run at 1.5 cycles each, not 2 (window-swap-1 {w("window-swap-1")});
   an FFMA (2, 1) after a NOP costs one cycle (window-nop-1 {w("window-nop-1")}), but runs
   of them after runs of NOPs approach one cycle of excess each, whatever the free slots
   further back (window-nop-2 {w("window-nop-2")}, -8 {w("window-nop-8")}, -32
   {w("window-nop-32")}; window-swap-4 {w("window-swap-4")}, -32 {w("window-swap-32")}).
   Evenly spread slack serves (slack-2even-1of2 {w("slack-2even-1of2")}).
6. **A result read again within 3 FFMAs stops the read-ahead** (distance-1 {w("distance-1")},
   distance-3 {w("distance-3")}, distance-4 {w("distance-4")}, distance-6
   {w("distance-6")}): the hardware waits for the write, or will not read ahead past it.
7. **The stall field is what the scheduler obeys** (stall-2 {w("stall-2")}, stall-4
   {w("stall-4")} cycles at one warp): the control bits sit where the editor puts them.
8. **The banks serve a scheduler, not a warp.** Two warps on a scheduler take twice one
   warp's time per warp, four take four times (banks-000: {w("banks-000")},
   {w("banks-000", 2)}, {w("banks-000", 4)}; nops: {w("nops")}, {w("nops", 2)},
   {w("nops", 4)}), in whichever slots they sit (the warp-slot table below): more warps
   hide latency, never a bank's limit. (A first run timed each warp's own loop and showed
   four warps faster; the warps did not overlap entirely. The figures here are each
   block's span, first start to last stop.)

Conflicts show in Nsight Compute as dispatch stalls
(results/nvidia-h200/profile/ncu-operands-*.txt).
The model that follows from rules 1-5 (`runtime/sassedit.operand_cycles`' "lookahead",
`anatomy/sass.bank_cycles`) reproduces every compiled, banks, reuse, slack and window row
at one warp within 5 % (tests/test_sassedit.py), where pooling over the whole body or taking
one instruction at a time each miss rows by more than 10 %; it does not cover rule 6, the
stall rows or the LDS body, whose loads are consumed at once (latency, not banks).
"""


def markdown(runs: list[tuple[str, dict]]) -> str:
    """docs/operands-h200.md: every variant's row from the newest file that measured it."""
    rows: dict[str, dict] = {}
    where: dict[str, str] = {}
    slot_runs = [(p, r) for p, r in runs if r["method"].get("slots")]
    for path, run in runs:
        if run["method"].get("slots"):
            continue
        for name, row in summary(run["records"]).items():
            rows[name], where[name] = row, path
    head = ("# How the H200 feeds FFMA its operands\n\n"
            "Written by `sgemmlab operands --table` from the results files named in the last "
            "column (made by `sgemmlab operands` on the H200). Cycles per FFMA per "
            "warp, median over every warp of 132 SMs; 1.00 at one warp per scheduler is one "
            "FFMA a cycle, W at W warps is too. Each variant is ptxas's 256-FFMA body of "
            "kernels/micro/ffma_operands.cu with its registers, reuse flags, stall counts or "
            "instructions rewritten in the cubin (bench/probes/operands.py, "
            "anatomy/sasspatch.py; every edit read back through nvdisasm).\n\n")
    lines = ["| variant | group | what | W=1 | W=2 | W=4 | file |",
             "| --- | --- | --- | ---: | ---: | ---: | --- |"]
    for name, row in rows.items():
        cells = " | ".join(f"{row[f'w{w}']:.2f}" if f"w{w}" in row else "—" for w in WARPS)
        lines.append(f"| {name} | {row['group']} | {row['what']} | {cells} | "
                     f"{Path(where[name]).name} |")
    for path, run in slot_runs:
        names = list(run["method"]["slots"])
        lines += ["", f"Warp slots ({Path(path).name}): blocks of 16 warps, only those named "
                  "running (warp w on scheduler w mod 4); cycles per FFMA per running warp.", "",
                  "| variant | " + " | ".join(names) + " |",
                  "| --- | " + " | ".join("---:" for _ in names) + " |"]
        by: dict[str, dict] = {}
        for r in run["records"]:
            by.setdefault(r["variant"], {})[r["slots"].removeprefix("slots ")] = \
                r["cycles_per_ffma"]
        for variant, cells in by.items():
            lines.append(f"| {variant} | " + " | ".join(
                f"{cells[n]:.2f}" if n in cells else "—" for n in names) + " |")
    return head + rules(rows) + "\n" + "\n".join(lines) + "\n"
