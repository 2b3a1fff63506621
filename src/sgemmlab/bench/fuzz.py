"""`sgemmlab fuzz`: products drawn by hypothesis, each checked against float64 (issue 18).

A case is a whole call as a user makes it: M, N, K from 1 to 4096 (primes and powers of two and
their neighbours favoured; K to 65536 where the work allows), both operands row- or column-major,
leading dimensions longer than the matrix and base offsets that break 16-byte alignment, batches
with either operand broadcast, alpha and beta from 0, 1, negative, subnormal and ordinary values,
NaN or Inf put into an operand (or NaN into C with beta = 0, which must never be read), or one
finite entry of 2^20 among values below 1 (a row "fp32_emulated" refuses: its outputs come from
the FP64 fallback), the precision ("ieee", "fp32_emulated", "tf32x3", and "tf32", judged
against the product of its operands as TF32 keeps them), deterministic or not, and the kernel:
the dispatcher's choice, or a rung named with `kernel=` among those that serve the case. Each
is run through `sgemmlab.sgemm` and judged (`judge`):
- where the float64 reference is NaN, C is NaN; where it is +-Inf, C is the same Inf (IEEE
  propagation, the reference computed from the same operands);
- everywhere else C is finite and within the FP32 bound of bench/check.py, plus the
  subnormal floor (a result in the subnormal range has an absolute spacing of 2^-149);
- the padding around C's view is untouched (a sentinel is written there first).
A call the API refuses with one of its own exceptions counts as refused, not checked.

The first failure stops the campaign and hypothesis shrinks it to a minimal case, which the
results file keeps (and tests/data/fuzz_regressions.json, replayed by the GPU tests).
The operands also arrive the ways users hand them over (`view`, `producer`, `scalar`):
torch views with the negative bit (`torch._neg_view`, and `z.conj().imag`, which torch makes
a negative view of; as C it must be refused); CuPy arrays still being written on a
non-blocking CuPy stream of their own, and pending JAX results, both through DLPack only
(the call must make its stream wait for them); alpha and beta as Python ints, NumPy
scalars, Fractions and 0-d tensors (on the GPU too). With alpha = 0 the reference is beta C
whatever NaN or Inf A and B hold (BLAS reads neither).

The call itself is drawn too (`entry`): `sgemmlab.sgemm`, or torch's own ops inside
`sgemmlab.torch_mode()`, which reach sgemmlab through torch's dispatcher: "switch" is
torch.addmm (torch.baddbmm for a batch, a broadcast operand expanded) with `out=C` and C as
the input, the BLAS update; "switch_bias" the same into a new tensor with a row of N biases
as the input (the fill kernel, and the recipes a second call takes). Each switch case is
called twice, first on fresh operands of the same geometry: the judged call then runs on a
plan made before and a launch repointed at its operands. The switch serves only what torch
would compute the same way, so its cases draw none of what it hands to torch (α = 0, the
"tf32" precision, named kernels, other producers, scalar types, a negative C).

Documented limits are drawn around, not into: Inf inputs with "tf32x3" (docs/api.md: the
split's remainder is inf - inf); and at the tensor-core precisions subnormal values may be
lost (docs/api.md: the tensor cores flush subnormal operands), so the floor there is the
smallest normal number, not the subnormal spacing. At "ieee" the strict floor holds, with
or without `deterministic`: the first campaign found subnormal results zeroed by Stream-K's
atomic fix-up (the GPU's float atomic add flushes subnormals), which now adds a partial
below 2^-100 by compare-and-swap instead.
"""

from __future__ import annotations

import contextlib
import math
import random
from dataclasses import asdict, dataclass

SPECIAL = (1, 2, 3, 4, 5, 7, 8, 13, 15, 16, 17, 31, 32, 33, 61, 63, 64, 65, 97, 127, 128,
           129, 251, 255, 256, 257, 509, 511, 512, 513, 1021, 1023, 1024, 1025, 2039, 2047,
           2048, 2049, 4093, 4095, 4096)
LONG_K = (8191, 8192, 16384, 32768, 65536)
MAX_WORK = 2**31  # M N K batch at most per case: 10,000 cases stay within minutes
ALPHAS = (1.0, 0.0, -1.0, 0.5, -2.5, 3.0, 1e-40)  # 1e-40: subnormal in FP32
BETAS = (0.0, 1.0, -1.0, 0.25, -3.0, 1e-40)
INJECT = ("", "", "", "", "nan_a", "inf_b", "ninf_a", "nan_c", "spike_a", "spike_b")
#: A finite entry far above the rest (the operands are in [-1, 1)): its row of A (column of
#: B) is too uneven for one scaling, so "fp32_emulated" refuses it and its outputs come from
#: the FP64 fallback; the other precisions take it as any value.
SPIKE = 2.0**20
#: torch views with the negative bit: of A, B or both, A as z.conj().imag, or C (refused)
VIEWS = ("",) * 16 + ("neg_a", "neg_b", "neg_ab", "conj_a", "neg_c")
#: who made the operands: torch, or (through DLPack only) CuPy on a stream of its own with
#: the last writes still pending, or a JAX jit result not yet computed
PRODUCERS = ("torch",) * 12 + ("cupy", "jax")
#: how alpha and beta are passed (every type the API accepts; "int" only where integral)
SCALARS = ("float",) * 4 + ("int", "np32", "np64", "fraction", "tensor", "cuda_tensor")
#: how the product is called: sgemmlab.sgemm, or torch ops under sgemmlab.torch_mode()
ENTRIES = ("sgemm",) * 5 + ("switch", "switch_bias")
SUBNORMAL_SPACING = 2.0**-149
SMALLEST_NORMAL = 2.0**-126  # the floor where the tensor cores may flush subnormals to zero


@dataclass(frozen=True)
class Case:
    M: int
    N: int
    K: int
    layout: str = "NN"
    batch: int = 1
    broadcast: str = ""  # with batch > 1: "a" or "b" is one matrix for the whole batch
    pad: tuple[int, int, int] = (0, 0, 0)  # extra elements per row (column) of A, B, C
    offset: int = 0  # elements before each operand's first (0: 16-byte aligned)
    alpha: float = 1.0
    beta: float = 0.0
    inject: str = ""
    precision: str = "ieee"
    deterministic: bool = False
    kernel: str | None = None
    view: str = ""
    producer: str = "torch"
    scalar: str = "float"
    entry: str = "sgemm"

    def label(self) -> str:
        b = f"{self.batch}{self.broadcast}@" if self.batch > 1 else ""
        k = f" kernel={self.kernel}" if self.kernel else ""
        how = "".join(f" {x}" for x in (self.view, self.producer != "torch" and self.producer,
                                         self.scalar != "float" and self.scalar,
                                         self.entry != "sgemm" and self.entry) if x)
        return (f"{b}{self.M}x{self.N}x{self.K}:{self.layout} pad={self.pad} off={self.offset} "
                f"a={self.alpha} b={self.beta} {self.inject or 'finite'} {self.precision}"
                f"{' det' if self.deterministic else ''}{k}{how}")


def cases():
    """The hypothesis strategy of Cases (the kernel is drawn later, among those that serve
    the case: `kernel_for`)."""
    from hypothesis import strategies as st

    dim = st.one_of(st.sampled_from(SPECIAL), st.integers(1, 4096))

    @st.composite
    def case(draw):
        M, N = draw(dim), draw(dim)
        K = draw(st.one_of(dim, st.sampled_from(LONG_K)))
        batch = draw(st.sampled_from((1, 1, 1, 2, 3, 8)))
        K = max(1, min(K, MAX_WORK // (M * N * batch)))
        broadcast = draw(st.sampled_from(("", "a", "b"))) if batch > 1 else ""
        precision = draw(st.sampled_from(("ieee", "ieee", "ieee", "fp32_emulated", "tf32x3",
                                          "tf32")))
        inject = draw(st.sampled_from(INJECT))
        if precision == "tf32x3" and "inf" in inject:
            inject = ""  # documented: Inf with tf32x3 gives NaN (docs/api.md)
        c = Case(M, N, K, draw(st.sampled_from(("NN", "NT", "TN", "TT"))), batch, broadcast,
                 tuple(draw(st.sampled_from((0, 0, 1, 3, 4, 5))) for _ in range(3)),
                 draw(st.sampled_from((0, 0, 0, 1, 2, 3))), draw(st.sampled_from(ALPHAS)),
                 draw(st.sampled_from(BETAS)), inject, precision, draw(st.booleans()),
                 "?" if draw(st.integers(0, 3)) == 0 else None, draw(st.sampled_from(VIEWS)),
                 draw(st.sampled_from(producers)), draw(st.sampled_from(SCALARS)),
                 draw(st.sampled_from(ENTRIES)))
        return c if c.entry == "sgemm" else for_the_switch(c)

    producers = tuple(p for p in PRODUCERS if p == "torch" or _importable(p))
    return case()


def for_the_switch(c: Case) -> Case:
    """A drawn case as the switch serves it: none of what it hands to torch's own kernels
    (α = 0, "tf32", a named kernel, another producer or scalar type, a negative C)."""
    from dataclasses import replace

    return replace(c, alpha=c.alpha or 1.0, precision="ieee" if c.precision == "tf32" else
                   c.precision, kernel=None, producer="torch", scalar="float",
                   view="" if c.view == "neg_c" else c.view)


def _importable(module: str) -> bool:
    """Whether the producer's library is installed (the campaign draws only those)."""
    import importlib.util

    return importlib.util.find_spec(module) is not None


def kernel_for(case: Case, rng: random.Random) -> str | None:
    """For a case that asks for a named kernel ("?"): a rung that serves it — its precision,
    its shape, its layout and batch features — picked at random; None: the dispatcher."""
    if case.kernel != "?":
        return case.kernel
    from .. import registry

    needs = set()
    if case.layout != "NN":
        needs.add("layouts")
    pool = [r for r in registry.ALL + registry.TENSOR + registry.HISTORY
            if r.precision == case.precision and needs <= r.features
            and r.serves(case.M, case.N, case.K)]
    return rng.choice(pool).label if pool else None


def _matrix(torch, rows: int, cols: int, col_major: bool, pad: int, offset: int,
            batch: int, gen, fill: float | None = None):
    """A (batch x) rows x cols view into a larger buffer: leading dimension padded by `pad`,
    the first element `offset` elements in; the buffer's other elements hold a sentinel."""
    ld = (rows if col_major else cols) + pad
    inner = (cols if col_major else rows) * ld
    size = offset + batch * inner
    buf = torch.full((size,), 7.77e7, device="cuda")  # the sentinel: a value no result has
    stride = (1, ld) if col_major else (ld, 1)
    shape, strides = ((rows, cols), stride) if batch == 1 else \
        ((batch, rows, cols), (inner, *stride))
    view = torch.as_strided(buf, shape, strides, offset)
    if fill is None:
        view.copy_(torch.rand(shape, device="cuda", generator=gen) * 2 - 1)
    else:
        view.fill_(fill)
    return buf, view


def operands(case: Case, seed: int):
    """(A, B, C, C's buffer, C0) on the GPU for `case`, with its NaN or Inf put in."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    ta, tb = case.layout[0] == "T", case.layout[1] == "T"
    ba = 1 if case.broadcast == "a" else case.batch
    bb = 1 if case.broadcast == "b" else case.batch
    _, A = _matrix(torch, case.M, case.K, ta, case.pad[0], case.offset, ba, gen)
    _, B = _matrix(torch, case.K, case.N, tb, case.pad[1], case.offset, bb, gen)
    cbuf, C = _matrix(torch, case.M, case.N, False, case.pad[2], case.offset, case.batch, gen,
                      fill=float("nan") if case.beta == 0 else None)
    where = torch.Generator().manual_seed(seed)

    def first(X):  # the first matrix of a batch (a view: writing it writes the operand)
        return X if X.dim() == 2 else X[0]

    if case.inject == "nan_a":
        first(A)[_pick(where, case.M), _pick(where, case.K)] = math.nan
    elif case.inject == "ninf_a":
        first(A)[_pick(where, case.M), _pick(where, case.K)] = -math.inf
    elif case.inject == "inf_b":
        first(B)[_pick(where, case.K), _pick(where, case.N)] = math.inf
    elif case.inject == "nan_c" and case.beta != 0:
        first(C)[_pick(where, case.M), _pick(where, case.N)] = math.nan
    elif case.inject == "spike_a":
        first(A)[_pick(where, case.M), _pick(where, case.K)] = SPIKE
    elif case.inject == "spike_b":
        first(B)[_pick(where, case.K), _pick(where, case.N)] = -SPIKE
    if case.batch > 1 and case.broadcast == "a":
        A = A[0] if A.dim() == 3 else A
    if case.batch > 1 and case.broadcast == "b":
        B = B[0] if B.dim() == 3 else B
    if case.view in ("neg_a", "neg_ab"):
        A = _negative_view(torch, A)
    if case.view in ("neg_b", "neg_ab"):
        B = _negative_view(torch, B)
    if case.view == "conj_a":
        A = torch.complex(torch.zeros_like(A), -A).conj().imag  # torch's negative view
    return A, B, C, cbuf, C.clone()


def _negative_view(torch, X):
    """X's values as a view with torch's negative bit over the same memory (which then holds
    them negated): what `z.conj().imag` and `torch._neg_view` hand over."""
    X.neg_()
    return torch._neg_view(X)


def as_scalar(value: float, how: str):
    """alpha or beta as the type the case hands over (each keeps the float32 value)."""
    import fractions

    import numpy as np

    if how == "int" and float(value).is_integer():
        return int(value)
    if how == "np32":
        return np.float32(value)
    if how == "np64":
        return np.float64(value)
    if how == "fraction":
        return fractions.Fraction(value)
    if how in ("tensor", "cuda_tensor"):
        import torch

        return torch.tensor(value, device="cuda" if how == "cuda_tensor" else "cpu")
    return float(value)


class OnlyDLPack:
    """An array that speaks DLPack and nothing else (as other libraries' arrays do)."""

    def __init__(self, x):
        self._x = x

    def __dlpack__(self, **kwargs):
        return self._x.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._x.__dlpack_device__()


@contextlib.contextmanager
def handed_over(case: Case, A, B):
    """(a, b) for the call, as `case.producer` makes them, through DLPack only (as other
    libraries' arrays arrive): the call reads the right values only if it makes its stream
    wait for the producer's.
    - "cupy": A's and B's memory is zeroed; a non-blocking CuPy stream, current while the
      call is made, holds a few milliseconds of work and then the writes of their values.
    - "jax": jit results not yet computed (after the same delay), of A's and B's values
      (JAX arrays are row-major and contiguous: the case's layout is A's and B's only).
    CuPy and JAX have no negative views: a negative view hands over its values."""
    if case.producer == "torch":
        yield A, B
        return
    import torch

    plain = [X.resolve_neg() for X in (A, B)]
    if case.producer == "jax":
        import os

        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax

        torch.cuda.synchronize()
        # fresh copies: XLA wants its buffers 16-byte aligned, and a case's offset is not
        xs = [jax.dlpack.from_dlpack(X.clone(memory_format=torch.contiguous_format))
              for X in plain]
        w = _delay(jax.numpy.asarray(_slow_seed()))
        yield tuple(OnlyDLPack(x + 0 * w[0, 0]) for x in xs)
        return
    import cupy

    values = [X.clone() for X in plain]
    for X in plain:
        X.zero_()
    torch.cuda.synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        w = _delay(cupy.asarray(_slow_seed()))
        arrays = [cupy.asarray(X) for X in plain]
        for x, v in zip(arrays, values):
            x[...] = cupy.asarray(v) + 0 * w[0, 0]
        yield tuple(OnlyDLPack(x) for x in arrays)


def _slow_seed():
    """A 2048 x 2048 matrix whose repeated squares (`_delay`) take a few milliseconds and
    decay to 0, so that the values handed over can depend on them."""
    import numpy as np

    return np.full((2048, 2048), 1e-4, np.float32)


def _delay(w):
    for _ in range(8):
        w = w @ w
    return w


def _pick(gen, n: int) -> int:
    import torch

    return int(torch.randint(0, n, (1,), generator=gen))


def tf32(x, rounding: str):
    """x as a TF32 operand: its 13 low mantissa bits cleared ("truncate": what the tensor
    core reads of an FP32 word) or rounded off to nearest, ties away ("round": cvt.rna,
    which the 3xTF32 pre-pass uses); NaN and Inf as they are."""
    import torch

    bits = x.resolve_neg().contiguous().view(torch.int32)  # the values, not the memory
    if rounding == "round":
        bits = bits + 0x1000
    out = (bits & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(x), out, x)


def tf32_bound(K: int) -> float:
    """The bound of a "tf32" product against the product of its TF32 operands: the tensor
    core adds its products with truncation (issue 14), so its rounding errors do not cancel
    as FP32's do and grow like K 2^-24, not like sqrt(K): FP32's bound times 16, which is
    K 2^-24 at K = 65536, and K 2^-24 beyond (the campaign at c47e39d stopped at
    1x1x65536 tf32, 2.8e-4 against FP32's 2.4e-4)."""
    from .check import U32, error_bound

    return max(16 * error_bound(K), K * U32)


def judge(C, ref, K: int, *, alpha_ab, beta_c, spacing: float = SUBNORMAL_SPACING,
          bound: float | None = None, terms_rms=None) -> tuple[bool, str, float]:
    """(ok, why, error): IEEE propagation where the reference is not finite, FP32's bound
    everywhere else (plus the floor of `spacing`: the subnormal spacing, or the smallest
    normal where subnormals may be flushed), or `bound`; the error is relative to the
    largest of alpha AB, beta C0, the reference and `terms_rms` (the root of the sum of the
    squares of each element's products: what rounding errors that do not cancel scale with).
    A "tf32" product is judged against references made from its operands as TF32, within
    `tf32_bound`, relative to its terms' rms as well (`check`)."""
    import torch

    from .check import error_bound

    Cd = C.double()
    nan_ref, inf_ref = torch.isnan(ref), torch.isinf(ref)
    if bool((nan_ref & ~torch.isnan(Cd)).any()):
        return False, "a NaN of the reference is not NaN in C", math.inf
    if bool((inf_ref & (Cd != ref)).any()):
        return False, "an Inf of the reference is not the same Inf in C", math.inf
    finite = ~(nan_ref | inf_ref)
    if bool((finite & ~torch.isfinite(Cd)).any()):
        return False, "C is NaN or Inf where the reference is finite", math.inf
    if not bool(finite.any()):
        return True, "", 0.0
    floor = 4 * spacing * (K + 2)
    scale = max(float(t.abs()[finite].max()) if t is not None and t.numel() else 0.0
                for t in (alpha_ab, beta_c, ref, terms_rms))
    diff = float((Cd - ref).abs()[finite].max())
    err = diff / scale if scale > 0 else diff
    bound = (error_bound(K) if bound is None else bound) + (
        floor / scale if scale > 0 else floor)
    if not err <= bound:
        return False, f"error {err:.3e} > bound {bound:.3e}", err
    return True, "", err


def check(case: Case, seed: int) -> dict:
    """Run `case` through sgemmlab.sgemm and judge it: its record."""
    import torch

    import sgemmlab

    from ..errors import ConfigError, DispatchError, LayoutError, OperandError

    kernel = kernel_for(case, random.Random(seed)) if case.entry == "sgemm" else None
    A, B, C, cbuf, C0 = operands(case, seed)
    sentinel = cbuf.clone()
    rec = {**asdict(case), "kernel": kernel, "seed": seed}
    c_arg = torch._neg_view(C) if case.view == "neg_c" else C
    alpha, beta = as_scalar(case.alpha, case.scalar), as_scalar(case.beta, case.scalar)
    bias = None
    try:
        if case.entry == "sgemm":
            with handed_over(case, A, B) as (a_arg, b_arg):
                sgemmlab.sgemm(a_arg, b_arg, c_arg, alpha=alpha, beta=beta, out=c_arg,
                               kernel=kernel, deterministic=case.deterministic,
                               precision=case.precision)
        else:
            warm = operands(case, seed + 1)  # the same geometry at other addresses
            if case.entry == "switch_bias":
                bias = _bias(case, seed)
            with sgemmlab.torch_mode(precision=case.precision,
                                     deterministic=case.deterministic) as mode:
                through_switch(case, *warm[:3], _bias(case, seed + 1) if bias is not None
                               else None)
                out = through_switch(case, A, B, C, bias)
            # (a negative view may reach it resolved by torch's Negative fallback, or be
            # passed to torch: either is right, and the judge below checks the values)
            if not case.view and (sum(mode.passed.values()) or
                                  sum(mode.served.values()) != 2):
                return {**rec, "status": "failed", "error": math.inf,
                        "flushed_subnormals": False,
                        "why": f"the switch served {dict(mode.served)} and passed "
                               f"{dict(mode.passed)}, not both calls"}
            if bias is not None:
                C = out
        torch.cuda.synchronize()
    except (OperandError, LayoutError, ConfigError, DispatchError, ValueError,
            OverflowError) as exc:
        return {**rec, "status": "refused", "why": f"{type(exc).__name__}: {exc}"}
    if case.view == "neg_c":  # refused above, or it wrote through a negative view
        return {**rec, "status": "failed", "why": "a negative view was taken as the output",
                "error": math.inf, "flushed_subnormals": False}
    c_in = C0 if bias is None else bias.expand(C.shape)
    bc = case.beta * c_in.double() if case.beta != 0 else None
    spacing = SUBNORMAL_SPACING if case.precision == "ieee" else SMALLEST_NORMAL
    # "tf32" keeps 10 of the 23 mantissa bits of each operand, truncated by the tensor core
    # or rounded by a pre-pass, whichever path the call took (or all of them, where an
    # exact FP32 rung serves the shape instead: dispatch/tensor.py): each operand each way,
    # and FP32's bound against the product of what was kept (the rest is FP32 accumulation)
    modes = (None, "truncate", "round") if case.precision == "tf32" else (None,)
    verdicts = []
    for ma, mb in ((x, y) for x in modes for y in modes):
        a64 = (tf32(A, ma) if ma else A).double()
        b64 = (tf32(B, mb) if mb else B).double()
        # alpha = 0 reads neither A nor B (BLAS): their NaN and Inf do not count
        ab = case.alpha * torch.matmul(a64, b64) if case.alpha != 0 else torch.zeros_like(
            C0, dtype=torch.float64)
        ref = ab + bc if bc is not None else ab
        rms = None
        if ma:  # a long dot product whose terms cancel: its value says nothing of the
            # rounding of its terms (the campaign at 100e7bd: 1x1x16384 tf32, 2.5e-3 of its
            # value), their root sum of squares does
            rms = abs(case.alpha) * torch.matmul(a64 * a64, b64 * b64).sqrt()
        verdicts.append(judge(C, ref, case.K, alpha_ab=ab, beta_c=bc, spacing=spacing,
                              bound=tf32_bound(case.K) if case.precision == "tf32" else None,
                              terms_rms=rms))
        if verdicts[-1][0]:
            break
    ok, why, err = min(verdicts, key=lambda v: (not v[0], v[2]))
    if ok and bias is None:  # nothing outside C's view was written
        view = torch.zeros_like(cbuf, dtype=torch.bool)
        torch.as_strided(view, C.shape, C.stride(), C.storage_offset()).fill_(True)
        if not torch.equal(cbuf[~view], sentinel[~view]):
            ok, why = False, "an element outside C's view was written"
    from .check import error_bound

    # passed only by the floor where the tensor cores may flush subnormals (the docstring)
    flushed = ok and err > error_bound(case.K) and case.precision != "ieee"
    return {**rec, "status": "ok" if ok else "failed", "why": why, "error": err,
            "flushed_subnormals": flushed}


def through_switch(case: Case, A, B, C, bias):
    """The case's product as torch code makes it, under the switch (the caller's mode):
    with `bias` (a row of N), beta bias + alpha A B into a new tensor; else the BLAS update
    of C in place (out=C, C as the input). A batch goes to baddbmm, a broadcast operand
    expanded over it (a batch stride of 0)."""
    import torch

    x = C if bias is None else bias
    kw = {"beta": case.beta, "alpha": case.alpha}
    if bias is None:
        kw["out"] = C
    if case.batch == 1:
        return torch.addmm(x, A, B, **kw)
    A3 = A if A.dim() == 3 else A.expand(case.batch, *A.shape)
    B3 = B if B.dim() == 3 else B.expand(case.batch, *B.shape)
    return torch.baddbmm(x, A3, B3, **kw)


def _bias(case: Case, seed: int):
    """A row of N biases (NaN in one where the case injects NaN into C and beta reads it)."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed ^ 0x5EED)
    b = torch.rand(case.N, device="cuda", generator=gen) * 2 - 1
    if case.inject == "nan_c" and case.beta != 0:
        b[_pick(torch.Generator().manual_seed(seed), case.N)] = math.nan
    return b


def campaign(count: int, seed: int = 0, on_record=None) -> tuple[list[dict], dict | None]:
    """Check `count` generated cases (hypothesis, derandomized by `seed`); stop at the first
    failure, shrunk by hypothesis to a minimal case. (records, the minimal failure or None)"""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    records: list[dict] = []
    state = {"n": 0}

    @settings(max_examples=count, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink])
    @hseed(seed)
    @given(cases())
    def one(case):
        state["n"] += 1
        rec = check(case, seed * 1_000_003 + state["n"])
        records.append(rec)
        if on_record:
            on_record(rec)
        if rec["status"] == "failed":
            raise AssertionError(f"{case.label()}: {rec['why']}")

    try:
        one()
    except AssertionError:
        return records, next(r for r in reversed(records) if r["status"] == "failed")
    return records, None


def summary(records: list[dict], failure: dict | None) -> dict:
    by = {}
    for r in records:
        by[r["status"]] = by.get(r["status"], 0) + 1
    return {"cases": len(records), "checked": by.get("ok", 0) + by.get("failed", 0),
            "ok": by.get("ok", 0), "failed": by.get("failed", 0),
            "refused": by.get("refused", 0), "minimal_failure": failure,
            "kernels": sorted({r["kernel"] or "dispatch" for r in records}),
            "flushed_subnormals": sum(1 for r in records if r.get("flushed_subnormals")),
            "worst_error": max((r.get("error", 0.0) for r in records
                                if r["status"] == "ok" and not r.get("flushed_subnormals")),
                               default=0.0)}


#: Where `sgemmlab fuzz` keeps minimal failures unless told (--regressions): relative to
#: the current directory, which in the checkout is the file tests/test_fuzz_gpu.py replays;
#: never beside the installed package, whose parents are site-packages' in a wheel install.
REGRESSIONS = "tests/data/fuzz_regressions.json"


def keep_failure(failure: dict, path=REGRESSIONS):
    """Append `failure` to the JSON list at `path` (made if missing); returns its absolute
    path. Atomic: a run stopped mid-write leaves the list as it was, not a truncated one."""
    import json
    from pathlib import Path

    from ..runtime.files import write_atomic

    path = Path(path).absolute()
    old = json.loads(path.read_text()) if path.is_file() else []
    return write_atomic(path, json.dumps(old + [failure], indent=1) + "\n")
