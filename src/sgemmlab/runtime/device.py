"""The GPU at hand: whether there is one, what it is, and the device object the runtime
works through (runtime/driver.py: its context, memory and streams)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from ..errors import NoGPUError
from . import driver


def slug(gpu_name: str) -> str:
    """File-system name of a GPU, as results/ and the tables use it: 'NVIDIA H200' ->
    'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


@dataclass(frozen=True)
class GPUInfo:
    index: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    l2_bytes: int
    max_smem_per_block_optin: int

    @property
    def arch(self) -> str:
        """NVRTC target for this GPU, e.g. 'sm_90'."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def slug(self) -> str:
        """File-system name: 'NVIDIA H200' -> 'nvidia-h200'."""
        return slug(self.name)


class Device:
    """GPU `index`, as the runtime uses it: its primary context made current (`set_current`),
    stream-ordered memory (`allocate`), and `sync` (streams are raw handles:
    arrays.stream_for)."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def set_current(self) -> None:
        driver.make_current(self.index)

    def allocate(self, size: int, *, stream) -> "driver.Buffer":
        return driver.allocate(self.index, size, stream)

    def sync(self) -> None:
        driver.synchronize(self.index)


@cache
def _device(index: int) -> Device:
    try:
        if not 0 <= index < driver.device_count():
            raise ValueError(f"there is no GPU {index} ({driver.device_count()} found)")
        return Device(index)
    except Exception as exc:  # no libcuda, no device, driver too old: all mean "no GPU"
        raise NoGPUError(
            f"No usable NVIDIA GPU was found ({str(exc).splitlines()[0]}); "
            "sgemmlab needs one to run kernels."
        ) from None


def device(index: int = 0) -> Device:
    """The Device, its context made current on every call (a module loads into the current
    context, so the last device used must not decide). Raises NoGPUError in one sentence."""
    dev = _device(index)
    try:
        dev.set_current()
    except Exception as exc:
        raise NoGPUError(f"GPU {index} could not be made current ({exc})") from None
    return dev


@cache
def gpu_info(index: int = 0) -> GPUInfo:
    device(index)
    return GPUInfo(
        index=index,
        name=driver.name(index),
        compute_capability=(driver.attribute(index, driver.ATTR_CC_MAJOR),
                            driver.attribute(index, driver.ATTR_CC_MINOR)),
        sm_count=driver.attribute(index, driver.ATTR_MULTIPROCESSOR_COUNT),
        l2_bytes=driver.attribute(index, driver.ATTR_L2_CACHE_SIZE),
        max_smem_per_block_optin=driver.attribute(index, driver.ATTR_MAX_SMEM_PER_BLOCK_OPTIN),
    )


def has_gpu() -> bool:
    try:
        device(0)
    except NoGPUError:
        return False
    return True
