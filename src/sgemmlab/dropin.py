"""A drop-in switch for torch models: FP32 products on CUDA go through sgemmlab.

    import sgemmlab
    with sgemmlab.torch_mode():            # or torch_mode(precision="tf32x3")
        loss = model(x).sum()              # nn.Linear, @, torch.mm, bmm, addmm ...
        loss.backward()

While the mode is on, these torch calls run on sgemmlab's kernels when their operands are
float32 tensors on a CUDA device: `torch.matmul`, `Tensor.__matmul__` (`@`, and `@=`'s
product), `Tensor.matmul`, `torch.mm`, `torch.bmm` (and their Tensor methods),
`torch.addmm` and `torch.nn.functional.linear` (so `nn.Linear`). Everything else —
another dtype or device, a 1-D or 4-D operand, an `out=` argument, a shape sgemmlab refuses —
goes to torch unchanged: the mode never changes what a program computes, only which kernels
compute its FP32 products, and never switches precision (exact FP32 unless `precision`
says otherwise, as sgemmlab.matmul).

How: a torch.overrides.TorchFunctionMode, whose handler calls torch.ops.sgemmlab.matmul
(torch_ops.py). That operator carries autograd (the backward's products are sgemmlab's too)
and torch.compile (Dynamo traces the mode and sees the operator as one opaque node), so
training and compiled models keep working. `served` counts the eager calls it took, by
function, and `passed` those it gave back to torch: a quick way to see the switch took
effect (inside a compiled region nothing is counted: Dynamo cannot trace the counter).
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

from .torch_ops import matmul as _op

_F = torch.nn.functional


class torch_mode(TorchFunctionMode):  # noqa: N801  (used like a function: with torch_mode():)
    """The switch: `with sgemmlab.torch_mode(precision="ieee", deterministic=False):`.

    `devices` are the device types whose tensors go through sgemmlab ("cuda"; the tests add
    "cpu", where the operator's CPU kernel is torch.matmul, to check the routing without a
    GPU)."""

    def __init__(self, precision: str = "ieee", deterministic: bool = False,
                 devices: tuple[str, ...] = ("cuda",)):
        super().__init__()
        from .dispatch import check_precision

        check_precision(precision)
        self.precision, self.deterministic, self.devices = precision, deterministic, devices
        self.served: Counter = Counter()
        self.passed = 0

    # -- what is ours -------------------------------------------------------------------
    def _ours(self, *tensors) -> bool:
        return all(isinstance(t, torch.Tensor) and t.dtype == torch.float32
                   and t.device.type in self.devices for t in tensors) and \
            len({t.device for t in tensors}) == 1

    def _product(self, a, b):
        return _op(a, b, self.deterministic, self.precision)

    def _matmul(self, a, b, dims=(2, 3)):
        if not self._ours(a, b) or a.dim() not in dims or b.dim() not in dims:
            return NotImplemented
        if a.shape[-1] != b.shape[-2]:
            return NotImplemented  # torch raises its own error for it
        if a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0] and \
                1 not in (a.shape[0], b.shape[0]):
            return NotImplemented
        return self._product(a, b)

    def _mm(self, a, b):
        return self._matmul(a, b, dims=(2,))

    def _bmm(self, a, b):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or \
                a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
            return NotImplemented  # bmm does not broadcast its batch
        return self._matmul(a, b, dims=(3,))

    def _addmm(self, input, mat1, mat2, *, beta=1, alpha=1):
        if not self._ours(input, mat1, mat2) or mat1.dim() != 2 or mat2.dim() != 2:
            return NotImplemented
        out = self._matmul(mat1, mat2)
        if out is NotImplemented:
            return out
        if alpha != 1:
            out = out * alpha
        if beta != 0:  # torch's rule: beta == 0 ignores input (NaN in it included)
            out = out + (input if beta == 1 else input * beta)
        return out

    def _linear(self, input, weight, bias=None):
        if not self._ours(input, weight) or input.dim() < 2 or weight.dim() != 2 or \
                (bias is not None and not self._ours(bias)):
            return NotImplemented
        if input.shape[-1] != weight.shape[1]:
            return NotImplemented
        flat = input.reshape(-1, input.shape[-1])
        out = self._product(flat, weight.t()).reshape(*input.shape[:-1], weight.shape[0])
        return out if bias is None else out + bias

    # -- the mode -------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = _HANDLERS.get(func)
        if handler is not None and not (set(kwargs) - _KWARGS[handler]):
            out = getattr(self, handler)(*args, **kwargs)
            if out is not NotImplemented:
                if not torch.compiler.is_compiling():  # (counted in eager calls only)
                    self.served[getattr(func, "__name__", str(func))] += 1
                return out
        if handler is not None and not torch.compiler.is_compiling():
            self.passed += 1
        return func(*args, **kwargs)


def _functions():
    mm = [torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__]
    two = [torch.mm, torch.Tensor.mm]
    three = [torch.bmm, torch.Tensor.bmm]
    out = {f: "_matmul" for f in mm}
    out |= {f: "_mm" for f in two} | {f: "_bmm" for f in three}
    out |= {torch.addmm: "_addmm", torch.Tensor.addmm: "_addmm"}
    out |= {_F.linear: "_linear", torch._C._nn.linear: "_linear"}
    return out


_HANDLERS = _functions()
#: The keyword arguments each handler takes (anything else, `out=` for one, goes to torch).
_KWARGS = {"_matmul": frozenset(), "_mm": frozenset(), "_bmm": frozenset(),
           "_addmm": frozenset({"beta", "alpha"}), "_linear": frozenset({"bias"})}
