"""Load compiled rungs onto the GPU and launch them on raw pointers.

`Launcher` binds a rung and a configuration; calling it runs C = alpha*A@B + beta*C on
device pointers, on a given stream. Kernels are compiled (or read from the disk cache) once
per (rung, configuration, alignment variant, architecture) and kept loaded.

A bound launch is a `Packed` launch: its arguments packed into C memory once, so a call
is one cuLaunchKernel (through ctypes: runtime/driver.py), and a call on other operands
of the same plan writes their three pointers into that memory (`repointed`) instead of
packing it again. cuda.core's `launch()` packs the arguments and converts the
configuration on every call; bench's isolated mode counts the host time of a call, which
after a synchronize runs from cold caches, and there that was 9 µs of a 16.6 µs bound
launch at 4096 x 4096 x 256 (tools/profile_host.py --cold,
results/nvidia-h200/host/cold-20261202T0524Z.json).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Mapping

import numpy as np

from ..errors import ConfigError
from ..registry import Config, Rung, config_key
from . import driver
from .compiler import ENTRY, Compiled, compile_kernel
from .device import device, gpu_info
from .limits import (
    INT32_MAX,
    check_depth,
    check_int32,
    check_tiles,
    int32,
    vec4_ok,
    whole_chunks,
)
from .packed import (  # noqa: F401 (the launchers' callers and tests name them here)
    POINTERS,
    SCRATCH,
    SOURCE_POINTERS,
    ZEROED,
    Packed,
    Repointable,
    WorkspaceLaunch,
    _pointer,
    one_launch,
)
from .variants import (  # noqa: F401 (SOURCE_*: the launchers' callers name them here)
    NO_SOURCE,
    SOURCE_BIAS,
    SOURCE_MATRIX,
    source_kind,
    variant_macros,
)

_loaded: dict[tuple, tuple[object, Compiled]] = {}
_occupancy: dict[tuple, int] = {}
_lock = threading.Lock()


_NO_SOURCE = ("rung {} reads beta's term from C alone; a source of its own needs a rung "
              "with the epilogue's source (13-20, 22-25)")


def load(rung: Rung, cfg: Config, vec4: bool, device_id: int = 0, trans_a: bool = False,
         trans_b: bool = False, source: int = NO_SOURCE, store4: bool = True):
    """(driver.Function, Compiled) for the rung, compiled for this device, cached."""
    if problems := rung.violations(cfg):
        raise ConfigError(f"illegal configuration {config_key(cfg)} for rung {rung.label}: "
                          + "; ".join(problems))
    if (trans_a or trans_b) and not rung.supports("layouts"):
        raise ConfigError(f"rung {rung.label} reads row-major operands only; column-major "
                          "A or B needs a rung with layouts (13, 14)")
    if source and not rung.supports("source"):
        raise ConfigError(_NO_SOURCE.format(rung.label))
    if vec4 and not store4 and not rung.supports("store4"):
        raise ConfigError(f"rung {rung.label} writes C by float4 wherever it reads A and B "
                          "so: its operands' alignment must be C's (rungs 13, 14, 22-25 "
                          "read and write apart)")
    store4 = store4 or not vec4
    key = (rung.label, config_key(rung.macros(cfg)), vec4, trans_a, trans_b, source,
           store4, device_id)
    with _lock:
        hit = _loaded.get(key)
    if hit is not None:
        return hit
    device(device_id)  # no GPU: NoGPUError, before anything is compiled
    macros = rung.macros(cfg) | variant_macros(rung, vec4, trans_a, trans_b, source, store4)
    compiled = compile_kernel(rung.source, macros, gpu_info(device_id).arch)
    kernel = driver.load(compiled.cubin, ENTRY, device_id)
    with _lock:
        _loaded.setdefault(key, (kernel, compiled))
        return _loaded[key]


def load_kernel(source: str, entry: str, macros: Mapping[str, int], device_id: int = 0):
    """(driver.Function, Compiled) for any kernel file that is not a rung (the ceilings):
    kernels/`source` compiled for this device, `entry` being its extern "C" name."""
    device(device_id)
    compiled = compile_kernel(source, macros, gpu_info(device_id).arch)
    return driver.load(compiled.cubin, entry, device_id), compiled


def float4_paths(rung: Rung, M: int, N: int, K: int, trans_a: bool, trans_b: bool,
                 pointers: tuple[int, int, int, int], lds: tuple[int, int, int, int],
                 strides: tuple[int, int, int] = (0, 0, 0), padded: bool = False,
                 store4: bool = True) -> tuple[bool, bool]:
    """(vec4, store4): the variant a launch of `rung` loads for A, B, C and beta's source X
    at `pointers` with leading dimensions `lds` and batch strides `strides` (A, B, C).
    `padded`: A and B are a packed plan's copies, rows padded to whole chunks, so float4
    reads need only their alignment, and C is written by float4 where it allows and the
    plan's `store4` says so. A "vec4_c" rung's float4 variant touches only C: C's rows
    decide, and every pointer (a plan's key knows the three pointers' alignment as one)."""
    a, b, c, x = pointers
    lda, ldb, ldc, ldx = lds
    if padded:
        return vec4_ok((a, b), (lda, ldb)), store4 and vec4_ok((c, x), (ldc, ldx))
    if rung.supports("vec4_c"):
        return vec4_ok(pointers, (ldc, ldx, strides[2])), True
    return whole_chunks(M, N, K, trans_a, trans_b) and vec4_ok(pointers, (*lds, *strides)), True




@dataclass(frozen=True)
class Call:
    """One bound call's operands, as `Launcher.bind` checked them (pointers in bytes,
    leading dimensions and strides in elements)."""

    M: int
    N: int
    K: int
    alpha: float
    a: int
    lda: int
    b: int
    ldb: int
    beta: float
    c: int
    ldc: int
    stream: object
    trans_a: bool
    trans_b: bool
    batch: int
    strides: tuple[int, int, int]
    source: tuple[int, int] | None
    padded: bool
    store4: bool


@dataclass(frozen=True)
class Launcher:
    """One rung at one configuration, ready to launch on pointers."""

    rung: Rung
    config: Config
    device_id: int = 0

    @cached_property
    def block(self) -> tuple[int, int, int]:
        return self.rung.block(self.config)

    def compiled(self, vec4: bool = True) -> Compiled:
        if self.rung.supports("tma"):
            from . import hopper

            return hopper.compile_only(self.rung, self.config)
        return load(self.rung, self.config, vec4, self.device_id)[1]

    def blocks_per_sm(self, kernel) -> int:
        """Resident blocks per SM for this kernel (the persistent grid's size)."""
        key = (self.rung.label, config_key(self.config), id(kernel), self.device_id)
        with _lock:
            hit = _occupancy.get(key)
        if hit is None:
            hit = max(1, kernel.max_active_blocks(self.rung.threads(self.config)))
            with _lock:
                _occupancy[key] = hit
        return hit

    def bind(self, M: int, N: int, K: int, alpha: float, a: int, lda: int, b: int, ldb: int,
             beta: float, c: int, ldc: int, stream, *, trans_a: bool = False,
             trans_b: bool = False, batch: int = 1, stride_a: int = 0, stride_b: int = 0,
             stride_c: int = 0, source: tuple[int, int] | None = None,
             padded: bool = False, store4: bool = True) -> Callable[[], None]:
        """Everything checked and converted once; the returned callable only launches.
        (The benchmark times these, so host work stays out of the measured region.)

        Row-major C = alpha * A @ B + beta * C. trans_a: A is column-major (A(m, k) at
        a + k*lda + m); trans_b likewise. batch > 1: product i uses a + i*stride_a, b +
        i*stride_b, c + i*stride_c (elements; 0 repeats an operand). padded: A and B are a
        packed plan's copies, their rows padded to whole chunks of 4 (plan.staging), so
        float4 reads need only their alignment; C is written by float4 where it allows and
        `store4` (the plan's word: its key fixes C's alignment) says so, else element by
        element (a rung with the "store4" feature)."""
        rung = self.rung
        if batch < 1:
            raise ValueError(f"batch must be >= 1 (got {batch})")
        if padded and batch != 1:
            raise ValueError("a packed plan computes one product (batch 1)")
        if not rung.serves(M, N, K):
            raise ConfigError(f"rung {rung.label} computes {rung.domain}, not "
                              f"{M}x{N}x{K}")
        if batch > 1 and not rung.supports("batched"):
            raise ConfigError(f"rung {rung.label} computes one product per launch; batches "
                              "need a rung with batches (13, 14)")
        check_int32(M=M, N=N, K=K, lda=lda, ldb=ldb, ldc=ldc)
        check_depth(K)
        check_tiles(*rung.tile(self.config), M, N, rung.label)
        x, ldx = source if source is not None else (c, ldc)
        if source is not None and ldx < 0:
            raise ValueError(f"the source's row stride must be >= 0, got {ldx}")
        if source is not None and not rung.supports("source"):
            raise ConfigError(_NO_SOURCE.format(rung.label))
        call = Call(M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, stream, trans_a, trans_b,
                    batch, (stride_a, stride_b, stride_c), source, padded, store4)
        return BINDERS[rung.binder](self, call)

    def _packed_args(self, call: Call) -> tuple:
        """(kernel, arguments, pointer slots) of a rung's launch: the variant the operands
        allow (float4 paths, layouts, source), loaded, and the arguments every rung takes."""
        rung, cl = self.rung, call
        x, ldx = cl.source if cl.source is not None else (cl.c, cl.ldc)
        vec4, store4 = float4_paths(rung, cl.M, cl.N, cl.K, cl.trans_a, cl.trans_b,
                                    (cl.a, cl.b, cl.c, x), (cl.lda, cl.ldb, cl.ldc, ldx),
                                    cl.strides, cl.padded, cl.store4)
        kernel, _ = load(rung, self.config, vec4, self.device_id, cl.trans_a, cl.trans_b,
                         source_kind(cl.source), store4)
        args = [np.int32(cl.M), np.int32(cl.N), np.int32(cl.K), np.float32(cl.alpha), cl.a,
                np.int32(cl.lda), cl.b, np.int32(cl.ldb), np.float32(cl.beta), cl.c,
                np.int32(cl.ldc)]
        pointers = POINTERS
        if cl.source is not None:
            args += [_pointer(x), np.int64(ldx)]
            pointers = SOURCE_POINTERS
        if rung.supports("batched"):
            args += [np.int64(s) for s in cl.strides]
        return kernel, args, pointers

    def _bind_grid(self, call: Call) -> Packed:
        """One block per tile of C, the batch along gridDim.z (rungs 1-13, 17, 21)."""
        kernel, args, pointers = self._packed_args(call)
        gx, gy, _ = self.rung.grid(self.config, call.M, call.N)
        if gy > 65535 or call.batch > 65535:
            raise OverflowError(f"M={call.M}, N={call.N}, batch={call.batch} need {gy} x "
                                f"{call.batch} blocks along gridDim.y and z, which allow "
                                "65535 each")
        return Packed(kernel, call.stream, (gx, gy, call.batch), self.block, tuple(args),
                      pointers)

    def _bind_tensor(self, call: Call) -> WorkspaceLaunch:
        """Rungs 19-20: tensor maps by value and the pre-passes (runtime/hopper.py); rung 26:
        Ozaki scheme II's passes around it (runtime/ozaki.py)."""
        from . import hopper, ozaki

        cl = call
        if self.rung.precision == "fp32_emulated":
            return ozaki.bind(self.device_id, cl.M, cl.N, cl.K, cl.alpha, cl.a, cl.lda, cl.b,
                              cl.ldb, cl.beta, cl.c, cl.ldc, cl.stream, trans_a=cl.trans_a,
                              trans_b=cl.trans_b, cfg=self.config)
        return hopper.bind(self.rung, self.config, self.device_id, cl.M, cl.N, cl.K,
                           cl.alpha, cl.a, cl.lda, cl.b, cl.ldb, cl.beta, cl.c, cl.ldc,
                           cl.stream, trans_a=cl.trans_a, trans_b=cl.trans_b,
                           source=cl.source)

    def _bind_streamk(self, call: Call) -> WorkspaceLaunch:
        """Rung 14 and its twins: the plan's grid and arguments, and the stream's
        workspace."""
        from .decompose import streamk

        kernel, args, pointers = self._packed_args(call)
        cfg = self.config
        slots = gpu_info(self.device_id).sm_count * self.blocks_per_sm(kernel)
        p = streamk(cfg["SPLIT"], cfg["FIXUP"], cfg["BM"], cfg["BN"], cfg["BK"], call.M,
                    call.N, call.K, call.batch, slots)
        if p.grid > INT32_MAX:
            raise OverflowError(f"{p.grid} blocks do not fit gridDim.x")
        head = args + [int32("tiles_n", p.tiles_n), int32("tiles_mn", p.tiles_mn),
                       int32("dp_tiles", p.dp_tiles), int32("sk_tiles", p.sk_tiles),
                       int32("sk_blocks", p.sk_blocks)]

        tail = [(SCRATCH, 0) if p.fixup == 0 else (ZEROED, p.counters_bytes), (ZEROED, 0)]
        return self._with_workspace(call.stream, (p.grid, 1, 1), kernel, head, p, tail,
                                    pointers)

    def _bind_splitk(self, call: Call):
        """Rungs 15, 16, 18: the grid and parts of K (runtime/decompose.py) and, with more
        than one part, the stream's workspace (re-read when a bigger call replaces it)."""
        from .decompose import splitk

        kernel, args, pointers = self._packed_args(call)
        cfg = self.config
        slots = gpu_info(self.device_id).sm_count * self.blocks_per_sm(kernel)
        rows, cols = self.rung.tile(cfg)
        p = splitk(cfg["SPLIT"], rows, cols, self.rung.k_unit(cfg), call.M, call.N, call.K,
                   call.batch, slots, self.rung.rows_on_x)
        head = args + [int32("parts", p.parts)]
        if p.parts == 1:
            return Packed(kernel, call.stream, tuple(p.grid), self.block,
                          tuple(head + [0, 0]), pointers)
        return self._with_workspace(call.stream, tuple(p.grid), kernel, head, p,
                                    [(SCRATCH, 0), (ZEROED, 0)], pointers)

    def _with_workspace(self, stream, grid: tuple[int, int, int], kernel, head: list, p,
                        tail: list, pointers: tuple[int, ...] = POINTERS) -> WorkspaceLaunch:
        return one_launch(self.device_id, kernel, stream, grid, self.block, head, p, tail,
                          pointers)

    def __call__(self, *args, **kwargs) -> None:
        """Launch once: same arguments as `bind`."""
        self.bind(*args, **kwargs)()


#: How each family launches (registry: Rung.binder), the one place it is decided.
BINDERS: dict[str, Callable[[Launcher, Call], Callable[[], None]]] = {
    "grid": Launcher._bind_grid, "streamk": Launcher._bind_streamk,
    "splitk": Launcher._bind_splitk, "tensor": Launcher._bind_tensor,
}


@dataclass(frozen=True)
class Copy:
    """One operand of a packed plan, copied row-major into the workspace before the product
    (kernels/pack.cu): element (r, c) of `rows` x `cols` at `row_step` r + `col_step` c
    floats from the operand's pointer (slot 0: A, 1: B, in the kernels' terms), to r `ld`
    + c in the copy, whose columns from `cols` to `ld` are zeros (`ld` a multiple of 4:
    rows of whole float4 chunks). `column_major`: the rows are the operand's columns (a
    column-major operand kept column-major, its columns padded: a straight copy)."""

    slot: int
    rows: int
    cols: int
    row_step: int
    col_step: int
    ld: int
    column_major: bool = False

    @property
    def bytes(self) -> int:
        return 4 * self.ld * self.rows

    @property
    def transposes(self) -> bool:
        """The operand runs down its columns (column-major): the copy is a transpose."""
        return self.row_step == 1 and self.col_step != 1


class PackFirst(Repointable):
    """A product whose A and/or B (`copies`) is first copied into the stream's workspace,
    row-major and padded (kernels/pack.cu: a transpose where the operand is column-major),
    then read from there by `inner` (a Packed or WorkspaceLaunch bound for those copies).
    The copies sit in the workspace's scratch region after the part `inner` itself uses,
    so they never share memory; a launch captured by torch into a CUDA graph copies into a
    buffer of the graph's own (workspace.for_capture), as a WorkspaceLaunch does. Repointed
    like `inner` (its `pointer_slots`: A, B, C and X), with no export: the native switch
    asks Python for each call of such a plan, whose product is long enough not to notice."""

    def __init__(self, inner, device_id: int, stream, copies: tuple[Copy, ...]):
        from . import workspace as ws

        self._ws, self._inner, self._device_id, self._stream = ws, inner, device_id, stream
        self.pointer_slots = inner.pointer_slots
        self.bound_pointers = inner.bound_pointers
        p = getattr(inner, "_p", None)  # a WorkspaceLaunch's plan: the workspace it uses
        self._zeroed = p.zeroed_bytes if p is not None else 0
        at = _up(p.scratch_bytes if p is not None else 0, ws.ALIGN)
        self._copies = []  # (slot, offset from the first copy, the bound copy launch)
        kernel = _PACK_KERNELS.get(device_id)
        if kernel is None:
            kernel = _PACK_KERNELS[device_id] = load_kernel("pack.cu", "pack", {},
                                                            device_id)[0]
        first = at
        for cp in copies:
            grid = (-(-cp.ld // 32), min(-(-cp.rows // 32), 65535), 1)
            launch = Packed(kernel, stream, grid, (32, 8, 1),
                            (0, np.int64(cp.ld), 0, np.int32(cp.rows), np.int32(cp.cols),
                             np.int64(cp.row_step), np.int64(cp.col_step), np.int32(cp.ld)),
                            pointer_slots=(0, 2))
            self._copies.append((cp.slot, at - first, launch))
            at = _up(at + cp.bytes, ws.ALIGN)
        self._offset, self._bytes = first, at - first
        self._capturing = ws.capture_probe(stream)

    def launch_at(self, *pointers: int) -> None:
        """Copy the operands into the workspace, then the product from there."""
        ws, owner = self._ws, None
        if self._capturing is not None and self._capturing():
            _, dst, owner = ws.for_capture(self._device_id, self._stream, 0, self._bytes)
        else:
            _, scratch = ws.workspace(self._device_id, self._stream, self._zeroed,
                                      self._offset + self._bytes)
            dst = scratch + self._offset
        args = list(pointers)
        for slot, offset, launch in self._copies:
            launch.launch_at(dst + offset, pointers[slot])
            args[slot] = dst + offset
        self._inner.launch_at(*args)
        del owner  # enqueued: the graph's pool keeps the memory

    def __call__(self) -> None:
        self.launch_at(*self.bound_pointers)


def _up(n: int, to: int) -> int:
    return -(-n // to) * to


_PACK_KERNELS: dict[int, object] = {}
