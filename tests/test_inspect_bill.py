"""The bill (inspect/bill.py) against the seed's figures, the rung headers' claims, closed
forms, and a brute-force replay written thread by thread with plain loops."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

from sgemmlab import registry
from sgemmlab.bench.bill import block_tile_intensity
from sgemmlab.inspect.bill import count, trace


# -- the seed's figures ------------------------------------------------------------------
def test_rung_1_moves_1056_bytes_and_rung_2_160_per_warp_per_k():
    # seed configuration BS = 32: a warp's 32 lanes walk 32 rows of A (rung 1) or one row
    one = count(registry.rung(1), {"BS": 32})
    two = count(registry.rung(2), {"BS": 32})
    assert one.op("A").sector_bytes == 1024 and one.op("B").sector_bytes == 32
    assert one.global_sector_bytes_per_warp == 1056
    assert two.global_sector_bytes_per_warp == 160
    assert one.flops_per_warp == two.flops_per_warp == 64
    # both request the same 256 bytes; only the sectors differ
    assert one.op("A").bytes_requested == two.op("A").bytes_requested == 128


@pytest.mark.parametrize("number, config, expected", [
    (3, {"BS": 32}, 2.0),
    (4, {"BM": 64, "BN": 64, "BK": 8, "TM": 8}, 1.125),
    (5, {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}, 0.25),
])
def test_shared_loads_per_ffma_of_rungs_3_to_5(number, config, expected):
    rung = registry.rung(number)
    assert rung.seed == config  # the seed's configurations are the registry's seeds
    assert count(rung, config).smem_loads_per_ffma == pytest.approx(expected)


# -- closed forms over whole configuration spaces ---------------------------------------
def _some(rung, n=12):
    return list(itertools.islice(rung.configs(), 0, None, max(1, len(list(rung.configs())) // n)))


@pytest.mark.parametrize("number", range(3, 11))
def test_intensity_is_the_block_tile_formula(number):
    rung = registry.rung(number)
    for cfg in _some(rung):
        BM, BN = rung.tile(cfg)
        assert count(rung, cfg).intensity == pytest.approx(BM * BN / (2 * (BM + BN))), cfg
        assert block_tile_intensity(rung, cfg) == count(rung, cfg).intensity


@pytest.mark.parametrize("number", range(4, 11))
def test_shared_words_per_ffma_is_fragment_over_outer_product(number):
    rung = registry.rung(number)
    for cfg in _some(rung):
        if number == 4:
            m, n = cfg["TM"], 1
        elif number == 10:
            m = rung.derived(cfg)["WMITER"] * cfg["TM"]
            n = cfg["WNITER"] * cfg["TN"]
        else:
            m, n = cfg["TM"], cfg["TN"]
        assert count(rung, cfg).smem_loads_per_ffma == pytest.approx((m + n) / (m * n)), cfg


# -- bank conflicts the rung headers state ----------------------------------------------
@pytest.mark.parametrize("number, change, operand, ways", [
    (6, {}, ("Bs", "load"), 2),  # TN = 8: lanes tc and tc+4 share banks
    (7, {}, ("Bs", "load"), 1),  # split columns: 128 contiguous bytes per phase
    (6, {"TN": 4}, ("Bs", "load"), 1),
    (6, {}, ("As", "store"), 2),  # PAD = 0, BK = 8: the two k-groups of a row collide
    (8, {"PAD": 0, "BK": 16}, ("As", "store"), 4),
    (8, {"PAD": 0, "BK": 32}, ("As", "store"), 8),
    (8, {}, ("As", "store"), 1),  # PAD = 4, BK = 8: conflict-free
    (8, {"BK": 16}, ("As", "store"), 2),
    (8, {"BK": 32}, ("As", "store"), 4),
    (10, {}, ("As", "store"), 2),  # BK = 16, PAD = 4
    (10, {}, ("As", "load"), 1),
    (10, {}, ("Bs", "load"), 1),
])
def test_bank_conflicts_named_in_the_headers(number, change, operand, ways):
    rung = registry.rung(number)
    cfg = {**rung.seed, **change}
    assert rung.is_legal(cfg)
    assert count(rung, cfg).ops[operand].conflict_ways == pytest.approx(ways)


# -- brute force: every thread, plain loops, independent of bill.py ----------------------
def _phases(lanes: list[tuple[int, int] | None]) -> int:
    """Wavefronts of one warp instruction from (first word, words) per lane, by hand."""
    width = next(w for x in lanes if x for w in [x[1]])
    per_phase = 32 // width if width > 1 else 32
    total = 0
    for p in range(0, 32, per_phase):
        banks = defaultdict(set)
        for x in lanes[p:p + per_phase]:
            if x:
                for w in range(x[0], x[0] + x[1]):
                    banks[w % 32].add(w)
        total += max(map(len, banks.values())) if banks else 0
    return total


def _brute_warptiling(c):
    """Rung 10's shared reads for one K step, written out lane by lane from the .cu file."""
    WMITER = c["WM"] * c["WN"] // (32 * c["TM"] * c["TN"] * c["WNITER"])
    WSUBM, WSUBN = c["WM"] // WMITER, c["WN"] // c["WNITER"]
    threads = (c["BM"] // c["WM"]) * (c["BN"] // c["WN"]) * 32
    stride = c["BM"] + c["PAD"]
    reads = defaultdict(list)  # (operand, instruction index) -> per-thread (word, 4)
    ffma = 0
    for tid in range(threads):
        warp, lane = divmod(tid, 32)
        wr, wc = divmod(warp, c["BN"] // c["WN"])
        lr, lc = divmod(lane, WSUBN // c["TN"])
        trow, tcol = wr * c["WM"] + lr * c["TM"], wc * c["WN"] + lc * c["TN"]
        n = 0
        for k in range(c["BK"]):
            for wm in range(WMITER):
                for i in range(0, c["TM"], 4):
                    reads[("As", n)].append((k * stride + trow + wm * WSUBM + i, 4))
                    n += 1
            for wn in range(c["WNITER"]):
                for j in range(0, c["TN"], 4):
                    reads[("Bs", n)].append((k * c["BN"] + tcol + wn * WSUBN + j, 4))
                    n += 1
            if tid == 0:
                ffma += WMITER * c["TM"] * c["WNITER"] * c["TN"]
    warps = threads // 32
    words = {"As": 0, "Bs": 0}
    wave = {"As": 0, "Bs": 0}
    for (op, _), lanes in reads.items():
        words[op] += 4 * len(lanes)
        for w in range(warps):
            wave[op] += _phases(lanes[32 * w:32 * w + 32])
    return words, {k: v / warps for k, v in wave.items()}, ffma


@pytest.mark.parametrize("change", [{}, {"TM": 4, "WNITER": 1}, {"BM": 64, "BN": 256, "WM": 32,
                                                                  "WN": 64, "TM": 4, "WNITER": 1},
                                    {"BK": 32, "WN": 64, "WM": 32, "WNITER": 4,
                                     "TM": 4}])
def test_rung_10_shared_reads_match_a_lane_by_lane_replay(change):
    rung = registry.rung(10)
    cfg = {**rung.seed, **change}
    assert rung.is_legal(cfg), rung.violations(cfg)
    words, wave, ffma = _brute_warptiling(cfg)
    b = count(rung, cfg)
    assert b.ffma_per_warp == ffma
    threads = rung.threads(cfg)
    assert b.smem_loads_per_ffma == pytest.approx(
        (words["As"] + words["Bs"]) / (threads * ffma))
    assert b.op("As").wavefronts == pytest.approx(wave["As"])
    assert b.op("Bs").wavefronts == pytest.approx(wave["Bs"])


@pytest.mark.parametrize("BS", [8, 16, 32])
def test_rung_3_global_sectors_match_a_brute_force_count(BS):
    """Every lane's A and B address of one K step; sectors per warp counted with sets."""
    K = N = 256
    sectors = {"A": 0, "B": 0}
    threads = BS * BS
    for w in range(threads // 32):
        seen = {"A": set(), "B": set()}
        for tid in range(32 * w, 32 * w + 32):
            tx, ty = tid % BS, tid // BS
            seen["A"].add((ty * K + tx) * 4 // 32)  # A[row][k0 + tx]
            seen["B"].add((ty * N + tx) * 4 // 32)  # B[k0 + ty][col]
        for op in seen:
            sectors[op] += len(seen[op])
    b = count(registry.rung(3), {"BS": BS}, (256, 256, 256))
    for op in sectors:
        assert b.op(op).sectors == pytest.approx(sectors[op] / (threads // 32))


def test_every_legal_configuration_traces_whole_warps():
    for rung in registry.RUNGS:
        for cfg in _some(rung, 4):
            t = trace(rung, cfg)
            assert t.threads == rung.threads(cfg) and t.threads % 32 == 0
            assert all(a.addr.shape == (t.threads,) for a in t.accesses)


def test_dram_traffic_of_a_block_tile():
    rung = registry.rung(10)
    cfg = rung.default("NVIDIA H200")  # BM = 64, BN = 256, BK = 16
    b = count(rung, cfg, (4096, 4096, 4096))
    blocks = (4096 // 64) * (4096 // 256)
    assert b.block_bytes_distinct == b.block_bytes_requested == (64 + 256) * 16 * 4
    assert b.dram_bytes == blocks * (4096 // 16) * (64 + 256) * 16 * 4 + 4096 * 4096 * 4
