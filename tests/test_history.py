"""The history rungs (registry.HISTORY, kernels/history/): rung 21, Volkov and Demmel's 2008
SGEMM mapped onto row-major operands.

On the CPU: (a) the registry entry, and that nothing chooses it (dispatch and the tables read
RUNGS, FAMILY and ALL); (b) its rules both ways: every legal configuration compiles for sm_90
with no spills and no stack frame, in both alignment variants (the whole space, 36
configurations x 2 variants: ~25 s cold on two cores), and every rule has a static_assert of
its text; (c) the bill replay at the seed, against counts derived by hand below; (d) what
`sgemmlab inspect 21` reports: the SASS hot loop (FFMA share, no local memory, LDS.128 of A,
B's LDGs), registers and occupancy; (e) the header. On the GPU (skipped without one): float64
references at ragged shapes, alpha and beta with C poisoned when beta = 0, views, and a few
configurations of the space, with test_kernels_gpu's helpers.
"""

from __future__ import annotations

import re

import pytest

import test_kernels_gpu as kernels_gpu
from conftest import first_error, probe_config, resource_problems
from sgemmlab import registry
from sgemmlab.anatomy import report, sass
from sgemmlab.anatomy.bill import count, trace
from sgemmlab.registry import config_key
from sgemmlab.runtime import occupancy
from sgemmlab.runtime.compiler import KERNEL_DIR, CompileError
from sgemmlab.tune import table
from sgemmlab.tune.search import compile_many

ARCH = "sm_90"
JOBS = 2
R21 = registry.rung(21)
SEED = {"BN": 64, "TM": 16, "BK": 16}  # the paper's: 64 threads, a 16 x 64 tile of C, 16 k
_STATIC_ASSERT = re.compile(r'static assertion failed with "((?:[^"\\]|\\.)*)"')


# -- (a) the registry entry -----------------------------------------------------------------


def test_rung_21_is_a_history_rung_looked_up_like_any_other():
    assert registry.HISTORY == (R21,)
    for key in (21, "21", "volkov2008", "21_volkov2008"):
        assert registry.rung(key) is R21
    assert R21.source == "history/21_volkov2008.cu" and (KERNEL_DIR / R21.source).is_file()
    assert "Volkov" in R21.title and "2008" in R21.title
    # the seed is the paper's; the H200 default is what the search there found (tune file)
    assert R21.seed == SEED and R21.is_legal(R21.seed)
    tuned = registry.tuned_defaults()["NVIDIA H200"]["21_volkov2008"]
    assert R21.default("NVIDIA H200") == {**SEED, **tuned} and R21.is_legal(tuned)
    assert R21.precision == "ieee" and R21.vectorized and not R21.features


def test_nothing_chooses_rung_21():
    """Dispatch reads RUNGS and FAMILY, the tables ALL from rung 10 on, `--kernel best` the
    highest of RUNGS: a history rung is in none of them."""
    for group in (registry.RUNGS, registry.FAMILY, registry.ALL, registry.TENSOR,
                  table.default_rungs()):
        assert 21 not in {r.number for r in group}
    assert registry.best().number != 21


def test_the_space_the_tile_and_the_launch():
    assert {k: set(v) for k, v in R21.space.items()} == {
        "BN": {32, 64, 128, 256}, "TM": {8, 16, 32}, "BK": {8, 16, 32}}
    configs = list(R21.configs())
    assert len(configs) == 36 and not list(R21.configs(legal=False))  # all legal
    for cfg in configs:
        assert R21.block(cfg) == (cfg["BN"], 1, 1)  # one thread per column of the tile
        assert R21.tile(cfg) == (cfg["TM"], cfg["BN"])
        assert R21.smem_bytes(cfg) == cfg["BK"] * cfg["TM"] * 4  # As[BK][TM]
        assert R21.macros(cfg) == {**cfg, "THREADS": cfg["BN"]}
    # rows of C on blockIdx.y, columns on blockIdx.x
    assert R21.grid(SEED, 17, 67) == (2, 2, 1) and R21.grid(SEED, 4096, 4096) == (64, 256, 1)


@pytest.mark.parametrize("change, broken", [
    ({"TM": 6}, "TM is a multiple of 4 (float4 reads of the A tile)"),
    ({"BK": 10}, "BK is a multiple of 4 (B four k at a time, float4 copies of A)"),
    ({"BN": 48}, "threads per block is a multiple of 32 (whole warps)"),
    ({"BN": 2048}, "threads per block <= 1024"),
    ({"TM": 128}, "TM accumulators, TM values of A, 8 of B (four and the next four) and 24 "
                  "for indices fit a thread's registers: min(255, 65536 / threads per "
                  "block)"),
    ({"BK": 512, "TM": 32}, "static shared memory <= 49152 bytes"),
])
def test_violations_name_the_broken_rule(change, broken):
    cfg = {**SEED, **change}
    assert broken in R21.violations(cfg) and not R21.is_legal(cfg)


# -- (b) the rules against the compiler --------------------------------------------------


def test_every_legal_config_compiles_without_spills():
    """The whole space, both alignment variants (compile_many builds both and reports the
    worse), no spills, no stack frame, ptxas's shared memory the registry's."""
    configs = list(R21.configs())
    problems = resource_problems(compile_many([(R21, c) for c in configs], ARCH, JOBS))
    assert not problems, (f"{len(problems)} of {len(configs)} legal configurations of "
                          f"{R21.label} fail for {ARCH}:\n  " + "\n  ".join(problems))


def _probes() -> dict[str, dict]:
    """Per rule, a configuration near the seed that breaks it (the rules no such neighbour
    can break are given one by hand: the thread limit needs BN > 512)."""
    probes = {rule.text: probe_config(R21, rule.text) for rule in R21.all_rules()}
    probes["threads per block <= 1024"] = {**SEED, "BN": 2048}
    return {text: cfg for text, cfg in probes.items() if cfg is not None}


def test_every_rule_has_a_static_assert():
    probes = _probes()
    assert len(probes) == len(R21.all_rules()) - 1  # all but "every constant is positive"
    missing = []
    results = compile_many([(R21, c) for c in probes.values()], ARCH, JOBS)
    for text, ((_, cfg), res) in zip(probes, results):
        fired = _STATIC_ASSERT.findall(str(res))
        if not isinstance(res, CompileError):
            missing.append(f"{text!r}: {config_key(cfg)} gave {res}")
        elif text not in fired:
            missing.append(f"{text!r}: {config_key(cfg)} refused with "
                           f"{fired or first_error(res)}")
    assert not missing, "rules with no static_assert of the same text:\n  " + "\n  ".join(
        missing)


# -- (c) the bill at the seed, by hand ---------------------------------------------------


def test_the_seed_bill_is_the_hand_count():
    """BN = 64 threads (2 warps), TM = 16, BK = 16; 4096^3 row-major, lda = K, ldb = N.
    Per warp per tile of 16 k:
      FFMA   TM per k per thread: 16 x 16 = 256.
      A      TM * BK = 256 floats = 64 float4, one per thread: 1 LDG.128 per warp, 512 B;
             lane l reads row l/4 (of 8 per warp), floats 4(l%4) .. +3: each row 64 B in
             two 32-byte sectors of one 128-byte line: 16 sectors, 8 lines.
      As     4 STS.32 per float4 (transposed: word (4(l%4) + j) * TM + l/4). The bank is
             16 (j % 2) + l/4 mod 32 (16 * 4(l%4) is 0 mod 32): 8 banks for 32 lanes,
             4 distinct words each: 4 wavefronts per STS, 16 in all, 4-way.
      B      one LDG.32 per k (the prefetch, rows 4 .. 19): 16, each 32 consecutive floats
             = 128 B, 4 sectors, 1 line: 2048 B, 64 sectors, 16 lines.
      As     TM/4 LDS.128 per k = 64, every lane at one address (a broadcast): 4 quarter-
             warp phases of one wavefront each: 256 wavefronts, 1-way; 8192 words read.
      C      TM STG.32 per warp, once: 16 x 128 B = 64 sectors.
    So 2560 B of sectors for 2 x 32 x 256 = 16384 FLOPs; the block requests (16 x 16 +
    16 x 64) x 4 = 5120 B for 2 x 16 x 64 x 16 = 32768 FLOPs: 6.4 FLOP/B. Shared words per
    FFMA: 8192 / (32 x 256) = 1; LDS per FFMA 64 / 256. The DRAM model: 64 x 256 blocks x
    256 K steps x 5120 B + C's 4096^2 x 4 B."""
    b = count(R21, SEED, (4096, 4096, 4096))
    assert (b.threads, b.warps, b.bk, b.ffma_per_warp) == (64, 2, 16, 256)
    a, a_s, bb, a_l, c = (b.op("A"), b.op("As", "store"), b.op("B"), b.op("As"),
                          b.op("C", "store"))
    assert (a.instructions, a.bytes_requested, a.sectors, a.lines) == (1, 512, 16, 8)
    assert (a_s.instructions, a_s.words, a_s.wavefronts, a_s.conflict_ways) == (4, 128, 16, 4)
    assert (bb.instructions, bb.bytes_requested, bb.sectors, bb.lines) == (16, 2048, 64, 16)
    assert (a_l.instructions, a_l.words, a_l.wavefronts, a_l.conflict_ways) == (64, 8192,
                                                                               256, 1)
    assert (c.instructions, c.sectors) == (16, 64)
    assert b.global_sector_bytes_per_warp == 2560 and b.flops_per_warp == 16384
    assert b.block_bytes_requested == b.block_bytes_distinct == 5120
    assert b.intensity == pytest.approx(6.4)
    assert b.smem_loads_per_ffma == 1 and b.lds_per_ffma == 0.25
    assert b.copy_instructions == {"LDG": 17, "STS": 4, "LDGSTS": 0}
    assert b.smem_wavefronts_per_warp == 272
    assert b.dram_bytes == 64 * 256 * 256 * 5120 + 4096 * 4096 * 4


@pytest.mark.parametrize("cfg", [{"BN": 128, "TM": 32, "BK": 16}, {"BN": 32, "TM": 8,
                                                                  "BK": 32}],
                         ids=config_key)
def test_the_bill_follows_the_tile_over_the_space(cfg):
    b = count(R21, cfg)
    tm, bn, bk = cfg["TM"], cfg["BN"], cfg["BK"]
    assert b.intensity == pytest.approx(tm * bn / (2 * (tm + bn)))  # (TM + BN) * 4 B per k
    assert b.smem_loads_per_ffma == 1  # every A value a thread uses comes from As
    assert b.op("As").instructions == bk * tm // 4 and b.op("B").instructions == bk
    assert b.op("As").conflict_ways == 1


def test_the_edge_of_k_reads_zero():
    """K = 5 < BK + 4: tile 0 is an edge tile. A: granule 0 (k 0..3) by float4, granule 1
    element by element, only k = 4 inside; B: of the 16 prefetched rows 4 .. 19 only row 4."""
    t = trace(R21, SEED, (16, 64, 5))
    b_loads = [x for x in t.accesses if x.operand == "B"]
    assert len(b_loads) == 16 and sum(x.active.any() for x in b_loads) == 1
    a_loads = [x for x in t.accesses if x.operand == "A"]
    lanes = [int(x.active.sum()) for x in a_loads]
    # the float4: rows x granule 0; the scalars: k = 4 for rows x granule 1, none past K
    assert lanes == [16, 16, 0, 0, 0]
    assert all(x.width == 16 for x in a_loads[:1]) and all(x.width == 4 for x in a_loads[1:])


# -- (d) inspect: the SASS, the registers, the occupancy ---------------------------------


@pytest.fixture(scope="module")
def inspected():
    if sass.find_nvdisasm() is None:
        pytest.skip("nvdisasm not found: no SASS")
    return report.inspect_rung(R21, SEED, (4096, 4096, 4096), occupancy.gpu("h200"))


def test_the_hot_loop_is_the_design(inspected):
    """Per tile of 16 k (one pass of the loop): 256 FFMA, 64 LDS.128 (A's broadcasts), 16
    LDG.32 of B and A's one LDG.128, 4 STS, 2 barriers; no local memory anywhere."""
    s = inspected["sass"]
    assert s["ffma"] == 256 and s["ffma_share"] > 0.6, s
    assert s["local_memory_instructions"] == 0
    assert s["lds_widths"] == {"128": 64}
    assert s["ldg_widths"] == {"32": 16, "128": 1}
    assert s["categories"]["STS"] == 4 and s["categories"]["barrier"] == 2
    res = inspected["resources"]
    assert res["spill_stores"] == res["spill_loads"] == res["stack_bytes"] == 0
    assert res["static_smem_bytes"] == 16 * 16 * 4


def test_registers_and_occupancy(inspected):
    """Limited by registers, not by threads (64 per block) or shared memory (1 KB)."""
    o = inspected["occupancy"]["h200"]
    assert inspected["resources"]["registers"] <= 80  # the header says 72 (NVRTC 13.0)
    assert tuple(o["limits"]) == ("registers",) and o["blocks"] >= 12
    assert inspected["prediction"]["limit"] == "shared"  # the header's prediction


def test_the_cli_inspects_rung_21(monkeypatch):
    from typer.testing import CliRunner

    from sgemmlab.cli import app

    monkeypatch.setenv("NO_COLOR", "1")
    result = CliRunner().invoke(app, ["inspect", "21", "--gpu", "h200", "--seed"])
    assert result.exit_code == 0, result.output
    assert "21_volkov2008" in result.output and "limited by shared" in result.output


# -- (e) the header ----------------------------------------------------------------------


def test_the_header_is_short_and_keeps_the_measured_markers():
    text = (KERNEL_DIR / R21.source).read_text()
    head = text[:text.index("#include")]
    assert head.splitlines()[0].startswith("// Rung 21 ")
    assert len(head.splitlines()) <= 32, "the header is more than about 30 lines"
    assert text.count("// <measured>") == 1 and text.count("// </measured>") == 1
    assert text.index("// <measured>") < text.index("// </measured>") < text.index("#include")
    for claim in ("C^T = B^T A^T", "82 %", "56 %", "sgemmlab inspect 21"):
        assert claim in head, claim
    assert '#include "common.cuh"' in text  # include paths start at kernels/


# -- on the GPU ----------------------------------------------------------------------------

SHAPES = [(1, 1, 1), (17, 67, 31), (129, 257, 100), (1000, 1000, 1000), (64, 64, 64),
          # K at the tile edges: two edge tiles (19), one (20, 36), ragged everything (51)
          (16, 64, 19), (33, 65, 20), (16, 64, 36), (70, 130, 51), (4096, 4096, 4096)]


@pytest.mark.gpu
@pytest.mark.parametrize("alpha, beta", kernels_gpu.ALPHA_BETA)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_rung_21_matches_float64(shape, alpha, beta):
    kernels_gpu._check(R21, kernels_gpu._default(R21), shape, alpha, beta)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", registry.covering_sample(list(R21.configs()), 6,
                                                         first=[SEED]), ids=config_key)
def test_configurations_at_ragged_shapes(cfg):
    for shape in (kernels_gpu.RAGGED, (68, 44, 36), (129, 257, 100)):
        kernels_gpu._check(R21, cfg, shape, 1.0, 0.0)
        kernels_gpu._check(R21, cfg, shape, 0.75, -1.25)


@pytest.mark.gpu
@pytest.mark.parametrize("alpha, beta", kernels_gpu.ALPHA_BETA[:2])
@pytest.mark.parametrize("layout", kernels_gpu.LAYOUTS)
@pytest.mark.parametrize("shape", kernels_gpu.VIEW_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_views_with_any_alignment_and_leading_dimension(shape, layout, alpha, beta):
    kernels_gpu.test_views_with_any_alignment_and_leading_dimension(R21, shape, layout, alpha,
                                                                    beta)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(67, 45, 33), (68, 44, 36), (256, 256, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_beta_zero_never_reads_c(shape):
    kernels_gpu.test_beta_zero_never_reads_c(R21, shape)
