"""The drop-in switch (sgemmlab.torch_mode) without a GPU: the routing at torch's
dispatcher, checked on CPU tensors. The `cpu_switch` fixture registers the switch's aten
kernels on the CPU key instead of CUDA and replaces sgemmlab's kernels by a float64
stand-in that records each call, so every test sees which calls the switch served, with
what options, and that the result equals torch's — and that everything it must not serve
reaches torch's own kernel with torch's own result or error. The GPU tests
(tests/test_torch_mode_gpu.py) run the real kernels on the H200."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

import sgemmlab  # noqa: E402
from sgemmlab import dropin  # noqa: E402
from sgemmlab.dropin import torch_mode  # noqa: E402

F = torch.nn.functional


def product64(a, b):
    """a @ b in float64 without any aten product (which the switch would see)."""
    return (a.double().unsqueeze(-1) * b.double().unsqueeze(-3)).sum(-2)


class StandIn:
    """sgemmlab's kernels on the CPU: float64 products, each call recorded."""

    def __init__(self):
        self.calls: list[tuple] = []

    def product(self, a, b, precision, det):
        self.calls.append(("product", tuple(a.shape), tuple(b.shape), precision, det))
        return product64(a, b).float()

    def plan_for(self, a, b, c, opts, fresh=False):
        if not fresh and dropin._overlap(c, a, b):  # as the real one
            return None
        # a plan whose kernel reads beta's term from C alone (x is filled into the output;
        # the epilogue's source: tests/test_torch_mode_native.py and the GPU tests)
        return types.SimpleNamespace(opts=opts, takes_source=False)

    def run(self, plan, a, b, c, alpha, beta, source=None):
        assert source is None
        self.calls.append(("update", tuple(a.shape), tuple(b.shape), *plan.opts, alpha, beta))
        r = alpha * product64(a, b)
        if beta != 0:
            r = r + beta * c.double()
        c.copy_(r)


@pytest.fixture
def cpu_switch(monkeypatch):
    torch_mode.disable_all()
    s = StandIn()
    monkeypatch.setattr(dropin, "KEY", "CPU")
    monkeypatch.setattr(dropin, "NATIVE", False)  # the Python kernels (the native ones:
    monkeypatch.setattr(dropin, "_product", s.product)  # tests/test_torch_mode_native.py)
    monkeypatch.setattr(dropin, "_plan_for", s.plan_for)
    monkeypatch.setattr(dropin, "_run", s.run)
    monkeypatch.setattr(dropin, "_fill",
                        lambda target, x, shape, strides=None: target.copy_(x.expand(shape)))
    yield s
    torch_mode.disable_all()


pytestmark = pytest.mark.usefixtures("float32_highest")


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(7)


def rand(*shape, gen, dtype=torch.float32):
    return torch.randn(shape, generator=gen, dtype=dtype)


def close(got, want):
    torch.testing.assert_close(got, want, rtol=2e-6, atol=2e-6)


CASES = {  # name -> (call, the aten op it must land in)
    "at": (lambda a, b, x, y, w: a @ b, "mm"),
    "matmul": (lambda a, b, x, y, w: torch.matmul(a, b), "mm"),
    "mm": (lambda a, b, x, y, w: torch.mm(a, b), "mm"),
    "Tensor.mm": (lambda a, b, x, y, w: a.mm(b), "mm"),
    "bmm": (lambda a, b, x, y, w: torch.bmm(x, y), "bmm"),
    "batch @ batch": (lambda a, b, x, y, w: x @ y, "bmm"),
    "batch @ matrix": (lambda a, b, x, y, w: torch.matmul(x, b), "mm"),
    "addmm": (lambda a, b, x, y, w: torch.addmm(w, a, b, beta=0.5, alpha=-2.0), "addmm"),
    "linear": (lambda a, b, x, y, w: F.linear(x, b.t(), w), "addmm"),
    "linear 2-D": (lambda a, b, x, y, w: F.linear(a, b.t(), w), "addmm"),
    "linear, no bias": (lambda a, b, x, y, w: F.linear(a, b.t()), "mm"),
    "baddbmm": (lambda a, b, x, y, w: torch.baddbmm(w, x, y, alpha=3), "baddbmm"),
    "mm out=": (lambda a, b, x, y, w: torch.mm(a, b, out=torch.empty(5, 3)), "mm.out"),
    "bmm out=": (lambda a, b, x, y, w: torch.bmm(x, y, out=torch.empty(2, 5, 3)), "bmm.out"),
    "addmm out=": (lambda a, b, x, y, w: torch.addmm(w, a, b, out=torch.empty(5, 3)),
                   "addmm.out"),
}


def operands(gen):
    return (rand(5, 7, gen=gen), rand(7, 3, gen=gen), rand(2, 5, 7, gen=gen),
            rand(2, 7, 3, gen=gen), rand(3, gen=gen))


@pytest.mark.parametrize("name", CASES)
def test_each_product_is_served_at_its_aten_op_and_equals_torch(name, gen, cpu_switch):
    call, op = CASES[name]
    args = operands(gen)
    want = call(*args)
    with torch_mode() as mode:
        got = call(*args)
    assert dict(mode.served) == {op: 1} and not mode.passed, (mode.served, mode.passed)
    assert len(cpu_switch.calls) == 1
    close(got, want)


BIASES = {"row vector": (3,), "1 x N": (1, 3), "M x N": (5, 3), "M x 1": (5, 1),
          "scalar": ()}


@pytest.mark.parametrize("bias", BIASES)
def test_addmm_takes_every_input_torch_broadcasts(bias, gen, cpu_switch):
    x, a, b = rand(*BIASES[bias], gen=gen), rand(5, 7, gen=gen), rand(7, 3, gen=gen)
    want = torch.addmm(x, a, b, beta=-1.5, alpha=0.25)
    with torch_mode() as mode:
        got = torch.addmm(x, a, b, beta=-1.5, alpha=0.25)
    assert mode.served["addmm"] == 1
    assert cpu_switch.calls[0][-2:] == (0.25, -1.5)
    close(got, want)


def test_an_input_torch_refuses_gets_torchs_own_error(gen, cpu_switch):
    x, a, b = rand(2, 3, 4, gen=gen), rand(3, 5, gen=gen), rand(5, 4, gen=gen)
    with pytest.raises(RuntimeError) as want:
        torch.addmm(x, a, b)
    with torch_mode() as mode, pytest.raises(RuntimeError) as got:
        torch.addmm(x, a, b)
    assert str(got.value) == str(want.value)
    assert mode.passed["addmm"] == 1 and not mode.served and not cpu_switch.calls


def test_linear_with_no_input_features_returns_the_bias(cpu_switch):
    x, w, bias = torch.empty(4, 0), torch.empty(3, 0), torch.arange(3.0)
    with torch_mode():
        got = F.linear(x, w, bias)
    close(got, bias.expand(4, 3))


def test_alpha_zero_goes_to_torch_which_defines_nan_times_zero(gen, cpu_switch):
    a, b, x = rand(4, 5, gen=gen), rand(5, 3, gen=gen), rand(3, gen=gen)
    a[0, 0] = float("nan")
    want = torch.addmm(x, a, b, alpha=0)
    with torch_mode() as mode:
        got = torch.addmm(x, a, b, alpha=0)
    assert mode.passed["addmm"] == 1 and not mode.served
    torch.testing.assert_close(got, want, equal_nan=True)


def test_beta_zero_ignores_nan_in_the_input(gen, cpu_switch):
    a, b = rand(4, 5, gen=gen), rand(5, 3, gen=gen)
    with torch_mode() as mode:
        out = torch.addmm(torch.full((4, 3), float("nan")), a, b, beta=0)
    assert mode.served["addmm"] == 1
    close(out, a @ b)


PASS_THROUGH = {
    "float64": lambda g: (rand(4, 5, gen=g, dtype=torch.float64) @
                          rand(5, 6, gen=g, dtype=torch.float64)),
    "mixed dtypes": lambda g: torch.addmm(rand(3, gen=g, dtype=torch.float64),
                                          rand(4, 5, gen=g).double(), rand(5, 3, gen=g).double()),
    "out= to resize": lambda g: torch.mm(rand(4, 5, gen=g), rand(5, 3, gen=g),
                                         out=torch.empty(0)),
    "out= is an operand": lambda g: (lambda a: torch.mm(a, torch.eye(4), out=a))(
        rand(4, 4, gen=g)),
    "complex alpha": lambda g: torch.addmm(rand(3, gen=g, dtype=torch.complex64),
                                           rand(4, 5, gen=g, dtype=torch.complex64),
                                           rand(5, 3, gen=g, dtype=torch.complex64), alpha=1j),
}


@pytest.mark.parametrize("name", PASS_THROUGH)
def test_what_sgemmlab_does_not_serve_reaches_torch_unchanged(name, cpu_switch):
    want = PASS_THROUGH[name](torch.Generator().manual_seed(1))
    with torch_mode() as mode:
        got = PASS_THROUGH[name](torch.Generator().manual_seed(1))
    assert not mode.served and sum(mode.passed.values()) >= 1, (mode.served, mode.passed)
    assert not cpu_switch.calls
    torch.testing.assert_close(got, want)


def test_ops_that_are_not_products_never_reach_the_switch(gen, cpu_switch):
    x = rand(4, 5, gen=gen)
    with torch_mode() as mode:
        y = torch.relu(x) + x.sum()
        s = torch.sparse_coo_tensor([[0, 1], [1, 2]], [1.0, 2.0], (2, 3)) @ rand(3, 2, gen=gen)
    assert not mode.served and not mode.passed and not cpu_switch.calls
    close(y, torch.relu(x) + x.sum())
    assert s.shape == (2, 2)


def test_a_wrong_shape_gets_torchs_own_error(gen, cpu_switch):
    a, b = rand(4, 5, gen=gen), rand(6, 3, gen=gen)
    with pytest.raises(RuntimeError) as want:
        a @ b
    with torch_mode(), pytest.raises(RuntimeError) as got:
        a @ b
    assert str(got.value) == str(want.value)


def test_precision_follows_torch_unless_the_mode_names_one(gen, cpu_switch):
    a, b = rand(4, 5, gen=gen), rand(5, 3, gen=gen)
    with torch_mode() as mode:
        a @ b
        torch.set_float32_matmul_precision("high")  # TF32 accepted: cuBLAS's runs it
        a @ b
        torch.set_float32_matmul_precision("highest")
    assert mode.served["mm"] == 1 and mode.passed["mm"] == 1
    assert cpu_switch.calls[0][3:] == ("ieee", False)
    torch.set_float32_matmul_precision("high")
    with torch_mode(precision="tf32x3") as mode:
        a @ b
    assert mode.served["mm"] == 1 and cpu_switch.calls[1][3] == "tf32x3"


def test_deterministic_follows_torch_too(gen, cpu_switch):
    a, b = rand(4, 5, gen=gen), rand(5, 3, gen=gen)
    torch.use_deterministic_algorithms(True)
    try:
        with torch_mode():
            a @ b
    finally:
        torch.use_deterministic_algorithms(False)
    with torch_mode(deterministic=True):
        a @ b
    assert [c[4] for c in cpu_switch.calls] == [True, True]


def test_options_are_checked_when_the_mode_is_made():
    with pytest.raises(ValueError, match="precision"):
        torch_mode(precision="fp16")
    with pytest.raises(ValueError, match="tf32"):
        torch_mode(precision="tf32")
    with pytest.raises(TypeError, match="deterministic"):
        torch_mode(deterministic=1)


def test_modes_nest_and_torchs_kernels_come_back(gen, cpu_switch):
    a, b = rand(4, 5, gen=gen), rand(5, 3, gen=gen)
    outer = torch_mode()
    with outer:
        with torch_mode(precision="tf32x3") as inner:
            a @ b
        a @ b
    assert inner.served["mm"] == 1 and outer.served["mm"] == 1
    assert [c[3] for c in cpu_switch.calls] == ["tf32x3", "ieee"]
    assert torch_mode.active() is None
    a @ b  # torch's kernel again: the stand-in sees nothing
    assert len(cpu_switch.calls) == 2


def test_the_global_switch_stays_on_until_disabled(gen, cpu_switch):
    a, b = rand(4, 5, gen=gen), rand(5, 3, gen=gen)
    mode = torch_mode().enable()
    a @ b
    assert torch_mode.active() is mode
    with pytest.raises(RuntimeError, match="already enabled"):
        mode.enable()
    mode.disable()
    a @ b
    assert mode.served["mm"] == 1 and len(cpu_switch.calls) == 1
    with pytest.raises(RuntimeError, match="not enabled"):
        mode.disable()


def test_training_step_under_the_switch_matches_torch_gradients(cpu_switch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 5, 8)
    model(x).square().mean().backward()
    want = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with torch_mode() as mode:
        model(x).square().mean().backward()
    # forward: two addmm; backward: each layer's weight gradient, and the second layer's
    # input gradient (the first's input needs none)
    assert mode.served == {"addmm": 2, "mm": 3}, mode.served
    for p, g in zip(model.parameters(), want):
        close(p.grad, g)


def test_torch_compile_runs_its_products_through_the_switch(cpu_switch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(6, 8)
    want = model(x)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    with torch_mode() as mode:
        got = compiled(x)
    close(got, want)
    assert sum(mode.served.values()) == 2, mode.served


def test_the_switch_is_exported():
    assert sgemmlab.torch_mode is torch_mode


def test_a_signature_served_once_is_served_again_from_its_recipe(gen, cpu_switch):
    a, b, bias = rand(5, 7, gen=gen), rand(7, 3, gen=gen), rand(3, gen=gen)
    nan = torch.full((5, 3), float("nan"))
    with torch_mode() as mode:
        first = [F.linear(a, b.t(), bias), torch.addmm(nan, a, b, beta=0)]
        again = [F.linear(a, b.t(), bias), torch.addmm(nan, a, b, beta=0)]
        assert dropin._RECIPES  # the second round took the recipes
        neg = F.linear(a, b.t(), bias._neg_view())
    # (a negative view reaches the backend resolved by torch's Negative fallback, or is
    # passed to torch: either way its value is read as torch reads it)
    assert mode.served["addmm"] + mode.passed["addmm"] == 5 and mode.served["addmm"] >= 4
    for f, g in zip(first, again):
        close(g, f)
    close(again[0], product64(a, b).float() + bias)
    close(again[1], product64(a, b).float())
    close(neg, product64(a, b).float() - bias)


@pytest.mark.parametrize("shape, x, want", [
    ((4, 3), (3,), (0, 0, 1)),
    ((4, 3), (1, 3), (0, 0, 1)),
    ((4, 3), (4, 1), (0, 1, 0)),
    ((4, 3), (), (0, 0, 0)),
    ((4, 3), (4, 3), (0, 3, 1)),
    ((2, 4, 3), (4, 3), (0, 3, 1)),
    ((2, 4, 3), (2, 1, 3), (3, 0, 1)),
    ((2, 4, 3), (2, 4, 1), (4, 1, 0)),
])
def test_the_fill_kernel_reads_the_input_with_torchs_broadcast_strides(shape, x, want):
    """kernels/broadcast.cu reads out[z][i][j] = x[z sz + i si + j sj]: with the strides
    the switch computes, that is torch's expand, element by element."""
    src = torch.arange(float(max(torch.Size(x).numel(), 1))).reshape(x)
    assert dropin._broadcast_strides(src, shape) == want
    full = (1,) * (3 - len(shape)) + shape
    z, i, j = torch.meshgrid(*(torch.arange(n) for n in full), indexing="ij")
    got = src.reshape(-1)[z * want[0] + i * want[1] + j * want[2]].reshape(shape)
    assert torch.equal(got, src.expand(shape))


def test_the_switchs_caches_are_forgotten_with_the_plans(gen, cpu_switch):
    """A recipe holds a plan, and a refusal stands for one: a new dispatch table (which
    clears the plans) must not leave them stale."""
    a, b, bias = rand(5, 7, gen=gen), rand(7, 3, gen=gen), rand(3, gen=gen)
    with torch_mode():
        F.linear(a, b.t(), bias)
    dropin._REFUSED_KEYS.add(("a refused key",))
    assert dropin._RECIPES
    sgemmlab.api.clear_caches()
    assert not dropin._RECIPES and not dropin._REFUSED_KEYS


def test_a_torch_without_cuda_kernels_makes_the_switch_a_no_op(gen):
    """CPU builds of torch have no CUDA kernels to replace: the switch registers nothing,
    and products run on torch's own kernels as before (nothing served, nothing passed)."""
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::mm", "CUDA"):
        pytest.skip("this torch has CUDA kernels")
    a, b = rand(4, 5, gen=gen), rand(5, 3, gen=gen)
    with torch_mode() as mode:
        got = a @ b
    assert not mode.served and not mode.passed
    torch.testing.assert_close(got, a @ b)
