"""Packed plans on the GPU (plan.staging): x @ W^T at many rows is computed on a row-major
copy of W^T that kernels/pack.cu makes in the stream's workspace first; a misaligned
FFMA-bound product on aligned, zero-padded copies of the operands that close the float4
paths, C written element by element where its rows are not aligned. Checked against
float64 on fresh random inputs with the output poisoned (NaN) first, at ragged shapes (odd
rows, columns and a padded output; K and N not multiples of 4, leading dimensions past the
row and odd, bases one float off 16 bytes, every layout), with beta's term from C and from
a bias, beside a Stream-K product that keeps its own partial tiles in the same workspace
(deterministic: the fixed-order fix-up), through sgemmlab.matmul, the drop-in switch, and a
CUDA graph.
"""

from __future__ import annotations

import pytest

import sgemmlab
from sgemmlab import plan as plan_mod
from sgemmlab import product
from sgemmlab.bench.check import check_result
from sgemmlab.plan import describe, make_plan
from sgemmlab.runtime.launch import Copy

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

# (M, N, K): PACK_MIN_M rows or more and PACK_MIN_OUTPUTS outputs or more; K a multiple of 4
# (under PACK_MIN_K too, the gate lowered: a short K's edge k-tiles on the copy)
SHAPES = [(4096, 1024, 16), (4099, 1031, 36), (8191, 517, 4), (4097, 2048, 260)]


@pytest.fixture(autouse=True)
def _any_k(monkeypatch):
    monkeypatch.setattr(plan_mod, "PACK_MIN_K", 1)


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


def _launch(a, b, c, alpha, beta, deterministic=False, source=None, copies=None):
    """The plan for these operands, launched; `copies`: the operands it must copy ("B" for
    x @ W^T's packed B, by default)."""
    dev = c.get_device()
    g = describe((tuple(a.shape), a.stride()), (tuple(b.shape), b.stride()),
                 (tuple(c.shape), c.stride()))
    aligned = (a.data_ptr() | b.data_ptr() | c.data_ptr()) & 15 == 0
    plan = make_plan(g, dev, None, None, deterministic, aligned)
    assert plan.staging is not None, "the plan reads its operands where they are"
    if copies is None:
        assert plan.staging.copies == (Copy(1, g.K, g.N, 1, g.ldb, (g.N + 3) // 4 * 4),)
    else:
        assert "".join("AB"[cp.slot] for cp in plan.staging.copies) == copies
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



def _matrix(rows: int, cols: int, col_major: bool, how: str, gen):
    """rows x cols, fresh uniform values, laid out as `how` says: "contig"; "ld" (rows of
    its own odd leading dimension); "offset" (a base one float past 16 bytes)."""
    r, c = (cols, rows) if col_major else (rows, cols)
    if how == "ld":
        t = (torch.rand(r, c + 3, device="cuda", generator=gen) * 2 - 1)[:, :c]
    elif how == "offset":
        t = (torch.rand(r * c + 1, device="cuda", generator=gen) * 2 - 1)[1:].view(r, c)
    else:
        t = torch.rand(r, c, device="cuda", generator=gen) * 2 - 1
    return t.t() if col_major else t


# (M, N, K, layout, how A, B and C lie, the copies the plan makes)
MISALIGNED = [
    (67, 45, 129, "NN", "contig", "AB"),  # K and N odd: both copied, C element by element
    (131, 260, 1031, "NN", "contig", "A"),  # K odd
    (64, 131, 256, "NN", "contig", "B"),  # N odd
    (96, 128, 256, "NN", "ld", "AB"),  # leading dimensions K + 3, N + 3
    (96, 128, 256, "NN", "offset", "AB"),  # misaligned bases: A and B copied
    (67, 45, 129, "TN", "contig", "AB"),  # A column-major, M odd
    (67, 45, 129, "NT", "contig", "AB"),  # B column-major, K odd
    (61, 37, 97, "TT", "ld", "AB"),
    (1531, 1529, 1527, "NN", "contig", "AB"),  # FFMA-bound at the real gate
]


@pytest.mark.parametrize("keep", [True, False], ids=["kept", "row-major"])
@pytest.mark.parametrize("beta", [0.0, -0.5], ids=["beta0", "beta"])
@pytest.mark.parametrize("M, N, K, layout, how, copies", MISALIGNED,
                         ids=lambda v: str(v))
def test_a_misaligned_product_runs_on_aligned_copies(M, N, K, layout, how, copies, beta,
                                                     keep, monkeypatch):
    if layout == "NN" and not keep:
        pytest.skip("row-major operands are copied row-major either way")
    # column-major operands: kept column-major (padded columns) or transposed row-major
    monkeypatch.setattr(plan_mod, "STAGE_KEEP_A", keep)
    monkeypatch.setattr(plan_mod, "STAGE_KEEP_B", keep)
    if min(M, N, K) < 1024:  # small shapes: the gate lowered to them, and
        monkeypatch.setattr(plan_mod, "STAGE_SHARE", 1e30)
        # a rung that writes C element by element (what dispatch picks at large shapes;
        # at these, rung 18), Stream-K's atomic fix-up or data-parallel by the shape
        rung = plan_mod.registry.rung(24 if (M + N) % 2 else 25)
        monkeypatch.setattr(plan_mod, "choose_rung",
                            lambda g, *a: (rung, rung.default("NVIDIA H200")))
    gen = torch.Generator(device="cuda").manual_seed(M + 3 * N + 7 * K + len(how))
    a = _matrix(M, K, layout[0] == "T", how, gen)
    b = _matrix(K, N, layout[1] == "T", how, gen)
    c0 = _matrix(M, N, False, how, gen)
    c = c0.clone() if how == "contig" else c0
    want_c = c0.double().clone()
    if beta == 0:
        c.fill_(float("nan"))
    plan = _launch(a, b, c, 1.5, beta, copies=copies)
    pointers = (a.data_ptr() | b.data_ptr() | c.data_ptr()) & 15 == 0
    assert plan.staging.store4 == (pointers and c.stride(0) % 4 == 0)
    ab = 1.5 * (a.double() @ b.double())
    bc = beta * want_c
    res = check_result(c, ab + bc, K, alpha_ab=ab, beta_c=bc)
    assert res.ok, f"{M}x{N}x{K} {layout} {how} {plan.rung.label}: {res.reason}"


def test_matmul_copies_a_misaligned_product_and_leaves_the_operands_alone():
    gen = torch.Generator(device="cuda").manual_seed(5)
    a = torch.rand(1031, 1027, device="cuda", generator=gen) * 2 - 1
    b = torch.rand(1027, 1029, device="cuda", generator=gen) * 2 - 1
    a0, b0 = a.clone(), b.clone()
    got = sgemmlab.matmul(a, b)
    ab = a.double() @ b.double()
    assert check_result(got, ab, 1027, alpha_ab=ab).ok
    assert torch.equal(a, a0) and torch.equal(b, b0)
