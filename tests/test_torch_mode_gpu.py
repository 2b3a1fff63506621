"""The drop-in switch on the GPU (skipped without one): a model trained under
sgemmlab.torch_mode() matches the same model trained with torch's products (TF32 off), step
by step, eagerly and compiled; every product of the forward pass went through sgemmlab."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import sgemmlab  # noqa: E402

pytestmark = pytest.mark.gpu


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(96, 160), torch.nn.GELU(),
                               torch.nn.Linear(160, 33)).cuda()


def _losses(model, steps=12, compiled=False):
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(4, 37, 96, device="cuda", generator=gen)
    y = torch.randn(4, 37, 33, device="cuda", generator=gen)
    run = torch.compile(model, fullgraph=True) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(run(x), y)
        loss.backward()
        opt.step()
        out.append(float(loss))
    return out


@pytest.fixture(autouse=True)
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_training_under_the_switch_matches_torch(compiled):
    base = _model()
    want = _losses(copy.deepcopy(base), compiled=compiled)
    with sgemmlab.torch_mode() as mode:
        got = _losses(copy.deepcopy(base), compiled=compiled)
    steps = len(got)
    if compiled:  # Inductor's extern products: addmm/mm with out=
        assert sum(mode.served.values()) >= 3 * steps, mode.served
    else:  # per step: two addmm forward; backward two weight and one input gradient
        assert mode.served == {"addmm": 2 * steps, "mm": 3 * steps}, mode.served
    assert not mode.passed, mode.passed
    for a, b in zip(want, got):
        assert abs(a - b) <= 1e-5 * abs(a), (want, got)
    assert got[-1] < got[0]  # it trained


def _bound(a, b, *rest):
    """|error| allowed against float64: K ulps of the absolute product, plus the inputs'."""
    k = a.shape[-1]
    scale = (a.double().abs() @ b.double().abs())
    for r in rest:
        scale = scale + r.double().abs()
    return (k + 2) * 2.0 ** -23 * scale + 1e-30


SHAPES = [(1, 1, 1), (1, 4096, 4096), (2, 11, 7), (37, 61, 53), (128, 3072, 768), (5, 1, 97)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_served_aten_product_is_fp32_exact_at_ragged_shapes(shape):
    M, N, K = shape
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N)
    x = torch.randn(M, K, device="cuda", generator=g)
    w = torch.randn(N, K, device="cuda", generator=g)  # the weight layout: x @ w.T
    bias = torch.randn(N, device="cuda", generator=g)
    full = torch.randn(M, N, device="cuda", generator=g)
    xb = torch.randn(3, M, K, device="cuda", generator=g)
    wb = torch.randn(3, K, N, device="cuda", generator=g)
    nan = float("nan")
    with sgemmlab.torch_mode() as mode:
        got = {
            "linear": torch.nn.functional.linear(x, w, bias),
            "mm": x @ w.t(),
            "addmm": torch.addmm(full, x, w.t(), beta=0.5, alpha=-2.0),
            "bmm": torch.bmm(xb, wb),
            "baddbmm": torch.baddbmm(bias, xb, wb, alpha=3.0),
            "mm.out": torch.mm(x, w.t(), out=torch.full((M, N), nan, device="cuda")),
            "addmm.out": torch.addmm(bias, x, w.t(),
                                     out=torch.full((M, N), nan, device="cuda")),
            "bmm.out": torch.bmm(xb, wb, out=torch.full((3, M, N), nan, device="cuda")),
        }
    assert not mode.passed, mode.passed
    assert set(mode.served) == {"addmm", "mm", "bmm", "baddbmm", "mm.out", "addmm.out",
                                "bmm.out"}, mode.served
    d = {k: v.double() for k, v in (("x", x), ("w", w), ("bias", bias), ("full", full),
                                    ("xb", xb), ("wb", wb))}
    want = {
        "linear": d["x"] @ d["w"].T + d["bias"],
        "mm": d["x"] @ d["w"].T,
        "addmm": 0.5 * d["full"] - 2.0 * (d["x"] @ d["w"].T),
        "bmm": d["xb"] @ d["wb"],
        "baddbmm": d["bias"] + 3.0 * (d["xb"] @ d["wb"]),
        "mm.out": d["x"] @ d["w"].T,
        "addmm.out": d["x"] @ d["w"].T + d["bias"],
        "bmm.out": d["xb"] @ d["wb"],
    }
    bounds = {"linear": _bound(x, w.t(), bias), "mm": _bound(x, w.t()),
              "addmm": 2 * _bound(x, w.t(), full), "bmm": _bound(xb, wb),
              "baddbmm": 3 * _bound(xb, wb, bias), "mm.out": _bound(x, w.t()),
              "addmm.out": _bound(x, w.t(), bias), "bmm.out": _bound(xb, wb)}
    for name, out in got.items():
        assert not out.isnan().any(), name
        err = (out.double() - want[name]).abs()
        assert (err <= bounds[name]).all(), (name, float(err.max()))


def test_what_the_switch_passes_runs_torchs_own_kernels():
    a = torch.randn(64, 32, device="cuda")
    b = torch.randn(32, 16, device="cuda")
    with sgemmlab.torch_mode() as mode:
        h = a.half() @ b.half()  # another dtype
        with torch.autocast("cuda", dtype=torch.bfloat16):
            ab = a @ b  # autocast's bfloat16 product
        z = torch.addmm(torch.ones(16, device="cuda"), a, b, alpha=0)  # alpha == 0
        r = torch.relu(a)  # not a product at all
    assert not mode.served and mode.passed["mm"] == 2 and mode.passed["addmm"] == 1
    assert h.dtype == torch.float16 and ab.dtype == torch.bfloat16
    torch.testing.assert_close(z, torch.ones(64, 16, device="cuda"))
    torch.testing.assert_close(r, torch.relu(a))


def test_a_cuda_graph_captures_the_switchs_kernels():
    lin = torch.nn.Linear(256, 96).cuda()
    x = torch.randn(8, 256, device="cuda")
    with sgemmlab.torch_mode() as mode, torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            lin(x)  # the warm-up plans the shape on the capturing stream
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = lin(x)
        x.copy_(torch.randn(8, 256, device="cuda"))
        graph.replay()
    torch.cuda.synchronize()
    want = x.double() @ lin.weight.double().T + lin.bias.double()  # (a float64 product:
    # torch's kernel, outside the mode)
    assert mode.served["addmm"] == 2 and not mode.passed, (mode.served, mode.passed)
    assert (y.double() - want).abs().max() < 1e-4


@pytest.mark.parametrize("bias", [(), (1,), (67,), (1, 67), (13, 1), (13, 67), (3, 1, 67),
                                  (3, 13, 1)], ids=str)
def test_every_input_torch_broadcasts_is_spread_by_the_fill_kernel(bias):
    g = torch.Generator(device="cuda").manual_seed(len(bias) * 10 + sum(bias))
    x = torch.randn(bias, device="cuda", generator=g)
    a, b = (torch.randn(3, 13, 29, device="cuda", generator=g),
            torch.randn(3, 29, 67, device="cuda", generator=g))
    with sgemmlab.torch_mode() as mode:
        got = torch.baddbmm(x, a, b, beta=-0.5, alpha=2.0)
        got2 = torch.addmm(x, a[0], b[0], beta=-0.5, alpha=2.0) if len(bias) < 3 else None
    assert not mode.passed, mode.passed
    want = -0.5 * x.double() + 2.0 * (a.double() @ b.double())
    bound = 2 * _bound(a, b, x.expand(3, 13, 67))
    assert ((got.double() - want).abs() <= bound).all()
    if got2 is not None:
        assert ((got2.double() - want[0]).abs() <= bound[0]).all()


def test_compiled_cuda_graphs_run_products_that_need_a_workspace():
    """torch.compile's "reduce-overhead" (CUDA graph trees) on products whose launches use
    a workspace (Stream-K's counters, split-K's parts), with the workspaces freed first: the
    switch allocates them in the warm-up, where torch checks that nothing it did not hand
    out stays alive in the graphs' memory pool. The workspace is sgemmlab's own memory,
    never from that pool (a tree once refused one: "tensor(s) in the cudagraph pool not
    tracked as outputs")."""
    torch.manual_seed(1)
    lin = torch.nn.Linear(4096, 4096, bias=False).cuda()
    f = torch.compile(lambda x: lin(x), mode="reduce-overhead")
    sgemmlab.free_workspaces()
    with sgemmlab.torch_mode() as mode, torch.no_grad():
        for rows in (1, 8, 32, 128):
            for _ in range(3):
                x = torch.randn(rows, 4096, device="cuda")
                y = f(x).clone()
                want = x.double() @ lin.weight.double().T
                assert (y.double() - want).abs().max() < 1e-3, rows
    assert sum(mode.served.values()) >= 4, mode.served
    assert sgemmlab.free_workspaces() > 0  # at least one of them used a workspace


@pytest.mark.parametrize("precision", ["tf32x3", "fp32_emulated"])
@pytest.mark.parametrize("rows, n, k", [(1, 7, 5), (300, 260, 129), (4096, 384, 1024),
                                        (4096, 4096, 4096)], ids=lambda v: str(v))
def test_a_linear_at_an_accurate_tensor_precision_is_fp32_accurate(rows, n, k, precision):
    """F.linear under torch_mode(precision="tf32x3" or "fp32_emulated") (the bias read by rung
    20's own epilogue where dispatch runs the product there; rung 26 takes it as C): the
    output within FP32's bound of float64, and the gradients too. At 4096^3 the forward runs
    on the precision's tensor-core rung (asserted of dispatch first)."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the tensor-core rungs need compute capability 9.0")
    if rows == 4096 and n == 4096:
        from sgemmlab import dispatch, registry
        from sgemmlab.runtime.device import gpu_info

        info = gpu_info()
        c = dispatch.choose(rows, n, k, gpu_name=info.name, sm_count=info.sm_count,
                            trans_b=True, precision=precision, arch=info.arch)
        assert registry.rung(c.rung).precision == precision, c.reason
    g = torch.Generator(device="cuda").manual_seed(rows + n + k)
    x = torch.randn(rows, k, device="cuda", generator=g, requires_grad=True)
    w = torch.randn(n, k, device="cuda", generator=g, requires_grad=True)
    bias = torch.randn(n, device="cuda", generator=g, requires_grad=True)
    with sgemmlab.torch_mode(precision=precision) as mode:
        y = torch.nn.functional.linear(x, w, bias)
        y.backward(torch.ones_like(y))
    assert mode.served["addmm"] >= 1 and not mode.passed, (mode.served, mode.passed)
    want = x.double() @ w.double().T + bias.double()
    assert ((y.double() - want).abs() <= 2 * _bound(x, w.T, bias)).all()
    gx = torch.ones(rows, n, device="cuda", dtype=torch.float64) @ w.double()
    assert ((x.grad.double() - gx).abs() <= 2 * _bound(torch.ones(rows, n, device="cuda"),
                                                         w)).all()
    assert torch.allclose(bias.grad.double(), torch.full((n,), float(rows),
                                                         dtype=torch.float64, device="cuda"))
