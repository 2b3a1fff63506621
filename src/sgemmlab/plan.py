"""From the caller's arrays to the kernels' terms, and the plan of a call, made once.

The kernels compute a row-major C = alpha A B + beta C, with A and B each row- or
column-major, over a batch of strided products (`Launcher.bind`). `describe` maps the
caller's operands onto that: a column-major C is computed as C^T = B^T A^T (the operands
swap and their layouts flip), and a batch whose B is broadcast and whose A and C rows follow
each other in memory is folded into one taller product.

Everything about a call except its pointers — the checks, that mapping, the dispatcher's
choice of rung and configuration, the launcher — is a `Plan`, made once per (shapes,
strides, devices, alignment, options) and kept in one `PlanCache`; a plan caches the bound
launch per (pointers, stream, alpha, beta), so a call that repeats one (a training step, the
caching allocator handing back the same blocks) costs a few dict lookups and the launch.
"""

from __future__ import annotations

import dataclasses
import numbers
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import dispatch, registry
from .errors import ConfigError, OperandError
from .registry import config_key
from .runtime import limits
from .runtime.arrays import Operand, batch_stride, matrix_layout, self_overlapping, stream_for
from .runtime.device import gpu_info
from .runtime.launch import POINTERS, SOURCE_POINTERS, Copy, Launcher, PackFirst

PLAN_LIMIT = 4096  # plans kept (a cache, cleared when full)
BOUND_LIMIT = 256  # bound launches kept per plan
#: x @ W^T (A row-major, B column-major: both run along K) at PACK_MIN_M rows or more and
#: PACK_MIN_OUTPUTS outputs or more is computed as A @ (a row-major copy of B): the kernels
#: read a row-major B faster (both k-major operands must be transposed on their way into
#: shared memory), and the copy costs one pass over the weight. Measured at ten layer
#: weights (results/nvidia-h200/pairs/pack-20261203T084116Z.json, paired against torch):
#: at 8192 rows the copy took every product from 0.95-0.98 of cuBLAS to 0.98-1.02, at 4096
#: rows it won 9 of 10, at 2048 it won 7 (by 0.7-3.6 %) and lost 2-5 % at the three weights
#: with K = 1024, and at 512 and 1024 rows it lost all ten. PACK_B = False turns it off.
#: Below PACK_MIN_K the product is bound by C's bytes, not by its FFMAs, and the copy only
#: adds a launch (a mixed random set ran 14846x276x4 NT at 0.52-0.60 of cuBLAS on a copied
#: B: bench/random-mix-300-s3403-20261203T140202Z).
PACK_B = True
PACK_MIN_M = 4096
PACK_MIN_OUTPUTS = 2**21
PACK_MIN_K = 256
#: Misaligned operands (a row length or leading dimension not a multiple of 4 floats, or a
#: base off 16 bytes) close the float4 paths. A product that pays for it instead copies each
#: such A or B into the workspace, its rows (or columns) padded with zeros to whole chunks
#: (one pass over the operand), and reads the copies by float4; a C that is not aligned is
#: written element by element by a rung with the "store4" feature. It pays where the copies'
#: predicted time is at most STAGE_SHARE of the product's: each copy STAGE_COPY_US plus
#: STAGE_COPY_US_PER_MB per MB written, the product 2MNK at STAGE_RATE FLOP/µs. Measured at
#: the 51 misaligned products of three mixed random sets, every one packed and read in place
#: (tools/stage_pair.py, results/nvidia-h200/pairs/stage-20261203T162925Z.json, back to back):
#: the copies cost 12.5 µs each plus 1 µs per MB (a fit of packed minus the same product on
#: aligned storage); packed by this rule the set's geometric mean is 0.907 of cuBLAS with 29
#: below 0.9 (in place 0.862 and 34; the former gate of sides and K >= 1024, 0.883 and 31;
#: the best of the two at every problem 0.936 and 27). cuBLAS itself does not slow down on
#: misaligned operands there (1.00 of its time on aligned storage), and sgemmlab on aligned
#: storage would be 1.06. Below STAGE_MIN_K the product is bound by C's bytes, which the FLOP
#: rate does not see (50x14704x32 TT: 2.34 of cuBLAS in place, 0.92 packed). STAGE = False
#: turns it off.
STAGE = True
STAGE_MIN_K = 64
STAGE_COPY_US = 12.5
STAGE_COPY_US_PER_MB = 1.0
STAGE_RATE = 20e6
STAGE_SHARE = 0.3
#: A REG_TRANSPOSE for packed plans that write C element by element, in place of the
#: table's (None: the table's). ptxas schedules the element-wise variant's k-loop worse at
#: REG_TRANSPOSE=1 (rung 25 at 128x256 tiles: 1232 stall cycles against 1146 at 0, by
#: anatomy/sass.analyse); tools/stage_pair.py measures both before dispatch uses it.
STAGE_REG_TRANSPOSE: int | None = None
#: A column-major A that closes the float4 paths is copied column-major (STAGE_KEEP_A), its
#: columns padded to whole chunks: a straight copy, and the product keeps reading A along M;
#: a column-major B is transposed row-major (STAGE_KEEP_B False): the product then reads both
#: as x @ W^T's packed plan does. In the same run, at the misaligned products: TN kept
#: 143x13260x1528 0.95 of cuBLAS (transposed 0.91), 16221x368x2560 0.82 (0.66),
#: 343x1576x413 0.91 (0.81); NT transposed 9135x2042x2502 1.05 (kept 0.90),
#: 1842x7140x6864 1.20 (1.04); TT even.
STAGE_KEEP_A = True
STAGE_KEEP_B = False


def dims(shape) -> str:
    """'4x3x5': a shape in messages."""
    return "x".join(str(n) for n in shape)


def product_shape(a_shape, b_shape) -> tuple:
    """The shape of a @ b, or ValueError saying why there is none.

    (M, K) @ (K, N) -> (M, N). A 3-D operand is a batch: (batch, M, K) @ (K, N) and
    (M, K) @ (batch, K, N) broadcast the 2-D operand over the batch; two batches must have
    the same size, or one of them size 1 (broadcast). Also used, on symbolic sizes, by the
    torch op's fake implementation."""
    for name, shape in (("a", a_shape), ("b", b_shape)):
        if len(shape) not in (2, 3):
            raise OperandError(f"{name}: expected a 2-D matrix or a 3-D batch of matrices, "
                               f"got shape ({', '.join(map(str, shape))})")
    (M, K), (K2, N) = a_shape[-2:], b_shape[-2:]
    if K != K2:
        raise ValueError(f"inner dimensions differ: a is {dims(a_shape)}, "
                         f"b is {dims(b_shape)}")
    if len(a_shape) == 2 and len(b_shape) == 2:
        return (M, N)
    ba = a_shape[0] if len(a_shape) == 3 else None
    bb = b_shape[0] if len(b_shape) == 3 else None
    if ba is not None and bb is not None and ba != bb and ba != 1 and bb != 1:
        raise ValueError(f"batch sizes differ: a has {ba}, b has {bb} (they must be equal, "
                         "or one of them 1)")
    if ba is None or ba == 1:
        batch = bb if bb is not None else ba
    else:
        batch = ba
    return (batch, M, N)


@dataclass(frozen=True, slots=True)
class Gemm:
    """One call in the kernels' terms: a batch of row-major C = alpha A B + beta C."""

    M: int
    N: int
    K: int
    batch: int
    trans_a: bool  # the kernel's A is column-major
    trans_b: bool
    lda: int
    ldb: int
    ldc: int
    stride_a: int  # elements from one product of the batch to the next; 0 repeats it
    stride_b: int
    stride_c: int
    swap: bool  # C is column-major: computed as C^T = B^T A^T, the caller's b is the A
    out_shape: tuple[int, ...]

    @property
    def empty(self) -> bool:
        return self.M == 0 or self.N == 0 or self.batch == 0


Geometry = tuple  # (shape, strides) of one operand


def describe(a: Geometry, b: Geometry, c: Geometry, c_name: str = "out") -> Gemm:
    """Map operands (shape, strides in elements) onto the kernels, or raise naming what
    cannot be: shapes (ValueError), 32-bit sizes (OverflowError), strides (LayoutError), an
    output whose elements share memory (OperandError)."""
    out_shape = product_shape(a[0], b[0])
    if tuple(c[0]) != tuple(out_shape):
        raise ValueError(f"{c_name} is {dims(c[0])}, the product is {dims(out_shape)}")
    M, K = a[0][-2:]
    N = b[0][-1]
    batch = out_shape[0] if len(out_shape) == 3 else 1
    limits.check_int32(M=M, N=N, K=K, batch=batch)
    limits.check_depth(K)
    ops = [Operand(None, 0, tuple(s), tuple(st), 0, "other") for s, st in (a, b, c)]
    la, lb, lc = (matrix_layout(op, name) for op, name in zip(ops, ("a", "b", c_name)))
    if self_overlapping(*c):
        raise OperandError(f"{c_name}: strides {tuple(c[1])} of shape {dims(c[0])} make "
                           "different elements share memory; the output must not")
    # C: row-major unless only column-major fits it, or both do (a vector) and computing
    # C^T leaves fewer transposed operands for the kernel. A single row (M = 1: x @ W^T,
    # what every linear layer sends at batch 1) stays a row: the skinny-M family reads a
    # column-major B at full speed, and the swapped N = 1 problem was slower at 6 of 9
    # layer shapes on the H200 (in results/nvidia-h200/bench/:
    # 1x2048x2048-NT-1x5632x2048-NT-a05f02-20261202T210055Z.json
    # against 2048x1x2048-5632x1x2048-265cae-20261202T210102Z.json.xz)
    a_opts, b_opts = {t for t, _ in la}, {t for t, _ in lb}
    forced = [next(iter(o)) for o in (a_opts, b_opts) if len(o) == 1]
    c_opts = {t for t, _ in lc}
    swap = c_opts == {True} or (len(c_opts) == 2 and M > 1
                                and sum(not t for t in forced) < sum(forced))
    ta, lda = next((t, ld) for t, ld in sorted(la, key=lambda x: x[0] != swap))
    tb, ldb = next((t, ld) for t, ld in sorted(lb, key=lambda x: x[0] != swap))
    ldc = next(ld for t, ld in lc if t == swap)
    limits.check_int32(**{f"{name}: leading dimension": ld
                          for name, ld in (("a", lda), ("b", ldb), (c_name, ldc))})
    sa, sb, sc = (batch_stride(op) for op in ops)
    if swap:  # C^T = B^T A^T: B^T is the kernel's A (its layout flips), A^T its B
        M, N = N, M
        (ta, lda, sa), (tb, ldb, sb) = (not tb, ldb, sb), (not ta, lda, sa)
    if batch <= 1:
        sa = sb = sc = 0
    elif sb == 0 and not ta and sa == M * lda and sc == M * ldc and batch * M <= limits.INT32_MAX:
        # B shared by the batch, A's and C's rows one after another: one taller product
        M, batch, sa, sc = batch * M, 1, 0, 0
    return Gemm(M, N, K, batch, ta, tb, lda, ldb, ldc, sa, sb, sc, swap, tuple(out_shape))




def choose_rung(g: Gemm, device_id: int, deterministic: bool, aligned: bool,
                precision: str = "ieee"):
    """(Rung, configuration) the dispatcher picks for this product on this GPU."""
    info = gpu_info(device_id)
    c = dispatch.choose(g.M, g.N, g.K, gpu_name=info.name, sm_count=info.sm_count,
                        trans_a=g.trans_a, trans_b=g.trans_b, batch=g.batch,
                        deterministic=deterministic, aligned=aligned, precision=precision,
                        arch=info.arch)
    return registry.rung(c.rung), dict(c.config)


def named_rung(g: Gemm, device_id: int, kernel, config, deterministic: bool,
               precision: str = "ieee"):
    """(Rung, configuration) the caller named; refused early when it cannot serve."""
    if kernel is None and precision != "ieee":
        rung = dispatch.tensor_rung(precision)  # config= alone: the precision's rung
    else:
        rung = (registry.rung(kernel) if kernel is not None
                else registry.best(gpu_info(device_id).arch))
    if rung.precision != precision:
        raise ConfigError(f"rung {rung.label} computes in {rung.precision!r} precision and "
                          f"this call asks for {precision!r}: pass precision="
                          f"{rung.precision!r} to run it (precision is never switched "
                          "silently)")
    cfg = checked_config(rung, config) if config is not None else rung.default(
        gpu_info(device_id).name)
    if deterministic and config is None and not rung.deterministic(cfg):
        # the rung's own default splits tiles by atomics: its fixed-order fix-up instead
        fixed = cfg | {"FIXUP": 0}
        if rung.is_legal(fixed):
            cfg = fixed
    if (g.trans_a or g.trans_b) and not rung.supports("layouts"):
        which = " and ".join(n for n, t in (("A", g.trans_a), ("B", g.trans_b)) if t)
        raise ConfigError(f"rung {rung.label} reads row-major operands only, and the "
                          f"kernel's {which} is column-major here (a transposed view, or a "
                          "column-major out): name a rung with layouts, or let dispatch "
                          "choose (kernel=None)")
    if not rung.serves(g.M, g.N, g.K):
        raise ConfigError(f"rung {rung.label} computes {rung.domain}, and this product is "
                          f"{g.M}x{g.N}x{g.K} in the kernels' terms: name another rung, or "
                          "let dispatch choose (kernel=None)")
    if deterministic and not rung.deterministic(cfg):
        raise ConfigError(f"rung {rung.label} at {config_key(cfg)} is not bit-reproducible "
                          "(atomic fix-up of split tiles); deterministic=True refuses it: "
                          "name FIXUP=0 (the fixed-order fix-up), or leave config out")
    return rung, cfg


def checked_config(rung, config) -> dict[str, int]:
    """`config` (a mapping: the general path checked) as the rung's dict of integers, or a
    ConfigError naming what is wrong: names that are not strings, values that are not
    integers, and the rules broken (`Rung.violations`: the missing and unknown constants
    first). The rules are checked before anything reads a constant."""
    wrong = [f"{k!r}={v!r}" for k, v in config.items() if not isinstance(k, str)
             or isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral)]
    if wrong:
        raise ConfigError(f"config for rung {rung.label}: constants are named by strings and "
                          f"set to integers, got {', '.join(wrong)}")
    cfg = {k: int(v) for k, v in config.items()}
    if problems := rung.violations(cfg):
        raise ConfigError(f"illegal configuration {config_key(cfg)} for rung {rung.label}: "
                          + "; ".join(problems))
    return cfg


def source_key(source: tuple[int, int] | None) -> tuple[int, bool] | None:
    """What a launch bound for `source` fixes of it: the row stride, and whether X allows the
    float4 epilogue (16-byte aligned), so that a launch is only repointed at a source of the
    same kind (Plan.templates)."""
    return None if source is None else (source[1], source[0] & 15 == 0)


class Plan:
    """One cached call shape. `launch(pa, pb, pc, stream, alpha, beta)` runs it on the
    caller's pointers (in the caller's order: the plan swaps them when it computes C^T).
    Where `takes_source`, `launch(..., source=(px, ldx))` reads beta's term from X (X(r, c)
    at px + 4 (r ldx + c) bytes; ldx 0 repeats one row: a bias) instead of C, in the same
    launch (kernels/epilogue.cuh's Source)."""

    __slots__ = ("gemm", "out_shape", "kind", "device_id", "rung", "config", "launcher",
                 "per_item", "reuse", "bound", "lock", "templates", "staging")

    def __init__(self, gemm: Gemm, device_id: int, rung=None, config=None,
                 staging: Staging | None = None):
        self.gemm = gemm
        # the operands each launch first copies into the workspace (`staging`; gemm is then
        # the product on the copies), or None
        self.staging = staging
        self.out_shape = gemm.out_shape
        self.device_id = device_id
        self.kind = "empty" if gemm.empty else "scale" if gemm.K == 0 else "gemm"
        self.rung, self.config = rung, config
        self.launcher = Launcher(rung, config, device_id) if rung is not None else None
        # a rung without batches computes a batch one product per launch
        self.per_item = rung is not None and gemm.batch > 1 and not rung.supports("batched")
        # a bound launch can be reused for the same pointers (a Stream-K launch re-reads
        # its stream's workspace when a bigger call has replaced it)
        self.reuse = rung is not None
        self.bound: dict[tuple, Callable[[], None]] = {}
        # per (stream, alpha, beta): a launch that new pointers repoint (`_bind`)
        self.templates: dict[tuple, Callable[[], None]] = {}
        self.lock = threading.Lock()

    @property
    def takes_source(self) -> bool:
        """beta's term can come from a matrix of its own: one launch for the whole batch of
        a rung with the epilogue's source, C not swapped (a row of X is a row of C)."""
        return self.kind == "gemm" and not self.per_item and not self.gemm.swap and \
            self.rung.supports("source")

    def launch(self, pa: int, pb: int, pc: int, handle: int, alpha: float,
               beta: float, source: tuple[int, int] | None = None) -> Callable[[], None]:
        """Launch on these pointers; returns the bound launch (the hot path keeps it)."""
        key = (pa, pb, pc, handle, alpha, beta, source)
        fn = self.bound.get(key)
        if fn is None:
            if source is not None and not self.takes_source:
                raise ConfigError(f"this plan ({self.rung and self.rung.label}) reads beta's "
                                  "term from C alone")
            fn = self._bind(key)
        fn()
        return fn

    def _bind(self, key: tuple) -> Callable[[], None]:
        """The launch for these pointers, stream, alpha and beta. Where a launch of the same
        stream, alpha and beta exists as one launch for the whole batch (a Packed or a
        WorkspaceLaunch), it is repointed: three pointers written, nothing checked or
        packed again (the rung's checks depend on the shape, which the plan fixes, and on
        the pointers' alignment, which is part of the plan's key). In a model the
        operands' pointers change from call to call: activations come and go through the
        allocator."""
        pa, pb, pc, handle, alpha, beta, source = key
        g = self.gemm
        if g.swap:
            pa, pb = pb, pa
        pointers = (pa, pb, pc) if source is None else (pa, pb, pc, source[0])
        tkey = (handle, alpha, beta, source_key(source))
        template = self.templates.get(tkey)
        if template is not None:
            fn = template.repointed(*pointers)
            self._keep(key, fn)
            return fn
        stream = stream_for(handle, self.device_id)
        bind = self.launcher.bind
        kw = {"trans_a": True} if g.trans_a else {}
        if g.trans_b:
            kw["trans_b"] = True
        if self.per_item:
            fns = [bind(g.M, g.N, g.K, alpha, pa + 4 * i * g.stride_a, g.lda,
                        pb + 4 * i * g.stride_b, g.ldb, beta, pc + 4 * i * g.stride_c, g.ldc,
                        stream, **kw) for i in range(g.batch)]

            def fn():
                for f in fns:
                    f()
        else:
            if g.batch > 1:
                kw.update(batch=g.batch, stride_a=g.stride_a, stride_b=g.stride_b,
                          stride_c=g.stride_c)
            if source is not None:
                kw["source"] = source
            if self.staging is not None:
                kw.update(padded=True, store4=self.staging.store4)
            fn = bind(g.M, g.N, g.K, alpha, pa, g.lda, pb, g.ldb, beta, pc, g.ldc, stream,
                      **kw)
            if self.staging is not None and self.staging.copies:  # copies first, then the
                fn = PackFirst(fn, self.device_id, stream, self.staging.copies)  # product
            slots = POINTERS if source is None else SOURCE_POINTERS
            if getattr(fn, "pointer_slots", None) == slots:  # Packed, WorkspaceLaunch
                # every call goes through a repointed one, which writes its own pointers:
                # the template's are overwritten by the next
                with self.lock:
                    if len(self.templates) >= BOUND_LIMIT:
                        self.templates.clear()
                    self.templates[tkey] = fn
                fn = fn.repointed(*pointers)
        self._keep(key, fn)
        return fn

    def _keep(self, key: tuple, fn: Callable[[], None]) -> None:
        if self.reuse:
            with self.lock:
                if len(self.bound) >= BOUND_LIMIT:
                    self.bound.clear()
                self.bound[key] = fn


def aligned(g: Gemm, pointers_aligned: bool) -> bool:
    """float4 paths possible: the pointers (checked by the caller), every stride, and
    whole chunks of 4 along A's and B's rows (runtime/limits.whole_chunks)."""
    return pointers_aligned and limits.whole_chunks(
        g.M, g.N, g.K, g.trans_a, g.trans_b) and limits.strides_vec4_ok(
        (g.lda, g.ldb, g.ldc, g.stride_a, g.stride_b, g.stride_c))


def packs_b(M: int, N: int, K: int, trans_a: bool, trans_b: bool, batch: int,
            precision: str) -> bool:
    """Whether a product of this shape and layout (the kernels' terms) reads a row-major copy
    of its column-major B (PACK_B): exact FP32, one product, A row-major, at PACK_MIN_M rows,
    PACK_MIN_OUTPUTS outputs and PACK_MIN_K or more (and, `packed_b`, the float4 paths
    open)."""
    return PACK_B and precision == "ieee" and trans_b and not trans_a and batch == 1 and \
        M >= PACK_MIN_M and M * N >= PACK_MIN_OUTPUTS and K >= PACK_MIN_K


def packed_b(g: Gemm, pointers_aligned: bool, precision: str) -> Gemm | None:
    """The product a plan launches on a row-major copy of g's B (`packs_b`), or None where
    B is read where it is."""
    if not (packs_b(g.M, g.N, g.K, g.trans_a, g.trans_b, g.batch, precision)
            and aligned(g, pointers_aligned)):
        return None
    return dataclasses.replace(g, trans_b=False, ldb=_round4(g.N))


def _round4(n: int) -> int:
    return -(-n // 4) * 4


@dataclasses.dataclass(frozen=True)
class Staging:
    """A packed plan: the product it launches (on the copies), the operands copied first,
    and whether C is written by float4 (else element by element: the "store4" feature)."""

    gemm: Gemm
    copies: tuple[Copy, ...]
    store4: bool

    def notes(self) -> list[str]:
        """What the plan does before its product, in words (explain)."""
        out = []
        for cp in self.copies:
            name = "AB"[cp.slot]
            if cp.column_major:
                out.append(f"{name} ({cp.cols}x{cp.rows}) copied into a column-major copy, "
                           f"columns {cp.ld} floats apart")
                continue
            how = "transposed" if cp.transposes else "copied"
            out.append(f"{name} ({cp.rows}x{cp.cols}) {how} into a row-major copy, rows "
                       f"{cp.ld} floats apart")
        if not self.store4:
            out.append("C written element by element (its rows are not 16-byte aligned)")
        return out


def stages(M: int, N: int, K: int, batch: int, precision: str, copies) -> bool:
    """Whether a misaligned product packs (STAGE): exact FP32, one product, K at least
    STAGE_MIN_K, and `copies` predicted to cost at most STAGE_SHARE of the product (the
    comment above STAGE)."""
    if not (STAGE and precision == "ieee" and batch == 1 and K >= STAGE_MIN_K):
        return False
    copy_us = sum(STAGE_COPY_US + STAGE_COPY_US_PER_MB * cp.bytes / 1e6 for cp in copies)
    return copy_us <= STAGE_SHARE * 2.0 * M * N * K / STAGE_RATE


def _operand_copy(slot: int, rows: int, cols: int, ld: int, trans: bool, keep: bool):
    """How a packed plan copies operand `slot` (rows x cols in the kernels' terms, leading
    dimension ld, column-major where `trans`): (the Copy, the Gemm fields that change). A
    column-major operand it `keep`s has its columns padded (STAGE_KEEP_A, _B); any other
    becomes row-major, its rows padded."""
    lead, layout = ("lda", "trans_a") if slot == 0 else ("ldb", "trans_b")
    if trans and keep:
        return Copy(slot, cols, rows, ld, 1, _round4(rows), True), {lead: _round4(rows)}
    steps = (1, ld) if trans else (ld, 1)
    return Copy(slot, rows, cols, *steps, _round4(cols)), {layout: False, lead: _round4(cols)}


def staging(g: Gemm, pointers_aligned: bool, precision: str) -> Staging | None:
    """How a plan packs g's operands before its product, or None where it reads them where
    they are: B of x @ W^T at many rows (`packed_b`), or every operand that closes the
    float4 paths of an FFMA-bound product (`stages`; with misaligned pointers, A and B)."""
    if aligned(g, pointers_aligned):
        gp = packed_b(g, pointers_aligned, precision)
        return None if gp is None else Staging(gp, (Copy(1, g.K, g.N, 1, g.ldb, gp.ldb),),
                                               True)
    copies, changes = [], {}
    for slot, rows, cols, ld, trans, keep in ((0, g.M, g.K, g.lda, g.trans_a, STAGE_KEEP_A),
                                              (1, g.K, g.N, g.ldb, g.trans_b, STAGE_KEEP_B)):
        if not (pointers_aligned and ld % 4 == 0 and (rows if trans else cols) % 4 == 0):
            cp, changed = _operand_copy(slot, rows, cols, ld, trans, keep)
            copies.append(cp)
            changes.update(changed)
    if not stages(g.M, g.N, g.K, g.batch, precision, copies):
        return None
    store4 = pointers_aligned and g.ldc % 4 == 0
    return Staging(dataclasses.replace(g, **changes), tuple(copies), store4)


def staged_choice(g: Gemm, pointers_aligned: bool, precision: str, choose, rung_of):
    """(packed plan or None, dispatch's choice): `choose(gemm, aligned)` for the packed
    plan's product where `staging` makes one, chosen from the entries measured aligned, as
    the copies are read (the choice for misaligned operands, made for scalar loads, ran
    2470x6014x1534 at 0.79 of cuBLAS where this one ran it at 0.92; it did better at 4097^3,
    0.97 against 0.86: pairs/stage-20261203T113353Z and ...112737Z); else for g as it is. A
    plan whose C is written element by element needs a rung with the "store4" feature
    (`rung_of(choice)`); without one it reads in place. make_plan and `explain` decide so."""
    st = staging(g, pointers_aligned, precision)
    if st is not None:
        choice = choose(st.gemm, True)
        if st.store4 or rung_of(choice).supports("store4"):
            return st, choice
    return None, choose(g, aligned(g, pointers_aligned))


def make_plan(g: Gemm, device_id: int, kernel, config, deterministic: bool,
              pointers_aligned: bool, precision: str = "ieee") -> Plan:
    """The plan of one call shape: no rung for empty products and K == 0 (beta C)."""
    if g.empty or g.K == 0:
        return Plan(g, device_id)
    if kernel is not None or config is not None:
        rung, cfg = named_rung(g, device_id, kernel, config, deterministic, precision)
        return Plan(g, device_id, rung, cfg)
    st, (rung, cfg) = staged_choice(
        g, pointers_aligned, precision,
        lambda gm, al: choose_rung(gm, device_id, deterministic, al, precision),
        lambda choice: choice[0])
    if st is None:
        return Plan(g, device_id, rung, cfg)
    if not st.store4 and STAGE_REG_TRANSPOSE is not None and "REG_TRANSPOSE" in cfg and \
            rung.is_legal(alt := {**cfg, "REG_TRANSPOSE": STAGE_REG_TRANSPOSE}):
        cfg = alt
    return Plan(st.gemm, device_id, rung, cfg, staging=st)


class PlanCache:
    """Every plan the API has made: the general path's, keyed by the full call shape, and
    the torch hot path's (two plain tensors, keyed by what `Tensor` says of them: `fast`,
    plans for a new output; `hot`, the bound launch itself for an `out` and these very
    pointers, so that such a call is one dict lookup and the launch). Bounded (cleared when
    full), thread-safe, and forgotten whenever dispatch's choices are."""

    def __init__(self, limit: int = PLAN_LIMIT):
        self.limit = limit
        self.general: dict[tuple, Plan] = {}
        self.fast: dict[tuple, Plan] = {}
        self.hot: dict[tuple, Callable[[], None]] = {}
        self._lock = threading.Lock()
        self._making: dict[tuple, threading.Lock] = {}  # a lock per key being planned
        self._followers: list = []  # caches built on these plans, cleared with them

    def get(self, key: tuple, make: Callable[[], Plan]) -> Plan:
        """The general path's plan for `key`, made by `make()` on first use (a `make` that
        raises caches nothing: what cannot run is refused every time). A plan is made under
        a lock of its own key, so two threads asking for one shape make it once, and a
        thread whose new shape compiles a kernel holds up no other shape."""
        plan = self.general.get(key)
        if plan is not None:
            return plan
        with self._lock:
            lock = self._making.setdefault(key, threading.Lock())
        try:
            with lock:
                plan = self.general.get(key)
                if plan is None:
                    plan = make()
                    with self._lock:
                        if len(self.general) >= self.limit:
                            self.general.clear()
                        self.general[key] = plan
        finally:
            with self._lock:
                if self._making.get(key) is lock:
                    del self._making[key]
        return plan

    def remember_fast(self, key: tuple, plan: Plan) -> None:
        if key not in self.fast:
            with self._lock:
                if len(self.fast) >= self.limit:
                    self.fast.clear()
                self.fast[key] = plan

    def remember_hot(self, key: tuple, launch: Callable[[], None]) -> None:
        if key not in self.hot:
            with self._lock:
                if len(self.hot) >= self.limit:
                    self.hot.clear()
                self.hot[key] = launch

    def follow(self, cache) -> None:
        """Clear `cache` (a dict or set whose entries hold or stand for plans: the drop-in
        switch's) whenever these plans are cleared."""
        self._followers.append(cache)

    def clear(self) -> None:
        with self._lock:
            self.general.clear()
            self.fast.clear()
            self.hot.clear()
            for cache in self._followers:
                cache.clear()


PLANS = PlanCache()
dispatch.on_clear(PLANS.clear)  # a new table: choices, and so plans, are stale
