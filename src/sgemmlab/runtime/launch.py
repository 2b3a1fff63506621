"""Load compiled rungs onto the GPU and launch them on raw pointers.

`Launcher` binds a rung and a configuration; calling it runs C = alpha*A@B + beta*C on
device pointers, on a given stream. Kernels are compiled (or read from the disk cache) once
per (rung, configuration, alignment variant, architecture) and kept loaded.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Mapping

import numpy as np

from ..registry import Config, Rung, config_key
from .compiler import ENTRY, Compiled, compile_kernel
from .device import device, gpu_info

INT32_MAX = 2**31 - 1

_loaded: dict[tuple, tuple[object, Compiled]] = {}
_lock = threading.Lock()


class ConfigError(ValueError):
    """A configuration the registry calls illegal; the message lists the broken rules."""


def vec4_ok(ptrs: tuple[int, ...], lds: tuple[int, ...]) -> bool:
    """float4 global accesses are legal: every base 16-byte aligned, every ld a multiple of 4."""
    return all(p % 16 == 0 for p in ptrs) and all(ld % 4 == 0 for ld in lds)


def check_index_range(M: int, N: int, K: int, lda: int, ldb: int, ldc: int) -> None:
    """Kernels take sizes as int32 and form row offsets in 64 bits; refuse what overflows."""
    for name, v in (("M", M), ("N", N), ("K", K), ("lda", lda), ("ldb", ldb), ("ldc", ldc)):
        if v > INT32_MAX:
            raise OverflowError(f"{name} = {v} does not fit the kernels' 32-bit size arguments")


def load(rung: Rung, cfg: Config, vec4: bool, device_id: int = 0):
    """(cuda.core Kernel, Compiled) for the rung, compiled for this device, cached."""
    if problems := rung.violations(cfg):
        raise ConfigError(f"illegal configuration {config_key(cfg)} for rung {rung.label}: "
                          + "; ".join(problems))
    key = (rung.label, config_key(cfg), vec4, device_id)
    with _lock:
        hit = _loaded.get(key)
    if hit is not None:
        return hit
    from cuda.core import ObjectCode

    device(device_id)  # makes the device's context current for the module load
    macros = rung.macros(cfg) | ({"SGEMM_VEC4": 1} if rung.vectorized and vec4 else {})
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
        return load(self.rung, self.config, vec4, self.device_id)[1]

    def bind(self, M: int, N: int, K: int, alpha: float, a: int, lda: int, b: int, ldb: int,
             beta: float, c: int, ldc: int, stream) -> Callable[[], None]:
        """Everything checked and converted once; the returned callable only launches.
        (The benchmark times these, so host work stays out of the measured region.)"""
        from cuda.core import LaunchConfig, launch

        check_index_range(M, N, K, lda, ldb, ldc)
        vec4 = vec4_ok((a, b, c), (lda, ldb, ldc))
        kernel, _ = load(self.rung, self.config, vec4, self.device_id)
        grid = self.rung.grid(self.config, M, N)
        if grid[1] > 65535:
            raise OverflowError(f"M={M}, N={N} need {grid[1]} blocks along gridDim.y, "
                                "which allows 65535")
        config = LaunchConfig(grid=grid, block=self.block)
        args = (np.int32(M), np.int32(N), np.int32(K), np.float32(alpha), a, np.int32(lda),
                b, np.int32(ldb), np.float32(beta), c, np.int32(ldc))
        return lambda: launch(stream, config, kernel, *args)

    def __call__(self, *args, **kwargs) -> None:
        """Launch once: same arguments as `bind`."""
        self.bind(*args, **kwargs)()
