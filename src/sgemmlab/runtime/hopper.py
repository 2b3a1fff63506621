"""Launching the tensor-core rungs (19 TF32, 20 3xTF32: kernels/hopper/) on any operands.

The kernels read A as M x K and B as B^T, N x K, both row-major (K-major: wgmma's tf32 reads
no other layout), through tensor maps whose rows must start on 16-byte boundaries. A call's
operands are handed over as they lie where they fit; otherwise hopper/prep.cu first writes a
K-major copy into the stream's workspace, rows padded to a multiple of 4 floats:

    A   as it lies when row-major with lda % 4 == 0 and a 16-byte aligned base; else copied
        (a column-major A transposed on the way);
    B   rung 19: as it lies when column-major (then B^T is row-major) with ldb % 4 == 0 and
        an aligned base; else copied, transposed from a row-major B;
        rung 20: always through the pre-pass, which splits it into B_big and B_small (what
        the kernel reads) and transposes a row-major B on the way, at no extra cost.

`operand_plan` decides this (pure Python, no GPU); `bind` returns the launch: the pre-passes,
then the GEMM on a persistent grid of min(tiles, SMs) blocks, one per SM. Rung 20 with TAIL
splits the tiles of the last, partial wave along K, and every tile along K when there are
fewer tiles than SMs (runtime/decompose.py); the parts' sums and counters live in the workspace too
(the counters are left zero, as the workspace wants), and the last part to arrive adds them
in a fixed order (bit-reproducible).
Tensor maps carry pointers, so a launch whose workspace a bigger call replaced re-encodes
them (launch.WorkspaceLaunch, the one workspace binding, packs again).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..registry import TILE_K, TILE_M, Config, Rung, config_key
from . import decompose, driver
from .compiler import compile_kernel
from .device import device, gpu_info
from .packed import Packed, WorkspaceLaunch
from .tma import Tiled2D, encode_tiled_2d
from .variants import source_kind

BM, BK = TILE_M, TILE_K  # the kernels' row tile and k-tile (the registry states them)
PREP = "hopper/prep.cu"
PREP_BLOCK = (32, 8, 1)
PREP_TILE = 64  # the transpose's tile side (hopper/prep.cu: T)
ALIGN = 256  # bytes between the buffers of the workspace


def _up(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class OperandPlan:
    """How one call's operands reach a tensor-core kernel; sizes in bytes."""

    kpad: int  # the copies' row length: K rounded up to a multiple of 4 floats
    copy_a: bool  # A goes through the pre-pass (else its tensor map is the caller's A)
    trans_a: bool  # ... reading a column-major A
    copy_b: bool  # B goes through the pre-pass (always with split)
    trans_b_read: bool  # ... reading a row-major B (B^T's element (n, k) at b[k * ldb + n])
    split_b: bool  # rung 20: the pre-pass writes B_big and B_small
    a_bytes: int  # workspace for the copy of A (0 without)
    b_bytes: int  # for each of the one or two arrays of B (0 without)

    def notes(self) -> list[str]:
        """What the host does before the GEMM, in words (explain, the results' notes)."""
        out = []
        if self.copy_a:
            out.append("A copied K-major first" + (" (transposed: it is column-major)"
                                                   if self.trans_a else
                                                   " (rows not 16-byte aligned for the copy "
                                                   "engine)"))
        if self.split_b:
            out.append("B split into big and small TF32 parts by a pre-pass" +
                       (", transposed on the way (it is row-major)" if self.trans_b_read
                        else ""))
        elif self.copy_b:
            out.append("B copied K-major first" + (" (transposed: it is row-major)"
                                                   if self.trans_b_read else
                                                   " (rows not 16-byte aligned)"))
        return out


def operand_plan(rung: Rung, M: int, N: int, K: int, a: int, lda: int, b: int, ldb: int,
                 trans_a: bool = False, trans_b: bool = False) -> OperandPlan:
    """Which operands the pre-pass must copy (or split) for rung 19 or 20; pointers in bytes,
    leading dimensions in floats. See the module docstring for the rules."""
    kpad = _up(K, 4)
    copy_a = trans_a or lda % 4 != 0 or a % 16 != 0
    split_b = rung.precision == "tf32x3"
    b_ok = trans_b and ldb % 4 == 0 and b % 16 == 0
    copy_b = split_b or not b_ok
    return OperandPlan(kpad, copy_a, trans_a, copy_b, copy_b and not trans_b, split_b,
                       4 * M * kpad if copy_a else 0, 4 * N * kpad if copy_b else 0)


def _check_gpu(rung: Rung, device_id: int) -> None:
    cc = gpu_info(device_id).compute_capability
    if rung.needs_cc is not None and tuple(cc) != tuple(rung.needs_cc):
        need = ".".join(map(str, rung.needs_cc))
        raise ConfigError(f"rung {rung.label} runs on compute capability {need} (Hopper: "
                          f"H100, H200) only, and GPU {device_id} is "
                          f"{cc[0]}.{cc[1]}: use precision='ieee' here")


_loaded: dict[tuple, tuple[driver.Function, driver.Function]] = {}
_lock = threading.Lock()


def load(rung: Rung, cfg: Config, device_id: int = 0,
         source: int = 0) -> tuple[driver.Function, driver.Function]:
    """(the GEMM, the pre-pass) loaded on the device (compiled for sm_90a, or from the
    disk cache), once per (rung, configuration, source kind, device); `source` as
    variants.source_kind gives it (kernels/epilogue.cuh's SGEMM_SOURCE)."""
    key = (rung.label, config_key(cfg), source, device_id)
    with _lock:
        hit = _loaded.get(key)
    if hit is not None:
        return hit
    if problems := rung.violations(cfg):
        raise ConfigError(f"illegal configuration {config_key(cfg)} for rung {rung.label}: "
                          + "; ".join(problems))
    _check_gpu(rung, device_id)
    device(device_id)  # the context the modules load into
    macros = gemm_macros(rung, cfg, source)
    gemm = compile_kernel(rung.source, macros, rung.arch)
    prep = compile_kernel(PREP, {"PREP": 1}, rung.arch)  # (cuda.core refuses no macros)
    pair = (driver.load(gemm.cubin, "sgemm", device_id, rung.dynamic_smem(cfg)),
            driver.load(prep.cubin, "prep", device_id))
    with _lock:
        _loaded.setdefault(key, pair)
        return _loaded[key]


def gemm_macros(rung: Rung, cfg: Config, source: int = 0) -> dict[str, int]:
    """The GEMM's macros: the configuration's, the host's shared-memory size (the kernel
    checks it), and SGEMM_SOURCE where beta's term comes from a source of its own."""
    out = rung.macros(cfg) | {"SMEM_EXPECT": rung.dynamic_smem(cfg)}
    if source:
        out["SGEMM_SOURCE"] = int(source)
    return out


def compile_only(rung: Rung, cfg: Config, source: int = 0):
    """The GEMM's Compiled (resources, cubin) without a GPU: what `rung_candidate` reports."""
    return compile_kernel(rung.source, gemm_macros(rung, cfg, source), rung.arch)


def bind(rung: Rung, cfg: Config, device_id: int, M: int, N: int, K: int, alpha: float,
         a: int, lda: int, b: int, ldb: int, beta: float, c: int, ldc: int, stream, *,
         trans_a: bool = False, trans_b: bool = False,
         source: tuple[int, int] | None = None) -> WorkspaceLaunch:
    """The launch of C = alpha A B + beta C (row-major C; A, B in either layout; pointers as
    ints, leading dimensions in floats) on rung 19 or 20: pre-passes, then the GEMM.
    source = (x, ldx): beta's term from X instead (X(r, c) at x + 4 (r ldx + c) bytes;
    ldx 0: a bias row), in the GEMM's own epilogue."""
    gemm, prep = load(rung, cfg, device_id, source_kind(source))
    op = operand_plan(rung, M, N, K, a, lda, b, ldb, trans_a, trans_b)
    info = gpu_info(device_id)
    bn = cfg["BN"]
    tiles = -(-M // BM) * -(-N // bn)
    ktiles = -(-K // BK)
    tail = rung.precision == "tf32x3" and cfg.get("TAIL", 0) == 1
    plan = decompose.tensor(tiles, ktiles, info.sm_count, tail)
    grid, splits, work_floats, counters = plan.grid, plan.splits, plan.work_floats, plan.counters
    b_arrays = 2 if op.split_b else 1
    offsets = {"a": 0}
    offsets["b"] = _up(op.a_bytes, ALIGN)
    offsets["b2"] = offsets["b"] + _up(op.b_bytes, ALIGN)
    offsets["work"] = offsets["b2"] + (_up(op.b_bytes, ALIGN) if b_arrays == 2 else 0)
    scratch_bytes = offsets["work"] + 4 * work_floats
    zeroed_bytes = 4 * counters
    i32, f32 = np.int32, np.float32

    def steps_at(zeroed: int, scratch: int) -> list:
        steps = []
        kpad = op.kpad
        a_ptr, a_ld = (scratch + offsets["a"], kpad) if op.copy_a else (a, lda)
        if op.copy_a:
            steps.append(_prep_step(prep, info.sm_count, a, lda, M, K, op.trans_a, a_ptr, 0,
                                    kpad, False, stream))
        if op.copy_b:
            b_ptr, b2_ptr, b_ld = scratch + offsets["b"], scratch + offsets["b2"], kpad
            steps.append(_prep_step(prep, info.sm_count, b, ldb, N, K, op.trans_b_read, b_ptr,
                                    b2_ptr if op.split_b else 0, kpad, op.split_b, stream))
        else:
            b_ptr, b_ld = b, ldb
        maps = [encode_tiled_2d(Tiled2D(a_ptr, M, K, a_ld, BM, BK)),
                encode_tiled_2d(Tiled2D(b_ptr, N, K, b_ld, bn, BK))]
        args = [*maps]
        if op.split_b:
            args.append(encode_tiled_2d(Tiled2D(b2_ptr, N, K, b_ld, bn, BK)))
        args += [i32(M), i32(N), i32(K), f32(alpha), f32(beta), c, i32(ldc)]
        if source is not None:
            args += [source[0], np.int64(source[1])]
        if rung.precision == "tf32x3":
            args += [scratch + offsets["work"] if work_floats else 0,
                     zeroed if counters else 0, i32(splits)]
        steps.append(Packed(gemm, stream, (grid, 1, 1), rung.block(cfg), tuple(args),
                            smem=gemm.dynamic_smem))
        return steps

    return WorkspaceLaunch(device_id, stream, Workspace(zeroed_bytes, scratch_bytes),
                           lambda zeroed, scratch: tuple(steps_at(zeroed, scratch)))


@dataclass(frozen=True)
class Workspace:
    """What a tensor rung's launch needs of the stream's workspace: the counters of split
    tiles (zeroed), the operand copies and partial tiles (scratch)."""

    zeroed_bytes: int
    scratch_bytes: int


def _prep_step(prep: driver.Function, sms: int, src: int, ld: int, rows: int, cols: int,
               trans: bool, dst: int, dst2: int, ld_dst: int, split: bool, stream) -> Packed:
    """One launch of hopper/prep.cu: dst (rows x cols, ld_dst) from src as the kernel's
    comment says; a grid of at most 32 blocks per SM (it loops over the rest)."""
    work = -(-rows // PREP_TILE) * -(-cols // PREP_TILE) if trans else rows
    args = (src, np.int64(ld), np.int32(rows), np.int32(cols), np.int32(int(trans)), dst, dst2,
            np.int64(ld_dst), np.int32(int(split)))
    return Packed(prep, stream, (max(1, min(work, 32 * sms)), 1, 1), PREP_BLOCK, args)
