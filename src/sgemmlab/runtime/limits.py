"""The two questions every launch path asks of sizes and pointers, answered once.

* **32-bit sizes.** The kernels take M, N, K and the leading dimensions as int32 and form
  row offsets in 64 bits: a size past INT32_MAX is refused with OverflowError. K is held
  further from 2^31 (K_MAX): the kernels step through K in 32-bit ints and may go up to
  one k-tile past it before comparing (rung 21's BK = 3072 plus 3 at most over every legal
  configuration; the tensor rungs' pre-pass 255), and the tiles of M and N must fit too
  (`check_tiles`). The audit behind these limits is in docs/worklog.md (session 9).
* **float4 legality.** A vectorized rung reads and writes global memory 16 bytes at a time
  only when every base pointer is 16-byte aligned and every leading dimension (and batch
  stride) is a multiple of 4 floats; otherwise the scalar variant is launched.
"""

from __future__ import annotations

from typing import Iterable

INT32_MAX = 2**31 - 1
#: the longest K: every kernel's k index stays below 2^31 one k-tile past it (see above)
K_MAX = 2**31 - 4096


def check_int32(**sizes: int) -> None:
    """OverflowError naming the first size that does not fit the kernels' int32 arguments."""
    for name, v in sizes.items():
        if v > INT32_MAX:
            raise OverflowError(f"{name} = {v} does not fit the kernels' 32-bit size arguments")


def check_depth(K: int) -> None:
    """OverflowError when K is too long for the kernels' 32-bit k index (K_MAX)."""
    if K > K_MAX:
        raise OverflowError(f"K = {K} exceeds {K_MAX} (2^31 - 4096): the kernels step "
                            "through K in 32-bit ints, up to 4095 past it")


def check_tiles(rows: int, cols: int, M: int, N: int, what: str) -> None:
    """OverflowError when the last tile of M or N (tiles of rows x cols) reaches past
    INT32_MAX: the kernels index rows and columns of C in 32-bit ints."""
    for name, size, tile in (("M", M, rows), ("N", N, cols)):
        if -(-size // tile) * tile > INT32_MAX:
            raise OverflowError(f"{name} = {size}: {what}'s tiles of {tile} reach past "
                                f"{INT32_MAX}, the kernels' 32-bit index")


def int32(name: str, value: int):
    """value as a kernel's int32 argument, or OverflowError naming it (NumPy before 2 wraps
    an out-of-range np.int32 silently)."""
    import numpy as np

    check_int32(**{name: value})
    return np.int32(value)


def strides_vec4_ok(strides: Iterable[int]) -> bool:
    """Every leading dimension / batch stride (in floats) keeps 16-byte alignment."""
    return all(s % 4 == 0 for s in strides)


def pointers_vec4_ok(pointers: Iterable[int]) -> bool:
    """Every base address is 16-byte aligned."""
    return all(p % 16 == 0 for p in pointers)


def whole_chunks(M: int, N: int, K: int, trans_a: bool, trans_b: bool) -> bool:
    """float4 copies read chunks of 4 along the contiguous dimension of A and B (K and N
    row-major): only whole chunks keep the last one of the last row inside the matrix, and
    inside its allocation (compute-sanitizer's memcheck found the 16-byte cp.async copies
    of a 1x1x1 product reading past a 4-byte matrix)."""
    return (M if trans_a else K) % 4 == 0 and (K if trans_b else N) % 4 == 0


def vec4_ok(pointers: Iterable[int], strides: Iterable[int]) -> bool:
    """float4 global accesses are legal for these operands."""
    return pointers_vec4_ok(pointers) and strides_vec4_ok(strides)
