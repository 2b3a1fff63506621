"""The public API on the CPU: every check, and the mapping of arrays onto the kernels.

No GPU here, so a test device stands in for one (the `emulated` fixture): numpy arrays play
the part of device arrays, and the launcher is replaced by an emulator of the kernels'
contract (kernels/common.cuh, Launcher.bind): a batch of row-major C = alpha A B + beta C
with A and B row- or column-major, read and written through the raw pointers and strides
the API computed — every access checked against the arrays the test made, so a wrong
leading dimension, stride or swap fails the comparison with float64 (or the bounds check)
instead of passing by luck. Everything above the launcher is the real code: operand
parsing, shape and layout checks, C^T = B^T A^T, batch folding and broadcasting, the plan
and bound-launch caches, the K == 0 and empty cases.
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sgemmlab
from sgemmlab import LayoutError, OperandError, api, plan, product, registry
from sgemmlab.runtime.arrays import Operand, matrix_layouts, self_overlapping
from sgemmlab.runtime.launch import ConfigError

F32 = np.float32
SENTINEL = F32(-12345.0)


# ---------------------------------------------------------------------------------------
# The emulated device
# ---------------------------------------------------------------------------------------
def _root(x):
    """The array that owns x's memory (through views and as_strided's wrappers)."""
    while getattr(x, "base", None) is not None:
        x = x.base
    return x


class Memory:
    """The buffers the test made: every emulated access must fall inside one of them."""

    def __init__(self):
        self.buffers: list[tuple[int, int]] = []

    def add(self, x: np.ndarray) -> None:
        r = _root(x)
        if not (isinstance(r, np.ndarray) and r.flags.owndata):
            return
        span = (r.ctypes.data, r.ctypes.data + r.nbytes)
        if span not in self.buffers:
            self.buffers.append(span)

    def view(self, ptr: int, shape, strides, what: str) -> np.ndarray:
        """The elements at ptr + sum(i * stride) * 4, as a writable numpy view."""
        last = sum((n - 1) * s for n, s in zip(shape, strides))
        lo, hi = ptr, ptr + (last + 1) * 4
        assert ptr % 4 == 0, f"{what}: pointer {ptr:#x} not float-aligned"
        assert any(b0 <= lo and hi <= b1 for b0, b1 in self.buffers), \
            f"{what}: access [{lo:#x}, {hi:#x}) outside every array the test made"
        base = np.frombuffer((ctypes.c_float * (last + 1)).from_address(ptr), dtype=F32)
        return np.lib.stride_tricks.as_strided(base, shape, [4 * s for s in strides])


class EmulatedLauncher:
    """Launcher's bind contract, computed on the host through raw pointers."""

    log: list[dict] = []  # every bind, for the caching tests
    memory: Memory

    def __init__(self, rung, config, device_id=0):
        self.rung, self.config, self.device_id = rung, config, device_id

    def bind(self, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, stream, *, trans_a=False,
             trans_b=False, batch=1, stride_a=0, stride_b=0, stride_c=0):
        r = self.rung
        if (trans_a or trans_b) and not r.supports("layouts"):
            raise ConfigError(f"rung {r.label} reads row-major operands only")
        if batch > 1 and not r.supports("batched"):
            raise ConfigError(f"rung {r.label} computes one product per launch")
        assert min(M, N, K, batch) >= 1, (M, N, K, batch)
        assert lda >= (M if trans_a else K) and ldb >= (K if trans_b else N) and ldc >= N, \
            ("leading dimensions", lda, ldb, ldc)
        assert batch == 1 or stride_c >= M * ldc or stride_c >= N, \
            f"stride_c {stride_c} lets the products of the batch overwrite each other"
        mem = self.memory
        self.log.append(dict(M=M, N=N, K=K, batch=batch, trans_a=trans_a, trans_b=trans_b,
                             a=a, b=b, c=c, alpha=alpha, beta=beta, rung=r.label))

        def run():
            for i in range(batch):
                A = mem.view(a + 4 * i * stride_a, (M, K), (1, lda) if trans_a else (lda, 1),
                             "A")
                B = mem.view(b + 4 * i * stride_b, (K, N), (1, ldb) if trans_b else (ldb, 1),
                             "B")
                C = mem.view(c + 4 * i * stride_c, (M, N), (ldc, 1), "C")
                acc = A.astype(np.float64) @ B.astype(np.float64)
                res = np.float64(alpha) * acc
                if beta != 0:  # beta == 0 never reads C
                    res = res + np.float64(beta) * C.astype(np.float64)
                C[...] = res.astype(F32)

        return run


ALL = frozenset({"layouts", "batched"})


@dataclasses.dataclass
class Emulated:
    memory: Memory
    rung: registry.Rung
    choose_calls: list
    precisions: list = dataclasses.field(default_factory=list)  # what each choice was asked

    def use_rung(self, features=ALL, streamk=False) -> None:
        """What dispatch picks from now on: the best rung, with these features."""
        self.rung = dataclasses.replace(registry.best(), features=frozenset(features)
                                        | ({"streamk"} if streamk else set()))

    @property
    def binds(self) -> list[dict]:
        return EmulatedLauncher.log

    def array(self, x) -> np.ndarray:
        x = np.asarray(x)
        self.memory.add(x)
        return x


@pytest.fixture
def emulated(monkeypatch):
    memory = Memory()
    real_as_operand = product.as_operand
    state = Emulated(memory, registry.best(), [])
    state.use_rung()

    def as_operand(obj, name, **kw):
        if isinstance(obj, np.ndarray):
            if obj.dtype != F32:
                raise OperandError(f"{name}: dtype is {obj.dtype}, sgemmlab computes float32 "
                                   "only")
            if obj.ndim not in (2, 3):
                raise OperandError(f"{name}: expected a 2-D matrix or a 3-D batch of "
                                   f"matrices, got shape {obj.shape}")
            memory.add(obj)
            return Operand(obj, obj.ctypes.data, tuple(obj.shape),
                           tuple(s // 4 for s in obj.strides), 0, "other",
                           not obj.flags.writeable)
        return real_as_operand(obj, name, **kw)

    def choose(g, device_id, deterministic, aligned, precision="ieee"):
        state.choose_calls.append((g, deterministic, aligned))
        state.precisions.append(precision)
        return state.rung, dict(state.rung.seed)

    def new_output(like, shape):
        if like.library != "other":
            raise AssertionError("the emulated device makes numpy outputs only")
        out = np.full(shape, np.nan, F32)
        memory.add(out)
        return out

    @dataclasses.dataclass
    class Info:
        name: str = "Emulated GPU"
        sm_count: int = 132

    EmulatedLauncher.log = []
    EmulatedLauncher.memory = memory
    monkeypatch.setattr(product, "as_operand", as_operand)
    monkeypatch.setattr(plan, "choose_rung", choose)
    monkeypatch.setattr(product, "new_output", new_output)
    monkeypatch.setattr(plan, "Launcher", EmulatedLauncher)
    monkeypatch.setattr(plan, "gpu_info", lambda i=0: Info())
    monkeypatch.setattr(plan, "stream_for", lambda handle, device_id: handle)
    monkeypatch.setattr(product, "make_current", lambda device_id: None)
    api.clear_caches()
    yield state
    api.clear_caches()


# ---------------------------------------------------------------------------------------
# Operands in every layout
# ---------------------------------------------------------------------------------------
LAYOUTS = ["row", "col", "row-padded", "col-padded", "row-offset"]
BATCH_LAYOUTS = ["packed", "padded", "interleaved", "broadcast"]


def _matrix_in(buf_rows: int, buf_cols: int, rows: int, cols: int, layout: str,
               fill=SENTINEL) -> tuple[np.ndarray, np.ndarray]:
    """(buffer, rows x cols view into it laid out as `layout`)."""
    pad = 3 if "padded" in layout else 0
    off = 1 if "offset" in layout else 0
    if layout.startswith("col"):
        buf = np.full((cols, rows + pad + off), fill, F32)
        return buf, buf[:, off:off + rows].T
    buf = np.full((rows, cols + pad + off), fill, F32)
    return buf, buf[:, off:off + cols]


def make(rng, shape, layout: str, batch_layout: str = "packed", fill=None):
    """(buffer, array of `shape`) with its matrices in `layout` and its batch (3-D) laid
    out as `batch_layout`; values uniform in [-1, 1] unless `fill`."""
    rows, cols = shape[-2:]
    if len(shape) == 2:
        buf, view = _matrix_in(rows, cols, rows, cols, layout)
    elif batch_layout == "broadcast":  # one matrix, repeated with stride 0
        buf, one = _matrix_in(rows, cols, rows, cols, layout)
        view = np.lib.stride_tricks.as_strided(one, shape, (0,) + one.strides)
    elif batch_layout == "interleaved" and not layout.startswith("col"):
        # (rows, n, cols) in memory, seen as (n, rows, cols): a permuted view
        buf = np.full((rows, shape[0], cols + 2), SENTINEL, F32)
        view = buf[:, :, 1:cols + 1].transpose(1, 0, 2)
    else:  # matrices one after another (with a gap when padded), each laid out as one
        tbuf, tview = _matrix_in(rows, cols, rows, cols, layout)
        off = (tview.ctypes.data - tbuf.ctypes.data) // 4
        per = tbuf.size + (5 if batch_layout == "padded" else 0)
        buf = np.full(max(shape[0], 1) * per, SENTINEL, F32)
        view = np.lib.stride_tricks.as_strided(buf[off:], shape, (per * 4,) + tview.strides)
    vals = rng.uniform(-1, 1, shape).astype(F32) if fill is None else np.full(shape, fill, F32)
    if len(shape) == 3 and batch_layout == "broadcast":
        if shape[0]:
            one[...] = vals[0]
    else:
        view[...] = vals
    return buf, view


def ref_product(a, b, c, alpha, beta):
    r = alpha * np.matmul(a.astype(np.float64), b.astype(np.float64))
    if beta != 0:
        r = r + beta * c.astype(np.float64)
    return r


def assert_close(got, ref, a, b, c, alpha, beta):
    """|got - ref| within FP32 rounding of the sum of |terms| (K products and a sum)."""
    scale = abs(alpha) * np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    if beta != 0:
        scale = scale + abs(beta) * np.abs(c.astype(np.float64))
    tol = 4e-7 * (a.shape[-1] + 2) * scale + 1e-30
    err = np.abs(got.astype(np.float64) - ref)
    assert got.shape == ref.shape
    assert np.all(np.isfinite(got)), "NaN/Inf in the result (an unwritten or misread element)"
    assert np.all(err <= tol), f"max error {err.max():.3g} (tolerance {tol.min():.3g}...)"


# ---------------------------------------------------------------------------------------
# describe: the mapping itself
# ---------------------------------------------------------------------------------------
def _geo(shape, strides):
    return (tuple(shape), tuple(strides))


def test_row_major_operands_map_straight_through():
    g = plan.describe(_geo((4, 3), (3, 1)), _geo((3, 5), (8, 1)), _geo((4, 5), (5, 1)))
    assert (g.M, g.N, g.K, g.batch, g.trans_a, g.trans_b, g.swap) == (4, 5, 3, 1, False,
                                                                       False, False)
    assert (g.lda, g.ldb, g.ldc) == (3, 8, 5)


def test_transposed_views_are_column_major_operands():
    # a = x.T for x (3, 4) row-major: a is 4x3 with strides (1, 4)
    g = plan.describe(_geo((4, 3), (1, 4)), _geo((3, 5), (1, 3)), _geo((4, 5), (5, 1)))
    assert (g.trans_a, g.lda, g.trans_b, g.ldb, g.swap) == (True, 4, True, 3, False)


def test_a_column_major_out_is_computed_as_its_transpose():
    # C (4x5) column-major: C^T = B^T A^T, a 5x4 row-major product with the operands swapped
    g = plan.describe(_geo((4, 3), (3, 1)), _geo((3, 5), (5, 1)), _geo((4, 5), (1, 4)))
    assert g.swap and (g.M, g.N, g.K) == (5, 4, 3)
    assert (g.trans_a, g.lda) == (True, 5)  # B^T: B row-major read as column-major
    assert (g.trans_b, g.ldb) == (True, 3)
    assert g.ldc == 4
    # all three column-major (Fortran order): the swapped problem is all row-major
    g = plan.describe(_geo((4, 3), (1, 4)), _geo((3, 5), (1, 3)), _geo((4, 5), (1, 4)))
    assert g.swap and not g.trans_a and not g.trans_b


def test_a_vector_out_takes_the_layout_that_leaves_fewer_transposes():
    # C is 5x1 (both layouts fit it); A column-major: computing C^T = B^T A^T makes the
    # kernel's operands row-major
    g = plan.describe(_geo((5, 3), (1, 5)), _geo((3, 1), (1, 1)), _geo((5, 1), (1, 1)))
    assert g.swap and not g.trans_a and not g.trans_b and (g.M, g.N) == (1, 5)
    g = plan.describe(_geo((1, 3), (3, 1)), _geo((3, 5), (5, 1)), _geo((1, 5), (5, 1)))
    assert not g.swap and not g.trans_a and not g.trans_b


def test_a_single_row_stays_a_row_for_the_skinny_m_family():
    # x @ W^T at M = 1: B column-major, and C stays 1 x N (not the N = 1 problem C^T)
    g = plan.describe(_geo((1, 3), (1, 1)), _geo((3, 5), (1, 3)), _geo((1, 5), (5, 1)))
    assert not g.swap and g.trans_b and (g.M, g.N, g.K) == (1, 5, 3)


def test_a_batch_against_a_shared_matrix_folds_into_one_taller_product():
    g = plan.describe(_geo((6, 4, 3), (12, 3, 1)), _geo((3, 5), (5, 1)),
                     _geo((6, 4, 5), (20, 5, 1)))
    assert (g.batch, g.M, g.stride_a, g.stride_c) == (1, 24, 0, 0)


def test_batches_that_cannot_fold_stay_batched_with_stride_zero_broadcast():
    # padded batch of A (stride 13 != 4*3): no fold; B 2-D: stride 0
    g = plan.describe(_geo((6, 4, 3), (13, 3, 1)), _geo((3, 5), (5, 1)),
                     _geo((6, 4, 5), (20, 5, 1)))
    assert (g.batch, g.M, g.stride_a, g.stride_b, g.stride_c) == (6, 4, 13, 0, 20)
    # A shared (a batch of one), B batched
    g = plan.describe(_geo((1, 4, 3), (12, 3, 1)), _geo((6, 3, 5), (15, 5, 1)),
                     _geo((6, 4, 5), (20, 5, 1)))
    assert (g.batch, g.stride_a, g.stride_b) == (6, 0, 15)


def test_matrix_layouts_read_strides_of_unit_dimensions_as_free():
    assert matrix_layouts(4, 3, 3, 1) == [(False, 3)]
    assert matrix_layouts(4, 3, 1, 4) == [(True, 4)]
    assert matrix_layouts(1, 3, 99, 1) == [(False, 4), (True, 1)]  # free ld: multiple of 4
    assert matrix_layouts(4, 1, 1, 7) == [(False, 1), (True, 4)]
    assert matrix_layouts(4, 3, 2, 1) == []  # rows overlap
    assert matrix_layouts(4, 3, 6, 2) == []  # every other column
    assert matrix_layouts(4, 1, 0, 1) == []  # an expanded column


def test_self_overlap():
    assert not self_overlapping((4, 5), (5, 1))
    assert not self_overlapping((3, 4, 5), (5, 15, 1))  # permuted, still disjoint
    assert self_overlapping((4, 5), (0, 1))
    assert self_overlapping((4, 5), (3, 1))
    assert not self_overlapping((1, 5), (0, 1))


# ---------------------------------------------------------------------------------------
# Refusals: each names the problem
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("a_shape, b_shape, match", [
    ((4, 3), (4, 5), r"inner dimensions differ: a is 4x3, b is 4x5"),
    ((2, 4, 3), (3, 3, 5), r"batch sizes differ: a has 2, b has 3"),
    ((3,), (3, 5), r"^a: expected a 2-D matrix or a 3-D batch"),
    ((2, 2, 4, 3), (3, 5), r"^a: expected a 2-D matrix or a 3-D batch"),
])
def test_shapes_that_have_no_product(a_shape, b_shape, match):
    with pytest.raises(ValueError, match=match):
        plan.product_shape(a_shape, b_shape)


def test_broadcast_shapes():
    assert plan.product_shape((4, 3), (3, 5)) == (4, 5)
    assert plan.product_shape((7, 4, 3), (3, 5)) == (7, 4, 5)
    assert plan.product_shape((4, 3), (7, 3, 5)) == (7, 4, 5)
    assert plan.product_shape((1, 4, 3), (7, 3, 5)) == (7, 4, 5)
    assert plan.product_shape((7, 4, 3), (1, 3, 5)) == (7, 4, 5)
    assert plan.product_shape((0, 4, 3), (1, 3, 5)) == (0, 4, 5)
    assert plan.product_shape((1, 4, 3), (0, 3, 5)) == (0, 4, 5)


@pytest.mark.parametrize("dim", ["M", "N", "K", "batch"])
def test_sizes_past_32_bits_are_refused_naming_the_size(dim):
    big = 2**31
    M, N, K, B = (big if dim == d else 4 for d in ("M", "N", "K", "batch"))
    a = ((B, M, K), (0, 0, 0))
    b = ((K, N), (0, 0))
    c = ((B, M, N), (M * N, N, 1))
    with pytest.raises(OverflowError, match=rf"^{dim} = {big} does not fit"):
        plan.describe(a, b, c)


def test_a_leading_dimension_past_32_bits_is_refused(emulated):
    x = emulated.array(np.zeros(8, F32))
    a = np.lib.stride_tricks.as_strided(x, (2, 2), (4 * 2**32, 4))  # never read
    b = emulated.array(np.zeros((2, 2), F32))
    with pytest.raises(OverflowError, match=r"a: leading dimension = 4294967296"):
        sgemmlab.matmul(a, b, out=emulated.array(np.zeros((2, 2), F32)))
    assert not emulated.binds


def test_huge_sizes_are_refused_before_any_allocation_or_launch(emulated):
    x = emulated.array(np.zeros(1, F32))
    a = np.lib.stride_tricks.as_strided(x, (2**31, 1), (0, 0))  # 2^31 rows, no memory
    b = emulated.array(np.zeros((1, 1), F32))
    with pytest.raises(OverflowError, match=r"^M = 2147483648 does not fit"):
        sgemmlab.matmul(a, b)
    assert not emulated.binds


@pytest.mark.parametrize("alpha, beta, error, match", [
    (float("nan"), 0.0, ValueError, "must be finite"),
    (1.0, float("inf"), ValueError, "must be finite"),
    (1e39, 0.0, OverflowError, r"alpha = 1e\+39 overflows float32"),
    (1.0, -1e39, OverflowError, r"beta = -1e\+39 overflows float32"),
    (10**400, 0.0, OverflowError, r"^alpha = 100000000000\.\.\. \(401 digits\) overflows"),
    (1.0, 1e-50, ValueError, r"^beta = 1e-50 is non-zero but rounds to 0 in float32"),
])
def test_alpha_and_beta_are_finite_float32_values(emulated, alpha, beta, error, match):
    x = emulated.array(np.ones((2, 2), F32))
    with pytest.raises(error, match=match):
        sgemmlab.sgemm(x, x, x.copy(), alpha=alpha, beta=beta)


def test_alpha_must_be_a_number():
    with pytest.raises(TypeError, match=r"alpha must be a real number, got 'two'"):
        sgemmlab.sgemm(None, None, alpha="two")
    with pytest.raises(TypeError, match=r"beta must be a real number"):
        sgemmlab.sgemm(None, None, beta=1j)


def test_refusals_name_the_operand(emulated):
    rng = np.random.default_rng(0)
    a = emulated.array(rng.random((8, 8), F32))
    with pytest.raises(OperandError, match=r"^b: dtype is float64"):
        sgemmlab.matmul(a, a.astype(np.float64))
    with pytest.raises(OperandError, match=r"^b: .*not a GPU array"):
        sgemmlab.matmul(a, [[1.0]])
    with pytest.raises(LayoutError, match=r"^a: strides \(8, 2\) .* neither row-major"):
        sgemmlab.matmul(a[:, ::2], a[:4])
    with pytest.raises(LayoutError, match=r"^b: strides \(-8, 1\) .*negative"):
        sgemmlab.matmul(a, a[::-1])
    with pytest.raises(ValueError, match=r"inner dimensions differ: a is 8x8, b is 7x8"):
        sgemmlab.matmul(a, a[:7])
    with pytest.raises(ValueError, match=r"^beta != 0 needs c"):
        sgemmlab.sgemm(a, a, beta=1.0)
    with pytest.raises(ValueError, match=r"^c is 8x7, the product is 8x8"):
        sgemmlab.sgemm(a, a, a[:, :7].copy())
    with pytest.raises(ValueError, match=r"^out is 8x7, the product is 8x8"):
        sgemmlab.matmul(a, a, out=emulated.array(np.zeros((8, 7), F32)))
    assert not emulated.binds


@pytest.mark.parametrize("which", ["a", "b", "part-of-a"])
def test_out_aliasing_an_operand_is_refused_and_nothing_is_written(emulated, which):
    rng = np.random.default_rng(1)
    buf = emulated.array(rng.random((9, 8), F32))
    a, b = buf[:8], emulated.array(rng.random((8, 8), F32))
    out = {"a": a, "b": b, "part-of-a": buf[1:]}[which]
    before = buf.copy(), b.copy()
    target = "b" if which == "b" else "a"
    with pytest.raises(ValueError, match=rf"^out overlaps {target}: the kernels read"):
        sgemmlab.matmul(a, b, out=out)
    with pytest.raises(ValueError, match=rf"^c overlaps {target}"):
        sgemmlab.sgemm(a, b, out, beta=1.0)
    assert np.array_equal(buf, before[0]) and np.array_equal(b, before[1])
    assert not emulated.binds


def test_out_partly_overlapping_c_is_refused(emulated):
    a = emulated.array(np.ones((8, 8), F32))
    buf = emulated.array(np.ones((9, 8), F32))
    with pytest.raises(ValueError, match="partly overlaps c"):
        sgemmlab.sgemm(a, a, buf[:8], beta=1.0, out=buf[1:])
    # with beta == 0, c is not read: no conflict
    sgemmlab.sgemm(a, a, buf[:8], beta=0.0, out=buf[1:])
    assert np.all(buf[1:] == 8)


def test_an_out_whose_elements_share_memory_is_refused(emulated):
    a = emulated.array(np.ones((4, 4), F32))
    x = emulated.array(np.zeros(16, F32))
    out = np.lib.stride_tricks.as_strided(x, (2, 4, 4), (0, 16, 4))  # batch stride 0
    with pytest.raises(OperandError, match=r"^out: strides \(0, 4, 1\) .* share memory"):
        sgemmlab.matmul(a[None].repeat(2, 0), a, out=out)


def test_a_read_only_out_is_refused(emulated):
    a = emulated.array(np.ones((4, 4), F32))
    out = emulated.array(np.zeros((4, 4), F32))
    out.flags.writeable = False
    with pytest.raises(OperandError, match=r"^out: the array is read-only"):
        sgemmlab.matmul(a, a, out=out)


_real_new_output = product.new_output  # before any fixture replaces it


def test_arrays_of_other_libraries_need_an_out():
    a = np.ones((4, 4), F32)
    op = Operand(a, a.ctypes.data, (4, 4), (4, 1), 0, "other")
    with pytest.raises(OperandError, match=r"pass `out` \(or `c`\) when the operands are "
                                           r"neither torch nor CuPy"):
        _real_new_output(op, (4, 4))


def test_deterministic_refuses_a_named_configuration_that_is_not(emulated):
    r = next((r for r in registry.RUNGS if "streamk" in r.features), None)
    if r is None:
        pytest.skip("no Stream-K rung in this registry")
    cfg = {**r.default(), "SPLIT": 0, "FIXUP": 1}
    a = emulated.array(np.ones((8, 8), F32))
    out = emulated.array(np.zeros((8, 8), F32))
    with pytest.raises(ConfigError, match="not bit-reproducible"):
        sgemmlab.matmul(a, a, out=out, kernel=r.label, config=cfg, deterministic=True)


def test_a_named_rung_without_layouts_refuses_transposed_operands(emulated):
    a = emulated.array(np.ones((8, 8), F32))
    out = emulated.array(np.zeros((8, 8), F32))
    with pytest.raises(ConfigError, match=r"rung 02_coalesced reads row-major operands only, "
                                          r"and the kernel's A is column-major"):
        sgemmlab.matmul(a.T, a, out=out, kernel=2)
    sgemmlab.matmul(a, a, out=out, kernel=2)  # row-major: fine
    assert np.all(out == 8)


# ---------------------------------------------------------------------------------------
# Results: every layout, batch and broadcast against float64
# ---------------------------------------------------------------------------------------
def _run_case(emulated, rng, M, N, K, a_batch, b_batch, a_lay, b_lay, out_lay, a_blay,
              b_blay, out_blay, alpha, beta, c_mode):
    a_shape = (a_batch, M, K) if a_batch is not None else (M, K)
    b_shape = (b_batch, K, N) if b_batch is not None else (K, N)
    out_shape = plan.product_shape(a_shape, b_shape)
    a_buf, a = make(rng, a_shape, a_lay, a_blay)
    b_buf, b = make(rng, b_shape, b_lay, b_blay)
    out_blay = "padded" if out_blay == "broadcast" else out_blay
    out_buf, out = make(rng, out_shape, out_lay, out_blay, fill=np.nan)
    for x in (a_buf, b_buf, out_buf):
        emulated.memory.add(x)
    inside = _mask_of(out_buf, out)
    if c_mode == "none":
        c = None
        beta = 0.0
    elif c_mode == "same":
        out[...] = rng.uniform(-1, 1, out.shape).astype(F32) if beta != 0 else np.nan
        c = out
    else:
        c_buf, c = make(rng, out_shape, "row", "packed",
                        fill=None if beta != 0 else np.nan)
        emulated.memory.add(c_buf)
    c0 = None if c is None else np.array(c)
    a0, b0, out0 = a_buf.copy(), b_buf.copy(), out_buf.copy()
    got = sgemmlab.sgemm(a, b, c, alpha=alpha, beta=beta, out=out)
    assert got is out
    ref = ref_product(np.array(a), np.array(b), c0, alpha, beta)
    assert_close(np.array(out), ref, np.array(a), np.array(b), c0, alpha, beta)
    assert np.array_equal(a_buf, a0, equal_nan=True), "wrote into a"
    assert np.array_equal(b_buf, b0, equal_nan=True), "wrote into b"
    assert np.array_equal(out_buf[~inside], out0[~inside], equal_nan=True), \
        "wrote outside out"


def _mask_of(buf: np.ndarray, view: np.ndarray) -> np.ndarray:
    """True at the elements of `buf` that `view` covers."""
    off = (view.ctypes.data - buf.ctypes.data) // 4
    pos = off + sum(np.arange(n).reshape([-1 if i == d else 1 for i in range(view.ndim)])
                    * (s // 4) for d, (n, s) in enumerate(zip(view.shape, view.strides)))
    mask = np.zeros(buf.size, bool)
    mask[np.asarray(pos).ravel()] = True
    return mask.reshape(buf.shape)


CASES = [
    # M, N, K, a_batch, b_batch, layouts a/b/out, batch layouts a/b/out
    (5, 7, 3, None, None, "row", "row", "row", "packed", "packed", "packed"),
    (5, 7, 3, None, None, "col", "row", "row", "packed", "packed", "packed"),
    (5, 7, 3, None, None, "row", "col", "row", "packed", "packed", "packed"),
    (5, 7, 3, None, None, "col", "col", "col", "packed", "packed", "packed"),
    (5, 7, 3, None, None, "row-offset", "col-padded", "col-padded", "packed", "packed",
     "packed"),
    (1, 7, 3, None, None, "col", "col", "row", "packed", "packed", "packed"),
    (5, 1, 3, None, None, "row", "col", "col", "packed", "packed", "packed"),
    (5, 7, 1, None, None, "col", "row-offset", "row", "packed", "packed", "packed"),
    (5, 7, 3, 4, None, "row", "row", "row", "packed", "packed", "packed"),  # folds
    (5, 7, 3, 4, None, "row", "row", "row", "padded", "packed", "padded"),
    (5, 7, 3, None, 4, "col", "row", "row", "packed", "packed", "interleaved"),
    (5, 7, 3, 4, 4, "row", "col", "col", "interleaved", "padded", "packed"),
    (5, 7, 3, 1, 4, "row", "row", "row", "packed", "packed", "packed"),
    (5, 7, 3, 4, 1, "col", "row", "row", "packed", "packed", "packed"),
    (5, 7, 3, 4, 4, "row", "row", "row", "broadcast", "packed", "packed"),
]


@pytest.mark.parametrize("alpha, beta, c_mode", [(1.0, 0.0, "none"), (0.5, -2.0, "same"),
                                                 (-1.5, 0.25, "separate"),
                                                 (2.0, 0.0, "separate")])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_layouts_batches_and_broadcasts_match_float64(emulated, case, alpha, beta, c_mode):
    rng = np.random.default_rng(hash(case) % 2**32)
    _run_case(emulated, rng, *case, alpha, beta, c_mode)


def test_the_same_cases_through_a_rung_without_batches_run_one_product_per_launch(emulated):
    emulated.use_rung(features={"layouts"})
    rng = np.random.default_rng(7)
    _run_case(emulated, rng, 5, 7, 3, 4, 4, "row", "col", "col", "padded", "padded",
              "packed", 1.0, 0.0, "none")
    assert len(emulated.binds) == 4 and all(b["batch"] == 1 for b in emulated.binds)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(M=st.integers(0, 9), N=st.integers(0, 9), K=st.integers(0, 9),
       batching=st.sampled_from(["none", "a", "b", "both", "a1", "b1"]),
       n=st.integers(0, 4),
       a_lay=st.sampled_from(LAYOUTS), b_lay=st.sampled_from(LAYOUTS),
       out_lay=st.sampled_from(["row", "col", "row-padded", "col-padded"]),
       a_blay=st.sampled_from(BATCH_LAYOUTS), b_blay=st.sampled_from(BATCH_LAYOUTS),
       out_blay=st.sampled_from(["packed", "padded", "interleaved"]),
       alpha=st.sampled_from([1.0, -0.5, 3.0]), beta=st.sampled_from([0.0, 1.0, -0.75]),
       c_mode=st.sampled_from(["none", "same", "separate"]), seed=st.integers(0, 2**16))
def test_property_any_shape_layout_batch_alpha_beta(emulated, M, N, K, batching, n, a_lay,
                                                   b_lay, out_lay, a_blay, b_blay,
                                                   out_blay, alpha, beta, c_mode, seed):
    a_batch = {"none": None, "a": n, "b": None, "both": n, "a1": 1, "b1": n}[batching]
    b_batch = {"none": None, "a": None, "b": n, "both": n, "a1": n, "b1": 1}[batching]
    rng = np.random.default_rng(seed)
    _run_case(emulated, rng, M, N, K, a_batch, b_batch, a_lay, b_lay, out_lay, a_blay,
              b_blay, out_blay, alpha, beta, c_mode)


# ---------------------------------------------------------------------------------------
# BLAS corners: K == 0, empty products, beta == 0 never reads C
# ---------------------------------------------------------------------------------------
def test_k_zero_gives_beta_c_and_launches_nothing(emulated):
    a = emulated.array(np.ones((5, 0), F32))
    b = emulated.array(np.ones((0, 7), F32))
    c = emulated.array(np.full((5, 7), np.nan, F32))
    sgemmlab.sgemm(a, b, c, beta=0.0)
    assert np.array_equal(c, np.zeros((5, 7), F32))
    c[...] = 3.0
    sgemmlab.sgemm(a, b, c, beta=2.0)
    assert np.array_equal(c, np.full((5, 7), 6.0, F32))
    out = emulated.array(np.full((5, 7), np.nan, F32))
    sgemmlab.sgemm(a, b, c, beta=-1.0, out=out)
    assert np.array_equal(out, np.full((5, 7), -6.0, F32))
    assert np.array_equal(sgemmlab.matmul(a, b), np.zeros((5, 7), F32))
    assert not emulated.binds


@pytest.mark.parametrize("a_shape, b_shape", [((0, 3), (3, 4)), ((4, 3), (3, 0)),
                                              ((0, 4, 3), (3, 5)), ((2, 0, 3), (3, 5))])
def test_empty_products_return_empty_results(emulated, a_shape, b_shape):
    a = emulated.array(np.ones(a_shape, F32))
    b = emulated.array(np.ones(b_shape, F32))
    c = sgemmlab.matmul(a, b)
    assert c.shape == plan.product_shape(a_shape, b_shape)
    assert not emulated.binds


def test_beta_zero_never_reads_c(emulated):
    rng = np.random.default_rng(3)
    a = emulated.array(rng.random((6, 4), F32))
    b = emulated.array(rng.random((4, 5), F32))
    c = emulated.array(np.full((6, 5), np.nan, F32))
    sgemmlab.sgemm(a, b, c, alpha=2.0, beta=0.0)
    assert np.allclose(c, 2 * a.astype(np.float64) @ b, rtol=1e-6)
    assert emulated.binds[-1]["beta"] == 0.0


def test_alpha_and_beta_reach_the_kernel_as_float32_values(emulated):
    a = emulated.array(np.ones((2, 2), F32))
    c = emulated.array(np.ones((2, 2), F32))
    sgemmlab.sgemm(a, a, c, alpha=0.1, beta=1e-40)  # beta: a float32 subnormal
    assert emulated.binds[-1]["alpha"] == float(F32(0.1))
    assert emulated.binds[-1]["beta"] == float(F32(1e-40)) != 0.0


# ---------------------------------------------------------------------------------------
# Caches and threads
# ---------------------------------------------------------------------------------------
def test_a_repeated_call_reuses_its_plan_and_its_bound_launch(emulated):
    rng = np.random.default_rng(4)
    a = emulated.array(rng.random((6, 4), F32))
    b = emulated.array(rng.random((4, 5), F32))
    out = emulated.array(np.zeros((6, 5), F32))
    for _ in range(5):
        sgemmlab.matmul(a, b, out=out)
    assert len(emulated.choose_calls) == 1 and len(emulated.binds) == 1
    out2 = emulated.array(np.zeros((6, 5), F32))
    sgemmlab.matmul(a, b, out=out2)  # new pointer: bound anew, same plan
    assert len(emulated.choose_calls) == 1 and len(emulated.binds) == 2
    sgemmlab.sgemm(a, b, out2, alpha=2.0, beta=1.0, out=out2)  # new alpha/beta: bound anew
    assert len(emulated.binds) == 3
    assert np.allclose(out2, 3 * (a.astype(np.float64) @ b), rtol=1e-6)
    sgemmlab.matmul(emulated.array(a.copy()), b, out=out)  # same shape and strides
    assert len(emulated.choose_calls) == 1 and len(emulated.binds) == 4


def test_a_transposed_view_gets_its_own_plan(emulated):
    rng = np.random.default_rng(5)
    x = emulated.array(rng.random((4, 4), F32))
    out = emulated.array(np.zeros((4, 4), F32))
    sgemmlab.matmul(x, x, out=out)
    first = out.copy()
    sgemmlab.matmul(x.T, x, out=out)
    assert len(emulated.choose_calls) == 2
    assert np.allclose(first, x.astype(np.float64) @ x, rtol=1e-6)
    assert np.allclose(out, x.T.astype(np.float64) @ x, rtol=1e-6)


def test_stream_k_launches_are_bound_once_like_the_others(emulated):
    # a Stream-K launch re-reads its stream's workspace itself when a larger call replaced
    # it (runtime/launch.py, workspace.generation), so the API reuses it like any other
    emulated.use_rung(streamk=True)
    a = emulated.array(np.ones((4, 4), F32))
    out = emulated.array(np.zeros((4, 4), F32))
    for _ in range(3):
        sgemmlab.matmul(a, a, out=out)
    assert len(emulated.choose_calls) == 1 and len(emulated.binds) == 1


def test_a_new_table_forgets_the_plans_made_from_the_old_one(emulated):
    from sgemmlab import dispatch

    a = emulated.array(np.ones((4, 4), F32))
    out = emulated.array(np.zeros((4, 4), F32))
    sgemmlab.matmul(a, a, out=out)
    sgemmlab.matmul(a, a, out=out)
    assert len(emulated.choose_calls) == 1
    dispatch.clear_cache()  # what writing a table does
    sgemmlab.matmul(a, a, out=out)
    assert len(emulated.choose_calls) == 2


def test_errors_are_not_cached(emulated):
    a = emulated.array(np.ones((4, 4), F32))
    buf = emulated.array(np.ones((5, 4), F32))
    for _ in range(2):
        with pytest.raises(ValueError, match="out overlaps a"):
            sgemmlab.matmul(buf[:4], a, out=buf[1:])
    sgemmlab.matmul(a, a, out=buf[1:])
    assert np.all(buf[1:] == 4)


def test_concurrent_calls_from_many_threads(emulated):
    """Threads share the plan cache: every result right, and each plan made once."""
    shapes = [(5, 7, 3), (8, 8, 8), (3, 9, 2), (6, 1, 4)]
    rng = np.random.default_rng(6)
    work = []
    for i in range(8):
        M, N, K = shapes[i % len(shapes)]
        a = emulated.array(rng.uniform(-1, 1, (M, K)).astype(F32))
        b = emulated.array(rng.uniform(-1, 1, (K, N)).astype(F32))
        work.append((a, b, [emulated.array(np.zeros((M, N), F32)) for _ in range(20)]))
    errors = []
    barrier = threading.Barrier(len(work))

    def worker(a, b, outs):
        try:
            barrier.wait(timeout=60)
            for out in outs:
                sgemmlab.matmul(a, b, out=out)
                np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5,
                                           atol=1e-6)
        except Exception as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=w) for w in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors[0]
    assert len(emulated.choose_calls) == len(shapes)


# ---------------------------------------------------------------------------------------
# torch on the CPU: the refusals, and the routes to torch.ops.sgemmlab.matmul
# ---------------------------------------------------------------------------------------
def test_cpu_tensors_are_refused_every_time():
    torch = pytest.importorskip("torch")
    a = torch.ones(4, 4)
    for _ in range(2):  # the hot path caches nothing for a refused call
        with pytest.raises(OperandError, match=r"^a: tensor is on cpu, not on a CUDA GPU"):
            sgemmlab.matmul(a, a)
    with pytest.raises(OperandError, match=r"^a: dtype is torch.float16"):
        sgemmlab.matmul(a.half(), a)
    with pytest.raises(OperandError, match=r"^a: tensor is on cpu"):  # through autograd too
        sgemmlab.matmul(a.requires_grad_(), a)
    m = torch.ones(4, 4, device="meta")
    with pytest.raises(OperandError, match=r"^a: tensor is on meta, not on a CUDA GPU"):
        sgemmlab.matmul(m, m)


def test_sgemm_refuses_tensors_that_require_grad():
    torch = pytest.importorskip("torch")
    a = torch.ones(4, 4, requires_grad=True)
    with pytest.raises(ValueError, match=r"^a requires grad, and sgemm records no autograd"):
        sgemmlab.sgemm(a, a)
    with torch.no_grad():  # then it is a plain tensor (refused here for being on the CPU)
        with pytest.raises(OperandError, match="on cpu"):
            sgemmlab.sgemm(a, a)


# ---------------------------------------------------------------------------------------
# The overhead command
# ---------------------------------------------------------------------------------------
def test_the_overhead_command_says_so_without_a_gpu(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from sgemmlab.cli import app
    from sgemmlab.runtime.device import has_gpu

    if has_gpu():
        pytest.skip("a GPU is here: tests/test_api_gpu.py measures for real")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("SGEMMLAB_RESULTS_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["overhead", "--calls", "10"])
    assert result.exit_code == 1, result.output
    assert "No usable NVIDIA GPU" in result.output
    assert not list(tmp_path.iterdir())  # no results file


def test_deterministic_with_a_named_rung_and_no_config_takes_its_fixed_order(emulated,
                                                                               monkeypatch):
    """kernel=14 alone with deterministic=True: the rung's default with FIXUP=0, not a
    refusal (its default splits tiles by atomics); every other constant as the default."""
    r = next((r for r in registry.RUNGS if "streamk" in r.features), None)
    if r is None:
        pytest.skip("no Stream-K rung in this registry")
    h200 = dataclasses.replace(plan.gpu_info(0), name="NVIDIA H200")
    monkeypatch.setattr(plan, "gpu_info", lambda i=0: h200)
    default = r.default(h200.name)
    assert not r.deterministic(default)  # the H200's tuned default fixes up by atomics
    g = plan.describe(((64, 64), (64, 1)), ((64, 64), (64, 1)), ((64, 64), (64, 1)))
    atomic = {**default, "FIXUP": 1, "SPLIT": 0}
    rung, cfg = plan.named_rung(g, 0, r.label, atomic, False)
    assert cfg == atomic and not rung.deterministic(cfg)
    rung, cfg = plan.named_rung(g, 0, r.label, None, True)
    assert rung.deterministic(cfg)
    assert cfg == {**default, "FIXUP": 0}


def test_the_version_bump_marks_a_write_and_leaves_inference_tensors_alone():
    """The hot path tells autograd that `out` changed (torch's own call, found once): the
    counter moves on an ordinary tensor, and an inference tensor, which has none, is left
    as it is rather than raising."""
    torch = pytest.importorskip("torch")
    glue = product.TorchGlue()
    assert glue.find() is torch and glue.increment_version is not None
    x = torch.zeros(3)
    v = x._version
    glue.bump_version(x)
    assert x._version == v + 1
    with torch.inference_mode():
        y = torch.zeros(3)
    glue.bump_version(y)
    assert glue.is_compiling is torch.compiler.is_compiling and not glue.is_compiling()
