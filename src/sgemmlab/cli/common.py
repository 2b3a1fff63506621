"""What every command shares: the app, the one error style, option parsing.

One error style everywhere: a plain sentence on stderr, no traceback, and a non-zero exit
(2 for a usage mistake, as typer's own parser uses; other codes say what failed).
"""

from __future__ import annotations

import re
from typing import Annotated, Optional

import typer

#: The terminal width every command's output is made to fit.
WIDTH = 100

# Plain help (click's formatter, not typer's rich panels): it rewraps each docstring paragraph
# to the terminal, at most WIDTH columns, where the panels kept the docstring's own line breaks
# inside narrower boxes and broke sentences in two.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"max_content_width": WIDTH},
                  help="sgemmlab: FP32 GEMM on NVIDIA GPUs, and the ladder that explains it.")


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"sgemmlab {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="print the version and exit")] = False) -> None:
    """sgemmlab: FP32 GEMM on NVIDIA GPUs, and the ladder that explains it."""

SizeOpt = Annotated[Optional[list[int]], typer.Option(
    "--size", help="square size N (N×N×N); repeatable")]
ShapeOpt = Annotated[Optional[list[str]], typer.Option("--shape", help="M,N,K; repeatable")]
KernelOpt = Annotated[Optional[list[str]], typer.Option(
    "--kernel", "-k", help="rung number or name; repeatable (default: all)")]


def fold(text: str) -> str:
    """Prose folded to WIDTH columns: a longer line breaks at spaces, continued under its own
    indent plus two (a configuration key, which has none, stays whole)."""
    import textwrap

    out = []
    for line in str(text).split("\n"):
        if len(line) <= WIDTH:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()))
        out.append(textwrap.fill(line.strip(), WIDTH, initial_indent=indent,
                                 subsequent_indent=indent + "  ", break_on_hyphens=False,
                                 break_long_words=False))
    return "\n".join(out)


def echo(text: str = "") -> None:
    """typer.echo for prose lines, folded to WIDTH columns. Tables are laid out to fit by
    their own code, not here."""
    typer.echo(fold(text))


def fail(message: str, code: int = 1) -> None:
    """One plain sentence on stderr (folded to WIDTH columns) and a non-zero exit: no
    traceback."""
    typer.secho(fold(message), err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = [p for p in re.split(r"[,x×\s]+", text.strip()) if p]
    if len(parts) != 3 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise typer.BadParameter(f"{text!r} is not a shape: expected M,N,K with each >= 1")
    return tuple(int(p) for p in parts)  # type: ignore[return-value]


def shapes_from(sizes: list[int] | None, shapes: list[str] | None,
                default: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    for s in sizes or []:
        if s < 1:
            raise typer.BadParameter(f"--size {s}: sizes must be >= 1")
    out = [(s, s, s) for s in sizes or []] + [parse_shape(s) for s in shapes or []]
    return out or default


def split(values: list[str] | None) -> list[str]:
    """Repeated options and comma-separated lists alike: ['10,13', '14'] -> ['10', '13', '14']."""
    return [v.strip() for text in values or [] for v in text.split(",") if v.strip()]


def rungs_from(kernels: list[str] | None):
    """Rungs named on the command line (numbers, names, 'all', 'best'); all by default."""
    from ..bench.suites import rungs_for

    try:
        return rungs_for(kernels or ["all"])
    except KeyError as exc:
        raise typer.BadParameter(exc.args[0]) from None


def extra_configs(texts: list[str]):
    """--config RUNG:NAME=V,... -> [(rung, config)] (typer.BadParameter when malformed)."""
    from .. import registry

    out = []
    for text in texts:
        key, sep, body = text.partition(":")
        if not sep:
            raise typer.BadParameter(f"--config {text!r}: expected RUNG:NAME=VALUE,...")
        try:
            out.append((registry.rung(key.strip()), registry.parse_config(body)))
        except (KeyError, ValueError) as exc:
            raise typer.BadParameter(f"--config {text!r}: {exc.args[0]}") from None
    return out


def python_rungs_from(kernels: list[str] | None):
    """Python rungs named on the command line (1-7, py3, py03_smem, 'all'); all by default."""
    from .. import registry

    names = split(kernels) or ["all"]
    try:
        out = [p for k in names for p in (registry.PYTHON if k == "all"
                                           else [registry.python_rung(k)])]
    except KeyError as exc:
        raise typer.BadParameter(exc.args[0]) from None
    return list({p.number: p for p in out}.values())


def gpu_and_arch(gpu: str | None, arch: str | None) -> tuple[str, str, str]:
    """(GPU name, NVRTC architecture, a note) for commands that build for a GPU with no
    GPU needed (`build`, `warmup`): the GPU named, else the one here, else the shipped
    table's; its architecture unless --arch names one. Usage errors in one sentence."""
    from ..dispatch import target_gpu
    from ..runtime import occupancy

    try:
        name, _, note = target_gpu(gpu, None)
    except ValueError as exc:
        fail(str(exc), 2)
    if arch is None:
        try:
            arch = occupancy.gpu(name).arch
        except KeyError:
            fail(f"no architecture known for {name!r}: give --arch (e.g. sm_90)", 2)
    return name, arch, note


def require_numba() -> None:
    """The Python track needs numba-cuda: say so in one sentence."""
    try:
        from .. import pytrack  # noqa: F401  (imports numba.cuda, after its numpy shim)
    except ImportError:
        fail('the Python track needs numba-cuda: pip install -e ".[numba]"')
    except Exception as exc:  # installed, but broken against this numpy (seen: row_stack)
        fail(f"numba-cuda is installed but does not import here ({type(exc).__name__}: "
             f"{exc}): pip install -U numba-cuda")


def require_torch() -> None:
    """Measuring needs torch (cuBLAS, CUDA events, the L2 flush): say so in one sentence."""
    try:
        import torch  # noqa: F401
    except ImportError:
        fail("this command needs torch (cuBLAS, CUDA events and the L2 flush go through "
             "it): pip install 'sgemmlab[torch]'")


def require_gpu():
    from ..errors import NoGPUError
    from ..runtime.device import gpu_info

    try:
        return gpu_info()
    except NoGPUError as exc:
        fail(str(exc))
