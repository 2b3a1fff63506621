"""Load compiled rungs onto the GPU and launch them on raw pointers.

`Launcher` binds a rung and a configuration; calling it runs C = alpha*A@B + beta*C on
device pointers, on a given stream. Kernels are compiled (or read from the disk cache) once
per (rung, configuration, alignment variant, architecture) and kept loaded.

A bound launch is a `Packed` launch: its arguments packed into C memory once, so a call
is one cuLaunchKernel (through ctypes: runtime/fastcall.py), and a call on other operands
of the same plan writes their three pointers into that memory (`repointed`) instead of
packing it again. cuda.core's `launch()` packs the arguments and converts the
configuration on every call; bench's isolated mode counts the host time of a call, which
after a synchronize runs from cold caches, and there that was 9 µs of a 16.6 µs bound
launch at 4096 x 4096 x 256 (tools/profile_host.py --cold,
results/nvidia-h200/host-cold-20261202T0524Z.json).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Mapping

import numpy as np

from ..errors import ConfigError
from ..registry import Config, Rung, config_key
from . import fastcall
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
from .tma import TENSOR_MAP_ALIGN, TENSOR_MAP_BYTES
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
    """(cuda.core Kernel, Compiled) for the rung, compiled for this device, cached."""
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
    from cuda.core import ObjectCode

    device(device_id)  # makes the device's context current for the module load
    macros = rung.macros(cfg) | variant_macros(rung, vec4, trans_a, trans_b, source, store4)
    compiled = compile_kernel(rung.source, macros, gpu_info(device_id).arch)
    kernel = ObjectCode.from_cubin(compiled.cubin).get_kernel(ENTRY)
    with _lock:
        _loaded.setdefault(key, (kernel, compiled))
        return _loaded[key]


def load_kernel(source: str, entry: str, macros: Mapping[str, int], device_id: int = 0):
    """(cuda.core Kernel, Compiled) for any kernel file that is not a rung (the ceilings):
    kernels/`source` compiled for this device, `entry` being its extern "C" name."""
    from cuda.core import ObjectCode

    device(device_id)
    compiled = compile_kernel(source, macros, gpu_info(device_id).arch)
    return ObjectCode.from_cubin(compiled.cubin).get_kernel(entry), compiled


_C_TYPES = {np.int32: ctypes.c_int32, np.int64: ctypes.c_int64, np.float32: ctypes.c_float}


class Repointable:
    """A launch that `launch_at(*pointers)` runs on other pointers in its `pointer_slots`
    (A, B and C, and X with a source): `repointed` binds such a call once."""

    __slots__ = ()

    def repointed(self, *pointers: int) -> Callable[[], None]:
        """This launch on other pointers in `pointer_slots` (the rest as bound): what a
        product on new operands costs instead of packing every argument again."""
        if len(pointers) != len(self.pointer_slots):
            raise ValueError(f"{len(pointers)} pointers for {len(self.pointer_slots)} slots")
        new = tuple(_pointer(p) for p in pointers)
        launch_at = self.launch_at
        return lambda: launch_at(*new)


class _TensorMap:
    """A tensor map's 128 bytes in storage aligned as the driver reads them."""

    __slots__ = ("_buf", "address")

    def __init__(self, data: bytes):
        if len(data) != TENSOR_MAP_BYTES:
            raise TypeError(f"{len(data)} bytes: a tensor map is {TENSOR_MAP_BYTES}")
        self._buf = (ctypes.c_ubyte * (TENSOR_MAP_BYTES + TENSOR_MAP_ALIGN))()
        base = ctypes.addressof(self._buf)
        self.address = base + (-base % TENSOR_MAP_ALIGN)
        ctypes.memmove(self.address, bytes(data), TENSOR_MAP_BYTES)


def _cell(a):
    """One kernel argument in the bytes the driver copies: a numpy scalar of a known width
    (np.int32, np.int64, np.float32), 128 tensor-map bytes, or a device pointer (a Python
    int). A Python float or bool is refused: its width in the kernel is not knowable."""
    if type(a) in _C_TYPES:
        return _C_TYPES[type(a)](a)
    if isinstance(a, (bytes, bytearray)):
        return _TensorMap(a)
    return ctypes.c_uint64(_pointer(a))


def _address(cell) -> int:
    return cell.address if isinstance(cell, _TensorMap) else ctypes.addressof(cell)


class Packed(Repointable):
    """One kernel launch on `stream`, its arguments packed once (the module docstring):
    calling it is one cuLaunchKernel. Arguments are numpy scalars (np.int32, np.int64,
    np.float32), tensor maps (128 bytes, passed by value) or Python ints (device pointers);
    `smem` bytes of dynamic shared memory. Every launch of the library goes through it: the
    rungs' (kernels loaded by cuda.core) and the tensor rungs' and their pre-pass (modules
    loaded by the driver, runtime/tma.py's Module). The kernel launches into the current
    context, which must be the kernel's device's (the API makes it so before a launch)."""

    __slots__ = ("kernel", "stream", "grid", "block", "args", "_fn", "_values", "_params",
                 "_call", "pointer_slots", "_lock")

    def __init__(self, kernel, stream, grid: tuple[int, int, int],
                 block: tuple[int, int, int], args: tuple,
                 pointer_slots: tuple[int, ...] = (), smem: int = 0):
        grid = tuple(map(int, (tuple(grid) + (1, 1))[:3]))
        block = tuple(map(int, (tuple(block) + (1, 1))[:3]))
        self.kernel, self.stream, self.grid, self.block, self.args = (
            kernel, stream, grid, block, args)
        self._values = [_cell(a) for a in args]
        # the arguments `repointed` may change (A, B and C of a rung's launch)
        self.pointer_slots = pointer_slots
        self._lock = threading.Lock()
        self._params = (ctypes.c_void_p * max(1, len(args)))(
            *[_address(v) for v in self._values])
        # cuLaunchKernel's arguments, resolved once: the kernel, grid, block, dynamic shared
        # memory, the CUstream, the address of the argument pointers, no extra; through
        # ctypes on integer handles where it can (runtime/fastcall.py)
        handles = _integers(kernel.handle, stream.handle)
        fast = fastcall.launch_kernel() if handles is not None else None
        if fast is not None:
            self._fn = fast
            self._call = (handles[0], *grid, *block, int(smem), handles[1],
                          ctypes.addressof(self._params), None)
        else:
            from cuda.bindings import driver

            self._fn = driver.cuLaunchKernel
            self._call = (kernel.handle, *grid, *block, int(smem), stream.handle,
                          ctypes.addressof(self._params), 0)

    def __call__(self) -> None:
        err = self._fn(*self._call)
        if err.__class__ is tuple:  # cuda.bindings returns (CUresult,)
            err = err[0]
        if err:
            raise RuntimeError(f"cuLaunchKernel failed: {_result_name(err)} (grid "
                               f"{self.grid}, block {self.block})")

    def export(self, operands: dict[int, int]) -> tuple:
        """This launch as data, for the native switch (sgemmlab/csrc/switch.cpp), which
        repoints and launches it without Python: (kernel handle, grid, block, each argument
        as the integer of its bytes, (slot, operand) for the pointer slots — `operands`
        maps a slot to the operand code that fills it —, no workspace tail, 0, 0)."""
        handles = _integers(self.kernel.handle)
        if handles is None:
            raise TypeError("a launch on a stand-in kernel has no handle to export")
        if any(isinstance(v, _TensorMap) for v in self._values) or self._call[7]:
            raise TypeError("the native switch launches rungs without tensor maps or dynamic "
                            "shared memory")
        cells = [int.from_bytes(bytes(v), "little") for v in self._values]
        slots = [(i, operands[i]) for i in self.pointer_slots]
        return (handles[0], self.grid, self.block, cells, slots, [], 0, 0)

    @property
    def bound_pointers(self) -> tuple:
        """The pointers in `pointer_slots` as packed."""
        return tuple(self.args[i] for i in self.pointer_slots)

    def launch_at(self, *pointers: int) -> None:
        """Launch with `pointers` (checked device pointers) in `pointer_slots`: written into
        the packed arguments under this launch's lock (the driver copies the arguments at
        the launch, so the next call may change them)."""
        with self._lock:
            for i, p in zip(self.pointer_slots, pointers):
                self._values[i].value = p
            self()


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


def _integers(*handles) -> tuple[int, ...] | None:
    """The driver handles as integers, or None where they are not (the tests' stand-ins)."""
    try:
        return tuple(int(h) for h in handles)
    except (TypeError, ValueError):
        return None


def _result_name(err) -> str:
    try:
        from cuda.bindings import driver

        return repr(driver.CUresult(int(err)))
    except Exception:
        return repr(err)


def _pointer(a) -> int:
    if type(a) is not int or not 0 <= a < 2**64:
        raise TypeError(f"a kernel argument must be a numpy scalar or a device pointer, "
                        f"got {a!r}")
    return a


#: Where A, B and C sit among a rung's launch arguments (M, N, K, alpha, A, lda, B, ldb,
#: beta, C, ldc, ...): the slots a bound launch may be repointed at (Packed.repointed);
#: with a source (kernels/epilogue.cuh's SGEMM_SOURCE: ..., ldc, X, ldx, ...) X's as well.
POINTERS = (4, 6, 9)
SOURCE_POINTERS = (4, 6, 9, 11)


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
            hit = max(1, kernel.occupancy.max_active_blocks_per_multiprocessor(
                self.rung.threads(self.config), 0))
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
        """Rungs 19-20: tensor maps by value and the pre-passes (runtime/hopper.py)."""
        from . import hopper

        cl = call
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


#: The two regions of a workspace (runtime/workspace.py) a launch's tail points into.
ZEROED, SCRATCH = 0, 1


class WorkspaceLaunch(Repointable):
    """Launches whose arguments point into the stream's workspace (runtime/workspace.py):
    `build(zeroed, scratch)` packs them (Packed, in order) for a workspace whose two regions
    start there, and the plan `p` says how large the regions are (zeroed_bytes,
    scratch_bytes). The one workspace binding of every family: rung 14's fix-up, the
    split-K rungs' partial tiles, the tensor rungs' operand copies and split tiles. It keeps
    working when a later, bigger call replaces the workspace: it notices
    (workspace.generation) and packs again. A launch captured into a torch CUDA graph gets a
    workspace of its own (workspace.for_capture), so the graph may replay on any stream.
    With one launch whose `pointer_slots` hold A, B and C (and X), it can be repointed at
    other operands, for the plan's calls on new ones; the native switch stores it (export)
    when `head` and `tail` say which arguments are which."""

    def __init__(self, device_id: int, stream, p, build: Callable[[int, int], tuple],
                 pointer_slots: tuple[int, ...] = (), bound_pointers: tuple = (),
                 head: int = 0, tail: tuple = ()):
        from . import workspace as ws

        self._ws, self._device_id, self._stream, self._p, self._build = (
            ws, device_id, stream, p, build)
        self.pointer_slots, self.bound_pointers = pointer_slots, bound_pointers
        self._head, self._tail = head, tail
        self._capturing = ws.capture_probe(stream)
        self._lock = threading.Lock()
        # bound while its stream is being captured (a graph's first call on a stream of its
        # own): no workspace now, since nothing may be allocated on a capturing stream; a
        # captured launch uses one of its own, and a later eager one makes the stream's
        self._generation, self._steps = None, None
        if self._capturing is None or not self._capturing():
            self._refresh()

    def _refresh(self) -> None:
        zeroed, scratch = self._ws.workspace(self._device_id, self._stream,
                                             self._p.zeroed_bytes, self._p.scratch_bytes)
        self._generation = self._ws.generation
        self._steps = self._build(zeroed, scratch)

    def export(self, operands: dict[int, int]) -> tuple:
        """The launch as the native switch stores it (Packed.export), its workspace tail and
        the workspace it needs added. (TypeError for one bound while its stream was
        captured, which has no packed launch yet, or for more than one launch or no tail:
        the switch then asks Python.)"""
        if self._steps is None:
            raise TypeError("a launch bound during a capture has no packed arguments yet")
        if len(self._steps) != 1 or not self._head:
            raise TypeError("only a single launch with a workspace tail is exported")
        kernel, grid, block, cells, slots, _, _, _ = self._steps[0].export(operands)
        tail = [(self._head + i, region, offset)
                for i, (region, offset) in enumerate(self._tail)]
        return (kernel, grid, block, cells[:self._head], slots, tail, self._p.zeroed_bytes,
                self._p.scratch_bytes)

    def launch_at(self, *pointers: int) -> None:
        """Launch with `pointers` (checked device pointers) as A, B and C (and X)."""
        ws = self._ws
        if self._capturing is not None and self._capturing():
            zeroed, scratch, owner = ws.for_capture(self._device_id, self._stream,
                                                    self._p.zeroed_bytes,
                                                    self._p.scratch_bytes)
            self._run(self._build(zeroed, scratch), pointers)
            del owner  # enqueued: the graph's pool keeps the memory
            return
        with self._lock:
            if self._generation != ws.generation:
                self._refresh()
            self._run(self._steps, pointers)

    def _run(self, steps: tuple, pointers: tuple) -> None:
        *first, last = steps
        for step in first:
            step()
        last.launch_at(*pointers)

    def __call__(self) -> None:
        self.launch_at(*self.bound_pointers)


def one_launch(device_id: int, kernel, stream, grid: tuple[int, int, int],
               block: tuple[int, int, int], head: list, p, tail: list,
               pointers: tuple[int, ...] = POINTERS) -> WorkspaceLaunch:
    """One launch of `kernel` bound to the stream's workspace: `head`'s arguments, then
    `tail`'s ((region, byte offset) pairs: ZEROED or SCRATCH) pointing into it; `pointers`
    the slots of A, B and C (and X) in `head`."""
    tail = tuple(tail)

    def build(zeroed: int, scratch: int) -> tuple:
        return (Packed(kernel, stream, grid, block,
                       tuple(list(head) + _tail_at(tail, zeroed, scratch)), pointers),)

    return WorkspaceLaunch(device_id, stream, p, build, pointers,
                           tuple(head[i] for i in pointers), len(head), tail)


def _tail_at(tail: tuple, zeroed: int, scratch: int) -> list[int]:
    """A launch's tail ((region, byte offset) pairs: ZEROED or SCRATCH) as pointers into a
    workspace whose regions start at `zeroed` and `scratch`."""
    return [(zeroed, scratch)[region] + offset for region, offset in tail]


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
