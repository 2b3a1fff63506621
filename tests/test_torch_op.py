"""torch.ops.sgemmlab.matmul on the CPU: registration, the fake implementation, autograd,
torch.library.opcheck and torch.compile(fullgraph=True) tracing.

On CPU tensors the op computes with torch.matmul (its documented fallback), so everything
around the kernels — schema, fake tensors, the autograd formula and its batch reductions,
tracing — is checked here without a GPU; tests/test_api_gpu.py repeats the checks on CUDA
tensors, where the kernels run. Skipped where torch is not installed (CI).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import sgemmlab  # noqa: E402
import sgemmlab.torch_ops  # noqa: E402,F401  (registers the op)
from sgemmlab import OperandError  # noqa: E402

op = torch.ops.sgemmlab.matmul

# (a shape, b shape): plain, batched, and each kind of broadcast
SHAPES = [((5, 3), (3, 4)), ((2, 5, 3), (3, 4)), ((5, 3), (2, 3, 4)), ((2, 5, 3), (2, 3, 4)),
          ((1, 5, 3), (2, 3, 4)), ((2, 5, 3), (1, 3, 4))]


def _ids(shapes):
    return "@".join("x".join(map(str, s)) for s in shapes)


def _operands(a_shape, b_shape, transposed=False, requires_grad=False, seed=0):
    g = torch.Generator().manual_seed(seed)

    def make(shape):
        if transposed:  # a column-major view: the op must take it as it lies
            t = torch.rand(*shape[:-2], shape[-1], shape[-2], generator=g).mT
        else:
            t = torch.rand(*shape, generator=g)
        return t.requires_grad_(requires_grad)

    return make(a_shape), make(b_shape)


def test_the_op_is_registered_with_its_schema():
    schema = str(op.default._schema)
    assert schema.startswith("sgemmlab::matmul(Tensor a, Tensor b, bool deterministic=False, "
                             "str precision=\"ieee\")")
    assert "-> Tensor" in schema


@pytest.mark.parametrize("transposed", [False, True], ids=["rowmajor", "transposed"])
@pytest.mark.parametrize("requires_grad", [False, True], ids=["nograd", "grad"])
@pytest.mark.parametrize("shapes", SHAPES, ids=_ids)
def test_opcheck(shapes, requires_grad, transposed):
    a, b = _operands(*shapes, transposed=transposed, requires_grad=requires_grad)
    torch.library.opcheck(op.default, (a, b), {"deterministic": False})


@pytest.mark.parametrize("shapes", SHAPES, ids=_ids)
def test_the_fake_implementation_gives_the_shape_on_meta_tensors(shapes):
    a = torch.empty(*shapes[0], device="meta")
    b = torch.empty(*shapes[1], device="meta")
    c = op(a, b)
    assert c.device.type == "meta" and c.dtype == torch.float32
    assert tuple(c.shape) == torch.matmul(torch.empty(*shapes[0]), torch.empty(*shapes[1])).shape
    assert c.is_contiguous()


@pytest.mark.parametrize("a, b, error, match", [
    ((5, 3), (4, 2), ValueError, r"inner dimensions differ: a is 5x3, b is 4x2"),
    ((2, 5, 3), (3, 3, 2), ValueError, r"batch sizes differ: a has 2, b has 3"),
    ((3,), (3, 2), OperandError, r"^a: expected a 2-D matrix or a 3-D batch"),
    ((2, 2, 5, 3), (3, 2), OperandError, r"^a: expected a 2-D matrix or a 3-D batch"),
])
def test_bad_shapes_are_refused_while_tracing(a, b, error, match):
    with pytest.raises(error, match=match):
        op(torch.empty(*a, device="meta"), torch.empty(*b, device="meta"))
    with pytest.raises(error, match=match):  # and on real CPU tensors
        op(torch.ones(*a), torch.ones(*b))


def test_other_dtypes_are_refused():
    with pytest.raises(OperandError, match=r"^b: dtype is torch.float64, sgemmlab computes "
                                           r"float32 only"):
        op(torch.ones(2, 2), torch.ones(2, 2, dtype=torch.float64))
    with pytest.raises(OperandError, match=r"^a: dtype is torch.bfloat16"):
        op(torch.ones(2, 2, dtype=torch.bfloat16, device="meta"), torch.ones(2, 2,
                                                                           device="meta"))


def test_the_cpu_fallback_is_torch_matmul():
    a, b = _operands((2, 5, 3), (3, 4))
    assert torch.equal(op(a, b), torch.matmul(a, b))


@pytest.mark.parametrize("transposed", [False, True], ids=["rowmajor", "transposed"])
@pytest.mark.parametrize("shapes", SHAPES, ids=_ids)
def test_gradients_match_torch(shapes, transposed):
    a, b = _operands(*shapes, transposed=transposed, requires_grad=True, seed=1)
    g = torch.rand(torch.matmul(a, b).shape, generator=torch.Generator().manual_seed(2))
    ga, gb = torch.autograd.grad(op(a, b), (a, b), g)
    ra, rb = torch.autograd.grad(torch.matmul(a, b), (a, b), g)
    assert ga.shape == a.shape and gb.shape == b.shape
    torch.testing.assert_close(ga, ra)
    torch.testing.assert_close(gb, rb)


def test_only_the_gradients_asked_for_are_computed(monkeypatch):
    a, b = _operands((5, 3), (3, 4))
    a.requires_grad_()
    calls = []
    real = sgemmlab.torch_ops.matmul

    def counting(*args):
        calls.append(tuple(t.shape for t in args[:2]))
        return real(*args)

    monkeypatch.setattr(sgemmlab.torch_ops, "matmul", counting)
    (ga,) = torch.autograd.grad(op(a, b).sum(), (a,))
    assert calls == [((5, 4), (4, 3))]  # grad_a = g @ b^T only
    torch.testing.assert_close(ga, torch.ones(5, 4) @ b.T)


def test_second_derivatives():
    """The backward is made of the op too, so it is differentiable in turn."""
    a, b = _operands((4, 3), (3, 2), requires_grad=True, seed=3)
    (ga,) = torch.autograd.grad(op(a, b).pow(2).sum(), (a,), create_graph=True)
    (gb,) = torch.autograd.grad(ga.sum(), (b,))
    ra, = torch.autograd.grad(torch.matmul(a, b).pow(2).sum(), (a,), create_graph=True)
    rb, = torch.autograd.grad(ra.sum(), (b,))
    torch.testing.assert_close(ga, ra)
    torch.testing.assert_close(gb, rb)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph_with_the_op_and_with_sgemmlab_matmul(dynamic):
    torch._dynamo.reset()

    def f(x, w, v):
        return sgemmlab.matmul(torch.relu(op(x, w)), v).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    for batch in (3, 5):  # a second shape: recompiles (static) or reuses (dynamic)
        x, w = _operands((batch, 6, 4), (4, 5), requires_grad=True, seed=batch)
        v = torch.rand(5, 2, requires_grad=True)
        got = compiled(x, w, v)
        ref = (torch.relu(x @ w) @ v).sum()
        torch.testing.assert_close(got, ref)
        grads = torch.autograd.grad(got, (x, w, v))
        refs = torch.autograd.grad(ref, (x, w, v))
        for g, r in zip(grads, refs):
            torch.testing.assert_close(g, r)


def test_compiled_graph_holds_the_op():
    """The op stays one node of the graph torch.compile builds (it is opaque to tracing)."""
    torch._dynamo.reset()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    f = torch.compile(lambda x, w: sgemmlab.matmul(x, w) * 2, fullgraph=True, backend=backend)
    x, w = _operands((6, 4), (4, 5))
    torch.testing.assert_close(f(x, w), 2 * (x @ w))
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert torch.ops.sgemmlab.matmul.default in targets


def test_compile_works_when_sgemmlab_was_imported_before_torch():
    """sgemmlab never imports torch; its first call under torch.compile must still trace
    into the op without a graph break (a fresh interpreter, import order reversed)."""
    code = (
        "import sgemmlab, torch\n"
        "f = torch.compile(lambda x, w: sgemmlab.matmul(x, w), fullgraph=True, "
        "backend='aot_eager')\n"
        "x, w = torch.rand(3, 4), torch.rand(4, 2)\n"
        "torch.testing.assert_close(f(x, w), x @ w)\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]


def test_sgemmlab_matmul_on_fake_tensors_is_the_op():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        a = mode.from_tensor(torch.empty(2, 5, 3))
        b = mode.from_tensor(torch.empty(3, 4))
        c = sgemmlab.matmul(a, b)
    assert tuple(c.shape) == (2, 5, 4)
