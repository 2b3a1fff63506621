"""The GPU at hand: whether there is one, what it is, and the cuda.core objects for it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from ..errors import NoGPUError


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


@cache
def _device(index: int):
    try:
        from cuda.core import Device

        return Device(index)
    except Exception as exc:  # no libcuda, no device, driver too old: all mean "no GPU"
        raise NoGPUError(
            f"No usable NVIDIA GPU was found ({str(exc).splitlines()[0]}); "
            "sgemmlab needs one to run kernels."
        ) from None


def device(index: int = 0):
    """The cuda.core Device, made current on every call (a module loads into the current
    context, so the last device used must not decide). Raises NoGPUError in one sentence."""
    dev = _device(index)
    try:
        dev.set_current()
    except Exception as exc:
        raise NoGPUError(f"GPU {index} could not be made current ({exc})") from None
    return dev


@cache
def gpu_info(index: int = 0) -> GPUInfo:
    dev = device(index)
    props = dev.properties
    cc = dev.compute_capability
    return GPUInfo(
        index=index,
        name=dev.name,
        compute_capability=(cc.major, cc.minor),
        sm_count=props.multiprocessor_count,
        l2_bytes=props.l2_cache_size,
        max_smem_per_block_optin=props.max_shared_memory_per_block_optin,
    )


def has_gpu() -> bool:
    try:
        device(0)
    except NoGPUError:
        return False
    return True
