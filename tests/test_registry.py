"""The registry on its own (no compiler, no GPU): lookup, configuration text, legality,
launch geometry and compile-time constants.

Whether the rules agree with the kernels' static_asserts is test_compile.py's business;
here the registry is checked against independent arithmetic.
"""

from __future__ import annotations

import math

import pytest

from sgemmlab import registry
from sgemmlab.registry import RUNGS, config_key, parse_config

RUNG_IDS = [f"r{r.number}" for r in RUNGS]

# -- lookup -------------------------------------------------------------------------------


def test_rungs_are_numbered_one_to_n_and_named_once():
    assert [r.number for r in RUNGS] == list(range(1, len(RUNGS) + 1))
    names = [r.name for r in RUNGS]
    assert len(set(names)) == len(names), f"duplicate rung names: {names}"
    for r in RUNGS:
        assert r.label == f"{r.number:02d}_{r.name}"
        page = r.page.split("/")[-1]
        assert r.page.startswith("ladder/") and page.startswith(f"{r.number:02d}_"), (
            f"rung {r.number}'s page {r.page!r} is not ladder/NN_name.*")


@pytest.mark.parametrize("r", RUNGS, ids=RUNG_IDS)
def test_lookup_by_number_name_and_label(r):
    for key in (r.number, str(r.number), r.name, r.label):
        assert registry.rung(key) is r, f"rung({key!r}) is not {r.label}"


_LOOKED_UP = (registry.ALL + registry.TENSOR + registry.HISTORY  # every rung rung() finds
              + registry.ORDERED)
_PAST = max(r.number for r in _LOOKED_UP) + 1  # the first number no rung has


@pytest.mark.parametrize("key", [0, _PAST, str(_PAST), "nope", "", "warp", "10_naive", "Naive"])
def test_unknown_rung_is_a_one_line_key_error_that_says_where_the_list_is(key):
    with pytest.raises(KeyError) as err:
        registry.rung(key)
    message = err.value.args[0]
    assert str(err.value) == message, "printed as written, not as a repr"
    assert f"unknown kernel {key!r}" in message and "`sgemmlab info`" in message
    first, last = min(r.number for r in _LOOKED_UP), max(r.number for r in _LOOKED_UP)
    assert f"numbered {first}-{last}" in message
    assert "\n" not in message and len(message) <= 100


# -- configuration text -------------------------------------------------------------------


def test_config_key_is_sorted_and_canonical():
    cfg = {"TN": 8, "BM": 128, "BK": 8, "TM": 8, "BN": 64}
    assert config_key(cfg) == "BK=8,BM=128,BN=64,TM=8,TN=8"
    assert config_key(dict(reversed(list(cfg.items())))) == config_key(cfg)


@pytest.mark.parametrize("r", RUNGS, ids=RUNG_IDS)
def test_config_key_round_trips_through_parse_config(r):
    for cfg in r.configs(legal=None):
        text = config_key(cfg)
        assert parse_config(text) == cfg, text


@pytest.mark.parametrize("text, expected", [
    ("BM=64,BN=32", {"BM": 64, "BN": 32}),
    ("bn = 32 ,  bm=64", {"BM": 64, "BN": 32}),
    (" BK=8, ", {"BK": 8}),
    ("PAD=0", {"PAD": 0}),
    ("", {}),
])
def test_parse_config_accepts_any_spacing_case_and_order(text, expected):
    assert parse_config(text) == expected


@pytest.mark.parametrize("text", ["BM", "BM=", "BM=x", "BM=1.5", "BM=64 BN=64", "BM=64;BN=64",
                                  "BM:64", "BM=0x40", "BM=64,BN"])
def test_parse_config_refuses_malformed_items(text):
    with pytest.raises(ValueError, match="NAME=INTEGER"):
        parse_config(text)


def test_parse_config_refuses_an_item_without_a_name():
    with pytest.raises(ValueError):
        parse_config("=64")


# -- legality -----------------------------------------------------------------------------


@pytest.mark.parametrize("r", RUNGS, ids=RUNG_IDS)
def test_seed_sets_every_constant_and_is_legal(r):
    assert set(r.seed) == set(r.space)
    assert r.violations(r.seed) == [], f"{r.label}'s seed {config_key(r.seed)} is illegal"
    assert r.is_legal(r.seed)


@pytest.mark.parametrize("r", RUNGS, ids=RUNG_IDS)
def test_configs_partition_the_space(r):
    everything = [config_key(c) for c in r.configs(legal=None)]
    legal = [config_key(c) for c in r.configs(legal=True)]
    illegal = [config_key(c) for c in r.configs(legal=False)]
    assert len(everything) == math.prod(len(v) for v in r.space.values())
    assert len(set(everything)) == len(everything)
    assert legal, f"{r.label} has no legal configuration"
    assert not set(legal) & set(illegal)
    assert sorted(legal + illegal) == sorted(everything)
    assert legal == [config_key(c) for c in r.configs()]  # legal only, by default


@pytest.mark.parametrize("r", RUNGS, ids=RUNG_IDS)
def test_violations_are_rule_texts_and_decide_legality(r):
    texts = [rule.text for rule in r.all_rules()]
    assert len(set(texts)) == len(texts), f"{r.label} has two rules with one text"
    for cfg in r.configs(legal=None):
        broken = r.violations(cfg)
        assert set(broken) <= set(texts)
        assert r.is_legal(cfg) == (broken == [])


@pytest.mark.parametrize("number, cfg, broken", [
    (4, {"BM": 64, "BN": 64, "BK": 8, "TM": 12}, "BM is a multiple of TM"),
    (5, {"BM": 128, "BN": 120, "BK": 8, "TM": 8, "TN": 16}, "BN is a multiple of TN"),
    (4, {"BM": 128, "BN": 128, "BK": 8, "TM": 4}, "threads per block <= 1024"),
    (5, {"BM": 128, "BN": 72, "BK": 8, "TM": 8, "TN": 8},
     "threads per block is a multiple of 32 (whole warps)"),
    (5, {"BM": 128, "BN": 128, "BK": 64, "TM": 8, "TN": 8},
     "static shared memory <= 49152 bytes"),
    (6, {"BM": 128, "BN": 128, "BK": 6, "TM": 8, "TN": 8},
     "BK is a multiple of 4 (float4 loads of A along k)"),
    (8, {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8, "PAD": 2},
     "PAD is a multiple of 4 (keeps float4 reads of the A tile aligned)"),
    (9, {"BM": 64, "BN": 32, "BK": 8, "TM": 8, "TN": 8, "PAD": 4},
     "at least 64 threads per block"),
    (10, {"BM": 128, "WM": 48}, "BM is a multiple of WM and BN of WN"),
    (10, {"BM": 128, "BN": 128, "WM": 32, "WN": 32},
     "4 or 8 warps per block (128 or 256 threads)"),
    (10, {"TM": 6}, "TM and TN are multiples of 4 (float4 shared-memory reads)"),
])
def test_violations_name_the_broken_rule(number, cfg, broken):
    r = registry.rung(number)
    cfg = {**r.seed, **cfg}  # the seed with the constants that break the rule
    problems = r.violations(cfg)
    assert broken in problems, f"{r.label} {config_key(cfg)}: got {problems}"
    assert not r.is_legal(cfg)


def test_a_configuration_with_wrong_constants_says_which():
    r = registry.rung(5)
    missing = dict(r.seed)
    del missing["TN"]
    [problem] = r.violations(missing)
    assert "must set exactly" in problem and "'TN'" in problem
    [problem] = r.violations({**r.seed, "WM": 64})
    assert "unknown ['WM']" in problem


@pytest.mark.parametrize("r", RUNGS, ids=RUNG_IDS)
def test_zero_or_negative_constants_are_illegal(r):
    called_legal = []
    for name in r.space:
        for value in (0, -4):
            if value == 0 and name in registry.MAY_BE_ZERO:
                continue  # PAD = 0, PREFETCH = 0: "none" is a legitimate value
            cfg = {**r.seed, name: value}
            if r.is_legal(cfg):
                called_legal.append(config_key(cfg))
    assert not called_legal, f"{r.label} calls these legal: {called_legal}"


@pytest.mark.parametrize("r", RUNGS, ids=RUNG_IDS)
def test_a_rule_whose_arithmetic_breaks_is_broken_not_a_crash(r):
    for name in r.space:
        cfg = {**r.seed, name: 0}
        r.violations(cfg)  # e.g. BM // TM with TM = 0 must not raise
        assert r.is_legal(cfg) == (r.violations(cfg) == [])


# -- launch geometry ------------------------------------------------------------------------

SHAPES_MN = [(1, 1), (17, 33), (33, 17), (129, 257), (1000, 1000), (4092, 4092), (4096, 4096),
             (1, 5000), (5000, 1)]


@pytest.mark.parametrize("r", RUNGS, ids=RUNG_IDS)
def test_grid_covers_c_with_no_spare_block(r):
    for cfg in (r.seed, *list(r.configs())[:: 7]):
        rows, cols = r.tile(cfg)
        for M, N in SHAPES_MN:
            grid = r.grid(cfg, M, N)
            blocks_m, blocks_n = math.ceil(M / rows), math.ceil(N / cols)
            want = (blocks_m, blocks_n, 1) if r.rows_on_x else (blocks_n, blocks_m, 1)
            assert grid == want, f"{r.label} {config_key(cfg)} at M={M}, N={N}"


def test_rung_1_puts_rows_on_x_and_rung_2_columns():
    assert registry.rung(1).rows_on_x and not any(r.rows_on_x for r in RUNGS[1:])
    assert registry.rung(1).grid({"BS": 32}, 33, 65) == (2, 3, 1)
    assert registry.rung(2).grid({"BS": 32}, 33, 65) == (3, 2, 1)
    assert registry.rung(5).grid(registry.rung(5).seed, 129, 1) == (1, 2, 1)


@pytest.mark.parametrize("r", RUNGS, ids=RUNG_IDS)
def test_blocks_of_legal_configs_are_launchable(r):
    for cfg in r.configs():
        x, y, z = r.block(cfg)
        assert r.threads(cfg) == x * y * z
        assert 1 <= x <= 1024 and 1 <= y <= 1024 and 1 <= z <= 64, config_key(cfg)
        assert x * y * z <= 1024 and (x * y * z) % 32 == 0, config_key(cfg)
        assert 0 <= r.smem_bytes(cfg) <= 48 * 1024, config_key(cfg)


def test_thread_counts_follow_the_tiles():
    assert registry.rung(3).threads({"BS": 16}) == 256
    assert registry.rung(4).threads({"BM": 64, "BN": 64, "BK": 8, "TM": 8}) == 512
    assert registry.rung(5).threads(registry.rung(5).seed) == 256
    warp = registry.rung(10)
    tiles = {**warp.seed, "BM": 128, "BN": 128, "WM": 64, "WN": 32}
    assert warp.threads(tiles) == (128 // 64) * (128 // 32) * 32
    assert warp.threads({**tiles, "WN": 64}) == (128 // 64) * (128 // 64) * 32


# -- compile-time constants ---------------------------------------------------------------


@pytest.mark.parametrize("r", RUNGS, ids=RUNG_IDS)
def test_macros_are_the_config_plus_threads(r):
    """The configuration (less the keys only the host reads, rung 14's SPLIT), the thread
    count and what the rung derives (WMITER; rung 11's fixed rung-12 switches)."""
    derived = {10: {"WMITER"}, 11: {"WMITER"}, 12: {"WMITER"}}.get(
        r.number, set())
    for cfg in r.configs():
        macros = r.macros(cfg)
        kept = {k: v for k, v in cfg.items() if k not in r.host_only}
        assert set(macros) == set(kept) | {"THREADS"} | derived
        assert {k: macros[k] for k in kept} == kept
        assert macros["THREADS"] == r.threads(cfg)
        assert all(isinstance(v, int) for v in macros.values())


def test_rung_10_derives_wmiter():
    r = registry.rung(10)
    for cfg in r.configs():
        per_warp = 32 * cfg["TM"] * cfg["TN"] * cfg["WNITER"]
        assert (cfg["WM"] * cfg["WN"]) % per_warp == 0, config_key(cfg)
        assert r.macros(cfg)["WMITER"] == cfg["WM"] * cfg["WN"] // per_warp, config_key(cfg)
    base = {**r.seed, "BM": 128, "BN": 128, "WM": 64, "WN": 32, "TM": 8, "TN": 4}
    assert r.macros({**base, "WNITER": 2})["WMITER"] == 1  # 64*32 / (32*8*4*2)
    two = {**base, "WNITER": 1}
    assert r.is_legal(two) and r.macros(two)["WMITER"] == 2
    # a warp tile too small for its lanes: WMITER is clamped to 1 and the rule says why
    small = {**base, "WM": 32, "WN": 32, "WNITER": 4}
    assert r.macros(small)["WMITER"] == 1
    assert any(text.startswith("a warp's 32 lanes") for text in r.violations(small))


# -- defaults -------------------------------------------------------------------------------


@pytest.mark.parametrize("r", RUNGS, ids=RUNG_IDS)
def test_default_for_an_unknown_gpu_is_a_copy_of_the_seed(r):
    for gpu in (None, "", "No Such GPU 9000"):
        cfg = r.default(gpu)
        assert cfg == dict(r.seed)
        cfg[next(iter(cfg))] = -1  # the caller's copy, not the registry's
        assert r.default(gpu) == dict(r.seed)


def test_default_uses_the_tuned_configuration_of_that_gpu(monkeypatch):
    r = registry.rung(5)
    tuned = {**r.seed, "BK": 16}
    monkeypatch.setattr(registry, "tuned_defaults",
                        lambda: {"NVIDIA H200": {r.label: tuned}})
    monkeypatch.setattr(registry.core, "tuned_defaults",
                        lambda: {"NVIDIA H200": {r.label: tuned}})
    assert r.default("NVIDIA H200") == tuned
    assert r.default("NVIDIA A100") == dict(r.seed)
    assert registry.rung(6).default("NVIDIA H200") == dict(registry.rung(6).seed)


def test_shipped_defaults_are_legal_configurations_of_known_rungs():
    labels = {r.label: r for r in registry.ALL + registry.TENSOR + registry.HISTORY
              + registry.ORDERED}
    for gpu, per_rung in registry.tuned_defaults().items():
        for label, cfg in per_rung.items():
            assert label in labels, f"defaults for {gpu} name an unknown rung {label!r}"
            r = labels[label]
            assert set(cfg) <= set(r.space), f"{label} on {gpu} sets unknown {set(cfg)}"
            # a constant added to the space after the tuning keeps its seed value
            full = r.default(gpu)
            assert full == {**r.seed, **cfg} and r.is_legal(full), (
                f"the shipped default of {label} on {gpu}, {config_key(full)}, is illegal: "
                f"{r.violations(full)}")


def test_covering_sample_starts_with_first_and_takes_every_value():
    r = registry.rung(13)
    configs = list(r.configs())
    picked = registry.covering_sample(configs, 24, first=[r.seed])
    assert len(picked) == 24 and picked[0] == r.seed
    assert len({config_key(c) for c in picked}) == 24
    assert all(r.is_legal(c) for c in picked)
    for name in r.space:  # every value a legal configuration takes appears in the sample
        assert {c[name] for c in picked} == {c[name] for c in configs}, name
    assert registry.covering_sample(configs[:5], 24) == configs[:5]
    assert registry.covering_sample(configs, 24, first=[r.seed]) == picked  # deterministic


def test_the_h200_defaults_of_rungs_6_to_9_show_their_ideas():
    """Each rung of 6-9 is one idea, so at its H200 default the idea must be visible: rungs
    6 and 7 share a tile where 6's B reads conflict (TN = 8: two groups of four columns,
    which rung 7 splits apart; at TN = 4 the two kernels are the same); rung 8 is that tile
    with padded A; rung 9, the wide search, runs something rung 8 does not."""
    d = {n: registry.rung(n).default("NVIDIA H200") for n in (6, 7, 8, 9)}
    assert d[6] == d[7] and d[6]["TN"] >= 8
    assert {k: v for k, v in d[8].items() if k != "PAD"} == d[7] and d[8]["PAD"] > 0
    assert d[9] != d[8]


def test_every_rung_names_a_binder_the_launcher_has():
    from sgemmlab.runtime.launch import BINDERS

    for r in _LOOKED_UP:
        assert r.binder in BINDERS, (r.label, r.binder)
    assert {r.binder for r in _LOOKED_UP} == set(BINDERS), "no binder is left unused"
