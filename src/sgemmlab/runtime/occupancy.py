"""How many blocks of a kernel an SM holds, and which budget runs out first (the "Tetris").

An SM accepts blocks until one of four budgets is spent: threads (warp slots), registers,
shared memory, or block slots. Each budget gives a count of blocks; the smallest wins and its
resource is the limit (several can tie). Registers are handed out per warp in units of 256
(a thread asking for 37 gets 40); shared memory per block in units of 128 bytes, plus 1 KiB
the system reserves for every block on sm_80 and later.

The GPU table holds the numbers the occupancy calculator and the roofs need, from NVIDIA's
tuning guides and data sheets; `copy_tbps` is a measured device-to-device copy where we have
one (the H200's from H200-baseline.md, the H100's from the seed article), else 85 % of the
data-sheet bandwidth.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GPU:
    slug: str  # what --gpu takes
    name: str  # as the driver reports it: the key of data/defaults.json
    arch: str  # NVRTC target
    sms: int
    clock_ghz: float  # boost clock
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm: int  # bytes a kernel can use per SM (carve-out at its largest)
    smem_per_block_optin: int
    copy_tbps: float  # DRAM bandwidth the predictions use
    ffma_lanes: int = 128  # FP32 lanes per SM
    registers_per_sm: int = 65536
    register_unit: int = 256  # registers are allocated per warp in these units
    smem_unit: int = 128
    smem_reserved_per_block: int = 1024
    schedulers: int = 4  # warp schedulers per SM, one instruction per clock each

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // 32

    @property
    def ffma_tflops(self) -> float:
        return 2 * self.ffma_lanes * self.sms * self.clock_ghz / 1e3


GPUS: dict[str, GPU] = {g.slug: g for g in (
    GPU("h200", "NVIDIA H200", "sm_90", 132, 1.98, 2048, 32, 228 * 1024, 227 * 1024, 4.22),
    GPU("h100", "NVIDIA H100 80GB HBM3", "sm_90", 132, 1.98, 2048, 32, 228 * 1024,
        227 * 1024, 3.03),
    GPU("a100", "NVIDIA A100-SXM4-80GB", "sm_80", 108, 1.41, 2048, 32, 164 * 1024,
        163 * 1024, 1.73, ffma_lanes=64),
    GPU("a6000", "NVIDIA RTX A6000", "sm_86", 84, 1.80, 1536, 16, 100 * 1024, 99 * 1024,
        0.65),
    GPU("rtx4090", "NVIDIA GeForce RTX 4090", "sm_89", 128, 2.52, 1536, 24, 100 * 1024,
        99 * 1024, 0.86),
)}


def gpu(key: str) -> GPU:
    """Look a GPU up by slug ('h200'), or by any name containing one ('NVIDIA H200')."""
    k = re.sub(r"[^a-z0-9]", "", key.lower())
    for g in GPUS.values():
        if k == g.slug or g.slug in k or k == re.sub(r"[^a-z0-9]", "", g.name.lower()):
            return g
    raise KeyError(f"unknown GPU {key!r}; known: {', '.join(GPUS)}")


@dataclass(frozen=True)
class Occupancy:
    gpu: str
    threads: int
    registers: int
    smem_bytes: int  # static + dynamic, as the kernel asks
    by: dict  # resource -> blocks per SM that budget allows
    blocks: int
    limits: tuple[str, ...]  # the resources that allow exactly `blocks`
    warps: int
    max_warps: int

    @property
    def fraction(self) -> float:
        return self.warps / self.max_warps

    def to_dict(self) -> dict:
        return {**asdict(self), "fraction": self.fraction}


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(g: GPU, threads: int, registers: int, smem_bytes: int) -> Occupancy:
    """Blocks per SM of a kernel with `threads` per block, `registers` per thread and
    `smem_bytes` of shared memory per block, on `g`."""
    warps = -(-threads // 32)
    regs_per_warp = _round_up(max(registers, 1) * 32, g.register_unit)
    smem = _round_up(smem_bytes, g.smem_unit) + g.smem_reserved_per_block
    by = {
        "threads": g.max_warps_per_sm // warps,
        "registers": (g.registers_per_sm // regs_per_warp) // warps,
        "shared memory": g.smem_per_sm // smem,
        "block slots": g.max_blocks_per_sm,
    }
    blocks = min(by.values())
    return Occupancy(g.slug, threads, registers, smem_bytes, by, blocks,
                     tuple(k for k, v in by.items() if v == blocks), blocks * warps,
                     g.max_warps_per_sm)
