"""Charts from results files (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

from .problems import key


def ladder_chart(run: dict, path: Path) -> Path:
    """Horizontal bars: GFLOP/s of every rung and cuBLAS, one panel per shape."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = sorted({key(r) for r in run["records"]})
    bars = max(sum(key(r) == p for r in run["records"]) for p in shapes) if shapes else 1
    fig, axes = plt.subplots(len(shapes), 1,
                             figsize=(9, 0.45 * max(12, bars) * len(shapes) + 1),
                             squeeze=False)
    for ax, shape in zip(axes[:, 0], shapes):
        recs = [r for r in run["records"] if key(r) == shape]
        # a kernel timed at several configurations (Python rung 7's search) gets one bar
        # each, numbered; Python rungs (py..) in their own colour beside their CUDA twins
        seen: dict[str, int] = {}
        names = []
        for r in recs:
            k = r["kernel"]
            seen[k] = seen.get(k, 0) + 1
            names.append(k if seen[k] == 1 else f"{k} #{seen[k]}")
        vals = [r.get("tflops", 0.0) * 1e3 if r.get("status") == "ok" else 0.0 for r in recs]
        colors = ["#444444" if n == "cublas" else "#d55e00" if n.startswith("py") else
                  "#2a7ab0" for n in names]
        ax.barh(names, vals, color=colors)
        for y, r in enumerate(recs):
            label = (f"{100 * r['vs_cublas']:.0f}% of cuBLAS" if r.get("status") == "ok"
                     else "skipped" if r.get("status") == "skipped" else "failed check")
            ax.text(max(vals) * 0.01 + (vals[y] if vals[y] else 0), y, label,
                    va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("GFLOP/s (FP32)")
        ax.set_title(f"{run['environment']['gpu']}  {shape.label}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- the report's charts: each written as PNG (for a quick look) and SVG (for the docs) ----
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_both(fig, stem: Path) -> list[Path]:
    """Write `fig` to stem.png and stem.svg, close it, return both paths."""
    plt = _pyplot()
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.parent / f"{stem.name}.{ext}" for ext in ("png", "svg")]
    for p in paths:
        fig.savefig(p, dpi=110)
    plt.close(fig)
    return paths


#: Series with a colour of their own (every chart uses the same one for a kernel).
FIXED_COLORS = {"cublas": "#444444", "triton": "#2ca02c", "cublas_tf32": "#d62728",
                "tf32x3_torch": "#9467bd", "auto": "#1f77b4", "matmul": "#ff7f0e",
                "auto[tf32x3]": "#17becf", "matmul[tf32x3]": "#bcbd22",
                "auto[tf32]": "#8c564b", "matmul[tf32]": "#e377c2"}


def kernel_color(kernel: str) -> str:
    """The same colour for a kernel in every chart, and a different one for every series:
    the fixed series above; rung n the n-th colour of a 40-colour qualitative palette
    (matplotlib's tab20b and tab20c, so none repeats among rungs 1-40 or meets a fixed one);
    a Python rung (py03_smem) its twin's hue family in tab20's light shades."""
    from matplotlib import colormaps, colors

    if kernel in FIXED_COLORS:
        return FIXED_COLORS[kernel]
    palette = [colormaps["tab20b"](i) for i in range(20)] + \
        [colormaps["tab20c"](i) for i in range(20)]
    head = kernel.split("_", 1)[0]
    if head.startswith("py") and head[2:].isdigit():
        return colors.to_hex(colormaps["tab20"](2 * int(head[2:]) - 1))
    if head.isdigit() and 1 <= int(head) <= len(palette):
        return colors.to_hex(palette[int(head) - 1])
    return colors.to_hex(palette[sum(map(ord, kernel)) % len(palette)])


def _cublas_line(ax, vertical: bool) -> None:
    (ax.axvline if vertical else ax.axhline)(100, color="#444444", lw=1, ls="--",
                                             label="cuBLAS FP32")


def pct_of_cublas_chart(summary: list[dict], stem: Path, title: str) -> list[Path]:
    """One bar per kernel: its geometric-mean % of cuBLAS over the shapes measured."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(summary) + 1.5))
    names = [s["kernel"] for s in summary]
    pct = [100 * s["geomean"] for s in summary]
    ax.barh(names, pct, color=[kernel_color(n) for n in names])
    for y, s in enumerate(summary):
        ax.text(pct[y], y, f" {pct[y]:.0f}%  ({100 * s['lo']:.0f}–{100 * s['hi']:.0f})",
                va="center", fontsize=8)
    _cublas_line(ax, vertical=True)
    ax.invert_yaxis()
    ax.set_xlim(0, max(pct + [100]) * 1.3)
    ax.set_xlabel("% of cuBLAS FP32 (geometric mean over shapes; lowest–highest shape)")
    ax.set_title(title)
    fig.tight_layout()
    return save_both(fig, stem)


def ratio_by_shape_chart(records: list[dict], stem: Path, title: str) -> list[Path]:
    """Bars of % of cuBLAS per shape, one per kernel, whiskers from the rounds' min to max."""
    plt = _pyplot()
    shapes = list(dict.fromkeys(key(r) for r in records))
    kernels = list(dict.fromkeys(r["kernel"] for r in records))
    width = 0.8 / len(kernels)
    # capped: a random suite of hundreds of problems would pass the pixel limit of a PNG
    wide = min(150, max(7, 1.2 * len(shapes) * max(1, len(kernels) / 2)))
    fig, ax = plt.subplots(figsize=(wide, 4.5))
    for i, kernel in enumerate(kernels):
        xs, mid, lo, hi = [], [], [], []
        for x, shape in enumerate(shapes):
            for r in records:
                if r["kernel"] == kernel and key(r) == shape:
                    xs.append(x - 0.4 + width * (i + 0.5))
                    mid.append(100 * r["vs_cublas"])
                    lo.append(100 * (r["vs_cublas"] - r["vs_cublas_min"]))
                    hi.append(100 * (r["vs_cublas_max"] - r["vs_cublas"]))
        ax.bar(xs, mid, width, yerr=[lo, hi], capsize=2, label=kernel,
               color=kernel_color(kernel))
    _cublas_line(ax, vertical=False)
    ax.set_xticks(range(len(shapes)), [p.label for p in shapes], rotation=30,
                  ha="right", fontsize=8)
    ax.set_ylabel("% of cuBLAS FP32 (median round; whiskers: min–max)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return save_both(fig, stem)


def roofline_chart(points: list[tuple[str, float, float]], ffma_tflops: float,
                   copy_tbps: float, stem: Path, title: str) -> list[Path]:
    """The roofline: attainable TFLOP/s = min(FFMA peak, bandwidth x intensity), and each
    (kernel, FLOP/byte, TFLOP/s) point under it."""
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [p[1] for p in points]
    x = np.geomspace(min(xs + [0.1]) / 2, max(xs + [100]) * 2, 200)
    ax.loglog(x, np.minimum(ffma_tflops, copy_tbps * x), color="black", lw=1.5)
    ridge = ffma_tflops / copy_tbps
    ax.annotate(f"FFMA peak {ffma_tflops:.1f} TFLOP/s", (x[-1], ffma_tflops), ha="right",
                va="bottom", fontsize=8)
    ax.annotate(f"copy {copy_tbps:.2f} TB/s (ridge {ridge:.1f} FLOP/B)",
                (x[0] * 1.5, copy_tbps * x[0] * 1.5), rotation=25, fontsize=8)
    for kernel in dict.fromkeys(p[0] for p in points):
        mine = [p for p in points if p[0] == kernel]
        ax.scatter([p[1] for p in mine], [p[2] for p in mine], label=kernel, s=22,
                   color=kernel_color(kernel),
                   marker="s" if kernel in ("cublas", "triton") else "o")
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte, from the tiling bill)")
    ax.set_ylabel("TFLOP/s (FP32)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return save_both(fig, stem)
