"""Array interop and streams on a GPU: CuPy arrays, objects that speak only DLPack or only
__cuda_array_interface__, and the caller's current stream."""

from __future__ import annotations

import pytest

import sgemmlab
from sgemmlab.bench.check import check_result
from sgemmlab.bench.fuzz import OnlyDLPack  # speaks DLPack and nothing else

pytestmark = pytest.mark.gpu

M, N, K = 67, 45, 33


def _operands():
    import torch

    a = torch.rand(M, K, device="cuda") * 2 - 1
    b = torch.rand(K, N, device="cuda") * 2 - 1
    return a, b, (a.double() @ b.double())


def _assert_close(c, ref):
    import torch

    res = check_result(torch.as_tensor(c, device="cuda"), ref, K)
    assert res.ok, res.reason


class OnlyCAI:
    """Speaks __cuda_array_interface__ and nothing else."""

    def __init__(self, t):
        self._t = t
        self.__cuda_array_interface__ = t.__cuda_array_interface__


@pytest.mark.parametrize("wrap", [OnlyCAI, OnlyDLPack], ids=["cai", "dlpack"])
def test_foreign_arrays_with_out(wrap):
    import torch

    a, b, ref = _operands()
    c = torch.full((M, N), float("nan"), device="cuda")
    out = sgemmlab.matmul(wrap(a), wrap(b), out=wrap(c))
    torch.cuda.synchronize()
    assert isinstance(out, wrap)
    _assert_close(c, ref)


def test_foreign_arrays_without_out_are_refused_clearly():
    a, b, _ = _operands()
    with pytest.raises(sgemmlab.OperandError, match="pass `out`"):
        sgemmlab.matmul(OnlyCAI(a), OnlyCAI(b))


def test_cupy_arrays_give_a_cupy_result():
    cupy = pytest.importorskip("cupy")
    import torch

    a, b, ref = _operands()
    torch.cuda.synchronize()  # a non-blocking stream does not wait for torch's
    ca, cb = cupy.asarray(a), cupy.asarray(b)  # zero-copy through CAI
    with cupy.cuda.Stream(non_blocking=True) as s:
        c = sgemmlab.matmul(ca, cb)
        s.synchronize()
    assert isinstance(c, cupy.ndarray) and c.dtype == cupy.float32 and c.shape == (M, N)
    _assert_close(torch.as_tensor(c, device="cuda"), ref)


def test_runs_on_torchs_current_stream():
    """The product is enqueued behind work already on the caller's stream: if it ran on any
    other stream, it would read A and B before the slow copies below had written them."""
    import torch

    a, b, ref = _operands()
    A = torch.zeros_like(a)
    B = torch.zeros_like(b)
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time before the copies
        A.copy_(a)
        B.copy_(b)
        C = sgemmlab.matmul(A, B)
    side.synchronize()
    _assert_close(C, ref)
