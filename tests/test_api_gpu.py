"""The public API on a GPU (skipped without one): sgemm / matmul / torch.ops.sgemmlab.matmul
against float64 over shapes, layouts (transposed views, padded leading dimensions,
unaligned bases), batches and broadcasts, alpha and beta; a hypothesis property test over
all of them; opcheck, autograd, torch.compile and CUDA graphs on CUDA tensors; threads and
streams; bit-for-bit repeatability with deterministic=True; IEEE propagation of NaN and
Inf; the BLAS corners; and every refusal that needs a GPU to reach.

Outputs are views into NaN-filled buffers: an element the kernels forget to write fails, and
so does any write outside the view.
"""

from __future__ import annotations

import math
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sgemmlab
from sgemmlab import OperandError, plan, registry
from sgemmlab.bench.check import check_result

pytestmark = pytest.mark.gpu

NAN = float("nan")


# ---------------------------------------------------------------------------------------
# Operands in every layout, as views into buffers
# ---------------------------------------------------------------------------------------
def strided(shape, layout="row", batch_layout="packed", values=None, fill=NAN):
    """(buffer, view): `shape` laid out as `layout` (row | col, optionally -ld: rows padded
    by 3 elements, -offset: base one element off 16-byte alignment), a 3-D batch as
    `batch_layout` (packed | padded | permuted: the batch between rows and columns in
    memory | broadcast: stride 0). The buffer around the view holds `fill`; the view holds
    `values` (uniform in [-1, 1] when None)."""
    import torch

    rows, cols = shape[-2:]
    pad = 3 if "-ld" in layout else 0
    off = 1 if "-offset" in layout else 0
    col = layout.startswith("col")
    s_r, s_c = (1, rows + pad) if col else (cols + pad, 1)
    span = (cols * s_c if col else rows * s_r) or 1
    strides = [s_r, s_c]
    if len(shape) == 3:
        n = shape[0]
        if batch_layout == "permuted" and not col:
            s_r = n * (cols + pad)
            strides = [cols + pad, s_r, 1]
            span = rows * s_r
            n = 1
        else:
            sb = {"packed": span, "padded": span + 5, "broadcast": 0}.get(batch_layout, span)
            strides = [sb, s_r, s_c]
            span = max(n - 1, 0) * sb + span
    buf = torch.full((off + span + 8,), fill, device="cuda")
    view = buf.as_strided(shape, strides, off)
    if values is None:
        values = torch.rand(shape, device="cuda") * 2 - 1
    if len(shape) == 3 and batch_layout == "broadcast":
        if shape[0]:
            buf.as_strided(shape[1:], strides[1:], off).copy_(values[0])
    else:
        view.copy_(values)
    return buf, view


def outside_mask(buf, view):
    """True where `buf` is not covered by `view`."""
    import torch

    mark = torch.zeros_like(buf)
    mark.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(1)
    return mark == 0


def reference(a, b, c, alpha, beta):
    r = alpha * (a.double() @ b.double())
    if beta != 0:
        r = r + beta * c.double()
    return r


def assert_matches(got, ref, K, alpha_ab=None, beta_c=None):
    """bench/check.py's metric and bound: max |got - ref| over max |ref|, or over the
    largest of it and the terms alpha AB and beta C0 when given (they can cancel in a 1 x 1
    result, whose own size would then say nothing about the rounding); NaN/Inf fails."""
    assert tuple(got.shape) == tuple(ref.shape)
    res = check_result(got, ref, K, alpha_ab=alpha_ab, beta_c=beta_c)
    assert res.ok, res.reason


def run_case(M, N, K, a_batch, b_batch, a_lay, b_lay, out_lay, a_blay, b_blay, out_blay,
             alpha, beta, c_mode, via="sgemm"):
    import torch

    a_shape = (a_batch, M, K) if a_batch is not None else (M, K)
    b_shape = (b_batch, K, N) if b_batch is not None else (K, N)
    out_shape = tuple(plan.product_shape(a_shape, b_shape))
    a_buf, a = strided(a_shape, a_lay, a_blay)
    b_buf, b = strided(b_shape, b_lay, b_blay)
    o_buf, out = strided(out_shape, out_lay, out_blay if out_blay != "broadcast" else "padded",
                         values=torch.full(out_shape, NAN, device="cuda"))
    if c_mode == "none":
        beta, c = 0.0, None
    elif c_mode == "same":
        if beta != 0:
            out.copy_(torch.rand(out_shape, device="cuda") * 2 - 1)
        c = out
    else:
        c = torch.rand(out_shape, device="cuda") * 2 - 1 if beta != 0 else torch.full(
            out_shape, NAN, device="cuda")
    c0 = None if c is None else c.clone()
    before = a_buf.clone(), b_buf.clone(), o_buf.clone()
    if via == "sgemm":
        got = sgemmlab.sgemm(a, b, c, alpha=alpha, beta=beta, out=out)
        assert got is out
    else:  # matmul into a new tensor
        out = sgemmlab.matmul(a, b)
        alpha, beta = 1.0, 0.0
    torch.cuda.synchronize()
    where = (f"{M}x{N}x{K} a{a_shape}:{a_lay}/{a_blay} b{b_shape}:{b_lay}/{b_blay} "
             f"out:{out_lay}/{out_blay} alpha={alpha} beta={beta} c={c_mode}")
    ref = reference(a, b, c0, alpha, beta)
    ab = alpha * (a.double() @ b.double())
    bc = beta * c0.double() if beta != 0 else None
    try:
        assert_matches(out, ref, K, ab, bc)
    except AssertionError as exc:
        raise AssertionError(f"{where}: {exc}") from None
    nan_eq = dict(equal_nan=True)
    assert torch.allclose(a_buf, before[0], rtol=0, atol=0, **nan_eq), f"{where}: wrote into a"
    assert torch.allclose(b_buf, before[1], rtol=0, atol=0, **nan_eq), f"{where}: wrote into b"
    if via == "sgemm":
        outside = outside_mask(o_buf, out)
        assert torch.allclose(o_buf[outside], before[2][outside], rtol=0, atol=0, **nan_eq), \
            f"{where}: wrote outside out"


LAYOUTS = ["row", "col", "row-ld", "col-ld", "row-offset", "col-offset"]

SHAPES = [(1, 1, 1), (17, 33, 65), (64, 64, 64), (129, 257, 31), (256, 256, 256),
          (1000, 999, 257), (1024, 1024, 1024), (256, 256, 4096)]


@pytest.mark.parametrize("alpha, beta, c_mode", [(1.0, 0.0, "none"), (0.5, -2.0, "same"),
                                                 (-1.0, 0.5, "separate")],
                         ids=["a1b0", "inplace", "separate-c"])
@pytest.mark.parametrize("layouts", [("row", "row", "row"), ("col", "row", "row"),
                                     ("row", "col", "row"), ("col", "col", "col"),
                                     ("row-ld", "col-ld", "col-ld"),
                                     ("row-offset", "col-offset", "row-offset")],
                         ids=lambda t: "-".join(t))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_layouts_match_float64(shape, layouts, alpha, beta, c_mode):
    run_case(*shape, None, None, *layouts, "packed", "packed", "packed", alpha, beta, c_mode)


BATCHES = [
    # a_batch, b_batch, a/b/out layouts, a/b/out batch layouts
    (6, None, "row", "row", "row", "packed", "packed", "packed"),  # folds into one product
    (6, None, "col", "row", "row", "padded", "packed", "padded"),
    (None, 6, "row", "col", "row", "packed", "padded", "permuted"),
    (6, 6, "row", "row", "row", "permuted", "packed", "packed"),
    (6, 6, "col", "col", "col", "packed", "padded", "packed"),
    (1, 6, "row", "row", "row", "packed", "packed", "packed"),
    (6, 1, "row", "col", "row", "packed", "packed", "packed"),
    (6, 6, "row", "row", "row", "broadcast", "packed", "packed"),
    (6, 6, "row-offset", "row-ld", "row-ld", "padded", "broadcast", "padded"),
]


@pytest.mark.parametrize("alpha, beta, c_mode", [(1.0, 0.0, "none"), (2.0, -1.0, "same")],
                         ids=["a1b0", "inplace"])
@pytest.mark.parametrize("batch", BATCHES, ids=lambda b: "-".join(map(str, b)))
@pytest.mark.parametrize("shape", [(17, 33, 65), (128, 96, 64), (300, 200, 1100)],
                         ids=lambda s: "x".join(map(str, s)))
def test_batches_and_broadcasts_match_float64(shape, batch, alpha, beta, c_mode):
    run_case(*shape, *batch[:2], *batch[2:], alpha, beta, c_mode)


@pytest.mark.parametrize("batch", [BATCHES[0], BATCHES[3], BATCHES[5]],
                         ids=lambda b: "-".join(map(str, b)))
def test_matmul_into_a_new_tensor(batch):
    run_case(67, 45, 33, *batch[:2], *batch[2:], 1.0, 0.0, "none", via="matmul")


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(M=st.integers(1, 300), N=st.integers(1, 300), K=st.integers(1, 600),
       batching=st.sampled_from(["none", "a", "b", "both", "a1", "b1"]),
       n=st.integers(1, 4),
       a_lay=st.sampled_from(LAYOUTS), b_lay=st.sampled_from(LAYOUTS),
       out_lay=st.sampled_from(["row", "col", "row-ld", "col-ld", "row-offset"]),
       a_blay=st.sampled_from(["packed", "padded", "permuted", "broadcast"]),
       b_blay=st.sampled_from(["packed", "padded", "permuted", "broadcast"]),
       out_blay=st.sampled_from(["packed", "padded", "permuted"]),
       alpha=st.sampled_from([1.0, -0.5, 3.0]), beta=st.sampled_from([0.0, 1.0, -0.75]),
       c_mode=st.sampled_from(["none", "same", "separate"]))
def test_property_shapes_layouts_batches_alpha_beta(M, N, K, batching, n, a_lay, b_lay,
                                                   out_lay, a_blay, b_blay, out_blay, alpha,
                                                   beta, c_mode):
    a_batch = {"none": None, "a": n, "b": None, "both": n, "a1": 1, "b1": n}[batching]
    b_batch = {"none": None, "a": None, "b": n, "both": n, "a1": n, "b1": 1}[batching]
    run_case(M, N, K, a_batch, b_batch, a_lay, b_lay, out_lay, a_blay, b_blay, out_blay,
             alpha, beta, c_mode)


def test_repeated_calls_with_changing_values_and_layouts():
    """The hot path's caches key on shapes and strides: a transposed operand of the same
    shape, or new values in the same memory, never reuse a wrong plan."""
    import torch

    x = torch.rand(96, 96, device="cuda")
    y = torch.rand(96, 96, device="cuda")
    for i in range(40):
        if i % 10 == 5:
            x.copy_(torch.rand(96, 96, device="cuda"))
        a = x if i % 2 == 0 else x.t()
        b = y if i % 3 else y.t()
        c = sgemmlab.matmul(a, b)
        assert_matches(c, a.double() @ b.double(), 96)


def test_matmul_into_out_repeatedly_then_refusals_with_the_same_geometry():
    """The out= hot path reuses a launch bound for these very pointers only: the same shapes
    and strides with an aliasing out still reach the checks."""
    import torch

    buf = torch.rand(65, 64, device="cuda")
    a, b = buf[:64], torch.rand(64, 64, device="cuda")
    out = torch.full((64, 64), NAN, device="cuda")
    for _ in range(3):
        assert sgemmlab.matmul(a, b, out=out) is out
        assert_matches(out, a.double() @ b.double(), 64)
    before = buf.clone()
    for _ in range(2):
        with pytest.raises(ValueError, match="out overlaps a"):
            sgemmlab.matmul(a, b, out=buf[1:])  # same geometry as `out`, new pointer
    torch.cuda.synchronize()
    assert torch.equal(buf, before)
    sgemmlab.matmul(a, b, out=out.t())  # a column-major out: its own plan
    assert_matches(out.t(), a.double() @ b.double(), 64)


# ---------------------------------------------------------------------------------------
# The API around the kernels (moved here from test_kernels_gpu.py)
# ---------------------------------------------------------------------------------------
def test_matmul_returns_a_tensor_on_the_operands_device():
    import torch

    M, N, K = 100, 70, 40
    a = torch.rand(M, K, device="cuda") * 2 - 1
    b = torch.rand(K, N, device="cuda") * 2 - 1
    for _ in range(2):  # the general path, then the hot path
        c = sgemmlab.matmul(a, b)
        assert isinstance(c, torch.Tensor)
        assert c.device == a.device and c.dtype == torch.float32 and c.shape == (M, N)
        assert c.is_contiguous() and not c.requires_grad
        assert_matches(c, a.double() @ b.double(), K)


def test_sgemm_with_c_and_a_separate_out_leaves_c_alone():
    import torch

    a = torch.rand(40, 30, device="cuda") * 2 - 1
    b = torch.rand(30, 20, device="cuda") * 2 - 1
    c = torch.rand(40, 20, device="cuda") * 2 - 1
    c0 = c.clone()
    out = torch.full((40, 20), NAN, device="cuda")
    for kernel in (5, None):
        got = sgemmlab.sgemm(a, b, c, alpha=2.0, beta=-0.5, out=out, kernel=kernel)
        torch.cuda.synchronize()
        assert got is out
        assert torch.equal(c, c0)
        assert_matches(out, 2.0 * (a.double() @ b.double()) - 0.5 * c0.double(), 30,
                       2.0 * (a.double() @ b.double()), -0.5 * c0.double())


@pytest.mark.parametrize("which", ["a", "b", "part-of-a"])
def test_sgemm_refuses_out_aliasing_an_operand(which):
    import torch

    buf = torch.rand(65, 64, device="cuda")
    a, b = buf[:64], torch.rand(64, 64, device="cuda")
    out = {"a": a, "b": b, "part-of-a": buf[1:]}[which]
    target = "b" if which == "b" else "a"
    before = buf.clone(), b.clone()
    with pytest.raises(ValueError, match=f"out overlaps {target}"):
        sgemmlab.sgemm(a, b, out=out, kernel=2)
    with pytest.raises(ValueError, match=f"out overlaps {target}"):
        sgemmlab.matmul(a, b, out=out)
    with pytest.raises(ValueError, match=f"out overlaps {target}"):
        sgemmlab.matmul(a.t(), b, out=out.t())  # transposed views too
    torch.cuda.synchronize()
    assert torch.equal(buf, before[0]) and torch.equal(b, before[1])


def test_sgemm_refuses_out_partly_overlapping_c():
    import torch

    a = torch.rand(8, 8, device="cuda")
    buf = torch.rand(9, 8, device="cuda")
    with pytest.raises(ValueError, match="partly overlaps c"):
        sgemmlab.sgemm(a, a, buf[:8], beta=1.0, out=buf[1:], kernel=2)


def test_operand_errors_name_the_operand_on_a_gpu():
    import numpy as np
    import torch

    a = torch.rand(8, 8, device="cuda")
    with pytest.raises(OperandError, match=r"^b: "):
        sgemmlab.matmul(a, np.ones((8, 8), np.float32))
    with pytest.raises(OperandError, match=r"^b: dtype"):
        sgemmlab.matmul(a, a.double())
    with pytest.raises(OperandError, match=r"^a: .*2-D matrix or a 3-D batch"):
        sgemmlab.matmul(a[None, None], a)
    with pytest.raises(OperandError, match=r"^a: strides \(8, 2\)"):
        sgemmlab.matmul(a[:, ::2], a[:4])
    with pytest.raises(OperandError, match=r"^b: tensor is on cpu"):
        sgemmlab.matmul(a, a.cpu())
    with pytest.raises(ValueError, match="inner dimensions differ"):
        sgemmlab.matmul(a, torch.rand(7, 8, device="cuda"))
    with pytest.raises(ValueError, match="beta != 0 needs c"):
        sgemmlab.sgemm(a, a, beta=1.0)
    with pytest.raises(ValueError, match=r"^out is 8x7, the product is 8x8"):
        sgemmlab.matmul(a, a, out=torch.empty(8, 7, device="cuda"))
    # what older versions refused and this one computes: a batch, a transposed view
    assert_matches(sgemmlab.matmul(a[None], a), (a.double() @ a.double())[None], 8)
    assert_matches(sgemmlab.matmul(a.t(), a), a.double().t() @ a.double(), 8)


def test_sizes_past_32_bits_are_refused_naming_the_size():
    import torch

    one = torch.zeros(1, 1, device="cuda")
    tall = one.expand(2**31, 1)  # 2^31 rows, no memory
    with pytest.raises(OverflowError, match=r"^M = 2147483648 does not fit"):
        sgemmlab.matmul(tall, one)
    with pytest.raises(OverflowError, match=r"^K = 2147483648 does not fit"):
        sgemmlab.matmul(tall.t(), tall)


def test_k_zero_follows_blas():
    import torch

    a = torch.empty(5, 0, device="cuda")
    b = torch.empty(0, 7, device="cuda")
    c = torch.full((5, 7), NAN, device="cuda")
    sgemmlab.sgemm(a, b, c, beta=0.0)
    assert torch.equal(c, torch.zeros(5, 7, device="cuda"))
    c = torch.full((5, 7), 3.0, device="cuda")
    sgemmlab.sgemm(a, b, c, beta=2.0)
    assert torch.equal(c, torch.full((5, 7), 6.0, device="cuda"))
    for _ in range(2):
        assert torch.equal(sgemmlab.matmul(a, b), torch.zeros(5, 7, device="cuda"))


@pytest.mark.parametrize("a_shape, b_shape", [((0, 3), (3, 4)), ((4, 3), (3, 0)),
                                              ((0, 4, 3), (3, 5)), ((2, 0, 3), (2, 3, 5)),
                                              ((1, 4, 3), (0, 3, 5))])
def test_empty_products(a_shape, b_shape):
    import torch

    a = torch.rand(a_shape, device="cuda")
    b = torch.rand(b_shape, device="cuda")
    for _ in range(2):
        c = sgemmlab.matmul(a, b)
        assert c.shape == torch.matmul(a, b).shape


def test_nan_and_inf_propagate():
    import torch

    a = torch.rand(64, 48, device="cuda") + 0.5  # positive: Inf * a stays Inf
    b = torch.rand(48, 40, device="cuda") + 0.5
    a[3, 7] = NAN
    b[11, 5] = float("inf")
    c = sgemmlab.matmul(a, b)
    torch.cuda.synchronize()
    bad = ~torch.isfinite(c)
    expect = torch.zeros_like(bad)
    expect[3, :] = True
    expect[:, 5] = True
    assert torch.equal(bad, expect)
    assert bool(torch.isnan(c[3]).all())
    assert bool(torch.isinf(c[:3, 5]).all()) and bool((c[:3, 5] > 0).all())


def test_sgemm_into_a_tensor_saved_for_backward_is_caught_by_autograd():
    import torch

    w = torch.rand(8, 8, device="cuda", requires_grad=True)
    out = torch.rand(8, 8, device="cuda")
    loss = (w * out).sum()  # saves out for the backward
    a = torch.rand(8, 8, device="cuda")
    sgemmlab.sgemm(a, a, out=out)  # changes out in place: its version moves on
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_matmul_out_hot_path_bumps_the_version_and_is_caught_by_autograd():
    """The out= hot path (the bound launch found by one lookup) bumps out's version like
    the general path: a tensor saved for backward then fails loudly."""
    import torch

    a = torch.rand(8, 8, device="cuda")
    out = torch.rand(8, 8, device="cuda")
    sgemmlab.matmul(a, a, out=out)  # the general path: checks, binds, fills the hot cache
    w = torch.rand(8, 8, device="cuda", requires_grad=True)
    loss = (w * out).sum()
    v = out._version
    assert sgemmlab.matmul(a, a, out=out) is out  # the hot path
    assert out._version > v
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_hot_path_with_inference_tensors_and_in_place_metadata_changes():
    """Inference-mode outputs (no version counter), and a tensor whose strides change in
    place (same pointer, same shape): the hot path must neither crash nor reuse a launch
    bound for the old strides."""
    import torch

    with torch.inference_mode():
        a = torch.rand(96, 96, device="cuda") * 2 - 1
        b = torch.rand(96, 96, device="cuda") * 2 - 1
        out = torch.full((96, 96), NAN, device="cuda")
        for _ in range(3):
            assert sgemmlab.matmul(a, b, out=out) is out
            assert_matches(out, a.double() @ b.double(), 96)
    x = torch.rand(96, 96, device="cuda") * 2 - 1
    y = torch.rand(96, 96, device="cuda") * 2 - 1
    out = torch.full((96, 96), NAN, device="cuda")
    for i in range(6):
        x.t_()  # in place: the pointer and shape stay, the strides swap
        out.fill_(NAN)
        assert sgemmlab.matmul(x, y, out=out) is out
        assert_matches(out, x.double() @ y.double(), 96)
        assert_matches(sgemmlab.matmul(x, y), x.double() @ y.double(), 96)


def test_hot_path_options_as_passed():
    """Keys hold the options as passed, and what the general path refuses stays refused
    after the same tensors were served: deterministic=1 (equal to True, and hashed alike,
    so the hot path's key would have taken it) and a precision that is not one."""
    import torch

    a = torch.rand(64, 300, device="cuda") * 2 - 1
    b = torch.rand(300, 50, device="cuda") * 2 - 1
    out = torch.full((64, 50), NAN, device="cuda")
    for det in (True, False, True):
        assert sgemmlab.matmul(a, b, out=out, deterministic=det) is out
        assert_matches(out, a.double() @ b.double(), 300)
    for det in (1, 0, "no"):
        with pytest.raises(TypeError, match="^deterministic must be True or False"):
            sgemmlab.matmul(a, b, out=out, deterministic=det)
        with pytest.raises(TypeError, match="^deterministic must be True or False"):
            sgemmlab.matmul(a, b, deterministic=det)
    for _ in range(2):
        with pytest.raises(ValueError, match="precision"):
            sgemmlab.matmul(a, b, out=out, precision="fp64")
        with pytest.raises(ValueError, match="precision"):
            sgemmlab.matmul(a, b, precision="fp64")
        with pytest.raises(ValueError, match="precision"):
            sgemmlab.matmul(a, b, out=out, precision=["ieee"])  # unhashable


def test_the_hot_path_runs_on_torchs_current_stream():
    """Second call of a shape (the cached plan): still behind the caller's stream's work."""
    import torch

    a, b = torch.rand(67, 33, device="cuda"), torch.rand(33, 45, device="cuda")
    sgemmlab.matmul(a, b)  # plans the shape
    A, B = torch.zeros_like(a), torch.zeros_like(b)
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        A.copy_(a)
        B.copy_(b)
        C = sgemmlab.matmul(A, B)
    side.synchronize()
    assert_matches(C, a.double() @ b.double(), 33)


# ---------------------------------------------------------------------------------------
# Determinism, threads and streams
# ---------------------------------------------------------------------------------------
def _plans_for(shape, deterministic):
    # product.fast_key: (shapes, strides, dtypes, devices, aligned, deterministic, precision)
    M, N, K = shape
    return [p for key, p in list(plan.PLANS.fast.items())
            if key[-2] == deterministic and key[-1] == "ieee" and p.kind == "gemm"
            and (p.gemm.M, p.gemm.N, p.gemm.K) in ((M, N, K), (N, M, K))]


@pytest.mark.parametrize("shape", [(1024, 1024, 1024), (256, 256, 8192), (512, 512, 4096),
                                   (333, 517, 2049), (64, 64, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_deterministic_results_are_bit_identical_run_to_run(shape):
    import torch

    M, N, K = shape
    a = torch.rand(M, K, device="cuda") * 2 - 1
    b = torch.rand(K, N, device="cuda") * 2 - 1
    first = sgemmlab.matmul(a, b, deterministic=True)
    plans = _plans_for(shape, True)
    assert plans and all(p.rung.deterministic(p.config) for p in plans)
    noise = torch.cuda.Stream()  # other work on the GPU changes timing, not bits
    for i in range(10):
        with torch.cuda.stream(noise):
            torch.rand(2048, 2048, device="cuda") @ torch.rand(2048, 2048, device="cuda")
        again = sgemmlab.matmul(a, b, deterministic=True)
        assert torch.equal(first.view(torch.int32), again.view(torch.int32)), f"run {i}"
    assert_matches(first, a.double() @ b.double(), K)
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        via_op = torch.ops.sgemmlab.matmul(a, b)
    finally:
        torch.use_deterministic_algorithms(prev)
    assert torch.equal(first.view(torch.int32), via_op.view(torch.int32))


def test_two_threads_on_two_streams():
    """Each thread works on its own stream (Stream-K shapes included: each stream has its
    own workspace); results right, no error, no hang."""
    import torch

    shapes = [(1024, 1024, 1024), (256, 256, 4096), (67, 45, 33), (512, 384, 640)]
    done = []

    def worker(index):
        stream = torch.cuda.Stream()
        results = []
        with torch.cuda.stream(stream):
            for i in range(24):
                M, N, K = shapes[(i + index) % len(shapes)]
                a = torch.rand(M, K, device="cuda") * 2 - 1
                b = torch.rand(K, N, device="cuda") * 2 - 1
                bt = b.t().contiguous().t() if i % 2 else b  # column-major half the time
                results.append((sgemmlab.matmul(a, bt), a, b, K))
        stream.synchronize()
        for c, a, b, K in results:
            assert_matches(c, a.double() @ b.double(), K)
        done.append(index)

    run_threads(worker, 2, timeout=300)
    assert sorted(done) == [0, 1]


def run_threads(worker, count: int, timeout: float) -> None:
    """worker(0) ... worker(count - 1), each on a thread of its own, all at once: fails if
    one hangs past `timeout` or raises (the first exception is reported)."""
    errors = []

    def guarded(index):
        try:
            worker(index)
        except Exception as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, repr(errors[0])


# ---------------------------------------------------------------------------------------
# torch: the op, autograd, torch.compile, CUDA graphs
# ---------------------------------------------------------------------------------------
OP_SHAPES = [((67, 33), (33, 45)), ((3, 67, 33), (33, 45)), ((67, 33), (3, 33, 45)),
             ((3, 67, 33), (3, 33, 45)), ((1, 67, 33), (3, 33, 45))]


def _ids(shapes):
    return "@".join("x".join(map(str, s)) for s in shapes)


def _cuda_operands(a_shape, b_shape, transposed=False, requires_grad=False):
    import torch

    def make(shape):
        t = torch.rand(*shape[:-2], shape[-1], shape[-2], device="cuda").mT if transposed \
            else torch.rand(*shape, device="cuda")
        return (t * 2 - 1).requires_grad_(requires_grad)

    return make(a_shape), make(b_shape)


@pytest.mark.parametrize("transposed", [False, True], ids=["rowmajor", "transposed"])
@pytest.mark.parametrize("requires_grad", [False, True], ids=["nograd", "grad"])
@pytest.mark.parametrize("shapes", OP_SHAPES, ids=_ids)
def test_opcheck_on_cuda(shapes, requires_grad, transposed):
    import torch

    a, b = _cuda_operands(*shapes, transposed=transposed, requires_grad=requires_grad)
    torch.library.opcheck(torch.ops.sgemmlab.matmul.default, (a, b), {"deterministic": False})


@pytest.mark.parametrize("transposed", [False, True], ids=["rowmajor", "transposed"])
@pytest.mark.parametrize("shapes", OP_SHAPES, ids=_ids)
def test_gradients_match_float64(shapes, transposed):
    import torch

    a, b = _cuda_operands(*shapes, transposed=transposed, requires_grad=True)
    c = sgemmlab.matmul(a, b)  # requires grad: the op
    assert c.grad_fn is not None
    g = torch.rand_like(c)
    ga, gb = torch.autograd.grad(c, (a, b), g)
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    ra, rb = torch.autograd.grad(a64 @ b64, (a64, b64), g.double())
    K = a.shape[-1]
    assert_matches(c, (a64 @ b64).detach(), K)
    assert_matches(ga, ra, c.shape[-1] * max(c.shape[0] if c.dim() == 3 else 1, 1))
    assert_matches(gb, rb, c.shape[-2] * max(c.shape[0] if c.dim() == 3 else 1, 1))


def test_gradient_of_a_sum_takes_an_expanded_gradient():
    """d(sum)/dc is an expanded tensor (stride 0): the op copies what the kernels cannot
    read instead of refusing it."""
    import torch

    a, b = _cuda_operands((40, 30), (30, 20), requires_grad=True)
    sgemmlab.matmul(a, b).sum().backward()
    assert_matches(a.grad, torch.ones(40, 20, device="cuda").double() @ b.detach().double().t(),
                   20)


def test_compile_fullgraph_inductor_forward_and_backward():
    import torch

    torch._dynamo.reset()

    def f(x, w1, w2):
        return sgemmlab.matmul(torch.relu(sgemmlab.matmul(x, w1)), w2)

    compiled = torch.compile(f, fullgraph=True)
    x = torch.rand(4, 64, 32, device="cuda") * 2 - 1
    w1 = (torch.rand(32, 48, device="cuda") * 2 - 1).requires_grad_()
    w2 = (torch.rand(48, 16, device="cuda") * 2 - 1).requires_grad_()
    y = compiled(x, w1, w2)
    ref = torch.relu(x.double() @ w1.detach().double()) @ w2.detach().double()
    assert_matches(y.detach(), ref, 48)
    y.sum().backward()
    assert w1.grad is not None and w2.grad is not None
    assert bool(torch.isfinite(w1.grad).all()) and bool(torch.isfinite(w2.grad).all())


def _streamk_shape():
    """A shape dispatch sends to a rung with a workspace (Stream-K / split-K), if any."""
    from sgemmlab.dispatch import choose
    from sgemmlab.runtime.device import gpu_info

    info = gpu_info()
    for shape in [(1024, 1024, 1024), (256, 256, 8192), (512, 512, 4096), (1536, 1536, 1536)]:
        c = choose(*shape, gpu_name=info.name, sm_count=info.sm_count)
        if registry.rung(c.rung).supports("streamk") and "data-parallel" not in c.decomposition:
            return shape
    return None


@pytest.mark.parametrize("kind", ["data-parallel", "stream-k"])
def test_cuda_graph_capture_and_replay(kind):
    """Warm up, capture, then replay with new inputs. Data-parallel: torch's recipe as it
    stands (warm-up on a side stream, capture on torch's capture stream). Stream-K: warm-up
    on the stream the capture then uses (docs/api.md: the workspace is per stream, and a
    capture cannot allocate it)."""
    import torch

    shape = (64, 64, 64) if kind == "data-parallel" else _streamk_shape()
    if shape is None:
        pytest.skip("dispatch sends no test shape to Stream-K on this GPU")
    M, N, K = shape
    a = torch.rand(M, K, device="cuda")
    b = torch.rand(K, N, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            sgemmlab.matmul(a, b)
            torch.ops.sgemmlab.matmul(a, b.t().contiguous().t())
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side if kind == "stream-k" else None):
        c = sgemmlab.matmul(a, b)
        d = torch.ops.sgemmlab.matmul(a, b.t().contiguous().t())
    for _ in range(3):
        a.copy_(torch.rand(M, K, device="cuda") * 2 - 1)
        b.copy_(torch.rand(K, N, device="cuda") * 2 - 1)
        c.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        assert_matches(c, ref, K)
        assert_matches(d, ref, K)


@pytest.mark.parametrize("kind", ["data-parallel", "stream-k"])
def test_compile_reduce_overhead_uses_cuda_graphs(kind):
    """torch.compile's CUDA graphs pick their own streams: this is the case the per-stream
    workspace of Stream-K must survive without the caller's help."""
    import torch

    shape = (64, 80, 96) if kind == "data-parallel" else _streamk_shape()
    if shape is None:
        pytest.skip("dispatch sends no test shape to Stream-K on this GPU")
    M, N, K = shape
    torch._dynamo.reset()
    f = torch.compile(lambda x, w: sgemmlab.matmul(x, w) + 1, mode="reduce-overhead",
                      fullgraph=True)
    w = torch.rand(K, N, device="cuda")
    for _ in range(4):
        x = torch.rand(M, K, device="cuda")
        y = f(x, w)
        assert_matches(y.clone(), x.double() @ w.double() + 1, K)


# ---------------------------------------------------------------------------------------
# CuPy, and the overhead measurement
# ---------------------------------------------------------------------------------------
def test_cupy_batches_and_transposed_views():
    cupy = pytest.importorskip("cupy")
    import torch

    a = cupy.random.rand(3, 40, 30, dtype=cupy.float32)
    b = cupy.random.rand(50, 30, dtype=cupy.float32).T  # column-major
    c = sgemmlab.matmul(a, b)
    cupy.cuda.get_current_stream().synchronize()
    assert isinstance(c, cupy.ndarray) and c.shape == (3, 40, 50)
    ref = torch.as_tensor(a, device="cuda").double() @ torch.as_tensor(b, device="cuda").double()
    assert_matches(torch.as_tensor(c, device="cuda"), ref, 30)


def test_overhead_measurement_writes_a_results_file(tmp_path, monkeypatch):
    from sgemmlab.bench import results
    from sgemmlab.bench.probes import overhead

    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    run, path = overhead.run(size=128, calls=20, repeats=3)
    data = results.load(path)
    assert data["kind"] == "overhead" and path.name.startswith("overhead-")
    paths = {r["path"]: r for r in data["records"]}
    assert {"torch.matmul", "sgemmlab.matmul"} <= set(paths)
    assert all(r["median_us"] > 0 for r in paths.values())
    assert math.isclose(data["summary"]["ratio"], paths["sgemmlab.matmul"]["median_us"]
                        / paths["torch.matmul"]["median_us"])


@pytest.mark.parametrize("precision, shape", [("ieee", (256, 4096, 4096)),
                                              ("tf32x3", (300, 200, 1001))])
def test_free_workspaces_gives_memory_back_and_the_same_calls_still_match_float64(
        precision, shape):
    """A Stream-K product (rung 24 at the table's build: counters and fix-up in the
    workspace) and a tf32x3 one (its operand copies there): free_workspaces() returns what
    they held, and the same calls, through the hot path's bound launches, allocate again and
    still match float64 (an output poisoned with NaN before each call)."""
    import torch

    M, N, K = shape
    a = torch.rand(M, K, device="cuda") * 2 - 1
    b = torch.rand(K, N, device="cuda") * 2 - 1
    out = torch.empty(M, N, device="cuda")
    ref = a.double() @ b.double()
    for step in range(4):  # general path, hot path, hot path after a free, after two
        out.fill_(NAN)
        sgemmlab.matmul(a, b, out=out, precision=precision)
        torch.cuda.synchronize()
        assert_matches(out, ref, K)
        if step >= 1:
            assert sgemmlab.free_workspaces() > 0, f"step {step}: the call held no workspace"
    assert sgemmlab.free_workspaces() == 0


@pytest.mark.parametrize("shape", [(1, 1, 1), (257, 131, 67), (1000, 1000, 1000)])
def test_a_configuration_without_a_kernel_runs_the_top_of_the_ladder_for_this_gpu(shape):
    """`matmul(config=...)` without `kernel` names registry.best(arch): rung 24 on sm_90
    (rung 14's space, the steady walk and the operand-order pass), rung 14 elsewhere; the
    product matches float64 at ragged shapes, its output poisoned first."""
    import torch

    from sgemmlab.runtime.device import gpu_info

    M, N, K = shape
    a = torch.rand(M, K, device="cuda") * 2 - 1
    b = torch.rand(K, N, device="cuda") * 2 - 1
    out = torch.full((M, N), float("nan"), device="cuda")
    top = registry.best(gpu_info(0).arch)
    cfg = dict(top.default(gpu_info(0).name))
    got = sgemmlab.matmul(a, b, out=out, config=cfg)
    g = plan.describe(((M, K), (K, 1)), ((K, N), (N, 1)), ((M, N), (N, 1)))
    assert plan.named_rung(g, 0, None, cfg, False)[0].label == top.label
    assert_matches(got, reference(a, b, None, 1.0, 0.0), K)
