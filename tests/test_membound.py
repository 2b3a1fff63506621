"""The memory-bound family (registry.FAMILY, kernels/membound/) without a GPU: the registry's
description of each rung (numbering, domain, launch geometry) and NVRTC builds for sm_90.

(a) registry: numbered after the ladder, found by number, name and label; `serves` is what
    `domain` says; the grid covers C exactly (one block more in either direction would
    start past the edge), and every served shape fits gridDim.y <= 65535;
(b) the seed and a covering sample of the legal configurations compile in every variant the
    launcher can ask for (row- and column-major A and B, with and without SGEMM_VEC4) with
    no spills and no stack frame, and ptxas agrees with the registry about shared memory;
(c) the rules agree with the kernels' static_asserts in both directions (as
    tests/test_compile.py checks the ladder);
(d) each header keeps the generated <measured> block's markers.

Builds use the default cache directory, as test_compile.py does, so later runs are warm.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import re

import pytest

from conftest import first_error, illegal_sample, probe_config, resource_problems
from sgemmlab import registry
from sgemmlab.registry import FAMILY, MEMBOUND, Rung, config_key
from sgemmlab.runtime.compiler import KERNEL_DIR, CompileError
from sgemmlab.tune.search import compile_many

ARCH = "sm_90"
JOBS = 2
SAMPLE = 16  # legal configurations compiled per rung (seed first), in all 8 variants
ILLEGAL_SAMPLE = 24
GRID_Y_MAX = 65535
INT32_MAX = 2**31 - 1
LAYOUTS = [(False, False), (True, False), (False, True), (True, True)]
_STATIC_ASSERT = re.compile(r'static assertion failed with "((?:[^"\\]|\\.)*)"')

RUNG_PARAMS = [pytest.param(r, id=f"r{r.number}") for r in FAMILY]
MEMBOUND_PARAMS = [pytest.param(r, id=f"r{r.number}") for r in MEMBOUND]


def _by_number(n: int) -> Rung:
    return registry.rung(n)


# -- (a) the registry ---------------------------------------------------------------------


def test_the_family_is_numbered_after_the_ladder_and_lives_in_its_folders():
    assert [r.number for r in FAMILY] == list(
        range(len(registry.RUNGS) + 1, len(registry.RUNGS) + 1 + len(FAMILY)))
    assert registry.ALL == registry.RUNGS + FAMILY
    assert FAMILY == MEMBOUND + registry.SMALL
    names = [r.name for r in registry.ALL]
    assert len(set(names)) == len(names)
    for r in FAMILY:
        folder = "membound" if r in MEMBOUND else "small"
        assert r.label == f"{r.number:02d}_{r.name}"
        assert r.source == f"{folder}/{r.label}.cu", r.source
        assert (KERNEL_DIR / r.source).is_file()
        for key in (r.number, str(r.number), r.name, r.label):
            assert registry.rung(key) is r
        assert r not in registry.RUNGS  # `sgemmlab ladder` leaves them out
        # the memory-bound rungs claim (a part of) what they serve; the small-tile rung
        # serves any shape and claims none
        for shape in ((1, 1, 1), (1, 4096, 4096), (4096, 1, 4096), (4096, 4096, 8),
                      (4096, 4096, 4096), (17, 17, 17)):
            assert not r.preferred(*shape) or r.serves(*shape), (r.label, shape)
            if r not in MEMBOUND:
                assert not r.preferred(*shape)
        assert any(r.preferred(1, 4096, 4096) for r in MEMBOUND)
    for r in MEMBOUND:  # every layout; the skinny ones split K (tests/test_splitk_skinny.py)
        # rung 17 stages A and B element by element: C alone decides its float4 variant
        want = {"layouts", "splitk", "source"} if r.number in (15, 16) else {"layouts",
                                                                              "source", "vec4_c"}
        assert r.features == frozenset(want) and r.vectorized


@pytest.mark.parametrize("r", RUNG_PARAMS)
def test_seed_is_legal_and_every_config_is_deterministic(r):
    assert set(r.seed) == set(r.space)
    assert r.violations(r.seed) == []
    texts = [rule.text for rule in r.all_rules()]
    assert len(set(texts)) == len(texts)
    for cfg in r.configs(legal=None):
        broken = r.violations(cfg)
        assert set(broken) <= set(texts)
        assert r.is_legal(cfg) == (broken == [])
        assert r.deterministic(cfg), "no atomic sums anywhere in the family"
    assert list(r.configs()), f"{r.label} has no legal configuration"


@pytest.mark.parametrize("r", RUNG_PARAMS)
def test_legal_blocks_are_launchable_and_macros_are_config_plus_threads(r):
    for cfg in r.configs():
        x, y, z = r.block(cfg)
        assert (y, z) == (1, 1) and 32 <= x <= 1024 and x % 32 == 0, config_key(cfg)
        assert 0 < r.smem_bytes(cfg) <= 48 * 1024, config_key(cfg)
        kept = {k: v for k, v in cfg.items() if k not in r.host_only}
        assert r.macros(cfg) == {**kept, "THREADS": x}


SMALL_SIDES = (1, 2, 3, 7, 8, 13, 16)
LONG_SIDES = (1, 17, 31, 64, 127, 1000, 4097, 8191, 65535 * 16 + 1, INT32_MAX)


def test_serves_is_what_the_domain_says():
    m, n, k = _by_number(15), _by_number(16), _by_number(17)
    assert "M <= 16" in m.domain and "N <= 16" in n.domain and "K <= 64" in k.domain
    for s in SMALL_SIDES:
        for big in LONG_SIDES:
            assert m.serves(s, big, big) and m.serves(s, 1, 1)
            assert n.serves(big, s, big) and n.serves(1, s, 1)
            assert k.serves(big, s, s) and k.serves(big, 4099, s)
    for big in (17, 18, 4096, INT32_MAX):
        assert not m.serves(big, 1, 1) and not n.serves(1, big, 1)
        assert not k.serves(1, 1, max(big, 65))  # rung 17 serves K up to 64
    limit = registry.TINY_K_MAX_N
    assert str(limit) in k.domain and limit == GRID_Y_MAX * 128
    assert k.serves(1, limit, 16) and not k.serves(1, limit + 1, 16)


def _covers(r: Rung, cfg: dict, M: int, N: int) -> None:
    rows, cols = r.tile(cfg)
    grid = r.grid(cfg, M, N)
    gm, gn = (grid[0], grid[1]) if r.rows_on_x else (grid[1], grid[0])
    where = f"{r.label} {config_key(cfg)} at M={M}, N={N}: grid {grid}"
    assert grid[2] == 1, where
    assert gm * rows >= M and (gm - 1) * rows < M, where  # every row, no spare block
    assert gn * cols >= N and (gn - 1) * cols < N, where
    assert grid[1] <= GRID_Y_MAX and grid[0] <= INT32_MAX, f"{where}: does not launch"


RAGGED = (1, 2, 3, 5, 13, 17, 31, 127, 1009, 4099, 65535, 65537, 65535 * 16 + 3, INT32_MAX)


@pytest.mark.parametrize("r", RUNG_PARAMS)
def test_the_grid_covers_every_served_shape_exactly(r):
    configs = [r.seed] + list(r.configs())[::5]
    for cfg in configs:
        for M, N in itertools.product(RAGGED + SMALL_SIDES, repeat=2):
            if r.number == 17 and N > registry.TINY_K_MAX_N:
                N = registry.TINY_K_MAX_N
            if r.serves(M, N, 1):
                _covers(r, cfg, M, N)


def test_long_sides_go_where_the_grid_has_room():
    """Rung 15's long side is N (gridDim.x); rung 16's and 17's rows are on gridDim.x, so M
    may pass 65535 tiles."""
    assert not _by_number(15).rows_on_x
    assert _by_number(16).rows_on_x and _by_number(17).rows_on_x
    r16, r17 = _by_number(16), _by_number(17)
    assert r16.grid({**r16.seed, "BM": 16, "RN": 1}, 65535 * 16 + 1, 3) == (65536, 3, 1)
    assert r17.grid({**r17.seed, "BM": 32}, 65535 * 32 + 1, 129) == (65536, 2, 1)
    assert r17.grid(r17.seed, 1, registry.TINY_K_MAX_N)[1] == GRID_Y_MAX


# -- (b) builds ----------------------------------------------------------------------------


def _variant(r: Rung, ta: bool, tb: bool, vec4: bool) -> Rung:
    """The rung as the launcher compiles it for these layouts (SGEMM_TA / SGEMM_TB ride in
    `derived`, so compile_many builds them) with or without SGEMM_VEC4."""
    layout = {**({"SGEMM_TA": 1} if ta else {}), **({"SGEMM_TB": 1} if tb else {})}
    return dataclasses.replace(r, derived=lambda c: layout, vectorized=vec4)


def _sample(r: Rung) -> list[dict]:
    """The seed, every shipped default, then a covering sample of the space."""
    tuned = [t[r.label] for t in registry.tuned_defaults().values() if r.label in t]
    return registry.covering_sample(list(r.configs()), SAMPLE + len(tuned),
                                    first=[r.seed, *tuned])


@pytest.mark.parametrize("ta, tb", LAYOUTS, ids=["NN", "TN", "NT", "TT"])
@pytest.mark.parametrize("vec4", [True, False], ids=["vec4", "scalar"])
@pytest.mark.parametrize("r", RUNG_PARAMS)
def test_sampled_configs_compile_in_every_variant_without_spills(r, vec4, ta, tb):
    if vec4 and not r.vectorized:
        pytest.skip(f"{r.label} has no float4 variant")
    configs = _sample(r)
    assert r.seed in configs
    items = [(_variant(r, ta, tb, vec4), c) for c in configs]
    problems = resource_problems(compile_many(items, ARCH, JOBS))
    variant = f"TA={int(ta)} TB={int(tb)} VEC4={int(vec4)}"
    assert not problems, f"{r.label} ({variant}):\n  " + "\n  ".join(problems)


# -- (c) rules and static_asserts ------------------------------------------------------------


def _illegal(r: Rung) -> list[dict]:
    return illegal_sample(r, ILLEGAL_SAMPLE)


@pytest.mark.parametrize("r", RUNG_PARAMS)
def test_illegal_configs_of_the_space_are_refused_by_a_static_assert(r):
    configs = _illegal(r)
    assert configs, f"every configuration of {r.label}'s space is legal: nothing tested"
    wrong = []
    for (_, cfg), res in compile_many([(r, c) for c in configs], ARCH, JOBS):
        broken = r.violations(cfg)
        if not isinstance(res, CompileError):
            wrong.append(f"{config_key(cfg)} breaks {broken} but gave {res!r}")
        elif not set(_STATIC_ASSERT.findall(str(res))) & set(broken):
            wrong.append(f"{config_key(cfg)} breaks {broken}; refused with "
                         f"{_STATIC_ASSERT.findall(str(res)) or first_error(res)}")
    assert not wrong, "\n  ".join([f"{r.label}:"] + wrong)




@pytest.mark.parametrize("r", RUNG_PARAMS)
def test_every_rule_has_a_static_assert_of_the_same_text(r):
    # a host rule (rung 18's SPLIT) concerns a key no kernel sees: no static_assert mirrors it
    kernel_rules = [rule for rule in r.all_rules() if not (rule.host or rule.search)]
    probes = {rule.text: cfg for rule in kernel_rules
              if (cfg := probe_config(r, rule.text)) is not None}
    # the rung's own rules must all be reachable near the seed (of the shared ones, "positive"
    # never is, no probe value being 0, nor "whole warps" where threads are 32 * WARPS)
    own = {x.text for x in r.rules if not (x.host or x.search)}
    assert own <= set(probes), sorted(own - set(probes))
    results = compile_many([(r, c) for c in probes.values()], ARCH, JOBS)
    missing = []
    for (text, cfg), (_, res) in zip(probes.items(), results):
        if not isinstance(res, BaseException):
            missing.append(f"{text!r}: {config_key(cfg)} compiled")
        elif text not in _STATIC_ASSERT.findall(str(res)):
            missing.append(f"{text!r}: {config_key(cfg)} refused with "
                           f"{_STATIC_ASSERT.findall(str(res)) or first_error(res)}")
    assert not missing, f"{r.label}:\n  " + "\n  ".join(missing)


# -- (d) headers ------------------------------------------------------------------------------


@pytest.mark.parametrize("r", RUNG_PARAMS)
def test_the_header_is_short_and_keeps_the_measured_markers(r):
    text = (KERNEL_DIR / r.source).read_text()
    head = text[:text.index("#include")].splitlines()
    assert head[0].startswith(f"// Rung {r.number} ")
    assert len(head) <= 40, f"{r.source}: a {len(head)}-line header"
    assert text.count("// <measured>") == 1 and text.count("// </measured>") == 1
    assert text.index("// <measured>") < text.index("// </measured>") < text.index("#include")


@pytest.mark.parametrize("r", MEMBOUND_PARAMS)
def test_the_memory_bound_headers_predict_the_memory_bound_shapes(r):
    text = (KERNEL_DIR / r.source).read_text()
    for shape in ("1x4096x4096", "4096x1x4096", "8x4096x4096", "16x11008x4096", "4096x4096x8"):
        assert shape in text, f"{r.source}: no prediction for {shape}"


def test_floors_quoted_in_the_headers_follow_from_the_bytes():
    """The floor is the bytes of A, B and C over the measured copy bandwidth, 4.23 TB/s."""
    def floor_us(M, N, K):
        return 4 * (M * K + K * N + M * N) / 4.23e12 * 1e6

    assert math.isclose(floor_us(1, 4096, 4096), 15.9, abs_tol=0.05)
    assert math.isclose(floor_us(8, 4096, 4096), 15.9, abs_tol=0.05)
    assert math.isclose(floor_us(16, 11008, 4096), 42.9, abs_tol=0.05)
    assert math.isclose(floor_us(4096, 4096, 8), 15.9, abs_tol=0.05)
    for r in FAMILY:
        text = (KERNEL_DIR / r.source).read_text()
        for shape, value in re.findall(r"(\d+x\d+x\d+)\s+floor ([\d.]+) us", text):
            M, N, K = map(int, shape.split("x"))
            assert math.isclose(float(value), floor_us(M, N, K), abs_tol=0.05), (
                f"{r.source}: {shape} floor {value} us, the bytes say {floor_us(M, N, K):.1f}")


# -- (e) rung 17: all of K staged once up to 16, chunks of 16 past it -------------------------

DEEP_SHAPES = ("6662x3191x22", "4823x1154x40", "4093x4093x64")  # the header's K > 16 shapes
TM12 = {"BM": 96, "BN": 128, "TM": 12}  # legal, off the space: passes of 4 rows, not 8


def test_tiny_k_serves_k_up_to_64_and_claims_only_k_up_to_16():
    """Rung 17 computes every K up to 64; dispatch takes it without a table only for K <= 16
    (`preferred`): for K 17..64 the table decides."""
    k = _by_number(17)
    limit = registry.TINY_K_MAX_N
    for K in range(1, 65):
        for M, N in ((1, 1), (4099, 4097), (INT32_MAX, 129), (1, limit)):
            assert k.serves(M, N, K), (M, N, K)
        assert k.preferred(4096, 4096, K) == (K <= 16), K
    for K in (65, 66, 128, 4096, INT32_MAX):
        assert not k.serves(4096, 4096, K) and not k.preferred(4096, 4096, K), K
    assert not k.serves(1, limit + 1, 64)


def test_tiny_k_register_rule_names_both_paths_and_excludes_no_tm():
    """K > 16 keeps 8 (or 4) rows' sums per pass, not all TM: the K <= 16 path's 4*16 values
    of B stay the larger need, so every TM of the space (the seed's 32 too) stays legal."""
    k = _by_number(17)
    (rule,) = [x for x in k.rules if "registers" in x.text]
    assert "K <= 16" in rule.text and "K > 16" in rule.text
    assert k.is_legal(k.seed) and k.is_legal(TM12)
    assert {c["TM"] for c in k.configs()} == set(k.space["TM"])


def test_tiny_k_every_legal_config_fits_128_registers_in_every_variant():
    """Both paths are one kernel, so the long path's registers are the short path's too. Every
    legal configuration (and TM = 12, off the space) compiles in all 8 variants without spills
    and within 128 registers: 256-thread blocks still fit two to an SM, the occupancy the
    K <= 16 path was measured at."""
    k = _by_number(17)
    configs = list(k.configs()) + [TM12]
    problems = []
    for (ta, tb), vec4 in itertools.product(LAYOUTS, (True, False)):
        variant = f"TA={int(ta)} TB={int(tb)} VEC4={int(vec4)}"
        results = list(compile_many([(_variant(k, ta, tb, vec4), c) for c in configs], ARCH,
                                    JOBS))
        problems += [f"{variant} {p}" for p in resource_problems(results)]
        problems += [f"{variant} {config_key(c)}: {res.registers} registers"
                     for (_, c), res in results
                     if not isinstance(res, BaseException) and res.registers > 128]
    assert not problems, "17_tiny_k:\n  " + "\n  ".join(problems)


def _k_loop(rung: Rung, cfg: dict, vec4: bool) -> dict[str, int]:
    """Instruction categories of the K > 16 path's step loop: the innermost loop with FFMAs
    and no global access or barrier (the K <= 16 path's loops store C)."""
    from sgemmlab.anatomy import sass
    from sgemmlab.runtime.compiler import compile_kernel
    from sgemmlab.runtime.launch import variant_macros

    compiled = compile_kernel(rung.source, rung.macros(cfg) | variant_macros(rung, vec4), ARCH)
    try:
        insns, labels = sass.parse(sass.disassemble(compiled.cubin))
    except sass.NoDisassembler as exc:
        pytest.skip(str(exc))
    addrs = [i.addr for i in insns]
    loops = []
    for br in insns:
        if br.opcode.split(".")[0] == "BRA" and labels.get(br.target, br.addr + 1) <= br.addr:
            body = insns[addrs.index(labels[br.target]):addrs.index(br.addr) + 1]
            cats = collections.Counter(sass.category(i.opcode) for i in body)
            if cats["FFMA"] and not ({"LDG", "STG", "barrier", "local"} & set(cats)):
                loops.append(collections.Counter(i.opcode.split(".")[0] + (
                    ".128" if ".128" in i.opcode else "") for i in body))
    assert len(loops) == 1, f"{config_key(cfg)}: {len(loops)} candidate k loops"
    return loops[0]


@pytest.mark.parametrize("cfg", [pytest.param(_by_number(17).seed, id="seed"),
                                 pytest.param({"BM": 64, "BN": 128, "TM": 8}, id="TM8")])
def test_tiny_k_deep_step_is_128_ffma_and_12_shared_loads(cfg):
    """The header's bill for K > 16: a step of 4 k is 128 FFMA (8 rows x 4 columns x 4 k) from
    one float4 of A per row and four of B (12 LDS.128 under SGEMM_VEC4; B's four as scalars
    without it, 8 + 16), and few other instructions."""
    r17 = _by_number(17)
    vec = _k_loop(r17, cfg, True)
    assert vec["FFMA"] == 128 and vec["LDS.128"] == 12 and vec["LDS"] == 0, dict(vec)
    assert sum(vec.values()) <= 150, dict(vec)
    scalar = _k_loop(r17, cfg, False)
    assert scalar["FFMA"] == 128 and scalar["LDS.128"] == 8 and scalar["LDS"] == 16, dict(scalar)


def test_tiny_k_header_predicts_the_deep_shapes():
    """Shapes with K in 17..64 the big-tile rungs serve badly (their floors are checked with
    the others' by test_floors_quoted_in_the_headers_follow_from_the_bytes)."""
    text = (KERNEL_DIR / _by_number(17).source).read_text()
    head = text[:text.index("// <measured>")]
    for shape in DEEP_SHAPES:
        assert re.search(rf"{shape}\s+floor [\d.]+ us.*: ~[\d.]+ us", head), shape
    assert "K <= 64" in head.splitlines()[0]
