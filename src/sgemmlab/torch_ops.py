"""torch.ops.sgemmlab.matmul: sgemmlab's product as a PyTorch operator.

    import torch, sgemmlab.torch_ops
    c = torch.ops.sgemmlab.matmul(a, b)          # or sgemmlab.matmul(a, b)

Registered with torch.library.custom_op, so it works
- in autograd: grad_a = g @ b^T and grad_b = a^T @ g, computed by this same op on transposed
  views (which the kernels read as they lie: no copies); the gradient of an operand that was
  broadcast over a batch is summed over it;
- under torch.compile(fullgraph=True): the fake implementation gives the result's shape,
  dtype and (contiguous) strides without running anything, and raises the same errors;
- in CUDA graphs: a call allocates only through torch's allocator and launches on torch's
  current stream. Make one call of each shape before capturing (every stream the capture
  uses included, for products dispatch sends to Stream-K): the first call of a shape plans
  it, and may compile a kernel or allocate the Stream-K workspace, neither of which a
  capture allows.

`deterministic=True`, or torch.use_deterministic_algorithms(True), asks dispatch for a
bit-reproducible configuration (no atomic fix-up of split tiles). `precision` ("ieee",
"fp32_emulated", "tf32x3", "tf32": sgemmlab.matmul's) is carried into the backward products too.

CPU tensors are computed by torch.matmul (FP32 on the CPU is plain FP32 too), so a model
with this op still runs, traces and checks (torch.library.opcheck) on the CPU; sgemmlab's own
kernels run on CUDA tensors only. (`sgemmlab.matmul` called directly refuses CPU tensors.)

Importing `sgemmlab` registers the op when torch is already imported, and so does the first
call of `sgemmlab.matmul` with a torch tensor; `import sgemmlab.torch_ops` registers it
explicitly.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .dispatch import check_precision
from .errors import LayoutError, OperandError
from .plan import product_shape
from .product import torch_product
from .runtime.arrays import Operand, matrix_layout


def _check(a: Tensor, b: Tensor) -> tuple:
    """The product's shape, after the checks sgemmlab.matmul makes (dtype, device, shapes)."""
    for name, t in (("a", a), ("b", b)):
        if t.dtype != torch.float32:
            raise OperandError(f"{name}: dtype is {t.dtype}, sgemmlab computes float32 only")
    if a.device != b.device:
        raise ValueError(f"a is on {a.device} and b on {b.device}")
    return tuple(product_shape(tuple(a.shape), tuple(b.shape)))


def _readable(t: Tensor) -> Tensor:
    """t itself when the kernels can read it (row- or column-major matrices), else a
    contiguous copy: unlike sgemmlab.matmul, an operator takes any strides torch makes (a
    gradient of a sum is an expanded tensor with stride 0, for one)."""
    try:
        matrix_layout(Operand(None, 0, tuple(t.shape), tuple(t.stride()), 0, "other"), "x")
        return t
    except LayoutError:
        return t.contiguous()


@torch.library.custom_op("sgemmlab::matmul", mutates_args=(), device_types="cuda")
def matmul(a: Tensor, b: Tensor, deterministic: bool = False,
           precision: str = "ieee") -> Tensor:
    """a @ b on the GPU, on torch's current stream: exact FP32 unless `precision` says."""
    det = deterministic or torch.are_deterministic_algorithms_enabled()
    check_precision(precision)
    try:
        return torch_product(a, b, det, None, precision)
    except LayoutError:
        return torch_product(_readable(a), _readable(b), det, None, precision)


@matmul.register_kernel("cpu")
def _matmul_cpu(a: Tensor, b: Tensor, deterministic: bool = False,
                precision: str = "ieee") -> Tensor:
    _check(a, b)
    check_precision(precision)
    return torch.matmul(a, b).contiguous()


@matmul.register_fake
def _matmul_fake(a: Tensor, b: Tensor, deterministic: bool = False,
                 precision: str = "ieee") -> Tensor:
    check_precision(precision)
    return a.new_empty(_check(a, b))


def _setup_context(ctx, inputs, output) -> None:
    a, b, deterministic, precision = inputs
    ctx.save_for_backward(a, b)
    ctx.deterministic = deterministic
    ctx.precision = precision


def _sum_to(x: Tensor, shape) -> Tensor:
    """Sum the gradient of a broadcast operand over the batch it was repeated in."""
    if x.dim() > len(shape):
        return x.sum(0)
    if x.shape[0] != shape[0]:
        return x.sum(0, keepdim=True)
    return x


def _backward(ctx, g: Tensor):
    a, b = ctx.saved_tensors
    det, prec = ctx.deterministic, ctx.precision
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = _sum_to(matmul(g, b.mT, det, prec), a.shape)
    if ctx.needs_input_grad[1]:
        if a.dim() == 3 and b.dim() == 2:
            # sum over the batch of a_i^T g_i is one product: the batch stacked along M
            grad_b = matmul(a.reshape(-1, a.shape[-1]).mT, g.reshape(-1, g.shape[-1]), det,
                            prec)
        else:
            grad_b = _sum_to(matmul(a.mT, g, det, prec), b.shape)
    return grad_a, grad_b, None, None


matmul.register_autograd(_backward, setup_context=_setup_context)
