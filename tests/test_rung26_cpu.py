"""Rung 26 (kernels/hopper/26_ozaki_int8.cu) on the CPU: its producer, ring, mbarriers,
copy-engine boxes, INT8 wgmma and epilogue emulated (tests/cuda_cpu.h), bit for bit against
NumPy's products of the same residue planes. Every configuration the probes time: the
seed, 16-byte stores (STORE16), each warpgroup its own tile in turns (PINGPONG), BN 128,
two stages, clusters of two blocks sharing B by multicast (CLUSTER 2), and the residues by
an exact division (EXACT_DIV). Ragged shapes (1 and primes), K past the ring, one block
walking every item and three sharing them; the output planes start as one poison and then
another, so an element never written fails, and their padding past N must keep it. Each
planted bug (a stage released before its wgmma retired, a wait left out, the turns dropped,
two halves of a row swapped, a cluster's block leaving while its peer still writes to it,
the exact division's shift left out or its quotient one too large) must fail: the emulator
would prove nothing if it let them through. The GPU tests (tests/test_ozaki_gpu.py) stay
the judge of what it cannot see."""

from __future__ import annotations

import numpy as np
import pytest

import cuda_cpu
from sgemmlab.ozaki.reference import moduli

pytestmark = pytest.mark.skipif(cuda_cpu.compiler() is None, reason="no C++ compiler")

# (over the seed, which has STORE16: the others name it either way)
CONFIGS = {
    "seed": {},
    "store4": {"STORE16": 0},
    "pingpong": {"PINGPONG": 1, "STORE16": 0},
    "pingpong_store16": {"PINGPONG": 1, "STORE16": 1},
    "pingpong_bn128": {"PINGPONG": 1, "BN": 128, "STORE16": 1, "STAGES": 2},
    "bn128": {"BN": 128, "STAGES": 3, "STORE16": 0},
    "stages2": {"STAGES": 2, "STORE16": 1},
    "cluster2": {"CLUSTER": 2, "STORE16": 0},
    "cluster2_store16": {"CLUSTER": 2, "STORE16": 1, "BN": 128},
    "exact_div": {"EXACT_DIV": 1},
    "pingpong_exact_div": {"PINGPONG": 1, "STORE16": 0, "BN": 128, "STAGES": 3, "EXACT_DIV": 1},
}
# (k-tiles of 128: fewer than the ring's stages, as many (512 with 4), and more)
SHAPES = [(1, 1, 1, 1), (17, 31, 64, 1), (131, 263, 301, 3), (129, 130, 257, 2),
          (70, 300, 512, 2), (300, 257, 700, 2)]


def _planes(M, N, K, count, seed):
    rng = np.random.default_rng(seed)
    return (rng.integers(-128, 128, (count, M, K)).astype(np.int8),
            rng.integers(-128, 128, (count, N, K)).astype(np.int8))


def _check(ra, rb, count, cfg, **kwargs):
    mods = moduli(count)
    want = cuda_cpu.products_numpy(ra, rb, mods)
    for poison, blocks in ((0x55, 3), (0xAA, 1)):
        got, pad = cuda_cpu.rung26_products(ra, rb, mods, cfg, blocks=blocks, poison=poison,
                                            **kwargs)
        bad = np.argwhere(got != want)
        assert bad.size == 0, (f"{len(bad)} residues differ (poison {poison:#x}, {blocks} "
                               f"blocks), first at (plane, row, col) {tuple(bad[0])}")
        assert (pad.view(np.uint8) == poison).all(), "a residue was written past N"


@pytest.mark.parametrize("M, N, K, count", SHAPES)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_products_bit_for_bit(name, M, N, K, count):
    _check(*_planes(M, N, K, count, M * 7 + N), count, CONFIGS[name])


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("name", ["seed", "pingpong_store16", "pingpong_bn128", "cluster2"])
def test_threads_taking_turns_in_drawn_orders(name, seed):
    """The same products when, between barriers, the threads run in an order drawn afresh
    each round (not only first to last and back): the producer, the two warpgroups and the
    copies' landings interleave in many more ways, and a cluster's two blocks drift apart."""
    _check(*_planes(300, 257, 700, 2, seed), 2, CONFIGS[name], order=seed)


@pytest.mark.parametrize("name", ["seed", "pingpong_store16", "exact_div"])
def test_eight_moduli_and_a_long_k(name):
    _check(*_planes(70, 300, 1100, 8, 11), 8, CONFIGS[name])


# (what a line becomes, in the kernel's source; the configuration that runs it; the threads'
# turns, Library.order: a seed lets a cluster's blocks drift apart)
BUGS = {
    "a stage released before its wgmma retired": (
        [("            wgmma_wait<1>();\n#pragma unroll\n            for (int r = 0; r < RM; ++r) "
          "pin(acc[r]);\n            if (kt > 0) release(prev);\n",
          "            if (kt > 0) release(prev);\n            wgmma_wait<1>();\n")], {}),
    "the full barrier not waited on": (
        [("            mbar_wait(full(stage), phase);\n", "")], {}),
    "the first k-step accumulating": ([("kt > 0 || kk > 0", "kk > 0")], {}),
    "no wgmma_wait<0> before the epilogue": (
        [("        wgmma_wait<0>();\n", "")], {}),
    "the barriers never initialised": (
        [("            mbar_init(full(s), 1);\n", "")], {}),
    "the warpgroups not taking turns": (
        [("        if (n > 0) named_bar_sync(1 + cw, 256);\n", ""),
         ("        if (n + 1 < items) named_bar_arrive(1 + (cw ^ 1), 256);  // the other's "
          "turn\n", "")], CONFIGS["pingpong"]),
    "a turn given to a warpgroup with nothing left": (
        [("if (n + 1 < items) named_bar_arrive", "named_bar_arrive")], CONFIGS["pingpong"]),
    "a row's halves swapped in the 16-byte store": (
        [("make_uint4(g0, u[2], g1, u[3])", "make_uint4(u[2], g0, g1, u[3])")],
        CONFIGS["seed"]),
    "a cluster's peer never told its stage is free": (
        [("        if (lane == 0) mbar_arrive_remote(empty(s), peer);\n", "")],
        CONFIGS["cluster2"]),
    "B's half multicast to one block of the pair": (
        [("full(stage), 0x3);", "full(stage), 0x1);")], CONFIGS["cluster2"]),
    "the exact division's quotient not shifted": (
        [("__umulhi(a, magic39) + base) >> 7", "__umulhi(a, magic39) + base)")],
        CONFIGS["exact_div"]),
    # (an error of a multiple of 256 leaves the stored byte as it is: leaving base out would
    # pass at these two moduli, 256 and 255, whose lifts are multiples of 256)
    "the exact division's quotient one too large": (
        [("__umulhi(a, magic39) + base) >> 7", "__umulhi(a, magic39) + base + 128u) >> 7")],
        CONFIGS["exact_div"]),
    "a block leaving while its peer may still write to it": (
        [("        cluster_sync();  // no block leaves while its peer may still write to it\n",
          ""), ("#if CLUSTER == 2\n    cluster_sync();\n#endif\n}", "}")],
        CONFIGS["cluster2"], 3),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_a_planted_bug_fails(bug, tmp_path):
    edits, cfg, *order = BUGS[bug]
    text = (cuda_cpu.KERNELS / "hopper" / "26_ozaki_int8.cu").read_text()
    for old, new in edits:
        assert old in text, f"the kernel changed: no {old!r} to plant the bug in"
        text = text.replace(old, new)
    planted = tmp_path / "26_planted.cu"
    planted.write_text(text)
    ra, rb = _planes(300, 257, 700, 2, 1)
    with pytest.raises((AssertionError, cuda_cpu.LaunchFailed)):
        _check(ra, rb, 2, cfg, source=planted, order=order[0] if order else 0)


@pytest.mark.parametrize("name", ["seed", "pingpong_store16", "cluster2", "exact_div"])
def test_the_scheme_with_rung26_emulated_matches_numpy_products(name):
    """The whole product through runtime/ozaki.bind, rung 26 emulated with the runtime's own
    tensor maps and arguments, against the same with NumPy's products."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((131, 300), dtype=np.float32)
    b = rng.standard_normal((300, 257), dtype=np.float32)
    c = rng.standard_normal((131, 257), dtype=np.float32)
    out = {}
    for products in ("numpy", "emulated"):
        with cuda_cpu.ozaki_on_cpu(products=products, gemm_cfg=CONFIGS[name]) as run:
            out[products] = run(a, b, c, alpha=0.5, beta=2.0, count=4, tb=True)
    assert not np.isnan(out["emulated"]).any()
    np.testing.assert_array_equal(out["emulated"], out["numpy"])
