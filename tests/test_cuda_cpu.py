"""The CPU emulator of the scheme's passes (tests/cuda_cpu.h, tests/cuda_cpu.py) runs what
those kernels use, and refuses what a GPU would hang on or fault on: a test harness that
passed whatever a kernel did would prove nothing."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import cuda_cpu

pytestmark = pytest.mark.skipif(cuda_cpu.compiler() is None, reason="no C++ compiler")

PROBE = cuda_cpu.HERE / "data" / "emu_probe.cu"


def _launch(lib, name, grid, block, *args, seconds=cuda_cpu.SECONDS):
    cells = [a if isinstance(a, ctypes._SimpleCData) else ctypes.c_uint64(a) for a in args]
    params = (ctypes.c_void_p * max(1, len(cells)))(*[ctypes.addressof(c) for c in cells])
    lib.launch(name, grid, block, ctypes.addressof(params), [ctypes.sizeof(c) for c in cells],
               seconds)


def test_shuffles_and_barriers_sum_as_a_gpu_does():
    lib = cuda_cpu.build(PROBE)
    n = 1000
    src, out = lib.alloc(4 * n), lib.alloc(4 * 4, fill=0xFF)
    x = np.random.default_rng(0).integers(-50, 50, n).astype(np.float32)
    src.array(np.float32)[:] = x
    _launch(lib, "sums", (4, 1, 1), (256, 1, 1), src.address, out.address, ctypes.c_int(n))
    want = np.pad(x, (0, 24)).reshape(4, 256).sum(axis=1)
    np.testing.assert_array_equal(out.array(np.float32), want)


def test_a_write_past_a_buffer_fails_the_launch_and_names_the_thread():
    lib = cuda_cpu.build(PROBE)
    out = lib.alloc(4 * 4)  # (the page's end is 16 bytes on: buffers of 16 bytes a row)
    _launch(lib, "past_the_end", (1, 1, 1), (32, 1, 1), out.address, ctypes.c_int(3))
    with pytest.raises(cuda_cpu.LaunchFailed, match=r"fault .*block \(0, 0, 0\), thread "
                                                    r"\(0, 0, 0\)"):
        _launch(lib, "past_the_end", (1, 1, 1), (32, 1, 1), out.address, ctypes.c_int(4))


def test_a_barrier_not_every_thread_reaches_fails_where_a_gpu_is_undefined():
    lib = cuda_cpu.build(PROBE)
    out = lib.alloc(4 * 128)
    with pytest.raises(cuda_cpu.LaunchFailed, match="after 64 of its 128 threads returned"):
        _launch(lib, "barrier_after_return", (1, 1, 1), (128, 1, 1), out.address)
    with pytest.raises(cuda_cpu.LaunchFailed, match="two __syncthreads"):
        _launch(lib, "two_barriers", (1, 1, 1), (128, 1, 1), out.address)


def test_a_shuffle_naming_lanes_that_returned_fails():
    lib = cuda_cpu.build(PROBE)
    out = lib.alloc(4 * 32)
    with pytest.raises(cuda_cpu.LaunchFailed, match="lanes that have returned"):
        _launch(lib, "shuffle_after_return", (1, 1, 1), (32, 1, 1), out.address)


def test_a_launch_that_never_ends_is_stopped():
    lib = cuda_cpu.build(PROBE)
    flag = lib.alloc(4)
    with pytest.raises(cuda_cpu.LaunchFailed, match="time limit"):
        _launch(lib, "forever", (1, 1, 1), (32, 1, 1), flag.address, seconds=1)


def test_arguments_of_the_wrong_width_or_count_are_refused():
    lib = cuda_cpu.build(PROBE)
    out = lib.alloc(4 * 5)
    with pytest.raises(cuda_cpu.LaunchFailed, match="argument 1 has 8 bytes"):
        _launch(lib, "past_the_end", (1, 1, 1), (32, 1, 1), out.address, ctypes.c_int64(0))
    with pytest.raises(cuda_cpu.LaunchFailed, match="1 arguments for 2"):
        _launch(lib, "past_the_end", (1, 1, 1), (32, 1, 1), out.address)


def test_a_missing_barrier_shows_because_the_threads_take_turns_both_ways():
    """After the barrier the threads run last to first: thread i reads thread i + 1's slot
    after i + 1 rewrote it, where a first-to-last order would read the old value. A GPU
    gives either; the emulator's alternation makes such a race visible to a test."""
    lib = cuda_cpu.build(PROBE)
    out = lib.alloc(4 * 64)
    _launch(lib, "missing_barrier", (1, 1, 1), (64, 1, 1), out.address)
    got = out.array(np.float32)
    assert got[0] == 101.0 and got[62] == 163.0  # the neighbours' new values
    assert got[63] == 0.0  # thread 0 ran after 63 read its old slot
