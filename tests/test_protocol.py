"""The cross-block protocols of the split decompositions, checked by construction in the
machine code (issue 18: racecheck sees shared memory only, not the counters and flags in
global memory that blocks of one launch talk through).

Where blocks of a launch hand partial sums to each other, one side *publishes* (a counter
incremented, a flag stored) after writing its data, and the other *observes* (the counter's
old value, the flag read) before reading that data. Each needs a GPU-scope fence on its side
(`__threadfence()`: MEMBAR.SC.GPU) and, because one thread publishes or observes for the
whole block, a block barrier between that thread and the others (BAR.SYNC / BAR.RED):
- release: on every path of the control-flow graph that leads back from a publish to a
  global write (STG, or a float atomic), a fence and a barrier come first;
- acquire: on every path that leads forward from an observation to a read of the shared
  data (the L2 loads `__ldcg` gives, LDG.STRONG.GPU; for FIXUP=2 the float atomics into C,
  which must follow the first block's stores), a barrier and a fence come first.
Which instruction publishes and which observes is the design of each protocol (below, from
the kernels' comments); the test finds them in the SASS of every variant (both alignment
variants, every FIXUP, every split rung), requires as many as the design says, and walks the
control-flow graph from each. A fence moved, dropped or put behind a branch fails it. It
needs the compiler (NVRTC) and nvdisasm, no GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from sgemmlab import registry
from sgemmlab.anatomy.sass import disassemble, find_nvdisasm
from sgemmlab.runtime.compiler import compile_kernel
from sgemmlab.runtime.launch import variant_macros

pytestmark = pytest.mark.skipif(find_nvdisasm() is None, reason="nvdisasm is not installed")

GPU = "NVIDIA H200"
_LINE = re.compile(r"/\*[0-9a-f]+\*/\s+(?P<pred>@!?U?P\w+\s+)?(?P<op>[A-Z][\w.]*)(?P<args>[^;]*);")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


@dataclass(frozen=True)
class Insn:
    op: str
    args: str
    predicated: bool


def parse(sass: str) -> tuple[list[Insn], dict[str, int]]:
    """The instructions of the (one) kernel in order, and where each label points."""
    insns, labels = [], {}
    for line in sass.splitlines():
        if m := _LABEL.match(line):
            labels[m.group(1)] = len(insns)
        elif m := _LINE.search(line):
            insns.append(Insn(m.group("op"), m.group("args"), bool(m.group("pred"))))
    return insns, labels


def successors(insns: list[Insn], labels: dict[str, int]) -> list[list[int]]:
    out = []
    for i, x in enumerate(insns):
        nxt = [i + 1] if i + 1 < len(insns) else []
        if x.op.startswith("BRA"):
            target = _TARGET.search(x.args)
            assert target, f"a branch without a label target: {x}"
            out.append([labels[target.group(1)]] + (nxt if x.predicated else []))
        elif x.op.startswith(("EXIT", "RET")) and not x.predicated:
            out.append([])
        elif x.op.startswith("CALL") and "$__internal_" in x.args and "cuda_sm" in x.args:
            out.append(nxt)  # the compiler's arithmetic routines (64-bit division): they
            # touch no memory and return to the next instruction
        elif x.op.startswith(("BRX", "JMX", "JMP", "CALL")):
            raise AssertionError(f"an indirect jump or call the walk cannot follow: {x}")
        else:
            out.append(nxt)
    return out


def is_fence(x: Insn) -> bool:
    return x.op.startswith("MEMBAR") and (".GPU" in x.op or ".SYS" in x.op)


def is_barrier(x: Insn) -> bool:
    return x.op.startswith(("BAR.SYNC", "BAR.RED"))


def is_cas(x: Insn) -> bool:
    """A compare-and-swap: rung 14 adds a partial below 2^-100 by one (an IEEE add that
    keeps subnormals), so it writes data, as a float atomic does."""
    return x.op.startswith("ATOMG") and ".CAS" in x.op


def is_global_write(x: Insn) -> bool:
    return x.op.startswith(("STG", "RED.", "REDG")) or (
        x.op.startswith("ATOMG") and ".F32" in x.op) or is_cas(x)


def is_l2_read(x: Insn) -> bool:
    return x.op.startswith("LDG") and ".STRONG.GPU" in x.op


def is_float_atomic(x: Insn) -> bool:
    return x.op.startswith(("ATOMG", "RED")) and ".F32" in x.op or is_cas(x)


def is_counter(x: Insn) -> bool:
    """An integer atomic on global memory: a counter or a ticket."""
    return x.op.startswith("ATOMG") and ".F32" not in x.op and not is_cas(x)


def is_flag_store(x: Insn) -> bool:
    """A volatile store of a flag (STRONG.SYS) that sets it (a store of RZ resets it)."""
    return x.op.startswith("STG") and ".STRONG.SYS" in x.op and not x.args.rstrip().endswith(
        "RZ")


def is_flag_load(x: Insn) -> bool:
    return x.op.startswith("LDG") and ".STRONG.SYS" in x.op


def walk(insns, edges, start: int, data, need_barrier: bool = True) -> tuple[list[int], int]:
    """From `start` along `edges` (successors, or predecessors for a backward walk): the
    `data` instructions reached before both a fence and (when needed) a barrier were
    passed on the way (violations), and how many `data` instructions are reachable at all
    (a walk that finds none checks nothing)."""
    bad, seen, stack = [], set(), [(n, False, not need_barrier) for n in edges[start]]
    while stack:
        i, fenced, barred = stack.pop()
        if (i, fenced, barred) in seen:
            continue
        seen.add((i, fenced, barred))
        x = insns[i]
        if data(x) and not (fenced and barred):
            bad.append(i)
        fenced, barred = fenced or is_fence(x), barred or is_barrier(x)
        stack += [(n, fenced, barred) for n in edges[i]]
    reach, todo = set(), list(edges[start])
    while todo:
        i = todo.pop()
        if i not in reach:
            reach.add(i)
            todo += edges[i]
    return sorted(set(bad)), sum(1 for i in reach if data(insns[i]))


@dataclass(frozen=True)
class Protocol:
    name: str
    rung: int
    overrides: dict
    publish: object  # the instruction that publishes
    observe: object  # the instruction that observes
    acquired: object  # the reads that must come after the observation
    publishes: int  # how many of each the design has
    observes: int
    barrier: bool = True  # one thread counts for the block (False: each thread for itself)


PROTOCOLS = [
    # rung 14, FIXUP 0: partials stored to slots, a counter per tile; the last block to count
    # reads every slot. FIXUP 1: partials added by atomics into one tile, then read back.
    Protocol("r14 FIXUP=0", 14, {"FIXUP": 0, "SPLIT": 0}, is_counter, is_counter, is_l2_read,
             1, 1),
    Protocol("r14 FIXUP=1", 14, {"FIXUP": 1, "SPLIT": 0}, is_counter, is_counter, is_l2_read,
             1, 1),
    # FIXUP 2: the first finisher stores its tile into C and sets `ready`; the others wait
    # for `ready`, then add into C by atomics (tickets and the done count publish nothing)
    Protocol("r14 FIXUP=2", 14, {"FIXUP": 2, "SPLIT": 0}, is_flag_store, is_flag_load,
             is_float_atomic, 1, 2),
    # split-K (kernels/splitk.cuh): slots, then a counter; the last part reads the slots
    Protocol("r15 split-K", 15, {"SPLIT": 0}, is_counter, is_counter, is_l2_read, 1, 1),
    Protocol("r16 split-K", 16, {"SPLIT": 0}, is_counter, is_counter, is_l2_read, 1, 1),
    Protocol("r18 split-K", 18, {"SPLIT": 0}, is_counter, is_counter, is_l2_read, 1, 1),
    # rung 20's split tail: each thread stores its part of the tile and counts on a counter
    # of its own (no barrier needed: a thread publishes and reads only its own elements'
    # parts); the thread that counts last sums them
    Protocol("r20 split tail", 20, {"TAIL": 1}, is_counter, is_counter, is_l2_read, 1, 1,
             barrier=False),
]


def _sass(p: Protocol, vec4: bool) -> str:
    r = registry.rung(p.rung)
    cfg = {**r.default(GPU), **p.overrides}
    assert r.is_legal(cfg), r.violations(cfg)
    extra = {"SMEM_EXPECT": r.dynamic_smem(cfg)} if r.supports("tma") else {}
    macros = r.macros(cfg) | variant_macros(r, vec4) | extra
    return disassemble(compile_kernel(r.source, macros, r.arch or "sm_90").cubin)


def _variants(p: Protocol) -> list[bool]:
    return [True, False] if registry.rung(p.rung).vectorized else [False]


def check(p: Protocol, sass: str) -> list[str]:
    """What is wrong with protocol `p` in `sass` (nothing: an empty list)."""
    insns, labels = parse(sass)
    succ = successors(insns, labels)
    pred: list[list[int]] = [[] for _ in insns]
    for i, nexts in enumerate(succ):
        for n in nexts:
            pred[n].append(i)
    problems = []
    pubs = [i for i, x in enumerate(insns) if p.publish(x)]
    obs = [i for i, x in enumerate(insns) if p.observe(x)]
    if len(pubs) != p.publishes or len(obs) != p.observes:
        problems.append(f"{len(pubs)} publishing and {len(obs)} observing instructions, the "
                        f"design has {p.publishes} and {p.observes}")
    for i in pubs:
        bad, reach = walk(insns, pred, i, is_global_write, p.barrier)
        if not reach:
            problems.append(f"publish at {i} ({insns[i].op}) follows no global write")
        problems += [f"global write {insns[b].op} at {b} reaches the publish at {i} "
                     "without a fence and a barrier between" for b in bad]
    for i in obs:
        bad, reach = walk(insns, succ, i, p.acquired, p.barrier)
        if not reach:
            problems.append(f"observation at {i} ({insns[i].op}) precedes no shared read")
        problems += [f"{insns[b].op} at {b} follows the observation at {i} without a "
                     "barrier and a fence between" for b in bad]
    return problems


@pytest.mark.parametrize("p", PROTOCOLS, ids=lambda p: p.name)
def test_every_publish_and_observation_is_fenced_on_every_path(p):
    for vec4 in _variants(p):
        problems = check(p, _sass(p, vec4))
        assert not problems, f"{p.name} (float4 {vec4}):\n" + "\n".join(problems[:12])


# the check itself must be able to fail: the same SASS with the release fence or the
# acquire fence taken out, or every barrier


@pytest.mark.parametrize("p", [PROTOCOLS[0], PROTOCOLS[2], PROTOCOLS[3], PROTOCOLS[6]],
                         ids=lambda p: p.name)
def test_the_check_finds_a_missing_fence_or_barrier(p):
    sass = _sass(p, _variants(p)[0])
    assert not check(p, sass)
    insns, _ = parse(sass)
    fences = [i for i, x in enumerate(insns) if is_fence(x)]
    assert len(fences) >= 2
    # the release fence (the first) and the acquire fence (the last), one at a time
    for victim in (fences[0], fences[-1]):
        lines, seen = sass.splitlines(), -1
        for n, line in enumerate(lines):
            if _LINE.search(line):
                seen += 1
                if seen == victim:
                    lines[n] = re.sub(r"MEMBAR\.\S+", "NOP", line)
        assert check(p, "\n".join(lines)), f"a missing fence at {victim} went unseen"
    # every barrier gone (where the design needs them)
    if p.barrier:
        assert check(p, re.sub(r"BAR\.(SYNC|RED)\S*[^;]*;", "NOP ;", sass))
