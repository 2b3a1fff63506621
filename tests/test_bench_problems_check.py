"""The correctness gate over batches and layouts (check.py), on CPU tensors: the operands come
in the problem's layout and batch, every product is compared with float64, and a GEMM that
ignores the batch or misreads a layout fails. (On the GPU: test_bench_problems_gpu.py.)"""

from __future__ import annotations

import pytest

from sgemmlab.bench.check import check_gemm, random_operands
from sgemmlab.bench.problems import Problem

PROBLEMS = [Problem(33, 17, 9), Problem(33, 17, 9, 3), Problem(33, 17, 9, layout="TN"),
            Problem(33, 17, 9, 2, "NT"), Problem(1, 17, 9, 2, "TT"), Problem(33, 1, 9, 2, "TT")]


@pytest.fixture(autouse=True)
def torch():
    return pytest.importorskip("torch")


def right(A, B, C, alpha, beta):
    C.copy_(alpha * (A @ B) + (beta * C if beta else 0))


def check(fn, p: Problem, **kw):
    return check_gemm(fn, p.M, p.N, p.K, batch=p.batch, layout=p.layout, device="cpu", **kw)


@pytest.mark.parametrize("p", PROBLEMS, ids=str)
@pytest.mark.parametrize("alpha, beta", [(1.0, 0.0), (0.75, -1.25)])
def test_a_right_gemm_passes_in_every_batch_and_layout(p, alpha, beta):
    res = check(right, p, alpha=alpha, beta=beta)
    assert res.ok, res


@pytest.mark.parametrize("p", [p for p in PROBLEMS if p.batch > 1], ids=str)
def test_a_gemm_that_computes_only_the_first_product_fails(p):
    def first_only(A, B, C, alpha, beta):
        C[0].copy_(alpha * (A[0] @ B[0]) + (beta * C[0] if beta else 0))

    res = check(first_only, p)
    assert not res.ok and "NaN" in res.reason  # the others stay poisoned
    res = check(first_only, p, alpha=0.75, beta=-1.25)
    assert not res.ok and "exceeds" in res.reason


@pytest.mark.parametrize("p", [p for p in PROBLEMS if p.trans_a and p.M > 1], ids=str)
def test_a_gemm_that_reads_a_column_major_a_as_row_major_fails(torch, p):
    def ignores_strides(A, B, C, alpha, beta):
        rows, cols = A.shape[-2:]
        strides = ((rows * cols,) if A.dim() == 3 else ()) + (cols, 1)
        wrong = torch.as_strided(A, A.shape, strides)  # the storage, read row-major
        C.copy_(alpha * (wrong @ B) + (beta * C if beta else 0))

    res = check(ignores_strides, p)
    assert not res.ok, res


def test_the_operands_are_stored_as_the_problem_says():
    A, B, C = random_operands(6, 5, 4, batch=3, layout="TN", device="cpu")
    assert tuple(A.shape) == (3, 6, 4) and A.stride() == (24, 1, 6)  # column-major
    assert tuple(B.shape) == (3, 4, 5) and B.stride() == (20, 5, 1)  # row-major
    assert tuple(C.shape) == (3, 6, 5) and C.isnan().all()
    A, B, C = random_operands(6, 5, 4, layout="NT", beta=1.0, device="cpu")
    assert A.stride() == (4, 1) and B.stride() == (1, 4)
    assert not C.isnan().any() and C.abs().max() <= 1


def test_the_plain_case_draws_as_it_always_did(torch):
    """check_gemm(fn, M, N, K): A then B then C from the generator, row-major (so a seeded
    check sees the same operands as before batches existed)."""
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    A, B, C = random_operands(7, 6, 5, beta=1.0, generator=g1, device="cpu")
    assert torch.equal(A, torch.rand(7, 5, generator=g2) * 2 - 1)
    assert torch.equal(B, torch.rand(5, 6, generator=g2) * 2 - 1)
    assert torch.equal(C, torch.rand(7, 6, generator=g2) * 2 - 1)


@pytest.mark.parametrize("p", PROBLEMS, ids=str)
def test_the_cublas_gate_function_handles_batches_and_layouts(p):
    """baselines.cublas_gemm (cuBLAS's side of every check) is plain torch: on CPU tensors it
    must give the right answer for a batch (torch.baddbmm when beta != 0) and any layout."""
    from sgemmlab.bench.baselines import cublas_gemm

    for alpha, beta in ((1.0, 0.0), (0.75, -1.25)):
        res = check(cublas_gemm, p, alpha=alpha, beta=beta)
        assert res.ok, (p, alpha, beta, res)
