"""The roofline's x coordinate: FLOP per DRAM byte from a rung's block tile."""

from __future__ import annotations

import pytest

from sgemmlab import registry
from sgemmlab.bench.bill import block_tile_intensity, minimal_intensity


@pytest.mark.parametrize("number", [1, 2])
def test_untiled_rungs_move_8_bytes_per_ffma(number):
    rung = registry.rung(number)
    assert block_tile_intensity(rung, rung.seed) == 0.25


def test_rung_3_tiles_bs_by_bs():
    # 2*32*32*32 FLOP over (32+32)*32 floats: 8 FLOP/byte
    assert block_tile_intensity(registry.rung(3), {"BS": 32}) == pytest.approx(8.0)
    assert block_tile_intensity(registry.rung(3), {"BS": 16}) == pytest.approx(4.0)


@pytest.mark.parametrize("BM, BN, BK, expected", [
    (128, 128, 8, 32.0),  # BM*BN / (2*(BM+BN)): BK cancels
    (128, 128, 16, 32.0),
    (256, 128, 16, 2 * 256 * 128 / (384 * 4)),
    (64, 64, 8, 16.0),
])
def test_block_tile_intensity(BM, BN, BK, expected):
    cfg = {**registry.rung(10).seed, "BM": BM, "BN": BN, "BK": BK}
    assert block_tile_intensity(registry.rung(10), cfg) == pytest.approx(expected)
    cfg5 = {**registry.rung(5).seed, "BM": BM, "BN": BN, "BK": BK}
    assert block_tile_intensity(registry.rung(5), cfg5) == pytest.approx(expected)


def test_minimal_intensity():
    assert minimal_intensity(4096, 4096, 4096) == pytest.approx(4096 / 6)
    # a skinny shape is far less intense than a cube of the same FLOPs
    assert minimal_intensity(8192, 8192, 512) < minimal_intensity(4096, 4096, 2048)
