"""The sgemmlab command line with module settings changed for this one process: each
"module.NAME=value" before "--" is one of the settings every results file records
(sgemmlab.bench.results.SETTINGS), so the file says what it was made with.

    PYTHONPATH=src python3 tools/with_settings.py runtime.ozaki.MERGED=1 \\
        runtime.ozaki.SCALE_BLOCKS=3 -- bench --shape 2048x2048x2048 --precision fp32_emulated

tools/h200.sh's SET does this for the stages that run `sgemmlab bench`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main(argv: list[str]) -> None:
    if "--" not in argv:
        sys.exit("usage: with_settings.py module.NAME=value ... -- <sgemmlab arguments>")
    at = argv.index("--")
    from sgemmlab.bench.results import apply_settings

    try:
        done = apply_settings(argv[:at])
    except ValueError as exc:
        sys.exit(f"with_settings.py: {exc}")
    if done:
        print("settings: " + ", ".join(f"{k}={v}" for k, v in done.items()), file=sys.stderr)
    sys.argv = ["sgemmlab", *argv[at + 1:]]
    from sgemmlab.cli import main as cli

    cli()


if __name__ == "__main__":
    main(sys.argv[1:])
