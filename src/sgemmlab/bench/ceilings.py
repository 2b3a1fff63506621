"""`sgemmlab ceilings`: the two roofs of the roofline, measured on the GPU at hand.

    FFMA peak        kernels/micro/ceiling_ffma.cu: independent FMA chains on every lane of every
                     SM; FLOPs / median time. The datasheet figure assumes the boost clock
                     held under full load; this is what the chip actually sustains.
    copy bandwidth   torch's device-to-device copy_ of a 1 GiB buffer; bytes read + written
                     / median time. What DRAM delivers to a kernel that streams.

Both are timed in measure.py's throughput mode (`launches` calls back to back between one
pair of events, the time per call; the median of ROUNDS such rounds): a ceiling is what the
chip sustains, so the host work of a launch, hidden behind the kernel before it, stays out.
Neither flushes the L2: the FFMA kernel reads no memory, and the copy's buffers are far
larger than the L2. Results go to results/<gpu>/ceilings/<time>.json; bench, ladder and
report use the newest one for the GPU (results.ceilings_for).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import results
from .measure import Method, median, time_launches

SOURCE, ENTRY = "micro/ceiling_ffma.cu", "ffma_peak"
FFMA = {"CHAINS": 16, "UNROLL": 32}  # FFMA instructions per loop trip: CHAINS x UNROLL
THREADS = 256
BLOCKS_PER_SM = 8  # 8 x 256 = 2048 threads, a full Hopper SM: every scheduler has warps
ITERS = 2048  # ~9 ms a launch on an H200: launch gaps vanish against it
COPY_BYTES = 1 << 30
WARMUP = 3  # untimed launches first: clocks ramp up, modules load
ROUNDS = 3  # throughput samples of `launches` calls each


def method(launches: int) -> Method:
    return Method(launches=launches, rounds=ROUNDS, warmup=WARMUP, mode="throughput")


def _time(fn, launches: int) -> list[float]:
    """ROUNDS samples, each the time per call of `launches` calls back to back."""
    for _ in range(WARMUP):
        fn()
    return [t for _ in range(ROUNDS) for t in time_launches(fn, launches, None, "throughput")]


class CeilingError(RuntimeError):
    """The measurement would be wrong (the compiler removed the work it times)."""


def cuda_tool(name: str) -> str | None:
    """A CUDA binary utility (nvdisasm, cuobjdump, compute-sanitizer, ...): from the pip
    wheels (cuda-pathfinder), the PATH, or a toolkit at $CUDA_HOME, $CUDA_PATH or
    /usr/local/cuda."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        if found := find_nvidia_binary_utility(name):
            return found
    except ImportError:  # older cuda-pathfinder has no such function
        pass
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    path = os.pathsep.join(str(Path(h) / "bin") for h in homes if h)
    return shutil.which(name) or shutil.which(name, path=path)


def sass_count(cubin: bytes, opcode: str) -> int | None:
    """How many `opcode` instructions the cubin's SASS holds; None if no disassembler."""
    for name, flags in (("nvdisasm", []), ("cuobjdump", ["-sass"])):
        if (tool := cuda_tool(name)) is None:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "kernel.cubin"
            path.write_bytes(cubin)
            out = subprocess.run([tool, *flags, str(path)], capture_output=True, text=True,
                                 check=False)
        if out.returncode == 0:
            return len(re.findall(rf"\b{opcode}\b", out.stdout))
    return None


def ffma_kernel():
    """(driver.Function, Compiled, FFMA count in its SASS or None), after checking that
    the compiler kept every FMA of the loop body."""
    from ..runtime.launch import load_kernel

    kernel, compiled = load_kernel(SOURCE, ENTRY, FFMA)
    count = sass_count(compiled.cubin, "FFMA")
    want = FFMA["CHAINS"] * FFMA["UNROLL"]
    if count is not None and count < want:
        raise CeilingError(f"{SOURCE}: the SASS holds {count} FFMA, the loop body alone "
                           f"needs {want}: the compiler removed work, the peak would lie")
    return kernel, compiled, count


def measure_ffma(gpu, launches: int) -> dict:
    import numpy as np
    import torch

    from ..runtime.arrays import stream_for
    from ..runtime.packed import Packed

    kernel, compiled, count = ffma_kernel()
    blocks = gpu.sm_count * BLOCKS_PER_SM
    out = torch.empty(blocks * THREADS, device="cuda")
    stream = stream_for(int(torch.cuda.current_stream().cuda_stream), gpu.index)
    # x -> 0.999 x + 0.001 settles at 1.0: no overflow, no denormals to slow anything down
    args = (out.data_ptr(), np.float32(0.999), np.float32(1e-3), np.int32(ITERS))
    fn = Packed(kernel, stream, (blocks, 1, 1), (THREADS, 1, 1), args)

    times = _time(fn, launches)
    us = median(times)
    flops = 2 * FFMA["CHAINS"] * FFMA["UNROLL"] * ITERS * blocks * THREADS
    return {"kernel": "ffma_peak", "status": "ok",
            "config": {**FFMA, "THREADS": THREADS, "BLOCKS": blocks, "ITERS": ITERS},
            "median_us": us, "tflops": flops / (us * 1e-6) / 1e12, "times_us": [times],
            "registers": compiled.resources.registers, "sass_ffma": count,
            "sass_ffma_loop_body": FFMA["CHAINS"] * FFMA["UNROLL"]}


def measure_copy(launches: int, nbytes: int = COPY_BYTES) -> dict:
    import torch

    src = torch.ones(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)

    def fn() -> None:
        dst.copy_(src)

    times = _time(fn, launches)
    us = median(times)
    moved = 2 * nbytes  # every byte is read once and written once
    return {"kernel": "d2d_copy", "status": "ok", "config": {"BYTES": nbytes},
            "median_us": us, "bytes_moved": moved, "tbps": moved / (us * 1e-6) / 1e12,
            "times_us": [times]}


def run(launches: int = 20) -> tuple[dict, Path]:
    """Measure both ceilings, write results/<gpu>/ceilings/<time>.json, return both."""
    from ..runtime.device import gpu_info

    gpu = gpu_info()
    ffma, copy = measure_ffma(gpu, launches), measure_copy(launches)
    name = f"ceilings-{results.stamp()}"
    ceilings = {"ffma_tflops": ffma["tflops"], "copy_tbps": copy["tbps"],
                "source": f"{name}.json"}
    out = results.new_run("ceilings", gpu, {**method(launches).as_dict(), "l2_flush_bytes": 0},
                          ceilings)
    out["records"] = [ffma, copy]
    if ffma["sass_ffma"] is None:
        out["notes"].append("FFMA count not checked in SASS: neither nvdisasm nor "
                            "cuobjdump was found")
    return out, results.write(out, gpu.slug, name)
