"""sgemmlab: exact FP32 matrix multiplication (SGEMM) for NVIDIA GPUs, and the optimization
ladder that explains, rung by rung, how such a kernel gets fast.

    import sgemmlab
    c = sgemmlab.matmul(a, b)                      # torch / CuPy / DLPack float32 on a GPU
    c = sgemmlab.sgemm(a, b, c, alpha=2.0, beta=1.0)
"""

from .api import matmul, sgemm
from .runtime.arrays import OperandError
from .runtime.device import NoGPUError

__version__ = "0.1.0"
__all__ = ["sgemm", "matmul", "OperandError", "NoGPUError", "__version__"]
