"""The SASS parser (anatomy/sass.py) on a hand-written listing and on committed cubins
(tests/data: rung 3 at BS = 32 and rung 10 at the H200 default, sm_90, NVRTC 13.0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sgemmlab import registry
from sgemmlab.anatomy import sass

DATA = Path(__file__).parent / "data"

LISTING = """
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_0:
        /*0010*/                   LDS.128 R4, [R0] ;
        /*0020*/                   LDS R8, [R0+0x80] ;
.L_x_1:
        /*0030*/                   FFMA R9, R4, R8, R9 ;
        /*0040*/                   FFMA R10, R5, R8, R10 ;
        /*0050*/                   IADD3 R0, R0, 0x4, RZ ;
        /*0060*/              @P0 BRA `(.L_x_1) ;
        /*0070*/                   LDG.E.128 R12, desc[UR4][R2.64] ;
        /*0080*/                   STL [R1], R12 ;
        /*0090*/                   ISETP.GE.AND P1, PT, R0, 0x10, PT ;
        /*00a0*/              @!P1 BRA `(.L_x_0) ;
        /*00b0*/                   EXIT ;
"""


def test_parse_and_find_the_innermost_loop():
    insns, labels = sass.parse(LISTING)
    assert len(insns) == 12 and labels == {".L_x_0": 0x10, ".L_x_1": 0x30}
    loop = sass.hot_loop(insns, labels)
    # both loops hold 2 FFMAs; the inner one is smaller
    assert (loop.start, loop.end) == (0x30, 0x60)
    assert loop.ffma == 2 and loop.total == 4 and loop.overhead == 2
    assert loop.overhead_per_ffma == 1.0 and loop.ffma_share == 0.5


def _ffmas(*lines: str) -> list:
    return [sass.Insn(16 * i, "FFMA", ops, None) for i, ops in enumerate(lines)]


def test_bank_conflicts_model():
    # R4 and R8 share bank 0: one conflict; R5 (bank 1) with R8 and R10 (bank 0) still has
    # two in bank 0: a second; R9 + R8.reuse'd + R11 -> R9, R11 in bank 1, R8 from the cache
    body = _ffmas("R9, R4, R8.reuse, R9", "R10, R5, R8, R10", "R12, R9, R8, R11")
    assert sass.bank_conflicts(body) == 2
    # the reuse flag on the second one keeps R8 out of the third's reads: R9 and R11 in bank 1
    body = _ffmas("R9, R4, R8.reuse, R9", "R10, R5, R8.reuse, R10", "R12, R9, R8, R11")
    assert sass.bank_conflicts(body) == 2
    # operands in different banks, or immediates and RZ, never conflict
    assert sass.bank_conflicts(_ffmas("R9, R4, R7, RZ", "R2, R3, 1.5, R2")) == 0
    # any other instruction between two FFMAs clears the reuse cache
    body = _ffmas("R1, R4.reuse, R7, RZ", "R3, R4, R9, R2")
    assert sass.bank_conflicts(body) == 0  # R4 from the cache: R9 and R2 in two banks
    body.insert(1, sass.Insn(8, "IADD3", "R0, R0, 0x4, RZ", None))
    assert sass.bank_conflicts(body) == 1  # R4 read again, with R2 in bank 0
    # a register named twice is read once (measured: docs/operands-h200.md)
    assert sass.bank_conflicts(_ffmas("R9, R4, R4, R7")) == 0
    assert sass.bank_conflicts(_ffmas("R9, R4, R4, R6")) == 1


def test_bank_cycles_per_instruction_and_pooled():
    # (2 even, 1 odd) then (1 even, 2 odd): 2 + 2 cycles one at a time, 3 + 3 reads pooled
    body = _ffmas("R1, R2, R4, R5", "R3, R6, R7, R9")
    # reading ahead, the second borrows the first's free odd slot: 2 + 1
    assert sass.bank_cycles(body) == {"instructions": 2, "ffma": 2, "per_instruction": 4,
                                      "pooled": 3, "lookahead": 3}
    # a NOP's slot takes a read: (2, 1) + NOP is 3 cycles one at a time, 2 pooled
    body = [sass.Insn(0, "NOP", "", None)] + _ffmas("R1, R2, R4, R5")
    assert sass.bank_cycles(body) == {"instructions": 2, "ffma": 1, "per_instruction": 3,
                                      "pooled": 2, "lookahead": 2}
    # two such FFMAs after the NOP: only the first borrows (reads go one instruction early)
    body = [sass.Insn(0, "NOP", "", None)] + _ffmas("R1, R2, R4, R5", "R3, R6, R8, R7")
    assert sass.bank_cycles(body)["lookahead"] == 4 and sass.bank_cycles(body)["pooled"] == 4
    body = [sass.Insn(0, "NOP", "", None), sass.Insn(16, "NOP", "", None)] + \
        _ffmas("R1, R2, R4, R5", "R3, R6, R8, R7")
    assert sass.bank_cycles(body)["lookahead"] == 5 and sass.bank_cycles(body)["pooled"] == 4


def test_categories():
    assert sass.category("LDS.128") == "LDS" and sass.category("LDG.E.128.CONSTANT") == "LDG"
    assert sass.category("LDGSTS.E.BYPASS.128") == "LDGSTS"
    assert sass.category("STL") == sass.category("LDL") == "local"
    assert sass.category("BAR.SYNC.DEFER_BLOCKING") == "barrier"
    assert sass.category("IMAD.WIDE.U32") == "integer/address"
    insns, labels = sass.parse(LISTING)
    whole = sass.whole_kernel(insns)
    assert whole["local"] == 1 and whole["LDG"] == 1 and whole["branch"] == 3


needs_nvdisasm = pytest.mark.skipif(sass.find_nvdisasm() is None,
                                    reason="nvdisasm not installed")


@needs_nvdisasm
def test_rung_3_hot_loop_from_its_cubin():
    loop, whole = sass.analyse((DATA / "inspect_03_smem_BS32_sm90.cubin").read_bytes())
    # BS = 32 steps of k, unrolled: 32 FFMA; the As row reads are fused into LDS.128 (8 of
    # them), the Bs column reads stay 32-bit (32)
    assert loop.ffma == 32
    assert loop.widths("LDS") == {"128": 8, "32": 32}
    assert loop.counts["LDG"] == 2 and loop.counts["STS"] == 2
    assert loop.counts["barrier"] == 2 and whole["local"] == 0


@needs_nvdisasm
def test_rung_10_hot_loop_from_its_cubin():
    c = registry.rung(10).default("NVIDIA H200")
    assert (c["BM"], c["BN"], c["BK"], c["WM"], c["WN"], c["TM"], c["TN"]) == (
        64, 256, 16, 32, 64, 4, 4)
    loop, whole = sass.analyse((DATA / "inspect_10_warptiling_h200_vec4_sm90.cubin")
                               .read_bytes())
    wmiter = 32 * 64 // (32 * 4 * 4 * 1)  # 4
    assert loop.ffma == 16 * (wmiter * 4) * 4  # BK x outer product: 1024
    assert loop.widths("LDS") == {"128": 16 * (wmiter + 1)}  # 80 LDS.128
    # A_LOADS + B_LOADS float4 prefetches (the scalar LDGs are the edge fallback, not taken)
    assert loop.widths("LDG")["128"] == 1 + 4
    assert loop.ffma_share > 0.8 and loop.overhead_per_ffma < 0.15
    assert whole["local"] == 0


NESTED = """
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_0:
        /*0010*/                   FFMA R1, R2, R3, R1 ;
.L_x_1:
        /*0020*/                   FFMA R9, R4, R8, R9 ;
        /*0030*/                   FFMA R10, R5, R8, R10 ;
        /*0040*/                   FFMA R11, R6, R8, R11 ;
        /*0050*/              @P0 BRA `(.L_x_1) ;
        /*0060*/                   FFMA R12, R7, R8, R12 ;
        /*0070*/                   FFMA R13, R7, R8, R13 ;
        /*0080*/              @P1 BRA `(.L_x_0) ;
        /*0090*/                   EXIT ;
"""


def test_a_persistent_loop_narrows_to_its_k_loop():
    insns, labels = sass.parse(NESTED)
    # the outer loop holds 6 FFMAs, the inner one 3: at least a third, so the inner one is hot
    loop = sass.hot_loop(insns, labels)
    assert (loop.start, loop.end, loop.ffma) == (0x20, 0x50, 3)
    # with two FFMAs fewer inside, the inner loop holds less than a third: the outer one stays
    fewer = NESTED.replace("FFMA R11, R6, R8, R11", "IADD3 R11, R11, 0x1, RZ").replace(
        "FFMA R10, R5, R8, R10", "IADD3 R10, R10, 0x1, RZ")
    insns, labels = sass.parse(fewer)
    loop = sass.hot_loop(insns, labels)
    assert (loop.start, loop.end, loop.ffma) == (0x10, 0x80, 4)


SPLIT = """
.L_x_0:
        /*0000*/                   FFMA R1, R2, R3, R1 ;
.L_x_1:
        /*0010*/                   FFMA R9, R4, R8, R9 ;
        /*0020*/                   FFMA R10, R5, R8, R10 ;
        /*0030*/              @P0 BRA `(.L_x_1) ;
.L_x_2:
        /*0040*/                   IADD3 R11, R11, 0x1, RZ ;
        /*0050*/                   FFMA R9, R4, R8, R9 ;
        /*0060*/                   FFMA R10, R5, R8, R10 ;
        /*0070*/              @P1 BRA `(.L_x_2) ;
        /*0080*/              @P2 BRA `(.L_x_0) ;
"""


def test_a_split_k_loop_narrows_to_its_smaller_part():
    """Rung 24: a steady k-loop and the last steps' loop inside the loop over tiles, each with
    a third of its FFMAs or more: the smaller is the hot loop."""
    loop = sass.hot_loop(*sass.parse(SPLIT))
    assert (loop.start, loop.end, loop.ffma) == (0x10, 0x30, 2)


@needs_nvdisasm
@pytest.mark.parametrize("number", [13, 14])
def test_rungs_13_14_hot_loop_is_one_k_tile(number):
    """A fresh NVRTC compile of the seed (BK=8, TM=16, TN=8, REG_TRANSPOSE=1). Rung 14's
    loop over its tiles holds the epilogue's FFMAs too; its hot loop is still the k loop."""
    from sgemmlab.anatomy.report import compile_for

    rung = registry.rung(number)
    cfg = rung.seed
    assert (cfg["BK"], cfg["TM"], cfg["TN"], cfg["REG_TRANSPOSE"]) == (8, 16, 8, 1)
    loop, whole = sass.analyse(compile_for(rung, cfg, "sm_90").cubin)
    assert loop.ffma == 8 * 16 * 8  # the k-tile, unrolled
    assert loop.widths("LDS")["128"] == 8 * (16 // 4 + 8 // 4)  # 4 + 2 LDS.128 per k
    assert loop.counts["STS"] == 2 * 4  # two granules of A, stashed as 4 STS.32 each
    assert loop.counts["LDGSTS"] >= 2 and loop.widths("LDG")["128"] >= 2
    assert loop.overhead_per_ffma < 0.25 and whole["local"] == 0


@needs_nvdisasm
def test_rung_11_scalar_a_reads_are_fused_along_k_in_the_sass():
    """The source reads A as WMITER*TM scalars per k (the bill counts those); the compiler,
    with the k loop unrolled, reads each row of As[m][k] four k at a time as LDS.128 instead.
    The source-level bill (and its 4-way conflict) is not what the SM executes."""
    from sgemmlab.anatomy.report import compile_for

    rung = registry.rung(11)
    c = rung.seed  # BK = 16, WMITER = 2, TM = 8, WNITER = 1, TN = 4
    loop, _ = sass.analyse(compile_for(rung, c, "sm_90").cubin)
    assert loop.ffma == 16 * 2 * 8 * 4
    rows_a = 2 * 8
    assert loop.widths("LDS")["128"] == rows_a * 16 // 4 + 16 * 1  # not 16 x 16 LDS.32
    assert loop.counts["LDGSTS"] == (128 * 16 // 4 + 16 * 64 // 4) // 128  # 4 + 2 cp.async.16


@needs_nvdisasm
def test_a_bias_in_the_epilogue_leaves_the_k_loop_as_it_was():
    """kernels/epilogue.cuh's bias variant (SGEMM_SOURCE = 2): rung 25 at 128 x 32 warp
    tiles with A through registers (the patch dispatch runs large x @ W with) keeps the hot
    loop of its build without a source, stall for stall; the general source's row
    arithmetic made ptxas schedule that loop 5.6 % slower (and the H200 ran it 7 % slower)."""
    from sgemmlab.runtime.compiler import compile_kernel
    from sgemmlab.runtime.launch import SOURCE_BIAS, variant_macros

    rung = registry.rung(25)
    cfg = {**rung.default("NVIDIA H200"), "WM": 128, "WN": 32, "TM": 16, "TN": 8,
           "REG_TRANSPOSE": 1}
    stalls = {}
    for kind in (0, SOURCE_BIAS):
        macros = rung.macros(cfg) | variant_macros(rung, True, source=kind)
        loop, _ = sass.analyse(compile_kernel(rung.source, macros, "sm_90").cubin)
        assert loop.ffma == 1024
        stalls[kind] = loop.stalls
    assert stalls[SOURCE_BIAS] == stalls[0]
