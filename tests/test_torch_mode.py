"""The drop-in switch (sgemmlab.torch_mode) without a GPU: the routing, checked on CPU
tensors by letting the mode take device type "cpu", where torch.ops.sgemmlab.matmul's CPU
kernel is torch.matmul — so every result must equal torch's, and the counters say which
calls went through the operator. What must pass through untouched does, values included.
The GPU test (tests/test_torch_mode_gpu.py) trains a model both ways on the H200."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import sgemmlab  # noqa: E402
from sgemmlab.dropin import torch_mode  # noqa: E402

F = torch.nn.functional


def cpu_mode(**kw):
    return torch_mode(devices=("cpu",), **kw)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(7)


def rand(*shape, gen, dtype=torch.float32):
    return torch.randn(*shape, generator=gen, dtype=dtype)


CASES = {  # name -> (call, the counter it lands in)
    "at": (lambda a, b, x, y, w: a @ b, "__matmul__"),
    "matmul": (lambda a, b, x, y, w: torch.matmul(a, b), "matmul"),
    "Tensor.matmul": (lambda a, b, x, y, w: a.matmul(b), "matmul"),
    "mm": (lambda a, b, x, y, w: torch.mm(a, b), "mm"),
    "Tensor.mm": (lambda a, b, x, y, w: a.mm(b), "mm"),
    "bmm": (lambda a, b, x, y, w: torch.bmm(x, y), "bmm"),
    "batch @ matrix": (lambda a, b, x, y, w: torch.matmul(x, b), "matmul"),
    "addmm": (lambda a, b, x, y, w: torch.addmm(w, a, b, beta=0.5, alpha=-2.0), "addmm"),
    "linear": (lambda a, b, x, y, w: F.linear(x, b.t(), w), "linear"),
}


@pytest.mark.parametrize("name", CASES)
def test_each_product_goes_through_the_operator_and_equals_torch(name, gen):
    call, counter = CASES[name]
    args = (rand(5, 7, gen=gen), rand(7, 3, gen=gen), rand(2, 5, 7, gen=gen),
            rand(2, 7, 3, gen=gen), rand(3, gen=gen))
    want = call(*args)
    with cpu_mode() as mode:
        got = call(*args)
    assert sum(mode.served.values()) == 1 and mode.passed == 0, (mode.served, mode.passed)
    assert counter in mode.served or name == "at", mode.served
    torch.testing.assert_close(got, want)


PASS_THROUGH = {
    "float64": lambda g: (rand(4, 5, gen=g, dtype=torch.float64) @
                          rand(5, 6, gen=g, dtype=torch.float64)),
    "vector": lambda g: rand(4, 5, gen=g) @ rand(5, gen=g),
    "4-D": lambda g: rand(2, 2, 4, 5, gen=g) @ rand(2, 2, 5, 3, gen=g),
    "out=": lambda g: torch.mm(rand(4, 5, gen=g), rand(5, 3, gen=g), out=torch.empty(4, 3)),
    "mixed dtypes": lambda g: torch.addmm(rand(3, gen=g, dtype=torch.float64),
                                          rand(4, 5, gen=g).double(), rand(5, 3, gen=g).double()),
}


@pytest.mark.parametrize("name", PASS_THROUGH)
def test_what_sgemmlab_does_not_serve_passes_to_torch_unchanged(name):
    want = PASS_THROUGH[name](torch.Generator().manual_seed(1))
    with cpu_mode() as mode:
        got = PASS_THROUGH[name](torch.Generator().manual_seed(1))
    assert not mode.served and mode.passed >= 1
    torch.testing.assert_close(got, want)


def test_cuda_only_by_default_so_cpu_tensors_pass():
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    with torch_mode() as mode:
        a @ b
    assert not mode.served and mode.passed == 1


def test_a_wrong_shape_still_gets_torchs_own_error(gen):
    with cpu_mode(), pytest.raises(RuntimeError):
        rand(4, 5, gen=gen) @ rand(6, 3, gen=gen)


def test_addmm_with_beta_zero_ignores_nan_in_input(gen):
    a, b = rand(4, 5, gen=gen), rand(5, 3, gen=gen)
    with cpu_mode():
        out = torch.addmm(torch.full((4, 3), float("nan")), a, b, beta=0.0)
    torch.testing.assert_close(out, a @ b)


def test_an_unknown_precision_is_refused_when_the_mode_is_made():
    with pytest.raises(ValueError, match="precision"):
        torch_mode(precision="fp16")


def test_training_step_under_the_mode_matches_torch_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 5, 8)
    model(x).square().mean().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with cpu_mode() as mode:
        model(x).square().mean().backward()
    assert mode.served["linear"] == 2
    for p, g in zip(model.parameters(), want):
        torch.testing.assert_close(p.grad, g)


def test_torch_compile_keeps_the_operator_in_one_graph():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(6, 8)
    want = model(x)
    with cpu_mode():
        got = torch.compile(model, backend=backend, fullgraph=True)(x)
    torch.testing.assert_close(got, want)
    targets = [n.target for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.sgemmlab.matmul.default) == 2, targets


def test_the_switch_is_exported():
    assert sgemmlab.torch_mode is torch_mode
