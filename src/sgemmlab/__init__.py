"""sgemmlab: exact FP32 matrix multiplication (SGEMM) for NVIDIA GPUs, and the optimization
ladder that explains, rung by rung, how such a kernel gets fast.

    import sgemmlab
    c = sgemmlab.matmul(a, b)                      # torch / CuPy / DLPack float32 on a GPU
    c = sgemmlab.sgemm(a, b, c, alpha=2.0, beta=1.0)

docs/api.md is the reference; with torch, torch.ops.sgemmlab.matmul is the same product as
a PyTorch operator (autograd, torch.compile, CUDA graphs), and `with sgemmlab.torch_mode():`
runs a whole model's FP32 products (nn.Linear, @, mm, bmm, addmm, their backward passes) on
sgemmlab's kernels, registered at torch's dispatcher, without changing a line of it.
"""

from .api import find_torch, free_workspaces, matmul, sgemm
from .errors import ConfigError, DispatchError, LayoutError, NoGPUError, OperandError, TableError

__version__ = "0.1.0"
__all__ = ["sgemm", "matmul", "free_workspaces", "torch_mode", "OperandError", "LayoutError",
           "ConfigError", "DispatchError", "TableError", "NoGPUError", "__version__"]


def __getattr__(name: str):
    """`sgemmlab.torch_mode`, the drop-in switch for torch models (dropin/), imported on
    first use: it needs torch, which sgemmlab itself never imports."""
    if name == "torch_mode":
        from .dropin import torch_mode

        return torch_mode
    raise AttributeError(f"module 'sgemmlab' has no attribute {name!r}")


def _register_torch_op() -> None:
    """torch.ops.sgemmlab.matmul exists as soon as both are imported (sgemmlab never
    imports torch itself: the command line and CuPy users do not pay for it)."""
    import sys

    if sys.modules.get("torch") is not None:
        find_torch()


_register_torch_op()

from .dispatch import SHIPPED_GPU as _SHIPPED  # noqa: E402
from .dispatch import prefetch as _prefetch  # noqa: E402

_prefetch.start(_SHIPPED)  # what the first call would wait for, begun now (see there)
