"""Occupancy (runtime/occupancy.py) against known cases: the seed's kernel-3 Tetris."""

from __future__ import annotations

import pytest

from sgemmlab.runtime.occupancy import GPUS, gpu, occupancy


def test_seed_kernel_3_on_the_a6000():
    # 1024 threads, 37 registers, 8 KiB of tiles: threads 1, registers 1, shared memory 11
    o = occupancy(gpu("a6000"), threads=1024, registers=37, smem_bytes=8192)
    assert o.by["threads"] == 1 and o.by["registers"] == 1 and o.by["shared memory"] == 11
    assert o.blocks == 1 and o.warps == 32 and o.max_warps == 48
    assert o.fraction == pytest.approx(2 / 3)  # the seed's "66 %"
    assert o.limits == ("threads", "registers")


@pytest.mark.parametrize("regs, blocks", [(32, 8), (40, 6), (64, 4), (65, 3), (128, 2),
                                          (255, 1)])
def test_registers_are_allocated_per_warp_in_units_of_256(regs, blocks):
    # 256-thread blocks on an H200: 65536 / (8 warps * roundup(regs*32, 256))
    o = occupancy(gpu("h200"), threads=256, registers=regs, smem_bytes=0)
    assert o.by["registers"] == blocks


def test_shared_memory_counts_the_reserved_kilobyte():
    o = occupancy(gpu("h200"), threads=128, registers=32, smem_bytes=48 * 1024)
    assert o.by["shared memory"] == (228 * 1024) // (48 * 1024 + 1024) == 4
    assert o.limits == ("shared memory",)


def test_block_slots_limit_tiny_blocks():
    o = occupancy(gpu("a6000"), threads=32, registers=16, smem_bytes=0)
    assert o.blocks == 16 and o.limits == ("block slots",)


def test_lookup_by_slug_or_driver_name():
    assert gpu("NVIDIA H200").slug == "h200"
    assert gpu("H100") is GPUS["h100"]
    with pytest.raises(KeyError, match="unknown GPU"):
        gpu("v100")
