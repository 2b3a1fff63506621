"""Nothing silently wrong, on the GPU: views with torch's negative bit, DLPack producers with
work still in flight (CuPy on its own stream, a pending JAX result), operands of two
libraries, α = 0 with NaN and Inf, sparse tensors, and a stream destroyed under a
workspace. Each was a wrong answer, a crash or an unclear error before (the CPU halves
are in tests/test_trust_api.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import sgemmlab
from sgemmlab import OperandError
from sgemmlab.bench.check import check_result
from sgemmlab.bench.fuzz import OnlyDLPack

pytestmark = pytest.mark.gpu


def _close(c, ref, K, **terms):
    import torch

    res = check_result(torch.as_tensor(c, device="cuda"), ref, K, **terms)
    assert res.ok, res.reason


# -- torch's negative bit ---------------------------------------------------------------------
@pytest.mark.parametrize("M, N, K", [(1, 1, 1), (97, 1, 31), (64, 33, 17), (251, 256, 129)])
def test_negative_views_are_read_as_torch_sees_them(M, N, K):
    """z.conj().imag (a column with the negative bit) was read as if positive: results of
    the wrong sign. Every route: a new output, out=, sgemm with beta, and the hot path after
    a plain call of the same shape and strides (its cached plan must not serve the view)."""
    import torch

    z = torch.randn(M, K, dtype=torch.complex64, device="cuda")
    a = z.conj().imag if K == 1 else torch._neg_view(torch.randn(M, K, device="cuda"))
    b = torch._neg_view(torch.randn(K, N, device="cuda"))
    assert a.is_neg() and b.is_neg()
    ref = a.double() @ b.double()  # torch's view of the values: negated
    plain = a.resolve_neg().clone()
    for _ in range(2):  # the second call goes through the hot path's caches
        sgemmlab.matmul(plain, b.resolve_neg())
        _close(sgemmlab.matmul(a, b), ref, K)
        out = torch.full((M, N), float("nan"), device="cuda")
        _close(sgemmlab.matmul(a, b, out=out), ref, K)
    c = torch.randn(M, N, device="cuda")
    expect = 0.5 * ref + 2.0 * c.double()
    # the error is relative to the terms, not to their sum: at 1 x 1 x 1 the two can cancel
    # to a few thousandths, where FP32's rounding of terms near 1 is 3e-6 of the sum
    terms = {"alpha_ab": 0.5 * ref, "beta_c": 2.0 * c.double()}
    sgemmlab.sgemm(a, b, c, alpha=0.5, beta=2.0)
    _close(c, expect, K, **terms)


def test_a_negative_view_is_never_written_through():
    import torch

    a, b = torch.randn(8, 4, device="cuda"), torch.randn(4, 6, device="cuda")
    out = torch._neg_view(torch.zeros(8, 6, device="cuda"))
    with pytest.raises(OperandError, match=r"^out: a view with torch's negative bit"):
        sgemmlab.matmul(a, b, out=out)
    c = torch._neg_view(torch.zeros(8, 6, device="cuda"))
    with pytest.raises(OperandError, match=r"^c: a view with torch's negative bit"):
        sgemmlab.sgemm(a, b, c)


# -- producers with work in flight --------------------------------------------------------------
def _slow_then(cupy, dst, src):
    """On CuPy's current stream: tens of milliseconds of work, then dst = src (so a reader
    that does not wait for the stream sees dst's old contents)."""
    x = cupy.full((2048, 2048), 1e-4, dtype=cupy.float32)
    for _ in range(40):
        x = x @ x
    dst[...] = src + x[: src.shape[0], : src.shape[1]] * 0  # depends on the slow chain


def test_dlpack_operands_wait_for_their_producers_stream():
    """sgemmlab passed stream=-1 to __dlpack__ ("do not synchronise"), so it read an operand
    that CuPy, on a non-blocking stream of its own, had not written yet. The call, whose
    stream here is the legacy default (the operands speak only DLPack), now hands that
    stream to each producer, which orders its pending writes before it."""
    cupy = pytest.importorskip("cupy")
    M, N, K = 300, 200, 150
    rng = cupy.random.default_rng(1)
    a_src = rng.random((M, K), dtype=cupy.float32) - 0.5
    b_src = rng.random((K, N), dtype=cupy.float32) - 0.5
    cupy.cuda.Device().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        a = cupy.zeros((M, K), dtype=cupy.float32)
        b = cupy.zeros((K, N), dtype=cupy.float32)
        c = cupy.full((M, N), cupy.nan, dtype=cupy.float32)
        _slow_then(cupy, a, a_src)
        _slow_then(cupy, b, b_src)
        sgemmlab.matmul(OnlyDLPack(a), OnlyDLPack(b), out=OnlyDLPack(c))
    cupy.cuda.Device().synchronize()
    import torch

    ref = torch.as_tensor(a_src, device="cuda").double() @ torch.as_tensor(
        b_src, device="cuda").double()
    _close(c, ref, K)


def test_a_pending_jax_result_is_waited_for():
    """A JAX jit result is handed over before it is computed; with stream=-1, 8 of 10 calls
    read it too early. The product runs on torch's stream (out is a torch tensor), which
    JAX now makes wait for the result."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    import numpy as np
    import torch

    if not any(d.platform in ("gpu", "cuda") for d in jax.devices()):
        pytest.skip("JAX sees no GPU here")

    @jax.jit
    def slow(x, a):
        for _ in range(30):
            x = jnp.tanh(x @ x)
        return a + 0 * x[: a.shape[0], : a.shape[1]]

    M, N, K = 256, 192, 320
    rng = np.random.default_rng(2)
    a_np = (rng.random((M, K)) - 0.5).astype(np.float32)
    b = torch.rand(K, N, device="cuda") - 0.5
    x = jnp.ones((2048, 2048), jnp.float32) * 1e-3
    slow(x, jnp.asarray(a_np)).block_until_ready()  # compiled before the timed calls
    for _ in range(5):
        pending = slow(x, jnp.asarray(a_np))  # returns before it is computed
        out = torch.full((M, N), float("nan"), device="cuda")
        sgemmlab.matmul(pending, b, out=out)
        torch.cuda.synchronize()
        ref = torch.as_tensor(a_np, device="cuda").double() @ b.double()
        _close(out, ref, K)


def test_a_torch_operand_beside_a_cupy_out_follows_torchs_stream():
    """Operands of two libraries: the call runs on out's library's stream (CuPy's here), and
    a torch operand still being written on torch's stream is waited for."""
    cupy = pytest.importorskip("cupy")
    import torch

    M, N, K = 128, 96, 200
    a_val = torch.rand(M, K, device="cuda") * 2 - 1
    b = torch.rand(K, N, device="cuda") * 2 - 1
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        a = torch.zeros(M, K, device="cuda")
        x = torch.full((2048, 2048), 1e-4, device="cuda")  # decays to 0
        for _ in range(40):
            x = x @ x
        a.copy_(a_val + 0 * x[:M, :K])
        c = cupy.full((M, N), cupy.nan, dtype=cupy.float32)
        sgemmlab.matmul(a, b, out=c)
    torch.cuda.synchronize()
    cupy.cuda.Device().synchronize()
    _close(c, a_val.double() @ b.double(), K)


# -- alpha = 0, sparse -------------------------------------------------------------------------
@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_alpha_zero_ignores_nan_and_inf_in_a_and_b(poison):
    import torch

    a, b = torch.randn(33, 17, device="cuda"), torch.randn(17, 45, device="cuda")
    a[3, 4], b[5, 6] = poison, poison
    c = torch.randn(33, 45, device="cuda")
    expect = 1.5 * c
    for kernel in (None, 14):
        got = c.clone()
        sgemmlab.sgemm(a, b, got, alpha=0.0, beta=1.5, kernel=kernel)
        assert torch.equal(got, expect)


@pytest.mark.parametrize("make", ["to_sparse", "to_sparse_csr"])
def test_sparse_cuda_tensors_are_refused_naming_the_operand(make):
    import torch

    s = getattr(torch.eye(8, device="cuda"), make)()
    with pytest.raises(OperandError, match=r"^b: a sparse_(coo|csr) tensor"):
        sgemmlab.matmul(torch.ones(8, 8, device="cuda"), s)


# -- a stream destroyed under its workspace ------------------------------------------------------
DEAD_STREAM = textwrap.dedent("""
    import gc, sys
    import cupy
    import sgemmlab
    from sgemmlab.runtime import workspace

    STREAM_K = dict(sgemmlab.registry.rung(14).seed)  # Stream-K, fixed-order fix-up
    a = cupy.random.rand(256, 16384, dtype=cupy.float32)
    b = cupy.random.rand(16384, 256, dtype=cupy.float32)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:  # a Stream-K product: it takes a workspace for this stream
        c = sgemmlab.matmul(a, b, kernel=14, config=STREAM_K)
        s.synchronize()
    handle = s.ptr
    assert any(k[1] == handle for k in workspace._spaces), "no workspace was taken"
    del s, c
    gc.collect()  # CuPy destroys the stream
    t = cupy.cuda.Stream(non_blocking=True)
    with t:  # a new stream (it may get the same handle) gets a workspace of its own
        c = sgemmlab.matmul(a, b, kernel=14, config=STREAM_K)
        t.synchronize()
    ref = a.astype(cupy.float64) @ b.astype(cupy.float64)
    assert float(abs(c - ref).max() / abs(ref).max()) < 1e-5
    assert not workspace._dead, "the dead stream's buffer was not freed"
    freed = sgemmlab.free_workspaces()
    print("freed", freed)
""")


def test_a_destroyed_stream_never_crashes_a_later_call(tmp_path):
    """free_workspaces() after the CuPy stream that had a workspace was destroyed: the
    process died (exit 139, the buffer freed on the dead stream)."""
    pytest.importorskip("cupy")
    script = tmp_path / "dead_stream.py"
    script.write_text(DEAD_STREAM)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env=os.environ.copy())
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert "freed" in proc.stdout


# -- subnormal partial sums ------------------------------------------------------------------
# Stream-K's atomic fix-ups added partial tiles with red/atom.add.f32, which flushes subnormal
# operands and results to zero (PTX ISA, atom: "flushes subnormal inputs and results to
# sign-preserving zero"). On rows whose products are subnormal that lost whole partial sums:
# `sgemmlab accuracy -d subnormal` on the H200 measured 56,456 times cuBLAS's largest error at
# 256 x 192 x 16384 with FIXUP=1 and 2, and cuBLAS's own with the ordered fix-up FIXUP=0
# (results/nvidia-h200/accuracy/20261204T162629Z.json). Rung 14 now adds a partial below
# 2^-100 by compare-and-swap (an IEEE add): every fix-up, and dispatch's choice, must match
# cuBLAS there.
_SUBNORMAL = [pytest.param("ieee", id="dispatch"),
              pytest.param("14:FIXUP=0", id="ordered-fixup"),
              pytest.param("14:FIXUP=1", id="atomic-fixup"),
              pytest.param("14:FIXUP=2", id="atomic-into-C")]


@pytest.mark.parametrize("who", _SUBNORMAL)
def test_subnormal_partial_sums_survive_the_fix_up(who):
    from sgemmlab.bench import accuracy as acc
    from sgemmlab.runtime.device import gpu_info

    entrant = (acc.contenders([who]) if who == "ieee" else
               [*acc.contenders([acc.BASELINE]), acc.configured(who, gpu_info().name)])
    records = acc.measure_case(acc.case("subnormal", 256, 192, 16384), entrant)
    mine = [r for r in records if r["candidate"] != acc.BASELINE]
    assert mine and all(r["status"] == "ok" for r in mine), mine
    assert all(r["passed"] for r in mine), [(r["candidate"], r["vs_cublas_max"]) for r in mine]


@pytest.mark.parametrize("fixup", [1, 2])
def test_a_subnormal_beta_term_survives_the_atomic_fix_up(fixup):
    """`sgemmlab fuzz` found it (2049 x 2049 x 511, alpha = 0, beta = 1e-40, rung 14 with
    FIXUP=2): the partial tiles' zeros were added by red.add, which flushed the subnormal
    beta * C already in C. Now C must hold beta * C exactly, as FP32 gives it."""
    import numpy as np
    import torch

    from sgemmlab import registry
    from sgemmlab.runtime.device import gpu_info

    M, N, K = 2049, 2049, 511
    cfg = {**registry.rung(14).default(gpu_info().name), "FIXUP": fixup}
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c0 = torch.randn(M, N, device="cuda")
    c = c0.clone()
    sgemmlab.sgemm(a, b, c, alpha=0.0, beta=1e-40, kernel=14, config=cfg)
    want = np.float32(1e-40) * c0.cpu().numpy()
    assert (want != 0).mean() > 0.99
    np.testing.assert_array_equal(c.cpu().numpy(), want)
