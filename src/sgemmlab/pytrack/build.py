"""A Python rung's machine code without a GPU: PTX from Numba's NVVM, a cubin from nvJitLink.

On a GPU, Numba compiles a kernel at its first launch: Python to LLVM IR to PTX (libNVVM),
then PTX to SASS by the driver's linker. `inspect --track numba` needs the same code on a
machine with no GPU, so it asks for each step itself: `numba.cuda.compile_ptx` with the
signature a launch from torch or numpy types (SIGNATURE), then cuda.core's Linker, which uses
nvJitLink (pip install nvidia-nvjitlink) and so needs no driver. The SASS is then read by the
same code as the CUDA rungs' (anatomy/sass.py).

One detail of Numba: compiling a kernel that calls a device function (common.store_c) asks
the current device for its compute capability, which fails without a driver. `offline(cc)`
answers that question with the target's capability while the PTX is built, and only then.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace

from numba import cuda, float32, int64

from sgemmlab.registry import Config

#: What a launch types its arguments as: Python ints for M, N, K (int64), numpy float32
#: alpha and beta, C-contiguous float32 matrices (a torch tensor or numpy array alike).
_MATRIX = float32[:, ::1]
SIGNATURE = (int64, int64, int64, float32, _MATRIX, _MATRIX, float32, _MATRIX)

_ENTRY = re.compile(r"^\.(?:visible\s+)?\.entry\s+(\S+?)\s*\(", re.M)


class NoToolchain(RuntimeError):
    """libNVVM or nvJitLink is missing: the Python rung's machine code cannot be built here."""


@dataclass(frozen=True)
class Built:
    ptx: str
    cubin: bytes
    entry: str  # the kernel's mangled name in the cubin


@contextmanager
def offline(cc: tuple[int, int]):
    """Numba's device-function compiler asks the driver for the device's compute capability:
    answer `cc`, the target's, for it while the block runs (on a machine with a GPU too:
    the code is built for the target asked, not for the device at hand)."""
    from numba.cuda import dispatcher

    real = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: SimpleNamespace(compute_capability=cc)
    try:
        yield
    finally:
        dispatcher.get_current_device = real


def build(module, cfg: Config, arch: str = "sm_90") -> Built:
    """PTX and cubin of Python rung `module` (a sgemmlab.pytrack.rNN module) at `cfg` for
    `arch` ('sm_90'), as a launch would compile it."""
    digits = re.sub(r"\D", "", arch)  # 'sm_90' and 'sm_90a' alike: (9, 0)
    cc = (int(digits[:-1]), int(digits[-1]))
    kern = module.kernel(cfg)
    try:
        with offline(cc):
            ptx, _ = cuda.compile_ptx(kern.py_func, SIGNATURE, cc=cc)
    except Exception as exc:  # NVVM missing surfaces as several numba error types
        if "NVVM" in str(exc) or "libnvvm" in str(exc).lower():
            raise NoToolchain(f"libNVVM not found (a CUDA toolkit or pip install "
                              f"nvidia-cuda-nvcc): {str(exc).splitlines()[0]}") from None
        raise
    try:
        from cuda.core import Linker, LinkerOptions, ObjectCode

        linked = Linker(ObjectCode.from_ptx(ptx.encode()),
                        options=LinkerOptions(arch=arch)).link("cubin")
    except Exception as exc:  # no nvJitLink and no driver to link with
        raise NoToolchain(f"cannot link PTX without nvJitLink (pip install nvidia-nvjitlink) "
                          f"or a driver: {str(exc).splitlines()[0]}") from None
    entries = _ENTRY.findall(ptx)
    if len(entries) != 1:
        raise RuntimeError(f"expected one kernel entry in the PTX, found {entries}")
    return Built(ptx, bytes(linked.code), entries[0])
