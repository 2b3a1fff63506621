"""The memory-bound family (rungs 15-17, kernels/membound/) against float64, on the GPU
(skipped without one).

Every product runs on fresh uniform [-1, 1] inputs placed inside buffers full of NaN (a read
past an operand's edge poisons the result) and an output inside a buffer of SENTINEL (a
write past C's edge changes it); with beta = 0 C itself is NaN (it must not be read). The
metric and bound are bench/check.py's. Shapes: the small side (M for rung 15, N for 16) in
1..16 against long sides and K from 1 to 8191; for rung 17 K in 1..16 (staged once) and
17..64 (chunks of 16) against M, N up to 4099; every layout of A and B; aligned (float4) and
unaligned (scalar) operands; a grid past 65535 blocks and row offsets past 2^31 where the
rung's geometry allows them; two runs bit for bit; shapes a rung does not serve refused with
ConfigError.

Products go through sgemmlab.sgemm(kernel=..., config=...) where the API hands the kernel the
layout asked for (checked with plan.describe), and straight through the launcher where it
would not (a 1 x K row is row- and column-major at once, and the API then picks for itself).
"""

from __future__ import annotations

import itertools

import pytest

import sgemmlab
from sgemmlab import registry
from sgemmlab.bench.check import check_result
from sgemmlab.errors import ConfigError
from sgemmlab.plan import describe
from sgemmlab.registry import config_key
from sgemmlab.runtime import launch as launch_mod
from sgemmlab.runtime.arrays import stream_for
from sgemmlab.runtime.launch import Launcher
from sgemmlab.runtime.limits import vec4_ok

pytestmark = pytest.mark.gpu

NAN = float("nan")
SENTINEL = -12345.0
R15, R16, R17 = (registry.rung(n) for n in (15, 16, 17))
SMALL = (1, 2, 3, 7, 8, 13, 16)
LONG = (1, 17, 31, 64, 127, 1000, 4097, 8191)
TINY_K = (1, 2, 3, 4, 5, 7, 8, 9, 13, 15, 16)
TINY_MN = (1, 2, 3, 7, 8, 13, 16, 17, 31, 64, 127, 1000, 4097, 4099)
LAYOUTS = [(False, False), (True, False), (False, True), (True, True)]
LAYOUT_IDS = ["NN", "TN", "NT", "TT"]
#: how an operand lies in its buffer: (extra floats before it, leading dimension for an
#: inner extent n); "padded" keeps float4 legal, "odd-ld" and "offset" force the scalar path;
#: "odd-ab" (A and B odd-ld, C padded): rung 17's float4 path, which only C's rows decide
#: (its "vec4_c" feature), with every other rung's scalar one
MODES = {
    "tight": lambda n: (0, n),
    "padded": lambda n: (0, (n + 3) // 4 * 4 + 4),
    "odd-ld": lambda n: (0, n + 1 if (n + 1) % 4 else n + 2),
    "offset": lambda n: (1, (n + 3) // 4 * 4 + 4),
}


def _torch():
    import torch

    return torch


class Operand:
    """A rows x cols matrix inside a buffer of `fill`: row-major (rows ld floats apart) or
    column-major (columns ld floats apart), `first` floats into the buffer."""

    def __init__(self, rows, cols, col_major=False, mode="tight", fill=NAN, ld=None):
        torch = _torch()
        inner, outer = (rows, cols) if col_major else (cols, rows)
        first, natural = MODES[mode](inner)
        self.ld = ld if ld is not None else natural
        self.col_major = col_major
        self.buf = torch.full((first + outer * self.ld + 8,), fill, device="cuda")
        block = self.buf[first:first + outer * self.ld].view(outer, self.ld)[:, :inner]
        self.view = block.t() if col_major else block
        inside = torch.zeros_like(self.buf, dtype=torch.bool)
        inside[first:first + outer * self.ld].view(outer, self.ld)[:, :inner] = True
        self.outside = ~inside

    def fill_random(self) -> "Operand":
        torch = _torch()
        self.view.copy_(torch.rand(*self.view.shape, device="cuda") * 2 - 1)
        return self


def _bits(t):
    return t.contiguous().view(_torch().int32)


def _geometry(t):
    return tuple(t.shape), tuple(t.stride())


def _launch(rung, cfg, M, N, K, alpha, beta, A, B, C, ta, tb):
    """Straight through the launcher: the kernel reads the operands as they are given."""
    torch = _torch()
    stream = stream_for(int(torch.cuda.current_stream().cuda_stream), 0)
    Launcher(rung, cfg).bind(M, N, K, alpha, A.view.data_ptr(), A.ld, B.view.data_ptr(), B.ld,
                             beta, C.view.data_ptr(), C.ld, stream, trans_a=ta, trans_b=tb)()
    torch.cuda.synchronize()


def _variant_vec4(rung, M, N, K, A, B, C, ta, tb) -> bool:
    """Whether the launcher bound the float4 variant for these operands (it loads it)."""
    seen = []
    real = launch_mod.load

    def spy(r, cfg, vec4, *args, **kw):
        seen.append(vec4)
        return real(r, cfg, vec4, *args, **kw)

    launch_mod.load = spy
    try:
        stream = stream_for(int(_torch().cuda.current_stream().cuda_stream), 0)
        Launcher(rung, rung.seed).bind(M, N, K, 1.0, A.view.data_ptr(), A.ld,
                                       B.view.data_ptr(), B.ld, 0.0, C.view.data_ptr(), C.ld,
                                       stream, trans_a=ta, trans_b=tb)
    finally:
        launch_mod.load = real
    return seen[-1]


def _run(rung, cfg, M, N, K, *, alpha=1.0, beta=0.0, ta=False, tb=False, mode="tight",
         api=False, operands=None):
    """One product, checked against float64; nothing around A, B or C may change. api: through
    sgemmlab.sgemm (which must hand the kernel these layouts), else the launcher. Returns
    (C, A, B) for repeat runs; `operands` reuses them (C is then reset first)."""
    torch = _torch()
    if operands is None:
        ab_mode, c_mode = ("odd-ld", "padded") if mode == "odd-ab" else (mode, mode)
        A = Operand(M, K, ta, ab_mode).fill_random()
        B = Operand(K, N, tb, ab_mode).fill_random()
        C = Operand(M, N, False, c_mode, fill=SENTINEL)
    else:
        C, A, B = operands
    C.view.copy_(torch.full((M, N), NAN, device="cuda") if beta == 0
                 else torch.rand(M, N, device="cuda") * 2 - 1)
    c0 = C.view.double()
    before = [x.buf.clone() for x in (A, B, C)]
    ab = alpha * (A.view.double() @ B.view.double())
    bc = beta * c0 if beta != 0 else None
    ref = ab + bc if bc is not None else ab
    if M * N < 64:  # a few outputs: one dot product may cancel to near zero, so measure
        # the error against the size of its terms (|alpha| |A| |B|), which FP32's rounding
        # follows, not against the (accidentally small) result
        ab = abs(alpha) * (A.view.double().abs() @ B.view.double().abs())
    where = (f"{rung.label} {config_key(cfg)} {M}x{N}x{K} {'NT'[ta]}{'NT'[tb]} {mode} "
             f"alpha={alpha} beta={beta} {'api' if api else 'launcher'}")
    if api:
        g = describe(_geometry(A.view), _geometry(B.view), _geometry(C.view))
        if min(M, N, K) >= 2:  # else a vector is both layouts, and the API chooses
            assert (g.M, g.N, g.trans_a, g.trans_b, g.swap) == (M, N, ta, tb, False), where
        sgemmlab.sgemm(A.view, B.view, C.view, alpha=alpha, beta=beta, out=C.view,
                       kernel=rung.label, config=cfg)
    else:
        _launch(rung, cfg, M, N, K, alpha, beta, A, B, C, ta, tb)
    torch.cuda.synchronize()
    res = check_result(C.view, ref, K, alpha_ab=ab, beta_c=bc)
    assert res.ok, f"{where}: {res.reason}"
    assert torch.equal(_bits(A.buf), _bits(before[0])), f"{where}: A's buffer changed"
    assert torch.equal(_bits(B.buf), _bits(before[1])), f"{where}: B's buffer changed"
    assert torch.equal(C.buf[C.outside], before[2][C.outside]), f"{where}: wrote outside C"
    return C, A, B


def _mn(rung, small, big):
    """(M, N) with the rung's small side `small` and its long side `big`."""
    return (small, big) if rung is R15 else (big, small)


def _alpha_beta(i):
    return [(1.0, 0.0), (0.5, -2.0), (-1.5, 1.0)][i % 3]


# -- the small side against every long side and K, at the seed, through the API ------------


@pytest.mark.parametrize("big", LONG)
@pytest.mark.parametrize("small", SMALL)
@pytest.mark.parametrize("rung", [R15, R16], ids=["r15", "r16"])
def test_small_side_against_long_sides_and_k(rung, small, big):
    M, N = _mn(rung, small, big)
    for i, K in enumerate(LONG):
        alpha, beta = _alpha_beta(i)
        _run(rung, rung.seed, M, N, K, alpha=alpha, beta=beta, api=True)


@pytest.mark.parametrize("M", TINY_MN)
def test_tiny_k_against_m_and_n(M):
    for j, N in enumerate(TINY_MN):
        for i, K in enumerate(TINY_K):
            if (i + j) % 3 == 0 or K in (1, 16):  # every K at some N, every N at K 1 and 16
                alpha, beta = _alpha_beta(i + j)
                _run(R17, R17.seed, M, N, K, alpha=alpha, beta=beta, api=True)


# -- every layout, aligned and unaligned, straight through the launcher ----------------------

LAYOUT_SHAPES = {
    15: [(1, 4097, 1000), (2, 127, 8191), (3, 1000, 17), (7, 31, 4097), (8, 8191, 127),
         (13, 64, 31), (16, 4099, 1), (16, 1, 64), (1, 1, 1)],
    16: [(4097, 1, 1000), (127, 2, 8191), (1000, 3, 17), (31, 7, 4097), (8191, 8, 127),
         (64, 13, 31), (4099, 16, 1), (1, 16, 64), (1, 1, 1)],
    17: [(1, 4099, 3), (17, 1, 16), (127, 4097, 8), (4099, 13, 1), (1000, 1000, 5),
         (31, 64, 16), (2, 2, 2), (1, 1, 1), (4099, 4099, 16)],
}


@pytest.mark.parametrize("mode", ["padded", "odd-ld", "offset", "odd-ab"])
@pytest.mark.parametrize("ta, tb", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("rung", [R15, R16, R17], ids=["r15", "r16", "r17"])
def test_every_layout_aligned_and_not(rung, ta, tb, mode):
    for i, (M, N, K) in enumerate(LAYOUT_SHAPES[rung.number]):
        alpha, beta = _alpha_beta(i)
        C, A, B = _run(rung, rung.seed, M, N, K, alpha=alpha, beta=beta, ta=ta, tb=tb,
                       mode=mode)
        assert vec4_ok((A.view.data_ptr(), B.view.data_ptr(), C.view.data_ptr()),
                       (A.ld, B.ld, C.ld)) == (mode == "padded"), "the mode picks the variant"
        if rung is R17:  # its float4 variant wherever the pointers and C's rows allow
            assert _variant_vec4(rung, M, N, K, A, B, C, ta, tb) == (
                mode in ("padded", "odd-ab"))


API_SHAPES = {15: [(2, 4097, 1000), (13, 127, 33), (16, 8191, 4097)],
              16: [(4097, 2, 1000), (127, 13, 33), (8191, 16, 4097)],
              17: [(4097, 4099, 16), (127, 33, 2), (2, 3, 5)]}


@pytest.mark.parametrize("mode", ["tight", "padded", "offset"])
@pytest.mark.parametrize("ta, tb", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("rung", [R15, R16, R17], ids=["r15", "r16", "r17"])
def test_every_layout_through_the_api(rung, ta, tb, mode):
    """Transposed views of contiguous tensors reach the kernel as column-major operands."""
    for i, (M, N, K) in enumerate(API_SHAPES[rung.number]):
        alpha, beta = _alpha_beta(i)
        _run(rung, rung.seed, M, N, K, alpha=alpha, beta=beta, ta=ta, tb=tb, mode=mode,
             api=True)


# -- other configurations ------------------------------------------------------------------


def _configs(rung, k=4):
    return registry.covering_sample(list(rung.configs()), k, first=[rung.seed])


CONFIG_PARAMS = [pytest.param(r, c, id=f"r{r.number}-{config_key(c)}")
                 for r in (R15, R16, R17) for c in _configs(r)]


@pytest.mark.parametrize("rung, cfg", CONFIG_PARAMS)
def test_other_configurations(rung, cfg):
    assert rung.is_legal(cfg)
    shapes = {15: [(1, 1000, 4097), (16, 4099, 127), (5, 33, 8191)],
              16: [(1000, 1, 4097), (4099, 16, 127), (33, 5, 8191)],
              17: [(4099, 1000, 16), (129, 4097, 1), (1, 130, 7)]}[rung.number]
    for i, ((M, N, K), (ta, tb)) in enumerate(itertools.product(shapes, LAYOUTS)):
        alpha, beta = _alpha_beta(i)
        _run(rung, cfg, M, N, K, alpha=alpha, beta=beta, ta=ta, tb=tb,
             mode=("padded", "odd-ld")[i % 2])


# -- determinism ---------------------------------------------------------------------------


@pytest.mark.parametrize("ta, tb", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("rung", [R15, R16, R17], ids=["r15", "r16", "r17"])
def test_two_runs_are_bit_identical(rung, ta, tb):
    """Split K meets in a fixed order: the same operands give the same bits, every time."""
    torch = _torch()
    M, N, K = {15: (16, 4099, 8191), 16: (4099, 16, 8191), 17: (4099, 4097, 13)}[rung.number]
    A = Operand(M, K, ta, "padded").fill_random()
    B = Operand(K, N, tb, "padded").fill_random()
    C0 = torch.rand(M, N, device="cuda") * 2 - 1
    ab = 0.5 * (A.view.double() @ B.view.double())
    for cfg in _configs(rung, 3):
        for beta in (0.0, 0.75):
            outs = []
            for _ in range(2):
                C = Operand(M, N, False, "padded", fill=SENTINEL)
                C.view.copy_(C0 if beta else torch.full_like(C0, NAN))
                _launch(rung, cfg, M, N, K, 0.5, beta, A, B, C, ta, tb)
                outs.append(C.view.clone())
            where = f"{rung.label} {config_key(cfg)} {'NT'[ta]}{'NT'[tb]} beta={beta}"
            assert torch.equal(_bits(outs[0]), _bits(outs[1])), f"{where}: two runs differ"
            bc = beta * C0.double() if beta else None
            res = check_result(outs[0], ab + bc if beta else ab, K, alpha_ab=ab, beta_c=bc)
            assert res.ok, f"{where}: {res.reason}"


# -- geometry at the limits ------------------------------------------------------------------


def test_more_than_65535_row_tiles():
    """Rungs 16 and 17 put M on gridDim.x: 65537 tiles of rows launch and are right."""
    r16 = {**R16.seed, "BM": 16, "RN": 1, "WARPS": 4}
    r17 = {**R17.seed, "BM": 32, "TM": 4}
    assert R16.is_legal(r16) and R17.is_legal(r17)
    _run(R16, r16, 65536 * 16 + 5, 3, 7, beta=0.5, mode="padded")
    _run(R16, r16, 65536 * 16 + 5, 3, 7, ta=True, mode="padded")
    _run(R17, r17, 65536 * 32 + 5, 3, 2, beta=0.5, mode="padded")


BIG_LD = 2**30 + 4  # row 2 starts 2^31 + 8 floats in: a 32-bit offset would wrap
#: the tests with buffers past 2^31 floats (8-50 GB each) take turns on one worker: under
#: `-n 12 --dist loadgroup` several at once would exhaust the GPU's memory (conftest frees
#: what each leaves behind)
BIG = pytest.mark.xdist_group("bigmem")


@pytest.mark.parametrize("rung, shape, ta, tb, which", [
    (R15, (2, 37, 3), False, False, "b"),   # B's k-rows (axpy)
    (R15, (2, 3, 100), False, True, "b"),   # B's columns (dot)
    (R16, (3, 2, 100), False, False, "a"),  # A's rows (dot)
    (R16, (37, 2, 3), True, False, "a"),    # A's k-rows (axpy)
    (R17, (3, 129, 2), False, False, "c"),  # C's rows
    (R17, (5, 7, 3), True, False, "a"),     # A's k-rows
    (R17, (3, 129, 20), False, False, "c"),  # K > 16: C's rows
    (R17, (3, 7, 33), False, False, "a"),   # K > 16: A's rows, staged once per chunk
    (R17, (2, 3, 47), False, True, "b"),    # K > 16: B's columns
], ids=["r15-b-rows", "r15-b-cols", "r16-a-rows", "r16-a-cols", "r17-c-rows", "r17-a-cols",
        "r17-deep-c-rows", "r17-deep-a-rows", "r17-deep-b-cols"])
@BIG
def test_row_offsets_past_2_31(rung, shape, ta, tb, which):
    M, N, K = shape
    A = Operand(M, K, ta, "padded", ld=BIG_LD if which == "a" else None).fill_random()
    B = Operand(K, N, tb, "padded", ld=BIG_LD if which == "b" else None).fill_random()
    C = Operand(M, N, False, "padded", fill=SENTINEL, ld=BIG_LD if which == "c" else None)
    for beta in (0.0, 0.5):
        _run(rung, rung.seed, M, N, K, beta=beta, ta=ta, tb=tb, operands=(C, A, B))


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize("rung, shape", [(R15, (17, 64, 64)), (R16, (64, 17, 64)),
                                         (R17, (64, 64, 65))], ids=["r15", "r16", "r17"])
def test_a_shape_outside_the_domain_is_refused_naming_it(rung, shape):
    torch = _torch()
    M, N, K = shape
    A = torch.rand(M, K, device="cuda")
    B = torch.rand(K, N, device="cuda")
    C = torch.full((M, N), SENTINEL, device="cuda")
    with pytest.raises(ConfigError, match=rung.domain.split(" (")[0]):
        sgemmlab.sgemm(A, B, C, out=C, kernel=rung.label, config=rung.seed)
    stream = stream_for(int(torch.cuda.current_stream().cuda_stream), 0)
    with pytest.raises(ConfigError, match=rung.domain.split(" (")[0]):
        Launcher(rung, rung.seed).bind(M, N, K, 1.0, A.data_ptr(), K, B.data_ptr(), N, 0.0,
                                       C.data_ptr(), N, stream)
    torch.cuda.synchronize()
    assert bool((C == SENTINEL).all()), "a refused call wrote into C"


# -- rung 17 past K = 16: K in chunks of 16, a thread's rows in passes of 8 -------------------

DEEP_K = (17, 19, 31, 32, 33, 47, 64)  # a ragged last chunk of 1, 3, 15, 1, 15; whole ones
#: 1, primes, and the seed's edges: a pass's band (64 rows), BN (128), BM (256)
DEEP_MN = (1, 2, 7, 13, 31, 64, 127, 128, 129, 257, 1009, 4099)
TM12 = {"BM": 96, "BN": 128, "TM": 12}  # legal, off the space: passes of 4 rows, not 8


@pytest.mark.parametrize("ta, tb", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("M", DEEP_MN)
def test_tiny_k_past_16_against_m_n_and_layouts(M, ta, tb):
    """At the seed, float4 operands: every K of DEEP_K at some N, every N at K 17 and 64."""
    for j, N in enumerate(DEEP_MN):
        for i, K in enumerate(DEEP_K):
            if (i + j) % 3 == 0 or K in (17, 64):
                alpha, beta = _alpha_beta(i + j + M)
                _run(R17, R17.seed, M, N, K, alpha=alpha, beta=beta, ta=ta, tb=tb,
                     mode="padded")


DEEP_LAYOUT_SHAPES = [(1, 4099, 17), (17, 1, 64), (127, 4097, 19), (4099, 13, 31),
                      (1000, 1000, 33), (31, 64, 47), (2, 2, 32), (1, 1, 64), (4099, 4099, 64)]


@pytest.mark.parametrize("mode", ["padded", "odd-ld", "offset", "odd-ab"])
@pytest.mark.parametrize("ta, tb", LAYOUTS, ids=LAYOUT_IDS)
def test_tiny_k_past_16_every_layout_aligned_and_not(ta, tb, mode):
    for i, (M, N, K) in enumerate(DEEP_LAYOUT_SHAPES):
        for beta in (0.0, 0.5 + i):
            C, A, B = _run(R17, R17.seed, M, N, K, alpha=_alpha_beta(i)[0], beta=beta, ta=ta,
                           tb=tb, mode=mode)
        assert vec4_ok((A.view.data_ptr(), B.view.data_ptr(), C.view.data_ptr()),
                       (A.ld, B.ld, C.ld)) == (mode == "padded"), "the mode picks the variant"


@pytest.mark.parametrize("mode", ["tight", "offset"])
@pytest.mark.parametrize("ta, tb", LAYOUTS, ids=LAYOUT_IDS)
def test_tiny_k_past_16_through_the_api(ta, tb, mode):
    """sgemmlab.sgemm hands rung 17 every K up to 64 (and refuses 65: see below)."""
    for i, (M, N, K) in enumerate([(4097, 4099, 64), (127, 33, 17), (2, 3, 33),
                                   (1000, 1000, 47)]):
        alpha, beta = _alpha_beta(i)
        _run(R17, R17.seed, M, N, K, alpha=alpha, beta=beta, ta=ta, tb=tb, mode=mode, api=True)


DEEP_CONFIG_PARAMS = [pytest.param(c, id=config_key(c)) for c in [*_configs(R17, 5), TM12]]


@pytest.mark.parametrize("cfg", DEEP_CONFIG_PARAMS)
def test_tiny_k_past_16_other_configurations(cfg):
    """Every TM (passes of 4 or 8 rows, one pass or several); two runs bit for bit."""
    assert R17.is_legal(cfg)
    torch = _torch()
    shapes = [(4099, 1000, 64), (129, 4097, 17), (1, 130, 33), (257, 257, 47)]
    for i, ((M, N, K), (ta, tb)) in enumerate(itertools.product(shapes, LAYOUTS)):
        alpha, beta = _alpha_beta(i)
        mode = ("padded", "odd-ld")[i % 2]
        C, A, B = _run(R17, cfg, M, N, K, alpha=alpha, beta=0.0, ta=ta, tb=tb, mode=mode)
        first = C.view.clone()
        _run(R17, cfg, M, N, K, alpha=alpha, beta=0.0, ta=ta, tb=tb, operands=(C, A, B))
        assert torch.equal(_bits(first), _bits(C.view)), f"{config_key(cfg)}: two runs differ"
        _run(R17, cfg, M, N, K, alpha=alpha, beta=beta or 0.25, ta=ta, tb=tb, mode=mode)


def test_tiny_k_past_16_more_than_65535_row_tiles():
    cfg = {**R17.seed, "BM": 32, "TM": 4}
    assert R17.is_legal(cfg)
    _run(R17, cfg, 65536 * 32 + 5, 3, 20, beta=0.5, mode="padded")
    _run(R17, cfg, 65536 * 32 + 5, 3, 33, ta=True, mode="odd-ld")


@pytest.mark.parametrize("ta", [False, True], ids=["NN", "TN"])
def test_a_short_batch_of_tiny_k_products_runs_one_per_launch(ta):
    """dispatch.PER_ITEM_BATCH: rung 17 (no batches) computes each product of a short batch
    in a launch of its own; every product checked, an output poisoned first."""
    from sgemmlab import dispatch
    from sgemmlab.runtime.device import gpu_info

    torch = _torch()
    batch, M, N, K = 3, 1031, 4099, 5
    g = gpu_info(0)
    c = dispatch.choose(M, N, K, gpu_name=g.name, sm_count=g.sm_count, trans_a=ta,
                        batch=batch, aligned=False, arch=g.arch)
    assert c.rung == R17.label, c.reason
    a = torch.rand(batch, K, M, device="cuda").transpose(1, 2) if ta else \
        torch.rand(batch, M, K, device="cuda")
    b = torch.rand(batch, K, N, device="cuda") * 2 - 1
    out = torch.full((batch, M, N), NAN, device="cuda")
    sgemmlab.matmul(a, b, out=out)
    torch.cuda.synchronize()
    for i in range(batch):
        ab = a[i].double() @ b[i].double()
        res = check_result(out[i], ab, K, alpha_ab=ab)
        assert res.ok, f"product {i}: {res.reason}"
