"""What every Python rung shares: edge-guarded loads and stores, and the host-side launch.

The device helpers mirror kernels/common.cuh: `load_or_zero` reads one element or 0.0 past
an edge, `copy_tile` fills a shared tile with them (rungs 4 and 5), `store_c` writes
alpha * acc + beta * C for an element inside C and never reads C when beta == 0 (C may hold
NaN). Indices here are global (row, col) of the matrix, where the CUDA helpers take a row
pointer: Numba arrays carry their shape, not a leading dimension.
"""

from __future__ import annotations

from functools import cache
from typing import Callable

import numpy as np
from numba import cuda, float32

from sgemmlab.registry import Config, Rung


@cuda.jit(device=True)
def load_or_zero(X, r, c, rows, cols):
    """X[r, c], or 0.0 when (r, c) lies outside the rows x cols matrix."""
    if r < rows and c < cols:
        return X[r, c]
    return float32(0.0)


@cuda.jit(device=True)
def copy_tile(S, X, row0, col0, rows, cols, tid, threads):
    """S (a shared h x w tile) = X[row0:row0+h, col0:col0+w], zero past the rows x cols
    matrix's edges; the block's `threads` threads share the h*w elements, thread `tid`
    taking every threads-th one (consecutive threads: consecutive columns, coalesced)."""
    h, w = S.shape
    for i in range(tid, h * w, threads):
        r, c = i // w, i % w
        S[r, c] = load_or_zero(X, row0 + r, col0 + c, rows, cols)


@cuda.jit(device=True)
def store_c(C, r, c, M, N, acc, alpha, beta):
    """C[r, c] = alpha * acc + beta * C[r, c] inside C; beta == 0 leaves C unread."""
    if r < M and c < N:
        if beta == 0:
            C[r, c] = alpha * acc
        else:
            C[r, c] = alpha * acc + beta * C[r, c]


def per_config(build: Callable[[dict[str, int]], Callable]) -> Callable[[Config], Callable]:
    """`build(cfg)` compiled once per configuration: a dict is not hashable, its items are."""
    cached = cache(lambda items: build(dict(items)))

    def kernel(cfg: Config):
        return cached(tuple(sorted(cfg.items())))

    kernel.__doc__ = build.__doc__
    return kernel


def checked(rung: Rung, cfg: Config | None) -> dict[str, int]:
    """The configuration to run: the twin's seed when None; an illegal one is refused with
    the registry's rules in words."""
    cfg = dict(rung.seed if cfg is None else cfg)
    if bad := rung.violations(cfg):
        raise ValueError(f"illegal configuration for rung {rung.number}: {'; '.join(bad)}")
    return cfg


def launch(kern, grid, block, A, B, C, alpha: float, beta: float) -> None:
    """Run `kern` on row-major float32 A (M x K), B (K x N), C (M x N). Device arrays are
    used in place; numpy arrays are copied to the device and C is copied back."""
    (M, K), (K2, N) = A.shape, B.shape
    if K2 != K or tuple(C.shape) != (M, N):
        raise ValueError(f"shapes do not multiply: A {A.shape}, B {B.shape}, C {C.shape}")
    if min(M, N, K) < 1:
        raise ValueError(f"M, N and K must be >= 1, got {M}, {N}, {K}")
    for name, x in (("A", A), ("B", B), ("C", C)):
        if x.dtype != np.float32:
            raise TypeError(f"{name} must be float32, got {x.dtype}")
    host = isinstance(C, np.ndarray)  # else a device array
    dA, dB, dC = (cuda.to_device(np.ascontiguousarray(x)) if host else x for x in (A, B, C))
    kern[grid, block](M, N, K, np.float32(alpha), dA, dB, np.float32(beta), dC)
    if host:
        C[...] = dC.copy_to_host()


def entry_points(rung: Rung, kernel: Callable[[Config], Callable]):
    """(grid, block, launch) of a Python rung whose compiled kernel for a configuration is
    `kernel(cfg)`: the launch geometry is the CUDA twin's (`rung`, its registry entry), and
    launch(A, B, C, alpha=1.0, beta=0.0, cfg=None) runs it at `cfg` (None: the twin's seed)
    after the twin's legality rules."""
    def grid(cfg, M, N):
        return rung.grid(cfg, M, N)

    def block(cfg):
        return rung.block(cfg)

    def run(A, B, C, alpha=1.0, beta=0.0, cfg=None):
        cfg = checked(rung, cfg)
        M, N = C.shape
        launch(kernel(cfg), grid(cfg, M, N), block(cfg), A, B, C, alpha, beta)

    return grid, block, run
