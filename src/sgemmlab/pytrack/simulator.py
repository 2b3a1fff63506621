"""Numba's CUDA simulator, measured before it starts and watched while it runs.

The simulator runs every thread of a block as a Python thread, one block after another: a
multiply-add costs microseconds, not picoseconds, and a barrier costs a switch through every
thread of the block. 4096^3 is about 69 billion multiply-adds, days of CPU. So `estimate`
says how long a launch will take before it starts (from what each rung cost here, at its
SIM_CONFIG), and `progress` reports the blocks done as they finish.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Callable

#: Microseconds of simulator time per multiply-add, per Python rung at its SIM_CONFIG (CPU
#: time of `sgemmlab run --track numba --simulate` at 64^3 and 128^3 on a 2-core machine,
#: start-up left out). Rungs 3 and 4 pay for their many barriers. A rough guide: another
#: machine or configuration may be a few times faster or slower; `progress` shows the truth.
US_PER_FMA = {1: 11.0, 2: 3.0, 3: 42.0, 4: 43.0, 5: 9.0, 6: 11.0, 7: 2.0}

#: Above this estimate the launch is announced with its estimate, and its progress is shown.
WARN_S = 30.0
#: Above this estimate the launch is refused unless asked for (`--long`).
LIMIT_S = 15 * 60.0
#: Seconds between two progress lines.
EVERY_S = 10.0


@dataclass(frozen=True)
class Estimate:
    rung: int  # the Python rung's number
    shape: tuple[int, int, int]
    blocks: int
    threads: int  # per block
    seconds: float

    @property
    def fmas(self) -> int:
        M, N, K = self.shape
        return M * N * K

    def warns(self) -> bool:
        return self.seconds > WARN_S

    def refused(self) -> bool:
        return self.seconds > LIMIT_S

    def text(self) -> str:
        """One line: the work, the time it should take, and a size that takes less."""
        M, N, K = self.shape
        smaller = quick_size(self.rung)
        return (f"{M}x{N}x{K} in Numba's simulator: {_count(self.fmas)} multiply-adds in "
                f"{self.blocks} blocks of {self.threads} Python threads, about "
                f"{_duration(self.seconds)} (--size {smaller} takes about "
                f"{_duration(seconds(self.rung, smaller ** 3))})")


def seconds(rung: int, fmas: int) -> float:
    return fmas * US_PER_FMA[rung] * 1e-6


def estimate(rung: int, twin, cfg: dict, shape: tuple[int, int, int]) -> Estimate:
    """How long Python rung `rung` (its CUDA twin's registry entry `twin` gives the launch
    geometry) takes in the simulator at `cfg` and `shape`."""
    M, N, K = shape
    return Estimate(rung, (M, N, K), math.prod(twin.grid(cfg, M, N)), twin.threads(cfg),
                    seconds(rung, M * N * K))


def quick_size(rung: int) -> int:
    """The largest square size, a multiple of 8, that the simulator runs within WARN_S."""
    side = int((WARN_S / (US_PER_FMA[rung] * 1e-6)) ** (1 / 3))
    return max(8, side // 8 * 8)


@contextlib.contextmanager
def progress(total_blocks: int, say: Callable[[str], None]):
    """Within the block: a line through `say` every EVERY_S seconds, the blocks the
    simulator has finished and the time left at the rate so far. It counts the blocks as
    Numba's simulator runs them (numba.cuda.simulator.kernel.BlockManager); where a Numba
    without that class runs, it says so once and the launch goes on without a count."""
    try:
        from numba.cuda.simulator import kernel as sim
        manager = sim.BlockManager
    except (ImportError, AttributeError):
        say("(this Numba's simulator cannot be watched: no progress until it finishes)")
        yield
        return
    start = last = time.monotonic()
    done = 0

    class Counted(manager):
        def run(self, *args, **kwargs):
            nonlocal done, last
            out = super().run(*args, **kwargs)
            done += 1
            now = time.monotonic()
            if now - last >= EVERY_S and done < total_blocks:
                last = now
                left = (now - start) / done * (total_blocks - done)
                say(f"  {done} of {total_blocks} blocks ({100 * done // total_blocks} %) in "
                    f"{_duration(now - start)}; about {_duration(left)} left")
            return out

    sim.BlockManager = Counted
    try:
        yield
    finally:
        sim.BlockManager = manager


def _count(n: int) -> str:
    for size, unit in ((1e9, "billion"), (1e6, "million")):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:,}"


def _duration(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    if s < 48 * 3600:
        return f"{s / 3600:.0f} h"
    return f"{s / 86400:.0f} days"
