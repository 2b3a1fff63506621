"""sgemmlab: exact FP32 matrix multiplication (SGEMM) for NVIDIA GPUs, and the optimization
ladder that explains, rung by rung, how such a kernel gets fast.

    import sgemmlab
    c = sgemmlab.matmul(a, b)                      # torch / CuPy / DLPack float32 on a GPU
    c = sgemmlab.sgemm(a, b, c, alpha=2.0, beta=1.0)

docs/api.md is the reference; with torch, torch.ops.sgemmlab.matmul is the same product as
a PyTorch operator (autograd, torch.compile, CUDA graphs), and `with sgemmlab.torch_mode():`
runs a whole model's FP32 products (nn.Linear, @, mm, bmm, addmm, their backward passes) on
sgemmlab's kernels, registered at torch's dispatcher, without changing a line of it.

Importing sgemmlab loads only this file and the error types: the library (api, dispatch,
the runtime, cuda.core, NumPy) is imported by the first use of a name that needs it, and
the dispatch table is read by the first product that needs it (dispatch/table.py).
"""

from .errors import ConfigError, DispatchError, LayoutError, NoGPUError, OperandError, TableError

__version__ = "0.1.0"
__all__ = ["sgemm", "matmul", "free_workspaces", "torch_mode", "OperandError", "LayoutError",
           "ConfigError", "DispatchError", "TableError", "NoGPUError", "__version__"]

#: The names imported on first use, and the module each comes from (torch_mode: the drop-in
#: switch for torch models, dropin/, which needs torch, which sgemmlab never imports first).
_LAZY = {"matmul": "api", "sgemm": "api", "free_workspaces": "api", "find_torch": "api",
         "torch_mode": "dropin"}


def __getattr__(name: str):
    """A name of _LAZY, or a subpackage not imported yet (`sgemmlab.api`, as before the
    import was made lazy), imported now."""
    from importlib import import_module

    where = _LAZY.get(name)
    if where is not None:
        value = getattr(import_module(f".{where}", __name__), name)
        globals()[name] = value  # the next lookup is an attribute like any other
        return value
    if not name.startswith("_"):
        try:
            return import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module 'sgemmlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _register_torch_op() -> None:
    """When the caller has imported torch already, torch.ops.sgemmlab.matmul registers now;
    otherwise at the first call that needs the operator (autograd, torch.compile, a tensor
    subclass: api._via_op), or at `import sgemmlab.torch_ops`."""
    import sys

    if sys.modules.get("torch") is not None:
        from . import torch_ops  # noqa: F401  (registers the op)


_register_torch_op()
