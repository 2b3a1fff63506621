"""Rungs 13 and 14 beyond the row-major contract, on the GPU (skipped without one):
column-major operands, batches (with a broadcast operand), every decomposition of rung 14
and its fix-up modes, and bit-reproducibility where it is promised.

Launches go through Launcher.bind directly (the public API's own tests cover the layer
above). Every check is against float64 on fresh random inputs with a NaN-poisoned output.
"""

from __future__ import annotations

import pytest

from sgemmlab import registry
from sgemmlab.bench.check import check_result
from sgemmlab.registry import config_key
from sgemmlab.runtime.arrays import stream_for
from sgemmlab.runtime.launch import ConfigError, Launcher

pytestmark = pytest.mark.gpu

R13, R14 = registry.rung(13), registry.rung(14)
SHAPES = [(1, 1, 1), (67, 45, 33), (129, 257, 31), (300, 200, 1000), (68, 44, 36)]


def _default(r) -> dict:
    from sgemmlab.runtime.device import gpu_info

    return r.default(gpu_info().name)


def _operand(torch, rows: int, cols: int, col_major: bool, batch: int = 0, pad: int = 4):
    """(tensor, ld, batch stride): a (batch x) rows x cols operand, row- or column-major,
    rows padded by `pad` elements (pad = 4 keeps float4 alignment, 1 breaks it)."""
    inner, outer = (rows, cols) if col_major else (cols, rows)
    ld = inner + pad
    shape = (max(batch, 1), outer, ld)
    storage = torch.rand(*shape, device="cuda") * 2 - 1
    view = storage[:, :, :inner]
    view = view.transpose(1, 2) if col_major else view
    return (view if batch else view[0]), ld, outer * ld


def _stream(torch):
    return stream_for(int(torch.cuda.current_stream().cuda_stream), 0)


def _run(rung, cfg, A, lda, B, ldb, M, N, K, *, ta=False, tb=False, alpha=1.0, beta=0.0,
         C=None, batch=1, sa=0, sb=0):
    import torch

    shape = (batch, M, N) if batch > 1 else (M, N)
    if C is None:
        C = torch.full(shape, float("nan"), device="cuda")
    sc = M * N if batch > 1 else 0
    Launcher(rung, cfg).bind(M, N, K, alpha, A.data_ptr(), lda, B.data_ptr(), ldb, beta,
                             C.data_ptr(), N, _stream(torch), trans_a=ta, trans_b=tb,
                             batch=batch, stride_a=sa, stride_b=sb, stride_c=sc)()
    torch.cuda.synchronize()
    return C


def _assert_close(C, ref, K, what, alpha_ab=None, beta_c=None):
    """bench/check.py's metric and bound; pass the terms alpha AB and beta C0 when beta != 0
    (a result cancelled to almost nothing says nothing about the rounding)."""
    res = check_result(C, ref, K, alpha_ab=alpha_ab, beta_c=beta_c)
    assert res.ok, f"{what}: {res.reason}"


@pytest.mark.parametrize("pad", [4, 1], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)],
                         ids=["NN", "TN", "NT", "TT"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("rung", [R13, R14], ids=["r13", "r14"])
def test_column_major_operands(rung, shape, ta, tb, pad):
    import torch

    M, N, K = shape
    A, lda, _ = _operand(torch, M, K, ta, pad=pad)
    B, ldb, _ = _operand(torch, K, N, tb, pad=pad)
    C0 = torch.rand(M, N, device="cuda")
    ab, bc = 0.5 * (A.double() @ B.double()), -2.0 * C0.double()
    ref = ab + bc
    C = _run(rung, _default(rung), A, lda, B, ldb, M, N, K, ta=ta, tb=tb, alpha=0.5,
             beta=-2.0, C=C0.clone())
    _assert_close(C, ref, K, f"{rung.label} {'T' if ta else 'N'}{'T' if tb else 'N'} {shape}",
                  ab, bc)


@pytest.mark.parametrize("broadcast", ["none", "a", "b"])
@pytest.mark.parametrize("rung", [R13, R14], ids=["r13", "r14"])
def test_batches_in_one_launch(rung, broadcast):
    import torch

    M, N, K, batch = 67, 130, 45, 5
    A, lda, sa = _operand(torch, M, K, False, batch=0 if broadcast == "a" else batch)
    B, ldb, sb = _operand(torch, K, N, True, batch=0 if broadcast == "b" else batch)
    sa, sb = (0 if broadcast == "a" else sa), (0 if broadcast == "b" else sb)
    C = _run(rung, _default(rung), A, lda, B, ldb, M, N, K, tb=True, batch=batch, sa=sa, sb=sb)
    ref = A.double() @ B.double()
    _assert_close(C, ref.expand(batch, M, N), K, f"{rung.label} batch={batch} "
                  f"broadcast={broadcast}")


R14_CONFIGS = [pytest.param({**R14.seed, "SPLIT": s, "FIXUP": f}, id=f"split{s}-fixup{f}")
               for s in (0, 1, 2, 4) for f in (0, 1, 2)]


@pytest.mark.parametrize("shape", [(1, 1, 1), (67, 45, 33), (1000, 1000, 1000),
                                   (256, 256, 4099), (129, 2000, 300), (2048, 64, 96)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("cfg", R14_CONFIGS)
def test_every_decomposition_and_fixup(cfg, shape):
    import torch

    M, N, K = shape
    A, lda, _ = _operand(torch, M, K, False)
    B, ldb, _ = _operand(torch, K, N, False)
    for alpha, beta in ((1.0, 0.0), (0.75, -1.25)):
        C0 = torch.rand(M, N, device="cuda")
        ab, bc = alpha * (A.double() @ B.double()), beta * C0.double()
        ref = ab + bc
        C = _run(R14, cfg, A, lda, B, ldb, M, N, K, alpha=alpha, beta=beta,
                 C=C0.clone() if beta else None)
        _assert_close(C, ref, K, f"r14 {config_key(cfg)} {shape} a={alpha} b={beta}", ab, bc)
        # the workspace is left zeroed: the same launch again gives the same result
        C2 = _run(R14, cfg, A, lda, B, ldb, M, N, K, alpha=alpha, beta=beta,
                  C=C0.clone() if beta else None)
        _assert_close(C2, ref, K, f"r14 {config_key(cfg)} {shape} second launch", ab, bc)


@pytest.mark.parametrize("rung, cfg", [
    pytest.param(R13, None, id="r13"),
    pytest.param(R14, {**R14.seed, "SPLIT": 0, "FIXUP": 0}, id="r14-streamk-ordered"),
    pytest.param(R14, {**R14.seed, "SPLIT": 4, "FIXUP": 0}, id="r14-splitk-ordered"),
])
def test_deterministic_configurations_are_bit_reproducible(rung, cfg):
    import torch

    cfg = cfg or _default(rung)
    assert rung.deterministic(cfg)
    M, N, K = 1000, 1000, 1000
    A, lda, _ = _operand(torch, M, K, False)
    B, ldb, _ = _operand(torch, K, N, False)
    first = _run(rung, cfg, A, lda, B, ldb, M, N, K)
    for _ in range(5):
        again = _run(rung, cfg, A, lda, B, ldb, M, N, K)
        assert torch.equal(first.view(torch.int32), again.view(torch.int32))


def test_atomic_fixup_says_it_is_not_deterministic():
    assert not R14.deterministic({**R14.seed, "SPLIT": 0, "FIXUP": 1})
    assert not R14.deterministic({**R14.seed, "SPLIT": 4, "FIXUP": 2})
    assert R14.deterministic({**R14.seed, "SPLIT": 1, "FIXUP": 1})


def test_row_major_rungs_refuse_layouts_and_batches():
    import torch

    A = torch.rand(8, 8, device="cuda")
    r10 = registry.rung(10)
    with pytest.raises(ConfigError, match="row-major operands only"):
        _run(r10, _default(r10), A, 8, A, 8, 8, 8, 8, ta=True)
    with pytest.raises(ConfigError, match="one product per launch"):
        _run(r10, _default(r10), A, 8, A, 8, 8, 8, 8, batch=2)


def test_workspace_reuse_across_plans_and_fixups():
    """One stream's workspace serves launches with different plans: the counters and the
    atomic tiles must be zero whatever the previous launch left in the scratch region
    (a big ordered fix-up leaves partial tiles where a later plan might count)."""
    import torch

    sequence = [((1000, 1000, 1000), 0), ((17, 33, 65), 0), ((1000, 1000, 1000), 1),
                ((64, 64, 64), 1), ((300, 200, 1000), 0), ((67, 130, 45), 1),
                ((2048, 64, 96), 0), ((17, 33, 65), 1), ((1000, 1000, 1000), 2),
                ((300, 200, 1000), 2), ((17, 33, 65), 0), ((67, 130, 45), 2)]
    for (M, N, K), fixup in sequence:
        cfg = {**R14.seed, "SPLIT": 0, "FIXUP": fixup}
        A, lda, _ = _operand(torch, M, K, False)
        B, ldb, _ = _operand(torch, K, N, False)
        C = _run(R14, cfg, A, lda, B, ldb, M, N, K)
        _assert_close(C, A.double() @ B.double(), K, f"r14 fixup={fixup} {M}x{N}x{K}")


def test_a_bound_launch_follows_a_replaced_workspace():
    """Bind a split launch, let a bigger one replace the stream's workspace, and launch the
    first again: it must use the new buffer (the old one is freed)."""
    import torch

    from sgemmlab.runtime import workspace

    cfg = {**R14.seed, "SPLIT": 0, "FIXUP": 1}
    M, N, K = 64, 64, 640  # one tile, split over blocks
    A, lda, _ = _operand(torch, M, K, False)
    B, ldb, _ = _operand(torch, K, N, False)
    C = torch.full((M, N), float("nan"), device="cuda")
    stream = _stream(torch)
    torch.cuda.synchronize()
    workspace.release_all()  # start from no buffer, whatever earlier tests left
    small = Launcher(R14, cfg).bind(M, N, K, 1.0, A.data_ptr(), lda, B.data_ptr(), ldb, 0.0,
                                    C.data_ptr(), N, stream)
    small()
    before = workspace.generation
    _run(R14, {**cfg, "FIXUP": 0}, *_operand(torch, 2000, 3000, False)[:2],
         *_operand(torch, 3000, 2000, False)[:2], 2000, 2000, 3000)  # a much bigger plan
    assert workspace.generation != before, "the big launch should have replaced the buffer"
    C.fill_(float("nan"))
    small()
    torch.cuda.synchronize()
    _assert_close(C, A.double() @ B.double(), K, "rebound small launch")
