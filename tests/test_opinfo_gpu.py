"""PyTorch's own OpInfo samples as a client of the drop-in switch (skipped without a GPU).

torch tests its operators with the sample inputs of `op_db`
(torch.testing._internal.common_methods_invocations): small, odd shapes — empty, 0-d, 1-d,
broadcast biases, alpha and beta. Here they test `sgemmlab.torch_mode()`. For every variant of
the products named in OPS (addmm and addmm.decomposed, bmm and bmm.triton_optimized, ...),
each sample on DEVICE in float32, with requires_grad where the op has autograd, runs three
ways with TF32 off: by torch, by torch under the switch, and by torch on float64 copies of
its inputs (the reference). Where the op has an out= form, that runs too, on the same
operands without autograd.

The rule, "within FP32's bound", for the value and each gradient (the backward of a fixed
random cotangent), with err(x) = max|x - ref| over the elements:

    err(switch) <= max(4 * err(torch), 8 * eps32 * max|ref|),   eps32 = 2**-23

i.e. the switch may round differently from torch (another summation order), but not be
worse than four times torch's own error, nor worse than a few units of FP32 rounding of the
largest output where torch happens to be nearly exact (K = 1, or values that are exact in
FP32). Shapes and dtypes must equal torch's.

Exceptions must match: where torch raises on a sample — the OpInfo's error_inputs, and the
samples of `_mismatched` (shapes that do not fit, dtypes or devices that differ) — the switch
raises the same type with the same first line of message; where torch does not, neither may
it.

And the switch must not pass by doing nothing: every variant of an op in SERVED (the ones
that reach aten mm, addmm, bmm or baddbmm with float32 CUDA operands) makes `mode.served`
non-empty over its samples, and so do the out= forms of OUT_SERVED.

`op_db` imports expecttest, which the GPU machine's torch lacks; a pure-Python wheel of it
at .whl/expecttest-*.whl (`pip download expecttest --no-deps -d .whl/`) is put on sys.path.
SGEMMLAB_OPINFO_DEVICE=cpu points the samples at the CPU for a dry run of the harness: the
switch acts on CUDA tensors only, so such a run imports this module, puts a stand-in mode
in SWITCH (one that counts the aten products it sees) and calls the test itself.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import sgemmlab  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    # torch's own, on a valid sample (matmul/linear of a 1-D input with out=) and on op_db's import
    pytest.mark.filterwarnings("ignore:An output with one or more elements was resized"),
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta"),
]

DEVICE = os.environ.get("SGEMMLAB_OPINFO_DEVICE", "cuda")
SWITCH = sgemmlab.torch_mode  # a dry run on the CPU puts a stand-in here

EPS32 = 2.0**-23
TORCH_FACTOR, FLOOR_ULPS = 4.0, 8.0

#: The op_db names, each with all its variants.
OPS = ("mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "__rmatmul__",
       "nn.functional.linear", "addmv", "mv", "addr", "einsum", "tensordot", "inner", "outer",
       "linalg.multi_dot")
#: Ops whose samples reach aten mm/addmm/bmm/baddbmm (directly, or as torch decomposes
#: them: matmul and linear fold to mm/addmm/bmm, einsum contracts with bmm, tensordot and
#: multi_dot with mm). addbmm, addmv, mv, addr, inner and outer have kernels of their own
#: (or reach only dot and mul on these samples), so the switch may leave them alone.
SERVED = {"mm", "addmm", "bmm", "baddbmm", "matmul", "__rmatmul__", "nn.functional.linear",
          "einsum", "tensordot", "linalg.multi_dot"}
#: ... and whose out= form is an aten product's out= form.
OUT_SERVED = {"mm", "addmm", "bmm", "baddbmm"}


def _expecttest_found() -> bool:
    if importlib.util.find_spec("expecttest") is not None:
        return True
    # a pure-Python wheel is a zip that zipimport reads from sys.path as it is
    wheels = sorted(Path(__file__).resolve().parents[1].glob(".whl/expecttest-*.whl"))
    if wheels:
        sys.path.insert(0, str(wheels[-1]))
    return importlib.util.find_spec("expecttest") is not None


if not _expecttest_found():
    pytest.skip("torch's op_db needs expecttest: neither installed nor at "
                ".whl/expecttest-*.whl (pip download expecttest --no-deps -d .whl/)",
                allow_module_level=True)

@functools.cache
def _op_db() -> list:
    """torch's op_db, imported on first use (some seconds, and warnings): where the test
    runs, never at collection. Importing it freezes torch.backends' global flags
    (torch's test harness calls disable_global_flags()), which later tests of the same
    worker set directly: they are thawed again."""
    frozen = torch.backends.flags_frozen()
    from torch.testing._internal.common_methods_invocations import op_db

    if not frozen and torch.backends.flags_frozen():
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
        assert not torch.backends.flags_frozen()
    return op_db


def _mismatched(name: str) -> list:
    """Samples torch refuses, per op: the switch's own checks of shapes, dtypes and devices
    must refuse them the same way (by handing them to torch)."""
    from torch.testing._internal.opinfo.core import SampleInput as S

    torch.manual_seed(0)

    def t(*shape, dtype=torch.float32, device=DEVICE):
        return torch.randn(shape, dtype=dtype, device=device)

    f64 = torch.float64
    cases = {
        "mm": [S(t(2, 3), t(4, 5)), S(t(2, 3), t(3, 4, dtype=f64)), S(t(2, 2, 3), t(3, 4))],
        "addmm": [S(t(7), t(2, 3), t(3, 4)), S(t(2, 4), t(2, 3), t(5, 4)),
                  S(t(2, 4), t(2, 3), t(3, 4, dtype=f64))],
        "bmm": [S(t(2, 3, 4), t(3, 4, 5)), S(t(2, 3, 4), t(2, 5, 6)), S(t(3, 4), t(4, 5)),
                S(t(2, 3, 4), t(2, 4, 5, dtype=f64))],
        "baddbmm": [S(t(2, 3, 7), t(2, 3, 4), t(2, 4, 5)), S(t(2, 3, 5), t(2, 3, 4), t(3, 4, 5))],
        "addbmm": [S(t(3, 5), t(2, 3, 4), t(3, 4, 5)), S(t(4, 5), t(2, 3, 4), t(2, 4, 5))],
        "matmul": [S(t(2, 3), t(4, 5)), S(t(2, 2, 3), t(3, 3, 4)), S(t(), t(3)),
                   S(t(2, 3), t(3, 4, dtype=f64))],
        "__rmatmul__": [S(t(4, 5), t(2, 3)), S(t(3, 3, 4), t(2, 2, 3)),
                        S(t(3, 4, dtype=f64), t(2, 3))],
        "nn.functional.linear": [S(t(8, 3), t(4, 5)), S(t(8, 3), t(4, 3), t(5)),
                                 S(t(8, 3), t(4, 3, dtype=f64))],
        "addmv": [S(t(5), t(5, 10), t(9)), S(t(6), t(5, 10), t(10))],
        "mv": [S(t(5, 10), t(9)), S(t(5, 10), t(10, dtype=f64))],
        "addr": [S(t(6, 10), t(5), t(10))],
        "einsum": [S([t(2, 3), t(4, 5)], "ij,jk->ik"), S([t(2, 3)], "ijk->i")],
        "tensordot": [S(t(2, 3), t(4, 5), dims=1)],
        "inner": [S(t(2, 3), t(4, 5))],
        "outer": [S(t(2, 3), t(4, 5))],
        "linalg.multi_dot": [S([t(2, 3), t(4, 5)]), S([t(3)])],
    }[name]
    if DEVICE != "cpu":  # an operand left on the host
        host = {"mm": S(t(2, 3), t(3, 4, device="cpu")),
                "bmm": S(t(2, 2, 3), t(2, 3, 4, device="cpu")),
                "matmul": S(t(2, 3), t(3, 4, device="cpu")),
                "nn.functional.linear": S(t(8, 3), t(4, 3, device="cpu"))}
        cases += [host[name]] if name in host else []
    return cases


@contextlib.contextmanager
def _tf32_off():
    """torch's own products in exact FP32: the bound compares with them."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old[0]
        torch.set_float32_matmul_precision(old[1])


def _tensors(sample) -> list:
    """The sample's tensors, those of a TensorList (einsum, multi_dot) included."""
    found = []
    for x in (sample.input, *sample.args, *sample.kwargs.values()):
        if isinstance(x, (list, tuple)):
            found += [y for y in x if isinstance(y, torch.Tensor)]
        elif isinstance(x, torch.Tensor):
            found.append(x)
    return found


def _as(sample, dtype=None, grad: bool = False):
    """The sample on fresh leaves: of `dtype` (the float64 reference), or as they are but
    without autograd (the operands of an out= form)."""
    def f(t):
        if not isinstance(t, torch.Tensor):
            return t
        return t.detach().to(dtype or t.dtype).requires_grad_(grad and t.requires_grad)

    return sample.transform(f)


def _call(op, sample, out=None):
    kwargs = sample.kwargs if out is None else {**sample.kwargs, "out": out}
    return op(sample.input, *sample.args, **kwargs)


def _forward_backward(op, sample):
    """The value, and the gradients of a fixed random cotangent (None: that leaf unused)."""
    value = _call(op, sample)
    assert isinstance(value, torch.Tensor), f"{op.name} returned {type(value).__name__}"
    leaves = [t for t in _tensors(sample) if t.requires_grad]
    if not (leaves and value.requires_grad):
        return value.detach(), ()
    y = sample.output_process_fn_grad(value)
    gen = torch.Generator(device=y.device).manual_seed(1234)
    cotangent = torch.randn(y.shape, generator=gen, device=y.device).to(y.dtype)
    return value.detach(), torch.autograd.grad(y, leaves, cotangent, allow_unused=True)


def _outcome(fn):
    """(result, None), or (None, the exception it raised)."""
    try:
        return fn(), None
    except Exception as exc:  # whatever torch raises, the switch must raise too
        return None, exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def _same_failure(want: BaseException | None, got: BaseException | None) -> str | None:
    """None if the switch failed as torch did (both not at all, or the same way)."""
    if want is None and got is None:
        return None
    if want is None:
        return f"torch succeeded, the switch raised {type(got).__name__}: {_first_line(got)}"
    if got is None:
        return f"torch raised {type(want).__name__}: {_first_line(want)}; the switch did not"
    if type(got) is not type(want) or _first_line(got) != _first_line(want):
        return (f"torch raised {type(want).__name__}: {_first_line(want)}; the switch raised "
                f"{type(got).__name__}: {_first_line(got)}")
    return None


def _error(x, ref) -> float:
    return 0.0 if ref.numel() == 0 else (x.double() - ref.double()).abs().max().item()


def _beyond_bound(what: str, got, want, ref) -> str | None:
    """None if `got` (the switch's) is within FP32's bound of `ref`, by the module's rule."""
    if got is None or want is None or ref is None:
        if (got is None) != (want is None):
            return f"{what}: torch's is {'None' if want is None else 'a tensor'}, " \
                   f"the switch's {'None' if got is None else 'a tensor'}"
        return None
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{what}: {tuple(got.shape)} {got.dtype}, torch's {tuple(want.shape)} {want.dtype}"
    ours, theirs = _error(got, ref), _error(want, ref)
    scale = 0.0 if ref.numel() == 0 else ref.abs().max().item()
    bound = max(TORCH_FACTOR * theirs, FLOOR_ULPS * EPS32 * scale)
    if not ours <= bound:  # NaN fails too
        return f"{what}: error {ours:.3g} > bound {bound:.3g} (torch's {theirs:.3g}, max|ref| " \
               f"{scale:.3g})"
    return None


def _compare(op, sample, tally: Counter) -> list[str]:
    """Problems of one sample, function form then out= form; the switch's counts added."""
    problems = []
    want, want_exc = _outcome(lambda: _forward_backward(op, sample))
    with SWITCH() as mode:
        got, got_exc = _outcome(lambda: _forward_backward(op, sample))
    tally["served"] += sum(mode.served.values())
    if (why := _same_failure(want_exc, got_exc)) is not None:
        return [why]
    if want is not None:
        ref = _forward_backward(op, _as(sample, torch.float64, grad=True))
        problems += filter(None, [_beyond_bound("value", got[0], want[0], ref[0])])
        for i, (g, w, r) in enumerate(zip(got[1], want[1], ref[1])):
            problems += filter(None, [_beyond_bound(f"grad {i}", g, w, r)])
    if not op.supports_out:
        return problems

    plain = _as(sample)
    # an out= tensor of the result's shape: one that torch must resize goes to torch
    shape = want[0].shape if want is not None else (0,)

    def out_form():
        out = torch.empty(shape, device=DEVICE)
        result = _call(op, plain, out=out)
        return result.detach().clone(), result is out

    want, want_exc = _outcome(out_form)
    with SWITCH() as mode:
        got, got_exc = _outcome(out_form)
    tally["served out="] += sum(mode.served.values())
    if (why := _same_failure(want_exc, got_exc)) is not None:
        return problems + [f"out=: {why}"]
    if want is not None:
        ref = _call(op, _as(sample, torch.float64))
        problems += filter(None, [_beyond_bound("out= value", got[0], want[0], ref)])
        if got[1] != want[1]:
            problems.append(f"out=: torch returns {'' if want[1] else 'not '}the out tensor, "
                            f"the switch {'' if got[1] else 'not'}")
    return problems


def _samples(op):
    """(label, sample): the OpInfo's samples, then its error_inputs (if it has any)."""
    grad = op.supports_autograd and torch.float32 in op.supported_backward_dtypes(DEVICE)
    samples = list(op.sample_inputs(DEVICE, torch.float32, requires_grad=grad))
    yield from ((f"sample {i}", s) for i, s in enumerate(samples))
    if op.error_inputs_func is not None:
        yield from ((f"error_input {i}", e.sample_input)
                    for i, e in enumerate(op.error_inputs(DEVICE)))


def _variant(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


@pytest.mark.parametrize("name", OPS)
def test_opinfo_samples_under_the_switch_match_torch(name):
    variants = [op for op in _op_db() if op.name == name
                and torch.float32 in op.supported_dtypes(DEVICE)]
    assert variants, f"no float32 {DEVICE} entry {name!r} in op_db (torch {torch.__version__})"
    problems, counts = [], {}
    with _tf32_off():
        for op in variants:
            tally = counts[_variant(op)] = Counter()
            for label, sample in _samples(op):
                tally["samples"] += 1
                problems += [f"{_variant(op)} {label} {sample.summary()}: {p}"
                             for p in _compare(op, sample, tally)]
        for i, sample in enumerate(_mismatched(name)):
            raised = _outcome(lambda: _call(variants[0], sample))[1]
            assert raised is not None, f"MISMATCHED {name} {i}: torch accepts it"
            problems += [f"{name} mismatched {i} {sample.summary()}: {p}"
                         for p in _compare(variants[0], sample, Counter())]
    assert not problems, "\n".join(problems)
    if name in SERVED:
        idle = [v for v, tally in counts.items() if not tally["served"]]
        assert not idle, f"the switch served nothing for {idle}: {counts}"
    if name in OUT_SERVED:
        idle = [_variant(op) for op in variants
                if op.supports_out and not counts[_variant(op)]["served out="]]
        assert not idle, f"the switch served no out= form for {idle}: {counts}"
