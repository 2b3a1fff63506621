"""Packed plans on the GPU (plan.packs_b): x @ W^T at many rows is computed on a row-major
copy of W^T that kernels/pack.cu makes in the stream's workspace first. Checked against
float64 on fresh random inputs with the output poisoned (NaN) first, at ragged shapes (odd
rows, columns and a padded output), with beta's term from C and from a bias, beside a
Stream-K product that keeps its own partial tiles in the same workspace (deterministic:
the fixed-order fix-up), through sgemmlab.matmul, the drop-in switch, and a CUDA graph.
"""

from __future__ import annotations

import pytest

import sgemmlab
from sgemmlab import product
from sgemmlab.bench.check import check_result
from sgemmlab.plan import describe, make_plan

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

# (M, N, K): PACK_MIN_M rows or more and PACK_MIN_OUTPUTS outputs or more; K a multiple of 4
SHAPES = [(4096, 1024, 16), (4099, 1031, 36), (8191, 517, 4), (4097, 2048, 260)]


def _nt(M: int, N: int, K: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.rand(M, K, device="cuda", generator=gen) * 2 - 1
    w = torch.rand(N, K, device="cuda", generator=gen) * 2 - 1
    return a, w, gen


def _output(M: int, N: int):
    """C poisoned with NaN, its rows a multiple of 4 floats apart (a padded view when N is
    not): the float4 paths stay open."""
    buf = torch.full((M, (N + 3) // 4 * 4), float("nan"), device="cuda")
    return buf[:, :N]


def _launch(a, b, c, alpha, beta, deterministic=False, source=None):
    dev = c.get_device()
    g = describe((tuple(a.shape), a.stride()), (tuple(b.shape), b.stride()),
                 (tuple(c.shape), c.stride()))
    plan = make_plan(g, dev, None, None, deterministic, True)
    assert plan.pack == (g.K, g.N, 1, g.ldb), "the plan reads B where it is"
    glue = product.TORCH
    glue.find()  # torch's fast calls (a first test in its process finds them itself)
    prev = glue.device_ready(dev)
    try:
        kw = {} if source is None else {"source": source}
        plan.launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), glue.raw_stream(dev), alpha,
                    beta, **kw)
    finally:
        glue.restore(prev)
    torch.cuda.synchronize()
    return plan


@pytest.mark.parametrize("deterministic", [False, True], ids=["dispatch", "deterministic"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_a_packed_product_matches_float64(shape, deterministic):
    M, N, K = shape
    a, w, _ = _nt(M, N, K, M + 7 * N + 31 * K)
    c = _output(M, N)
    plan = _launch(a, w.t(), c, 0.5, 0.0, deterministic)
    ab = 0.5 * (a.double() @ w.double().t())
    res = check_result(c, ab, K, alpha_ab=ab)
    assert res.ok, f"{M}x{N}x{K} {plan.rung.label}: {res.reason}"


@pytest.mark.parametrize("shape", SHAPES[:2], ids=lambda s: "x".join(map(str, s)))
def test_beta_s_term_comes_from_c_or_from_a_bias(shape):
    M, N, K = shape
    a, w, gen = _nt(M, N, K, 5 * M + N)
    c0 = torch.rand(M, N, device="cuda", generator=gen)
    c = _output(M, N)
    c.copy_(c0)
    _launch(a, w.t(), c, 1.0, -2.0)
    ab = a.double() @ w.double().t()
    res = check_result(c, ab - 2 * c0.double(), K, alpha_ab=ab, beta_c=-2 * c0.double())
    assert res.ok, res.reason
    bias = torch.rand(N, device="cuda", generator=gen)
    c = _output(M, N)
    _launch(a, w.t(), c, 1.0, 1.0, source=(bias.data_ptr(), 0))
    want = ab + bias.double()
    res = check_result(c, want, K, alpha_ab=ab, beta_c=bias.double().expand(M, N))
    assert res.ok, res.reason


def test_matmul_and_the_switch_pack_and_stay_exact():
    M, N, K = 4104, 1032, 132
    a, w, gen = _nt(M, N, K, 3)
    bias = torch.rand(N, device="cuda", generator=gen)
    ab = a.double() @ w.double().t()
    got = sgemmlab.matmul(a, w.t())
    assert check_result(got, ab, K, alpha_ab=ab).ok
    with sgemmlab.torch_mode():
        lin = torch.nn.functional.linear(a, w, bias)
    assert check_result(lin, ab + bias.double(), K, alpha_ab=ab).ok


def test_a_cuda_graph_replays_the_copy_on_new_inputs():
    M, N, K = 4096, 1024, 64
    x, w, gen = _nt(M, N, K, 11)
    bias = torch.rand(N, device="cuda", generator=gen)
    f = torch.nn.functional.linear
    with sgemmlab.torch_mode() as mode:
        f(x, w, bias)  # the plan and its kernels, made outside the capture
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            f(x, w, bias)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = f(x, w, bias)
        served = sum(mode.served.values())
    assert served >= 3, "the switch did not serve the captured call"
    for seed in (1, 2):
        x.copy_(torch.rand(M, K, device="cuda", generator=gen))
        w.copy_(torch.rand(N, K, device="cuda", generator=gen) * seed)
        graph.replay()
        torch.cuda.synchronize()
        ab = x.double() @ w.double().t()
        res = check_result(out, ab + bias.double(), K, alpha_ab=ab)
        assert res.ok, res.reason
