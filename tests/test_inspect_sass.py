"""The SASS parser (inspect/sass.py) on a hand-written listing and on committed cubins
(tests/data: rung 3 at BS = 32 and rung 10 at the H200 default, sm_90, NVRTC 13.0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sgemmlab import registry
from sgemmlab.inspect import sass

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
