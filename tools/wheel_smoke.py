"""Smoke test of an installed wheel, run from outside the source tree (CI, after building
it): the package that imports is the wheel's, not the checkout's, and it carries what it
needs — kernels, tables, the visualizer, the bundle of prebuilt cubins — and works.

    python tools/wheel_smoke.py WHEEL_ROOT

WHEEL_ROOT is where the wheel was installed (pip install --target); the script puts it
first on sys.path. Exits non-zero with a sentence on the first thing that is wrong.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def fail(msg: str) -> None:
    print(f"wheel smoke test FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def main() -> None:
    root = Path(sys.argv[1]).resolve()
    sys.path.insert(0, str(root))
    import importlib.metadata as md

    import sgemmlab
    from sgemmlab import registry
    from sgemmlab.runtime import compiler

    pkg = Path(sgemmlab.__file__).resolve().parent
    if root not in pkg.parents:
        fail(f"sgemmlab imported from {pkg}, not from the wheel at {root}")
    if md.version("sgemmlab") != sgemmlab.__version__:
        fail(f"metadata says {md.version('sgemmlab')}, sgemmlab.__version__ "
             f"{sgemmlab.__version__}")
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "SGEMMLAB_CACHE_DIR":
           str(root / ".smoke-cache")}
    out = subprocess.run([sys.executable, "-m", "sgemmlab", "--version"], capture_output=True,
                         text=True, env=env, cwd=root.parent)
    if out.stdout.strip() != f"sgemmlab {sgemmlab.__version__}":
        fail(f"`sgemmlab --version` printed {out.stdout!r} {out.stderr[-300:]!r}")
    for r in registry.ALL + registry.TENSOR + registry.HISTORY + registry.ORDERED:
        for rel in {r.source, r.page}:  # what it compiles, and where its header is
            if not (compiler.KERNEL_DIR / rel).is_file():
                fail(f"{r.label}: {rel} is not in the wheel")
    for rel in ("data/defaults.json", "data/tables/nvidia-h200.json.gz",
                "data/visualizer/index.html", "data/visualizer/app.js"):
        if not (pkg / rel).is_file():
            fail(f"{rel} is not in the wheel")
    bundle = sorted(compiler.BUNDLE_DIR.glob("*.bin"))
    if not bundle:
        fail("the wheel carries no prebuilt cubins (data/cubins)")
    # a default configuration loads from the bundle: no compile on the first call
    r = registry.rung(13)
    from sgemmlab.runtime.launch import variant_macros

    got = compiler.compile_kernel(r.source, r.macros(r.default("NVIDIA H200"))
                                  | variant_macros(r, True), "sm_90")
    if not got.bundled:
        fail("rung 13's H200 default was compiled, not read from the bundle")
    out = subprocess.run([sys.executable, "-m", "sgemmlab", "explain", "4096", "4096", "4096",
                          "--gpu", "h200"], capture_output=True, text=True, env=env,
                         cwd=root.parent)
    if out.returncode != 0 or "runs:" not in out.stdout:
        fail(f"`sgemmlab explain` failed: {out.stdout[-300:]} {out.stderr[-300:]}")
    print(f"wheel smoke test passed: sgemmlab {sgemmlab.__version__} from {pkg}, "
          f"{len(bundle)} prebuilt cubins, rung 13's default read from the bundle")


if __name__ == "__main__":
    main()
