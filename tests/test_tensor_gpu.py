"""The tensor-core rungs (19 tf32_wgmma, 20 3xtf32_wgmma, 26 ozaki_int8; kernels/hopper/) and
the precision argument, on the GPU (skipped without CUDA or without compute capability 9.0:
wgmma exists on H100 and H200 only).

Rungs 20 (precision="tf32x3") and 26 (precision="fp32_emulated", Ozaki scheme II with its passes:
tests/test_ozaki_gpu.py holds it bit for bit to the NumPy reference) are held to FP32's bound,
bench/check.py's error_bound(K). Rung 19 (precision="tf32") is NOT FP32: it is held to TF32_BOUND,
and where K is long it must be worse than FP32 could be (NOT_FP32), so the test knows TF32 really
ran. Each is forced (kernel=19 / 20 / 26) on ragged shapes, 1 and primes in every dimension, K a
multiple of 4 and not (the copy engine needs 16-byte rows: the host pads); in every layout of A and
B; in buffers with leading dimensions past the row, odd ones, and bases one float off 16-byte
alignment; with alpha and beta (beta == 0 never reads C); into a column-major out; batched and
broadcast; with K = 0. Without `kernel`, precision="tf32x3" or "fp32_emulated" lets dispatch choose
and must still meet FP32's bound (at 4096^3 within 2x cuBLAS SGEMM's error), bit for bit the same
call to call where the last wave is split along K. An unknown precision, and a rung forced at a
precision it does not compute, are refused. The torch operator takes precision too, and its backward
runs at it.

Inputs are fresh and uniform in [-1, 1] in every test; outputs are poisoned with NaN (an
element never written fails, and so does a read of C when beta == 0) and sit in buffers of
SENTINEL (a write past C shows); A and B sit in buffers of NaN and must come out unchanged.
"""

from __future__ import annotations

import functools

import pytest

import sgemmlab
from sgemmlab import registry
from sgemmlab.bench.check import TF32_BOUND, error_bound, relative_error
from sgemmlab.errors import ConfigError

pytestmark = pytest.mark.gpu

NAN = float("nan")
SENTINEL = -12345.0
PRECISION = {19: "tf32", 20: "tf32x3", 26: "fp32_emulated"}  # rung -> its precision
NAME = {19: "tf32_wgmma", 20: "3xtf32_wgmma", 26: "ozaki_int8"}
ACCURATE = ["tf32x3", "fp32_emulated"]  # the FP32-accurate tensor-core precisions
#: above this at K >= 500 (uniform inputs) a product was not FP32 (FP32: ~3e-6 at K = 4096)
NOT_FP32 = 1e-5


@functools.cache
def hopper() -> bool:
    """CUDA through torch, on a GPU of compute capability 9.0."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


HOPPER = pytest.mark.skipif(not hopper(), reason="the tensor-core rungs need compute "
                            "capability 9.0 (H100 / H200)")
RUNGS = [pytest.param(n, id=f"r{n}-{p}") for n, p in PRECISION.items()]


def tensor_rung(number: int):
    """Rung 19 or 20 from the registry (the test skips while it is not registered)."""
    try:
        r = registry.rung(number)
    except KeyError:
        pytest.skip(f"rung {number} is not in the registry yet")
    assert (r.name, r.precision) == (NAME[number], PRECISION[number]), r.label
    return r


def _torch():
    import torch

    return torch


def _default(r) -> dict:
    from sgemmlab.runtime.device import gpu_info

    return r.default(gpu_info().name)


def _uniform(*shape, transposed: bool = False):
    """Uniform in [-1, 1]; transposed: a transposed view (.mT) of contiguous storage."""
    torch = _torch()
    if transposed:
        *lead, rows, cols = shape
        return (torch.rand(*lead, cols, rows, device="cuda") * 2 - 1).mT
    return torch.rand(*shape, device="cuda") * 2 - 1


def _nans(*shape):
    return _torch().full(shape, NAN, device="cuda")


def _bits(t):
    return t.contiguous().view(_torch().int32)  # NaN == NaN, bit for bit


def _forced(number: int, a, b, c=None, *, alpha=1.0, beta=0.0, out=None, config=None):
    """sgemm forced onto rung `number`, at its precision and (by default) its default."""
    r = tensor_rung(number)
    return sgemmlab.sgemm(a, b, c, alpha=alpha, beta=beta, out=out, kernel=number,
                          config=config or _default(r), precision=r.precision)


def _within(precision: str, got, ref, K: int, where: str, *, alpha_ab=None,
            beta_c=None) -> float:
    """got against the float64 ref (the module's metric) within `precision`'s bound: TF32's
    for "tf32", FP32's error_bound(K) otherwise. Returns the error."""
    torch = _torch()
    torch.cuda.synchronize()
    assert tuple(got.shape) == tuple(ref.shape), f"{where}: shape {tuple(got.shape)}"
    err = relative_error(got, ref, alpha_ab=alpha_ab, beta_c=beta_c)
    bound = TF32_BOUND if precision == "tf32" else error_bound(K)
    bad = int((~torch.isfinite(got)).sum())
    assert err <= bound, (f"{where}: error {err:.2e} over {precision}'s bound {bound:.2e} "
                          f"(K={K}; {bad} of {got.numel()} outputs NaN/Inf)")
    return err


def _check(precision: str, got, a, b, where: str, *, alpha=1.0, beta=0.0, c0=None) -> float:
    """got against alpha a @ b + beta c0 in float64 (batches broadcast)."""
    ab = alpha * (a.double() @ b.double())
    bc = beta * c0.double() if beta != 0 else None
    ref = ab + bc if bc is not None else ab
    if got.shape[-2] * got.shape[-1] < 64:  # a few outputs: one may cancel to near zero, so
        # measure against the size of its terms, which the rounding follows
        ab = abs(alpha) * (a.double().abs() @ b.double().abs())
    return _within(precision, got, ref, a.shape[-1], where, alpha_ab=ab, beta_c=bc)


def _ids(shape) -> str:
    return "x".join(map(str, shape))


# -- both rungs, forced, on ragged shapes ----------------------------------------------------

FORCED_SHAPES = [(1, 1, 1), (1, 7, 13), (13, 1, 17), (17, 19, 1), (2, 3, 4), (5, 3, 2),
                 (64, 64, 64), (128, 256, 32), (127, 131, 137), (129, 257, 33), (131, 263, 4),
                 (300, 200, 6), (257, 128, 1000), (1000, 1000, 1000), (4093, 97, 511),
                 (97, 4093, 515), (2, 4096, 4096), (4096, 3, 4099)]


@HOPPER
@pytest.mark.parametrize("shape", FORCED_SHAPES, ids=_ids)
@pytest.mark.parametrize("number", RUNGS)
def test_forced_rung_matches_float64(number, shape):
    M, N, K = shape
    p = PRECISION[number]
    a, b = _uniform(M, K), _uniform(K, N)
    out = _nans(M, N)
    assert _forced(number, a, b, out=out) is out
    err = _check(p, out, a, b, f"r{number} {_ids(shape)} beta=0")
    if p == "tf32" and K >= 500 and M * N >= 64:
        assert err > NOT_FP32, f"r{number} {_ids(shape)}: error {err:.2e}: FP32, not TF32?"
    c = _uniform(M, N)
    c0 = c.clone()
    assert _forced(number, a, b, c, alpha=0.75, beta=-0.5, out=c) is c  # in place
    _check(p, c, a, b, f"r{number} {_ids(shape)} in place", alpha=0.75, beta=-0.5, c0=c0)


@HOPPER
@pytest.mark.parametrize("shape", [(1024, 1024, 4096), (2, 4096, 4096)], ids=_ids)
def test_tf32_is_not_fp32_and_3xtf32_is(shape):
    """The same operands through both: TF32 misses FP32 by far, 3xTF32 meets it."""
    M, N, K = shape
    a, b = _uniform(M, K), _uniform(K, N)
    one, three = _nans(M, N), _nans(M, N)
    _forced(19, a, b, out=one)
    _forced(20, a, b, out=three)
    err1 = _check("tf32", one, a, b, f"r19 {_ids(shape)}")
    err3 = _check("tf32x3", three, a, b, f"r20 {_ids(shape)}")
    assert err1 > NOT_FP32 and err1 > error_bound(K), f"TF32's error {err1:.2e} is FP32's"
    assert err1 > 10 * err3, f"TF32 {err1:.2e} against 3xTF32 {err3:.2e}"


# -- layouts, leading dimensions, alignment ------------------------------------------------

LAYOUTS = [(False, False), (True, False), (False, True), (True, True)]
LAYOUT_IDS = ["NN", "TN", "NT", "TT"]


@HOPPER
@pytest.mark.parametrize("ta, tb", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("number", RUNGS)
def test_every_layout(number, ta, tb):
    """A and / or B as transposed views (column-major): the host hands the copy engine K-major
    operands whatever they were."""
    torch = _torch()
    p = PRECISION[number]
    for i, (M, N, K) in enumerate([(129, 257, 33), (64, 96, 128), (1, 13, 7),
                                   (257, 255, 300), (1000, 999, 1001)]):
        a, b = _uniform(M, K, transposed=ta), _uniform(K, N, transposed=tb)
        a0, b0 = a.clone(), b.clone()
        where = f"r{number} {M}x{N}x{K} {'NT'[ta]}{'NT'[tb]}"
        out = _nans(M, N)
        _forced(number, a, b, out=out)
        _check(p, out, a, b, where)
        alpha, beta = [(0.5, -2.0), (-1.5, 1.0)][i % 2]
        c = _uniform(M, N)
        c0 = c.clone()
        _forced(number, a, b, c, alpha=alpha, beta=beta, out=c)
        _check(p, c, a, b, f"{where} in place", alpha=alpha, beta=beta, c0=c0)
        assert torch.equal(a, a0) and torch.equal(b, b0), f"{where}: an operand changed"
        assert a.stride() == a0.stride() and b.stride() == b0.stride()


#: how a matrix lies in its buffer: (floats before it, leading dimension for an inner extent n)
MODES = {
    "wide": lambda n: (0, -(-n // 4) * 4 + 4),  # rows 16-byte strided: readable as they lie
    "odd-ld": lambda n: (0, n + 1 if (n + 1) % 4 else n + 2),  # they are not: a copy
    "offset": lambda n: (1, -(-(n + 1) // 4) * 4 + 4),  # the base 4 bytes off: a copy
}


def _embedded(rows: int, cols: int, *, col_major: bool, mode: str, fill: float):
    """(buffer, view): rows x cols inside a 2-D buffer of `fill` one line longer than it,
    row-major (rows the leading dimension apart) or column-major (columns)."""
    inner, outer = (rows, cols) if col_major else (cols, rows)
    first, ld = MODES[mode](inner)
    buf = _torch().full((outer + 1, ld), fill, device="cuda")
    block = buf[:outer, first:first + inner]
    return buf, block.t() if col_major else block


def _outside(buf, view):
    """True where `buf` is not under `view`."""
    torch = _torch()
    inside = torch.zeros_like(buf, dtype=torch.bool)
    inside.as_strided(view.shape, view.stride(), view.storage_offset()).fill_(True)
    return ~inside


@HOPPER
@pytest.mark.parametrize("order", ["row", "col"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("number", RUNGS)
def test_leading_dimensions_and_misaligned_bases(number, mode, order):
    """A, B and C as views into wider buffers: leading dimensions past the row (a multiple of
    4, or odd), bases one float past alignment; nothing around them may change."""
    torch = _torch()
    p = PRECISION[number]
    col = order == "col"
    for i, (M, N, K) in enumerate([(67, 45, 33), (130, 129, 36), (1, 257, 300),
                                   (257, 1, 17), (515, 261, 1030)]):
        a_buf, a = _embedded(M, K, col_major=col, mode=mode, fill=NAN)
        b_buf, b = _embedded(K, N, col_major=col, mode=mode, fill=NAN)
        c_buf, c = _embedded(M, N, col_major=col, mode=mode, fill=SENTINEL)
        a.copy_(_uniform(M, K))
        b.copy_(_uniform(K, N))
        before = [_bits(x) for x in (a_buf, b_buf)]
        outside = _outside(c_buf, c)
        where = f"r{number} {M}x{N}x{K} {mode} {order}"
        for alpha, beta in ((1.0, 0.0), (0.5 + i, -1.25)):
            c.copy_(_nans(M, N) if beta == 0 else _uniform(M, N))
            c0 = c.clone()
            _forced(number, a, b, c, alpha=alpha, beta=beta, out=c)
            _check(p, c, a, b, f"{where} beta={beta}", alpha=alpha, beta=beta, c0=c0)
            assert bool((c_buf[outside] == SENTINEL).all()), f"{where}: wrote outside C"
            assert torch.equal(_bits(a_buf), before[0]), f"{where}: A's buffer changed"
            assert torch.equal(_bits(b_buf), before[1]), f"{where}: B's buffer changed"


@HOPPER
@pytest.mark.parametrize("number", RUNGS)
def test_out_column_major_and_row_major(number):
    """out= a column-major (transposed) view, and a row-major one with an odd leading
    dimension, from matmul and from sgemm with a C of the other layout."""
    p = PRECISION[number]
    r = tensor_rung(number)
    for M, N, K in [(67, 45, 33), (257, 130, 1000), (1, 129, 5), (129, 1, 64)]:
        a, b = _uniform(M, K), _uniform(K, N, transposed=True)
        where = f"r{number} {M}x{N}x{K}"
        for name, (buf, out) in {
                "col": _embedded(M, N, col_major=True, mode="wide", fill=SENTINEL),
                "odd-ld": _embedded(M, N, col_major=False, mode="odd-ld", fill=SENTINEL)}.items():
            outside = _outside(buf, out)
            out.copy_(_nans(M, N))
            got = sgemmlab.matmul(a, b, out=out, kernel=number, config=_default(r),
                                  precision=p)
            assert got is out
            _check(p, out, a, b, f"{where} matmul out={name}")
            c = _uniform(M, N, transposed=name != "col")  # the other layout
            c0 = c.clone()
            out.copy_(_nans(M, N))
            _forced(number, a, b, c, alpha=-1.0, beta=0.5, out=out)
            _check(p, out, a, b, f"{where} sgemm out={name}", alpha=-1.0, beta=0.5, c0=c0)
            assert _torch().equal(c, c0), f"{where}: C changed"
            assert bool((buf[outside] == SENTINEL).all()), f"{where}: wrote outside out"


# -- alpha, beta and C ------------------------------------------------------------------------


@HOPPER
@pytest.mark.parametrize("shape", [(67, 45, 33), (128, 128, 64), (257, 255, 300)], ids=_ids)
@pytest.mark.parametrize("number", RUNGS)
def test_beta_zero_never_reads_c(number, shape):
    """C full of NaN must not matter when beta == 0: separate from out, and out itself."""
    torch = _torch()
    M, N, K = shape
    p = PRECISION[number]
    a, b = _uniform(M, K), _uniform(K, N)
    c, out = _nans(M, N), _nans(M, N)
    _forced(number, a, b, c, alpha=1.5, beta=0.0, out=out)
    _check(p, out, a, b, f"r{number} {_ids(shape)} separate C", alpha=1.5)
    assert bool(torch.isnan(c).all()), "C was written"
    _forced(number, a, b, c, alpha=1.5, beta=0.0, out=c)
    _check(p, c, a, b, f"r{number} {_ids(shape)} in place", alpha=1.5)


@HOPPER
@pytest.mark.parametrize("alpha, beta", [(0.5, -2.0), (-1.5, 1.0), (0.0, 1.0), (2.0, 0.25)])
@pytest.mark.parametrize("number", RUNGS)
def test_alpha_beta_with_c_given(number, alpha, beta):
    """beta != 0 reads C; a separate out leaves C alone; without out, C takes the result."""
    torch = _torch()
    p = PRECISION[number]
    for M, N, K in [(1, 1, 1), (67, 45, 33), (300, 200, 1000)]:
        a, b = _uniform(M, K), _uniform(K, N)
        c = _uniform(M, N)
        c0 = c.clone()
        out = _nans(M, N)
        where = f"r{number} {M}x{N}x{K} alpha={alpha} beta={beta}"
        assert _forced(number, a, b, c, alpha=alpha, beta=beta, out=out) is out
        _check(p, out, a, b, f"{where} out", alpha=alpha, beta=beta, c0=c0)
        assert torch.equal(c, c0), f"{where}: C changed"
        assert _forced(number, a, b, c, alpha=alpha, beta=beta) is c
        _check(p, c, a, b, f"{where} into C", alpha=alpha, beta=beta, c0=c0)


# -- batches, K = 0, other configurations -----------------------------------------------------

BATCHES = [(3, 3), (3, None), (None, 3), (1, 3), (3, 1)]


@HOPPER
@pytest.mark.parametrize("transposed", [False, True], ids=["NN", "TT"])
@pytest.mark.parametrize("batches", BATCHES, ids=lambda ab: f"{ab[0]}@{ab[1]}")
@pytest.mark.parametrize("number", RUNGS)
def test_batches_and_broadcasts(number, batches, transposed):
    """3-D against 3-D, and 2-D (or a batch of 1) broadcast against 3-D."""
    torch = _torch()
    p = PRECISION[number]
    r = tensor_rung(number)
    lead_a, lead_b = ((n,) if n is not None else () for n in batches)
    for M, N, K in [(67, 45, 33), (300, 200, 1000)]:
        a = _uniform(*lead_a, M, K, transposed=transposed)
        b = _uniform(*lead_b, K, N, transposed=transposed)
        shape = (*torch.broadcast_shapes(lead_a, lead_b), M, N)
        where = f"r{number} {M}x{N}x{K} {batches} {'TT' if transposed else 'NN'}"
        got = sgemmlab.matmul(a, b, kernel=number, config=_default(r), precision=p)
        _check(p, got, a, b, f"{where} matmul")
        out = _nans(*shape)
        _forced(number, a, b, out=out)
        _check(p, out, a, b, f"{where} sgemm out")
        c = _uniform(*shape)
        c0 = c.clone()
        _forced(number, a, b, c, alpha=-0.5, beta=2.0, out=c)
        _check(p, c, a, b, f"{where} in place", alpha=-0.5, beta=2.0, c0=c0)


@HOPPER
@pytest.mark.parametrize("number", [*RUNGS, pytest.param(None, id="dispatch")])
def test_k_zero_gives_zeros_or_beta_c(number):
    torch = _torch()
    a, b = torch.empty(5, 0, device="cuda"), torch.empty(0, 7, device="cuda")
    kw = {"precision": "tf32x3"}
    if number is not None:
        r = tensor_rung(number)
        kw = {"kernel": number, "config": _default(r), "precision": r.precision}
    c = _nans(5, 7)
    sgemmlab.sgemm(a, b, c, beta=0.0, out=c, **kw)
    assert torch.equal(c, torch.zeros(5, 7, device="cuda"))
    c = torch.full((5, 7), 3.0, device="cuda")
    sgemmlab.sgemm(a, b, c, beta=2.0, **kw)
    assert torch.equal(c, torch.full((5, 7), 6.0, device="cuda"))
    assert torch.equal(sgemmlab.matmul(a, b, **kw), torch.zeros(5, 7, device="cuda"))


@HOPPER
@pytest.mark.parametrize("number", RUNGS)
def test_other_configurations(number):
    """A covering sample of the legal configurations (every value of every constant)."""
    from sgemmlab.registry import config_key

    r = tensor_rung(number)
    p = r.precision
    default = _default(r)
    assert r.is_legal(default), r.violations(default)
    for cfg in registry.covering_sample(list(r.configs()), 5, first=[default]):
        for (M, N, K), (alpha, beta) in [((67, 45, 33), (1.0, 0.0)),
                                         ((130, 257, 36), (0.5, -1.5)),
                                         ((1000, 129, 1001), (1.0, 0.0))]:
            a, b = _uniform(M, K), _uniform(K, N, transposed=M == 130)
            c = _nans(M, N) if beta == 0 else _uniform(M, N)
            c0 = c.clone()
            _forced(number, a, b, c, alpha=alpha, beta=beta, out=c, config=cfg)
            _check(p, c, a, b, f"{r.label} {config_key(cfg)} {M}x{N}x{K}", alpha=alpha,
                   beta=beta, c0=c0)


# -- dispatch with precision="tf32x3" ---------------------------------------------------------


def _cublas_fp32(a, b):
    """torch.matmul with TF32 off (cuBLAS SGEMM); torch's settings restored after."""
    torch = _torch()
    flag, mode = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return a @ b
    finally:
        torch.set_float32_matmul_precision(mode)
        torch.backends.cuda.matmul.allow_tf32 = flag


@HOPPER
@pytest.mark.parametrize("precision", ACCURATE)
def test_dispatch_at_4096_cubed_is_fp32_accurate(precision):
    """The tensor-core path's home: the precision's rung runs, FP32's bound, and within 2x
    cuBLAS SGEMM's error (the strict comparison is the accuracy harness's)."""
    from sgemmlab import dispatch
    from sgemmlab.runtime.device import gpu_info

    M = N = K = 4096
    info = gpu_info()
    chosen = dispatch.choose(M, N, K, gpu_name=info.name, sm_count=info.sm_count,
                             precision=precision, arch=info.arch)
    assert registry.rung(chosen.rung).precision == precision, chosen.reason
    a, b = _uniform(M, K), _uniform(K, N)
    out = _nans(M, N)
    assert sgemmlab.matmul(a, b, out=out, precision=precision) is out
    err = _check(precision, out, a, b, "dispatch 4096^3")
    ref = _check("ieee", _cublas_fp32(a, b), a, b, "cuBLAS SGEMM 4096^3")
    assert err <= 2 * ref, f"{precision} error {err:.2e} against cuBLAS SGEMM's {ref:.2e}"
    c = sgemmlab.matmul(a, b, precision=precision)  # into a new tensor
    _check(precision, c, a, b, "dispatch 4096^3, new tensor")


@HOPPER
@pytest.mark.parametrize("shape", [(4096, 4096, 16), (4096, 4096, 1), (1, 1, 1), (67, 45, 33),
                                   (1, 4096, 4096), (4096, 3, 4096), (1000, 1000, 1000),
                                   (2048, 2048, 2047), (129, 8192, 257), (3001, 2999, 4093)],
                         ids=_ids)
@pytest.mark.parametrize("precision", ACCURATE)
def test_dispatch_meets_fp32s_bound_whatever_it_picks(shape, precision):
    M, N, K = shape
    a, b = _uniform(M, K), _uniform(K, N, transposed=M == 4096)
    out = _nans(M, N)
    sgemmlab.matmul(a, b, out=out, precision=precision)
    _check(precision, out, a, b, f"dispatch {_ids(shape)}")
    c = _uniform(M, N)
    c0 = c.clone()
    sgemmlab.sgemm(a, b, c, alpha=0.5, beta=-1.0, out=c, precision=precision)
    _check(precision, c, a, b, f"dispatch {_ids(shape)} in place", alpha=0.5, beta=-1.0,
           c0=c0)


@HOPPER
@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
@pytest.mark.parametrize("kernel", [20, 26, None], ids=["forced20", "forced26", "dispatch"])
def test_tf32x3_is_bit_identical_call_to_call(kernel, deterministic):
    """4100^2 x 4096: 33 x 33 tiles of 128, 8 waves and a quarter on 132 SMs, so the last
    wave's tiles are split along K and meet in the workspace; in a fixed order, so the bits
    never change, whatever else runs on the GPU. Rung 26 (fp32_emulated): integer sums,
    exact in any order."""
    torch = _torch()
    M = N = 4100
    K = 4096
    a, b = _uniform(M, K), _uniform(K, N)
    precision = PRECISION[kernel] if kernel is not None else "tf32x3"
    kw = {"precision": precision, "deterministic": deterministic}
    if kernel is not None:
        kw |= {"kernel": kernel, "config": _default(tensor_rung(kernel))}
    first = sgemmlab.matmul(a, b, **kw)
    noise = torch.cuda.Stream()
    for i in range(3):
        with torch.cuda.stream(noise):
            _uniform(2048, 2048) @ _uniform(2048, 2048)
        again = sgemmlab.matmul(a, b, **kw)
        torch.cuda.synchronize()
        assert torch.equal(_bits(first), _bits(again)), f"call {i + 2} differs from the first"
    _check(precision, first, a, b, f"{M}x{N}x{K} {kw}")


# -- refusals ---------------------------------------------------------------------------------


UNKNOWN = {  # how an unknown precision is asked for -> the call (a, b, out)
    "matmul": lambda a, b, out: sgemmlab.matmul(a, b, precision="bogus"),
    "matmul-out": lambda a, b, out: sgemmlab.matmul(a, b, out=out, precision="bogus"),
    "sgemm": lambda a, b, out: sgemmlab.sgemm(a, b, out=out, precision="bogus"),
    "sgemm-kernel5": lambda a, b, out: sgemmlab.sgemm(a, b, out=out, kernel=5,
                                                      precision="bogus"),
    "sgemm-kernel20": lambda a, b, out: sgemmlab.sgemm(a, b, out=out, kernel=20,
                                                       precision="bogus"),
}


@pytest.mark.parametrize("how", [pytest.param(k, marks=HOPPER if "20" in k else ())
                                 for k in UNKNOWN])
def test_an_unknown_precision_is_refused(how):
    torch = _torch()
    a, b = _uniform(64, 64), _uniform(64, 64)
    out = torch.full((64, 64), SENTINEL, device="cuda")
    with pytest.raises(ValueError, match="precision"):
        UNKNOWN[how](a, b, out)
    torch.cuda.synchronize()
    assert bool((out == SENTINEL).all()), "a refused call wrote into out"


#: (rung, precision asked for; None: left at its default, "ieee")
MISMATCHES = [(20, None), (20, "ieee"), (20, "tf32"), (19, None), (19, "ieee"), (19, "tf32x3"),
              (26, None), (26, "tf32x3"), (20, "fp32_emulated")]


@HOPPER
@pytest.mark.parametrize("number, precision", MISMATCHES, ids=lambda x: str(x))
def test_a_rung_forced_at_another_precision_is_refused(number, precision):
    """Precision is never switched silently: a tensor-core rung runs only when its own
    precision is asked for."""
    torch = _torch()
    r = tensor_rung(number)
    a, b = _uniform(128, 64), _uniform(64, 96)
    out = torch.full((128, 96), SENTINEL, device="cuda")
    kw = {} if precision is None else {"precision": precision}
    with pytest.raises(ConfigError):
        sgemmlab.sgemm(a, b, out=out, kernel=number, config=_default(r), **kw)
    with pytest.raises(ConfigError):
        sgemmlab.matmul(a, b, out=out, kernel=number, **kw)
    torch.cuda.synchronize()
    assert bool((out == SENTINEL).all()), "a refused call wrote into out"


@pytest.mark.skipif(hopper(), reason="on compute capability 9.0 the tensor-core rungs run")
@pytest.mark.parametrize("number", RUNGS)
def test_other_gpus_refuse_the_tensor_rungs(number):
    torch = _torch()
    r = tensor_rung(number)
    a, b = _uniform(128, 64), _uniform(64, 96)
    out = torch.full((128, 96), SENTINEL, device="cuda")
    with pytest.raises(ConfigError):
        sgemmlab.sgemm(a, b, out=out, kernel=number, precision=r.precision)
    torch.cuda.synchronize()
    assert bool((out == SENTINEL).all()), "a refused call wrote into out"


# -- the torch operator and autograd ------------------------------------------------------------

OP_SHAPES = [((67, 33), (33, 45)), ((1024, 1000), (1000, 1536)), ((3, 257, 4096), (4096, 129)),
             ((2, 300, 1000), (2, 1000, 500)), ((300, 1000), (3, 1000, 500))]


def _op_ids(shapes) -> str:
    return "@".join(map(_ids, shapes))


def _operands(a_shape, b_shape, transposed=False, requires_grad=False):
    import sgemmlab.torch_ops  # noqa: F401  (registers torch.ops.sgemmlab.matmul: a test run
    # of this file alone may not have imported it yet)

    a, b = (_uniform(*s, transposed=transposed) for s in (a_shape, b_shape))
    if requires_grad:
        a, b = (x.detach().requires_grad_() for x in (a, b))
    return a, b


@HOPPER
@pytest.mark.parametrize("shapes", OP_SHAPES, ids=_op_ids)
def test_the_torch_op_takes_precision(shapes):
    torch = _torch()
    a, b = _operands(*shapes)
    where = f"op {_op_ids(shapes)}"
    _check("tf32x3", torch.ops.sgemmlab.matmul(a, b, False, "tf32x3"), a, b, where)
    _check("fp32_emulated", torch.ops.sgemmlab.matmul(a, b, False, "fp32_emulated"), a, b,
           f"{where} fp32_emulated")
    _check("tf32x3", torch.ops.sgemmlab.matmul(a, b, deterministic=True, precision="tf32x3"),
           a, b, f"{where} keywords")
    _check("ieee", torch.ops.sgemmlab.matmul(a, b), a, b, f"{where} default")
    with pytest.raises(ValueError, match="precision"):
        torch.ops.sgemmlab.matmul(a, b, False, "bogus")


@HOPPER
@pytest.mark.parametrize("transposed", [False, True], ids=["rowmajor", "transposed"])
@pytest.mark.parametrize("shapes", [OP_SHAPES[0], ((3, 67, 33), (33, 45))], ids=_op_ids)
def test_opcheck_with_precision(shapes, transposed):
    torch = _torch()
    a, b = _operands(*shapes, transposed=transposed, requires_grad=True)
    torch.library.opcheck(torch.ops.sgemmlab.matmul.default, (a, b),
                          {"deterministic": False, "precision": "tf32x3"})


def _gradients(a, b, precision: str):
    """(c, ga, gb) from sgemmlab at `precision`, (c, ga, gb) in float64, and the depth of
    each product: K, and for a's and b's gradients N and M (times the batch they sum)."""
    torch = _torch()
    c = sgemmlab.matmul(a, b, precision=precision)  # requires grad: the op
    assert c.grad_fn is not None
    g = _uniform(*c.shape)
    ga, gb = torch.autograd.grad(c, (a, b), g)
    a64, b64 = (x.detach().double().requires_grad_() for x in (a, b))
    c64 = a64 @ b64
    ra, rb = torch.autograd.grad(c64, (a64, b64), g.double())
    batch = c.shape[0] if c.dim() == 3 else 1
    M, N = c.shape[-2:]
    depths = (a.shape[-1], N * (batch if a.dim() == 2 else 1), M * (batch if b.dim() == 2 else 1))
    return (c, ga, gb), (c64.detach(), ra, rb), depths


@HOPPER
@pytest.mark.parametrize("precision", ACCURATE)
@pytest.mark.parametrize("transposed", [False, True], ids=["rowmajor", "transposed"])
@pytest.mark.parametrize("shapes", [OP_SHAPES[0], ((2048, 1024), (1024, 2048)),
                                    ((4096, 4096), (4096, 4096)), *OP_SHAPES[2:]],
                         ids=_op_ids)
def test_gradients_at_fp32_accurate_precisions_are_fp32_accurate(shapes, transposed,
                                                                 precision):
    a, b = _operands(*shapes, transposed=transposed, requires_grad=True)
    got, ref, depths = _gradients(a, b, precision)
    for name, x, r, k in zip(("c", "grad a", "grad b"), got, ref, depths):
        _within(precision, x, r, k, f"{_op_ids(shapes)} {name}")


@HOPPER
def test_the_backward_runs_at_the_forwards_precision():
    """precision="tf32" at 2048^3: if the forward is TF32, so are both gradients (each a
    product of depth 2048, where FP32 is ~2e-6 and TF32 ~3e-4)."""
    a, b = _operands((2048, 2048), (2048, 2048), requires_grad=True)
    got, ref, depths = _gradients(a, b, "tf32")
    err = _within("tf32", got[0], ref[0], depths[0], "forward")
    if err <= NOT_FP32:
        pytest.skip(f"dispatch served precision='tf32' at 2048^3 in FP32 (error {err:.1e}): "
                    "the backward's precision cannot show")
    for name, x, r, k in zip(("grad a", "grad b"), got[1:], ref[1:], depths[1:]):
        e = _within("tf32", x, r, k, name)
        assert e > NOT_FP32, f"{name}: error {e:.2e}: the backward ran in FP32, not TF32"
