"""Run-time compilation: kernel source + compile-time constants -> cubin, through NVRTC.

Compiling needs no GPU (only NVRTC), so every machine can build every rung and read its
resource report. Cubins are cached on disk under a key made of everything that decides the
machine code: the source text with its includes, the constants, the options, the NVRTC
version and the architecture.

Two places hold compiled entries, tried in this order: the bundle shipped in the package
(sgemmlab/data/cubins/, written at packaging time by tools/prebuild.py --bundle: the
configurations the shipped tables and defaults choose on an H100/H200) and the user's cache.
A bundled entry is the same format under the same key, so it serves only a compile whose
source, includes, constants, options, NVRTC version and architecture are exactly those it was
built from; its own digest and the record inside it (source, constants, architecture) are
checked again when it is read, so a stale, foreign or damaged entry is compiled afresh,
never trusted.

Cache safety: an entry is written to a temporary file and renamed into place
(runtime/files.py), so a reader sees a whole entry or none, and two processes compiling the
same key at once each write a complete file (the last rename wins; both are identical).
Every entry carries a SHA-256 of its contents and the full record of the compile it holds
(key, source, constants, architecture, NVRTC version, resources); an entry that fails the
check, lacks a field of the record, or records another compile, is rebuilt, never trusted.
A cache that cannot be written (read-only, full, not a directory) costs the compiles, not
their results: each returns its cubin, and the first failure per directory and process
says so in one warning.

Trust (runtime/trust.py): the digest catches damage, not a forger, so the cache is used only
when nobody else can write it. The cache directory and its cubins/ are made 0o700; when
either is not owned by you (or root) or is writable by group or others, it is neither read
nor written: kernels are compiled in memory, with one warning per directory and process. An
entry is read with O_NOFOLLOW and checked on its descriptor; a symlink, another owner's file
or a group- or world-writable one is compiled afresh and replaced. The package's own bundle
is trusted as installed, like its Python code; a bundle named by $SGEMMLAB_BUNDLE_DIR gets
the cache's checks.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import struct
from dataclasses import asdict, dataclass, replace
from functools import cache
from pathlib import Path
from typing import Mapping

from ..registry import POST_MACROS
from . import trust
from .elf import sections as _sections
from .files import write_atomic

KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernels"
#: The prebuilt entries shipped in the package (absent in a source checkout until
#: `python tools/prebuild.py --bundle` writes them; a wheel carries them).
BUNDLE_DIR = Path(__file__).resolve().parent.parent / "data" / "cubins"
ENTRY = "sgemm"  # every rung's kernel is extern "C" sgemm
POST_ORDER = POST_MACROS["operand-order"]  # the macro that asks for rungs 22-23's pass
_MAGIC = b"SGLCUBIN1"
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
# The <measured> block of a rung header is regenerated from results files; it is a comment,
# so it is left out of the cache key (rewriting it must not recompile every rung).
_MEASURED = re.compile(r"// <measured>.*?// </measured>", re.DOTALL)


class CompileError(RuntimeError):
    """NVRTC refused the source; the message carries its log."""


@dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel."""

    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int
    smem_bytes: int
    barriers: int

    @property
    def known(self) -> bool:
        """False when the compiler gave no report (registers = -1)."""
        return self.registers >= 0

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0


@dataclass(frozen=True)
class Compiled:
    key: str
    cubin: bytes
    log: str
    resources: Resources
    cached: bool  # True when read back from the disk cache or the bundle
    bundled: bool = False  # True when it came from the package's bundle (BUNDLE_DIR)


def cache_dir() -> Path:
    """$SGEMMLAB_CACHE_DIR, else $XDG_CACHE_HOME/sgemmlab, else ~/.cache/sgemmlab."""
    env = os.environ.get("SGEMMLAB_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sgemmlab"


@cache
def nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"nvrtcVersion failed: {err}")
    return f"{major}.{minor}"


def source_with_includes(name: str) -> str:
    """The text of kernels/`name` followed by every local file it includes, recursively.

    This is what the cache key hashes, so a change in common.cuh rebuilds every rung; the
    generated <measured> comment block is left out.
    """
    seen: list[str] = []

    def walk(n: str) -> None:
        if n in seen:
            return
        seen.append(n)
        for inc in _INCLUDE.findall((KERNEL_DIR / n).read_text()):
            if (KERNEL_DIR / inc).is_file():
                walk(inc)

    walk(name)
    text = "".join(f"// ==> {n}\n{(KERNEL_DIR / n).read_text()}" for n in seen)
    return _MEASURED.sub("", text)


def _options(arch: str, macros: Mapping[str, int]) -> dict:
    return {
        "arch": arch,
        "std": "c++17",
        "define_macro": tuple((k, str(v)) for k, v in sorted(macros.items())),
        "ptxas_options": ("-v",),
    }


def cache_key(source: str, macros: Mapping[str, int], arch: str,
              nvrtc: str | None = None) -> str:
    """The digest of everything that decides the machine code; `nvrtc` (a version) in
    place of the installed NVRTC's, for entries another compiler built (the bundle)."""
    blob = json.dumps(
        {"source": source_with_includes(source), "options": _options(arch, macros),
         "nvrtc": nvrtc or nvrtc_version()},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


_PTXAS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "smem_bytes": re.compile(r"(\d+) bytes smem"),
    "barriers": re.compile(r"used (\d+) barriers"),
}


def parse_ptxas(log: str) -> Resources:
    """Registers, spills, stack and shared memory from a `ptxas -v` report.

    An empty report gives registers = -1 (unknown): the cubin is still good to launch. (Seen
    once: NVRTC under compute-sanitizer returned rung 10's cubin with an empty log.)
    """
    values = {}
    for name, pattern in _PTXAS.items():
        m = pattern.search(log)
        values[name] = int(m.group(1)) if m else (-1 if name == "registers" else 0)
    return Resources(**values)


# -- resources from the cubin, when ptxas's report is missing -------------------------------
_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE = 0x2F, 0x11  # .nv.info records: (symbol, value)
_EIFMT_SVAL = 4  # a record with a 16-bit size and a payload; the others are 4 bytes long
_RESERVED_SMEM = 1024


def _nv_info(section: bytes) -> dict[int, list[bytes]]:
    """Attribute -> payloads of an .nv.info section (records of format, attribute, value)."""
    out: dict[int, list[bytes]] = {}
    i = 0
    while i + 4 <= len(section):
        fmt, attr = section[i], section[i + 1]
        if fmt == _EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", section, i + 2)
            out.setdefault(attr, []).append(section[i + 4:i + 4 + size])
            i += 4 + size
        else:  # HVAL, BVAL, NVAL: the value (if any) sits in the record's last two bytes
            out.setdefault(attr, []).append(section[i + 2:i + 4])
            i += 4
    return out


def resources_from_cubin(cubin: bytes, entry: str = ENTRY) -> Resources:
    """Registers, stack frame and static shared memory of `entry`, read from the cubin's
    .nv.info and .nv.shared sections. ptxas's spill counts are not in the cubin: a non-zero
    stack frame counts as spilled (both stores and loads = the frame's bytes), no frame as
    none. Barriers are not read (0)."""
    sections = _sections(cubin)
    info = _nv_info(sections.get(".nv.info", (b"", 0))[0])
    symbols = sections.get(".symtab", (b"", 0))[0]
    names = sections.get(".strtab", (b"", 0))[0]
    index = None
    for k in range(len(symbols) // 24):  # Elf64_Sym: name(4) info(1) other(1) shndx(2) ...
        (offset,) = struct.unpack_from("<I", symbols, 24 * k)
        if names[offset:names.index(b"\0", offset)].decode(errors="replace") == entry:
            index = k
    if index is None:
        raise ValueError(f"no symbol {entry!r} in the cubin")

    def value(attr: int) -> int:
        for payload in info.get(attr, []):
            sym, val = struct.unpack_from("<II", payload)
            if sym == index:
                return val
        raise ValueError(f"no .nv.info attribute {attr:#x} for {entry!r}")

    frame = value(_EIATTR_FRAME_SIZE)
    # the section opens with the 1 KB that sm_80 and later reserve per block (ptxas's count
    # leaves it out: rung 3 at BS = 32 has 8192 bytes of tiles in a 9216-byte section)
    shared = max(sections.get(f".nv.shared.{entry}", (b"", 0))[1] - _RESERVED_SMEM, 0)
    return Resources(registers=value(_EIATTR_REGCOUNT), spill_stores=frame, spill_loads=frame,
                     stack_bytes=frame, smem_bytes=shared, barriers=0)


# -- the disk cache ------------------------------------------------------------------------
def _pack(meta: dict, cubin: bytes) -> bytes:
    body = struct.pack("<I", len(m := json.dumps(meta).encode())) + m + cubin
    return _MAGIC + hashlib.sha256(body).digest() + body


def _unpack(blob: bytes) -> tuple[dict, bytes] | None:
    """(meta, cubin) from a cache file, or None when it is not a whole, intact entry."""
    head = len(_MAGIC) + 32
    if len(blob) < head + 4 or not blob.startswith(_MAGIC):
        return None
    digest, body = blob[len(_MAGIC):head], blob[head:]
    if hashlib.sha256(body).digest() != digest:
        return None
    (n,) = struct.unpack_from("<I", body)
    try:
        meta = json.loads(body[4:4 + n])
    except ValueError:
        return None
    return (meta, body[4 + n:]) if isinstance(meta, dict) else None


def _read_entry(path: Path, *, checked: bool = True) -> tuple[dict, bytes] | None:
    """(meta, cubin) of the entry at `path`, or None when it is missing, damaged, or (when
    `checked`: all but the package's own bundle) may not be trusted (runtime/trust.py)."""
    try:
        return _unpack(trust.read_file(path) if checked else path.read_bytes())
    except (OSError, trust.Untrusted):
        return None


def _write_entry(path: Path, meta: dict, cubin: bytes, mode: int = 0o600) -> None:
    write_atomic(path, _pack(meta, cubin), mode=mode)


def cache_advice(path: Path) -> str:
    """What a warning about a refused part of the cache tells the user to do."""
    return (f"if {path} is yours: chmod go-w {path}; else set SGEMMLAB_CACHE_DIR to a "
            "directory of your own")


def cache_refusal(sub: str = "cubins") -> tuple[Path, str] | None:
    """(directory, why) when the cache directory or its `sub` directory exists and may not
    be trusted (runtime/trust.py); None when both may, or do not exist yet."""
    root = cache_dir()
    for d in (root, root / sub):
        if os.path.lexists(d) and (why := trust.dir_problem(d)):
            return d, why
    return None


def _cannot_write(where: Path, exc: OSError) -> None:
    trust.warn_once(("unwritable", where), f"the compile cache {where} cannot be written "
                    f"({exc}); compiling without it (SGEMMLAB_CACHE_DIR can name another "
                    "directory)", stacklevel=4)


def make_cache_subdir(sub: str) -> Path:
    """cache_dir()/`sub`, made if missing: what sgemmlab makes of the cache is private to
    you (0o700), as runtime/trust.py asks; nothing is made inside a cache directory that may
    not be trusted. Raises OSError when it cannot be made."""
    root = cache_dir()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if trust.dir_problem(root) is None:
        (root / sub).mkdir(mode=0o700, exist_ok=True)
    return root / sub


def _cubins() -> Path | None:
    """The cache's cubins/ directory, made if missing; None, after one warning per directory
    and process, when it cannot be made or may not be trusted: then the compile neither
    reads nor writes the cache."""
    root = cache_dir()
    try:
        sub = make_cache_subdir("cubins")
    except OSError as exc:
        _cannot_write(root, exc)
        return None
    if refused := cache_refusal("cubins"):
        d, why = refused
        trust.warn_once(("cache", d), f"the compile cache {root} is not used: {d} {why}, so "
                        "someone else could have put kernels in it; compiling in memory "
                        f"instead ({cache_advice(d)})", stacklevel=3)
        return None
    return sub


def _store(path: Path, meta: dict, cubin: bytes) -> None:
    """Write an entry into the user's cache; a read-only or full cache costs the next
    compile, not this one (one warning per directory and process)."""
    try:
        _write_entry(path, meta, cubin)
    except OSError as exc:
        _cannot_write(path.parent.parent, exc)


def _nvrtc(source: str, macros: Mapping[str, int], arch: str) -> tuple[bytes, str]:
    from cuda.core import Program, ProgramOptions

    opts = _options(arch, macros)
    options = ProgramOptions(
        name=source, include_path=[str(KERNEL_DIR)], arch=opts["arch"], std=opts["std"],
        define_macro=list(opts["define_macro"]) or None, ptxas_options=list(opts["ptxas_options"]),
    )
    log = io.StringIO()
    try:
        code = Program((KERNEL_DIR / source).read_text(), "c++", options).compile(
            "cubin", logs=log)
    except Exception as exc:  # NVRTCError carries the compiler's log in its message
        raise CompileError(f"{source} with {dict(macros)} did not compile:\n{exc}") from None
    return bytes(code.code), log.getvalue().replace("\x00", "")


#: Compiles of one kernel before its resources are read from the cubin instead of ptxas's
#: report. On the H200 machine NVRTC returned some cubins with an empty log (under 16
#: parallel compiles, after ncu, after a killed pytest; 2026-11-29, cause unknown); once
#: three compiles in a row did, so the cubin's own sections are the last word.
REPORT_TRIES = 3


def bundle_dir() -> Path | None:
    """$SGEMMLAB_BUNDLE_DIR (empty: no bundle, as the test suite runs), else BUNDLE_DIR."""
    env = os.environ.get("SGEMMLAB_BUNDLE_DIR")
    if env is None:
        return BUNDLE_DIR
    return Path(env) if env else None


def _own_bundle(where: Path) -> bool:
    """Whether `where` is the package's own bundle: trusted as installed, like the package's
    Python code (any other bundle gets the cache's checks)."""
    return where == BUNDLE_DIR or where.resolve() == BUNDLE_DIR


def entry_meta(source: str, macros: Mapping[str, int], arch: str, log: str,
               res: Resources, key: str | None = None) -> dict:
    """What an entry records about itself beside the cubin (and what it must match to be
    used: see _recorded; an entry is written with its `key`, one without is not used)."""
    meta = {"log": log, "resources": asdict(res), "source": source,
            "macros": {k: int(v) for k, v in macros.items()}, "arch": arch,
            "nvrtc": nvrtc_version()}
    return meta if key is None else {"key": key, **meta}


def _recorded(entry: tuple[dict, bytes] | None, key: str, source: str,
              macros: Mapping[str, int], arch: str, nvrtc: str) -> Compiled | None:
    """The entry as a hit, if its full record (key, source, constants, arch, NVRTC version,
    resources) is exactly this compile's, with ptxas's report; else None: a foreign entry
    copied under this name, one another NVRTC or arch built, or one whose record lacks a
    field (as an older sgemmlab wrote them) is not used."""
    if entry is None:
        return None
    meta, cubin = entry
    want = {k: int(v) for k, v in macros.items()}
    if (meta.get("key"), meta.get("source"), meta.get("macros"), meta.get("arch"),
            meta.get("nvrtc")) != (key, source, want, arch, nvrtc):
        return None
    try:
        res = Resources(**meta["resources"])
    except (KeyError, TypeError):
        return None
    if not res.known:  # an entry without ptxas's report is compiled again
        return None
    return Compiled(key, cubin, str(meta.get("log", "")), res, cached=True)


MANIFEST = "manifest.json"  # in a bundle: the NVRTC version that built its entries


@cache
def _bundle_nvrtc(where: Path, checked: bool = True) -> str | None:
    """The NVRTC version of the bundle in `where`, None when it has no usable manifest. A
    `checked` bundle (not the package's own) that may not be trusted is not used, with one
    warning per directory and process."""
    try:
        raw = trust.read_file(where / MANIFEST) if checked else (where / MANIFEST).read_bytes()
        return json.loads(raw)["nvrtc"]
    except trust.Untrusted as exc:
        trust.warn_once(("bundle", where), f"the bundle of prebuilt cubins {where} is not "
                        f"used: {exc}, so someone else could have put kernels in it; "
                        f"compiling instead (if {where} is yours: chmod go-w {where}; else "
                        "unset SGEMMLAB_BUNDLE_DIR)", stacklevel=4)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def bundled(source: str, macros: Mapping[str, int], arch: str) -> Compiled | None:
    """The package's prebuilt entry for this compile, if there is one that is intact, has
    ptxas's report and records exactly this source, these constants and this arch. Its key
    is computed with the NVRTC version that built the bundle (its manifest), so a hit loads
    no compiler at all; the key still covers the source, its includes and the options."""
    where = bundle_dir()
    if where is None:
        return None
    checked = not _own_bundle(where)
    if (nvrtc := _bundle_nvrtc(where, checked)) is None:
        return None
    key = cache_key(source, macros, arch, nvrtc)
    hit = _recorded(_read_entry(where / f"{key}.bin", checked=checked), key, source, macros,
                    arch, nvrtc)
    return replace(hit, bundled=True) if hit else None


def write_bundle_entry(directory: Path, compiled: Compiled, source: str,
                       macros: Mapping[str, int], arch: str) -> Path:
    """Write `compiled` into a bundle directory under its key (tools/prebuild.py --bundle);
    readable by all (it ships in the wheel), writable by its owner alone."""
    path = directory / f"{compiled.key}.bin"
    _write_entry(path, entry_meta(source, macros, arch, compiled.log, compiled.resources,
                                  compiled.key), compiled.cubin, mode=0o644)
    manifest = directory / MANIFEST
    if not manifest.is_file():
        write_atomic(manifest, json.dumps({"nvrtc": nvrtc_version()}) + "\n", mode=0o644)
        _bundle_nvrtc.cache_clear()
    return path


def compile_kernel(source: str, macros: Mapping[str, int], arch: str = "sm_90",
                   *, use_cache: bool = True) -> Compiled:
    """Compile kernels/`source` with `macros` as -D constants for `arch` (e.g. 'sm_90')."""
    if use_cache and (hit := bundled(source, macros, arch)) is not None:
        return hit
    key = cache_key(source, macros, arch)
    cubins = _cubins() if use_cache else None  # None: compiled in memory
    path = cubins / f"{key}.bin" if cubins else None
    if path and (hit := _recorded(_read_entry(path), key, source, macros, arch,
                                  nvrtc_version())) is not None:
        return hit
    for _ in range(REPORT_TRIES):
        cubin, log = _nvrtc(source, macros, arch)
        res = parse_ptxas(log)
        if res.known:
            break
    else:  # still no report: what the cubin itself says (registers, frame, shared memory)
        try:
            res = resources_from_cubin(cubin, ENTRY)
        except (ValueError, IndexError, struct.error):
            pass
    if macros.get(POST_ORDER):  # rungs 22, 23: the operand-order pass over the cubin
        from .sassedit import order_cubin

        cubin = order_cubin(cubin, ENTRY)
    if path and res.registers >= 0:  # an entry without its report is not kept
        _store(path, entry_meta(source, macros, arch, log, res, key), cubin)
    return Compiled(key, cubin, log, res, cached=False)
