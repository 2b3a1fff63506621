"""The one way the library launches a kernel: `Packed`, its arguments packed into C memory
once, so a call is one cuLaunchKernel (through ctypes: runtime/driver.py), and a call on
other operands writes their pointers into that memory (`repointed`) instead of packing it
again; and `WorkspaceLaunch`, launches whose arguments point into the stream's workspace
(runtime/workspace.py), packed again when a bigger call replaces it. Every binder of
runtime/launch.py (the rungs) and runtime/hopper.py (the tensor rungs, whose tensor maps
Packed passes by value) builds its launches from these two.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Callable

import numpy as np

from . import driver
from .tma import TENSOR_MAP_ALIGN, TENSOR_MAP_BYTES

_C_TYPES = {np.int32: ctypes.c_int32, np.uint32: ctypes.c_uint32, np.int64: ctypes.c_int64,
            np.float32: ctypes.c_float, np.float64: ctypes.c_double}


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
    """A parameter passed by value as bytes — a tensor map's 128, or a struct of the
    kernel's (a ctypes.Structure: rung 26's moduli) — in storage aligned as the driver reads
    them (64 bytes, a tensor map's alignment, which covers every struct's)."""

    __slots__ = ("_buf", "address")

    def __init__(self, data: bytes):
        size = len(data)
        if not size:
            raise TypeError("an empty byte string is no kernel argument")
        self._buf = (ctypes.c_ubyte * (size + TENSOR_MAP_ALIGN))()
        base = ctypes.addressof(self._buf)
        self.address = base + (-base % TENSOR_MAP_ALIGN)
        ctypes.memmove(self.address, bytes(data), size)


def _cell(a):
    """One kernel argument in the bytes the driver copies: a numpy scalar of a known width
    (np.int32, np.uint32, np.int64, np.float32, np.float64), tensor-map bytes or a ctypes
    Structure (by value), or a device pointer (a Python int). A Python float or bool is
    refused: its width in the kernel is not knowable."""
    if type(a) in _C_TYPES:
        return _C_TYPES[type(a)](a)
    if isinstance(a, (bytes, bytearray)):  # a tensor map (a struct comes as a Structure)
        if len(a) != TENSOR_MAP_BYTES:
            raise TypeError(f"{len(a)} bytes: a tensor map is {TENSOR_MAP_BYTES}")
        return _TensorMap(a)
    if isinstance(a, ctypes.Structure):
        return _TensorMap(bytes(a))
    return ctypes.c_uint64(_pointer(a))


def _address(cell) -> int:
    return cell.address if isinstance(cell, _TensorMap) else ctypes.addressof(cell)


class Packed(Repointable):
    """One kernel launch on `stream`, its arguments packed once (the module docstring):
    calling it is one cuLaunchKernel. Arguments are numpy scalars (np.int32, np.uint32, np.int64,
    np.float32, np.float64), tensor maps (128 bytes) and ctypes Structures (both passed by
    value) or Python ints (device pointers);
    `smem` bytes of dynamic shared memory. Every launch of the library goes through it: the
    rungs', the tensor rungs' and their pre-pass's (kernels loaded by runtime/driver.load).
    The kernel launches into the current context, which must be the kernel's device's (the
    API makes it so before a launch). `overlap`: launched by cuLaunchKernelEx with
    programmatic stream serialization, so that it may start while the launch before it in
    the stream finishes — only for a kernel that waits for that one first
    (`griddepcontrol.wait`: hopper/entry.cuh's griddep_wait)."""

    __slots__ = ("kernel", "stream", "grid", "block", "args", "smem", "_fn", "_values",
                 "_params", "_call", "_config", "pointer_slots", "_lock")

    def __init__(self, kernel, stream, grid: tuple[int, int, int],
                 block: tuple[int, int, int], args: tuple,
                 pointer_slots: tuple[int, ...] = (), smem: int = 0, overlap: bool = False):
        grid = tuple(map(int, (tuple(grid) + (1, 1))[:3]))
        block = tuple(map(int, (tuple(block) + (1, 1))[:3]))
        self.kernel, self.stream, self.grid, self.block, self.args = (
            kernel, stream, grid, block, args)
        self.smem = int(smem)
        self._values = [_cell(a) for a in args]
        # the arguments `repointed` may change (A, B and C of a rung's launch)
        self.pointer_slots = pointer_slots
        self._lock = threading.Lock()
        self._params = (ctypes.c_void_p * max(1, len(args)))(
            *[_address(v) for v in self._values])
        # cuLaunchKernel's arguments, resolved once: the kernel, grid, block, dynamic shared
        # memory, the CUstream, the address of the argument pointers, no extra; through
        # ctypes on integer handles (runtime/driver.py)
        handles = _integers(kernel.handle, stream.handle)
        k, s = handles or (kernel.handle, stream.handle)
        self._config = None
        if overlap:  # cuLaunchKernelEx(config, f, params, extra); the config kept alive here
            fast = driver.launch_kernel_ex() if handles is not None else None
            self._config = driver.overlapped_config(grid, block, self.smem,
                                                    s if handles is not None else 0)
            self._call = (ctypes.addressof(self._config[0]), k,
                          ctypes.addressof(self._params), None)
        else:
            fast = driver.launch_kernel() if handles is not None else None
            self._call = (k, *grid, *block, self.smem, s, ctypes.addressof(self._params),
                          None)
        self._fn = fast if fast is not None else _cannot_launch

    def __call__(self) -> None:
        err = self._fn(*self._call)
        if err:
            self.failed(err)

    def failed(self, err) -> None:
        """Raise this launch's failure: `err`, the CUresult cuLaunchKernel returned."""
        name = "cuLaunchKernelEx" if self._config is not None else "cuLaunchKernel"
        raise RuntimeError(f"{name} failed: {_result_name(err)} (grid "
                           f"{self.grid}, block {self.block})")

    def export(self, operands: dict[int, int]) -> tuple:
        """This launch as data, for the native switch (sgemmlab/csrc/switch.cpp), which
        repoints and launches it without Python: (kernel handle, grid, block, each argument
        as the integer of its bytes, (slot, operand) for the pointer slots — `operands`
        maps a slot to the operand code that fills it —, no workspace tail, 0, 0)."""
        handles = _integers(self.kernel.handle)
        if handles is None:
            raise TypeError("a launch on a stand-in kernel has no handle to export")
        if any(isinstance(v, _TensorMap) for v in self._values) or self.smem or \
                self._config is not None:
            raise TypeError("the native switch launches rungs without tensor maps, dynamic "
                            "shared memory or overlap")
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



def _integers(*handles) -> tuple[int, ...] | None:
    """The driver handles as integers, or None where they are not (the tests' stand-ins)."""
    try:
        return tuple(int(h) for h in handles)
    except (TypeError, ValueError):
        return None


def _result_name(err) -> str:
    return driver.error_name(err)


def _cannot_launch(*args) -> int:
    raise TypeError("this launch has no driver to run it: its kernel or stream is not a "
                    "driver handle, or there is no CUDA driver library")


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
    when `head` and `tail` say which arguments are which. Several launches that each read
    some of A, B and C are repointed by `roles`: for each launch, which of the pointers
    (0 A, 1 B, 2 C) go into its own `pointer_slots`, in order (none: it reads only the
    workspace); `pointer_slots` then only says which call pointers the whole takes."""

    def __init__(self, device_id: int, stream, p, build: Callable[[int, int], tuple],
                 pointer_slots: tuple[int, ...] = (), bound_pointers: tuple = (),
                 head: int = 0, tail: tuple = (),
                 roles: tuple[tuple[int, ...], ...] | None = None):
        from . import workspace as ws

        self._ws, self._device_id, self._stream, self._p, self._build = (
            ws, device_id, stream, p, build)
        self.pointer_slots, self.bound_pointers = pointer_slots, bound_pointers
        self._head, self._tail, self._roles = head, tail, roles
        self._capturing = ws.capture_probe(stream)
        self._lock = threading.Lock()
        # bound while its stream is being captured (a graph's first call on a stream of its
        # own): no workspace now, since nothing may be allocated on a capturing stream; a
        # captured launch uses one of its own, and a later eager one makes the stream's
        self._generation, self._steps, self._replay = None, None, ()
        if self._capturing is None or not self._capturing():
            self._refresh()

    def _refresh(self) -> None:
        zeroed, scratch = self._ws.workspace(self._device_id, self._stream,
                                             self._p.zeroed_bytes, self._p.scratch_bytes)
        self._generation = self._ws.generation
        self._steps = self._build(zeroed, scratch)
        self._replay = self._plan(self._steps)

    def _plan(self, steps: tuple) -> tuple:
        """What `_run` replays for each launch: its launch function and packed call, the
        argument cells that take the call's pointers (with the pointer's index), and the
        launch (for its error). The launches are this object's own, built for it, and run
        under its lock (or built afresh for a capture), so their values are written here
        without each one's lock or call: less Python a launch, which the scheme's ten or
        eleven launches a product feel most."""
        roles = self._roles
        if roles is None:  # the pointers go to the last launch's slots, in order
            roles = ((),) * (len(steps) - 1) + (tuple(range(len(self.pointer_slots))),)
        return tuple((step._fn, step._call,
                      tuple((step._values[slot], i) for slot, i in zip(step.pointer_slots, r)),
                      step)
                     for step, r in zip(steps, roles, strict=True))

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
        for fn, call, cells, step in (self._replay if steps is self._steps
                                      else self._plan(steps)):
            for cell, i in cells:
                cell.value = pointers[i]
            err = fn(*call)
            if err:
                step.failed(err)

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


