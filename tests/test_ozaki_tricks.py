"""The integer tricks of the Ozaki kernels (kernels/hopper/26_ozaki_int8.cu, hopper/ozaki.cu),
replayed in NumPy with the constants runtime/ozaki.py hands them, against plain modular
arithmetic: the GEMM epilogue's multiply-high reduction, the split's FP64 rounding (B's
residues times y_l), and the recombination's exact FP64 sums. No GPU."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sgemmlab.errors import ConfigError
from sgemmlab.ozaki import reference as ref
from sgemmlab.runtime import ozaki

COUNTS = (1, 2, 3, 6, 7, 8)


def _symmetric(x: np.ndarray, m: int) -> np.ndarray:
    return np.mod(x + m // 2, m) - m // 2


@pytest.mark.parametrize("count", COUNTS)
def test_epilogue_reduction_is_the_symmetric_residue(count):
    mods = ref.moduli(count)
    g = ozaki.gemm_moduli(mods)
    rng = np.random.default_rng(count)
    top = ref.MAX_K * 2**14  # the largest |INT32 sum| of K <= MAX_K terms
    s = np.concatenate([rng.integers(-top, top + 1, 200_000),
                        np.array([-top, top, 0, 1, -1, 127, 128, -128, -129])]).astype(np.int64)
    for i, m in enumerate(mods):
        u = (s + g.offset[i]).astype(np.uint64)
        assert (u >= 0).all() and (u < 2**32).all()
        q = (u * np.uint64(g.magic[i])) >> np.uint64(32)  # __umulhi
        r = (u.astype(np.int64) - q.astype(np.int64) * m)
        assert ((r >= -m) & (r < m)).all()
        r = np.where(r < 0, r + m, r)
        r = np.where(r > m - 1 - m // 2, r - m, r)
        np.testing.assert_array_equal(r, _symmetric(s, m))


def _exact(s: np.ndarray, m: int, magic39: int, half: int, base: int) -> np.ndarray:
    """residue_exact (kernels/hopper/26_ozaki_int8.cu) in 32-bit arithmetic."""
    a = s + half
    assert (a >= 0).all() and (a < 2**31).all()
    hi = (a.astype(np.uint64) * np.uint64(magic39)) >> np.uint64(32)  # umulhi
    t = (hi.astype(np.int64) + base) % 2**32  # + base, wrapping
    q = np.where(t >= 2**31, t - 2**32, t) >> 7  # as an int, shifted arithmetically
    return q * -m + s  # (the kernel's int arithmetic: no overflow at these sizes)


def test_the_exact_division_is_the_symmetric_residue_up_to_its_k():
    """EXACT_DIV's reduction, for every modulus the kernels take, over the sums of K <=
    EXACT_K terms (the extremes included): the symmetric residue, with no correction. Past
    EXACT_K, exact_division says no, and does so at the first K where a modulus fails."""
    mods = ref.moduli(ozaki.MAX_MODULI)
    g = ozaki.gemm_moduli(mods)
    rng = np.random.default_rng(26)
    top = ozaki.EXACT_K * 2**14
    s = np.concatenate([rng.integers(-top, top + 1, 200_000),
                        np.array([-top, top, 0, 1, -1, 127, 128, -128, -129])]).astype(np.int64)
    for i, m in enumerate(mods):
        got = _exact(s, m, g.magic39[i], g.half[i], g.base[i])
        assert (np.abs(got) < 2**31).all()
        np.testing.assert_array_equal(got, _symmetric(s, m))
    assert ozaki.exact_division(mods, ozaki.EXACT_K)
    assert not ozaki.exact_division(mods, ozaki.EXACT_K + 1)
    assert not ozaki.exact_division(mods[:1], ozaki.EXACT_K + 1)  # 256: a below 0
    # the check is the arithmetic's: the multiply-high alone, without the shift, fails
    i = mods.index(247)
    a = np.arange(2**31 - 2**20, 2**31, dtype=np.int64)
    q = (a.astype(np.uint64) * np.uint64(-(-2**32 // 247))) >> np.uint64(32)
    assert (q.astype(np.int64) != a // 247).any()
    assert (((a.astype(np.uint64) * np.uint64(g.magic39[i])) >> np.uint64(39)).astype(np.int64)
            == a // 247).all()


@pytest.mark.parametrize("through", ["cfg", "GEMM"])
def test_bind_builds_without_the_exact_division_past_its_k(monkeypatch, through):
    """A configuration with EXACT_DIV at K past EXACT_K is loaded without it (the other
    residue, exact for every K the scheme takes); at or below, as given: by the bound
    configuration, or by ozaki.GEMM (an experiment's override, over any configuration)."""
    import types

    _stand_ins(monkeypatch)
    got, stand_in = {}, ozaki.load

    def load(cfg, device_id=0):
        got["cfg"] = cfg
        return stand_in(cfg, device_id)

    monkeypatch.setattr(ozaki, "load", load)
    seed = {**ozaki.rung().seed, "EXACT_DIV": 1}
    if through == "GEMM":
        monkeypatch.setattr(ozaki, "GEMM", "EXACT_DIV=1, GROUP_M=16")
        seed = ozaki.rung().seed
    for K, want in ((ozaki.EXACT_K, 1), (ozaki.EXACT_K + 1, 0)):
        got.clear()
        ozaki.bind(0, 3, 5, K, 1.0, 0x1000, K, 0x2000, 5, 0.0, 0x3000, 5,
                   types.SimpleNamespace(handle=0x20), cfg=seed)
        assert got["cfg"]["EXACT_DIV"] == want, K
        assert got["cfg"]["GROUP_M"] == (16 if through == "GEMM" else seed["GROUP_M"])
    monkeypatch.setattr(ozaki, "GEMM", "EXACT_DIV=1,SPLIT=2")
    with pytest.raises(ConfigError, match="'SPLIT=2' is not NAME=integer"):
        ozaki.bind(0, 3, 5, 7, 1.0, 0x1000, 7, 0x2000, 5, 0.0, 0x3000, 5,
                   types.SimpleNamespace(handle=0x20), cfg=seed)


def _low_word(d: np.ndarray) -> np.ndarray:
    return (d.view(np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32)


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("scaled", [False, True])
def test_split_rounding_is_the_symmetric_residue(count, scaled):
    """oz_split's and oz_scale's residue (residue_words) of rint(2^e x), times y_l for B
    (`scaled`): q from one FMA against y_l / m_l, then low y_l - q m_l in 32-bit wrapping
    arithmetic, whose low byte is the symmetric residue's, with no correction step."""
    from fractions import Fraction

    mods = ref.moduli(count)
    sp = ozaki.split_moduli(mods, ozaki.crt_factors(mods) if scaled else None)
    assert sp.scaled == scaled
    r = ref.radius(count)
    assert r < 2**34  # residue_words' premise
    rng = np.random.default_rng(10 + count)
    t = np.rint(rng.uniform(-r, r, 200_000))
    # ties: v y / m a half-integer (only for m = 256), and the extremes
    t = np.concatenate([t, [0.0, 1.0, -1.0, np.trunc(r), -np.trunc(r), 128.0, -128.0,
                            384.0, -384.0, 2.0**33 + 128, -(2.0**33) - 128]])
    magic = 6755399441055744.0
    ti = t.astype(np.int64)
    for i, m in enumerate(mods):
        y = sp.factor[i]
        assert sp.ratio[i] == float(Fraction(y, m))
        # the FMA: the exact product plus 1.5 2^52, rounded once (here: exactly, in Fraction,
        # for the values near a tie; np's product is rounded first, so only where it cannot
        # matter)
        prod = t * sp.ratio[i]
        q = np.rint(prod).astype(np.int64)
        near = np.abs(prod - np.floor(prod) - 0.5) < 2**-8
        for n in np.flatnonzero(near):
            exact = Fraction(float(t[n])) * Fraction(sp.ratio[i])
            q[n] = _low_word(np.float64(exact + magic)).astype(np.int64)
        low = _low_word(t + magic).astype(np.int64)
        res = (low * y - q * m + 2**31) % 2**32 - 2**31  # 32-bit wrapping
        got = (res & 0xFF).astype(np.uint8)
        want = _symmetric(ti * y, m).astype(np.int8).view(np.uint8)
        np.testing.assert_array_equal(got, want)
        # the premise the kernels rely on: every modulus odd or 256
        assert m % 2 == 1 or m == 256


def test_the_split_refuses_an_even_modulus_but_256():
    with pytest.raises(ValueError, match="odd moduli and 256"):
        ozaki.split_moduli((256, 254))


def _recombination_cases(count: int, seed: int):
    """What the recombination replays take: the moduli, oz_crt's constants, M, and each
    integer X it must find (5,000 drawn with |X| within the radius squared, the extremes,
    0 and +-1) with its bytes s_l, as the product planes hold them."""
    mods = ref.moduli(count)
    big = ref.product_bound(count)
    r2 = int(ref.radius(count)) ** 2
    assert r2 < big // 2
    rng = np.random.default_rng(seed)
    xs = [int(x) for x in rng.integers(-min(r2, 2**62), min(r2, 2**62), 5000)]
    xs += [r2, -r2, 0, 1, -1]
    ys = ozaki.crt_factors(mods)
    cases = [(x, [int(_symmetric(np.int64(x % m * y), m)) for m, y in zip(mods, ys)])
             for x in xs]
    return mods, ozaki.crt_moduli(mods), big, cases


@pytest.mark.parametrize("count", COUNTS)
def test_recombination_finds_the_integer_exactly_in_fp64(count):
    mods, cm, big, cases = _recombination_cases(count, 20 + count)
    magic = 6755399441055744.0
    for x, bytes_ in cases:
        hi, exact, lo = 0.0, 0, 0
        for i, (m, s) in enumerate(zip(mods, bytes_)):
            assert int(cm.w_hi[i]) + cm.w_lo[i] == big // m and 0 <= cm.w_lo[i] < 2**13
            hi, exact = hi + float(s) * cm.w_hi[i], exact + s * int(cm.w_hi[i])
            assert hi == exact  # every product and partial sum exact in FP64
            lo += s * cm.w_lo[i]
        assert abs(lo) < 2**31
        near = (hi + lo) * cm.inverse + magic  # (the kernel's fma rounds once; this twice)
        k = int(near - magic)
        part = hi - k * cm.m_hi
        assert part == exact - k * int(cm.m_hi)  # exact
        assert part + float(lo - k * cm.m_lo) == float(x)  # X, rounded once


@pytest.mark.parametrize("count", COUNTS)
def test_the_integer_recombination_finds_the_integer_exactly(count):
    """oz_crt_int: S = T2 2^38 + T1 2^19 + T0 from INT32 sums of s_l times W_l's 19-bit
    pieces, k from S in FP64, X = S - k M in 64-bit wrapping arithmetic. Every partial sum
    stays inside INT32, and X is the integer, for the extremes of |X| < M / 2 too."""
    mods, cm, big, cases = _recombination_cases(count, 30 + count)
    assert cm.m == big
    magic = 6755399441055744.0
    for x, bytes_ in cases:
        t = [0, 0, 0]
        for i, (m, s) in enumerate(zip(mods, bytes_)):
            assert -128 <= s <= 127
            w = sum(cm.piece[c][i] << (19 * c) for c in range(3))
            assert w == big // m and all(0 <= cm.piece[c][i] < 2**19 for c in range(3))
            for c in range(3):
                t[c] += s * cm.piece[c][i]
                assert abs(t[c]) < 2**31
        sd = float(t[2]) * 2.0**38 + (float(t[1]) * 2.0**19 + float(t[0]))
        k = int(np.float64(sd * cm.inverse + magic) - magic)  # (the kernel's fma rounds once)
        S = ((t[2] << 38) + (t[1] << 19) + t[0]) % 2**64
        X = (S - k * big) % 2**64
        X = X - 2**64 if X >= 2**63 else X
        assert X == x


def test_the_host_refuses_what_the_kernels_cannot_take():
    from sgemmlab.errors import ConfigError

    for M, N, K, count, words in [(8, 8, 8, 9, "1 to 8 moduli"), (8, 8, 8, 0, "1 to 8"),
                                  (8, 8, ozaki.MAX_K + 1, 8, "INT32 sums would overflow"),
                                  (0, 8, 8, 8, "at least 1")]:
        with pytest.raises(ConfigError, match=words):
            ozaki.check(M, N, K, count)
    ozaki.check(1, 1, ozaki.MAX_K, 8)


@pytest.mark.parametrize("M, N, K, count", [(1, 1, 1, 1), (131, 257, 1031, 8),
                                            (4096, 4096, 4096, 7)])
def test_the_workspace_layout_is_aligned_and_disjoint(M, N, K, count):
    lay = ozaki.layout(M, N, K, count)
    assert lay.kpad % 16 == 0 and lay.kpad >= K and lay.ldr % 16 == 0 and lay.ldr >= N
    spans = sorted(lay.offsets.items(), key=lambda kv: kv[1])
    assert all(off % ozaki.ALIGN == 0 for _, off in spans)
    tiles_a, tiles_b = -(-M // ozaki.TILE), -(-N // ozaki.TILE)
    sizes = {"part_a": 24 * lay.chunks * M, "part_b": 24 * lay.chunks * N,
             "exps": 8 * (M + N), "list_a": 4 * M, "list_b": 4 * N, "list2_a": 4 * M,
             "list2_b": 4 * N, "kpart_a": 8 * tiles_a * K, "kpart_b": 8 * tiles_b * K,
             "d": 4 * K, "res_a": count * M * lay.kpad, "res_b": count * N * lay.kpad,
             "res_c": count * M * lay.ldr, "snap": 4 * 5}
    for (name, off), (_, nxt) in zip(spans, spans[1:] + [("end", lay.scratch_bytes)]):
        assert off + sizes[name] <= nxt, name


def test_rung_26_fits_its_shared_memory():
    from sgemmlab.runtime.hopper import gemm_macros

    r = ozaki.rung()
    for stages in (2, 3, 4):
        cfg = {**r.seed, "STAGES": stages}
        smem = stages * (128 + 256) * 128 + 16 * stages + 1024
        assert r.dynamic_smem(cfg) == smem <= 227 * 1024 and r.is_legal(cfg)
        assert gemm_macros(r, cfg)["SMEM_EXPECT"] == smem
    assert not r.is_legal({**r.seed, "STAGES": 5}), "five stages of 256 columns do not fit"


KERNELS = ("gemm", *ozaki.KERNELS)  # what ozaki.load gives bind


def _stand_ins(monkeypatch, workspace=lambda dev, stream, z, s: (0x7000, 0xA0000000),
               **switches):
    """bind on stand-ins: kernels of three blocks an SM (all on handle 1), 132 SMs, tensor
    maps of zeros, `workspace` for the stream's, no capture; ozaki's module switches as
    given."""
    import types

    from sgemmlab.runtime import workspace as ws

    kernels = {n: types.SimpleNamespace(handle=1, dynamic_smem=0,
                                        max_active_blocks=lambda threads: 3) for n in KERNELS}
    monkeypatch.setattr(ozaki, "load", lambda cfg, device_id=0: kernels)
    monkeypatch.setattr(ozaki, "gpu_info", lambda device_id=0: types.SimpleNamespace(
        name="NVIDIA H200", sm_count=132))
    monkeypatch.setattr(ozaki, "encode_tiled_2d", lambda m: bytes(128))
    monkeypatch.setattr(ws, "workspace", workspace)
    monkeypatch.setattr(ws, "capture_probe", lambda stream: None)
    monkeypatch.setattr(ozaki, "OVERLAP", False)  # (plain launches on stand-ins)
    for name, value in switches.items():
        monkeypatch.setattr(ozaki, name, value)


@pytest.mark.parametrize("merged", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_a_plan_repoints_every_launch_of_the_scheme_that_reads_a_b_or_c(monkeypatch, fused,
                                                                        merged):
    """The scheme's launch is ten kernels (eleven with oz_scale, seven merged); a plan's call
    on new operands must reach every one that reads them: the norms or the one-pass scale (A,
    then B, or both in one launch), the column sums (A and B), the second norms and the
    splits (A, then B, or both), the recombination (C) and the fallback (C, and A and B for
    refused rows and columns). Launches recorded on stand-in handles."""
    import ctypes
    import types

    from sgemmlab.runtime import driver as driver_mod
    from sgemmlab.runtime import workspace as ws

    kernels = {n: types.SimpleNamespace(handle=i + 1, dynamic_smem=0,
                                        max_active_blocks=lambda threads: 3)
               for i, n in enumerate(KERNELS)}
    name = {k.handle: n for n, k in kernels.items()}
    # where each kernel takes the call's pointers
    slots = {"oz_norms": (0,), "oz_split": (0,), "gemm": (), "oz_crt": (10,),
             "oz_fallback": (11, 0, 3), "oz_balance": (), "oz_scale": (0,), "oz_ksums": (0, 4),
             "oz_scale_ab": (0, 5), "oz_norms_ab": (0, 4), "oz_split_ab": (0, 4)}
    seen = []

    def call(*a):
        ptrs = (ctypes.c_void_p * 22).from_address(a[9])
        seen.append((name[a[0]], tuple(ctypes.c_uint64.from_address(ptrs[i]).value
                                       for i in slots[name[a[0]]])))
        return 0

    monkeypatch.setattr(driver_mod, "launch_kernel", lambda: call)
    monkeypatch.setattr(ozaki, "load", lambda cfg, device_id=0: kernels)
    monkeypatch.setattr(ozaki, "gpu_info", lambda device_id=0: types.SimpleNamespace(
        name="NVIDIA H200", sm_count=132))
    monkeypatch.setattr(ozaki, "encode_tiled_2d", lambda m: bytes(128))
    monkeypatch.setattr(ws, "workspace", lambda dev, stream, z, s: (0, 0xA0000000))
    monkeypatch.setattr(ws, "capture_probe", lambda stream: None)
    monkeypatch.setattr(ozaki, "FUSED", fused)
    monkeypatch.setattr(ozaki, "MERGED", merged)
    # plain launches recorded here (overlapped ones: test_ozaki_cpu's overlap test)
    monkeypatch.setattr(ozaki, "OVERLAP", False)
    stream = types.SimpleNamespace(handle=0x20)
    w = ozaki.bind(0, 300, 200, 500, 1.0, 0x1000, 500, 0x2000, 200, 0.5, 0x3000, 200, stream,
                   cfg=ozaki.rung().seed)
    assert w.bound_pointers == (0x1000, 0x2000, 0x3000)
    assert len(ozaki.ROLES) == len(ozaki.STEPS_ORDER) == 10
    assert len(w._steps) == len(ozaki.steps_order(fused, fused)) == (7 if merged else 10 + fused)
    for abc in [(0x1000, 0x2000, 0x3000), (0x4000, 0x5000, 0x6000)]:
        seen.clear()
        w.repointed(*abc)()
        a, b, c = abc
        last = [("gemm", ()), ("oz_crt", (c,)), ("oz_fallback", (c, a, b))]
        if merged:
            first = ([("oz_scale_ab", (a, b)), ("oz_ksums", (a, b))] if fused else
                     [("oz_norms_ab", (a, b)), ("oz_balance", ())])
            assert seen == first + [("oz_norms_ab", (a, b)), ("oz_split_ab", (a, b))] + last
            continue
        first = ([("oz_scale", (a,)), ("oz_scale", (b,)), ("oz_ksums", (a, b)),
                  ("oz_balance", ())] if fused else
                 [("oz_norms", (a,)), ("oz_norms", (b,)), ("oz_balance", ())])
        assert seen == first + [("oz_norms", (a,)), ("oz_norms", (b,)), ("oz_split", (a,)),
                                ("oz_split", (b,))] + last


def test_the_norms_counters_sit_in_the_zeroed_workspace_one_per_tile(monkeypatch):
    """oz_norms' last block of a tile of rows writes the tile's exponents; its counter (one
    per tile of A, then of B) comes from the workspace's zeroed region, which it leaves 0;
    so do the refused rows' counts (A's, B's) and the fallback's finished blocks, after
    them, where the norms count the rows they list and the fallback reads them, then the
    fallback's counters of a tile's slices; its slices' sums follow the layout's scratch."""
    import types

    asked = []
    _stand_ins(monkeypatch, lambda dev, stream, z, s: asked.append((z, s)) or (
        0x7000, 0xA0000000), FUSED=False)  # (the two passes' counters)
    w = ozaki.bind(0, 300, 65, 500, 1.0, 0x1000, 500, 0x2000, 65, 0.0, 0x3000, 65,
                   types.SimpleNamespace(handle=0x20), cfg=ozaki.rung().seed)
    tiles = -(-300 // ozaki.TILE) + -(-65 // ozaki.TILE)  # 5 + 2
    lay = ozaki.layout(300, 65, 500, ref.COUNT)
    blocks = 132 * 3  # oz_fallback's wave (the stand-in's three blocks an SM)
    assert asked == [(4 * (tiles + 5 + blocks), lay.scratch_bytes + 8 * 64 * 64 * blocks)]
    norms_a, norms_b, balance, again_a, again_b, split_a, split_b, _, crt, fallback = w._steps
    assert norms_a.args[6] == again_a.args[6] == 0x7000
    assert norms_b.args[6] == again_b.args[6] == 0x7000 + 4 * 5
    counts, at = 0x7000 + 4 * tiles, lambda name: 0xA0000000 + lay.offsets[name]
    # the first norms count and list their refusals in slots 0 and 1, write mu and nu and
    # each k's sums; the second (gated on the first's counts) in slots 3 and 4, from d
    assert norms_a.args[9:] == (at("exps"), counts, at("list_a"), at("kpart_a"), 0, 0, 1)
    assert norms_b.args[9:] == (at("exps") + 4 * 300, counts + 4, at("list_b"),
                                at("kpart_b"), 0, 0, -1)
    assert again_a.args[9:] == (at("exps") + 4 * 365, counts + 12, at("list2_a"), 0, counts,
                                at("d"), 1)
    assert again_b.args[9:] == (at("exps") + 4 * 665, counts + 16, at("list2_b"), 0, counts,
                                at("d"), -1)
    assert balance.args == (at("kpart_a"), 5, at("kpart_b"), 2, 500, counts, at("d"))
    assert split_a.args[5] == at("exps") and split_a.args[11:] == (
        at("exps") + 4 * 365, at("d"), 1, counts, 300, 65, 0)
    assert split_b.args[5] == at("exps") + 4 * 300 and split_b.args[11:] == (
        at("exps") + 4 * 665, at("d"), -1, counts, 300, 65, 0)
    assert crt.args[7] == at("exps") and crt.args[12] == counts
    assert fallback.args[13:] == (at("exps"), counts, at("list_a"), at("list_b"),
                                  0xA0000000 + lay.scratch_bytes, counts + 20,
                                  at("exps") + 4 * 365, at("list2_a"), at("list2_b"))
    assert norms_a.grid == (5, 2, 1) and norms_b.grid == (2, 2, 1)  # K = 500: 2 chunks


def test_the_one_pass_scale_where_its_rows_fit(monkeypatch):
    """oz_scale stages R rows of all of K in shared memory (4 where k is contiguous, 8 where
    r is): it runs where SCALE_SMEM holds them, for both operands or neither; it counts and
    lists its refusals where oz_norms would, the column sums feed oz_balance as oz_norms'
    tiles did, and the splits then run only for the balanced scaling."""
    import types


    assert ozaki.use_scale(8192, False) and ozaki.use_scale(8192, True)
    assert not ozaki.use_scale(12800, True) and ozaki.use_scale(12784, True)
    assert not ozaki.use_scale(12800, False) and ozaki.use_scale(12784, False)
    monkeypatch.setattr(ozaki, "SCALE_ROWS_R", 8)
    assert ozaki.use_scale(6384, False) and not ozaki.use_scale(6400, False)
    monkeypatch.setattr(ozaki, "SCALE_ROWS_R", 4)
    _stand_ins(monkeypatch, FUSED=True)
    w = ozaki.bind(0, 300, 65, 500, 1.0, 0x1000, 500, 0x2000, 65, 0.0, 0x3000, 65,
                   types.SimpleNamespace(handle=0x20), cfg=ozaki.rung().seed)
    scale_a, scale_b, ksums, balance, _, _, split_a, split_b, *_ = w._steps
    lay = ozaki.layout(300, 65, 500, ref.COUNT)
    counts, at = 0x7000 + 4 * (5 + 2), lambda name: 0xA0000000 + lay.offsets[name]
    kst = 512 + 4
    assert scale_a.grid == (75, 1, 1) and scale_a.args[5:8] == (4, kst, 512)
    assert scale_b.grid == (17, 1, 1) and scale_b.args[5:8] == (4, kst, 512)
    assert scale_a._call[7] == scale_b._call[7] == 4 * 4 * kst
    assert scale_a.args[10:13] == (at("exps"), counts, at("list_a"))
    assert scale_b.args[10:13] == (at("exps") + 4 * 300, counts + 4, at("list_b"))
    assert scale_a.args[15] == at("res_a") and scale_b.args[15] == at("res_b")
    # B's writes nothing where A's rows were refused (counts[0]): the balanced scaling will
    # be tried, and B's split writes whichever is taken
    assert scale_a.args[18] == 0 and scale_b.args[18] == counts
    groups = min(ozaki.KSUM_GROUPS, 5, 2)
    # (no counters: oz_balance follows)
    assert ksums.grid == (2, groups, 2) and ksums.args[9:] == (
        counts, at("kpart_a"), at("kpart_b"), 0, groups, groups, 0, at("d"))
    assert balance.args == (at("kpart_a"), groups, at("kpart_b"), groups, 500, counts, at("d"))
    assert (split_a.args[-1], split_b.args[-1]) == (1, 2)  # only the balanced scaling, or B
    # a wave of a few blocks an SM (it walks blockIdx.y), not one block a piece of work
    assert split_a.grid[1] <= -(-ozaki.GATED_BLOCKS * 132 // split_a.grid[0])


def test_merged_launches_take_both_operands_and_the_balance_goes_into_the_sums(monkeypatch):
    """MERGED: oz_scale_ab's grid is A's blocks, then B's, its shared memory the larger; the
    second norms and the splits each one grid with blockIdx.z for the operand (as large as
    the larger operand needs, gated as before); oz_ksums's counters of a range of 256 k
    follow the fallback's in the zeroed region (asked for, one a range), and it writes d."""
    import types

    asked = []
    _stand_ins(monkeypatch, lambda dev, stream, z, s: asked.append((z, s)) or (
        0x7000, 0xA0000000), FUSED=True, MERGED=True, SCALE_ROWS_R=8)
    M, N, K = 300, 65, 500
    w = ozaki.bind(0, M, N, K, 1.0, 0x1000, K, 0x2000, N, 0.0, 0x3000, N,
                   types.SimpleNamespace(handle=0x20), cfg=ozaki.rung().seed)
    scale, ksums, norms2, split, _, crt, fallback = w._steps
    lay = ozaki.layout(M, N, K, ref.COUNT)
    tiles, blocks, ranges = 5 + 2, 132 * 3, 2
    assert asked == [(4 * (tiles + 5 + blocks + ranges),
                      lay.scratch_bytes + 8 * 64 * 64 * blocks)]
    counts, at = 0x7000 + 4 * tiles, lambda name: 0xA0000000 + lay.offsets[name]
    kst = 512 + 4
    # A: 4 rows a block (k contiguous); B^T: 8 (r contiguous)
    assert scale.grid == (75 + 9, 1, 1) and scale._call[7] == 4 * 8 * kst
    assert scale.args[:15] == (0x1000, K, 1, M, 4, 0x2000, 1, N, N, 8, K, kst, 512,
                               ref.radius(ref.COUNT, K), ref.FLAT)
    assert scale.args[15:19] == (at("exps"), counts, at("list_a"), at("list_b"))
    assert scale.args[22:] == (at("res_a"), at("res_b"), 512)
    groups = min(ozaki.KSUM_GROUPS, 5, 2)
    assert ksums.grid == (ranges, groups, 2) and ksums.args[9:] == (
        counts, at("kpart_a"), at("kpart_b"), 0, groups, groups, counts + 20 + 4 * blocks,
        at("d"))
    assert norms2.grid[0] == 5 and norms2.grid[2] == 2 and norms2.args[-1] == 1
    assert norms2.args[11] == 0x7000 and norms2.args[14:16] == (at("exps"), counts)
    # A: 32 groups of 16 k across, 300 rows down; B^T: 65 rows across, 32 groups down
    assert split.grid[0] == max(-(-32 // 32), -(-65 // 32)) and split.grid[2] == 2
    # only the balanced scaling; B, also where A refused; no fallback wave in this launch
    assert split.args[18:21] == (1, 2, 0) and split.pointer_slots == (0, 4)
    assert crt.args[12] == counts and fallback.args[18] == counts + 20
    # FALLBACK_EARLY: the fallback's wave as z = 2 of the splits' launch (enough blocks
    # along x and y for it), which reads A, B and C; oz_crt reads the counts' snapshot
    monkeypatch.setattr(ozaki, "FALLBACK_EARLY", True)
    w = ozaki.bind(0, M, N, K, 1.0, 0x1000, K, 0x2000, N, 0.0, 0x3000, N,
                   types.SimpleNamespace(handle=0x20), cfg=ozaki.rung().seed)
    assert len(w._steps) == 6
    split, crt = w._steps[3], w._steps[5]
    assert split.grid[2] == 3 and split.grid[0] * split.grid[1] >= blocks
    assert split.pointer_slots == (0, 4, 23) and split.args[23] == 0x3000
    assert split.args[20] == blocks and split.args[31] == at("snap")
    assert crt.args[12] == at("snap")


@pytest.mark.parametrize("trans, names, z0", [
    (False, ("scale_a", "norms_b", "ksums"), 0), (True, ("norms_a", "scale_b", "ksums"), 1)])
def test_each_operand_takes_its_own_path(monkeypatch, trans, names, z0):
    """K = 8192 with 8 rows a block where r is contiguous: 4 rows along k fit oz_scale's
    shared memory, 8 along r do not. Row-major A and B: A by oz_scale, B by oz_norms; both
    column-major: the other way round. oz_ksums
    sums only oz_scale's operand (z0, one z), oz_balance reads its groups and the other's
    tiles, and only oz_scale's operand's split waits for the balanced scaling."""
    import types

    _stand_ins(monkeypatch, FUSED=True, SCALE_ROWS_R=8)
    M, N, K = 300, 1000, 8192
    w = ozaki.bind(0, M, N, K, 1.0, 0x1000, M if trans else K, 0x2000, K if trans else N,
                   0.0, 0x3000, N, types.SimpleNamespace(handle=0x20), trans_a=trans,
                   trans_b=trans, cfg=ozaki.rung().seed)
    assert ozaki.steps_order(not trans, trans)[:3] == names and len(w._steps) == 11
    ksums, balance, *_ = w._steps[2:]
    split_a, split_b = w._steps[6:8]
    tiles = {"a": -(-M // ozaki.TILE), "b": -(-N // ozaki.TILE)}
    groups = min(ozaki.KSUM_GROUPS, tiles["b" if trans else "a"])
    assert ksums.grid == (K // 256, groups, 1) and ksums.args[12] == z0
    assert balance.args[1] == (tiles["a"] if trans else groups)
    assert balance.args[3] == (groups if trans else tiles["b"])
    assert (split_a.args[-1], split_b.args[-1]) == ((0, 2) if trans else (1, 0))


def test_the_gated_launches_are_small_and_walk_their_work(monkeypatch):
    """The second norms and, after oz_scale, the splits work only where something was
    refused: with nothing refused their blocks only read the gate. A few blocks an SM
    (GATED_BLOCKS) walk the chunks and the rows instead of a block for each; the first norms
    keep a block a chunk."""
    import types

    _stand_ins(monkeypatch, FUSED=False)
    n = 8192
    w = ozaki.bind(0, n, n, n, 1.0, 0x1000, n, 0x2000, n, 0.0, 0x3000, n,
                   types.SimpleNamespace(handle=0x20), cfg=ozaki.rung().seed)
    steps = dict(zip(ozaki.steps_order(), w._steps))
    tiles, chunks = n // ozaki.TILE, n // ozaki.CHUNK  # 128, 32
    assert steps["norms_a"].grid == steps["norms_b"].grid == (tiles, chunks, 1)
    small = -(-ozaki.GATED_BLOCKS * 132 // tiles)
    assert steps["norms2_a"].grid == steps["norms2_b"].grid == (tiles, small, 1) and small < chunks
    monkeypatch.setattr(ozaki, "FUSED", True)
    w = ozaki.bind(0, n, n, n, 1.0, 0x1000, n, 0x2000, n, 0.0, 0x3000, n,
                   types.SimpleNamespace(handle=0x20), cfg=ozaki.rung().seed)
    steps = dict(zip(ozaki.steps_order(True, True), w._steps))
    for side in "ab":
        gx, gy, _ = steps[f"split_{side}"].grid
        assert gx * gy <= ozaki.GATED_BLOCKS * 132 + gx


def test_load_gives_bind_every_kernel_it_launches(monkeypatch):
    """ozaki.load loads rung 26 and every kernel of KERNELS (oz_scale's two with room for
    their staged rows); on stand-ins of what it loads, bind in every mode launches only
    those: a kernel it launched that load does not give would fail here, not on the GPU."""
    import types

    from sgemmlab.runtime import driver as driver_mod

    loaded = {}
    monkeypatch.setattr(ozaki, "_loaded", {})
    monkeypatch.setattr(ozaki, "compile_only", lambda r, cfg: types.SimpleNamespace(
        cubin=b"gemm"))
    monkeypatch.setattr(ozaki, "compile_kernel", lambda src, macros, arch: types.SimpleNamespace(
        cubin=b"steps"))
    monkeypatch.setattr(ozaki, "device", lambda device_id: None)
    monkeypatch.setattr(ozaki, "gpu_info", lambda device_id=0: types.SimpleNamespace(
        name="NVIDIA H200", sm_count=132, compute_capability=(9, 0)))

    def load(cubin, entry, device_id=0, dynamic_smem=0):
        loaded[entry] = (cubin, dynamic_smem)
        return types.SimpleNamespace(handle=len(loaded), dynamic_smem=dynamic_smem,
                                     max_active_blocks=lambda threads: 3)

    monkeypatch.setattr(driver_mod, "load", load)
    got = ozaki.load(ozaki.rung().seed)
    assert set(got) == {"gemm", *ozaki.KERNELS}
    assert loaded["sgemm"][0] == b"gemm"
    assert {n: s for n, (c, s) in loaded.items() if c == b"steps" and s} == {
        "oz_scale": ozaki.SCALE_SMEM, "oz_scale_ab": ozaki.SCALE_SMEM}
    _stand_ins(monkeypatch)
    monkeypatch.setattr(ozaki, "load", lambda cfg, device_id=0: got)
    with pytest.raises(ConfigError, match="3 at most with 2 rows"):
        ozaki.steps_macros(4, rows2=True)
    for fused, merged, crt_int, rows_r, early in itertools.product(
            (False, True), (False, True), (False, True), (2, 4, 8), (False, True)):
        for name, value in (("FUSED", fused), ("MERGED", merged), ("CRT_INT", crt_int),
                            ("SCALE_ROWS_R", rows_r), ("SCALE_ROWS_K", min(rows_r, 4)),
                            ("FALLBACK_EARLY", early)):
            monkeypatch.setattr(ozaki, name, value)
        for K in (500, 6500):  # (both operands' rows fit oz_scale, or one only at 8 a block)
            ozaki.bind(0, 300, 65, K, 1.0, 0x1000, K, 0x2000, 65, 0.0, 0x3000, 65,
                       types.SimpleNamespace(handle=0x20), cfg=ozaki.rung().seed)
