"""The drop-in switch's native kernels (sgemmlab/csrc/switch.cpp): built once per torch,
Python and source version with torch's own extension builder, kept in the compile cache.

Why a compiled part at all: a product through torch's dispatcher into a Python kernel pays
the dispatcher's boxing and a tensor allocation from Python, about 9 µs on the H200's host,
which is as much as torch's whole `mm` (results/nvidia-h200/host/switch-anatomy-*.json). The
native kernels serve a product whose signature they have seen in C++ and ask Python only
for new signatures.

The build needs a C++ compiler and ninja (torch.utils.cpp_extension's requirements), and
takes about half a minute, once: the module lands in <cache>/native/<digest>/, a directory
private to you, and is loaded only from there after the same checks the compile cache
applies to cubins (runtime/trust.py). Where it cannot be built, or SGEMMLAB_NATIVE=0, the
switch runs its Python kernels (one warning says why), which compute the same products
with about 10 µs more per call.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from importlib.resources import files

from . import trust
from .compiler import cache_refusal, make_cache_subdir

SOURCE = "csrc/switch.cpp"
_lock = threading.Lock()
_module = None
_failed: str | None = None


def source() -> bytes:
    return files("sgemmlab").joinpath(SOURCE).read_bytes()


def digest() -> str:
    """What the build depends on: the source, torch's version and this Python."""
    import torch

    h = hashlib.sha256(source())
    h.update(f"{torch.__version__}|{sys.version}|{sys.platform}".encode())
    return h.hexdigest()[:16]


def enabled() -> bool:
    return os.environ.get("SGEMMLAB_NATIVE", "1") != "0"


def load(quiet: bool = False):
    """The native module, built if needed; None where it cannot be (after one warning,
    unless `quiet`) or SGEMMLAB_NATIVE=0."""
    global _module, _failed
    if _module is not None or not enabled():
        return _module
    with _lock:
        if _module is None and _failed is None:
            try:
                _module = _build()
            except Exception as exc:  # no compiler, no ninja, a refused directory, ...
                last = (str(exc).strip().splitlines() or [""])[-1]
                _failed = f"{type(exc).__name__}: {last}"
        if _module is None and not quiet:
            trust.warn_once(("native", _failed),
                            "sgemmlab's native switch kernels could not be built "
                            f"({_failed}); torch_mode runs its Python kernels, which cost "
                            "about 10 µs more per product (SGEMMLAB_NATIVE=0 skips the "
                            "build)", stacklevel=3)
    return _module


def _build():
    from torch.utils import cpp_extension

    d = digest()
    where = make_cache_subdir("native") / d
    where.mkdir(mode=0o700, exist_ok=True)
    if refused := cache_refusal("native"):  # the cache and native/, as for cubins
        raise trust.Untrusted(*refused)
    if why := trust.dir_problem(where):
        raise trust.Untrusted(where, why)
    src = where / "switch.cpp"
    if not src.exists() or src.read_bytes() != source():
        from .files import write_atomic

        write_atomic(src, source(), mode=0o600)
    name = f"sgemmlab_switch_{d}"
    for built in where.glob(f"{name}*.so"):  # what is loaded must be what only you wrote
        if why := trust.problem(os.lstat(built)):
            raise trust.Untrusted(built, why)
    return cpp_extension.load(name, [str(src)], build_directory=str(where),
                              extra_cflags=["-O2"], verbose=False)
