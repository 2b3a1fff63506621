"""The bill (anatomy/bill.py) against the seed's figures, the rung headers' claims, closed
forms, and brute-force replays written thread by thread with plain loops."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

from sgemmlab import registry
from sgemmlab.anatomy.bill import count, stream_k_fixup, trace
from sgemmlab.bench.bill import block_tile_intensity


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


@pytest.mark.parametrize("number", range(3, 15))
def test_intensity_is_the_block_tile_formula(number):
    rung = registry.rung(number)
    for cfg in _some(rung):
        BM, BN = rung.tile(cfg)
        assert count(rung, cfg).intensity == pytest.approx(BM * BN / (2 * (BM + BN))), cfg
        assert block_tile_intensity(rung, cfg) == count(rung, cfg).intensity


@pytest.mark.parametrize("number", range(4, 15))
def test_shared_words_per_ffma_is_fragment_over_outer_product(number):
    rung = registry.rung(number)
    for cfg in _some(rung):
        if number == 4:
            m, n = cfg["TM"], 1
        elif number in (10, 11, 12):
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


# -- rungs 11-14: the cp.async rungs -----------------------------------------------------
def _per_thread(threads):
    """(operand, static instruction number) -> per thread (first word, words) or None."""
    return defaultdict(lambda: [None] * threads)


def _wavefronts_per_warp(insns, threads):
    """Sum over instructions of the wavefronts each warp needs, averaged over warps."""
    out = defaultdict(float)
    for (op, _), lanes in insns.items():
        for w in range(threads // 32):
            warp = lanes[32 * w:32 * w + 32]
            if any(warp):
                out[op] += _phases(warp) / (threads // 32)
    return out


def _brute_pipeline(c, transpose_a):
    """Rungs 11-12 (ladder/11_cp_async.cu), lane by lane: the fragment reads of one tile
    (load_fragments) and the shared writes of its copies (copy_tile)."""
    BM, BN, BK, TM, TN, WNITER = c["BM"], c["BN"], c["BK"], c["TM"], c["TN"], c["WNITER"]
    WMITER = c["WM"] * c["WN"] // (32 * TM * TN * WNITER)
    WSUBM, WSUBN = c["WM"] // WMITER, c["WN"] // WNITER
    threads = (BM // c["WM"]) * (BN // c["WN"]) * 32
    a_ld = BM + c["PAD"] if transpose_a else BK + c["PAD"]

    def a_at(m, k):
        return k * a_ld + m if transpose_a else m * a_ld + k

    reads, writes = _per_thread(threads), _per_thread(threads)
    for tid in range(threads):
        warp, lane = divmod(tid, 32)
        wr, wc = divmod(warp, BN // c["WN"])
        lr, lc = divmod(lane, WSUBN // TN)
        trow, tcol = wr * c["WM"] + lr * TM, wc * c["WN"] + lc * TN
        n = 0
        for k in range(BK):
            for wm in range(WMITER):
                for i in range(0, TM, 4):
                    r = trow + wm * WSUBM + i
                    for q in ([0] if transpose_a else range(4)):
                        reads[("As", n)][tid] = (a_at(r + q, k), 4 if transpose_a else 1)
                        n += 1
            for wn in range(WNITER):
                for j in range(0, TN, 4):
                    reads[("Bs", n)][tid] = (k * BN + tcol + wn * WSUBN + j, 4)
                    n += 1
        n = 0
        for t in range(-(-(BM * BK // 4) // threads)):
            i = tid + t * threads
            r, col = i // (BK // 4), i % (BK // 4) * 4
            for j in ([0] if not transpose_a else range(4)):
                if i < BM * BK // 4:
                    writes[("As", n)][tid] = ((a_at(r, col), 4) if not transpose_a
                                              else (a_at(r, col + j), 1))
                n += 1
        for t in range(-(-(BK * BN // 4) // threads)):
            i = tid + t * threads
            if i < BK * BN // 4:
                writes[("Bs", n)][tid] = (i // (BN // 4) * BN + i % (BN // 4) * 4, 4)
            n += 1
    return reads, writes


def _brute_patch(c):
    """Rung 13 (ladder/13_hoisted.cu), lane by lane: the fragment reads of one tile (load: TM/4 +
    TN/4 float4 per k from the Patch's pieces) and the shared writes of the TileCopy of A
    (4 k of one row -> 4 rows of As[k][m]) and of B (4 floats of one row of Bs[k][n])."""
    BM, BN, BK, WM, WN, TM, TN = (c[x] for x in ("BM", "BN", "BK", "WM", "WN", "TM", "TN"))
    threads = (BM // WM) * (BN // WN) * 32
    a_ld, b_ld = BM + c["PAD"], BN + c["PAD"]
    reads, writes = _per_thread(threads), _per_thread(threads)
    for tid in range(threads):
        warp, lane = divmod(tid, 32)
        wr, wc = divmod(warp, BN // WN)
        lr, lc = divmod(lane, WN // TN)
        row, col = wr * WM + lr * 4, wc * WN + lc * 4
        n = 0
        for k in range(BK):
            for i in range(TM // 4):
                reads[("As", n)][tid] = (k * a_ld + row + i * (WM // (TM // 4)), 4)
                n += 1
            for j in range(TN // 4):
                reads[("Bs", n)][tid] = (k * b_ld + col + j * (WN // (TN // 4)), 4)
                n += 1
        n = 0
        r0, q = tid // (BK // 4), tid % (BK // 4) * 4  # A: BK/4 granules per row of A
        for t in range(-(-(BM * BK // 4) // threads)):
            for j in range(4):
                if tid + t * threads < BM * BK // 4:
                    writes[("As", n)][tid] = ((q + j) * a_ld + r0 + t * (threads // (BK // 4)),
                                              1)
                n += 1
        r0, q = tid // (BN // 4), tid % (BN // 4) * 4  # B: BN/4 granules per row of B
        for t in range(-(-(BN * BK // 4) // threads)):
            if tid + t * threads < BN * BK // 4:
                writes[("Bs", n)][tid] = ((r0 + t * (threads // (BN // 4))) * b_ld + q, 4)
            n += 1
    return reads, writes


def _same_words_and_wavefronts(rung, cfg, brute, kinds):
    """The trace's shared accesses of each (operand, kind) are the brute force's, in the
    kernel's order, lane for lane; and the bill's wavefronts are the brute force's."""
    t = trace(rung, cfg)
    b = count(rung, cfg)
    for (op, kind), insns in zip(kinds, brute):
        traced = [[int(w) if on else None for w, on in zip(a.addr // 4, a.active)]
                  for a in t.accesses if a.operand == op and a.kind == kind]
        by_hand = [[x[0] if x else None for x in lanes]
                   for (o, _), lanes in sorted(insns.items()) if o == op]
        assert traced == by_hand, (op, kind)
        wave = _wavefronts_per_warp(insns, t.threads)
        assert b.op(op, kind).wavefronts == pytest.approx(wave[op]), (op, kind)


# 256 threads, WNITER = 2 (WMITER = 1): rung 10's seed tile, in the 2 stages that fit
_WIDE_11 = {"BM": 128, "BN": 128, "BK": 16, "WM": 64, "WN": 32, "WNITER": 2, "TM": 8,
            "TN": 4, "PAD": 4, "STAGES": 2}


@pytest.mark.parametrize("number, change", [
    (11, {}), (11, {"TM": 4}), (11, _WIDE_11),
    (11, {"BK": 8, "BM": 64, "BN": 128, "WM": 32, "WN": 32}),
    (12, {}), (12, {"TRANSPOSE_A": 0}), (12, {**_WIDE_11, "TRANSPOSE_A": 1, "REGPF": 0}),
    (12, {"BK": 32, "BM": 64, "BN": 64, "WM": 32, "WN": 32, "STAGES": 2}),
])
def test_rungs_11_12_shared_traffic_matches_a_lane_by_lane_replay(number, change):
    rung = registry.rung(number)
    cfg = {**rung.seed, **change}
    assert rung.is_legal(cfg), rung.violations(cfg)
    reads, writes = _brute_pipeline(cfg, cfg.get("TRANSPOSE_A", 0) == 1)
    _same_words_and_wavefronts(rung, cfg, [reads, reads, writes, writes],
                               [("As", "load"), ("Bs", "load"), ("As", "cp.async"),
                                ("Bs", "cp.async")])


@pytest.mark.parametrize("change", [{}, {"REG_TRANSPOSE": 0}, {"TM": 8, "TN": 16},
                                    {"BM": 256, "WM": 128, "WN": 32},
                                    {"BN": 64, "WN": 32, "TN": 8, "TM": 8, "BK": 16,
                                     "STAGES": 2},
                                    {"BM": 64, "BN": 256, "WM": 32, "WN": 128, "TM": 8,
                                     "TN": 16}])
def test_rung_13_shared_traffic_matches_a_lane_by_lane_replay(change):
    rung = registry.rung(13)
    cfg = {**rung.seed, **change}
    assert rung.is_legal(cfg), rung.violations(cfg)
    reads, writes = _brute_patch(cfg)
    a_kind = "store" if cfg["REG_TRANSPOSE"] else "cp.async"  # STS.32 or cp.async.4
    _same_words_and_wavefronts(rung, cfg, [reads, reads, writes, writes],
                               [("As", "load"), ("Bs", "load"), ("As", a_kind),
                                ("Bs", "cp.async")])


def test_rung_13_seed_is_the_headers_bill():
    # BM=BN=128 BK=8 WM=WN=64 TM=16 TN=8, 128 threads: per k per thread 4 + 2 LDS.128 for
    # 128 FFMA; per tile per thread 2 granules of A (LDG.128, then 4 STS.32 each: the seed
    # has REG_TRANSPOSE = 1) and 2 cp.async.16 of B
    rung = registry.rung(13)
    cfg = rung.seed
    assert (cfg["BM"], cfg["BN"], cfg["BK"], cfg["WM"], cfg["WN"], cfg["TM"], cfg["TN"],
            cfg["REG_TRANSPOSE"]) == (128, 128, 8, 64, 64, 16, 8, 1)
    b = count(rung, cfg)
    BK = 8
    assert b.threads == 128 and b.ffma_per_warp == 128 * BK
    assert b.op("As").instructions == 4 * BK and b.op("Bs").instructions == 2 * BK
    assert b.lds_per_ffma == pytest.approx(6 / 128)  # the header's 0.047
    assert b.smem_loads_per_ffma == pytest.approx(24 / 128)
    widths = {(a.operand, a.kind): a.width for a in trace(rung, cfg).accesses}
    assert widths[("As", "load")] == widths[("Bs", "load")] == 16  # LDS.128 only
    assert widths[("A", "load")] == 16 and widths[("As", "store")] == 4
    assert widths[("B", "cp.async")] == widths[("Bs", "cp.async")] == 16
    assert b.copy_instructions == {"LDG": 2, "STS": 8, "LDGSTS": 2}
    # the B fragments: a quarter-warp reads 8 consecutive float4 of one row; the A
    # fragments: a quarter-warp shares one row piece (a broadcast); the stores transpose
    # without conflicts (column q + j of As lands 4 banks further per k)
    for op, kind in [("Bs", "load"), ("As", "load"), ("As", "store"), ("Bs", "cp.async")]:
        assert b.op(op, kind).conflict_ways == 1, (op, kind)
    assert b.intensity == 32 and 1 / b.intensity == pytest.approx(0.03125)  # B per FLOP


def test_rung_13_without_reg_transpose_scatters_a_by_4_byte_cp_async():
    rung = registry.rung(13)
    b = count(rung, {**rung.seed, "REG_TRANSPOSE": 0})
    assert b.copy_instructions == {"LDG": 0, "STS": 0, "LDGSTS": 8 + 2}  # the header's 8 + 2
    assert b.op("A", "cp.async").bytes_requested == 8 * 32 * 4 and ("A", "load") not in b.ops
    assert b.op("As", "cp.async").conflict_ways == 1
    assert b.intensity == count(rung, rung.seed).intensity


@pytest.mark.parametrize("change, apart, ways, lds_per_k", [
    # seed: TM = 8, BK = 16, PAD = 4; a warp's lanes read 4 rows, TM rows = 160 words apart
    ({}, 0, 4, 2 * 8 + 1),
    ({"TM": 4}, 16, 2, 4 * 4 + 1),  # TM = 4: 80 words apart = 16 mod 32, two banks
    (_WIDE_11, 0, 8, 8 + 2),  # WNITER = 2: 8 rows of lanes in one bank
    ({"PAD": 8, "STAGES": 2}, 0, 4, 17),  # a PAD that keeps 16-byte rows: 8*24 = 0 mod 32
])
def test_rung_11_scalar_a_reads_conflict_as_its_header_says(change, apart, ways, lds_per_k):
    rung = registry.rung(11)
    cfg = {**rung.seed, **change}
    assert rung.is_legal(cfg), rung.violations(cfg)
    assert cfg["TM"] * (cfg["BK"] + cfg["PAD"]) % 32 == apart  # the header's arithmetic
    b = count(rung, cfg)
    assert b.op("As").conflict_ways == pytest.approx(ways)
    assert b.op("Bs").conflict_ways == 1
    assert b.lds_per_ffma == pytest.approx(lds_per_k / (b.ffma_per_warp / cfg["BK"]))
    assert b.copy_instructions["LDG"] == b.copy_instructions["STS"] == 0  # no stash


def test_rungs_11_12_seed_bills_are_the_headers():
    # rung 11's seed (BM=128 BN=64 BK=16 WM=64 WN=32 WNITER=1 TM=8 TN=4, 128 threads): per k
    # per thread 2 x 8 LDS.32 of A + 1 LDS.128 of B for 64 FFMA (0.27 LDS per FFMA); per tile
    # 4 cp.async.16 of A and 2 of B; 2 (BM + BN) / (BM BN) = 0.047 global bytes per FLOP
    eleven = count(registry.rung(11), registry.rung(11).seed)
    assert eleven.threads == 128 and eleven.ffma_per_warp == 16 * 64
    assert eleven.lds_per_ffma == pytest.approx(17 / 64)
    assert eleven.op("A", "cp.async").instructions == 4
    assert eleven.op("B", "cp.async").instructions == 2
    assert 1 / eleven.intensity == pytest.approx(2 * (128 + 64) / (128 * 64))
    # rung 12 transposes A: 2 x 2 + 1 LDS.128 per k; the A copies become 16 cp.async.4
    # (BM*BK/THREADS), the same bytes in 4x the instructions
    twelve = count(registry.rung(12), registry.rung(12).seed)
    assert twelve.lds_per_ffma == pytest.approx(5 / 64)
    assert twelve.op("A", "cp.async").instructions == 128 * 16 // 128
    assert twelve.op("A", "cp.async").bytes_requested == \
        eleven.op("A", "cp.async").bytes_requested == 4 * 32 * 16
    # at 256 threads (WMITER = 1, WNITER = 2): 8 LDS.32 + 2 LDS.128 -> 2 + 2 LDS.128
    wide = count(registry.rung(11), _WIDE_11)
    assert wide.lds_per_ffma == pytest.approx(10 / 64)
    assert count(registry.rung(12), {**_WIDE_11, "TRANSPOSE_A": 1, "REGPF": 1}).lds_per_ffma \
        == pytest.approx(4 / 64)


@pytest.mark.parametrize("transpose_a", [0, 1])
def test_rung_12_regpf_changes_no_count(transpose_a):
    """REGPF loads the next k's fragments during this k's FFMAs: the same loads, earlier."""
    rung = registry.rung(12)
    off, on = (count(rung, {**rung.seed, "TRANSPOSE_A": transpose_a, "REGPF": r}).to_dict()
               for r in (0, 1))
    assert {k: v for k, v in off.items() if k != "config"} == \
        {k: v for k, v in on.items() if k != "config"}


def test_rung_12_transposed_a_trades_reads_for_copies():
    rung = registry.rung(12)
    row, col = (count(rung, {**rung.seed, "TRANSPOSE_A": t}) for t in (0, 1))
    # seed: WMITER = 2, TM = 8, BK = 16, 128 threads: A granules 128*16/4 / 128 = 4 each
    assert row.op("As").instructions == 2 * 8 * 16 and col.op("As").instructions == 2 * 2 * 16
    assert row.op("As").conflict_ways == 4 and col.op("As").conflict_ways == 1
    assert row.op("A", "cp.async").instructions == 4 and col.op("A", "cp.async").instructions == 16
    assert row.block_bytes_requested == col.block_bytes_requested == (128 + 64) * 16 * 4
    assert row.smem_loads_per_ffma == col.smem_loads_per_ffma  # same words, fewer loads


def test_cp_async_is_a_global_load_and_the_shared_store_it_performs():
    rung = registry.rung(11)
    t = trace(rung, rung.seed)
    copies = [a for a in t.accesses if a.copy]
    assert copies and len(copies) % 2 == 0
    for glob, shared in zip(copies[::2], copies[1::2]):
        assert not glob.shared and not glob.store and shared.shared and shared.store
        assert glob.width == shared.width and shared.operand == glob.operand + "s"
        assert not (glob.active & ~shared.active).any()  # a copy only reads where it writes
    b = count(rung, rung.seed)
    assert set(b.ops) == {("A", "cp.async"), ("As", "cp.async"), ("B", "cp.async"),
                          ("Bs", "cp.async"), ("As", "load"), ("Bs", "load"), ("C", "store")}
    assert b.block_bytes_requested == (128 + 64) * 16 * 4
    assert b.global_sector_bytes_per_warp == b.op("A", "cp.async").sector_bytes + \
        b.op("B", "cp.async").sector_bytes > 0
    assert b.copy_instructions == {"LDG": 0, "STS": 0, "LDGSTS": 4 + 2}


def test_edges_zero_fill_or_clamp_as_the_kernels_do():
    # rung 11: copies of rows past M ask for zero bytes (no read) but still write the tile
    eleven = registry.rung(11)
    full, short = (count(eleven, eleven.seed, (M, 256, 256)) for M in (256, 100))
    assert short.block_bytes_requested == (100 * 16 + 16 * 64) * 4
    assert short.op("As", "cp.async").words == full.op("As", "cp.async").words
    # rung 13: rows of A past M read the last valid row again (clamped): requested, not new
    thirteen = registry.rung(13)
    b = count(thirteen, thirteen.seed, (100, 256, 256))
    assert b.block_bytes_requested == (128 * 8 + 8 * 128) * 4
    assert b.block_bytes_distinct == (100 * 8 + 8 * 128) * 4
    # a first k-tile shorter than BK (K = 6): only k < 6 is read, by either A path
    for reg_transpose in (0, 1):
        b = count(thirteen, {**thirteen.seed, "REG_TRANSPOSE": reg_transpose}, (256, 256, 6))
        assert b.block_bytes_requested == b.block_bytes_distinct == (128 + 128) * 6 * 4


def test_rung_14_per_k_step_is_rung_13():
    thirteen, fourteen = registry.rung(13), registry.rung(14)
    for cfg in _some(fourteen, 6):
        a = count(fourteen, cfg)
        b = count(thirteen, {k: v for k, v in cfg.items() if k not in ("FIXUP", "SPLIT")})
        assert a.ops == b.ops and a.ffma_per_warp == b.ffma_per_warp, cfg
        assert a.fixup is None and a.dram_bytes == b.dram_bytes  # no slots: fix-up left out


def test_stream_k_fixup_at_1024_cubed():
    # 64 tiles of 128 x 128, 128 k-tiles each, on 264 slots: Stream-K cuts the 8192 k-tiles
    # into 264 ranges of ~31; a range adds one partial tile per tile boundary it crosses:
    # 264 + 63 boundaries, less the 7 that fall between two ranges (every 33 blocks is
    # exactly 1024 k-tiles = 8 tiles): 320 partial tiles of 64 KiB, all 64 tiles split
    cfg = {**registry.rung(14).seed, "SPLIT": 0, "FIXUP": 0}
    f = stream_k_fixup(cfg, (1024, 1024, 1024), 264)
    assert (f.split_tiles, f.contributions) == (64, 320)
    assert f.written == f.read == 320 * 128 * 128 * 4  # each partial out, then back in
    atomic = stream_k_fixup({**cfg, "FIXUP": 1}, (1024, 1024, 1024), 264)
    assert atomic.written == (320 + 64) * 65536 and atomic.read == 64 * 65536  # + zeroing
    into_c = stream_k_fixup({**cfg, "FIXUP": 2}, (1024, 1024, 1024), 264)
    assert into_c.written == (320 - 64) * 65536 and into_c.read == 0  # C's own store aside
    rung = registry.rung(14)
    with_fixup = count(rung, cfg, (1024, 1024, 1024), slots=264)
    assert with_fixup.fixup == f
    assert with_fixup.dram_bytes == count(rung, cfg, (1024, 1024, 1024)).dram_bytes + f.bytes


@pytest.mark.parametrize("split, shape, parts", [
    (4, (4096, 4096, 4096), 4 * 1024),  # split-K in 4: every one of 1024 tiles in 4 parts
    (2, (1024, 1024, 1024), 2 * 64),
    (1, (1024, 1024, 1024), 0),  # data-parallel: whole tiles only
    (0, (1024, 33 * 128, 4096), 0),  # 8 x 33 = 264 tiles: exactly one wave, nothing split
    (0, (1024, 1024, 32), 0),  # 64 tiles of 4 k-tiles: one whole tile per range, stored
])
def test_stream_k_fixup_closed_forms(split, shape, parts):
    cfg = {**registry.rung(14).seed, "SPLIT": split, "FIXUP": 0}
    f = stream_k_fixup(cfg, shape, 264)
    assert f.contributions == parts and f.written == f.read == parts * 65536


@pytest.mark.parametrize("number", range(10, 15))
def test_shared_tiles_and_outputs_are_covered_exactly_once(number):
    """Per K step the copies write every element of the A and B tiles once, and the
    epilogue stores every output of the block tile once (rows past the padding unused)."""
    rung = registry.rung(number)
    for cfg in _some(rung, 6):
        t = trace(rung, cfg)
        BM, BN, BK = cfg["BM"], cfg["BN"], cfg["BK"]
        seen = defaultdict(list)
        for a in t.accesses:
            if a.store and a.operand in ("As", "Bs", "C"):
                for addr in a.addr[a.active]:
                    seen[a.operand] += range(addr // 4, addr // 4 + a.width // 4)
        c_words = sorted(r * 4096 + col for r in range(BM) for col in range(BN))
        assert sorted(seen["C"]) == c_words, cfg
        for op, elems in (("As", BM * BK), ("Bs", BK * BN)):
            assert len(seen[op]) == len(set(seen[op])) == elems, (op, cfg)
