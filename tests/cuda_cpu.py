"""CUDA C++ kernels on the CPU, for the tests: the source is built with the host's C++ compiler
and tests/cuda_cpu.h, which runs a block's threads as fibers (that header says what it
emulates and what it cannot see). The scheme's passes (kernels/hopper/ozaki.cu) run here
through the runtime's own launches (runtime/ozaki.bind, Packed), with rung 26's INT8
products done in NumPy from the residue planes the splits wrote, or rung 26 itself
emulated (its mbarriers, copy engine and wgmma): so a machine without a GPU checks the
passes and the products bit for bit against the NumPy reference, and the runtime's packing
of their arguments against the kernels' parameters.

Every buffer the kernels see is placed against an unmapped page (past its end, to 16
bytes), so a read or write past it faults, and the launch fails with the kernel, block and
thread. The build lives in a private temporary folder (nothing executable is loaded from a
place another user could write)."""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
KERNELS = HERE.parent / "src" / "sgemmlab" / "kernels"
HEADER = HERE / "cuda_cpu.h"
# (after the launch bounds, a macro such as rung 26's OZ_CLUSTER may stand)
_KERNEL = re.compile(r"SGEMM_KERNEL\s+(?:__launch_bounds__\([^)]*\)\s*)?(?:[A-Z_][A-Z0-9_]*\s+)*"
                     r"(\w+)\s*\(")
SECONDS = 120  # a launch's time limit


def compiler() -> str | None:
    """The host's C++ compiler, or None."""
    for name in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


_built: dict[tuple, "Library"] = {}
_lock = threading.Lock()
_home: Path | None = None


def build(source: str | Path, defines: dict[str, int] | None = None) -> "Library":
    """`source` (relative to src/sgemmlab/kernels, or a path) with `defines`, built once a
    process."""
    global _home
    defines = defines or {}
    path = KERNELS / source
    text = path.read_text()
    names = _KERNEL.findall(re.sub(r"//[^\n]*", "", text))
    key = (str(path), tuple(sorted(defines.items())))
    with _lock:
        if key in _built:
            return _built[key]
        if _home is None:
            _home = Path(tempfile.mkdtemp(prefix="sgemmlab-cuda-cpu-"))  # mode 0700
            atexit.register(shutil.rmtree, _home, True)  # (a loaded library may go)
        digest = hashlib.sha256((text + HEADER.read_text() + repr(key)).encode()).hexdigest()
        lib = _home / f"{path.stem}-{digest[:16]}.so"
        wrapper = _home / f"{path.stem}-{digest[:16]}.cpp"
        lines = [f'#include "{path}"']
        for n in names:
            lines.append(
                f'extern "C" int emu_{n}(const unsigned* g, const unsigned* b, unsigned m, '
                f'void** a, const unsigned* s, int c, unsigned t, int k) '
                f'{{ return emu::launch(&{n}, g, b, m, a, s, c, t, k); }}')
        lines += ['extern "C" const char* emu_failure() { return emu::failure.c_str(); }',
                  'extern "C" void emu_set_order(unsigned long long s) { emu::order_seed = s; }',
                  'extern "C" void emu_set_blocks_reversed(int on) { emu::blocks_reversed = on; }',
                  _ALLOC]
        wrapper.write_text("\n".join(lines) + "\n")
        cxx = compiler()
        if cxx is None:
            raise RuntimeError("no C++ compiler on this machine")
        cmd = [cxx, "-std=c++20", "-O1", "-g", "-shared", "-fPIC", "-fno-strict-aliasing",
               "-ffp-contract=off", "-Wno-unknown-pragmas", "-include", str(HEADER),
               f"-I{path.parent}", f"-I{KERNELS}",
               *[f"-D{k}={v}" for k, v in defines.items()], str(wrapper), "-o", str(lib)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(f"{source} does not build for the CPU:\n{done.stderr[-4000:]}")
        out = _built[key] = Library(ctypes.CDLL(str(lib)), names)
        return out


_ALLOC = """
extern "C" void* emu_alloc(size_t n) { return emu::alloc(n); }
extern "C" void emu_free(void* p, size_t n) { emu::release(p, n); }
"""


class Buffer:
    """`size` bytes of emulated device memory (against an unmapped page): `address`, and
    `array(dtype)`, a NumPy view of them."""

    def __init__(self, lib: "Library", size: int, fill: int = 0):
        self._lib, self.size = lib, size
        self.address = lib.dll.emu_alloc(ctypes.c_size_t(size))
        if not self.address:
            raise MemoryError(f"{size} bytes")
        ctypes.memset(self.address, fill, size)

    def array(self, dtype=np.uint8) -> np.ndarray:
        raw = (ctypes.c_ubyte * self.size).from_address(self.address)
        return np.frombuffer(raw, dtype=np.uint8).view(dtype)

    def __del__(self):
        if getattr(self, "address", None):
            self._lib.dll.emu_free(ctypes.c_void_p(self.address), ctypes.c_size_t(self.size))


class LaunchFailed(RuntimeError):
    pass


class Library:
    def __init__(self, dll, names: list[str]):
        self.dll, self.names = dll, names
        dll.emu_alloc.restype = ctypes.c_void_p
        dll.emu_failure.restype = ctypes.c_char_p

    def alloc(self, size: int, fill: int = 0) -> Buffer:
        return Buffer(self, size, fill)

    def order(self, seed: int) -> None:
        """The threads' turns between barriers from now on: 0, first to last then last to
        first (the default); another seed, an order drawn afresh each round from it."""
        self.dll.emu_set_order(ctypes.c_ulonglong(seed))

    def blocks_reversed(self, on: bool) -> None:
        """From now on, every grid's blocks run last to first (on) or first to last (the
        default): a kernel whose blocks rely on the order they run in fails one way."""
        self.dll.emu_set_blocks_reversed(ctypes.c_int(int(on)))

    def launch(self, name: str, grid, block, params: int, sizes: list[int],
               seconds: int = SECONDS, smem: int = 0, cluster: int = 1) -> None:
        """`name` on `grid` x `block`, its arguments as cuLaunchKernel takes them (`params`:
        the address of an array of pointers to each argument's bytes, `sizes` their sizes;
        `smem` bytes of dynamic shared memory, which every block finds filled with 0xFF);
        `cluster` blocks along x run together, each with its own shared memory (a kernel
        with `__shared__` variables of its own runs in clusters of 1 only)."""
        fn = getattr(self.dll, f"emu_{name}")
        g = (ctypes.c_uint * 3)(*grid)
        b = (ctypes.c_uint * 3)(*block)
        s = (ctypes.c_uint * max(1, len(sizes)))(*sizes)
        if fn(g, b, smem, ctypes.c_void_p(params), s, len(sizes), seconds, cluster):
            raise LaunchFailed(f"{name} (grid {tuple(grid)}, block {tuple(block)}): "
                               + self.dll.emu_failure().decode())


def cell_size(cell) -> int:
    """The bytes of one of Packed's argument cells (a ctypes scalar, or a _TensorMap)."""
    if hasattr(cell, "_buf"):
        from sgemmlab.runtime.tma import TENSOR_MAP_ALIGN
        return ctypes.sizeof(cell._buf) - TENSOR_MAP_ALIGN
    return ctypes.sizeof(cell)


# --- the scheme's launches on the CPU ---------------------------------------------------

# a stand-in tensor map (tests/cuda_cpu.h, FakeMap): base, rows, cols, ld, planes, plane_ld,
# box_rows, box_cols, swizzle, elem_bytes
_MAP = struct.Struct("<10q")


def _fake_map(m) -> bytes:
    return _MAP.pack(m.base, m.rows, m.cols, m.ld, m.planes, m.plane_ld, m.box_rows,
                     m.box_cols, m.swizzle, m.elem_bytes).ljust(128, b"\0")


def _plane(address: int, count: int, rows: int, ld: int, plane: int) -> np.ndarray:
    """count x rows x ld int8 residues at `address` (planes `plane` bytes apart)."""
    size = (count - 1) * plane + rows * ld
    raw = (ctypes.c_byte * size).from_address(address)
    flat = np.frombuffer(raw, dtype=np.int8)
    return np.lib.stride_tricks.as_strided(flat, (count, rows, ld), (plane, ld, 1))


def _products(args, moduli: tuple[int, ...]) -> None:
    """Rung 26's launch in NumPy: R_l = (A_l B_l^T) mod m_l, symmetric, as int8 into the
    residue planes of C (its arguments: map_a, map_b, M, N, K, count, moduli, res_c, ldr,
    plane)."""
    map_a, map_b, M, N, K, count, _, res_c, ldr, plane = args
    ba, _, _, lda, _, pla = _MAP.unpack(bytes(map_a)[:_MAP.size])[:6]
    bb, _, _, ldb, _, plb = _MAP.unpack(bytes(map_b)[:_MAP.size])[:6]
    M, N, K, count = int(M), int(N), int(K), int(count)
    out = _plane(res_c, count, M, int(ldr), int(plane))
    out[:, :, :N] = products_numpy(_plane(ba, count, M, lda, pla)[:, :, :K],
                                   _plane(bb, count, N, ldb, plb)[:, :, :K], moduli)


def rung26(cfg: dict | None = None) -> tuple["Library", dict, int]:
    """Rung 26 built for the emulator with `cfg` (its registry seed, overridden): the
    library, the configuration, and the dynamic shared memory a launch takes."""
    from sgemmlab.runtime import ozaki

    r = ozaki.rung()
    cfg = {**r.seed, **(cfg or {})}
    macros = r.macros(cfg) | {"SMEM_EXPECT": r.dynamic_smem(cfg)}
    return build(r.source, macros), cfg, r.dynamic_smem(cfg)


@contextmanager
def ozaki_on_cpu(products: str = "numpy", gemm_cfg: dict | None = None):
    """Within it, runtime/ozaki.bind's launches run on the CPU: the passes of
    kernels/hopper/ozaki.cu emulated, and rung 26 in NumPy (`products="numpy"`) or emulated
    too ("emulated", with `gemm_cfg` over its seed). Yields `run(a, b, c, ...)`; the
    stream's workspace is kept from one call to the next, as on a GPU."""
    import types
    from unittest import mock

    from sgemmlab.ozaki.reference import COUNT
    from sgemmlab.runtime import ozaki
    from sgemmlab.runtime import packed as packed_mod
    from sgemmlab.runtime import workspace as ws

    # (with oz_scale's 2-row staging built in: 4 and 8 rows a block take the same code as
    # in the default build, which leaves it out)
    lib = build(ozaki.STEPS, ozaki.steps_macros(1, rows2=True))
    names = ["gemm", *ozaki.KERNELS]  # (what ozaki.load gives bind: a launch of another fails)
    assert set(ozaki.KERNELS) <= set(lib.names), set(ozaki.KERNELS) - set(lib.names)
    kernels = {n: types.SimpleNamespace(handle=f"cpu:{n}", name=n, dynamic_smem=0,
                                        max_active_blocks=lambda threads: state["occupancy"])
               for n in names}
    gemm_lib, cfg, kernels["gemm"].dynamic_smem = (
        rung26(gemm_cfg) if products == "emulated" else (None, ozaki.rung().seed, 0))
    state = {"count": COUNT, "sms": 3, "occupancy": 2}
    spaces: list[Buffer] = []

    def emulate(packed, *call) -> int:
        """A launch of `packed` (what Packed passes cuLaunchKernel), run here: 0, or
        LaunchFailed."""
        name = packed.kernel.name
        if name == "gemm" and gemm_lib is None:
            _gemm(packed, state["count"])
        elif name == "gemm":
            gemm_lib.launch("sgemm", packed.grid, packed.block,
                            ctypes.addressof(packed._params),
                            [cell_size(v) for v in packed._values], smem=packed.smem,
                            cluster=cfg["CLUSTER"])
        else:
            lib.launch(name, packed.grid, packed.block, ctypes.addressof(packed._params),
                       [cell_size(v) for v in packed._values], smem=packed.smem)
        return 0

    init = packed_mod.Packed.__init__

    def packed_here(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._fn = functools.partial(emulate, self)

    def workspace(dev, stream, zeroed, scratch):
        # one a stream, as the runtime's: kept while it is large enough (so a later product
        # finds what an earlier one left in the zeroed region); scratch starts as NaN, and
        # is NaN again before each product (run)
        if not spaces or spaces[0].size < zeroed or spaces[1].size < scratch:
            spaces[:] = [lib.alloc(max(zeroed, 16)), lib.alloc(max(scratch, 16), fill=0xFF)]
        return spaces[0].address, spaces[1].address

    def place(x: np.ndarray, trans: bool, extra: int):
        """x (rows x cols) in emulated memory: row-major with `extra` more columns, or
        (trans) column-major with `extra` more rows; (buffer, leading dimension, view)."""
        store = x.T if trans else x
        ld = store.shape[1] + extra
        buf = lib.alloc(4 * store.shape[0] * ld)
        full = buf.array(np.float32).reshape(store.shape[0], ld)
        full[:, :store.shape[1]] = store
        view = full[:, :store.shape[1]]
        return buf, ld, (view.T if trans else view)

    def run(a, b, c, alpha=1.0, beta=0.0, count=COUNT, ta=False, tb=False, pad=(3, 5, 0),
            guard=None, sms=3, occupancy=2, fused=True, rows_r=None, order=0,
            crt_int=False, merged=False, blocks_reversed=False, rows_k=None, early=False,
            keep_scratch=False):
        """C = alpha A B + beta C through bind (NumPy float32 arrays: A read column-major
        when ta, B when tb, each stored with `pad` more elements a row or column); returns
        C. `guard` more rows of C past M hold NaN, and must still hold it. `sms` and
        `occupancy` stand for the GPU's SMs and blocks an SM (the one-wave grids' sizes);
        `fused`: ozaki.FUSED for the call (oz_scale where the rows fit, or the two passes);
        `rows_r`: ozaki.SCALE_ROWS_R for it (oz_scale's rows a block where r is contiguous),
        `rows_k` ozaki.SCALE_ROWS_K (where k is);
        `order`: the threads' turns in every launch (Library.order); `crt_int`:
        ozaki.CRT_INT for it (oz_crt_int's integer sums); `merged`: ozaki.MERGED for it
        (a pass both operands take in one launch), and `early` ozaki.FALLBACK_EARLY (the
        fallback in the splits' launch); `blocks_reversed`: every grid's blocks
        run last to first (Library.blocks_reversed); `keep_scratch`: the scratch region as
        the last product left it (as a GPU's is), not NaN again. Checks that the
        workspace's zeroed region is 0 again afterwards."""
        state.update(count=count, sms=sms, occupancy=occupancy)
        M, K = a.shape
        N = b.shape[1]
        abuf, lda, _ = place(a, ta, pad[0])
        bbuf, ldb, _ = place(b, tb, pad[1])
        rows = M + (guard or 0)
        big = np.full((rows, N), np.nan, np.float32)
        big[:M] = c
        cbuf, ldc, cview = place(big, False, pad[2])
        stream = types.SimpleNamespace(handle=0x20)
        with mock.patch.object(ozaki, "FUSED", fused), mock.patch.object(
                ozaki, "SCALE_ROWS_R", rows_r or ozaki.SCALE_ROWS_R), mock.patch.object(
                ozaki, "CRT_INT", crt_int), mock.patch.object(ozaki, "MERGED", merged), \
                mock.patch.object(ozaki, "SCALE_ROWS_K", rows_k or ozaki.SCALE_ROWS_K), \
                mock.patch.object(ozaki, "FALLBACK_EARLY", early):
            w = ozaki.bind(0, M, N, K, alpha, abuf.address, lda, bbuf.address, ldb, beta,
                           cbuf.address, ldc, stream, trans_a=ta, trans_b=tb, count=count,
                           cfg=cfg)
        # the scratch region as NaN again (0xFF bytes), so that nothing an earlier product
        # left there (its residues, its sums) can stand in for what this one must write
        if not keep_scratch:
            ctypes.memset(spaces[1].address, 0xFF, spaces[1].size)
        libs = [x for x in (lib, gemm_lib) if x is not None]
        for x in libs:
            x.order(order)
            x.blocks_reversed(blocks_reversed)
        try:
            w()
        finally:
            for x in libs:
                x.order(0)
                x.blocks_reversed(False)
        zeroed = spaces[0].array()
        if zeroed.any():
            raise AssertionError(f"the workspace's zeroed region is not 0 after the product: "
                                 f"bytes {np.flatnonzero(zeroed)[:8]} of {zeroed.size}")
        if guard and not np.isnan(cview[M:]).all():
            raise AssertionError("an output was written past M")
        return cview[:M].copy()

    with mock.patch.object(ozaki, "load", lambda cfg, device_id=0: kernels), \
            mock.patch.object(ozaki, "gpu_info", lambda device_id=0: types.SimpleNamespace(
                name="NVIDIA H200", sm_count=state["sms"], compute_capability=(9, 0))), \
            mock.patch.object(ozaki, "encode_tiled_2d", _fake_map), \
            mock.patch.object(ws, "workspace", workspace), \
            mock.patch.object(ws, "capture_probe", lambda stream: None), \
            mock.patch.object(packed_mod.Packed, "__init__", packed_here):
        yield run


def _gemm(packed, count: int) -> None:
    """Rung 26's launch (`packed`, on a stand-in tensor map of _fake_map's) in NumPy."""
    from sgemmlab.ozaki.reference import moduli

    _products([bytes(a) if isinstance(a, (bytes, bytearray)) else a for a in packed.args],
              moduli(count))


# --- rung 26 on its own --------------------------------------------------------------------

def _aligned(data: bytes, align: int = 64):
    """`data` in a ctypes buffer at an `align`-byte boundary: (keep-alive, address)."""
    raw = ctypes.create_string_buffer(len(data) + align)
    at = -ctypes.addressof(raw) % align
    ctypes.memmove(ctypes.addressof(raw) + at, data, len(data))
    return raw, ctypes.addressof(raw) + at


def rung26_products(ra: np.ndarray, rb: np.ndarray, moduli: tuple[int, ...],
                    cfg: dict | None = None, blocks: int = 3, poison: int = 0x55,
                    source: str | Path | None = None,
                    order: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rung 26 emulated on residue planes ra (count x M x K int8) and rb (count x N x K):
    its output planes (count x M x N), and the bytes it must not have written (the planes'
    padding past N), both read from a buffer filled with `poison` first. `blocks`: its
    persistent grid, in clusters (`blocks` x CLUSTER blocks); `source`: another copy of
    the kernel (a planted bug) in its place; `order`: the threads' turns (Library.order)."""
    from sgemmlab.registry.tensor import ozaki_tile_rows
    from sgemmlab.runtime import ozaki
    from sgemmlab.runtime.tma import Tiled2D

    lib, cfg, smem = rung26(cfg)
    if source is not None:
        r = ozaki.rung()
        lib = build(source, r.macros(cfg) | {"SMEM_EXPECT": smem})
    count, M, K = ra.shape
    N = rb.shape[1]
    kpad, ldr = -(-K // 16) * 16, -(-N // 16) * 16 + 16  # (16 bytes of padding at least)
    bufs = []

    def planes(x, box_rows):
        rows = x.shape[1]
        buf = lib.alloc(count * rows * kpad)
        buf.array(np.int8).reshape(count, rows, kpad)[:, :, :K] = x
        bufs.append(buf)
        return Tiled2D(buf.address, rows, K, kpad, box_rows, ozaki.KB, elem_bytes=1,
                       planes=count, plane_ld=rows * kpad)

    # (the buffers and the maps' storage kept alive until the launch is done)
    keep_a, map_a = _aligned(_fake_map(planes(ra, ozaki_tile_rows(cfg))))
    keep_b, map_b = _aligned(_fake_map(planes(rb, cfg["BN"] // cfg["CLUSTER"])))
    out = lib.alloc(count * M * ldr, fill=poison & 0xFF)
    cells = [ctypes.c_int32(M), ctypes.c_int32(N), ctypes.c_int32(K), ctypes.c_int32(count),
             ozaki.gemm_moduli(moduli), ctypes.c_uint64(out.address), ctypes.c_int64(ldr),
             ctypes.c_int64(M * ldr)]
    params = (ctypes.c_void_p * 10)(map_a, map_b, *[ctypes.addressof(c) for c in cells])
    sizes = [128, 128, *[ctypes.sizeof(c) for c in cells]]
    lib.order(order)
    try:
        lib.launch("sgemm", (blocks * cfg["CLUSTER"], 1, 1), (384, 1, 1),
                   ctypes.addressof(params), sizes, smem=smem, cluster=cfg["CLUSTER"])
    finally:
        lib.order(0)
    got = out.array(np.int8).reshape(count, M, ldr)
    return got[:, :, :N].copy(), got[:, :, N:].copy()


def products_numpy(ra: np.ndarray, rb: np.ndarray, moduli: tuple[int, ...]) -> np.ndarray:
    """R_l = (A_l B_l^T) mod m_l, symmetric, as int8 (what rung 26 computes) from residue
    planes ra (count x M x K) and rb (count x N x K)."""
    out = np.empty((ra.shape[0], ra.shape[1], rb.shape[1]), np.int8)
    for l_, m in enumerate(moduli[:ra.shape[0]]):
        # (in FP64: each sum is an integer below 2^31, exact there, and BLAS is quick)
        p = (ra[l_].astype(np.float64) @ rb[l_].T.astype(np.float64)).astype(np.int64)
        out[l_] = (np.mod(p + m // 2, m) - m // 2).astype(np.int8)
    return out
