"""The switch's fill kernel (kernels/broadcast.cu): a bias broadcast into a new output before
the product adds into it (addmm's and baddbmm's input where the epilogue cannot read it as a
source), packed once per shape, strides, device and stream and repointed per call."""

from __future__ import annotations

from .. import product


def _broadcast(target, x, shape: tuple, strides: tuple):
    """The fill kernel: target (new, contiguous) = x broadcast, x read with `strides`."""
    dev = target.get_device()
    glue = product.TORCH
    handle = glue.raw_stream(dev)
    key = (shape, strides, dev, handle)
    fill = _FILLS.get(key)
    if fill is None:
        fill = _bind_fill(target.data_ptr(), x.data_ptr(), shape, strides, dev, handle)
        if len(_FILLS) > 1024:
            _FILLS.clear()
        _FILLS[key] = fill
    prev = glue.device_ready(dev)
    fill.launch_at(target.data_ptr(), x.data_ptr())  # the launch, repointed (launch.Packed)
    glue.restore(prev)
    return fill


_FILLS: dict[tuple, object] = {}  # packed fills, by shape, strides, device and stream
_FILL_KERNELS: dict[int, object] = {}


def _bind_fill(pout: int, px: int, shape: tuple, strides: tuple, dev: int, handle: int):
    import numpy as np

    from ..runtime.arrays import stream_for
    from ..runtime.device import gpu_info
    from ..runtime.launch import Packed, load_kernel

    kernel = _FILL_KERNELS.get(dev)
    if kernel is None:
        kernel = _FILL_KERNELS[dev] = load_kernel("broadcast.cu", "broadcast", {}, dev)[0]
    batch = shape[0] if len(shape) == 3 else 1
    rows, cols = shape[-2], shape[-1]
    total = batch * rows * cols
    blocks = max(1, min(-(-total // 256), 8 * gpu_info(dev).sm_count))
    args = (pout, px, np.int64(rows), np.int64(cols), np.int64(total),
            *(np.int64(s) for s in strides))
    return Packed(kernel, stream_for(handle, dev), (blocks, 1, 1), (256, 1, 1), args,
                  pointer_slots=(0, 1))
