"""Ozaki scheme II for FP32, in NumPy: C = A B from products of INT8 residues.

The scheme (Ozaki, Uchino and Imamura, arXiv 2504.08009; its INT8 form on GPUs, Uchino et
al., SC'25), as built here:

1. **Scale to integers.** Row i of A is multiplied by 2^mu_i and column j of B by 2^nu_j,
   then rounded to the nearest integer: A' = rint(2^mu A), B' = rint(B 2^nu). (Rounding,
   not truncation: a truncation's error always has the sign of the value, and on
   all-positive inputs those errors add up instead of cancelling; rounded, 7 moduli are as
   accurate as an FP32 product on flat rows, where truncated ones need 8.)
   Cauchy-Schwarz bounds every entry of their product: |A'B'|_ij <= |A'_i|_2 |B'_j|_2
   <= (2^mu_i |A_i|_2 + sqrt(K)/2)(2^nu_j |B_j|_2 + sqrt(K)/2). So the exponents are the
   largest with 2^mu_i |A_i|_2 <= R and 2^nu_j |B_j|_2 <= R, where (R + sqrt(K)/2)^2 is
   just below M / 2 (`radius`) and M is the product of the moduli: then |A'B'| < M / 2
   for every i, j, the condition under which the remainders below decide A'B' exactly.
   The rule depends on each row's and column's norm only, so it is the same for A and for
   1000 A (scale invariant).
2. **Residues.** For each modulus m_l, A' mod m_l and B' mod m_l, taken symmetric (in
   [-m_l/2, m_l/2)), fit INT8 (every modulus is at most 256).
3. **INT8 products.** C_l = (A' mod m_l)(B' mod m_l), exact in INT32 for K < 2^17 (each
   term is at most 2^14 in magnitude).
4. **Chinese remainder theorem.** A'B' is the one integer of magnitude below M / 2 that
   leaves the remainders C_l: found here digit by digit in a balanced mixed radix (Garner's
   method: integer operations on numbers below 2^16 each), then summed in FP64.
5. **Scale back.** C = 2^-mu_i (A'B')_ij 2^-nu_j, rounded to FP32.

Error. Rounding A_i loses at most 2^-mu_i / 2 per entry, about |A_i|_2 / 2R: with N
moduli R is about 2^(4N) (2^27.6 for 7 moduli, 2^31.5 for 8), so an entry keeps about 4N
bits relative to its row's norm (an FP32 entry has 24 relative to itself). The product's
worst-case error is then about (sum_k |B_kj|) |A_i|_2 / 2R plus its mirror for B, against
FP32's typical sqrt(K) u (|A||B|)_ij. A row
whose entries span many binades keeps fewer bits in its small entries, and a product that
only those small entries feed (its large partners in B being zero, say) can lose them all:
`scaling_loss` measures that per row and column, so a caller can refuse such inputs.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

#: The largest modulus: symmetric residues of 256 fill INT8 exactly ([-128, 127]).
LARGEST = 256
#: K at most this: an INT8 x INT8 term is at most 2^14 in magnitude ((-128)^2), and a sum
#: of K of them must stay at or below INT32's largest, 2^31 - 1 (a longer K is split into
#: parts whose products are added before the CRT).
MAX_K = 2**17 - 1


@lru_cache(maxsize=None)
def moduli(count: int) -> tuple[int, ...]:
    """`count` pairwise coprime moduli, the largest first from 256 down (each a larger
    modulus, so each carries as many bits as it can)."""
    if not 1 <= count <= 20:
        raise ValueError(f"count must be 1..20 moduli, got {count}")
    out: list[int] = []
    m = LARGEST
    while len(out) < count:
        if all(math.gcd(m, p) == 1 for p in out):
            out.append(m)
        m -= 1
    return tuple(out)


def product_bound(count: int) -> int:
    """M: the product of the first `count` moduli."""
    return math.prod(moduli(count))


#: R^2 stays this far below M / 2 (relatively): the recombination then finds the multiple of
#: M to take away from a sum rounded in FP32 (kernels/hopper/ozaki.cu, oz_crt), with room to
#: spare. It costs 2^-13 of R, nothing of the scheme's bits.
MARGIN = 2.0**-12


@lru_cache(maxsize=None)
def radius(count: int, k: int = 1) -> float:
    """R: the largest double with (R + sqrt(k) / 2)^2 <= (M / 2)(1 - MARGIN). Rows scaled to
    2-norms at most R and rounded (each entry moves by at most 1/2: the norm by at most
    sqrt(k) / 2) give |A'B'|_ij < M / 2 (Cauchy-Schwarz)."""
    from fractions import Fraction

    bound = Fraction(product_bound(count), 2) * (1 - Fraction(MARGIN))
    step = Fraction(math.isqrt(k) + 1, 2)  # at least sqrt(k) / 2
    r = math.sqrt(float(bound)) - float(step)
    while r > 0 and (Fraction(r) + step) ** 2 > bound:
        r = math.nextafter(r, -math.inf)
    if r <= 0:
        raise ValueError(f"{count} moduli cannot hold a product of K = {k} rounded terms")
    return r


def exponents(norms: np.ndarray, count: int, k: int = 1) -> np.ndarray:
    """The scaling exponents for rows (or columns) of length k and these 2-norms: the largest
    integer e with 2^e norm <= R (`radius`), found exactly from the binary exponents (frexp),
    as the kernel does; 0 for a zero row (it stays zero)."""
    norms = np.asarray(norms, np.float64)
    f, en = np.frexp(norms)
    g, eg = math.frexp(radius(count, k))
    e = np.where(f <= g, eg - en, eg - en - 1)
    return np.where(norms > 0, e, 0).astype(np.int64)


def scales(A: np.ndarray, B: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(mu, nu): the exponents of A's rows and B's columns (`exponents` of their 2-norms)."""
    k = np.shape(A)[1]
    return (exponents(np.linalg.norm(np.asarray(A, np.float64), axis=1), count, k),
            exponents(np.linalg.norm(np.asarray(B, np.float64), axis=0), count, k))


def to_integers(x: np.ndarray, e: np.ndarray, axis: int) -> np.ndarray:
    """rint(2^e x) as int64 (to the nearest, ties to even), e per row (axis=1: e scales rows)
    or per column (axis=0)."""
    scale = e[:, None] if axis == 1 else e[None, :]
    return np.rint(np.ldexp(x.astype(np.float64), scale)).astype(np.int64)


def residues(x: np.ndarray, m: int) -> np.ndarray:
    """x mod m, symmetric: in [-(m // 2), m - 1 - m // 2], as int8."""
    h = m // 2
    return (np.mod(x + h, m) - h).astype(np.int8)


def crt(products: list[np.ndarray], mods: tuple[int, ...]) -> np.ndarray:
    """The integers X with X = products[l] (mod mods[l]) for every l and |X| < M / 2, as
    float64: balanced mixed-radix digits d_l in [-(m_l // 2), m_l - 1 - m_l // 2],
    X = d_0 + m_0 (d_1 + m_1 (d_2 + ...)), summed exactly in int64 and rounded to float64
    once while M / 2 < 2^63 (up to 8 moduli), in float64 beyond."""
    digits: list[np.ndarray] = []
    for c, m in zip(products, mods):
        h = m // 2
        # the value of the digits so far, mod m: d_0 + m_0 d_1 + ... (each step below 2^16)
        partial = np.zeros_like(c, dtype=np.int64)
        weight = 1
        for d, p in zip(digits, mods):
            partial = np.mod(partial + d * weight, m)
            weight = weight * p % m
        inverse = pow(weight, -1, m)  # weight = m_0 ... m_(l-1) mod m (1 for the first)
        d = np.mod((np.mod(c, m) - partial) * inverse + h, m) - h
        digits.append(d.astype(np.int64))
    exact = math.prod(mods) // 2 < 2**63
    x = np.zeros(products[0].shape, dtype=np.int64 if exact else np.float64)
    for d, m in zip(reversed(digits), reversed(mods)):
        x = x * m + d  # Horner from the top digit: every partial sum below M / 2
    return x.astype(np.float64)


#: The least flatness a row of A (column of B) may have for the scheme to serve it:
#: |x|_1 / (sqrt(n) |x|_2) over its n nonzero entries (1 when they are all alike in size;
#: about 0.8 for normal entries, 0.87 for uniform ones). A row whose mass sits in a few
#: entries scales its small ones to few bits, and an output those small entries decide
#: (where the other operand is large) loses them: rare huge entries, rows spanning 2^60,
#: entries spread over 2^+-16. Below FLAT the row's (column's) outputs are not taken from
#: the scheme but from an FP64-accumulated dot product of the FP32 inputs. The model
#: behind the figure: with the rounding errors 2^-mu / 2 and an output of about
#: |A_i|_1 |B_j|_1 / K, the scheme's worst case over FP32's typical error is about
#: 1 / (2 R u phi), 2^-7 for 8 moduli at phi = FLAT. Flat rows (normal, uniform,
#: all-positive entries) read 0.7 and more at K >= 17; the accuracy set's breakers 0.25 and
#: less (tests/test_ozaki_reference.py).
FLAT = 0.3

#: The shortest K the scheme serves. Below it a product of few terms on rows of mixed
#: magnitudes can hang on one small entry that passes the flatness rule (the accuracy set's
#: mixed and span inputs at K = 17), and so short a product costs more in the passes around
#: the INT8 products than it saves: exact FP32 serves it instead.
MIN_K = 256


def flatness(x: np.ndarray, axis: int) -> np.ndarray:
    """|x|_1 / (sqrt(n) |x|_2) of each row (axis=1) or column (axis=0) over its n nonzero
    entries, in FP64; 1 for an empty one (nothing to lose)."""
    x = np.abs(np.asarray(x, np.float64))
    n = np.count_nonzero(x, axis=axis)
    l1, l2 = x.sum(axis=axis), np.sqrt((x * x).sum(axis=axis))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, l1 / (np.sqrt(n) * l2), 1.0)


#: The moduli of the FP32-accurate product. Rounded, 7 are as accurate as an FP32 product on
#: normal, uniform and all-positive inputs; rows of mixed magnitudes (entries spread over
#: 2^+-16) need 8 (tests/test_ozaki_reference.py).
COUNT = 8


#: How a product decides which outputs the scheme may not give (`refusals`): "flatness",
#: every output of a row or column less flat than FLAT (what the kernels do); "product",
#: of those outputs only the ones whose coarse loss (`loss_ratios` with `magnitude_floor`,
#: one more UINT8 product on the GPU) is above 1, so that rows with outlier features, whose
#: |A||B| the outliers make, are served.
RULES = ("flatness", "product")


def refusals(A: np.ndarray, B: np.ndarray, count: int = COUNT, flat: float = FLAT,
             rule: str = "flatness") -> np.ndarray:
    """The outputs (a boolean M x N mask) whose value comes from the FP64 fallback."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    rows, cols = flatness(A, 1) < flat, flatness(B, 0) < flat
    mask = rows[:, None] | cols[None, :]
    if rule == "product" and mask.any():
        mask &= loss_ratios(A, B, count, coarse=True) > 1
    return mask


def balance(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """d, one exponent per k that balances A's column k against B's row k: A D and D^-1 B,
    D = diag(2^d), have the same product, exactly (powers of two, in FP64), and column k of
    A D and row k of D^-1 B have 2-norms within a factor of about 2 of each other. With
    s_A = |A_:k|_2^2 and s_B = |B_k:|_2^2, d_k = floor((ilogb s_B - ilogb s_A) / 4) (0 where
    either is 0). Activations with a few outlier features (columns of A 100 or 1000 times
    the rest) become rows the flatness rule serves: the outlier columns shrink by about the
    square root of their excess, and B's matching rows grow as much."""
    A64, B64 = np.asarray(A, np.float64), np.asarray(B, np.float64)
    sa, sb = (A64 * A64).sum(axis=0), (B64 * B64).sum(axis=1)
    ok = (sa > 0) & (sb > 0) & np.isfinite(sa) & np.isfinite(sb)
    ea = np.frexp(np.where(ok, sa, 1.0))[1] - 1  # ilogb: frexp's exponent less one
    eb = np.frexp(np.where(ok, sb, 1.0))[1] - 1
    return np.where(ok, (eb - ea) // 4, 0).astype(np.int64)


def served(A: np.ndarray, B: np.ndarray, count: int = COUNT, flat: float = FLAT,
           rule: str = "flatness", balanced: bool = False
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A', B', refused): the operands the scheme scales to integers, A and B, or (balanced,
    where the rule refuses some output with A and B and refuses fewer with them) A D and
    D^-1 B in FP64 (`balance`), and the outputs the fallback gives."""
    mask = refusals(A, B, count, flat, rule)
    if not (balanced and mask.any()):
        return A, B, mask
    d = balance(A, B)
    Ad = np.ldexp(np.asarray(A, np.float64), d[None, :])
    Bd = np.ldexp(np.asarray(B, np.float64), -d[:, None])
    second = refusals(Ad, Bd, count, flat, rule)
    return (Ad, Bd, second) if second.sum() < mask.sum() else (A, B, mask)


def matmul(A: np.ndarray, B: np.ndarray, count: int = COUNT,
           exps: tuple[np.ndarray, np.ndarray] | None = None, flat: float = FLAT,
           rule: str = "flatness", balanced: bool = True) -> np.ndarray:
    """A @ B (float32 operands) by the scheme with `count` moduli, as float32. `exps`: (mu, nu)
    to use instead of `scales`' (a kernel's, whose norms sum in another order). The outputs
    `refusals` names (rows of A and columns of B less flat than `flat`, 0: none; with
    rule="product" only those of them the coarse loss refuses) are the FP32 inputs'
    products summed in FP64. `balanced`: where the rule refuses any output, the scheme is
    also tried on A D and D^-1 B (`balance`), and taken when it refuses fewer outputs, as
    the kernels do."""
    A, B = np.asarray(A, dtype=np.float32), np.asarray(B, dtype=np.float32)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"shapes {A.shape} and {B.shape} do not multiply")
    if A.shape[1] > MAX_K:
        raise ValueError(f"K = {A.shape[1]} is above {MAX_K}: split K first")
    if not (np.isfinite(A).all() and np.isfinite(B).all()):
        raise ValueError("the scheme takes finite operands only (NaN and Inf have no residue)")
    mods = moduli(count)
    # (the kernels split a refused row or column as zeros: that changes only its own
    # outputs, which the fallback gives)
    As, Bs, mask = served(A, B, count, flat, rule, balanced)
    mu, nu = scales(As, Bs, count) if exps is None else exps
    Ai, Bi = to_integers(As, mu, axis=1), to_integers(Bs, nu, axis=0)
    products = [residues(Ai, m).astype(np.int64) @ residues(Bi, m).astype(np.int64)
                for m in mods]
    exact = crt(products, mods)
    C = np.ldexp(exact, -(mu[:, None] + nu[None, :])).astype(np.float32)
    if mask.any():  # the refused outputs: the FP32 inputs' products summed in FP64
        fallback = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
        C = np.where(mask, fallback, C)
    return C


#: The binades below each row's (column's) largest entry that `magnitude_floor` keeps: its
#: powers of two, 2^0 .. 2^WINDOW, fit an unsigned INT8 operand.
WINDOW = 7


def magnitude_floor(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A lower bound of |A| @ |B| from one product of small integers, as a kernel would get
    it from one more UINT8 product: each entry becomes the power of two at or below it,
    kept only within WINDOW binades of its row's (A) or column's (B) largest, as 2^p with p
    in 0..WINDOW; smaller entries count as zero (so the bound stays below)."""
    def powers(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(divide="ignore"):
            e = np.floor(np.log2(x))  # x >= 2^e
        top = np.max(np.where(x > 0, e, -np.inf), axis=axis, keepdims=True)
        base = np.where(np.isfinite(top), top, 0) - WINDOW
        p = e - base
        keep = (x > 0) & (p >= 0)
        return np.where(keep, np.exp2(np.where(keep, p, 0)), 0.0), base

    a, ea = powers(np.abs(np.asarray(A, np.float64)), 1)
    b, eb = powers(np.abs(np.asarray(B, np.float64)), 0)
    return (a @ b) * np.exp2(ea) * np.exp2(eb)


def scaling_loss(A: np.ndarray, B: np.ndarray, count: int = COUNT, coarse: bool = False
                 ) -> float:
    """The largest of `loss_ratios`, over the product's entries."""
    ratio = loss_ratios(A, B, count, coarse)
    return float(ratio.max()) if ratio.size else 0.0


def loss_ratios(A: np.ndarray, B: np.ndarray, count: int = COUNT, coarse: bool = False
                ) -> np.ndarray:
    """Per output, the rounding's worst-case error over an FP32 product's typical one,
    sqrt(K) u (|A||B|)_ij (round-to-nearest errors of K terms add up as a random walk;
    FP32's worst case, K u (|A||B|)_ij, is rarely approached): above 1 the scheme may be
    less accurate than an FP32 product there (inputs whose rows or columns span many
    binades). `coarse`: with |A||B| bounded from below by `magnitude_floor` (what a kernel
    can afford), never below the exact ratio."""
    A64, B64 = np.abs(np.asarray(A, np.float64)), np.abs(np.asarray(B, np.float64))
    mu, nu = scales(A, B, count)
    # |error_ij| <= (2^-mu_i (sum_k |B_kj|) + (sum_k |A_ik|) 2^-nu_j) / 2
    #               + K 2^-mu_i 2^-nu_j / 4
    k = A64.shape[1]
    bound = (np.ldexp(1.0, -mu)[:, None] * B64.sum(axis=0)[None, :]
             + A64.sum(axis=1)[:, None] * np.ldexp(1.0, -nu)[None, :]) / 2 \
        + k * np.ldexp(1.0, -(mu[:, None] + nu[None, :])) / 4
    fp32 = math.sqrt(max(k, 1)) * 2.0**-24 * (magnitude_floor(A, B) if coarse else A64 @ B64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(fp32 > 0, bound / fp32, np.where(bound > 0, np.inf, 0.0))
