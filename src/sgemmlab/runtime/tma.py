"""Tensor maps for the copy engine (TMA).

A Hopper kernel that loads tiles with `cp.async.bulk.tensor` reads a *tensor map*: the
driver's CUtensorMap, 128 opaque bytes made on the host by `cuTensorMapEncodeTiled` and
handed to the kernel by value, as a `const __grid_constant__` parameter.

Launching with one. cuda.core's `launch` (1.2) packs Python ints (as pointers), floats,
numpy and ctypes scalars, its Buffers and its own TensorMapDescriptor (built from a
StridedMemoryView), and refuses every other struct or byte string ("the argument is of
unsupported type"; its source notes struct support as a TODO). The maps here come from
cuda.bindings as bytes, so these kernels are launched by the library's one packer,
runtime/packed.Packed, which hands `cuLaunchKernel` an array of pointers, one per
parameter, each to the bytes the driver copies in (the parameter's size and alignment
come from the cubin; a map's 128 bytes sit 64-byte aligned).

`tiled_2d_problems` needs no GPU; encoding needs the driver. The kernels that read the maps
are loaded like every other (runtime/driver.load).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ..errors import OperandError

TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap)
TENSOR_MAP_ALIGN = 64  # the driver wants the map 64-byte aligned
SWIZZLES = (0, 32, 64, 128)  # bytes; 0 = no swizzle
MAX_BOX = 256  # elements per box dimension
MAX_DIM = 2**32  # elements per tensor dimension
MAX_STRIDE = 2**40  # bytes


@dataclass(frozen=True)
class Tiled2D:
    """A row-major matrix (or a stack of `planes` of them, a box read from one plane at a
    time) of `rows` x `cols` elements of `elem_bytes` bytes at device address
    `base`, rows `ld` elements apart, read in boxes of `box_rows` x `box_cols` that land in
    shared memory with `swizzle`-byte swizzling; elements outside the matrix read as zero."""

    base: int
    rows: int
    cols: int
    ld: int
    box_rows: int
    box_cols: int
    swizzle: int = 128
    elem_bytes: int = 4
    planes: int = 1  # with plane_ld > 0: a 3-D map, `planes` such matrices `plane_ld`
    plane_ld: int = 0  # elements apart (a kernel reading 3-D boxes needs one, even of 1)

    def problems(self) -> list[str]:
        return tiled_2d_problems(self)


def tiled_2d_problems(m: Tiled2D) -> list[str]:
    """Every rule of cuTensorMapEncodeTiled (CUDA driver API) that `m` breaks, in words; [] if
    none. Checked here so that a bad map is refused with a reason, not CUDA_ERROR_INVALID_VALUE."""
    out = []
    e = m.elem_bytes
    if e not in (1, 2, 4, 8):
        out.append(f"element size {e} bytes is not 1, 2, 4 or 8")
        return out
    if m.base % 16:
        out.append(f"base address {m.base:#x} is not 16-byte aligned")
    for name, v in (("rows", m.rows), ("cols", m.cols)):
        if not 1 <= v <= MAX_DIM:
            out.append(f"{name} = {v} is outside 1..2^32")
    if m.ld < m.cols:
        out.append(f"ld = {m.ld} is less than cols = {m.cols}")
    stride = m.ld * e
    if stride % 16:
        out.append(f"row stride {stride} bytes (ld = {m.ld}) is not a multiple of 16")
    if stride >= MAX_STRIDE:
        out.append(f"row stride {stride} bytes is not below 2^40")
    if m.plane_ld:
        if not 1 <= m.planes <= MAX_DIM:
            out.append(f"planes = {m.planes} is outside 1..2^32")
        if m.plane_ld < m.rows * m.ld:
            out.append(f"plane_ld = {m.plane_ld} is less than rows x ld = {m.rows * m.ld}")
        if (m.plane_ld * e) % 16 or m.plane_ld * e >= MAX_STRIDE:
            out.append(f"plane stride {m.plane_ld * e} bytes is not a multiple of 16 below "
                       "2^40")
    for name, v in (("box_rows", m.box_rows), ("box_cols", m.box_cols)):
        if not 1 <= v <= MAX_BOX:
            out.append(f"{name} = {v} is outside 1..{MAX_BOX}")
    inner = m.box_cols * e
    if inner % 16:
        out.append(f"a box row is {inner} bytes, not a multiple of 16")
    if m.swizzle not in SWIZZLES:
        out.append(f"swizzle {m.swizzle} is not one of {SWIZZLES}")
    elif m.swizzle and inner > m.swizzle:
        out.append(f"a box row is {inner} bytes, more than the {m.swizzle}-byte swizzle span")
    return out


def encode_args(m: Tiled2D) -> tuple:
    """The positional arguments of cuda.bindings' cuTensorMapEncodeTiled for `m` (its array
    arguments must be lists of cuuint64_t / cuuint32_t: plain ints are refused)."""
    from cuda.bindings import driver

    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    dtypes = {1: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8,
              2: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT16,
              4: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
              8: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT64}
    swizzles = {0: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
                32: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_32B,
                64: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
                128: driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B}
    # dimension 0 is the contiguous one (columns); strides are given for dimensions 1..
    dims, strides = [u64(m.cols), u64(m.rows)], [u64(m.ld * m.elem_bytes)]
    box, steps = [u32(m.box_cols), u32(m.box_rows)], [u32(1), u32(1)]
    if m.plane_ld:
        dims.append(u64(m.planes))
        strides.append(u64(m.plane_ld * m.elem_bytes))
        box.append(u32(1))
        steps.append(u32(1))
    return (dtypes[m.elem_bytes], len(dims), m.base, dims, strides, box, steps,
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzles[m.swizzle],
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)  # zeros


def encode_tiled_2d(m: Tiled2D) -> bytes:
    """The 128 bytes of the tensor map for `m` (cuTensorMapEncodeTiled; needs the driver, not
    a context). OperandError naming every broken rule before the driver is asked."""
    if problems := tiled_2d_problems(m):
        raise OperandError("tensor map refused: " + "; ".join(problems))
    from cuda.bindings import driver

    (err,) = driver.cuInit(0)
    _check(err, "cuInit")
    err, tmap = driver.cuTensorMapEncodeTiled(*encode_args(m))
    _check(err, f"cuTensorMapEncodeTiled({m})")
    return ctypes.string_at(tmap.getPtr(), TENSOR_MAP_BYTES)


def _check(err, what: str) -> None:
    from cuda.bindings import driver

    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise RuntimeError(f"{what} failed: {name.decode() if name else err}")
