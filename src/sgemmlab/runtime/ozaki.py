"""Launching Ozaki scheme II (rung 26, kernels/hopper/26_ozaki_int8.cu and hopper/ozaki.cu).

C = alpha A B + beta C from `count` INT8 products, as sgemmlab/ozaki/reference.py computes
it (the tests compare the two bit for bit). Ten or eleven launches on the stream, all of
their arrays in the stream's workspace:

    oz_scale             where an operand's rows fit in shared memory (use_scale), for A
                         (rows i), then for B read as B^T (rows j): each row read once, its
                         exponent (mu, nu; the rows it refuses listed) and its residue
                         planes, K-major; then oz_ksums, each k's sums of squares, where a
                         row or column was refused (else it returns at once)
    oz_norms             otherwise, for A, then B: the exponents (the norms' last block of a
                         tile of rows writes them, and lists the rows it refuses), and each
                         k's sums of squares
    oz_balance, oz_norms where the first scaling refused a row or column: d, the powers of
                         two that balance A's columns against B's rows, and the norms again
                         on A D and D^-1 B (nothing refused: all three return at once); the
                         steps after them take the scaling that refuses fewer outputs
    oz_split             for A, then B: the residue planes, K-major (after oz_scale, only
                         for the balanced scaling, when it is taken, and for B where A's
                         rows were refused: B's oz_scale then wrote nothing)
    rung 26              the count products, each reduced modulo its m_l: R_l
    oz_crt               R -> X by the Chinese remainder theorem -> C
    oz_fallback          the refused rows' and columns' outputs, summed in FP64 (nothing
                         refused: its blocks return at once)

With MERGED, a pass both operands take is one launch (oz_scale_ab, oz_norms_ab, oz_split_ab:
blockIdx picks the operand), and oz_ksums writes d at its end (no oz_balance after it):
seven launches where both operands take the same path; six with FALLBACK_EARLY, whose
fallback runs in the splits' launch (before the products, which it does not need).

The operands are read where they lie, in either layout (a row of X is a row of A, or a
column of B), so nothing is copied first. K is at most MAX_K (INT32 sums stay exact) and
count at most MAX_COUNT (the recombination's exact FP64 sums hold |S| < 2^66: M below
2^64, 8 moduli).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..registry import Config, config_key
from ..registry.tensor import ozaki_tile_rows
from . import driver
from .compiler import compile_kernel
from .device import device, gpu_info
from .hopper import Workspace, compile_only
from .ozaki_moduli import (  # noqa: F401  (EXACT_K and MAX_MODULI: read as ozaki.X too)
    EXACT_K,
    MAX_MODULI,
    crt_factors,
    crt_moduli,
    exact_division,
    gemm_moduli,
    split_moduli,
)
from .packed import POINTERS, Packed, WorkspaceLaunch
from .tma import Tiled2D, encode_tiled_2d

STEPS = "hopper/ozaki.cu"
ARCH = "sm_90a"
MAX_COUNT = 8  # M below 2^64: what the recombination's exact FP64 sums hold
MAX_K = 2**17 - 1  # a sum of K terms of at most 2^14 stays inside INT32
TILE = 64  # oz_norms' rows per block (hopper/ozaki.cu: T)
SPAN = 16  # oz_split's k per thread
QUAD = 8  # oz_crt's outputs per thread
FALLBACK_TILE = 64  # oz_fallback's tile of outputs (hopper/ozaki.cu: FT)
CHUNK = 256  # k per partial sum of oz_norms
KB = 128  # rung 26's k-tile (bytes); its rows a work item: registry.tensor.ozaki_tile_rows
ALIGN = 256
PLANE_ALIGN = 16  # a residue row's bytes: a multiple of 16 (the copy engine's stride)


def rung():
    """Rung 26 (registry.TENSOR): its source, configuration space and shared memory."""
    from .. import registry

    return registry.rung(26)


def _up(n: int, to: int) -> int:
    return -(-n // to) * to


#: hopper/ozaki.cu's kernels, as `load` loads them (with rung 26's "gemm"): bind launches no
#: other (the tests' stand-ins are made from this list, so a launch of one missing fails)
KERNELS = ("oz_norms", "oz_norms_ab", "oz_balance", "oz_ksums", "oz_split", "oz_split_ab",
           "oz_scale", "oz_scale_ab", "oz_crt", "oz_crt_int", "oz_fallback")

_loaded: dict[tuple, dict[str, driver.Function]] = {}
_lock = threading.Lock()


def load(cfg: Config, device_id: int = 0) -> dict[str, driver.Function]:
    """The GEMM (rung 26 at `cfg`, compiled as hopper.compile_only compiles it) and the
    passes' kernels (hopper/ozaki.cu: KERNELS), loaded on the device once per
    configuration."""
    r = rung()
    macros = steps_macros(SCALE_BLOCKS, 2 in (SCALE_ROWS_K, SCALE_ROWS_R))
    key = (config_key(cfg), device_id, tuple(sorted(macros.items())))
    with _lock:
        hit = _loaded.get(key)
    if hit is not None:
        return hit
    cc = tuple(gpu_info(device_id).compute_capability)
    if cc != (9, 0):
        raise ConfigError(f"Ozaki scheme II's INT8 wgmma runs on compute capability 9.0 "
                          f"(Hopper) only, and GPU {device_id} is {cc[0]}.{cc[1]}")
    if problems := r.violations(cfg):
        raise ConfigError(f"illegal configuration {config_key(cfg)} for rung {r.label}: "
                          + "; ".join(problems))
    device(device_id)
    gemm = compile_only(r, cfg)
    steps = compile_kernel(STEPS, macros, ARCH)
    out = {"gemm": driver.load(gemm.cubin, "sgemm", device_id, r.dynamic_smem(cfg))}
    for name in KERNELS:  # (oz_scale's: rows staged in dynamic shared memory)
        out[name] = driver.load(steps.cubin, name, device_id,
                                SCALE_SMEM if name.startswith("oz_scale") else 0)
    with _lock:
        _loaded.setdefault(key, out)
        return _loaded[key]


def steps_macros(scale_blocks: int = 1, rows2: bool = False) -> dict[str, int]:
    """hopper/ozaki.cu's macros: with SCALE_BLOCKS other than 1, oz_scale's launch bounds;
    with rows2, its staging of 2 rows a block (SCALE_ROWS_K or SCALE_ROWS_R 2). The default
    build has neither. (Both, at 64 registers, oz_scale_ab spills: not built.)"""
    if scale_blocks not in (1, 3, 4) or (rows2 and scale_blocks == 4):
        raise ConfigError(f"oz_scale is built for 1, 3 or 4 blocks an SM (3 at most with 2 "
                          f"rows a block), not {scale_blocks}" + (" with 2 rows" if rows2 else ""))
    out = {"OZAKI": 1}
    if scale_blocks != 1:
        out["SCALE_BLOCKS"] = scale_blocks
    if rows2:
        out["SCALE_ROWS2"] = 1
    return out


@dataclass(frozen=True)
class Layout:
    """Where everything lives in the scratch workspace (byte offsets) for one problem."""

    kpad: int  # a residue row: K rounded up to PLANE_ALIGN bytes
    ldr: int  # a row of the products' residues: N rounded up likewise
    chunks: int  # oz_norms' partial sums per row
    offsets: dict
    scratch_bytes: int


def layout(M: int, N: int, K: int, count: int) -> Layout:
    kpad, ldr, chunks = _up(K, PLANE_ALIGN), _up(N, PLANE_ALIGN), -(-K // CHUNK)
    tiles_a, tiles_b = -(-M // TILE), -(-N // TILE)
    sizes = {"part_a": 24 * chunks * M, "part_b": 24 * chunks * N,
             "exps": 4 * 2 * (M + N), "list_a": 4 * M, "list_b": 4 * N, "list2_a": 4 * M,
             "list2_b": 4 * N, "kpart_a": 8 * tiles_a * K, "kpart_b": 8 * tiles_b * K,
             "d": 4 * K, "res_a": count * M * kpad,
             "res_b": count * N * kpad, "res_c": count * M * ldr,
             "snap": 4 * 5}  # (FALLBACK_EARLY: the counts as oz_crt reads them)
    offsets, at = {}, 0
    for name, size in sizes.items():
        offsets[name] = at
        at += _up(size, ALIGN)
    return Layout(kpad, ldr, chunks, offsets, at)


def check(M: int, N: int, K: int, count: int) -> None:
    if not 1 <= count <= MAX_COUNT:
        raise ConfigError(f"Ozaki scheme II here takes 1 to {MAX_COUNT} moduli, got {count}")
    if K > MAX_K:
        raise ConfigError(f"K = {K} is above {MAX_K}: the INT8 products' INT32 sums would "
                          "overflow")
    if min(M, N, K) < 1:
        raise ConfigError(f"M, N and K must be at least 1, got {M}, {N}, {K}")


def bind(device_id: int, M: int, N: int, K: int, alpha: float, a: int, lda: int, b: int,
         ldb: int, beta: float, c: int, ldc: int, stream, *, trans_a: bool = False,
         trans_b: bool = False, count: int | None = None,
         cfg: Config | None = None) -> WorkspaceLaunch:
    """C = alpha A B + beta C (row-major C; A column-major when trans_a, B column-major when
    trans_b; pointers as ints, leading dimensions in floats) by the scheme with `count`
    moduli (reference.COUNT unless given) and rung 26 at `cfg` (its default for this GPU
    unless given): the launches of the module docstring, on the stream's workspace (in
    its zeroed region: the norms' counters, one a tile of rows of A, then of B; five
    counts, A's and B's refused rows by the first norms, oz_fallback's finished blocks, A's
    and B's by the second; and oz_fallback's counters of a tile's slices, one a block of its
    wave)."""
    from ..ozaki.reference import COUNT, FLAT, moduli, radius

    count = COUNT if count is None else count
    check(M, N, K, count)
    mods = moduli(count)
    if cfg is None:
        cfg = rung().default(gpu_info(device_id).name)
    if GEMM:
        cfg = {**cfg, **gemm_overrides(GEMM)}
    if cfg.get("EXACT_DIV") and not exact_division(mods, K):  # K past EXACT_K
        cfg = {**cfg, "EXACT_DIV": 0}
    k = load(cfg, device_id)
    lay = layout(M, N, K, count)
    sms = gpu_info(device_id).sm_count
    i32, i64, f32, f64 = np.int32, np.int64, np.float32, np.float64
    # X(r, k) = x[r sr + k sk] (elements): A's rows, and B's columns as rows of B^T
    a_sr, a_sk = (1, lda) if trans_a else (lda, 1)
    b_sr, b_sk = (ldb, 1) if trans_b else (1, ldb)
    gm, cm = gemm_moduli(mods), crt_moduli(mods)
    sm_a, sm_b = split_moduli(mods), split_moduli(mods, crt_factors(mods))
    r = f64(radius(count, K))
    bn, cl = cfg["BN"], cfg["CLUSTER"]
    tm = ozaki_tile_rows(cfg)
    work = -(-(-(-M // tm)) // cl) * -(-N // bn) * count  # (modulus, row-tile group, col)
    grid = cl * max(1, min(work, sms // cl))

    tiles_a, tiles_b = -(-M // TILE), -(-N // TILE)  # the norms' counters: one a tile
    crt = k["oz_crt_int"] if CRT_INT else k["oz_crt"]
    crt_blocks = sms * max(1, crt.max_active_blocks(256))  # oz_crt's wave
    merged = MERGED
    early = merged and FALLBACK_EARLY  # (the fallback's wave inside oz_split_ab's launch)
    fallback_blocks = sms * max(1, k["oz_split_ab" if early else "oz_fallback"]
                                .max_active_blocks(256))
    # oz_fallback's slices of K: an FP64 tile of sums a block, after the layout's scratch;
    # its tiles' counters after the norms' and the refusal counts
    partial_bytes = 8 * FALLBACK_TILE**2 * fallback_blocks

    # oz_scale for each operand whose rows fit, oz_norms (and later oz_split) for the other
    # (the module's switches are read here, once: a later rebuild of the launches on a new
    # workspace keeps them)
    fused = {"a": use_scale(K, a_sk == 1), "b": use_scale(K, b_sk == 1)}
    rows_per = {"a": scale_rows(a_sk == 1), "b": scale_rows(b_sk == 1)}
    one_wave = CRT_ONE_WAVE
    overlap = OVERLAP
    order = steps_order(fused["a"], fused["b"], merged, early)
    kst = scale_stride(K)
    # oz_ksums' groups of rows (kpart's tiles for the operands oz_scale takes)
    kgroups = min([KSUM_GROUPS] + [t for t, side in ((tiles_a, "a"), (tiles_b, "b"))
                                   if fused[side]])
    # (MERGED) oz_ksums's counters of a range of k, after oz_fallback's, where it writes d
    ksum_ranges = -(-K // 256) if merged and (fused["a"] or fused["b"]) else 0

    def steps_at(zeroed: int, scratch: int) -> tuple:
        o = {name: scratch + off for name, off in lay.offsets.items()}
        # the refusal counts: A's and B's rows by the first norms, the fallback's finished
        # blocks, A's and B's by the second; then the fallback's counters of a tile's slices
        counts = zeroed + 4 * (tiles_a + tiles_b)
        sliced = counts + 4 * 5
        ksum_done = sliced + 4 * fallback_blocks
        exps = o["exps"]  # mu (M), nu (N), then the second norms' mu and nu
        e1 = {"a": exps, "b": exps + 4 * M}
        e2 = {"a": exps + 4 * (M + N), "b": exps + 4 * (2 * M + N)}
        operand = {"a": (a, a_sr, a_sk, M, 1, zeroed, 0), "b": (b, b_sr, b_sk, N, -1,
                                                              zeroed + 4 * tiles_a, 1)}
        out = []

        def launch(*args, **kwargs) -> Packed:  # (every one but the first may overlap)
            return Packed(*args, overlap=overlap and bool(out), **kwargs)

        def norms(side: str, second: bool) -> Packed:
            x, sr, sk, rows, dsign, done, at = operand[side]
            listed = o[f"list2_{side}"] if second else o[f"list_{side}"]
            tiles, chunks = -(-rows // TILE), lay.chunks
            if second:  # (gated: a few blocks an SM, which walk the chunks)
                chunks = min(chunks, max(1, -(-GATED_BLOCKS * sms // tiles)))
            return launch(k["oz_norms"], stream, (tiles, chunks, 1), (256, 1, 1),
                          (x, i64(sr), i64(sk), i32(rows), i32(K), o[f"part_{side}"], done, r,
                           f64(FLAT), (e2 if second else e1)[side],
                           counts + 4 * (3 + at if second else at), listed,
                           0 if second else o[f"kpart_{side}"], counts if second else 0,
                           o["d"] if second else 0, i32(dsign)), pointer_slots=(0,))

        def norms_ab(second: bool) -> Packed:
            # norms() for both operands in one grid: blockIdx.z picks the operand
            tiles, chunks = max(tiles_a, tiles_b), lay.chunks
            if second:
                chunks = min(chunks, max(1, -(-GATED_BLOCKS * sms // (2 * tiles))))
            return launch(k["oz_norms_ab"], stream, (tiles, chunks, 2), (256, 1, 1),
                          (a, i64(a_sr), i64(a_sk), i32(M), b, i64(b_sr), i64(b_sk), i32(N),
                           i32(K), o["part_a"], o["part_b"], zeroed, r, f64(FLAT), exps, counts,
                           o["list2_a" if second else "list_a"],
                           o["list2_b" if second else "list_b"], o["kpart_a"], o["kpart_b"],
                           o["d"], i32(second)), pointer_slots=(0, 4))

        def split_grid(side: str) -> tuple[int, int, int]:
            """oz_split's grid for an operand, and its gate: after oz_scale 1 (only for the
            balanced scaling) or, for B, 2 (also where A's rows were refused: B's oz_scale
            then left its residues unwritten); 0, the two passes' split. Gated, it walks
            blockIdx.y: a few blocks an SM, which with nothing refused is all the launch
            costs."""
            rows = operand[side][3]
            groups = -(-K // SPAN)
            fast, slow = (groups, rows) if operand[side][2] == 1 else (rows, groups)
            across, down = -(-fast // 32), min(-(-slow // 8), 65535)
            gate = (2 if side == "b" else 1) if fused[side] else 0
            if gate:
                down = min(down, max(1, -(-GATED_BLOCKS * sms // across)))
            return across, down, gate

        def split(side: str) -> Packed:
            x, sr, sk, rows, dsign, _, _ = operand[side]
            across, down, gate = split_grid(side)
            return launch(k["oz_split"], stream, (across, down, 1), (32, 8, 1),
                          (x, i64(sr), i64(sk), i32(rows), i32(K), e1[side], i32(count),
                           sm_a if side == "a" else sm_b, o[f"res_{side}"], i64(lay.kpad),
                           i64(rows * lay.kpad), e2[side], o["d"], i32(dsign), counts,
                           i32(M), i32(N), i32(gate)), pointer_slots=(0,))

        def split_ab() -> Packed:
            # split() for both operands in one grid: blockIdx.z picks the operand; early, the
            # fallback's wave too (z = 2), which then leaves the counts to oz_crt in "snap"
            (xa, ya, gate_a), (xb, yb, gate_b) = split_grid("a"), split_grid("b")
            x, y = max(xa, xb), max(ya, yb)
            if early:
                y = min(max(y, -(-fallback_blocks // x)), 65535)
                assert x * y >= fallback_blocks  # (x <= N / 32 + 1 blocks: y is far below)
            return launch(k["oz_split_ab"], stream, (x, y, 3 if early else 2), (32, 8, 1),
                          (a, i64(a_sr), i64(a_sk), i32(M), b, i64(b_sr), i64(b_sk), i32(N),
                           i32(K), exps, i32(count), sm_a, sm_b, o["res_a"], o["res_b"],
                           i64(lay.kpad), o["d"], counts, i32(gate_a), i32(gate_b),
                           i32(fallback_blocks if early else 0), f32(alpha), f32(beta),
                           c if early else 0, i64(ldc), o["list_a"], o["list_b"],
                           o["list2_a"], o["list2_b"], scratch + lay.scratch_bytes, sliced,
                           o["snap"]),
                          pointer_slots=(0, 4, 23) if early else (0, 4))

        if order[0] == "scale_ab":  # both operands' oz_scale in one launch
            ra, rb = rows_per["a"], rows_per["b"]
            out.append(launch(k["oz_scale_ab"], stream, (-(-M // ra) + -(-N // rb), 1, 1),
                              (256, 1, 1),
                              (a, i64(a_sr), i64(a_sk), i32(M), i32(ra), b, i64(b_sr),
                               i64(b_sk), i32(N), i32(rb), i32(K), i32(kst), i32(lay.kpad), r,
                               f64(FLAT), exps, counts, o["list_a"], o["list_b"], i32(count),
                               sm_a, sm_b, o["res_a"], o["res_b"], i64(lay.kpad)),
                              pointer_slots=(0, 5), smem=4 * max(ra, rb) * kst))
        elif order[0] == "norms_ab":  # both operands' first norms in one launch
            out.append(norms_ab(False))
        else:
            for side in "ab":
                if not fused[side]:
                    out.append(norms(side, False))
                    continue
                # oz_norms and oz_split in one pass
                x, sr, sk, rows, _, _, at = operand[side]
                R = rows_per[side]
                out.append(launch(k["oz_scale"], stream, (-(-rows // R), 1, 1), (256, 1, 1),
                                  (x, i64(sr), i64(sk), i32(rows), i32(K), i32(R), i32(kst),
                                   i32(lay.kpad), r, f64(FLAT), e1[side], counts + 4 * at,
                                   o[f"list_{side}"], i32(count), sm_a if side == "a" else sm_b,
                                   o[f"res_{side}"], i64(lay.kpad), i64(rows * lay.kpad),
                                   counts if side == "b" else 0),
                                  pointer_slots=(0,), smem=4 * R * kst))
        groups_a, groups_b = (kgroups if fused["a"] else tiles_a,
                              kgroups if fused["b"] else tiles_b)
        if fused["a"] or fused["b"]:
            # what oz_balance reads of oz_scale's operands, where something was refused
            # (MERGED: and d, oz_balance's work, at its end)
            out.append(launch(k["oz_ksums"], stream,
                              (-(-K // 256), kgroups, fused["a"] + fused["b"]), (256, 1, 1),
                              (a, i64(a_sr), i64(a_sk), i32(M), b, i64(b_sr), i64(b_sk),
                               i32(N), i32(K), counts, o["kpart_a"], o["kpart_b"],
                               i32(0 if fused["a"] else 1), i32(groups_a), i32(groups_b),
                               ksum_done if ksum_ranges else 0, o["d"]),
                              pointer_slots=(0, 4)))
        if not ksum_ranges:
            # d from the first scaling's sums over k, where it refused something
            out.append(launch(k["oz_balance"], stream, (-(-K // 256), 1, 1), (256, 1, 1),
                              (o["kpart_a"], i32(groups_a), o["kpart_b"], i32(groups_b),
                               i32(K), counts, o["d"])))
        # the norms again, and the splits
        if merged:
            out.append(norms_ab(True))
            out.append(split_ab())
        else:
            out += [norms("a", True), norms("b", True)]
            out += [split(side) for side in "ab"]
        map_a = encode_tiled_2d(Tiled2D(o["res_a"], M, K, lay.kpad, tm, KB, elem_bytes=1,
                                        planes=count, plane_ld=M * lay.kpad))
        map_b = encode_tiled_2d(Tiled2D(o["res_b"], N, K, lay.kpad, bn // cl, KB,
                                        elem_bytes=1, planes=count, plane_ld=N * lay.kpad))
        out.append(launch(k["gemm"], stream, (grid, 1, 1), (384, 1, 1),
                          (map_a, map_b, i32(M), i32(N), i32(K), i32(count), gm, o["res_c"],
                           i64(lay.ldr), i64(M * lay.ldr)), smem=k["gemm"].dynamic_smem))
        across = -(-(-(-N // QUAD)) // 256)
        # one wave (each thread then walks rows, loading the next while it recombines one),
        # or (CRT_ONE_WAVE False) a row per thread where gridDim.y allows
        wave = -(-crt_blocks // across) if one_wave else M
        rows = max(1, min(M, 65535, wave))
        out.append(launch(crt, stream, (across, rows, 1), (256, 1, 1),
                          (o["res_c"], i64(lay.ldr), i64(M * lay.ldr), i32(M), i32(N),
                           i32(count), cm, exps, f32(alpha), f32(beta), c, i64(ldc),
                           o["snap"] if early else counts),
                          pointer_slots=(10,)))
        if early:
            return tuple(out)
        # one wave, walking the refused rows' and columns' tiles
        out.append(launch(k["oz_fallback"], stream, (fallback_blocks, 1, 1), (256, 1, 1),
                          (a, i64(a_sr), i64(a_sk), b, i64(b_sr), i64(b_sk), i32(M), i32(N),
                           i32(K), f32(alpha), f32(beta), c, i64(ldc), e1["a"], counts,
                           o["list_a"], o["list_b"], scratch + lay.scratch_bytes, sliced,
                           e2["a"], o["list2_a"], o["list2_b"]),
                          pointer_slots=(11, 0, 3)))
        return tuple(out)

    # which of the call's pointers (A, B, C) each launch reads: a plan repoints them all
    return WorkspaceLaunch(device_id, stream,
                           Workspace(4 * (tiles_a + tiles_b + 5 + fallback_blocks + ksum_ranges),
                                     lay.scratch_bytes + partial_bytes), steps_at,
                           pointer_slots=POINTERS, bound_pointers=(a, b, c), roles=roles(order))


def steps_order(scale_a: bool = False, scale_b: bool = False, merged: bool | None = None,
                early: bool | None = None) -> tuple[str, ...]:
    """bind's launches by name: oz_scale instead of the first oz_norms for an operand that
    use_scale takes, and then oz_ksums (empty unless something was refused); the splits of
    such an operand run only where the balanced scaling is taken. `merged` (MERGED unless
    given): a launch for both operands where they take the same pass (the _ab names), and
    oz_ksums writes d where it runs (no oz_balance then); with `early` too (FALLBACK_EARLY
    unless given), the fallback's wave in the splits' launch ("split_fallback_ab"), none
    after oz_crt."""
    merged = MERGED if merged is None else merged
    early = merged and (FALLBACK_EARLY if early is None else early)
    if not merged:
        first = ("scale_a" if scale_a else "norms_a", "scale_b" if scale_b else "norms_b")
        return first + ("ksums",) * (scale_a or scale_b) + (
            "balance", "norms2_a", "norms2_b", "split_a", "split_b", "gemm", "crt", "fallback")
    first = (("scale_ab",) if scale_a and scale_b else ("norms_ab",) if not (scale_a or scale_b)
             else ("scale_a" if scale_a else "norms_a", "scale_b" if scale_b else "norms_b"))
    last = ("split_fallback_ab", "gemm", "crt") if early else (
        "split_ab", "gemm", "crt", "fallback")
    return first + (("ksums",) if scale_a or scale_b else ("balance",)) + ("norms2_ab",) + last


#: which of the call's pointers (0 A, 1 B, 2 C) each launch's `pointer_slots` take: the
#: norms, the one-pass scale and the splits read A (the _a launches), B (_b) or both (_ab);
#: the column sums both; the balance and the products only the workspace; the
#: recombination writes C (reading it when beta is not 0); the fallback writes C for the
#: rows and columns the scaling refused, reading A and B there.
_ROLES = {"ksums": (0, 1), "balance": (), "gemm": (), "crt": (2,), "fallback": (2, 0, 1),
          "split_fallback_ab": (0, 1, 2)}


def roles(order: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    def role(name: str) -> tuple[int, ...]:
        if name in _ROLES:
            return _ROLES[name]
        return (0, 1) if name.endswith("_ab") else (0,) if name.endswith("_a") else (1,)

    return tuple(role(name) for name in order)


#: the two-pass order, and its roles (tools/ozaki_probe.py and tests name them)
STEPS_ORDER = steps_order(False, False, False)
ROLES = roles(STEPS_ORDER)
#: oz_scale (one pass an operand: norms and split) where its rows fit in shared memory
FUSED = True
#: the most dynamic shared memory oz_scale stages an operand's rows in (the H200 allows 227 KB
#: a block; 200 KB: one block an SM with room for the static arrays)
SCALE_SMEM = 200 * 1024
KSUM_GROUPS = 16  # oz_ksums' groups of rows
#: the blocks an SM of a launch that works only where something was refused (the second
#: norms; oz_split after oz_scale): their grids walk the work, so with nothing refused the
#: launch is small
GATED_BLOCKS = 4


#: oz_scale's rows a block where r is contiguous: 4 (a k is 16 bytes, half a sector; the
#: next block reads the other half), 8 (a whole sector, twice the shared memory) or 2 (a
#: quarter sector, half the shared memory: at K = 8192, three blocks an SM instead of one)
SCALE_ROWS_R = 4
#: and where k is contiguous: 4, or 2 (half the shared memory, as above). 2, either one, is
#: a build of its own (steps_macros), until the H200 has timed it (tools/ozaki_probe.py
#: --rows2).
SCALE_ROWS_K = 4


#: oz_scale's blocks an SM its registers must allow (its launch bounds: hopper/ozaki.cu's
#: SCALE_BLOCKS): 1, no limit (98 registers: two blocks an SM, whatever its shared memory
#: allows); 3 (80 registers) or 4 (64). Shared memory allows 6 blocks at K = 2048, 3 at
#: 4096, 1 at 8192: more blocks an SM overlap one block's loads with another's sums and
#: residues. 1 until the H200 has timed the others (tools/ozaki_probe.py --scale-blocks).
SCALE_BLOCKS = 1


def scale_rows(k_contiguous: bool) -> int:
    """oz_scale's rows a block: SCALE_ROWS_K where k is contiguous, SCALE_ROWS_R where r is."""
    return SCALE_ROWS_K if k_contiguous else SCALE_ROWS_R


def scale_stride(K: int) -> int:
    """oz_scale's staged row, in floats: K up to a multiple of 16, plus 4 (the r-contiguous
    stores of four rows land in different banks)."""
    return _up(K, PLANE_ALIGN) + 4


def use_scale(K: int, k_contiguous: bool) -> bool:
    """oz_scale for an operand: FUSED, and R of its rows fit SCALE_SMEM."""
    return FUSED and 4 * scale_rows(k_contiguous) * scale_stride(K) <= SCALE_SMEM


#: Fewer launches a product: a pass both operands take runs as one launch (oz_scale_ab,
#: oz_norms_ab, oz_split_ab: blockIdx picks the operand), and oz_ksums's last block of a range
#: of k writes d, oz_balance's work. With nothing refused, seven launches instead of eleven
#: (the four that go are one of the two oz_scale and three that find nothing to do). The
#: same outputs, bit for bit. False until the H200 has timed it (tools/ozaki_probe.py
#: --merged).
MERGED = False
#: With MERGED: oz_fallback's wave in oz_split_ab's launch (blockIdx.z 2), before the
#: products, which it does not need; that launch sets the counts back, and hands oz_crt a
#: copy of them. Six launches a product. False until the H200 has timed it
#: (tools/ozaki_probe.py --merged times both).
FALLBACK_EARLY = False

#: oz_crt_int instead of oz_crt: the recombination's sums in three INT32 pieces rather than
#: in FP64 (the same bits; fewer instructions a residue). False until the H200 has timed it
#: (tools/ozaki_probe.py --crt-int).
CRT_INT = False

#: oz_crt's grid: one wave of blocks that walk the rows (True), or a row per thread (False:
#: as first written; tools/ozaki_probe.py --crt-rows times both)
CRT_ONE_WAVE = True

#: Every launch of a product but its first by cuLaunchKernelEx with programmatic stream
#: serialization: a kernel may start while the one before it finishes (each of the scheme's
#: kernels and rung 26 first waits for it, griddepcontrol.wait, then lets the next one start),
#: which hides part of a launch's latency at each of the ten boundaries. Timed on the H200
#: against plain launches, paired: a few microseconds faster in single calls at 2048^3 and
#: 4096^3 (results/nvidia-h200/probe/ozaki-count8-levers-20261205T0354Z.json), but 3 %
#: slower at 4096^3 in bursts of 40 calls, and even at 8192^3
#: (ozaki-count8-burst40-20261205T0406Z.json): off.
OVERLAP = False

#: Rung 26's configuration over whatever a product is bound with, for an experiment
#: ("EXACT_DIV=1,GROUP_M=16"; bench/results records it): empty in the library.
GEMM = ""


def gemm_overrides(spec: str) -> dict[str, int]:
    """GEMM's "NAME=value,..." as rung 26's configuration keys, each one of its space."""
    space = rung().space
    out = {}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        name, _, value = item.partition("=")
        if name not in space or not value.strip().lstrip("-").isdigit():
            raise ConfigError(f"ozaki.GEMM: {item!r} is not NAME=integer for a key of rung "
                              f"26's configuration ({', '.join(space)})")
        out[name] = int(value)
    return out


#: what bench/results.apply_settings checks a setting's value by, before it is set
SETTING_CHECKS = {"GEMM": gemm_overrides}
