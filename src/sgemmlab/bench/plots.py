"""Charts from results files (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path


def ladder_chart(run: dict, path: Path) -> Path:
    """Horizontal bars: GFLOP/s of every rung and cuBLAS, one panel per shape."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = sorted({(r["M"], r["N"], r["K"]) for r in run["records"]})
    fig, axes = plt.subplots(len(shapes), 1, figsize=(9, 0.45 * 12 * len(shapes) + 1),
                             squeeze=False)
    for ax, shape in zip(axes[:, 0], shapes):
        recs = [r for r in run["records"] if (r["M"], r["N"], r["K"]) == shape]
        names = [r["kernel"] for r in recs]
        vals = [r.get("tflops", 0.0) * 1e3 if r.get("status") == "ok" else 0.0 for r in recs]
        colors = ["#444444" if n == "cublas" else "#2a7ab0" for n in names]
        ax.barh(names, vals, color=colors)
        for y, r in enumerate(recs):
            label = (f"{100 * r['vs_cublas']:.0f}% of cuBLAS" if r.get("status") == "ok"
                     else "failed check")
            ax.text(max(vals) * 0.01 + (vals[y] if vals[y] else 0), y, label,
                    va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("GFLOP/s (FP32)")
        ax.set_title(f"{run['environment']['gpu']}  {shape[0]}×{shape[1]}×{shape[2]}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
