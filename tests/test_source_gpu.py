"""The epilogue's source on the GPU (kernels/epilogue.cuh's Source, SGEMM_SOURCE): C = alpha A B
+ beta X with X read in the kernel's own epilogue, for every rung with the feature, each
decomposition (Stream-K's three fix-ups, split-K's parts, data-parallel), every layout and
batch it takes, at ragged shapes (1 and primes) and tile multiples.

C is poisoned with NaN before every launch and beta is not 0: a kernel that reads C instead
of X, or leaves an element unwritten, puts NaN in the result and fails. X is a bias row (row
stride 0, as F.linear's), a whole matrix of its own row stride, or a bias one element off
16-byte alignment (the scalar variant). Compared against float64 on fresh random inputs.
"""

from __future__ import annotations

import pytest

from sgemmlab import product, registry
from sgemmlab.bench.check import check_result
from sgemmlab.plan import describe, make_plan
from sgemmlab.registry import config_key

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

GPU = "NVIDIA H200"


def _configs():
    """(rung, configuration) pairs: each decomposition of every rung with a source."""
    out = []
    for n in (13, 23, 25):
        out.append((n, {}))
    for change in ({"SPLIT": 0, "FIXUP": 2}, {"SPLIT": 0, "FIXUP": 0}, {"SPLIT": 0, "FIXUP": 1},
                   {"SPLIT": 1}, {"SPLIT": 2, "FIXUP": 2}, {"SPLIT": 4, "FIXUP": 0}):
        out.append((14, change))
    out += [(22, {}), (24, {}), (24, {"REG_TRANSPOSE": 1, "SPLIT": 1})]
    # one k-major operand of NT's two through registers: A alone, B alone
    out += [(24, {"REG_TRANSPOSE": 2}), (25, {"REG_TRANSPOSE": 3})]
    for n in (15, 16, 18):
        out += [(n, {"SPLIT": 0}), (n, {"SPLIT": 1})]
    out.append((17, {}))
    return out


SHAPES = [(1, 1, 1), (67, 45, 33), (3, 509, 257), (509, 3, 257), (256, 256, 64),
          (300, 200, 4), (131, 260, 1031)]
# x @ W and x @ W^T (the products a bias meets) with each kind of source; A column-major
# and the scalar variant with a bias
LAYOUT_SOURCES = [("NN", "bias"), ("NN", "matrix"), ("NN", "unaligned"), ("NT", "bias"),
                  ("NT", "matrix"), ("TN", "bias")]


def _cases():
    for n, change in _configs():
        r = registry.rung(n)
        cfg = {**r.default(GPU), **change}
        assert r.is_legal(cfg), (n, cfg)
        for M, N, K in SHAPES:
            if not r.serves(M, N, K):
                continue
            for layout, source in LAYOUT_SOURCES:
                yield pytest.param(r, cfg, (M, N, K), layout, source,
                                   id=f"r{n}-{config_key(change) or 'default'}-"
                                      f"{M}x{N}x{K}-{layout}-{source}")


def _operand(rows: int, cols: int, col_major: bool, gen, batch: int = 1):
    shape = (batch, cols, rows) if col_major else (batch, rows, cols)
    t = torch.rand(shape, device="cuda", generator=gen) * 2 - 1
    t = t.transpose(-1, -2) if col_major else t
    return t if batch > 1 else t[0]


def _source(kind: str, M: int, N: int, gen):
    """X as the kernel reads it, (X broadcast to M x N for the reference, pointer, ldx)."""
    if kind == "matrix":
        ld = (N + 3) // 4 * 4 + 4  # rows of their own length: aligned, a multiple of 4
        buf = torch.rand(M, ld, device="cuda", generator=gen) * 2 - 1
        return buf[:, :N], buf.data_ptr(), ld
    buf = torch.rand(N + 1, device="cuda", generator=gen) * 2 - 1
    x = buf[1:] if kind == "unaligned" else buf[:N]
    return x.expand(M, N), x.data_ptr(), 0


def _run(rung, cfg, a, b, c, alpha: float, beta: float, source: tuple[int, int]) -> None:
    dev = c.get_device()
    g = describe((tuple(a.shape), a.stride()), (tuple(b.shape), b.stride()),
                 (tuple(c.shape), c.stride()))
    aligned = (a.data_ptr() | b.data_ptr() | c.data_ptr()) & 15 == 0
    plan = make_plan(g, dev, rung.number, cfg, False, aligned, rung.precision)
    assert plan.takes_source == rung.supports("source"), (rung.label, g)
    glue = product.TORCH
    glue.find()  # torch's fast calls (a first test in its process finds them itself)
    prev = glue.device_ready(dev)
    try:
        plan.launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), glue.raw_stream(dev), alpha,
                    beta, source=source)
    finally:
        glue.restore(prev)
    torch.cuda.synchronize()


def _product(rung, cfg, shape, layout: str, source: str, seed: int):
    """C = 0.5 A B - 2 X on fresh operands of `layout` into a NaN-poisoned C: (C, the
    float64 terms alpha A B and beta X)."""
    M, N, K = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = _operand(M, K, layout[0] == "T", gen)
    b = _operand(K, N, layout[1] == "T", gen)
    x, px, ldx = _source(source, M, N, gen)
    c = torch.full((M, N), float("nan"), device="cuda")
    alpha, beta = 0.5, -2.0
    _run(rung, cfg, a, b, c, alpha, beta, (px, ldx))
    return c, alpha * (a.double() @ b.double()), beta * x.double()


@pytest.mark.parametrize("rung, cfg, shape, layout, source", list(_cases()))
def test_the_epilogue_reads_beta_s_term_from_the_source(rung, cfg, shape, layout, source):
    M, N, K = shape
    c, ab, bx = _product(rung, cfg, shape, layout, source, M * 7919 + N * 31 + K)
    res = check_result(c, ab + bx, K, alpha_ab=ab, beta_c=bx)
    assert res.ok, f"{rung.label} {config_key(cfg)} {M}x{N}x{K} {layout} {source}: {res.reason}"


@pytest.mark.parametrize("n, change", [(13, {}), (14, {"SPLIT": 0, "FIXUP": 2}), (14, {"SPLIT": 1}),
                                       (18, {"SPLIT": 1})])
def test_a_batch_repeats_the_source_for_every_product(n, change):
    rung = registry.rung(n)
    cfg = {**rung.default(GPU), **change}
    batch, M, N, K = 3, 67, 45, 129
    gen = torch.Generator(device="cuda").manual_seed(n)
    a = _operand(M, K, False, gen, batch)
    b = _operand(K, N, False, gen, batch)
    x, px, ldx = _source("bias", M, N, gen)
    c = torch.full((batch, M, N), float("nan"), device="cuda")
    _run(rung, cfg, a, b, c, 1.0, 1.0, (px, ldx))
    ab = a.double() @ b.double()
    res = check_result(c, ab + x.double(), K, alpha_ab=ab, beta_c=x.double().expand(batch, M, N))
    assert res.ok, res.reason


HOPPER_SHAPES = [(1, 1, 1), (67, 45, 33), (131, 260, 1031), (256, 384, 64)]


@pytest.mark.parametrize("n", [19, 20])
@pytest.mark.parametrize("shape", HOPPER_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout, source", LAYOUT_SOURCES, ids=lambda v: str(v))
def test_the_tensor_core_rungs_read_the_source_in_their_epilogue(n, shape, layout, source):
    """Rungs 19 (TF32: TF32_BOUND) and 20 (3xTF32: FP32's bound) through hopper/wgmma.cuh's
    store2, with the pre-pass copying and splitting the operands as it does for any call."""
    from sgemmlab.bench.check import TF32_BOUND, relative_error

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the tensor-core rungs need compute capability 9.0")
    rung = registry.rung(n)
    M, N, K = shape
    c, ab, bx = _product(rung, rung.default(GPU), shape, layout, source,
                         M * 7919 + N * 31 + K + n)
    if n == 20:
        res = check_result(c, ab + bx, K, alpha_ab=ab, beta_c=bx)
        assert res.ok, f"{rung.label} {shape} {layout} {source}: {res.reason}"
    else:
        assert not torch.isnan(c).any(), "an output left unwritten or C read"
        err = relative_error(c, ab + bx, alpha_ab=ab, beta_c=bx)
        assert err <= TF32_BOUND, (shape, layout, source, err)


def test_a_rung_without_the_source_refuses_one():
    from sgemmlab.errors import ConfigError

    rung = registry.rung(10)
    a = torch.ones(8, 8, device="cuda")
    c = torch.empty(8, 8, device="cuda")
    with pytest.raises(ConfigError, match="from C alone"):
        _run(rung, rung.default(GPU), a, a, c, 1.0, 1.0, (a.data_ptr(), 0))
