"""The constants Ozaki scheme II's kernels take for its moduli (runtime/ozaki.py hands them
over): rung 26's reduction of each INT32 sum modulo m_l (kernels/hopper/26_ozaki_int8.cu,
Moduli), the split's residues (hopper/ozaki.cu, SplitModuli) and the recombination's exact
sums (CrtModuli). Each is a ctypes struct laid out as the kernel's; tests/test_ozaki_tricks.py
replays the arithmetic they feed against plain modular arithmetic."""

from __future__ import annotations

import ctypes
import math

MAX_MODULI = 20  # the kernels' constant arrays
#: rung 26's EXACT_DIV takes K up to this: its sums' |s| below 2^14 K (kernels/hopper/
#: 26_ozaki_int8.cu, residue_exact)
EXACT_K = 2**16 - 1


class _GemmModuli(ctypes.Structure):
    _fields_ = [("m", ctypes.c_int * MAX_MODULI), ("magic", ctypes.c_uint * MAX_MODULI),
                ("offset", ctypes.c_uint * MAX_MODULI), ("magic39", ctypes.c_uint * MAX_MODULI),
                ("half", ctypes.c_uint * MAX_MODULI), ("base", ctypes.c_uint * MAX_MODULI)]


class _SplitModuli(ctypes.Structure):
    _fields_ = [("m", ctypes.c_int * MAX_MODULI), ("factor", ctypes.c_int * MAX_MODULI),
                ("ratio", ctypes.c_double * MAX_MODULI), ("scaled", ctypes.c_int)]


class _CrtModuli(ctypes.Structure):
    _fields_ = [("w_hi", ctypes.c_double * MAX_MODULI), ("w_lo", ctypes.c_int * MAX_MODULI),
                ("m_hi", ctypes.c_double), ("m_lo", ctypes.c_int),
                ("inverse", ctypes.c_double), ("m", ctypes.c_ulonglong),
                ("piece", (ctypes.c_int * MAX_MODULI) * 3)]


def gemm_moduli(mods: tuple[int, ...]) -> _GemmModuli:
    """Rung 26's reduction constants: magic = ceil(2^32 / m), offset = the least multiple of
    m at or above 2^31 (kernels/hopper/26_ozaki_int8.cu, residue); for EXACT_DIV, magic39 =
    ceil(2^39 / m), half = lift + m / 2 and base = -128 lift / m mod 2^32, lift the least
    multiple of m at or above 2^14 EXACT_K (residue_exact)."""
    s = _GemmModuli()
    for i, m in enumerate(mods):
        s.m[i], s.magic[i], s.offset[i] = m, -(-2**32 // m), m * -(-2**31 // m)
        lift = m * -(-(2**14 * EXACT_K) // m)
        s.magic39[i], s.half[i] = -(-2**39 // m), lift + m // 2
        s.base[i] = -128 * (lift // m) % 2**32
    return s


def exact_division(mods: tuple[int, ...], K: int) -> bool:
    """Whether rung 26's EXACT_DIV reduces every sum of K terms exactly, for every modulus:
    a = s + half (|s| <= 2^14 K) lies in [0, 2^31), and a (m magic39 - 2^39) < 2^39, so
    that magic39's excess over 2^39 / m never carries a / m past the next integer:
    umulhi(a, magic39) >> 7 = floor(a / m)."""
    g = gemm_moduli(mods)
    for i, m in enumerate(mods):
        top, half = 2**14 * K, g.half[i]
        if half < top or half + top >= 2**31 or \
                (half + top) * (m * g.magic39[i] - 2**39) >= 2**39:
            return False
    return True


def crt_factors(mods: tuple[int, ...]) -> tuple[int, ...]:
    """y_l = (M / m_l)^-1 mod m_l: B's residues are multiplied by it in the split, so that the
    product's residue is already the s_l of X = sum_l s_l M / m_l - k M."""
    big = math.prod(mods)
    return tuple(pow(big // m, -1, m) for m in mods)


def split_moduli(mods: tuple[int, ...], factors: tuple[int, ...] | None = None
                 ) -> _SplitModuli:
    """oz_split's and oz_scale's constants: m_l, the factor y_l (B's: crt_factors; 1 for A)
    each residue is multiplied by, and y_l / m_l in FP64. The kernels' residues need every
    m_l odd or 256 (kernels/hopper/ozaki.cu, residue_words), as reference.moduli gives them."""
    s = _SplitModuli()
    for i, m in enumerate(mods):
        if m % 2 == 0 and m != 256:
            raise ValueError(f"modulus {m}: the split takes odd moduli and 256")
        y = factors[i] if factors else 1
        s.m[i], s.factor[i], s.ratio[i] = m, y, y / m
    s.scaled = int(bool(factors))
    return s


def crt_moduli(mods: tuple[int, ...]) -> _CrtModuli:
    """X = S - k M, S = sum_l s_l W_l, W_l = M / m_l, k the integer nearest S / M, in FP64
    exactly (kernels/hopper/ozaki.cu, CrtModuli): W_l = w_hi + w_lo split at 2^13, M at
    2^14."""
    big = math.prod(mods)
    s = _CrtModuli()
    for i, m in enumerate(mods):
        w = big // m
        s.w_hi[i], s.w_lo[i] = float(w - w % 2**13), w % 2**13
        assert s.w_hi[i] == w - w % 2**13  # exact: at most 43 significant bits
    s.m_hi, s.m_lo, s.inverse = float(big - big % 2**14), big % 2**14, 1.0 / big
    assert s.m_hi == big - big % 2**14
    # oz_crt_int's: M, and each W_l in three 19-bit pieces
    assert big < 2**64
    s.m = big
    for i, m in enumerate(mods):
        w = big // m
        assert w < 2**57
        for c in range(3):
            s.piece[c][i] = (w >> (19 * c)) & (2**19 - 1)
    return s
