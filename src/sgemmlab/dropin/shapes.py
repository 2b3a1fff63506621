"""What the switch asks of a call's arguments before it serves it: α and β as the kernels'
floats, shapes torch accepts, a bias that broadcasts as torch broadcasts it (and whether the
kernel's epilogue can read it in place), outputs that overlap an input, the very same view,
and the key a served signature's recipe is kept under. Pure arithmetic on torch's metadata:
nothing is launched."""

from __future__ import annotations

from .. import product


def _shape_ok(a, b, dims: int) -> bool:
    if dims == 2:
        return a.shape[1] == b.shape[0]
    return a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1]


def _out_shape(a, b, dims: int) -> tuple:
    return (a.shape[0], b.shape[1]) if dims == 2 else (a.shape[0], a.shape[1], b.shape[2])


def _broadcasts(x, shape: tuple) -> bool:
    """x expands to `shape` by torch's rules (as addmm's and baddbmm's input must)."""
    if x.dim() > len(shape):
        return False
    return all(n == 1 or n == m for n, m in zip(reversed(x.shape), reversed(shape)))


def _overlap(c, a, b) -> bool:
    """c shares memory with a or b (then torch runs the call: it defines the result)."""
    lo, hi = _extent(c)
    return any(lo < end and start < hi for start, end in (_extent(a), _extent(b)))


def _extent(t) -> tuple[int, int]:
    if t.numel() == 0:
        return (0, 0)
    start = t.data_ptr()
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 1)
    return start, start + 4 * (last + 1)


def _broadcast_strides(x, shape: tuple) -> tuple[int, int, int]:
    """x's strides (batch, rows, columns) as broadcast to `shape` (2 or 3 dimensions): 0
    where x has no such dimension or a size of 1 there."""
    full = [0, 0, 0]
    for k, (n, st) in enumerate(zip(reversed(x.shape), reversed(x.stride()))):
        full[2 - k] = 0 if n == 1 else st
    return full[0], full[1], full[2]


def _same(x, y) -> bool:
    """x and y are the very same view of the same memory."""
    return x.data_ptr() == y.data_ptr() and x.shape == y.shape and x.stride() == y.stride()


def _scalar(v) -> float | None:
    """α or β as the kernels' float, or None where torch's kernel should decide (bool,
    complex, non-finite, beyond float32, or a non-zero value that float32 rounds to 0)."""
    t = type(v)
    if t is not int and t is not float:
        return None
    if v == 1 or v == 0:
        return float(v)
    try:
        return product.scalar("alpha", v)
    except (ValueError, OverflowError):
        return None


def _source(plan, x, shape: tuple) -> tuple[int, int] | None:
    """(x's pointer, its row stride) where the plan's kernel reads beta's term from x itself
    (Plan.takes_source; kernels/epilogue.cuh's Source): x's columns are consecutive (or C is
    one column), a batch either repeats x or, folded into one taller product, continues its
    rows, and x is 16-byte aligned with rows a multiple of 4 elements apart (the float4
    epilogue). None otherwise: x is then copied into the output first (`_fill`)."""
    if not plan.takes_source or x.data_ptr() & 15:
        return None
    bs, rs, cs = _broadcast_strides(x, shape)
    if cs != 1 and shape[-1] != 1 or rs % 4:
        return None
    if len(shape) == 3 and shape[0] > 1 and \
            bs != (0 if plan.gemm.batch > 1 else shape[1] * rs):
        return None
    return x.data_ptr(), rs


def _recipe_key(x, a, b, beta, alpha, opts) -> tuple:
    """What a served addmm/baddbmm's handling depends on, besides what every call checks
    first (float32, the negative bits): geometry, devices, the operands' alignment, α and β
    (with their types: True is not 1 here) and the options."""
    return (x.shape, x.stride(), a.shape, a.stride(), b.shape, b.stride(), x.get_device(),
            a.get_device(), b.get_device(), (a.data_ptr() | b.data_ptr()) & 15 == 0,
            type(beta), beta, type(alpha), alpha, opts)
