"""Rungs 19 and 20 (kernels/hopper/), their pre-pass and runtime/tma.py without a GPU.

(a) the named variants below (rung 19 at two tiles, rung 20 at every PROMOTE, with and
    without INFLIGHT and TAIL), every legal configuration of registry rungs 19 and 20 (a
    covering sample), and the pre-pass hopper/prep.cu compile with NVRTC for sm_90a with no spills,
    no stack frame and no compiler warning (a serialized wgmma or an ignored setmaxnreg
    would be one), within 168 registers at entry;
(b) their SASS shows the Hopper path: HGMMA of the expected shape, one per k8 and product,
    UTMALDG for every operand, SYNCS (mbarriers), USETMAXREG, no local memory, no clock
    read; PROMOTE's FADDs of the run into
    the register sum, one restart from zero per k-tile step, a k-tile left in flight with
    INFLIGHT (P > 1), registers past the entry's 168; TAIL's counter and L2 reads; the
    pre-pass's float4 path (needs nvdisasm: skipped without);
(c) the host agrees with the kernels: the registry's shared-memory formula (SMEM_EXPECT)
    and tiles, and runtime/hopper.py's TAIL split; the kernels' static_asserts refuse what
    they cannot do, the registry's illegal configurations included; the TAIL split and
    workspace by hand;
(d) runtime/tma.py: a tensor map's rules are checked in Python, with reasons; the arguments
    built for the driver pass cuda.bindings' type checks; kernel parameters are packed as
    the driver reads them.
Skipped cleanly where cuda.core / NVRTC cannot be imported. On the GPU:
tests/test_tensor_gpu.py.

Cost: about 70 compiles of one to two seconds each (no disk cache: use_cache=False), a
minute on two cores; the registry's spaces (132 legal configurations) are sampled.
"""

from __future__ import annotations

import ctypes
import itertools
import re
from functools import cache

import numpy as np
import pytest

from sgemmlab import registry
from sgemmlab.errors import OperandError
from sgemmlab.runtime import decompose, hopper, tma
from sgemmlab.runtime.tma import Tiled2D, tiled_2d_problems


def _nvrtc_ok() -> bool:
    try:
        from sgemmlab.runtime.compiler import nvrtc_version

        nvrtc_version()
        import cuda.core  # noqa: F401
    except Exception:
        return False
    return True


needs_nvrtc = pytest.mark.skipif(not _nvrtc_ok(), reason="NVRTC (cuda.core) not importable")
TF32, TF32X3 = registry.rung(19), registry.rung(20)
ARCH = "sm_90a"  # wgmma and setmaxnreg exist only for the arch-specific target
PREP_MACROS = {"PREP": 1}  # what runtime/hopper.py compiles the pre-pass with

#: name -> (rung, the constants that differ from its seed): the shapes of code the kernels
#: can take (rung 19 at both tiles; rung 20 at every PROMOTE, serial, and with the tail split)
_P = {"BN": 128, "STAGES": 4, "TAIL": 0}
VARIANTS = {
    "tf32": (TF32, {"BN": 256, "STAGES": 4}),
    "tf32_bn128": (TF32, {"BN": 128, "STAGES": 6}),
    "3xtf32_p1": (TF32X3, {**_P, "PROMOTE": 1}),
    "3xtf32_p2": (TF32X3, {**_P, "PROMOTE": 2}),
    "3xtf32_p4": (TF32X3, {**_P, "PROMOTE": 4}),
    "3xtf32_p1_serial": (TF32X3, {**_P, "PROMOTE": 1, "INFLIGHT": 0}),
    "3xtf32_p1_tail": (TF32X3, {**_P, "PROMOTE": 1, "TAIL": 1}),
    "3xtf32_p2_tail": (TF32X3, {**_P, "PROMOTE": 2, "TAIL": 1}),
}
VARIANT_NAMES = list(VARIANTS)


@cache
def build(source: str, macros_items: tuple, arch: str = ARCH):
    from sgemmlab.runtime.compiler import compile_kernel

    return compile_kernel(source, dict(macros_items), arch, use_cache=False)


def variant(name: str) -> tuple:
    """(rung, its configuration, the macros runtime/hopper.py compiles it with)."""
    rung, overrides = VARIANTS[name]
    cfg = {**rung.seed, **overrides}
    return rung, cfg, rung_macros(rung, cfg)


def build_variant(name: str):
    rung, _, macros = variant(name)
    return macros, build(rung.source, tuple(sorted(macros.items())))


def rung_macros(rung, cfg: dict) -> dict:
    """What runtime/hopper.py compiles a registry configuration with."""
    return rung.macros(cfg) | {"SMEM_EXPECT": rung.dynamic_smem(cfg)}


def build_config(rung, cfg: dict):
    return build(rung.source, tuple(sorted(rung_macros(rung, cfg).items())), rung.arch)


@cache
def _sass(source: str, macros_items: tuple) -> str:
    from sgemmlab.anatomy.sass import NoDisassembler, disassemble

    try:
        return disassemble(build(source, macros_items).cubin)
    except NoDisassembler as exc:
        pytest.skip(str(exc))


def sass(name: str) -> str:
    """The SASS of a named variant."""
    rung, _, macros = variant(name)
    return _sass(rung.source, tuple(sorted(macros.items())))


def opcodes(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for op in re.findall(r"/\*[0-9a-f]+\*/\s+(?:@!?U?P\S+\s+)?([A-Z][\w.]*)", text):
        out[op] = out.get(op, 0) + 1
    return out


def count(ops: dict[str, int], prefix: str) -> int:
    return sum(n for op, n in ops.items() if op == prefix or op.startswith(prefix + "."))


def warnings_of(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if "warning" in ln.lower()]


def clean(c, what: str) -> None:
    """No spills, no stack frame, no warning; 384 threads at one block per SM
    (__launch_bounds__(384, 1)): 65536 / 384 registers at entry, rounded down to 8."""
    r = c.resources
    assert r.known, f"{what}: no ptxas report\n{c.log}"
    assert (r.spill_stores, r.spill_loads, r.stack_bytes) == (0, 0, 0), (
        f"{what}: spills or a stack frame\n{c.log}")
    assert 0 < r.registers <= 168, f"{what}: {r.registers} registers\n{c.log}"
    assert not warnings_of(c.log), f"{what}: compiler warnings\n{c.log}"
    assert "Compiling entry function 'sgemm' for 'sm_90a'" in c.log


def _sample(rung, shaping: tuple[str, ...], k: int) -> list[dict]:
    """A covering sample of `rung`'s legal configurations that starts with every
    combination of the `shaping` constants (those that change the code's shape, and so its
    registers) at the seed's other values."""
    first = [{**rung.seed, **dict(zip(shaping, values))}
             for values in itertools.product(*(rung.space[n] for n in shaping))]
    return registry.covering_sample(list(rung.configs()), k, first=first)


#: rung 19: every (BN, STAGES) ring, GROUP_M's values around them (tile order only);
#: rung 20: every (PROMOTE, INFLIGHT, TAIL) at 4 stages, then STAGES and GROUP_M covered
SAMPLES = [(TF32, cfg) for cfg in _sample(TF32, ("BN", "STAGES"), 12)] + [
    (TF32X3, cfg) for cfg in _sample(TF32X3, ("PROMOTE", "INFLIGHT", "TAIL"), 24)]


# -- (a) it compiles, without spills or warnings -------------------------------------------
@needs_nvrtc
@pytest.mark.parametrize("name", VARIANT_NAMES)
def test_every_variant_compiles_for_sm90a_without_spills_or_warnings(name):
    macros, c = build_variant(name)
    clean(c, f"{name} {macros}")


@needs_nvrtc
@pytest.mark.parametrize("rung, cfg", SAMPLES,
                         ids=[f"r{r.number}-{registry.config_key(c)}" for r, c in SAMPLES])
def test_the_registrys_configurations_compile_without_spills(rung, cfg):
    clean(build_config(rung, cfg), f"{rung.label} {registry.config_key(cfg)}")


def test_the_sample_covers_every_value_of_both_spaces():
    for rung in (TF32, TF32X3):
        picked = [c for r, c in SAMPLES if r is rung]
        assert rung.seed in picked
        for name, values in rung.space.items():
            legal = {c[name] for c in rung.configs()}
            assert {c[name] for c in picked} == legal, (rung.label, name, values)


@needs_nvrtc
def test_the_pre_pass_compiles_without_spills():
    c = build(hopper.PREP, tuple(PREP_MACROS.items()))
    assert c.resources.known and not c.resources.spills and c.resources.stack_bytes == 0
    assert "Compiling entry function 'prep' for 'sm_90a'" in c.log
    assert "sgemm'" not in c.log  # one kernel per cubin: ptxas's report is unambiguous
    assert not warnings_of(c.log), c.log


@needs_nvrtc
@pytest.mark.parametrize("blocks, most, rows2", [(3, 80, False), (4, 64, False), (3, 80, True)])
def test_oz_scale_built_for_more_blocks_an_sm_keeps_within_their_registers(blocks, most,
                                                                          rows2):
    """ozaki.SCALE_BLOCKS: oz_scale and oz_scale_ab within the registers `blocks` blocks of
    256 threads an SM leave (65536 / 256 / blocks, to the allocation's 8), with no spill
    or stack, with and without the 2-row staging (SCALE_ROWS_K, _R); the other kernels as
    without either."""
    from sgemmlab.runtime import ozaki

    c = build(ozaki.STEPS, tuple(ozaki.steps_macros(blocks, rows2).items()))
    regs = dict(re.findall(r"Function properties for (\w+)\n.*\n[^\n]*Used (\d+) registers",
                           c.log))
    spills = dict(re.findall(r"Function properties for (\w+)\n[^\n]*?(\d+ bytes stack frame, "
                             r"\d+ bytes spill stores, \d+ bytes spill loads)", c.log))
    assert set(spills.values()) == {"0 bytes stack frame, 0 bytes spill stores, "
                                    "0 bytes spill loads"}, spills
    assert int(regs["oz_scale"]) <= most and int(regs["oz_scale_ab"]) <= most, regs
    plain = build(ozaki.STEPS, tuple(ozaki.steps_macros(1).items()))
    before = dict(re.findall(r"Function properties for (\w+)\n.*\n[^\n]*Used (\d+) registers",
                             plain.log))
    assert int(before["oz_scale"]) > most  # (so the bound is what moved it)
    assert {k: v for k, v in regs.items() if not k.startswith("oz_scale")} == {
        k: v for k, v in before.items() if not k.startswith("oz_scale")}


@needs_nvrtc
def test_the_schemes_passes_compile_without_spills():
    """hopper/ozaki.cu as runtime/ozaki.py loads it: every kernel the runtime launches is
    there, none spills or keeps a stack frame, and oz_crt stays within the 80 registers its
    launch bounds ask for (three blocks an SM), oz_crt_int within 128 (two)."""
    from sgemmlab.runtime import ozaki

    c = build(ozaki.STEPS, (("OZAKI", 1),))
    report = dict(re.findall(r"Function properties for (\w+)\n[^\n]*?(\d+ bytes stack frame, "
                             r"\d+ bytes spill stores, \d+ bytes spill loads)", c.log))
    assert set(report) == {"oz_norms", "oz_balance", "oz_split", "oz_crt", "oz_crt_int",
                           "oz_fallback", "oz_scale", "oz_ksums", "oz_scale_ab", "oz_norms_ab",
                           "oz_split_ab"}, c.log
    assert set(report.values()) == {"0 bytes stack frame, 0 bytes spill stores, "
                                    "0 bytes spill loads"}, report
    regs = dict(re.findall(r"Function properties for (\w+)\n.*\n[^\n]*Used (\d+) registers",
                           c.log))
    assert int(regs["oz_crt"]) <= 80 and int(regs["oz_crt_int"]) <= 128, regs
    assert not warnings_of(c.log), c.log


@needs_nvrtc
def test_the_pre_pass_moves_float4_when_aligned_and_floats_otherwise():
    """Both paths (trans = 0 row by row, trans = 1 by tiles) read float4 and write one (a
    copy) or two (big, small: the split); the unroll and the compiler's merging of the
    branches decide how many of each there are, so only that stores are at least as many is
    checked. The transpose goes through shared memory, between two barriers, by single
    floats (its columns are read)."""
    ops = opcodes(_sass(hopper.PREP, tuple(PREP_MACROS.items())))
    loads, stores = count(ops, "LDG.E.128"), count(ops, "STG.E.128")
    assert loads >= 2 and stores >= loads, ops  # both paths; the split writes two arrays
    assert count(ops, "LDG.E") > loads, "the scalar path for the rest"
    assert count(ops, "STS") and count(ops, "LDS") and count(ops, "BAR.SYNC"), ops
    assert count(ops, "LDS.128") == count(ops, "STS.128") == 0, "the tile is read by columns"


@needs_nvrtc
@pytest.mark.parametrize("name", ["tf32", "3xtf32_p1"])
def test_plain_sm90_refuses_the_kernel(name):
    """wgmma and setmaxnreg exist only for the arch-specific sm_90a."""
    from sgemmlab.runtime.compiler import CompileError

    rung, _, macros = variant(name)
    with pytest.raises(CompileError):
        build(rung.source, tuple(sorted(macros.items())), arch="sm_90")


def test_compile_only_compiles_what_this_file_checks(monkeypatch):
    calls = []
    monkeypatch.setattr(hopper, "compile_kernel",
                        lambda source, macros, arch: calls.append((source, dict(macros), arch)))
    for rung in (TF32, TF32X3):
        hopper.compile_only(rung, rung.seed)
    assert calls == [(r.source, rung_macros(r, r.seed), "sm_90a") for r in (TF32, TF32X3)]


# -- (b) the SASS shows the Hopper path ----------------------------------------------------
@needs_nvrtc
@pytest.mark.parametrize("name", VARIANT_NAMES)
def test_sass_has_hgmma_tma_mbarriers_and_setmaxnreg(name):
    macros, _ = build_variant(name)
    ops = opcodes(sass(name))
    split = VARIANTS[name][0] is TF32X3
    shape = f"HGMMA.64x{macros['BN']}x8.F32.TF32"
    # one HGMMA per k8 of the k-tile (BK = 32), three per k8 with 3xTF32; rung 20's k loop
    # is two k-tile steps (the fragments alternate between them)
    copies = 2 if split else 1
    assert ops.get(shape, 0) == copies * (3 if split else 1) * 32 // 8, ops
    assert count(ops, "HGMMA") == ops.get(shape, 0), "no other HGMMA shape"
    assert count(ops, "UTMALDG") == (3 if split else 2), "a copy per operand tile"
    assert count(ops, "SYNCS") >= 2 * macros["STAGES"] + 3, "mbarrier init, arrive, wait"
    assert any(op.startswith("SYNCS.PHASECHK") for op in ops), "no mbarrier wait"
    assert count(ops, "USETMAXREG") == 2, "one setmaxnreg per role"
    assert count(ops, "LDL") == count(ops, "STL") == 0, "local memory"
    assert "SR_GLOBALTIMER" not in sass(name), "no clock read in a library kernel"
    if split:
        assert ops.get("LDS", 0) == copies * 16, "A's fragments: 4 k8 x 4 values per k-tile"
    else:
        assert ops.get("LDS", 0) == 0, "TF32 reads A and B only through wgmma"


PROMOTED = [n for n in VARIANT_NAMES if VARIANTS[n][0] is TF32X3]


def _hgmma_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if re.search(r"\bHGMMA\.", ln)]


@needs_nvrtc
@pytest.mark.parametrize("name", PROMOTED)
def test_promotion_adds_the_run_into_registers_with_fadd_and_restarts_it(name):
    """Per k-tile step: 64 FADDs of the run into the sum (where a run can end) beside the
    16 of the split (x - big); 64 more after the k loop (the last run); where a run can
    start, the step's first HGMMA overwrites (a predicate on scale-d: UPn or !UPn, or !UPT
    with RZ when P = 1 makes every step a start), and every other HGMMA accumulates."""
    macros, _ = build_variant(name)
    text = sass(name)
    ops = opcodes(text)
    fadd = ops.get("FADD", 0)
    tail = 64 if macros.get("TAIL") else 0  # the sum of a tile's parts
    # a step promotes where a run can end in it: runs start at even k-tiles of an item
    # (warpgroup 0) and at P / 2 + multiples of P (warpgroup 1), so with P = 4 the odd step
    # never ends one, and the compiler drops its FADDs
    P = macros["PROMOTE"]
    sites = 2 if P % 2 or (P // 2) % 2 else 1
    assert fadd == 2 * 16 + 64 * sites + 64 + tail, f"{fadd} FADD"
    hgmma = _hgmma_lines(text)
    restarts = [ln for ln in hgmma if re.search(r",\s*!?UP[T\d]\b", ln)]  # scale-d's predicate
    # a step that can start a run restarts with its first HGMMA (small_a * big_b, kk = 0)
    assert len(hgmma) == 24, "\n".join(hgmma)
    assert restarts == [hgmma[0], hgmma[12]][:sites], "\n".join(hgmma)


@needs_nvrtc
@pytest.mark.parametrize("name", PROMOTED)
def test_inflight_keeps_a_k_tile_in_flight_and_uses_the_registers_setmaxnreg_gave(name):
    """INFLIGHT with P > 1 waits for all but the newest group inside a run (DEPBAR.LE gsb0,
    0x1); P = 1 ends a run every k-tile and waits for all; INFLIGHT = 0 always waits for
    all. sum + run + fragments pass the 168 registers of the entry but stay within 232."""
    macros, _ = build_variant(name)
    text = sass(name)
    waits = re.findall(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*(0x[0-9a-f]+)", text)
    inflight = macros.get("INFLIGHT", 1) and macros["PROMOTE"] > 1
    assert ("0x1" in waits) == bool(inflight), waits
    used = max(int(r) for r in re.findall(r"\bR(\d+)\b", text)) + 1
    assert 168 < used <= 232, f"{used} registers touched"
    if macros.get("INFLIGHT", 1):
        assert used > 200, f"{used}: the second set of fragments should show"


@needs_nvrtc
def test_tail_counts_parts_with_an_atomic_and_reads_them_from_l2():
    ops = opcodes(sass("3xtf32_p2_tail"))
    assert count(ops, "ATOMG.E.ADD") == 1, ops
    assert count(ops, "LDG.E.STRONG.GPU") == 2 * 64, "part 0, then the loop over the rest"
    ops = opcodes(sass("3xtf32_p2"))
    assert count(ops, "ATOMG") == 0 and count(ops, "LDG.E.STRONG") == 0, ops


@needs_nvrtc
@pytest.mark.parametrize("rung", [TF32, TF32X3], ids=["19", "20"])
def test_a_bias_in_the_epilogue_leaves_the_k_loop_as_it_was(rung):
    """SGEMM_SOURCE (kernels/epilogue.cuh) reaches the tensor-core rungs' store2: with a
    bias (2) or a matrix (1) the kernel takes X and ldx after ldc and reads beta's term
    from X. The k-loop (first HGMMA to last) of the bias variant is the one without a
    source, opcode for opcode; the matrix variant's has the same instructions (ptxas
    orders a few differently); the registers are the same."""
    from collections import Counter

    from sgemmlab.anatomy.sass import NoDisassembler, disassemble

    loops, regs, loads = {}, {}, {}
    for kind in (0, 1, 2):
        c = build(rung.source, tuple(sorted(hopper.gemm_macros(rung, rung.seed,
                                                                 kind).items())), rung.arch)
        clean(c, f"{rung.label} SGEMM_SOURCE={kind}")
        regs[kind] = c.resources.registers
        try:
            text = disassemble(c.cubin)
        except NoDisassembler as exc:
            pytest.skip(str(exc))
        ops = re.findall(r"/\*[0-9a-f]+\*/\s+(?:@!?U?P\S+\s+)?([A-Z][\w.]*)", text)
        hg = [i for i, op in enumerate(ops) if op.startswith("HGMMA")]
        loops[kind] = ops[hg[0]:hg[-1] + 1]
        loads[kind] = text
    assert regs[1] == regs[2] == regs[0]
    assert len(loops[0]) > 40
    assert loops[2] == loops[0]
    assert Counter(loops[1]) == Counter(loops[0])
    assert loads[1] != loads[0] and loads[2] != loads[0], "X and ldx are read"
    assert "SGEMM_SOURCE" not in hopper.gemm_macros(rung, rung.seed)
    assert hopper.gemm_macros(rung, rung.seed, 2)["SGEMM_SOURCE"] == 2
    assert hopper.gemm_macros(rung, rung.seed)["SMEM_EXPECT"] == rung.dynamic_smem(rung.seed)


# -- (c) the host agrees with the kernel -----------------------------------------------------
@needs_nvrtc
@pytest.mark.parametrize("name", ["tf32", "3xtf32_p1"])
def test_the_hosts_shared_memory_formula_is_checked_by_the_kernel(name):
    from sgemmlab.runtime.compiler import CompileError

    rung, _, macros = variant(name)
    build(rung.source, tuple(sorted(macros.items())))  # SMEM_EXPECT: the registry's formula
    wrong = dict(macros, SMEM_EXPECT=macros["SMEM_EXPECT"] + 16)
    with pytest.raises(CompileError, match="the host's shared-memory size matches"):
        build(rung.source, tuple(sorted(wrong.items())))


@needs_nvrtc
@pytest.mark.parametrize("rung, macros, message", [
    (19, {"BN": 192, "STAGES": 4}, "BN is 128 or 256"),
    (19, {"BN": 256, "STAGES": 5}, "shared memory per block <= 227 KB"),
    (19, {"BN": 128, "STAGES": 1}, "2 to 8 stages"),
    (19, {"BN": 128, "STAGES": 4, "GROUP_M": 0}, "GROUP_M >= 1"),
    (20, {"BN": 256}, "BN = 128 (a sum and a run of BN / 2 registers each)"),
    (20, {"STAGES": 1}, "2 to 8 stages"),
    (20, {"STAGES": 5}, "shared memory per block <= 227 KB"),
    (20, {"PROMOTE": 0}, "PROMOTE >= 1"),
    (20, {"INFLIGHT": 2}, "INFLIGHT is 0 or 1"),
    (20, {"TAIL": 2}, "TAIL is 0 or 1"),
    (20, {"GROUP_M": 0}, "GROUP_M >= 1"),
])
def test_static_asserts_refuse_what_the_kernel_cannot_do(rung, macros, message):
    from sgemmlab.runtime.compiler import CompileError

    with pytest.raises(CompileError, match=re.escape(message)):
        build(registry.rung(rung).source, tuple(sorted({"TILE_M": 128, "TILE_K": 32,
                                                        **macros}.items())))


@needs_nvrtc
def test_the_registrys_illegal_configurations_are_refused_by_a_static_assert():
    from sgemmlab.runtime.compiler import CompileError

    illegal = [(r, c) for r in (TF32, TF32X3) for c in r.configs(legal=False)]
    assert illegal, "rung 19's BN = 256 with 5 or 6 stages does not fit"
    # GROUP_M changes nothing a rule reads: one of each ring
    for r, cfg in {(r.number, c["BN"], c["STAGES"]): (r, c) for r, c in illegal}.values():
        with pytest.raises(CompileError, match="static assertion failed"):
            build_config(r, cfg)


def test_smem_formula_by_hand():
    # TF32 128 x 256, 4 stages: (16 + 32) KB per stage, 8 barriers, 1 KB alignment slack
    assert TF32.dynamic_smem({"BN": 256, "STAGES": 4}) == 4 * 49152 + 64 + 1024
    # 3xTF32 128 x 128: A, B_big and B_small, 16 KB each
    assert TF32X3.dynamic_smem({"BN": 128, "STAGES": 4}) == 4 * 49152 + 64 + 1024
    assert TF32.dynamic_smem({"BN": 128, "STAGES": 6}) == 6 * 32768 + 96 + 1024


def test_the_registry_and_the_runtime_agree_on_the_kernels_terms():
    assert (hopper.BM, hopper.BK) == (registry.TILE_M, registry.TILE_K) == (128, 32)
    assert TF32.tile(TF32.seed) == (128, 256) and TF32X3.tile(TF32X3.seed) == (128, 128)
    assert hopper.PREP_BLOCK[2] == 1
    assert {TF32.arch, TF32X3.arch} == {ARCH}
    assert TF32.threads(TF32.seed) == TF32X3.threads(TF32X3.seed) == 384
    assert TF32.macros(TF32.seed)["TILE_M"] == 128


def test_tail_split_and_workspace_by_hand():
    where = decompose
    # 8192^3, 128 x 128 tiles: 4096 = 31 x 132 + 4 leftover tiles, 8 parts of 32 k-tiles each
    assert where.tail_splits(4096, 132, 256) == 8
    assert where.split_workspace(4096, 132, 8) == (4 * 8 * 128 * 128, 4 * 256)
    # 4096^3: 100 leftover tiles of 132: no room to split
    assert where.tail_splits(1024, 132, 128) == 1
    assert where.split_workspace(1024, 132, 1) == (0, 0)
    assert where.tail_splits(64, 64, 32) == 1  # whole waves
    assert where.tail_splits(4, 3, 8) == 3  # the 3-block check: 1 leftover, 3 parts
    assert where.tail_splits(4, 3, 2) == 2  # at most one k-tile a part
    assert where.tail_splits(1, 132, 1) == 1


# -- (d) runtime/tma.py ------------------------------------------------------------------------
GOOD = Tiled2D(base=1 << 20, rows=1000, cols=1000, ld=1000, box_rows=128, box_cols=32)


def test_a_legal_map_has_no_problems():
    assert tiled_2d_problems(GOOD) == []
    assert GOOD.problems() == []


@pytest.mark.parametrize("change, words", [
    ({"ld": 1001}, "not a multiple of 16"),  # 4004-byte rows
    ({"ld": 999}, "less than cols"),
    ({"base": (1 << 20) + 8}, "not 16-byte aligned"),
    ({"rows": 0}, "rows = 0 is outside"),
    ({"cols": 2**32 + 1, "ld": 2**32 + 4}, "cols = 4294967297 is outside"),
    ({"box_rows": 257}, "box_rows = 257 is outside"),
    ({"box_cols": 33}, "box row is 132 bytes, not a multiple of 16"),
    ({"box_cols": 64}, "more than the 128-byte swizzle span"),
    ({"swizzle": 96}, "swizzle 96 is not one of"),
    ({"ld": 2**38}, "not below 2^40"),
    ({"elem_bytes": 3}, "element size 3"),
])
def test_each_broken_rule_is_named(change, words):
    m = Tiled2D(**{**GOOD.__dict__, **change})
    problems = tiled_2d_problems(m)
    assert any(words in p for p in problems), problems
    with pytest.raises(OperandError, match="tensor map refused"):
        tma.encode_tiled_2d(m)  # refused before the driver is asked


PLANES = Tiled2D(base=1 << 20, rows=300, cols=1000, ld=1008, box_rows=128, box_cols=128,
                 elem_bytes=1, planes=8, plane_ld=300 * 1008)  # rung 26's residue planes


@pytest.mark.parametrize("change, words", [
    ({}, None),
    ({"planes": 1}, None),  # still 3-D: the kernel reads 3-D boxes
    ({"plane_ld": 300 * 1008 - 16}, "less than rows x ld"),
    ({"plane_ld": 300 * 1008 + 8}, "not a multiple of 16"),
    ({"planes": 0}, "planes = 0 is outside"),
])
def test_a_stack_of_planes_is_checked_too(change, words):
    m = Tiled2D(**{**PLANES.__dict__, **change})
    problems = tiled_2d_problems(m)
    assert problems == [] if words is None else any(words in p for p in problems), problems


def test_a_stack_of_planes_is_a_3d_map():
    pytest.importorskip("cuda.bindings")
    args = tma.encode_args(PLANES)
    assert args[1] == 3 and [int(d) for d in args[3]] == [1000, 300, 8]
    assert [int(s) for s in args[4]] == [1008, 300 * 1008]
    assert [int(b) for b in args[5]] == [128, 128, 1]
    assert tma.encode_args(GOOD)[1] == 2


def test_no_swizzle_allows_wide_boxes():
    assert tiled_2d_problems(Tiled2D(**{**GOOD.__dict__, "swizzle": 0, "box_cols": 256})) == []


def _driver_or_none():
    try:
        from cuda.bindings import driver
    except ImportError:
        pytest.skip("cuda.bindings not importable")
    return driver


def test_encode_arguments_pass_the_bindings_type_checks():
    """cuda.bindings refuses plain ints in its array arguments (TypeError); past its checks,
    with no driver the call fails to load libcuda (RuntimeError), with one it runs."""
    driver = _driver_or_none()
    try:
        err, _ = driver.cuTensorMapEncodeTiled(*tma.encode_args(GOOD))
    except RuntimeError as exc:
        assert "libcuda" in str(exc) or "dlopen" in str(exc) or "CUDA" in str(exc), exc
    else:  # a driver: the call ran (CUDA_ERROR_NOT_INITIALIZED before cuInit is fine)
        assert isinstance(err, driver.CUresult)


def _packed(args, smem=0):
    from types import SimpleNamespace

    from sgemmlab.runtime.launch import Packed

    stand_in = SimpleNamespace(handle=0)  # no kernel, no stream: the packing alone
    return Packed(stand_in, stand_in, (2,), (384,), tuple(args), smem=smem)


def test_the_one_packer_holds_what_the_driver_copies_tensor_maps_included():
    tmap = bytes(range(128))
    p = _packed([tmap, np.int32(-7), np.float32(0.75), 0x7F0012345600, np.int64(1 << 40)],
                smem=200 * 1024)
    arr = (ctypes.c_void_p * 5).from_address(ctypes.addressof(p._params))
    at = [arr[i] for i in range(5)]
    assert ctypes.string_at(at[0], 128) == tmap
    assert at[0] % 64 == 0, "tensor maps are 64-byte aligned"
    assert ctypes.c_int32.from_address(at[1]).value == -7
    assert ctypes.c_float.from_address(at[2]).value == 0.75
    assert ctypes.c_uint64.from_address(at[3]).value == 0x7F0012345600
    assert ctypes.c_int64.from_address(at[4]).value == 1 << 40
    assert p._call[7] == 200 * 1024, "the dynamic shared memory reaches cuLaunchKernel"
    assert p.grid == (2, 1, 1) and p.block == (384, 1, 1)
    with pytest.raises(TypeError):  # the native switch takes no tensor maps
        p.export({})


@pytest.mark.parametrize("bad", [1.5, True, b"x" * 64, "s", None])
def test_the_packer_refuses_arguments_of_unknown_width(bad):
    with pytest.raises(TypeError):
        _packed([np.int32(1), bad])


def test_every_kernel_of_the_scheme_waits_for_the_launch_before_it_first():
    """With ozaki.OVERLAP a launch may start before the one before it in the stream ends: each
    kernel of hopper/ozaki.cu and rung 26 must wait for it (griddep_wait) before anything
    else, or it would read what is not written yet (and a kernel that returned without
    waiting would let the next one past its own predecessor)."""
    import re

    from sgemmlab.runtime.compiler import KERNEL_DIR

    for name in ("hopper/ozaki.cu", "hopper/26_ozaki_int8.cu"):
        text = (KERNEL_DIR / name).read_text()
        bodies = [m.end() for m in re.finditer(r"SGEMM_KERNEL[^{]*\{\n", text)]
        assert bodies, name
        for at in bodies:
            first = text[at:at + 200].split(";")[:2]
            assert [f.strip() for f in first] == ["griddep_wait()",
                                                  "griddep_launch_dependents()"], \
                f"{name}: a kernel starts with {first!r}"
