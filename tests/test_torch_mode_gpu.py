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
    if not compiled:
        assert mode.served["linear"] == 2 * len(got) and mode.passed == 0
    for a, b in zip(want, got):
        assert abs(a - b) <= 1e-5 * abs(a), (want, got)
    assert got[-1] < got[0]  # it trained


def test_products_on_cuda_go_through_sgemmlab_and_are_exact_fp32():
    a = torch.randn(300, 200, device="cuda")
    b = torch.randn(200, 100, device="cuda")
    ref = (a.double() @ b.double()).float()
    with sgemmlab.torch_mode() as mode:
        c = a @ b
        d = torch.addmm(torch.zeros(100, device="cuda"), a, b)
        e = torch.bmm(a.expand(3, 300, 200), b.expand(3, 200, 100))
    assert sum(mode.served.values()) == 3
    for out in (c, d, e[1]):
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-4)
