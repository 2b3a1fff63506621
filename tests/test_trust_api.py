"""Nothing silently wrong at the front door (CPU): α and β of every type, BLAS's α = 0,
the checks of `out` on every path, `c` that autograd owns, unclear options, and one
thread's new shape holding up no other. Each of these was accepted, or answered with the
wrong error, before; the GPU halves (negative views, DLPack producers, dead streams) are
in tests/test_trust_gpu.py.

The `emulated` device of tests/test_api.py stands in for a GPU: the real API, plan and
checks over numpy arrays, the kernels' contract computed on the host.
"""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest

import sgemmlab
from sgemmlab import ConfigError, OperandError, plan
from test_api import F32, emulated  # noqa: F401  (the fixture)


# -- alpha and beta --------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["2", "2.5", b"2", True, np.True_, Decimal("2"),
                                   np.complex64(1 + 2j), 1 + 0j, None, [1.0],
                                   np.array([1.0])], ids=repr)
@pytest.mark.parametrize("which", ["alpha", "beta"])
def test_alpha_and_beta_refuse_what_is_not_a_real_number(emulated, which, value):  # noqa: F811
    """Strings, bytes and bools were taken as numbers, a NumPy complex lost its imaginary
    part with a warning, and Decimal passed: each is a TypeError that names the scalar."""
    x = emulated.array(np.ones((2, 2), F32))
    with pytest.raises(TypeError, match=rf"^{which} must be a real number"):
        sgemmlab.sgemm(x, x, x.copy(), **{which: value})
    assert not emulated.binds


def test_alpha_and_beta_take_every_real_number_type(emulated):  # noqa: F811
    torch = pytest.importorskip("torch")
    a = emulated.array(np.ones((2, 3), F32))
    b = emulated.array(np.ones((3, 2), F32))
    for alpha in (2, 2.0, np.float32(2), np.int64(2), np.float64(2), np.array(2.0),
                  torch.tensor(2.0), torch.tensor(2), Fraction(2)):
        c = emulated.array(np.ones((2, 2), F32))
        sgemmlab.sgemm(a, b, c, alpha=alpha, beta=torch.tensor(0.5))
        assert np.array_equal(c, np.full((2, 2), 6.5, F32)), alpha
        assert type(emulated.binds[-1]["alpha"]) is float


@pytest.mark.parametrize("poison", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", ["a", "b"])
def test_alpha_zero_reads_neither_a_nor_b(emulated, poison, where):  # noqa: F811
    """BLAS (and torch.addmm(alpha=0)): with alpha = 0, A and B are not read, so NaN or Inf
    there cannot reach C = beta C. sgemm gave NaN."""
    a = emulated.array(np.ones((4, 3), F32))
    b = emulated.array(np.ones((3, 5), F32))
    (a if where == "a" else b)[1, 2] = poison
    c = emulated.array(np.full((4, 5), 3.0, F32))
    sgemmlab.sgemm(a, b, c, alpha=0.0, beta=2.0)
    assert np.array_equal(c, np.full((4, 5), 6.0, F32))
    out = emulated.array(np.full((4, 5), np.nan, F32))
    sgemmlab.sgemm(a, b, c, alpha=0, beta=0, out=out)  # and beta = 0 reads not even c
    assert np.array_equal(out, np.zeros((4, 5), F32))
    assert not emulated.binds, "nothing to launch"


# -- options ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["no", "yes", 1, 0, None, np.float32(1)], ids=repr)
def test_deterministic_is_a_bool(emulated, value):  # noqa: F811
    """deterministic="no" counted as True (any truthy value did)."""
    x = emulated.array(np.ones((2, 2), F32))
    with pytest.raises(TypeError, match=r"^deterministic must be True or False"):
        sgemmlab.matmul(x, x, deterministic=value)
    with pytest.raises(TypeError, match=r"^deterministic must be True or False"):
        sgemmlab.sgemm(x, x, deterministic=value)


def test_a_partial_config_names_what_is_missing_and_unknown(emulated):  # noqa: F811
    """config={"BM": 7} gave KeyError: 'BN'."""
    x = emulated.array(np.ones((4, 4), F32))
    with pytest.raises(ConfigError, match=r"^illegal configuration BM=7,XX=1 .*must set "
                                          r"exactly .*\(missing \['BK', 'BN', .*\], "
                                          r"unknown \['XX'\]\)"):
        sgemmlab.matmul(x, x, kernel=emulated.rung.label, config={"BM": 7, "XX": 1})
    full = dict(emulated.rung.seed)
    with pytest.raises(ConfigError, match=r"set to integers, got 'BM'=128\.0"):
        sgemmlab.matmul(x, x, kernel=emulated.rung.label, config={**full, "BM": 128.0})
    with pytest.raises(ConfigError, match=r"named by strings .* got 7=1"):
        sgemmlab.matmul(x, x, kernel=emulated.rung.label, config={**full, 7: 1})
    with pytest.raises(ConfigError, match=r"^illegal configuration .*BM=7"):
        sgemmlab.matmul(x, x, kernel=emulated.rung.label, config={**full, "BM": 7})
    with pytest.raises(TypeError, match=r"^config must be a mapping"):
        sgemmlab.matmul(x, x, kernel=emulated.rung.label, config=[("BM", 128)])
    assert not emulated.binds


# -- torch: out on the autograd path, c that autograd owns --------------------------------------
def test_out_with_operands_that_require_grad_is_refused_like_torch():
    """The autograd path never checked `out`: out.copy_(r) broadcast a 4x5 product into a
    (2, 4, 5) out, and took float64, int32 and CPU outs, none carrying a gradient. torch
    refuses out= where autograd is needed; so does sgemmlab now, before anything runs."""
    torch = pytest.importorskip("torch")
    a = torch.ones(4, 3, requires_grad=True)
    b = torch.ones(3, 5)
    for out in (torch.empty(2, 4, 5), torch.empty(4, 5, dtype=torch.float64),
                torch.empty(4, 5, dtype=torch.int32), torch.empty(4, 5)):
        with pytest.raises(ValueError, match=r"^out= cannot be used when a or b requires "
                                             r"grad"):
            sgemmlab.matmul(a, b, out=out)


def test_the_ops_out_gets_the_checks_of_every_path(monkeypatch):
    """Where the op serves a call with out (torch.compile, tensor subclasses; no grad),
    `out` is checked as on the general path: shape exactly (never broadcast into), dtype,
    device, a tensor at all."""
    torch = pytest.importorskip("torch")
    from sgemmlab import api

    monkeypatch.setattr(api, "_compiling", lambda: True)  # as under torch.compile
    a, b = torch.ones(4, 3), torch.ones(3, 5)
    for out, error, match in (
            (torch.empty(2, 4, 5), ValueError, r"^out is 2x4x5, the product is 4x5"),
            (torch.empty(4, 5, dtype=torch.float64), OperandError, r"^out: dtype is "
                                                                   r"torch.float64"),
            (torch.empty(4, 5, device="meta"), ValueError, r"^out is on meta, the operands "
                                                           r"on cpu"),
            (np.empty((4, 5), F32), OperandError, r"^out: ndarray beside torch operands")):
        with pytest.raises(error, match=match):
            sgemmlab.matmul(a, b, out=out)
    out = torch.full((4, 5), float("nan"))
    assert sgemmlab.matmul(a, b, out=out) is out  # the op's CPU fallback, into out
    assert torch.equal(out, torch.full((4, 5), 3.0))


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_sgemm_refuses_a_c_that_requires_grad_whenever_it_writes_it(beta):
    """beta = 0 skipped the check on c, although c, with no out, is where the result goes:
    a leaf that requires grad was overwritten (torch's own c.copy_ refuses it)."""
    torch = pytest.importorskip("torch")
    a, b = torch.ones(4, 3), torch.ones(3, 5)
    c = torch.zeros(4, 5, requires_grad=True)
    with pytest.raises(ValueError, match=r"^c requires grad, and sgemm records no autograd"):
        sgemmlab.sgemm(a, b, c, beta=beta)
    assert torch.equal(c.detach(), torch.zeros(4, 5))


@pytest.mark.parametrize("make", ["sparse_coo", "sparse_csr"])
def test_sparse_tensors_are_an_operand_error(make):
    """torch's "Cannot access data pointer of Tensor" came through instead."""
    torch = pytest.importorskip("torch")
    from sgemmlab.runtime import arrays

    s = getattr(torch.eye(4), f"to_{make}")()
    monkey = type("Cuda", (), {"type": "cuda", "index": 0})()

    class Fake:  # a sparse tensor that says it is on a GPU (this machine has none)
        dtype, layout, is_nested, device, shape = s.dtype, s.layout, False, monkey, s.shape

        def is_neg(self):
            return False

    with pytest.raises(OperandError, match=rf"^a: a {make} tensor; sgemmlab reads dense"):
        arrays.torch_operand(Fake(), "a")


# -- threads ------------------------------------------------------------------------------------
def test_a_slow_plan_holds_up_no_other_shape():
    """PlanCache.get made plans under its one lock, and dispatch may compile inside: an
    unrelated shape in another thread waited 1.9 s behind a 2 s plan. Now each key has its
    own lock: the other shape is served at once, and the slow key is still made once."""
    cache = plan.PlanCache()
    started, release = threading.Event(), threading.Event()
    made = []

    def slow():
        made.append("slow")
        started.set()
        release.wait(10)
        return "slow plan"

    results = {}
    threads = [threading.Thread(target=lambda: results.setdefault(
        i, cache.get(("slow",), slow))) for i in range(3)]
    threads[0].start()
    assert started.wait(10)
    for t in threads[1:]:
        t.start()
    t0 = time.perf_counter()
    assert cache.get(("fast",), lambda: "fast plan") == "fast plan"
    waited = time.perf_counter() - t0
    release.set()
    for t in threads:
        t.join(10)
    assert waited < 1.0, f"an unrelated shape waited {waited:.2f} s behind a slow plan"
    assert made == ["slow"] and set(results.values()) == {"slow plan"}


def test_a_plan_that_fails_is_not_kept_and_frees_its_lock():
    cache = plan.PlanCache()

    def bad():
        raise ConfigError("no")

    for _ in range(2):
        with pytest.raises(ConfigError):
            cache.get(("k",), bad)
    assert cache.get(("k",), lambda: "ok") == "ok" and not cache._making
