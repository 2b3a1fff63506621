"""The one correctness metric (bench/check.py) on the CPU: its denominator, its refusal of
NaN and Inf, torch and numpy alike, and the bound that passes FP32 and fails TF32."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sgemmlab.bench.check import check_result, error_bound, relative_error

F64, F32 = np.float64, np.float32


def test_the_denominator_is_max_ref_when_beta_is_zero():
    ref = np.array([[2.0, -4.0], [1.0, 0.5]], dtype=F64)
    got = ref + np.array([[0.0, 0.0], [0.0, 1e-3]], dtype=F64)
    assert relative_error(got, ref) == pytest.approx(1e-3 / 4)


def test_cancelled_results_are_measured_against_the_terms():
    """1 x 1: alpha AB = 100, beta C0 = -99.99: the result (0.01) says nothing about the
    rounding of a 100; the largest term does. Without the terms the metric is stricter."""
    ab = np.array([[100.0]], dtype=F64)
    bc = np.array([[-99.99]], dtype=F64)
    ref = ab + bc
    got = ref + 1e-5
    assert relative_error(got, ref, alpha_ab=ab, beta_c=bc) == pytest.approx(1e-7)
    assert relative_error(got, ref) == pytest.approx(1e-3)  # over max|ref| = 0.01 alone
    assert check_result(got, ref, 1, alpha_ab=ab, beta_c=bc).ok
    assert not check_result(got, ref, 1).ok


def test_a_cancelled_dot_product_is_measured_against_its_products():
    """1 x 1 x 35: the 35 products cancel to a result far smaller than they are; FP32's
    rounding of the running sum then looks large next to the result alone. Measured
    against the products' root sum of squares (check_gemm's `terms`) a correctly rounded
    FP32 sum passes, and a sum that drops one product still fails."""
    rng = np.random.default_rng(7)
    for _ in range(200):  # a draw whose sum cancels to under a tenth of its products' size
        a, b = rng.uniform(-1, 1, 35), rng.uniform(-1, 1, 35)
        exact, rss = float(a @ b), float(np.sqrt((a * a) @ (b * b)))
        if abs(exact) < rss / 10:
            break
    acc = F32(0)
    for x, y in zip(a.astype(F32), b.astype(F32)):  # FP32, one product at a time
        acc = F32(acc + x * y)
    ref, terms = np.array([[exact]]), np.array([[rss]])
    got = np.array([[float(acc)]])
    assert relative_error(got, ref, terms=terms) <= error_bound(35)
    dropped = np.array([[float(acc) - float(a[0] * b[0])]])
    assert relative_error(dropped, ref, terms=terms) > error_bound(35)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_any_nan_or_inf_fails(bad):
    ref = np.ones((3, 4), dtype=F64)
    got = np.ones((3, 4), dtype=F32)
    got[1, 2] = bad
    assert relative_error(got, ref) == math.inf
    res = check_result(got, ref, 64)
    assert not res.ok and res.error == math.inf and "1 of 12 outputs are NaN/Inf" in res.reason
    ref[0, 0] = math.nan  # a wrong reference never passes either
    assert not check_result(np.ones((3, 4), dtype=F32), ref, 64).ok


def test_torch_and_numpy_give_the_same_error():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(33, 17, generator=g) * 2 - 1, torch.rand(17, 9, generator=g) * 2 - 1
    ref = a.double() @ b.double()
    got = a @ b
    e = relative_error(got, ref)
    assert 0 < e < error_bound(17)
    assert relative_error(got.numpy(), ref.numpy()) == e
    assert relative_error(got.numpy().tolist(), ref.numpy()) == pytest.approx(e)  # a list
    assert check_result(got.numpy(), ref.numpy(), 17).ok


def test_broadcast_empty_and_all_zero():
    ref = np.ones((4, 5), dtype=F64)
    assert relative_error(np.ones((3, 4, 5), dtype=F32), np.broadcast_to(ref, (3, 4, 5))) == 0.0
    assert relative_error(np.empty((0, 5), dtype=F32), np.empty((0, 5))) == 0.0
    zero = np.zeros((2, 2))
    assert relative_error(zero + 1e-9, zero) == pytest.approx(1e-9)  # absolute, not 0/0


def test_the_bound_passes_fp32_and_fails_tf32():
    K = 4096
    g = np.random.default_rng(1)
    a = (g.random((64, K)) * 2 - 1).astype(F32)
    b = (g.random((K, 64)) * 2 - 1).astype(F32)
    ref = a.astype(F64) @ b.astype(F64)
    fp32 = check_result(a @ b, ref, K)
    assert fp32.ok and fp32.error < fp32.bound / 4, fp32

    def tf32(x):  # round to a 10-bit mantissa, as the tensor cores read their inputs
        m, e = np.frexp(x.astype(F64))
        return np.ldexp(np.round(m * 2**11) / 2**11, e).astype(F32)

    low = check_result(tf32(a) @ tf32(b), ref, K)
    assert not low.ok and low.error > low.bound and "exceeds the FP32 bound" in low.reason
    assert error_bound(1) == 1e-6 and error_bound(4096) == pytest.approx(6.1e-5, rel=1e-2)
