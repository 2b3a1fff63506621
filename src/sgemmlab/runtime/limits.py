"""The two questions every launch path asks of sizes and pointers, answered once.

* **32-bit sizes.** The kernels take M, N, K and the leading dimensions as int32 and form
  row offsets in 64 bits: a size past INT32_MAX is refused with OverflowError.
* **float4 legality.** A vectorized rung reads and writes global memory 16 bytes at a time
  only when every base pointer is 16-byte aligned and every leading dimension (and batch
  stride) is a multiple of 4 floats; otherwise the scalar variant is launched.
"""

from __future__ import annotations

from typing import Iterable

INT32_MAX = 2**31 - 1


def check_int32(**sizes: int) -> None:
    """OverflowError naming the first size that does not fit the kernels' int32 arguments."""
    for name, v in sizes.items():
        if v > INT32_MAX:
            raise OverflowError(f"{name} = {v} does not fit the kernels' 32-bit size arguments")


def strides_vec4_ok(strides: Iterable[int]) -> bool:
    """Every leading dimension / batch stride (in floats) keeps 16-byte alignment."""
    return all(s % 4 == 0 for s in strides)


def pointers_vec4_ok(pointers: Iterable[int]) -> bool:
    """Every base address is 16-byte aligned."""
    return all(p % 16 == 0 for p in pointers)


def vec4_ok(pointers: Iterable[int], strides: Iterable[int]) -> bool:
    """float4 global accesses are legal for these operands."""
    return pointers_vec4_ok(pointers) and strides_vec4_ok(strides)
