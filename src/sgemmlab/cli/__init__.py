"""The `sgemmlab` command line: thin — every command reads its options, calls one function
of the lab or the library, and prints what came back.

    common    the app, the one error style, option parsing
    measure   ladder, bench: rungs timed against cuBLAS   (need a GPU; ladder predicts without)
    probes    run, profile, ceilings, operands, overhead, firstcall, fuzz   (mostly a GPU)
    tune      tune (a configuration search, or this GPU's dispatch table)
    look      explain, build, inspect, report, readme, info   (no GPU needed)
    accuracy  accuracy (error against float64 over a fuzz set, beside cuBLAS; needs a GPU)
"""

from __future__ import annotations

import sys

import typer

from . import accuracy, look, measure, probes, tune  # noqa: F401  (each registers its commands on the app)
from .common import app, fail, fold, parse_shape, require_torch, rungs_from  # noqa: F401


def main() -> None:
    """The entry point. One error style: a usage mistake (an unknown option, a bad value, a
    missing argument) is one line on stderr and exit 2, like the commands' own refusals
    (common.fail), instead of click's boxed usage block."""
    if len(sys.argv) <= 1:  # no command: the help, as --help prints it (exit 0: nothing
        sys.argv.append("--help")  # went wrong)
    try:
        code = app(standalone_mode=False)
    except (KeyboardInterrupt, typer.Abort):
        sys.exit(130)
    except Exception as exc:
        # a usage error: click's UsageError or typer's copy of it (exit code 2)
        if getattr(exc, "exit_code", None) != 2 or not hasattr(exc, "format_message"):
            raise
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx else "sgemmlab"
        message = exc.format_message()
        option = getattr(exc, "option_name", None) or ""
        if option[1:].isdigit():  # a negative number, which click reads as an option
            message = f"{option} is not a size: M, N, K and counts are integers >= 1"
        typer.secho(fold(f"{where}: {message} (see {where} --help)"), err=True,
                    fg=typer.colors.RED)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
