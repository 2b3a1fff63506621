"""Every rung against a float64 reference, on the GPU (skipped without one).

Inputs are fresh and random (uniform in [-1, 1]) on every call; with beta = 0 the output is
poisoned with NaN first, so an element a kernel forgets to write fails, and so does a kernel
that reads C when it must not. Shapes are ragged (1x1x1, 17x33x65, ...) as well as square.
Operands that are views (offset by one element, or rows longer than the matrix) run the
scalar variant of the vectorized rungs or the float4 one with edges, and everything around a
view must come out untouched.
"""

from __future__ import annotations

import pytest

import sgemmlab
from sgemmlab import registry
from sgemmlab.bench.check import check_gemm, check_result
from sgemmlab.registry import Rung, config_key
from sgemmlab.runtime.arrays import as_matrix
from sgemmlab.runtime.compiler import KERNEL_DIR
from sgemmlab.runtime.launch import vec4_ok

pytestmark = pytest.mark.gpu

SMALL_SHAPES = [(1, 1, 1), (17, 33, 65), (64, 64, 64), (129, 257, 31), (1000, 1000, 1000)]
ALPHA_BETA = [
    pytest.param(1.0, 0.0, id="a1-b0"),  # NaN-poisoned output, C never read
    pytest.param(0.5, -2.0, id="a0.5-b-2"),
    pytest.param(1.0, 1.0, id="a1-b1"),
]
RAGGED = (67, 45, 33)


def _written(r: Rung):
    return pytest.mark.skipif(not (KERNEL_DIR / r.source).is_file(),
                              reason=f"{r.source} is not written yet")


def _shapes(r: Rung) -> list[tuple[int, int, int]]:
    big = [(4092, 4092, 4092)] + ([(4096, 4096, 4096)] if r.number >= 4 else [])
    return SMALL_SHAPES + big


RUNG_SHAPES = [pytest.param(r, shape, id=f"r{r.number}-{'x'.join(map(str, shape))}",
                            marks=_written(r))
               for r in registry.RUNGS for shape in _shapes(r)]
RUNGS = [pytest.param(r, id=f"r{r.number}", marks=_written(r)) for r in registry.RUNGS]


def _gpu_name() -> str:
    from sgemmlab.runtime.device import gpu_info

    return gpu_info().name


def _default(r: Rung) -> dict:
    return r.default(_gpu_name())


def _gemm(r: Rung, cfg: dict):
    """fn(A, B, C, alpha, beta) for check_gemm: the public API, in place on C."""
    def gemm(A, B, C, alpha, beta):
        sgemmlab.sgemm(A, B, C, alpha=alpha, beta=beta, out=C, kernel=r.number, config=cfg)
    return gemm


def _check(r: Rung, cfg: dict, shape, alpha: float, beta: float) -> None:
    M, N, K = shape
    res = check_gemm(_gemm(r, cfg), M, N, K, alpha=alpha, beta=beta)
    assert res.ok, (f"{r.label} {config_key(cfg)} at {M}x{N}x{K}, alpha={alpha}, "
                    f"beta={beta}: {res.reason} (error {res.error:.2e}, bound {res.bound:.2e})")


# -- every rung at its default configuration ------------------------------------------------


@pytest.mark.parametrize("alpha, beta", ALPHA_BETA)
@pytest.mark.parametrize("rung, shape", RUNG_SHAPES)
def test_rung_matches_float64(rung, shape, alpha, beta):
    _check(rung, _default(rung), shape, alpha, beta)


# -- views: unaligned bases, rows longer than the matrix -------------------------------------

SENTINEL = -12345.0  # what surrounds C's view; a stray write changes it
LAYOUTS = {
    # name: (extra columns at the start, row length for a matrix of `cols` columns)
    "offset": lambda cols: (1, cols + 1),  # A = big[:, 1:]: 4-byte offset, scalar path
    "padded": lambda cols: (0, (cols + 3) // 4 * 4 + 4),  # aligned, ld % 4 == 0: float4 path
    "odd-ld": lambda cols: (0, cols + 1 if (cols + 1) % 4 else cols + 2),  # scalar path
}
VIEW_SHAPES = [(67, 45, 33), (17, 33, 65), (129, 257, 31), (130, 130, 130)]


def _embedded(torch, rows: int, cols: int, layout: str, fill: float):
    """(buffer, view): a rows x cols view into a buffer one row taller and wider than it."""
    first, width = LAYOUTS[layout](cols)
    buf = torch.full((rows + 1, width), fill, device="cuda")
    return buf, buf[:rows, first:first + cols]


def _bits(t):
    import torch

    return t.contiguous().view(torch.int32)  # NaN == NaN, bit for bit


@pytest.mark.parametrize("alpha, beta", ALPHA_BETA[:2])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", VIEW_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("rung", RUNGS)
def test_views_with_any_alignment_and_leading_dimension(rung, shape, layout, alpha, beta):
    import torch

    M, N, K = shape
    nan = float("nan")
    a_buf, A = _embedded(torch, M, K, layout, nan)  # NaN around A and B: a read past an
    b_buf, B = _embedded(torch, K, N, layout, nan)  # edge poisons the result
    c_buf, C = _embedded(torch, M, N, layout, SENTINEL)
    A.copy_(torch.rand(M, K, device="cuda") * 2 - 1)
    B.copy_(torch.rand(K, N, device="cuda") * 2 - 1)
    C.copy_(torch.full((M, N), nan, device="cuda") if beta == 0
            else torch.rand(M, N, device="cuda") * 2 - 1)
    before = {"A": a_buf.clone(), "B": b_buf.clone(), "C": c_buf.clone()}
    mats = [as_matrix(x, name) for x, name in ((A, "a"), (B, "b"), (C, "c"))]
    assert vec4_ok(tuple(m.ptr for m in mats), tuple(m.ld for m in mats)) == (
        layout == "padded"), "the layout does not select the variant this test is about"
    ref = alpha * (A.double() @ B.double())
    if beta != 0:
        ref += beta * C.double()

    cfg = _default(rung)
    sgemmlab.sgemm(A, B, C, alpha=alpha, beta=beta, out=C, kernel=rung.number, config=cfg)
    torch.cuda.synchronize()

    where = f"{rung.label} {config_key(cfg)} {layout} {M}x{N}x{K} alpha={alpha} beta={beta}"
    res = check_result(C, ref, K)  # over max|C_ref| alone, terms or not: the strict form
    assert res.ok, f"{where}: {res.reason}"
    outside = torch.ones_like(c_buf, dtype=torch.bool)
    first = LAYOUTS[layout](N)[0]
    outside[:M, first:first + N] = False
    assert torch.equal(c_buf[outside], before["C"][outside]), f"{where}: wrote outside C"
    assert torch.equal(_bits(a_buf), _bits(before["A"])), f"{where}: wrote into A"
    assert torch.equal(_bits(b_buf), _bits(before["B"])), f"{where}: wrote into B"


@pytest.mark.parametrize("shape", [(67, 45, 33), (68, 44, 36), (256, 256, 64)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("rung", RUNGS)
def test_beta_zero_never_reads_c(rung, shape):
    """C full of NaN (inside and around its view) must not matter when beta == 0."""
    import torch

    M, N, K = shape
    A = torch.rand(M, K, device="cuda") * 2 - 1
    B = torch.rand(K, N, device="cuda") * 2 - 1
    c_buf = torch.full((M + 1, N + 4), float("nan"), device="cuda")
    C = c_buf[:M, :N]
    sgemmlab.sgemm(A, B, C, alpha=1.5, beta=0.0, out=C, kernel=rung.number,
                   config=_default(rung))
    torch.cuda.synchronize()
    assert bool(torch.isfinite(C).all()), f"{rung.label}: beta=0 read C (NaN came through)"
    res = check_result(C, 1.5 * (A.double() @ B.double()), K)
    assert res.ok, f"{rung.label}: {res.reason}"


# -- other configurations, at a ragged shape ------------------------------------------------


def _sample(r: Rung, k: int) -> list[dict]:
    """All legal configurations when there are <= k; else the seed, then configurations
    that together take every value of every constant at least once, then evenly spread
    ones (deterministic)."""
    return registry.covering_sample(list(r.configs()), k, first=[r.seed])


CONFIGS = [pytest.param(r, cfg, id=f"r{r.number}-{config_key(cfg)}", marks=_written(r))
           for r in registry.RUNGS for cfg in _sample(r, 6)]


@pytest.mark.parametrize("rung, cfg", CONFIGS)
def test_configurations_at_a_ragged_shape(rung, cfg):
    _check(rung, cfg, RAGGED, 1.0, 0.0)  # scalar variant (lda = 33)
    _check(rung, cfg, RAGGED, 0.75, -1.25)
    _check(rung, cfg, (68, 44, 36), 1.0, 0.0)  # float4 variant, tile edges in M, N, K


def test_every_legal_config_of_rungs_1_to_3_is_covered():
    covered = {(p.values[0].number, config_key(p.values[1])) for p in CONFIGS}
    for n in (1, 2, 3):
        for cfg in registry.rung(n).configs():
            assert (n, config_key(cfg)) in covered


# The API around the kernels (sgemm / matmul: outputs, aliasing, refusals, K = 0) is
# tested in test_api_gpu.py.
