"""The drop-in switch: torch's own FP32 products on CUDA run on sgemmlab's kernels.

    import sgemmlab
    with sgemmlab.torch_mode():            # or torch_mode(precision="fp32_emulated")
        loss = model(x).sum()              # nn.Linear, @, torch.mm, bmm, addmm, ...
        loss.backward()                    # the backward's products too

    sgemmlab.torch_mode().enable()         # the same, for the rest of the program
    sgemmlab.torch_mode.disable_all()      # ... until this

How: while a mode is on, sgemmlab's kernels are registered at torch's dispatcher as the
CUDA kernels of the aten products every torch path ends in — `mm`, `addmm`, `bmm`,
`baddbmm` and their `out=` forms (`torch.matmul`, `@`, `F.linear` and `nn.Linear`, their
backward passes through autograd, torch.compile's extern products, and what a CUDA graph
captures all reach one of them). It is the depth torch's own cuBLAS kernels sit at, so
every other op, the autograd graph, autocast and torch.compile's tracing are untouched.

The registered kernels are native (csrc/switch.cpp, built by runtime/native.py): a call
whose signature was served before runs from its recipe in C++ — the output allocated, the
plan's launches repointed at the call's tensors — and asks Python (`_miss`, which runs
`_serve`) only for a new signature. Where the native module cannot be built, the Python
functions at the end of this file are registered instead, through torch.library; they make
the same decisions and launch the same plans, with Python's cost per call.

Each call is served when sgemmlab computes it exactly as torch would: float32 operands on
one GPU, shapes torch accepts, a bias (`addmm`'s input) that broadcasts as torch broadcasts
it, finite α and β, and layouts the kernels read. Everything else — other dtypes (autocast's
half products included), α = 0, out= tensors that torch would resize, operands that
overlap the output, a shape torch refuses (torch raises its own error) — goes to torch's
own kernel unchanged: the switch never changes what a program computes beyond the order
of FP32 additions, and never lowers its precision.

Precision follows torch unless the mode names one: at
`torch.set_float32_matmul_precision("highest")` (torch's default) the products are exact
FP32 on the FMA units ("ieee"); at "high" or "medium" the program has accepted TF32, and
torch's cuBLAS TF32 kernels keep running them (sgemmlab's only faster FP32 path is
"tf32x3", which is more accurate than TF32 and slower than cuBLAS's TF32).
`torch_mode(precision="fp32_emulated")` (Ozaki scheme II on INT8 tensor cores) or
`torch_mode(precision="tf32x3")` runs FP32-accurate tensor-core products whatever torch's
setting, each where dispatch finds it faster than exact FP32. `deterministic=True`, or
torch.use_deterministic_algorithms(True), asks for bit-reproducible configurations.

The registration is process-wide, as torch's own backend flags are: a mode entered in one
thread serves products of every thread until it exits. Modes nest; the innermost one's
options hold. `served` and `passed` count, by aten op, the calls the mode computed and those
it gave to torch (while it was the innermost mode): a quick way to see that the switch took
effect. A CUDA graph capture gets sgemmlab's kernels for products already planned (make one
eager call of each shape first, as torch.compile's "reduce-overhead" warm-up does);
a product first seen during a capture runs torch's kernel.
"""

from __future__ import annotations

import threading
import warnings
from collections import Counter

import torch

from .. import product
from ..dispatch import check_precision
from ..errors import ConfigError, OperandError
from ..plan import PLANS, describe, make_plan, source_key
from ..runtime import driver, native, workspace
from ..runtime.arrays import stream_for
from ..runtime.launch import POINTERS, SOURCE_POINTERS
from .fill import _broadcast  # noqa: F401 (tests patch and call them here)
from .shapes import (  # noqa: F401
    _broadcast_strides,
    _broadcasts,
    _extent,
    _out_shape,
    _overlap,
    _recipe_key,
    _same,
    _scalar,
    _shape_ok,
    _source,
)

#: The aten products the switch serves (name, overload): what torch.library registers.
OPS = ("mm", "mm.out", "addmm", "addmm.out", "bmm", "bmm.out", "baddbmm", "baddbmm.out")

#: What sgemmlab refusing a call looks like (the call then goes to torch's kernel).
_REFUSED = (OperandError, ConfigError, ValueError, OverflowError)

_F32 = torch.float32
_lock = threading.RLock()


class torch_mode:  # noqa: N801  (used like a function: with sgemmlab.torch_mode():)
    """The switch: `with sgemmlab.torch_mode(precision=None, deterministic=False):`, or
    `.enable()` / `.disable()` for a switch that outlives a block.

    precision: None (follow torch.get_float32_matmul_precision(): the module docstring),
    "ieee" (exact FP32 even where torch would allow TF32), "fp32_emulated" or "tf32x3"
    (FP32-accurate tensor-core products: Ozaki scheme II, or three TF32 products). "tf32"
    is refused: it is torch's "high" setting, whose products cuBLAS runs faster."""

    def __init__(self, precision: str | None = None, deterministic: bool = False):
        if precision is not None:
            precision = check_precision(precision)
            if precision == "tf32":
                raise ValueError("precision='tf32' is torch's own TF32 (set "
                                 "torch.set_float32_matmul_precision('high') without the "
                                 "switch); the switch runs 'ieee', 'fp32_emulated' or "
                                 "'tf32x3'")
        if not isinstance(deterministic, bool):
            raise TypeError(f"deterministic must be True or False, got {deterministic!r}")
        self.precision, self.deterministic = precision, deterministic
        self._served: Counter = Counter()
        self._passed: Counter = Counter()

    @property
    def served(self) -> Counter:
        """Calls this mode computed on sgemmlab's kernels, by aten op."""
        _harvest()
        return self._served

    @property
    def passed(self) -> Counter:
        """Calls this mode gave to torch's own kernels, by aten op."""
        _harvest()
        return self._passed

    def enable(self) -> torch_mode:
        """Turn the switch on with this mode's options (innermost until disabled)."""
        with _lock:
            if self in _STACK:
                raise RuntimeError("this torch_mode is already enabled")
            if not _STACK:
                _register()
            _STACK.append(self)
            _activate()
        return self

    def disable(self) -> None:
        """Turn this mode off; the switch stays on while another mode is enabled."""
        with _lock:
            if self not in _STACK:
                raise RuntimeError("this torch_mode is not enabled")
            _STACK.remove(self)
            _activate()
            if not _STACK:
                _unregister()

    @staticmethod
    def disable_all() -> None:
        """Turn every mode off: torch's kernels run every product again."""
        with _lock:
            _STACK.clear()
            _activate()
            _unregister()

    @staticmethod
    def active() -> torch_mode | None:
        """The innermost enabled mode, or None when the switch is off."""
        return _STACK[-1] if _STACK else None

    def __enter__(self) -> torch_mode:
        return self.enable()

    def __exit__(self, *exc) -> None:
        self.disable()

    def __repr__(self) -> str:
        p = self.precision or "follow torch"
        return f"torch_mode(precision={p}, deterministic={self.deterministic})"


# ---------------------------------------------------------------------------------------
# Registration
# ---------------------------------------------------------------------------------------
_STACK: list[torch_mode] = []
_library = None
_ORIGINAL: dict[str, object] = {}  # op -> torch's kernel, called for what sgemmlab passes
#: The dispatch key the kernels are registered for ("CUDA"; the CPU tests use "CPU", with
#: `_product`, `_plan_for`, `_run` and `_fill` replaced by CPU stand-ins: the routing
#: without a GPU).
KEY = "CUDA"
_MODE: torch_mode | None = None  # the innermost mode, read by every call
#: Use the native kernels where they build (runtime/native.py); False: the Python ones
#: (SGEMMLAB_NATIVE=0 says so for a process; the CPU tests of the routing set it).
NATIVE = True
_native = None  # the native module while its kernels are registered
_PRECISION_CODES = {None: -1, "ieee": 0, "tf32x3": 1,  # csrc/switch.cpp's g_precision
                    "fp32_emulated": 2}


def _driver_calls() -> tuple[int, int] | None:
    """The addresses of cuLaunchKernel and cuStreamIsCapturing for the native kernels, or
    None where the driver library is not reachable through ctypes."""
    return driver.addresses()


def _activate() -> None:
    global _MODE
    _harvest()  # what the native kernels counted belongs to the mode that was innermost
    _MODE = _STACK[-1] if _STACK else None
    if _native is not None:
        mode = _MODE
        _native.set_mode(-2 if mode is None else _PRECISION_CODES[mode.precision],
                         bool(mode is not None and mode.deterministic))


def _harvest() -> None:
    """Add the native kernels' counts (csrc/switch.cpp) to the innermost mode's."""
    nat, mode = _native, _MODE
    if nat is None:
        return
    served, passed = nat.take_counts()
    if mode is not None:
        mode._served.update(served)
        mode._passed.update(passed)


def _register() -> None:
    """Register sgemmlab's kernels for KEY as the kernels of OPS, keeping torch's own: the
    native ones (csrc/switch.cpp) where they build, else the Python ones below."""
    global _library, _native
    product.TORCH.find()  # the hot path's view of torch (current stream, device)
    if not all(torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", KEY)
               for op in OPS):
        return  # a torch built without CUDA: it has no such products to replace
    calls = _driver_calls() if NATIVE else None
    nat = native.load() if calls is not None else None
    if nat is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nat.enable(KEY, *calls, _miss, product.make_current, _workspace)
        workspace.on_change(nat.bump)
        _native = nat
        return
    originals = {op: torch.library.get_kernel(f"aten::{op}", KEY) for op in OPS}
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():  # "Overriding a previously registered kernel"
            warnings.simplefilter("ignore")
            for op in OPS:
                lib.impl(op, _IMPLS[op], KEY, with_keyset=True)
    except BaseException:
        lib._destroy()
        raise
    _ORIGINAL.clear()
    _ORIGINAL.update(originals)
    _library = lib


def _unregister() -> None:
    """Give the ops back to torch: destroying the library restores its kernels."""
    global _library, _native
    if _native is not None:
        _native.disable()
        _native = None
    if _library is not None:
        _library._destroy()
        _library = None


# ---------------------------------------------------------------------------------------
# The options of a call
# ---------------------------------------------------------------------------------------
_cublas_tf32 = torch._C._get_cublas_allow_tf32
_torch_deterministic = torch._C._get_deterministic_algorithms


def _options(mode: torch_mode) -> tuple[str, bool] | None:
    """(precision, deterministic) for a call, or None: torch's TF32 runs it."""
    precision = mode.precision
    if precision is None:
        if _cublas_tf32():
            return None
        precision = "ieee"
    return precision, mode.deterministic or _torch_deterministic()


def _passed(name: str, ks, args, kwargs):
    mode = _MODE
    if mode is not None:
        mode._passed[name] += 1
    return _ORIGINAL[name].call_boxed(ks, *args, **kwargs)


# ---------------------------------------------------------------------------------------
# The products: the hot path's caches, and the general path behind them
# ---------------------------------------------------------------------------------------
#: Keys sgemmlab refused once (torch runs them without a try): the hot path's and the
#: plans'. Cleared with the plans (a new dispatch table may serve them).
_REFUSED_KEYS: set = set()
PLANS.follow(_REFUSED_KEYS)


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _product(a, b, precision: str, det: bool):
    """a @ b into a new tensor on sgemmlab's kernels, or None (torch runs it)."""
    r = product.hot(a, b, None, det, precision)
    if r is not None:
        return r
    if a.device != b.device or a.is_neg() or b.is_neg():
        return None
    key = product.fast_key(a, b, det, precision)
    if key in _REFUSED_KEYS or _capturing():
        return None
    try:
        return product.general(a, b, None, 1.0, 0.0, None, None, None, det, fast=True,
                               precision=precision)
    except _REFUSED:
        _refuse(key)
        return None


def _plan_for(a, b, c, opts: tuple[str, bool], fresh: bool = False):
    """The plan of c = alpha a @ b + beta c on sgemmlab's kernels (c updated in place), or
    None where sgemmlab does not serve it (torch then runs the whole call). fresh: c is a
    new tensor (it overlaps nothing). Plans live in the API's cache (plan.PLANS, keyed as
    the general path keys them), refusals in _REFUSED_KEYS."""
    if a.is_neg() or b.is_neg() or c.is_neg():
        return None
    key = _plan_key(a, b, c, opts)
    if key is None:
        return None
    plan = PLANS.general.get(key)
    if plan is None:
        if key in _REFUSED_KEYS or _capturing():
            return None
        dev = key[6]
        try:
            plan = PLANS.get(key, lambda: make_plan(
                describe((tuple(a.shape), a.stride()), (tuple(b.shape), b.stride()),
                         (tuple(c.shape), c.stride()), "out"),
                dev, None, None, key[10], key[7], key[11]))
        except _REFUSED:
            _refuse(key)
            return None
    if not fresh and _overlap(c, a, b):
        return None
    return plan


def _plan_key(a, b, c, opts: tuple[str, bool]) -> tuple | None:
    """The plan cache's key of c = a @ b (the general path's), or None for operands on
    different devices."""
    dev = a.get_device()
    if b.get_device() != dev or c.get_device() != dev:
        return None
    precision, det = opts
    aligned = (a.data_ptr() | b.data_ptr() | c.data_ptr()) & 15 == 0
    return (a.shape, a.stride(), b.shape, b.stride(), c.shape, c.stride(), dev, aligned,
            None, None, det, precision)


def _refuse(key: tuple) -> None:
    if len(_REFUSED_KEYS) > 4096:
        _REFUSED_KEYS.clear()
    _REFUSED_KEYS.add(key)


def _run(plan, a, b, c, alpha: float, beta: float, source=None) -> None:
    """c = alpha a @ b + beta c (beta == 0 never reads c), on torch's current stream; with
    `source` ((pointer, row stride): `_source`), beta's term is read from there instead."""
    if plan.kind == "gemm":
        glue, dev = product.TORCH, plan.device_id
        prev = glue.device_ready(dev)
        extra = {} if source is None else {"source": source}
        plan.launch(a.data_ptr(), b.data_ptr(), c.data_ptr(), glue.raw_stream(dev), alpha,
                    beta, **extra)
        glue.restore(prev)
    elif plan.kind == "scale":  # K == 0: beta c
        if beta == 0:
            c.zero_()
        elif beta != 1:
            c.mul_(beta)


# ---------------------------------------------------------------------------------------
# The aten kernels
# ---------------------------------------------------------------------------------------
def _ours(*tensors) -> bool:
    return all(t.dtype is _F32 for t in tensors)


def _mm(ks, a, b):
    mode = _MODE
    if mode is not None and a.dtype is _F32 and b.dtype is _F32:
        opts = _options(mode)
        if opts is not None and a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0]:
            r = _product(a, b, *opts)
            if r is not None:
                mode._served["mm"] += 1
                return r
    return _passed("mm", ks, (a, b), {})


def _bmm(ks, a, b):
    mode = _MODE
    if mode is not None and _ours(a, b):
        opts = _options(mode)
        if opts is not None and a.dim() == 3 and b.dim() == 3 and a.shape[0] == b.shape[0] \
                and a.shape[2] == b.shape[1]:
            r = _product(a, b, *opts)
            if r is not None:
                mode._served["bmm"] += 1
                return r
    return _passed("bmm", ks, (a, b), {})


def _product_out(name: str, dims: int, ks, a, b, out):
    r = _serve(name, dims, None, a, b, 0, 1, out)
    return r if r is not None else _passed(name, ks, (a, b), {"out": out})


def _mm_out(ks, a, b, *, out):
    return _product_out("mm.out", 2, ks, a, b, out)


def _bmm_out(ks, a, b, *, out):
    return _product_out("bmm.out", 3, ks, a, b, out)


def _add_product(name: str, dims: int, ks, x, a, b, beta, alpha, out=None):
    """addmm / baddbmm (into a new tensor, or `out`): beta x + alpha a @ b."""
    r = _serve(name, dims, x, a, b, beta, alpha, out)
    if r is not None:
        return r
    kwargs = {"beta": beta, "alpha": alpha}
    if out is not None:
        kwargs["out"] = out
    return _passed(name, ks, (x, a, b), kwargs)


def _serve(name: str, dims: int, x, a, b, beta, alpha, out=None, export=None):
    """beta x + alpha a @ b on sgemmlab's kernels (x None: a product alone, beta 0), into a
    new tensor or `out`; or None where torch's kernel is to run the call. `export`, a list
    (the native kernels' miss), receives how the next call of this signature is served
    without Python: a recipe (`_recipe`), or REFUSE where every such call goes to torch."""
    mode = _MODE
    if mode is None:
        return None
    ours = _ours(a, b) and (x is None or _ours(x) and not x.is_neg()) and \
        (out is None or _ours(out))
    opts = _options(mode) if ours else None
    if x is not None and out is None and opts is not None and export is None:
        # a call this switch served before: its recipe
        key = _recipe_key(x, a, b, beta, alpha, opts)
        recipe = _RECIPES.get(key)
        if recipe is not None and not (a.is_neg() or b.is_neg()):
            plan, shape, strides, al, be, ldx = recipe
            target = a.new_empty(shape)
            source = None
            if ldx is not None and x.data_ptr() & 15 == 0:
                source = (x.data_ptr(), ldx)
            elif strides is not None:
                _fill(target, x, shape, strides)
            _run(plan, a, b, target, al, be, source)
            mode._served[name] += 1
            return target
    if opts is None:
        return None
    al, be = _scalar(alpha), _scalar(beta)
    if al is None or be is None or al == 0 or a.dim() != dims or b.dim() != dims or \
            not _shape_ok(a, b, dims):
        return _refused(export)
    shape = _out_shape(a, b, dims)
    if x is not None and (not _broadcasts(x, shape) or x.device != a.device):
        return _refused(export)
    # torch's rule: beta == 0 ignores x (NaN in it included); else x is copied into the
    # output (unless it is the output itself) and the kernel updates it in place
    if out is None:
        target = a.new_empty(shape)
    elif tuple(out.shape) != shape or (x is not None and be != 0 and not _same(out, x)
                                       and _overlap(out, x, x)):
        return None
    else:
        target = out
    plan = _plan_for(a, b, target, opts, fresh=out is None)
    if plan is None:
        key = _plan_key(a, b, target, opts)
        return _refused(export) if key is not None and key in _REFUSED_KEYS else None
    # x other than the output: the kernel's epilogue reads it (a bias row, say) where it
    # can, else it is copied into the output first and the kernel updates that
    fill = source = None
    filled = x is not None and be != 0 and not _same(target, x)
    if filled:
        source = _source(plan, x, shape)
        if source is None:
            fill = _fill(target, x, shape)
    _run(plan, a, b, target, al, be, source)
    if export is not None:
        recipe = _recipe(plan, shape, a.get_device(), al, be,
                         fill if filled and source is None else (), source)
        if recipe is not None:
            export.append(recipe)
    if x is not None and out is None and export is None:
        # the next call of this signature goes straight to the launches
        strides = _broadcast_strides(x, shape) if be != 0 else None
        if len(_RECIPES) > 4096:
            _RECIPES.clear()
        _RECIPES[_recipe_key(x, a, b, beta, alpha, opts)] = (
            plan, shape, strides, al, be, None if source is None else source[1])
    mode._served[name] += 1
    return target


REFUSE = "refuse"
#: What fills an exported launch's pointer slot (csrc/switch.cpp's Operand)
A, B, OUT, X = 0, 1, 2, 3


def _refused(export) -> None:
    """None (torch runs the call), telling the native kernels that every call of this
    signature goes to torch (what decided it is part of their key)."""
    if export is not None:
        export.append(REFUSE)
    return None


def _recipe(plan, shape: tuple, dev: int, alpha: float, beta: float, fill,
            source=None) -> tuple | None:
    """(output shape, launches) as csrc/switch.cpp runs a call of this signature, or None
    where it cannot (the call then asks Python every time): the fill launch (`fill`; ()
    when there is none) then the plan's launch, each as Packed.export gives it, on the
    template the plan launched through (Plan.templates), its A, B and C slots (and X's,
    where the epilogue reads `source`) naming the caller's operands."""
    launches = []
    if fill is None:  # filled by torch's copy (a strided out=)
        return None
    if fill != ():
        launches.append(fill.export({0: OUT, 1: X}))
    if plan.kind == "empty":
        return tuple(shape), launches
    if plan.kind != "gemm" or plan.per_item:
        return None
    template = _template(plan, dev, alpha, beta, source)
    if template is None or not hasattr(template, "export"):
        return None  # a launch that cannot be repointed (the TMA rungs' tensor maps)
    codes = (B, A, OUT) if plan.gemm.swap else (A, B, OUT)
    slots = POINTERS if source is None else SOURCE_POINTERS
    if source is not None:
        codes += (X,)
    try:
        launches.append(template.export(dict(zip(slots, codes))))
    except TypeError:
        return None
    return tuple(shape), launches


def _template(plan, dev: int, alpha: float, beta: float, source=None):
    """The launch the plan ran this call through on torch's current stream (or None);
    `source`: what the epilogue read, if anything (plan.source_key)."""
    return plan.templates.get((product.TORCH.raw_stream(dev), alpha, beta,
                               source_key(source)))


def _workspace(dev: int, handle: int, zeroed: int, scratch: int) -> tuple[int, int]:
    """The native kernels' workspace for a stream: runtime/workspace.py's buffer."""
    return workspace.workspace(dev, stream_for(handle, dev), zeroed, scratch)


def _miss(op: int, x, a, b, out, beta, alpha):
    """The native kernels' question for a call they have no recipe for: (the result, or
    None for torch's kernel; the recipe for the next such call, REFUSE, or None)."""
    name = OPS[op]
    export: list = []
    r = _serve(name, 3 if name.startswith("b") else 2, x, a, b, beta, alpha, out, export)
    return r, export[0] if export else None


#: addmm/baddbmm calls served into a new tensor, by signature: (plan, output shape, the
#: input's broadcast strides or None where beta == 0, alpha, beta as the kernels take them,
#: the input's row stride where the epilogue reads it as its source, else None)
_RECIPES: dict[tuple, tuple] = {}
PLANS.follow(_RECIPES)  # a recipe holds a plan: stale when the plans are


def _fill(target, x, shape: tuple, strides: tuple | None = None):
    """target = x broadcast to `shape` (torch's broadcasting), on torch's current stream:
    kernels/broadcast.cu for a contiguous target (returns its packed launch), torch's copy
    otherwise (returns None). `strides`: x's broadcast strides, where the caller has
    them."""
    if not target.is_contiguous():
        target.copy_(x.expand(shape))
        return None
    if target.numel() == 0:
        return ()
    return _broadcast(target, x, shape, strides or _broadcast_strides(x, shape))


def _addmm(ks, x, a, b, *, beta=1, alpha=1):
    return _add_product("addmm", 2, ks, x, a, b, beta, alpha)


def _addmm_out(ks, x, a, b, *, beta=1, alpha=1, out):
    return _add_product("addmm.out", 2, ks, x, a, b, beta, alpha, out)


def _baddbmm(ks, x, a, b, *, beta=1, alpha=1):
    return _add_product("baddbmm", 3, ks, x, a, b, beta, alpha)


def _baddbmm_out(ks, x, a, b, *, beta=1, alpha=1, out):
    return _add_product("baddbmm.out", 3, ks, x, a, b, beta, alpha, out)


_IMPLS = {"mm": _mm, "mm.out": _mm_out, "addmm": _addmm, "addmm.out": _addmm_out,
          "bmm": _bmm, "bmm.out": _bmm_out, "baddbmm": _baddbmm, "baddbmm.out": _baddbmm_out}
