"""A predicted time for a rung at a shape, from its bill, its SASS and the GPU (an estimate:
see "Latency, ..." below, and docs/inspect-h200.md on where it errs in each direction).

Five services each need a time; the kernel cannot finish before the slowest, which is the
predicted limit:
  DRAM      the bill's block-tile traffic (with rung 14's fix-up round trips) / the copy
            bandwidth
  L1        global-load wavefronts (one per 128-byte line a warp instruction touches; the
            L1 serves one a clock per SM) / (SMs * clock)
  shared    shared-memory wavefronts / (SMs * clock): 32 banks x 4 bytes a clock
  issue     instructions / (4 schedulers * SMs * clock), instructions = the hot loop's
            instructions per FFMA x every FFMA (needs the SASS)
  FFMA      FFMAs / (FP32 lanes * SMs * clock)
The counts are per warp per K step (bill.py), times warps per block, blocks and K steps:
blocks are the output tiles, which for rung 14 is the work its persistent grid shares out
(the same tile x K step units, whoever computes them).
Latency, occupancy and wave quantization are not in the model: where the measurement is far
above the prediction, that is what is left (and what rung 14's Stream-K wins back is in there).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..runtime.occupancy import GPU
from .bill import Bill
from .sass import LoopMix


@dataclass(frozen=True)
class Prediction:
    times_us: dict  # service -> microseconds
    limit: str

    @property
    def time_us(self) -> float:
        return self.times_us[self.limit]

    def to_dict(self) -> dict:
        return {"times_us": self.times_us, "limit": self.limit, "time_us": self.time_us}


def predict(bill: Bill, g: GPU, loop: LoopMix | None) -> Prediction:
    blocks = bill.grid[0] * bill.grid[1]
    warp_steps = blocks * bill.warps * bill.k_steps  # warp x K step units in the run
    per_sm_clock = g.sms * g.clock_ghz * 1e3  # per microsecond
    ffma_warp = warp_steps * bill.ffma_per_warp
    times = {
        "DRAM": bill.dram_bytes / (g.copy_tbps * 1e6),
        "L1": warp_steps * bill.l1_wavefronts_per_warp / per_sm_clock,
        "shared": warp_steps * bill.smem_wavefronts_per_warp / per_sm_clock,
        "FFMA": ffma_warp * 32 / (g.ffma_lanes * per_sm_clock),
    }
    if loop is not None and loop.ffma:
        times["issue"] = ffma_warp * loop.instructions_per_ffma / (g.schedulers * per_sm_clock)
    return Prediction(times, max(times, key=times.get))
