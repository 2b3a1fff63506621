"""The kernel tree a learner reads: folders that name the ladder's tracks, every rung's idea in
a file of its own, comments that point at files that exist, and no kernel switch that only an
experiment sets.

Pure file reading and registry arithmetic: no compiler, no GPU.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from sgemmlab import registry
from sgemmlab.runtime.compiler import KERNEL_DIR
from sgemmlab.runtime.variants import variant_macros

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src" / "sgemmlab"

#: track folder -> the rung numbers whose page lives there
TRACKS = {"ladder": range(1, 15), "membound": range(15, 18), "small": (18,),
          "hopper": (19, 20, 26), "history": (21,), "postcompile": range(22, 26)}
#: folders that are not a track of rungs: the micro-benchmarks of the lab's ceilings
OTHER_FOLDERS = {"micro"}
RUNGS = (registry.ALL + registry.TENSOR + registry.HISTORY + registry.ORDERED)
CODE = [p for p in KERNEL_DIR.rglob("*") if p.suffix in (".cu", ".cuh")]


def _code_lines(text: str) -> list[str]:
    """The lines that are neither comments, blank, nor preprocessor lines."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = []
    for line in text.splitlines():
        line = line.split("//", 1)[0].strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def test_the_folders_name_the_tracks_and_every_page_sits_in_its_own():
    folders = {p.name for p in KERNEL_DIR.iterdir() if p.is_dir()}
    assert folders == set(TRACKS) | OTHER_FOLDERS
    for r in RUNGS:
        track = next(t for t, numbers in TRACKS.items() if r.number in numbers)
        assert r.page.startswith(f"{track}/{r.number:02d}_"), (r.label, r.page)
        assert (KERNEL_DIR / r.page).is_file() and (KERNEL_DIR / r.source).is_file(), r.label


def test_a_learner_reads_the_ladder_in_order_from_its_file_names():
    pages = sorted(p.name for p in (KERNEL_DIR / "ladder").iterdir())
    numbers = [int(name[:2]) for name in pages]
    assert numbers == list(range(1, 15)), pages


@pytest.mark.parametrize("path", CODE, ids=[p.relative_to(KERNEL_DIR).as_posix() for p in CODE])
def test_no_kernel_file_is_only_includes_defines_and_comments(path):
    assert _code_lines(path.read_text()), f"{path.name} holds no code of its own"


def test_a_rung_without_code_of_its_own_says_where_its_code_is():
    """Rungs 9, 22, 23 and 25 compile another rung's file: their page is prose (.md) that
    names the file they compile and the code of their idea."""
    for r in RUNGS:
        if r.page == r.source or r.page.endswith(".cuh"):
            continue
        assert r.page.endswith(".md"), r.label
        text = (KERNEL_DIR / r.page).read_text()
        assert f"`{r.source}`" in text, f"{r.page} does not name {r.source}"
        assert r.number in (9, 22, 23, 25), r.label


_PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.(?:cu|cuh|md|py))\b")


def _exists(ref: str) -> bool:
    ref = ref.removeprefix("sgemmlab/")
    return any((base / ref).is_file() for base in (KERNEL_DIR, KERNEL_DIR.parent, SRC.parent,
                                                  REPO, REPO / "src"))


@pytest.mark.parametrize("path", sorted(KERNEL_DIR.rglob("*.*")),
                         ids=lambda p: p.relative_to(KERNEL_DIR).as_posix())
def test_no_comment_points_at_a_file_that_does_not_exist(path):
    refs = _PATH.findall(path.read_text())
    missing = sorted({r for r in refs if not _exists(r.removeprefix("kernels/"))})
    assert not missing, f"{path.name} names files that do not exist: {missing}"


def _includes(name: str, seen: set[str]) -> set[str]:
    if name in seen:
        return seen
    seen.add(name)
    for inc in re.findall(r'#include\s+"([^"]+)"', (KERNEL_DIR / name).read_text()):
        if (KERNEL_DIR / inc).is_file():
            _includes(inc, seen)
    return seen


def _set_by_host() -> set[str]:
    """Every macro the library hands NVRTC for some rung: configurations, derived values,
    the rungs' own defines and passes, the launcher's variants, the Hopper GEMM's check."""
    names = {"SMEM_EXPECT", "PREP", "__CUDA_ARCH__"}
    for r in RUNGS:
        names |= set(r.space) | set(r.macros(r.seed))
        for vec4, ta, tb, src, store4 in itertools.product((False, True), repeat=5):
            names |= set(variant_macros(r, vec4, ta, tb, int(src), store4))
    return names


def test_no_rung_kernel_reads_a_macro_that_only_an_experiment_sets():
    """A switch a kernel reads (#if, #ifdef, #ifndef, #elif) is set by the library: the
    host's macros, or a kernel file that includes another (rung 14's SGEMM_NO_ENTRY); a
    default a file gives itself (#ifndef X / #define X) does not count as a setter."""
    closures = {r.label: _includes(r.source, set()) for r in RUNGS}
    texts = {f: (KERNEL_DIR / f).read_text() for c in closures.values() for f in c}
    by_kernels = {d for text in texts.values()
                  for d in re.findall(r"#\s*define\s+(\w+)", text) if _sets(d, text)}
    # (and the CPU emulator of the scheme's passes, tests/cuda_cpu.h, which brings its own
    # versions of what it cannot build)
    by_emulator = set(re.findall(r"#\s*define\s+(SGEMM_\w+)",
                                 (Path(__file__).parent / "cuda_cpu.h").read_text()))
    allowed = _set_by_host() | by_kernels | by_emulator
    for label, files in closures.items():
        read = set()
        for f in files:
            for cond in re.findall(r"^\s*#\s*(?:if|ifdef|ifndef|elif)\b(.*)$", texts[f],
                                   flags=re.M):
                read |= set(re.findall(r"\b([A-Z_][A-Z0-9_]{2,})\b", cond.split("//")[0]))
        stray = read - allowed
        assert not stray, f"{label} reads {sorted(stray)}, which the library never sets"


def _sets(name: str, text: str) -> bool:
    """`text` sets `name` for what it includes, rather than giving it a default: its
    #define is not the body of an `#ifndef` of itself."""
    return not re.search(rf"#\s*ifndef\s+{name}\b[^\n]*\n\s*#\s*define\s+{name}\b", text)
